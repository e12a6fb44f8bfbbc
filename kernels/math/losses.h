// losses.h -- per-element math of the element-wise losses, in fp32, shared
// by the CPU backend and the CUDA kernels.
#pragma once

#include <cmath>

#include "math/hd.h"

namespace ampx::impl {
namespace math {

// Cross-entropy with label smoothing and class weights, as torch's: in a
// row labelled y, class c carries the target mass q_c = (1 - eps) w_y
// [c == y] + eps / C * w_c; the row's loss is sum_c q_c (lse - x_c) and its
// gradient g (p_c W - q_c), with W = sum_c q_c.
AMPX_HD float smoothed_target(bool is_label, float w_label, float w_c, float eps,
                              float inv_classes) {
  return (is_label ? (1.0f - eps) * w_label : 0.0f) + eps * inv_classes * w_c;
}

// Squared error of input x against target t: the difference and its square
// each rounded to fp32 once, also for 16-bit inputs (never to their type),
// so that mse_loss's F32 result carries fp32's accuracy.
AMPX_HD float squared_error(float x, float t) {
  const float d = x - t;
  return d * d;
}

// g * d/dx (x - t)^2 = 2 (x - t) g; d/dt is its negative.
AMPX_HD float squared_error_grad(float x, float t, float g) { return 2.0f * (x - t) * g; }

// Binary cross-entropy of logit x against target t with torch's pos_weight
// p (1: none), -[p t log sigmoid(x) + (1 - t) log sigmoid(-x)]. With
// L = log1p(exp(-|x|)), log sigmoid(x) = min(x, 0) - L, it is
//   x >= 0:  x - x t    + (1 + (p - 1) t) L     (= (1 - t) x + ...)
//   x <  0:  -p (x t)   + (1 + (p - 1) t) L
// a form that neither overflows nor cancels (for t in [0, 1], p >= 0): exp
// never sees a positive argument and L stays accurate when it is tiny. For
// p = 1 the operations are those of max(x, 0) - x t + L, bit for bit.
AMPX_HD float bce_with_logits_loss(float x, float t, float p = 1.0f) {
  const float log_weight = 1.0f + (p - 1.0f) * t;
  const float linear = x >= 0.0f ? x - x * t : -(p * (x * t));
  return linear + log_weight * log1pf(expf(-fabsf(x)));
}

// d loss / dx, torch's (1 + (p - 1) t) sigmoid(x) - p t, as
//   x >= 0:  (1 - t) - (1 + (p - 1) t) sigmoid(-x)
//   x <  0:  (1 + (p - 1) t) sigmoid(x) - p t
// so that the sigmoid of the tail, sigmoid(-|x|), is never taken as 1 minus
// a number close to 1 (at x = 30, t = 1 the gradient is -9.4e-14, not 0).
AMPX_HD float bce_with_logits_grad(float x, float t, float p = 1.0f) {
  const float log_weight = 1.0f + (p - 1.0f) * t;
  const float e = expf(-fabsf(x));
  const float tail = e / (1.0f + e);  // sigmoid(-|x|)
  return x >= 0.0f ? (1.0f - t) - log_weight * tail : log_weight * tail - p * t;
}

// d loss / dt with a pos_weight p, torch's log sigmoid(-x) - p log
// sigmoid(x) = (x >= 0 ? -x : -p x) + (p - 1) L. Without one it is -x.
AMPX_HD float bce_with_logits_target_grad(float x, float p) {
  return (x >= 0.0f ? -x : -(p * x)) + (p - 1.0f) * log1pf(expf(-fabsf(x)));
}

// The weighted loss's gradients for one element: g is the output's gradient
// times the reduction's scale and the element's weight.
struct BceGrads {
  float logit;
  float target;
};
AMPX_HD BceGrads bce_with_logits_grads(float x, float t, float p, bool has_pos_weight, float g) {
  return {g * bce_with_logits_grad(x, t, p),
          g * (has_pos_weight ? bce_with_logits_target_grad(x, p) : -x)};
}

}  // namespace math
}  // namespace ampx::impl
