// attention_backward.cu -- scaled dot-product attention, backward
// (core/backend_attention.h has the math), recomputing the weights from q,
// k and the forward's lse instead of reading a stored score matrix:
//
//   delta_i = dout_i . out_i                           (attention_delta_kernel)
//   p_ij = exp(s_ij - lse_i),  dp_ij = z_ij dout_i . v_j
//   ds_ij = scale p_ij (dp_ij - delta_i)
//   dv_j = sum_i p_ij z_ij dout_i,  dk_j = sum_i ds_ij q_i   (one block per key tile)
//   dq_i = sum_j ds_ij k_j                                   (one block per query tile)
//
// dk and dv come from a kernel whose block owns 32 keys of one (batch,
// key/value head) and walks every query tile of the heads that share them;
// dq from one whose block owns 32 query rows. Each sum is thus made by one
// block in a fixed order (no atomics): results are the same on every run.
// The scores are computed twice (once per kernel), the price of needing
// neither atomics nor a Tq x Tk buffer. Memory traffic: per key tile, q,
// dout once per query tile and head; per query tile, k and v once per key
// tile; delta reads out and dout once.
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

constexpr int kWarpSize = 32;

// delta[row] = dout_row . out_row, one warp per row.
template <int D>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_delta_kernel(const Elem<D>* out, const Elem<D>* dout, int64_t rows, int64_t dim,
                           float* delta) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kAttentionThreads / kWarpSize);
  for (int64_t row = blockIdx.x * (kAttentionThreads / kWarpSize) + threadIdx.x / kWarpSize;
       row < rows; row += warps) {
    float part = 0.0f;
    for (int64_t d = lane; d < dim; d += kWarpSize)
      part += math::load_float<D>(out[row * dim + d]) * math::load_float<D>(dout[row * dim + d]);
    for (int width = kWarpSize / 2; width > 0; width /= 2)
      part += __shfl_xor_sync(0xffffffffu, part, width);
    if (lane == 0) delta[row] = part;
  }
}

template <int D, int N>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_backward_kv_kernel(AttentionShape s, const Elem<D>* q, const Elem<D>* k,
                                 const Elem<D>* v, const Elem<D>* dout, const float* lse,
                                 const float* delta, Elem<D>* dk, Elem<D>* dv) {
  __shared__ TileSmem sm;
  const int64_t bg = blockIdx.x;
  const int64_t b = bg / s.kv_heads, g = bg % s.kv_heads;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int c = threadIdx.x / kLanes, l = threadIdx.x % kLanes;
  const int64_t k_rows = min_extent(kTile, s.kv_len - j0);
  const Elem<D>* k_tile = k + (bg * s.kv_len + j0) * s.head_dim;
  const Elem<D>* v_tile = v + (bg * s.kv_len + j0) * s.value_dim;
  float dk_acc[N], dv_acc[N];
#pragma unroll
  for (int m = 0; m < N; ++m) dk_acc[m] = dv_acc[m] = 0.0f;
  const int64_t group = s.heads / s.kv_heads;
  // Causal: query rows before j0 see none of these keys.
  const int64_t first_row = s.causal ? j0 : 0;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const int64_t bh = b * s.heads + h;
    const Elem<D>* q_head = q + bh * s.q_len * s.head_dim;
    const Elem<D>* dout_head = dout + bh * s.q_len * s.value_dim;
    for (int64_t i0 = first_row; i0 < s.q_len; i0 += kTile) {
      const int64_t q_rows = min_extent(kTile, s.q_len - i0);
      float dot[kPerLane], dout_v[kPerLane];
      tile_dots<D, N>(dot, k_tile, k_rows, q_head + i0 * s.head_dim, q_rows, s.head_dim, sm);
      tile_dots<D, N>(dout_v, v_tile, k_rows, dout_head + i0 * s.value_dim, q_rows, s.value_dim,
                      sm);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const int x = l + kLanes * e;
        const WeightGrad wg =
            weight_and_grad(s, dot[e], dout_v[e], b, h, bh, i0 + x, j0 + c, lse, delta);
        sm.w[x][c] = wg.weight;
        sm.g[x][c] = wg.grad;
      }
      tile_accumulate<D, N, true>(dv_acc, sm.w, dout_head + i0 * s.value_dim, q_rows,
                                  s.value_dim, sm);
      tile_accumulate<D, N, true>(dk_acc, sm.g, q_head + i0 * s.head_dim, q_rows, s.head_dim, sm);
    }
  }
  if (c >= k_rows) return;
  Elem<D>* dk_row = dk + (bg * s.kv_len + j0 + c) * s.head_dim;
  Elem<D>* dv_row = dv + (bg * s.kv_len + j0 + c) * s.value_dim;
#pragma unroll
  for (int m = 0; m < N; ++m) {
    const int64_t d = l + kLanes * m;
    if (d < s.head_dim) dk_row[d] = math::store_float<D>(dk_acc[m]);
    if (d < s.value_dim) dv_row[d] = math::store_float<D>(dv_acc[m]);
  }
}

template <int D, int N>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_backward_q_kernel(AttentionShape s, const Elem<D>* q, const Elem<D>* k,
                                const Elem<D>* v, const Elem<D>* dout, const float* lse,
                                const float* delta, Elem<D>* dq) {
  __shared__ TileSmem sm;
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / s.heads, h = bh % s.heads;
  const int64_t bg = b * s.kv_heads + h / (s.heads / s.kv_heads);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int r = threadIdx.x / kLanes, l = threadIdx.x % kLanes;
  const int64_t q_rows = min_extent(kTile, s.q_len - i0);
  const Elem<D>* q_tile = q + (bh * s.q_len + i0) * s.head_dim;
  const Elem<D>* dout_tile = dout + (bh * s.q_len + i0) * s.value_dim;
  const Elem<D>* k_group = k + bg * s.kv_len * s.head_dim;
  const Elem<D>* v_group = v + bg * s.kv_len * s.value_dim;
  float dq_acc[N];
#pragma unroll
  for (int m = 0; m < N; ++m) dq_acc[m] = 0.0f;
  const int64_t key_end = s.causal ? min_extent(s.kv_len, i0 + kTile) : s.kv_len;
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    const int64_t k_rows = min_extent(kTile, s.kv_len - j0);
    float dot[kPerLane], dout_v[kPerLane];
    tile_dots<D, N>(dot, q_tile, q_rows, k_group + j0 * s.head_dim, k_rows, s.head_dim, sm);
    tile_dots<D, N>(dout_v, dout_tile, q_rows, v_group + j0 * s.value_dim, k_rows, s.value_dim,
                    sm);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int x = l + kLanes * e;
      sm.g[r][x] = weight_and_grad(s, dot[e], dout_v[e], b, h, bh, i0 + r, j0 + x, lse, delta).grad;
    }
    tile_accumulate<D, N, false>(dq_acc, sm.g, k_group + j0 * s.head_dim, k_rows, s.head_dim, sm);
  }
  if (r >= q_rows) return;
  Elem<D>* dq_row = dq + (bh * s.q_len + i0 + r) * s.head_dim;
#pragma unroll
  for (int m = 0; m < N; ++m) {
    const int64_t d = l + kLanes * m;
    if (d < s.head_dim) dq_row[d] = math::store_float<D>(dq_acc[m]);
  }
}

unsigned int tiles_of(int64_t length) { return static_cast<unsigned int>((length + kTile - 1) / kTile); }

}  // namespace

size_t attention_backward_scratch_bytes(const AttentionShape& s) {
  return static_cast<size_t>(s.batch * s.heads * s.q_len) * sizeof(float);
}

cudaError_t launch_attention_backward(const AttentionShape& s, const void* q, const void* k,
                                      const void* v, const void* out, const void* dout,
                                      const float* lse, DType type, void* dq, void* dk, void* dv,
                                      void* scratch, bool tensor_cores, const LaunchConfig& launch) {
  if ((s.q_len + kTile - 1) / kTile > 65535 || (s.kv_len + kTile - 1) / kTile > 65535)
    return cudaErrorInvalidConfiguration;
  float* delta = static_cast<float*>(scratch);
  const int64_t rows = s.batch * s.heads * s.q_len;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* qe = static_cast<const Elem<D>*>(q);
    const auto* ke = static_cast<const Elem<D>*>(k);
    const auto* ve = static_cast<const Elem<D>*>(v);
    const auto* de = static_cast<const Elem<D>*>(dout);
    const int64_t warps_per_block = kAttentionThreads / kWarpSize;
    const int64_t wanted = (rows + warps_per_block - 1) / warps_per_block;
    const dim3 delta_grid(
        static_cast<unsigned int>(wanted < launch.max_blocks ? wanted : launch.max_blocks));
    cudaError_t status = enqueue_grid(attention_delta_kernel<D>, delta_grid, launch,
                                      static_cast<const Elem<D>*>(out), de, rows, s.value_dim,
                                      delta);
    if (status != cudaSuccess) return status;
    if (tensor_cores && attention_mma_supports(s, type, {q, k, v, dout, dq, dk, dv}))
      return launch_attention_backward_mma(s, q, k, v, dout, lse, delta, type, dq, dk, dv, launch);
    return with_feature_width(s.head_dim > s.value_dim ? s.head_dim : s.value_dim, [&](auto width) {
      constexpr int N = decltype(width)::value;
      if (s.kv_len > 0) {
        const cudaError_t kv = enqueue_grid(
            attention_backward_kv_kernel<D, N>,
            dim3(static_cast<unsigned int>(s.batch * s.kv_heads), tiles_of(s.kv_len)), launch, s,
            qe, ke, ve, de, lse, static_cast<const float*>(delta), static_cast<Elem<D>*>(dk),
            static_cast<Elem<D>*>(dv));
        if (kv != cudaSuccess) return kv;
      }
      return enqueue_grid(attention_backward_q_kernel<D, N>,
                          dim3(static_cast<unsigned int>(s.batch * s.heads), tiles_of(s.q_len)),
                          launch, s, qe, ke, ve, de, lse, static_cast<const float*>(delta),
                          static_cast<Elem<D>*>(dq));
    });
  });
}

}  // namespace cuda
}  // namespace ampx::impl
