// test_gemm.cpp -- Backend::gemm on the suite's device, and the CPU
// backend's built-in kernel (cpu::gemm_fallback, what a build without CBLAS
// runs), and oneDNN's bf16 matmul where the CPU multiplies bf16 natively,
// against a double-precision reference.
//
// Inputs are rounded to their type first and the reference is computed in
// double on the rounded values, so the only error left is the fp32
// accumulation's. For any order of summation, with or without fused
// multiply-adds, that is at most about k * 2^-24 of sum |a||b|; with alpha
// and beta applied in fp32 as well, the bound used is
// (k + 4) * 2^-24 * (|alpha| * sum |a||b| + |beta * c|). A low-precision C
// must be the correctly rounded value of an fp32 result within that bound.
// Values are converted with convert_bulk and element_bits_from_double,
// which test_convert.cpp checks against references of their own. Device
// data moves only through the backend's allocator and host copies; a
// backend that has not ported gemm yet (NOT_SUPPORTED) is skipped with a
// message, the built-in kernel still runs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/dnnl_matmul.h"
#include "backend/cpu/thread_pool.h"
#include "core/backend.h"
#include "core/convert_bulk.h"
#include "core/error.h"
#include "support.h"
#include "unit/backend_caps.h"

namespace {

using ampx::impl::DType;
using ampx::impl::GemmArgs;
using Bytes = std::vector<uint8_t>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

size_t width(DType t) { return ampx::impl::dtype_size(t); }

std::vector<double> decode(DType t, const Bytes& raw) {
  const size_t n = raw.size() / width(t);
  std::vector<float> f(n);
  ampx::impl::convert_bulk(f.data(), DType::F32, raw.data(), t, static_cast<int64_t>(n));
  return std::vector<double>(f.begin(), f.end());
}

Bytes encode(DType t, const std::vector<double>& values) {
  Bytes raw(values.size() * width(t));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint64_t bits = ampx::impl::element_bits_from_double(t, values[i]);
    std::memcpy(&raw[i * width(t)], &bits, width(t));
  }
  return raw;
}

// x correctly rounded to t.
double round_to(DType t, double x) { return decode(t, encode(t, {x}))[0]; }

// Runs args on host copies of A, B, C (C is updated) and the bias (none
// when empty); sets the pointers.
using Runner = std::function<void(GemmArgs& args, const Bytes& a, const Bytes& b, Bytes& c,
                                  const Bytes& bias)>;

struct Target {
  std::string name;
  Runner run;
};

// Device memory holding a copy of a host array.
class DeviceBytes {
 public:
  DeviceBytes(ampx::impl::Backend& backend, ampx::impl::Allocator& allocator, const Bytes& host)
      : backend_(backend), allocator_(allocator), bytes_(std::max<size_t>(host.size(), 1)) {
    ptr_ = allocator_.allocate(bytes_);
    REQUIRE(ptr_ != nullptr);
    if (!host.empty()) backend_.copy_from_host(ptr_, host.data(), host.size());
  }
  ~DeviceBytes() { allocator_.deallocate(ptr_, bytes_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* get() const { return ptr_; }

 private:
  ampx::impl::Backend& backend_;
  ampx::impl::Allocator& allocator_;
  size_t bytes_;
  void* ptr_;
};

// A backend and its allocator, released in that order's reverse.
struct Device {
  std::unique_ptr<ampx::impl::Backend> backend;
  std::unique_ptr<ampx::impl::Allocator> allocator;
};

Target backend_target(int32_t threads) {
  ampx::impl::BackendOptions options;
  options.device_type = ampx_test::test_device();
  options.num_threads = threads;
  auto device = std::make_shared<Device>();
  device->backend = ampx::impl::create_backend(options);
  device->allocator = device->backend->make_default_allocator();
  Runner run = [device](GemmArgs& args, const Bytes& a, const Bytes& b, Bytes& c,
                        const Bytes& bias) {
    ampx::impl::Backend& backend = *device->backend;
    DeviceBytes da(backend, *device->allocator, a), db(backend, *device->allocator, b),
        dc(backend, *device->allocator, c), dbias(backend, *device->allocator, bias);
    args.a = da.get(), args.b = db.get(), args.c = dc.get();
    args.bias = bias.empty() ? nullptr : dbias.get();
    ampx_test::gemm_of(backend).gemm(args);
    backend.synchronize();
    if (!c.empty()) backend.copy_to_host(c.data(), dc.get(), c.size());
  };
  return {"backend, num_threads " + std::to_string(threads), run};
}

Target fallback_target(int threads) {
  auto pool = std::make_shared<ampx::impl::ThreadPool>(threads);
  Runner run = [pool](GemmArgs& args, const Bytes& a, const Bytes& b, Bytes& c,
                      const Bytes& bias) {
    args.a = a.data(), args.b = b.data(), args.c = c.data();
    args.bias = bias.empty() ? nullptr : bias.data();
    ampx::impl::cpu::gemm_fallback(*pool, args);
  };
  return {"built-in kernel, " + std::to_string(threads) + " threads", run};
}

// oneDNN's bf16 matmul (dnnl_matmul.h) on 2 threads; what it declines by
// its documented rules goes to the built-in kernel, and it must take the
// rest.
Target dnnl_target() {
  auto pool = std::make_shared<ampx::impl::ThreadPool>(2);
  Runner run = [pool](GemmArgs& args, const Bytes& a, const Bytes& b, Bytes& c,
                      const Bytes& bias) {
    args.a = a.data(), args.b = b.data(), args.c = c.data();
    args.bias = bias.empty() ? nullptr : bias.data();
    ampx::impl::check_gemm_args(args);
    const bool declined = args.ab_type != DType::BF16 ||
                          (args.batch > 1 && args.c_batch_stride == 0) ||
                          (args.bias && args.alpha != 1.0f) || args.batch == 0 || args.m == 0 ||
                          args.n == 0 || args.k == 0;
    const bool taken = ampx::impl::cpu::dnnl_gemm(*pool, args);
    CHECK(taken == !declined);
    if (!taken) ampx::impl::cpu::gemm_fallback(*pool, args);
  };
  return {"oneDNN, 2 threads", run};
}

ampx_status status_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ampx::impl::StatusError& e) {
    return e.status();
  }
  return AMPX_OK;
}

// The backend with 0 (as many as cores) and 1 threads unless its gemm is
// not ported, and the built-in kernel with 1 and 3 threads: 3 splits the
// odd sizes unevenly and spreads batches.
std::vector<Target> targets() {
  std::vector<Target> all;
  Target probe = backend_target(0);
  Bytes a(4), b(4), c(4);
  GemmArgs args;
  args.m = args.n = args.k = 1;
  if (status_of([&] { probe.run(args, a, b, c, {}); }) == AMPX_ERR_NOT_SUPPORTED) {
    MESSAGE("this device's backend has no gemm yet; only the CPU's built-in kernel is tested");
  } else {
    all.push_back(std::move(probe));
    all.push_back(backend_target(1));
  }
  all.push_back(fallback_target(1));
  all.push_back(fallback_target(3));
  if (ampx::impl::cpu::dnnl_available()) {
    all.push_back(dnnl_target());
  } else {
    MESSAGE(ampx::impl::cpu::dnnl_description(), "; its bf16 path is not tested here");
  }
  return all;
}

struct Case {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool trans_a = false, trans_b = false;
  DType ab = DType::F32, c = DType::F32;
  float alpha = 1.0f, beta = 0.0f;
  int64_t pad = 0;        // elements between the matrices of a batch
  bool shared_b = false;  // one B for the whole batch (stride 0)
  bool nan_c = false;     // C's old contents are NaN
  bool bias = false;      // the bias epilogue, a bias of C's type

  std::string describe() const {
    return ampx::impl::cat("batch ", batch, " m ", m, " n ", n, " k ", k, trans_a ? " A^T" : "",
                           trans_b ? " B^T" : "", " ", ampx::impl::dtype_name(ab), "->",
                           ampx::impl::dtype_name(c), " alpha ", alpha, " beta ", beta, " pad ",
                           pad, shared_b ? " shared B" : "", nan_c ? " NaN C" : "",
                           bias ? " bias" : "");
  }
};

// Values of type t with magnitudes in [2^-3, 2^5) and random signs and
// mantissas: fp32 built from one 32-bit draw each, then rounded to t.
Bytes random_values(DType t, size_t n, std::mt19937& rng) {
  std::vector<float> f(n);
  for (float& x : f) {
    const uint32_t r = rng();
    const uint32_t bits = (r & 0x807fffffu) | ((127u - 3u + ((r >> 23) & 7u)) << 23);
    std::memcpy(&x, &bits, sizeof x);
  }
  Bytes raw(n * width(t));
  ampx::impl::convert_bulk(raw.data(), t, f.data(), DType::F32, static_cast<int64_t>(n));
  return raw;
}

// One case's inputs and, for every element of C, the reference result and
// the error bound.
struct Prepared {
  GemmArgs args;
  Bytes a, b, c, bias;
  std::vector<double> c_old, want, bound;
};

Prepared prepare(const Case& cs, std::mt19937& rng) {
  Prepared pr;
  GemmArgs& args = pr.args;
  args.batch = cs.batch, args.m = cs.m, args.n = cs.n, args.k = cs.k;
  args.trans_a = cs.trans_a, args.trans_b = cs.trans_b;
  args.a_batch_stride = cs.m * cs.k + cs.pad;
  args.b_batch_stride = cs.shared_b ? 0 : cs.k * cs.n + cs.pad;
  args.c_batch_stride = cs.m * cs.n + cs.pad;
  args.ab_type = cs.ab, args.c_type = cs.c;
  args.alpha = cs.alpha, args.beta = cs.beta;
  const int64_t c_stride = args.c_batch_stride;

  pr.a = random_values(cs.ab, static_cast<size_t>(args.a_batch_stride * cs.batch), rng);
  pr.b = random_values(cs.ab, static_cast<size_t>(cs.shared_b ? cs.k * cs.n
                                                               : args.b_batch_stride * cs.batch),
                       rng);
  pr.c = random_values(cs.c, static_cast<size_t>(c_stride * cs.batch), rng);
  if (cs.nan_c) {
    const Bytes nan = encode(cs.c, {kNaN});
    for (int64_t i = 0; i < cs.batch; ++i)
      for (int64_t e = 0; e < cs.m * cs.n; ++e)
        std::memcpy(&pr.c[static_cast<size_t>(i * c_stride + e) * width(cs.c)], nan.data(),
                    width(cs.c));
  }
  if (cs.bias) pr.bias = random_values(cs.c, static_cast<size_t>(cs.n), rng);
  const std::vector<double> biases = decode(cs.c, pr.bias);
  const std::vector<double> av = decode(cs.ab, pr.a), bv = decode(cs.ab, pr.b);
  pr.c_old = decode(cs.c, pr.c);
  pr.want.resize(pr.c_old.size());
  pr.bound.resize(pr.c_old.size());
  for (int64_t bi = 0; bi < cs.batch; ++bi)
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) {
        double dot = 0.0, magnitude = 0.0;
        for (int64_t p = 0; p < cs.k; ++p) {
          const double x =
              av[bi * args.a_batch_stride + (cs.trans_a ? p * cs.m + i : i * cs.k + p)];
          const double y =
              bv[bi * args.b_batch_stride + (cs.trans_b ? j * cs.k + p : p * cs.n + j)];
          dot += x * y;
          magnitude += std::fabs(x * y);
        }
        const size_t at = static_cast<size_t>(bi * c_stride + i * cs.n + j);
        const double old_term = cs.beta == 0.0f ? 0.0 : cs.beta * pr.c_old[at];
        const double bias = cs.bias ? biases[static_cast<size_t>(j)] : 0.0;
        pr.want[at] = cs.alpha * dot + old_term + bias;
        pr.bound[at] = static_cast<double>(cs.k + 4) * 0x1p-24 *
                       (std::fabs(cs.alpha) * magnitude + std::fabs(old_term) + std::fabs(bias));
      }
  return pr;
}

// Runs a prepared case on one target; returns "" or what went wrong first.
std::string run_case(const Target& target, const Case& cs, const Prepared& pr) {
  GemmArgs args = pr.args;
  Bytes c = pr.c;
  target.run(args, pr.a, pr.b, c, pr.bias);
  const std::vector<double> have = decode(cs.c, c);
  const int64_t c_stride = args.c_batch_stride;
  for (int64_t bi = 0; bi < cs.batch; ++bi) {
    for (int64_t e = 0; e < c_stride; ++e) {
      const size_t at = static_cast<size_t>(bi * c_stride + e);
      const double got = have[at], want = pr.want[at], bound = pr.bound[at];
      if (e >= cs.m * cs.n) {
        // Padding between the matrices must stay as it was.
        if (std::memcmp(&c[at * width(cs.c)], &pr.c[at * width(cs.c)], width(cs.c)) != 0)
          return ampx::impl::cat(target.name, ": ", cs.describe(), ": padding after matrix ", bi,
                                 " was written");
        continue;
      }
      const bool ok = cs.c == DType::F32
                          ? std::fabs(got - want) <= bound
                          : round_to(cs.c, want - bound) <= got &&
                                got <= round_to(cs.c, want + bound);
      if (!ok)
        return ampx::impl::cat(target.name, ": ", cs.describe(), ": C[", bi, "][", e / cs.n, "][",
                               e % cs.n, "] is ", got, ", want ", want, " within ", bound);
    }
  }
  return "";
}

void check_cases(const std::vector<Case>& cases) {
  std::mt19937 rng(7);
  const std::vector<Target> all = targets();
  for (const Case& cs : cases) {
    const Prepared pr = prepare(cs, rng);
    for (const Target& target : all) {
      const std::string problem = run_case(target, cs, pr);
      CHECK_MESSAGE(problem.empty(), problem);
    }
  }
}

constexpr bool kBools[] = {false, true};

struct Shape {
  int64_t m, n, k;
};

}  // namespace

TEST_CASE("gemm: fp32, every transpose, odd sizes, alpha and beta") {
  std::vector<Case> cases;
  // 130 x 270 x 300 is larger than one block of the built-in kernel in
  // every dimension.
  for (Shape s : {Shape{1, 1, 1}, Shape{7, 13, 5}, Shape{65, 33, 129}, Shape{130, 270, 300}})
    for (bool ta : kBools)
      for (bool tb : kBools)
        for (float beta : {0.0f, 1.5f}) {
          Case cs;
          cs.m = s.m, cs.n = s.n, cs.k = s.k, cs.trans_a = ta, cs.trans_b = tb;
          cs.alpha = beta == 0.0f ? 1.0f : -0.75f;
          cs.beta = beta;
          cases.push_back(cs);
        }
  check_cases(cases);
}

TEST_CASE("gemm: batches with strides, padding and a shared B") {
  std::vector<Case> cases;
  // 5 small products are spread over the threads; 2 of 130 x 70 x 260 are
  // each split over all of them.
  for (Shape s : {Shape{7, 13, 5}, Shape{33, 17, 65}, Shape{130, 70, 260}})
    for (bool ta : kBools)
      for (bool tb : kBools)
        for (bool shared : kBools) {
          Case cs;
          cs.batch = s.m > 100 ? 2 : 5;
          cs.m = s.m, cs.n = s.n, cs.k = s.k, cs.trans_a = ta, cs.trans_b = tb;
          cs.alpha = 2.0f, cs.beta = 0.5f, cs.pad = 3, cs.shared_b = shared;
          cases.push_back(cs);
        }
  check_cases(cases);
}

TEST_CASE("gemm: k = 0 leaves beta * C, and zeros for beta 0 over NaN") {
  std::vector<Case> cases;
  for (DType ab : {DType::F32, DType::F16, DType::BF16})
    for (DType c : {ab, DType::F32})
      for (float beta : {0.0f, -2.0f}) {
        Case cs;
        cs.batch = 2, cs.m = 5, cs.n = 7, cs.k = 0, cs.ab = ab, cs.c = c, cs.beta = beta;
        cs.pad = 1, cs.nan_c = beta == 0.0f;
        cases.push_back(cs);
      }
  check_cases(cases);
}

TEST_CASE("gemm: beta 0 ignores NaN in C") {
  std::vector<Case> cases;
  for (DType ab : {DType::F32, DType::F16, DType::BF16})
    for (DType c : {ab, DType::F32})
      for (Shape s : {Shape{7, 13, 5}, Shape{65, 33, 129}}) {
        Case cs;
        cs.m = s.m, cs.n = s.n, cs.k = s.k, cs.ab = ab, cs.c = c, cs.nan_c = true;
        cases.push_back(cs);
      }
  check_cases(cases);
}

TEST_CASE("gemm: f16 and bf16 inputs with f32 and low-precision outputs") {
  std::vector<Case> cases;
  for (DType ab : {DType::F16, DType::BF16})
    for (DType c : {ab, DType::F32})
      for (Shape s : {Shape{1, 1, 1}, Shape{7, 13, 5}, Shape{65, 33, 129}})
        for (bool ta : kBools)
          for (bool tb : kBools)
            for (float beta : {0.0f, -1.25f}) {
              Case cs;
              cs.batch = 2, cs.m = s.m, cs.n = s.n, cs.k = s.k, cs.trans_a = ta,
              cs.trans_b = tb;
              cs.ab = ab, cs.c = c, cs.alpha = 0.5f, cs.beta = beta, cs.pad = 2;
              cases.push_back(cs);
            }
  check_cases(cases);
}

// Above 16M multiply-adds oneDNN's product runs on its threads, not on the
// caller's alone (dnnl_matmul.cpp); each path must give the same product.
TEST_CASE("gemm: bf16 products large enough to run on several threads") {
  std::vector<Case> cases;
  for (bool transposed : kBools) {
    Case cs;
    cs.m = 257, cs.n = 263, cs.k = 255, cs.trans_a = transposed, cs.trans_b = transposed;
    cs.ab = DType::BF16, cs.c = transposed ? DType::BF16 : DType::F32;
    cs.beta = transposed ? 0.5f : 0.0f;
    cs.bias = !transposed;
    cases.push_back(cs);
  }
  check_cases(cases);
}

// Each shape's fp32 copies exceed the conversion scratch (4 Mi floats), so
// it is converted and multiplied in tiles: over k, over n, over m. The types
// alternate to keep the case count down.
TEST_CASE("gemm: f16 and bf16 products larger than the scratch go tile by tile") {
  std::vector<Case> cases;
  for (Shape s : {Shape{2, 1100, 4000}, Shape{2, 4000, 1100}, Shape{4000, 2, 1100}})
    for (bool ta : kBools)
      for (bool tb : kBools) {
        const bool bf16 = ta == tb;
        Case cs;
        cs.m = s.m, cs.n = s.n, cs.k = s.k, cs.trans_a = ta, cs.trans_b = tb;
        cs.ab = bf16 ? DType::BF16 : DType::F16, cs.c = bf16 ? DType::BF16 : DType::F32;
        cs.alpha = 1.5f, cs.beta = bf16 ? 0.25f : 0.0f;
        cases.push_back(cs);
      }
  check_cases(cases);
}

// With C's batch stride 0 and beta 1, the products of a batch add up in
// one C (as for the gradient of a weight shared by the batch); small
// products must then not be computed concurrently.
TEST_CASE("gemm: a batch with C stride 0 and beta 1 sums its products") {
  // Large enough that a batch of independent products would be spread.
  const int64_t batch = 6, m = 48, n = 40, k = 56;
  std::mt19937 rng(11);
  const Bytes a = random_values(DType::F32, batch * m * k, rng);
  const Bytes b = random_values(DType::F32, batch * k * n, rng);
  const Bytes c0 = random_values(DType::F32, m * n, rng);
  const std::vector<double> av = decode(DType::F32, a), bv = decode(DType::F32, b);
  std::vector<double> want = decode(DType::F32, c0), bound(want.size());
  for (size_t e = 0; e < want.size(); ++e) bound[e] = std::fabs(want[e]);
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p) {
          const double x = av[(bi * m + i) * k + p] * bv[(bi * k + p) * n + j];
          want[i * n + j] += x;
          bound[i * n + j] += std::fabs(x);
        }
  for (const Target& target : targets()) {
    CAPTURE(target.name);
    GemmArgs args;
    args.batch = batch, args.m = m, args.n = n, args.k = k;
    args.a_batch_stride = m * k, args.b_batch_stride = k * n, args.c_batch_stride = 0;
    args.beta = 1.0f;
    Bytes c = c0;
    target.run(args, a, b, c, {});
    const std::vector<double> have = decode(DType::F32, c);
    std::string problem;
    for (size_t e = 0; e < have.size() && problem.empty(); ++e) {
      // batch * (k + 2) roundings, each within 2^-24 of a partial sum.
      const double tol = static_cast<double>(batch * (k + 2)) * 0x1p-24 * bound[e];
      if (!(std::fabs(have[e] - want[e]) <= tol))
        problem = ampx::impl::cat("C[", e, "] is ", have[e], ", want ", want[e]);
    }
    CHECK_MESSAGE(problem.empty(), problem);
  }
}

TEST_CASE("gemm: the bias epilogue is added before C's one rounding") {
  // A 16-bit C must be the correctly rounded alpha AB + beta C + bias: a
  // bias added after rounding the product rounds twice and misses the bound
  // (checked: 68 failures here when the CPU rounds C before the bias).
  std::vector<Case> cases;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (Shape s : {Shape{1, 1, 1}, Shape{33, 67, 40}, Shape{130, 270, 300}, Shape{5, 9, 0}})
      for (bool tb : kBools) {
        Case c;
        c.m = s.m, c.n = s.n, c.k = s.k, c.trans_b = tb;
        c.ab = c.c = t;
        c.bias = true;
        cases.push_back(c);
        c.beta = 0.5f, c.alpha = -1.5f;
        cases.push_back(c);
      }
  Case f32_out;  // 16-bit inputs into an f32 C, bias f32
  f32_out.m = 40, f32_out.n = 24, f32_out.k = 64, f32_out.ab = DType::BF16, f32_out.bias = true;
  cases.push_back(f32_out);
  check_cases(cases);
}

TEST_CASE("gemm: types and sizes outside the contract are refused") {
  for (const Target& target : targets()) {
    CAPTURE(target.name);
    Bytes a(16), b(16), c(16);
    auto status = [&](DType ab, DType cd, int64_t m) {
      GemmArgs args;
      args.m = m, args.n = 1, args.k = 1, args.ab_type = ab, args.c_type = cd;
      return status_of([&] { target.run(args, a, b, c, {}); });
    };
    CHECK(status(DType::F16, DType::BF16, 1) == AMPX_ERR_DTYPE);
    CHECK(status(DType::F32, DType::F16, 1) == AMPX_ERR_DTYPE);
    CHECK(status(DType::I32, DType::I32, 1) == AMPX_ERR_DTYPE);
    CHECK(status(DType::F32, DType::F32, -1) == AMPX_ERR_INVALID_ARGUMENT);
  }
}
