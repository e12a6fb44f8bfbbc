// attention_tiles.cuh -- the tile arithmetic the attention kernels share
// (attention_forward.cu, attention_backward.cu; the score, weight and
// dropout of one element also attention_*_mma.cu).
//
// A block of 256 threads works on a 32 x 32 tile of scores: thread t owns
// "own" row t / 8 of the tile and, of the other side, rows t % 8 + 8e for
// e < 4. Feature vectors pass through shared memory 64 dimensions at a
// time, converted to fp32 as they are staged; a thread accumulates feature
// d = t % 8 + 8m of its own row in register m < N (N * 8 >= the features).
//
//   tile_dots:       acc[e] = own_row . other_row(e)        (scores, dout . v)
//   tile_accumulate: acc[m] += sum_x W(own, x) * M[x][d(m)] (P v, dS k, ...)
//
// Each tile costs 2 * 32 * 32 * features flops per product and reads the
// feature rows once from global memory (L2 for the rows tiles share).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/backend_attention.h"
#include "fill_convert.cuh"
#include "math/attention.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cuda {

constexpr int kTile = 32;                          // rows of queries and of keys per tile
constexpr int kLanes = 8;                          // threads per tile row
constexpr int kAttentionThreads = kTile * kLanes;  // 256
constexpr int kPerLane = kTile / kLanes;           // other-side rows per thread
constexpr int kChunk = 64;                         // features staged at once

template <int N>
constexpr int feature_chunks() {
  return N * kLanes > kChunk ? N * kLanes / kChunk : 1;
}

struct TileSmem {
  float a[kTile][kChunk + 1];  // +1: rows start in different banks
  float b[kTile][kChunk + 1];
  float w[kTile][kTile + 1];  // weights p z, [query][key]
  float g[kTile][kTile + 1];  // score gradients, [query][key]
};

__device__ __forceinline__ int64_t min_extent(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ float negative_infinity() { return math::bits_float(0xff800000u); }

template <int D>
using AttentionElem = math::storage_t<D>;

// dst[r][x] = feature base + x of row r (0 past `rows` or `dim`).
template <int D>
__device__ void stage_rows(float (*dst)[kChunk + 1], const AttentionElem<D>* src, int64_t rows,
                           int64_t dim, int64_t base) {
  for (int e = threadIdx.x; e < kTile * kChunk; e += kAttentionThreads) {
    const int r = e / kChunk, x = e % kChunk;
    dst[r][x] = r < rows && base + x < dim ? math::load_float<D>(src[r * dim + base + x]) : 0.0f;
  }
}

// acc[e] = own row (t / 8) . other row (t % 8 + 8e) over `dim` features.
template <int D, int N>
__device__ void tile_dots(float (&acc)[kPerLane], const AttentionElem<D>* own, int64_t own_rows,
                          const AttentionElem<D>* other, int64_t other_rows, int64_t dim,
                          TileSmem& sm) {
  const int r = threadIdx.x / kLanes, l = threadIdx.x % kLanes;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) acc[e] = 0.0f;
#pragma unroll
  for (int k = 0; k < feature_chunks<N>(); ++k) {
    if (k * kChunk >= dim) break;  // the same for every thread
    __syncthreads();               // the previous readers of a and b are done
    stage_rows<D>(sm.a, own, own_rows, dim, k * kChunk);
    stage_rows<D>(sm.b, other, other_rows, dim, k * kChunk);
    __syncthreads();
    for (int x = 0; x < kChunk; ++x) {
      const float a = sm.a[r][x];
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) acc[e] += a * sm.b[l + kLanes * e][x];
    }
  }
}

// acc[m] += sum over the tile's 32 rows x of W(own, x) * rows[x][l + 8m],
// W(own, x) = w[own][x], or w[x][own] when Transposed. w must be complete
// (written before the call; the first barrier here publishes it).
template <int D, int N, bool Transposed>
__device__ void tile_accumulate(float (&acc)[N], const float (*w)[kTile + 1],
                                const AttentionElem<D>* rows, int64_t valid_rows, int64_t dim,
                                TileSmem& sm) {
  const int own = threadIdx.x / kLanes, l = threadIdx.x % kLanes;
#pragma unroll
  for (int k = 0; k < feature_chunks<N>(); ++k) {
    if (k * kChunk >= dim) break;
    __syncthreads();
    stage_rows<D>(sm.b, rows, valid_rows, dim, k * kChunk);
    __syncthreads();
#pragma unroll
    for (int mm = 0; mm < kChunk / kLanes; ++mm) {
      const int m = k * (kChunk / kLanes) + mm;
      if (m >= N) break;
      float sum = 0.0f;
      for (int x = 0; x < kTile; ++x)
        sum += (Transposed ? w[x][own] : w[own][x]) * sm.b[x][l + kLanes * mm];
      acc[m] += sum;
    }
  }
}

// The score of (b, h, i, j) from its dot product: scaled, masked, -inf past
// the extents and above the causal diagonal.
__device__ __forceinline__ float attention_score(const AttentionShape& s, float dot, int64_t b,
                                                 int64_t h, int64_t i, int64_t j) {
  if (i >= s.q_len || j >= s.kv_len || (s.causal && j > i)) return negative_infinity();
  float x = dot * s.scale;
  if (s.mask) {
    const int kind = s.mask_type == DType::F32   ? math::kAttentionF32
                     : s.mask_type == DType::F16 ? math::kAttentionF16
                                                 : math::kAttentionBF16;
    x += math::attention_load(s.mask, kind,
                              b * s.mask_strides[0] + h * s.mask_strides[1] +
                                  i * s.mask_strides[2] + j * s.mask_strides[3]);
  }
  return x;
}

// The dropout factor z of weight (b * heads + h = bh, i, j); 1 without dropout.
__device__ __forceinline__ float attention_dropout(const AttentionShape& s, int64_t bh, int64_t i,
                                                   int64_t j) {
  if (!s.dropout) return 1.0f;
  const uint64_t n = static_cast<uint64_t>((bh * s.q_len + i) * s.kv_len + j);
  return math::attention_dropout_factor(math::dropout_key(s.seed), s.offset, n, s.threshold,
                                        s.dropout_scale);
}

// The backward pass's weight p z and score gradient ds of (bh, i, j) from
// its score's dot product, dout_i . v_j, the forward's lse and delta_i =
// dout_i . out_i.
struct WeightGrad {
  float weight, grad;
};

__device__ __forceinline__ WeightGrad weight_and_grad(const AttentionShape& s, float dot,
                                                      float dout_v, int64_t b, int64_t h,
                                                      int64_t bh, int64_t i, int64_t j,
                                                      const float* lse, const float* delta) {
  const float score = attention_score(s, dot, b, h, i, j);
  if (score == negative_infinity()) return {0.0f, 0.0f};  // masked, or past the extents
  const float p = expf(score - lse[bh * s.q_len + i]);
  const float z = attention_dropout(s, bh, i, j);
  return {p * z, s.scale * p * (z * dout_v - delta[bh * s.q_len + i])};
}

// Calls fn(std::integral_constant<int, N>) with the register width N for
// features up to `features` (<= kMaxAttentionHeadDim).
// (Three widths, not four: each is 3 kernels x 3 dtypes x 2 architectures
// of build time, and D <= 32 loses little in the width of 64.)
template <class Fn>
cudaError_t with_feature_width(int64_t features, Fn&& fn) {
  if (features <= 64) return fn(std::integral_constant<int, 8>{});
  if (features <= 128) return fn(std::integral_constant<int, 16>{});
  return fn(std::integral_constant<int, 32>{});
}

// Enqueues a kernel of kAttentionThreads threads on a 2-D grid: x counts
// (batch, head) pairs, y the tiles of a sequence (at most 65535).
template <class... Params, class... Args>
cudaError_t enqueue_grid(void (*kernel)(Params...), dim3 grid, const LaunchConfig& launch,
                         Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kAttentionThreads);
  config.stream = launch.stream;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace cuda
}  // namespace ampx::impl
