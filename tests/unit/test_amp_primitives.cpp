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
#include "support.h"
#include "unit/backend_caps.h"

namespace {

using ampx::impl::DType;
using ampx::impl::NormType;
using ampx::impl::OptimParam;
using ampx::impl::TensorSpan;
using ampx::impl::math::ScalerConfig;
using ampx::impl::math::ScalerState;

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
// with every mantissa bit random (one 32-bit draw per value: 23 mantissa
// bits at most, 8 to pick the exponent, 1 for the sign).
HostTensor random_tensor(DType t, size_t n, std::mt19937& rng, int min_exp, int max_exp) {
  const Format f = format_of(t);
  const uint32_t exponents = static_cast<uint32_t>(max_exp - min_exp + 1);
  HostTensor h(t, n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    const uint32_t sign = (r >> 31) << (f.exp_bits + f.man_bits);
    const uint32_t biased =
        static_cast<uint32_t>(min_exp + f.bias()) + ((r >> 23) & 0xffu) % exponents;
    h.set_raw(i, sign | (biased << f.man_bits) | (r & ((1u << f.man_bits) - 1)));
  }
  return h;
}

std::string name(DType t) { return ampx::impl::dtype_name(t); }

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
  ampx::impl::Backend* operator->() { return backend.get(); }
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
  } catch (const ampx::impl::StatusError& e) {
    return e.status();
  }
  return AMPX_OK;
}

// Equal values, NaN matching NaN and zeros matching in sign.
bool same(double have, double want) {
  return std::isnan(want) ? std::isnan(have)
                          : have == want && std::signbit(have) == std::signbit(want);
}

#define CHECK_SAME(have, want) \
  CHECK_MESSAGE(same((have), (want)), "got ", (have), ", want ", (want))

}  // namespace

// The reference itself, on values whose rounding is known by hand: the f16
// overflow tie, ties to even both ways, subnormals, the bf16 range.
TEST_CASE("amp primitives: the test's own rounding reference") {
  CHECK(round_to(DType::F16, 65519.0) == 65504.0);
  CHECK(round_to(DType::F16, 65520.0) == kInf);
  CHECK(round_to(DType::F16, -1.0 - 0x1p-11) == -1.0);
  CHECK(round_to(DType::F16, 1.0 + 3 * 0x1p-11) == 1.0 + 0x1p-9);
  CHECK(round_to(DType::F16, 0x1p-25) == 0.0);
  CHECK(round_to(DType::F16, 3 * 0x1p-26) == 0x1p-24);
  CHECK(round_to(DType::BF16, 1.0 + 0x1p-8) == 1.0);
  CHECK(round_to(DType::BF16, 1e38) == 0x1.2cp+126);
  CHECK(round_to(DType::F32, 0.1) == static_cast<double>(0.1f));
  CHECK(decode(DType::F16, 0x0001) == 0x1p-24);
  CHECK(decode(DType::F16, 0xfbff) == -65504.0);
  CHECK(decode(DType::BF16, 0x3f80) == 1.0);
  CHECK(std::isnan(decode(DType::BF16, nan_raw(DType::BF16))));
  CHECK(decode(DType::F32, inf_raw(DType::F32, true)) == -kInf);
}

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
    division_differs +=
        round_to(DType::F32, x.at(i) * inv) != round_to(DType::F32, x.at(i) / scale);
  REQUIRE_MESSAGE(division_differs > 100, "the scale does not tell multiplying from dividing");

  Buffer grads(d, x);
  Buffer factor = scalar(d, scale);
  Buffer found = scalar(d, 0.0f);
  ampx_test::amp_of(d).multi_tensor_scale({grads.span(DType::F32)}, {grads.span(DType::F32)},
                                          factor.as<float>(), true, found.as<float>());
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
    {DType::BF16, DType::BF16, 333, true}, {DType::F16, DType::F32, 0, false},
    {DType::F32, DType::BF16, 17, false},  {DType::F16, DType::F16, 50, true},
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
  for (const ScaleSlot& s : kScaleSlots)
    inputs.push_back(random_tensor(s.in, s.count, rng, -8, 14));
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
  ampx_test::amp_of(d).multi_tensor_scale(ins, outs, factor.as<float>(), true, found.as<float>());

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
    ampx_test::amp_of(d).multi_tensor_scale({g}, {g}, factor.as<float>(), true, found.as<float>());
    CHECK(found.get<float>()[0] == 1.0f);
    CHECK(grads.get<float>() == std::vector<float>{0.25f, -0.5f, 0.125f});
  }
  SUBCASE("without outputs only the flag is written") {
    const std::vector<float> bad = {1.0f, static_cast<float>(kInf), 3.0f};
    Buffer other(d, bad);
    Buffer factor = scalar(d, 4.0f);
    Buffer found = scalar(d, 0.0f);
    ampx_test::amp_of(d).multi_tensor_scale({g, other.span(DType::F32)}, {}, factor.as<float>(),
                                            true, found.as<float>());
    CHECK(found.get<float>()[0] == 1.0f);
    CHECK(other.get<float>() == bad);
    CHECK(grads.get<float>() == clean);
  }
  SUBCASE("a product that overflows is non-finite, though its input is not") {
    Buffer big(d, std::vector<float>{0x1p100f, 1.0f});
    Buffer factor = scalar(d, 0x1p30f);
    Buffer found = scalar(d, 0.0f);
    ampx_test::amp_of(d).multi_tensor_scale({big.span(DType::F32)}, {big.span(DType::F32)},
                                            factor.as<float>(), false, found.as<float>());
    CHECK(found.get<float>()[0] == 1.0f);
    CHECK(big.get<float>() == std::vector<float>{static_cast<float>(kInf), 0x1p30f});
  }
  SUBCASE("without a flag the grads are scaled all the same") {
    Buffer factor = scalar(d, 0.5f);
    ampx_test::amp_of(d).multi_tensor_scale({g}, {g}, factor.as<float>(), false, nullptr);
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
// empty ones. Magnitudes within 2^±7, so that no few elements dominate a
// sum and hide how the rest was accumulated.
std::vector<HostTensor> mixed_tensors(std::mt19937& rng, size_t small_tensors) {
  std::vector<HostTensor> ts;
  ts.push_back(random_tensor(DType::F32, 150000, rng, -6, 6));
  ts.push_back(random_tensor(DType::F16, 1000, rng, -6, 6));
  ts.push_back(random_tensor(DType::BF16, 500, rng, -6, 6));
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
  ampx_test::amp_of(d).multi_tensor_norm(spans, type, out.as<float>());
  return out.get<float>()[0];
}

// The CPU accumulates in double, so its L2 norm is the exact one rounded once
// to float (2^-24 relative; 2^-23 allows for the double sum's own error).
// Other backends may accumulate in fp32, as the contract allows: the error
// then grows with the longest chain of additions, a few hundred terms in a
// parallel reduction, each adding at most 2^-24 of the partial sum.
double l2_tolerance() { return ampx_test::test_device() == AMPX_DEVICE_CPU ? 0x1p-23 : 2e-5; }

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
      {"NaN in f16 and inf in bf16",
       {{1, 999, nan_raw(DType::F16)}, {2, 3, inf_raw(DType::BF16, false)}},
       kNaN},
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
  // Magnitudes spanning 2^60: a sum grouped by thread would round
  // differently from one grouped by chunk.
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
  const std::pair<float, float> cases[] = {{0.0f, 1.0f},
                                           {0.5f, 1.0f},
                                           {1.0f, 1.0f},
                                           {10.0f, 1.0f},
                                           {3.7f, 2.5f},
                                           {1e-7f, 1e-6f},
                                           {6e4f, 0.25f},
                                           {static_cast<float>(kInf), 1.0f},
                                           {static_cast<float>(kNaN), 1.0f}};
  Device d;
  for (const auto& [total, max_norm] : cases) {
    CAPTURE(total);
    CAPTURE(max_norm);
    Buffer t = scalar(d, total);
    Buffer coef = scalar(d, -1.0f);
    ampx_test::amp_of(d).clip_coefficient(t.as<float>(), max_norm, coef.as<float>());
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
  ampx_test::amp_of(d).multi_tensor_clamp(list.spans, limit);

  for (size_t i = 0; i < ts.size(); ++i) {
    const HostTensor got = list.buffers[i].get(ts[i].dtype);
    int wrong = 0;
    for (size_t j = 0; j < ts[i].size(); ++j) {
      const double x = ts[i].at(j);
      const double want =
          std::isnan(x) ? kNaN : round_to(ts[i].dtype, std::clamp<double>(x, -limit, limit));
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
  ampx_test::amp_of(d).multi_tensor_count_nonfinite(list.spans, counts.as<int64_t>());
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

// ---- the loss scaler ---------------------------------------------------

namespace {

ScalerConfig scaler_config(int32_t growth_interval, int32_t hysteresis = 1, float min_scale = 0.0f,
                           float max_scale = 0.0f) {
  ScalerConfig c;
  c.growth_factor = 2.0;
  c.backoff_factor = 0.5;
  c.growth_interval = growth_interval;
  c.hysteresis = hysteresis;
  c.min_scale = min_scale;
  c.max_scale = max_scale;
  return c;
}

// A scaler state on the device, updated with either of two found-inf flags.
class Scaler {
 public:
  Scaler(Device& d, float scale, const ScalerConfig& config)
      : d_(d),
        config_(config),
        state_(d, std::vector<ScalerState>{initial(scale, config)}),
        clean_(scalar(d, 0.0f)),
        overflow_(scalar(d, 1.0f)) {}

  void update(bool found_inf) {
    ampx_test::amp_of(d_).scaler_update(state_.as<ScalerState>(),
                                        {found_inf ? overflow_.as<float>() : clean_.as<float>()},
                                        config_, false, 0.0f);
  }
  void update_many(int n, bool found_inf) {
    for (int i = 0; i < n; ++i) update(found_inf);
  }
  void force(bool found_inf, float scale) {
    ampx_test::amp_of(d_).scaler_update(state_.as<ScalerState>(),
                                        {found_inf ? overflow_.as<float>() : clean_.as<float>()},
                                        config_, true, scale);
  }
  // Several optimizers' flags, as update() combines them.
  void update_with(const std::vector<bool>& flags) {
    std::vector<const float*> ptrs;
    for (bool f : flags) ptrs.push_back(f ? overflow_.as<float>() : clean_.as<float>());
    ampx_test::amp_of(d_).scaler_update(state_.as<ScalerState>(), ptrs, config_, false, 0.0f);
  }
  ScalerState get() const { return state_.get<ScalerState>()[0]; }

 private:
  static ScalerState initial(float scale, const ScalerConfig& c) {
    ScalerState s{};
    s.scale = scale;
    s.hysteresis_left = c.hysteresis;
    return s;
  }

  Device& d_;
  ScalerConfig config_;
  Buffer state_;
  Buffer clean_;
  Buffer overflow_;
};

}  // namespace

TEST_CASE("amp primitives: the scale grows exactly at the growth_interval-th clean update") {
  Device d;
  Scaler s(d, 65536.0f, scaler_config(2000));
  s.update_many(1999, false);
  CHECK(s.get().scale == 65536.0f);
  CHECK(s.get().growth_tracker == 1999);
  s.update(false);
  CHECK(s.get().scale == 131072.0f);
  CHECK(s.get().growth_tracker == 0);
  CHECK(s.get().growths == 1);

  // An overflow backs off and restarts the count towards the next growth.
  s.update_many(500, false);
  s.update(true);
  CHECK(s.get().scale == 65536.0f);
  CHECK(s.get().growth_tracker == 0);
  s.update_many(1999, false);
  CHECK(s.get().scale == 65536.0f);
  s.update(false);
  CHECK(s.get().scale == 131072.0f);

  const ScalerState end = s.get();
  CHECK(end.updates == 4501);
  CHECK(end.skipped == 1);
  CHECK(end.backoffs == 1);
  CHECK(end.growths == 2);
}

TEST_CASE("amp primitives: a scale of 1e38 grows once and never becomes inf") {
  Device d;
  Scaler s(d, 1e38f, scaler_config(1));
  const float once = static_cast<float>(static_cast<double>(1e38f) * 2.0);
  s.update_many(10, false);
  CHECK(s.get().scale == once);
  CHECK(std::isfinite(s.get().scale));
  CHECK(s.get().growths == 1);
  CHECK(s.get().growth_tracker == 0);
}

TEST_CASE("amp primitives: hysteresis backs off from the 3rd consecutive overflow on") {
  Device d;
  // The rule this case states, no longer the default: a clean update
  // restores the allowance.
  ScalerConfig c = scaler_config(100, 3);
  c.consecutive_hysteresis = true;
  Scaler s(d, 1024.0f, c);
  // Each row: the flag of one update and the scale after it.
  const std::pair<bool, float> sequence[] = {
      {true, 1024}, {true, 1024}, {true, 512},  // the 3rd consecutive overflow backs off
      {true, 256},  {true, 128},                // and so does each further one
      {false, 128},                             // a clean update restores the tolerance
      {true, 128},  {true, 128},  {true, 64},   //
      {false, 64},  {true, 64},   {false, 64}, {true, 64}, {true, 64}, {true, 32}};
  int backoffs = 0, skipped = 0;
  for (const auto& [overflow, scale] : sequence) {
    const float before = s.get().scale;
    s.update(overflow);
    const ScalerState st = s.get();
    backoffs += st.scale < before;
    skipped += overflow;
    CHECK(st.scale == scale);
    if (overflow) CHECK(st.growth_tracker == 0);
  }
  CHECK(s.get().backoffs == backoffs);
  CHECK(s.get().skipped == skipped);
  CHECK(backoffs == 5);
}

TEST_CASE("amp primitives: min_scale floors a backoff and max_scale caps a growth") {
  Device d;
  SUBCASE("floor") {
    Scaler s(d, 4.0f, scaler_config(100, 1, 3.0f));
    s.update(true);
    CHECK(s.get().scale == 3.0f);
    s.update(true);
    CHECK(s.get().scale == 3.0f);
    CHECK(s.get().backoffs == 1);  // only the update that lowered it
    CHECK(s.get().skipped == 2);
  }
  SUBCASE("cap") {
    ScalerConfig c = scaler_config(1, 1, 0.0f, 10.0f);
    c.clamp_to_max_scale = true;  // the rule this case states; no longer the default
    Scaler s(d, 6.0f, c);
    s.update(false);
    CHECK(s.get().scale == 10.0f);
    s.update(false);
    CHECK(s.get().scale == 10.0f);
    CHECK(s.get().growths == 1);
  }
  SUBCASE("no floor: backoff goes below 1") {
    Scaler s(d, 1.0f, scaler_config(100));
    s.update_many(30, true);
    CHECK(s.get().scale == 0x1p-30f);
  }
}

TEST_CASE("amp primitives: found-inf flags of several optimizers are OR-ed") {
  Device d;
  Scaler s(d, 8.0f, scaler_config(1));
  s.update_with({false, true, false});
  CHECK(s.get().scale == 4.0f);
  s.update_with({true, false});
  CHECK(s.get().scale == 2.0f);
  s.update_with({false, false});
  CHECK(s.get().scale == 4.0f);
  s.update_with({});
  CHECK(s.get().scale == 8.0f);
  CHECK(s.get().skipped == 2);
}

TEST_CASE("amp primitives: a forced scale replaces the scale and keeps the tracker") {
  Device d;
  Scaler s(d, 512.0f, scaler_config(10, 2));
  s.update_many(4, false);
  s.update(true);  // hysteresis 2: tolerated, the tracker restarts
  s.update_many(3, false);
  const ScalerState before = s.get();
  REQUIRE(before.growth_tracker == 3);

  s.force(true, 100.0f);
  ScalerState after = s.get();
  CHECK(after.scale == 100.0f);
  CHECK(after.growth_tracker == 3);
  CHECK(after.hysteresis_left == before.hysteresis_left);
  CHECK(after.updates == before.updates + 1);
  CHECK(after.skipped == before.skipped + 1);
  CHECK(after.backoffs == before.backoffs);
  CHECK(after.growths == before.growths);

  s.force(false, 3.0f);
  after = s.get();
  CHECK(after.scale == 3.0f);
  CHECK(after.skipped == before.skipped + 1);
}

TEST_CASE("amp primitives: random update sequences follow the scaler's rules") {
  // The rules restated with a count of consecutive overflows rather than
  // the state's countdown, scale products in double rounded to float.
  struct Model {
    float scale;
    int32_t tracker = 0;
    int consecutive = 0;
    int64_t updates = 0, skipped = 0, backoffs = 0, growths = 0;
  };
  ScalerConfig c = scaler_config(3, 2, 0x1p-6f, 0x1p20f);
  c.backoff_factor = 0.25;
  c.growth_factor = 3.0;
  // The rules the model states, no longer the defaults.
  c.consecutive_hysteresis = true;
  c.clamp_to_max_scale = true;
  Device d;
  Scaler s(d, 1000.0f, c);
  Model m{1000.0f};
  std::mt19937 rng(23);
  bool at_min = false, at_max = false;
  for (int i = 0; i < 400; ++i) {
    // Phases of mostly overflows and mostly clean updates drive the scale
    // to both bounds.
    const bool found = std::bernoulli_distribution((i / 100) % 2 ? 0.1 : 0.7)(rng);
    s.update(found);
    ++m.updates;
    if (found) {
      ++m.skipped;
      m.tracker = 0;
      if (++m.consecutive >= c.hysteresis) {
        const float lowered = std::max(static_cast<float>(m.scale * c.backoff_factor), c.min_scale);
        if (lowered < m.scale) {
          m.scale = lowered;
          ++m.backoffs;
        }
      }
    } else {
      m.consecutive = 0;
      if (++m.tracker == c.growth_interval) {
        m.tracker = 0;
        const float grown = std::min(static_cast<float>(m.scale * c.growth_factor), c.max_scale);
        if (grown > m.scale) {
          m.scale = grown;
          ++m.growths;
        }
      }
    }
    const ScalerState st = s.get();
    CAPTURE(i);
    REQUIRE(st.scale == m.scale);
    REQUIRE(st.growth_tracker == m.tracker);
    REQUIRE(st.updates == m.updates);
    REQUIRE(st.skipped == m.skipped);
    REQUIRE(st.backoffs == m.backoffs);
    REQUIRE(st.growths == m.growths);
    at_min = at_min || m.scale == c.min_scale;
    at_max = at_max || m.scale == c.max_scale;
  }
  CHECK(at_min);
  CHECK(at_max);
}

TEST_CASE("amp primitives: increment_steps counts only steps taken") {
  Device d;
  Buffer steps(d, std::vector<int64_t>{0, 5, 41});
  Buffer set = scalar(d, 1.0f);
  Buffer clear = scalar(d, 0.0f);
  ampx_test::amp_of(d).increment_steps(steps.as<int64_t>(), 3, set.as<float>());
  CHECK(steps.get<int64_t>() == std::vector<int64_t>{0, 5, 41});
  ampx_test::amp_of(d).increment_steps(steps.as<int64_t>(), 3, clear.as<float>());
  CHECK(steps.get<int64_t>() == std::vector<int64_t>{1, 6, 42});
  ampx_test::amp_of(d).increment_steps(steps.as<int64_t>(), 3, nullptr);
  CHECK(steps.get<int64_t>() == std::vector<int64_t>{2, 7, 43});
  ampx_test::amp_of(d).increment_steps(steps.as<int64_t>(), 2, nullptr);
  CHECK(steps.get<int64_t>() == std::vector<int64_t>{3, 8, 43});
}

// ---- optimizers --------------------------------------------------------

namespace {

constexpr double kU = 0x1p-24;  // fp32's unit roundoff

struct ParamSpec {
  DType param;
  DType grad;
  size_t count;
  int32_t group;
  int64_t step;  // steps already taken: a parameter resumed from a checkpoint
};

// One parameter on the device and its reference: the fp32 value (master)
// and state in double, and error budgets. Each step is checked from the
// device's own state before it (see OptimizerRig::sync), so the errors of
// one step are measured, not their sum over the run. Every fp32 operation
// errs by at most kU times the magnitude of what it computes; a budget adds
// the magnitudes of the terms a step combines into a value, and the device
// may differ from the reference by a small multiple of kU times it.
struct TestParam {
  ParamSpec spec;
  std::unique_ptr<Buffer> data, master, grad, state[3];
  std::vector<double> w, s[3], g;
  std::vector<double> w_budget, s_budget[3];
  int64_t step;
};

// The initial value of element j of state k of a parameter.
using StateInit = double (*)(const ParamSpec&, int k, std::mt19937& rng);

class OptimizerRig {
 public:
  OptimizerRig(Device& d, const std::vector<ParamSpec>& specs, int states, StateInit init,
               std::mt19937& rng)
      : d_(d), states_(states) {
    std::vector<int64_t> steps;
    for (const ParamSpec& spec : specs) {
      TestParam p;
      p.spec = spec;
      p.step = spec.step;
      steps.push_back(spec.step);
      const HostTensor data = random_tensor(spec.param, spec.count, rng, -2, 1);
      p.data = std::make_unique<Buffer>(d, data);
      std::vector<float> w;
      for (size_t j = 0; j < spec.count; ++j) w.push_back(static_cast<float>(data.at(j)));
      if (spec.param != DType::F32) p.master = std::make_unique<Buffer>(d, w);
      p.grad = std::make_unique<Buffer>(d, spec.count * width(spec.grad));
      for (int k = 0; k < states; ++k) {
        std::vector<float> s;
        for (size_t j = 0; j < spec.count; ++j) s.push_back(static_cast<float>(init(spec, k, rng)));
        p.state[k] = std::make_unique<Buffer>(d, s);
      }
      params_.push_back(std::move(p));
    }
    steps_ = std::make_unique<Buffer>(d, steps);
  }

  std::vector<TestParam>& params() { return params_; }

  // What the primitives receive; a zero-size parameter passes null pointers.
  std::vector<OptimParam> list() const {
    std::vector<OptimParam> list;
    for (size_t i = 0; i < params_.size(); ++i) {
      const TestParam& p = params_[i];
      const bool has = p.spec.count > 0;
      OptimParam o{};
      o.param = has ? p.data->as() : nullptr;
      o.param_dtype = p.spec.param;
      o.master = p.master ? p.master->as<float>() : nullptr;
      o.grad = has ? p.grad->as() : nullptr;
      o.grad_dtype = p.spec.grad;
      float** state[3] = {&o.momentum, &o.exp_avg_sq, &o.max_exp_avg_sq};
      for (int k = 0; k < states_; ++k) *state[k] = has ? p.state[k]->as<float>() : nullptr;
      o.step = steps_->as<int64_t>() + i;
      o.count = static_cast<int64_t>(p.spec.count);
      o.group = p.spec.group;
      list.push_back(o);
    }
    return list;
  }

  int64_t* steps() { return steps_->as<int64_t>(); }

  // Uploads fresh random gradients, mirrored in each TestParam::g. A step
  // that is to be skipped gets an inf in every gradient, as it would after
  // an overflow: applying it would leave a mark.
  void new_grads(std::mt19937& rng, bool poison) {
    for (TestParam& p : params_) {
      HostTensor g = random_tensor(p.spec.grad, p.spec.count, rng, -2, 1);
      if (poison && p.spec.count > 0) g.set_raw(0, inf_raw(p.spec.grad, false));
      p.grad->put(g);
      p.g.clear();
      for (size_t j = 0; j < p.spec.count; ++j) p.g.push_back(g.at(j));
    }
  }

  // Every byte a step may write.
  std::vector<std::vector<uint8_t>> snapshot() const {
    std::vector<std::vector<uint8_t>> bytes = {steps_->get<uint8_t>()};
    for (const TestParam& p : params_) {
      bytes.push_back(p.data->get<uint8_t>());
      if (p.master) bytes.push_back(p.master->get<uint8_t>());
      for (int k = 0; k < states_; ++k) bytes.push_back(p.state[k]->get<uint8_t>());
    }
    return bytes;
  }

  // Starts the reference of the next step from the device's state.
  void sync() {
    for (TestParam& p : params_) {
      p.w = fp32_values(p);
      p.w_budget.assign(p.w.size(), 0.0);
      for (int k = 0; k < states_; ++k) {
        const std::vector<float> s = p.state[k]->get<float>();
        p.s[k].assign(s.begin(), s.end());
        p.s_budget[k].assign(s.size(), 0.0);
      }
    }
  }

  // Compares the device with the reference: step counts exactly, fp32
  // values within `factor` * kU * their budgets, and F16/BF16 parameters
  // exactly as their device master rounded to nearest even.
  void check(double factor) const {
    const std::vector<int64_t> steps = steps_->get<int64_t>();
    for (size_t i = 0; i < params_.size(); ++i) {
      const TestParam& p = params_[i];
      CAPTURE(i);
      CHECK(steps[i] == p.step);
      const std::vector<double> w = fp32_values(p);
      if (p.master) {
        const HostTensor data = p.data->get(p.spec.param);
        int not_rounded = 0;
        for (size_t j = 0; j < w.size(); ++j)
          not_rounded += !same(data.at(j), round_to(p.spec.param, w[j]));
        CHECK_MESSAGE(not_rounded == 0, name(p.spec.param), " parameter is not its master rounded");
      }
      check_close("weights", w, p.w, p.w_budget, factor);
      for (int k = 0; k < states_; ++k) {
        const std::vector<float> s = p.state[k]->get<float>();
        check_close("state", std::vector<double>(s.begin(), s.end()), p.s[k], p.s_budget[k],
                    factor);
      }
    }
  }

 private:
  // The master on the device, or the parameter itself when it is fp32.
  static std::vector<double> fp32_values(const TestParam& p) {
    if (p.master) {
      const std::vector<float> master = p.master->get<float>();
      return std::vector<double>(master.begin(), master.end());
    }
    const HostTensor data = p.data->get(DType::F32);
    std::vector<double> w;
    for (size_t j = 0; j < data.size(); ++j) w.push_back(data.at(j));
    return w;
  }

  static void check_close(const char* what, const std::vector<double>& have,
                          const std::vector<double>& want, const std::vector<double>& budget,
                          double factor) {
    int far = 0;
    size_t first = 0;
    for (size_t j = 0; j < have.size(); ++j) {
      const double err = std::fabs(have[j] - want[j]);
      if (!(err <= factor * kU * budget[j]) && far++ == 0) first = j;
    }
    CHECK_MESSAGE(far == 0, what, ": ", far, " elements off, the first ", first, ": ",
                  far ? have[first] : 0.0, " vs ", far ? want[first] : 0.0);
  }

  Device& d_;
  int states_;
  std::vector<TestParam> params_;
  std::unique_ptr<Buffer> steps_;
};

// The parameters of every optimizer case for parameters of type t: several
// gradient types, two groups, a resumed parameter, an empty one.
std::vector<ParamSpec> param_specs(DType t) {
  const DType other = t == DType::F32 ? DType::BF16 : DType::F32;
  return {{t, t, 37, 0, 0},
          {t, other, 300, 1, 0},
          {t, DType::F16, 20, 0, 0},
          {t, t, 1, 1, 3},
          {t, t, 0, 1, 0}};
}

// Makes `calls` optimizer steps, each a call of increment_steps and of
// step(scalars), checking each taken one against reference(param, lr, wd).
// Steps 1 and 5 are skipped: the first one taken is the second, and a
// skipped step must change no byte.
template <class Step, class Reference>
void run_steps(Device& d, OptimizerRig& rig, std::mt19937& rng, const float (&lr)[2],
               const float (&wd)[2], int calls, double factor, Step&& step, Reference&& reference) {
  Buffer lr_buf(d, std::vector<float>(lr, lr + 2));
  Buffer wd_buf(d, std::vector<float>(wd, wd + 2));
  for (int call = 0; call < calls; ++call) {
    CAPTURE(call);
    const bool skip = call == 0 || call == 4;
    rig.new_grads(rng, skip);
    Buffer found = scalar(d, skip ? 1.0f : 0.0f);
    const auto before = rig.snapshot();
    if (!skip) rig.sync();
    ampx_test::amp_of(d).increment_steps(rig.steps(), static_cast<int64_t>(rig.params().size()),
                                         found.as<float>());
    step(ampx::impl::StepScalars{found.as<float>(), lr_buf.as<float>(), wd_buf.as<float>()});
    if (skip) {
      CHECK_MESSAGE(rig.snapshot() == before, "a skipped step changed something");
      continue;
    }
    for (TestParam& p : rig.params()) {
      ++p.step;
      reference(p, lr[p.spec.group], wd[p.spec.group]);
    }
    rig.check(factor);
  }
}

struct SgdCase {
  float momentum;
  float dampening;
  bool nesterov;
  float weight_decay;
  bool maximize;
};

void sgd_reference(TestParam& p, double lr, double wd, const SgdCase& c) {
  const bool first = p.step == 1;
  for (size_t j = 0; j < p.w.size(); ++j) {
    double g = c.maximize ? -p.g[j] : p.g[j];
    // The magnitude of the terms g is made of; the budgets add these.
    double g_terms = std::fabs(g) + std::fabs(wd * p.w[j]);
    g += wd * p.w[j];
    if (c.momentum != 0) {
      double& buf = p.s[0][j];
      const double buf_terms =
          first ? g_terms : c.momentum * std::fabs(buf) + (1.0 - c.dampening) * g_terms;
      buf = first ? g : c.momentum * buf + (1.0 - c.dampening) * g;
      p.s_budget[0][j] += buf_terms;
      g_terms = c.nesterov ? g_terms + c.momentum * std::fabs(buf) : buf_terms;
      g = c.nesterov ? g + c.momentum * buf : buf;
    }
    p.w[j] -= lr * g;
    p.w_budget[j] += std::fabs(p.w[j]) + lr * g_terms;
  }
}

// A fresh momentum buffer holds junk: the first step taken must overwrite
// it, not blend it in. A resumed one holds a real buffer.
double sgd_state(const ParamSpec& spec, int, std::mt19937& rng) {
  return spec.step == 0 ? 777.0 : std::uniform_real_distribution<double>(-2, 2)(rng);
}

// About ten fp32 roundings a step, each at most kU of a magnitude the budget
// counts, but of random sign, so they mostly cancel: the CPU stays near 2.
// 6 leaves room for another order of operations (a GPU's fused
// multiply-adds), while a slip in the formula (a wrong coefficient, a term
// too many) errs by far more than any budget.
constexpr double kSgdFactor = 6.0;

void run_sgd(const std::vector<ParamSpec>& specs, const SgdCase& c, int calls,
             int32_t threads = 0) {
  Device d(threads);
  std::mt19937 rng(29);
  OptimizerRig rig(d, specs, c.momentum != 0 ? 1 : 0, sgd_state, rng);
  const ampx::impl::math::SgdConfig config{c.momentum, c.dampening, c.nesterov, c.maximize};
  run_steps(
      d, rig, rng, {0.1f, 0.05f}, {c.weight_decay, 2 * c.weight_decay}, calls, kSgdFactor,
      [&](const ampx::impl::StepScalars& scalars) {
        ampx_test::amp_of(d).sgd_step(rig.list(), config, scalars);
      },
      [&](TestParam& p, double lr, double wd) { sgd_reference(p, lr, wd, c); });
}

}  // namespace

TEST_CASE("amp primitives: SGD in every configuration, fp32 and 16-bit parameters") {
  int cases = 0;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16})
    for (float momentum : {0.0f, 0.9f})
      for (float dampening : {0.0f, 0.1f})
        for (bool nesterov : {false, true})
          for (float weight_decay : {0.0f, 0.01f})
            for (bool maximize : {false, true}) {
              if (nesterov && (momentum == 0.0f || dampening != 0.0f)) continue;
              CAPTURE(name(dtype));
              CAPTURE(momentum);
              CAPTURE(dampening);
              CAPTURE(nesterov);
              CAPTURE(weight_decay);
              CAPTURE(maximize);
              run_sgd(param_specs(dtype), {momentum, dampening, nesterov, weight_decay, maximize},
                      12);
              ++cases;
            }
  CHECK(cases == 60);
}

namespace {

struct AdamCase {
  bool adamw;
  bool amsgrad;
  bool maximize;
  float weight_decay;
};

constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;

// DESIGN.md section 4, in double, with the fp32 hyperparameters' values.
void adam_reference(TestParam& p, double lr, double wd, const AdamCase& c) {
  const double t = static_cast<double>(p.step);
  const double b1 = kBeta1, b2 = kBeta2;
  const double step_size = lr / (1.0 - std::pow(b1, t));
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(b2, t));
  for (size_t j = 0; j < p.w.size(); ++j) {
    double g = c.maximize ? -p.g[j] : p.g[j];
    double& w = p.w[j];
    double& m = p.s[0][j];
    double& v = p.s[1][j];
    // Each budget adds the magnitudes of the terms a step combines, as
    // g_terms for g; an error in g reaches g*g doubled.
    double g_terms = std::fabs(g);
    if (c.adamw) {
      w *= 1.0 - lr * wd;
    } else {
      g_terms += std::fabs(wd * w);
      g += wd * w;
    }
    p.s_budget[0][j] += b1 * std::fabs(m) + (1.0 - b1) * g_terms;
    m = b1 * m + (1.0 - b1) * g;
    v = b2 * v + (1.0 - b2) * g * g;
    p.s_budget[1][j] += v + 2.0 * (1.0 - b2) * std::fabs(g) * g_terms;
    double v_hat = v;
    if (c.amsgrad) {
      // The maximum rounds nothing: it carries the error of the v it took.
      p.s[2][j] = std::max(p.s[2][j], v);
      p.s_budget[2][j] = std::max(p.s_budget[2][j], p.s_budget[1][j]);
      v_hat = p.s[2][j];
    }
    const double denom = std::sqrt(v_hat) / bias_correction2_sqrt + kEps;
    const double delta = step_size * m / denom;
    w -= delta;
    // The update carries m's error, relative to m's budget rather than to
    // m, which may have cancelled.
    p.w_budget[j] += std::fabs(w) + std::fabs(delta) + step_size * p.s_budget[0][j] / denom;
  }
}

// Fresh moments start at zero, as torch's; a resumed parameter carries
// moments of gradients of the size the test draws, and a running max
// above its second moment.
double adam_state(const ParamSpec& spec, int k, std::mt19937& rng) {
  if (spec.step == 0) return 0.0;
  const double x = std::uniform_real_distribution<double>(0.25, 2.0)(rng);
  return k == 0 ? x - 1.0 : k == 1 ? x : 3.0 * x;
}

constexpr double kAdamFactor = 6.0;

void run_adam(const std::vector<ParamSpec>& specs, const AdamCase& c, int calls,
              int32_t threads = 0) {
  Device d(threads);
  std::mt19937 rng(31);
  OptimizerRig rig(d, specs, c.amsgrad ? 3 : 2, adam_state, rng);
  const ampx::impl::math::AdamConfig config{kBeta1, kBeta2, kEps, c.amsgrad, c.maximize, c.adamw};
  run_steps(
      d, rig, rng, {1e-2f, 3e-3f}, {c.weight_decay, c.weight_decay / 2}, calls, kAdamFactor,
      [&](const ampx::impl::StepScalars& scalars) {
        ampx_test::amp_of(d).adam_step(rig.list(), config, scalars);
      },
      [&](TestParam& p, double lr, double wd) { adam_reference(p, lr, wd, c); });
}

}  // namespace

TEST_CASE("amp primitives: Adam and AdamW in every configuration over 22 steps") {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16})
    for (bool adamw : {false, true})
      for (bool amsgrad : {false, true})
        for (bool maximize : {false, true})
          for (float weight_decay : {0.0f, 0.05f}) {
            CAPTURE(name(dtype));
            CAPTURE(adamw);
            CAPTURE(amsgrad);
            CAPTURE(maximize);
            CAPTURE(weight_decay);
            run_adam(param_specs(dtype), {adamw, amsgrad, maximize, weight_decay}, 24);
          }
}

TEST_CASE("amp primitives: optimizer steps over parameters of many chunks on 4 threads") {
  // Three, two and two of the CPU backend's chunks of 2^16 elements, the
  // last one a single element.
  const std::vector<ParamSpec> large = {{DType::BF16, DType::BF16, 140000, 0, 0},
                                        {DType::F32, DType::F16, 70000, 1, 0},
                                        {DType::F16, DType::F32, 65537, 0, 2}};
  run_sgd(large, {0.9f, 0.0f, true, 0.01f, false}, 4, 4);
  run_adam(large, {true, true, false, 0.05f}, 4, 4);
}

// ---- malformed calls ---------------------------------------------------

TEST_CASE("amp primitives: malformed calls fail before writing anything") {
  Device d;
  const std::vector<float> values = {1.0f, -2.0f, 3.0f};
  Buffer data(d, values);
  Buffer ints(d, std::vector<int32_t>{1, 2, 3});
  Buffer one = scalar(d, 1.0f);
  Buffer found = scalar(d, 0.0f);
  const TensorSpan a = data.span(DType::F32);
  const TensorSpan i32{ints.as(), DType::I32, 3};
  const TensorSpan short_a{data.as(), DType::F32, 2};
  const TensorSpan a_as_f16{data.as(), DType::F16, 3};
  float* f = found.as<float>();

  CHECK(status_of([&] {
          ampx_test::amp_of(d).multi_tensor_scale({a}, {a, a}, one.as<float>(), true, f);
        }) == AMPX_ERR_SHAPE);
  CHECK(status_of([&] {
          ampx_test::amp_of(d).multi_tensor_scale({a}, {short_a}, one.as<float>(), true, f);
        }) == AMPX_ERR_SHAPE);
  CHECK(status_of([&] {
          ampx_test::amp_of(d).multi_tensor_scale({i32}, {}, one.as<float>(), true, f);
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] {
          ampx_test::amp_of(d).multi_tensor_scale({a}, {a_as_f16}, one.as<float>(), true, f);
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] { ampx_test::amp_of(d).multi_tensor_scale({a}, {a}, nullptr, true, f); }) ==
        AMPX_ERR_INVALID_ARGUMENT);
  CHECK(status_of([&] {
          ampx_test::amp_of(d).multi_tensor_norm({a, i32}, NormType::L2, f);
        }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] { ampx_test::amp_of(d).multi_tensor_clamp({a}, -1.0f); }) ==
        AMPX_ERR_INVALID_ARGUMENT);
  CHECK(status_of([&] {
          ampx_test::amp_of(d).multi_tensor_clamp({a}, static_cast<float>(kNaN));
        }) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(status_of([&] { ampx_test::amp_of(d).multi_tensor_clamp({i32}, 1.0f); }) == AMPX_ERR_DTYPE);
  CHECK(status_of([&] { ampx_test::amp_of(d).multi_tensor_count_nonfinite({i32}, nullptr); }) ==
        AMPX_ERR_DTYPE);
  CHECK(data.get<float>() == values);
  CHECK(found.get<float>()[0] == 0.0f);

  Buffer state(d, std::vector<ScalerState>{ScalerState{}});
  CHECK(status_of([&] {
          ampx_test::amp_of(d).scaler_update(state.as<ScalerState>(), {f, nullptr},
                                             scaler_config(10), false, 0.0f);
        }) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(state.get<ScalerState>()[0].updates == 0);
}

TEST_CASE("amp primitives: malformed optimizer parameters fail before any update") {
  Device d;
  const std::vector<float> values = {1.0f, -2.0f, 3.0f};
  Buffer param(d, std::vector<uint16_t>{0x3c00, 0x4000, 0x4200});  // f16 1, 2, 3
  Buffer master(d, values);
  Buffer grad(d, values);
  Buffer m(d, values), v(d, values), vmax(d, values);
  Buffer steps(d, std::vector<int64_t>{1});
  Buffer lr = scalar(d, 0.5f), wd = scalar(d, 0.0f);
  const ampx::impl::StepScalars scalars{nullptr, lr.as<float>(), wd.as<float>()};
  OptimParam good{};
  good.param = param.as();
  good.param_dtype = DType::F16;
  good.master = master.as<float>();
  good.grad = grad.as();
  good.grad_dtype = DType::F32;
  good.momentum = m.as<float>();
  good.exp_avg_sq = v.as<float>();
  good.max_exp_avg_sq = vmax.as<float>();
  good.step = steps.as<int64_t>();
  good.count = 3;
  const ampx::impl::math::SgdConfig momentum{0.9f, 0.0f, false, false};
  const ampx::impl::math::AdamConfig amsgrad{0.9f, 0.999f, 1e-8f, true, false, false};

  auto with = [&](auto change) {
    OptimParam p = good;
    change(p);
    return std::vector<OptimParam>{good, p};
  };
  auto sgd = [&](const std::vector<OptimParam>& ps, const ampx::impl::math::SgdConfig& c,
                 const ampx::impl::StepScalars& s) {
    return status_of([&] { ampx_test::amp_of(d).sgd_step(ps, c, s); });
  };
  auto adam = [&](const std::vector<OptimParam>& ps) {
    return status_of([&] { ampx_test::amp_of(d).adam_step(ps, amsgrad, scalars); });
  };

  CHECK(sgd({good}, {0.9f, 0.1f, true, false}, scalars) ==
        AMPX_ERR_INVALID_ARGUMENT);  // nesterov with dampening
  CHECK(sgd({good}, {0.0f, 0.0f, true, false}, scalars) ==
        AMPX_ERR_INVALID_ARGUMENT);  // nesterov without momentum
  CHECK(sgd(with([](OptimParam& p) { p.momentum = nullptr; }), momentum, scalars) ==
        AMPX_ERR_INVALID_ARGUMENT);
  CHECK(sgd(with([](OptimParam& p) { p.master = nullptr; }), momentum, scalars) ==
        AMPX_ERR_INVALID_ARGUMENT);
  CHECK(sgd(with([](OptimParam& p) { p.param_dtype = DType::F32; }), momentum, scalars) ==
        AMPX_ERR_INVALID_ARGUMENT);
  CHECK(sgd(with([](OptimParam& p) { p.grad_dtype = DType::I32; }), momentum, scalars) ==
        AMPX_ERR_DTYPE);
  CHECK(sgd(with([](OptimParam& p) { p.step = nullptr; }), momentum, scalars) ==
        AMPX_ERR_INVALID_ARGUMENT);
  CHECK(sgd({good}, momentum, {nullptr, nullptr, wd.as<float>()}) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(adam(with([](OptimParam& p) { p.max_exp_avg_sq = nullptr; })) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(adam(with([](OptimParam& p) { p.exp_avg_sq = nullptr; })) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(adam(with([](OptimParam& p) { p.count = -1; })) == AMPX_ERR_SHAPE);

  // The good parameter came first in each list and was never updated.
  CHECK(param.get<uint16_t>() == std::vector<uint16_t>{0x3c00, 0x4000, 0x4200});
  for (const Buffer* b : {&master, &m, &v, &vmax}) CHECK(b->get<float>() == values);
}
