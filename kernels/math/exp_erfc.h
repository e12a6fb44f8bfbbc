// exp_erfc.h -- exp and erfc in fp32 for the GELU family, without a call
// into the C library on the host, so that the CPU's element loops over
// them vectorise (glibc's expf and erfcf are scalar calls, and they made
// gelu and its derivatives most of an eikonal step). CUDA code keeps
// CUDA's expf and erfcf.
//
// exp(x) = 2^n exp(r): n = round(x / ln 2), r = x - n ln 2 with ln 2 in two
// parts (Cody and Waite), the first short enough that n * kLn2Hi is exact;
// exp(r) on |r| <= ln 2 / 2 is 1 + r + r^2 P(r), P the degree-5 minimax
// polynomial of Cephes' expf (within 1 ulp there). 2^n is applied as two
// factors 2^(n/2) 2^(n - n/2), each a normal float, so results between
// FLT_MAX and the smallest subnormal are rounded once, correctly scaled.
//
// erfc(a), a = |x|: erfc(a) = exp(-a^2) erfcx(a), and erfcx(a) (1 + 2a) is
// smooth and bounded on [0, inf) (1 at 0, 2 / sqrt(pi) at inf), so it is
// a polynomial Q(t) of t = (a - 2) / (a + 2), which maps [0, inf) onto
// [-1, 1) (the substitution of N. Juffa's erfcf). Q's coefficients come
// from tools/fit_erfc.py (interpolation at Chebyshev nodes in 40-digit
// arithmetic; within 1.8 ulp of erfcx (1 + 2a) when evaluated in fp32).
// exp(-a^2) takes a^2 as h + l exactly (Dekker's product), exp(-h)
// (1 - l), so the tail keeps its relative precision: erfc(9) = 4e-37 is
// within a few ulps, not the 2^-24 a^2 ~ 5e-6 relative error of exp of a
// rounded square. erfc(-a) = 2 - erfc(a). Measured over every 97th fp32 bit pattern
// against long double: exp within 0.98 ulp, erfc within 4.9 ulp (near
// erfc = 1, where its five roundings add up; tests/unit/test_exp_erfc.cpp).
//
// NaN gives NaN; exp(+inf) = inf, exp(-inf) = 0; erfc(+inf) = 0,
// erfc(-inf) = 2. No branch depends on the data, only selects.
#pragma once

#include <cmath>
#include <cstdint>

#include "math/bits.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

// 2^n for -126 <= n <= 127.
AMPX_HD float pow2i(int32_t n) { return bits_float(static_cast<uint32_t>(n + 127) << 23); }

AMPX_HD float exp_f32(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // 355 / 512
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;   // 1.5 * 2^23: adding it rounds to an integer
  // exp(-104) rounds to 0, exp(89) overflows; the clamp keeps n within
  // [-150, 128] and maps NaN to -104 (restored below), so the conversion
  // to int is always defined.
  const float c = x > -104.0f ? (x < 89.0f ? x : 89.0f) : -104.0f;
  const float n = (c * kLog2e + kRound) - kRound;
  const float r = (c - n * kLn2Hi) - n * kLn2Lo;
  const float poly =
      ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
        4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
  const float er = poly * (r * r) + r + 1.0f;
  const int32_t k = static_cast<int32_t>(n);
  const int32_t half = k / 2;
  const float scaled = er * pow2i(half) * pow2i(k - half);
  return x != x ? x : scaled;
#endif
}

AMPX_HD float erfc_f32(float x) {
#if defined(__CUDA_ARCH__)
  return erfcf(x);
#else
  const float magnitude = fabsf(x);
  // erfc(10.5) = 7e-50 rounds to 0 like everything beyond; NaN maps to
  // 10.5 (restored below).
  const float a = magnitude < 10.5f ? magnitude : 10.5f;
  const float split = a * 4097.0f;  // 2^12 + 1
  const float a_hi = split - (split - a);
  const float a_lo = a - a_hi;
  const float h = a * a;
  const float l = ((a_hi * a_hi - h) + 2.0f * a_hi * a_lo) + a_lo * a_lo;  // a^2 = h + l
  const float t = (a - 2.0f) / (a + 2.0f);
  float q = -2.010893149e-05f;
  q = q * t + 6.310018216e-05f;
  q = q * t + 2.211054525e-04f;
  q = q * t + -3.571778943e-04f;
  q = q * t + -1.463511726e-03f;
  q = q * t + 1.216665492e-03f;
  q = q * t + 8.724294603e-03f;
  q = q * t + -8.018636145e-03f;
  q = q * t + -5.422018468e-02f;
  q = q * t + 1.640494019e-01f;
  q = q * t + -1.660303921e-01f;
  q = q * t + -9.276375920e-02f;
  q = q * t + 1.276978374e+00f;
  const float upper = (exp_f32(-h) * (1.0f - l)) * (q / (1.0f + 2.0f * a));
  const float value = x < 0.0f ? 2.0f - upper : upper;
  return x != x ? x : value;
#endif
}

}  // namespace math
}  // namespace ampx::impl
