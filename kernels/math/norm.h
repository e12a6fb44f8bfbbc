// norm.h -- the per-element math of layer and batch normalisation, in fp32,
// shared by the CPU backend and the CUDA kernels. The reductions around it
// (a row's or a channel's mean, variance and gradient sums) are the
// backends' own; these functions are what every element then computes.
//
// With xhat = (x - mean) * rstd and y = xhat * w + b, the gradient of the
// input is, per group of n normalised elements (a row for layer norm, a
// channel for batch norm) and with g = dy * w the gradient of xhat,
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
// the two means being the only coupling between the elements of a group.
#pragma once

#include <cmath>

#include "math/hd.h"

namespace ampx::impl {
namespace math {

AMPX_HD float inv_std(float var, float eps) { return 1.0f / sqrtf(var + eps); }

AMPX_HD float normalized(float x, float mean, float rstd) { return (x - mean) * rstd; }

AMPX_HD float norm_output(float xhat, float w, float b) { return xhat * w + b; }

AMPX_HD float norm_input_grad(float g, float xhat, float rstd, float mean_g, float mean_g_xhat) {
  return rstd * ((g - mean_g) - xhat * mean_g_xhat);
}

// torch's running-statistics update (for the variance, `batch` is the
// unbiased variance).
AMPX_HD float running_stat(float running, float batch, float momentum) {
  return momentum * batch + (1.0f - momentum) * running;
}

}  // namespace math
}  // namespace ampx::impl
