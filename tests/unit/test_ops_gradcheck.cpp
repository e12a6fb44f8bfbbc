// test_ops_gradcheck.cpp -- every op of ampx.h section 11, forward and
// backward, through the public C API against references written here in
// double precision (never from the library's math headers, so that a shared
// misreading cannot hide).
//
// Method. Inputs are drawn at random (random shapes too), rounded to fp32,
// and the double reference runs on the rounded values. The scalar
//   L = sum(op(inputs) * R)
// with a fixed random R of the output's shape makes every output element
// matter; L is built with ampx ops (ampx_mul, ampx_sum) and differentiated
// by ampx_backward. Each input's gradient is compared with central finite
// differences of the same L evaluated on the double reference.
//
// Tolerances. The finite differences are taken in double with a step of
// 1e-4 relative: truncation error ~h^2 |L'''| ~ 1e-8, rounding ~1e-16 |L| / h
// ~ 1e-11, so they are exact to about 1e-8. The ampx side computes in fp32
// (2^-24 ~ 6e-8 per rounding, a few dozen roundings summed along a path),
// so its gradients carry errors of ~1e-6 relative to the magnitudes summed;
// 1e-3 relative leaves a wide margin for that while any wrong formula
// (a missing term, a transposed product, a wrong broadcast sum) is off by
// O(1). The absolute part, 1e-5 of the largest gradient element of the
// tensor, covers elements that are small only by cancellation (softmax
// gradients sum to zero per row). Forward values: 1e-5 relative (an fp32
// op of a few roundings, exp/erf/tanh included, is within ~1e-6).
//
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::decode;
using ampx_fixture::encode;
using ampx_fixture::values_of;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;
using Dims = std::vector<int64_t>;

constexpr double kForwardRtol = 1e-5;
constexpr double kGradRtol = 1e-3;
constexpr double kGradAtolOfMax = 1e-5;
constexpr double kFdStep = 1e-4;

size_t count_of(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return static_cast<size_t>(n);
}

// ---- random data --------------------------------------------------------------

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(gen_);
  }
  int64_t integer(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  // fp32-representable values in [lo, hi).
  Vec values(size_t n, double lo, double hi) {
    Vec v(n);
    for (double& x : v) x = static_cast<float>(uniform(lo, hi));
    return v;
  }
  // Magnitudes in [lo, hi) with random signs: keeps away from 0 (relu's kink).
  Vec away_from_zero(size_t n, double lo, double hi) {
    Vec v = values(n, lo, hi);
    for (double& x : v)
      if (integer(0, 1)) x = -x;
    return v;
  }

 private:
  std::mt19937_64 gen_;
};

// ---- inputs and tensors ---------------------------------------------------------

struct Input {
  Dims dims;
  Vec values;
  bool requires_grad = true;
  ampx_dtype dtype = AMPX_F32;  // I32/I64 for labels
};

Input floating(Dims dims, Vec values, bool requires_grad = true) {
  Input in;
  in.dims = std::move(dims);
  in.values = std::move(values);
  in.requires_grad = requires_grad;
  return in;
}

Input labels(Vec values, ampx_dtype dtype) {
  Input in;
  in.dims = {static_cast<int64_t>(values.size())};
  in.values = std::move(values);
  in.requires_grad = false;
  in.dtype = dtype;
  return in;
}

ampx_tensor make_tensor(ampx_context ctx, const Input& in) {
  std::vector<unsigned char> bytes;
  if (in.dtype == AMPX_I32 || in.dtype == AMPX_I64) {
    const size_t size = ampx_dtype_size(in.dtype);
    bytes.resize(in.values.size() * size);
    for (size_t i = 0; i < in.values.size(); ++i) {
      const int64_t v64 = static_cast<int64_t>(in.values[i]);
      const int32_t v32 = static_cast<int32_t>(v64);
      std::memcpy(
          bytes.data() + i * size,
          in.dtype == AMPX_I32 ? static_cast<const void*>(&v32) : static_cast<const void*>(&v64),
          size);
    }
  } else {
    bytes = encode(in.dtype, in.values);
  }
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, in.dtype, static_cast<int32_t>(in.dims.size()),
                                        in.dims.data(), bytes.data(), bytes.size(), &t) == AMPX_OK,
                  last_error());
  if (in.requires_grad)
    REQUIRE_MESSAGE(ampx_tensor_set_requires_grad(t, 1) == AMPX_OK, last_error());
  return t;
}

// The gradient ampx attached to `t`, or an empty vector with *present = false.
Vec grad_values(ampx_tensor t, bool* present) {
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(t, &g) == AMPX_OK);
  *present = g != nullptr;
  return g ? values_of(g) : Vec{};
}

bool close(double have, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(have);
  return std::fabs(have - want) <= rtol * std::fabs(want) + atol;
}

double max_abs(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// ---- the check --------------------------------------------------------------------

using Inputs = std::vector<Vec>;
using Reference = std::function<Vec(const Inputs&)>;
using Op = std::function<ampx_status(const std::vector<ampx_tensor>&, ampx_tensor*)>;

double weighted_sum(const Vec& out, const Vec& r) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * r[i];
  return s;
}

// Runs `op` on `inputs` inside a scope, checks its forward values against
// `ref`, backpropagates L = sum(out * R), and checks every input's
// gradient against finite differences of the reference (and that inputs
// without requires_grad get none).
void gradcheck(const std::string& what, const std::vector<Input>& inputs, const Op& op,
               const Reference& ref, uint64_t seed) {
  INFO(what);
  Ctx ctx;
  std::vector<Tensor> owned(inputs.size());
  std::vector<ampx_tensor> handles;
  Inputs values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    owned[i].handle = make_tensor(ctx, inputs[i]);
    handles.push_back(owned[i].handle);
    values.push_back(inputs[i].values);
  }

  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor out = nullptr;
  REQUIRE_MESSAGE(op(handles, &out) == AMPX_OK, last_error());
  REQUIRE(ampx_fixture::dtype_of(out) == AMPX_F32);

  const Vec want = ref(values);
  const Vec have = values_of(out);
  REQUIRE(have.size() == want.size());
  const double out_scale = max_abs(want);
  for (size_t i = 0; i < want.size(); ++i)
    CHECK_MESSAGE(close(have[i], want[i], kForwardRtol, 1e-7 * out_scale), "output element ", i,
                  ": ampx ", have[i], ", reference ", want[i]);

  Rng rng(seed ^ 0x5eedULL);
  const Dims out_dims = ampx_fixture::dims_of(out);
  const Vec r = rng.values(want.size(), -1.0, 1.0);
  Tensor r_tensor(make_tensor(ctx, floating(out_dims, r, false)));
  ampx_tensor weighted = nullptr, loss = nullptr;
  REQUIRE_MESSAGE(ampx_mul(out, r_tensor, &weighted) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_sum(weighted, &loss) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());

  for (size_t k = 0; k < inputs.size(); ++k) {
    INFO("input ", k);
    bool present = false;
    const Vec grad = grad_values(handles[k], &present);
    if (!inputs[k].requires_grad) {
      CHECK_MESSAGE(!present, "an input that does not require grad got a gradient");
      continue;
    }
    REQUIRE_MESSAGE(present, "no gradient was created");
    REQUIRE(grad.size() == values[k].size());
    const Vec fd = ampx_fixture::central_gradient(
        values, k, [&](const Inputs& at) { return weighted_sum(ref(at), r); }, kFdStep);
    const double atol = kGradAtolOfMax * max_abs(fd) + 1e-9;
    for (size_t i = 0; i < grad.size(); ++i)
      CHECK_MESSAGE(close(grad[i], fd[i], kGradRtol, atol), "gradient element ", i, ": ampx ",
                    grad[i], ", finite differences ", fd[i]);
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

// ---- double references ---------------------------------------------------------

Vec ref_binary(char op, const Vec& a, const Vec& b) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double y = b[i % b.size()];
    out[i] = op == '+' ? a[i] + y : op == '-' ? a[i] - y : op == '*' ? a[i] * y : a[i] / y;
  }
  return out;
}

double gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double relu(double x) { return x > 0.0 ? x : 0.0; }

Vec map(const Vec& x, double (*f)(double)) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = f(x[i]);
  return out;
}

double total(const Vec& x) {
  double s = 0.0;
  for (double v : x) s += v;
  return s;
}

Vec ref_softmax(const Vec& x, size_t cols, bool log) {
  Vec out(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    const double* row = &x[r * cols];
    const double m = *std::max_element(row, row + cols);
    double s = 0.0;
    for (size_t j = 0; j < cols; ++j) s += std::exp(row[j] - m);
    for (size_t j = 0; j < cols; ++j)
      out[r * cols + j] = log ? row[j] - m - std::log(s) : std::exp(row[j] - m) / s;
  }
  return out;
}

// torch.nn.functional.cross_entropy(logits, labels, reduction, ignore_index).
double ref_cross_entropy(const Vec& logits, const Vec& label, size_t cols, bool mean,
                         int64_t ignore_index) {
  const Vec logp = ref_softmax(logits, cols, true);
  double sum = 0.0;
  int64_t counted = 0;
  for (size_t r = 0; r < label.size(); ++r) {
    const auto l = static_cast<int64_t>(label[r]);
    if (l == ignore_index) continue;
    sum -= logp[r * cols + static_cast<size_t>(l)];
    ++counted;
  }
  if (!mean) return sum;
  return counted > 0 ? sum / static_cast<double>(counted) : NAN;
}

// [batch] x [m, k] x [k, n].
Vec ref_matmul(const Vec& a, const Vec& b, size_t batch, size_t m, size_t k, size_t n) {
  Vec out(batch * m * n, 0.0);
  for (size_t p = 0; p < batch; ++p)
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (size_t q = 0; q < k; ++q) s += a[(p * m + i) * k + q] * b[(p * k + q) * n + j];
        out[(p * m + i) * n + j] = s;
      }
  return out;
}

// act(x W^T + b) with x [rows, in], W [out, in].
Vec ref_linear(const Vec& x, const Vec& w, const Vec* bias, size_t in, size_t outs,
               ampx_activation act) {
  const size_t rows = x.size() / in;
  Vec out(rows * outs);
  for (size_t r = 0; r < rows; ++r)
    for (size_t o = 0; o < outs; ++o) {
      double z = bias ? (*bias)[o] : 0.0;
      for (size_t q = 0; q < in; ++q) z += x[r * in + q] * w[o * in + q];
      out[r * outs + o] = act == AMPX_ACTIVATION_RELU   ? relu(z)
                          : act == AMPX_ACTIVATION_GELU ? gelu(z)
                                                        : z;
    }
  return out;
}

Dims random_dims(Rng& rng, size_t ndim, int64_t lo, int64_t hi) {
  Dims d(ndim);
  for (int64_t& x : d) x = rng.integer(lo, hi);
  return d;
}

}  // namespace

// ---- element-wise ------------------------------------------------------------------

TEST_CASE("ops gradcheck: add, sub, mul and div, same shape and b broadcast as a row") {
  OPS_REQUIRE_CPU();
  struct Binary {
    const char* name;
    char op;
    ampx_status (*fn)(ampx_tensor, ampx_tensor, ampx_tensor*);
  };
  const Binary ops[] = {{"add", '+', ampx_add},
                        {"sub", '-', ampx_sub},
                        {"mul", '*', ampx_mul},
                        {"div", '/', ampx_div}};
  Rng rng(11);
  for (const Binary& b : ops) {
    // A divisor keeps |b| >= 0.5, where the quotient's curvature stays mild.
    const auto b_values = [&](size_t count) {
      return b.op == '/' ? rng.away_from_zero(count, 0.5, 2) : rng.values(count, -2, 2);
    };
    for (int trial = 0; trial < 3; ++trial) {
      const Dims dims = random_dims(rng, static_cast<size_t>(rng.integer(1, 3)), 1, 5);
      const size_t n = count_of(dims);
      const Dims row = {dims.back()};
      const Op op = [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        return b.fn(t[0], t[1], out);
      };
      const Reference ref = [&](const Inputs& v) { return ref_binary(b.op, v[0], v[1]); };
      const uint64_t seed = 100 + static_cast<uint64_t>(trial);
      gradcheck(std::string(b.name) + " same shape",
                {floating(dims, rng.values(n, -2, 2)), floating(dims, b_values(n))}, op, ref,
                seed);
      gradcheck(std::string(b.name) + " row broadcast",
                {floating(dims, rng.values(n, -2, 2)), floating(row, b_values(count_of(row)))},
                op, ref, seed);
      // Only one side requires grad: the other gets no gradient at all.
      gradcheck(std::string(b.name) + " b constant",
                {floating(dims, rng.values(n, -2, 2)),
                 floating(row, b_values(count_of(row)), false)},
                op, ref, seed);
      gradcheck(std::string(b.name) + " a constant",
                {floating(dims, rng.values(n, -2, 2), false),
                 floating(row, b_values(count_of(row)))},
                op, ref, seed);
    }
  }
}

TEST_CASE("ops gradcheck: affine") {
  OPS_REQUIRE_CPU();
  Rng rng(12);
  for (const double scale : {1.0, -2.5, 0.375}) {
    const double shift = rng.uniform(-1, 1);
    const Dims dims = random_dims(rng, 2, 1, 6);
    gradcheck(
        "affine scale " + std::to_string(scale),
        {floating(dims, rng.values(count_of(dims), -3, 3))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          return ampx_affine(t[0], scale, shift, out);
        },
        [&](const Inputs& v) {
          Vec out(v[0].size());
          for (size_t i = 0; i < out.size(); ++i) out[i] = v[0][i] * scale + shift;
          return out;
        },
        7);
  }
}

TEST_CASE("ops gradcheck: relu, gelu, gelu_tanh, silu, sigmoid, tanh") {
  OPS_REQUIRE_CPU();
  struct Unary {
    const char* name;
    ampx_status (*fn)(ampx_tensor, ampx_tensor*);
    double (*ref)(double);
  };
  const Unary ops[] = {{"relu", ampx_relu, relu},
                       {"gelu", ampx_gelu, gelu},
                       {"gelu_tanh", ampx_gelu_tanh, gelu_tanh},
                       {"silu", ampx_silu, silu},
                       {"sigmoid", ampx_sigmoid, sigmoid},
                       {"tanh", ampx_tanh, static_cast<double (*)(double)>(std::tanh)}};
  Rng rng(13);
  for (const Unary& u : ops) {
    for (int trial = 0; trial < 2; ++trial) {
      const Dims dims = random_dims(rng, static_cast<size_t>(rng.integer(1, 3)), 1, 6);
      // |x| >= 0.05 keeps relu's kink far outside the finite-difference step.
      gradcheck(
          u.name, {floating(dims, rng.away_from_zero(count_of(dims), 0.05, 4.0))},
          [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) { return u.fn(t[0], out); },
          [&](const Inputs& v) { return map(v[0], u.ref); }, 20 + static_cast<uint64_t>(trial));
    }
  }
}

TEST_CASE("ops gradcheck: exp, log, sqrt, rsqrt") {
  OPS_REQUIRE_CPU();
  struct Unary {
    const char* name;
    ampx_status (*fn)(ampx_tensor, ampx_tensor*);
    double (*ref)(double);
    double low, high;  // the inputs' range
  };
  const Unary ops[] = {{"exp", ampx_exp, [](double x) { return std::exp(x); }, -2.0, 2.0},
                       {"log", ampx_log, [](double x) { return std::log(x); }, 0.2, 4.0},
                       {"sqrt", ampx_sqrt, [](double x) { return std::sqrt(x); }, 0.2, 4.0},
                       {"rsqrt", ampx_rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.2, 4.0}};
  Rng rng(17);
  for (const Unary& u : ops) {
    for (int trial = 0; trial < 2; ++trial) {
      const Dims dims = random_dims(rng, static_cast<size_t>(rng.integer(1, 3)), 1, 6);
      gradcheck(
          u.name, {floating(dims, rng.values(count_of(dims), u.low, u.high))},
          [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) { return u.fn(t[0], out); },
          [&](const Inputs& v) { return map(v[0], u.ref); }, 40 + static_cast<uint64_t>(trial));
    }
  }
}

// ---- reductions and losses ------------------------------------------------------------

TEST_CASE("ops gradcheck: sum and mean") {
  OPS_REQUIRE_CPU();
  Rng rng(14);
  for (int trial = 0; trial < 3; ++trial) {
    const Dims dims = random_dims(rng, static_cast<size_t>(rng.integer(1, 3)), 1, 7);
    const Vec x = rng.values(count_of(dims), -2, 2);
    gradcheck(
        "sum", {floating(dims, x)},
        [](const std::vector<ampx_tensor>& t, ampx_tensor* out) { return ampx_sum(t[0], out); },
        [](const Inputs& v) { return Vec{total(v[0])}; }, 30);
    gradcheck(
        "mean", {floating(dims, x)},
        [](const std::vector<ampx_tensor>& t, ampx_tensor* out) { return ampx_mean(t[0], out); },
        [](const Inputs& v) { return Vec{total(v[0]) / static_cast<double>(v[0].size())}; }, 31);
  }
}

TEST_CASE("ops gradcheck: softmax and log_softmax over the last dimension") {
  OPS_REQUIRE_CPU();
  Rng rng(15);
  std::vector<Dims> shapes = {{3, 1}, {7}};
  for (int trial = 0; trial < 3; ++trial)
    shapes.push_back(random_dims(rng, static_cast<size_t>(rng.integer(2, 3)), 1, 6));
  for (const Dims& dims : shapes) {
    const size_t cols = static_cast<size_t>(dims.back());
    const Vec x = rng.values(count_of(dims), -3, 3);
    gradcheck(
        "softmax", {floating(dims, x)},
        [](const std::vector<ampx_tensor>& t, ampx_tensor* out) { return ampx_softmax(t[0], out); },
        [&](const Inputs& v) { return ref_softmax(v[0], cols, false); }, 40);
    gradcheck(
        "log_softmax", {floating(dims, x)},
        [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          return ampx_log_softmax(t[0], out);
        },
        [&](const Inputs& v) { return ref_softmax(v[0], cols, true); }, 41);
  }
}

TEST_CASE("ops gradcheck: cross_entropy with i32/i64 labels, mean/sum, ignored rows") {
  OPS_REQUIRE_CPU();
  Rng rng(16);
  for (const ampx_dtype label_type : {AMPX_I32, AMPX_I64}) {
    for (const ampx_reduction reduction : {AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM}) {
      // -100 is torch's default; an ignore_index that is also a valid class
      // (torch allows it) must ignore exactly the rows with that label.
      for (const int64_t ignore : {int64_t{-100}, int64_t{1}}) {
        const int64_t rows = rng.integer(2, 6), cols = rng.integer(2, 5);
        Vec label(static_cast<size_t>(rows));
        for (double& l : label) l = static_cast<double>(rng.integer(0, cols - 1));
        label[0] = static_cast<double>(ignore);  // at least one ignored row
        label[1] = ignore == 1 ? 0.0 : 1.0;      // and at least one counted
        const bool mean = reduction == AMPX_REDUCTION_MEAN;
        INFO("labels ", std::string(ampx_dtype_name(label_type)), ", ",
             std::string(mean ? "mean" : "sum"), ", ignore_index ", ignore);
        gradcheck(
            "cross_entropy",
            {floating({rows, cols}, rng.values(static_cast<size_t>(rows * cols), -3, 3)),
             labels(label, label_type)},
            [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
              return ampx_cross_entropy(t[0], t[1], reduction, ignore, out);
            },
            [&](const Inputs& v) {
              return Vec{ref_cross_entropy(v[0], v[1], static_cast<size_t>(cols), mean, ignore)};
            },
            50);
      }
    }
  }
}

TEST_CASE(
    "ops cross_entropy: every row ignored gives NaN for mean (as torch), 0 for sum, zero "
    "gradients") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Rng rng(17);
  for (const ampx_reduction reduction : {AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM}) {
    Tensor logits(make_tensor(ctx, floating({3, 4}, rng.values(12, -2, 2))));
    Tensor label(make_tensor(ctx, labels({-100, -100, -100}, AMPX_I64)));
    Tensor loss;
    REQUIRE_MESSAGE(ampx_cross_entropy(logits, label, reduction, -100, loss.out()) == AMPX_OK,
                    last_error());
    const Vec value = values_of(loss);
    REQUIRE(value.size() == 1);
    if (reduction == AMPX_REDUCTION_MEAN)
      CHECK(std::isnan(value[0]));
    else
      CHECK(value[0] == 0.0);
    // torch's nll_loss backward writes nothing for ignored rows: their
    // gradient is 0 even when the mean's 1/0 is NaN.
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    bool present = false;
    const Vec grad = grad_values(logits, &present);
    REQUIRE(present);
    for (double g : grad) CHECK(g == 0.0);
  }
}

TEST_CASE("ops gradcheck: mse_loss, mean and sum") {
  OPS_REQUIRE_CPU();
  Rng rng(18);
  for (const ampx_reduction reduction : {AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM}) {
    // Which sides require grad: both, the input only, the target only.
    for (const int which : {3, 1, 2}) {
      const Dims dims = random_dims(rng, static_cast<size_t>(rng.integer(1, 3)), 1, 5);
      const size_t n = count_of(dims);
      const bool mean = reduction == AMPX_REDUCTION_MEAN;
      gradcheck(
          std::string("mse_loss ") + (mean ? "mean" : "sum") + ", grads " + std::to_string(which),
          {floating(dims, rng.values(n, -2, 2), (which & 1) != 0),
           floating(dims, rng.values(n, -2, 2), (which & 2) != 0)},
          [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
            return ampx_mse_loss(t[0], t[1], reduction, out);
          },
          [&](const Inputs& v) {
            double s = 0.0;
            for (size_t i = 0; i < v[0].size(); ++i) s += (v[0][i] - v[1][i]) * (v[0][i] - v[1][i]);
            return Vec{mean ? s / static_cast<double>(v[0].size()) : s};
          },
          60);
    }
  }
}

// ---- products ------------------------------------------------------------------------

TEST_CASE("ops gradcheck: matmul, 2-D and batched") {
  OPS_REQUIRE_CPU();
  Rng rng(19);
  for (int trial = 0; trial < 4; ++trial) {
    const bool batched = trial % 2 == 1;
    const int64_t batch = batched ? rng.integer(1, 3) : 1;
    const int64_t m = rng.integer(1, 5), k = rng.integer(1, 5), n = rng.integer(1, 5);
    const Dims a_dims = batched ? Dims{batch, m, k} : Dims{m, k};
    const Dims b_dims = batched ? Dims{batch, k, n} : Dims{k, n};
    const Op op = [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
      return ampx_matmul(t[0], t[1], out);
    };
    const Reference ref = [&](const Inputs& v) {
      return ref_matmul(v[0], v[1], static_cast<size_t>(batch), static_cast<size_t>(m),
                        static_cast<size_t>(k), static_cast<size_t>(n));
    };
    const Vec a = rng.values(count_of(a_dims), -2, 2), b = rng.values(count_of(b_dims), -2, 2);
    const std::string name = batched ? "batched matmul" : "matmul";
    gradcheck(name, {floating(a_dims, a), floating(b_dims, b)}, op, ref, 70);
    gradcheck(name + ", a constant", {floating(a_dims, a, false), floating(b_dims, b)}, op, ref,
              71);
    gradcheck(name + ", b constant", {floating(a_dims, a), floating(b_dims, b, false)}, op, ref,
              72);
  }
}

// torch.matmul's rules, written out in double: a vector is a matrix of one
// row (as a) or one column (as b) whose extent the output drops; the batch
// dimensions (all but the last two) broadcast aligned at the right.
struct MatmulRef {
  Dims a_dims, b_dims, out_dims, batch;
  size_t m = 1, k = 0, n = 1;

  MatmulRef(Dims a, Dims b) : a_dims(std::move(a)), b_dims(std::move(b)) {
    Dims am = a_dims, bm = b_dims;
    if (am.size() == 1) am.insert(am.begin(), 1);
    if (bm.size() == 1) bm.push_back(1);
    m = static_cast<size_t>(am[am.size() - 2]);
    k = static_cast<size_t>(am.back());
    n = static_cast<size_t>(bm.back());
    const size_t ab = am.size() - 2, bb = bm.size() - 2, ob = std::max(ab, bb);
    a_batch.assign(ob, 1), b_batch.assign(ob, 1);
    for (size_t d = 0; d < ab; ++d) a_batch[ob - ab + d] = am[d];
    for (size_t d = 0; d < bb; ++d) b_batch[ob - bb + d] = bm[d];
    for (size_t d = 0; d < ob; ++d) batch.push_back(std::max(a_batch[d], b_batch[d]));
    out_dims = batch;
    if (a_dims.size() > 1) out_dims.push_back(static_cast<int64_t>(m));
    if (b_dims.size() > 1) out_dims.push_back(static_cast<int64_t>(n));
  }

  // The flat index of batch element `p` (of `batch`) in an operand whose
  // batch extents are `own` (1 where broadcast).
  size_t operand_batch(size_t p, const Dims& own) const {
    size_t index = 0, stride = 1;
    for (size_t d = batch.size(); d-- > 0;) {
      const size_t coord = p % static_cast<size_t>(batch[d]);
      p /= static_cast<size_t>(batch[d]);
      if (own[d] != 1) index += coord * stride;
      stride *= static_cast<size_t>(own[d]);
    }
    return index;
  }

  Vec operator()(const Vec& a, const Vec& b) const {
    const size_t batches = count_of(batch);
    Vec out(batches * m * n, 0.0);
    for (size_t p = 0; p < batches; ++p) {
      const size_t pa = operand_batch(p, a_batch), pb = operand_batch(p, b_batch);
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) {
          double sum = 0.0;
          for (size_t q = 0; q < k; ++q)
            sum += a[(pa * m + i) * k + q] * b[(pb * k + q) * n + j];
          out[(p * m + i) * n + j] = sum;
        }
    }
    return out;
  }

 private:
  Dims a_batch, b_batch;
};

TEST_CASE("ops gradcheck: matmul with torch.matmul's shapes (vectors, broadcast batches)") {
  OPS_REQUIRE_CPU();
  // (a, b, torch.matmul's output shape)
  const std::vector<std::tuple<Dims, Dims, Dims>> cases = {
      {{3}, {3}, {}},                          // dot
      {{2, 3}, {3}, {2}},                      // matrix-vector
      {{3}, {3, 4}, {4}},                      // vector-matrix
      {{3}, {2, 3, 4}, {2, 4}},                // vector times a batch
      {{2, 3, 4}, {4}, {2, 3}},                // a batch times a vector
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},          // a batch times one matrix
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},          // one matrix times a batch
      {{1, 2, 3}, {4, 3, 2}, {4, 2, 2}},       // a batch of one, shared
      {{2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}}, // both broadcast
      {{2, 3, 2, 3}, {1, 3, 3, 2}, {2, 3, 2, 2}},
      {{2, 2, 3, 4}, {2, 2, 4, 1}, {2, 2, 3, 1}},
      {{1, 1, 2, 3}, {3, 2}, {1, 1, 2, 2}},
  };
  const Op op = [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
    return ampx_matmul(t[0], t[1], out);
  };
  Rng rng(23);
  uint64_t seed = 80;
  for (const auto& [a_dims, b_dims, out_dims] : cases) {
    const MatmulRef ref(a_dims, b_dims);
    REQUIRE(ref.out_dims == out_dims);
    const Vec a = rng.values(count_of(a_dims), -2, 2), b = rng.values(count_of(b_dims), -2, 2);
    const Reference reference = [&](const Inputs& v) { return ref(v[0], v[1]); };
    const auto text = [](const Dims& dims) {
      std::string t = "[";
      for (size_t d = 0; d < dims.size(); ++d) t += (d ? ", " : "") + std::to_string(dims[d]);
      return t + "]";
    };
    const std::string name = "matmul " + text(a_dims) + " x " + text(b_dims);
    {
      Ctx ctx;
      Tensor ta(make_tensor(ctx, floating(a_dims, a, false)));
      Tensor tb(make_tensor(ctx, floating(b_dims, b, false)));
      Tensor out;
      REQUIRE_MESSAGE(ampx_matmul(ta, tb, out.out()) == AMPX_OK, last_error());
      CHECK(ampx_fixture::dims_of(out) == out_dims);
    }
    gradcheck(name, {floating(a_dims, a), floating(b_dims, b)}, op, reference, seed++);
    gradcheck(name + ", a constant", {floating(a_dims, a, false), floating(b_dims, b)}, op,
              reference, seed++);
  }
}

TEST_CASE("ops matmul: a product with no elements gives zero gradients; bad shapes change nothing") {
  Ctx ctx;
  Tensor a(make_tensor(ctx, floating({3, 4}, Vec(12, 1.0))));
  Tensor empty_batch(make_tensor(ctx, floating({0, 4, 5}, Vec{})));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor y = nullptr, total = nullptr;
  REQUIRE_MESSAGE(ampx_matmul(a, empty_batch, &y) == AMPX_OK, last_error());
  CHECK(ampx_fixture::dims_of(y) == Dims{0, 3, 5});
  REQUIRE(ampx_sum(y, &total) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(total, nullptr) == AMPX_OK, last_error());
  bool present = false;
  CHECK(grad_values(a, &present) == Vec(12, 0.0));
  CHECK(present);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);

  Tensor scalar(make_tensor(ctx, floating({}, Vec{2.0}, false)));
  Tensor v3(make_tensor(ctx, floating({3}, Vec(3, 1.0), false)));
  Tensor b234(make_tensor(ctx, floating({2, 3, 4}, Vec(24, 1.0), false)));
  Tensor b343(make_tensor(ctx, floating({3, 4, 3}, Vec(36, 1.0), false)));
  ampx_tensor out = reinterpret_cast<ampx_tensor>(&ctx);  // must stay untouched
  const ampx_tensor untouched = out;
  CHECK_FAILS_WITH(ampx_matmul(scalar, v3, &out), AMPX_ERR_SHAPE, "0-D");
  CHECK_FAILS_WITH(ampx_matmul(v3, b343, &out), AMPX_ERR_SHAPE, "contracted");
  CHECK_FAILS_WITH(ampx_matmul(b234, b343, &out), AMPX_ERR_SHAPE, "do not broadcast");
  CHECK(ampx_test::contains(last_error(), "f32[3, 4, 3]"));
  CHECK(out == untouched);
}

TEST_CASE("ops gradcheck: linear with and without bias, each fused activation") {
  OPS_REQUIRE_CPU();
  Rng rng(20);
  for (const ampx_activation act :
       {AMPX_ACTIVATION_NONE, AMPX_ACTIVATION_RELU, AMPX_ACTIVATION_GELU}) {
    for (const bool with_bias : {true, false}) {
      for (const int x_rank : {1, 2, 3}) {
        const int64_t in = rng.integer(1, 5), outs = rng.integer(1, 5);
        const Dims x_dims = x_rank == 1   ? Dims{in}
                            : x_rank == 2 ? Dims{rng.integer(1, 5), in}
                                          : Dims{rng.integer(1, 3), rng.integer(1, 3), in};
        Vec x, w, b;
        // Redraw until every pre-activation is clear of relu's kink by far
        // more than a finite-difference step moves it.
        for (;;) {
          x = rng.values(count_of(x_dims), -2, 2);
          w = rng.values(static_cast<size_t>(outs * in), -1, 1);
          b = rng.values(static_cast<size_t>(outs), -1, 1);
          const Vec z = ref_linear(x, w, with_bias ? &b : nullptr, static_cast<size_t>(in),
                                   static_cast<size_t>(outs), AMPX_ACTIVATION_NONE);
          double closest = 1e9;
          for (double v : z) closest = std::min(closest, std::fabs(v));
          if (act != AMPX_ACTIVATION_RELU || closest > 0.02) break;
        }
        std::vector<Input> inputs = {floating(x_dims, x), floating({outs, in}, w)};
        if (with_bias) inputs.push_back(floating({outs}, b));
        INFO("activation ", static_cast<int>(act), ", bias ", with_bias, ", x of rank ", x_rank);
        const Op op = [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          return ampx_linear(t[0], t[1], with_bias ? t[2] : nullptr, act, out);
        };
        const Reference ref = [&](const Inputs& v) {
          return ref_linear(v[0], v[1], with_bias ? &v[2] : nullptr, static_cast<size_t>(in),
                            static_cast<size_t>(outs), act);
        };
        gradcheck("linear", inputs, op, ref, 80);
        // The usual training case: the data needs no gradient.
        inputs[0].requires_grad = false;
        gradcheck("linear, x constant", inputs, op, ref, 81);
      }
    }
  }
}

TEST_CASE("ops linear with zero input features is its bias, with the bias gradient of every row") {
  // torch: x [2, 0] with W [3, 0] and b gives b on every row (an empty sum
  // is 0), and d sum / d b = 2 per element.
  OPS_REQUIRE_CPU();
  Ctx ctx;
  const int64_t x_dims[] = {2, 0}, w_dims[] = {3, 0};
  Tensor x, w;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 2, x_dims, x.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 2, w_dims, w.out()) == AMPX_OK);
  Tensor b(make_tensor(ctx, floating({3}, {1.5, 2.5, -3.0})));
  Tensor y, loss;
  REQUIRE_MESSAGE(ampx_linear(x, w, b, AMPX_ACTIVATION_NONE, y.out()) == AMPX_OK, last_error());
  CHECK(values_of(y) == Vec{1.5, 2.5, -3.0, 1.5, 2.5, -3.0});
  REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  bool present = false;
  CHECK(grad_values(b, &present) == Vec{2.0, 2.0, 2.0});
}

// ---- graphs ---------------------------------------------------------------------------

TEST_CASE("ops gradcheck: a tensor used twice in one graph gets the sum of both gradients") {
  OPS_REQUIRE_CPU();
  Rng rng(21);
  const Dims dims = {3, 4};
  // A leaf used twice by one op (x * x) and again by another (+ x); an
  // intermediate y = tanh(x) used by two ops, one of them twice (y * y + y).
  gradcheck(
      "x * x + x", {floating(dims, rng.values(12, -2, 2))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor sq = nullptr;
        ampx_status s = ampx_mul(t[0], t[0], &sq);
        return s != AMPX_OK ? s : ampx_add(sq, t[0], out);
      },
      [](const Inputs& v) {
        Vec out(v[0].size());
        for (size_t i = 0; i < out.size(); ++i) out[i] = v[0][i] * v[0][i] + v[0][i];
        return out;
      },
      90);
  gradcheck(
      "y = tanh(x); y * y + y", {floating(dims, rng.values(12, -2, 2))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr, sq = nullptr;
        ampx_status s = ampx_tanh(t[0], &y);
        if (s == AMPX_OK) s = ampx_mul(y, y, &sq);
        return s != AMPX_OK ? s : ampx_add(sq, y, out);
      },
      [](const Inputs& v) {
        Vec out(v[0].size());
        for (size_t i = 0; i < out.size(); ++i) {
          const double y = std::tanh(v[0][i]);
          out[i] = y * y + y;
        }
        return out;
      },
      91);
  // A weight shared by two layers, and an intermediate feeding both a
  // matmul and a broadcast add: gradients meet from different op kinds.
  gradcheck(
      "shared weight through two linears",
      {floating({4, 3}, rng.values(12, -1, 1)), floating({3, 3}, rng.values(9, -1, 1))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor h = nullptr, h2 = nullptr;
        ampx_status s = ampx_linear(t[0], t[1], nullptr, AMPX_ACTIVATION_GELU, &h);
        if (s == AMPX_OK) s = ampx_linear(h, t[1], nullptr, AMPX_ACTIVATION_NONE, &h2);
        return s != AMPX_OK ? s : ampx_add(h2, h, out);
      },
      [](const Inputs& v) {
        const Vec h = ref_linear(v[0], v[1], nullptr, 3, 3, AMPX_ACTIVATION_GELU);
        const Vec h2 = ref_linear(h, v[1], nullptr, 3, 3, AMPX_ACTIVATION_NONE);
        return ref_binary('+', h2, h);
      },
      92);
}

TEST_CASE("ops gradcheck: a small network, end to end (linear, gelu, log_softmax, cross_entropy)") {
  OPS_REQUIRE_CPU();
  Rng rng(22);
  const int64_t rows = 5, in = 3, hidden = 4, classes = 3;
  const Vec label = {0, 2, 1, 1, 0};
  gradcheck(
      "mlp",
      {floating({rows, in}, rng.values(15, -2, 2), false),
       floating({hidden, in}, rng.values(12, -1, 1)), floating({hidden}, rng.values(4, -1, 1)),
       floating({classes, hidden}, rng.values(12, -1, 1)),
       floating({classes}, rng.values(3, -1, 1)), labels(label, AMPX_I64)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor h = nullptr, logits = nullptr;
        ampx_status s = ampx_linear(t[0], t[1], t[2], AMPX_ACTIVATION_GELU, &h);
        if (s == AMPX_OK) s = ampx_linear(h, t[3], t[4], AMPX_ACTIVATION_NONE, &logits);
        return s != AMPX_OK ? s : ampx_cross_entropy(logits, t[5], AMPX_REDUCTION_MEAN, -100, out);
      },
      [&](const Inputs& v) {
        const Vec h = ref_linear(v[0], v[1], &v[2], in, hidden, AMPX_ACTIVATION_GELU);
        const Vec logits = ref_linear(h, v[3], &v[4], hidden, classes, AMPX_ACTIVATION_NONE);
        return Vec{ref_cross_entropy(logits, v[5], classes, true, -100)};
      },
      93);
}

TEST_CASE("ops gradients accumulate over two backward passes") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Rng rng(23);
  const Vec xv = rng.values(6, -2, 2), wv = rng.values(6, -1, 1);
  Tensor x(make_tensor(ctx, floating({2, 3}, xv)));
  Tensor w(make_tensor(ctx, floating({2, 3}, wv)));
  Tensor c(make_tensor(ctx, floating({2, 3}, rng.values(6, -1, 1), false)));
  auto pass = [&] {
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor y = nullptr, z = nullptr, loss = nullptr;
    REQUIRE(ampx_mul(x, w, &y) == AMPX_OK);
    REQUIRE(ampx_mul(y, c, &z) == AMPX_OK);
    REQUIRE(ampx_sum(z, &loss) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  };
  pass();
  bool present = false;
  const Vec once_x = grad_values(x, &present);
  const Vec once_w = grad_values(w, &present);
  pass();
  const Vec twice_x = grad_values(x, &present);
  const Vec twice_w = grad_values(w, &present);
  bool c_grad = true;
  grad_values(c, &c_grad);
  CHECK_FALSE(c_grad);
  const Vec cv = values_of(c);
  for (size_t i = 0; i < 6; ++i) {
    // Doubling is exact in fp32: the second pass adds the same values.
    CHECK(twice_x[i] == 2.0 * once_x[i]);
    CHECK(twice_w[i] == 2.0 * once_w[i]);
    CHECK(once_x[i] == static_cast<float>(wv[i] * cv[i]));
    CHECK(once_w[i] == static_cast<float>(xv[i] * cv[i]));
  }
  // Zeroing between passes (what an optimizer's zero_grad does) restarts.
  ampx_tensor gx = nullptr;
  REQUIRE(ampx_tensor_grad(x, &gx) == AMPX_OK);
  REQUIRE(ampx_tensor_fill(gx, 0.0) == AMPX_OK);
  pass();
  const Vec again_x = grad_values(x, &present);
  for (size_t i = 0; i < 6; ++i) CHECK(again_x[i] == once_x[i]);
}

TEST_CASE("ops: an op whose inputs need no gradient records nothing and creates no gradient") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Rng rng(24);
  Tensor a(make_tensor(ctx, floating({2, 3}, rng.values(6, -1, 1), false)));
  Tensor b(make_tensor(ctx, floating({3, 2}, rng.values(6, -1, 1), false)));
  Tensor y, loss;
  REQUIRE(ampx_matmul(a, b, y.out()) == AMPX_OK);
  int32_t flag = -1;
  REQUIRE(ampx_tensor_requires_grad(y, &flag) == AMPX_OK);
  CHECK(flag == 0);
  REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
  CHECK(ampx_backward(loss, nullptr) == AMPX_ERR_INVALID_ARGUMENT);
  bool present = true;
  grad_values(a, &present);
  CHECK_FALSE(present);
  grad_values(b, &present);
  CHECK_FALSE(present);
}

// ---- the ops of a Transformer block ------------------------------------------------

namespace {

// The row-major index of `shape`'s element that output multi-index `at`
// reads (aligned at the right, extents of 1 broadcast).
size_t read_index(const Dims& shape, const Dims& out, const Dims& at) {
  size_t index = 0;
  const size_t skip = out.size() - shape.size();
  for (size_t k = 0; k < shape.size(); ++k)
    index = index * static_cast<size_t>(shape[k]) + static_cast<size_t>(shape[k] == 1 ? 0 : at[skip + k]);
  return index;
}

Dims multi_index(size_t i, const Dims& shape) {
  Dims at(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    at[k] = static_cast<int64_t>(i % static_cast<size_t>(shape[k]));
    i /= static_cast<size_t>(shape[k]);
  }
  return at;
}

// softmax(scale q k^T + mask) v for q [B, H, T, D], k and v [B, Hkv, T, D],
// a [T, T] mask or none, causal or not.
Vec ref_attention(const Vec& q, const Vec& k, const Vec& v, const Vec* mask, int64_t B, int64_t H,
                  int64_t Hkv, int64_t T, int64_t D, bool causal) {
  Vec out(q.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t g = h / (H / Hkv);
        Vec s(static_cast<size_t>(T));
        double max = -1e300;
        for (int64_t j = 0; j < T; ++j) {
          if (causal && j > i) {
            s[j] = -INFINITY;
            continue;
          }
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[((b * H + h) * T + i) * D + d] * k[((b * Hkv + g) * T + j) * D + d];
          s[j] = dot * scale + (mask ? (*mask)[i * T + j] : 0.0);
          max = std::max(max, s[j]);
        }
        double sum = 0.0;
        for (double& x : s) sum += (x = std::exp(x - max));
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < D; ++d)
            out[((b * H + h) * T + i) * D + d] += s[j] / sum * v[((b * Hkv + g) * T + j) * D + d];
      }
  return out;
}

}  // namespace

TEST_CASE("ops gradcheck: broadcasting add, sub, mul, div over column, scalar and 4-D shapes") {
  Rng rng(31);
  const std::vector<std::pair<Dims, Dims>> pairs = {
      {{2, 1, 3}, {4, 1}}, {{3}, {2, 3}}, {{1}, {2, 2}}, {{}, {3}}, {{2, 3, 1, 2}, {3, 4, 1}}};
  const char ops[] = {'+', '-', '*', '/'};
  using Fn = ampx_status (*)(ampx_tensor, ampx_tensor, ampx_tensor*);
  const Fn fns[] = {ampx_add, ampx_sub, ampx_mul, ampx_div};
  for (const auto& [da, db] : pairs) {
    Dims out(std::max(da.size(), db.size()));
    for (size_t k = 0; k < out.size(); ++k) {
      const int64_t ea = k + da.size() >= out.size() ? da[k + da.size() - out.size()] : 1;
      const int64_t eb = k + db.size() >= out.size() ? db[k + db.size() - out.size()] : 1;
      out[k] = std::max(ea, eb);
    }
    const Vec a = rng.values(count_of(da), -2, 2), b = rng.away_from_zero(count_of(db), 0.5, 2);
    for (int o = 0; o < 4; ++o)
      gradcheck(
          std::string("broadcast ") + ops[o], {floating(da, a), floating(db, b)},
          [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) { return fns[o](t[0], t[1], y); },
          [&](const Inputs& v) {
            Vec y(count_of(out));
            for (size_t i = 0; i < y.size(); ++i) {
              const Dims at = multi_index(i, out);
              y[i] = ref_binary(ops[o], {v[0][read_index(da, out, at)]},
                                {v[1][read_index(db, out, at)]})[0];
            }
            return y;
          },
          50 + o);
  }
}

TEST_CASE("ops gradcheck: sum, mean and amax over dimensions; permute; softmax over a dimension") {
  Rng rng(32);
  const Dims dims = {3, 4, 2};
  const Vec x = rng.values(count_of(dims), -2, 2);
  const int32_t reduced[] = {0, 2};
  for (int kind = 0; kind < 3; ++kind)
    gradcheck(
        kind == 0 ? "sum_dims" : kind == 1 ? "mean_dims" : "amax", {floating(dims, x)},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
          return kind == 0   ? ampx_sum_dims(t[0], reduced, 2, 1, y)
                 : kind == 1 ? ampx_mean_dims(t[0], reduced, 2, 0, y)
                             : ampx_amax(t[0], reduced, 2, 0, y);
        },
        [&](const Inputs& v) {
          Vec y(4, kind == 2 ? -1e300 : 0.0);
          for (size_t i = 0; i < v[0].size(); ++i) {
            const size_t j = (i / 2) % 4;
            if (kind == 2)
              y[j] = std::max(y[j], v[0][i]);
            else
              y[j] += v[0][i] / (kind == 1 ? 6.0 : 1.0);
          }
          return y;
        },
        60 + kind);
  const int32_t order[] = {2, 0, 1};
  gradcheck(
      "permute", {floating(dims, x)},
      [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) { return ampx_permute(t[0], 3, order, y); },
      [&](const Inputs& v) {
        Vec y(v[0].size());
        for (size_t i = 0; i < y.size(); ++i) {
          const Dims at = multi_index(i, {2, 3, 4});  // (c, a, b) of x's (a, b, c)
          y[i] = v[0][static_cast<size_t>((at[1] * 4 + at[2]) * 2 + at[0])];
        }
        return y;
      },
      63);
  gradcheck(
      "softmax_dim 1", {floating(dims, x)},
      [&](const std::vector<ampx_tensor>& t, ampx_tensor* y) { return ampx_softmax_dim(t[0], 1, y); },
      [&](const Inputs& v) {
        Vec y(v[0].size());
        for (int64_t a = 0; a < 3; ++a)
          for (int64_t c = 0; c < 2; ++c) {
            double sum = 0.0;
            for (int64_t b = 0; b < 4; ++b) sum += std::exp(v[0][(a * 4 + b) * 2 + c]);
            for (int64_t b = 0; b < 4; ++b)
              y[(a * 4 + b) * 2 + c] = std::exp(v[0][(a * 4 + b) * 2 + c]) / sum;
          }
        return y;
      },
      64);
}

TEST_CASE("ops gradcheck: rms_norm, pow, masked_fill, rotary_embedding, a split piece") {
  Rng rng(33);
  const Dims dims = {3, 6};
  const Vec x = rng.values(18, -2, 2), w = rng.values(6, 0.5, 1.5);
  gradcheck(
      "rms_norm", {floating(dims, x), floating({6}, w)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) { return ampx_rms_norm(t[0], t[1], 1e-5, y); },
      [](const Inputs& v) {
        Vec y(18);
        for (int r = 0; r < 3; ++r) {
          double ms = 0.0;
          for (int j = 0; j < 6; ++j) ms += v[0][r * 6 + j] * v[0][r * 6 + j] / 6.0;
          for (int j = 0; j < 6; ++j) y[r * 6 + j] = v[0][r * 6 + j] / std::sqrt(ms + 1e-5) * v[1][j];
        }
        return y;
      },
      70);
  for (double p : {2.0, -1.5, 0.5})
    gradcheck(
        "pow " + std::to_string(p), {floating(dims, rng.values(18, 0.3, 2.0))},
        [p](const std::vector<ampx_tensor>& t, ampx_tensor* y) { return ampx_pow(t[0], p, y); },
        [p](const Inputs& v) {
          Vec y(v[0].size());
          for (size_t i = 0; i < y.size(); ++i) y[i] = std::pow(v[0][i], p);
          return y;
        },
        71);
  const Vec mask = {0, 1, 0, 0, 1, 1};
  gradcheck(
      "masked_fill", {floating(dims, x), floating({6}, mask, false)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) { return ampx_masked_fill(t[0], t[1], -3.0, y); },
      [](const Inputs& v) {
        Vec y(v[0]);
        for (size_t i = 0; i < y.size(); ++i)
          if (v[1][i % 6] != 0.0) y[i] = -3.0;
        return y;
      },
      72);
  const Vec angles = rng.values(9, -3, 3);  // [T 3, D/2 3]
  Vec c(9), s(9);
  for (size_t i = 0; i < 9; ++i) c[i] = static_cast<float>(std::cos(angles[i])), s[i] = static_cast<float>(std::sin(angles[i]));
  gradcheck(
      "rotary_embedding", {floating({2, 3, 6}, rng.values(36, -1, 1)), floating({3, 3}, c, false),
                           floating({3, 3}, s, false)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        return ampx_rotary_embedding(t[0], t[1], t[2], 0, y);
      },
      [](const Inputs& v) {
        Vec y(v[0].size());
        for (int64_t row = 0; row < 6; ++row)
          for (int64_t i = 0; i < 3; ++i) {
            const int64_t t = row % 3, a = row * 6 + i, b = a + 3;
            const double cs = v[1][t * 3 + i], sn = v[2][t * 3 + i];
            y[a] = v[0][a] * cs - v[0][b] * sn;
            y[b] = v[0][b] * cs + v[0][a] * sn;
          }
        return y;
      },
      73);
  gradcheck(
      "split piece 1", {floating(dims, x)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        const int64_t sizes[] = {2, 4};
        ampx_tensor pieces[2] = {};
        const ampx_status status = ampx_split(t[0], sizes, 2, 1, pieces);
        *y = pieces[1];
        return status;
      },
      [](const Inputs& v) {
        Vec y;
        for (int r = 0; r < 3; ++r)
          for (int j = 2; j < 6; ++j) y.push_back(v[0][r * 6 + j]);
        return y;
      },
      74);
}

TEST_CASE("ops gradcheck: attention (causal, grouped heads, masked) and smoothed cross-entropy") {
  Rng rng(34);
  const int64_t B = 1, H = 2, Hkv = 1, T = 4, D = 3;
  const Vec q = rng.values(static_cast<size_t>(B * H * T * D), -1, 1);
  const Vec k = rng.values(static_cast<size_t>(B * Hkv * T * D), -1, 1);
  const Vec v = rng.values(static_cast<size_t>(B * Hkv * T * D), -1, 1);
  const Vec mask = rng.values(static_cast<size_t>(T * T), -1, 1);
  for (int masked = 0; masked <= 1; ++masked)
    gradcheck(
        masked ? "attention, mask" : "attention, causal",
        masked ? std::vector<Input>{floating({B, H, T, D}, q), floating({B, Hkv, T, D}, k),
                                    floating({B, Hkv, T, D}, v), floating({T, T}, mask, false)}
               : std::vector<Input>{floating({B, H, T, D}, q), floating({B, Hkv, T, D}, k),
                                    floating({B, Hkv, T, D}, v)},
        [masked](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
          ampx_attention_options o = AMPX_ATTENTION_OPTIONS_INIT;
          o.causal = !masked;
          return ampx_scaled_dot_product_attention(t[0], t[1], t[2], masked ? t[3] : nullptr, &o, y);
        },
        [&](const Inputs& in) {
          return ref_attention(in[0], in[1], in[2], masked ? &in[3] : nullptr, B, H, Hkv, T, D,
                               !masked);
        },
        80 + masked);
  const size_t N = 5, C = 4;
  const Vec logits = rng.values(N * C, -2, 2), weight = rng.values(C, 0.3, 2.0);
  const Vec label = {0, 3, -100, 1, 3};
  gradcheck(
      "cross_entropy_ex", {floating({5, 4}, logits), labels(label, AMPX_I64), floating({4}, weight, false)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        ampx_cross_entropy_options o = ampx_cross_entropy_options_default();
        o.label_smoothing = 0.2;
        return ampx_cross_entropy_ex(t[0], t[1], t[2], &o, y);
      },
      [&](const Inputs& in) {
        double total = 0.0, denom = 0.0;
        for (size_t i = 0; i < N; ++i) {
          if (in[1][i] < 0) continue;
          const auto y = static_cast<size_t>(in[1][i]);
          double max = -1e300, sum = 0.0;
          for (size_t c = 0; c < C; ++c) max = std::max(max, in[0][i * C + c]);
          for (size_t c = 0; c < C; ++c) sum += std::exp(in[0][i * C + c] - max);
          const double lse = max + std::log(sum);
          for (size_t c = 0; c < C; ++c)
            total += ((c == y ? 0.8 * in[2][y] : 0.0) + 0.2 / C * in[2][c]) * (lse - in[0][i * C + c]);
          denom += in[2][y];
        }
        return Vec{total / denom};
      },
      82);
}

// ---- convolution and pooling -------------------------------------------------------

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  bool bias;
};

// y[n, o, p, q] = b[o] + sum_{c, i, j} w[o, c, i, j] x[n, g Cg + c, p sh - ph + i dh, ...].
Vec ref_conv2d(const ConvCase& k, const Vec& x, const Vec& w, const Vec* b) {
  const int64_t oh = (k.h + 2 * k.ph - k.dh * (k.kh - 1) - 1) / k.sh + 1;
  const int64_t ow = (k.w + 2 * k.pw - k.dw * (k.kw - 1) - 1) / k.sw + 1;
  const int64_t cg = k.c / k.groups, og = k.o / k.groups;
  Vec y(static_cast<size_t>(k.n * k.o * oh * ow));
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t p = 0; p < oh; ++p)
        for (int64_t q = 0; q < ow; ++q) {
          double sum = b ? (*b)[o] : 0.0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t a = p * k.sh - k.ph + i * k.dh, bb = q * k.sw - k.pw + j * k.dw;
                if (a < 0 || a >= k.h || bb < 0 || bb >= k.w) continue;
                const int64_t ci = o / og * cg + c;
                sum += w[((o * cg + c) * k.kh + i) * k.kw + j] *
                       x[((n * k.c + ci) * k.h + a) * k.w + bb];
              }
          y[((n * k.o + o) * oh + p) * ow + q] = sum;
        }
  return y;
}

struct PoolCase {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil_mode, max, include_pad;
  int64_t divisor;
};

int64_t ref_pool_extent(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// torch's max_pool2d / avg_pool2d, element by element.
Vec ref_pool2d(const PoolCase& k, const Vec& x) {
  const int64_t oh = ref_pool_extent(k.h, k.kh, k.sh, k.ph, k.dh, k.ceil_mode);
  const int64_t ow = ref_pool_extent(k.w, k.kw, k.sw, k.pw, k.dw, k.ceil_mode);
  Vec y(static_cast<size_t>(k.n * k.c * oh * ow));
  for (int64_t plane = 0; plane < k.n * k.c; ++plane)
    for (int64_t p = 0; p < oh; ++p)
      for (int64_t q = 0; q < ow; ++q) {
        const int64_t r0 = p * k.sh - k.ph, c0 = q * k.sw - k.pw;
        double result = 0.0;
        if (k.max) {
          result = -INFINITY;
          for (int64_t i = 0; i < k.kh; ++i)
            for (int64_t j = 0; j < k.kw; ++j) {
              const int64_t a = r0 + i * k.dh, b = c0 + j * k.dw;
              if (a >= 0 && a < k.h && b >= 0 && b < k.w)
                result = std::max(result, x[(plane * k.h + a) * k.w + b]);
            }
        } else {
          const int64_t r1 = std::min(r0 + k.kh, k.h + k.ph), c1 = std::min(c0 + k.kw, k.w + k.pw);
          const int64_t padded = (r1 - r0) * (c1 - c0);
          int64_t inside = 0;
          for (int64_t a = std::max<int64_t>(r0, 0); a < std::min(r1, k.h); ++a)
            for (int64_t b = std::max<int64_t>(c0, 0); b < std::min(c1, k.w); ++b, ++inside)
              result += x[(plane * k.h + a) * k.w + b];
          result /= static_cast<double>(k.divisor ? k.divisor : k.include_pad ? padded : inside);
        }
        y[(plane * oh + p) * ow + q] = result;
      }
  return y;
}

// Distinct values at least 0.01 apart in a random order: max pooling has no
// ties for the finite differences to straddle.
Vec spread_values(Rng& rng, size_t n) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(-1.0 + 0.01 * static_cast<double>(i));
  for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(rng.integer(0, static_cast<int64_t>(i) - 1))]);
  return v;
}

TEST_CASE("ops gradcheck: conv2d across strides, paddings, dilations, groups and odd sizes") {
  SKIP_UNLESS_CONVOLUTION();
  Rng rng(90);
  const std::vector<ConvCase> cases = {
      {2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
      {1, 4, 7, 5, 6, 3, 2, 2, 1, 1, 0, 1, 1, 2, false},
      {2, 4, 6, 7, 4, 3, 3, 1, 1, 2, 2, 2, 2, 4, true},   // depthwise, dilated
      {3, 2, 3, 3, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},   // 1x1
      {1, 3, 9, 8, 2, 5, 4, 3, 2, 2, 1, 1, 2, 1, true},
      {2, 2, 4, 4, 4, 4, 4, 1, 1, 0, 0, 1, 1, 2, false},  // kernel = image
      // 16k channels: oneDNN's nChw16c, moved by cpu_layout.h, whole tiles
      // of 16 positions and partial ones (few enough products per output for
      // the forward tolerance: oneDNN sums in its own order).
      {1, 16, 5, 3, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, false},
      {2, 16, 6, 6, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, true},
      {1, 32, 4, 5, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, false},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const ConvCase& k = cases[i];
    std::vector<Input> inputs = {floating({k.n, k.c, k.h, k.w}, rng.values(count_of({k.n, k.c, k.h, k.w}), -1, 1)),
                                 floating({k.o, k.c / k.groups, k.kh, k.kw},
                                          rng.values(count_of({k.o, k.c / k.groups, k.kh, k.kw}), -1, 1))};
    if (k.bias) inputs.push_back(floating({k.o}, rng.values(static_cast<size_t>(k.o), -1, 1)));
    gradcheck(
        "conv2d case " + std::to_string(i), inputs,
        [k](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
          ampx_conv2d_options o = AMPX_CONV2D_OPTIONS_INIT;
          o.stride[0] = k.sh, o.stride[1] = k.sw, o.padding[0] = k.ph, o.padding[1] = k.pw;
          o.dilation[0] = k.dh, o.dilation[1] = k.dw, o.groups = k.groups;
          return ampx_conv2d(t[0], t[1], k.bias ? t[2] : nullptr, &o, y);
        },
        [k](const Inputs& in) { return ref_conv2d(k, in[0], in[1], k.bias ? &in[2] : nullptr); },
        90 + i);
  }
}

TEST_CASE("ops gradcheck: max and average pooling with padding, dilation, ceil mode, divisors") {
  Rng rng(91);
  const std::vector<PoolCase> cases = {
      {2, 2, 6, 5, 2, 2, 2, 2, 0, 0, 1, 1, false, true, true, 0},
      {1, 3, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, true, true, true, 0},
      {1, 2, 9, 8, 3, 2, 1, 2, 1, 1, 2, 1, false, true, true, 0},   // dilated, overlapping
      {2, 2, 6, 5, 2, 2, 2, 2, 0, 0, 1, 1, false, false, true, 0},
      {1, 3, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, true, false, false, 0},
      {1, 2, 7, 6, 3, 2, 2, 1, 1, 1, 1, 1, true, false, true, 0},
      {1, 2, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1, false, false, true, 5},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& k = cases[i];
    const size_t count = count_of({k.n, k.c, k.h, k.w});
    gradcheck(
        std::string(k.max ? "max" : "avg") + "_pool2d case " + std::to_string(i),
        {floating({k.n, k.c, k.h, k.w}, spread_values(rng, count))},
        [k](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
          ampx_pool2d_options o = AMPX_POOL2D_OPTIONS_INIT;
          o.stride[0] = k.sh, o.stride[1] = k.sw, o.padding[0] = k.ph, o.padding[1] = k.pw;
          o.dilation[0] = k.dh, o.dilation[1] = k.dw, o.ceil_mode = k.ceil_mode;
          o.count_include_pad = k.include_pad, o.divisor_override = k.divisor;
          return k.max ? ampx_max_pool2d(t[0], k.kh, k.kw, &o, y)
                       : ampx_avg_pool2d(t[0], k.kh, k.kw, &o, y);
        },
        [k](const Inputs& in) { return ref_pool2d(k, in[0]); }, 100 + i);
  }
  gradcheck(
      "global_avg_pool2d", {floating({2, 3, 3, 5}, rng.values(90, -1, 1))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) { return ampx_global_avg_pool2d(t[0], y); },
      [](const Inputs& in) {
        Vec y(6, 0.0);
        for (size_t i = 0; i < 90; ++i) y[i / 15] += in[0][i] / 15.0;
        return y;
      },
      110);
}

TEST_CASE("ops gradcheck: batch_norm on [N, C, H, W] in training") {
  Rng rng(92);
  const size_t N = 2, C = 3, L = 4 * 3;
  gradcheck(
      "batch_norm 4-D",
      {floating({2, 3, 4, 3}, rng.values(N * C * L, -1, 1)), floating({3}, rng.values(C, 0.5, 1.5)),
       floating({3}, rng.values(C, -1, 1))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* y) {
        return ampx_batch_norm(t[0], t[1], t[2], nullptr, nullptr, 1, 0.1, 1e-5, y);
      },
      [&](const Inputs& in) {
        Vec y(N * C * L);
        for (size_t c = 0; c < C; ++c) {
          double mean = 0.0, var = 0.0;
          for (size_t n = 0; n < N; ++n)
            for (size_t l = 0; l < L; ++l) mean += in[0][(n * C + c) * L + l] / (N * L);
          for (size_t n = 0; n < N; ++n)
            for (size_t l = 0; l < L; ++l) {
              const double d = in[0][(n * C + c) * L + l] - mean;
              var += d * d / (N * L);
            }
          for (size_t n = 0; n < N; ++n)
            for (size_t l = 0; l < L; ++l) {
              const size_t at = (n * C + c) * L + l;
              y[at] = (in[0][at] - mean) / std::sqrt(var + 1e-5) * in[1][c] + in[2][c];
            }
        }
        return y;
      },
      111);
}
