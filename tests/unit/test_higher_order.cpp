// test_higher_order.cpp -- ampx_grad, ampx_backward_ex and the
// differentiable backward formulas (create_graph): second and third
// derivatives of every op against references computed here in double
// precision, Hessian-vector products of a small MLP (also under fp16 and
// bf16 autocast), the scaler's part (a recorded scale_loss, unscale_tensor,
// the gradient-penalty recipe), and the bad inputs of the API.
//
// Method. For an op with inputs x (random, rounded to fp32) the scalar
//   L = sum(op(x) * R)
// with a fixed random R is built with ampx ops. Then, all with ampx_grad:
//   g = dL/dx                       (create_graph: the formulas' values)
//   S = sum_k <g_k, V_k>            (V random)
//   h = dS/dx = H V                 (second order)
//   T = sum_k <h_k, W_k>,  t = dT/dx (third order, where asked)
// The references are central differences of L on the double
// re-implementation of the op: g_i = (L(x + e_i d) - L(x - e_i d)) / 2d;
// h_i = sum over a, b in {+-1} of a b L(x + a d e_i + b d V) / 4d^2; t_i =
// sum over a, b, c of a b c L(x + a d e_i + b d V + c d W) / 8d^3.
//
// Tolerances. In double, the stencils' truncation error is ~d^2 times a
// fourth (fifth) derivative, ~1e-6 with d = 1e-3 (2e-3 for the third
// order), and their rounding ~1e-16 |L| / d^k, below 1e-7. The ampx side
// computes in fp32: each formula is a few dozen roundings of 2^-24 along a
// path, so ~1e-5 relative to the magnitudes summed. 2e-3 relative plus 5e-4
// of the largest element covers both with room, while a wrong or missing
// term of a formula is off by O(1). An op whose second derivative is zero
// (affine, relu away from its kink, amax) must give gradients that record
// nothing (S does not require grad) or exact zeros.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "training_fixture.h"

using ampx_fixture::decode;
using ampx_fixture::encode;
using ampx_fixture::values_of;
using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

using Vec = std::vector<double>;
using Dims = std::vector<int64_t>;

size_t count_of(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return static_cast<size_t>(n);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(gen_);
  }
  // fp32-representable values in [lo, hi).
  Vec values(size_t n, double lo, double hi) {
    Vec v(n);
    for (double& x : v) x = static_cast<float>(uniform(lo, hi));
    return v;
  }
  // Magnitudes in [lo, hi) with random signs.
  Vec signed_away(size_t n, double lo, double hi) {
    Vec v = values(n, lo, hi);
    for (double& x : v)
      if (uniform(0, 1) < 0.5) x = -x;
    return v;
  }

 private:
  std::mt19937_64 gen_;
};

struct In {
  Dims dims;
  Vec values;
  bool diff = true;  // differentiated (requires grad)
  ampx_dtype dtype = AMPX_F32;
};

In floating(Dims dims, Vec values, bool diff = true) {
  In in;
  in.dims = std::move(dims);
  in.values = std::move(values);
  in.diff = diff;
  return in;
}

In integers(Dims dims, Vec values, ampx_dtype dtype = AMPX_I64) {
  In in;
  in.dims = std::move(dims);
  in.values = std::move(values);
  in.diff = false;
  in.dtype = dtype;
  return in;
}

ampx_tensor make_tensor(ampx_context ctx, const In& in) {
  std::vector<unsigned char> bytes;
  if (in.dtype == AMPX_I32 || in.dtype == AMPX_I64) {
    const size_t size = ampx_dtype_size(in.dtype);
    bytes.resize(in.values.size() * size);
    for (size_t i = 0; i < in.values.size(); ++i) {
      const auto v64 = static_cast<int64_t>(in.values[i]);
      const auto v32 = static_cast<int32_t>(v64);
      std::memcpy(bytes.data() + i * size,
                  in.dtype == AMPX_I32 ? static_cast<const void*>(&v32)
                                       : static_cast<const void*>(&v64),
                  size);
    }
  } else {
    bytes = encode(in.dtype, in.values);
  }
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, in.dtype, static_cast<int32_t>(in.dims.size()),
                                        in.dims.data(), bytes.data(), bytes.size(), &t) == AMPX_OK,
                  last_error());
  if (in.diff) REQUIRE_MESSAGE(ampx_tensor_set_requires_grad(t, 1) == AMPX_OK, last_error());
  return t;
}

double max_abs(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

bool close(double have, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(have);
  return std::fabs(have - want) <= rtol * std::fabs(want) + atol;
}

bool requires_grad(ampx_tensor t) {
  int32_t r = 0;
  REQUIRE(ampx_tensor_requires_grad(t, &r) == AMPX_OK);
  return r != 0;
}

// sum(a * b) as a recorded scalar (a scope owns it).
ampx_tensor dot(ampx_tensor a, ampx_tensor b) {
  ampx_tensor product = nullptr, total = nullptr;
  REQUIRE_MESSAGE(ampx_mul(a, b, &product) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_sum(product, &total) == AMPX_OK, last_error());
  return total;
}

ampx_tensor add(ampx_tensor a, ampx_tensor b) {
  ampx_tensor out = nullptr;
  REQUIRE_MESSAGE(ampx_add(a, b, &out) == AMPX_OK, last_error());
  return out;
}

// grads of `output` with respect to `inputs` (NULL entries where unused).
std::vector<ampx_tensor> grads_of(ampx_tensor output, const std::vector<ampx_tensor>& inputs,
                                  bool create_graph) {
  std::vector<ampx_tensor> grads(inputs.size(), nullptr);
  ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
  o.create_graph = create_graph ? 1 : 0;
  o.allow_unused = 1;
  REQUIRE_MESSAGE(ampx_grad(&output, 1, nullptr, inputs.data(), inputs.size(), &o, grads.data()) ==
                      AMPX_OK,
                  last_error());
  return grads;
}

using Inputs = std::vector<Vec>;
using Reference = std::function<Vec(const Inputs&)>;
using Op = std::function<ampx_status(const std::vector<ampx_tensor>&, ampx_tensor*)>;

struct Orders {
  bool third = false;
  double rtol = 2e-3;
  double atol_of_max = 5e-4;
  ampx_dtype autocast = AMPX_F32;  // F16/BF16: the forward runs under autocast
};

double weighted(const Vec& out, const Vec& r) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * r[i];
  return s;
}

// x + sum of scale_j * direction_j over the differentiated inputs.
Inputs moved(const Inputs& x, const std::vector<std::pair<double, const Inputs*>>& steps) {
  Inputs out = x;
  for (const auto& [scale, dir] : steps)
    for (size_t k = 0; k < out.size(); ++k)
      for (size_t i = 0; i < (*dir)[k].size(); ++i) out[k][i] += scale * (*dir)[k][i];
  return out;
}

void compare(const std::string& what, const std::vector<size_t>& diff,
             const std::vector<ampx_tensor>& have, const Inputs& want, const Orders& o) {
  double scale = 0.0;
  for (size_t k : diff) scale = std::max(scale, max_abs(want[k]));
  const double atol = o.atol_of_max * scale + 1e-6;
  for (size_t j = 0; j < diff.size(); ++j) {
    const Vec& w = want[diff[j]];
    const Vec h = have[j] ? values_of(have[j]) : Vec(w.size(), 0.0);
    REQUIRE(h.size() == w.size());
    for (size_t i = 0; i < w.size(); ++i)
      CHECK_MESSAGE(close(h[i], w[i], o.rtol, atol), what, ": input ", diff[j], " element ", i,
                    ": ampx ", h[i], ", reference ", w[i]);
  }
}

// The check of the header comment, for `op` on `inputs` against `ref`.
void hocheck(const std::string& what, const std::vector<In>& inputs, const Op& op,
             const Reference& ref, uint64_t seed, Orders o = Orders()) {
  INFO(what);
  Ctx ctx;
  std::vector<Tensor> owned(inputs.size());
  std::vector<ampx_tensor> handles, diff_handles;
  std::vector<size_t> diff;
  Inputs x;
  for (size_t k = 0; k < inputs.size(); ++k) {
    owned[k].handle = make_tensor(ctx, inputs[k]);
    handles.push_back(owned[k].handle);
    x.push_back(inputs[k].values);
    if (inputs[k].diff) {
      diff.push_back(k);
      diff_handles.push_back(owned[k].handle);
    }
  }
  Rng rng(seed);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor out = nullptr;
  ampx_autocast policy = nullptr;
  if (o.autocast != AMPX_F32) {
    ampx_autocast_options a = AMPX_AUTOCAST_OPTIONS_INIT;
    a.dtype = o.autocast;
    REQUIRE(ampx_autocast_create(ctx, &a, &policy) == AMPX_OK);
    REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
  }
  REQUIRE_MESSAGE(op(handles, &out) == AMPX_OK, last_error());
  if (policy) {
    REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
    ampx_autocast_release(policy);
  }
  const Vec y = ref(x);
  REQUIRE(values_of(out).size() == y.size());
  const Vec r = rng.values(y.size(), -1, 1);
  Tensor r_tensor(make_tensor(ctx, floating(ampx_fixture::dims_of(out), r, false)));
  const ampx_tensor loss = dot(out, r_tensor);
  const auto L = [&](const Inputs& at) { return weighted(ref(at), r); };

  // Directions V and W over the differentiated inputs (zero elsewhere).
  Inputs v(x.size()), w(x.size());
  for (size_t k : diff) {
    v[k] = rng.values(x[k].size(), -1, 1);
    w[k] = rng.values(x[k].size(), -1, 1);
  }
  const auto unit = [&](size_t k, size_t i) {
    Inputs e(x.size());
    for (size_t m : diff) e[m].assign(x[m].size(), 0.0);
    e[k][i] = 1.0;
    return e;
  };

  // First order, through the formulas.
  const std::vector<ampx_tensor> g = grads_of(loss, diff_handles, true);
  Inputs d1 = x;
  for (size_t k : diff) d1[k] = ampx_fixture::central_gradient(x, k, L, 1e-4);
  compare("first order", diff, g, d1, o);

  // Second order.
  Inputs d2 = x;
  const double h2 = 1e-3;
  for (size_t k : diff)
    for (size_t i = 0; i < x[k].size(); ++i) {
      const Inputs e = unit(k, i);
      double sum = 0.0;
      for (int a : {1, -1})
        for (int b : {1, -1}) sum += a * b * L(moved(x, {{a * h2, &e}, {b * h2, &v}}));
      d2[k][i] = sum / (4 * h2 * h2);
    }
  ampx_tensor s = nullptr;
  for (size_t j = 0; j < diff.size(); ++j) {
    if (!g[j]) continue;
    Tensor vj(make_tensor(ctx, floating(ampx_fixture::dims_of(g[j]), v[diff[j]], false)));
    const ampx_tensor term = dot(g[j], vj);
    s = s ? add(s, term) : term;
  }
  if (!s || !requires_grad(s)) {
    // Nothing recorded: the op is linear in every input (its gradient is a
    // constant), so the reference's second derivative must vanish.
    compare("second order (none recorded)", diff, std::vector<ampx_tensor>(diff.size(), nullptr),
            d2, o);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    return;
  }
  const std::vector<ampx_tensor> h = grads_of(s, diff_handles, o.third);
  compare("second order", diff, h, d2, o);

  if (o.third) {
    Inputs d3 = x;
    const double h3 = 2e-3;
    for (size_t k : diff)
      for (size_t i = 0; i < x[k].size(); ++i) {
        const Inputs e = unit(k, i);
        double sum = 0.0;
        for (int a : {1, -1})
          for (int b : {1, -1})
            for (int c : {1, -1})
              sum += a * b * c * L(moved(x, {{a * h3, &e}, {b * h3, &v}, {c * h3, &w}}));
        d3[k][i] = sum / (8 * h3 * h3 * h3);
      }
    ampx_tensor t = nullptr;
    for (size_t j = 0; j < diff.size(); ++j) {
      if (!h[j]) continue;
      Tensor wj(make_tensor(ctx, floating(ampx_fixture::dims_of(h[j]), w[diff[j]], false)));
      const ampx_tensor term = dot(h[j], wj);
      t = t ? add(t, term) : term;
    }
    if (!t || !requires_grad(t)) {
      compare("third order (none recorded)", diff,
              std::vector<ampx_tensor>(diff.size(), nullptr), d3, o);
    } else {
      compare("third order", diff, grads_of(t, diff_handles, false), d3, o);
    }
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

Orders third_order() {
  Orders o;
  o.third = true;
  return o;
}

// ---- double references ------------------------------------------------------

Vec map(const Vec& x, const std::function<double(double)>& f) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = f(x[i]);
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

// a op b with NumPy broadcasting of b's (right-aligned) shape over a's.
Vec broadcast_binary(char op, const Vec& a, const Dims& ad, const Vec& b, const Dims& bd) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    // b's flat index: a's coordinates, aligned at the right, 0 where b has 1.
    size_t rem = i, bi = 0, stride = 1;
    for (size_t back = 0; back < ad.size(); ++back) {
      const size_t dim = ad.size() - 1 - back;
      const auto extent = static_cast<size_t>(ad[dim]);
      const size_t coord = rem % extent;
      rem /= extent;
      if (back < bd.size()) {
        const auto b_extent = static_cast<size_t>(bd[bd.size() - 1 - back]);
        if (b_extent != 1) bi += coord * stride;
        stride *= b_extent;
      }
    }
    const double y = b[bi];
    out[i] = op == '+' ? a[i] + y : op == '-' ? a[i] - y : op == '*' ? a[i] * y : a[i] / y;
  }
  return out;
}

// Rows of a [rows, cols] matrix.
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

// [batch] x [m, k] x [k, n].
Vec ref_matmul(const Vec& a, const Vec& b, size_t batch, size_t m, size_t k, size_t n,
               bool b_shared = false) {
  Vec out(batch * m * n, 0.0);
  for (size_t p = 0; p < batch; ++p)
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (size_t q = 0; q < k; ++q)
          s += a[(p * m + i) * k + q] * b[((b_shared ? 0 : p) * k + q) * n + j];
        out[(p * m + i) * n + j] = s;
      }
  return out;
}

Vec squared(const Vec& y) { return map(y, [](double v) { return v * v; }); }

ampx_context context_of(ampx_tensor t) {
  ampx_context ctx = nullptr;
  REQUIRE(ampx_tensor_context(t, &ctx) == AMPX_OK);
  return ctx;
}

}  // namespace

// ---- element-wise ------------------------------------------------------------

TEST_CASE("higher order: add, sub, mul and div with broadcasting, to third order") {
  Rng rng(1);
  struct Case {
    const char* name;
    char op;
    ampx_status (*fn)(ampx_tensor, ampx_tensor, ampx_tensor*);
  };
  const Case cases[] = {{"add", '+', ampx_add},
                        {"sub", '-', ampx_sub},
                        {"mul", '*', ampx_mul},
                        {"div", '/', ampx_div}};
  for (const Case& c : cases) {
    for (const Dims& bd : {Dims{3, 4}, Dims{4}, Dims{3, 1}}) {
      const Dims ad = {3, 4};
      const Vec a = rng.values(12, -1.5, 1.5);
      const Vec b = c.op == '/' ? rng.signed_away(count_of(bd), 0.6, 1.5)
                                : rng.values(count_of(bd), -1.5, 1.5);
      // (a op b) * a makes add and sub curve too.
      hocheck(
          std::string(c.name) + " b" + std::to_string(bd.size()),
          {floating(ad, a), floating(bd, b)},
          [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
            ampx_tensor y = nullptr;
            ampx_status st = c.fn(t[0], t[1], &y);
            return st != AMPX_OK ? st : ampx_mul(y, t[0], out);
          },
          [&](const Inputs& v) {
            const Vec y = broadcast_binary(c.op, v[0], ad, v[1], bd);
            Vec out(y.size());
            for (size_t i = 0; i < y.size(); ++i) out[i] = y[i] * v[0][i];
            return out;
          },
          7, third_order());
    }
  }
}

TEST_CASE("higher order: affine and relu have zero second derivatives") {
  Rng rng(2);
  const Dims d = {2, 5};
  hocheck(
      "affine", {floating(d, rng.values(10, -2, 2))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        return ampx_affine(t[0], -1.5, 0.25, out);
      },
      [](const Inputs& v) { return map(v[0], [](double x) { return -1.5 * x + 0.25; }); }, 3);
  // Away from the kink by more than the stencils' steps.
  hocheck(
      "relu", {floating(d, rng.signed_away(10, 0.1, 2))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) { return ampx_relu(t[0], out); },
      [](const Inputs& v) { return map(v[0], [](double x) { return x > 0 ? x : 0.0; }); }, 4);
  // relu's derivative carries the second derivative of what follows: relu(x)^2.
  hocheck(
      "relu squared", {floating(d, rng.signed_away(10, 0.1, 2))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr;
        ampx_status st = ampx_relu(t[0], &y);
        return st != AMPX_OK ? st : ampx_mul(y, y, out);
      },
      [](const Inputs& v) { return map(v[0], [](double x) { return x > 0 ? x * x : 0.0; }); }, 5,
      third_order());
}

TEST_CASE("higher order: activations and element-wise functions, to third order") {
  struct Case {
    const char* name;
    ampx_status (*fn)(ampx_tensor, ampx_tensor*);
    std::function<double(double)> ref;
    double lo, hi;  // the inputs' range
  };
  const Case cases[] = {
      {"gelu", ampx_gelu, gelu, -3, 3},
      {"gelu_tanh", ampx_gelu_tanh, gelu_tanh, -3, 3},
      {"silu", ampx_silu, [](double x) { return x * sigmoid(x); }, -3, 3},
      {"sigmoid", ampx_sigmoid, sigmoid, -3, 3},
      {"tanh", ampx_tanh, [](double x) { return std::tanh(x); }, -2, 2},
      {"exp", ampx_exp, [](double x) { return std::exp(x); }, -1.5, 1.5},
      {"log", ampx_log, [](double x) { return std::log(x); }, 0.5, 3},
      {"sqrt", ampx_sqrt, [](double x) { return std::sqrt(x); }, 0.5, 3},
      {"rsqrt", ampx_rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.5, 3},
  };
  Rng rng(3);
  for (const Case& c : cases) {
    const Dims d = {3, 4};
    hocheck(
        c.name, {floating(d, rng.values(12, c.lo, c.hi))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) { return c.fn(t[0], out); },
        [&](const Inputs& v) { return map(v[0], c.ref); }, 11, third_order());
  }
}

TEST_CASE("higher order: pow with number exponents") {
  Rng rng(4);
  for (const double p : {2.0, 3.0, 0.5, -1.5, 1.0}) {
    const Dims d = {2, 3};
    hocheck(
        "pow " + std::to_string(p), {floating(d, rng.values(6, 0.5, 2))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) { return ampx_pow(t[0], p, out); },
        [&](const Inputs& v) { return map(v[0], [&](double x) { return std::pow(x, p); }); }, 12,
        third_order());
  }
}

// ---- the API: ampx_grad and ampx_backward_ex ----------------------------------

namespace {

ampx_tensor grad_handle(ampx_tensor t) {
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(t, &g) == AMPX_OK);
  return g;
}

ampx_tensor tanh_of(ampx_tensor x) {
  ampx_tensor y = nullptr;
  REQUIRE_MESSAGE(ampx_tanh(x, &y) == AMPX_OK, last_error());
  return y;
}

ampx_tensor sum_of(ampx_tensor x) {
  ampx_tensor y = nullptr;
  REQUIRE_MESSAGE(ampx_sum(x, &y) == AMPX_OK, last_error());
  return y;
}

const Vec kX = {-1.0, -0.25, 0.5, 1.5};

}  // namespace

TEST_CASE("ampx_grad: torch.autograd.grad's semantics") {
  Ctx ctx;
  Tensor x(make_tensor(ctx, floating({4}, kX)));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  const ampx_tensor y = tanh_of(x);
  const ampx_tensor loss = sum_of(y);
  SUBCASE("first order: nothing accumulated into .grad, and the result is the scope's") {
    ampx_tensor g = nullptr;
    REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, &x.handle, 1, nullptr, &g) == AMPX_OK,
                    last_error());
    const Vec gv = values_of(g);
    for (size_t i = 0; i < 4; ++i) {
      const double t = std::tanh(kX[i]);
      CHECK(std::fabs(gv[i] - (1 - t * t)) < 1e-6);
    }
    CHECK(grad_handle(x) == nullptr);
    CHECK(!requires_grad(g));  // not recorded without create_graph
    // Without retain_graph the records it ran are freed: a second pass over
    // them is ORDER, names retain_graph, and changes nothing.
    ampx_tensor again = nullptr;
    CHECK_FAILS_WITH(ampx_grad(&loss, 1, nullptr, &x.handle, 1, nullptr, &again),
                     AMPX_ERR_ORDER, "retain_graph");
    CHECK(again == nullptr);
    CHECK_FAILS_WITH(ampx_backward(loss, nullptr), AMPX_ERR_ORDER, "retain_graph");
    CHECK(grad_handle(x) == nullptr);
  }
  SUBCASE("retain_graph keeps the tape for another backward") {
    ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
    o.retain_graph = 1;
    ampx_tensor g1 = nullptr, g2 = nullptr;
    REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &g1) == AMPX_OK, last_error());
    REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &g2) == AMPX_OK, last_error());
    CHECK(values_of(g1) == values_of(g2));
    CHECK(g1 != g2);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(values_of(grad_handle(x)) == values_of(g1));
  }
  SUBCASE("create_graph: the gradient is recorded, retain_graph defaults to it") {
    ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
    o.create_graph = 1;
    ampx_tensor g = nullptr;
    REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &g) == AMPX_OK, last_error());
    CHECK(requires_grad(g));
    // d/dx sum(g) = sum over i of d(1 - tanh^2)/dx = -2 t (1 - t^2).
    const ampx_tensor gs = sum_of(g);
    ampx_tensor h = nullptr;
    REQUIRE_MESSAGE(ampx_grad(&gs, 1, nullptr, &x.handle, 1, nullptr, &h) == AMPX_OK,
                    last_error());
    const Vec hv = values_of(h);
    for (size_t i = 0; i < 4; ++i) {
      const double t = std::tanh(kX[i]);
      CHECK(std::fabs(hv[i] - (-2 * t * (1 - t * t))) < 1e-6);
    }
    // The first graph was retained: the loss can still be backpropagated.
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(grad_handle(x) != nullptr);
  }
  SUBCASE("an intermediate input gets the gradient flowing into it") {
    ampx_tensor g[2] = {nullptr, nullptr};
    const ampx_tensor inputs[2] = {y, x};
    REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, inputs, 2, nullptr, g) == AMPX_OK, last_error());
    for (double v : values_of(g[0])) CHECK(v == 1.0);
    const Vec gx = values_of(g[1]);
    for (size_t i = 0; i < 4; ++i) {
      const double t = std::tanh(kX[i]);
      CHECK(std::fabs(gx[i] - (1 - t * t)) < 1e-6);
    }
  }
  SUBCASE("several outputs and grad_outputs: the sum of the vector-Jacobian products") {
    const Vec seed = {1.0, -2.0, 0.5, 3.0};
    Tensor gy(make_tensor(ctx, floating({4}, seed, false)));
    const ampx_tensor outputs[2] = {y, loss};
    const ampx_tensor seeds[2] = {gy, nullptr};
    ampx_tensor g = nullptr;
    REQUIRE_MESSAGE(ampx_grad(outputs, 2, seeds, &x.handle, 1, nullptr, &g) == AMPX_OK,
                    last_error());
    const Vec gv = values_of(g);
    for (size_t i = 0; i < 4; ++i) {
      const double t = std::tanh(kX[i]);
      CHECK(std::fabs(gv[i] - (seed[i] + 1) * (1 - t * t)) < 1e-6);
    }
    CHECK(values_of(gy) == seed);  // the given seed is not written
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("ampx_grad: bad inputs are clear statuses that change nothing") {
  Ctx ctx;
  Tensor x(make_tensor(ctx, floating({4}, kX)));
  Tensor unused(make_tensor(ctx, floating({2}, {1.0, 2.0})));
  Tensor constant(make_tensor(ctx, floating({4}, kX, false)));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  const ampx_tensor y = tanh_of(x);
  const ampx_tensor loss = sum_of(y);
  ampx_tensor g[2] = {nullptr, nullptr};
  const ampx_tensor both[2] = {x, unused};
  CHECK_FAILS_WITH(ampx_grad(&loss, 1, nullptr, both, 2, nullptr, g), AMPX_ERR_INVALID_ARGUMENT,
                   "inputs[1]");
  CHECK(contains(last_error(), "allow_unused"));
  CHECK((g[0] == nullptr && g[1] == nullptr));
  // A non-scalar output needs grad_outputs.
  CHECK_FAILS_WITH(ampx_grad(&y, 1, nullptr, &x.handle, 1, nullptr, g), AMPX_ERR_SHAPE,
                   "grad_outputs");
  // grad_outputs of another shape or dtype.
  Tensor wrong_shape(make_tensor(ctx, floating({2, 2}, kX, false)));
  CHECK_FAILS_WITH(ampx_grad(&y, 1, &wrong_shape.handle, &x.handle, 1, nullptr, g),
                   AMPX_ERR_SHAPE, "grad_outputs[0]");
  In half = floating({4}, kX, false);
  half.dtype = AMPX_F16;
  Tensor wrong_dtype(make_tensor(ctx, half));
  CHECK_FAILS_WITH(ampx_grad(&y, 1, &wrong_dtype.handle, &x.handle, 1, nullptr, g),
                   AMPX_ERR_DTYPE, "grad_outputs[0]");
  // An input or output that does not require grad; empty lists; NULLs.
  CHECK_FAILS_WITH(ampx_grad(&loss, 1, nullptr, &constant.handle, 1, nullptr, g),
                   AMPX_ERR_INVALID_ARGUMENT, "inputs[0]");
  CHECK_FAILS_WITH(ampx_grad(&constant.handle, 1, nullptr, &x.handle, 1, nullptr, g),
                   AMPX_ERR_INVALID_ARGUMENT, "outputs[0]");
  CHECK_FAILS_WITH(ampx_grad(&loss, 1, nullptr, &x.handle, 0, nullptr, g),
                   AMPX_ERR_INVALID_ARGUMENT, "input_count");
  CHECK_FAILS_WITH(ampx_grad(&loss, 0, nullptr, &x.handle, 1, nullptr, g),
                   AMPX_ERR_INVALID_ARGUMENT, "output_count");
  CHECK_FAILS_WITH(ampx_grad(&loss, 1, nullptr, &x.handle, 1, nullptr, nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "grads");
  CHECK_FAILS_WITH(ampx_grad(nullptr, 1, nullptr, &x.handle, 1, nullptr, g),
                   AMPX_ERR_INVALID_ARGUMENT, "outputs");
  CHECK((g[0] == nullptr && g[1] == nullptr));
  // Nothing was freed: allow_unused gives the unused input NULL.
  ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
  o.allow_unused = 1;
  REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, both, 2, &o, g) == AMPX_OK, last_error());
  CHECK(g[0] != nullptr);
  CHECK(g[1] == nullptr);
  CHECK(grad_handle(x) == nullptr);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("ampx_grad: a saved tensor written in place before the second backward") {
  Ctx ctx;
  Tensor x(make_tensor(ctx, floating({4}, kX)));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  const ampx_tensor loss = sum_of(tanh_of(x));
  ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
  o.retain_graph = 1;
  ampx_tensor g = nullptr;
  REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &g) == AMPX_OK, last_error());
  REQUIRE(ampx_tensor_fill(x, 0.5) == AMPX_OK);
  ampx_tensor again = nullptr;
  CHECK_FAILS_WITH(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &again), AMPX_ERR_ORDER,
                   "written in place");
  CHECK(again == nullptr);
  ampx_backward_options b = AMPX_BACKWARD_OPTIONS_INIT;
  CHECK_FAILS_WITH(ampx_backward_ex(loss, nullptr, &b), AMPX_ERR_ORDER, "written in place");
  CHECK(grad_handle(x) == nullptr);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("ampx_backward_ex: retain_graph accumulates, and only the final pass notifies") {
  Ctx ctx;
  Tensor x(make_tensor(ctx, floating({4}, kX)));
  int notified = 0;
  REQUIRE(ampx_set_grad_ready_hook(
              ctx,
              [](void* user, ampx_tensor) {
                ++*static_cast<int*>(user);
                return AMPX_OK;
              },
              &notified, nullptr) == AMPX_OK);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  const ampx_tensor loss = sum_of(tanh_of(x));
  ampx_backward_options keep = AMPX_BACKWARD_OPTIONS_INIT;
  keep.retain_graph = 1;
  REQUIRE_MESSAGE(ampx_backward_ex(loss, nullptr, &keep) == AMPX_OK, last_error());
  CHECK(notified == 0);
  const Vec once = values_of(grad_handle(x));
  REQUIRE_MESSAGE(ampx_backward_ex(loss, nullptr, nullptr) == AMPX_OK, last_error());
  CHECK(notified == 1);
  const Vec twice = values_of(grad_handle(x));
  for (size_t i = 0; i < 4; ++i) CHECK(twice[i] == 2 * once[i]);
  // The default options free the tape as ampx_backward does; the new entry
  // point says ORDER and names retain_graph.
  CHECK_FAILS_WITH(ampx_backward_ex(loss, nullptr, nullptr), AMPX_ERR_ORDER, "retain_graph");
  CHECK(values_of(grad_handle(x)) == twice);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  REQUIRE(ampx_set_grad_ready_hook(ctx, nullptr, nullptr, nullptr) == AMPX_OK);
}

TEST_CASE("ampx_backward_ex: create_graph makes each leaf's gradient differentiable") {
  Ctx ctx;
  Tensor x(make_tensor(ctx, floating({4}, kX)));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  const ampx_tensor loss = sum_of(tanh_of(x));
  ampx_backward_options o = AMPX_BACKWARD_OPTIONS_INIT;
  o.create_graph = 1;
  REQUIRE_MESSAGE(ampx_backward_ex(loss, nullptr, &o) == AMPX_OK, last_error());
  const ampx_tensor gx = grad_handle(x);
  REQUIRE(gx != nullptr);
  CHECK(requires_grad(gx));
  const ampx_tensor gs = sum_of(gx);
  ampx_tensor h = nullptr;
  REQUIRE_MESSAGE(ampx_grad(&gs, 1, nullptr, &x.handle, 1, nullptr, &h) == AMPX_OK, last_error());
  const Vec hv = values_of(h);
  for (size_t i = 0; i < 4; ++i) {
    const double t = std::tanh(kX[i]);
    CHECK(std::fabs(hv[i] - (-2 * t * (1 - t * t))) < 1e-6);
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

namespace {

ampx_status tanh_segment(void*, const ampx_tensor* in, size_t, ampx_tensor* out, size_t) {
  return ampx_tanh(in[0], &out[0]);
}

}  // namespace

TEST_CASE("create_graph through a checkpointed segment is NOT_SUPPORTED, changing nothing") {
  Ctx ctx;
  Tensor x(make_tensor(ctx, floating({4}, kX)));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_segment segment = AMPX_SEGMENT_INIT;
  segment.fn = tanh_segment;
  ampx_tensor y = nullptr;
  REQUIRE(ampx_checkpoint_segment(ctx, &segment, &x.handle, 1, &y, 1) == AMPX_OK);
  const ampx_tensor loss = sum_of(y);
  ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
  o.create_graph = 1;
  ampx_tensor g = nullptr;
  CHECK_FAILS_WITH(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &g), AMPX_ERR_NOT_SUPPORTED,
                   "checkpoint");
  CHECK_FAILS_WITH(ampx_grad(&loss, 1, nullptr, &x.handle, 1, nullptr, &g),
                   AMPX_ERR_NOT_SUPPORTED, "checkpoint");
  ampx_backward_options b = AMPX_BACKWARD_OPTIONS_INIT;
  b.create_graph = 1;
  CHECK_FAILS_WITH(ampx_backward_ex(loss, nullptr, &b), AMPX_ERR_NOT_SUPPORTED, "checkpoint");
  CHECK(g == nullptr);
  CHECK(grad_handle(x) == nullptr);
  // Nothing changed: the plain backward runs the recompute.
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  const Vec gx = values_of(grad_handle(x));
  for (size_t i = 0; i < 4; ++i) {
    const double t = std::tanh(kX[i]);
    CHECK(std::fabs(gx[i] - (1 - t * t)) < 1e-6);
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

// ---- reductions, softmax, losses ---------------------------------------------------

namespace {

// y -> y * y, after an op (y by reference: the op's call, an argument
// beside it, writes it first).
ampx_status then_square(ampx_status st, const ampx_tensor& y, ampx_tensor* out) {
  return st != AMPX_OK ? st : ampx_mul(y, y, out);
}

// Sums of x [a, b, c] over the dimensions in `mask` (bit k: dimension k),
// keeping every dimension (extent 1 where summed), divided by the count
// when `mean`.
Vec ref_reduce(const Vec& x, const Dims& d, unsigned mask, bool mean, bool max = false) {
  Dims out_d = d;
  for (size_t k = 0; k < d.size(); ++k)
    if (mask & (1u << k)) out_d[k] = 1;
  Vec out(count_of(out_d), max ? -INFINITY : 0.0);
  double count = 1;
  for (size_t k = 0; k < d.size(); ++k)
    if (mask & (1u << k)) count *= static_cast<double>(d[k]);
  for (size_t i = 0; i < x.size(); ++i) {
    size_t rem = i, o = 0, stride = 1;
    for (size_t back = 0; back < d.size(); ++back) {
      const size_t k = d.size() - 1 - back;
      const auto coord = static_cast<size_t>(rem % static_cast<size_t>(d[k]));
      rem /= static_cast<size_t>(d[k]);
      if (!(mask & (1u << k))) o += coord * stride;
      stride *= static_cast<size_t>(out_d[k]);
    }
    out[o] = max ? std::max(out[o], x[i]) : out[o] + x[i];
  }
  if (mean)
    for (double& v : out) v /= count;
  return out;
}

}  // namespace

TEST_CASE("higher order: sum, mean, sum/mean over dimensions, amax") {
  Rng rng(20);
  const Dims d = {2, 3, 4};
  const Vec x = rng.values(24, -1.5, 1.5);
  hocheck(
      "sum squared", {floating(d, x)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr;
        return then_square(ampx_sum(t[0], &y), y, out);
      },
      [&](const Inputs& v) { return squared(ref_reduce(v[0], d, 7, false)); }, 21);
  hocheck(
      "mean squared", {floating(d, x)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr;
        return then_square(ampx_mean(t[0], &y), y, out);
      },
      [&](const Inputs& v) { return squared(ref_reduce(v[0], d, 7, true)); }, 22);
  for (const bool mean : {false, true}) {
    hocheck(
        mean ? "mean_dims (0, 2) squared" : "sum_dims (0, 2) squared", {floating(d, x)},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          const int32_t dims[2] = {0, -1};
          ampx_tensor y = nullptr;
          return then_square(mean ? ampx_mean_dims(t[0], dims, 2, 0, &y)
                                  : ampx_sum_dims(t[0], dims, 2, 0, &y),
                             y, out);
        },
        [&](const Inputs& v) { return squared(ref_reduce(v[0], d, 5, mean)); }, 23, third_order());
  }
  // amax: the gradient goes to the maximum (distinct values), whose second
  // derivative through a square is 2 at the maximum.
  hocheck(
      "amax over 1 squared", {floating(d, rng.signed_away(24, 0.1, 2))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        const int32_t dim = 1;
        ampx_tensor y = nullptr;
        return then_square(ampx_amax(t[0], &dim, 1, 1, &y), y, out);
      },
      [&](const Inputs& v) { return squared(ref_reduce(v[0], d, 2, false, true)); }, 24);
}

TEST_CASE("higher order: softmax and log_softmax over any dimension, to third order") {
  Rng rng(30);
  const Dims d = {3, 5};
  for (const bool log : {false, true}) {
    hocheck(
        log ? "log_softmax" : "softmax", {floating(d, rng.values(15, -2, 2))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          return log ? ampx_log_softmax(t[0], out) : ampx_softmax(t[0], out);
        },
        [&](const Inputs& v) { return ref_softmax(v[0], 5, log); }, 31, third_order());
    hocheck(
        log ? "log_softmax over dim 0" : "softmax over dim 0",
        {floating(d, rng.values(15, -2, 2))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          return log ? ampx_log_softmax_dim(t[0], 0, out) : ampx_softmax_dim(t[0], 0, out);
        },
        [&](const Inputs& v) {
          Vec xt(15);  // transposed to rows of 3
          for (size_t i = 0; i < 3; ++i)
            for (size_t j = 0; j < 5; ++j) xt[j * 3 + i] = v[0][i * 5 + j];
          const Vec yt = ref_softmax(xt, 3, log);
          Vec y(15);
          for (size_t i = 0; i < 3; ++i)
            for (size_t j = 0; j < 5; ++j) y[i * 5 + j] = yt[j * 3 + i];
          return y;
        },
        32);
  }
}

TEST_CASE("higher order: cross_entropy (plain, weighted, smoothed, ignored), mse, bce") {
  Rng rng(40);
  const size_t rows = 4, cols = 5;
  const Vec labels = {2, 0, 4, 1};
  const Vec weights = {0.5, 1.5, 1.0, 2.0, 0.75};
  struct Case {
    const char* name;
    ampx_reduction reduction;
    int64_t ignore;
    bool weighted;
    double smoothing;
  };
  const Case cases[] = {{"mean", AMPX_REDUCTION_MEAN, -100, false, 0.0},
                        {"sum", AMPX_REDUCTION_SUM, -100, false, 0.0},
                        {"none", AMPX_REDUCTION_NONE, -100, false, 0.0},
                        {"mean ignoring label 0", AMPX_REDUCTION_MEAN, 0, false, 0.0},
                        {"weighted smoothed mean", AMPX_REDUCTION_MEAN, -100, true, 0.2},
                        {"smoothed none", AMPX_REDUCTION_NONE, 4, false, 0.1}};
  for (const Case& c : cases) {
    std::vector<In> inputs = {floating({4, 5}, rng.values(20, -2, 2)), integers({4}, labels)};
    if (c.weighted) inputs.push_back(floating({5}, weights, false));
    hocheck(
        std::string("cross_entropy ") + c.name, inputs,
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          ampx_cross_entropy_options o = AMPX_CROSS_ENTROPY_OPTIONS_INIT;
          o.reduction = c.reduction;
          o.ignore_index = c.ignore;
          o.label_smoothing = c.smoothing;
          return ampx_cross_entropy_ex(t[0], t[1], c.weighted ? t[2] : nullptr, &o, out);
        },
        [&](const Inputs& v) {
          const Vec logp = ref_softmax(v[0], cols, true);
          Vec losses(rows, 0.0);
          double total = 0.0, denominator = 0.0;
          for (size_t r = 0; r < rows; ++r) {
            const auto y = static_cast<int64_t>(labels[r]);
            if (y == c.ignore) continue;
            const double wy = c.weighted ? weights[static_cast<size_t>(y)] : 1.0;
            double loss = 0.0;
            for (size_t j = 0; j < cols; ++j) {
              const double wj = c.weighted ? weights[j] : 1.0;
              const double q = (static_cast<int64_t>(j) == y ? (1 - c.smoothing) * wy : 0.0) +
                               c.smoothing / cols * wj;
              loss -= q * logp[r * cols + j];
            }
            losses[r] = loss;
            total += loss;
            denominator += wy;
          }
          if (c.reduction == AMPX_REDUCTION_NONE) return losses;
          return Vec{c.reduction == AMPX_REDUCTION_MEAN ? total / denominator : total};
        },
        41, third_order());
  }
  for (const ampx_reduction r : {AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM, AMPX_REDUCTION_NONE}) {
    const Dims d = {2, 3};
    hocheck(
        "mse_loss " + std::to_string(static_cast<int>(r)),
        {floating(d, rng.values(6, -2, 2)), floating(d, rng.values(6, -2, 2))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          ampx_tensor y = nullptr;
          return then_square(ampx_mse_loss(t[0], t[1], r, &y), y, out);
        },
        [&](const Inputs& v) {
          Vec e(6);
          double s = 0.0;
          for (size_t i = 0; i < 6; ++i) s += e[i] = (v[0][i] - v[1][i]) * (v[0][i] - v[1][i]);
          if (r == AMPX_REDUCTION_NONE) return squared(e);
          return squared(Vec{r == AMPX_REDUCTION_MEAN ? s / 6 : s});
        },
        42);
    hocheck(
        "bce_with_logits " + std::to_string(static_cast<int>(r)),
        {floating(d, rng.values(6, -2, 2)), floating(d, rng.values(6, 0, 1))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          return ampx_bce_with_logits(t[0], t[1], r, out);
        },
        [&](const Inputs& v) {
          Vec e(6);
          double s = 0.0;
          for (size_t i = 0; i < 6; ++i) {
            const double x = v[0][i], tt = v[1][i];
            s += e[i] = -tt * std::log(sigmoid(x)) - (1 - tt) * std::log(sigmoid(-x));
          }
          if (r == AMPX_REDUCTION_NONE) return e;
          return Vec{r == AMPX_REDUCTION_MEAN ? s / 6 : s};
        },
        43, third_order());
  }
  // weight and pos_weight: constants that scale the first-order formula's
  // terms, so the create_graph formula must carry them too (it used to drop
  // both). Shapes as the header lists them: [C] along the last dimension,
  // [N, 1], the full shape; targets differentiated too (their gradient
  // depends on pos_weight).
  struct Weighted {
    const char* name;
    Dims weight, pos_weight;  // empty: none
  };
  const Weighted weighted_cases[] = {{"weight [3]", {3}, {}},
                                     {"pos_weight [3]", {}, {3}},
                                     {"weight [2, 1], pos_weight [3]", {2, 1}, {3}},
                                     {"weight [2, 3], pos_weight [1]", {2, 3}, {1}}};
  for (const Weighted& c : weighted_cases)
    for (const ampx_reduction r : {AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM, AMPX_REDUCTION_NONE}) {
      const Dims d = {2, 3};
      std::vector<In> inputs = {floating(d, rng.values(6, -2, 2)),
                                floating(d, rng.values(6, 0, 1))};
      const Vec w = rng.values(count_of(c.weight), 0.5, 2), p = rng.values(count_of(c.pos_weight), 0.5, 3);
      const bool has_w = !c.weight.empty(), has_p = !c.pos_weight.empty();
      if (has_w) inputs.push_back(floating(c.weight, w, false));
      if (has_p) inputs.push_back(floating(c.pos_weight, p, false));
      hocheck(
          std::string("bce_with_logits ") + c.name + " reduction " + std::to_string(static_cast<int>(r)),
          inputs,
          [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
            ampx_bce_with_logits_options o = AMPX_BCE_WITH_LOGITS_OPTIONS_INIT;
            o.reduction = r;
            return ampx_bce_with_logits_ex(t[0], t[1], has_w ? t[2] : nullptr,
                                           has_p ? t[has_w ? 3 : 2] : nullptr, &o, out);
          },
          [&](const Inputs& v) {
            const Vec ones(6, 1.0);
            const Vec wf = has_w ? broadcast_binary('*', ones, d, w, c.weight) : ones;
            const Vec pf = has_p ? broadcast_binary('*', ones, d, p, c.pos_weight) : ones;
            Vec e(6);
            double s = 0.0;
            for (size_t i = 0; i < 6; ++i) {
              const double x = v[0][i], tt = v[1][i];
              s += e[i] = -wf[i] * (pf[i] * tt * std::log(sigmoid(x)) +
                                    (1 - tt) * std::log(sigmoid(-x)));
            }
            if (r == AMPX_REDUCTION_NONE) return e;
            return Vec{r == AMPX_REDUCTION_MEAN ? s / 6 : s};
          },
          44, third_order());
    }
}

// ---- products and normalisation ----------------------------------------------------

TEST_CASE("higher order: matmul with torch.matmul's shapes, to third order") {
  Rng rng(50);
  struct Case {
    Dims a, b;
  };
  const Case cases[] = {{{3, 4}, {4, 2}}, {{2, 3, 4}, {4, 2}}, {{3, 4}, {2, 4, 2}}, {{4}, {4, 3}},
                        {{2, 1, 3, 2}, {3, 2, 4}}};
  for (const Case& c : cases) {
    // The double reference broadcasts both to the output's batch.
    const auto matrices = [](const Dims& d, bool first) {
      Dims m = d;
      if (d.size() == 1) m = first ? Dims{1, d[0]} : Dims{d[0], 1};
      return m;
    };
    const Dims am = matrices(c.a, true), bm = matrices(c.b, false);
    const size_t m = static_cast<size_t>(am[am.size() - 2]), k = static_cast<size_t>(am.back());
    const size_t n = static_cast<size_t>(bm.back());
    Dims batch;
    const size_t nb = std::max(am.size(), bm.size()) - 2;
    for (size_t i = 0; i < nb; ++i) {
      const auto ext = [&](const Dims& d) {
        const size_t own = d.size() - 2;
        return i + own >= nb ? d[i + own - nb] : int64_t{1};
      };
      batch.push_back(std::max(ext(am), ext(bm)));
    }
    const size_t batches = count_of(batch);
    const auto expand = [&](const Vec& v, const Dims& d, size_t rows, size_t cols_) {
      Vec out(batches * rows * cols_);
      const size_t own = d.size() - 2;
      for (size_t p = 0; p < batches; ++p) {
        size_t rem = p, src = 0, stride = 1;
        for (size_t back = 0; back < nb; ++back) {
          const size_t dim = nb - 1 - back;
          const auto coord = rem % static_cast<size_t>(batch[dim]);
          rem /= static_cast<size_t>(batch[dim]);
          if (dim + own >= nb) {
            const auto e = static_cast<size_t>(d[dim + own - nb]);
            if (e != 1) src += coord * stride;
            stride *= e;
          }
        }
        for (size_t i = 0; i < rows * cols_; ++i)
          out[p * rows * cols_ + i] = v[src * rows * cols_ + i];
      }
      return out;
    };
    hocheck(
        "matmul", {floating(c.a, rng.values(count_of(c.a), -1, 1)),
                   floating(c.b, rng.values(count_of(c.b), -1, 1))},
        [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          ampx_tensor y = nullptr;
          return then_square(ampx_matmul(t[0], t[1], &y), y, out);
        },
        [&](const Inputs& v) {
          return squared(ref_matmul(expand(v[0], am, m, k), expand(v[1], bm, k, n), batches, m, k,
                                    n));
        },
        51, third_order());
  }
}

// GELU's derivative formula reads the saved pre-activation Z as a further
// output of the linear's record, so the second walk sends Z's gradient back
// to that record: with `square` false nothing else reaches the output (the
// record gets Z's gradient alone), with it both; to third order, Z is made
// an output a second time.
TEST_CASE("higher order: linear with and without its fused activations, to third order") {
  Rng rng(60);
  for (const ampx_activation act :
       {AMPX_ACTIVATION_NONE, AMPX_ACTIVATION_RELU, AMPX_ACTIVATION_GELU}) {
    for (const bool bias : {true, false}) {
      for (const bool square : {true, false}) {
        std::vector<In> inputs = {floating({2, 3, 4}, rng.values(24, -1, 1)),
                                  floating({3, 4}, rng.values(12, -1, 1))};
        if (bias) inputs.push_back(floating({3}, rng.values(3, -0.5, 0.5)));
        hocheck(
            "linear act " + std::to_string(static_cast<int>(act)) + (bias ? " bias" : "") +
                (square ? " squared" : ""),
            inputs,
            [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
              const ampx_status st = ampx_linear(t[0], t[1], bias ? t[2] : nullptr, act, out);
              if (!square) return st;
              const ampx_tensor y = *out;
              return then_square(st, y, out);
            },
            [&](const Inputs& v) {
              Vec out(18);
              for (size_t r = 0; r < 6; ++r)
                for (size_t o = 0; o < 3; ++o) {
                  double z = bias ? v[2][o] : 0.0;
                  for (size_t i = 0; i < 4; ++i) z += v[0][r * 4 + i] * v[1][o * 4 + i];
                  out[r * 3 + o] = act == AMPX_ACTIVATION_RELU   ? (z > 0 ? z : 0.0)
                                   : act == AMPX_ACTIVATION_GELU ? gelu(z)
                                                                 : z;
                }
              return square ? squared(out) : out;
            },
            61, third_order());
      }
    }
  }
}

TEST_CASE("higher order: layer_norm, rms_norm and batch_norm") {
  Rng rng(70);
  for (const bool rms : {false, true}) {
    hocheck(
        rms ? "rms_norm" : "layer_norm",
        {floating({3, 4}, rng.values(12, -2, 2)), floating({4}, rng.values(4, 0.5, 1.5)),
         floating({4}, rng.values(4, -0.5, 0.5))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          ampx_tensor y = nullptr;
          return then_square(rms ? ampx_rms_norm(t[0], t[1], 1e-5, &y)
                                 : ampx_layer_norm(t[0], t[1], t[2], 1e-5, &y),
                             y, out);
        },
        [&](const Inputs& v) {
          Vec out(12);
          for (size_t r = 0; r < 3; ++r) {
            double mean = 0.0, var = 0.0;
            for (size_t j = 0; j < 4; ++j) mean += v[0][r * 4 + j] / 4;
            if (rms) mean = 0.0;
            for (size_t j = 0; j < 4; ++j) var += std::pow(v[0][r * 4 + j] - mean, 2) / 4;
            for (size_t j = 0; j < 4; ++j)
              out[r * 4 + j] = (v[0][r * 4 + j] - mean) / std::sqrt(var + 1e-5) * v[1][j] +
                               (rms ? 0.0 : v[2][j]);
          }
          return squared(out);
        },
        71);
  }
  for (const bool training : {true, false}) {
    const Vec running_mean = {0.1, -0.2, 0.3}, running_var = {1.2, 0.8, 1.5};
    std::vector<In> inputs = {floating({2, 3, 2}, rng.values(12, -2, 2)),
                              floating({3}, rng.values(3, 0.5, 1.5)),
                              floating({3}, rng.values(3, -0.5, 0.5))};
    hocheck(
        training ? "batch_norm training" : "batch_norm evaluation", inputs,
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          const int64_t c = 3;
          ampx_tensor rm = nullptr, rv = nullptr;
          REQUIRE(ampx_tensor_from_host(context_of(t[0]), AMPX_F32, 1, &c,
                                        encode(AMPX_F32, running_mean).data(), 12, &rm) == AMPX_OK);
          REQUIRE(ampx_tensor_from_host(context_of(t[0]), AMPX_F32, 1, &c,
                                        encode(AMPX_F32, running_var).data(), 12, &rv) == AMPX_OK);
          ampx_tensor y = nullptr;
          const ampx_status st =
              ampx_batch_norm(t[0], t[1], t[2], rm, rv, training ? 1 : 0, 0.1, 1e-5, &y);
          ampx_tensor_release(rm);
          ampx_tensor_release(rv);
          return then_square(st, y, out);
        },
        [&](const Inputs& v) {
          Vec out(12);
          for (size_t ch = 0; ch < 3; ++ch) {
            double mean = 0.0, var = 0.0;
            for (size_t n = 0; n < 2; ++n)
              for (size_t i = 0; i < 2; ++i) mean += v[0][(n * 3 + ch) * 2 + i] / 4;
            for (size_t n = 0; n < 2; ++n)
              for (size_t i = 0; i < 2; ++i) var += std::pow(v[0][(n * 3 + ch) * 2 + i] - mean, 2) / 4;
            if (!training) mean = running_mean[ch], var = running_var[ch];
            for (size_t n = 0; n < 2; ++n)
              for (size_t i = 0; i < 2; ++i) {
                const size_t at = (n * 3 + ch) * 2 + i;
                out[at] = (v[0][at] - mean) / std::sqrt(var + 1e-5) * v[1][ch] + v[2][ch];
              }
          }
          return squared(out);
        },
        72);
  }
}

// ---- indexing, dropout, shapes ---------------------------------------------------

TEST_CASE("higher order: embedding and dropout (through a square)") {
  Rng rng(80);
  const Vec indices = {2, 0, 2, 3, 1};
  hocheck(
      "embedding", {floating({4, 3}, rng.values(12, -1, 1)), integers({5}, indices)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr;
        return then_square(ampx_embedding(t[0], t[1], &y), y, out);
      },
      [&](const Inputs& v) {
        Vec out(15);
        for (size_t i = 0; i < 5; ++i)
          for (size_t j = 0; j < 3; ++j)
            out[i * 3 + j] = v[0][static_cast<size_t>(indices[i]) * 3 + j];
        return squared(out);
      },
      81, third_order());
  // The mask the first dropout call on a fresh context draws (same seed).
  const Dims d = {4, 5};
  Vec factor;
  {
    Ctx probe;
    Tensor ones(make_tensor(probe, floating(d, Vec(20, 1.0), false)));
    Tensor y;
    REQUIRE(ampx_dropout(ones, 0.3, 1, y.out()) == AMPX_OK);
    factor = values_of(y);
  }
  int dropped = 0;
  for (double f : factor) dropped += f == 0.0;
  CHECK((dropped > 0 && dropped < 20));
  hocheck(
      "dropout", {floating(d, rng.values(20, -1, 1))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr;
        return then_square(ampx_dropout(t[0], 0.3, 1, &y), y, out);
      },
      [&](const Inputs& v) {
        Vec out(20);
        for (size_t i = 0; i < 20; ++i) out[i] = v[0][i] * factor[i];
        return squared(out);
      },
      82);
}

TEST_CASE("higher order: reshape, transpose, permute, concat, split, masked_fill") {
  Rng rng(90);
  const Dims d = {2, 3, 4};
  const Vec x = rng.values(24, -1, 1);
  // Each op, then tanh: the second derivative goes through the op's
  // backward formula and back through the op.
  const auto tanh_after = [](ampx_status st, const ampx_tensor& y, ampx_tensor* out) {
    return st != AMPX_OK ? st : ampx_tanh(y, out);
  };
  const auto tanh_ref = [](const Vec& y) { return map(y, [](double v) { return std::tanh(v); }); };
  const auto permuted = [&](const Vec& v, const std::vector<size_t>& order) {
    Dims out_d(3);
    for (size_t k = 0; k < 3; ++k) out_d[k] = d[order[k]];
    Vec out(24);
    size_t strides[3] = {12, 4, 1};
    for (size_t i = 0; i < 24; ++i) {
      size_t rem = i, src = 0;
      for (size_t back = 0; back < 3; ++back) {
        const size_t k = 2 - back;
        const size_t coord = rem % static_cast<size_t>(out_d[k]);
        rem /= static_cast<size_t>(out_d[k]);
        src += coord * strides[order[k]];
      }
      out[i] = v[src];
    }
    return out;
  };
  hocheck(
      "reshape", {floating(d, x)},
      [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        const int64_t shape[2] = {6, 4};
        ampx_tensor y = nullptr;
        return tanh_after(ampx_reshape(t[0], 2, shape, &y), y, out);
      },
      [&](const Inputs& v) { return tanh_ref(v[0]); }, 91);
  hocheck(
      "transpose", {floating(d, x)},
      [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr;
        return tanh_after(ampx_transpose(t[0], 0, 2, &y), y, out);
      },
      [&](const Inputs& v) { return tanh_ref(permuted(v[0], {2, 1, 0})); }, 92);
  hocheck(
      "permute", {floating(d, x)},
      [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        const int32_t order[3] = {1, 2, 0};
        ampx_tensor y = nullptr;
        return tanh_after(ampx_permute(t[0], 3, order, &y), y, out);
      },
      [&](const Inputs& v) { return tanh_ref(permuted(v[0], {1, 2, 0})); }, 93);
  hocheck(
      "concat", {floating({2, 2}, rng.values(4, -1, 1)), floating({2, 3}, rng.values(6, -1, 1))},
      [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr;
        return tanh_after(ampx_concat(t.data(), 2, 1, &y), y, out);
      },
      [&](const Inputs& v) {
        Vec y;
        for (size_t r = 0; r < 2; ++r) {
          y.insert(y.end(), v[0].begin() + r * 2, v[0].begin() + r * 2 + 2);
          y.insert(y.end(), v[1].begin() + r * 3, v[1].begin() + r * 3 + 3);
        }
        return tanh_ref(y);
      },
      94);
  // split: only the first and last pieces are used (the middle gets zeros).
  hocheck(
      "split", {floating(d, x)},
      [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        const int64_t sizes[3] = {1, 2, 1};
        ampx_tensor pieces[3] = {nullptr, nullptr, nullptr};
        ampx_status st = ampx_split(t[0], sizes, 3, 2, pieces);
        if (st != AMPX_OK) return st;
        ampx_tensor both[2] = {pieces[0], pieces[2]};
        ampx_tensor y = nullptr;
        return tanh_after(ampx_concat(both, 2, 2, &y), y, out);
      },
      [&](const Inputs& v) {
        Vec y;
        for (size_t r = 0; r < 6; ++r) {
          y.push_back(v[0][r * 4]);
          y.push_back(v[0][r * 4 + 3]);
        }
        return tanh_ref(y);
      },
      95);
  const Vec mask = {1, 0, 0, 1};
  hocheck(
      "masked_fill", {floating(d, x), integers({4}, mask, AMPX_I32)},
      [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr;
        return tanh_after(ampx_masked_fill(t[0], t[1], 0.5, &y), y, out);
      },
      [&](const Inputs& v) {
        Vec y = v[0];
        for (size_t i = 0; i < 24; ++i)
          if (mask[i % 4] != 0) y[i] = 0.5;
        return tanh_ref(y);
      },
      96, third_order());
}

TEST_CASE("higher order: rotary embeddings (rotate-half and interleaved)") {
  Rng rng(100);
  const size_t T = 3, D = 4;
  Vec cos(T * D / 2), sin(T * D / 2);
  for (size_t t = 0; t < T; ++t)
    for (size_t i = 0; i < D / 2; ++i) {
      const double angle = static_cast<double>(t) * (0.5 + static_cast<double>(i));
      cos[t * D / 2 + i] = static_cast<float>(std::cos(angle));
      sin[t * D / 2 + i] = static_cast<float>(std::sin(angle));
    }
  for (const bool interleaved : {false, true}) {
    hocheck(
        interleaved ? "rotary interleaved" : "rotary rotate-half",
        {floating({2, T, D}, rng.values(2 * T * D, -1, 1)), floating({T, D / 2}, cos, false),
         floating({T, D / 2}, sin, false)},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          ampx_tensor y = nullptr;
          return then_square(ampx_rotary_embedding(t[0], t[1], t[2], interleaved ? 1 : 0, &y), y,
                             out);
        },
        [&](const Inputs& v) {
          Vec y(2 * T * D);
          for (size_t r = 0; r < 2; ++r)
            for (size_t t = 0; t < T; ++t)
              for (size_t i = 0; i < D / 2; ++i) {
                const size_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + D / 2;
                const size_t base = (r * T + t) * D;
                const double c = cos[t * D / 2 + i], s = sin[t * D / 2 + i];
                y[base + a] = v[0][base + a] * c - v[0][base + b] * s;
                y[base + b] = v[0][base + b] * c + v[0][base + a] * s;
              }
          return squared(y);
        },
        101);
  }
}

// ---- convolution, pooling, attention -------------------------------------------------

namespace {

struct ConvRef {
  size_t n, c, h, w, o, kh, kw, stride, pad, groups;
  size_t oh() const { return (h + 2 * pad - kh) / stride + 1; }
  size_t ow() const { return (w + 2 * pad - kw) / stride + 1; }
  Vec run(const Vec& x, const Vec& wt, const Vec* bias) const {
    const size_t cg = c / groups, og = o / groups;
    Vec y(n * o * oh() * ow());
    for (size_t b = 0; b < n; ++b)
      for (size_t oc = 0; oc < o; ++oc)
        for (size_t p = 0; p < oh(); ++p)
          for (size_t q = 0; q < ow(); ++q) {
            double s = bias ? (*bias)[oc] : 0.0;
            const size_t g = oc / og;
            for (size_t ci = 0; ci < cg; ++ci)
              for (size_t i = 0; i < kh; ++i)
                for (size_t j = 0; j < kw; ++j) {
                  const auto r = static_cast<int64_t>(p * stride + i) - static_cast<int64_t>(pad);
                  const auto col = static_cast<int64_t>(q * stride + j) - static_cast<int64_t>(pad);
                  if (r < 0 || col < 0 || r >= static_cast<int64_t>(h) || col >= static_cast<int64_t>(w))
                    continue;
                  s += wt[((oc * cg + ci) * kh + i) * kw + j] *
                       x[((b * c + g * cg + ci) * h + static_cast<size_t>(r)) * w + static_cast<size_t>(col)];
                }
            y[((b * o + oc) * oh() + p) * ow() + q] = s;
          }
    return y;
  }
};

}  // namespace

TEST_CASE("higher order: conv2d (stride, padding, groups, bias)") {
  SKIP_UNLESS_CONVOLUTION();
  Rng rng(110);
  for (const ConvRef& c : {ConvRef{2, 2, 4, 4, 3, 3, 3, 1, 1, 1}, ConvRef{1, 4, 5, 4, 2, 2, 2, 2, 0, 2}}) {
    const Dims xd = {static_cast<int64_t>(c.n), static_cast<int64_t>(c.c),
                     static_cast<int64_t>(c.h), static_cast<int64_t>(c.w)};
    const Dims wd = {static_cast<int64_t>(c.o), static_cast<int64_t>(c.c / c.groups),
                     static_cast<int64_t>(c.kh), static_cast<int64_t>(c.kw)};
    hocheck(
        "conv2d groups " + std::to_string(c.groups),
        {floating(xd, rng.values(count_of(xd), -1, 1)), floating(wd, rng.values(count_of(wd), -0.5, 0.5)),
         floating({static_cast<int64_t>(c.o)}, rng.values(c.o, -0.5, 0.5))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          ampx_conv2d_options o = AMPX_CONV2D_OPTIONS_INIT;
          o.stride[0] = o.stride[1] = static_cast<int64_t>(c.stride);
          o.padding[0] = o.padding[1] = static_cast<int64_t>(c.pad);
          o.groups = static_cast<int64_t>(c.groups);
          ampx_tensor y = nullptr;
          return then_square(ampx_conv2d(t[0], t[1], t[2], &o, &y), y, out);
        },
        [&](const Inputs& v) { return squared(c.run(v[0], v[1], &v[2])); }, 111, third_order());
  }
}

TEST_CASE("higher order: max, average and global average pooling") {
  Rng rng(120);
  const Dims d = {1, 2, 4, 4};
  // Distinct values, so each window's maximum is clear of the stencils' steps.
  Vec x(32);
  for (size_t i = 0; i < 32; ++i) x[i] = static_cast<float>(-1.6 + 0.1 * static_cast<double>((i * 13) % 32));
  for (const bool max : {true, false}) {
    hocheck(
        max ? "max_pool2d 3x3 stride 1 padding 1" : "avg_pool2d 3x3 stride 1 padding 1",
        {floating(d, x)},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          ampx_pool2d_options o = AMPX_POOL2D_OPTIONS_INIT;
          o.stride[0] = o.stride[1] = 1;
          o.padding[0] = o.padding[1] = 1;
          ampx_tensor y = nullptr;
          return then_square(max ? ampx_max_pool2d(t[0], 3, 3, &o, &y)
                                 : ampx_avg_pool2d(t[0], 3, 3, &o, &y),
                             y, out);
        },
        [&](const Inputs& v) {
          Vec y(32);
          for (size_t plane = 0; plane < 2; ++plane)
            for (size_t p = 0; p < 4; ++p)
              for (size_t q = 0; q < 4; ++q) {
                double best = -INFINITY, sum = 0.0;
                for (int i = -1; i <= 1; ++i)
                  for (int j = -1; j <= 1; ++j) {
                    const int r = static_cast<int>(p) + i, col = static_cast<int>(q) + j;
                    if (r < 0 || col < 0 || r >= 4 || col >= 4) continue;
                    const double value = v[0][plane * 16 + static_cast<size_t>(r * 4 + col)];
                    best = std::max(best, value);
                    sum += value;
                  }
                y[plane * 16 + p * 4 + q] = max ? best : sum / 9;  // count_include_pad
              }
          return squared(y);
        },
        121, third_order());
  }
  hocheck(
      "global_avg_pool2d", {floating(d, x)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        ampx_tensor y = nullptr;
        return then_square(ampx_global_avg_pool2d(t[0], &y), y, out);
      },
      [&](const Inputs& v) { return squared(ref_reduce(v[0], d, 12, true)); }, 122);
}

TEST_CASE("higher order: scaled_dot_product_attention takes the unfused path") {
  Rng rng(130);
  struct Case {
    const char* name;
    size_t heads, kv_heads;
    bool causal, mask;
  };
  const Case cases[] = {{"plain", 2, 2, false, false},
                        {"causal, grouped heads", 2, 1, true, false},
                        {"additive mask", 1, 1, false, true}};
  const size_t B = 1, Tq = 3, Tk = 3, D = 2;
  for (const Case& c : cases) {
    const Dims qd = {static_cast<int64_t>(B), static_cast<int64_t>(c.heads), static_cast<int64_t>(Tq),
                     static_cast<int64_t>(D)};
    const Dims kd = {static_cast<int64_t>(B), static_cast<int64_t>(c.kv_heads),
                     static_cast<int64_t>(Tk), static_cast<int64_t>(D)};
    std::vector<In> inputs = {floating(qd, rng.values(count_of(qd), -1, 1)),
                              floating(kd, rng.values(count_of(kd), -1, 1)),
                              floating(kd, rng.values(count_of(kd), -1, 1))};
    // A row of the mask removes key 2 from query row 0, and one adds a bias.
    const Vec mask = {0, 0, -INFINITY, 0.25, 0, -0.5, 0, 0, 0};
    if (c.mask) inputs.push_back(floating({3, 3}, mask, false));
    hocheck(
        std::string("attention ") + c.name, inputs,
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          ampx_attention_options o = AMPX_ATTENTION_OPTIONS_INIT;
          o.causal = c.causal ? 1 : 0;
          return ampx_scaled_dot_product_attention(t[0], t[1], t[2], c.mask ? t[3] : nullptr, &o,
                                                   out);
        },
        [&](const Inputs& v) {
          Vec y(B * c.heads * Tq * D);
          const size_t group = c.heads / c.kv_heads;
          for (size_t h = 0; h < c.heads; ++h)
            for (size_t i = 0; i < Tq; ++i) {
              Vec s(Tk);
              for (size_t j = 0; j < Tk; ++j) {
                double dotp = 0.0;
                for (size_t e = 0; e < D; ++e)
                  dotp += v[0][(h * Tq + i) * D + e] * v[1][((h / group) * Tk + j) * D + e];
                s[j] = dotp / std::sqrt(static_cast<double>(D)) + (c.mask ? mask[i * Tk + j] : 0.0);
                if (c.causal && j > i) s[j] = -INFINITY;
              }
              const double m = *std::max_element(s.begin(), s.end());
              double z = 0.0;
              for (double& sv : s) z += sv = std::exp(sv - m);
              for (size_t e = 0; e < D; ++e) {
                double acc = 0.0;
                for (size_t j = 0; j < Tk; ++j)
                  acc += s[j] / z * v[2][((h / group) * Tk + j) * D + e];
                y[(h * Tq + i) * D + e] = acc;
              }
            }
          return y;
        },
        131, third_order());
  }
}

// ---- a small MLP: Hessian-vector products, in fp32 and under autocast -----------------

namespace {

// x [8, 2] -> linear(6) -> tanh -> linear(6) -> gelu -> linear(1), MSE
// against y [8, 1]. Parameters first in the inputs, then x and y.
const size_t kBatch = 8, kHidden = 6;

std::vector<In> mlp_inputs(Rng& rng) {
  const auto h = static_cast<int64_t>(kHidden);
  return {floating({h, 2}, rng.values(kHidden * 2, -1, 1)),
          floating({h}, rng.values(kHidden, -0.3, 0.3)),
          floating({h, h}, rng.values(kHidden * kHidden, -0.6, 0.6)),
          floating({h}, rng.values(kHidden, -0.3, 0.3)),
          floating({1, h}, rng.values(kHidden, -0.6, 0.6)),
          floating({1}, rng.values(1, -0.3, 0.3)),
          floating({static_cast<int64_t>(kBatch), 2}, rng.values(kBatch * 2, -1, 1), false),
          floating({static_cast<int64_t>(kBatch), 1}, rng.values(kBatch, -1, 1), false)};
}

ampx_status mlp_loss(const std::vector<ampx_tensor>& t, ampx_tensor* out) {
  ampx_tensor h1 = nullptr, a1 = nullptr, h2 = nullptr, y = nullptr;
  ampx_status st = ampx_linear(t[6], t[0], t[1], AMPX_ACTIVATION_NONE, &h1);
  if (st == AMPX_OK) st = ampx_tanh(h1, &a1);
  if (st == AMPX_OK) st = ampx_linear(a1, t[2], t[3], AMPX_ACTIVATION_GELU, &h2);
  if (st == AMPX_OK) st = ampx_linear(h2, t[4], t[5], AMPX_ACTIVATION_NONE, &y);
  return st != AMPX_OK ? st : ampx_mse_loss(y, t[7], AMPX_REDUCTION_MEAN, out);
}

Vec mlp_reference(const Inputs& v) {
  double loss = 0.0;
  for (size_t b = 0; b < kBatch; ++b) {
    double a1[kHidden], a2[kHidden];
    for (size_t o = 0; o < kHidden; ++o)
      a1[o] = std::tanh(v[1][o] + v[0][o * 2] * v[6][b * 2] + v[0][o * 2 + 1] * v[6][b * 2 + 1]);
    for (size_t o = 0; o < kHidden; ++o) {
      double z = v[3][o];
      for (size_t i = 0; i < kHidden; ++i) z += v[2][o * kHidden + i] * a1[i];
      a2[o] = gelu(z);
    }
    double y = v[5][0];
    for (size_t i = 0; i < kHidden; ++i) y += v[4][i] * a2[i];
    loss += (y - v[7][b]) * (y - v[7][b]) / static_cast<double>(kBatch);
  }
  return {loss};
}

}  // namespace

TEST_CASE("higher order: Hessian-vector products of a small MLP") {
  Rng rng(140);
  hocheck("mlp fp32", mlp_inputs(rng), mlp_loss, mlp_reference, 141, third_order());
}

TEST_CASE("higher order: Hessian-vector products of a small MLP under fp16 and bf16 autocast") {
  // Bounds. Under autocast the products take operands rounded to 11 (fp16)
  // or 8 (bf16) significant bits and round their outputs the same way; the
  // backward formulas run in the dtypes the forward ran in. Three layers of
  // such roundings (2^-11 ~ 5e-4, 2^-8 ~ 4e-3 each), compounded through the
  // first, second and third derivatives of tanh and gelu, keep the HVP
  // within a few percent for bf16 and a fraction of that for fp16: 2e-2
  // (fp16) and 8e-2 (bf16) relative to the largest element. A wrong
  // formula is off by O(1); fp32 passes the fp32 test's 5e-4.
  for (const ampx_dtype dtype : {AMPX_F16, AMPX_BF16}) {
    Rng rng(150);
    Orders o;
    o.autocast = dtype;
    o.rtol = dtype == AMPX_F16 ? 2e-2 : 8e-2;
    o.atol_of_max = o.rtol;
    hocheck(dtype == AMPX_F16 ? "mlp fp16" : "mlp bf16", mlp_inputs(rng), mlp_loss, mlp_reference,
            151, o);
  }
}

// ---- the scaler: a recorded scale_loss, unscale_tensor, the gradient penalty ------------

TEST_CASE("scaler: scale_loss is recorded and unscale_tensor undoes it, differentiably") {
  Ctx ctx;
  ampx_scaler_options so = AMPX_SCALER_OPTIONS_INIT;
  so.init_scale = 1024.0;
  ampx_scaler scaler = nullptr;
  REQUIRE(ampx_scaler_create(ctx, &so, &scaler) == AMPX_OK);
  Tensor x(make_tensor(ctx, floating({4}, kX)));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  const ampx_tensor loss = sum_of(tanh_of(x));
  Tensor scaled;
  REQUIRE(ampx_scaler_scale_loss(scaler, loss, scaled.out()) == AMPX_OK);
  CHECK(requires_grad(scaled));
  ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
  o.create_graph = 1;
  ampx_tensor g = nullptr, u = nullptr;
  REQUIRE_MESSAGE(ampx_grad(&scaled.handle, 1, nullptr, &x.handle, 1, &o, &g) == AMPX_OK,
                  last_error());
  REQUIRE_MESSAGE(ampx_scaler_unscale_tensor(scaler, g, &u) == AMPX_OK, last_error());
  const Vec gv = values_of(g), uv = values_of(u);
  for (size_t i = 0; i < 4; ++i) {
    const double t = std::tanh(kX[i]);
    CHECK(std::fabs(gv[i] - 1024 * (1 - t * t)) < 1e-3);
    CHECK(std::fabs(uv[i] - (1 - t * t)) < 1e-6);
  }
  // A later change of the scale does not change the recorded factors.
  REQUIRE(ampx_scaler_update_to(scaler, 4.0) == AMPX_ERR_ORDER);  // nothing stepped
  const ampx_tensor us = sum_of(u);
  ampx_tensor h = nullptr;
  REQUIRE_MESSAGE(ampx_grad(&us, 1, nullptr, &x.handle, 1, nullptr, &h) == AMPX_OK, last_error());
  const Vec hv = values_of(h);
  for (size_t i = 0; i < 4; ++i) {
    const double t = std::tanh(kX[i]);
    CHECK(std::fabs(hv[i] - (-2 * t * (1 - t * t))) < 1e-5);
  }
  CHECK_FAILS_WITH(ampx_scaler_unscale_tensor(scaler, nullptr, &u), AMPX_ERR_INVALID_ARGUMENT, "x");
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  ampx_scaler_release(scaler);
}

namespace {

// One step of torch's gradient-penalty recipe on the MLP's parameters:
// loss under autocast (dtype F32: none), scaled, its gradients taken with
// create_graph and unscaled, penalty = lambda * sum of their squares,
// total = loss + penalty, scaled backward, step, update. Returns the
// parameters' gradients after unscaling (as the step saw them).
struct PenaltyRun {
  std::vector<Vec> grads;
  std::vector<Vec> params_after;
  ampx_scaler_counters counters = AMPX_SCALER_COUNTERS_INIT;
};

PenaltyRun penalty_step(ampx_dtype dtype, bool scaler_on, double init_scale, double lambda) {
  Ctx ctx;
  Rng rng(160);
  const std::vector<In> inputs = mlp_inputs(rng);
  std::vector<Tensor> owned(inputs.size());
  std::vector<ampx_tensor> t, params;
  for (size_t k = 0; k < inputs.size(); ++k) {
    owned[k].handle = make_tensor(ctx, inputs[k]);
    t.push_back(owned[k].handle);
    if (k < 6) params.push_back(owned[k].handle);
  }
  ampx_scaler_options so = AMPX_SCALER_OPTIONS_INIT;
  so.init_scale = init_scale;
  so.enabled = scaler_on ? 1 : 0;
  ampx_scaler scaler = nullptr;
  REQUIRE(ampx_scaler_create(ctx, &so, &scaler) == AMPX_OK);
  ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
  sgd.lr = 0.1;
  ampx_optimizer opt = nullptr;
  REQUIRE(ampx_optimizer_create_sgd(ctx, params.data(), params.size(), &sgd, &opt) == AMPX_OK);
  ampx_autocast policy = nullptr;
  if (dtype != AMPX_F32) {
    ampx_autocast_options a = AMPX_AUTOCAST_OPTIONS_INIT;
    a.dtype = dtype;
    REQUIRE(ampx_autocast_create(ctx, &a, &policy) == AMPX_OK);
  }
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  if (policy) REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
  ampx_tensor loss = nullptr;
  REQUIRE_MESSAGE(mlp_loss(t, &loss) == AMPX_OK, last_error());
  if (policy) REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
  Tensor scaled;
  REQUIRE(ampx_scaler_scale_loss(scaler, loss, scaled.out()) == AMPX_OK);
  std::vector<ampx_tensor> g(params.size(), nullptr);
  ampx_grad_options go = AMPX_GRAD_OPTIONS_INIT;
  go.create_graph = 1;
  REQUIRE_MESSAGE(ampx_grad(&scaled.handle, 1, nullptr, params.data(), params.size(), &go,
                            g.data()) == AMPX_OK,
                  last_error());
  if (policy) REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
  ampx_tensor penalty = nullptr;
  for (ampx_tensor gi : g) {
    ampx_tensor u = nullptr;
    REQUIRE(ampx_scaler_unscale_tensor(scaler, gi, &u) == AMPX_OK);
    const ampx_tensor sq = dot(u, u);
    penalty = penalty ? add(penalty, sq) : sq;
  }
  ampx_tensor weighted = nullptr, total = nullptr;
  REQUIRE(ampx_affine(penalty, lambda, 0.0, &weighted) == AMPX_OK);
  total = add(loss, weighted);
  if (policy) REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(total, scaler) == AMPX_OK, last_error());
  REQUIRE(ampx_scaler_unscale(scaler, opt) == AMPX_OK);
  PenaltyRun run;
  for (ampx_tensor p : params) {
    // F32 parameters: unscaled in place.
    run.grads.push_back(values_of(grad_handle(p)));
  }
  REQUIRE(ampx_scaler_step(scaler, opt) == AMPX_OK);
  REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  for (ampx_tensor p : params) run.params_after.push_back(values_of(p));
  REQUIRE(ampx_scaler_get_counters(scaler, &run.counters) == AMPX_OK);
  ampx_autocast_release(policy);
  ampx_optimizer_release(opt);
  ampx_scaler_release(scaler);
  return run;
}

}  // namespace

TEST_CASE("scaler: the gradient-penalty recipe under fp16 with the scaler, bf16 and fp32") {
  // The reference: fp32, no scaler. A scaler in fp32 changes nothing but
  // roundings (its factors are powers of two); fp16 and bf16 stay within
  // the bounds of the MLP's HVP test above (the penalty's gradient is g + 2
  // lambda H g).
  const PenaltyRun reference = penalty_step(AMPX_F32, false, 1.0, 0.5);
  const PenaltyRun no_penalty = penalty_step(AMPX_F32, false, 1.0, 0.0);
  const PenaltyRun scaled = penalty_step(AMPX_F32, true, 1024.0, 0.5);
  const PenaltyRun half = penalty_step(AMPX_F16, true, 1024.0, 0.5);
  const PenaltyRun brain = penalty_step(AMPX_BF16, false, 1.0, 0.5);
  double scale = 0.0, penalty_part = 0.0;
  for (size_t k = 0; k < reference.grads.size(); ++k)
    for (size_t i = 0; i < reference.grads[k].size(); ++i) {
      scale = std::max(scale, std::fabs(reference.grads[k][i]));
      penalty_part =
          std::max(penalty_part, std::fabs(reference.grads[k][i] - no_penalty.grads[k][i]));
    }
  CHECK(penalty_part > 0.05 * scale);  // the penalty matters in this test
  const auto within = [&](const PenaltyRun& run, double bound, const char* what) {
    INFO(what);
    CHECK(run.counters.skipped == 0);
    for (size_t k = 0; k < reference.grads.size(); ++k)
      for (size_t i = 0; i < reference.grads[k].size(); ++i)
        CHECK_MESSAGE(std::fabs(run.grads[k][i] - reference.grads[k][i]) <= bound * scale,
                      "parameter ", k, " element ", i, ": ", run.grads[k][i], " against ",
                      reference.grads[k][i]);
  };
  within(scaled, 1e-5, "fp32 with the scaler");
  within(half, 2e-2, "fp16 with the scaler");
  within(brain, 8e-2, "bf16");
}

TEST_CASE("scaler: a penalty that overflows makes the step skip and the scale back off") {
  // 2^40 times the loss's gradients overflows fp16 in the scaled gradients
  // of step 3 of the recipe: the penalty is inf, the parameters' gradients
  // are inf/NaN, and the scaler skips the step.
  Rng rng(160);
  const std::vector<In> inputs = mlp_inputs(rng);
  const PenaltyRun run = penalty_step(AMPX_F16, true, 1099511627776.0, 0.5);
  CHECK(run.counters.skipped == 1);
  CHECK(run.counters.backoffs == 1);
  for (size_t k = 0; k < run.params_after.size(); ++k) CHECK(run.params_after[k] == inputs[k].values);
  bool non_finite = false;
  for (const Vec& g : run.grads)
    for (double v : g) non_finite = non_finite || !std::isfinite(v);
  CHECK(non_finite);
}

TEST_CASE("higher order: a WGAN-GP critic's gradient penalty, differentiated by its weights") {
  // D(x) = w2 relu(w1 x + b1) + b2 on one-number inputs x [N, 1]; the
  // penalty 10 mean (|dD/dx| - 1)^2 takes dD/dx with ampx_grad inside the op.
  Rng rng(170);
  const size_t n = 6, hidden = 5;
  const Vec x = rng.values(n, -2, 2);
  hocheck(
      "gradient penalty",
      {floating({static_cast<int64_t>(hidden), 1}, rng.signed_away(hidden, 0.3, 1.5)),
       floating({static_cast<int64_t>(hidden)}, rng.values(hidden, -1, 1)),
       floating({1, static_cast<int64_t>(hidden)}, rng.values(hidden, -1, 1)),
       floating({1}, rng.values(1, -1, 1)),
       floating({static_cast<int64_t>(n), 1}, x, false)},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        // x_hat: a leaf copy of the points that requires grad.
        ampx_tensor x_hat = nullptr, h = nullptr, d = nullptr, total = nullptr, g = nullptr;
        ampx_tensor sq = nullptr, norm = nullptr, off = nullptr, off2 = nullptr, m = nullptr;
        ampx_context ctx = context_of(t[4]);
        int64_t dims[2] = {0, 1};
        REQUIRE(ampx_tensor_shape(t[4], dims, 2) == AMPX_OK);
        REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 2, dims, &x_hat) == AMPX_OK);
        REQUIRE(ampx_tensor_copy(x_hat, t[4]) == AMPX_OK);
        REQUIRE(ampx_tensor_set_requires_grad(x_hat, 1) == AMPX_OK);
        ampx_status st = ampx_linear(x_hat, t[0], t[1], AMPX_ACTIVATION_RELU, &h);
        if (st == AMPX_OK) st = ampx_linear(h, t[2], t[3], AMPX_ACTIVATION_NONE, &d);
        if (st == AMPX_OK) st = ampx_sum(d, &total);
        ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
        o.create_graph = 1;
        if (st == AMPX_OK) st = ampx_grad(&total, 1, nullptr, &x_hat, 1, &o, &g);
        if (st == AMPX_OK) st = ampx_mul(g, g, &sq);
        if (st == AMPX_OK) st = ampx_sqrt(sq, &norm);
        if (st == AMPX_OK) st = ampx_affine(norm, 1.0, -1.0, &off);
        if (st == AMPX_OK) st = ampx_mul(off, off, &off2);
        if (st == AMPX_OK) st = ampx_mean(off2, &m);
        if (st == AMPX_OK) st = ampx_affine(m, 10.0, 0.0, out);
        ampx_tensor_release(x_hat);
        return st;
      },
      [&](const Inputs& v) {
        double sum = 0.0;
        for (size_t i = 0; i < n; ++i) {
          double slope = 0.0;
          for (size_t k = 0; k < hidden; ++k)
            if (v[0][k] * v[4][i] + v[1][k] > 0) slope += v[2][k] * v[0][k];
          sum += (std::fabs(slope) - 1) * (std::fabs(slope) - 1);
        }
        return Vec{10 * sum / static_cast<double>(n)};
      },
      171);
}

TEST_CASE("higher order: attention with dropout -- the unfused formulas draw the fused kernels' mask") {
  // The same forward differentiated twice: by the fused backward (first
  // order) and by the unfused formulas (create_graph), which must drop the
  // same probabilities to give the same gradients.
  Rng rng(180);
  Ctx ctx;
  const Dims d = {1, 2, 4, 3};
  Tensor q(make_tensor(ctx, floating(d, rng.values(24, -1, 1))));
  Tensor k(make_tensor(ctx, floating(d, rng.values(24, -1, 1))));
  Tensor v(make_tensor(ctx, floating(d, rng.values(24, -1, 1))));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_attention_options o = AMPX_ATTENTION_OPTIONS_INIT;
  o.dropout_p = 0.4;
  ampx_tensor out = nullptr;
  REQUIRE_MESSAGE(ampx_scaled_dot_product_attention(q, k, v, nullptr, &o, &out) == AMPX_OK,
                  last_error());
  Tensor r(make_tensor(ctx, floating(d, rng.values(24, -1, 1), false)));
  const ampx_tensor loss = dot(out, r);
  const ampx_tensor inputs[3] = {q, k, v};
  ampx_tensor fused[3] = {nullptr, nullptr, nullptr}, unfused[3] = {nullptr, nullptr, nullptr};
  ampx_grad_options keep = AMPX_GRAD_OPTIONS_INIT;
  keep.retain_graph = 1;
  REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, inputs, 3, &keep, fused) == AMPX_OK, last_error());
  ampx_grad_options graph = AMPX_GRAD_OPTIONS_INIT;
  graph.create_graph = 1;
  REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, inputs, 3, &graph, unfused) == AMPX_OK,
                  last_error());
  for (int j = 0; j < 3; ++j) {
    CHECK(requires_grad(unfused[j]));
    const Vec a = values_of(fused[j]), b = values_of(unfused[j]);
    const double scale = max_abs(a);
    CHECK(scale > 0.0);
    for (size_t i = 0; i < a.size(); ++i)
      CHECK_MESSAGE(std::fabs(a[i] - b[i]) <= 1e-5 * scale + 1e-6, "input ", j, " element ", i,
                    ": fused ", a[i], ", unfused ", b[i]);
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

// ---- what each formula reads, what ampx_grad and zero_grad hand back -----------

TEST_CASE("higher order: softmax's create_graph formula reads the output it saved, not x") {
  // The record declares that it reads only its saved output y, so x may be
  // overwritten between forward and backward (as torch, whose softmax
  // saves its result): every order of gradient must then be that at the
  // forward's x. Writing y itself is refused.
  const Vec x0 = {0.3, -1.2, 0.8, 2.0, -0.5, 0.1};
  const Vec x1 = {5.0, 5.0, -5.0, 1.0, 1.0, 1.0};
  const Vec r = {0.7, -0.4, 1.1, -0.9, 0.25, 0.6};
  const Vec v = {0.5, 1.0, -0.75, 0.2, -1.3, 0.9};
  for (const bool log : {false, true}) {
    INFO((log ? "log_softmax" : "softmax"));
    // d/dx sum(op(x) r), row by row, in double.
    const auto gradient = [&](const Vec& x) {
      const Vec y = ref_softmax(x, 3, false);
      Vec g(6);
      for (size_t row = 0; row < 2; ++row) {
        double yr = 0.0, rs = 0.0;
        for (size_t j = 0; j < 3; ++j) {
          yr += y[row * 3 + j] * r[row * 3 + j];
          rs += r[row * 3 + j];
        }
        for (size_t j = 0; j < 3; ++j) {
          const size_t i = row * 3 + j;
          g[i] = log ? r[i] - y[i] * rs : y[i] * (r[i] - yr);
        }
      }
      return g;
    };
    Vec hv_ref(6);  // d/dx <g(x), v> at x0, central differences of the double gradient
    for (size_t i = 0; i < 6; ++i) {
      Vec up = x0, down = x0;
      up[i] += 1e-5;
      down[i] -= 1e-5;
      hv_ref[i] = (weighted(gradient(up), v) - weighted(gradient(down), v)) / 2e-5;
    }
    const Vec g_ref = gradient(x0);
    Ctx ctx;
    Tensor x(make_tensor(ctx, floating({2, 3}, x0)));
    Tensor rt(make_tensor(ctx, floating({2, 3}, r, false)));
    Tensor vt(make_tensor(ctx, floating({2, 3}, v, false)));
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor y = nullptr;
    REQUIRE((log ? ampx_log_softmax(x, &y) : ampx_softmax(x, &y)) == AMPX_OK);
    const ampx_tensor loss = dot(y, rt);
    const std::vector<unsigned char> bytes = encode(AMPX_F32, x1);
    REQUIRE(ampx_tensor_copy_from_host(x, bytes.data(), bytes.size()) == AMPX_OK);
    for (const bool create_graph : {false, true}) {
      INFO("create_graph " << create_graph);
      ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
      o.create_graph = create_graph ? 1 : 0;
      o.retain_graph = 1;
      ampx_tensor g = nullptr;
      REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &g) == AMPX_OK,
                      last_error());
      const Vec gv = values_of(g);
      for (size_t i = 0; i < 6; ++i) CHECK(close(gv[i], g_ref[i], 1e-5, 1e-6));
      if (!create_graph) continue;
      const ampx_tensor s = dot(g, vt);
      ampx_grad_options keep = AMPX_GRAD_OPTIONS_INIT;
      keep.retain_graph = 1;
      ampx_tensor h = nullptr;
      REQUIRE_MESSAGE(ampx_grad(&s, 1, nullptr, &x.handle, 1, &keep, &h) == AMPX_OK,
                      last_error());
      const Vec hv = values_of(h);
      for (size_t i = 0; i < 6; ++i) CHECK(close(hv[i], hv_ref[i], 1e-4, 1e-5));
    }
    // y, which the record reads, written in place: refused both ways.
    REQUIRE(ampx_tensor_fill(y, 0.25) == AMPX_OK);
    for (const int32_t create_graph : {0, 1}) {
      ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
      o.create_graph = create_graph;
      o.retain_graph = 1;
      ampx_tensor g = nullptr;
      CHECK_FAILS_WITH(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &g), AMPX_ERR_ORDER,
                       "written in place");
      CHECK(g == nullptr);
    }
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
}

TEST_CASE("higher order: repeated create_graph walks over a retained graph add no outputs") {
  // A Hessian-vector product loop over one retained forward: linear+GELU's
  // and softmax's formulas make their saved tensor an output of the record;
  // each walk must hand back the one an earlier walk made while it lives,
  // and once it is released, put the next in its place.
  using ampx::impl::autograd_state;
  using ampx::impl::DeviceContext;
  Ctx ctx;
  Tensor x(make_tensor(ctx, floating({2, 3}, {0.5, -1.0, 0.25, 1.5, 0.75, -0.5})));
  Tensor w(make_tensor(ctx, floating({3, 3}, {0.2, -0.4, 0.6, 0.1, 0.3, -0.2, 0.5, 0.05, -0.3})));
  Tensor v(make_tensor(ctx, floating({2, 3}, {1.0, -0.5, 0.25, 0.75, -1.0, 0.5}, false)));
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor z = nullptr, y = nullptr;
  REQUIRE(ampx_linear(x, w, nullptr, AMPX_ACTIVATION_GELU, &z) == AMPX_OK);
  REQUIRE(ampx_softmax(z, &y) == AMPX_OK);
  const ampx_tensor loss = dot(y, v);
  auto& tape = autograd_state(*reinterpret_cast<DeviceContext*>(ctx.handle)).tape;
  const auto outputs_of = [&](const char* name) {
    for (const auto& node : tape)
      if (std::string(node->name()) == name) return node->output_ids.size();
    return size_t(0);
  };
  Vec first;
  for (int iteration = 0; iteration < 5; ++iteration) {
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
    o.create_graph = 1;
    ampx_tensor g = nullptr;
    REQUIRE_MESSAGE(ampx_grad(&loss, 1, nullptr, &x.handle, 1, &o, &g) == AMPX_OK, last_error());
    const ampx_tensor s = dot(g, v);
    ampx_grad_options keep = AMPX_GRAD_OPTIONS_INIT;
    keep.retain_graph = 1;
    ampx_tensor h = nullptr;
    REQUIRE_MESSAGE(ampx_grad(&s, 1, nullptr, &x.handle, 1, &keep, &h) == AMPX_OK, last_error());
    if (iteration == 0) first = values_of(h);
    CHECK(values_of(h) == first);
    CHECK(outputs_of("linear") == 2);
    CHECK(outputs_of("softmax") == 2);
    // The second walk over the same gradient graph reuses the live ones.
    ampx_tensor h2 = nullptr;
    REQUIRE_MESSAGE(ampx_grad(&s, 1, nullptr, &x.handle, 1, &keep, &h2) == AMPX_OK, last_error());
    CHECK(values_of(h2) == first);
    CHECK(outputs_of("linear") == 2);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

TEST_CASE("ampx_grad: results never share memory with grad_outputs or with each other") {
  // z = reshape(x1, [6]) + reshape(x2, [6]): add passes g to both, and
  // reshape's gradient is a view of it, so each result must be copied.
  Ctx ctx;
  Tensor x1(make_tensor(ctx, floating({2, 3}, {1, 2, 3, 4, 5, 6})));
  Tensor x2(make_tensor(ctx, floating({3, 2}, {6, 5, 4, 3, 2, 1})));
  const Vec seed = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5};
  Tensor g(make_tensor(ctx, floating({6}, seed, false)));
  for (const bool create_graph : {false, true}) {
    INFO("create_graph " << create_graph);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    const int64_t flat[1] = {6};
    ampx_tensor r1 = nullptr, r2 = nullptr;
    REQUIRE(ampx_reshape(x1, 1, flat, &r1) == AMPX_OK);
    REQUIRE(ampx_reshape(x2, 1, flat, &r2) == AMPX_OK);
    const ampx_tensor z = add(r1, r2);
    ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
    o.create_graph = create_graph ? 1 : 0;
    ampx_tensor grads[2] = {nullptr, nullptr};
    const ampx_tensor inputs[2] = {x1, x2};
    REQUIRE_MESSAGE(ampx_grad(&z, 1, &g.handle, inputs, 2, &o, grads) == AMPX_OK, last_error());
    const ampx_tensor d1 = grads[0], d2 = grads[1];
    CHECK(values_of(d1) == seed);
    CHECK(values_of(d2) == seed);
    // Filling one changes neither the other nor g.
    REQUIRE(ampx_tensor_fill(d1, 9.0) == AMPX_OK);
    CHECK(values_of(d2) == seed);
    CHECK(values_of(g) == seed);
    REQUIRE(ampx_tensor_fill(d2, 7.0) == AMPX_OK);
    CHECK(values_of(g) == seed);
    CHECK(values_of(d1) == Vec(6, 9.0));
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
}

TEST_CASE("zero_grad detaches a gradient a create_graph backward recorded, as torch") {
  // torch: backward(sum(x*x), create_graph); zero_grad; backward(sum(x^3),
  // create_graph); grad(sum(x.grad), x) = 6x. Zeroed in place, the old
  // gradient stayed recorded and the new one was old + 3x^2: 6x + 2.
  Ctx ctx;
  const Vec xs = {-1.0, 0.5, 2.0};
  Tensor x(make_tensor(ctx, floating({3}, xs)));
  ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
  ampx_optimizer opt = nullptr;
  REQUIRE(ampx_optimizer_create_sgd(ctx, &x.handle, 1, &sgd, &opt) == AMPX_OK);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_backward_options o = AMPX_BACKWARD_OPTIONS_INIT;
  o.create_graph = 1;
  REQUIRE_MESSAGE(ampx_backward_ex(dot(x, x), nullptr, &o) == AMPX_OK, last_error());
  REQUIRE(requires_grad(grad_handle(x)));
  REQUIRE(ampx_optimizer_zero_grad(opt) == AMPX_OK);
  CHECK(values_of(grad_handle(x)) == Vec(3, 0.0));
  CHECK(!requires_grad(grad_handle(x)));
  ampx_tensor cube = nullptr;
  REQUIRE(ampx_pow(x, 3.0, &cube) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward_ex(sum_of(cube), nullptr, &o) == AMPX_OK, last_error());
  const ampx_tensor gx = grad_handle(x);
  const ampx_tensor total = sum_of(gx);
  ampx_tensor h = nullptr;
  REQUIRE_MESSAGE(ampx_grad(&total, 1, nullptr, &x.handle, 1, nullptr, &h) == AMPX_OK,
                  last_error());
  const Vec gv = values_of(gx), hv = values_of(h);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(close(gv[i], 3 * xs[i] * xs[i], 1e-6, 0));
    CHECK(close(hv[i], 6 * xs[i], 1e-6, 0));
  }
  // A gradient that records nothing keeps its identity (an engine's buffer).
  REQUIRE(ampx_optimizer_zero_grad(opt) == AMPX_OK);
  const ampx_tensor detached = grad_handle(x);
  REQUIRE(ampx_optimizer_zero_grad(opt) == AMPX_OK);
  CHECK(grad_handle(x) == detached);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  ampx_optimizer_release(opt);
}
