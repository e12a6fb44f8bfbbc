// fill_convert.cuh -- host-side launchers of kernels/fill.cu and kernels/convert.cu.
//
// Plain C++ (no kernel syntax), so the CUDA backend, which the host compiler
// builds, can call them. Launchers only enqueue: they return the launch
// status and never wait for the kernel. Translating a status into an
// ampx::Error is the backend's job, so kernels stay free of library types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ampx {
namespace cuda {

// Grid size and stream of a launch. `max_blocks` (>= 1) is how many 256-thread
// blocks make the device fully resident; grid-stride loops cover the rest.
struct Launch {
  cudaStream_t stream;
  int max_blocks;
};

constexpr int kBlockThreads = 256;

// Blocks for `work` items of one thread each: at least one, at most max_blocks.
inline unsigned int grid_blocks(int64_t work, const Launch& launch) {
  const int64_t wanted = (work + kBlockThreads - 1) / kBlockThreads;
  if (wanted < 1) return 1;
  return static_cast<unsigned int>(wanted < launch.max_blocks ? wanted : launch.max_blocks);
}

// Writes `count` elements of `elem_size` (1, 2, 4 or 8) bytes, each the low
// elem_size bytes of `pattern`. `dst` must be aligned to elem_size.
// Returns cudaErrorInvalidValue for another elem_size.
cudaError_t launch_fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count,
                        const Launch& launch);

// dst[i] = math::convert_value<dst_type, src_type>(src[i]) for i < count.
// Both pointers must be aligned to their element size; they may be equal only
// when the types are (then nothing is enqueued). Returns cudaErrorInvalidValue
// for a type outside DType.
cudaError_t launch_convert(void* dst, DType dst_type, const void* src, DType src_type,
                           int64_t count, const Launch& launch);

// cudaSuccess when this build holds code the current device can run (SASS for
// its architecture or PTX it can JIT); otherwise the error a launch would get.
cudaError_t probe_kernel_image();

}  // namespace cuda
}  // namespace ampx
