// convert.h -- element conversions between ampx's types, bit-exact.
//
// One definition shared by the CPU backend and the CUDA kernels, so both
// backends round identically:
//  - float -> f16/bf16 rounds to nearest, ties to even; overflow gives inf;
//    subnormals are produced and kept (no flush to zero);
//  - f16/bf16 -> float is exact;
//  - NaN stays NaN: the sign and the top payload bits are kept and the
//    result is a quiet NaN (as the x86 F16C instructions do), so the scalar
//    and the vectorised paths agree bit for bit;
//  - double -> f16/bf16 rounds once (via round-to-odd to float, which is
//    exact for targets of at most 22 significant bits);
//  - i64 -> f32/f16/bf16 rounds once too (via round-to-odd to double), and
//    i32 -> anything is exact in double before its single rounding;
//  - floating -> integer truncates toward zero, saturates, and maps NaN to 0;
//  - FP8 (fp8.h) -> anything goes through its exact float value; anything
//    -> FP8 rounds once, to nearest even (double and i64 by round-to-odd to
//    float first, exact for FP8's 4 significant bits), beyond the largest
//    finite value as torch's casts: E4M3 saturates to +-448, E5M2 overflows
//    to +-inf. (The other choice is the FP8 capability's, backend_fp8.h.)
#pragma once

#include <cstdint>
#include <cstring>

#include "ampx/ampx.h"
#include "math/bits.h"
#include "math/fp8.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

AMPX_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    // Subnormal half: normalise it; every such value is a normal float.
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
    return bits_float(sign | (exponent << 23) | (mantissa << 13));
  }
  if (exponent == 31) {
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return bits_float(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

AMPX_HD uint16_t float_to_half(float f) {
  uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {
    if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  // 65520 is halfway between 65504 (the largest half) and 2^16: ties to even
  // rounds it, and everything above, to infinity.
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (x < 0x38800000u) {
    // Below 2^-14: a half subnormal, in units of 2^-24. 2^-25 and below round
    // to zero (2^-25 itself is a tie, and zero is even).
    if (x <= 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exponent = x >> 23;
    const uint32_t mantissa = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the low 13 bits away;
  // a carry out of the mantissa correctly bumps the exponent.
  const uint32_t rebiased = x - 0x38000000u;
  const uint32_t rounded = rebiased + 0xfffu + ((rebiased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

AMPX_HD float bf16_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

AMPX_HD uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Rounds a double to the nearest float, ties to even, and beyond float's
// range to inf: what the hardware does, but without C++'s undefined
// behaviour for a value out of range (the boundary is FLT_MAX plus half its
// last place, which rounds to inf as the tie goes to the even "mantissa").
AMPX_HD float double_to_float(double d) {
  constexpr double kOverflow = 3.4028235677973366e38;  // (2 - 2^-24) * 2^127
  if (d >= kOverflow) return bits_float(0x7f800000u);
  if (d <= -kOverflow) return bits_float(0xff800000u);
  return static_cast<float>(d);
}

// Rounds a double to float toward zero, then sets the lowest mantissa bit
// when the result is inexact ("round to odd"). Rounding that float to a
// format with at least two fewer significant bits equals rounding the double
// directly.
AMPX_HD float double_to_float_round_odd(double d) {
  float f = double_to_float(d);
  if (static_cast<double>(f) == d || d != d) return f;
  uint32_t u = float_bits(f);
  const double magnitude_f = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
  const double magnitude_d = d < 0 ? -d : d;
  if (magnitude_f > magnitude_d) --u;  // step toward zero (also from inf to max)
  return bits_float(u | 1u);
}

AMPX_HD uint16_t double_to_half(double d) { return float_to_half(double_to_float_round_odd(d)); }
AMPX_HD uint16_t double_to_bf16(double d) { return float_to_bf16(double_to_float_round_odd(d)); }

// An int64 can have 64 significant bits, a double 53. Converting it to double
// rounds once, and rounding that double again to float could land on a tie
// the integer was not on: 2^60 + 2^36 + 1 becomes the double 2^60 + 2^36, a
// float tie that goes down to even, though the integer is above it. Rounding
// to odd (truncate, then set the lowest bit if anything was lost) keeps what
// the second rounding needs; at most 11 bits are ever dropped.
AMPX_HD double int64_to_double_round_odd(int64_t v) {
  uint64_t magnitude = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  uint64_t lost = 0;
  double scale = 1.0;
  while (magnitude >> 53) {
    lost |= magnitude & 1u;
    magnitude >>= 1;
    scale *= 2.0;
  }
  const double m = static_cast<double>(magnitude | lost) * scale;
  return v < 0 ? -m : m;
}

AMPX_HD int32_t double_to_i32(double d) {
  if (d != d) return 0;
  if (d >= 2147483647.0) return INT32_MAX;
  if (d <= -2147483648.0) return INT32_MIN;
  return static_cast<int32_t>(d);
}

AMPX_HD int64_t double_to_i64(double d) {
  if (d != d) return 0;
  if (d >= 9223372036854775808.0) return INT64_MAX;
  if (d <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(d);
}

// ---- generic element conversion, by ampx_dtype value ----------------------

template <int D> struct storage_of;
template <> struct storage_of<AMPX_F32> { using type = float; };
template <> struct storage_of<AMPX_F16> { using type = uint16_t; };
template <> struct storage_of<AMPX_BF16> { using type = uint16_t; };
template <> struct storage_of<AMPX_I32> { using type = int32_t; };
template <> struct storage_of<AMPX_I64> { using type = int64_t; };
template <> struct storage_of<AMPX_F8E4M3> { using type = uint8_t; };
template <> struct storage_of<AMPX_F8E5M2> { using type = uint8_t; };

template <int D> using storage_t = typename storage_of<D>::type;

template <int D>
constexpr bool is_fp8_dtype = D == AMPX_F8E4M3 || D == AMPX_F8E5M2;

// The types whose elements are floating-point values (FP8 included).
template <int D>
constexpr bool is_floating_dtype = D == AMPX_F32 || D == AMPX_F16 || D == AMPX_BF16 || is_fp8_dtype<D>;

// What a conversion to FP8 does beyond the largest finite value (torch's
// casts): E4M3 saturates, E5M2 overflows to infinity.
template <int D>
constexpr bool fp8_saturates_by_default = D == AMPX_F8E4M3;

template <int D>
AMPX_HD float load_float(storage_t<D> v) {
  if constexpr (D == AMPX_F16) return half_to_float(v);
  else if constexpr (D == AMPX_BF16) return bf16_to_float(v);
  else if constexpr (D == AMPX_F8E4M3) return e4m3_to_float(v);
  else if constexpr (D == AMPX_F8E5M2) return e5m2_to_float(v);
  else return static_cast<float>(v);
}

template <int D>
AMPX_HD storage_t<D> store_float(float f) {
  if constexpr (D == AMPX_F16) return float_to_half(f);
  else if constexpr (D == AMPX_BF16) return float_to_bf16(f);
  else if constexpr (D == AMPX_F32) return f;
  else if constexpr (D == AMPX_F8E4M3) return float_to_e4m3(f, fp8_saturates_by_default<D>);
  else if constexpr (D == AMPX_F8E5M2) return float_to_e5m2(f, fp8_saturates_by_default<D>);
  else if constexpr (D == AMPX_I32) return double_to_i32(f);
  else return double_to_i64(f);
}

template <int D>
AMPX_HD double load_double(storage_t<D> v) {
  if constexpr (is_floating_dtype<D>) return static_cast<double>(load_float<D>(v));
  else return static_cast<double>(v);
}

template <int D>
AMPX_HD storage_t<D> store_double(double d) {
  if constexpr (D == AMPX_F16) return double_to_half(d);
  else if constexpr (D == AMPX_BF16) return double_to_bf16(d);
  else if constexpr (D == AMPX_F32) return double_to_float(d);
  else if constexpr (is_fp8_dtype<D>) return store_float<D>(double_to_float_round_odd(d));
  else if constexpr (D == AMPX_I32) return double_to_i32(d);
  else return double_to_i64(d);
}

// Converts one element of type Src to type Dst with the rules at the top.
template <int Dst, int Src>
AMPX_HD storage_t<Dst> convert_value(storage_t<Src> v) {
  if constexpr (Dst == Src) return v;
  else if constexpr (is_floating_dtype<Src>) return store_float<Dst>(load_float<Src>(v));
  else if constexpr (Src == AMPX_I64 && is_floating_dtype<Dst>)
    return store_double<Dst>(int64_to_double_round_odd(v));
  else return store_double<Dst>(static_cast<double>(v));
}

}  // namespace math
}  // namespace ampx::impl
