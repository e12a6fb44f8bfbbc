// reduce.cu -- the sums of the ops, accumulated in double and rounded once
// to the output type, as the CPU backend does:
//
//   sum_rows  out[c] = sum over r < rows of x[r * cols + c]
//   sum_all   *out   = sum over i < count of x[i]             (F32 out)
//
// Determinism: every addition happens in an order fixed by the shapes and
// the device's resident block count (launch.max_blocks) -- per thread in
// index order, then in fixed trees and in block order -- and never through
// atomics, so the same input gives the same bits on every run.
//
// sum_rows cuts the matrix into tiles of `width` columns (32, or the next
// power of two >= cols when cols is small) by `splits` ranges of rows. A
// block sums one tile of one range: its threads form width columns x
// (256 / width) row lanes, each lane walks every (256 / width)-th row in
// order, and a tree over the lanes in shared memory combines them. With one
// range the block writes out[] directly; otherwise it writes double partials
// (splits x cols) and a second pass adds them in range order per column.
// Splits exist so that tall, narrow matrices (a bias gradient of a few
// columns over many rows) still occupy the whole device.
//
// sum_all: one double partial per block over a stretch (stretch.cuh), read
// in 16-byte packets; a second, single-block pass adds the partials.
//
// Memory traffic: the input is read once; the partials (at most
// max_blocks x 32 doubles for sum_rows, max_blocks for sum_all) are written
// and read once; the output is written once.
#include <cuda_runtime.h>

#include "math/convert.h"
#include "multi_tensor.cuh"
#include "ops_launch.cuh"
#include "stretch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

// Rows per lane, at least, in a range of rows: a range costs 16 bytes of
// partials per column (written, then read again), which this keeps at most
// an eighth of what the range itself reads.
constexpr int64_t kRowsPerLane = 8;

struct RowSumPlan {
  int width;           // columns per tile, a power of two <= 32
  int64_t tiles;       // column tiles
  int64_t splits;      // row ranges
  int64_t split_rows;  // rows per range (the last may have fewer)
};

RowSumPlan plan_row_sum(int64_t rows, int64_t cols, const LaunchConfig& launch) {
  RowSumPlan p{};
  p.width = 1;
  while (p.width < 32 && p.width < cols) p.width *= 2;
  const int64_t lanes = kBlockThreads / p.width;
  p.tiles = (cols + p.width - 1) / p.width;
  const int64_t for_device = launch.max_blocks / p.tiles;
  const int64_t for_rows = (rows + lanes * kRowsPerLane - 1) / (lanes * kRowsPerLane);
  p.splits = for_device < for_rows ? for_device : for_rows;
  if (p.splits < 1) p.splits = 1;
  p.split_rows = (rows + p.splits - 1) / p.splits;
  // Rounding split_rows up may leave trailing ranges empty: drop them.
  if (p.split_rows > 0) p.splits = (rows + p.split_rows - 1) / p.split_rows;
  return p;
}

template <int D, int O>
__global__ void __launch_bounds__(kBlockThreads)
    row_sum_kernel(const Elem<D>* x, int64_t rows, int64_t cols, RowSumPlan plan, Elem<O>* out,
                   double* partials) {
  __shared__ double lane_sums[kBlockThreads];
  const int column_in_tile = static_cast<int>(threadIdx.x) % plan.width;
  const int lane = static_cast<int>(threadIdx.x) / plan.width;
  const int lanes = kBlockThreads / plan.width;
  const int64_t items = plan.tiles * plan.splits;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t split = item / plan.tiles;
    const int64_t col = (item - split * plan.tiles) * plan.width + column_in_tile;
    const int64_t first = split * plan.split_rows;
    const int64_t last = first + plan.split_rows < rows ? first + plan.split_rows : rows;
    double acc = 0.0;
    if (col < cols)
      for (int64_t r = first + lane; r < last; r += lanes) acc += math::load_float<D>(x[r * cols + col]);
    lane_sums[threadIdx.x] = acc;
    __syncthreads();
    for (int half = lanes / 2; half > 0; half /= 2) {
      if (lane < half) lane_sums[threadIdx.x] += lane_sums[threadIdx.x + half * plan.width];
      __syncthreads();
    }
    if (lane == 0 && col < cols) {
      if (plan.splits == 1)
        out[col] = math::store_float<O>(static_cast<float>(lane_sums[column_in_tile]));
      else
        partials[split * cols + col] = lane_sums[column_in_tile];
    }
    // The next item overwrites lane_sums.
    __syncthreads();
  }
}

template <int O>
__global__ void __launch_bounds__(kBlockThreads)
    row_sum_combine_kernel(const double* partials, int64_t splits, int64_t cols, Elem<O>* out) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < cols;
       col += step) {
    double acc = 0.0;
    for (int64_t s = 0; s < splits; ++s) acc += partials[s * cols + col];
    out[col] = math::store_float<O>(static_cast<float>(acc));
  }
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    sum_partials_kernel(const Elem<D>* x, int64_t count, int64_t length, double* partials) {
  const Stretch s = block_stretch(count, length);
  double acc = 0.0;
  for_each_packet<kVector<16, sizeof(Elem<D>)>>(
      s.begin, s.end, vector_head(s.begin, x), [&](int64_t j, auto width) {
        constexpr int W = decltype(width)::value;
        const auto p = load_pack<W>(x + j);
#pragma unroll
        for (int k = 0; k < W; ++k) acc += math::load_float<D>(p.v[k]);
      });
  acc = block_reduce(acc, [](double a, double b) { return a + b; });
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kBlockThreads)
    sum_total_kernel(const double* partials, int64_t count, float* out) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kBlockThreads) acc += partials[i];
  acc = block_reduce(acc, [](double a, double b) { return a + b; });
  if (threadIdx.x == 0) *out = static_cast<float>(acc);
}

}  // namespace

int64_t sum_rows_partials(int64_t rows, int64_t cols, const LaunchConfig& launch) {
  if (cols <= 0) return 0;
  const RowSumPlan p = plan_row_sum(rows, cols, launch);
  return p.splits > 1 ? p.splits * cols : 0;
}

cudaError_t launch_sum_rows(const void* x, DType type, int64_t rows, int64_t cols, void* out,
                            DType out_type, double* partials, const LaunchConfig& launch) {
  if (cols <= 0) return cudaSuccess;
  const RowSumPlan plan = plan_row_sum(rows, cols, launch);
  const int64_t items = plan.tiles * plan.splits;
  const auto blocks =
      static_cast<unsigned int>(items < launch.max_blocks ? items : launch.max_blocks);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return visit_floating(out_type, [&](auto out_tag) {
      constexpr int O = decltype(out_tag)::value;
      const cudaError_t status =
          enqueue(row_sum_kernel<D, O>, blocks, launch, static_cast<const Elem<D>*>(x), rows,
                  cols, plan, static_cast<Elem<O>*>(out), partials);
      if (status != cudaSuccess || plan.splits == 1) return status;
      return enqueue(row_sum_combine_kernel<O>, grid_blocks(cols, launch), launch,
                     static_cast<const double*>(partials), plan.splits, cols,
                     static_cast<Elem<O>*>(out));
    });
  });
}

int64_t sum_all_partials(int64_t count, const LaunchConfig& launch) {
  return count > 0 ? plan_stretches(count, launch).blocks : 0;
}

cudaError_t launch_sum_all(const void* x, DType type, int64_t count, float* out, double* partials,
                           const LaunchConfig& launch) {
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    int64_t blocks = 0;
    if (count > 0) {
      const Stretches st = plan_stretches(count, launch);
      blocks = st.blocks;
      const cudaError_t status = enqueue(sum_partials_kernel<D>, st.blocks, launch,
                                         static_cast<const Elem<D>*>(x), count, st.length, partials);
      if (status != cudaSuccess) return status;
    }
    // With no element the total is the empty sum, 0.
    return enqueue(sum_total_kernel, 1, launch, static_cast<const double*>(partials), blocks, out);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
