// grad_stats_ops.cuh -- host-side launchers of the precision doctor's
// passes (backend_grad_stats.h). Plain C++ declarations, so the CUDA
// backend can include them; like multi_tensor_ops.cuh they only enqueue on
// launch.stream and return the first failing status. The caller zeroes the
// flags and records first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/backend_grad_stats.h"
#include "fill_convert.cuh"

namespace ampx::impl {
namespace cuda {

cudaError_t launch_unscale_with_stats(const std::vector<TensorSpan>& ins,
                                      const std::vector<TensorSpan>& outs, const float* scale,
                                      float* found_inf, int32_t* nonfinite,
                                      math::GradStatsRecord* records, const LaunchConfig& launch);

cudaError_t launch_count_lost_updates(const std::vector<LostUpdateSpan>& spans,
                                      math::GradStatsRecord* records, const LaunchConfig& launch);

cudaError_t launch_record_sample(math::DoctorSample* entry, int64_t step, const float* scale,
                                 const float* found_inf, const int32_t* nonfinite,
                                 const math::GradStatsRecord* records, int32_t count,
                                 const LaunchConfig& launch);

}  // namespace cuda
}  // namespace ampx::impl
