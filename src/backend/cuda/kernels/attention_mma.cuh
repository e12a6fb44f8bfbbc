// attention_mma.cuh -- what the tensor-core attention kernels share
// (attention_forward_mma.cu, attention_backward_mma.cu): which shapes they
// take, their launchers, and the staging of 16-bit rows.
//
// Each warp owns 16 rows of one side (queries, or keys in the dk/dv pass)
// as mma A fragments (mma.cuh) and multiplies them by tiles of the other
// side staged in shared memory, F features wide (32, 64 or 128: the head
// dimension rounded up, the padding zero). A tile row is F + 8 elements
// long: rows stay 16-byte aligned and the 4-byte fragment reads of the 8
// rows a warp touches at once fall in different banks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "attention_tiles.cuh"
#include "mma.cuh"

namespace ampx::impl {
namespace cuda {

constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = kMmaWarps * 32;
constexpr int kWarpRows = 16;  // rows of A per warp

// Whether the tensor-core kernels take this attention: f16 or bf16, one
// head dimension for q, k and v, a multiple of 8 up to 128, every operand
// 16-byte aligned (rows are copied 8 elements at a time).
bool attention_mma_supports(const AttentionShape& shape, DType type,
                            std::initializer_list<const void*> operands);

cudaError_t launch_attention_forward_mma(const AttentionShape& shape, const void* q,
                                         const void* k, const void* v, DType type, void* out,
                                         float* lse, const LaunchConfig& launch);
// dq, dk and dv given delta (dout . out per query row).
cudaError_t launch_attention_backward_mma(const AttentionShape& shape, const void* q,
                                          const void* k, const void* v, const void* dout,
                                          const float* lse, const float* delta, DType type,
                                          void* dq, void* dk, void* dv, const LaunchConfig& launch);

#if defined(__CUDACC__)

// Rows of 16-bit elements staged in shared memory, F features each.
template <int Rows, int F>
struct alignas(16) Tile16 {
  uint16_t row[Rows][F + 8];
};

// The feature width F of the kernels for a head dimension.
template <class Fn>
cudaError_t with_mma_width(int64_t head_dim, Fn&& fn) {
  if (head_dim <= 32) return fn(std::integral_constant<int, 32>{});
  if (head_dim <= 64) return fn(std::integral_constant<int, 64>{});
  return fn(std::integral_constant<int, 128>{});
}

// tile[r][x] = src[r * dim + x] for r < Rows, x < F; zero at r >= rows or
// x >= dim. dim is a multiple of 8 and src 16-byte aligned: whole uint4s.
template <int Rows, int F>
__device__ void stage_rows16(uint16_t (*tile)[F + 8], const uint16_t* src, int64_t rows,
                             int64_t dim) {
  constexpr int kVectors = F / 8;
  for (int e = threadIdx.x; e < Rows * kVectors; e += blockDim.x) {
    const int r = e / kVectors, x = e % kVectors * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < rows && x < dim) value = *reinterpret_cast<const uint4*>(src + r * dim + x);
    *reinterpret_cast<uint4*>(&tile[r][x]) = value;
  }
}

// The calling warp's A fragments of 16 rows of a [*, dim] matrix (rows
// past `rows`, features past dim: zero), F / 16 steps of 16 features.
template <int F>
__device__ void load_row_fragments(uint32_t (&a)[F / 16][4], const uint16_t* src, int64_t rows,
                                   int64_t dim) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kk = 0; kk < F / 16; ++kk)
#pragma unroll
    for (int half = 0; half < 4; ++half) {
      const int r = g + (half % 2) * 8, x = kk * 16 + 2 * t + (half / 2) * 8;
      a[kk][half] = r < rows && x < dim ? load_pair(src + r * dim + x) : 0u;
    }
}

// The A fragment of a 16-row block of shared-memory tile rows [r0, r0 + 16),
// features [x0, x0 + 16).
template <int F>
__device__ __forceinline__ void tile_fragment(uint32_t (&a)[4], const uint16_t (*tile)[F + 8],
                                              int r0, int x0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  a[0] = load_pair(&tile[r0 + g][x0 + 2 * t]);
  a[1] = load_pair(&tile[r0 + g + 8][x0 + 2 * t]);
  a[2] = load_pair(&tile[r0 + g][x0 + 2 * t + 8]);
  a[3] = load_pair(&tile[r0 + g + 8][x0 + 2 * t + 8]);
}

// c += A (16 x 16) times the tile's rows [n0, n0 + 8) transposed (B[x][n]
// = tile[n0 + n][x0 + x]): products with the other side's feature rows.
template <int D, int F>
__device__ __forceinline__ void mma_rows(float (&c)[4], const uint32_t (&a)[4],
                                         const uint16_t (*tile)[F + 8], int n0, int x0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  mma_16x8x16<D>(c, a, load_pair(&tile[n0 + g][x0 + 2 * t]),
                 load_pair(&tile[n0 + g][x0 + 2 * t + 8]));
}

// c += A (16 x 16) times the tile's rows [k0, k0 + 16), features
// [n0, n0 + 8) (B[k][n] = tile[k0 + k][n0 + n]): weights times rows.
template <int D, int F>
__device__ __forceinline__ void mma_columns(float (&c)[4], const uint32_t (&a)[4],
                                            const uint16_t (*tile)[F + 8], int k0, int n0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  mma_16x8x16<D>(c, a, load_pair_strided(&tile[k0 + 2 * t][n0 + g], F + 8),
                 load_pair_strided(&tile[k0 + 2 * t + 8][n0 + g], F + 8));
}

// The A fragment, over 16 columns, of the fp32 results of two neighbouring
// 8-column products (left, right) rounded to 16 bits.
template <int D>
__device__ __forceinline__ void fragment_of(uint32_t (&a)[4], const float (&left)[4],
                                            const float (&right)[4]) {
  a[0] = pack_pair<D>(left[0], left[1]);
  a[1] = pack_pair<D>(left[2], left[3]);
  a[2] = pack_pair<D>(right[0], right[1]);
  a[3] = pack_pair<D>(right[2], right[3]);
}

// acc += W times the tile's rows [0, Keys): W the fp32 results of Keys / 8
// neighbouring products (16 x Keys: weights or score gradients), rounded
// to 16 bits as A fragments, 16 rows of the tile at a time.
template <int D, int F, int Keys>
__device__ __forceinline__ void mma_weights(float (&acc)[F / 8][4], const float (&w)[Keys / 8][4],
                                            const uint16_t (*tile)[F + 8]) {
#pragma unroll
  for (int kk = 0; kk < Keys / 16; ++kk) {
    uint32_t a[4];
    fragment_of<D>(a, w[2 * kk], w[2 * kk + 1]);
#pragma unroll
    for (int nd = 0; nd < F / 8; ++nd) mma_columns<D, F>(acc[nd], a, tile, kk * 16, nd * 8);
  }
}

// Writes the calling warp's 16 x F accumulators as rows [0, rows) of a
// [*, dim] matrix of D (features past dim dropped).
template <int D, int F>
__device__ void store_rows(uint16_t* dst, const float (&acc)[F / 8][4], int64_t rows, int64_t dim,
                           float row_factor0 = 1.0f, float row_factor1 = 1.0f) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nd = 0; nd < F / 8; ++nd) {
    const int x = nd * 8 + 2 * t;
    if (x >= dim) continue;
    if (g < rows)
      *reinterpret_cast<uint32_t*>(dst + g * dim + x) =
          pack_pair<D>(acc[nd][0] * row_factor0, acc[nd][1] * row_factor0);
    if (g + 8 < rows)
      *reinterpret_cast<uint32_t*>(dst + (g + 8) * dim + x) =
          pack_pair<D>(acc[nd][2] * row_factor1, acc[nd][3] * row_factor1);
  }
}

#endif  // __CUDACC__

}  // namespace cuda
}  // namespace ampx::impl
