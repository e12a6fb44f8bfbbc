// test_nn_primitives.cpp -- the neural-net primitives of the ops
// (Backend::unary, unary_backward, softmax, softmax_backward, cross_entropy,
// cross_entropy_backward) on the suite's device.
//
// The references are written here in double precision from the textbook
// formulas (std::erfc, std::tanh, std::cosh, std::exp, std::log1p); nothing
// of kernels/math is called, and the derivative references are themselves
// checked against central differences of the forward references. 16-bit
// floats are decoded from their fields and rounded by searching the sorted
// list of all their values. Data moves only through the backend's allocator
// and host copies, so every case runs unchanged on a CUDA backend once it
// has these primitives (until then each case says so and returns).
//
// Tolerances (eps = 2^-24, the unit roundoff of fp32, where all computing
// happens):
//  - f32 activations: a short fp32 formula computes f at an input off by a
//    few eps (intermediate arguments such as x / sqrt(2), x^2 or 2u are
//    rounded) and rounds its result a few times, so
//        |have - want| <= 16 eps (|f(x)| + |x f'(x)|) + 2^-140,
//    the x f' term being how far f moves when its input moves by a relative
//    eps, and 2^-140 (512 subnormal steps) covering results below fp32's
//    normal range, where only absolute precision exists. Derivatives use the
//    same bound with f' and f''.
//  - rows (softmax, cross-entropy): the bound is derived per element from the
//    operations performed -- x - max, one exp and one add per element of the
//    row sum, log1p of it -- at twice the first-order error; see row_error.
//  - f16 / bf16: the reference is evaluated on the rounded inputs, and the
//    output is the fp32 result rounded once: within half an ulp of the
//    format plus the fp32 error above. We allow one ulp of the format (at
//    the reference value, so a result rounded across a power of two passes)
//    plus the fp32 bound, which only matters where a result is near 0 and
//    the format's ulp there is finer than fp32's absolute error (bf16, which
//    has fp32's range).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "support.h"
#include "unit/backend_caps.h"

namespace {

using ampx::impl::DType;
using ampx::impl::UnaryOp;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kEps = 0x1p-24;
constexpr double kTiny = 0x1p-140;
constexpr double kPi = 3.14159265358979323846;

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

std::string name(DType t) { return ampx::impl::dtype_name(t); }

// ---- formats -----------------------------------------------------------

struct Format {
  int exp_bits;
  int man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint32_t inf_bits() const { return ((1u << exp_bits) - 1) << man_bits; }
  uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
};

Format format(DType t) {
  switch (t) {
    case DType::F16: return {5, 10};
    case DType::BF16: return {8, 7};
    default: return {8, 23};
  }
}

size_t width(DType t) { return t == DType::F32 ? 4 : 2; }

double decode(DType t, uint32_t bits) {
  const Format f = format(t);
  const double sign = (bits & f.sign_bit()) ? -1.0 : 1.0;
  const int exp = static_cast<int>((bits >> f.man_bits) & ((1u << f.exp_bits) - 1));
  const double man = bits & ((1u << f.man_bits) - 1);
  if (exp == (1 << f.exp_bits) - 1) return man != 0 ? kNaN : sign * kInf;
  if (exp == 0) return sign * std::ldexp(man, 1 - f.bias() - f.man_bits);
  return sign * std::ldexp(man + std::ldexp(1.0, f.man_bits), exp - f.bias() - f.man_bits);
}

// Every non-negative finite value of a 16-bit format, indexed by its bits,
// then the value one ulp above the largest at infinity's bits: the nearest
// entry, ties to the even bits, is then IEEE rounding, overflow included.
const std::vector<double>& ladder(DType t) {
  static std::vector<double> tables[2];
  std::vector<double>& table = tables[t == DType::F16 ? 0 : 1];
  if (table.empty()) {
    const uint32_t inf = format(t).inf_bits();
    for (uint32_t b = 0; b < inf; ++b) table.push_back(decode(t, b));
    table.push_back(2 * table[inf - 1] - table[inf - 2]);
  }
  return table;
}

uint32_t encode(DType t, double v) {
  if (t == DType::F32) {
    const float f = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return bits;
  }
  const Format f = format(t);
  if (std::isnan(v)) return f.inf_bits() | (1u << (f.man_bits - 1));
  const uint32_t sign = std::signbit(v) ? f.sign_bit() : 0u;
  const std::vector<double>& table = ladder(t);
  const double a = std::fabs(v);
  if (a >= table.back()) return sign | f.inf_bits();
  const size_t k = static_cast<size_t>(std::lower_bound(table.begin(), table.end(), a) - table.begin());
  if (table[k] == a) return sign | static_cast<uint32_t>(k);
  const double below = a - table[k - 1], above = table[k] - a;
  const size_t pick = below < above ? k - 1 : above < below ? k : (k % 2 == 0 ? k : k - 1);
  return sign | static_cast<uint32_t>(pick);
}

// The spacing of format t around v (the smallest subnormal at 0).
double ulp(DType t, double v) {
  const Format f = format(t);
  int e = 1 - f.bias();
  if (v != 0) std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1, 1 - f.bias()) - f.man_bits);
}

std::vector<uint8_t> to_bytes(DType t, const std::vector<double>& values) {
  std::vector<uint8_t> bytes(values.size() * width(t));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t bits = encode(t, values[i]);
    std::memcpy(&bytes[i * width(t)], &bits, width(t));  // little endian
  }
  return bytes;
}

std::vector<double> from_bytes(DType t, const std::vector<uint8_t>& bytes) {
  std::vector<double> values(bytes.size() / width(t));
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &bytes[i * width(t)], width(t));
    values[i] = decode(t, bits);
  }
  return values;
}

// The values as type t stores them: what the device computes on.
std::vector<double> rounded(DType t, const std::vector<double>& values) {
  return from_bytes(t, to_bytes(t, values));
}

// ---- device access -----------------------------------------------------

struct Device {
  std::unique_ptr<ampx::impl::Backend> backend;
  std::unique_ptr<ampx::impl::Allocator> allocator;

  explicit Device(int32_t threads = 0) {
    ampx::impl::BackendOptions options;
    options.device_type = ampx_test::test_device();
    options.num_threads = threads;
    backend = ampx::impl::create_backend(options);
    allocator = backend->make_default_allocator();
  }
  ampx::impl::Backend* operator->() const { return backend.get(); }
};

class Mem {
 public:
  Mem(const Device& d, size_t bytes) : d_(&d), bytes_(std::max<size_t>(bytes, 1)) {
    ptr_ = d.allocator->allocate(bytes_);
    REQUIRE(ptr_ != nullptr);
  }
  Mem(const Device& d, const std::vector<uint8_t>& host) : Mem(d, host.size()) {
    if (!host.empty()) d.backend->copy_from_host(ptr_, host.data(), host.size());
  }
  Mem(const Device& d, DType t, const std::vector<double>& values)
      : Mem(d, to_bytes(t, values)) {}
  template <class T>
  Mem(const Device& d, const std::vector<T>& host)
      : Mem(d, std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(host.data()),
                                    reinterpret_cast<const uint8_t*>(host.data() + host.size()))) {}
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  ~Mem() { d_->allocator->deallocate(ptr_, bytes_); }

  template <class T = void>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> host(bytes_);
    d_->backend->copy_to_host(host.data(), ptr_, bytes_);
    return host;
  }
  std::vector<double> values(DType t, size_t count) const {
    std::vector<uint8_t> b = bytes();
    b.resize(count * width(t));
    return from_bytes(t, b);
  }
  std::vector<float> floats(size_t count) const {
    std::vector<float> out(count);
    if (count) std::memcpy(out.data(), bytes().data(), count * 4);
    return out;
  }

 private:
  const Device* d_;
  size_t bytes_;
  void* ptr_;
};

// Whether the device has the primitive that `empty_call` calls with no data;
// until it is ported it throws NOT_SUPPORTED, and the case says so.
bool ported(const char* primitive, const std::function<void()>& empty_call) {
  try {
    empty_call();
  } catch (const ampx::impl::StatusError& e) {
    if (e.status() != AMPX_ERR_NOT_SUPPORTED) throw;
    MESSAGE(primitive, " is not available on this device yet: ", e.what());
    return false;
  }
  return true;
}

bool has_unary(const Device& d) {
  return ported(
             "unary",
             [&] { ampx_test::nn_of(d).unary(UnaryOp::Relu, nullptr, nullptr, DType::F32, 0); }) &&
         ported("unary_backward", [&] {
           ampx_test::nn_of(d).unary_backward(UnaryOp::Relu, nullptr, nullptr, nullptr, DType::F32,
                                              0);
         });
}

bool has_softmax(const Device& d) {
  return ported("softmax",
                [&] { ampx_test::nn_of(d).softmax(nullptr, nullptr, DType::F32, 0, 4, false); }) &&
         ported("softmax_backward", [&] {
           ampx_test::nn_of(d).softmax_backward(nullptr, nullptr, nullptr, DType::F32, 0, 4, false);
         });
}

bool has_cross_entropy(const Device& d) {
  const float one = 1.0f;
  Mem dloss(d, sizeof one);
  d->copy_from_host(dloss.as(), &one, sizeof one);
  return ported("cross_entropy",
                [&] {
                  ampx_test::nn_of(d).cross_entropy(nullptr, DType::F32, nullptr, DType::I64, 0, 4,
                                                    -100, nullptr);
                }) &&
         ported("cross_entropy_backward", [&] {
           ampx_test::nn_of(d).cross_entropy_backward(nullptr, DType::F32, nullptr, DType::I64, 0,
                                                      4, -100, dloss.as<float>(), 1.0f, nullptr);
         });
}

std::vector<double> run_unary(const Device& d, UnaryOp op, DType t, const std::vector<double>& x) {
  Mem in(d, t, x), out(d, x.size() * width(t));
  ampx_test::nn_of(d).unary(op, in.as(), out.as(), t, static_cast<int64_t>(x.size()));
  return out.values(t, x.size());
}

std::vector<double> run_unary_backward(const Device& d, UnaryOp op, DType t,
                                       const std::vector<double>& x,
                                       const std::vector<double>& dy) {
  Mem in(d, t, x), grad(d, t, dy), out(d, x.size() * width(t));
  ampx_test::nn_of(d).unary_backward(op, in.as(), grad.as(), out.as(), t,
                                     static_cast<int64_t>(x.size()));
  return out.values(t, x.size());
}

// ---- comparing ---------------------------------------------------------

// Equal values, NaN matching NaN and zeros matching in sign.
bool same(double have, double want) {
  return std::isnan(want) ? std::isnan(have)
                          : have == want && std::signbit(have) == std::signbit(want);
}

// Collects the elements outside their bound and reports the count and the
// first few in one CHECK.
class Mismatches {
 public:
  explicit Mismatches(std::string what) : what_(std::move(what)) {}
  // Non-finite references must be matched exactly.
  void check(double x, double have, double want, double bound) {
    const bool ok = std::isfinite(want) ? std::fabs(have - want) <= bound : same(have, want);
    note(ok, x, have, want, bound);
  }
  void check_same(double x, double have, double want) { note(same(have, want), x, have, want, 0); }
  ~Mismatches() { CHECK_MESSAGE(count_ == 0, what_, ": ", count_, " wrong", first_.str()); }

 private:
  void note(bool ok, double x, double have, double want, double bound) {
    if (ok) return;
    if (++count_ <= 5) {
      first_.precision(17);
      first_ << "\n  at " << x << ": got " << have << ", want " << want << " (bound " << bound
             << ")";
    }
  }
  std::string what_;
  int count_ = 0;
  std::ostringstream first_;
};

// The f32 bound, widened for a 16-bit format by one ulp at the reference.
double bound_in(DType t, double want, double f32_bound) {
  return t == DType::F32 ? f32_bound : ulp(t, want) + f32_bound;
}

// ---- activation references ------------------------------------------------

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// 1 + tanh(u): for u < 0 the sum cancels (1 - 0.99999...), while the same
// value e^u / cosh(u) keeps its precision.
double one_plus_tanh(double u) { return u >= 0 ? 1.0 + std::tanh(u) : std::exp(u) / std::cosh(u); }

double gelu_tanh_u(double x) { return std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x); }

struct Activation {
  UnaryOp op;
  const char* name;
  double (*f)(double);
  double (*df)(double);
};

const Activation kActivations[] = {
    {UnaryOp::Relu, "relu", [](double x) { return x > 0 ? x : 0.0; },
     [](double x) { return x > 0 ? 1.0 : 0.0; }},
    {UnaryOp::Gelu, "gelu",
     // 1 + erf(z) = erfc(-z), which does not cancel for negative z.
     [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); },
     [](double x) {
       return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * kPi);
     }},
    {UnaryOp::GeluTanh, "gelu_tanh", [](double x) { return 0.5 * x * one_plus_tanh(gelu_tanh_u(x)); },
     [](double x) {
       const double u = gelu_tanh_u(x);
       const double du = std::sqrt(2.0 / kPi) * (1.0 + 3 * 0.044715 * x * x);
       const double sech = 1.0 / std::cosh(u);
       return 0.5 * one_plus_tanh(u) + 0.5 * x * sech * sech * du;
     }},
    {UnaryOp::Silu, "silu", [](double x) { return x * sigmoid_ref(x); },
     [](double x) { return sigmoid_ref(x) * (1.0 + x * sigmoid_ref(-x)); }},
    {UnaryOp::Sigmoid, "sigmoid", sigmoid_ref,
     [](double x) { return sigmoid_ref(x) * sigmoid_ref(-x); }},
    {UnaryOp::Tanh, "tanh", [](double x) { return std::tanh(x); },
     [](double x) {
       const double sech = 1.0 / std::cosh(x);
       return sech * sech;
     }},
};

const Activation& activation(UnaryOp op) {
  return *std::find_if(std::begin(kActivations), std::end(kActivations),
                       [op](const Activation& a) { return a.op == op; });
}

// |have / want - 1|, for checks at a relative precision.
double relative_error(double have, double want) { return std::fabs(have / want - 1.0); }

// Central difference of g at x, with the step that balances truncation
// (h^2 g''' / 6) and cancellation (2^-52 |g| / h) for the points tested.
double central_difference(double (*g)(double), double x, double rel_step) {
  const double h = rel_step * std::max(1.0, std::fabs(x));
  return (g(x + h) - g(x - h)) / (2 * h);
}

// The f32 bound of the header for g = f (derivative dg) or g = f' (dg = f'').
double activation_bound(double g_x, double x, double dg_x) {
  return 16 * kEps * (std::fabs(g_x) + std::fabs(x * dg_x)) + kTiny;
}

double second_derivative(const Activation& a, double x) { return central_difference(a.df, x, 1e-4); }

// Test points: a fine grid over the curved part, tails and huge values on
// both sides, and random magnitudes from 2^-20 to 1e4.
std::vector<double> activation_points() {
  std::vector<double> xs;
  for (int i = -12 * 64; i <= 12 * 64; ++i) xs.push_back(i / 64.0);
  for (double m : {1e-30, 1e-6, 0.7518, 1.2785, 20.0, 30.0, 50.0, 88.0, 100.0, 1e4}) {
    xs.push_back(m);
    xs.push_back(-m);
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> log2_magnitude(-20.0, 13.2);
  for (int i = 0; i < 2000; ++i) {
    const double v = std::exp2(log2_magnitude(rng));
    xs.push_back(rng() & 1u ? v : -v);
  }
  return xs;
}

}  // namespace

// ---- the references themselves ---------------------------------------------

TEST_CASE("nn primitives: the test's own rounding and reference functions") {
  CHECK(decode(DType::F16, encode(DType::F16, 65519.0)) == 65504.0);
  CHECK(decode(DType::F16, encode(DType::F16, 65520.0)) == kInf);
  CHECK(decode(DType::F16, encode(DType::F16, 1.0 + 0x1p-11)) == 1.0);
  CHECK(decode(DType::F16, encode(DType::F16, -1.0 - 3 * 0x1p-11)) == -1.0 - 0x1p-9);
  CHECK(decode(DType::F16, encode(DType::F16, 0x1p-25)) == 0.0);
  CHECK(decode(DType::F16, encode(DType::F16, 3 * 0x1p-26)) == 0x1p-24);
  CHECK(decode(DType::BF16, encode(DType::BF16, 1.0 + 0x1p-8)) == 1.0);
  CHECK(decode(DType::BF16, encode(DType::BF16, 1.0 + 3 * 0x1p-8)) == 1.0 + 0x1p-6);
  CHECK(decode(DType::BF16, encode(DType::BF16, -1e39)) == -kInf);
  CHECK(std::isnan(decode(DType::BF16, encode(DType::BF16, kNaN))));
  CHECK(std::signbit(decode(DType::F16, encode(DType::F16, -0.0))));
  CHECK(ulp(DType::F16, 1.5) == 0x1p-10);
  CHECK(ulp(DType::BF16, 0.0) == 0x1p-133);

  // Phi(1) from tables; gelu_tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715))
  // worked out separately; the tail form of 1 + tanh(u) against the sum.
  CHECK(relative_error(activation(UnaryOp::Gelu).f(1.0), 0.8413447460685429) < 1e-15);
  CHECK(relative_error(activation(UnaryOp::GeluTanh).f(1.0), 0.841192) < 1e-6);
  for (double u = -3; u < 0; u += 0.125)
    CHECK(relative_error(one_plus_tanh(u), 1.0 + std::tanh(u)) < 1e-14);

  for (const Activation& a : kActivations) {
    Mismatches wrong(std::string(a.name) + "' against central differences");
    for (double x : activation_points()) {
      if (a.op == UnaryOp::Relu && std::fabs(x) < 1e-5) continue;  // the kink
      const double h = 1e-6 * std::max(1.0, std::fabs(x));
      // Cancellation in f(x + h) - f(x - h), and double's subnormal steps.
      const double rounding =
          0x1p-50 * (std::fabs(a.f(x + h)) + std::fabs(a.f(x - h))) / h + 0x1p-1020;
      const double want = a.df(x);
      wrong.check(x, central_difference(a.f, x, 1e-6), want, 1e-6 * std::fabs(want) + rounding);
    }
  }
}

// ---- activations ---------------------------------------------------------

TEST_CASE("nn primitives: f32 activations and derivatives over the whole line") {
  const Device d;
  if (!has_unary(d)) return;
  const std::vector<double> x = rounded(DType::F32, activation_points());
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> uniform(-4.0, 4.0);
  std::vector<double> dy(x.size());
  for (double& g : dy) g = uniform(rng);
  dy = rounded(DType::F32, dy);
  const std::vector<double> ones(x.size(), 1.0);

  for (const Activation& a : kActivations) {
    const std::vector<double> y = run_unary(d, a.op, DType::F32, x);
    const std::vector<double> slope = run_unary_backward(d, a.op, DType::F32, x, ones);
    const std::vector<double> dx = run_unary_backward(d, a.op, DType::F32, x, dy);
    Mismatches forward(std::string(a.name) + " forward");
    Mismatches derivative(std::string(a.name) + " derivative");
    Mismatches chained(std::string(a.name) + " dy * derivative");
    for (size_t i = 0; i < x.size(); ++i) {
      const double f = a.f(x[i]), df = a.df(x[i]);
      forward.check(x[i], y[i], f, activation_bound(f, x[i], df));
      const double df_bound = activation_bound(df, x[i], second_derivative(a, x[i]));
      derivative.check(x[i], slope[i], df, df_bound);
      chained.check(x[i], dx[i], dy[i] * df, std::fabs(dy[i]) * (df_bound + kEps * std::fabs(df)));
    }
  }
}

TEST_CASE("nn primitives: exp, log, sqrt and rsqrt, and their derivatives, against double") {
  const Device d;
  if (!has_unary(d)) return;
  struct Math {
    UnaryOp op;
    const char* name;
    double (*f)(double);
    double (*df)(double);
    bool positive_only;  // the points tested are > 0
    double ulps;         // the derivative's bound, in roundings of its value
  };
  const Math kMath[] = {
      {UnaryOp::Exp, "exp", [](double x) { return std::exp(x); },
       [](double x) { return std::exp(x); }, false, 4},
      {UnaryOp::Log, "log", [](double x) { return std::log(x); }, [](double x) { return 1 / x; },
       true, 2},
      {UnaryOp::Sqrt, "sqrt", [](double x) { return std::sqrt(x); },
       [](double x) { return 0.5 / std::sqrt(x); }, true, 4},
      {UnaryOp::Rsqrt, "rsqrt", [](double x) { return 1 / std::sqrt(x); },
       [](double x) { return -0.5 / (x * std::sqrt(x)); }, true, 8},
  };
  std::mt19937 rng(9);
  for (const Math& m : kMath) {
    // A grid, then random magnitudes over the whole f32 range that keeps
    // the result and the derivative finite (exp: |x| <= 87).
    std::vector<double> xs;
    for (int i = m.positive_only ? 1 : -80 * 16; i <= 80 * 16; ++i) xs.push_back(i / 16.0);
    std::uniform_real_distribution<double> log2_magnitude(-40.0, 40.0);
    std::uniform_real_distribution<double> exp_argument(-87.0, 87.0);
    for (int i = 0; i < 3000; ++i)
      xs.push_back(m.positive_only ? std::exp2(log2_magnitude(rng)) : exp_argument(rng));
    const std::vector<double> x = rounded(DType::F32, xs);
    const std::vector<double> ones(x.size(), 1.0);
    const std::vector<double> y = run_unary(d, m.op, DType::F32, x);
    const std::vector<double> slope = run_unary_backward(d, m.op, DType::F32, x, ones);
    Mismatches forward(std::string(m.name) + " forward");
    Mismatches derivative(std::string(m.name) + " derivative");
    for (size_t i = 0; i < x.size(); ++i) {
      const double f = m.f(x[i]), df = m.df(x[i]);
      // The C library's and CUDA's expf and logf are within 2 ulp; sqrtf and
      // the division are correctly rounded.
      forward.check(x[i], y[i], f, 4 * kEps * std::fabs(f) + kTiny);
      derivative.check(x[i], slope[i], df, m.ulps * kEps * std::fabs(df) + kTiny);
    }
  }
  // Outside the domains, at the infinities and for NaN: the IEEE results.
  const std::vector<double> specials = {0.0, -0.0, kInf, -kInf, kNaN, -1.0};
  struct Special {
    UnaryOp op;
    double f[6];
    double df[6];
  };
  const Special kSpecialValues[] = {
      {UnaryOp::Exp, {1, 1, kInf, 0, kNaN, std::exp(-1.0)}, {1, 1, kInf, 0, kNaN, std::exp(-1.0)}},
      {UnaryOp::Log, {-kInf, -kInf, kInf, kNaN, kNaN, kNaN}, {kInf, -kInf, 0, -0.0, kNaN, -1}},
      {UnaryOp::Sqrt, {0, -0.0, kInf, kNaN, kNaN, kNaN}, {kInf, -kInf, 0, kNaN, kNaN, kNaN}},
      {UnaryOp::Rsqrt, {kInf, -kInf, 0, kNaN, kNaN, kNaN}, {-kInf, kInf, -0.0, kNaN, kNaN, kNaN}},
  };
  const std::vector<double> ones(specials.size(), 1.0);
  for (const Special& s : kSpecialValues) {
    const std::vector<double> y = run_unary(d, s.op, DType::F32, specials);
    const std::vector<double> slope = run_unary_backward(d, s.op, DType::F32, specials, ones);
    Mismatches wrong("special values of op " + std::to_string(static_cast<int>(s.op)));
    for (size_t i = 0; i < specials.size(); ++i) {
      if (std::isfinite(s.f[i]) && s.f[i] != 0)
        wrong.check(specials[i], y[i], s.f[i], 4 * kEps * std::fabs(s.f[i]));
      else
        wrong.check_same(specials[i], y[i], s.f[i]);
      if (std::isfinite(s.df[i]) && s.df[i] != 0)
        wrong.check(specials[i], slope[i], s.df[i], 4 * kEps * std::fabs(s.df[i]));
      else
        wrong.check_same(specials[i], slope[i], s.df[i]);
    }
  }
}

TEST_CASE("nn primitives: f16 and bf16 activations within one ulp of the reference") {
  const Device d;
  if (!has_unary(d)) return;
  for (DType t : {DType::F16, DType::BF16}) {
    const std::vector<double> x = rounded(t, activation_points());
    const std::vector<double> ones(x.size(), 1.0);
    for (const Activation& a : kActivations) {
      const std::vector<double> y = run_unary(d, a.op, t, x);
      const std::vector<double> slope = run_unary_backward(d, a.op, t, x, ones);
      Mismatches forward(name(t) + " " + a.name + " forward");
      Mismatches derivative(name(t) + " " + a.name + " derivative");
      for (size_t i = 0; i < x.size(); ++i) {
        const double f = a.f(x[i]), df = a.df(x[i]);
        forward.check(x[i], y[i], f, bound_in(t, f, activation_bound(f, x[i], df)));
        derivative.check(
            x[i], slope[i], df,
            bound_in(t, df, activation_bound(df, x[i], second_derivative(a, x[i]))));
      }
    }
  }
}

namespace {

// f and f' at +0, -0, +inf, -inf, NaN, the largest finite value and its
// negative: limits at the infinities (never the NaN of inf * 0), NaN
// propagated, relu(-0) = +0 and the odd functions keeping -0.
struct SpecialCase {
  UnaryOp op;
  double f[7];
  double df[7];
};

constexpr double kMax = 1e300;  // stands for the format's largest value

const SpecialCase kSpecials[] = {
    {UnaryOp::Relu, {0.0, 0.0, kInf, 0.0, kNaN, kMax, 0.0}, {0, 0, 1, 0, kNaN, 1, 0}},
    {UnaryOp::Gelu, {0.0, -0.0, kInf, -0.0, kNaN, kMax, -0.0}, {0.5, 0.5, 1, 0, kNaN, 1, 0}},
    {UnaryOp::GeluTanh, {0.0, -0.0, kInf, -0.0, kNaN, kMax, -0.0}, {0.5, 0.5, 1, 0, kNaN, 1, 0}},
    {UnaryOp::Silu, {0.0, -0.0, kInf, -0.0, kNaN, kMax, -0.0}, {0.5, 0.5, 1, 0, kNaN, 1, 0}},
    {UnaryOp::Sigmoid, {0.5, 0.5, 1, 0, kNaN, 1, 0}, {0.25, 0.25, 0, 0, kNaN, 0, 0}},
    {UnaryOp::Tanh, {0.0, -0.0, 1, -1, kNaN, 1, -1}, {1, 1, 0, 0, kNaN, 0, 0}},
};

}  // namespace

TEST_CASE("nn primitives: activations at zeros, infinities, NaN and the largest values") {
  const Device d;
  if (!has_unary(d)) return;
  for (DType t : kFloatTypes) {
    const double largest = decode(t, format(t).inf_bits() - 1);
    const std::vector<double> x = {0.0, -0.0, kInf, -kInf, kNaN, largest, -largest};
    const std::vector<double> ones(x.size(), 1.0);
    for (const SpecialCase& s : kSpecials) {
      const std::vector<double> y = run_unary(d, s.op, t, x);
      const std::vector<double> slope = run_unary_backward(d, s.op, t, x, ones);
      Mismatches wrong(name(t) + " " + activation(s.op).name);
      for (size_t i = 0; i < x.size(); ++i) {
        wrong.check_same(x[i], y[i], s.f[i] == kMax ? largest : s.f[i]);
        wrong.check_same(x[i], slope[i], s.df[i]);
      }
    }
  }

  // relu's backward selects dy rather than multiplying, as torch's
  // threshold_backward: an inf or NaN dy where x <= 0 gives 0. The others
  // multiply: inf * 0 is NaN there.
  const std::vector<double> x = {-1.0, -1.0, 2.0, -0.0};
  const std::vector<double> dy = {kInf, kNaN, kNaN, -kInf};
  const std::vector<double> relu = run_unary_backward(d, UnaryOp::Relu, DType::F32, x, dy);
  CHECK(same(relu[0], 0.0));
  CHECK(same(relu[1], 0.0));
  CHECK(std::isnan(relu[2]));
  CHECK(same(relu[3], 0.0));
  const std::vector<double> sig =
      run_unary_backward(d, UnaryOp::Sigmoid, DType::F32, {-kInf, 0.0}, {kInf, -kInf});
  CHECK(std::isnan(sig[0]));
  CHECK(sig[1] == -kInf);
}

TEST_CASE("nn primitives: activations run in place") {
  const Device d;
  if (!has_unary(d)) return;
  const std::vector<double> x = rounded(DType::BF16, {-3.0, -0.5, 0.25, 2.0, 7.0});
  const std::vector<double> want = run_unary(d, UnaryOp::Silu, DType::BF16, x);
  Mem buf(d, DType::BF16, x);
  ampx_test::nn_of(d).unary(UnaryOp::Silu, buf.as(), buf.as(), DType::BF16, 5);
  CHECK(buf.values(DType::BF16, 5) == want);
  const std::vector<double> dy = rounded(DType::BF16, {1.0, -2.0, 0.5, 3.0, -1.0});
  const std::vector<double> want_dx = run_unary_backward(d, UnaryOp::Silu, DType::BF16, x, dy);
  Mem in(d, DType::BF16, x), grad(d, DType::BF16, dy);
  ampx_test::nn_of(d).unary_backward(UnaryOp::Silu, in.as(), grad.as(), grad.as(), DType::BF16, 5);
  CHECK(grad.values(DType::BF16, 5) == want_dx);
}

// ---- softmax -----------------------------------------------------------

namespace {

// A row's softmax in double, with the fp32 error bound of its log-softmax.
// The sum is 1 + rest around the first maximum: log1p(rest) keeps log(sum)
// precise when one element dominates, in double as in fp32.
struct RowRef {
  std::vector<double> log_p;  // log softmax
  std::vector<double> p;      // softmax
  std::vector<double> error;  // fp32 error bound of log_p
};

RowRef row_reference(const std::vector<double>& x) {
  const size_t cols = x.size();
  const size_t top = static_cast<size_t>(std::max_element(x.begin(), x.end()) - x.begin());
  const double max = x[top];
  double rest = 0, rest_error = 0;
  for (size_t j = 0; j < cols; ++j) {
    if (j == top) continue;
    const double d = x[j] - max, e = std::exp(d);
    if (e == 0) continue;  // -inf, or too small to matter
    rest += e;
    // exp's argument x - max rounds (eps |d|), as do exp itself and each of
    // the row's adds and rescalings (at most 2 cols + 4 roundings in all).
    rest_error += kEps * e * (std::fabs(d) + 2.0 * cols + 4);
  }
  const double log_sum = std::log1p(rest);
  const double log_sum_error = rest_error / (1 + rest) + 2 * kEps * log_sum;
  RowRef r;
  for (size_t j = 0; j < cols; ++j) {
    const double d = x[j] - max;
    r.log_p.push_back(d - log_sum);
    r.p.push_back(std::exp(d - log_sum));
    // Twice the first-order error: x - max, log(sum), the final subtraction.
    // A -inf entry's -inf is exact.
    r.error.push_back(std::isinf(d) ? 0.0
                                    : 2 * (kEps * std::fabs(d) + log_sum_error +
                                           kEps * std::fabs(d - log_sum)));
  }
  return r;
}

struct Matrix {
  int64_t rows;
  int64_t cols;
  std::vector<double> values;
  std::vector<double> row(int64_t r) const {
    return {values.begin() + r * cols, values.begin() + (r + 1) * cols};
  }
};

std::vector<double> run_softmax(const Device& d, DType t, const Matrix& x, bool log) {
  Mem in(d, t, x.values), out(d, x.values.size() * width(t));
  ampx_test::nn_of(d).softmax(in.as(), out.as(), t, x.rows, x.cols, log);
  return out.values(t, x.values.size());
}

Matrix random_matrix(int64_t rows, int64_t cols, double spread, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-spread, spread);
  Matrix m{rows, cols, std::vector<double>(static_cast<size_t>(rows * cols))};
  for (double& v : m.values) v = uniform(rng);
  return m;
}

// Finite rows of every kind: random, huge values with spreads of 1e4 (which
// would overflow exp without the max), equal values, one dominant element.
std::vector<Matrix> finite_softmax_cases() {
  std::vector<Matrix> cases = {random_matrix(37, 53, 10.0, 1), random_matrix(5, 1000, 4.0, 2)};
  cases.push_back({3, 5,
                   {1e4, 1e4 - 1, 0, -1e4, 9999.5,           //
                    -1e4, -1e4 + 2, -1e4 + 0.5, -9990, -1e4,  //
                    7, 7, 7, 7, 7}});
  cases.push_back({2, 3, {30, 0, 0, -5, -5, 20}});
  cases.push_back({4, 1, {5, -1e4, 1e4, 0}});
  return cases;
}

}  // namespace

TEST_CASE("nn primitives: softmax and log-softmax of finite rows") {
  const Device d;
  if (!has_softmax(d)) return;
  for (DType t : kFloatTypes) {
    for (const Matrix& raw : finite_softmax_cases()) {
      const Matrix x{raw.rows, raw.cols, rounded(t, raw.values)};
      const std::vector<double> p = run_softmax(d, t, x, false);
      const std::vector<double> log_p = run_softmax(d, t, x, true);
      Mismatches soft(name(t) + " softmax of " + std::to_string(x.cols) + " columns");
      Mismatches logs(name(t) + " log-softmax of " + std::to_string(x.cols) + " columns");
      for (int64_t r = 0; r < x.rows; ++r) {
        const RowRef ref = row_reference(x.row(r));
        for (int64_t j = 0; j < x.cols; ++j) {
          const size_t i = static_cast<size_t>(r * x.cols + j), jj = static_cast<size_t>(j);
          const double p_bound = ref.p[jj] * (ref.error[jj] + 4 * kEps) + kTiny;
          soft.check(x.values[i], p[i], ref.p[jj], bound_in(t, ref.p[jj], p_bound));
          logs.check(x.values[i], log_p[i], ref.log_p[jj],
                     bound_in(t, ref.log_p[jj], ref.error[jj] + kTiny));
        }
      }
    }
  }
}

TEST_CASE("nn primitives: softmax corner cases are exact") {
  const Device d;
  if (!has_softmax(d)) return;
  for (DType t : kFloatTypes) {
    CAPTURE(name(t));
    // One column: probability 1, log-probability 0, whatever the value.
    const Matrix one{3, 1, {-1e4, 0.0, 1e4}};
    for (double v : run_softmax(d, t, one, false)) CHECK(same(v, 1.0));
    for (double v : run_softmax(d, t, one, true)) CHECK(same(v, 0.0));

    // -inf is a masked entry: probability 0, log-probability -inf. A NaN or
    // a +inf makes its row NaN (torch's results); so does a row of -inf only
    // (0 / 0).
    const Matrix special{5, 3,
                         {-kInf, 0.0, -kInf,  //
                          1.0, kNaN, 2.0,     //
                          kInf, 1.0, 2.0,     //
                          -kInf, -kInf, -kInf,  //
                          -kInf, 3.0, 3.0}};
    const std::vector<double> p = run_softmax(d, t, special, false);
    const std::vector<double> log_p = run_softmax(d, t, special, true);
    const double want_p[15] = {0, 1, 0, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN,
                               0, 0.5, 0.5};
    const double want_log[15] = {-kInf, 0, -kInf, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN,
                                 kNaN,  kNaN, kNaN, -kInf, -std::log(2.0), -std::log(2.0)};
    Mismatches wrong(name(t) + " special rows");
    for (size_t i = 0; i < 15; ++i) {
      wrong.check(special.values[i], p[i], want_p[i], bound_in(t, want_p[i], 4 * kEps));
      wrong.check(special.values[i], log_p[i], want_log[i], bound_in(t, want_log[i], 4 * kEps));
    }
  }

  // A dominant element's log-probability, -log1p(2 e^-30) ~ -1.9e-13, to a
  // few ulp: log(1 + rest) in fp32 would give 0.
  const std::vector<double> lp = run_softmax(d, DType::F32, {1, 3, {30.0, 0.0, 0.0}}, true);
  CHECK(relative_error(lp[0], -std::log1p(2 * std::exp(-30.0))) < 8 * kEps);
}

TEST_CASE("nn primitives: softmax runs in place") {
  const Device d;
  if (!has_softmax(d)) return;
  const Matrix x = random_matrix(4, 7, 3.0, 9);
  for (bool log : {false, true}) {
    const std::vector<double> want = run_softmax(d, DType::F16, x, log);
    Mem buf(d, DType::F16, x.values);
    ampx_test::nn_of(d).softmax(buf.as(), buf.as(), DType::F16, x.rows, x.cols, log);
    CHECK(buf.values(DType::F16, x.values.size()) == want);
  }
}

TEST_CASE("nn primitives: softmax and log-softmax backward") {
  const Device d;
  if (!has_softmax(d)) return;
  for (DType t : kFloatTypes) {
    for (bool log : {false, true}) {
      for (const Matrix& logits : {random_matrix(23, 41, 6.0, 3), random_matrix(3, 700, 3.0, 4)}) {
        // y: the forward output (rounded to t), dy: random.
        std::vector<double> y_values;
        for (int64_t r = 0; r < logits.rows; ++r) {
          const RowRef ref = row_reference(logits.row(r));
          const std::vector<double>& out = log ? ref.log_p : ref.p;
          y_values.insert(y_values.end(), out.begin(), out.end());
        }
        const Matrix y{logits.rows, logits.cols, rounded(t, y_values)};
        const Matrix dy{logits.rows, logits.cols,
                        rounded(t, random_matrix(logits.rows, logits.cols, 1.0, 5).values)};
        Mem y_mem(d, t, y.values), dy_mem(d, t, dy.values), dx_mem(d, y.values.size() * width(t));
        ampx_test::nn_of(d).softmax_backward(y_mem.as(), dy_mem.as(), dx_mem.as(), t, y.rows,
                                             y.cols, log);
        const std::vector<double> dx = dx_mem.values(t, y.values.size());

        Mismatches wrong(name(t) + (log ? " log-softmax" : " softmax") + " backward, " +
                         std::to_string(y.cols) + " columns");
        const double cols = static_cast<double>(y.cols);
        for (int64_t r = 0; r < y.rows; ++r) {
          const std::vector<double> yr = y.row(r), gr = dy.row(r);
          // The row's reduction (sum dy * y, or sum dy) and a bound on its
          // fp32 error: one rounding per product and add.
          double reduced = 0, magnitude = 0;
          for (size_t j = 0; j < yr.size(); ++j) {
            reduced += log ? gr[j] : gr[j] * yr[j];
            magnitude += std::fabs(log ? gr[j] : gr[j] * yr[j]);
          }
          const double reduced_error = (cols + 2) * kEps * magnitude;
          for (size_t j = 0; j < yr.size(); ++j) {
            double want, error;
            if (log) {
              const double e = std::exp(yr[j]);
              want = gr[j] - e * reduced;
              error = e * (reduced_error + kEps * std::fabs(reduced) * (std::fabs(yr[j]) + 2));
            } else {
              want = yr[j] * (gr[j] - reduced);
              error = std::fabs(yr[j]) * (reduced_error + kEps * std::fabs(gr[j] - reduced));
            }
            const double bound = 2 * (error + kEps * std::fabs(want)) + kTiny;
            wrong.check(yr[j], dx[static_cast<size_t>(r * y.cols) + j], want,
                        bound_in(t, want, bound));
          }
        }
      }
    }
  }

  // A one-hot log-softmax row: exp(-inf) = 0 leaves dx = dy there.
  Mem y(d, DType::F32, {0.0, -kInf}), dy(d, DType::F32, {0.5, 0.25}), dx(d, 8);
  ampx_test::nn_of(d).softmax_backward(y.as(), dy.as(), dx.as(), DType::F32, 1, 2, true);
  const std::vector<double> got = dx.values(DType::F32, 2);
  CHECK(got[0] == -0.25);
  CHECK(got[1] == 0.25);
}

// ---- cross-entropy -------------------------------------------------------

namespace {

struct CrossEntropyCase {
  Matrix logits;
  std::vector<int64_t> labels;
  int64_t ignore_index;
};

// Random rows with some ignored; then rows with a confident right answer
// (loss ~1e-13), huge logits, a label at a -inf logit (infinite loss, finite
// gradient), an ignored row of NaN (loss 0, gradient 0).
CrossEntropyCase cross_entropy_case(int64_t ignore_index) {
  CrossEntropyCase c{random_matrix(60, 10, 8.0, 7), {}, ignore_index};
  std::mt19937 rng(13);
  for (int64_t r = 0; r < 60; ++r)
    c.labels.push_back(r % 7 == 3 ? ignore_index : static_cast<int64_t>(rng() % 10));
  const std::vector<std::pair<std::vector<double>, int64_t>> extra = {
      {{30, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0},
      {{1e4, 1e4 - 3, -1e4, 0, 0, 0, 0, 0, 0, 9999}, 1},
      {{-kInf, 1, 2, 3, 0, 0, 0, 0, 0, 0}, 0},
      {{kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN}, ignore_index},
      {{-20, 0, 0, 0, 0, 0, 0, 0, 0, 20}, 9},
  };
  for (const auto& [row, label] : extra) {
    c.logits.values.insert(c.logits.values.end(), row.begin(), row.end());
    c.labels.push_back(label);
    ++c.logits.rows;
  }
  return c;
}

std::vector<uint8_t> label_bytes(DType t, const std::vector<int64_t>& labels) {
  if (t == DType::I64) {
    std::vector<uint8_t> b(labels.size() * 8);
    std::memcpy(b.data(), labels.data(), b.size());
    return b;
  }
  std::vector<int32_t> narrow(labels.begin(), labels.end());
  std::vector<uint8_t> b(narrow.size() * 4);
  std::memcpy(b.data(), narrow.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("nn primitives: cross-entropy and its backward, i32 and i64 labels") {
  const Device d;
  if (!has_cross_entropy(d)) return;
  const float dloss = 0.75f, scale = 1.0f / 61.0f;
  const double g = static_cast<double>(dloss) * static_cast<double>(scale);
  // -100 is torch's default; 3 is a real class taken as the ignored one.
  for (int64_t ignore_index : {int64_t{-100}, int64_t{3}}) {
    const CrossEntropyCase raw = cross_entropy_case(ignore_index);
    for (DType label_type : {DType::I32, DType::I64}) {
      for (DType t : kFloatTypes) {
        CAPTURE(ignore_index);
        const std::string what = name(t) + " logits, " + name(label_type) + " labels";
        const Matrix x{raw.logits.rows, raw.logits.cols, rounded(t, raw.logits.values)};
        const size_t n = x.values.size(), rows = static_cast<size_t>(x.rows);
        Mem logits(d, t, x.values), labels(d, label_bytes(label_type, raw.labels));
        Mem losses(d, rows * 4), dloss_mem(d, std::vector<float>{dloss}), grad(d, n * width(t));
        ampx_test::nn_of(d).cross_entropy(logits.as(), t, labels.as(), label_type, x.rows, x.cols,
                                          ignore_index, losses.as<float>());
        ampx_test::nn_of(d).cross_entropy_backward(logits.as(), t, labels.as(), label_type, x.rows,
                                                   x.cols, ignore_index, dloss_mem.as<float>(),
                                                   scale, grad.as());
        const std::vector<float> loss = losses.floats(rows);
        const std::vector<double> dx = grad.values(t, n);

        Mismatches loss_wrong(what + ": losses");
        Mismatches grad_wrong(what + ": gradients");
        for (int64_t r = 0; r < x.rows; ++r) {
          const int64_t l = raw.labels[static_cast<size_t>(r)];
          const size_t base = static_cast<size_t>(r * x.cols);
          if (l == ignore_index) {
            loss_wrong.check_same(static_cast<double>(r), loss[static_cast<size_t>(r)], 0.0);
            for (size_t j = 0; j < static_cast<size_t>(x.cols); ++j)
              grad_wrong.check_same(static_cast<double>(r), dx[base + j], 0.0);
            continue;
          }
          const std::vector<double> row = x.row(r);
          const RowRef ref = row_reference(row);
          const size_t lj = static_cast<size_t>(l);
          loss_wrong.check(row[lj], loss[static_cast<size_t>(r)], -ref.log_p[lj],
                           ref.error[lj] + kTiny);
          // p - 1 at the label as minus the other probabilities: no
          // cancellation when p is close to 1.
          double others = 0;
          for (size_t j = 0; j < row.size(); ++j)
            if (j != lj) others += ref.p[j];
          for (size_t j = 0; j < row.size(); ++j) {
            const double p_minus = j == lj ? -others : ref.p[j];
            const double want = p_minus * g;
            const double bound =
                2 * g * (ref.p[j] * ref.error[j] + 2 * kEps * std::fabs(p_minus)) + kTiny;
            grad_wrong.check(row[j], dx[base + j], want, bound_in(t, want, bound));
          }
        }
      }
    }
  }
}

TEST_CASE("nn primitives: cross-entropy of NaN rows is NaN, of a confident row precise") {
  const Device d;
  if (!has_cross_entropy(d)) return;
  const Matrix x{2, 3, {1.0, kNaN, 2.0, 30.0, 0.0, 0.0}};
  Mem logits(d, DType::F32, x.values), labels(d, std::vector<int32_t>{0, 0});
  Mem losses(d, 8), one(d, std::vector<float>{1.0f}), grad(d, 24);
  ampx_test::nn_of(d).cross_entropy(logits.as(), DType::F32, labels.as(), DType::I32, 2, 3, -100,
                                    losses.as<float>());
  ampx_test::nn_of(d).cross_entropy_backward(logits.as(), DType::F32, labels.as(), DType::I32, 2, 3,
                                             -100, one.as<float>(), 1.0f, grad.as());
  const std::vector<float> loss = losses.floats(2);
  const std::vector<double> dx = grad.values(DType::F32, 6);
  CHECK(std::isnan(loss[0]));
  for (size_t j = 0; j < 3; ++j) CHECK(std::isnan(dx[j]));
  // loss = log1p(2 e^-30) ~ 1.9e-13, and dlogit at the label = -(that, to
  // first order): both vanish if computed as log(1 + rest) or as p - 1.
  const double rest = 2 * std::exp(-30.0);
  CHECK(relative_error(loss[1], std::log1p(rest)) < 8 * kEps);
  CHECK(relative_error(dx[3], -rest / (1 + rest)) < 8 * kEps);
  CHECK(relative_error(dx[4], std::exp(-30.0) / (1 + rest)) < 8 * kEps);
}

// ---- threads and refusals ------------------------------------------------

TEST_CASE("nn primitives: results do not depend on the number of threads") {
  std::vector<std::vector<uint8_t>> results[2];
  for (int k = 0; k < 2; ++k) {
    const Device d(k == 0 ? 1 : 4);
    if (!has_unary(d) || !has_softmax(d) || !has_cross_entropy(d)) return;
    const Matrix x = random_matrix(301, 999, 12.0, 21);
    Mem in(d, DType::F32, x.values), out(d, x.values.size() * 4);
    ampx_test::nn_of(d).unary(UnaryOp::GeluTanh, in.as(), out.as(), DType::F32,
                              static_cast<int64_t>(x.values.size()));
    results[k].push_back(out.bytes());
    Mem half(d, DType::F16, x.values), soft(d, x.values.size() * 2);
    ampx_test::nn_of(d).softmax(half.as(), soft.as(), DType::F16, x.rows, x.cols, true);
    results[k].push_back(soft.bytes());
    std::vector<int64_t> label_values;
    for (int64_t r = 0; r < x.rows; ++r) label_values.push_back(r % 5 == 0 ? -1 : (r * 7) % 999);
    Mem labels(d, label_values), losses(d, static_cast<size_t>(x.rows) * 4);
    Mem one(d, std::vector<float>{1.0f}), grad(d, x.values.size() * 4);
    ampx_test::nn_of(d).cross_entropy(in.as(), DType::F32, labels.as(), DType::I64, x.rows, x.cols,
                                      -1, losses.as<float>());
    ampx_test::nn_of(d).cross_entropy_backward(in.as(), DType::F32, labels.as(), DType::I64, x.rows,
                                               x.cols, -1, one.as<float>(), 0.5f, grad.as());
    results[k].push_back(losses.bytes());
    results[k].push_back(grad.bytes());
  }
  for (size_t i = 0; i < results[0].size(); ++i) CHECK_MESSAGE(results[0][i] == results[1][i], i);
}

TEST_CASE("nn primitives: integer data and floating labels are refused") {
  const Device d;
  if (!has_unary(d) || !has_cross_entropy(d)) return;
  Mem buf(d, 64), labels(d, std::vector<int32_t>{0, 1});
  auto status_of = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const ampx::impl::StatusError& e) {
      return e.status();
    }
    return AMPX_OK;
  };
  CHECK(status_of([&] {
          ampx_test::nn_of(d).unary(UnaryOp::Relu, buf.as(), buf.as(), DType::I32, 4);
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] {
          ampx_test::nn_of(d).softmax(buf.as(), buf.as(), DType::I64, 2, 2, false);
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] {
          ampx_test::nn_of(d).cross_entropy(buf.as(), DType::F32, labels.as(), DType::F32, 2, 2,
                                            -100, buf.as<float>());
        }) == AMPX_ERR_DTYPE);
}
