// cpu_loss.cpp -- per-element losses and their gradients on the CPU, around
// the fp32 math of kernels/math/losses.h.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_dispatch.h"
#include "math/losses.h"

namespace ampx::impl {
namespace cpu {
namespace {

// Elements per task: exp and log1p make ~10 ns an element.
constexpr int64_t kGrain = int64_t{1} << 14;

// A weight of BceWeights at element i (1 where there is none).
inline float weight_at(const float* w, int64_t period, int64_t i) {
  return w ? w[i % period] : 1.0f;
}

}  // namespace

void bce_with_logits(ThreadPool& pool, const void* logits, const void* targets, DType type,
                     int64_t count, float* losses, const BceWeights& weights) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const math::storage_t<D>*>(logits);
    const auto* t = static_cast<const math::storage_t<D>*>(targets);
    pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        losses[i] = weight_at(weights.weight, weights.weight_period, i) *
                    math::bce_with_logits_loss(
                        math::load_float<D>(x[i]), math::load_float<D>(t[i]),
                        weight_at(weights.pos_weight, weights.pos_weight_period, i));
    });
  });
}

void bce_with_logits_backward(ThreadPool& pool, const void* logits, const void* targets,
                              DType type, int64_t count, const BceWeights& weights,
                              const float* dloss, int64_t dloss_stride, float scale,
                              void* d_logits, void* d_targets) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    using Elem = math::storage_t<D>;
    const auto* x = static_cast<const Elem*>(logits);
    const auto* t = static_cast<const Elem*>(targets);
    auto* dx = static_cast<Elem*>(d_logits);
    auto* dt = static_cast<Elem*>(d_targets);
    const bool has_pos_weight = weights.pos_weight != nullptr;
    pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float g =
            dloss[i * dloss_stride] * scale * weight_at(weights.weight, weights.weight_period, i);
        const math::BceGrads d = math::bce_with_logits_grads(
            math::load_float<D>(x[i]), math::load_float<D>(t[i]),
            weight_at(weights.pos_weight, weights.pos_weight_period, i), has_pos_weight, g);
        if (dx) dx[i] = math::store_float<D>(d.logit);
        if (dt) dt[i] = math::store_float<D>(d.target);
      }
    });
  });
}

void mse_loss(ThreadPool& pool, const void* input, const void* target, DType type, int64_t count,
              float* losses) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const math::storage_t<D>*>(input);
    const auto* t = static_cast<const math::storage_t<D>*>(target);
    pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        losses[i] = math::squared_error(math::load_float<D>(x[i]), math::load_float<D>(t[i]));
    });
  });
}

void mse_loss_backward(ThreadPool& pool, const void* input, const void* target, DType type,
                       int64_t count, const float* dloss, int64_t dloss_stride, float scale,
                       void* d_input, void* d_target) {
  visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    using Elem = math::storage_t<D>;
    const auto* x = static_cast<const Elem*>(input);
    const auto* t = static_cast<const Elem*>(target);
    auto* dx = static_cast<Elem*>(d_input);
    auto* dt = static_cast<Elem*>(d_target);
    pool.parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float g = math::squared_error_grad(math::load_float<D>(x[i]),
                                                 math::load_float<D>(t[i]),
                                                 dloss[i * dloss_stride] * scale);
        if (dx) dx[i] = math::store_float<D>(g);
        if (dt) dt[i] = math::store_float<D>(-g);
      }
    });
  });
}

}  // namespace cpu
}  // namespace ampx::impl
