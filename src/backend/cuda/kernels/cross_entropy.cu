// cross_entropy.cu -- per-row cross-entropy of a rows x cols matrix of
// logits (any floating type) against I32 or I64 class labels, and its
// gradient, in fp32:
//
//   forward   losses[r] = -math::log_softmax_value(x_r[l], s.max, exp_sum_log(s))
//             with s the row's max and exp-sum; 0 where l == ignore_index
//   backward  g = dloss[r * dloss_stride] * scale (read on the device: one
//             scalar for a reduced loss, stride 0, or one per row, stride 1)
//             dx_rj = math::cross_entropy_grad(log_softmax_j, j == l, g);
//             0 for every j where l == ignore_index
//
// With class weights or label smoothing (torch's cross_entropy(weight,
// label_smoothing)):
//
//   q_c = math::smoothed_target(c == l, w_l, w_c, eps, 1 / C),  W = sum_c q_c
//   forward   losses[r] = sum_c q_c (lse - x_c),  row_weights[r] = w_l
//   backward  dx_rc = (p_c W - q_c) * dloss[r * dloss_stride]
//
// Rows are reduced as in softmax.cu (row_reduce.cuh: a warp or a block per
// row, fixed combining order), so results are the same on every run and
// within the rounding of a reordered row sum of the CPU's. Ignored rows are
// never read, so whatever they hold (NaN included) gives a loss of 0, as on
// the CPU. A label that is neither ignored nor in [0, cols) -- the ops
// validate labels first, so only a direct caller can pass one -- gives a NaN
// loss and gradient row rather than a read outside the row.
//
// Memory traffic: forward reads each counted row once and one logit again,
// the labels once, and writes one float per row; backward reads each
// counted row twice (the second time mostly from L1/L2) and writes the
// gradient once.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "math/activations.h"
#include "math/convert.h"
#include "math/losses.h"
#include "multi_tensor.cuh"
#include "ops_launch.cuh"
#include "row_reduce.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <int D, class Label, int G>
__global__ void __launch_bounds__(kBlockThreads)
    cross_entropy_kernel(const Elem<D>* logits, const Label* labels, int64_t rows, int64_t cols,
                         int64_t ignore_index, float* losses) {
  const RowGroup<G> group;
  for (int64_t r = group.first_row(); r < rows; r += group.row_step()) {
    const int64_t label = labels[r];
    if (label == ignore_index || label < 0 || label >= cols) {
      if (group.lane() == 0) losses[r] = label == ignore_index ? 0.0f : kNaN;
      continue;
    }
    const Elem<D>* row = logits + r * cols;
    const math::ExpSum s = group.template exp_sum<D>(row, cols);
    if (group.lane() == 0)
      losses[r] = -math::log_softmax_value(math::load_float<D>(row[label]), s.max,
                                           math::exp_sum_log(s));
  }
}

template <int D, class Label, int G>
__global__ void __launch_bounds__(kBlockThreads)
    cross_entropy_backward_kernel(const Elem<D>* logits, const Label* labels, int64_t rows,
                                  int64_t cols, int64_t ignore_index, const float* dloss,
                                  int64_t dloss_stride, float scale, Elem<D>* dlogits) {
  const RowGroup<G> group;
  for (int64_t r = group.first_row(); r < rows; r += group.row_step()) {
    const int64_t label = labels[r];
    Elem<D>* dx = dlogits + r * cols;
    if (label == ignore_index || label < 0 || label >= cols) {
      const Elem<D> fill = math::store_float<D>(label == ignore_index ? 0.0f : kNaN);
      for (int64_t j = group.lane(); j < cols; j += G) dx[j] = fill;
      continue;
    }
    const Elem<D>* row = logits + r * cols;
    const math::ExpSum s = group.template exp_sum<D>(row, cols);
    const float log_sum = math::exp_sum_log(s);
    const float g = dloss[r * dloss_stride] * scale;
    for (int64_t j = group.lane(); j < cols; j += G) {
      const float lp = math::log_softmax_value(math::load_float<D>(row[j]), s.max, log_sum);
      dx[j] = math::store_float<D>(math::cross_entropy_grad(lp, j == label, g));
    }
  }
}

__device__ __forceinline__ float weight_of(const float* w, int64_t c) { return w ? w[c] : 1.0f; }

template <int D, class Label, int G>
__global__ void __launch_bounds__(kBlockThreads)
    cross_entropy_smoothed_kernel(const Elem<D>* logits, const Label* labels, int64_t rows,
                                  int64_t cols, int64_t ignore_index, const float* weight,
                                  float eps, float* losses, float* row_weights) {
  const RowGroup<G> group;
  const float inv_classes = 1.0f / static_cast<float>(cols);
  for (int64_t r = group.first_row(); r < rows; r += group.row_step()) {
    const int64_t label = labels[r];
    if (label == ignore_index || label < 0 || label >= cols) {
      if (group.lane() == 0) {
        losses[r] = label == ignore_index ? 0.0f : kNaN;
        row_weights[r] = label == ignore_index ? 0.0f : kNaN;
      }
      continue;
    }
    const Elem<D>* row = logits + r * cols;
    const math::ExpSum s = group.template exp_sum<D>(row, cols);
    const float log_sum = math::exp_sum_log(s), wl = weight_of(weight, label);
    float part = 0.0f;
    for (int64_t j = group.lane(); j < cols; j += G)
      part -= math::smoothed_target(j == label, wl, weight_of(weight, j), eps, inv_classes) *
              math::log_softmax_value(math::load_float<D>(row[j]), s.max, log_sum);
    const float loss = group.sum(part);
    if (group.lane() == 0) {
      losses[r] = loss;
      row_weights[r] = wl;
    }
  }
}

template <int D, class Label, int G>
__global__ void __launch_bounds__(kBlockThreads)
    cross_entropy_smoothed_backward_kernel(const Elem<D>* logits, const Label* labels,
                                           int64_t rows, int64_t cols, int64_t ignore_index,
                                           const float* weight, float eps, const float* dloss,
                                           int64_t dloss_stride, Elem<D>* dlogits) {
  const RowGroup<G> group;
  const float inv_classes = 1.0f / static_cast<float>(cols);
  for (int64_t r = group.first_row(); r < rows; r += group.row_step()) {
    const int64_t label = labels[r];
    Elem<D>* dx = dlogits + r * cols;
    if (label == ignore_index || label < 0 || label >= cols) {
      const Elem<D> fill = math::store_float<D>(label == ignore_index ? 0.0f : kNaN);
      for (int64_t j = group.lane(); j < cols; j += G) dx[j] = fill;
      continue;
    }
    const Elem<D>* row = logits + r * cols;
    const math::ExpSum s = group.template exp_sum<D>(row, cols);
    const float log_sum = math::exp_sum_log(s), wl = weight_of(weight, label);
    float part = 0.0f;
    for (int64_t j = group.lane(); j < cols; j += G)
      part += math::smoothed_target(j == label, wl, weight_of(weight, j), eps, inv_classes);
    const float mass = group.sum(part);
    const float g = dloss[r * dloss_stride];
    for (int64_t j = group.lane(); j < cols; j += G) {
      const float q = math::smoothed_target(j == label, wl, weight_of(weight, j), eps, inv_classes);
      const float p = expf(math::log_softmax_value(math::load_float<D>(row[j]), s.max, log_sum));
      dx[j] = math::store_float<D>((p * mass - q) * g);
    }
  }
}

// Calls fn(Label{}) with the label element type (int32_t or int64_t).
template <class Fn>
cudaError_t with_label_type(DType label_type, Fn&& fn) {
  switch (label_type) {
    case DType::I32: return fn(int32_t{});
    case DType::I64: return fn(int64_t{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_cross_entropy(const void* logits, DType type, const void* labels,
                                 DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                                 float* losses, const LaunchConfig& launch) {
  if (rows <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return with_label_type(label_type, [&](auto label) {
      using Label = decltype(label);
      return with_row_group(cols, [&](auto group) {
        constexpr int G = decltype(group)::value;
        return enqueue(cross_entropy_kernel<D, Label, G>, row_blocks<G>(rows, launch), launch,
                       static_cast<const Elem<D>*>(logits), static_cast<const Label*>(labels),
                       rows, cols, ignore_index, losses);
      });
    });
  });
}

cudaError_t launch_cross_entropy_backward(const void* logits, DType type, const void* labels,
                                          DType label_type, int64_t rows, int64_t cols,
                                          int64_t ignore_index, const float* dloss,
                                          int64_t dloss_stride, float scale, void* dlogits,
                                          const LaunchConfig& launch) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return with_label_type(label_type, [&](auto label) {
      using Label = decltype(label);
      return with_row_group(cols, [&](auto group) {
        constexpr int G = decltype(group)::value;
        return enqueue(cross_entropy_backward_kernel<D, Label, G>, row_blocks<G>(rows, launch),
                       launch, static_cast<const Elem<D>*>(logits),
                       static_cast<const Label*>(labels), rows, cols, ignore_index, dloss,
                       dloss_stride, scale, static_cast<Elem<D>*>(dlogits));
      });
    });
  });
}

cudaError_t launch_cross_entropy_smoothed(const void* logits, DType type, const void* labels,
                                          DType label_type, int64_t rows, int64_t cols,
                                          int64_t ignore_index, const float* class_weight,
                                          float smoothing, float* losses, float* row_weights,
                                          const LaunchConfig& launch) {
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return with_label_type(label_type, [&](auto label) {
      using Label = decltype(label);
      return with_row_group(cols, [&](auto group) {
        constexpr int G = decltype(group)::value;
        return enqueue(cross_entropy_smoothed_kernel<D, Label, G>, row_blocks<G>(rows, launch),
                       launch, static_cast<const Elem<D>*>(logits),
                       static_cast<const Label*>(labels), rows, cols, ignore_index, class_weight,
                       smoothing, losses, row_weights);
      });
    });
  });
}

cudaError_t launch_cross_entropy_smoothed_backward(const void* logits, DType type,
                                                   const void* labels, DType label_type,
                                                   int64_t rows, int64_t cols,
                                                   int64_t ignore_index, const float* class_weight,
                                                   float smoothing, const float* dloss,
                                                   int64_t dloss_stride, void* dlogits,
                                                   const LaunchConfig& launch) {
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return with_label_type(label_type, [&](auto label) {
      using Label = decltype(label);
      return with_row_group(cols, [&](auto group) {
        constexpr int G = decltype(group)::value;
        return enqueue(cross_entropy_smoothed_backward_kernel<D, Label, G>,
                       row_blocks<G>(rows, launch), launch, static_cast<const Elem<D>*>(logits),
                       static_cast<const Label*>(labels), rows, cols, ignore_index, class_weight,
                       smoothing, dloss, dloss_stride, static_cast<Elem<D>*>(dlogits));
      });
    });
  });
}

}  // namespace cuda
}  // namespace ampx::impl
