// row_reduce.cuh -- how softmax.cu and cross_entropy.cu reduce a row: a
// group of G threads (one warp, or the whole 256-thread block for long
// rows) owns the row; each thread folds every G-th element in index order
// with the shared per-element math (math::exp_sum_add, or a plain sum), and
// the G partial results are combined in a fixed tree -- shuffles down to
// lane 0 of each warp, then the block's warps in order -- so a row's result
// never depends on scheduling. Every thread of the group gets the result.
// Included only by kernels/*.cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "fill_convert.cuh"
#include "math/activations.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cuda {

constexpr unsigned int kFullWarp = 0xffffffffu;

// The state of two disjoint parts of a row as one. Written as exp_sum_add
// folds in an element: the part with the smaller maximum is rescaled to
// the larger one and its maximum's own 1 joins the rest. An empty part
// (maximum -inf: no element, or only -inf ones) adds only its rest, which
// is 0, or NaN when a NaN element went into it; rescaling it instead would
// compute exp(-inf - -inf) = NaN for two empty parts.
__device__ __forceinline__ math::ExpSum exp_sum_merge(math::ExpSum a, math::ExpSum b) {
  if (b.max > a.max) {
    const math::ExpSum t = a;
    a = b;
    b = t;
  }
  if (b.max == -std::numeric_limits<float>::infinity()) {
    a.rest += b.rest;
    return a;
  }
  a.rest += (b.rest + 1.0f) * expf(b.max - a.max);
  return a;
}

// Lane 0 of the warp ends with the combination of all 32 lanes' states.
__device__ __forceinline__ math::ExpSum warp_merge(math::ExpSum s) {
  for (int offset = 16; offset > 0; offset /= 2) {
    math::ExpSum other;
    other.max = __shfl_down_sync(kFullWarp, s.max, offset);
    other.rest = __shfl_down_sync(kFullWarp, s.rest, offset);
    s = exp_sum_merge(s, other);
  }
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(kFullWarp, v, offset);
  return v;
}

// G threads per row: 32 (a warp; a block holds 8 rows) or kBlockThreads.
// Rows are taken grid-stride; all threads of a group share a row, so the
// block-wide barriers of G == kBlockThreads are reached uniformly.
template <int G>
class RowGroup {
  static_assert(G == 32 || G == kBlockThreads, "a row belongs to a warp or to the block");

 public:
  static constexpr int kRowsPerBlock = kBlockThreads / G;

  __device__ int lane() const { return static_cast<int>(threadIdx.x) % G; }
  __device__ int64_t first_row() const {
    return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + static_cast<int>(threadIdx.x) / G;
  }
  __device__ int64_t row_step() const { return static_cast<int64_t>(gridDim.x) * kRowsPerBlock; }

  // The max and exp-sum of row[0, cols), in every thread of the group.
  template <int D>
  __device__ math::ExpSum exp_sum(const math::storage_t<D>* row, int64_t cols) const {
    math::ExpSum s;
    for (int64_t j = lane(); j < cols; j += G) math::exp_sum_add(s, math::load_float<D>(row[j]));
    s = warp_merge(s);
    if constexpr (G == 32) {
      s.max = __shfl_sync(kFullWarp, s.max, 0);
      s.rest = __shfl_sync(kFullWarp, s.rest, 0);
      return s;
    } else {
      __shared__ float warp_max[kWarps], warp_rest[kWarps];
      // The previous row's readers of slot 0 are past this barrier.
      __syncthreads();
      if (threadIdx.x % 32 == 0) {
        warp_max[threadIdx.x / 32] = s.max;
        warp_rest[threadIdx.x / 32] = s.rest;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int w = 1; w < kWarps; ++w) {
          math::ExpSum other;
          other.max = warp_max[w];
          other.rest = warp_rest[w];
          s = exp_sum_merge(s, other);
        }
        warp_max[0] = s.max;
        warp_rest[0] = s.rest;
      }
      __syncthreads();
      s.max = warp_max[0];
      s.rest = warp_rest[0];
      return s;
    }
  }

  // The sum of every thread's v, in every thread of the group.
  __device__ float sum(float v) const {
    v = warp_sum(v);
    if constexpr (G == 32) {
      return __shfl_sync(kFullWarp, v, 0);
    } else {
      __shared__ float warp_total[kWarps];
      __syncthreads();
      if (threadIdx.x % 32 == 0) warp_total[threadIdx.x / 32] = v;
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int w = 1; w < kWarps; ++w) v += warp_total[w];
        warp_total[0] = v;
      }
      __syncthreads();
      return warp_total[0];
    }
  }

 private:
  static constexpr int kWarps = kBlockThreads / 32;
};

// Rows up to this long get a warp each (at most 32 elements per lane);
// longer ones the whole block.
constexpr int64_t kWarpRowCols = 1024;

// Calls fn(std::integral_constant<int, G>{}) with the group size for rows
// of `cols` elements and returns its status.
template <class Fn>
cudaError_t with_row_group(int64_t cols, Fn&& fn) {
  if (cols <= kWarpRowCols) return fn(std::integral_constant<int, 32>{});
  return fn(std::integral_constant<int, kBlockThreads>{});
}

// Blocks for `rows` rows of G threads each: one row per group, at most the
// resident count, more rows per group beyond.
template <int G>
unsigned int row_blocks(int64_t rows, const LaunchConfig& launch) {
  const int64_t wanted = (rows + RowGroup<G>::kRowsPerBlock - 1) / RowGroup<G>::kRowsPerBlock;
  return static_cast<unsigned int>(wanted < launch.max_blocks ? wanted : launch.max_blocks);
}

}  // namespace cuda
}  // namespace ampx::impl
