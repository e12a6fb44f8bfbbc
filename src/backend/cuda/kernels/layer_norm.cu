// layer_norm.cu -- layer normalisation of each row of a rows x cols matrix
// (any floating type) and its gradients, and RMS normalisation (not
// centered: mean = 0 throughout, var the mean of squares, and no mean-of-g
// term in dx), as the CPU backend computes them
// (backend/cpu/cpu_norm.cpp): statistics and gradient sums in double around
// the fp32 per-element math of kernels/math/norm.h.
//
//   forward   mean = sum_j x_j / cols                       (double)
//             var  = sum_j (x_j - mean)^2 / cols            (double, second pass:
//                                                            no E[x^2] - mean^2 cancellation)
//             m = float(mean), rs = math::inv_std(float(var), eps)
//             y_j = math::norm_output(math::normalized(x_j, m, rs), w_j, b_j)
//   backward  g_j = dy_j * w_j, xhat_j = math::normalized(x_j, mean, rstd)
//             dx_j = math::norm_input_grad(g_j, xhat_j, rstd,
//                        float(sum g / cols), float(sum g xhat / cols))
//             dweight_j = sum_r dy_rj xhat_rj, dbias_j = sum_r dy_rj  (double, over rows)
//
// Rows: a row belongs to one warp (cols <= kWarpRowCols) or to one block
// (row_reduce.cuh). Each thread folds every G-th element in index order in
// double; the G partial sums are combined by a butterfly of shuffles, which
// leaves the same bits in every lane, then (block rows) the 8 warps' totals
// in warp order. The CPU folds a row in one sequence, so the two agree to
// the rounding of a reordered double sum -- far below fp32 -- except where
// that difference crosses a rounding boundary of the final double -> float
// conversion (one fp32 ulp of mean or rstd).
//
// Parameter gradients: sums down the columns, cut as reduce.cu's sum_rows
// cuts them: tiles of `width` columns (32, or the next power of two >=
// cols) by `splits` ranges of rows. A block's threads are width columns x
// (256 / width) row lanes; each lane walks every (256 / width)-th row of
// the range in order, a tree over the lanes in shared memory combines them.
// With one range the block writes dweight/dbias directly; otherwise it
// writes double partials, scratch = [2][splits][cols] (dweight's, then
// dbias's), and a second kernel adds them per column in range order.
// Every order is fixed by the shapes and launch.max_blocks: the same inputs
// give the same bits on every run.
//
// The parameter gradients are computed before dx, so dx may alias dy or x
// (each dx element is written by the thread that last read it, after its
// row's sums are complete across the group).
//
// Memory traffic: forward reads each row three times (the second and third
// mostly from L1/L2) and writes it once, plus 8 bytes of statistics per row;
// backward reads x and dy twice for dx and once more for the parameter
// gradients, writes dx once, and writes and reads 16 bytes per column and
// range of partials (at most about max_blocks x 32 x 16 bytes).
#include <cuda_runtime.h>

#include <cstdint>

#include "math/convert.h"
#include "math/norm.h"
#include "multi_tensor.cuh"
#include "nn_launch.cuh"
#include "row_reduce.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

// The totals of every thread's v[0..N) over the row group, in every thread
// of the group. The xor butterfly adds the same two values in each pair of
// lanes (addition is commutative), so all lanes end with identical bits;
// block groups then add the 8 warps' totals in warp order.
template <int G, int N>
__device__ __forceinline__ void group_sum(double (&v)[N]) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
#pragma unroll
    for (int q = 0; q < N; ++q) v[q] += __shfl_xor_sync(kFullWarp, v[q], offset);
  if constexpr (G == kBlockThreads) {
    constexpr int kWarps = kBlockThreads / 32;
    __shared__ double warp_total[N][kWarps];
    // The previous call's readers are past this barrier.
    __syncthreads();
    if (threadIdx.x % 32 == 0)
#pragma unroll
      for (int q = 0; q < N; ++q) warp_total[q][threadIdx.x / 32] = v[q];
    __syncthreads();
#pragma unroll
    for (int q = 0; q < N; ++q) {
      double t = warp_total[q][0];
      for (int w = 1; w < kWarps; ++w) t += warp_total[q][w];
      v[q] = t;
    }
  }
}

template <int D>
__device__ __forceinline__ float load_or(const Elem<D>* p, int64_t j, float fallback) {
  return p ? math::load_float<D>(p[j]) : fallback;
}

template <int D, int G, bool Centered>
__global__ void __launch_bounds__(kBlockThreads)
    layer_norm_kernel(const Elem<D>* x, const Elem<D>* weight, const Elem<D>* bias, int64_t rows,
                      int64_t cols, float eps, Elem<D>* y, float* mean, float* rstd) {
  const RowGroup<G> group;
  const auto n = static_cast<double>(cols);
  for (int64_t r = group.first_row(); r < rows; r += group.row_step()) {
    const Elem<D>* in = x + r * cols;
    Elem<D>* out = y + r * cols;
    double mean_d = 0.0;
    if constexpr (Centered) {
      double sum[1] = {0.0};
      for (int64_t j = group.lane(); j < cols; j += G) sum[0] += math::load_float<D>(in[j]);
      group_sum<G>(sum);
      mean_d = sum[0] / n;
    }
    double squares[1] = {0.0};
    for (int64_t j = group.lane(); j < cols; j += G) {
      const double d = math::load_float<D>(in[j]) - mean_d;
      squares[0] += d * d;
    }
    group_sum<G>(squares);
    const auto m = static_cast<float>(mean_d);
    const float rs = math::inv_std(static_cast<float>(squares[0] / n), eps);
    if (group.lane() == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    for (int64_t j = group.lane(); j < cols; j += G) {
      const float xhat = math::normalized(math::load_float<D>(in[j]), m, rs);
      out[j] = math::store_float<D>(
          math::norm_output(xhat, load_or<D>(weight, j, 1.0f), load_or<D>(bias, j, 0.0f)));
    }
  }
}

template <int D, int G, bool Centered>
__global__ void __launch_bounds__(kBlockThreads)
    layer_norm_dx_kernel(const Elem<D>* x, const Elem<D>* dy, const Elem<D>* weight, int64_t rows,
                         int64_t cols, const float* mean, const float* rstd, Elem<D>* dx) {
  const RowGroup<G> group;
  const auto n = static_cast<double>(cols);
  for (int64_t r = group.first_row(); r < rows; r += group.row_step()) {
    const Elem<D>* x_row = x + r * cols;
    const Elem<D>* dy_row = dy + r * cols;
    Elem<D>* dx_row = dx + r * cols;
    const float m = mean[r], rs = rstd[r];
    double sums[2] = {0.0, 0.0};  // g, g * xhat
    for (int64_t j = group.lane(); j < cols; j += G) {
      const float g = math::load_float<D>(dy_row[j]) * load_or<D>(weight, j, 1.0f);
      const float xhat = math::normalized(math::load_float<D>(x_row[j]), m, rs);
      sums[0] += g;
      sums[1] += static_cast<double>(g) * xhat;
    }
    group_sum<G>(sums);
    const auto mean_g = Centered ? static_cast<float>(sums[0] / n) : 0.0f;
    const auto mean_g_xhat = static_cast<float>(sums[1] / n);
    for (int64_t j = group.lane(); j < cols; j += G) {
      const float g = math::load_float<D>(dy_row[j]) * load_or<D>(weight, j, 1.0f);
      const float xhat = math::normalized(math::load_float<D>(x_row[j]), m, rs);
      dx_row[j] = math::store_float<D>(math::norm_input_grad(g, xhat, rs, mean_g, mean_g_xhat));
    }
  }
}

// Rows per lane, at least, in a range of rows (as in reduce.cu): a range
// costs 32 bytes of partials per column (written, then read again), which
// this keeps well below what the range itself reads.
constexpr int64_t kRowsPerLane = 8;

struct ColumnPlan {
  int width;           // columns per tile, a power of two <= 32
  int64_t tiles;       // column tiles
  int64_t splits;      // row ranges
  int64_t split_rows;  // rows per range (the last may have fewer)
};

ColumnPlan plan_columns(int64_t rows, int64_t cols, const LaunchConfig& launch) {
  ColumnPlan p{};
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

// dweight_j = sum_r dy_rj xhat_rj and dbias_j = sum_r dy_rj over one range
// of rows per item; either output may be nullptr (dweight's then reads
// neither x nor the statistics).
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    layer_norm_param_kernel(const Elem<D>* x, const Elem<D>* dy, int64_t rows, int64_t cols,
                            const float* mean, const float* rstd, ColumnPlan plan,
                            Elem<D>* dweight, Elem<D>* dbias, double* partials) {
  __shared__ double lane_w[kBlockThreads], lane_b[kBlockThreads];
  const bool want_w = dweight != nullptr;
  const int column_in_tile = static_cast<int>(threadIdx.x) % plan.width;
  const int lane = static_cast<int>(threadIdx.x) / plan.width;
  const int lanes = kBlockThreads / plan.width;
  const int64_t items = plan.tiles * plan.splits;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t split = item / plan.tiles;
    const int64_t col = (item - split * plan.tiles) * plan.width + column_in_tile;
    const int64_t first = split * plan.split_rows;
    const int64_t last = first + plan.split_rows < rows ? first + plan.split_rows : rows;
    double acc_w = 0.0, acc_b = 0.0;
    if (col < cols) {
      for (int64_t r = first + lane; r < last; r += lanes) {
        const int64_t at = r * cols + col;
        const double g = math::load_float<D>(dy[at]);
        if (want_w) acc_w += g * math::normalized(math::load_float<D>(x[at]), mean[r], rstd[r]);
        acc_b += g;
      }
    }
    lane_w[threadIdx.x] = acc_w;
    lane_b[threadIdx.x] = acc_b;
    __syncthreads();
    for (int half = lanes / 2; half > 0; half /= 2) {
      if (lane < half) {
        lane_w[threadIdx.x] += lane_w[threadIdx.x + half * plan.width];
        lane_b[threadIdx.x] += lane_b[threadIdx.x + half * plan.width];
      }
      __syncthreads();
    }
    if (lane == 0 && col < cols) {
      if (plan.splits == 1) {
        const double w = lane_w[column_in_tile], b = lane_b[column_in_tile];
        if (dweight) dweight[col] = math::store_float<D>(static_cast<float>(w));
        if (dbias) dbias[col] = math::store_float<D>(static_cast<float>(b));
      } else {
        partials[split * cols + col] = lane_w[column_in_tile];
        partials[(plan.splits + split) * cols + col] = lane_b[column_in_tile];
      }
    }
    // The next item overwrites lane_w and lane_b.
    __syncthreads();
  }
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    layer_norm_param_combine_kernel(const double* partials, int64_t splits, int64_t cols,
                                    Elem<D>* dweight, Elem<D>* dbias) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < cols;
       col += step) {
    double acc_w = 0.0, acc_b = 0.0;
    for (int64_t s = 0; s < splits; ++s) {
      acc_w += partials[s * cols + col];
      acc_b += partials[(splits + s) * cols + col];
    }
    if (dweight) dweight[col] = math::store_float<D>(static_cast<float>(acc_w));
    if (dbias) dbias[col] = math::store_float<D>(static_cast<float>(acc_b));
  }
}

}  // namespace

cudaError_t launch_layer_norm(const void* x, const void* weight, const void* bias, DType type,
                              int64_t rows, int64_t cols, float eps, void* y, float* mean,
                              float* rstd, bool centered, const LaunchConfig& launch) {
  // cols == 0 runs: like the CPU, each row's statistics are then 0 / 0.
  if (rows <= 0 || cols < 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return with_row_group(cols, [&](auto group) {
      constexpr int G = decltype(group)::value;
      const auto kernel = centered ? layer_norm_kernel<D, G, true> : layer_norm_kernel<D, G, false>;
      return enqueue(kernel, row_blocks<G>(rows, launch), launch,
                     static_cast<const Elem<D>*>(x), static_cast<const Elem<D>*>(weight),
                     static_cast<const Elem<D>*>(bias), rows, cols, eps, static_cast<Elem<D>*>(y),
                     mean, rstd);
    });
  });
}

size_t layer_norm_backward_scratch_bytes(int64_t rows, int64_t cols, const LaunchConfig& launch) {
  if (rows < 0 || cols <= 0) return 0;
  const ColumnPlan p = plan_columns(rows, cols, launch);
  return p.splits > 1 ? static_cast<size_t>(2 * p.splits * cols) * sizeof(double) : 0;
}

cudaError_t launch_layer_norm_backward(const void* x, const void* dy, const void* weight,
                                       DType type, int64_t rows, int64_t cols, const float* mean,
                                       const float* rstd, void* dx, void* dweight, void* dbias,
                                       bool centered, void* scratch, const LaunchConfig& launch) {
  if (rows < 0 || cols <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* in = static_cast<const Elem<D>*>(x);
    const auto* grad_out = static_cast<const Elem<D>*>(dy);
    // With no rows the parameter gradients are empty sums, 0, as on the CPU.
    if (dweight || dbias) {
      const ColumnPlan plan = plan_columns(rows, cols, launch);
      const int64_t items = plan.tiles * plan.splits;
      const auto blocks =
          static_cast<unsigned int>(items < launch.max_blocks ? items : launch.max_blocks);
      auto* partials = static_cast<double*>(scratch);
      cudaError_t status =
          enqueue(layer_norm_param_kernel<D>, blocks, launch, in, grad_out, rows, cols, mean, rstd,
                  plan, static_cast<Elem<D>*>(dweight), static_cast<Elem<D>*>(dbias), partials);
      if (status == cudaSuccess && plan.splits > 1)
        status = enqueue(layer_norm_param_combine_kernel<D>, grid_blocks(cols, launch), launch,
                         static_cast<const double*>(partials), plan.splits, cols,
                         static_cast<Elem<D>*>(dweight), static_cast<Elem<D>*>(dbias));
      if (status != cudaSuccess) return status;
    }
    if (!dx || rows == 0) return cudaSuccess;
    return with_row_group(cols, [&](auto group) {
      constexpr int G = decltype(group)::value;
      const auto kernel =
          centered ? layer_norm_dx_kernel<D, G, true> : layer_norm_dx_kernel<D, G, false>;
      return enqueue(kernel, row_blocks<G>(rows, launch), launch, in, grad_out,
                     static_cast<const Elem<D>*>(weight), rows, cols, mean, rstd,
                     static_cast<Elem<D>*>(dx));
    });
  });
}

}  // namespace cuda
}  // namespace ampx::impl
