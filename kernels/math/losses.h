// losses.h -- per-element math of the element-wise losses, in fp32, shared
// by the CPU backend and the CUDA kernels.
#pragma once

#include <cmath>

#include "math/activations.h"
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

// Binary cross-entropy of logit x against target t, in the form that
// neither overflows nor cancels: max(x, 0) - x t + log1p(exp(-|x|)) equals
// -t log sigmoid(x) - (1 - t) log sigmoid(-x), but exp never sees a
// positive argument and the log term stays accurate when it is tiny.
AMPX_HD float bce_with_logits_loss(float x, float t) {
  return (fmaxf(x, 0.0f) - x * t) + log1pf(expf(-fabsf(x)));
}

// d loss / dx = sigmoid(x) - t (d loss / dt is -x).
AMPX_HD float bce_with_logits_grad(float x, float t) { return sigmoid_with_slope(x).value - t; }

}  // namespace math
}  // namespace ampx::impl
