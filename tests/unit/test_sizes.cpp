// Sizes that loop or wrap (issue 44): every size expression of conv2d and
// the pools that could pass int64 is refused with SHAPE naming it (it used
// to wrap: conv2d with dilation INT64_MAX gave an output taller than its
// input, the pools blamed the padding), huge windows that are legal are
// computed -- max pooling in time independent of the kernel's extent (it
// walked the kernel's taps: 2^39 steps per window for a kernel of 2^40 with
// padding 2^39) -- and split and chunk of empty tensors whose strides do
// not fit in int64 work.
//
// References: the output extents from torch's formula evaluated in 128-bit
// integers (where nothing wraps), and each window's taps found by testing
// every image row and column for membership, independently of the
// library's closed forms.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::dims_of;
using ampx_fixture::grad_of;
using ampx_fixture::make;
using ampx_fixture::values_of;
using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;
using Dims = std::vector<int64_t>;
using Wide = __int128;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t k2_39 = int64_t{1} << 39, k2_40 = int64_t{1} << 40;

Wide floor_div(Wide a, Wide b) {
  const Wide q = a / b;
  return a % b != 0 && (a < 0) != (b < 0) ? q - 1 : q;
}

// torch's pooling_output_shape, in 128-bit integers.
int64_t torch_extent(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                     bool ceil_mode) {
  Wide out = floor_div(Wide{in} + 2 * Wide{pad} - Wide{dilation} * (kernel - 1) - 1 +
                           (ceil_mode ? stride - 1 : 0),
                       stride) +
             1;
  if (ceil_mode && (out - 1) * stride >= Wide{in} + pad) --out;
  return static_cast<int64_t>(out);
}

struct Window1d {
  int64_t kernel, stride, pad, dilation;
};

// Whether image index r is a tap of output o's window.
bool is_tap(const Window1d& w, int64_t o, int64_t r) {
  const Wide offset = Wide{r} - (Wide{o} * w.stride - w.pad);
  return offset >= 0 && offset % w.dilation == 0 && offset / w.dilation < w.kernel;
}

struct Pooled {
  Dims dims;
  Vec out, grad;
};

// Max pooling of one [1, 1, H, W] plane by membership tests: the last NaN
// of a window, else its first maximum (row-major), takes the gradient
// r[p, q] of output (p, q).
Pooled reference_max(const Vec& x, int64_t h, int64_t w, const Window1d& rows, const Window1d& cols,
                     bool ceil_mode, const Vec& r) {
  Pooled p;
  const int64_t oh = torch_extent(h, rows.kernel, rows.stride, rows.pad, rows.dilation, ceil_mode);
  const int64_t ow = torch_extent(w, cols.kernel, cols.stride, cols.pad, cols.dilation, ceil_mode);
  p.dims = {1, 1, oh, ow};
  p.grad.assign(x.size(), 0.0);
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j) {
      int64_t best = -1, last_nan = -1;
      for (int64_t a = 0; a < h; ++a)
        for (int64_t b = 0; b < w; ++b) {
          if (!is_tap(rows, i, a) || !is_tap(cols, j, b)) continue;
          const int64_t at = a * w + b;
          if (std::isnan(x[at])) last_nan = at;
          if (best < 0 || x[at] > x[best]) best = at;
        }
      REQUIRE(best >= 0);  // every case below has a tap in each window
      const int64_t chosen = last_nan >= 0 ? last_nan : best;
      p.out.push_back(x[chosen]);
      p.grad[chosen] += r[i * ow + j];
    }
  return p;
}

// Average pooling (dilation 1) by membership tests: the sum of the taps in
// the image over divisor_override, or over the taps in the padded image
// (count_include_pad) or in the image.
Pooled reference_average(const Vec& x, int64_t h, int64_t w, const Window1d& rows,
                         const Window1d& cols, bool include_pad, int64_t divisor_override,
                         const Vec& r) {
  Pooled p;
  const int64_t oh = torch_extent(h, rows.kernel, rows.stride, rows.pad, 1, false);
  const int64_t ow = torch_extent(w, cols.kernel, cols.stride, cols.pad, 1, false);
  p.dims = {1, 1, oh, ow};
  p.grad.assign(x.size(), 0.0);
  // Taps of a window inside [-pad, in + pad): the window clipped there.
  const auto padded_taps = [](const Window1d& d, int64_t o, int64_t in) {
    const Wide start = Wide{o} * d.stride - d.pad;
    const Wide end = start + d.kernel < Wide{in} + d.pad ? start + d.kernel : Wide{in} + d.pad;
    return static_cast<double>(end - start);
  };
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j) {
      double sum = 0.0, inside = 0.0;
      for (int64_t a = 0; a < h; ++a)
        for (int64_t b = 0; b < w; ++b)
          if (is_tap(rows, i, a) && is_tap(cols, j, b)) sum += x[a * w + b], inside += 1.0;
      const double divisor = divisor_override ? static_cast<double>(divisor_override)
                             : include_pad ? padded_taps(rows, i, h) * padded_taps(cols, j, w)
                                           : inside;
      p.out.push_back(sum / divisor);
      for (int64_t a = 0; a < h; ++a)
        for (int64_t b = 0; b < w; ++b)
          if (is_tap(rows, i, a) && is_tap(cols, j, b)) p.grad[a * w + b] += r[i * ow + j] / divisor;
    }
  return p;
}

ampx_pool2d_options pool_options(const Window1d& rows, const Window1d& cols, bool ceil_mode) {
  ampx_pool2d_options o = ampx_pool2d_options_default();
  o.stride[0] = rows.stride, o.stride[1] = cols.stride;
  o.padding[0] = rows.pad, o.padding[1] = cols.pad;
  o.dilation[0] = rows.dilation, o.dilation[1] = cols.dilation;
  o.ceil_mode = ceil_mode;
  return o;
}

// Runs a pooling on x [1, 1, h, w] and backpropagates sum(out * r), r = 1,
// 2, 3, ... per output; returns the output, its dims and x's gradient.
template <class Pool>
Pooled run_pool(ampx_context ctx, const Vec& xs, int64_t h, int64_t w, const Pool& pool) {
  Tensor x(make(ctx, AMPX_F32, {1, 1, h, w}, xs, true));
  Tensor y, weighted, loss;
  REQUIRE_MESSAGE(pool(x, y.out()) == AMPX_OK, last_error());
  Pooled p;
  p.dims = dims_of(y);
  p.out = values_of(y);
  Vec r(p.out.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<double>(i + 1);
  Tensor rt(make(ctx, AMPX_F32, p.dims, r));
  REQUIRE(ampx_mul(y, rt, weighted.out()) == AMPX_OK);
  REQUIRE(ampx_sum(weighted, loss.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  p.grad = values_of(grad_of(x));
  return p;
}

Vec weights_for(const Dims& dims) {
  Vec r(static_cast<size_t>(dims[2] * dims[3]));
  for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<double>(i + 1);
  return r;
}

// Equal within `relative` of each expected value (0: exactly; NaN where
// NaN is expected). Relative only: some expected values are near 2^-40.
void check_same(const Vec& have, const Vec& want, double relative) {
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < have.size(); ++i) {
    INFO("element ", i, ": ", have[i], " vs ", want[i]);
    if (std::isnan(want[i]))
      CHECK(std::isnan(have[i]));
    else
      CHECK(std::fabs(have[i] - want[i]) <= relative * std::fabs(want[i]));
  }
}

}  // namespace

TEST_CASE("sizes: max_pool2d with a kernel of 2^40 answers at once, as the window rule says") {
  Ctx ctx;
  const double nan = std::nan("");
  struct Case {
    const char* what;
    int64_t h, w;
    Window1d rows, cols;
    bool ceil_mode;
    Vec x;
  };
  const Vec nine = {0.5, -0.25, 0.75, 0.125, 0.75, -1, 0.375, 0.0625, -0.5};
  const Case cases[] = {
      // Every window holds the whole image: 16 outputs, each its maximum
      // (the first 0.75), the gradient all there.
      {"kernel 2^40, padding 2^39, stride 1", 3, 3, {k2_40, 1, k2_39, 1}, {k2_40, 1, k2_39, 1},
       false, nine},
      {"the same with a NaN: the last NaN wins", 3, 3, {k2_40, 1, k2_39, 1},
       {k2_40, 1, k2_39, 1}, false, {0.5, nan, 0.75, 0.125, 0.75, -1, nan, 0.0625, -0.5}},
      // Rows: one window of 2^40 at stride 2^38; columns: a dilated 2-tap
      // window at padding 1.
      {"kernel (2^40, 2), stride (2^38, 1), dilation (1, 2)", 3, 4, {k2_40, int64_t{1} << 38, k2_39, 1},
       {2, 1, 1, 2}, false, {1, 2, 3, 4, 8, 7, 6, 5, -1, -2, -3, 9}},
      // 2^20 + 1 taps 2^21 apart, padding 2^40: of each window only the
      // tap 2^19 lands in the image, on row p.
      {"dilation 2^21, 2^20 + 1 taps, padding 2^40", 3, 3, {(int64_t{1} << 20) + 1, 1, k2_40,
       int64_t{1} << 21}, {1, 1, 0, 1}, false, nine},
      // torch adds stride - 1 before dividing in ceil mode: INT64_MAX + 2.
      {"ceil mode with stride INT64_MAX", 3, 3, {2, kMax, 1, 1}, {2, kMax, 1, 1}, true, nine},
      {"stride 2^62", 5, 2, {3, int64_t{1} << 62, 1, 1}, {1, 1, 0, 1}, false,
       {3, 1, 4, 1, 5, 9, 2, 6, 5, 3}},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.what));
    const ampx_pool2d_options o = pool_options(c.rows, c.cols, c.ceil_mode);
    const auto start = std::chrono::steady_clock::now();
    const Pooled have = run_pool(ctx, c.x, c.h, c.w, [&](ampx_tensor x, ampx_tensor* y) {
      return ampx_max_pool2d(x, c.rows.kernel, c.cols.kernel, &o, y);
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Microseconds of work; the bound only tells a hang (the walk over
    // 2^39 taps took hours) from an answer, on any machine and sanitizer.
    CHECK(seconds < 10.0);
    const Pooled want = reference_max(c.x, c.h, c.w, c.rows, c.cols, c.ceil_mode,
                                      weights_for(have.dims));
    REQUIRE(have.dims == want.dims);
    check_same(have.out, want.out, 0.0);
    check_same(have.grad, want.grad, 1e-6);
  }
}

TEST_CASE("sizes: avg_pool2d with a kernel of 2^40 answers, or names its divisor's overflow") {
  Ctx ctx;
  const Vec nine = {0.5, -0.25, 0.75, 0.125, 0.75, -1, 0.375, 0.0625, -0.5};
  const Window1d huge{k2_40, k2_40, k2_39, 1};
  struct Case {
    const char* what;
    Window1d rows, cols;
    bool include_pad;
    int64_t divisor;
  };
  const Case cases[] = {
      {"the image's elements only", huge, huge, false, 0},
      {"divisor_override 4", huge, huge, true, 4},
      // The divisor is 2^40 * 1: within int64, and a power of two.
      {"count_include_pad with a 2^40 x 1 window", {k2_40, 1, k2_39, 1}, {1, 1, 0, 1}, true, 0},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.what));
    ampx_pool2d_options o = pool_options(c.rows, c.cols, false);
    o.count_include_pad = c.include_pad;
    o.divisor_override = c.divisor;
    const Pooled have = run_pool(ctx, nine, 3, 3, [&](ampx_tensor x, ampx_tensor* y) {
      return ampx_avg_pool2d(x, c.rows.kernel, c.cols.kernel, &o, y);
    });
    const Pooled want = reference_average(nine, 3, 3, c.rows, c.cols, c.include_pad, c.divisor,
                                          weights_for(have.dims));
    REQUIRE(have.dims == want.dims);
    check_same(have.out, want.out, 1e-6);
    check_same(have.grad, want.grad, 1e-6);
  }
  // With the padding counted, a 2^40 x 2^40 window's size, 2^80, is beyond
  // int64 (it wrapped to 0, and every output was 0 / 0).
  Tensor x(make(ctx, AMPX_F32, {1, 1, 3, 3}, nine)), y;
  ampx_pool2d_options o = pool_options(huge, huge, false);
  CHECK_FAILS_WITH(ampx_avg_pool2d(x, k2_40, k2_40, &o, y.out()), AMPX_ERR_SHAPE,
                   "min(kernel_h, H + 2 * padding[0]) * min(kernel_w, W + 2 * padding[1]) = "
                   "1099511627776 * 1099511627776 overflows int64");
  CHECK(y.handle == nullptr);
}

TEST_CASE("sizes: each size expression of conv2d that passes int64 is SHAPE, named") {
  SKIP_UNLESS_CONVOLUTION();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {1, 1, 5, 5}, Vec(25, 0.5))), w3(make(ctx, AMPX_F32, {1, 1, 3, 3},
                                                                     Vec(9, 0.25)));
  Tensor w2(make(ctx, AMPX_F32, {1, 1, 2, 2}, Vec(4, 0.25)));
  struct Case {
    const char* what;
    ampx_tensor weight;
    int64_t dilation[2], padding[2];
    const char* message;
  };
  const Case cases[] = {
      // Gave OK and an output of 5 + 2 (wrapped -2) rows, taller than x.
      {"dilation INT64_MAX", w3, {kMax, 1}, {0, 0},
       "dilation[0] * (kernel_h - 1) = 9223372036854775807 * 2 overflows int64"},
      {"dilation 2^62 on the columns", w3, {1, int64_t{1} << 62}, {0, 0},
       "dilation[1] * (kernel_w - 1) = 4611686018427387904 * 2 overflows int64"},
      {"a dilated kernel of INT64_MAX + 1", w2, {kMax, 1}, {0, 0},
       "dilation[0] * (kernel_h - 1) + 1 = 9223372036854775807 + 1 overflows int64"},
      {"padding 2^62", w3, {1, 1}, {int64_t{1} << 62, 0},
       "2 * padding[0] = 2 * 4611686018427387904 overflows int64"},
      {"padding 2^62 - 1 on 5 columns", w3, {1, 1}, {0, (int64_t{1} << 62) - 1},
       "W + 2 * padding[1] = 5 + 9223372036854775806 overflows int64"},
  };
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT, after = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &before) == AMPX_OK);
  for (const Case& c : cases) {
    INFO(std::string(c.what));
    ampx_conv2d_options o = ampx_conv2d_options_default();
    o.dilation[0] = c.dilation[0], o.dilation[1] = c.dilation[1];
    o.padding[0] = c.padding[0], o.padding[1] = c.padding[1];
    ampx_tensor out = nullptr;
    CHECK_FAILS_WITH(ampx_conv2d(x, c.weight, nullptr, &o, &out), AMPX_ERR_SHAPE, c.message);
    CHECK(out == nullptr);
  }
  REQUIRE(ampx_memory_stats_get(ctx, &after) == AMPX_OK);
  CHECK(after.current_bytes == before.current_bytes);
}

TEST_CASE("sizes: conv2d with a stride near INT64_MAX computes its one output on the CPU") {
  // One output per image: rows and columns -2 .. 0 of the padded image, so
  // only tap (2, 2) meets x[0, 0]. The CPU's im2col computed the first
  // output whose tap lands in the image as (stride - 1 - shift) / stride,
  // which wrapped for this stride and read before the image. (cuDNN takes
  // int strides: on CUDA this is NOT_SUPPORTED, so a CPU context.)
  ampx_context ctx = nullptr;
  ampx_context_options co = ampx_context_options_default();
  co.device_type = AMPX_DEVICE_CPU;
  REQUIRE(ampx_context_create(&co, &ctx) == AMPX_OK);
  Vec xs(25), ws(9);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.25 * static_cast<double>(i + 1);
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = 0.5 + static_cast<double>(i);
  for (ampx_dtype dtype : {AMPX_F32, AMPX_F16, AMPX_BF16}) {
    INFO(ampx_dtype_name(dtype));
    Tensor x(make(ctx, dtype, {1, 1, 5, 5}, xs, true)), w(make(ctx, dtype, {1, 1, 3, 3}, ws, true));
    ampx_conv2d_options o = ampx_conv2d_options_default();
    o.stride[0] = o.stride[1] = kMax;
    o.padding[0] = o.padding[1] = 2;
    Tensor y, loss;
    REQUIRE_MESSAGE(ampx_conv2d(x, w, nullptr, &o, y.out()) == AMPX_OK, last_error());
    REQUIRE(dims_of(y) == Dims{1, 1, 1, 1});
    // 0.25 * 8.5 = 2.125, exact in every type.
    CHECK(values_of(y) == Vec{2.125});
    REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    Vec dx(25, 0.0), dw(9, 0.0);
    dx[0] = 8.5, dw[8] = 0.25;
    CHECK(values_of(grad_of(x)) == dx);
    CHECK(values_of(grad_of(w)) == dw);
  }
  ampx_context_release(ctx);
}

TEST_CASE("sizes: the pools name a dilated kernel or padded input beyond int64") {
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {1, 1, 5, 5}, Vec(25, 0.5)));
  struct Case {
    const char* what;
    int64_t kernel[2], padding[2], dilation[2];
    const char* message;
  };
  const Case cases[] = {
      // The wrapped dilated kernel, -3, made the padding 0 look over half of
      // it: INVALID_ARGUMENT "padding may be at most half the kernel".
      {"kernel INT64_MAX, dilation 2", {kMax, 1}, {0, 0}, {2, 1},
       "dilation[0] * (kernel_h - 1) = 2 * 9223372036854775806 overflows int64"},
      {"kernel 2^62 + 1, dilation 2", {1, (int64_t{1} << 62) + 1}, {0, 0}, {1, 2},
       "dilation[1] * (kernel_w - 1) = 2 * 4611686018427387904 overflows int64"},
      {"kernel 2, dilation INT64_MAX", {2, 1}, {0, 0}, {kMax, 1},
       "dilation[0] * (kernel_h - 1) + 1 = 9223372036854775807 + 1 overflows int64"},
      // Padding at most half the kernel, but 5 rows more than int64 holds.
      {"kernel INT64_MAX, padding 2^62 - 1", {kMax, 1}, {(int64_t{1} << 62) - 1, 0}, {1, 1},
       "H + 2 * padding[0] = 5 + 9223372036854775806 overflows int64"},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.what));
    ampx_pool2d_options o = ampx_pool2d_options_default();
    o.padding[0] = c.padding[0], o.padding[1] = c.padding[1];
    o.dilation[0] = c.dilation[0], o.dilation[1] = c.dilation[1];
    ampx_tensor out = nullptr;
    CHECK_FAILS_WITH(ampx_max_pool2d(x, c.kernel[0], c.kernel[1], &o, &out), AMPX_ERR_SHAPE,
                     c.message);
    CHECK(!contains(last_error(), "half"));
    CHECK(out == nullptr);
    if (c.dilation[0] == 1 && c.dilation[1] == 1) {
      CHECK_FAILS_WITH(ampx_avg_pool2d(x, c.kernel[0], c.kernel[1], &o, &out), AMPX_ERR_SHAPE,
                       c.message);
      CHECK(out == nullptr);
    }
  }
  // The padding rule itself is unchanged: over half the dilated kernel.
  ampx_pool2d_options o = ampx_pool2d_options_default();
  o.padding[0] = 3;
  o.dilation[0] = 2;
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_max_pool2d(x, 3, 3, &o, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "padding may be at most half the dilated kernel");
}

TEST_CASE("sizes: split and chunk of empty tensors whose strides pass int64") {
  Ctx ctx;
  // [0, 2^40, 2^40]: a slice's stride 2^80 does not fit, and no piece has
  // an element to copy.
  const int64_t dims[] = {0, k2_40, k2_40};
  ampx_tensor x = nullptr;
  REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 3, dims, &x) == AMPX_OK);
  Tensor owner(x);
  const int64_t sizes[] = {k2_39, k2_39};
  ampx_tensor pieces[2] = {};
  REQUIRE_MESSAGE(ampx_split(x, sizes, 2, 1, pieces) == AMPX_OK, last_error());
  Tensor a(pieces[0]), b(pieces[1]);
  CHECK(dims_of(a) == Dims{0, k2_39, k2_40});
  CHECK(dims_of(b) == Dims{0, k2_39, k2_40});

  // torch.chunk of an extent INT64_MAX in two: ceil(INT64_MAX / 2) = 2^62,
  // then the rest. extent + chunks - 1 passes int64.
  const int64_t long_dims[] = {0, kMax};
  ampx_tensor y = nullptr;
  REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 2, long_dims, &y) == AMPX_OK);
  Tensor y_owner(y);
  ampx_tensor chunks[2] = {};
  int32_t count = 0;
  REQUIRE_MESSAGE(ampx_chunk(y, 2, 1, chunks, &count) == AMPX_OK, last_error());
  REQUIRE(count == 2);
  Tensor c0(chunks[0]), c1(chunks[1]);
  CHECK(dims_of(c0) == Dims{0, int64_t{1} << 62});
  CHECK(dims_of(c1) == Dims{0, (int64_t{1} << 62) - 1});
}
