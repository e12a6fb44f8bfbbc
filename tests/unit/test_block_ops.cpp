// test_block_ops.cpp -- the ops of a Transformer block (ampx.h section 11):
// NumPy broadcasting of add/sub/mul/div, sum / mean / amax over chosen
// dimensions, RMS norm, permute, softmax over any dimension, masked_fill,
// pow, rotary embeddings, split and chunk, through the C API on the test device,
// against references written here in double from torch's definitions.
//
// Gradients are checked against the analytic derivatives evaluated in
// double (for a broadcast operand: the sum of the output gradient's terms
// over the positions that read it), with L = sum(y * R) for a fixed random
// R. The broadcasting table is every pair of operand shapes up to 4-D that
// broadcast, each dimension of each operand either the base extent or 1,
// operands of 0 to 4 dimensions (31 shapes, 961 pairs, for each op).
//
// Tolerances: ampx computes each element in fp32 (correctly rounded for
// + - * /) and sums gradients in fp32 or double: values agree to 2 fp32
// ulps, gradients to 1e-5 relative plus 1e-6 of the largest.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::dtype_of;
using ampx_fixture::dims_of;
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

size_t count_of(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return static_cast<size_t>(n);
}

std::string str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

Vec floats(Rng& rng, size_t n, double lo, double hi) {
  Vec v = rng.vector(n, lo, hi);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

double largest(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

void check_values(const char* what, const Vec& have, const Vec& want, double rtol,
                  double atol_of_max) {
  REQUIRE(have.size() == want.size());
  const double atol = atol_of_max * largest(want);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool same_nan = std::isnan(have[i]) && std::isnan(want[i]);
    if (!same_nan && !(std::fabs(have[i] - want[i]) <= rtol * std::fabs(want[i]) + atol) &&
        bad++ == 0)
      first = i;
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", want.size(), " differ; first at ", first, ": ",
                (bad ? have[first] : 0.0), " vs ", (bad ? want[first] : 0.0));
}

constexpr double kValueRtol = 0x1p-22;  // 2 fp32 ulps
constexpr double kGradRtol = 1e-5, kGradAtol = 1e-6;

ampx_tensor grad_of(ampx_tensor t) {
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(t, &g) == AMPX_OK);
  REQUIRE(g != nullptr);
  return g;
}

// y = op(inputs...) then backward of sum(y * r); returns y's values and
// the inputs' gradients.
struct Result {
  Dims shape;
  Vec y;
  std::vector<Vec> grads;
};

Result run(ampx_context ctx, const std::vector<Dims>& dims, const std::vector<Vec>& values,
           const std::function<ampx_status(const std::vector<ampx_tensor>&, ampx_tensor*)>& op,
           const Vec& r_values_or_empty, Rng& rng) {
  std::deque<Tensor> inputs;  // Tensor does not move
  std::vector<ampx_tensor> handles;
  for (size_t i = 0; i < dims.size(); ++i) {
    inputs.emplace_back(make(ctx, AMPX_F32, dims[i], values[i], true));
    handles.push_back(inputs.back());
  }
  Tensor y;
  REQUIRE_MESSAGE(op(handles, y.out()) == AMPX_OK, last_error());
  Result res;
  res.shape = dims_of(y);
  res.y = values_of(y);
  const Vec r = r_values_or_empty.empty() ? floats(rng, res.y.size(), -1, 1) : r_values_or_empty;
  Tensor tr(make(ctx, AMPX_F32, res.shape, r)), weighted, loss;
  REQUIRE(ampx_mul(y, tr, weighted.out()) == AMPX_OK);
  REQUIRE(ampx_sum(weighted, loss.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  for (ampx_tensor h : handles) res.grads.push_back(values_of(grad_of(h)));
  res.grads.push_back(r);  // the R used, for the reference
  return res;
}

// Row-major index of `shape`'s element read by output multi-index `at`
// (aligned at the right, extent-1 dimensions broadcast).
size_t broadcast_index(const Dims& shape, const Dims& out, const std::vector<int64_t>& at) {
  size_t index = 0;
  const size_t offset = out.size() - shape.size();
  for (size_t k = 0; k < shape.size(); ++k)
    index = index * static_cast<size_t>(shape[k]) +
            static_cast<size_t>(shape[k] == 1 ? 0 : at[offset + k]);
  return index;
}

// Every shape of 0..4 dimensions whose extents are base's trailing ones or 1.
std::vector<Dims> operand_shapes(const Dims& base) {
  std::vector<Dims> shapes;
  for (size_t n = 0; n <= base.size(); ++n)
    for (uint32_t ones = 0; ones < (1u << n); ++ones) {
      Dims s;
      for (size_t k = 0; k < n; ++k)
        s.push_back((ones >> k) & 1u ? 1 : base[base.size() - n + k]);
      shapes.push_back(s);
    }
  return shapes;
}

}  // namespace

TEST_CASE("broadcasting: add, sub, mul and div over every pair of shapes up to 4-D") {
  Ctx ctx;
  const Dims base = {2, 3, 4, 2};
  const std::vector<Dims> shapes = operand_shapes(base);
  REQUIRE(shapes.size() == 31);
  Rng rng(17);
  const char* names[] = {"add", "sub", "mul", "div"};
  using Fn = ampx_status (*)(ampx_tensor, ampx_tensor, ampx_tensor*);
  const Fn fns[] = {ampx_add, ampx_sub, ampx_mul, ampx_div};
  size_t pairs = 0;
  for (size_t ia = 0; ia < shapes.size(); ++ia)
    for (size_t ib = 0; ib < shapes.size(); ++ib) {
      ++pairs;
      const Dims& sa = shapes[ia];
      const Dims& sb = shapes[ib];
      Dims out(std::max(sa.size(), sb.size()));
      for (size_t k = 0; k < out.size(); ++k) {
        const int64_t ea = k + sa.size() >= out.size() ? sa[k + sa.size() - out.size()] : 1;
        const int64_t eb = k + sb.size() >= out.size() ? sb[k + sb.size() - out.size()] : 1;
        out[k] = std::max(ea, eb);
      }
      const Vec a = floats(rng, count_of(sa), -2, 2);
      Vec b = floats(rng, count_of(sb), 0.5, 2);  // away from 0 for div
      for (size_t i = 0; i < b.size(); i += 2) b[i] = -b[i];
      for (int o = 0; o < 4; ++o) {
        INFO((std::string(names[o]) + " " + str(sa) + " with " + str(sb)));
        const Result res = run(
            ctx, {sa, sb}, {a, b},
            [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) { return fns[o](t[0], t[1], y); },
            {}, rng);
        REQUIRE(res.shape == out);
        const Vec& r = res.grads[2];
        Vec y(count_of(out)), da(a.size(), 0.0), db(b.size(), 0.0);
        Vec da_size(a.size(), 0.0), db_size(b.size(), 0.0);  // sums of |term|
        std::vector<int64_t> at(out.size(), 0);
        for (size_t i = 0; i < y.size(); ++i) {
          size_t rest = i;
          for (size_t k = out.size(); k-- > 0;) {
            at[k] = static_cast<int64_t>(rest % static_cast<size_t>(out[k]));
            rest /= static_cast<size_t>(out[k]);
          }
          const size_t ja = broadcast_index(sa, out, at), jb = broadcast_index(sb, out, at);
          const double u = a[ja], v = b[jb];
          double ta = r[i], tb = r[i];
          switch (o) {
            case 0: y[i] = u + v; break;
            case 1: y[i] = u - v; tb = -r[i]; break;
            case 2: y[i] = u * v; ta = r[i] * v; tb = r[i] * u; break;
            default: y[i] = u / v; ta = r[i] / v; tb = -r[i] * u / (v * v); break;
          }
          da[ja] += ta, db[jb] += tb;
          da_size[ja] += std::fabs(ta), db_size[jb] += std::fabs(tb);
        }
        for (double& x : y) x = static_cast<float>(x);
        check_values("y", res.y, y, kValueRtol, 0.0);
        // A gradient summed over a broadcast may cancel: its error follows
        // the size of the terms, not of the result.
        check_values("da", res.grads[0], da, kGradRtol, kGradAtol * largest(da_size) / (largest(da) + 1e-300));
        check_values("db", res.grads[1], db, kGradRtol, kGradAtol * largest(db_size) / (largest(db) + 1e-300));
      }
    }
  CHECK(pairs == 961);
}

TEST_CASE("broadcasting: shapes that do not broadcast are refused, nothing made") {
  Ctx ctx;
  Tensor a(make(ctx, AMPX_F32, {2, 3}, Vec(6, 1.0))), b(make(ctx, AMPX_F32, {4, 1, 2}, Vec(8, 1.0)));
  Tensor c(make(ctx, AMPX_F32, {3, 1}, Vec(3, 1.0)));
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_add(a, b, &out), AMPX_ERR_SHAPE, "do not broadcast");
  CHECK_FAILS_WITH(ampx_mul(a, c, &out), AMPX_ERR_SHAPE, "[2, 3]");
  CHECK(out == nullptr);
  // A column and a row make a matrix; the reversed row case works too.
  Tensor col(make(ctx, AMPX_F32, {3, 1}, {1, 2, 3})), row(make(ctx, AMPX_F32, {2}, {10, 20}));
  Tensor sum, flipped;
  REQUIRE(ampx_add(col, row, sum.out()) == AMPX_OK);
  CHECK(dims_of(sum) == Dims{3, 2});
  CHECK(values_of(sum) == Vec{11, 21, 12, 22, 13, 23});
  REQUIRE(ampx_sub(row, col, flipped.out()) == AMPX_OK);
  CHECK(values_of(flipped) == Vec{9, 19, 8, 18, 7, 17});
}

TEST_CASE("reductions: sum, mean and amax over every set of dimensions, with keepdim") {
  Ctx ctx;
  Rng rng(23);
  const Dims shape = {3, 1, 4, 5};
  const size_t n = count_of(shape);
  for (uint32_t mask = 0; mask < 16; ++mask)
    for (int keep = 0; keep <= 1; ++keep)
      for (int kind = 0; kind < 3; ++kind) {
        std::vector<int32_t> dims;
        for (int32_t k = 0; k < 4; ++k)
          if (mask & (1u << k)) dims.push_back(k - (k % 2 ? 4 : 0));  // some negative
        const uint32_t reduced = mask == 0 ? 15u : mask;
        INFO(("kind " + std::to_string(kind) + " mask " + std::to_string(mask) + " keepdim " +
              std::to_string(keep)));
        // amax: values with ties (a few distinct levels).
        Vec x = floats(rng, n, -3, 3);
        if (kind == 2)
          for (double& v : x) v = std::floor(v);
        const Result res = run(
            ctx, {shape}, {x},
            [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
              const int32_t* d = dims.empty() ? nullptr : dims.data();
              const auto nd = static_cast<int32_t>(dims.size());
              return kind == 0   ? ampx_sum_dims(t[0], d, nd, keep, y)
                     : kind == 1 ? ampx_mean_dims(t[0], d, nd, keep, y)
                                 : ampx_amax(t[0], d, nd, keep, y);
            },
            {}, rng);
        Dims out;
        for (int32_t k = 0; k < 4; ++k) {
          if (!(reduced & (1u << k)))
            out.push_back(shape[k]);
          else if (keep)
            out.push_back(1);
        }
        REQUIRE(res.shape == out);
        // Reference: group by the kept index.
        const size_t outputs = res.y.size();
        Vec sum(outputs, 0.0), max(outputs, -std::numeric_limits<double>::infinity());
        std::vector<double> count(outputs, 0.0), ties(outputs, 0.0);
        std::vector<size_t> owner(n);
        for (size_t i = 0; i < n; ++i) {
          size_t rest = i, j = 0, stride = 1;
          int64_t at[4];
          for (int k = 3; k >= 0; --k) {
            at[k] = static_cast<int64_t>(rest % static_cast<size_t>(shape[k]));
            rest /= static_cast<size_t>(shape[k]);
          }
          for (int k = 3; k >= 0; --k)
            if (!(reduced & (1u << k))) {
              j += static_cast<size_t>(at[k]) * stride;
              stride *= static_cast<size_t>(shape[k]);
            }
          owner[i] = j;
          sum[j] += x[i];
          count[j] += 1;
          max[j] = std::max(max[j], x[i]);
        }
        for (size_t i = 0; i < n; ++i) ties[owner[i]] += x[i] == max[owner[i]];
        const Vec& r = res.grads[1];
        Vec y(outputs), dx(n);
        for (size_t j = 0; j < outputs; ++j)
          y[j] = kind == 0 ? sum[j] : kind == 1 ? sum[j] / count[j] : max[j];
        for (size_t i = 0; i < n; ++i) {
          const size_t j = owner[i];
          dx[i] = kind == 0   ? r[j]
                  : kind == 1 ? r[j] / count[j]
                              : (x[i] == max[j] ? r[j] / ties[j] : 0.0);
        }
        check_values("y", res.y, y, 1e-6, 1e-7);
        check_values("dx", res.grads[0], dx, kGradRtol, kGradAtol);
      }
}

TEST_CASE("reductions: empty extents, f16 output, NaN and bad dims") {
  Ctx ctx;
  Tensor empty(make(ctx, AMPX_F32, {2, 0, 3}, {}));
  const int32_t middle[] = {1};
  Tensor s, m;
  REQUIRE(ampx_sum_dims(empty, middle, 1, 0, s.out()) == AMPX_OK);
  CHECK(values_of(s) == Vec(6, 0.0));
  REQUIRE(ampx_mean_dims(empty, middle, 1, 1, m.out()) == AMPX_OK);
  CHECK(dims_of(m) == Dims{2, 1, 3});
  for (double v : values_of(m)) CHECK(std::isnan(v));
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_amax(empty, middle, 1, 0, &out), AMPX_ERR_SHAPE, "extent 0");
  Tensor x(make(ctx, AMPX_F16, {2, 3}, {1, 2, 3, 4, 5, std::nan("")}));
  const int32_t last[] = {-1}, twice[] = {0, -2}, outside[] = {2};
  Tensor mx, sum16;
  REQUIRE(ampx_amax(x, last, 1, 0, mx.out()) == AMPX_OK);
  CHECK(dtype_of(mx) == AMPX_F16);
  const Vec maxima = values_of(mx);
  CHECK(maxima[0] == 3.0);
  CHECK(std::isnan(maxima[1]));
  REQUIRE(ampx_sum_dims(x, last, 1, 0, sum16.out()) == AMPX_OK);
  CHECK(dtype_of(sum16) == AMPX_F16);
  CHECK(values_of(sum16)[0] == 6.0);
  CHECK_FAILS_WITH(ampx_sum_dims(x, twice, 2, 0, &out), AMPX_ERR_INVALID_ARGUMENT, "twice");
  CHECK_FAILS_WITH(ampx_sum_dims(x, outside, 1, 0, &out), AMPX_ERR_INVALID_ARGUMENT, "dims[0]");
  CHECK_FAILS_WITH(ampx_mean_dims(x, nullptr, 1, 0, &out), AMPX_ERR_INVALID_ARGUMENT, "NULL");
  CHECK_FAILS_WITH(ampx_mean_dims(x, last, 3, 0, &out), AMPX_ERR_INVALID_ARGUMENT, "ndims");
  CHECK(out == nullptr);
}

TEST_CASE("rms_norm: torch's formula, fp32 statistics, gradients of x and weight") {
  Ctx ctx;
  Rng rng(29);
  for (const Dims& shape : {Dims{3, 7}, Dims{2, 3, 64}, Dims{1, 300}}) {
    for (bool with_weight : {true, false}) {
      INFO((str(shape) + (with_weight ? " weight" : " no weight")));
      const int64_t D = shape.back();
      const size_t rows = count_of(shape) / static_cast<size_t>(D);
      const Vec x = floats(rng, count_of(shape), -2, 2), w = floats(rng, static_cast<size_t>(D), 0.5, 1.5);
      const double eps = 1e-5;
      std::vector<Dims> dims = {shape};
      std::vector<Vec> values = {x};
      if (with_weight) dims.push_back({D}), values.push_back(w);
      const Result res = run(
          ctx, dims, values,
          [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
            return ampx_rms_norm(t[0], with_weight ? t[1] : nullptr, eps, y);
          },
          {}, rng);
      const Vec& r = res.grads.back();
      Vec y(x.size()), dx(x.size()), dw(static_cast<size_t>(D), 0.0);
      for (size_t row = 0; row < rows; ++row) {
        const double* xr = x.data() + row * D;
        double squares = 0.0;
        for (int64_t j = 0; j < D; ++j) squares += xr[j] * xr[j];
        const double rs = 1.0 / std::sqrt(squares / D + eps);
        double dot = 0.0;  // sum_k g_k w_k x_k
        for (int64_t j = 0; j < D; ++j) dot += r[row * D + j] * (with_weight ? w[j] : 1.0) * xr[j];
        for (int64_t j = 0; j < D; ++j) {
          const double wj = with_weight ? w[j] : 1.0, g = r[row * D + j];
          y[row * D + j] = xr[j] * rs * wj;
          dx[row * D + j] = rs * wj * g - xr[j] * rs * rs * rs * dot / D;
          dw[j] += g * xr[j] * rs;
        }
      }
      check_values("y", res.y, y, 1e-6, 1e-7);
      check_values("dx", res.grads[0], dx, kGradRtol, kGradAtol);
      if (with_weight) check_values("dweight", res.grads[1], dw, kGradRtol, kGradAtol);
    }
  }
  Tensor x(make(ctx, AMPX_F32, {2, 4}, Vec(8, 1.0))), w(make(ctx, AMPX_F32, {3}, Vec(3, 1.0)));
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_rms_norm(x, w, 1e-5, &out), AMPX_ERR_SHAPE, "'weight'");
  CHECK_FAILS_WITH(ampx_rms_norm(x, nullptr, -1.0, &out), AMPX_ERR_INVALID_ARGUMENT, "eps");
  CHECK(out == nullptr);
}

TEST_CASE("permute: every order of a 4-D tensor, and its gradient") {
  Ctx ctx;
  Rng rng(31);
  const Dims shape = {2, 3, 4, 5};
  const Vec x = floats(rng, count_of(shape), -1, 1);
  std::vector<int32_t> order = {0, 1, 2, 3};
  int permutations = 0;
  do {
    ++permutations;
    // Negative entries for half of them: -4 .. -1 name the same dimensions.
    std::vector<int32_t> given = order;
    if (permutations % 2)
      for (int32_t& d : given) d -= 4;
    const Result res = run(
        ctx, {shape}, {x},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
          return ampx_permute(t[0], 4, given.data(), y);
        },
        {}, rng);
    Dims out;
    for (int32_t d : order) out.push_back(shape[d]);
    REQUIRE(res.shape == out);
    const Vec& r = res.grads[1];
    Vec y(x.size()), dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      int64_t at[4], rest = static_cast<int64_t>(i);
      for (int k = 3; k >= 0; --k) at[k] = rest % shape[k], rest /= shape[k];
      int64_t j = 0;
      for (int k = 0; k < 4; ++k) j = j * out[k] + at[order[k]];
      y[static_cast<size_t>(j)] = x[i];
      dx[i] = r[static_cast<size_t>(j)];
    }
    CHECK(res.y == y);
    CHECK(res.grads[0] == dx);
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(permutations == 24);
  Tensor t(make(ctx, AMPX_F32, shape, x));
  ampx_tensor out = nullptr;
  const int32_t repeated[] = {0, 1, 1, 3}, short_list[] = {0, 1, 2};
  CHECK_FAILS_WITH(ampx_permute(t, 4, repeated, &out), AMPX_ERR_INVALID_ARGUMENT, "twice");
  CHECK_FAILS_WITH(ampx_permute(t, 3, short_list, &out), AMPX_ERR_INVALID_ARGUMENT, "ndim");
  CHECK(out == nullptr);
}

TEST_CASE("softmax and log-softmax over any dimension") {
  Ctx ctx;
  Rng rng(37);
  const Dims shape = {3, 4, 5};
  const Vec x = floats(rng, count_of(shape), -3, 3);
  for (int log = 0; log <= 1; ++log)
    for (int32_t dim = -3; dim < 3; ++dim) {
      INFO(("dim " + std::to_string(dim) + (log ? " log" : "")));
      const Result res = run(
          ctx, {shape}, {x},
          [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
            return log ? ampx_log_softmax_dim(t[0], dim, y) : ampx_softmax_dim(t[0], dim, y);
          },
          {}, rng);
      REQUIRE(res.shape == shape);
      const int32_t d = dim < 0 ? dim + 3 : dim;
      int64_t stride = 1;
      for (int32_t k = 2; k > d; --k) stride *= shape[k];
      const Vec& r = res.grads[1];
      Vec y(x.size()), dx(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const int64_t pos = (static_cast<int64_t>(i) / stride) % shape[d];
        if (pos != 0) continue;  // one pass per line, from its first element
        double max = -1e300, sum = 0.0;
        for (int64_t k = 0; k < shape[d]; ++k) max = std::max(max, x[i + k * stride]);
        for (int64_t k = 0; k < shape[d]; ++k) sum += std::exp(x[i + k * stride] - max);
        double dot = 0.0, rsum = 0.0;
        for (int64_t k = 0; k < shape[d]; ++k) {
          const size_t at = i + static_cast<size_t>(k * stride);
          const double p = std::exp(x[at] - max) / sum;
          y[at] = log ? std::log(p) : p;
          dot += r[at] * p;
          rsum += r[at];
        }
        for (int64_t k = 0; k < shape[d]; ++k) {
          const size_t at = i + static_cast<size_t>(k * stride);
          const double p = std::exp(x[at] - max) / sum;
          dx[at] = log ? r[at] - p * rsum : p * (r[at] - dot);
        }
      }
      check_values("y", res.y, y, 1e-6, 1e-6);
      check_values("dx", res.grads[0], dx, kGradRtol, kGradAtol);
    }
  Tensor t(make(ctx, AMPX_F32, shape, x));
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_softmax_dim(t, 3, &out), AMPX_ERR_INVALID_ARGUMENT, "'dim'");
  CHECK(out == nullptr);
}

TEST_CASE("masked_fill: a broadcast mask of any dtype, the gradient where it is clear") {
  Ctx ctx;
  Rng rng(41);
  const Dims shape = {2, 3, 4, 4};
  const Vec x = floats(rng, count_of(shape), -1, 1);
  // A causal [T, T] mask (set above the diagonal) over [B, H, T, T].
  Vec causal(16);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) causal[i * 4 + j] = j > i ? 1.0 : 0.0;
  for (ampx_dtype mask_dtype : {AMPX_F32, AMPX_F16, AMPX_I32, AMPX_I64}) {
    INFO(std::string(ampx_dtype_name(mask_dtype)));
    Tensor mask(make(ctx, mask_dtype, {4, 4}, causal));
    const double fill = -std::numeric_limits<double>::infinity();
    const Result res = run(
        ctx, {shape}, {x},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
          return ampx_masked_fill(t[0], mask, fill, y);
        },
        {}, rng);
    const Vec& r = res.grads[1];
    for (size_t i = 0; i < x.size(); ++i) {
      const bool set = causal[i % 16] != 0.0;
      CHECK(res.y[i] == (set ? fill : x[i]));
      CHECK(res.grads[0][i] == (set ? 0.0 : r[i]));
    }
  }
  Tensor t(make(ctx, AMPX_F32, {2, 3}, Vec(6, 1.0))), wide(make(ctx, AMPX_F32, {2, 2, 3}, Vec(12, 1.0)));
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_masked_fill(t, wide, 0.0, &out), AMPX_ERR_SHAPE, "'mask'");
  CHECK(out == nullptr);
}

TEST_CASE("pow: powf semantics, exact squares, gradient p x^(p-1)") {
  Ctx ctx;
  Rng rng(43);
  const Vec x = floats(rng, 64, 0.1, 3.0);
  for (double p : {2.0, 0.5, -1.5, 3.0, 0.0, 1.0}) {
    INFO(("exponent " + std::to_string(p)));
    const Result res = run(
        ctx, {{64}}, {x},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) { return ampx_pow(t[0], p, y); },
        {}, rng);
    const Vec& r = res.grads[1];
    Vec y(64), dx(64);
    for (size_t i = 0; i < 64; ++i) {
      y[i] = std::pow(x[i], p);
      dx[i] = p == 0.0 ? 0.0 : r[i] * p * std::pow(x[i], p - 1.0);
    }
    check_values("y", res.y, y, 4 * 0x1p-24, 0.0);
    check_values("dx", res.grads[0], dx, 1e-6, 0.0);
    if (p == 2.0)
      for (size_t i = 0; i < 64; ++i) CHECK(res.y[i] == static_cast<float>(x[i] * x[i]));
  }
  Tensor labels(make(ctx, AMPX_I32, {4}, Vec(4, 2.0)));
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_pow(labels, 2.0, &out), AMPX_ERR_DTYPE, "i32");
  CHECK_FAILS_WITH(ampx_pow(nullptr, 2.0, &out), AMPX_ERR_INVALID_ARGUMENT, "'x'");
  CHECK(out == nullptr);
}

TEST_CASE("rotary embeddings: rotate-half and interleaved pairs, inverse rotation backward") {
  Ctx ctx;
  Rng rng(47);
  const int64_t B = 2, H = 3, T = 5, D = 8;
  const Vec x = floats(rng, static_cast<size_t>(B * H * T * D), -1, 1);
  Vec cos_t(static_cast<size_t>(T * D / 2)), sin_t(cos_t.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double angle = t * std::pow(10000.0, -2.0 * i / D);
      cos_t[t * D / 2 + i] = static_cast<float>(std::cos(angle));
      sin_t[t * D / 2 + i] = static_cast<float>(std::sin(angle));
    }
  Tensor c(make(ctx, AMPX_F32, {T, D / 2}, cos_t)), s(make(ctx, AMPX_F32, {T, D / 2}, sin_t));
  for (int interleaved = 0; interleaved <= 1; ++interleaved) {
    INFO((interleaved ? "interleaved" : "rotate-half"));
    const Result res = run(
        ctx, {{B, H, T, D}}, {x},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
          return ampx_rotary_embedding(t[0], c, s, interleaved, y);
        },
        {}, rng);
    const Vec& r = res.grads[1];
    Vec y(x.size()), dx(x.size());
    for (int64_t row = 0; row < B * H * T; ++row) {
      const int64_t t = row % T;
      for (int64_t i = 0; i < D / 2; ++i) {
        const int64_t a = row * D + (interleaved ? 2 * i : i);
        const int64_t b = row * D + (interleaved ? 2 * i + 1 : i + D / 2);
        const double cs = cos_t[t * D / 2 + i], sn = sin_t[t * D / 2 + i];
        y[a] = x[a] * cs - x[b] * sn;
        y[b] = x[b] * cs + x[a] * sn;
        // d/dx of y . r: the transposed rotation.
        dx[a] = r[a] * cs + r[b] * sn;
        dx[b] = r[b] * cs - r[a] * sn;
      }
    }
    check_values("y", res.y, y, 1e-6, 1e-7);
    check_values("dx", res.grads[0], dx, 1e-6, 1e-7);
  }
  Tensor odd(make(ctx, AMPX_F32, {T, 3}, Vec(static_cast<size_t>(T * 3), 0.0)));
  Tensor short_table(make(ctx, AMPX_F32, {T - 1, D / 2}, Vec(static_cast<size_t>((T - 1) * D / 2), 0.0)));
  Tensor xt(make(ctx, AMPX_F32, {B, H, T, D}, x));
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_rotary_embedding(odd, c, s, 0, &out), AMPX_ERR_SHAPE, "D even");
  CHECK_FAILS_WITH(ampx_rotary_embedding(xt, short_table, s, 0, &out), AMPX_ERR_SHAPE, "'cos'");
  CHECK(out == nullptr);
}

TEST_CASE("split and chunk: torch's pieces, gradients back in their slices") {
  Ctx ctx;
  Rng rng(53);
  const Dims shape = {2, 7, 3};
  const Vec x = floats(rng, count_of(shape), -1, 1);
  Tensor t(make(ctx, AMPX_F32, shape, x, true));
  const int64_t sizes[] = {2, 0, 5};
  ampx_tensor pieces[3] = {};
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_split(t, sizes, 3, -2, pieces) == AMPX_OK, last_error());
  CHECK(dims_of(pieces[0]) == Dims{2, 2, 3});
  CHECK(dims_of(pieces[1]) == Dims{2, 0, 3});
  CHECK(dims_of(pieces[2]) == Dims{2, 5, 3});
  const Vec p2 = values_of(pieces[2]);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t k = 0; k < 3; ++k) CHECK(p2[(b * 5 + i) * 3 + k] == x[(b * 7 + 2 + i) * 3 + k]);
  // Only the last piece reaches the loss: the first two slices get zeros.
  ampx_tensor loss = nullptr;
  REQUIRE(ampx_sum(pieces[2], &loss) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  const Vec g = values_of(grad_of(t));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t k = 0; k < 3; ++k) CHECK(g[(b * 7 + i) * 3 + k] == (i >= 2 ? 1.0 : 0.0));
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  ampx_tensor chunked[4] = {};
  int32_t count = 0;
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_chunk(t, 4, 1, chunked, &count) == AMPX_OK, last_error());
  CHECK(count == 4);  // 7 in pieces of 2: 2, 2, 2, 1
  CHECK(dims_of(chunked[3]) == Dims{2, 1, 3});
  REQUIRE(ampx_chunk(t, 3, 1, chunked, &count) == AMPX_OK);
  CHECK(count == 3);  // pieces of 3: 3, 3, 1
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  ampx_tensor untouched[2] = {nullptr, nullptr};
  const int64_t wrong[] = {3, 3}, negative[] = {-1, 8};
  CHECK_FAILS_WITH(ampx_split(t, wrong, 2, 1, untouched), AMPX_ERR_SHAPE, "add up");
  CHECK_FAILS_WITH(ampx_split(t, negative, 2, 1, untouched), AMPX_ERR_INVALID_ARGUMENT, ">= 0");
  CHECK_FAILS_WITH(ampx_split(t, wrong, 2, 3, untouched), AMPX_ERR_INVALID_ARGUMENT, "'dim'");
  CHECK_FAILS_WITH(ampx_chunk(t, 0, 1, untouched, &count), AMPX_ERR_INVALID_ARGUMENT, "chunks");
  CHECK(untouched[0] == nullptr);
}

TEST_CASE("cross-entropy with class weights and label smoothing, as torch") {
  Ctx ctx;
  Rng rng(59);
  const int64_t N = 9, C = 6;
  const Vec logits = floats(rng, static_cast<size_t>(N * C), -3, 3);
  Vec labels(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) labels[i] = static_cast<double>((i * 5) % C);
  labels[4] = -100;  // ignored
  const Vec weight = floats(rng, static_cast<size_t>(C), 0.2, 2.0);
  Tensor tl(make(ctx, AMPX_I64, {N}, labels)), tw(make(ctx, AMPX_F32, {C}, weight));
  for (int weighted = 0; weighted <= 1; ++weighted)
    for (double eps : {0.0, 0.1, 1.0})
      for (ampx_reduction red : {AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM}) {
        if (!weighted && eps == 0.0) continue;  // plain ampx_cross_entropy, tested elsewhere
        INFO(("weighted " + std::to_string(weighted) + " eps " + std::to_string(eps) +
              (red == AMPX_REDUCTION_MEAN ? " mean" : " sum")));
        ampx_cross_entropy_options o = ampx_cross_entropy_options_default();
        o.reduction = red;
        o.label_smoothing = eps;
        const Result res = run(
            ctx, {{N, C}}, {logits},
            [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
              return ampx_cross_entropy_ex(t[0], tl, weighted ? tw.handle : nullptr, &o, y);
            },
            {1.0}, rng);
        double total = 0.0, denom = 0.0;
        Vec dx(logits.size(), 0.0);
        for (int64_t i = 0; i < N; ++i) {
          if (labels[i] < 0) continue;
          const auto y = static_cast<int64_t>(labels[i]);
          const double* x = logits.data() + i * C;
          double max = -1e300, sum = 0.0;
          for (int64_t c = 0; c < C; ++c) max = std::max(max, x[c]);
          for (int64_t c = 0; c < C; ++c) sum += std::exp(x[c] - max);
          const double lse = max + std::log(sum);
          const double wy = weighted ? weight[y] : 1.0;
          denom += wy;
          double mass = 0.0;
          for (int64_t c = 0; c < C; ++c) {
            const double wc = weighted ? weight[c] : 1.0;
            const double q = (c == y ? (1 - eps) * wy : 0.0) + eps / C * wc;
            total += q * (lse - x[c]);
            mass += q;
          }
          for (int64_t c = 0; c < C; ++c) {
            const double wc = weighted ? weight[c] : 1.0;
            const double q = (c == y ? (1 - eps) * wy : 0.0) + eps / C * wc;
            dx[i * C + c] = std::exp(x[c] - lse) * mass - q;
          }
        }
        const double scale = red == AMPX_REDUCTION_MEAN ? 1.0 / denom : 1.0;
        for (double& g : dx) g *= scale;
        check_values("loss", res.y, {total * scale}, 1e-6, 0.0);
        check_values("dlogits", res.grads[0], dx, kGradRtol, kGradAtol);
      }
  Tensor logits_t(make(ctx, AMPX_F32, {N, C}, logits)), short_w(make(ctx, AMPX_F32, {C - 1}, Vec(5, 1.0)));
  ampx_cross_entropy_options o = ampx_cross_entropy_options_default();
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_cross_entropy_ex(logits_t, tl, short_w, &o, &out), AMPX_ERR_SHAPE, "'weight'");
  o.label_smoothing = 1.5;
  CHECK_FAILS_WITH(ampx_cross_entropy_ex(logits_t, tl, nullptr, &o, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "label_smoothing");
  CHECK(out == nullptr);
  // No weight and no smoothing: ampx_cross_entropy's value.
  o = ampx_cross_entropy_options_default();
  Tensor a, b;
  REQUIRE(ampx_cross_entropy_ex(logits_t, tl, nullptr, &o, a.out()) == AMPX_OK);
  REQUIRE(ampx_cross_entropy(logits_t, tl, AMPX_REDUCTION_MEAN, -100, b.out()) == AMPX_OK);
  CHECK(values_of(a) == values_of(b));
}

// torch's other shapes and reduction='none': logits [N, C, d1, d2] with
// labels [N, d1, d2] (a loss per position), [C] with a 0-D label, and [N, C]
// unreduced, plain and with weights and smoothing; a mean over positions
// divides by their counted (or summed) weights as over rows.
TEST_CASE("cross-entropy per position, unbatched and unreduced, as torch") {
  Ctx ctx;
  Rng rng(67);
  const int64_t C = 5;
  const Vec weight = floats(rng, static_cast<size_t>(C), 0.2, 2.0);
  Tensor tw(make(ctx, AMPX_F32, {C}, weight));
  for (const Dims& shape : {Dims{2, C, 3, 2}, Dims{C}, Dims{4, C}, Dims{3, C, 1}})
    for (int weighted = 0; weighted <= 1; ++weighted)
      for (ampx_reduction red : {AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM, AMPX_REDUCTION_NONE}) {
        const double eps = weighted ? 0.2 : 0.0;
        INFO(str(shape), " weighted ", weighted, " reduction ", static_cast<int>(red));
        // Positions: N outer, P = the product of the extents after C.
        const int64_t N = shape.size() == 1 ? 1 : shape[0];
        int64_t P = 1;
        for (size_t d = 2; d < shape.size(); ++d) P *= shape[d];
        Dims label_dims = shape;
        label_dims.erase(label_dims.begin() + (shape.size() == 1 ? 0 : 1));
        const Vec logits = floats(rng, count_of(shape), -3, 3);
        Vec labels(static_cast<size_t>(N * P));
        for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<double>((i * 3 + 1) % C);
        if (labels.size() > 2) labels[1] = -100;
        Tensor tl(make(ctx, AMPX_I64, label_dims, labels));
        ampx_cross_entropy_options o = ampx_cross_entropy_options_default();
        o.reduction = red;
        o.label_smoothing = eps;
        const Result res = run(
            ctx, {shape}, {logits},
            [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
              return ampx_cross_entropy_ex(t[0], tl, weighted ? tw.handle : nullptr, &o, y);
            },
            {}, rng);
        const Vec& r = res.grads.back();
        CHECK(res.shape == (red == AMPX_REDUCTION_NONE ? label_dims : Dims{}));
        Vec losses(labels.size(), 0.0), dx(logits.size(), 0.0);
        double denom = 0.0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t p = 0; p < P; ++p) {
            const size_t at = static_cast<size_t>(n * P + p);
            if (labels[at] < 0) continue;
            const auto y = static_cast<int64_t>(labels[at]);
            auto x = [&](int64_t c) { return logits[static_cast<size_t>((n * C + c) * P + p)]; };
            double max = -1e300, sum = 0.0;
            for (int64_t c = 0; c < C; ++c) max = std::max(max, x(c));
            for (int64_t c = 0; c < C; ++c) sum += std::exp(x(c) - max);
            const double lse = max + std::log(sum);
            const double wy = weighted ? weight[y] : 1.0;
            denom += wy;
            double mass = 0.0;
            for (int64_t c = 0; c < C; ++c) {
              const double q = (c == y ? (1 - eps) * wy : 0.0) + eps / C * (weighted ? weight[c] : 1.0);
              losses[at] += q * (lse - x(c));
              mass += q;
            }
            const double g = red == AMPX_REDUCTION_NONE ? r[at] : r[0];
            for (int64_t c = 0; c < C; ++c) {
              const double q = (c == y ? (1 - eps) * wy : 0.0) + eps / C * (weighted ? weight[c] : 1.0);
              dx[static_cast<size_t>((n * C + c) * P + p)] = (std::exp(x(c) - lse) * mass - q) * g;
            }
          }
        const double scale = red == AMPX_REDUCTION_MEAN ? 1.0 / denom : 1.0;
        if (red == AMPX_REDUCTION_NONE) {
          check_values("losses", res.y, losses, 1e-6, 1e-7);
        } else {
          check_values("loss", res.y, {std::accumulate(losses.begin(), losses.end(), 0.0) * scale},
                       1e-6, 0.0);
          for (double& g : dx) g *= scale;
        }
        check_values("dlogits", res.grads[0], dx, kGradRtol, kGradAtol);
      }
  // Shapes that do not pair, and a reduction ampx does not have: SHAPE and
  // INVALID_ARGUMENT naming them, nothing made.
  Tensor x4(make(ctx, AMPX_F32, {2, C, 3, 2}, Vec(60, 0.5)));
  Tensor wrong(make(ctx, AMPX_I64, {2, 2, 3}, Vec(12, 1.0))), flat(make(ctx, AMPX_I64, {12}, Vec(12, 1.0)));
  Tensor x1(make(ctx, AMPX_F32, {C}, Vec(5, 0.5))), one(make(ctx, AMPX_I64, {1}, Vec(1, 1.0)));
  ampx_tensor out = nullptr;
  CHECK_FAILS_WITH(ampx_cross_entropy(x4, wrong, AMPX_REDUCTION_MEAN, -100, &out), AMPX_ERR_SHAPE,
                   "i64[2, 2, 3]");
  CHECK_FAILS_WITH(ampx_cross_entropy(x4, flat, AMPX_REDUCTION_NONE, -100, &out), AMPX_ERR_SHAPE,
                   "f32[2, 5, 3, 2]");
  CHECK_FAILS_WITH(ampx_cross_entropy(x1, one, AMPX_REDUCTION_SUM, -100, &out), AMPX_ERR_SHAPE,
                   "0-D label");
  CHECK_FAILS_WITH(ampx_cross_entropy(x4, wrong, static_cast<ampx_reduction>(4), -100, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "AMPX_REDUCTION_NONE");
  CHECK(out == nullptr);
}

// mse_loss and bce_with_logits with reduction none: each element's loss in
// F32 and its own gradient.
TEST_CASE("mse_loss and bce_with_logits unreduced, as torch") {
  Ctx ctx;
  Rng rng(71);
  const Dims shape{3, 4, 2};
  const Vec a = floats(rng, count_of(shape), -3, 3), b = floats(rng, count_of(shape), -1, 2);
  const Result mse = run(
      ctx, {shape, shape}, {a, b},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        return ampx_mse_loss(t[0], t[1], AMPX_REDUCTION_NONE, y);
      },
      {}, rng);
  const Result bce = run(
      ctx, {shape, shape}, {a, b},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        return ampx_bce_with_logits(t[0], t[1], AMPX_REDUCTION_NONE, y);
      },
      {}, rng);
  CHECK(mse.shape == shape);
  CHECK(bce.shape == shape);
  Vec mse_y, mse_da, mse_db, bce_y, bce_da, bce_db;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i], r = mse.grads.back()[i], s = bce.grads.back()[i];
    mse_y.push_back(d * d);
    mse_da.push_back(2 * d * r);
    mse_db.push_back(-2 * d * r);
    bce_y.push_back(std::max(a[i], 0.0) - a[i] * b[i] + std::log1p(std::exp(-std::fabs(a[i]))));
    bce_da.push_back((1 / (1 + std::exp(-a[i])) - b[i]) * s);
    bce_db.push_back(-a[i] * s);
  }
  check_values("mse", mse.y, mse_y, 1e-6, 0.0);
  check_values("mse d input", mse.grads[0], mse_da, kGradRtol, kGradAtol);
  check_values("mse d target", mse.grads[1], mse_db, kGradRtol, kGradAtol);
  check_values("bce", bce.y, bce_y, 1e-6, 0.0);
  check_values("bce d logits", bce.grads[0], bce_da, kGradRtol, kGradAtol);
  check_values("bce d targets", bce.grads[1], bce_db, kGradRtol, kGradAtol);
  // f16 inputs: the losses are still F32.
  Tensor h(make(ctx, AMPX_F16, shape, a)), t(make(ctx, AMPX_F16, shape, b)), y;
  REQUIRE(ampx_mse_loss(h, t, AMPX_REDUCTION_NONE, y.out()) == AMPX_OK);
  CHECK(dtype_of(y) == AMPX_F32);
}

// The dtype of every step of a pre-norm GPT block under an f16 autocast
// region, against torch.autocast("cuda", float16)'s lists: linear, matmul
// and attention lower precision; layer_norm, rms_norm, softmax, exp, pow,
// sum and cross_entropy fp32; add promotes to the widest input; gelu, mean,
// masked_fill and the shape ops keep their input's type.
TEST_CASE("autocast: a GPT block's dtypes are torch.autocast's") {
  Ctx ctx;
  Rng rng(61);
  const int64_t B = 2, T = 4, D = 8, H = 2;
  ampx_autocast policy = nullptr;
  ampx_autocast_options o = ampx_autocast_options_default();
  o.dtype = AMPX_F16;
  REQUIRE(ampx_autocast_create(ctx, &o, &policy) == AMPX_OK);
  REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  auto f32 = [&](Dims dims) { return make(ctx, AMPX_F32, dims, floats(rng, count_of(dims), -1, 1)); };
  Tensor x(f32({B, T, D})), w(f32({D})), wq(f32({D, D})), w1(f32({4 * D, D})), w2(f32({D, 4 * D}));
  // The handle is read after the call (argument order is unspecified).
  auto step = [&](ampx_status s, const ampx_tensor* made, ampx_dtype want, const char* what) {
    REQUIRE_MESSAGE(s == AMPX_OK, last_error());
    CHECK_MESSAGE(dtype_of(*made) == want, what);
  };
  ampx_tensor h = nullptr, q = nullptr, heads = nullptr, attn = nullptr, r = nullptr, n2 = nullptr;
  ampx_tensor u = nullptr, g = nullptr, m = nullptr, logits = nullptr, t = nullptr;
  step(ampx_layer_norm(x, w, nullptr, 1e-5, &h), &h, AMPX_F32, "layer_norm");
  step(ampx_linear(h, wq, nullptr, AMPX_ACTIVATION_NONE, &q), &q, AMPX_F16, "linear");
  const int64_t split[4] = {B, T, H, D / H};
  REQUIRE(ampx_reshape(q, 4, split, &heads) == AMPX_OK);
  const int32_t order[4] = {0, 2, 1, 3};
  ampx_tensor bhtd = nullptr;
  step(ampx_permute(heads, 4, order, &bhtd), &bhtd, AMPX_F16, "permute");
  ampx_attention_options causal = AMPX_ATTENTION_OPTIONS_INIT;
  causal.causal = 1;
  step(ampx_scaled_dot_product_attention(bhtd, bhtd, bhtd, nullptr, &causal, &attn), &attn, AMPX_F16,
       "scaled_dot_product_attention");
  step(ampx_add(x, q, &r), &r, AMPX_F32, "add (f32 + f16)");
  step(ampx_rms_norm(r, w, 1e-6, &n2), &n2, AMPX_F32, "rms_norm");
  step(ampx_linear(n2, w1, nullptr, AMPX_ACTIVATION_NONE, &u), &u, AMPX_F16, "linear");
  step(ampx_gelu(u, &g), &g, AMPX_F16, "gelu");
  step(ampx_linear(g, w2, nullptr, AMPX_ACTIVATION_NONE, &m), &m, AMPX_F16, "linear");
  const int64_t rows[2] = {B * T, D};
  ampx_tensor m2 = nullptr;
  REQUIRE(ampx_reshape(m, 2, rows, &m2) == AMPX_OK);
  step(ampx_matmul(m2, wq, &logits), &logits, AMPX_F16, "matmul");
  step(ampx_softmax(logits, &t), &t, AMPX_F32, "softmax");
  step(ampx_exp(logits, &t), &t, AMPX_F32, "exp");
  step(ampx_pow(logits, 2.0, &t), &t, AMPX_F32, "pow");
  const int32_t last[1] = {-1};
  step(ampx_sum_dims(logits, last, 1, 0, &t), &t, AMPX_F32, "sum");
  step(ampx_mean_dims(logits, last, 1, 0, &t), &t, AMPX_F16, "mean");
  step(ampx_amax(logits, last, 1, 0, &t), &t, AMPX_F16, "amax");
  Tensor mask(make(ctx, AMPX_I32, {D}, Vec(static_cast<size_t>(D), 0.0)));
  step(ampx_masked_fill(logits, mask, -1e4, &t), &t, AMPX_F16, "masked_fill");
  ampx_tensor flat = logits, ce = nullptr;
  Tensor labels(make(ctx, AMPX_I64, {B * T}, Vec(static_cast<size_t>(B * T), 1.0)));
  step(ampx_cross_entropy(flat, labels, AMPX_REDUCTION_MEAN, -100, &ce), &ce, AMPX_F32,
       "cross_entropy");
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
  ampx_autocast_release(policy);
}
