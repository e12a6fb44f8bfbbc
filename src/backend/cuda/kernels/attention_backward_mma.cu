// attention_backward_mma.cu -- scaled dot-product attention, backward, on
// the tensor cores (f16 / bf16; attention_mma.cuh says which shapes): the
// math and the two-kernel split of attention_backward.cu, which also makes
// delta_i = dout_i . out_i first:
//
//   p_ij = exp(s_ij - lse_i),  dp_ij = z_ij dout_i . v_j
//   ds_ij = scale p_ij (dp_ij - delta_i)                  (weight_and_grad)
//   dv_j = sum_i p_ij z_ij dout_i,  dk_j = sum_i ds_ij q_i   (keys kernel)
//   dq_i = sum_j ds_ij k_j                                   (queries kernel)
//
// Keys kernel: a block owns 64 keys of one (batch, key/value head), 16 per
// warp, and walks 16 query rows at a time of every head that shares them;
// per step each warp makes S^T = K Q^T and dP^T = V dout^T (16 x 16, fp32),
// turns them into the weights and score gradients, rounds those to 16 bits
// as A fragments (mma.cuh) and adds W^T dout to dv and dS^T q to dk.
// Queries kernel: a block owns 64 query rows, 16 per warp with their q and
// dout as fragments, and walks 32 keys at a time: S = Q K^T, dP = dout V^T,
// dq += dS K. Each sum is made by one warp in a fixed order (no atomics):
// the same bits on every run. Memory traffic: per key block, q and dout once
// per query step and head; per query block, k and v once per key step.
#include <cuda_runtime.h>

#include "attention_mma.cuh"
#include "core/dtype.h"

namespace ampx::impl {
namespace cuda {
namespace {

constexpr int kBlockKeys = kMmaWarps * kWarpRows;     // 64, keys kernel
constexpr int kQuerySteps = 16;                       // query rows per step, keys kernel
constexpr int kBlockQueries = kMmaWarps * kWarpRows;  // 64, queries kernel
constexpr int kKeySteps = 32;                         // keys per step, queries kernel

template <int D, int F>
__global__ void __launch_bounds__(kMmaThreads)
    attention_backward_keys_mma_kernel(AttentionShape s, const uint16_t* q, const uint16_t* k,
                                       const uint16_t* v, const uint16_t* dout, const float* lse,
                                       const float* delta, uint16_t* dk, uint16_t* dv) {
  __shared__ Tile16<kBlockKeys, F> k_tile;
  __shared__ Tile16<kBlockKeys, F> v_tile;
  __shared__ Tile16<kQuerySteps, F> q_tile;
  __shared__ Tile16<kQuerySteps, F> dout_tile;
  const int64_t bg = blockIdx.x;
  const int64_t b = bg / s.kv_heads, g_head = bg % s.kv_heads;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kBlockKeys;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int w0 = warp * kWarpRows;  // this warp's first key in the tiles
  const int64_t dim = s.head_dim;
  stage_rows16<kBlockKeys, F>(k_tile.row, k + (bg * s.kv_len + j0) * dim, s.kv_len - j0, dim);
  stage_rows16<kBlockKeys, F>(v_tile.row, v + (bg * s.kv_len + j0) * dim, s.kv_len - j0, dim);
  float dk_acc[F / 8][4], dv_acc[F / 8][4];
#pragma unroll
  for (int nd = 0; nd < F / 8; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[nd][e] = dv_acc[nd][e] = 0.0f;
  const int64_t group = s.heads / s.kv_heads;
  // Causal: query rows before j0 see none of these keys.
  const int64_t first_row = s.causal ? j0 : 0;
  for (int64_t h = g_head * group; h < (g_head + 1) * group; ++h) {
    const int64_t bh = b * s.heads + h;
    for (int64_t i0 = first_row; i0 < s.q_len; i0 += kQuerySteps) {
      __syncthreads();  // the previous step's readers are done (and k, v staged)
      stage_rows16<kQuerySteps, F>(q_tile.row, q + (bh * s.q_len + i0) * dim, s.q_len - i0, dim);
      stage_rows16<kQuerySteps, F>(dout_tile.row, dout + (bh * s.q_len + i0) * dim, s.q_len - i0,
                                   dim);
      __syncthreads();
      float st[2][4] = {}, dpt[2][4] = {};  // [key][query], two 8-query halves
#pragma unroll
      for (int kk = 0; kk < F / 16; ++kk) {
        uint32_t ka[4], va[4];
        tile_fragment<F>(ka, k_tile.row, w0, kk * 16);
        tile_fragment<F>(va, v_tile.row, w0, kk * 16);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          mma_rows<D, F>(st[nt], ka, q_tile.row, nt * 8, kk * 16);
          mma_rows<D, F>(dpt[nt], va, dout_tile.row, nt * 8, kk * 16);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = j0 + w0 + g + (e / 2) * 8, i = i0 + nt * 8 + 2 * t + e % 2;
          const WeightGrad wg = weight_and_grad(s, st[nt][e], dpt[nt][e], b, h, bh, i, j, lse, delta);
          st[nt][e] = wg.weight;
          dpt[nt][e] = wg.grad;
        }
      mma_weights<D, F, kQuerySteps>(dv_acc, st, dout_tile.row);
      mma_weights<D, F, kQuerySteps>(dk_acc, dpt, q_tile.row);
    }
  }
  const int64_t first = j0 + w0;
  store_rows<D, F>(dk + (bg * s.kv_len + first) * dim, dk_acc, s.kv_len - first, dim);
  store_rows<D, F>(dv + (bg * s.kv_len + first) * dim, dv_acc, s.kv_len - first, dim);
}

template <int D, int F>
__global__ void __launch_bounds__(kMmaThreads)
    attention_backward_queries_mma_kernel(AttentionShape s, const uint16_t* q, const uint16_t* k,
                                          const uint16_t* v, const uint16_t* dout,
                                          const float* lse, const float* delta, uint16_t* dq) {
  __shared__ Tile16<kKeySteps, F> k_tile;
  __shared__ Tile16<kKeySteps, F> v_tile;
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / s.heads, h = bh % s.heads;
  const int64_t bg = b * s.kv_heads + h / (s.heads / s.kv_heads);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kBlockQueries;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t wi0 = i0 + warp * kWarpRows;
  const int64_t dim = s.head_dim;
  uint32_t qa[F / 16][4], da[F / 16][4];
  load_row_fragments<F>(qa, q + (bh * s.q_len + wi0) * dim, s.q_len - wi0, dim);
  load_row_fragments<F>(da, dout + (bh * s.q_len + wi0) * dim, s.q_len - wi0, dim);
  const uint16_t* k_group = k + bg * s.kv_len * dim;
  const uint16_t* v_group = v + bg * s.kv_len * dim;
  float dq_acc[F / 8][4];
#pragma unroll
  for (int nd = 0; nd < F / 8; ++nd) dq_acc[nd][0] = dq_acc[nd][1] = dq_acc[nd][2] = dq_acc[nd][3] = 0.0f;
  const int64_t key_end = s.causal ? min_extent(s.kv_len, i0 + kBlockQueries) : s.kv_len;
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeySteps) {
    __syncthreads();
    stage_rows16<kKeySteps, F>(k_tile.row, k_group + j0 * dim, s.kv_len - j0, dim);
    stage_rows16<kKeySteps, F>(v_tile.row, v_group + j0 * dim, s.kv_len - j0, dim);
    __syncthreads();
    float sc[kKeySteps / 8][4] = {}, dp[kKeySteps / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < F / 16; ++kk)
#pragma unroll
      for (int nt = 0; nt < kKeySteps / 8; ++nt) {
        mma_rows<D, F>(sc[nt], qa[kk], k_tile.row, nt * 8, kk * 16);
        mma_rows<D, F>(dp[nt], da[kk], v_tile.row, nt * 8, kk * 16);
      }
#pragma unroll
    for (int nt = 0; nt < kKeySteps / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = wi0 + g + (e / 2) * 8, j = j0 + nt * 8 + 2 * t + e % 2;
        sc[nt][e] = weight_and_grad(s, sc[nt][e], dp[nt][e], b, h, bh, i, j, lse, delta).grad;
      }
    mma_weights<D, F, kKeySteps>(dq_acc, sc, k_tile.row);
  }
  store_rows<D, F>(dq + (bh * s.q_len + wi0) * dim, dq_acc, s.q_len - wi0, dim);
}

}  // namespace

cudaError_t launch_attention_backward_mma(const AttentionShape& s, const void* q, const void* k,
                                          const void* v, const void* dout, const float* lse,
                                          const float* delta, DType type, void* dq, void* dk,
                                          void* dv, const LaunchConfig& launch) {
  const auto* qe = static_cast<const uint16_t*>(q);
  const auto* ke = static_cast<const uint16_t*>(k);
  const auto* ve = static_cast<const uint16_t*>(v);
  const auto* de = static_cast<const uint16_t*>(dout);
  auto config_of = [&](int64_t pairs, int64_t length, int64_t rows_per_block) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned int>(pairs),
                          static_cast<unsigned int>((length + rows_per_block - 1) / rows_per_block));
    config.blockDim = dim3(kMmaThreads);
    config.stream = launch.stream;
    return config;
  };
  const cudaLaunchConfig_t keys = config_of(s.batch * s.kv_heads, s.kv_len, kBlockKeys);
  const cudaLaunchConfig_t queries = config_of(s.batch * s.heads, s.q_len, kBlockQueries);
  auto run = [&](auto tag, auto width) {
    constexpr int D = decltype(tag)::value, F = decltype(width)::value;
    if (s.kv_len > 0) {
      const cudaError_t status =
          cudaLaunchKernelEx(&keys, attention_backward_keys_mma_kernel<D, F>, s, qe, ke, ve, de,
                             lse, delta, static_cast<uint16_t*>(dk), static_cast<uint16_t*>(dv));
      if (status != cudaSuccess) return status;
    }
    return cudaLaunchKernelEx(&queries, attention_backward_queries_mma_kernel<D, F>, s, qe, ke, ve,
                              de, lse, delta, static_cast<uint16_t*>(dq));
  };
  return with_mma_width(s.head_dim, [&](auto width) {
    return type == DType::F16 ? run(std::integral_constant<int, AMPX_F16>{}, width)
                              : run(std::integral_constant<int, AMPX_BF16>{}, width);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
