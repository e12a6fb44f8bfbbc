// test_amp_primitives.cpp -- the multi-tensor primitives of mixed-precision
// training (Backend::multi_tensor_scale through adam_step), on the suite's
// device.
//
// The expected values are computed here, in double precision, from the rules
// of DESIGN.md section 4; nothing of kernels/math is called. 16-bit floats
// are decoded from their fields with std::ldexp and rounded with
// std::nearbyint (ties to even in the default rounding mode); the
// optimizers and the scaler are re-derived from their formulas. Data moves
// only through the backend's allocator and host copies, so every case runs
// unchanged on the CUDA backend.
#include "support.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"

namespace {

using ampx::DType;
using ampx::NormType;
using ampx::OptimParam;
using ampx::TensorSpan;
using ampx::math::ScalerConfig;
using ampx::math::ScalerState;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- the independent reference for the floating formats -------------------

struct Format {
  int exp_bits;
  int man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
};

Format format_of(DType t) {
  switch (t) {
    case DType::F16: return {5, 10};
    case DType::BF16: return {8, 7};
    default: return {8, 23};
  }
}

size_t width(DType t) { return t == DType::F32 ? 4 : 2; }

// The value of bit pattern `raw` of type t.
double decode(DType t, uint32_t raw) {
  const Format f = format_of(t);
  const uint32_t man = raw & ((1u << f.man_bits) - 1);
  const uint32_t exp = (raw >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const double sign = ((raw >> (f.exp_bits + f.man_bits)) & 1u) ? -1.0 : 1.0;
  if (exp == (1u << f.exp_bits) - 1) return man ? kNaN : sign * kInf;
  if (exp == 0) return sign * std::ldexp(man, 1 - f.bias() - f.man_bits);
  return sign * std::ldexp(man + (1u << f.man_bits), static_cast<int>(exp) - f.bias() - f.man_bits);
}

// x rounded to the nearest value of type t, ties to even; too large gives inf.
double round_to(DType t, double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const Format f = format_of(t);
  int e;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  const int ulp = std::max(e - 1, 1 - f.bias()) - f.man_bits;
  const double r = std::ldexp(std::nearbyint(std::ldexp(std::fabs(x), -ulp)), ulp);
  const double largest = std::ldexp(std::ldexp(2.0, f.man_bits) - 1.0, f.bias() - f.man_bits);
  return std::copysign(r > largest ? kInf : r, x);
}

uint32_t inf_raw(DType t, bool negative) {
  const Format f = format_of(t);
  const uint32_t sign = negative ? 1u << (f.exp_bits + f.man_bits) : 0u;
  return sign | (((1u << f.exp_bits) - 1) << f.man_bits);
}

uint32_t nan_raw(DType t) { return inf_raw(t, false) | (1u << (format_of(t).man_bits - 1)); }

// A tensor of any floating type on the host, as raw bit patterns.
struct HostTensor {
  DType dtype;
  std::vector<uint8_t> bytes;

  HostTensor(DType t, size_t n) : dtype(t), bytes(n * width(t)) {}
  size_t size() const { return bytes.size() / width(dtype); }
  uint32_t raw(size_t i) const {
    uint32_t v = 0;
    std::memcpy(&v, &bytes[i * width(dtype)], width(dtype));
    return v;
  }
  void set_raw(size_t i, uint32_t v) { std::memcpy(&bytes[i * width(dtype)], &v, width(dtype)); }
  double at(size_t i) const { return decode(dtype, raw(i)); }
};

// Random values of magnitude in [2^min_exp, 2^(max_exp+1)), either sign,
// with every mantissa bit random.
HostTensor random_tensor(DType t, size_t n, std::mt19937& rng, int min_exp, int max_exp) {
  const Format f = format_of(t);
  std::uniform_int_distribution<int> exponent(min_exp, max_exp);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << f.man_bits) - 1);
  std::bernoulli_distribution negative(0.5);
  HostTensor h(t, n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t sign = negative(rng) ? 1u << (f.exp_bits + f.man_bits) : 0u;
    const uint32_t biased = static_cast<uint32_t>(exponent(rng) + f.bias());
    h.set_raw(i, sign | (biased << f.man_bits) | mantissa(rng));
  }
  return h;
}

std::string name(DType t) { return ampx::dtype_name(t); }

// ---- device access -----------------------------------------------------

struct Device {
  std::unique_ptr<ampx::Backend> backend;
  std::unique_ptr<ampx::Allocator> allocator;

  explicit Device(int32_t threads = 0) {
    ampx::BackendOptions options;
    options.device_type = ampx_test::test_device();
    options.num_threads = threads;
    backend = ampx::create_backend(options);
    allocator = backend->make_default_allocator();
  }
  ampx::Backend* operator->() { return backend.get(); }
};

// Device memory, filled from and read back to the host.
class Buffer {
 public:
  Buffer(Device& device, size_t bytes) : device_(&device), bytes_(bytes) {
    ptr_ = device.allocator->allocate(std::max<size_t>(bytes, 1));
    REQUIRE(ptr_ != nullptr);
  }
  template <class T>
  Buffer(Device& device, const std::vector<T>& host) : Buffer(device, host.size() * sizeof(T)) {
    put(host);
  }
  Buffer(Device& device, const HostTensor& host) : Buffer(device, host.bytes) {}
  Buffer(Buffer&& other) noexcept : device_(other.device_), ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = nullptr;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() {
    if (ptr_) device_->allocator->deallocate(ptr_, std::max<size_t>(bytes_, 1));
  }

  template <class T>
  void put(const std::vector<T>& host) {
    REQUIRE(host.size() * sizeof(T) == bytes_);
    if (bytes_) device_->backend->copy_from_host(ptr_, host.data(), bytes_);
  }
  void put(const HostTensor& host) { put(host.bytes); }
  template <class T>
  std::vector<T> get() const {
    std::vector<T> host(bytes_ / sizeof(T));
    if (bytes_) device_->backend->copy_to_host(host.data(), ptr_, bytes_);
    return host;
  }
  HostTensor get(DType t) const {
    HostTensor h(t, bytes_ / width(t));
    h.bytes = get<uint8_t>();
    return h;
  }
  template <class T = void>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  TensorSpan span(DType t) const { return {ptr_, t, static_cast<int64_t>(bytes_ / width(t))}; }

 private:
  Device* device_;
  void* ptr_;
  size_t bytes_;
};

Buffer scalar(Device& d, float v) { return Buffer(d, std::vector<float>{v}); }

template <class Fn>
ampx_status status_of(Fn&& fn) {
  try {
    fn();
  } catch (const ampx::Error& e) {
    return e.status();
  }
  return AMPX_OK;
}

// Equal values, NaN matching NaN and zeros matching in sign.
bool same(double have, double want) {
  return std::isnan(want) ? std::isnan(have)
                          : have == want && std::signbit(have) == std::signbit(want);
}

#define CHECK_SAME(have, want) CHECK_MESSAGE(same((have), (want)), "got ", (have), ", want ", (want))

}  // namespace

// ---- unscaling and scaling ---------------------------------------------

// For every float s, float(1.0 / double(s)) == 1.0f / s: rounding a quotient
// first to double and then to float is harmless (53 >= 2 * 24 + 2 bits), so
// the two ways of taking the reciprocal cannot be told apart. What can is
// whether grads are multiplied by that reciprocal, as PyTorch does, or
// divided by the scale, which rounds differently for many values.
TEST_CASE("amp primitives: unscaling multiplies by the reciprocal taken in double") {
  Device d;
  std::mt19937 rng(1);
  const HostTensor x = random_tensor(DType::F32, 4096, rng, -20, 20);
  const float scale = 3.0f * 4096.0f;
  const double inv = static_cast<float>(1.0 / static_cast<double>(scale));

  int division_differs = 0;
  for (size_t i = 0; i < x.size(); ++i)
    division_differs += round_to(DType::F32, x.at(i) * inv) != round_to(DType::F32, x.at(i) / scale);
  REQUIRE_MESSAGE(division_differs > 100, "the scale does not tell multiplying from dividing");

  Buffer grads(d, x);
  Buffer factor = scalar(d, scale);
  Buffer found = scalar(d, 0.0f);
  d->multi_tensor_scale({grads.span(DType::F32)}, {grads.span(DType::F32)}, factor.as<float>(),
                        true, found.as<float>());
  const HostTensor y = grads.get(DType::F32);
  int wrong = 0;
  // x * inv is exact in double (24 + 24 significant bits): rounding it once
  // is the float product.
  for (size_t i = 0; i < x.size(); ++i) wrong += y.at(i) != round_to(DType::F32, x.at(i) * inv);
  CHECK(wrong == 0);
  CHECK(found.get<float>()[0] == 0.0f);
}

namespace {

// One tensor of an unscale case: an input, and the output it is written to
// (itself when `in_place`).
struct ScaleSlot {
  DType in;
  DType out;
  size_t count;
  bool in_place;
};

const ScaleSlot kScaleSlots[] = {
    {DType::F32, DType::F32, 70000, true},  // more than one chunk
    {DType::F16, DType::F32, 1000, false},  // f16 grads unscaled into f32
    {DType::BF16, DType::BF16, 333, true},
    {DType::F16, DType::F32, 0, false},
    {DType::F32, DType::BF16, 17, false},
    {DType::F16, DType::F16, 50, true},
};

struct Injection {
  size_t slot;
  size_t index;
  uint32_t raw;  // a bit pattern of the slot's input type
};

// Unscales the slots with `injections` applied to random data and checks
// every output element and the found-inf flag.
void check_unscale(const std::vector<Injection>& injections, bool expect_found) {
  Device d;
  std::mt19937 rng(static_cast<unsigned>(injections.size() * 31 + 5));
  const float scale = 49152.0f;  // 3 * 2^14: the products round
  const double inv = static_cast<float>(1.0 / static_cast<double>(scale));

  std::vector<HostTensor> inputs;
  for (const ScaleSlot& s : kScaleSlots) inputs.push_back(random_tensor(s.in, s.count, rng, -8, 14));
  for (const Injection& inj : injections) inputs[inj.slot].set_raw(inj.index, inj.raw);

  std::vector<Buffer> in_buffers, out_buffers;
  in_buffers.reserve(inputs.size());  // the pointers below must stay valid
  out_buffers.reserve(inputs.size());
  std::vector<const Buffer*> out_of;
  std::vector<TensorSpan> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ScaleSlot& s = kScaleSlots[i];
    in_buffers.emplace_back(d, inputs[i]);
    ins.push_back(in_buffers.back().span(s.in));
    if (!s.in_place) out_buffers.emplace_back(d, s.count * width(s.out));
    out_of.push_back(s.in_place ? &in_buffers.back() : &out_buffers.back());
    outs.push_back(out_of.back()->span(s.out));
  }
  Buffer factor = scalar(d, scale);
  Buffer found = scalar(d, 0.0f);
  d->multi_tensor_scale(ins, outs, factor.as<float>(), true, found.as<float>());

  CHECK(found.get<float>()[0] == (expect_found ? 1.0f : 0.0f));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ScaleSlot& s = kScaleSlots[i];
    CAPTURE(i);
    const HostTensor out = out_of[i]->get(s.out);
    int wrong = 0;
    for (size_t j = 0; j < s.count; ++j) {
      // Non-finite inputs are scaled too: inf stays inf, NaN stays NaN.
      const double want = round_to(s.out, round_to(DType::F32, inputs[i].at(j) * inv));
      wrong += !same(out.at(j), want);
    }
    CHECK_MESSAGE(wrong == 0, name(s.in), " -> ", name(s.out));
    if (!s.in_place) CHECK(in_buffers[i].get<uint8_t>() == inputs[i].bytes);
  }
}

}  // namespace

TEST_CASE("amp primitives: unscale with injected infinities and NaNs") {
  SUBCASE("clean gradients leave found_inf at 0") { check_unscale({}, false); }
  SUBCASE("+inf in f16 grads unscaled into f32") {
    check_unscale({{1, 0, inf_raw(DType::F16, false)}}, true);
  }
  SUBCASE("-inf in bf16 grads, in place") {
    check_unscale({{2, 332, inf_raw(DType::BF16, true)}}, true);
  }
  SUBCASE("NaN in the last chunk of a large f32 tensor") {
    check_unscale({{0, 69999, nan_raw(DType::F32)}}, true);
  }
  SUBCASE("NaN and inf in several tensors and types") {
    check_unscale({{5, 7, nan_raw(DType::F16)},
                   {4, 0, inf_raw(DType::F32, true)},
                   {0, 12345, inf_raw(DType::F32, false)},
                   {2, 1, nan_raw(DType::BF16)}},
                  true);
  }
}

TEST_CASE("amp primitives: found_inf is only ever set, and outputs are optional") {
  Device d;
  const std::vector<float> clean = {1.0f, -2.0f, 0.5f};
  Buffer grads(d, clean);
  const TensorSpan g = grads.span(DType::F32);

  SUBCASE("a flag already set stays set over clean grads") {
    Buffer factor = scalar(d, 4.0f);
    Buffer found = scalar(d, 1.0f);
    d->multi_tensor_scale({g}, {g}, factor.as<float>(), true, found.as<float>());
    CHECK(found.get<float>()[0] == 1.0f);
    CHECK(grads.get<float>() == std::vector<float>{0.25f, -0.5f, 0.125f});
  }
  SUBCASE("without outputs only the flag is written") {
    const std::vector<float> bad = {1.0f, static_cast<float>(kInf), 3.0f};
    Buffer other(d, bad);
    Buffer factor = scalar(d, 4.0f);
    Buffer found = scalar(d, 0.0f);
    d->multi_tensor_scale({g, other.span(DType::F32)}, {}, factor.as<float>(), true,
                          found.as<float>());
    CHECK(found.get<float>()[0] == 1.0f);
    CHECK(other.get<float>() == bad);
    CHECK(grads.get<float>() == clean);
  }
  SUBCASE("a product that overflows is non-finite, though its input is not") {
    Buffer big(d, std::vector<float>{0x1p100f, 1.0f});
    Buffer factor = scalar(d, 0x1p30f);
    Buffer found = scalar(d, 0.0f);
    d->multi_tensor_scale({big.span(DType::F32)}, {big.span(DType::F32)}, factor.as<float>(),
                          false, found.as<float>());
    CHECK(found.get<float>()[0] == 1.0f);
    CHECK(big.get<float>() == std::vector<float>{static_cast<float>(kInf), 0x1p30f});
  }
  SUBCASE("without a flag the grads are scaled all the same") {
    Buffer factor = scalar(d, 0.5f);
    d->multi_tensor_scale({g}, {g}, factor.as<float>(), false, nullptr);
    CHECK(grads.get<float>() == std::vector<float>{0.5f, -1.0f, 0.25f});
  }
}

// ---- norms -------------------------------------------------------------

namespace {

// A tensor list on the device and its values on the host.
struct TensorList {
  std::vector<HostTensor> host;
  std::vector<Buffer> buffers;
  std::vector<TensorSpan> spans;

  TensorList(Device& d, std::vector<HostTensor> tensors) : host(std::move(tensors)) {
    buffers.reserve(host.size());
    for (const HostTensor& h : host) {
      buffers.emplace_back(d, h);
      spans.push_back(buffers.back().span(h.dtype));
    }
  }
};

// Mixed types and sizes: one tensor of several chunks, many small ones,
// empty ones.
std::vector<HostTensor> mixed_tensors(std::mt19937& rng, size_t small_tensors) {
  std::vector<HostTensor> ts;
  ts.push_back(random_tensor(DType::F32, 150000, rng, -10, 5));
  ts.push_back(random_tensor(DType::F16, 1000, rng, -10, 10));
  ts.push_back(random_tensor(DType::BF16, 500, rng, -30, 30));
  ts.push_back(HostTensor(DType::F32, 0));
  const DType types[] = {DType::F32, DType::F16, DType::BF16};
  std::uniform_int_distribution<size_t> size(0, 40);
  for (size_t i = 0; i < small_tensors; ++i)
    ts.push_back(random_tensor(types[i % 3], size(rng), rng, -6, 6));
  ts.push_back(random_tensor(DType::F32, 1, rng, 0, 0));
  return ts;
}

double l2_reference(const std::vector<HostTensor>& ts) {
  long double sum = 0;
  for (const HostTensor& t : ts)
    for (size_t i = 0; i < t.size(); ++i) sum += static_cast<long double>(t.at(i)) * t.at(i);
  return static_cast<double>(std::sqrt(sum));
}

double inf_reference(const std::vector<HostTensor>& ts) {
  double m = 0;
  for (const HostTensor& t : ts)
    for (size_t i = 0; i < t.size(); ++i) {
      if (std::isnan(t.at(i))) return kNaN;
      m = std::max(m, std::fabs(t.at(i)));
    }
  return m;
}

float device_norm(Device& d, const std::vector<TensorSpan>& spans, NormType type) {
  Buffer out = scalar(d, -1.0f);
  d->multi_tensor_norm(spans, type, out.as<float>());
  return out.get<float>()[0];
}

// The CPU accumulates in double, so its L2 norm is the exact one rounded once
// to float (2^-24 relative; 2^-23 allows for the double sum's own error).
// The contract allows fp32 accumulation, as a GPU does: its error grows with
// the length of the longest chain of additions, a few hundred terms at most
// in a parallel reduction, each adding at most 2^-24 of the partial sum.
double l2_tolerance() {
  return ampx_test::test_device() == AMPX_DEVICE_CPU ? 0x1p-23 : 2e-5;
}

}  // namespace

TEST_CASE("amp primitives: L2 and inf norms of many tensors of mixed types") {
  Device d;
  std::mt19937 rng(3);
  const TensorList list(d, mixed_tensors(rng, 400));
  const double l2 = l2_reference(list.host);
  CHECK(std::fabs(device_norm(d, list.spans, NormType::L2) - l2) <= l2_tolerance() * l2);
  // A maximum is exact in any precision.
  CHECK(device_norm(d, list.spans, NormType::Inf) == static_cast<float>(inf_reference(list.host)));
}

TEST_CASE("amp primitives: the norm of nothing is 0") {
  Device d;
  const TensorList empty(d, {HostTensor(DType::F16, 0), HostTensor(DType::F32, 0)});
  for (NormType type : {NormType::L2, NormType::Inf}) {
    CHECK(device_norm(d, {}, type) == 0.0f);
    CHECK(device_norm(d, empty.spans, type) == 0.0f);
  }
}

TEST_CASE("amp primitives: a NaN anywhere makes the norm NaN; an inf makes it inf") {
  struct Case {
    const char* what;
    std::vector<Injection> injections;  // slot = tensor of the mixed list
    double want;
  };
  const Case cases[] = {
      {"NaN first", {{0, 0, nan_raw(DType::F32)}}, kNaN},
      {"NaN last", {{5, 0, nan_raw(DType::F32)}}, kNaN},
      {"NaN in a later chunk", {{0, 140000, nan_raw(DType::F32)}}, kNaN},
      {"NaN in f16 and inf in bf16", {{1, 999, nan_raw(DType::F16)}, {2, 3, inf_raw(DType::BF16, false)}}, kNaN},
      {"inf then NaN", {{0, 5, inf_raw(DType::F32, false)}, {2, 400, nan_raw(DType::BF16)}}, kNaN},
      {"-inf alone", {{1, 10, inf_raw(DType::F16, true)}}, kInf},
  };
  Device d;
  for (const Case& c : cases) {
    CAPTURE(c.what);
    std::mt19937 rng(9);
    std::vector<HostTensor> ts = mixed_tensors(rng, 1);
    for (const Injection& inj : c.injections) ts[inj.slot].set_raw(inj.index, inj.raw);
    const TensorList list(d, std::move(ts));
    CHECK_SAME(device_norm(d, list.spans, NormType::L2), c.want);
    CHECK_SAME(device_norm(d, list.spans, NormType::Inf), c.want);
  }
}

TEST_CASE("amp primitives: norms do not depend on the number of threads") {
  std::mt19937 rng(5);
  // Magnitudes spanning 2^60 make the sum's rounding depend on its order.
  std::vector<HostTensor> ts = mixed_tensors(rng, 50);
  ts.push_back(random_tensor(DType::F32, 200000, rng, -30, 30));
  Device one(1), four(4);
  const TensorList a(one, ts), b(four, ts);
  for (NormType type : {NormType::L2, NormType::Inf}) {
    const float x = device_norm(one, a.spans, type);
    const float y = device_norm(four, b.spans, type);
    CHECK(std::memcmp(&x, &y, sizeof x) == 0);
  }
}

// ---- clipping, clamping, counting --------------------------------------

TEST_CASE("amp primitives: the clip coefficient is torch's max_norm / (total + 1e-6), at most 1") {
  // torch computes it on fp32 tensors: total + 1e-6 rounds to float, then
  // the quotient does, then clamp(max=1) keeps a NaN.
  auto torch_coef = [](double total, double max_norm) {
    const double t = round_to(DType::F32, total + static_cast<double>(1e-6f));
    const double c = round_to(DType::F32, max_norm / t);
    return c > 1.0 ? 1.0 : c;
  };
  const std::pair<float, float> cases[] = {
      {0.0f, 1.0f}, {0.5f, 1.0f}, {1.0f, 1.0f},       {10.0f, 1.0f},
      {3.7f, 2.5f}, {1e-7f, 1e-6f}, {6e4f, 0.25f}, {static_cast<float>(kInf), 1.0f},
      {static_cast<float>(kNaN), 1.0f}};
  Device d;
  for (const auto& [total, max_norm] : cases) {
    CAPTURE(total);
    CAPTURE(max_norm);
    Buffer t = scalar(d, total);
    Buffer coef = scalar(d, -1.0f);
    d->clip_coefficient(t.as<float>(), max_norm, coef.as<float>());
    CHECK_SAME(coef.get<float>()[0], torch_coef(total, max_norm));
  }
  // The boundary: a norm equal to max_norm still scales, by 1/(1 + 1e-6).
  CHECK(torch_coef(1.0, 1.0) < 1.0);
}

TEST_CASE("amp primitives: clamp bounds every element to [-limit, limit]") {
  Device d;
  std::mt19937 rng(13);
  const float limit = 3.3f;  // not a value of f16 or bf16: the bound rounds
  std::vector<HostTensor> ts;
  ts.push_back(random_tensor(DType::F32, 70000, rng, -3, 3));
  ts.push_back(random_tensor(DType::F16, 500, rng, -3, 3));
  ts.push_back(random_tensor(DType::BF16, 300, rng, -3, 3));
  ts.push_back(HostTensor(DType::BF16, 0));
  ts[0].set_raw(1, inf_raw(DType::F32, false));
  ts[0].set_raw(66000, inf_raw(DType::F32, true));
  ts[0].set_raw(2, nan_raw(DType::F32));
  float exact = -limit;
  std::memcpy(&ts[0].bytes[3 * 4], &exact, 4);
  ts[1].set_raw(0, inf_raw(DType::F16, true));
  ts[1].set_raw(1, nan_raw(DType::F16));
  ts[2].set_raw(0, inf_raw(DType::BF16, false));
  const TensorList list(d, ts);
  d->multi_tensor_clamp(list.spans, limit);

  for (size_t i = 0; i < ts.size(); ++i) {
    const HostTensor got = list.buffers[i].get(ts[i].dtype);
    int wrong = 0;
    for (size_t j = 0; j < ts[i].size(); ++j) {
      const double x = ts[i].at(j);
      const double want = std::isnan(x) ? kNaN : round_to(ts[i].dtype, std::clamp<double>(x, -limit, limit));
      wrong += !same(got.at(j), want);
    }
    CHECK_MESSAGE(wrong == 0, name(ts[i].dtype));
  }
}

TEST_CASE("amp primitives: count_nonfinite counts NaNs and infinities per tensor") {
  Device d;
  std::mt19937 rng(17);
  std::vector<HostTensor> ts;
  ts.push_back(random_tensor(DType::F32, 70000, rng, -10, 10));
  ts.push_back(random_tensor(DType::F16, 500, rng, -10, 10));
  ts.push_back(HostTensor(DType::BF16, 0));
  ts.push_back(random_tensor(DType::BF16, 100, rng, -10, 10));
  ts.push_back(HostTensor(DType::F16, 3));
  // Quiet, negative and signalling NaNs, both infinities, several chunks.
  std::uniform_int_distribution<size_t> where(0, 69999);
  const uint32_t f32_specials[] = {nan_raw(DType::F32), 0xffc00000u, 0x7f800001u,
                                   inf_raw(DType::F32, false), inf_raw(DType::F32, true)};
  for (int k = 0; k < 60; ++k) ts[0].set_raw(where(rng), f32_specials[k % 5]);
  ts[1].set_raw(7, 0x7c01u);  // a signalling f16 NaN
  ts[1].set_raw(8, 0xfe00u);
  ts[1].set_raw(499, inf_raw(DType::F16, true));
  for (size_t j = 0; j < 3; ++j) ts[4].set_raw(j, nan_raw(DType::F16));

  const TensorList list(d, ts);
  Buffer counts(d, std::vector<int64_t>(2 * ts.size(), 999));
  d->multi_tensor_count_nonfinite(list.spans, counts.as<int64_t>());
  const std::vector<int64_t> got = counts.get<int64_t>();
  for (size_t i = 0; i < ts.size(); ++i) {
    int64_t nans = 0, infs = 0;
    for (size_t j = 0; j < ts[i].size(); ++j) {
      nans += std::isnan(ts[i].at(j));
      infs += std::isinf(ts[i].at(j));
    }
    CAPTURE(i);
    CHECK(got[2 * i] == nans);
    CHECK(got[2 * i + 1] == infs);
  }
  CHECK(got[1] > 10);  // the specials were placed: the test counts something
}
