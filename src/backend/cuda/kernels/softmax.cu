// softmax.cu -- softmax and log-softmax of each row of a rows x cols matrix,
// and their backward passes, any floating type, in fp32:
//
//   forward   s = the row's max and exp-sum (math::exp_sum_add, one pass)
//             lp_j = math::log_softmax_value(x_j, s.max, math::exp_sum_log(s))
//             y_j = log ? lp_j : exp(lp_j)
//   backward  r = sum_j dy_j (log) or sum_j dy_j y_j (softmax)
//             dx_j = math::log_softmax_grad(y_j, dy_j, r) or math::softmax_grad(y_j, dy_j, r)
//
// A row belongs to one warp (cols <= kWarpRowCols) or to one block
// (row_reduce.cuh); its statistics are combined in a fixed order, so each
// row's result is the same on every run. The CPU folds a row in one
// sequence instead, so the two agree to the rounding of that reordering
// (a few ulps, growing with cols), not bit for bit. NaN, +-inf and masked
// (-inf) entries follow the shared math exactly as on the CPU.
//
// Memory traffic: forward reads the row twice (the second time mostly from
// L1/L2) and writes it once; backward reads y and dy twice and writes dx
// once. y may be x (in place): the statistics pass is complete, across the
// group, before any element is written, and each element is written by the
// thread that last read it.
#include <cuda_runtime.h>

#include "math/activations.h"
#include "math/convert.h"
#include "multi_tensor.cuh"
#include "ops_launch.cuh"
#include "row_reduce.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

template <int D, int G, bool Log>
__global__ void __launch_bounds__(kBlockThreads)
    softmax_kernel(const Elem<D>* x, Elem<D>* y, int64_t rows, int64_t cols) {
  const RowGroup<G> group;
  for (int64_t r = group.first_row(); r < rows; r += group.row_step()) {
    const Elem<D>* in = x + r * cols;
    Elem<D>* out = y + r * cols;
    const math::ExpSum s = group.template exp_sum<D>(in, cols);
    const float log_sum = math::exp_sum_log(s);
    for (int64_t j = group.lane(); j < cols; j += G) {
      const float lp = math::log_softmax_value(math::load_float<D>(in[j]), s.max, log_sum);
      out[j] = math::store_float<D>(Log ? lp : expf(lp));
    }
  }
}

template <int D, int G, bool Log>
__global__ void __launch_bounds__(kBlockThreads)
    softmax_backward_kernel(const Elem<D>* y, const Elem<D>* dy, Elem<D>* dx, int64_t rows,
                            int64_t cols) {
  const RowGroup<G> group;
  for (int64_t r = group.first_row(); r < rows; r += group.row_step()) {
    const Elem<D>* y_row = y + r * cols;
    const Elem<D>* dy_row = dy + r * cols;
    Elem<D>* dx_row = dx + r * cols;
    float part = 0.0f;
    for (int64_t j = group.lane(); j < cols; j += G) {
      const float g = math::load_float<D>(dy_row[j]);
      part += Log ? g : g * math::load_float<D>(y_row[j]);
    }
    const float reduced = group.sum(part);
    for (int64_t j = group.lane(); j < cols; j += G) {
      const float yj = math::load_float<D>(y_row[j]);
      const float gj = math::load_float<D>(dy_row[j]);
      dx_row[j] = math::store_float<D>(Log ? math::log_softmax_grad(yj, gj, reduced)
                                           : math::softmax_grad(yj, gj, reduced));
    }
  }
}

}  // namespace

cudaError_t launch_softmax(const void* x, void* y, DType type, int64_t rows, int64_t cols, bool log,
                           const LaunchConfig& launch) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return with_row_group(cols, [&](auto group) {
      constexpr int G = decltype(group)::value;
      const auto kernel = log ? softmax_kernel<D, G, true> : softmax_kernel<D, G, false>;
      return enqueue(kernel, row_blocks<G>(rows, launch), launch, static_cast<const Elem<D>*>(x),
                     static_cast<Elem<D>*>(y), rows, cols);
    });
  });
}

cudaError_t launch_softmax_backward(const void* y, const void* dy, void* dx, DType type,
                                    int64_t rows, int64_t cols, bool log,
                                    const LaunchConfig& launch) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return with_row_group(cols, [&](auto group) {
      constexpr int G = decltype(group)::value;
      const auto kernel =
          log ? softmax_backward_kernel<D, G, true> : softmax_backward_kernel<D, G, false>;
      return enqueue(kernel, row_blocks<G>(rows, launch), launch, static_cast<const Elem<D>*>(y),
                     static_cast<const Elem<D>*>(dy), static_cast<Elem<D>*>(dx), rows, cols);
    });
  });
}

}  // namespace cuda
}  // namespace ampx::impl
