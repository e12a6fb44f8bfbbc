// cpu_backend.h -- the reference backend: host memory, worker threads.
#pragma once

#include <memory>

#include "core/backend.h"

namespace ampx::impl {

std::unique_ptr<Backend> make_cpu_backend(int32_t num_threads);

}  // namespace ampx::impl
