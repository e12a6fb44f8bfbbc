// fp8_quantize.cu -- FP8 quantization with a per-tensor scale:
//
//   y[i][j] = fp8(x[i][j] * scale)        (the product in fp32, then
//                                          fp8_cast.cuh's one rounding)
//   y_t[j][i] = y[i][j]                   (optional: the transposed copy
//                                          an FP8 GEMM's TN layout needs)
//   amax = max(amax, max |x[i][j]|)       (optional; in backend_fp8.h's
//                                          order, so NaN wins)
//
// Without y_t, a grid-stride loop over the elements. With it, 32 x 32
// tiles: a block reads a tile coalesced, writes y's row-major bytes, and
// writes y_t's from shared memory, also coalesced. Either way each block
// reduces its amax and folds it in with one atomicMax on the bits.
//
// Memory traffic: reads x once; writes one byte per element per output.
#include <cuda_runtime.h>

#include "fp8_cast.cuh"
#include "fp8_launch.cuh"
#include "math/convert.h"
#include "multi_tensor.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

constexpr int kTile = 32;
constexpr int kTileRowsPerPass = kBlockThreads / kTile;  // 8

__device__ __forceinline__ void fold_block_amax(uint32_t local, float* amax) {
  const uint32_t block_amax = block_reduce(local, [](uint32_t a, uint32_t b) { return a > b ? a : b; });
  if (threadIdx.x == 0 && amax != nullptr) atomicMax(reinterpret_cast<unsigned int*>(amax), block_amax);
}

template <int S, int D>
__global__ void __launch_bounds__(kBlockThreads)
    quantize_kernel(const math::storage_t<S>* __restrict__ x, uint8_t* __restrict__ y,
                    int64_t count, const float* scale, float* amax, bool saturate) {
  const float factor = scale != nullptr ? *scale : 1.0f;
  uint32_t local = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float v = math::load_float<S>(x[i]);
    const uint32_t magnitude = math::float_bits(v) & 0x7fffffffu;
    local = magnitude > local ? magnitude : local;
    if (y != nullptr) y[i] = fp8_from_scaled<D>(v, scale != nullptr, factor, saturate);
  }
  fold_block_amax(local, amax);
}

template <int S, int D>
__global__ void __launch_bounds__(kBlockThreads)
    quantize_transpose_kernel(const math::storage_t<S>* __restrict__ x, uint8_t* __restrict__ y,
                              uint8_t* __restrict__ y_t, int64_t rows, int64_t cols,
                              const float* scale, float* amax, bool saturate) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float factor = scale != nullptr ? *scale : 1.0f;
  const int lane = threadIdx.x % kTile;
  const int first_row = threadIdx.x / kTile;
  const int64_t tile_cols = (cols + kTile - 1) / kTile;
  const int64_t tiles = (rows + kTile - 1) / kTile * tile_cols;
  uint32_t local = 0;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t row0 = t / tile_cols * kTile, col0 = t % tile_cols * kTile;
    for (int r = first_row; r < kTile; r += kTileRowsPerPass) {
      const int64_t row = row0 + r, col = col0 + lane;
      if (row >= rows || col >= cols) continue;
      const float v = math::load_float<S>(x[row * cols + col]);
      const uint32_t magnitude = math::float_bits(v) & 0x7fffffffu;
      local = magnitude > local ? magnitude : local;
      const uint8_t q = fp8_from_scaled<D>(v, scale != nullptr, factor, saturate);
      if (y != nullptr) y[row * cols + col] = q;
      tile[r][lane] = q;
    }
    __syncthreads();
    for (int c = first_row; c < kTile; c += kTileRowsPerPass) {
      const int64_t out_row = col0 + c, out_col = row0 + lane;
      if (out_row < cols && out_col < rows) y_t[out_row * rows + out_col] = tile[lane][c];
    }
    __syncthreads();
  }
  fold_block_amax(local, amax);
}

template <int S, int D>
cudaError_t quantize_as(const Fp8QuantizeArgs& q, const LaunchConfig& launch) {
  const auto* x = static_cast<const math::storage_t<S>*>(q.x);
  auto* y = static_cast<uint8_t*>(q.y);
  if (q.y_t == nullptr)
    return enqueue(quantize_kernel<S, D>, grid_blocks(q.rows * q.cols, launch), launch, x, y,
                   q.rows * q.cols, q.scale, q.amax, q.saturate);
  const int64_t tiles = (q.rows + kTile - 1) / kTile * ((q.cols + kTile - 1) / kTile);
  const unsigned int blocks =
      static_cast<unsigned int>(tiles < launch.max_blocks ? tiles : launch.max_blocks);
  return enqueue(quantize_transpose_kernel<S, D>, blocks, launch, x, y,
                 static_cast<uint8_t*>(q.y_t), q.rows, q.cols, q.scale, q.amax, q.saturate);
}

}  // namespace

cudaError_t launch_fp8_quantize(const Fp8QuantizeArgs& q, const LaunchConfig& launch) {
  if (q.y_type != DType::F8E4M3 && q.y_type != DType::F8E5M2) return cudaErrorInvalidValue;
  return visit_floating(q.x_type, [&](auto tag) {
    constexpr int S = decltype(tag)::value;
    return q.y_type == DType::F8E4M3 ? quantize_as<S, AMPX_F8E4M3>(q, launch)
                                     : quantize_as<S, AMPX_F8E5M2>(q, launch);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
