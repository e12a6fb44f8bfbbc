// backend_registry.cpp -- the one place that knows which backends exist.
#include "backend/cpu/cpu_backend.h"
#include "core/backend.h"
#include "core/error.h"

#if defined(AMPX_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace ampx::impl {

std::unique_ptr<Backend> create_backend(const BackendOptions& options) {
  switch (options.device_type) {
    case AMPX_DEVICE_CPU:
      return make_cpu_backend(options.num_threads);
    case AMPX_DEVICE_CUDA:
#if defined(AMPX_WITH_CUDA)
      return make_cuda_backend(options.device_index, options.cuda_stream);
#else
      fail(AMPX_ERR_NO_DEVICE, "this build of ampx has no CUDA backend (rebuild with -DAMPX_CUDA=ON)");
#endif
    case AMPX_DEVICE_MIN_ENUM:
    case AMPX_DEVICE_MAX_ENUM: break;
  }
  fail(AMPX_ERR_INVALID_ARGUMENT, "unknown device type ", static_cast<int>(options.device_type));
}

int32_t cuda_device_count() {
#if defined(AMPX_WITH_CUDA)
  return cuda_device_count_impl();
#else
  return 0;
#endif
}

}  // namespace ampx::impl
