// multi_tensor_ops.cuh -- host-side launchers of the multi-tensor primitives
// of mixed-precision training (Backend::multi_tensor_scale to adam_step).
//
// Plain C++ declarations, so the CUDA backend, which the host compiler
// builds, can include it. As in fill_convert.cuh, launchers only enqueue on
// launch.stream and return the first failing status: none waits for the
// device, copies to the host or allocates, so a whole training step can be
// captured in a CUDA graph. The backend checks the arguments first (with
// the shared checks of core/multi_tensor.h) and turns statuses into errors.
// Each computes exactly what backend.h specifies for the primitive, with the
// per-element math of kernels/math.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/backend_amp.h"
#include "fill_convert.cuh"

namespace ampx::impl {
namespace cuda {

cudaError_t launch_multi_tensor_scale(const std::vector<TensorSpan>& ins,
                                      const std::vector<TensorSpan>& outs, const float* factor,
                                      bool reciprocal, float* found_inf,
                                      const LaunchConfig& launch);

// The norm is taken in two passes: one double partial per chunk into
// `partials`, then one block combining them in chunk order, so the result
// is the same on every run. The caller provides `partials`, of
// multi_tensor_norm_partials(tensors) elements (none: may be null).
int64_t multi_tensor_norm_partials(const std::vector<TensorSpan>& tensors);
cudaError_t launch_multi_tensor_norm(const std::vector<TensorSpan>& tensors, NormType type,
                                     double* partials, float* out, const LaunchConfig& launch);

cudaError_t launch_clip_coefficient(const float* total_norm, float max_norm, float* coef,
                                    const LaunchConfig& launch);

cudaError_t launch_multi_tensor_clamp(const std::vector<TensorSpan>& tensors, float limit,
                                      const LaunchConfig& launch);

// Adds each tensor's NaN and infinity counts to counts[2*i] and
// counts[2*i + 1]; the caller zeroes them first.
cudaError_t launch_multi_tensor_count_nonfinite(const std::vector<TensorSpan>& tensors,
                                                int64_t* counts, const LaunchConfig& launch);

// The found-inf flags travel in the kernel parameters; this many fit.
constexpr size_t kMaxScalerFlags = 256;
cudaError_t launch_scaler_update(math::ScalerState* state,
                                 const std::vector<const float*>& found_infs,
                                 const math::ScalerConfig& config, bool force, float forced_scale,
                                 const LaunchConfig& launch);

cudaError_t launch_increment_steps(int64_t* steps, int64_t count, const float* found_inf,
                                   const LaunchConfig& launch);

cudaError_t launch_lr_schedule(const math::LrSchedule* schedules, int32_t groups,
                               const int64_t* step, float* lr, const LaunchConfig& launch);

cudaError_t launch_sgd_step(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                            const StepScalars& scalars, const LaunchConfig& launch);
cudaError_t launch_adam_step(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                             const StepScalars& scalars, const LaunchConfig& launch);

}  // namespace cuda
}  // namespace ampx::impl
