// increment_steps.cu -- advances the optimizer's per-parameter step counts,
// unless the step is skipped for a non-finite gradient.
//
//   steps[i] += 1 for i < count, unless found_inf && *found_inf != 0
//
// Memory traffic: reads and writes 8 bytes per counter; one thread per
// counter. The skip is decided on the device, so the host never waits for
// the inf check.
#include <cuda_runtime.h>

#include "multi_tensor.cuh"
#include "multi_tensor_ops.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

__global__ void __launch_bounds__(kBlockThreads)
    increment_steps_kernel(int64_t* steps, int64_t count, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride)
    ++steps[i];
}

}  // namespace

cudaError_t launch_increment_steps(int64_t* steps, int64_t count, const float* found_inf,
                                   const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  return enqueue(increment_steps_kernel, grid_blocks(count, launch), launch, steps, count,
                 found_inf);
}

}  // namespace cuda
}  // namespace ampx::impl
