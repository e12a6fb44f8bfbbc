// test_losses_torch.cpp -- mse_loss of f16/bf16 inputs at fp32 accuracy, and
// bce_with_logits with torch's weight and pos_weight (ampx_bce_with_logits_ex),
// through the public C API on the test device (the CPU; CUDA, the emulator
// in CI), against references computed here in double precision from
// torch's definitions, never from the library's math headers.
//
// Bounds. Inputs are values of their dtype, so the references see exactly
// what ampx sees.
//  - mse_loss element: (x - t)^2 with the difference and the square each
//    rounded to fp32 once: within 3 * 2^-24 relative. A sum of n positive
//    terms adds n - 1 roundings, a mean two more (1/n and the product):
//    (n + 5) * 2^-24 of the result. Rounding the difference or the square to
//    16 bits first (the fault this pins) costs up to 2^-9 (bf16) or 2^-12
//    (f16) relative per step: the element 7.349 became 7.406 in bf16.
//  - A gradient of a 16-bit input is computed in fp32 (for mse_loss a few
//    roundings, 2^-22 relative at most) and rounded to its type once:
//    within 2^-p + 2^-22 relative of the double value, p = 11 (f16) or 8
//    (bf16), plus half of f16's smallest subnormal. Two 16-bit roundings
//    could miss by up to a whole ulp. bce_with_logits's fp32 error is the
//    1e-5 below.
//  - bce_with_logits in fp32: exp, log1p and a few products, each a few
//    ulps: 1e-5 relative plus 1e-6 of the largest element (as
//    test_ops_more.cpp derives). Its gradients are checked against central
//    differences (step 1e-4, so truncation ~1e-8) of the double reference:
//    1e-5 relative plus 1e-6 of the tensor's largest element, far below the
//    O(1) a wrong formula gives.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::dtype_of;
using ampx_fixture::make;
using ampx_fixture::round_to;
using ampx_fixture::values_of;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;
using Dims = std::vector<int64_t>;
using Rng = ampx_fixture::Rng;

constexpr double kEps32 = 0x1p-24;

size_t count_of(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return static_cast<size_t>(n);
}

Vec rounded(ampx_dtype dtype, Vec v) {
  for (double& x : v) x = round_to(dtype, x);
  return v;
}

double largest(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

ampx_tensor grad_of(ampx_tensor t) {
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(t, &g) == AMPX_OK);
  REQUIRE(g != nullptr);
  return g;
}

// Unit roundoff of a 16-bit type's rounding (2^-p), and half of its smallest
// subnormal (the absolute error of a rounding near 0).
double unit_roundoff(ampx_dtype dtype) {
  return dtype == AMPX_F16 ? 0x1p-11 : dtype == AMPX_BF16 ? 0x1p-8 : 0x1p-24;
}
double half_tiny(ampx_dtype dtype) {
  return dtype == AMPX_F16 ? 0x1p-25 : dtype == AMPX_BF16 ? 0x1p-134 : 0x1p-150;
}

// A gradient of `dtype` against its double value: rounded once from an
// fp32 computation within `fp32_error` relative.
void check_rounded_once(const char* what, ampx_dtype dtype, const Vec& have, const Vec& want,
                        double fp32_error) {
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound =
        (unit_roundoff(dtype) + fp32_error) * std::fabs(want[i]) + half_tiny(dtype);
    CHECK_MESSAGE(std::fabs(have[i] - want[i]) <= bound, std::string(what), "[", i, "]: ",
                  have[i], " vs ", want[i], " (bound ", bound, ")");
  }
}

void check_close(const char* what, const Vec& have, const Vec& want, double rtol,
                 double atol_of_max) {
  REQUIRE(have.size() == want.size());
  const double atol = atol_of_max * largest(want);
  for (size_t i = 0; i < want.size(); ++i)
    CHECK_MESSAGE(std::fabs(have[i] - want[i]) <= rtol * std::fabs(want[i]) + atol,
                  std::string(what), "[", i, "]: ", have[i], " vs ", want[i]);
}

const char* reduction_name(ampx_reduction r) {
  return r == AMPX_REDUCTION_MEAN ? "mean" : r == AMPX_REDUCTION_SUM ? "sum" : "none";
}

// ---- mse_loss ---------------------------------------------------------------------------------

TEST_CASE("losses: mse_loss of f16 and bf16 inputs is accurate to fp32, gradients rounded once") {
  Ctx ctx;
  Rng rng(43);
  const Dims dims = {5, 7};  // 35 elements, as the mean
  const size_t n = count_of(dims);
  for (ampx_dtype dtype : {AMPX_BF16, AMPX_F16, AMPX_F32}) {
    Vec x = rounded(dtype, rng.vector(n, -4, 4)), t = rounded(dtype, rng.vector(n, -1, 2));
    // The element: 3 - 0.2890625 = 2.7109375, squared 7.34918...; in
    // bf16 the difference rounds to 2.71875 and its square to 7.40625.
    x[0] = 3.0;
    t[0] = 0.2890625;
    // Nearly equal values, whose difference is exact in fp32 but not in 16 bits.
    x[1] = round_to(dtype, 1000.0);
    t[1] = round_to(dtype, 0.0078125);
    const Vec r = rounded(AMPX_F32, rng.vector(n, -2, 2));
    for (ampx_reduction reduction :
         {AMPX_REDUCTION_NONE, AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM}) {
      INFO(std::string(ampx_dtype_name(dtype)), ", reduction ",
           std::string(reduction_name(reduction)));
      REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
      Tensor xt(make(ctx, dtype, dims, x, true)), tt(make(ctx, dtype, dims, t, true));
      ampx_tensor loss = nullptr;
      REQUIRE_MESSAGE(ampx_mse_loss(xt, tt, reduction, &loss) == AMPX_OK, last_error());
      CHECK(dtype_of(loss) == AMPX_F32);
      const Vec have = values_of(loss);
      Vec squares(n);
      double sum = 0.0;
      for (size_t i = 0; i < n; ++i) {
        squares[i] = (x[i] - t[i]) * (x[i] - t[i]);
        sum += squares[i];
      }
      const double scale = reduction == AMPX_REDUCTION_MEAN ? 1.0 / static_cast<double>(n) : 1.0;
      Vec dy(n, scale);  // d result / d element's square
      ampx_tensor seed = loss;
      if (reduction == AMPX_REDUCTION_NONE) {
        REQUIRE(have.size() == n);
        for (size_t i = 0; i < n; ++i)
          CHECK_MESSAGE(std::fabs(have[i] - squares[i]) <= 3 * kEps32 * squares[i], "[", i,
                        "]: ", have[i], " vs ", squares[i]);
        if (dtype == AMPX_BF16) CHECK(have[0] != 7.40625);
        // L = sum(loss * r): each element's gradient is r.
        Tensor rt(make(ctx, AMPX_F32, dims, r));
        ampx_tensor weighted = nullptr;
        REQUIRE(ampx_mul(loss, rt, &weighted) == AMPX_OK);
        REQUIRE(ampx_sum(weighted, &seed) == AMPX_OK);
        dy = r;
      } else {
        REQUIRE(have.size() == 1);
        const double want = sum * scale;
        CHECK_MESSAGE(std::fabs(have[0] - want) <= (n + 5) * kEps32 * want, have[0], " vs ",
                      want);
      }
      REQUIRE_MESSAGE(ampx_backward(seed, nullptr) == AMPX_OK, last_error());
      Vec dx(n), dt(n);
      for (size_t i = 0; i < n; ++i) {
        dx[i] = 2.0 * (x[i] - t[i]) * dy[i];
        dt[i] = -dx[i];
      }
      ampx_tensor gx = grad_of(xt), gt = grad_of(tt);
      CHECK(dtype_of(gx) == dtype);
      CHECK(dtype_of(gt) == dtype);
      check_rounded_once("d input", dtype, values_of(gx), dx, 0x1p-22);
      check_rounded_once("d target", dtype, values_of(gt), dt, 0x1p-22);
      const Vec gxv = values_of(gx), gtv = values_of(gt);
      for (size_t i = 0; i < n; ++i) CHECK(gtv[i] == -gxv[i]);
      REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    }
  }
}

TEST_CASE("losses: mse_loss gradients reach only the inputs that require one") {
  Ctx ctx;
  Tensor x(make(ctx, AMPX_BF16, {3}, {1.0, 2.0, 3.0}, true));
  Tensor t(make(ctx, AMPX_BF16, {3}, {0.5, 2.5, 1.0}));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor loss = nullptr;
  REQUIRE(ampx_mse_loss(x, t, AMPX_REDUCTION_SUM, &loss) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  CHECK(values_of(grad_of(x)) == Vec{1.0, -1.0, 4.0});
  ampx_tensor none = nullptr;
  REQUIRE(ampx_tensor_grad(t, &none) == AMPX_OK);
  CHECK(none == nullptr);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

// ---- bce_with_logits with weight and pos_weight -------------------------------------------------

// torch's binary_cross_entropy_with_logits per element, in double:
// -w [p t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))].
double bce_ref(double x, double t, double w, double p) {
  const double log_sig = -std::log1p(std::exp(-x));
  const double log_one_minus_sig = -std::log1p(std::exp(x));
  return -w * (p * t * log_sig + (1 - t) * log_one_minus_sig);
}

// Element i of a tensor of `dims` broadcast to `shape` (aligned at the
// right): its index in the tensor's own row-major order.
size_t broadcast_index(const Dims& dims, const Dims& shape, size_t i) {
  size_t index = 0, stride = 1;
  const size_t offset = shape.size() - dims.size();
  for (size_t d = shape.size(); d-- > 0;) {
    const size_t coordinate = i % static_cast<size_t>(shape[d]);
    i /= static_cast<size_t>(shape[d]);
    if (d >= offset) {
      const auto extent = static_cast<size_t>(dims[d - offset]);
      if (extent != 1) index += coordinate * stride;
      stride *= extent;
    }
  }
  return index;
}

struct BceCase {
  Dims shape;
  bool has_weight, has_pos_weight;
  Dims weight_dims, pos_weight_dims;
};

// The loss of the reduction, L = sum(loss * r) for none, in double.
double bce_total(const BceCase& c, const Vec& x, const Vec& t, const Vec& w, const Vec& p,
                 ampx_reduction reduction, const Vec& r) {
  double total = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double wi = c.has_weight ? w[broadcast_index(c.weight_dims, c.shape, i)] : 1.0;
    const double pi = c.has_pos_weight ? p[broadcast_index(c.pos_weight_dims, c.shape, i)] : 1.0;
    const double l = bce_ref(x[i], t[i], wi, pi);
    total += reduction == AMPX_REDUCTION_NONE ? l * r[i] : l;
  }
  return reduction == AMPX_REDUCTION_MEAN ? total / static_cast<double>(x.size()) : total;
}

// Central differences of bce_total with respect to x (or t).
Vec central_differences(const BceCase& c, Vec x, Vec t, const Vec& w, const Vec& p,
                        ampx_reduction reduction, const Vec& r, bool of_targets) {
  Vec& v = of_targets ? t : x;
  Vec g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i], h = 1e-4 * std::max(1.0, std::fabs(keep));
    v[i] = keep + h;
    const double up = bce_total(c, x, t, w, p, reduction, r);
    v[i] = keep - h;
    const double down = bce_total(c, x, t, w, p, reduction, r);
    v[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

ampx_status bce_ex(ampx_tensor x, ampx_tensor t, ampx_tensor w, ampx_tensor p,
                   ampx_reduction reduction, ampx_tensor* out) {
  ampx_bce_with_logits_options o = AMPX_BCE_WITH_LOGITS_OPTIONS_INIT;
  o.reduction = reduction;
  return ampx_bce_with_logits_ex(x, t, w, p, &o, out);
}

// Runs one case in `dtype` and checks the values and both gradients.
void check_bce_case(ampx_context ctx, const BceCase& c, ampx_dtype dtype, ampx_reduction reduction,
                    bool target_grad, Rng& rng) {
  const size_t n = count_of(c.shape);
  Vec x = rounded(dtype, rng.vector(n, -4, 4)), t = rounded(dtype, rng.vector(n, 0, 1));
  t[0] = 1.0;
  if (n > 1) t[1] = 0.0;
  const Vec w = rounded(AMPX_F32, rng.vector(count_of(c.weight_dims), 0.25, 2));
  const Vec p = rounded(AMPX_F32, rng.vector(count_of(c.pos_weight_dims), 0.5, 3));
  const Vec r = rounded(AMPX_F32, rng.vector(n, -2, 2));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  Tensor xt(make(ctx, dtype, c.shape, x, true)), tt(make(ctx, dtype, c.shape, t, target_grad));
  Tensor wt, pt;
  if (c.has_weight) wt.handle = make(ctx, AMPX_F32, c.weight_dims, w);
  if (c.has_pos_weight) pt.handle = make(ctx, AMPX_F32, c.pos_weight_dims, p);
  ampx_tensor loss = nullptr;
  REQUIRE_MESSAGE(bce_ex(xt, tt, wt, pt, reduction, &loss) == AMPX_OK, last_error());
  CHECK(dtype_of(loss) == AMPX_F32);
  ampx_tensor seed = loss;
  if (reduction == AMPX_REDUCTION_NONE) {
    CHECK(ampx_fixture::dims_of(loss) == c.shape);
    Vec want(n);
    for (size_t i = 0; i < n; ++i) {
      const double wi = c.has_weight ? w[broadcast_index(c.weight_dims, c.shape, i)] : 1.0;
      const double pi = c.has_pos_weight ? p[broadcast_index(c.pos_weight_dims, c.shape, i)] : 1.0;
      want[i] = bce_ref(x[i], t[i], wi, pi);
    }
    check_close("loss", values_of(loss), want, 1e-5, 1e-6);
    Tensor rt(make(ctx, AMPX_F32, c.shape, r));
    ampx_tensor weighted = nullptr;
    REQUIRE(ampx_mul(loss, rt, &weighted) == AMPX_OK);
    REQUIRE(ampx_sum(weighted, &seed) == AMPX_OK);
  } else {
    CHECK(ampx_fixture::dims_of(loss).empty());
    check_close("loss", values_of(loss), {bce_total(c, x, t, w, p, reduction, r)}, 1e-5, 0);
  }
  REQUIRE_MESSAGE(ampx_backward(seed, nullptr) == AMPX_OK, last_error());
  const Vec dx = central_differences(c, x, t, w, p, reduction, r, false);
  ampx_tensor gx = grad_of(xt);
  CHECK(dtype_of(gx) == dtype);
  if (dtype == AMPX_F32)
    check_close("d logits", values_of(gx), dx, 1e-5, 1e-6);
  else
    check_rounded_once("d logits", dtype, values_of(gx), dx, 1e-5);
  ampx_tensor gt = nullptr;
  REQUIRE(ampx_tensor_grad(tt, &gt) == AMPX_OK);
  if (target_grad) {
    REQUIRE(gt != nullptr);
    CHECK(dtype_of(gt) == dtype);
    const Vec dt = central_differences(c, x, t, w, p, reduction, r, true);
    if (dtype == AMPX_F32)
      check_close("d targets", values_of(gt), dt, 1e-5, 1e-6);
    else
      check_rounded_once("d targets", dtype, values_of(gt), dt, 1e-5);
  } else {
    CHECK(gt == nullptr);
  }
  ampx_tensor gw = nullptr;
  if (c.has_weight) {
    REQUIRE(ampx_tensor_grad(wt, &gw) == AMPX_OK);
    CHECK(gw == nullptr);  // a constant
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("losses: bce_with_logits weight and pos_weight, values and gradients as torch's") {
  Ctx ctx;
  Rng rng(4343);
  const std::vector<BceCase> cases = {
      {{4, 3}, true, true, {4, 3}, {3}},           // full weight, one pos_weight per class
      {{4, 3}, true, false, {3}, {}},              // per-class weight (read in place)
      {{4, 3}, false, true, {}, {3}},              // pos_weight only
      {{2, 3, 4}, true, true, {3, 1}, {1, 4}},     // weight expanded, pos_weight [1, C]
      {{2, 3, 4}, true, true, {2, 1, 4}, {3, 4}},  // weight expanded, pos_weight [T, C]
      {{5}, true, true, {}, {1}},                  // 0-D weight, pos_weight [1]
  };
  for (size_t k = 0; k < cases.size(); ++k)
    for (ampx_reduction reduction :
         {AMPX_REDUCTION_NONE, AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM}) {
      INFO("case ", k, ", reduction ", std::string(reduction_name(reduction)));
      check_bce_case(ctx, cases[k], AMPX_F32, reduction, k % 2 == 0, rng);
    }
  for (ampx_dtype dtype : {AMPX_F16, AMPX_BF16})
    for (ampx_reduction reduction :
         {AMPX_REDUCTION_NONE, AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM}) {
      INFO(std::string(ampx_dtype_name(dtype)), ", reduction ",
           std::string(reduction_name(reduction)));
      check_bce_case(ctx, cases[3], dtype, reduction, true, rng);
    }
}

TEST_CASE("losses: bce_with_logits_ex without weights is bce_with_logits, bit for bit") {
  Ctx ctx;
  Rng rng(7);
  const Vec x = rounded(AMPX_F32, rng.vector(24, -6, 6));
  const Vec t = rounded(AMPX_F32, rng.vector(24, 0, 1));
  for (ampx_reduction reduction : {AMPX_REDUCTION_NONE, AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM}) {
    INFO(std::string(reduction_name(reduction)));
    Tensor xt(make(ctx, AMPX_F32, {4, 6}, x)), tt(make(ctx, AMPX_F32, {4, 6}, t));
    Tensor plain, ex, ones_weighted;
    REQUIRE(ampx_bce_with_logits(xt, tt, reduction, plain.out()) == AMPX_OK);
    REQUIRE(bce_ex(xt, tt, nullptr, nullptr, reduction, ex.out()) == AMPX_OK);
    CHECK(ampx_fixture::bytes_of(plain) == ampx_fixture::bytes_of(ex));
    // Weights of 1 change nothing either (w * loss and p = 1 are exact).
    Tensor one(make(ctx, AMPX_F32, {6}, Vec(6, 1.0)));
    REQUIRE(bce_ex(xt, tt, one, one, reduction, ones_weighted.out()) == AMPX_OK);
    CHECK(ampx_fixture::bytes_of(plain) == ampx_fixture::bytes_of(ones_weighted));
  }
  // options NULL: the mean.
  Tensor xt(make(ctx, AMPX_F32, {2}, {0.5, -1.0})), tt(make(ctx, AMPX_F32, {2}, {1.0, 0.0}));
  Tensor mean, defaults;
  REQUIRE(ampx_bce_with_logits(xt, tt, AMPX_REDUCTION_MEAN, mean.out()) == AMPX_OK);
  REQUIRE(ampx_bce_with_logits_ex(xt, tt, nullptr, nullptr, nullptr, defaults.out()) == AMPX_OK);
  CHECK(values_of(mean) == values_of(defaults));
}

TEST_CASE("losses: weighted bce_with_logits is fp32 under autocast, gradients in input dtypes") {
  Ctx ctx;
  const Vec x = {2.5, -1.25, 0.5, -3.0, 1.0, 0.0}, t = {1, 0, 0.5, 1, 0, 0.25};
  const Vec p = {2.0, 0.5, 3.0};
  for (ampx_dtype lower : {AMPX_F16, AMPX_BF16}) {
    INFO(std::string(ampx_dtype_name(lower)));
    ampx_autocast policy = nullptr;
    ampx_autocast_options o = ampx_autocast_options_default();
    o.dtype = lower;
    REQUIRE(ampx_autocast_create(ctx, &o, &policy) == AMPX_OK);
    REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    // f32 logits stay f32 (not lowered), f16 targets are lifted to f32.
    Tensor xt(make(ctx, AMPX_F32, {2, 3}, x, true)), tt(make(ctx, AMPX_F16, {2, 3}, t, true));
    Tensor pt(make(ctx, AMPX_BF16, {3}, p));
    ampx_tensor loss = nullptr;
    REQUIRE_MESSAGE(bce_ex(xt, tt, nullptr, pt, AMPX_REDUCTION_SUM, &loss) == AMPX_OK,
                    last_error());
    CHECK(dtype_of(loss) == AMPX_F32);
    double want = 0.0;
    for (size_t i = 0; i < x.size(); ++i) want += bce_ref(x[i], t[i], 1.0, p[i % 3]);
    CHECK(std::fabs(values_of(loss)[0] - want) <= 1e-5 * want);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(dtype_of(grad_of(xt)) == AMPX_F32);
    CHECK(dtype_of(grad_of(tt)) == AMPX_F16);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
    ampx_autocast_release(policy);
  }
}

TEST_CASE("losses: bce_with_logits_ex refuses bad weights and options, changing nothing") {
  Ctx ctx;
  Ctx other;
  const Vec x = {1, -2, 3, -4, 5, -6}, t = {1, 0, 1, 0, 0.5, 0.5};
  Tensor xt(make(ctx, AMPX_F32, {2, 3}, x, true)), tt(make(ctx, AMPX_F32, {2, 3}, t));
  Tensor c4(make(ctx, AMPX_F32, {4}, Vec(4, 1.0)));
  Tensor rows(make(ctx, AMPX_F32, {2}, Vec(2, 1.0)));  // [N]: aligns with C = 3, not N
  Tensor grows(make(ctx, AMPX_F32, {2, 2, 3}, Vec(12, 1.0)));
  Tensor ints(make(ctx, AMPX_I32, {3}, Vec(3, 1.0)));
  Tensor foreign(make(other, AMPX_F32, {3}, Vec(3, 1.0)));
  Tensor ok(make(ctx, AMPX_F32, {3}, Vec(3, 2.0)));
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(bce_ex(xt, tt, c4, nullptr, AMPX_REDUCTION_MEAN, &out), AMPX_ERR_SHAPE,
                   "'weight' is f32[4]");
  CHECK_FAILS_WITH(bce_ex(xt, tt, nullptr, rows, AMPX_REDUCTION_MEAN, &out), AMPX_ERR_SHAPE,
                   "pos_weight");
  CHECK_FAILS_WITH(bce_ex(xt, tt, grows, nullptr, AMPX_REDUCTION_SUM, &out), AMPX_ERR_SHAPE,
                   "[2, 3]");
  CHECK_FAILS_WITH(bce_ex(xt, tt, ints, nullptr, AMPX_REDUCTION_MEAN, &out), AMPX_ERR_DTYPE,
                   "weight");
  CHECK_FAILS_WITH(bce_ex(xt, tt, ok, ints, AMPX_REDUCTION_MEAN, &out), AMPX_ERR_DTYPE,
                   "pos_weight");
  CHECK_FAILS_WITH(bce_ex(xt, tt, foreign, nullptr, AMPX_REDUCTION_MEAN, &out), AMPX_ERR_DEVICE,
                   "weight");
  CHECK_FAILS_WITH(bce_ex(xt, tt, ok, ok, static_cast<ampx_reduction>(9), &out),
                   AMPX_ERR_INVALID_ARGUMENT, "reduction");
  ampx_bce_with_logits_options bad = AMPX_BCE_WITH_LOGITS_OPTIONS_INIT;
  bad.struct_size = 0;
  CHECK_FAILS_WITH(ampx_bce_with_logits_ex(xt, tt, ok, ok, &bad, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "struct_size");
  CHECK(out == nullptr);
  CHECK(values_of(xt) == x);
  CHECK(values_of(tt) == t);
  // Nothing was recorded: the one loss that follows gives its own gradient.
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor loss = nullptr;
  REQUIRE(bce_ex(xt, tt, ok, nullptr, AMPX_REDUCTION_SUM, &loss) == AMPX_OK);
  REQUIRE(ampx_backward(loss, nullptr) == AMPX_OK);
  const Vec g = values_of(grad_of(xt));
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = 2.0 * (1.0 / (1.0 + std::exp(-x[i])) - t[i]);
    CHECK(std::fabs(g[i] - want) <= 1e-6 * std::max(1.0, std::fabs(want)));
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

}  // namespace
