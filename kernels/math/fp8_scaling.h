// fp8_scaling.h -- Transformer Engine's per-tensor FP8 scaling rules,
// shared by the CPU backend and the CUDA kernels (fp8_scaling.cu).
//
// Delayed scaling (TE's DelayedScaling recipe), at the end of a step, per
// tensor ("slot"), as Transformer Engine's default update does it -- the
// fused CUDA kernel of common/recipe/delayed_scaling.cu
// (amax_and_scale_update_after_reduction, which TE 1.x and 2.x's PyTorch
// recipe runs after the amax reduction) -- rather than TE's older Python
// update:
//   a step amax of 0 (no quantization saw a non-zero value): the history
//     is not rolled and the scale stays as it is;
//   otherwise the step's amax (the largest |x| its quantizations saw)
//     enters a history of the last `len` amaxes, and
//   a     = max over the history taken as fmaxf does (a NaN entry is
//           skipped; an all-NaN history gives 0), or (most_recent) the
//           step's amax;
//   scale = (fp8_max * 2^-margin) / a   when a is finite and > 0 (the
//           scaled maximum is formed first, then divided once),
//           the previous scale             otherwise (a is 0, inf or NaN);
//   an infinite scale (a tiny amax) becomes FLT_MAX; scale_inv = 1 / scale.
// So one overflowing step's NaN amax does not hold a slot's scale for the
// history's length (an inf amax does, as in TE).
//
// Current scaling (TE's Float8CurrentScaling): the scale comes from the
// tensor's own amax just before it is quantized:
//   scale = fp8_max / a, 1 when a is 0 or not finite, FLT_MAX when that
//   is infinite, rounded down to a power of two on request.
//
// amaxes are non-negative floats (or NaN) combined as their bits taken as
// unsigned integers (backend_fp8.h), so the max of a NaN and anything is
// that NaN on every backend, in every order.
#pragma once

#include <cstdint>

#include "math/bits.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

constexpr float kFloatMax = 3.40282346638528859812e+38f;

AMPX_HD float amax_combine(float a, float b) {
  return float_bits(a) >= float_bits(b) ? a : b;
}

AMPX_HD bool finite_positive(float a) {
  const uint32_t bits = float_bits(a);
  return bits != 0u && bits < 0x7f800000u;
}

// 2^margin for 0 <= margin <= 127 (the recipe checks the range).
AMPX_HD float power_of_two(int32_t margin) {
  return bits_float(static_cast<uint32_t>(127 + margin) << 23);
}

// An amax as the history's max compares it, by its bits (non-negative
// floats order as their bits): NaN counts as 0, as fmaxf skips it.
AMPX_HD uint32_t history_amax_bits(float a) {
  const uint32_t bits = float_bits(a);
  return (bits & 0x7fffffffu) > 0x7f800000u ? 0u : bits;
}

// fp8_max * 2^-margin, exact: fp8_max (448 or 57344) divided by a power of
// two stays a normal float for every margin in [0, 127].
AMPX_HD float scaled_max(float fp8_max, int32_t margin) {
  return fp8_max / power_of_two(margin);
}

AMPX_HD float delayed_scale(float amax, float previous, float fp8_max, int32_t margin) {
  if (!finite_positive(amax)) return previous;
  const float scale = scaled_max(fp8_max, margin) / amax;
  return float_bits(scale) == 0x7f800000u ? kFloatMax : scale;
}

AMPX_HD float current_scale(float amax, float fp8_max, bool round_to_power_of_two) {
  if (!finite_positive(amax)) return 1.0f;
  float scale = fp8_max / amax;
  if (float_bits(scale) == 0x7f800000u) scale = kFloatMax;
  // fp8_max / FLT_MAX is still a normal float, so dropping the mantissa
  // bits gives the power of two at or below the scale.
  if (round_to_power_of_two) scale = bits_float(float_bits(scale) & 0xff800000u);
  return scale;
}

}  // namespace math
}  // namespace ampx::impl
