// test_fp8_gemm.cpp -- the FP8 GEMM capability (core/backend_fp8.h) of the
// test device's backend: products of FP8 operands with per-tensor scales
// against a double-precision reference computed here from the decoded
// operands (fp8_reference.h), the output in F32, F16, BF16 or FP8 (with a
// D scale and an amax), a bias, the supports() answers, and the
// NOT_SUPPORTED of a device without FP8 products.
//
// Bounds: products of FP8 values are exact in fp32 and their k-term sums
// are within k * 2^-24 of the exact sum, relative to the sum of |terms|;
// so an F32 D is compared with |d - ref| <= k 2^-24 sum|terms| + tiny, a
// 16-bit or FP8 D allows in addition one rounding of its format (half an
// ulp, plus the fp32 error moving a value across a rounding boundary: the
// result must equal the reference rounded up or down).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/backend_fp8.h"
#include "core/context.h"
#include "core/error.h"
#include "fp8_reference.h"
#include "support.h"

using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::download;
using ampx_test::last_error;
using ampx_test::Tensor;
using ampx_test::upload;
using fp8_test::Fp8Format;
using fp8_test::kE4M3;
using fp8_test::kE5M2;
using fp8_test::reference_code;
using fp8_test::reference_value;

namespace {

using ampx::impl::DType;
using ampx::impl::Fp8GemmArgs;
using ampx::impl::Fp8GemmPrimitives;

ampx::impl::Backend& backend_of(ampx_context ctx) {
  return reinterpret_cast<ampx::impl::DeviceContext*>(ctx)->backend();
}

void* data_of(ampx_tensor t) {
  void* p = nullptr;
  REQUIRE(ampx_tensor_data(t, &p) == AMPX_OK);
  return p;
}

const Fp8Format& format_of(ampx_dtype t) { return t == AMPX_F8E4M3 ? kE4M3 : kE5M2; }

// Random finite codes of a format (values of moderate size, both signs).
std::vector<uint8_t> random_codes(const Fp8Format& f, size_t n, std::mt19937& rng) {
  std::vector<uint8_t> codes(n);
  for (uint8_t& c : codes) {
    do {
      c = static_cast<uint8_t>(rng());
    } while (!std::isfinite(reference_value(f, c)) || std::fabs(reference_value(f, c)) > 64.0);
  }
  return codes;
}

double decode_16(uint16_t b, bool bf16) {
  if (bf16) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
  const double sign = (b & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

struct Case {
  int64_t m, n, k;
  ampx_dtype a_type, b_type, d_type;
  bool trans_a, trans_b, bias;
};

// Runs one product on the device and checks it (a layout the backend does
// not take is reported as a message).
void check_product(ampx_context ctx, const Case& c, std::mt19937& rng) {
  CAPTURE(c.m);
  CAPTURE(c.n);
  CAPTURE(c.k);
  CAPTURE(ampx_dtype_name(c.a_type));
  CAPTURE(ampx_dtype_name(c.b_type));
  CAPTURE(ampx_dtype_name(c.d_type));
  CAPTURE(c.trans_a);
  CAPTURE(c.trans_b);
  CAPTURE(c.bias);
  Fp8GemmPrimitives& g = backend_of(ctx).require<Fp8GemmPrimitives>("the test");
  const Fp8Format& fa = format_of(c.a_type);
  const Fp8Format& fb = format_of(c.b_type);
  const std::vector<uint8_t> a = random_codes(fa, static_cast<size_t>(c.m * c.k), rng);
  const std::vector<uint8_t> b = random_codes(fb, static_cast<size_t>(c.k * c.n), rng);
  const float sa = 0.375f, sb = 2.5f, sd = 0.0625f;
  std::vector<float> bias(static_cast<size_t>(c.n));
  for (float& x : bias) x = static_cast<float>(static_cast<int>(rng() % 17) - 8) * 0.25f;
  Tensor ta(upload<uint8_t>(ctx, c.a_type, a)), tb(upload<uint8_t>(ctx, c.b_type, b));
  Tensor scales(upload<float>(ctx, AMPX_F32, {sa, sb, sd, 0.0f}));
  Tensor tbias;
  if (c.bias) {
    Tensor f32(upload<float>(ctx, AMPX_F32, bias));
    REQUIRE(ampx_tensor_cast(f32, c.d_type, tbias.out()) == AMPX_OK);
  }
  const int64_t mn = c.m * c.n;
  ampx_tensor d_raw = nullptr;
  REQUIRE(ampx_tensor_empty(ctx, c.d_type, 1, &mn, &d_raw) == AMPX_OK);
  Tensor td(d_raw);
  const bool fp8_d = c.d_type == AMPX_F8E4M3 || c.d_type == AMPX_F8E5M2;
  Fp8GemmArgs args;
  args.m = c.m, args.n = c.n, args.k = c.k;
  args.a = data_of(ta), args.a_type = static_cast<DType>(c.a_type), args.trans_a = c.trans_a;
  args.b = data_of(tb), args.b_type = static_cast<DType>(c.b_type), args.trans_b = c.trans_b;
  auto* s = static_cast<float*>(data_of(scales));
  args.a_scale_inv = s, args.b_scale_inv = s + 1;
  args.d = data_of(td), args.d_type = static_cast<DType>(c.d_type);
  if (fp8_d) args.d_scale = s + 2, args.d_amax = s + 3;
  if (c.bias) args.bias = data_of(tbias);
  std::string why;
  if (!g.supports(args, &why)) {
    MESSAGE("not taken by this backend: ", why);
    return;
  }
  g.gemm(args);
  // The reference: decoded operands, double sums.
  std::vector<double> ref(static_cast<size_t>(mn)), mag(static_cast<size_t>(mn));
  double amax = 0.0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t l = 0; l < c.k; ++l) {
        const double x = reference_value(fa, a[c.trans_a ? l * c.m + i : i * c.k + l]);
        const double y = reference_value(fb, b[c.trans_b ? j * c.k + l : l * c.n + j]);
        sum += x * y;
        abs_sum += std::fabs(x * y);
      }
      const double factor = static_cast<double>(sa) * sb;
      double v = factor * sum + (c.bias ? static_cast<double>(bias[j]) : 0.0);
      ref[i * c.n + j] = v;
      mag[i * c.n + j] = factor * abs_sum + (c.bias ? std::fabs(bias[j]) : 0.0);
      amax = std::max(amax, std::fabs(v));
    }
  const double eps = (static_cast<double>(c.k) + 4.0) * 0x1p-24;
  size_t wrong = 0;
  for (int64_t i = 0; i < mn; ++i) {
    const double r = ref[i], tol = eps * mag[i] + 1e-30;
    bool ok;
    if (c.d_type == AMPX_F32) {
      ok = std::fabs(download<float>(td)[i] - r) <= tol;
    } else if (fp8_d) {
      const Fp8Format& fd = format_of(c.d_type);
      const uint8_t got = download<uint8_t>(td)[i];
      const double lo = (r - tol) * sd, hi = (r + tol) * sd;
      ok = got == reference_code(fd, lo, true) || got == reference_code(fd, hi, true);
    } else {
      const bool bf16 = c.d_type == AMPX_BF16;
      const double got = decode_16(download<uint16_t>(td)[i], bf16);
      // Within half an ulp of the format (2^-8 or 2^-11 relative) plus the tolerance.
      const double ulp = std::fabs(r) * (bf16 ? 0x1p-8 : 0x1p-11) + (bf16 ? 0.0 : 0x1p-24);
      ok = std::fabs(got - r) <= ulp + tol;
    }
    if (!ok && ++wrong <= 3) FAIL_CHECK("element ", i, ": reference ", r);
  }
  CHECK(wrong == 0);
  if (fp8_d) {
    const float got_amax = download<float>(scales)[3];
    CHECK(std::fabs(got_amax - amax) <= eps * amax + 1e-30);
  }
}

}  // namespace

TEST_CASE("fp8 gemm: products against the double reference, every type pair and output") {
  Ctx ctx;
  std::mt19937 rng(11);
  const ampx_dtype pairs[][2] = {{AMPX_F8E4M3, AMPX_F8E4M3},
                                 {AMPX_F8E5M2, AMPX_F8E4M3},
                                 {AMPX_F8E4M3, AMPX_F8E5M2}};
  for (const auto& pair : pairs)
    for (ampx_dtype d : {AMPX_F32, AMPX_BF16, AMPX_F16, AMPX_F8E4M3, AMPX_F8E5M2})
      check_product(ctx, Case{32, 48, 64, pair[0], pair[1], d, false, true, false}, rng);
  // The bias epilogue (16-bit and f32 D), and every layout (the CPU takes
  // them all; cuBLASLt's FP8 kernels only TN, reported).
  for (ampx_dtype d : {AMPX_BF16, AMPX_F32})
    check_product(ctx, Case{16, 32, 48, AMPX_F8E4M3, AMPX_F8E4M3, d, false, true, true}, rng);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      check_product(ctx, Case{16, 16, 32, AMPX_F8E4M3, AMPX_F8E5M2, AMPX_F32, ta, tb, false}, rng);
  if (ampx_test::test_device() == AMPX_DEVICE_CPU)
    check_product(ctx, Case{7, 5, 3, AMPX_F8E4M3, AMPX_F8E4M3, AMPX_BF16, false, false, true}, rng);
}

TEST_CASE("fp8 gemm: supports() names the rule a product breaks; gemm refuses it") {
  Ctx ctx;
  Fp8GemmPrimitives& g = backend_of(ctx).require<Fp8GemmPrimitives>("the test");
  Fp8GemmArgs args;
  args.m = args.n = args.k = 16;
  args.trans_b = true;
  std::string why;
  CHECK(g.supports(args, &why));
  args.a_type = args.b_type = DType::F8E5M2;
  try {
    static_cast<void>(g.supports(args, &why));
    FAIL("two E5M2 operands were accepted");
  } catch (const ampx::impl::StatusError& e) {
    CHECK(e.status() == AMPX_ERR_DTYPE);
    CHECK(contains(e.what(), "f8e4m3"));
  }
  args.a_type = DType::F8E4M3;
  args.d_type = DType::BF16;
  float amax = 0.0f;
  args.d_amax = &amax;
  try {
    static_cast<void>(g.supports(args, &why));
    FAIL("an amax with a bf16 D was accepted");
  } catch (const ampx::impl::StatusError& e) {
    CHECK(e.status() == AMPX_ERR_INVALID_ARGUMENT);
  }
  args.d_amax = nullptr;
  if (ampx_test::test_device() == AMPX_DEVICE_CPU) {
    args.m = 7, args.trans_b = false;
    CHECK(g.supports(args, nullptr));
    return;
  }
  // cuBLASLt's rules: TN only, multiples of 16.
  args.trans_b = false;
  CHECK_FALSE(g.supports(args, &why));
  CHECK(contains(why, "TN"));
  args.trans_b = true;
  args.k = 24;
  CHECK_FALSE(g.supports(args, &why));
  CHECK(contains(why, "multiples of 16"));
  // Operands that are there (never read: the shape is refused first).
  uint8_t operand[1] = {0};
  args.a = args.b = args.d = operand;
  try {
    g.gemm(args);
    FAIL("a k of 24 was multiplied");
  } catch (const ampx::impl::StatusError& e) {
    CHECK(e.status() == AMPX_ERR_NOT_SUPPORTED);
    CHECK(contains(e.what(), "multiples of 16"));
  }
}

#if defined(AMPX_CUDA_EMULATED)
TEST_CASE("fp8 gemm: a device below compute capability 8.9 has no FP8 products") {
  if (ampx_test::test_device() != AMPX_DEVICE_CUDA) return;
  setenv("AMPX_EMULATOR_COMPUTE_CAPABILITY", "8.0", 1);
  Ctx ctx;
  unsetenv("AMPX_EMULATOR_COMPUTE_CAPABILITY");
  ampx::impl::Backend& backend = backend_of(ctx);
  CHECK_FALSE(backend.supports(ampx::impl::Capability::Fp8Gemm));
  CHECK(backend.supports(ampx::impl::Capability::Fp8));  // casts run anywhere
  try {
    backend.require<Fp8GemmPrimitives>("an FP8 linear");
    FAIL("FP8 GEMM on compute capability 8.0");
  } catch (const ampx::impl::StatusError& e) {
    CHECK(e.status() == AMPX_ERR_NOT_SUPPORTED);
    CHECK(contains(e.what(), "compute capability 8.0"));
    CHECK(contains(e.what(), "8.9"));
  }
  // An FP8 autocast policy is refused there; the recipe (casts) is not.
  ampx_fp8_recipe recipe = nullptr;
  REQUIRE(ampx_fp8_recipe_create(ctx, nullptr, &recipe) == AMPX_OK);
  ampx_autocast_options o = AMPX_AUTOCAST_OPTIONS_INIT;
  o.dtype = AMPX_BF16;
  ampx_autocast policy = nullptr;
  REQUIRE(ampx_autocast_create(ctx, &o, &policy) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_autocast_set_fp8(policy, recipe, 0), AMPX_ERR_NOT_SUPPORTED,
                   "compute capability 8.0");
  ampx_fp8_stats stats = AMPX_FP8_STATS_INIT;
  REQUIRE(ampx_autocast_fp8_stats(policy, &stats) == AMPX_OK);
  CHECK(stats.fp8_products == 0);
  ampx_autocast_release(policy);
  ampx_fp8_recipe_release(recipe);
}
#endif
