// activations.h -- the element-wise math of the neural-net ops, in fp32,
// shared by the CPU backend and the CUDA kernels: activations and their
// derivatives, and the per-row pieces of softmax, log-softmax and
// cross-entropy.
//
// Every activation is a struct with forward(x) and backward(x, dy), so an
// element loop is written once and instantiated per activation.
//
// Conventions:
//  - NaN in, NaN out, forward and backward.
//  - At +-inf forward and derivative give their limits (gelu(-inf) = -0,
//    gelu'(+inf) = 1, ...) rather than the NaN of inf * 0.
//  - -0 follows the formula: gelu(-0) = silu(-0) = tanh(-0) = -0, except
//    relu(-0) = +0 (relu never outputs a negative sign).
//  - backward multiplies, dx = dy * f'(x), except relu's, which selects
//    (dx = x > 0 ? dy : 0), as torch's threshold_backward: an inf or NaN dy
//    where x <= 0 gives 0.
#pragma once

#include <cmath>
#include <limits>

#include "math/exp_erfc.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluTanhCubic = 0.044715f;

// sigmoid(x) and its derivative sigmoid(x) * sigmoid(-x), both from
// e = exp(-|x|) <= 1: nothing overflows, and for large |x| the smaller of
// sigmoid(x) and sigmoid(-x) is e / (1 + e), never 1 minus a number close to
// 1, so the tails of the sigmoid and its derivative keep their relative
// precision.
struct SigmoidSlope {
  float value;
  float slope;
};

AMPX_HD SigmoidSlope sigmoid_with_slope(float x) {
  const float e = expf(-fabsf(x));
  const float large = 1.0f / (1.0f + e);
  const float small = e * large;
  return {x >= 0.0f ? large : small, large * small};
}

// x * g where g -> 0 as x -> -inf: the limit -0 at -inf instead of NaN.
// g == 0 happens for negative x only.
AMPX_HD float times_vanishing(float x, float g) { return g == 0.0f ? -0.0f : x * g; }

// t * slope where slope -> 0 as |t| -> inf: 0 at the infinities instead of
// NaN.
AMPX_HD float slope_term(float t, float slope) { return slope == 0.0f ? 0.0f : t * slope; }

struct Relu {
  AMPX_HD static float forward(float x) { return x > 0.0f || x != x ? x : 0.0f; }
  AMPX_HD static float backward(float x, float dy) {
    if (x > 0.0f) return dy;
    return x != x ? x : 0.0f;
  }
};

// x * Phi(x). 1 + erf(z) cancels for negative z; erfc(-z) is the same value
// with full relative precision, so gelu keeps it far into the left tail.
struct Gelu {
  AMPX_HD static float forward(float x) {
    return times_vanishing(x, 0.5f * erfc_f32(-x * kInvSqrt2));
  }
  // Phi(x) + x * phi(x).
  AMPX_HD static float derivative(float x) {
    const float pdf = kInvSqrt2Pi * exp_f32(-0.5f * x * x);
    return 0.5f * erfc_f32(-x * kInvSqrt2) + slope_term(x, pdf);
  }
  AMPX_HD static float backward(float x, float dy) { return dy * derivative(x); }
};

// torch's approximate='tanh': 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x +
// 0.044715 x^3). As 1 + tanh(u) = 2 sigmoid(2u), this is x * sigmoid(2u),
// which has no cancellation for negative x; the derivative is that of the
// same formula: sigmoid(2u) + x * 2u' * sigmoid'(2u).
struct GeluTanh {
  AMPX_HD static float twice_u(float x) {
    return 2.0f * kSqrt2OverPi * x * (1.0f + kGeluTanhCubic * x * x);
  }
  AMPX_HD static float forward(float x) {
    return times_vanishing(x, sigmoid_with_slope(twice_u(x)).value);
  }
  AMPX_HD static float derivative(float x) {
    const SigmoidSlope s = sigmoid_with_slope(twice_u(x));
    const float twice_du = 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kGeluTanhCubic * x * x);
    return s.value + slope_term(x * twice_du, s.slope);
  }
  AMPX_HD static float backward(float x, float dy) { return dy * derivative(x); }
};

// The derivatives of gelu and gelu_tanh as element-wise functions of their
// own: the create_graph formulas of those activations' backward passes
// (dx = dy * f'(x)) apply them, and their backward passes are the second
// derivatives. gelu'' = phi(x) (2 - x^2); gelu_tanh'' = s' (2 z' + x z'' +
// x z'^2 (1 - 2 s)) with z = 2u, s = sigmoid(z), s' = s (1 - s), z' = 2
// sqrt(2/pi) (1 + 3 * 0.044715 x^2) and z'' = 12 sqrt(2/pi) 0.044715 x.
// Both vanish at +-inf (their limits), not NaN.
struct GeluDerivative {
  AMPX_HD static float forward(float x) { return Gelu::derivative(x); }
  AMPX_HD static float backward(float x, float dy) {
    const float pdf = kInvSqrt2Pi * exp_f32(-0.5f * x * x);
    return dy * slope_term(2.0f - x * x, pdf);
  }
};

struct GeluTanhDerivative {
  AMPX_HD static float forward(float x) { return GeluTanh::derivative(x); }
  AMPX_HD static float backward(float x, float dy) {
    const SigmoidSlope s = sigmoid_with_slope(GeluTanh::twice_u(x));
    const float dz = 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kGeluTanhCubic * x * x);
    const float x_ddz = 12.0f * kSqrt2OverPi * kGeluTanhCubic * x * x;
    const float bracket = 2.0f * dz + x_ddz + x * dz * dz * (1.0f - 2.0f * s.value);
    return dy * slope_term(bracket, s.slope);
  }
};

// x * sigmoid(x); derivative sigmoid(x) + x * sigmoid'(x).
struct Silu {
  AMPX_HD static float forward(float x) {
    return times_vanishing(x, sigmoid_with_slope(x).value);
  }
  AMPX_HD static float derivative(float x) {
    const SigmoidSlope s = sigmoid_with_slope(x);
    return s.value + slope_term(x, s.slope);
  }
  AMPX_HD static float backward(float x, float dy) { return dy * derivative(x); }
};

struct Sigmoid {
  AMPX_HD static float forward(float x) { return sigmoid_with_slope(x).value; }
  AMPX_HD static float backward(float x, float dy) { return dy * sigmoid_with_slope(x).slope; }
};

// tanh' = 1 - tanh^2 rounds to 0 once tanh rounds to 1 (|x| > 9); the same
// value as 4 sigmoid'(2x) keeps its relative precision in the tails.
struct Tanh {
  AMPX_HD static float forward(float x) { return tanhf(x); }
  AMPX_HD static float backward(float x, float dy) {
    return dy * (4.0f * sigmoid_with_slope(2.0f * x).slope);
  }
};

// ---- exp, log, sqrt, rsqrt --------------------------------------------------
// Outside their domains they give what the C library gives (NaN for log,
// sqrt and rsqrt of a negative number; log(0) = -inf, rsqrt(0) = inf), and
// their derivatives follow the formulas written here: log' = 1/x, sqrt' =
// 0.5/sqrt(x), rsqrt' = -0.5 rsqrt(x)^3 (torch's, from the result: inf at
// +0, with -0's sign carried through), exp' = exp(x).

struct Exp {
  AMPX_HD static float forward(float x) { return expf(x); }
  AMPX_HD static float backward(float x, float dy) { return dy * expf(x); }
};

struct Log {
  AMPX_HD static float forward(float x) { return logf(x); }
  AMPX_HD static float backward(float x, float dy) { return dy / x; }
};

struct Sqrt {
  AMPX_HD static float forward(float x) { return sqrtf(x); }
  AMPX_HD static float backward(float x, float dy) { return dy * (0.5f / sqrtf(x)); }
};

// 1 / sqrtf(x), both correctly rounded, rather than CUDA's approximate
// rsqrtf, so that the CPU and the GPU agree.
struct Rsqrt {
  AMPX_HD static float forward(float x) { return 1.0f / sqrtf(x); }
  AMPX_HD static float backward(float x, float dy) {
    const float r = 1.0f / sqrtf(x);
    return dy * (-0.5f * (r * r * r));
  }
};

// ---- rows: softmax, log-softmax, cross-entropy ------------------------------

// A row's running maximum and sum of exp(x - max), in one pass. The sum is
// kept as 1 + rest, the 1 being the maximum's own term: log(sum) is then
// log1p(rest), precise when one element dominates (a confident prediction's
// cross-entropy of 1e-9 is not rounded to 0 by 1 + rest).
struct ExpSum {
  float max = -std::numeric_limits<float>::infinity();
  float rest = 0.0f;  // before any element: 0, and no "1" either
};

AMPX_HD void exp_sum_add(ExpSum& s, float x) {
  if (x > s.max) {
    // Rescales to the new maximum; the old maximum's 1 joins the rest. From
    // the empty state, exp(-inf) = 0 drops the 1 that was never there.
    s.rest = (s.rest + 1.0f) * expf(s.max - x);
    s.max = x;
  } else if (x != -std::numeric_limits<float>::infinity()) {
    // -inf adds nothing (and exp(-inf - -inf) would be NaN); NaN gets here
    // and poisons the sum, so a NaN anywhere gives a NaN row.
    s.rest += expf(x - s.max);
  }
}

// log(sum over the row of exp(x - max)). A row holding +inf has no softmax
// (inf - inf), as one holding only -inf has none (0 / 0): NaN.
AMPX_HD float exp_sum_log(const ExpSum& s) {
  if (s.max == std::numeric_limits<float>::infinity())
    return std::numeric_limits<float>::quiet_NaN();
  return log1pf(s.rest);
}

// log softmax(x) of one element, given the row's max and exp_sum_log.
// softmax is exp of it, so softmax and log-softmax round alike.
AMPX_HD float log_softmax_value(float x, float max, float log_sum) { return (x - max) - log_sum; }

// softmax backward: dx = y * (dy - sum_j dy_j y_j), y the softmax output.
AMPX_HD float softmax_grad(float y, float dy, float dot) { return y * (dy - dot); }

// log-softmax backward: dx = dy - exp(y) * sum_j dy_j, y the log-softmax.
AMPX_HD float log_softmax_grad(float y, float dy, float dy_sum) { return dy - expf(y) * dy_sum; }

// Cross-entropy's dlogit = (p - onehot) * g, from log_p = log softmax. At the
// label, p - 1 = expm1(log_p): no cancellation when p is close to 1.
AMPX_HD float cross_entropy_grad(float log_p, bool is_label, float g) {
  return (is_label ? expm1f(log_p) : expf(log_p)) * g;
}

}  // namespace math
}  // namespace ampx::impl
