// fp8_reference.h -- the FP8 formats as the tests define them, sharing no
// code with kernels/math/fp8.h: a code is decoded from its fields with
// std::ldexp, and a value is rounded in double precision -- its exponent
// from std::frexp, clamped to the smallest normal one, gives the quantum of
// its binade, and value / quantum is rounded to the nearest integer by hand
// with ties to even -- then encoded from the rounded value's fields.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ampx/ampx.h"

namespace fp8_test {

struct Fp8Format {
  ampx_dtype dtype;
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  bool has_infinity;
  double max;
  uint8_t max_code;
  uint8_t overflow_code;  // without saturation

  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
};

inline const Fp8Format kE4M3{AMPX_F8E4M3, "e4m3", 4, 3, false, 448.0, 0x7e, 0x7f};
inline const Fp8Format kE5M2{AMPX_F8E5M2, "e5m2", 5, 2, true, 57344.0, 0x7b, 0x7c};
inline const Fp8Format* const kFormats[] = {&kE4M3, &kE5M2};

inline double reference_value(const Fp8Format& f, uint8_t code) {
  const int m = f.mantissa_bits;
  const int top = (1 << f.exponent_bits) - 1;
  const int exponent = (code & 0x7f) >> m;
  const int mantissa = code & ((1 << m) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (!f.has_infinity && (code & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  if (f.has_infinity && exponent == top)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - f.bias() - m);
  return sign * std::ldexp(1.0 + std::ldexp(mantissa, -m), exponent - f.bias());
}

inline bool is_nan_code(const Fp8Format& f, uint8_t code) { return std::isnan(reference_value(f, code)); }

// The code of x rounded to nearest, ties to even, with the overflow rule.
inline uint8_t reference_code(const Fp8Format& f, double x, bool saturate) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7f;
  const uint8_t overflow = sign | (saturate ? f.max_code : f.overflow_code);
  const double magnitude = std::fabs(x);
  if (std::isinf(magnitude)) return overflow;
  const int m = f.mantissa_bits;
  const int min_exponent = 1 - f.bias();
  int e = 0;
  std::frexp(magnitude, &e);  // magnitude = fraction * 2^e, fraction in [0.5, 1)
  const int binade = std::max(e - 1, min_exponent);
  const double quantum = std::ldexp(1.0, binade - m);
  const double q = magnitude / quantum;  // exact: a power-of-two division
  double r = std::floor(q);
  const double rest = q - r;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(r, 2.0) == 1.0)) r += 1.0;
  const double value = r * quantum;
  if (value > f.max) return overflow;
  if (value == 0.0) return sign;
  std::frexp(value, &e);
  const int exponent = e - 1;
  if (exponent < min_exponent)  // subnormal: value = mantissa * 2^(min_exponent - m)
    return sign | static_cast<uint8_t>(std::ldexp(value, m - min_exponent));
  const int mantissa = static_cast<int>(std::ldexp(value, -exponent) * (1 << m)) - (1 << m);
  return sign | static_cast<uint8_t>(((exponent + f.bias()) << m) | mantissa);
}

}  // namespace fp8_test
