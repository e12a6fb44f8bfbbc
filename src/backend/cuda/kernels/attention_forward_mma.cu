// attention_forward_mma.cu -- scaled dot-product attention, forward, on the
// tensor cores (f16 / bf16; attention_mma.cuh says which shapes), in the
// flash-attention manner of attention_forward.cu: a block of 4 warps owns
// 64 query rows of one (batch, head), 16 per warp held as mma fragments,
// and walks the key tiles of 64 once, keeping per row the running maximum
// m, the running sum l of exp(s - m) and the unnormalised output o in
// registers:
//
//   S = Q K^T (fp32),  s = attention_score(S)  (scale, mask, causal)
//   m' = max(m, max_j s_j),  a = exp(m - m'),  p_j = exp(s_j - m')
//   l' = a l + sum_j p_j,    o' = a o + (p z) V    (p z rounded to 16 bits)
//   out = o / l,  lse = m + log l
//
// The weights p z go from the score accumulators straight into the A
// fragments of the product with V (mma.cuh). Causal blocks stop at the
// diagonal tile. Memory traffic: q and out once; k and v once per query
// block (64 rows share each load).
#include <cuda_runtime.h>

#include <initializer_list>

#include "attention_mma.cuh"
#include "core/dtype.h"

namespace ampx::impl {
namespace cuda {
namespace {

constexpr int kQueryRows = kMmaWarps * kWarpRows;  // 64
constexpr int kKeys = 64;

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int D, int F>
__global__ void __launch_bounds__(kMmaThreads)
    attention_forward_mma_kernel(AttentionShape s, const uint16_t* q, const uint16_t* k,
                                 const uint16_t* v, uint16_t* out, float* lse) {
  __shared__ Tile16<kKeys, F> k_tile;
  __shared__ Tile16<kKeys, F> v_tile;
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / s.heads, h = bh % s.heads;
  const int64_t bg = b * s.kv_heads + h / (s.heads / s.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kQueryRows;
  const int64_t wi0 = i0 + warp * kWarpRows;  // this warp's first row
  const int64_t dim = s.head_dim;
  uint32_t qa[F / 16][4];
  load_row_fragments<F>(qa, q + (bh * s.q_len + wi0) * dim, s.q_len - wi0, dim);
  const uint16_t* k_group = k + bg * s.kv_len * dim;
  const uint16_t* v_group = v + bg * s.kv_len * dim;
  const float neg_inf = negative_infinity();
  float o[F / 8][4];
#pragma unroll
  for (int nd = 0; nd < F / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
  // Rows g and g + 8 of the warp: m (the same in the 4 lanes of a row) and
  // this lane's part of l.
  float row_max[2] = {neg_inf, neg_inf}, row_sum[2] = {0.0f, 0.0f};
  const int64_t key_end = s.causal ? min_extent(s.kv_len, i0 + kQueryRows) : s.kv_len;
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    __syncthreads();  // the previous tile's readers are done
    stage_rows16<kKeys, F>(k_tile.row, k_group + j0 * dim, s.kv_len - j0, dim);
    stage_rows16<kKeys, F>(v_tile.row, v_group + j0 * dim, s.kv_len - j0, dim);
    __syncthreads();
    float sc[kKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < F / 16; ++kk)
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) mma_rows<D, F>(sc[nt], qa[kk], k_tile.row, nt * 8, kk * 16);
    float tile_max[2] = {neg_inf, neg_inf};
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = wi0 + g + (e / 2) * 8, j = j0 + nt * 8 + 2 * t + e % 2;
        sc[nt][e] = attention_score(s, sc[nt][e], b, h, i, j);
        tile_max[e / 2] = fmaxf(tile_max[e / 2], sc[nt][e]);
      }
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float new_max = fmaxf(row_max[r], quad_max(tile_max[r]));
      // A row with no key yet keeps m = -inf: its weights are 0, not NaN.
      rescale[r] = new_max == neg_inf ? 1.0f : expf(row_max[r] - new_max);
      row_max[r] = new_max;
      row_sum[r] *= rescale[r];
    }
#pragma unroll
    for (int nd = 0; nd < F / 8; ++nd) {
      o[nd][0] *= rescale[0], o[nd][1] *= rescale[0];
      o[nd][2] *= rescale[1], o[nd][3] *= rescale[1];
    }
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const float p = row_max[r] == neg_inf ? 0.0f : expf(sc[nt][e] - row_max[r]);
        row_sum[r] += p;
        const int64_t i = wi0 + g + r * 8, j = j0 + nt * 8 + 2 * t + e % 2;
        sc[nt][e] = p == 0.0f ? 0.0f : p * attention_dropout(s, bh, i, j);
      }
    mma_weights<D, F, kKeys>(o, sc, v_tile.row);
  }
  float inverse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] = quad_sum(row_sum[r]);
    inverse[r] = row_sum[r] > 0.0f ? 1.0f / row_sum[r] : 0.0f;
  }
  store_rows<D, F>(out + (bh * s.q_len + wi0) * dim, o, s.q_len - wi0, dim, inverse[0],
                   inverse[1]);
  if (t != 0 || !lse) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = wi0 + g + r * 8;
    if (i < s.q_len)
      lse[bh * s.q_len + i] = row_sum[r] > 0.0f ? row_max[r] + logf(row_sum[r]) : neg_inf;
  }
}

}  // namespace

bool attention_mma_supports(const AttentionShape& s, DType type,
                            std::initializer_list<const void*> operands) {
  if (type != DType::F16 && type != DType::BF16) return false;
  if (s.head_dim != s.value_dim || s.head_dim % 8 != 0 || s.head_dim > 128) return false;
  for (const void* p : operands)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return (s.q_len + kQueryRows - 1) / kQueryRows <= 65535 &&
         (s.kv_len + kQueryRows - 1) / kQueryRows <= 65535;
}

cudaError_t launch_attention_forward_mma(const AttentionShape& s, const void* q, const void* k,
                                         const void* v, DType type, void* out, float* lse,
                                         const LaunchConfig& launch) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned int>(s.batch * s.heads),
                        static_cast<unsigned int>((s.q_len + kQueryRows - 1) / kQueryRows));
  config.blockDim = dim3(kMmaThreads);
  config.stream = launch.stream;
  const auto* qe = static_cast<const uint16_t*>(q);
  const auto* ke = static_cast<const uint16_t*>(k);
  const auto* ve = static_cast<const uint16_t*>(v);
  auto* oe = static_cast<uint16_t*>(out);
  return with_mma_width(s.head_dim, [&](auto width) {
    constexpr int F = decltype(width)::value;
    return type == DType::F16
               ? cudaLaunchKernelEx(&config, attention_forward_mma_kernel<AMPX_F16, F>, s, qe, ke,
                                    ve, oe, lse)
               : cudaLaunchKernelEx(&config, attention_forward_mma_kernel<AMPX_BF16, F>, s, qe,
                                    ke, ve, oe, lse);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
