// stretch.cuh -- how the single-list kernels of the ops (elementwise.cu and
// sum_all in reduce.cu) share elements among blocks: block b takes the
// stretch [b * length, (b + 1) * length) of consecutive elements, so that its
// threads can move 16-byte packets with for_each_packet (multi_tensor.cuh).
// Included only by kernels/*.cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fill_convert.cuh"

namespace ampx::impl {
namespace cuda {

// At least 16 elements per thread: below that a block's setup (the head
// search, the scalars) costs more than its stretch.
constexpr int64_t kMinStretch = 16 * kBlockThreads;

struct Stretches {
  int64_t length;
  unsigned int blocks;
};

// As many stretches as make the device resident (launch.max_blocks), fewer
// when they would be shorter than kMinStretch. Lengths are multiples of 16
// elements, so arrays aligned at element 0 are 16-byte aligned at every
// stretch's first element too and no block spends a step on a scalar head.
// `count` must be positive.
inline Stretches plan_stretches(int64_t count, const LaunchConfig& launch) {
  int64_t length = (count + launch.max_blocks - 1) / launch.max_blocks;
  if (length < kMinStretch) length = kMinStretch;
  length = (length + 15) / 16 * 16;
  return {length, static_cast<unsigned int>((count + length - 1) / length)};
}

struct Stretch {
  int64_t begin;
  int64_t end;
};

// This block's stretch of `count` elements.
__device__ __forceinline__ Stretch block_stretch(int64_t count, int64_t length) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * length;
  return {begin, begin + length < count ? begin + length : count};
}

}  // namespace cuda
}  // namespace ampx::impl
