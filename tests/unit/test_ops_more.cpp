// test_ops_more.cpp -- layer_norm, batch_norm, dropout, embedding, reshape,
// transpose, concat and bce_with_logits (ampx.h section 11) through the
// public C API, against references written here in double precision from
// torch's definitions (never from the library's math headers, so that a
// shared misreading cannot hide).
//
// Gradients. For an op y = f(inputs) the check backpropagates
// L = sum(y * R), R fixed and random, with ampx ops, and compares every
// input's gradient with central differences of the same L on the double
// reference. The step is 1e-4 relative, so the differences are exact to
// ~1e-8 (truncation ~h^2 |L'''|, rounding ~1e-16 |L| / h); ampx computes in
// fp32 (2^-24 per rounding, sums of a few dozen terms), about 1e-6
// relative to the magnitudes summed. Gradients must agree to 1e-3 relative
// plus 1e-5 of the tensor's largest element: far above fp32 error (the
// normalisations' gradients are differences of terms of the size of the
// largest one), far below what a wrong formula gives (O(1)). Forward
// values: 1e-5 relative plus 1e-6 of the largest (a few fp32 roundings,
// exp and log included).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "math/random.h"
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

constexpr double kValueRtol = 1e-5;
constexpr double kValueAtolOfMax = 1e-6;
constexpr double kGradRtol = 1e-3;
constexpr double kGradAtolOfMax = 1e-5;
constexpr double kStep = 1e-4;

size_t count_of(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return static_cast<size_t>(n);
}

// fp32-representable values, uniform in [lo, hi).
Vec floats(Rng& rng, size_t n, double lo, double hi) {
  Vec v = rng.vector(n, lo, hi);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

bool near(double have, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(have);
  return std::fabs(have - want) <= rtol * std::fabs(want) + atol;
}

double largest(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

ampx_tensor make_indices(ampx_context ctx, ampx_dtype dtype, const Dims& dims, const Vec& values) {
  std::vector<unsigned char> bytes(values.size() * ampx_dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const auto wide = static_cast<int64_t>(values[i]);
    const auto narrow = static_cast<int32_t>(wide);
    if (dtype == AMPX_I64)
      std::memcpy(bytes.data() + 8 * i, &wide, 8);
    else
      std::memcpy(bytes.data() + 4 * i, &narrow, 4);
  }
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_from_host(ctx, dtype, static_cast<int32_t>(dims.size()), dims.data(),
                                        bytes.data(), bytes.size(), &t) == AMPX_OK,
                  last_error());
  return t;
}

ampx_tensor grad_or_null(ampx_tensor t) {
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(t, &g) == AMPX_OK);
  return g;
}

// ---- the gradient check ------------------------------------------------------------

// One input of an op under test: F32 (with or without a gradient), or
// I32/I64 indices.
struct Arg {
  Dims dims;
  Vec values;
  bool grad = true;
  ampx_dtype dtype = AMPX_F32;
};

Arg input(Dims dims, Vec values) { return Arg{std::move(dims), std::move(values), true, AMPX_F32}; }
Arg constant(Dims dims, Vec values) {
  return Arg{std::move(dims), std::move(values), false, AMPX_F32};
}
Arg indices_arg(Dims dims, Vec values, ampx_dtype dtype) {
  return Arg{std::move(dims), std::move(values), false, dtype};
}

using Inputs = std::vector<Vec>;
using Reference = std::function<Vec(const Inputs&)>;
using Call = std::function<ampx_status(const std::vector<ampx_tensor>&, ampx_tensor*)>;

void check_op(const std::string& what, const std::vector<Arg>& args, const Call& call,
              const Reference& ref) {
  INFO(what);
  Ctx ctx;
  std::vector<Tensor> owned(args.size());
  std::vector<ampx_tensor> handles;
  Inputs values;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    owned[i].handle = a.dtype == AMPX_F32 ? make(ctx, a.dtype, a.dims, a.values, a.grad)
                                          : make_indices(ctx, a.dtype, a.dims, a.values);
    handles.push_back(owned[i].handle);
    values.push_back(a.values);
  }
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor out = nullptr;
  REQUIRE_MESSAGE(call(handles, &out) == AMPX_OK, last_error());
  REQUIRE(dtype_of(out) == AMPX_F32);
  const Vec want = ref(values);
  const Vec have = values_of(out);
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i)
    CHECK_MESSAGE(near(have[i], want[i], kValueRtol, kValueAtolOfMax * largest(want)), "output ", i,
                  ": ampx ", have[i], ", reference ", want[i]);

  Rng rng(0x9e57 + want.size());
  const Vec r = floats(rng, want.size(), -1, 1);
  Tensor weights(make(ctx, AMPX_F32, ampx_fixture::dims_of(out), r));
  ampx_tensor weighted = nullptr, loss = nullptr;
  REQUIRE_MESSAGE(ampx_mul(out, weights, &weighted) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_sum(weighted, &loss) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  auto objective = [&](const Inputs& v) {
    const Vec y = ref(v);
    double s = 0.0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
    return s;
  };
  for (size_t k = 0; k < args.size(); ++k) {
    INFO("input ", k);
    const ampx_tensor g = grad_or_null(handles[k]);
    if (!args[k].grad) {
      CHECK_MESSAGE(g == nullptr, "an input without requires_grad got a gradient");
      continue;
    }
    REQUIRE_MESSAGE(g != nullptr, "no gradient");
    const Vec grad = values_of(g);
    REQUIRE(grad.size() == values[k].size());
    Vec fd(grad.size());
    for (size_t i = 0; i < grad.size(); ++i) {
      Inputs moved = values;
      const double h = kStep * std::max(1.0, std::fabs(values[k][i]));
      moved[k][i] = values[k][i] + h;
      const double up = objective(moved);
      moved[k][i] = values[k][i] - h;
      fd[i] = (up - objective(moved)) / (2.0 * h);
    }
    const double atol = kGradAtolOfMax * largest(fd) + 1e-9;
    for (size_t i = 0; i < grad.size(); ++i)
      CHECK_MESSAGE(near(grad[i], fd[i], kGradRtol, atol), "gradient ", i, ": ampx ", grad[i],
                    ", finite differences ", fd[i]);
  }
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

// ---- double references (torch's definitions) ----------------------------------------

// Mean and biased variance of the n values at(0..n-1).
template <class At>
void moments(size_t n, At&& at, double* mean, double* var) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += at(i);
  *mean = s / static_cast<double>(n);
  double q = 0.0;
  for (size_t i = 0; i < n; ++i) q += (at(i) - *mean) * (at(i) - *mean);
  *var = q / static_cast<double>(n);
}

Vec ref_layer_norm(const Vec& x, const Vec* w, const Vec* b, size_t d, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double mean = 0.0, var = 0.0;
    moments(
        d, [&](size_t j) { return x[r * d + j]; }, &mean, &var);
    for (size_t j = 0; j < d; ++j)
      y[r * d + j] =
          (x[r * d + j] - mean) / std::sqrt(var + eps) * (w ? (*w)[j] : 1.0) + (b ? (*b)[j] : 0.0);
  }
  return y;
}

struct BnView {
  size_t n, c, l;
  size_t at(size_t i, size_t ch, size_t k) const { return (i * c + ch) * l + k; }
};

// Channel ch's mean and biased variance over its n * l values.
void channel_moments(const Vec& x, const BnView& v, size_t ch, double* mean, double* var) {
  moments(
      v.n * v.l, [&](size_t i) { return x[v.at(i / v.l, ch, i % v.l)]; }, mean, var);
}

// Batch norm with the batch's statistics, or with `stats` (running mean,
// running var) when given.
Vec ref_batch_norm(const Vec& x, const BnView& v, const Vec* w, const Vec* b, double eps,
                   const Vec* run_mean = nullptr, const Vec* run_var = nullptr) {
  Vec y(x.size());
  for (size_t ch = 0; ch < v.c; ++ch) {
    double mean = 0.0, var = 0.0;
    if (run_mean) {
      mean = (*run_mean)[ch];
      var = (*run_var)[ch];
    } else {
      channel_moments(x, v, ch, &mean, &var);
    }
    for (size_t i = 0; i < v.n; ++i)
      for (size_t k = 0; k < v.l; ++k) {
        const size_t p = v.at(i, ch, k);
        y[p] = (x[p] - mean) / std::sqrt(var + eps) * (w ? (*w)[ch] : 1.0) + (b ? (*b)[ch] : 0.0);
      }
  }
  return y;
}

// Row-major strides of `dims`.
Dims strides_of(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * dims[k];
  return s;
}

Vec ref_transpose(const Vec& x, const Dims& dims, size_t d0, size_t d1) {
  Dims out_dims = dims;
  std::swap(out_dims[d0], out_dims[d1]);
  const Dims in_strides = strides_of(dims), out_strides = strides_of(out_dims);
  Vec y(x.size());
  for (size_t o = 0; o < y.size(); ++o) {
    int64_t src = 0;
    for (size_t k = 0; k < out_dims.size(); ++k) {
      const int64_t i = static_cast<int64_t>(o) / out_strides[k] % out_dims[k];
      const size_t in_k = k == d0 ? d1 : k == d1 ? d0 : k;
      src += i * in_strides[in_k];
    }
    y[o] = x[static_cast<size_t>(src)];
  }
  return y;
}

Vec ref_concat(const Inputs& parts, const std::vector<Dims>& dims, size_t dim) {
  size_t outer = 1, inner = 1;
  for (size_t k = 0; k < dim; ++k) outer *= static_cast<size_t>(dims[0][k]);
  for (size_t k = dim + 1; k < dims[0].size(); ++k) inner *= static_cast<size_t>(dims[0][k]);
  Vec y;
  for (size_t o = 0; o < outer; ++o)
    for (size_t p = 0; p < parts.size(); ++p) {
      const size_t run = static_cast<size_t>(dims[p][dim]) * inner;
      y.insert(y.end(), parts[p].begin() + static_cast<std::ptrdiff_t>(o * run),
               parts[p].begin() + static_cast<std::ptrdiff_t>((o + 1) * run));
    }
  return y;
}

// log(1 + exp(z)) without overflow.
double softplus(double z) { return z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z)); }

// torch's -[t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))], written with
// log sigmoid(x) = -softplus(-x) and log(1 - sigmoid(x)) = -softplus(x).
Vec ref_bce_terms(const Vec& x, const Vec& t) {
  Vec terms(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    terms[i] = t[i] * softplus(-x[i]) + (1.0 - t[i]) * softplus(x[i]);
  return terms;
}

double sum_of(const Vec& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s;
}

// ---- contexts with a seed ------------------------------------------------------------

struct SeededCtx {
  ampx_context handle = nullptr;
  explicit SeededCtx(uint64_t seed, int32_t threads = 0) {
    ampx_context_options o = ampx_context_options_default();
    o.device_type = ampx_test::test_device();
    o.seed = seed;
    o.num_threads = threads;
    REQUIRE_MESSAGE(ampx_context_create(&o, &handle) == AMPX_OK, last_error());
  }
  ~SeededCtx() { ampx_context_release(handle); }
  SeededCtx(const SeededCtx&) = delete;
  SeededCtx& operator=(const SeededCtx&) = delete;
  operator ampx_context() const { return handle; }
};

// dropout(x) of a fresh tensor, as values.
Vec dropped(ampx_context ctx, const Vec& x, double p, int32_t training = 1) {
  Tensor t(make(ctx, AMPX_F32, {static_cast<int64_t>(x.size())}, x));
  Tensor y;
  REQUIRE_MESSAGE(ampx_dropout(t, p, training, y.out()) == AMPX_OK, last_error());
  return values_of(y);
}

struct Policy {
  ampx_autocast handle = nullptr;
  Policy(ampx_context ctx, ampx_dtype dtype) {
    ampx_autocast_options o = ampx_autocast_options_default();
    o.dtype = dtype;
    REQUIRE_MESSAGE(ampx_autocast_create(ctx, &o, &handle) == AMPX_OK, last_error());
    REQUIRE_MESSAGE(ampx_autocast_enter(handle) == AMPX_OK, last_error());
  }
  ~Policy() {
    CHECK(ampx_autocast_exit(handle) == AMPX_OK);
    ampx_autocast_release(handle);
  }
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;
};

// The relative size of one unit in the last place of a dtype's values.
double ulp_of(ampx_dtype dtype) {
  return dtype == AMPX_F16    ? std::ldexp(1.0, -10)
         : dtype == AMPX_BF16 ? std::ldexp(1.0, -7)
                              : std::ldexp(1.0, -23);
}

}  // namespace

// ---- Philox -------------------------------------------------------------------------------

TEST_CASE("ops more: Philox4x32-10 gives Random123's known answers") {
  // Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter
  // (4 words), key (2 words), expected output (4 words).
  struct Kat {
    uint32_t counter[4], key[2], expected[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const ampx::impl::math::Philox4x32 counter = {
        {k.counter[0], k.counter[1], k.counter[2], k.counter[3]}};
    const ampx::impl::math::PhiloxKey key = {{k.key[0], k.key[1]}};
    const ampx::impl::math::Philox4x32 out = ampx::impl::math::philox4x32_10(counter, key);
    for (int i = 0; i < 4; ++i) CHECK(out.v[i] == k.expected[i]);
  }
}

// ---- layer norm ------------------------------------------------------------------------------

TEST_CASE("ops more: layer_norm forward and gradients, with and without weight and bias") {
  Rng rng(31);
  for (const Dims& dims : {Dims{7}, Dims{3, 5}, Dims{2, 3, 4}}) {
    // A large eps once: its place under the square root shows.
    const double eps = dims.size() == 2 ? 0.5 : 1e-5;
    const size_t d = static_cast<size_t>(dims.back());
    const Dims row = {dims.back()};
    // 2: weight and bias; 1: weight only; 0: neither.
    for (const int affine : {2, 1, 0}) {
      std::vector<Arg> args = {input(dims, floats(rng, count_of(dims), -2, 3))};
      if (affine >= 1) args.push_back(input(row, floats(rng, d, 0.5, 1.5)));
      if (affine == 2) args.push_back(input(row, floats(rng, d, -1, 1)));
      const Call call = [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        return ampx_layer_norm(t[0], affine >= 1 ? t[1] : nullptr, affine == 2 ? t[2] : nullptr,
                               eps, out);
      };
      const Reference ref = [&](const Inputs& v) {
        return ref_layer_norm(v[0], affine >= 1 ? &v[1] : nullptr, affine == 2 ? &v[2] : nullptr, d,
                              eps);
      };
      const std::string what = "layer_norm of rank " + std::to_string(dims.size()) + ", affine " +
                               std::to_string(affine);
      check_op(what, args, call, ref);
      // The usual training case: the parameters need gradients, the data not.
      args[0].grad = false;
      if (affine > 0) check_op(what + ", x constant", args, call, ref);
    }
  }
}

TEST_CASE(
    "ops more: layer_norm keeps f16/bf16 outside autocast, statistics in fp32; f32 under it") {
  Rng rng(32);
  const double eps = 1e-5;
  const size_t d = 16;
  for (const ampx_dtype dtype : {AMPX_F16, AMPX_BF16}) {
    INFO(ampx_dtype_name(dtype));
    Ctx ctx;
    // A large offset: the row sums (~16000) cannot even be held in the
    // input's format to the precision the statistics need.
    Vec x = rng.vector(2 * d, 992, 1008);
    for (double& v : x) v = round_to(dtype, v);
    Tensor xt(make(ctx, dtype, {2, static_cast<int64_t>(d)}, x));
    Tensor y;
    REQUIRE_MESSAGE(ampx_layer_norm(xt, nullptr, nullptr, eps, y.out()) == AMPX_OK, last_error());
    CHECK(dtype_of(y) == dtype);
    const Vec want = ref_layer_norm(x, nullptr, nullptr, d, eps);
    const Vec have = values_of(y);
    for (size_t i = 0; i < want.size(); ++i)
      CHECK_MESSAGE(near(have[i], round_to(dtype, want[i]), ulp_of(dtype), 1e-3), "element ", i,
                    ": ", have[i], " vs ", want[i]);
    // fp32 class: under either policy the f16/bf16 input is lifted to f32.
    for (const ampx_dtype policy : {AMPX_F16, AMPX_BF16}) {
      Policy p(ctx, policy);
      Tensor z;
      REQUIRE_MESSAGE(ampx_layer_norm(xt, nullptr, nullptr, eps, z.out()) == AMPX_OK, last_error());
      CHECK(dtype_of(z) == AMPX_F32);
      const Vec lifted = values_of(z);
      for (size_t i = 0; i < want.size(); ++i)
        CHECK(near(lifted[i], want[i], kValueRtol, kValueAtolOfMax * largest(want)));
    }
  }
}

TEST_CASE("ops more: layer_norm errors") {
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {2, 3}, {1, 2, 3, 4, 5, 6}));
  Tensor w4(make(ctx, AMPX_F32, {4}, {1, 1, 1, 1}));
  Tensor w16(make(ctx, AMPX_F16, {3}, {1, 1, 1}));
  Tensor scalar(make(ctx, AMPX_F32, {}, {1}));
  Tensor out;
  CHECK_FAILS_WITH(ampx_layer_norm(x, w4, nullptr, 1e-5, out.out()), AMPX_ERR_SHAPE, "weight");
  CHECK_FAILS_WITH(ampx_layer_norm(x, nullptr, w4, 1e-5, out.out()), AMPX_ERR_SHAPE, "bias");
  CHECK_FAILS_WITH(ampx_layer_norm(scalar, nullptr, nullptr, 1e-5, out.out()), AMPX_ERR_SHAPE,
                   "dimension");
  CHECK_FAILS_WITH(ampx_layer_norm(x, w16, nullptr, 1e-5, out.out()), AMPX_ERR_DTYPE, "f16");
  CHECK_FAILS_WITH(ampx_layer_norm(x, nullptr, nullptr, -1.0, out.out()), AMPX_ERR_INVALID_ARGUMENT,
                   "eps");
  CHECK_FAILS_WITH(ampx_layer_norm(x, nullptr, nullptr, NAN, out.out()), AMPX_ERR_INVALID_ARGUMENT,
                   "eps");
  CHECK_FAILS_WITH(ampx_layer_norm(nullptr, nullptr, nullptr, 1e-5, out.out()),
                   AMPX_ERR_INVALID_ARGUMENT, "'x'");
  CHECK_FAILS_WITH(ampx_layer_norm(x, nullptr, nullptr, 1e-5, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "'out'");
}

// ---- batch norm ------------------------------------------------------------------------------

TEST_CASE("ops more: batch_norm gradients in training and evaluation, [N, C] and [N, C, L]") {
  Rng rng(41);
  const double momentum = 0.1;
  for (const Dims& dims : {Dims{6, 3}, Dims{3, 2, 4}}) {
    const double eps = dims.size() == 3 ? 0.5 : 1e-5;
    const BnView v{static_cast<size_t>(dims[0]), static_cast<size_t>(dims[1]),
                   dims.size() == 3 ? static_cast<size_t>(dims[2]) : 1};
    const Dims ch = {dims[1]};
    const Vec x = floats(rng, count_of(dims), -2, 3);
    const Vec w = floats(rng, v.c, 0.5, 1.5), b = floats(rng, v.c, -1, 1);
    const Vec rm = floats(rng, v.c, -0.5, 0.5), rv = floats(rng, v.c, 0.5, 2);
    for (const bool training : {true, false}) {
      for (const bool affine : {true, false}) {
        const std::string what = std::string(training ? "training" : "evaluation") +
                                 (affine ? ", affine" : ", no weight or bias") + ", rank " +
                                 std::to_string(dims.size());
        // Inputs: x, running mean, running var, then weight and bias.
        std::vector<Arg> args = {input(dims, x), constant(ch, rm), constant(ch, rv)};
        if (affine) {
          args.push_back(input(ch, w));
          args.push_back(input(ch, b));
        }
        const Call call = [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          return ampx_batch_norm(t[0], affine ? t[3] : nullptr, affine ? t[4] : nullptr, t[1], t[2],
                                 training, momentum, eps, out);
        };
        const Reference ref = [&](const Inputs& in) {
          const Vec* wp = affine ? &in[3] : nullptr;
          const Vec* bp = affine ? &in[4] : nullptr;
          return training ? ref_batch_norm(in[0], v, wp, bp, eps)
                          : ref_batch_norm(in[0], v, wp, bp, eps, &in[1], &in[2]);
        };
        check_op(what, args, call, ref);
      }
    }
    // Without running statistics evaluation uses the batch's (as torch).
    check_op(
        "evaluation without running statistics", {input(dims, x), input(ch, w), input(ch, b)},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          return ampx_batch_norm(t[0], t[1], t[2], nullptr, nullptr, 0, momentum, eps, out);
        },
        [&](const Inputs& in) { return ref_batch_norm(in[0], v, &in[1], &in[2], eps); });
  }
}

TEST_CASE("ops more: batch_norm updates running statistics as torch, and only while training") {
  Ctx ctx;
  // torch.nn.BatchNorm1d(1) on [1, 2, 3, 4] from running (0, 1), momentum
  // 0.1: batch mean 2.5, unbiased variance 5/3, so running_mean = 0.25 and
  // running_var = 0.9 + 0.1 * 5/3.
  {
    Tensor x(make(ctx, AMPX_F32, {4, 1}, {1, 2, 3, 4}));
    Tensor rm(make(ctx, AMPX_F32, {1}, {0}));
    Tensor rv(make(ctx, AMPX_F32, {1}, {1}));
    Tensor y;
    REQUIRE_MESSAGE(ampx_batch_norm(x, nullptr, nullptr, rm, rv, 1, 0.1, 1e-5, y.out()) == AMPX_OK,
                    last_error());
    CHECK(near(values_of(rm)[0], 0.25, 1e-7, 0));
    CHECK(near(values_of(rv)[0], 0.9 + 0.1 * 5.0 / 3.0, 2e-7, 0));
    // Normalised with the biased variance 1.25.
    CHECK(near(values_of(y)[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-6, 0));
  }
  // Several steps of random batches against the rule in double.
  Rng rng(42);
  const BnView v{5, 3, 2};
  Vec rm_ref = {0, 0, 0}, rv_ref = {1, 1, 1};
  Tensor rm(make(ctx, AMPX_F32, {3}, rm_ref));
  Tensor rv(make(ctx, AMPX_F32, {3}, rv_ref));
  for (const double momentum : {0.1, 0.5, 1.0, 0.0, 0.3}) {
    const Vec x = floats(rng, 30, -3, 5);
    Tensor xt(make(ctx, AMPX_F32, {5, 3, 2}, x));
    Tensor y;
    REQUIRE_MESSAGE(
        ampx_batch_norm(xt, nullptr, nullptr, rm, rv, 1, momentum, 1e-5, y.out()) == AMPX_OK,
        last_error());
    const double n = static_cast<double>(v.n * v.l);
    for (size_t ch = 0; ch < v.c; ++ch) {
      double mean = 0.0, var = 0.0;
      channel_moments(x, v, ch, &mean, &var);
      // The values are stored in fp32 between steps, as the tensors are.
      rm_ref[ch] = static_cast<float>((1 - momentum) * rm_ref[ch] + momentum * mean);
      rv_ref[ch] = static_cast<float>((1 - momentum) * rv_ref[ch] + momentum * var * n / (n - 1));
    }
    // A few fp32 roundings of values of size <= 5.
    const Vec have_m = values_of(rm), have_v = values_of(rv);
    for (size_t ch = 0; ch < v.c; ++ch) {
      CHECK(near(have_m[ch], rm_ref[ch], 1e-6, 1e-6));
      CHECK(near(have_v[ch], rv_ref[ch], 1e-6, 1e-6));
    }
  }
  // Evaluation reads them and changes nothing.
  const Vec before_m = values_of(rm), before_v = values_of(rv);
  Tensor xt(make(ctx, AMPX_F32, {5, 3, 2}, floats(rng, 30, -3, 5)));
  Tensor y;
  REQUIRE(ampx_batch_norm(xt, nullptr, nullptr, rm, rv, 0, 0.1, 1e-5, y.out()) == AMPX_OK);
  CHECK(values_of(rm) == before_m);
  CHECK(values_of(rv) == before_v);
}

TEST_CASE("ops more: batch_norm under f16/bf16 autocast keeps x's dtype and fp32 statistics") {
  Rng rng(43);
  const double eps = 1e-5, momentum = 0.1;
  const BnView v{4, 3, 5};
  for (const ampx_dtype dtype : {AMPX_F16, AMPX_BF16}) {
    INFO(ampx_dtype_name(dtype));
    Ctx ctx;
    // Around 1000: the statistics are only right when computed in fp32.
    Vec x = rng.vector(60, 992, 1008);
    for (double& e : x) e = round_to(dtype, e);
    const Vec w = floats(rng, 3, 0.5, 1.5), b = floats(rng, 3, -1, 1);
    Tensor xt(make(ctx, dtype, {4, 3, 5}, x, true));
    Tensor wt(make(ctx, AMPX_F32, {3}, w, true));
    Tensor bt(make(ctx, AMPX_F32, {3}, b, true));
    Tensor rm(make(ctx, AMPX_F32, {3}, {0, 0, 0}));
    Tensor rv(make(ctx, AMPX_F32, {3}, {1, 1, 1}));
    Tensor y, loss;
    {
      Policy p(ctx, dtype);
      REQUIRE_MESSAGE(ampx_batch_norm(xt, wt, bt, rm, rv, 1, momentum, eps, y.out()) == AMPX_OK,
                      last_error());
      REQUIRE(ampx_sum(y, loss.out()) == AMPX_OK);
    }
    CHECK(dtype_of(y) == dtype);
    CHECK(dtype_of(rm) == AMPX_F32);
    CHECK(dtype_of(rv) == AMPX_F32);
    const Vec want = ref_batch_norm(x, v, &w, &b, eps);
    const Vec have = values_of(y);
    for (size_t i = 0; i < want.size(); ++i)
      CHECK_MESSAGE(near(have[i], round_to(dtype, want[i]), ulp_of(dtype), 1e-3), "element ", i);
    const Vec have_m = values_of(rm), have_v = values_of(rv);
    for (size_t ch = 0; ch < 3; ++ch) {
      double mean = 0.0, var = 0.0;
      channel_moments(x, v, ch, &mean, &var);
      CHECK(near(have_m[ch], momentum * mean, 1e-6, 0));
      CHECK(near(have_v[ch], 0.9 + momentum * var * 20.0 / 19.0, 1e-6, 0));
    }
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(dtype_of(grad_or_null(xt)) == dtype);
    CHECK(dtype_of(grad_or_null(wt)) == AMPX_F32);
    // d sum(y) / d bias = N * L per channel, exactly.
    CHECK(values_of(grad_or_null(bt)) == Vec{20, 20, 20});
  }
}

TEST_CASE("ops more: batch_norm errors") {
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {4, 3}, Vec(12, 1.0)));
  Tensor one_row(make(ctx, AMPX_F32, {1, 3}, Vec(3, 1.0)));
  Tensor flat(make(ctx, AMPX_F32, {12}, Vec(12, 1.0)));
  Tensor c3(make(ctx, AMPX_F32, {3}, {1, 1, 1}));
  Tensor c4(make(ctx, AMPX_F32, {4}, {1, 1, 1, 1}));
  Tensor h3(make(ctx, AMPX_F16, {3}, {1, 1, 1}));
  Tensor out;
  CHECK_FAILS_WITH(
      ampx_batch_norm(flat, nullptr, nullptr, nullptr, nullptr, 1, 0.1, 1e-5, out.out()),
      AMPX_ERR_SHAPE, "[N, C]");
  CHECK_FAILS_WITH(ampx_batch_norm(x, c4, nullptr, nullptr, nullptr, 1, 0.1, 1e-5, out.out()),
                   AMPX_ERR_SHAPE, "weight");
  CHECK_FAILS_WITH(ampx_batch_norm(x, h3, nullptr, nullptr, nullptr, 1, 0.1, 1e-5, out.out()),
                   AMPX_ERR_DTYPE, "f32");
  CHECK_FAILS_WITH(ampx_batch_norm(x, nullptr, nullptr, c3, h3, 1, 0.1, 1e-5, out.out()),
                   AMPX_ERR_DTYPE, "running_var");
  CHECK_FAILS_WITH(ampx_batch_norm(x, nullptr, nullptr, c3, nullptr, 1, 0.1, 1e-5, out.out()),
                   AMPX_ERR_INVALID_ARGUMENT, "running_var");
  CHECK_FAILS_WITH(
      ampx_batch_norm(one_row, nullptr, nullptr, nullptr, nullptr, 1, 0.1, 1e-5, out.out()),
      AMPX_ERR_SHAPE, "more than one value");
  CHECK_FAILS_WITH(ampx_batch_norm(x, nullptr, nullptr, c3, c3, 1, 1.5, 1e-5, out.out()),
                   AMPX_ERR_INVALID_ARGUMENT, "momentum");
  CHECK_FAILS_WITH(ampx_batch_norm(x, nullptr, nullptr, c3, c3, 1, 0.1, -1e-5, out.out()),
                   AMPX_ERR_INVALID_ARGUMENT, "eps");
  // Refused calls leave the running statistics as they were.
  CHECK(values_of(c3) == Vec{1, 1, 1});
  // One row is fine in evaluation.
  CHECK(ampx_batch_norm(one_row, nullptr, nullptr, c3, c3, 0, 0.1, 1e-5, out.out()) == AMPX_OK);
}

// ---- dropout ------------------------------------------------------------------------------------

TEST_CASE("ops more: dropout masks are the documented Philox stream of the seed and call count") {
  const uint64_t seed = 0x0123456789abcdefull;
  const double p = 0.375;
  const size_t n = 1001;  // not a multiple of four: the last block is partial
  SeededCtx ctx(seed);
  const Vec ones(n, 1.0);
  const double scale = static_cast<float>(1.0 / (1.0 - p));
  // The threshold floor(p * 2^32) and the counter layout ampx.h's dropout
  // documents, written out independently: block i / 4, lane i % 4, the
  // call number in the counter's upper words, the seed as the key.
  const auto threshold = static_cast<uint32_t>(std::floor(p * 4294967296.0));
  for (uint32_t call = 0; call < 3; ++call) {
    const Vec y = dropped(ctx, ones, p);
    for (size_t i = 0; i < n; ++i) {
      const ampx::impl::math::Philox4x32 counter = {{static_cast<uint32_t>(i / 4), 0, call, 0}};
      const ampx::impl::math::PhiloxKey key = {
          {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
      const uint32_t word = ampx::impl::math::philox4x32_10(counter, key).v[i % 4];
      CHECK_MESSAGE(y[i] == (word >= threshold ? scale : 0.0), "call ", call, ", element ", i);
    }
  }
}

TEST_CASE("ops more: dropout is reproducible per seed and call sequence, thread count aside") {
  Rng rng(51);
  const Vec x = floats(rng, 40000, 0.5, 2);
  SeededCtx a(7, 1), b(7, 4), c(8);
  const Vec a1 = dropped(a, x, 0.5), a2 = dropped(a, x, 0.5);
  // The same seed and the same calls: the same masks, however many threads.
  CHECK(dropped(b, x, 0.5) == a1);
  CHECK(dropped(b, x, 0.5) == a2);
  // Each call draws new numbers; another seed draws others.
  CHECK(a1 != a2);
  CHECK(dropped(c, x, 0.5) != a1);
  // Ops that are not random (p == 0, evaluation, other ops) take nothing
  // from the stream.
  SeededCtx d(7);
  CHECK(dropped(d, x, 0.0) == x);
  CHECK(dropped(d, x, 0.5, 0) == x);
  Tensor t(make(d, AMPX_F32, {3}, {1, 2, 3}));
  Tensor s;
  REQUIRE(ampx_relu(t, s.out()) == AMPX_OK);
  CHECK(dropped(d, x, 0.5) == a1);
}

TEST_CASE("ops more: dropout keeps 1 - p of the elements, scaled by 1 / (1 - p)") {
  const size_t n = size_t{1} << 16;
  SeededCtx ctx(2024);
  for (const double p : {0.1, 0.5, 0.9}) {
    INFO("p = ", p);
    const Vec y = dropped(ctx, Vec(n, 1.0), p);
    const double scale = static_cast<float>(1.0 / (1.0 - p));
    size_t kept = 0;
    for (double v : y) {
      REQUIRE((v == 0.0 || v == scale));
      kept += v != 0.0;
    }
    // Kept ~ Binomial(n, 1 - p): sd = sqrt(n p (1 - p)) <= 128 here. The
    // bound is 6 sd, which a correct generator exceeds with probability
    // 2e-9 (the seed is fixed, so the outcome is too; a mask that keeps
    // 1 - p +- 1.2 % or worse fails).
    const double sd = std::sqrt(static_cast<double>(n) * p * (1.0 - p));
    CHECK(std::fabs(static_cast<double>(kept) - static_cast<double>(n) * (1.0 - p)) <= 6.0 * sd);
  }
}

TEST_CASE("ops more: dropout's gradient uses the forward's mask; p == 0 is the identity") {
  Rng rng(52);
  const size_t n = 999;
  const Vec xv = floats(rng, n, 0.5, 2), rv = floats(rng, n, 0.5, 2);
  for (const ampx_dtype dtype : {AMPX_F32, AMPX_F16}) {
    INFO(ampx_dtype_name(dtype));
    SeededCtx ctx(3);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    Tensor x(make(ctx, dtype, {static_cast<int64_t>(n)}, xv, true));
    Tensor r(make(ctx, dtype, {static_cast<int64_t>(n)}, rv));
    // A dropout between forward and backward must not disturb the mask.
    ampx_tensor y = nullptr, other = nullptr, weighted = nullptr, loss = nullptr;
    REQUIRE_MESSAGE(ampx_dropout(x, 0.25, 1, &y) == AMPX_OK, last_error());
    REQUIRE(ampx_dropout(x, 0.25, 1, &other) == AMPX_OK);
    REQUIRE(ampx_mul(y, r, &weighted) == AMPX_OK);
    REQUIRE(ampx_sum(weighted, &loss) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(dtype_of(y) == dtype);
    const Vec yv = values_of(y), g = values_of(grad_or_null(x));
    const double scale = static_cast<float>(1.0 / 0.75);
    for (size_t i = 0; i < n; ++i) {
      const double rr = round_to(dtype, rv[i]), xx = round_to(dtype, xv[i]);
      const bool kept = yv[i] != 0.0;
      CHECK(yv[i] == (kept ? round_to(dtype, static_cast<float>(xx * scale)) : 0.0));
      CHECK(g[i] == (kept ? round_to(dtype, static_cast<float>(rr * scale)) : 0.0));
    }
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
  // p == 0 and evaluation: the output is x (sharing its memory) and the
  // gradient passes through unchanged.
  for (const int mode : {0, 1}) {
    INFO(std::string(mode ? "p == 0" : "evaluation"));
    check_op(
        "dropout identity", {input({3, 4}, floats(rng, 12, -2, 2))},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          const ampx_status s = ampx_dropout(t[0], mode ? 0.0 : 0.5, mode, out);
          void *in_data = nullptr, *out_data = nullptr;
          if (s == AMPX_OK) {
            REQUIRE(ampx_tensor_data(t[0], &in_data) == AMPX_OK);
            REQUIRE(ampx_tensor_data(*out, &out_data) == AMPX_OK);
            CHECK(in_data == out_data);
          }
          return s;
        },
        [](const Inputs& v) { return v[0]; });
  }
}

TEST_CASE("ops more: dropout errors") {
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {4}, {1, 2, 3, 4}));
  Tensor idx(make_indices(ctx, AMPX_I32, {2}, {0, 1}));
  Tensor out;
  for (const double p : {-0.1, 1.0, 1.5, static_cast<double>(NAN)})
    CHECK_FAILS_WITH(ampx_dropout(x, p, 1, out.out()), AMPX_ERR_INVALID_ARGUMENT, "'p'");
  CHECK_FAILS_WITH(ampx_dropout(idx, 0.5, 1, out.out()), AMPX_ERR_DTYPE, "i32");
}

// ---- embedding ----------------------------------------------------------------------------------

TEST_CASE("ops more: embedding gathers rows and scatter-adds their gradients") {
  Rng rng(61);
  const int64_t rows = 5, cols = 3;
  for (const ampx_dtype index_type : {AMPX_I32, AMPX_I64}) {
    for (const Dims& idx_dims : {Dims{4}, Dims{2, 3}, Dims{}}) {
      Vec idx(count_of(idx_dims));
      for (double& i : idx) i = static_cast<double>(rng.next() % rows);
      if (idx.size() > 2) idx[1] = idx[0];  // a repeated row sums two gradients
      check_op(
          "embedding, indices " + std::string(ampx_dtype_name(index_type)) + " of rank " +
              std::to_string(idx_dims.size()),
          {input({rows, cols}, floats(rng, rows * cols, -2, 2)),
           indices_arg(idx_dims, idx, index_type)},
          [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
            return ampx_embedding(t[0], t[1], out);
          },
          [&](const Inputs& v) {
            Vec y;
            for (double i : v[1])
              for (int64_t j = 0; j < cols; ++j)
                y.push_back(v[0][static_cast<size_t>(i) * cols + static_cast<size_t>(j)]);
            return y;
          });
    }
  }
}

TEST_CASE("ops more: embedding's output shape, f16 weights, a deterministic gradient sum") {
  Rng rng(62);
  // Many repeats of few rows, summed in the same order whatever the number
  // of threads: bit-identical gradients.
  const int64_t rows = 4, cols = 64, count = 3000;
  Vec idx(count);
  for (double& i : idx) i = static_cast<double>(rng.next() % rows);
  const Vec w = floats(rng, rows * cols, -1, 1), r = floats(rng, count * cols, -1, 1);
  std::vector<Vec> grads;
  for (const int32_t threads : {1, 4}) {
    Ctx ctx(threads);
    Tensor wt(make(ctx, AMPX_F16, {rows, cols}, w, true));
    Tensor it(make_indices(ctx, AMPX_I64, {count / 100, 100}, idx));
    Tensor rt(make(ctx, AMPX_F16, {count / 100, 100, cols}, r));
    Tensor y, weighted, loss;
    REQUIRE_MESSAGE(ampx_embedding(wt, it, y.out()) == AMPX_OK, last_error());
    CHECK(ampx_fixture::dims_of(y) == Dims{count / 100, 100, cols});
    CHECK(dtype_of(y) == AMPX_F16);
    REQUIRE(ampx_mul(y, rt, weighted.out()) == AMPX_OK);
    REQUIRE(ampx_sum(weighted, loss.out()) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(dtype_of(grad_or_null(wt)) == AMPX_F16);
    grads.push_back(values_of(grad_or_null(wt)));
  }
  CHECK(grads[0] == grads[1]);
  // Each row's gradient is the sum of its r rows (f16 products, summed in
  // fp32, rounded once to f16).
  Vec want(rows * cols, 0.0);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < cols; ++j)
      want[static_cast<size_t>(idx[i]) * cols + j] += round_to(AMPX_F16, r[i * cols + j]);
  for (size_t k = 0; k < want.size(); ++k)
    CHECK(near(grads[0][k], want[k], ulp_of(AMPX_F16), 1e-3));
}

TEST_CASE("ops more: embedding errors") {
  Ctx ctx;
  Tensor w(make(ctx, AMPX_F32, {3, 2}, {1, 2, 3, 4, 5, 6}));
  Tensor flat(make(ctx, AMPX_F32, {6}, {1, 2, 3, 4, 5, 6}));
  Tensor out;
  for (const double bad : {3.0, -1.0}) {
    for (const ampx_dtype type : {AMPX_I32, AMPX_I64}) {
      Tensor idx(make_indices(ctx, type, {3}, {0, bad, 1}));
      // A GPU checks the indices on the device and reports a bad one at the
      // next call that waits for it (ampx.h, ampx_embedding).
      if (ampx_test::test_device() == AMPX_DEVICE_CUDA) {
        CHECK(ampx_embedding(w, idx, out.out()) == AMPX_OK);
        CHECK_FAILS_WITH(ampx_context_synchronize(ctx), AMPX_ERR_INVALID_ARGUMENT, "indices[1]");
        CHECK(ampx_context_synchronize(ctx) == AMPX_OK);
      } else {
        CHECK_FAILS_WITH(ampx_embedding(w, idx, out.out()), AMPX_ERR_INVALID_ARGUMENT,
                         "indices[1]");
      }
    }
  }
  Tensor good(make_indices(ctx, AMPX_I64, {2}, {0, 2}));
  Tensor float_idx(make(ctx, AMPX_F32, {2}, {0, 1}));
  CHECK_FAILS_WITH(ampx_embedding(w, float_idx, out.out()), AMPX_ERR_DTYPE, "indices");
  CHECK_FAILS_WITH(ampx_embedding(flat, good, out.out()), AMPX_ERR_SHAPE, "[V, D]");
  const Dims eight(8, 1);
  Tensor deep(make_indices(ctx, AMPX_I64, eight, {0}));
  CHECK_FAILS_WITH(ampx_embedding(w, deep, out.out()), AMPX_ERR_SHAPE, "dimensions");
  CHECK(ampx_embedding(w, good, out.out()) == AMPX_OK);
  CHECK(values_of(out) == Vec{1, 2, 5, 6});
}

// ---- reshape, transpose, concat -----------------------------------------------------------------

TEST_CASE("ops more: reshape infers -1, shares memory, and copies its gradient back") {
  Rng rng(71);
  struct Case {
    Dims asked, expected;
  };
  const Case cases[] = {{{4, -1}, {4, 6}},
                        {{-1}, {24}},
                        {{2, -1, 3}, {2, 4, 3}},
                        {{3, 2, 4}, {3, 2, 4}},
                        {{1, 24, 1}, {1, 24, 1}}};
  const Vec x = floats(rng, 24, -2, 2);
  for (const Case& c : cases) {
    Ctx ctx;
    Tensor xt(make(ctx, AMPX_F32, {2, 3, 4}, x));
    Tensor y;
    REQUIRE_MESSAGE(
        ampx_reshape(xt, static_cast<int32_t>(c.asked.size()), c.asked.data(), y.out()) == AMPX_OK,
        last_error());
    CHECK(ampx_fixture::dims_of(y) == c.expected);
    void *in_data = nullptr, *out_data = nullptr;
    REQUIRE(ampx_tensor_data(xt, &in_data) == AMPX_OK);
    REQUIRE(ampx_tensor_data(y, &out_data) == AMPX_OK);
    CHECK(in_data == out_data);
    check_op(
        "reshape", {input({2, 3, 4}, x)},
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          return ampx_reshape(t[0], static_cast<int32_t>(c.asked.size()), c.asked.data(), out);
        },
        [](const Inputs& v) { return v[0]; });
  }
  // One tensor reshaped twice and both used: gradients meet in x.
  check_op(
      "two reshapes of one tensor", {input({2, 3}, floats(rng, 6, -2, 2))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        const int64_t flat[] = {6}, back[] = {3, 2};
        ampx_tensor a = nullptr, b = nullptr, c = nullptr, sq = nullptr;
        ampx_status s = ampx_tanh(t[0], &a);
        if (s == AMPX_OK) s = ampx_reshape(a, 1, flat, &b);
        if (s == AMPX_OK) s = ampx_reshape(a, 2, back, &c);
        if (s == AMPX_OK) s = ampx_reshape(c, 1, flat, &c);
        if (s == AMPX_OK) s = ampx_mul(b, c, &sq);
        return s != AMPX_OK ? s : ampx_add(sq, b, out);
      },
      [](const Inputs& v) {
        Vec y(6);
        for (size_t i = 0; i < 6; ++i)
          y[i] = std::tanh(v[0][i]) * std::tanh(v[0][i]) + std::tanh(v[0][i]);
        return y;
      });
  // Integer tensors reshape too; a scalar's shape is ndim 0.
  Ctx ctx;
  Tensor idx(make_indices(ctx, AMPX_I32, {2, 2}, {0, 1, 2, 3}));
  Tensor one(make(ctx, AMPX_F32, {1, 1}, {5}));
  Tensor y;
  const int64_t four[] = {4};
  CHECK(ampx_reshape(idx, 1, four, y.out()) == AMPX_OK);
  CHECK(ampx_fixture::dims_of(y) == Dims{4});
  CHECK(ampx_reshape(one, 0, nullptr, y.out()) == AMPX_OK);
  CHECK(ampx_fixture::dims_of(y).empty());
}

TEST_CASE("ops more: reshape errors") {
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {2, 3, 4}, Vec(24, 1.0)));
  Tensor out;
  struct Bad {
    Dims shape;
    const char* part;
  };
  const Bad bads[] = {{{7, 4}, "24 elements"}, {{5, -1}, "-1"},
                      {{-1, -1}, "only one"},  {{-2, 12}, "only one"},
                      {{0, -1}, "-1"},         {{1 << 20, 1 << 20, 1 << 20, 1 << 20}, "too large"}};
  for (const Bad& b : bads)
    CHECK_FAILS_WITH(
        ampx_reshape(x, static_cast<int32_t>(b.shape.size()), b.shape.data(), out.out()),
        AMPX_ERR_SHAPE, b.part);
  const Dims nine(9, 1);
  CHECK_FAILS_WITH(ampx_reshape(x, 9, nine.data(), out.out()), AMPX_ERR_SHAPE, "ndim");
  CHECK_FAILS_WITH(ampx_reshape(x, 2, nullptr, out.out()), AMPX_ERR_INVALID_ARGUMENT, "shape");
}

TEST_CASE("ops more: transpose shapes, values and gradients") {
  Rng rng(72);
  struct Case {
    Dims dims;
    int32_t d0, d1;
    Dims expected;
  };
  const Case cases[] = {{{3, 4}, 0, 1, {4, 3}},
                        {{2, 3, 4}, 0, 2, {4, 3, 2}},
                        {{2, 3, 4}, -1, -2, {2, 4, 3}},
                        {{2, 3, 4}, 1, 1, {2, 3, 4}},
                        {{2, 1, 3, 2}, 3, 0, {2, 1, 3, 2}},
                        {{5}, 0, -1, {5}}};
  for (const Case& c : cases) {
    const size_t nd = c.dims.size();
    const size_t d0 = static_cast<size_t>(c.d0 < 0 ? c.d0 + static_cast<int32_t>(nd) : c.d0);
    const size_t d1 = static_cast<size_t>(c.d1 < 0 ? c.d1 + static_cast<int32_t>(nd) : c.d1);
    const Call call = [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
      const ampx_status s = ampx_transpose(t[0], c.d0, c.d1, out);
      if (s == AMPX_OK) CHECK(ampx_fixture::dims_of(*out) == c.expected);
      return s;
    };
    check_op("transpose", {input(c.dims, floats(rng, count_of(c.dims), -2, 2))}, call,
             [&](const Inputs& v) { return ref_transpose(v[0], c.dims, d0, d1); });
  }
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {2, 3}, Vec(6, 1.0)));
  Tensor scalar(make(ctx, AMPX_F32, {}, {1}));
  Tensor out;
  CHECK_FAILS_WITH(ampx_transpose(x, 0, 2, out.out()), AMPX_ERR_INVALID_ARGUMENT, "dim1");
  CHECK_FAILS_WITH(ampx_transpose(x, -3, 1, out.out()), AMPX_ERR_INVALID_ARGUMENT, "dim0");
  CHECK_FAILS_WITH(ampx_transpose(scalar, 0, 0, out.out()), AMPX_ERR_INVALID_ARGUMENT, "dim0");
}

TEST_CASE("ops more: concat along each dimension, gradients to each input's slice") {
  Rng rng(73);
  for (const int32_t dim : {0, 1, 2, -1}) {
    const size_t d = static_cast<size_t>(dim < 0 ? dim + 3 : dim);
    std::vector<Dims> dims;
    std::vector<Arg> args;
    for (const int64_t extent : {2, 1, 3}) {
      Dims dd = {2, 3, 2};
      dd[d] = extent;
      dims.push_back(dd);
      args.push_back(input(dd, floats(rng, count_of(dd), -2, 2)));
    }
    args[1].grad = false;  // a constant in the middle gets no gradient
    check_op(
        "concat along " + std::to_string(dim), args,
        [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
          const ampx_status s = ampx_concat(t.data(), t.size(), dim, out);
          Dims expected = {2, 3, 2};
          expected[d] = 6;
          if (s == AMPX_OK) CHECK(ampx_fixture::dims_of(*out) == expected);
          return s;
        },
        [&](const Inputs& v) { return ref_concat(v, dims, d); });
  }
  // One input: a copy.
  check_op(
      "concat of one", {input({2, 2}, floats(rng, 4, -2, 2))},
      [](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
        return ampx_concat(t.data(), 1, 0, out);
      },
      [](const Inputs& v) { return v[0]; });
}

TEST_CASE("ops more: concat promotes floating types, joins integers, and refuses mismatches") {
  Ctx ctx;
  Tensor h(make(ctx, AMPX_F16, {1, 2}, {0.5, 1.5}));
  Tensor f(make(ctx, AMPX_F32, {2, 2}, {1.0 + std::ldexp(1.0, -20), 2, 3, 4}));
  Tensor i1(make_indices(ctx, AMPX_I64, {2}, {1, 2}));
  Tensor i2(make_indices(ctx, AMPX_I64, {1}, {3}));
  Tensor i32(make_indices(ctx, AMPX_I32, {1}, {3}));
  Tensor f3(make(ctx, AMPX_F32, {3, 3}, Vec(9, 0.0)));
  Tensor scalar(make(ctx, AMPX_F32, {}, {1}));
  Tensor out;
  const ampx_tensor mixed[] = {h, f};
  REQUIRE_MESSAGE(ampx_concat(mixed, 2, 0, out.out()) == AMPX_OK, last_error());
  CHECK(dtype_of(out) == AMPX_F32);
  CHECK(values_of(out) == Vec{0.5, 1.5, 1.0 + std::ldexp(1.0, -20), 2, 3, 4});
  {
    Policy p(ctx, AMPX_F16);  // promote: not lowered under autocast
    REQUIRE(ampx_concat(mixed, 2, 0, out.out()) == AMPX_OK);
    CHECK(dtype_of(out) == AMPX_F32);
  }
  const ampx_tensor ints[] = {i1, i2};
  REQUIRE_MESSAGE(ampx_concat(ints, 2, 0, out.out()) == AMPX_OK, last_error());
  int64_t joined[3] = {};
  REQUIRE(ampx_tensor_to_host(out, joined, sizeof joined) == AMPX_OK);
  CHECK((joined[0] == 1 && joined[1] == 2 && joined[2] == 3));

  Tensor f2(make(ctx, AMPX_F32, {2}, {1, 2}));
  const ampx_tensor float_int[] = {f2, i1};
  const ampx_tensor two_ints[] = {i1, i32};
  const ampx_tensor mismatch[] = {f, f3};
  const ampx_tensor scalars[] = {scalar, scalar};
  const ampx_tensor with_null[] = {f, nullptr};
  CHECK_FAILS_WITH(ampx_concat(float_int, 2, 0, out.out()), AMPX_ERR_DTYPE, "tensors[1]");
  CHECK_FAILS_WITH(ampx_concat(two_ints, 2, 0, out.out()), AMPX_ERR_DTYPE, "tensors[1]");
  CHECK_FAILS_WITH(ampx_concat(mismatch, 2, 0, out.out()), AMPX_ERR_SHAPE, "tensors[1]");
  CHECK_FAILS_WITH(ampx_concat(scalars, 2, 0, out.out()), AMPX_ERR_SHAPE, "dimension");
  CHECK_FAILS_WITH(ampx_concat(mixed, 2, 2, out.out()), AMPX_ERR_INVALID_ARGUMENT, "dim");
  CHECK_FAILS_WITH(ampx_concat(mixed, 0, 0, out.out()), AMPX_ERR_INVALID_ARGUMENT, "count");
  CHECK_FAILS_WITH(ampx_concat(nullptr, 2, 0, out.out()), AMPX_ERR_INVALID_ARGUMENT, "tensors");
  CHECK_FAILS_WITH(ampx_concat(with_null, 2, 0, out.out()), AMPX_ERR_INVALID_ARGUMENT,
                   "tensors[1]");
}

// ---- bce_with_logits ----------------------------------------------------------------------------

TEST_CASE("ops more: bce_with_logits, mean and sum, gradients to logits and targets") {
  Rng rng(81);
  for (const ampx_reduction reduction : {AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM}) {
    for (const bool target_grad : {false, true}) {
      const bool mean = reduction == AMPX_REDUCTION_MEAN;
      const Dims dims = {3, 4};
      std::vector<Arg> args = {input(dims, floats(rng, 12, -4, 4)),
                               input(dims, floats(rng, 12, 0, 1))};
      args[1].grad = target_grad;
      check_op(
          std::string("bce_with_logits ") + (mean ? "mean" : "sum") +
              (target_grad ? ", targets with gradient" : ""),
          args,
          [&](const std::vector<ampx_tensor>& t, ampx_tensor* out) {
            return ampx_bce_with_logits(t[0], t[1], reduction, out);
          },
          [&](const Inputs& v) {
            const double s = sum_of(ref_bce_terms(v[0], v[1]));
            return Vec{mean ? s / static_cast<double>(v[0].size()) : s};
          });
    }
  }
}

TEST_CASE("ops more: bce_with_logits stays finite and accurate at |x| = 100") {
  Ctx ctx;
  // Where the textbook form overflows or takes log(0): exp(100) is inf in
  // fp32 and 1 - sigmoid(100) rounds to 0.
  const Vec x = {100, -100, 100, -100, 100, -100};
  const Vec t = {1, 0, 0, 1, 0.25, 0.75};
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("x = ", x[i], ", t = ", t[i]);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    Tensor xt(make(ctx, AMPX_F32, {1}, {x[i]}, true));
    Tensor tt(make(ctx, AMPX_F32, {1}, {t[i]}, true));
    ampx_tensor loss = nullptr;
    REQUIRE_MESSAGE(ampx_bce_with_logits(xt, tt, AMPX_REDUCTION_SUM, &loss) == AMPX_OK,
                    last_error());
    const double want = ref_bce_terms({x[i]}, {t[i]})[0];
    const double have = values_of(loss)[0];
    // Absolute at the tiny losses (3.7e-44, below fp32's normal range),
    // relative at the large ones (up to 100).
    CHECK_MESSAGE(near(have, want, 1e-6, 1e-30), have, " vs ", want);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    const double gx = values_of(grad_or_null(xt))[0], gt = values_of(grad_or_null(tt))[0];
    // d/dx = sigmoid(x) - t, d/dt = -x.
    const double sigmoid =
        x[i] > 0 ? 1.0 / (1.0 + std::exp(-x[i])) : std::exp(x[i]) / (1.0 + std::exp(x[i]));
    CHECK(std::isfinite(gx));
    CHECK(near(gx, sigmoid - t[i], 1e-6, 1e-30));
    CHECK(gt == -x[i]);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
}

TEST_CASE("ops more: bce_with_logits errors and the mean of nothing") {
  Ctx ctx;
  Tensor a(make(ctx, AMPX_F32, {2, 2}, {1, 2, 3, 4}));
  Tensor b(make(ctx, AMPX_F32, {4}, {0, 1, 0, 1}));
  Tensor h(make(ctx, AMPX_F16, {2, 2}, {0, 1, 0, 1}));
  Tensor out;
  CHECK_FAILS_WITH(ampx_bce_with_logits(a, b, AMPX_REDUCTION_MEAN, out.out()), AMPX_ERR_SHAPE,
                   "targets");
  CHECK_FAILS_WITH(ampx_bce_with_logits(a, h, AMPX_REDUCTION_MEAN, out.out()), AMPX_ERR_DTYPE,
                   "f16");
  CHECK_FAILS_WITH(ampx_bce_with_logits(a, a, static_cast<ampx_reduction>(0), out.out()),
                   AMPX_ERR_INVALID_ARGUMENT, "reduction");
  {
    Policy p(ctx, AMPX_BF16);  // fp32 class: both lifted to f32, no dtype clash
    REQUIRE_MESSAGE(ampx_bce_with_logits(a, h, AMPX_REDUCTION_SUM, out.out()) == AMPX_OK,
                    last_error());
    CHECK(dtype_of(out) == AMPX_F32);
    CHECK(near(values_of(out)[0], sum_of(ref_bce_terms({1, 2, 3, 4}, {0, 1, 0, 1})), 1e-6, 0));
  }
  const int64_t empty = 0;
  Tensor e;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 1, &empty, e.out()) == AMPX_OK);
  REQUIRE(ampx_bce_with_logits(e, e, AMPX_REDUCTION_MEAN, out.out()) == AMPX_OK);
  CHECK(std::isnan(values_of(out)[0]));
  REQUIRE(ampx_bce_with_logits(e, e, AMPX_REDUCTION_SUM, out.out()) == AMPX_OK);
  CHECK(values_of(out)[0] == 0.0);
}

// ---- empty tensors -----------------------------------------------------------------------------

TEST_CASE("ops more: empty inputs give empty outputs and zero parameter gradients") {
  Ctx ctx;
  Tensor w(make(ctx, AMPX_F32, {3}, {1, 2, 3}, true));
  Tensor b(make(ctx, AMPX_F32, {3}, {1, 2, 3}, true));
  Tensor stats(make(ctx, AMPX_F32, {3}, {0.5, 1, 2}));
  Tensor table(make(ctx, AMPX_F32, {2, 3}, Vec(6, 1.0), true));
  const int64_t no_rows[] = {0, 3}, no_indices[] = {0};
  Tensor x, idx;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 2, no_rows, x.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_I64, 1, no_indices, idx.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_set_requires_grad(x, 1) == AMPX_OK);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor parts[4] = {}, joined = nullptr, loss = nullptr;
  REQUIRE_MESSAGE(ampx_layer_norm(x, w, b, 1e-5, &parts[0]) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_batch_norm(x, w, b, stats, stats, 0, 0.1, 1e-5, &parts[1]) == AMPX_OK,
                  last_error());
  REQUIRE_MESSAGE(ampx_embedding(table, idx, &parts[2]) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_dropout(parts[2], 0.5, 1, &parts[3]) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_concat(parts, 4, 0, &joined) == AMPX_OK, last_error());
  CHECK(ampx_fixture::dims_of(joined) == Dims{0, 3});
  REQUIRE(ampx_transpose(joined, 0, 1, &joined) == AMPX_OK);
  CHECK(ampx_fixture::dims_of(joined) == Dims{3, 0});
  REQUIRE(ampx_sum(joined, &loss) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  // Two ops each add an empty sum into w and b.
  CHECK(values_of(grad_or_null(w)) == Vec{0, 0, 0});
  CHECK(values_of(grad_or_null(b)) == Vec{0, 0, 0});
  CHECK(values_of(grad_or_null(table)) == Vec(6, 0.0));
  CHECK(ampx_fixture::dims_of(grad_or_null(x)) == Dims{0, 3});
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

// ---- autocast classes
// -----------------------------------------------------------------------------

TEST_CASE("ops more: autocast classes of the new ops") {
  Ctx ctx;
  ampx_autocast policy = nullptr;
  REQUIRE(ampx_autocast_create(ctx, nullptr, &policy) == AMPX_OK);
  const std::pair<const char*, ampx_op_class> table[] = {
      {"layer_norm", AMPX_OP_FP32}, {"bce_with_logits", AMPX_OP_FP32}, {"concat", AMPX_OP_PROMOTE},
      {"batch_norm", AMPX_OP_KEEP}, {"dropout", AMPX_OP_KEEP},         {"embedding", AMPX_OP_KEEP},
      {"reshape", AMPX_OP_KEEP},    {"transpose", AMPX_OP_KEEP}};
  for (const auto& e : table) {
    ampx_op_class c = AMPX_OP_CLASS_MAX_ENUM;
    REQUIRE_MESSAGE(ampx_autocast_op_class(policy, e.first, &c) == AMPX_OK, last_error());
    CHECK_MESSAGE(c == e.second, e.first);
  }
  ampx_autocast_release(policy);
}
