// fill_convert.cuh -- host-side launchers of kernels/fill.cu and kernels/convert.cu.
//
// Plain C++ outside the __CUDACC__ section, so the CUDA backend, which the
// host compiler builds, can include it. Launchers only enqueue: they return
// the launch status and never wait for the kernel. Translating a status into
// an ampx::impl::StatusError is the backend's job, so kernels stay free of library types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/dtype.h"

namespace ampx::impl {
namespace cuda {

// Grid size and stream of a launch. `max_blocks` (>= 1) is how many 256-thread
// blocks make the device fully resident; grid-stride loops cover the rest.
struct LaunchConfig {
  cudaStream_t stream;
  int max_blocks;
};

constexpr int kBlockThreads = 256;

// Blocks for `work` items of one thread each: at least one, at most max_blocks.
inline unsigned int grid_blocks(int64_t work, const LaunchConfig& launch) {
  const int64_t wanted = (work + kBlockThreads - 1) / kBlockThreads;
  if (wanted < 1) return 1;
  return static_cast<unsigned int>(wanted < launch.max_blocks ? wanted : launch.max_blocks);
}

#if defined(__CUDACC__)
// Enqueues `kernel` on launch.stream with `blocks` blocks of kBlockThreads
// and returns the status of this launch. It is taken from the launch call
// itself: cudaGetLastError after a <<<>>> launch would also report a failure
// left behind by an unrelated earlier runtime call -- for example the
// cudaErrorNotReady of a cudaStreamQuery in the host program.
template <class... Params, class... Args>
cudaError_t enqueue(void (*kernel)(Params...), unsigned int blocks, const LaunchConfig& launch,
                    Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kBlockThreads);
  config.stream = launch.stream;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}
#endif

// Writes `count` elements of `elem_size` (1, 2, 4 or 8) bytes, each the low
// elem_size bytes of `pattern`. `dst` must be aligned to elem_size.
// Returns cudaErrorInvalidValue for another elem_size.
cudaError_t launch_fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count,
                        const LaunchConfig& launch);

// dst[i] = math::convert_value<dst_type, src_type>(src[i]) for i < count.
// Both pointers must be aligned to their element size; they may be equal only
// when the types are (then nothing is enqueued). Returns cudaErrorInvalidValue
// for a type outside DType.
cudaError_t launch_convert(void* dst, DType dst_type, const void* src, DType src_type,
                           int64_t count, const LaunchConfig& launch);

// cudaSuccess when this build holds code the current device can run (SASS for
// its architecture or PTX it can JIT); otherwise the error a launch would get.
cudaError_t probe_kernel_image();

}  // namespace cuda
}  // namespace ampx::impl
