// test_tf32.cpp -- ampx_context_set_tf32: f32 matrix products and
// convolutions stay IEEE fp32 by default and run in TF32 on CUDA when the
// context allows it; the CPU has no TF32 and gives the same bits either way.
//
// References are computed here in double from the definitions, on the
// operands as given (fp32) and on the operands rounded to TF32 (10 mantissa
// bits, ties to even: the rounding the CUDA emulator models; a GPU may
// round otherwise, which the TF32 bound below allows). With K-term sums of
// operands in [-1, 1]: TF32 moves each product by at most 2^-10 of itself
// (2^-9 truncating), so the result by K * 2^-9 at most; fp32 summation
// errors of these sums (random signs) stay under K * 2^-22, far under the
// difference TF32 makes, so the test tells the two apart.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::make;
using ampx_fixture::values_of;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;

double tf32(double x) {
  float f = static_cast<float>(x);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits = (bits + 0xfffu + ((bits >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

Vec floats(ampx_fixture::Rng& rng, size_t n) {
  Vec v = rng.vector(n, -1, 1);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

// [M, K] x [K, N], in double, of the operands as given or rounded to TF32.
Vec product(const Vec& a, const Vec& b, int64_t m, int64_t k, int64_t n, bool rounded) {
  Vec c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) {
        const double x = a[i * k + l], y = b[l * n + j];
        c[i * n + j] += rounded ? tf32(x) * tf32(y) : x * y;
      }
  return c;
}

// Largest |have - want|.
double distance(const Vec& have, const Vec& want) {
  double d = 0.0;
  for (size_t i = 0; i < want.size(); ++i) d = std::max(d, std::fabs(have[i] - want[i]));
  return d;
}

}  // namespace

TEST_CASE("tf32: off by default; allowed, f32 products and convolutions run in TF32 on CUDA") {
  Ctx ctx;
  const bool cuda = ampx_test::test_device() == AMPX_DEVICE_CUDA;
  ampx_fixture::Rng rng(29);
  constexpr int64_t M = 24, K = 96, N = 16;
  const Vec a = floats(rng, M * K), b = floats(rng, K * N);
  const Vec exact = product(a, b, M, K, N, false), rounded = product(a, b, M, K, N, true);
  REQUIRE(distance(exact, rounded) > 4 * K * 0x1p-22);  // the two are told apart
  Tensor ta(make(ctx, AMPX_F32, {M, K}, a)), tb(make(ctx, AMPX_F32, {K, N}, b));

  int32_t previous = -1;
  REQUIRE(ampx_context_set_tf32(ctx, 0, &previous) == AMPX_OK);
  CHECK(previous == 0);  // the default
  Tensor fp32;
  REQUIRE_MESSAGE(ampx_matmul(ta, tb, fp32.out()) == AMPX_OK, last_error());
  const Vec fp32_values = values_of(fp32);
  CHECK(distance(fp32_values, exact) <= K * 0x1p-22);
  // f16 products are not touched by the setting: h1 now, h2 with TF32 on.
  Tensor ha(make(ctx, AMPX_F16, {M, K}, a)), hb(make(ctx, AMPX_F16, {K, N}, b)), h1, h2;
  REQUIRE(ampx_matmul(ha, hb, h1.out()) == AMPX_OK);

  REQUIRE(ampx_context_set_tf32(ctx, 1, &previous) == AMPX_OK);
  CHECK(previous == 0);
  Tensor allowed;
  REQUIRE_MESSAGE(ampx_matmul(ta, tb, allowed.out()) == AMPX_OK, last_error());
  const Vec allowed_values = values_of(allowed);
  if (cuda) {
    CHECK(distance(allowed_values, exact) <= K * 0x1p-9);
#if defined(AMPX_CUDA_EMULATED)
    CHECK(distance(allowed_values, rounded) <= K * 0x1p-22);
#endif
  } else {
    CHECK(allowed_values == fp32_values);
  }

  // A 3x3 convolution, where the device convolves: its K is 8 * 9.
  if (ampx_test::test_device_convolves()) {
    const Vec x = floats(rng, 2 * 8 * 6 * 6), w = floats(rng, 4 * 8 * 3 * 3);
    Tensor tx(make(ctx, AMPX_F32, {2, 8, 6, 6}, x)), tw(make(ctx, AMPX_F32, {4, 8, 3, 3}, w));
    ampx_conv2d_options o = ampx_conv2d_options_default();
    o.padding[0] = o.padding[1] = 1;
    Tensor in_tf32, in_fp32;
    REQUIRE_MESSAGE(ampx_conv2d(tx, tw, nullptr, &o, in_tf32.out()) == AMPX_OK, last_error());
    REQUIRE(ampx_context_set_tf32(ctx, 0, &previous) == AMPX_OK);
    CHECK(previous == 1);
    REQUIRE(ampx_conv2d(tx, tw, nullptr, &o, in_fp32.out()) == AMPX_OK);
    Vec conv_exact(static_cast<size_t>(2 * 4 * 36), 0.0), conv_rounded = conv_exact;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t f = 0; f < 4; ++f)
        for (int64_t r = 0; r < 6; ++r)
          for (int64_t c = 0; c < 6; ++c)
            for (int64_t ch = 0; ch < 8; ++ch)
              for (int64_t i = 0; i < 3; ++i)
                for (int64_t j = 0; j < 3; ++j) {
                  const int64_t row = r + i - 1, col = c + j - 1;
                  if (row < 0 || row >= 6 || col < 0 || col >= 6) continue;
                  const double xv = x[((n * 8 + ch) * 6 + row) * 6 + col];
                  const double wv = w[((f * 8 + ch) * 3 + i) * 3 + j];
                  const size_t at = static_cast<size_t>(((n * 4 + f) * 6 + r) * 6 + c);
                  conv_exact[at] += xv * wv;
                  conv_rounded[at] += tf32(xv) * tf32(wv);
                }
    CHECK(distance(values_of(in_fp32), conv_exact) <= 72 * 0x1p-22);
    if (cuda) {
      CHECK(distance(values_of(in_tf32), conv_exact) <= 72 * 0x1p-9);
#if defined(AMPX_CUDA_EMULATED)
      CHECK(distance(values_of(in_tf32), conv_rounded) <= 72 * 0x1p-22);
      CHECK(distance(values_of(in_tf32), conv_exact) > 72 * 0x1p-22);
#endif
    } else {
      CHECK(values_of(in_tf32) == values_of(in_fp32));
    }
  }
  REQUIRE(ampx_context_set_tf32(ctx, 1, nullptr) == AMPX_OK);
  REQUIRE(ampx_matmul(ha, hb, h2.out()) == AMPX_OK);
  CHECK(values_of(h1) == values_of(h2));
  CHECK_FAILS_WITH(ampx_context_set_tf32(nullptr, 1, nullptr), AMPX_ERR_INVALID_ARGUMENT, "ctx");
}
