// optim.h -- the per-element updates of SGD and Adam/AdamW, in torch.optim's
// exact order, on fp32 values (the master weight and fp32 moments). Shared by
// the CPU backend and the CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "math/hd.h"

namespace ampx::impl {
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
  // The betas as the user gave them: torch forms 1 - beta and 1 - beta^t
  // from the Python (double) values and rounds each result once to fp32;
  // taking 1 - beta after rounding beta to fp32 would lose up to 1.4e-3 of
  // 1 - beta2 at beta2 = 0.99999.
  double beta1;
  double beta2;
  float eps;
  bool amsgrad;
  bool maximize;
  bool decoupled_weight_decay;  // AdamW
};

// What a step needs besides the element's values, computed once per tensor
// from the step count t (>= 1), the group's lr and weight decay, in double
// and rounded once to fp32, so the per-element loop stays fp32 (as torch's
// tensor ops, which receive these as Python floats).
struct AdamStepFactors {
  float beta1;                  // fp32(beta1)
  float one_minus_beta1;        // fp32(1 - beta1)
  float beta2;                  // fp32(beta2)
  float one_minus_beta2;        // fp32(1 - beta2)
  float decay;                  // fp32(1 - lr * weight_decay), AdamW's factor
  float step_size;              // fp32(lr / (1 - beta1^t))
  float bias_correction2_sqrt;  // fp32(sqrt(1 - beta2^t))
};

AMPX_HD AdamStepFactors adam_step_factors(int64_t t, float lr, float weight_decay,
                                          const AdamConfig& c) {
  const double bias_correction1 = 1.0 - pow(c.beta1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - pow(c.beta2, static_cast<double>(t));
  AdamStepFactors f;
  f.beta1 = static_cast<float>(c.beta1);
  f.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
  f.beta2 = static_cast<float>(c.beta2);
  f.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
  f.decay = static_cast<float>(1.0 - static_cast<double>(lr) * static_cast<double>(weight_decay));
  f.step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
  f.bias_correction2_sqrt = static_cast<float>(sqrt(bias_correction2));
  return f;
}

// p: parameter (master); g: gradient (already unscaled); m, v: first and
// second moments; vmax: running max of v (used only with amsgrad). The lr
// enters through f (step_size, decay).
AMPX_HD void adam_update(float& p, float g, float& m, float& v, float& vmax, float weight_decay,
                         const AdamStepFactors& f, const AdamConfig& c) {
  if (c.maximize) g = -g;
  if (weight_decay != 0.0f) {
    if (c.decoupled_weight_decay)
      p *= f.decay;
    else
      g += weight_decay * p;
  }
  m = f.beta1 * m + f.one_minus_beta1 * g;
  v = f.beta2 * v + f.one_minus_beta2 * g * g;
  float v_hat = v;
  if (c.amsgrad) {
    vmax = vmax > v ? vmax : v;
    v_hat = vmax;
  }
  const float denom = sqrtf(v_hat) / f.bias_correction2_sqrt + c.eps;
  p -= f.step_size * m / denom;
}

}  // namespace math
}  // namespace ampx::impl
