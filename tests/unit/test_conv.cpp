// test_conv.cpp -- ampx_conv2d, ampx_max_pool2d, ampx_avg_pool2d and 4-D
// batch norm through the C API beyond the fp32 gradient checks
// (test_ops_gradcheck.cpp): f16 and bf16 on the test device against fp32 on
// the CPU, autocast's dtypes as torch.autocast's, bad input.
//
// Tolerances. For f16 and bf16 both sides compute on the same rounded
// inputs with fp32 accumulation; ampx rounds each result once to the type
// (and its backward reads rounded gradients), so results agree to a few
// units in the last place of the type: 4 ulps relative plus 4 ulps of the
// tensor's largest element (the accumulation-order differences of fp32
// sums of a few hundred products are ~1e-6 relative, far below one ulp).
// A wrong index or a missed tap is off by O(1).
#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::dtype_of;
using ampx_fixture::dims_of;
using ampx_fixture::grad_of;
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

size_t count_of(const Dims& d) {
  int64_t n = 1;
  for (int64_t e : d) n *= e;
  return static_cast<size_t>(n);
}

Vec rounded(ampx_dtype t, Vec v) {
  for (double& x : v) x = round_to(t, x);
  return v;
}

double ulp(ampx_dtype t) { return t == AMPX_F16 ? 0x1p-10 : t == AMPX_BF16 ? 0x1p-7 : 0x1p-23; }

void check_close(const char* what, ampx_dtype t, const Vec& have, const Vec& want) {
  INFO(what);
  REQUIRE(have.size() == want.size());
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < have.size(); ++i)
    CHECK_MESSAGE(std::fabs(have[i] - want[i]) <= 4 * ulp(t) * (std::fabs(want[i]) + scale),
                  "element ", i, ": ", have[i], " vs ", want[i]);
}

struct CpuCtx {
  ampx_context handle = nullptr;
  CpuCtx() {
    ampx_context_options o = ampx_context_options_default();
    o.device_type = AMPX_DEVICE_CPU;
    REQUIRE(ampx_context_create(&o, &handle) == AMPX_OK);
  }
  ~CpuCtx() { ampx_context_release(handle); }
  operator ampx_context() const { return handle; }
};

// The output and every input's gradient of `op` on `inputs` (all requiring
// grad) in `dtype` on `ctx`, backpropagating sum(out * r).
struct Result {
  Vec out;
  std::vector<Vec> grads;
};

using Op = std::function<ampx_status(const std::vector<ampx_tensor>&, ampx_tensor*)>;

Result run(ampx_context ctx, ampx_dtype dtype, const std::vector<Dims>& dims,
           const std::vector<Vec>& values, const Op& op, uint64_t seed) {
  std::deque<Tensor> in;
  std::vector<ampx_tensor> handles;
  for (size_t i = 0; i < dims.size(); ++i) {
    in.emplace_back(make(ctx, dtype, dims[i], values[i], true));
    handles.push_back(in.back());
  }
  Tensor out, weighted, loss, r;
  REQUIRE_MESSAGE(op(handles, out.out()) == AMPX_OK, last_error());
  REQUIRE(dtype_of(out) == dtype);
  Rng rng(seed);
  r.handle = make(ctx, dtype, dims_of(out),
                  rounded(dtype, rng.vector(values_of(out).size(), -1, 1)));
  REQUIRE(ampx_mul(out, r, weighted.out()) == AMPX_OK);
  REQUIRE(ampx_sum(weighted, loss.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  Result result{values_of(out), {}};
  for (ampx_tensor h : handles) result.grads.push_back(values_of(grad_of(h)));
  return result;
}

void compare_with_cpu_f32(const std::string& what, const std::vector<Dims>& dims, const Op& op,
                          uint64_t seed) {
  Rng rng(seed);
  std::vector<Vec> values;
  for (const Dims& d : dims) values.push_back(rng.vector(count_of(d), -1, 1));
  Ctx ctx;
  CpuCtx cpu;
  for (ampx_dtype t : {AMPX_F32, AMPX_F16, AMPX_BF16}) {
    INFO(what, " ", ampx_dtype_name(t));
    std::vector<Vec> input;
    for (const Vec& v : values) input.push_back(rounded(t, v));
    const Result want = run(cpu, AMPX_F32, dims, input, op, seed);
    const Result have = run(ctx, t, dims, input, op, seed);
    // The reference's output rounded as ampx's is; its backward starts from
    // the same rounded r, so its gradients are compared unrounded.
    check_close("out", t, have.out, rounded(t, want.out));
    for (size_t i = 0; i < dims.size(); ++i) check_close("grad", t, have.grads[i], want.grads[i]);
  }
}

Op conv(int64_t stride, int64_t pad, int64_t dilation, int64_t groups) {
  return [=](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
    ampx_conv2d_options o = AMPX_CONV2D_OPTIONS_INIT;
    o.stride[0] = o.stride[1] = stride;
    o.padding[0] = o.padding[1] = pad;
    o.dilation[0] = o.dilation[1] = dilation;
    o.groups = groups;
    return ampx_conv2d(t[0], t[1], t.size() > 2 ? t[2] : nullptr, &o, y);
  };
}

}  // namespace

TEST_CASE("conv2d in f32, f16 and bf16 matches fp32 on the CPU") {
  SKIP_UNLESS_CONVOLUTION();
  compare_with_cpu_f32("3x3 pad 1", {{2, 8, 9, 7}, {16, 8, 3, 3}, {16}}, conv(1, 1, 1, 1), 1);
  compare_with_cpu_f32("stride 2 dilation 2 groups 2", {{2, 6, 11, 10}, {4, 3, 3, 3}},
                       conv(2, 2, 2, 2), 2);
  compare_with_cpu_f32("depthwise", {{1, 8, 8, 8}, {8, 1, 3, 3}, {8}}, conv(1, 1, 1, 8), 3);
  compare_with_cpu_f32("1x1", {{3, 16, 5, 5}, {8, 16, 1, 1}, {8}}, conv(1, 0, 1, 1), 4);
}

// Pooling runs on every backend; on CUDA this compares its kernels' gather
// backward with the CPU's scatter.
TEST_CASE("pooling in f32, f16 and bf16 matches fp32 on the CPU") {
  compare_with_cpu_f32(
      "max 3x3 stride 2 pad 1 ceil", {{2, 4, 9, 8}},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        ampx_pool2d_options o = AMPX_POOL2D_OPTIONS_INIT;
        o.stride[0] = o.stride[1] = 2;
        o.padding[0] = o.padding[1] = 1;
        o.ceil_mode = 1;
        return ampx_max_pool2d(t[0], 3, 3, &o, y);
      },
      5);
  compare_with_cpu_f32(
      "avg 3x3 stride 2 pad 1 exclude pad", {{2, 4, 9, 8}},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        ampx_pool2d_options o = AMPX_POOL2D_OPTIONS_INIT;
        o.stride[0] = o.stride[1] = 2;
        o.padding[0] = o.padding[1] = 1;
        o.count_include_pad = 0;
        return ampx_avg_pool2d(t[0], 3, 3, &o, y);
      },
      6);
  compare_with_cpu_f32(
      "max 3x2 stride 1 dilation 2 (overlapping)", {{1, 3, 10, 9}},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        ampx_pool2d_options o = AMPX_POOL2D_OPTIONS_INIT;
        o.stride[0] = o.stride[1] = 1;
        o.dilation[0] = o.dilation[1] = 2;
        o.padding[0] = 1;
        return ampx_max_pool2d(t[0], 3, 2, &o, y);
      },
      7);
  compare_with_cpu_f32(
      "avg 2x3 stride (2, 1) pad 1 divisor 4", {{2, 2, 7, 6}},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        ampx_pool2d_options o = AMPX_POOL2D_OPTIONS_INIT;
        o.stride[0] = 2;
        o.stride[1] = 1;
        o.padding[0] = o.padding[1] = 1;
        o.divisor_override = 4;
        return ampx_avg_pool2d(t[0], 2, 3, &o, y);
      },
      8);
}

// torch's max pooling: a NaN in a window is its maximum (the last NaN gets
// the gradient), else the first of equal maxima in row-major order does.
TEST_CASE("max_pool2d: a window's NaN wins, the last one; of equal maxima the first") {
  Ctx ctx;
  const double nan = std::nan("");
  // Three 2x2 windows: {1, 3 / 2, NaN}, {NaN, 0 / 5, NaN}, {4, 4 / 4, 1}.
  const Vec xs = {1, 3, nan, 0, 4, 4, 2, nan, 5, nan, 4, 1};
  for (ampx_dtype dtype : {AMPX_F32, AMPX_F16, AMPX_BF16}) {
    INFO("dtype ", dtype);
    Tensor x(make(ctx, dtype, {1, 1, 2, 6}, xs, true));
    Tensor weights(make(ctx, dtype, {1, 1, 1, 3}, Vec{1, 2, 3}));
    Tensor y, weighted, loss;
    REQUIRE_MESSAGE(ampx_max_pool2d(x, 2, 2, nullptr, y.out()) == AMPX_OK, last_error());
    const Vec out = values_of(y);
    REQUIRE(out.size() == 3);
    CHECK(std::isnan(out[0]));
    CHECK(std::isnan(out[1]));
    CHECK(out[2] == 4.0);
    REQUIRE(ampx_mul(y, weights, weighted.out()) == AMPX_OK);
    REQUIRE(ampx_sum(weighted, loss.out()) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(values_of(grad_of(x)) == Vec{0, 0, 0, 0, 3, 0, 0, 1, 0, 2, 0, 0});
  }
}

// Max pooling whose windows lie inside the image (the CPU's fast paths:
// 2x2 stride 2, and any other window without padding or dilation) against
// torch's rule written out here: per window, in row-major order, the first
// maximum, unless a NaN is in it, then the last NaN; the gradient goes to
// that element. Small integers, signed zeros and NaNs make ties and NaNs
// common, and every value is exact in f16 and bf16.
TEST_CASE("max_pool2d with windows inside the image picks torch's element, values and gradients") {
  struct Case {
    int64_t kh, kw, sh, sw;
  };
  // Odd extents: 2x2 windows leave the last row and column out.
  const int64_t planes = 3, height = 7, width = 9;
  Rng rng(11);
  Vec xs(static_cast<size_t>(planes * height * width));
  for (double& v : xs) {
    const double r = rng.uniform(0, 1);
    v = r < 0.08 ? std::nan("") : r < 0.16 ? -0.0 : r < 0.24 ? 0.0 : std::floor(r * 6) - 3;
  }
  // Two 2x2 windows whose maxima are zeros of both signs: +0 first, then -0.
  const Vec corner = {0.0, -0.0, -0.0, 0.0, -0.0, -1.0, 0.0, -2.0};
  for (size_t i = 0; i < 4; ++i) xs[i] = corner[i], xs[width + i] = corner[4 + i];
  Ctx ctx;
  for (const Case& c : {Case{2, 2, 2, 2}, Case{3, 3, 1, 1}, Case{3, 2, 2, 1}, Case{2, 2, 1, 1}}) {
    const int64_t oh = (height - c.kh) / c.sh + 1, ow = (width - c.kw) / c.sw + 1;
    Vec want(static_cast<size_t>(planes * oh * ow)), want_grad(xs.size(), 0.0),
        weights(want.size());
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<double>(i % 13 + 1);
    for (int64_t n = 0; n < planes; ++n)
      for (int64_t p = 0; p < oh; ++p)
        for (int64_t q = 0; q < ow; ++q) {
          int64_t best = -1, last_nan = -1;
          for (int64_t i = 0; i < c.kh; ++i)
            for (int64_t j = 0; j < c.kw; ++j) {
              const int64_t at = (n * height + p * c.sh + i) * width + q * c.sw + j;
              if (std::isnan(xs[at])) last_nan = at;
              else if (best < 0 || xs[at] > xs[best]) best = at;
            }
          const int64_t winner = last_nan >= 0 ? last_nan : best;
          const size_t o = static_cast<size_t>((n * oh + p) * ow + q);
          want[o] = xs[static_cast<size_t>(winner)];
          want_grad[static_cast<size_t>(winner)] += weights[o];
        }
    for (ampx_dtype dtype : {AMPX_F32, AMPX_F16, AMPX_BF16}) {
      INFO("window ", c.kh, "x", c.kw, " stride ", c.sh, "x", c.sw, ", ", ampx_dtype_name(dtype));
      Tensor x(make(ctx, dtype, {1, planes, height, width}, xs, true));
      Tensor w(make(ctx, dtype, {1, planes, oh, ow}, weights));
      Tensor y, weighted, loss;
      ampx_pool2d_options o = AMPX_POOL2D_OPTIONS_INIT;
      o.stride[0] = c.sh;
      o.stride[1] = c.sw;
      REQUIRE_MESSAGE(ampx_max_pool2d(x, c.kh, c.kw, &o, y.out()) == AMPX_OK, last_error());
      const Vec out = values_of(y);
      REQUIRE(out.size() == want.size());
      int64_t wrong = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        const bool same = std::isnan(want[i]) ? std::isnan(out[i])
                                              : out[i] == want[i] &&
                                                    std::signbit(out[i]) == std::signbit(want[i]);
        wrong += !same;
      }
      CHECK(wrong == 0);
      REQUIRE(ampx_mul(y, w, weighted.out()) == AMPX_OK);
      REQUIRE(ampx_sum(weighted, loss.out()) == AMPX_OK);
      REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
      CHECK(values_of(grad_of(x)) == want_grad);
    }
  }
}

TEST_CASE("conv2d with an empty batch gives an empty output and zero weight gradients") {
  SKIP_UNLESS_CONVOLUTION();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {0, 3, 5, 5}, {}, true));
  Tensor w(make(ctx, AMPX_F32, {4, 3, 3, 3}, Vec(108, 0.5), true));
  Tensor b(make(ctx, AMPX_F32, {4}, Vec(4, 0.5), true));
  Tensor y, loss;
  REQUIRE_MESSAGE(ampx_conv2d(x, w, b, nullptr, y.out()) == AMPX_OK, last_error());
  CHECK(dims_of(y) == Dims{0, 4, 3, 3});
  REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  CHECK(values_of(grad_of(w)) == Vec(108, 0.0));
  CHECK(values_of(grad_of(b)) == Vec(4, 0.0));
}

TEST_CASE("autocast: conv2d computes in the lower precision, pooling keeps, batch norm fp32") {
  SKIP_UNLESS_CONVOLUTION();
  // torch.autocast: conv2d is on the lower-precision list, max/avg pooling
  // and batch norm on none (they run in their input's type, batch norm
  // with fp32 statistics and parameters).
  Ctx ctx;
  Rng rng(7);
  for (ampx_dtype lower : {AMPX_F16, AMPX_BF16}) {
    INFO(ampx_dtype_name(lower));
    ampx_autocast policy = nullptr;
    ampx_autocast_options o = ampx_autocast_options_default();
    o.dtype = lower;
    REQUIRE(ampx_autocast_create(ctx, &o, &policy) == AMPX_OK);
    REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
    Tensor x(make(ctx, AMPX_F32, {2, 3, 8, 8}, rng.vector(384, -1, 1), true));
    Tensor w(make(ctx, AMPX_F32, {4, 3, 3, 3}, rng.vector(108, -1, 1), true));
    Tensor b(make(ctx, AMPX_F32, {4}, rng.vector(4, -1, 1), true));
    Tensor gamma(make(ctx, AMPX_F32, {4}, Vec(4, 1.0), true));
    Tensor beta(make(ctx, AMPX_F32, {4}, Vec(4, 0.0), true));
    Tensor rm(make(ctx, AMPX_F32, {4}, Vec(4, 0.0))), rv(make(ctx, AMPX_F32, {4}, Vec(4, 1.0)));
    Tensor y, n, p, a, pooled_f32, loss;
    ampx_conv2d_options co = AMPX_CONV2D_OPTIONS_INIT;
    co.padding[0] = co.padding[1] = 1;
    REQUIRE_MESSAGE(ampx_conv2d(x, w, b, &co, y.out()) == AMPX_OK, last_error());
    CHECK(dtype_of(y) == lower);
    REQUIRE_MESSAGE(ampx_batch_norm(y, gamma, beta, rm, rv, 1, 0.1, 1e-5, n.out()) == AMPX_OK,
                    last_error());
    CHECK(dtype_of(n) == lower);
    REQUIRE_MESSAGE(ampx_max_pool2d(n, 2, 2, nullptr, p.out()) == AMPX_OK, last_error());
    CHECK(dtype_of(p) == lower);
    REQUIRE_MESSAGE(ampx_avg_pool2d(x, 2, 2, nullptr, pooled_f32.out()) == AMPX_OK, last_error());
    CHECK(dtype_of(pooled_f32) == AMPX_F32);
    REQUIRE_MESSAGE(ampx_global_avg_pool2d(p, a.out()) == AMPX_OK, last_error());
    CHECK(dims_of(a) == Dims{2, 4, 1, 1});
    REQUIRE(ampx_sum(a, loss.out()) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(dtype_of(grad_of(x)) == AMPX_F32);
    CHECK(dtype_of(grad_of(w)) == AMPX_F32);
    CHECK(dtype_of(grad_of(gamma)) == AMPX_F32);
    CHECK(dtype_of(rm) == AMPX_F32);
    for (double v : values_of(rv)) CHECK(v != 1.0);  // the running variance moved, in fp32
    REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
    ampx_autocast_release(policy);
  }
}

TEST_CASE("conv2d and pooling: bad input gets a clear status with both shapes, changing nothing") {
  SKIP_UNLESS_CONVOLUTION();
  Ctx ctx;
  auto t = [&](Dims dims, ampx_dtype dtype = AMPX_F32) {
    return make(ctx, dtype, dims, Vec(count_of(dims), 0.5), true);
  };
  Tensor x(t({1, 4, 5, 5})), w(t({2, 4, 3, 3}));
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT, after = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &before) == AMPX_OK);
  ampx_tensor out = nullptr;
  {
    Tensor big(t({2, 4, 6, 6})), w3(t({3, 1, 3, 3})), w2d(t({2, 36})), wc(t({2, 3, 3, 3}));
    Tensor x2d(t({4, 25})), bias(t({3})), wh(t({2, 4, 3, 3}, AMPX_F16));
    CHECK_FAILS_WITH(ampx_conv2d(x, big, nullptr, nullptr, &out), AMPX_ERR_SHAPE,
                     "'x' is f32[1, 4, 5, 5] and 'weight' f32[2, 4, 6, 6]");
    CHECK_FAILS_WITH(ampx_conv2d(x, big, nullptr, nullptr, &out), AMPX_ERR_SHAPE, "larger");
    ampx_conv2d_options o = AMPX_CONV2D_OPTIONS_INIT;
    o.groups = 3;
    CHECK_FAILS_WITH(ampx_conv2d(x, w3, nullptr, &o, &out), AMPX_ERR_SHAPE, "groups 3");
    CHECK_FAILS_WITH(ampx_conv2d(x, wc, nullptr, nullptr, &out), AMPX_ERR_SHAPE, "f32[2, 3, 3, 3]");
    CHECK_FAILS_WITH(ampx_conv2d(x, w2d, nullptr, nullptr, &out), AMPX_ERR_SHAPE, "'weight'");
    CHECK_FAILS_WITH(ampx_conv2d(x2d, w, nullptr, nullptr, &out), AMPX_ERR_SHAPE, "'x'");
    CHECK_FAILS_WITH(ampx_conv2d(x, w, bias, nullptr, &out), AMPX_ERR_SHAPE, "'bias'");
    CHECK_FAILS_WITH(ampx_conv2d(x, wh, nullptr, nullptr, &out), AMPX_ERR_DTYPE, "share a dtype");
    Tensor ints(make(ctx, AMPX_I32, {1, 4, 5, 5}, Vec(100, 1.0))), bias_h(t({2}, AMPX_F16));
    CHECK_FAILS_WITH(ampx_conv2d(ints, w, nullptr, nullptr, &out), AMPX_ERR_DTYPE, "'x'");
    CHECK_FAILS_WITH(ampx_conv2d(x, w, bias_h, nullptr, &out), AMPX_ERR_DTYPE, "share a dtype");
    CHECK_FAILS_WITH(ampx_max_pool2d(ints, 2, 2, nullptr, &out), AMPX_ERR_DTYPE, "'x'");
    CHECK_FAILS_WITH(ampx_avg_pool2d(ints, 2, 2, nullptr, &out), AMPX_ERR_DTYPE, "'x'");
    CHECK_FAILS_WITH(ampx_conv2d(nullptr, w, nullptr, nullptr, &out), AMPX_ERR_INVALID_ARGUMENT,
                     "'x'");
    o = ampx_conv2d_options_default();
    o.stride[1] = 0;
    CHECK_FAILS_WITH(ampx_conv2d(x, w, nullptr, &o, &out), AMPX_ERR_INVALID_ARGUMENT, "'stride'");
    o = ampx_conv2d_options_default();
    o.padding[0] = -1;
    CHECK_FAILS_WITH(ampx_conv2d(x, w, nullptr, &o, &out), AMPX_ERR_INVALID_ARGUMENT, "'padding'");
    o = ampx_conv2d_options_default();
    o.dilation[0] = 0;
    CHECK_FAILS_WITH(ampx_conv2d(x, w, nullptr, &o, &out), AMPX_ERR_INVALID_ARGUMENT, "'dilation'");
    o = ampx_conv2d_options_default();
    o.groups = 0;
    CHECK_FAILS_WITH(ampx_conv2d(x, w, nullptr, &o, &out), AMPX_ERR_INVALID_ARGUMENT, "'groups'");
    o.struct_size = 0;
    CHECK_FAILS_WITH(ampx_conv2d(x, w, nullptr, &o, &out), AMPX_ERR_INVALID_ARGUMENT, "struct_size");

    ampx_pool2d_options p = AMPX_POOL2D_OPTIONS_INIT;
    CHECK_FAILS_WITH(ampx_max_pool2d(x, 6, 6, &p, &out), AMPX_ERR_SHAPE, "f32[1, 4, 5, 5]");
    CHECK_FAILS_WITH(ampx_max_pool2d(x, 0, 2, &p, &out), AMPX_ERR_INVALID_ARGUMENT, "kernel_size");
    CHECK_FAILS_WITH(ampx_max_pool2d(x2d, 2, 2, &p, &out), AMPX_ERR_SHAPE, "'x'");
    p.padding[0] = 2;
    CHECK_FAILS_WITH(ampx_max_pool2d(x, 3, 3, &p, &out), AMPX_ERR_INVALID_ARGUMENT, "half");
    p = ampx_pool2d_options_default();
    p.stride[0] = -1;
    CHECK_FAILS_WITH(ampx_max_pool2d(x, 2, 2, &p, &out), AMPX_ERR_INVALID_ARGUMENT, "'stride'");
    p = ampx_pool2d_options_default();
    p.dilation[0] = 2;
    CHECK_FAILS_WITH(ampx_avg_pool2d(x, 2, 2, &p, &out), AMPX_ERR_INVALID_ARGUMENT, "dilation");
    p = ampx_pool2d_options_default();
    p.divisor_override = -3;
    CHECK_FAILS_WITH(ampx_avg_pool2d(x, 2, 2, &p, &out), AMPX_ERR_INVALID_ARGUMENT, "divisor");
    p = ampx_pool2d_options_default();
    p.struct_size = 0;
    CHECK_FAILS_WITH(ampx_avg_pool2d(x, 2, 2, &p, &out), AMPX_ERR_INVALID_ARGUMENT, "struct_size");
    CHECK_FAILS_WITH(ampx_global_avg_pool2d(x2d, &out), AMPX_ERR_SHAPE, "'x'");
    CHECK_FAILS_WITH(ampx_max_pool2d(x, 2, 2, nullptr, nullptr), AMPX_ERR_INVALID_ARGUMENT, "out");
    CHECK(out == nullptr);
  }
  REQUIRE(ampx_memory_stats_get(ctx, &after) == AMPX_OK);
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(values_of(x) == Vec(100, 0.5));
}

TEST_CASE("conv2d over a batch the CPU splits into chunks equals the images one at a time") {
  // 32 channels, 3x3, 64x64: the CPU's unfolded images take 1.2 Mi floats
  // each, so a batch of 15 is computed as chunks of 14 and 1.
  if (ampx_test::test_device() != AMPX_DEVICE_CPU) {
    MESSAGE("the CPU backend's chunking; case skipped on this device");
    return;
  }
  Ctx ctx;
  Rng rng(11);
  const int64_t n = 15, c = 32, side = 64, image = c * side * side;
  const Vec xs = rng.vector(static_cast<size_t>(n * image), -1, 1);
  const Vec ws = rng.vector(static_cast<size_t>(c * c * 9), -0.1, 0.1);
  ampx_conv2d_options o = AMPX_CONV2D_OPTIONS_INIT;
  o.padding[0] = o.padding[1] = 1;
  Tensor w(make(ctx, AMPX_F32, {c, c, 3, 3}, ws, true));
  Tensor x(make(ctx, AMPX_F32, {n, c, side, side}, xs, true));
  Tensor y, loss;
  REQUIRE_MESSAGE(ampx_conv2d(x, w, nullptr, &o, y.out()) == AMPX_OK, last_error());
  REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  const Vec batch_out = values_of(y), batch_dx = values_of(grad_of(x));
  const Vec batch_dw = values_of(grad_of(w));
  Vec dw_sum(ws.size(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    INFO("image ", i);
    Tensor wi(make(ctx, AMPX_F32, {c, c, 3, 3}, ws, true));
    Tensor xi(make(ctx, AMPX_F32, {1, c, side, side},
                   Vec(xs.begin() + i * image, xs.begin() + (i + 1) * image), true));
    Tensor yi, li;
    REQUIRE(ampx_conv2d(xi, wi, nullptr, &o, yi.out()) == AMPX_OK);
    REQUIRE(ampx_sum(yi, li.out()) == AMPX_OK);
    REQUIRE(ampx_backward(li, nullptr) == AMPX_OK);
    const Vec out = values_of(yi), dx = values_of(grad_of(xi)), dw = values_of(grad_of(wi));
    for (size_t k = 0; k < out.size(); ++k)
      REQUIRE(std::fabs(out[k] - batch_out[i * image + k]) <= 1e-5 * (1 + std::fabs(out[k])));
    for (size_t k = 0; k < dx.size(); ++k)
      REQUIRE(std::fabs(dx[k] - batch_dx[i * image + k]) <= 1e-5 * (1 + std::fabs(dx[k])));
    for (size_t k = 0; k < dw.size(); ++k) dw_sum[k] += dw[k];
  }
  // Each dw sums 61440 terms that mostly cancel, in an order that differs
  // between the two (and between oneDNN and im2col): its rounding error is
  // bounded by the terms' magnitude, at most channel c's sum of |x|.
  Vec abs_sum(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < n * image; ++i) abs_sum[(i / (side * side)) % c] += std::fabs(xs[i]);
  for (size_t k = 0; k < dw_sum.size(); ++k)
    CHECK(std::fabs(batch_dw[k] - dw_sum[k]) <=
          1e-4 * (1 + std::fabs(dw_sum[k])) + 1e-7 * abs_sum[(k / 9) % c]);
}
