// block_ops.h -- per-element math of the Transformer-block ops that the CPU
// backend and the CUDA kernels share: pow with a number exponent, the mask
// test of masked_fill, and the rotation of rotary position embeddings.
#pragma once

#include <cmath>
#include <cstdint>

#include "math/convert.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

// x^p. The exponents models use most are exact: x * x for 2 (powf would
// be within an ulp), sqrt for 0.5; others through powf, whose special
// cases are IEEE's (x^0 == 1 even for NaN).
AMPX_HD float pow_value(float x, float p) {
  if (p == 2.0f) return x * x;
  if (p == 1.0f) return x;
  if (p == 0.5f) return sqrtf(x);
  return powf(x, p);
}

// dy * p * x^(p - 1); 0 for p == 0 (x^0 is constant), as torch.
AMPX_HD float pow_grad(float x, float dy, float p) {
  if (p == 0.0f) return 0.0f;
  if (p == 2.0f) return dy * 2.0f * x;
  if (p == 1.0f) return dy;
  return dy * p * powf(x, p - 1.0f);
}

// Whether mask element i (of dtype kind: DType's value) is set: non-zero,
// NaN included (torch's bool(NaN) is true).
AMPX_HD bool mask_set(const void* mask, int32_t kind, int64_t i) {
  switch (kind) {
    case AMPX_F32: return static_cast<const float*>(mask)[i] != 0.0f;
    case AMPX_F16: return (static_cast<const uint16_t*>(mask)[i] & 0x7fffu) != 0;
    case AMPX_BF16: return (static_cast<const uint16_t*>(mask)[i] & 0x7fffu) != 0;
    case AMPX_I32: return static_cast<const int32_t*>(mask)[i] != 0;
    default: return static_cast<const int64_t*>(mask)[i] != 0;
  }
}

// The rotation of the pair (a, b) by the angle whose cosine and sine are
// c and s (inverse: by minus that angle, the backward pass).
struct Rotated {
  float a, b;
};
AMPX_HD Rotated rotate(float a, float b, float c, float s, bool inverse) {
  if (inverse) s = -s;
  return {a * c - b * s, b * c + a * s};
}

}  // namespace math
}  // namespace ampx::impl
