// optim.h -- the per-element updates of SGD and Adam/AdamW, in torch.optim's
// exact order, on fp32 values (the master weight and fp32 moments). Shared by
// the CPU backend and the CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "math/hd.h"

namespace ampx {
namespace math {

struct SgdConfig {
  float momentum;
  float dampening;
  bool nesterov;
  bool maximize;
};

// p: parameter (master); g: gradient (already unscaled); buf: momentum
// buffer (unused when momentum == 0); first: this is the first step taken
// for this parameter, which initialises the buffer with g.
AMPX_HD void sgd_update(float& p, float g, float& buf, bool first, float lr, float weight_decay,
                        const SgdConfig& c) {
  if (c.maximize) g = -g;
  if (weight_decay != 0.0f) g += weight_decay * p;
  if (c.momentum != 0.0f) {
    buf = first ? g : c.momentum * buf + (1.0f - c.dampening) * g;
    g = c.nesterov ? g + c.momentum * buf : buf;
  }
  p -= lr * g;
}

struct AdamConfig {
  float beta1;
  float beta2;
  float eps;
  bool amsgrad;
  bool maximize;
  bool decoupled_weight_decay;  // AdamW
};

// What a step needs from the step count t (>= 1), computed once per tensor
// rather than per element, in double.
struct AdamStepFactors {
  float step_size;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

AMPX_HD AdamStepFactors adam_step_factors(int64_t t, float lr, const AdamConfig& c) {
  const double bias_correction1 = 1.0 - pow(static_cast<double>(c.beta1), static_cast<double>(t));
  const double bias_correction2 = 1.0 - pow(static_cast<double>(c.beta2), static_cast<double>(t));
  AdamStepFactors f;
  f.step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
  f.bias_correction2_sqrt = static_cast<float>(sqrt(bias_correction2));
  return f;
}

// p: parameter (master); g: gradient (already unscaled); m, v: first and
// second moments; vmax: running max of v (used only with amsgrad).
AMPX_HD void adam_update(float& p, float g, float& m, float& v, float& vmax, float lr,
                         float weight_decay, const AdamStepFactors& f, const AdamConfig& c) {
  if (c.maximize) g = -g;
  if (weight_decay != 0.0f) {
    if (c.decoupled_weight_decay)
      p *= 1.0f - lr * weight_decay;
    else
      g += weight_decay * p;
  }
  m = c.beta1 * m + (1.0f - c.beta1) * g;
  v = c.beta2 * v + (1.0f - c.beta2) * g * g;
  float v_hat = v;
  if (c.amsgrad) {
    vmax = vmax > v ? vmax : v;
    v_hat = vmax;
  }
  const float denom = sqrtf(v_hat) / f.bias_correction2_sqrt + c.eps;
  p -= f.step_size * m / denom;
}

}  // namespace math
}  // namespace ampx
