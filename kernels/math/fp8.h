// fp8.h -- the two 8-bit floating-point formats of FP8 training, bit-exact.
//
//   E4M3 (OCP "E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
//        infinities; S.1111.111 is NaN, so the largest finite value is
//        1.75 * 2^8 = 448 (0x7e); smallest subnormal 2^-9.
//   E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-style:
//        S.11111.00 is infinity, S.11111.xx (xx != 0) NaN; largest finite
//        1.75 * 2^15 = 57344 (0x7b); smallest subnormal 2^-16.
//
// float -> FP8 rounds to nearest, ties to even, and keeps subnormals. A
// magnitude that rounds beyond the largest finite value either saturates
// to it (`saturate`: what Transformer Engine's casts and cuda_fp8.h's
// __NV_SATFINITE do, infinities included) or overflows (E4M3: to NaN, which
// is all it has; E5M2: to infinity), as __NV_NOSAT. NaN becomes the NaN
// 0x7f with the input's sign (as torch's casts; cuda_fp8.h would drop the
// sign, so the CUDA kernels handle NaN before calling it).
//
// FP8 -> float is exact. NaN keeps its sign and mantissa bits, shifted into
// the top of float's mantissa with the quiet bit set -- the bits torch
// decodes to (for E5M2 also what convert.h's f16 decoding gives for the
// FP8 byte as the top half of an f16).
//
// One definition shared by the CPU backend and the CUDA kernels' decoding
// (the kernels encode with cuda_fp8.h's intrinsics, checked against this).
#pragma once

#include <cstdint>

#include "math/bits.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

// The formats' constants, for the templates below and the vector code of
// src/core/convert_bulk.cpp.
struct Fp8E4M3 {
  static constexpr int kMantissaBits = 3;
  static constexpr int kBias = 7;
  static constexpr bool kHasInfinity = false;
  static constexpr uint32_t kMaxCode = 0x7eu;        // 448
  static constexpr uint32_t kOverflowCode = 0x7fu;   // NaN: E4M3 has no infinity
  static constexpr float kMax = 448.0f;
};

struct Fp8E5M2 {
  static constexpr int kMantissaBits = 2;
  static constexpr int kBias = 15;
  static constexpr bool kHasInfinity = true;
  static constexpr uint32_t kMaxCode = 0x7bu;        // 57344
  static constexpr uint32_t kOverflowCode = 0x7cu;   // infinity
  static constexpr float kMax = 57344.0f;
};

// The rounding of a finite or infinite magnitude (float bits, sign cleared,
// not NaN) to the FP8 code of Format, before the overflow check: the code
// may exceed kMaxCode. With e the biased float exponent and
// k = e - 127 + bias - 1 (the FP8 exponent field minus one), a normal
// result keeps M of float's 23 mantissa bits (k >= 0), a subnormal one
// -k fewer; the significand with its implicit bit is shifted right by that
// many places with ties to even, and the exponent field is added above it
// (a carry out of the mantissa correctly moves into the exponent). Zero and
// float subnormals, far below FP8's smallest subnormal, shift to 0.
template <class Format>
AMPX_HD uint32_t fp8_round_magnitude(uint32_t magnitude) {
  constexpr int M = Format::kMantissaBits;
  const int32_t e = static_cast<int32_t>(magnitude >> 23);
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const int32_t k = e - 127 + Format::kBias - 1;
  int32_t shift = 23 - M + (k < 0 ? -k : 0);
  // From 25 places on, the significand (< 2^24) is below half a unit and
  // rounds to 0; the clamp keeps the shifts within 32 bits.
  if (shift > 25) shift = 25;
  const uint32_t odd = (significand >> shift) & 1u;
  const uint32_t rounded = (significand + (1u << (shift - 1)) - 1u + odd) >> shift;
  return (k > 0 ? static_cast<uint32_t>(k) << M : 0u) + rounded;
}

template <class Format>
AMPX_HD uint8_t float_to_fp8(float f, bool saturate) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  const uint32_t code = fp8_round_magnitude<Format>(magnitude);
  if (code > Format::kMaxCode)
    return static_cast<uint8_t>(sign | (saturate ? Format::kMaxCode : Format::kOverflowCode));
  return static_cast<uint8_t>(sign | code);
}

template <class Format>
AMPX_HD float fp8_to_float(uint8_t v) {
  constexpr int M = Format::kMantissaBits;
  constexpr uint32_t kTopExponent = (1u << (7 - M)) - 1u;
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exponent = (v & 0x7fu) >> M;
  uint32_t mantissa = v & ((1u << M) - 1u);
  const bool special = Format::kHasInfinity ? exponent == kTopExponent : (v & 0x7fu) == 0x7fu;
  if (special) {
    if (mantissa == 0) return bits_float(sign | 0x7f800000u);
    return bits_float(sign | 0x7fc00000u | (mantissa << (23 - M)));
  }
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    // A subnormal, mantissa * 2^(1 - bias - M): normalised, a normal float.
    uint32_t e = 127 + 1 - Format::kBias;
    while ((mantissa & (1u << M)) == 0) {
      mantissa <<= 1;
      --e;
    }
    return bits_float(sign | (e << 23) | ((mantissa & ((1u << M) - 1u)) << (23 - M)));
  }
  return bits_float(sign | ((exponent + 127 - Format::kBias) << 23) | (mantissa << (23 - M)));
}

AMPX_HD float e4m3_to_float(uint8_t v) { return fp8_to_float<Fp8E4M3>(v); }
AMPX_HD float e5m2_to_float(uint8_t v) { return fp8_to_float<Fp8E5M2>(v); }
AMPX_HD uint8_t float_to_e4m3(float f, bool saturate) { return float_to_fp8<Fp8E4M3>(f, saturate); }
AMPX_HD uint8_t float_to_e5m2(float f, bool saturate) { return float_to_fp8<Fp8E5M2>(f, saturate); }

}  // namespace math
}  // namespace ampx::impl
