// The host exp and erfc of kernels/math/exp_erfc.h (what the CPU's GELU
// family computes with) against the C library's long double expl and erfcl,
// in units in the last place of the fp32 result (2^-149 below the normal
// range), over every 97th fp32 bit pattern: exp within 1 ulp (measured
// 0.98), erfc within 2 (measured 1.56; 4.84 before its double evaluation
// and its 1 - erf branch), the exp(-x^2) that erfc_exp_f32 hands the GELU
// derivative within 2, and the special values exactly.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "math/exp_erfc.h"

namespace {

using ampx::impl::math::erfc_exp_f32;
using ampx::impl::math::erfc_f32;
using ampx::impl::math::exp_f32;

double ulps_off(float got, long double want) {
  const long double magnitude = std::fabs(want);
  const long double ulp = magnitude < FLT_MIN ? std::ldexp(1.0L, -149)
                                              : std::ldexp(1.0L, std::ilogb(magnitude) - 23);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

}  // namespace

TEST_CASE("exp_f32 and erfc_f32 against long double over the fp32 line") {
  double worst_exp = 0, worst_erfc = 0, worst_square = 0;
  float at_exp = 0, at_erfc = 0, at_square = 0;
  int64_t finite_overflows = 0, differ = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 97) {
    const uint32_t b = static_cast<uint32_t>(bits);
    float x;
    std::memcpy(&x, &b, sizeof x);
    if (!std::isfinite(x)) continue;
    const long double e = std::exp(static_cast<long double>(x));
    if (e <= FLT_MAX) {
      const double off = ulps_off(exp_f32(x), e);
      if (off > worst_exp) worst_exp = off, at_exp = x;
    } else if (!std::isinf(exp_f32(x))) {
      ++finite_overflows;
    }
    const auto both = erfc_exp_f32(x);
    differ += both.erfc != erfc_f32(x);
    const double off = ulps_off(both.erfc, std::erfc(static_cast<long double>(x)));
    if (off > worst_erfc) worst_erfc = off, at_erfc = x;
    const long double xl = x;
    const double square_off = ulps_off(both.exp_neg_square, std::exp(-xl * xl));
    if (square_off > worst_square) worst_square = square_off, at_square = x;
  }
  INFO("exp's worst at ", at_exp, ", erfc's at ", at_erfc, ", exp(-x^2)'s at ", at_square);
  CHECK(worst_exp <= 1.0);
  CHECK(finite_overflows == 0);  // exp beyond FLT_MAX is inf
  CHECK(worst_erfc <= 2.0);
  CHECK(worst_square <= 2.0);
  CHECK(differ == 0);
}

TEST_CASE("exp_f32 and erfc_f32 at the special values") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(exp_f32(inf) == inf);
  CHECK(exp_f32(-inf) == 0.0f);
  CHECK(std::isnan(exp_f32(nan)));
  CHECK(exp_f32(0.0f) == 1.0f);
  CHECK(exp_f32(-0.0f) == 1.0f);
  CHECK(exp_f32(88.8f) == inf);          // past log(FLT_MAX) = 88.72
  CHECK(exp_f32(-104.0f) == 0.0f);       // exp(-104) < half the least subnormal
  CHECK(exp_f32(-103.0f) > 0.0f);        // subnormal, not flushed
  CHECK(erfc_f32(inf) == 0.0f);
  CHECK(erfc_f32(-inf) == 2.0f);
  CHECK(std::isnan(erfc_f32(nan)));
  CHECK(erfc_f32(0.0f) == 1.0f);
  CHECK(erfc_f32(-0.0f) == 1.0f);
  CHECK(erfc_f32(1e4f) == 0.0f);
  CHECK(erfc_f32(-1e4f) == 2.0f);
  CHECK(erfc_f32(10.0f) > 0.0f);  // 2.1e-45, the least subnormals
  CHECK(erfc_exp_f32(inf).exp_neg_square == 0.0f);
  CHECK(erfc_exp_f32(-inf).exp_neg_square == 0.0f);
  CHECK(std::isnan(erfc_exp_f32(nan).exp_neg_square));
  CHECK(erfc_exp_f32(0.0f).exp_neg_square == 1.0f);
  CHECK(erfc_f32(0.5f) == static_cast<float>(std::erfc(0.5L)));  // the branches' seam
  CHECK(erfc_f32(-0.5f) == static_cast<float>(std::erfc(-0.5L)));
}
