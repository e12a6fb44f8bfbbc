// The host exp and erfc of kernels/math/exp_erfc.h (what the CPU's GELU
// family computes with) against the C library's long double expl and erfcl,
// in units in the last place of the fp32 result (2^-149 below the normal
// range): exp within 1 ulp, erfc within 5 (the header's measured 0.98 and
// 4.9 over every 97th bit pattern; here every 1009th, in well under a
// second), and the special values exactly.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "math/exp_erfc.h"

namespace {

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
  double worst_exp = 0, worst_erfc = 0;
  float at_exp = 0, at_erfc = 0;
  int64_t finite_overflows = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 1009) {
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
    const double off = ulps_off(erfc_f32(x), std::erfc(static_cast<long double>(x)));
    if (off > worst_erfc) worst_erfc = off, at_erfc = x;
  }
  INFO("exp's worst at ", at_exp, ", erfc's at ", at_erfc);
  CHECK(worst_exp <= 1.0);
  CHECK(finite_overflows == 0);  // exp beyond FLT_MAX is inf
  CHECK(worst_erfc <= 5.0);
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
}
