// attention_forward.cu -- scaled dot-product attention, forward, in the
// flash-attention manner (core/backend_attention.h has the math): a block
// owns 32 query rows of one (batch, head) and walks the key tiles once,
// keeping per row the running maximum m, the running sum l of exp(s - m)
// and the unnormalised output o in registers:
//
//   m' = max(m, max_j s_j),  a = exp(m - m'),  p_j = exp(s_j - m')
//   l' = a l + sum_j p_j,    o' = a o + sum_j p_j z_j v_j
//   out = o / l,  lse = m + log l
//
// so no score matrix exists beyond one 32 x 32 tile in shared memory.
// Causal blocks stop at the diagonal tile. Memory traffic: q and out once
// per row; k and v once per query tile (32 rows share each load).
#include <cuda_runtime.h>

#include "attention_launch.cuh"
#include "attention_mma.cuh"
#include "attention_tiles.cuh"
#include "core/dtype.h"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = AttentionElem<D>;

__device__ __forceinline__ float lane_group_max(float x) {
  for (int width = kLanes / 2; width > 0; width /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, width));
  return x;
}

__device__ __forceinline__ float lane_group_sum(float x) {
  for (int width = kLanes / 2; width > 0; width /= 2) x += __shfl_xor_sync(0xffffffffu, x, width);
  return x;
}

template <int D, int N>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_forward_kernel(AttentionShape s, const Elem<D>* q, const Elem<D>* k,
                             const Elem<D>* v, Elem<D>* out, float* lse) {
  __shared__ TileSmem sm;
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / s.heads, h = bh % s.heads;
  const int64_t bg = b * s.kv_heads + h / (s.heads / s.kv_heads);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int r = threadIdx.x / kLanes, l = threadIdx.x % kLanes;
  const int64_t i = i0 + r;
  const int64_t q_rows = min_extent(kTile, s.q_len - i0);
  const Elem<D>* q_tile = q + (bh * s.q_len + i0) * s.head_dim;
  const Elem<D>* k_group = k + bg * s.kv_len * s.head_dim;
  const Elem<D>* v_group = v + bg * s.kv_len * s.value_dim;
  const float neg_inf = negative_infinity();
  float o[N];
#pragma unroll
  for (int m = 0; m < N; ++m) o[m] = 0.0f;
  float row_max = neg_inf, row_sum = 0.0f;
  const int64_t key_end = s.causal ? min_extent(s.kv_len, i0 + kTile) : s.kv_len;
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    const int64_t k_rows = min_extent(kTile, s.kv_len - j0);
    float score[kPerLane];
    tile_dots<D, N>(score, q_tile, q_rows, k_group + j0 * s.head_dim, k_rows, s.head_dim, sm);
    float tile_max = neg_inf;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      score[e] = attention_score(s, score[e], b, h, i, j0 + l + kLanes * e);
      tile_max = fmaxf(tile_max, score[e]);
    }
    const float new_max = fmaxf(row_max, lane_group_max(tile_max));
    // A row with no key yet keeps m = -inf: its weights are 0, not NaN.
    const float rescale = new_max == neg_inf ? 1.0f : expf(row_max - new_max);
    float part = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t j = j0 + l + kLanes * e;
      const float p = new_max == neg_inf ? 0.0f : expf(score[e] - new_max);
      part += p;
      sm.w[r][l + kLanes * e] = p == 0.0f ? 0.0f : p * attention_dropout(s, bh, i, j);
    }
    row_sum = row_sum * rescale + lane_group_sum(part);
    row_max = new_max;
#pragma unroll
    for (int m = 0; m < N; ++m) o[m] *= rescale;
    tile_accumulate<D, N, false>(o, sm.w, v_group + j0 * s.value_dim, k_rows, s.value_dim, sm);
  }
  if (i >= s.q_len) return;
  const float inverse = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
  Elem<D>* out_row = out + (bh * s.q_len + i) * s.value_dim;
#pragma unroll
  for (int m = 0; m < N; ++m) {
    const int64_t d = l + kLanes * m;
    if (d < s.value_dim) out_row[d] = math::store_float<D>(o[m] * inverse);
  }
  if (l == 0 && lse) lse[bh * s.q_len + i] = row_sum > 0.0f ? row_max + logf(row_sum) : neg_inf;
}

}  // namespace

cudaError_t launch_attention_forward(const AttentionShape& s, const void* q, const void* k,
                                     const void* v, DType type, void* out, float* lse,
                                     bool tensor_cores, const LaunchConfig& launch) {
  if (tensor_cores && attention_mma_supports(s, type, {q, k, v, out}))
    return launch_attention_forward_mma(s, q, k, v, type, out, lse, launch);
  const dim3 grid(static_cast<unsigned int>(s.batch * s.heads),
                  static_cast<unsigned int>((s.q_len + kTile - 1) / kTile));
  if ((s.q_len + kTile - 1) / kTile > 65535) return cudaErrorInvalidConfiguration;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return with_feature_width(s.head_dim > s.value_dim ? s.head_dim : s.value_dim, [&](auto width) {
      constexpr int N = decltype(width)::value;
      return enqueue_grid(attention_forward_kernel<D, N>, grid, launch, s,
                          static_cast<const Elem<D>*>(q), static_cast<const Elem<D>*>(k),
                          static_cast<const Elem<D>*>(v), static_cast<Elem<D>*>(out), lse);
    });
  });
}

}  // namespace cuda
}  // namespace ampx::impl
