// fp8_launch.cuh -- host-side launchers of the FP8 kernels: quantization
// (fp8_quantize.cu) and the scaling recipes' updates (fp8_scaling.cu), for
// the CUDA backend's Fp8 capability (core/backend_fp8.h gives what each
// computes).
//
// Plain C++ declarations, so the CUDA backend, which the host compiler
// builds, can include them. Each only enqueues on launch.stream and
// returns the launch status: nothing waits for the device or copies to the
// host, so a training step stays capturable in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend_fp8.h"
#include "fill_convert.cuh"

namespace ampx::impl {
namespace cuda {

// Fp8Primitives::quantize, for valid arguments with elements.
cudaError_t launch_fp8_quantize(const Fp8QuantizeArgs& args, const LaunchConfig& launch);

// Fp8Primitives::finish_step, scale_from_amax and count_fp8_range.
cudaError_t launch_fp8_finish_step(const Fp8Slots& slots, const Fp8ScaleRule& rule,
                                   const LaunchConfig& launch);
cudaError_t launch_fp8_scale_from_amax(const Fp8Slots& slots, int64_t slot, const float* amax,
                                       const Fp8ScaleRule& rule, const LaunchConfig& launch);
cudaError_t launch_fp8_count_range(const void* x, DType x_type, int64_t count, const float* scale,
                                   DType y_type, int64_t* counts, const LaunchConfig& launch);

}  // namespace cuda
}  // namespace ampx::impl
