// Tensors through the public C API: creation, copies, conversions, fill,
// names, queries, reference counting, wrapping and failure atomicity.
//
// Conversion expectations come from a reference written here in long double
// (64 significant bits on the platforms we build for, so every i64 is exact):
// it rounds the exact source value once, to nearest even, at the target's
// precision and exponent range.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support.h"

using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;
using ampx_test::test_device;

using ampx_test::download;
using ampx_test::upload;

namespace {

const ampx_dtype kAllDtypes[] = {AMPX_F32, AMPX_F16, AMPX_BF16, AMPX_I32, AMPX_I64};

ampx_tensor sentinel_tensor() { return reinterpret_cast<ampx_tensor>(uintptr_t{0x7777}); }

ampx_memory_stats stats_of(ampx_context ctx) {
  ampx_memory_stats s = AMPX_MEMORY_STATS_INIT;
  REQUIRE_MESSAGE(ampx_memory_stats_get(ctx, &s) == AMPX_OK, last_error());
  return s;
}

std::vector<float> iota_f32(size_t n, float start = 0.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

std::string name_of(ampx_tensor t) {
  const char* name = nullptr;
  REQUIRE(ampx_tensor_name(t, &name) == AMPX_OK);
  REQUIRE(name != nullptr);
  return name;
}

std::vector<int64_t> shape_of(ampx_tensor t) {
  int32_t ndim = -1;
  REQUIRE(ampx_tensor_ndim(t, &ndim) == AMPX_OK);
  std::vector<int64_t> dims(static_cast<size_t>(ndim));
  REQUIRE(ampx_tensor_shape(t, dims.data(), ndim) == AMPX_OK);
  return dims;
}

// ---- reference conversions ------------------------------------------------

using ld = long double;

bool long_double_holds_i64() { return std::numeric_limits<ld>::digits >= 64; }

// Rounds finite x to `precision` significant bits with minimum normal
// exponent `emin` (below it the quantum stays 2^(emin-precision+1):
// subnormals), ties to even; results beyond the largest finite value of a
// format with maximum exponent `emax` become infinity.
ld round_to_format(ld x, int precision, int emin, int emax) {
  if (x == 0 || std::isnan(x) || std::isinf(x)) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| = m * 2^e, m in [0.5, 1)
  const int quantum = std::max(e - 1, emin) - (precision - 1);
  const ld r = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
  if (std::fabs(r) >= std::ldexp(ld{1}, emax + 1)) return std::copysign(ld{INFINITY}, x);
  if (r == 0) return std::copysign(ld{0}, x);
  return r;
}

ld to_integer(ld x, ld lo, ld hi) {
  if (std::isnan(x)) return 0;
  const ld t = std::trunc(x);
  if (t == 0) return 0;  // integers have no negative zero
  return t < lo ? lo : (t > hi ? hi : t);
}

ld reference(ampx_dtype to, ld x) {
  switch (to) {
    case AMPX_F32: return round_to_format(x, 24, -126, 127);
    case AMPX_F16: return round_to_format(x, 11, -14, 15);
    case AMPX_BF16: return round_to_format(x, 8, -126, 127);
    case AMPX_I32: return to_integer(x, -2147483648.0L, 2147483647.0L);
    case AMPX_I64: return to_integer(x, -9223372036854775808.0L, 9223372036854775807.0L);
    case AMPX_F8E4M3:  // FP8 has its own tests (test_fp8_convert.cpp)
    case AMPX_F8E5M2:
    case AMPX_DTYPE_MIN_ENUM:
    case AMPX_DTYPE_MAX_ENUM: break;
  }
  return NAN;
}

ld decode_f16(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 31) return mantissa ? ld{NAN} : sign * ld{INFINITY};
  if (exponent == 0) return sign * std::ldexp(ld(mantissa), -24);
  return sign * std::ldexp(ld(1024 + mantissa), exponent - 25);
}

ld decode_bf16(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Elements of any dtype as raw little-endian bytes, decoded on demand.
struct Column {
  ampx_dtype dtype;
  std::vector<unsigned char> bytes;

  size_t size() const { return bytes.size() / ampx_dtype_size(dtype); }
  template <class T>
  T raw(size_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  ld value(size_t i) const {
    switch (dtype) {
      case AMPX_F32: return raw<float>(i);
      case AMPX_F16: return decode_f16(raw<uint16_t>(i));
      case AMPX_BF16: return decode_bf16(raw<uint16_t>(i));
      case AMPX_I32: return raw<int32_t>(i);
      case AMPX_I64: return static_cast<ld>(raw<int64_t>(i));
      case AMPX_F8E4M3:
      case AMPX_F8E5M2:
      case AMPX_DTYPE_MIN_ENUM:
      case AMPX_DTYPE_MAX_ENUM: break;
    }
    return NAN;
  }
  std::string describe(size_t i) const {
    switch (dtype) {
      case AMPX_F16:
      case AMPX_BF16: {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%04x", unsigned{raw<uint16_t>(i)});
        return buf;
      }
      case AMPX_I64: return std::to_string(raw<int64_t>(i));
      case AMPX_I32: return std::to_string(raw<int32_t>(i));
      default: {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(raw<float>(i)));
        return buf;
      }
    }
  }
};

template <class T>
Column column(ampx_dtype dtype, const std::vector<T>& values) {
  Column c{dtype, std::vector<unsigned char>(values.size() * sizeof(T))};
  std::memcpy(c.bytes.data(), values.data(), c.bytes.size());
  return c;
}

Column cast_column(ampx_context ctx, const Column& src, ampx_dtype to) {
  const int64_t n = static_cast<int64_t>(src.size());
  Tensor in, out;
  REQUIRE(ampx_tensor_from_host(ctx, src.dtype, 1, &n, src.bytes.data(), src.bytes.size(),
                                in.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_tensor_cast(in, to, out.out()) == AMPX_OK, last_error());
  Column result{to, std::vector<unsigned char>(static_cast<size_t>(n) * ampx_dtype_size(to))};
  REQUIRE(ampx_tensor_to_host(out, result.bytes.data(), result.bytes.size()) == AMPX_OK);
  return result;
}

// Checks every element of cast(src, to) against the reference.
void check_cast(ampx_context ctx, const Column& src, ampx_dtype to) {
  const Column got = cast_column(ctx, src, to);
  for (size_t i = 0; i < src.size(); ++i) {
    const ld want = reference(to, src.value(i));
    const ld have = got.value(i);
    const std::string what = std::string(ampx_dtype_name(src.dtype)) + " " + src.describe(i) +
                             " -> " + ampx_dtype_name(to) + " " + got.describe(i);
    CAPTURE(what);
    if (std::isnan(want)) {
      CHECK(std::isnan(have));
    } else {
      CHECK(have == want);
      CHECK(std::signbit(have) == std::signbit(want));
    }
  }
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

Column f32_samples() {
  return column<float>(AMPX_F32, {0.0f, -0.0f, 2.5f, -2.5f, 1.0f / 3.0f, 65504.0f, 65519.0f,
                                  65520.0f, -65520.0f, 1e10f, -1e10f, 3.0e38f, kInf, -kInf, kNaN,
                                  1e-30f, 6.0e-8f, 2147483648.0f, -2147483648.0f, 2147483520.0f,
                                  1e-40f, 9.3e18f, -9.3e18f, 1.00390625f, 1.01171875f, 0.99999994f});
}

Column f16_samples() {
  return column<uint16_t>(AMPX_F16, {0x0000, 0x8000, 0x4100, 0xc100, 0x7bff, 0xfbff, 0x7c00,
                                     0xfc00, 0x7e00, 0x0001, 0x83ff, 0x3555, 0xbe00, 0x3c01,
                                     0x6400});
}

Column bf16_samples() {
  return column<uint16_t>(AMPX_BF16, {0x0000, 0x8000, 0x4020, 0xc020, 0x7f7f, 0xff7f, 0x7f80,
                                      0xff80, 0x7fc0, 0x3eab, 0x4780, 0x477f, 0x0001, 0x5015,
                                      0xcf00, 0x3f81});
}

Column i32_samples() {
  return column<int32_t>(AMPX_I32, {0, -7, 16777217, 16777219, -16777219, INT32_MAX, INT32_MIN,
                                    65519, 65520, -65520, 257, 259, 2049, -65536, 1});
}

// Only values that need no more than 53 bits: larger ones are checked by
// their own test below.
Column i64_samples() {
  return column<int64_t>(AMPX_I64, {0, -7, int64_t{1} << 40, (int64_t{1} << 40) + 1,
                                    (int64_t{1} << 53) + 2, -(int64_t{1} << 62), 3000000000LL,
                                    -3000000000LL, 65520, 16777217, INT64_MIN});
}

}  // namespace

// ---- creation and queries --------------------------------------------------

TEST_CASE("tensor: empty and zeros report dtype, shape, numel, nbytes, data and context") {
  Ctx ctx;
  const int64_t shape[3] = {2, 3, 5};
  for (ampx_dtype dtype : kAllDtypes) {
    CAPTURE(dtype);
    for (bool zeros : {false, true}) {
      Tensor t;
      REQUIRE(((zeros ? ampx_tensor_zeros : ampx_tensor_empty)(ctx, dtype, 3, shape, t.out())) ==
              AMPX_OK);
      ampx_dtype got_dtype = static_cast<ampx_dtype>(0);
      int32_t ndim = -1;
      int64_t dims[4] = {-1, -1, -1, -1};
      int64_t numel = -1;
      size_t nbytes = 0;
      void* data = nullptr;
      ampx_context owner = nullptr;
      CHECK(ampx_tensor_dtype(t, &got_dtype) == AMPX_OK);
      CHECK(got_dtype == dtype);
      CHECK(ampx_tensor_ndim(t, &ndim) == AMPX_OK);
      CHECK(ndim == 3);
      CHECK(ampx_tensor_shape(t, dims, 4) == AMPX_OK);
      CHECK(dims[0] == 2);
      CHECK(dims[1] == 3);
      CHECK(dims[2] == 5);
      CHECK(dims[3] == -1);  // beyond ndim: not written
      CHECK(ampx_tensor_numel(t, &numel) == AMPX_OK);
      CHECK(numel == 30);
      CHECK(ampx_tensor_nbytes(t, &nbytes) == AMPX_OK);
      CHECK(nbytes == 30 * ampx_dtype_size(dtype));
      CHECK(ampx_tensor_data(t, &data) == AMPX_OK);
      CHECK(data != nullptr);
      CHECK(reinterpret_cast<uintptr_t>(data) % ampx_dtype_size(dtype) == 0);
      CHECK(ampx_tensor_context(t, &owner) == AMPX_OK);
      CHECK(owner == ctx.handle);
      CHECK(name_of(t).empty());
      if (zeros) {
        std::vector<unsigned char> bytes(nbytes, 0xab);
        REQUIRE(ampx_tensor_to_host(t, bytes.data(), bytes.size()) == AMPX_OK);
        CHECK(bytes == std::vector<unsigned char>(nbytes, 0));
      }
    }
  }
}

TEST_CASE("tensor: from_host and to_host round-trip the exact bytes of every dtype") {
  Ctx ctx;
  const int64_t shape[2] = {3, 4};
  for (ampx_dtype dtype : kAllDtypes) {
    CAPTURE(dtype);
    const size_t nbytes = 12 * ampx_dtype_size(dtype);
    std::vector<unsigned char> bytes(nbytes);
    // Arbitrary bit patterns, NaN payloads included: a same-type copy moves
    // bits, it never converts.
    for (size_t i = 0; i < nbytes; ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11 + dtype);
    Tensor t;
    REQUIRE(ampx_tensor_from_host(ctx, dtype, 2, shape, bytes.data(), nbytes, t.out()) == AMPX_OK);
    std::vector<unsigned char> back(nbytes);
    REQUIRE(ampx_tensor_to_host(t, back.data(), nbytes) == AMPX_OK);
    CHECK(back == bytes);
  }
}

TEST_CASE("tensor: creation rejects NULL ctx, NULL out and a NULL shape, writing nothing") {
  Ctx ctx;
  const int64_t shape[1] = {4};
  const float values[4] = {};
  ampx_tensor out = sentinel_tensor();
  CHECK_FAILS_WITH(ampx_tensor_empty(nullptr, AMPX_F32, 1, shape, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "'ctx'");
  CHECK(contains(last_error(), "ampx_tensor_empty"));
  CHECK_FAILS_WITH(ampx_tensor_zeros(nullptr, AMPX_F32, 1, shape, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "'ctx'");
  CHECK_FAILS_WITH(ampx_tensor_from_host(nullptr, AMPX_F32, 1, shape, values, 16, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "'ctx'");
  CHECK_FAILS_WITH(ampx_tensor_empty(ctx, AMPX_F32, 1, shape, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "'out'");
  CHECK_FAILS_WITH(ampx_tensor_zeros(ctx, AMPX_F32, 1, shape, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "'out'");
  CHECK_FAILS_WITH(ampx_tensor_from_host(ctx, AMPX_F32, 1, shape, values, 16, nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "'out'");
  CHECK_FAILS_WITH(ampx_tensor_empty(ctx, AMPX_F32, 2, nullptr, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "shape");
  CHECK_FAILS_WITH(ampx_tensor_zeros(ctx, AMPX_F32, 1, nullptr, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "shape");
  CHECK_FAILS_WITH(ampx_tensor_from_host(ctx, AMPX_F32, 1, shape, nullptr, 16, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "'data'");
  CHECK(out == sentinel_tensor());
  CHECK(stats_of(ctx).current_bytes == 0);
}

TEST_CASE("tensor: ndim past 8, negative extents and overflowing shapes are AMPX_ERR_SHAPE") {
  Ctx ctx;
  ampx_tensor out = sentinel_tensor();
  const int64_t ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  for (int32_t ndim : {9, 100, -1, INT32_MIN}) {
    CAPTURE(ndim);
    CHECK_FAILS_WITH(ampx_tensor_empty(ctx, AMPX_F32, ndim, ones, &out), AMPX_ERR_SHAPE, "ndim");
    CHECK_FAILS_WITH(ampx_tensor_zeros(ctx, AMPX_F32, ndim, ones, &out), AMPX_ERR_SHAPE, "ndim");
  }
  const int64_t negative[3] = {2, -3, 4};
  CHECK_FAILS_WITH(ampx_tensor_empty(ctx, AMPX_F32, 3, negative, &out), AMPX_ERR_SHAPE, "-3");
  const int64_t negative_after_zero[2] = {0, -1};
  CHECK_FAILS_WITH(ampx_tensor_empty(ctx, AMPX_F32, 2, negative_after_zero, &out), AMPX_ERR_SHAPE,
                   "shape[1]");
  const float dummy[1] = {};
  CHECK_FAILS_WITH(ampx_tensor_from_host(ctx, AMPX_F32, 3, negative, dummy, 0, &out),
                   AMPX_ERR_SHAPE, "ampx_tensor_from_host");
  // Byte sizes past what int64/size_t can count, for the element size.
  const int64_t huge_pair[2] = {int64_t{1} << 32, int64_t{1} << 32};
  const int64_t i64_overflow[1] = {int64_t{1} << 60};  // 2^63 bytes of i64
  const int64_t max_extent[2] = {INT64_MAX, 2};
  CHECK_FAILS_WITH(ampx_tensor_empty(ctx, AMPX_F16, 2, huge_pair, &out), AMPX_ERR_SHAPE,
                   "overflow");
  CHECK_FAILS_WITH(ampx_tensor_empty(ctx, AMPX_I64, 1, i64_overflow, &out), AMPX_ERR_SHAPE,
                   "overflow");
  CHECK_FAILS_WITH(ampx_tensor_zeros(ctx, AMPX_BF16, 2, max_extent, &out), AMPX_ERR_SHAPE,
                   "overflow");
  CHECK(out == sentinel_tensor());

  // Eight dimensions is the maximum and fine.
  const int64_t eight[8] = {1, 2, 1, 2, 1, 2, 1, 2};
  Tensor t;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F32, 8, eight, t.out()) == AMPX_OK);
  CHECK(shape_of(t) == std::vector<int64_t>(eight, eight + 8));
}

TEST_CASE("tensor: dtypes 0, 8 and 99 are AMPX_ERR_DTYPE everywhere a dtype is taken") {
  Ctx ctx;
  const int64_t shape[1] = {2};
  const float values[2] = {1, 2};
  Tensor src;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 1, shape, values, sizeof values, src.out()) ==
          AMPX_OK);
  for (int bad : {0, 8, 99}) {  // 8: the first value after the last type (AMPX_F8E5M2)
    CAPTURE(bad);
    const auto dtype = static_cast<ampx_dtype>(bad);
    ampx_tensor out = sentinel_tensor();
    CHECK_FAILS_WITH(ampx_tensor_empty(ctx, dtype, 1, shape, &out), AMPX_ERR_DTYPE, "'dtype'");
    CHECK_FAILS_WITH(ampx_tensor_zeros(ctx, dtype, 1, shape, &out), AMPX_ERR_DTYPE, "'dtype'");
    CHECK_FAILS_WITH(ampx_tensor_from_host(ctx, dtype, 1, shape, values, sizeof values, &out),
                     AMPX_ERR_DTYPE, "'dtype'");
    CHECK_FAILS_WITH(ampx_tensor_cast(src, dtype, &out), AMPX_ERR_DTYPE, "ampx_tensor_cast");
    CHECK(out == sentinel_tensor());
  }
  CHECK(stats_of(ctx).current_bytes == 8);
}

TEST_CASE("tensor: byte counts that disagree with the shape are AMPX_ERR_SHAPE naming both") {
  Ctx ctx;
  const int64_t shape[2] = {2, 3};
  std::vector<int32_t> values = {1, 2, 3, 4, 5, 6};
  ampx_tensor out = sentinel_tensor();
  CHECK_FAILS_WITH(ampx_tensor_from_host(ctx, AMPX_I32, 2, shape, values.data(), 20, &out),
                   AMPX_ERR_SHAPE, "20");
  CHECK(contains(last_error(), "24"));
  CHECK(contains(last_error(), "ampx_tensor_from_host"));
  CHECK_FAILS_WITH(ampx_tensor_from_host(ctx, AMPX_I64, 2, shape, values.data(), 24, &out),
                   AMPX_ERR_SHAPE, "48");
  CHECK(out == sentinel_tensor());

  Tensor t(upload(ctx, AMPX_I32, values));
  std::vector<int32_t> back(8, -1);
  CHECK_FAILS_WITH(ampx_tensor_to_host(t, back.data(), 32), AMPX_ERR_SHAPE, "32");
  CHECK(contains(last_error(), "24"));
  CHECK(contains(last_error(), "ampx_tensor_to_host"));
  CHECK(back == std::vector<int32_t>(8, -1));
  CHECK_FAILS_WITH(ampx_tensor_to_host(t, back.data(), 0), AMPX_ERR_SHAPE, "24");
  CHECK_FAILS_WITH(ampx_tensor_copy_from_host(t, back.data(), 23), AMPX_ERR_SHAPE, "23");
  CHECK(contains(last_error(), "24"));
  CHECK(contains(last_error(), "ampx_tensor_copy_from_host"));
  CHECK(download<int32_t>(t) == values);
}

TEST_CASE("tensor: NULL host buffers with a non-zero byte count are refused") {
  Ctx ctx;
  Tensor t(upload<float>(ctx, AMPX_F32, {1, 2}));
  CHECK_FAILS_WITH(ampx_tensor_to_host(t, nullptr, 8), AMPX_ERR_INVALID_ARGUMENT, "'dst'");
  CHECK_FAILS_WITH(ampx_tensor_copy_from_host(t, nullptr, 8), AMPX_ERR_INVALID_ARGUMENT, "'src'");
  CHECK(download<float>(t) == std::vector<float>{1, 2});
}

TEST_CASE("tensor: an ndim 0 scalar holds one element") {
  Ctx ctx;
  const double wide = 3.25;
  Tensor s;
  CHECK_FAILS_WITH(ampx_tensor_from_host(ctx, AMPX_F32, 0, nullptr, &wide, sizeof wide, s.out()),
                   AMPX_ERR_SHAPE, "[]");
  const float value = 3.25f;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 0, nullptr, &value, sizeof value, s.out()) ==
          AMPX_OK);
  int32_t ndim = -1;
  int64_t numel = 0;
  size_t nbytes = 0;
  CHECK(ampx_tensor_ndim(s, &ndim) == AMPX_OK);
  CHECK(ndim == 0);
  CHECK(ampx_tensor_numel(s, &numel) == AMPX_OK);
  CHECK(numel == 1);
  CHECK(ampx_tensor_nbytes(s, &nbytes) == AMPX_OK);
  CHECK(nbytes == 4);
  CHECK(ampx_tensor_shape(s, nullptr, 0) == AMPX_OK);
  CHECK(download<float>(s) == std::vector<float>{3.25f});

  Tensor h;
  REQUIRE(ampx_tensor_cast(s, AMPX_I64, h.out()) == AMPX_OK);
  CHECK(download<int64_t>(h) == std::vector<int64_t>{3});
  REQUIRE(ampx_tensor_fill(h, -9.0) == AMPX_OK);
  REQUIRE(ampx_tensor_copy(s, h) == AMPX_OK);
  CHECK(download<float>(s) == std::vector<float>{-9.0f});

  // A scalar and a one-element vector have the same number of elements.
  const int64_t one = 1;
  Tensor v;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_BF16, 1, &one, v.out()) == AMPX_OK);
  CHECK(ampx_tensor_copy(v, s) == AMPX_OK);
  CHECK(download<uint16_t>(v) == std::vector<uint16_t>{0xc110});  // -9 in bf16

  Tensor z;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_I32, 0, nullptr, z.out()) == AMPX_OK);
  CHECK(download<int32_t>(z) == std::vector<int32_t>{0});
  CHECK(stats_of(ctx).current_bytes == 4 + 8 + 2 + 4);
}

TEST_CASE("tensor: zero-size tensors hold no bytes and every call on them works") {
  Ctx ctx;
  const int64_t shape[3] = {4, 0, 3};
  const ampx_memory_stats before = stats_of(ctx);
  Tensor a, b, c;
  REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 3, shape, a.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F16, 3, shape, b.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_I64, 3, shape, nullptr, 0, c.out()) == AMPX_OK);
  int64_t numel = -1;
  size_t nbytes = 1;
  CHECK(ampx_tensor_numel(a, &numel) == AMPX_OK);
  CHECK(numel == 0);
  CHECK(ampx_tensor_nbytes(a, &nbytes) == AMPX_OK);
  CHECK(nbytes == 0);
  CHECK(shape_of(c) == std::vector<int64_t>{4, 0, 3});
  CHECK(ampx_tensor_to_host(a, nullptr, 0) == AMPX_OK);
  CHECK(ampx_tensor_copy_from_host(a, nullptr, 0) == AMPX_OK);
  CHECK(ampx_tensor_fill(b, 1.0) == AMPX_OK);
  CHECK(ampx_tensor_copy(a, b) == AMPX_OK);
  CHECK(ampx_tensor_copy(a, a) == AMPX_OK);
  Tensor d;
  CHECK(ampx_tensor_cast(c, AMPX_BF16, d.out()) == AMPX_OK);
  void* data = nullptr;
  CHECK(ampx_tensor_data(a, &data) == AMPX_OK);
  CHECK(ampx_tensor_set_name(a, "empty") == AMPX_OK);
  CHECK(name_of(a) == "empty");
  // A zero extent makes even an absurd other extent valid: no bytes.
  const int64_t absurd[2] = {0, INT64_MAX};
  Tensor e;
  CHECK(ampx_tensor_empty(ctx, AMPX_I64, 2, absurd, e.out()) == AMPX_OK);
  // Zero elements still disagree with a non-empty tensor.
  Tensor one(upload<float>(ctx, AMPX_F32, {1}));
  CHECK_FAILS_WITH(ampx_tensor_copy(one, a), AMPX_ERR_SHAPE, "0 elements");
  CHECK(stats_of(ctx).current_bytes == before.current_bytes + 4);
}

TEST_CASE("tensor: queries reject NULL handles and NULL outputs, writing nothing") {
  Ctx ctx;
  const int64_t shape[2] = {2, 3};
  Tensor t;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_F16, 2, shape, t.out()) == AMPX_OK);

  CHECK_FAILS_WITH(ampx_tensor_dtype(t, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'dtype'");
  CHECK_FAILS_WITH(ampx_tensor_ndim(t, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'ndim'");
  CHECK_FAILS_WITH(ampx_tensor_shape(t, nullptr, 2), AMPX_ERR_INVALID_ARGUMENT, "'dims'");
  CHECK_FAILS_WITH(ampx_tensor_numel(t, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'numel'");
  CHECK_FAILS_WITH(ampx_tensor_nbytes(t, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'nbytes'");
  CHECK_FAILS_WITH(ampx_tensor_data(t, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'data'");
  CHECK_FAILS_WITH(ampx_tensor_context(t, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'ctx'");
  CHECK_FAILS_WITH(ampx_tensor_name(t, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'name'");
  ampx_tensor out = sentinel_tensor();
  CHECK_FAILS_WITH(ampx_tensor_cast(t, AMPX_F32, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'out'");

  int64_t dims[2] = {-5, -5};
  CHECK_FAILS_WITH(ampx_tensor_shape(t, dims, 1), AMPX_ERR_INVALID_ARGUMENT, "capacity");
  CHECK(dims[0] == -5);  // not even partly written
  CHECK_FAILS_WITH(ampx_tensor_shape(t, dims, -1), AMPX_ERR_INVALID_ARGUMENT, "capacity");
  CHECK(dims[0] == -5);

  ampx_dtype dtype = static_cast<ampx_dtype>(0);
  int32_t ndim = -1;
  int64_t numel = -1;
  size_t nbytes = 99;
  void* data = nullptr;
  ampx_context owner = nullptr;
  const char* name = nullptr;
  CHECK_FAILS_WITH(ampx_tensor_dtype(nullptr, &dtype), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_ndim(nullptr, &ndim), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_shape(nullptr, dims, 2), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_numel(nullptr, &numel), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_nbytes(nullptr, &nbytes), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_data(nullptr, &data), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_context(nullptr, &owner), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_name(nullptr, &name), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_set_name(nullptr, "x"), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_retain(nullptr), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_fill(nullptr, 1.0), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_to_host(nullptr, dims, 8), AMPX_ERR_INVALID_ARGUMENT, "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_copy_from_host(nullptr, dims, 8), AMPX_ERR_INVALID_ARGUMENT,
                   "'tensor'");
  CHECK_FAILS_WITH(ampx_tensor_copy(nullptr, t), AMPX_ERR_INVALID_ARGUMENT, "'dst'");
  CHECK_FAILS_WITH(ampx_tensor_copy(t, nullptr), AMPX_ERR_INVALID_ARGUMENT, "'src'");
  CHECK_FAILS_WITH(ampx_tensor_cast(nullptr, AMPX_F32, &out), AMPX_ERR_INVALID_ARGUMENT, "'src'");
  CHECK(dtype == static_cast<ampx_dtype>(0));
  CHECK(ndim == -1);
  CHECK(numel == -1);
  CHECK(nbytes == 99);
  CHECK(data == nullptr);
  CHECK(owner == nullptr);
  CHECK(name == nullptr);
  CHECK(out == sentinel_tensor());
  ampx_tensor_release(nullptr);  // a no-op
}

// ---- copies -------------------------------------------------------------

TEST_CASE("tensor: copy_from_host overwrites the contents; a failing one changes nothing") {
  Ctx ctx;
  Tensor t(upload(ctx, AMPX_F32, iota_f32(6)));
  REQUIRE(ampx_tensor_set_name(t, "buffer") == AMPX_OK);
  const std::vector<float> next = {9, 8, 7, 6, 5, 4};
  REQUIRE(ampx_tensor_copy_from_host(t, next.data(), 24) == AMPX_OK);
  CHECK(download<float>(t) == next);
  const std::vector<float> longer = iota_f32(7, 100.0f);
  CHECK_FAILS_WITH(ampx_tensor_copy_from_host(t, longer.data(), 28), AMPX_ERR_SHAPE, "28");
  CHECK(download<float>(t) == next);
  CHECK(name_of(t) == "buffer");
  CHECK(shape_of(t) == std::vector<int64_t>{6});
}

TEST_CASE("tensor: copy between same and converting dtypes, across shapes and onto itself") {
  Ctx ctx;
  const std::vector<float> values = {0.5f, -1.5f, 2.75f, 1e10f, -0.0f, 65504.0f};
  Tensor src(upload(ctx, AMPX_F32, values));

  SUBCASE("same dtype, a different shape with the same element count") {
    const int64_t shape[2] = {3, 2};
    Tensor dst;
    REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 2, shape, dst.out()) == AMPX_OK);
    REQUIRE(ampx_tensor_copy(dst, src) == AMPX_OK);
    CHECK(download<float>(dst) == values);
    CHECK(shape_of(dst) == std::vector<int64_t>{3, 2});
    CHECK(shape_of(src) == std::vector<int64_t>{6});
  }
  SUBCASE("converting f32 -> f16 -> f32, row-major across shapes") {
    const int64_t shape[3] = {1, 2, 3};
    Tensor half, back;
    REQUIRE(ampx_tensor_zeros(ctx, AMPX_F16, 3, shape, half.out()) == AMPX_OK);
    REQUIRE(ampx_tensor_copy(half, src) == AMPX_OK);
    CHECK(download<uint16_t>(half) ==
          std::vector<uint16_t>{0x3800, 0xbe00, 0x4180, 0x7c00, 0x8000, 0x7bff});
    const int64_t flat = 6;
    REQUIRE(ampx_tensor_empty(ctx, AMPX_F32, 1, &flat, back.out()) == AMPX_OK);
    REQUIRE(ampx_tensor_copy(back, half) == AMPX_OK);
    const std::vector<float> got = download<float>(back);
    CHECK(got[0] == 0.5f);
    CHECK(got[2] == 2.75f);
    CHECK(got[3] == kInf);
    CHECK(std::signbit(got[4]));
  }
  SUBCASE("converting to integers truncates toward zero") {
    Tensor ints;
    const int64_t n = 6;
    REQUIRE(ampx_tensor_empty(ctx, AMPX_I32, 1, &n, ints.out()) == AMPX_OK);
    REQUIRE(ampx_tensor_copy(ints, src) == AMPX_OK);
    CHECK(download<int32_t>(ints) == std::vector<int32_t>{0, -1, 2, INT32_MAX, 0, 65504});
  }
  SUBCASE("a tensor copied onto itself is unchanged") {
    REQUIRE(ampx_tensor_copy(src, src) == AMPX_OK);
    const std::vector<float> got = download<float>(src);
    CHECK(std::memcmp(got.data(), values.data(), 24) == 0);
  }
}

TEST_CASE("tensor: copy refuses other element counts and other contexts, leaving dst alone") {
  Ctx ctx, other;
  const std::vector<float> values = iota_f32(6, 1.0f);
  Tensor dst(upload(ctx, AMPX_F32, values));
  REQUIRE(ampx_tensor_set_name(dst, "dst") == AMPX_OK);
  Tensor five(upload(ctx, AMPX_F32, iota_f32(5, 50.0f)));
  CHECK_FAILS_WITH(ampx_tensor_copy(dst, five), AMPX_ERR_SHAPE, "6 elements");
  CHECK(contains(last_error(), "5 elements"));
  CHECK(contains(last_error(), "ampx_tensor_copy"));
  Tensor foreign(upload(other, AMPX_F32, iota_f32(6, 70.0f)));
  CHECK_FAILS_WITH(ampx_tensor_copy(dst, foreign), AMPX_ERR_DEVICE, "different contexts");
  CHECK_FAILS_WITH(ampx_tensor_copy(foreign, dst), AMPX_ERR_DEVICE, "different contexts");
  CHECK(download<float>(dst) == values);
  CHECK(download<float>(foreign) == iota_f32(6, 70.0f));
  CHECK(name_of(dst) == "dst");
}

// ---- conversions --------------------------------------------------------

TEST_CASE("tensor: cast between every pair of dtypes matches a once-rounding reference") {
  if (!long_double_holds_i64()) {
    MESSAGE("long double cannot hold every i64 here: the reference would be inexact");
    return;
  }
  Ctx ctx;
  for (const Column& src : {f32_samples(), f16_samples(), bf16_samples(), i32_samples(),
                            i64_samples()}) {
    for (ampx_dtype to : kAllDtypes) check_cast(ctx, src, to);
  }
}

TEST_CASE("tensor: cast spot checks against hand-computed results") {
  Ctx ctx;
  Tensor f(upload<float>(ctx, AMPX_F32, {2.5f, -2.5f, kNaN, 1e10f, 65520.0f, -1e10f}));
  Tensor i, h;
  REQUIRE(ampx_tensor_cast(f, AMPX_I32, i.out()) == AMPX_OK);
  CHECK(download<int32_t>(i) == std::vector<int32_t>{2, -2, 0, INT32_MAX, 65520, INT32_MIN});
  REQUIRE(ampx_tensor_cast(f, AMPX_F16, h.out()) == AMPX_OK);
  const std::vector<uint16_t> half = download<uint16_t>(h);
  CHECK(half[0] == 0x4100);
  CHECK(half[1] == 0xc100);
  CHECK((half[2] & 0x7c00) == 0x7c00);
  CHECK((half[2] & 0x03ff) != 0);
  CHECK(half[3] == 0x7c00);
  CHECK(half[4] == 0x7c00);  // 65520 is the tie between 65504 and 2^16: inf
  CHECK(half[5] == 0xfc00);

  // f32 steps by 2^17 at 2^40: 65537 above is past the halfway point.
  Tensor big(upload<int64_t>(ctx, AMPX_I64, {int64_t{1} << 40, -(int64_t{1} << 40) - 65537}));
  Tensor g;
  REQUIRE(ampx_tensor_cast(big, AMPX_F32, g.out()) == AMPX_OK);
  CHECK(download<float>(g) == std::vector<float>{1099511627776.0f, -1099511758848.0f});
}

TEST_CASE("tensor: i64 beyond 2^53 converts to f32 and bf16 with a single rounding") {
  // Through a double these would round twice: 2^60 + 2^36 + 1 is just above
  // the f32 halfway point 2^60 + 2^36 and must round up to 2^60 + 2^37, but
  // as a double it is exactly the tie, which goes down to even (2^60).
  Ctx ctx;
  const int64_t above_f32_tie = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  const int64_t above_bf16_tie = (int64_t{1} << 60) + (int64_t{1} << 52) + 1;
  Tensor src(upload<int64_t>(ctx, AMPX_I64, {above_f32_tie, -above_f32_tie, above_bf16_tie}));
  Tensor f, b;
  REQUIRE(ampx_tensor_cast(src, AMPX_F32, f.out()) == AMPX_OK);
  // 2^60 + 2^37 = 1.00000000000000000000001b * 2^60: f32 0x5d800001.
  const std::vector<uint32_t> got = download<uint32_t>(f);
  CHECK(got[0] == 0x5d800001u);
  CHECK(got[1] == 0xdd800001u);
  REQUIRE(ampx_tensor_cast(src, AMPX_BF16, b.out()) == AMPX_OK);
  // 2^60 + 2^53 = 1.0000001b * 2^60: bf16 0x5d81.
  CHECK(download<uint16_t>(b)[2] == 0x5d81);
}

TEST_CASE("tensor: cast keeps the shape, leaves the source alone and does not copy the name") {
  Ctx ctx;
  const int64_t shape[2] = {2, 2};
  const std::vector<float> values = {0.1f, -3.75f, 1e-3f, 300.0f};
  Tensor src;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 2, shape, values.data(), 16, src.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_set_name(src, "layer.w") == AMPX_OK);
  for (ampx_dtype to : kAllDtypes) {
    CAPTURE(to);
    Tensor out;
    REQUIRE(ampx_tensor_cast(src, to, out.out()) == AMPX_OK);
    CHECK(out.handle != src.handle);
    CHECK(shape_of(out) == std::vector<int64_t>{2, 2});
    ampx_dtype dtype = static_cast<ampx_dtype>(0);
    CHECK(ampx_tensor_dtype(out, &dtype) == AMPX_OK);
    CHECK(dtype == to);
    CHECK(name_of(out).empty());
  }
  CHECK(download<float>(src) == values);
  CHECK(name_of(src) == "layer.w");
}

// ---- fill ---------------------------------------------------------------

TEST_CASE("tensor: fill stores each dtype's exact bit pattern") {
  Ctx ctx;
  const int64_t n = 5;
  auto fill_bits = [&](ampx_dtype dtype, double value) {
    Tensor t;
    REQUIRE(ampx_tensor_empty(ctx, dtype, 1, &n, t.out()) == AMPX_OK);
    REQUIRE(ampx_tensor_fill(t, value) == AMPX_OK);
    std::vector<unsigned char> bytes(static_cast<size_t>(n) * ampx_dtype_size(dtype));
    REQUIRE(ampx_tensor_to_host(t, bytes.data(), bytes.size()) == AMPX_OK);
    uint64_t first = 0;
    std::memcpy(&first, bytes.data(), ampx_dtype_size(dtype));
    for (size_t i = 1; i < static_cast<size_t>(n); ++i)
      CHECK(std::memcmp(bytes.data(), bytes.data() + i * ampx_dtype_size(dtype),
                        ampx_dtype_size(dtype)) == 0);
    return first;
  };
  const double tie_bf16 = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  const double tie_f16 = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  const double nan = std::numeric_limits<double>::quiet_NaN();

  CHECK(fill_bits(AMPX_F32, 0.1) == 0x3dcccccdu);
  CHECK(fill_bits(AMPX_F32, -2.0) == 0xc0000000u);
  CHECK(fill_bits(AMPX_F32, 1e39) == 0x7f800000u);
  CHECK(fill_bits(AMPX_F32, -0.0) == 0x80000000u);
  CHECK(fill_bits(AMPX_F16, 0.1) == 0x2e66u);
  CHECK(fill_bits(AMPX_F16, 65519.99) == 0x7bffu);
  CHECK(fill_bits(AMPX_F16, 65520.0) == 0x7c00u);
  CHECK(fill_bits(AMPX_F16, -1e6) == 0xfc00u);
  CHECK(fill_bits(AMPX_F16, 1e-8) == 0x0000u);
  CHECK(fill_bits(AMPX_F16, std::ldexp(1.0, -24)) == 0x0001u);
  // Rounded once from the double: a detour through f32 would drop the 2^-40
  // and turn these into ties that round down to even.
  CHECK(fill_bits(AMPX_F16, tie_f16) == 0x3c01u);
  CHECK(fill_bits(AMPX_BF16, tie_bf16) == 0x3f81u);
  CHECK(fill_bits(AMPX_BF16, 0.1) == 0x3dcdu);
  CHECK(fill_bits(AMPX_BF16, -1.0) == 0xbf80u);
  CHECK(fill_bits(AMPX_BF16, 1e39) == 0x7f80u);
  const uint64_t f16_nan = fill_bits(AMPX_F16, nan);
  CHECK((f16_nan & 0x7c00u) == 0x7c00u);
  CHECK((f16_nan & 0x03ffu) != 0);
  const uint64_t bf16_nan = fill_bits(AMPX_BF16, nan);
  CHECK((bf16_nan & 0x7f80u) == 0x7f80u);
  CHECK((bf16_nan & 0x007fu) != 0);
  CHECK(fill_bits(AMPX_I32, 0.9) == 0u);
  CHECK(fill_bits(AMPX_I32, -2.9) == 0xfffffffeu);
  CHECK(fill_bits(AMPX_I32, 3e9) == 0x7fffffffu);
  CHECK(fill_bits(AMPX_I32, -3e9) == 0x80000000u);
  CHECK(fill_bits(AMPX_I32, nan) == 0u);
  CHECK(fill_bits(AMPX_I64, 1e19) == 0x7fffffffffffffffull);
  CHECK(fill_bits(AMPX_I64, -1e19) == 0x8000000000000000ull);
  CHECK(fill_bits(AMPX_I64, 9007199254740992.0) == 0x20000000000000ull);
  CHECK(fill_bits(AMPX_I64, -0.5) == 0u);
  CHECK(fill_bits(AMPX_I64, nan) == 0u);
}

TEST_CASE("tensor: fill covers every element of a large tensor") {
  Ctx ctx(2);
  const int64_t shape[2] = {301, 233};  // past the CPU backend's split size
  Tensor t;
  REQUIRE(ampx_tensor_zeros(ctx, AMPX_BF16, 2, shape, t.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_fill(t, 0.1) == AMPX_OK);
  const std::vector<uint16_t> got = download<uint16_t>(t);
  CHECK(got.size() == 301u * 233u);
  size_t wrong = 0;
  for (uint16_t v : got) wrong += v != 0x3dcd;
  CHECK(wrong == 0);
}

// ---- names --------------------------------------------------------------

TEST_CASE("tensor: names are set, changed, cleared with NULL or an empty string") {
  Ctx ctx;
  Tensor t(upload<float>(ctx, AMPX_F32, {1}));
  CHECK(name_of(t).empty());
  std::string given = "encoder.layer0.weight";
  REQUIRE(ampx_tensor_set_name(t, given.c_str()) == AMPX_OK);
  given.assign("overwritten by the caller");  // the name was copied
  CHECK(name_of(t) == "encoder.layer0.weight");
  REQUIRE(ampx_tensor_set_name(t, "bias") == AMPX_OK);
  CHECK(name_of(t) == "bias");
  const std::string long_name(1000, 'n');
  REQUIRE(ampx_tensor_set_name(t, long_name.c_str()) == AMPX_OK);
  CHECK(name_of(t) == long_name);
  REQUIRE(ampx_tensor_set_name(t, nullptr) == AMPX_OK);
  CHECK(name_of(t).empty());
  REQUIRE(ampx_tensor_set_name(t, "again") == AMPX_OK);
  REQUIRE(ampx_tensor_set_name(t, "") == AMPX_OK);
  CHECK(name_of(t).empty());
}

// ---- lifetime -----------------------------------------------------------

TEST_CASE("tensor: retain and release count references; the last release frees") {
  Ctx ctx;
  ampx_tensor t = upload(ctx, AMPX_F32, iota_f32(16));
  REQUIRE(ampx_tensor_retain(t) == AMPX_OK);
  REQUIRE(ampx_tensor_retain(t) == AMPX_OK);
  ampx_tensor_release(t);
  ampx_tensor_release(t);
  CHECK(stats_of(ctx).current_bytes == 64);
  CHECK(download<float>(t) == iota_f32(16));
  ampx_tensor_release(t);
  CHECK(stats_of(ctx).current_bytes == 0);
}

TEST_CASE("tensor: a tensor used right after its last release is a stale handle") {
  Ctx ctx;
  ampx_tensor t = upload<float>(ctx, AMPX_F32, {1, 2});
  ampx_tensor_release(t);
  int64_t numel = -1;
  float back[2] = {};
  CHECK_FAILS_WITH(ampx_tensor_numel(t, &numel), AMPX_ERR_STALE_HANDLE, "already released");
  CHECK(contains(last_error(), "ampx_tensor_numel"));
  CHECK(numel == -1);
  CHECK_FAILS_WITH(ampx_tensor_to_host(t, back, sizeof back), AMPX_ERR_STALE_HANDLE,
                   "already released");
  CHECK_FAILS_WITH(ampx_tensor_fill(t, 1.0), AMPX_ERR_STALE_HANDLE, "already released");
  CHECK_FAILS_WITH(ampx_tensor_retain(t), AMPX_ERR_STALE_HANDLE, "already released");
  // A second release is reported too (release itself returns nothing).
  CHECK(ampx_tensor_numel(nullptr, &numel) == AMPX_ERR_INVALID_ARGUMENT);
  ampx_tensor_release(t);
  CHECK(ampx_last_status() == AMPX_ERR_STALE_HANDLE);
  CHECK(contains(last_error(), "ampx_tensor_release"));
  Tensor live(upload<float>(ctx, AMPX_F32, {3}));
  CHECK_FAILS_WITH(ampx_tensor_copy(live, t), AMPX_ERR_STALE_HANDLE, "'src'");
  CHECK(download<float>(live) == std::vector<float>{3});
}

TEST_CASE("tensor: a context handle passed as a tensor is not an ampx_tensor") {
  Ctx ctx;
  const auto fake = reinterpret_cast<ampx_tensor>(ctx.handle);
  int64_t numel = -1;
  CHECK_FAILS_WITH(ampx_tensor_numel(fake, &numel), AMPX_ERR_STALE_HANDLE, "not an ampx_tensor");
  CHECK_FAILS_WITH(ampx_tensor_fill(fake, 0.0), AMPX_ERR_STALE_HANDLE, "not an ampx_tensor");
  CHECK_FAILS_WITH(ampx_tensor_retain(fake), AMPX_ERR_STALE_HANDLE, "not an ampx_tensor");
  CHECK(numel == -1);
  // The context itself is unharmed.
  Tensor t(upload<float>(ctx, AMPX_F32, {1}));
  CHECK(download<float>(t) == std::vector<float>{1});
}

TEST_CASE("tensor: tensor_context returns the context without adding a reference") {
  ampx_context ctx = ampx_test::test_context();
  ampx_tensor t = upload<float>(ctx, AMPX_F32, {1});
  ampx_context owner = nullptr;
  REQUIRE(ampx_tensor_context(t, &owner) == AMPX_OK);
  CHECK(owner == ctx);
  ampx_context_release(ctx);
  // The program's only reference is gone: the borrowed handle is closed.
  CHECK(ampx_context_synchronize(owner) == AMPX_ERR_STALE_HANDLE);
  ampx_tensor_release(t);
}

// ---- wrap ---------------------------------------------------------------

namespace {

struct DeleterLog {
  int calls = 0;
  void* data = nullptr;
  void* user = nullptr;
};

void count_deleter(void* user, void* data) {
  auto* log = static_cast<DeleterLog*>(user);
  ++log->calls;
  log->data = data;
  log->user = user;
}

}  // namespace

TEST_CASE("tensor: wrap shares host memory and calls the deleter once, on the last release") {
  if (test_device() != AMPX_DEVICE_CPU) {
    MESSAGE("wrapping a host array needs a CPU context");
    return;
  }
  Ctx ctx;
  alignas(64) float host[6] = {1, 2, 3, 4, 5, 6};
  const int64_t shape[2] = {2, 3};
  DeleterLog log;
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_wrap(ctx, AMPX_F32, 2, shape, host, sizeof host, count_deleter, &log, &t) ==
          AMPX_OK);
  void* data = nullptr;
  REQUIRE(ampx_tensor_data(t, &data) == AMPX_OK);
  CHECK(data == static_cast<void*>(host));
  CHECK(shape_of(t) == std::vector<int64_t>{2, 3});
  CHECK(download<float>(t) == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(ampx_tensor_fill(t, -1.0) == AMPX_OK);
  CHECK(host[0] == -1.0f);
  CHECK(host[5] == -1.0f);
  host[3] = 42.0f;
  CHECK(download<float>(t)[3] == 42.0f);
  CHECK(stats_of(ctx).current_bytes == 0);  // wrapped memory is not counted
  CHECK(stats_of(ctx).allocation_count == 0);

  REQUIRE(ampx_tensor_retain(t) == AMPX_OK);
  ampx_tensor_release(t);
  CHECK(log.calls == 0);
  ampx_tensor_release(t);
  CHECK(log.calls == 1);
  CHECK(log.data == static_cast<void*>(host));
  CHECK(log.user == static_cast<void*>(&log));

  // Without a deleter the memory simply stays the caller's.
  Tensor plain;
  REQUIRE(ampx_tensor_wrap(ctx, AMPX_F32, 2, shape, host, sizeof host, nullptr, nullptr,
                           plain.out()) == AMPX_OK);
  REQUIRE(ampx_tensor_fill(plain, 7.0) == AMPX_OK);
  plain.out();
  CHECK(host[1] == 7.0f);
  CHECK(log.calls == 1);
}

TEST_CASE("tensor: wrap of device memory another tensor owns; the deleter runs once") {
  Ctx ctx;
  Tensor owner(upload(ctx, AMPX_F32, iota_f32(8)));
  void* base = nullptr;
  REQUIRE(ampx_tensor_data(owner, &base) == AMPX_OK);
  DeleterLog log;
  const int64_t shape[2] = {2, 2};
  Tensor view;
  // The last four floats, as a 2x2 tensor.
  void* tail = static_cast<char*>(base) + 16;
  REQUIRE(ampx_tensor_wrap(ctx, AMPX_F32, 2, shape, tail, 16, count_deleter, &log, view.out()) ==
          AMPX_OK);
  CHECK(download<float>(view) == std::vector<float>{4, 5, 6, 7});
  REQUIRE(ampx_tensor_fill(view, 0.5) == AMPX_OK);
  CHECK(download<float>(owner) == std::vector<float>{0, 1, 2, 3, 0.5f, 0.5f, 0.5f, 0.5f});
  CHECK(stats_of(ctx).current_bytes == 32);
  view.out();
  CHECK(log.calls == 1);
  CHECK(log.data == tail);
}

TEST_CASE("tensor: a failed wrap never calls the deleter") {
  Ctx ctx;
  Tensor owner(upload(ctx, AMPX_F32, iota_f32(8)));
  void* base = nullptr;
  REQUIRE(ampx_tensor_data(owner, &base) == AMPX_OK);
  DeleterLog log;
  const int64_t shape[1] = {4};
  const int64_t negative[1] = {-4};
  ampx_tensor out = sentinel_tensor();
  void* misaligned = static_cast<char*>(base) + 2;

  CHECK_FAILS_WITH(ampx_tensor_wrap(ctx, AMPX_F32, 1, shape, misaligned, 16, count_deleter, &log,
                                    &out),
                   AMPX_ERR_INVALID_ARGUMENT, "aligned");
  CHECK(contains(last_error(), "ampx_tensor_wrap"));
  CHECK_FAILS_WITH(ampx_tensor_wrap(ctx, AMPX_F32, 1, shape, base, 12, count_deleter, &log, &out),
                   AMPX_ERR_SHAPE, "12");
  CHECK(contains(last_error(), "16"));
  CHECK_FAILS_WITH(ampx_tensor_wrap(ctx, AMPX_F32, 1, negative, base, 16, count_deleter, &log,
                                    &out),
                   AMPX_ERR_SHAPE, "-4");
  CHECK_FAILS_WITH(ampx_tensor_wrap(ctx, static_cast<ampx_dtype>(0), 1, shape, base, 16,
                                    count_deleter, &log, &out),
                   AMPX_ERR_DTYPE, "'dtype'");
  CHECK_FAILS_WITH(ampx_tensor_wrap(ctx, AMPX_F32, 1, shape, nullptr, 16, count_deleter, &log,
                                    &out),
                   AMPX_ERR_INVALID_ARGUMENT, "'data'");
  CHECK_FAILS_WITH(ampx_tensor_wrap(ctx, AMPX_F32, 1, shape, base, 16, count_deleter, &log,
                                    nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "'out'");
  CHECK_FAILS_WITH(ampx_tensor_wrap(nullptr, AMPX_F32, 1, shape, base, 16, count_deleter, &log,
                                    &out),
                   AMPX_ERR_INVALID_ARGUMENT, "'ctx'");
  CHECK_FAILS_WITH(ampx_tensor_wrap(reinterpret_cast<ampx_context>(owner.handle), AMPX_F32, 1,
                                    shape, base, 16, count_deleter, &log, &out),
                   AMPX_ERR_STALE_HANDLE, "not an ampx_context");
  CHECK(out == sentinel_tensor());
  CHECK(log.calls == 0);
  CHECK(download<float>(owner) == iota_f32(8));

  // Two bytes off is fine for a 2-byte type.
  Tensor half;
  REQUIRE(ampx_tensor_wrap(ctx, AMPX_F16, 1, shape, misaligned, 8, count_deleter, &log,
                           half.out()) == AMPX_OK);
  half.out();
  CHECK(log.calls == 1);
}

TEST_CASE("tensor: zero-size and scalar wraps") {
  Ctx ctx;
  DeleterLog log;
  const int64_t shape[1] = {0};
  Tensor empty;
  REQUIRE(ampx_tensor_wrap(ctx, AMPX_I64, 1, shape, nullptr, 0, count_deleter, &log,
                           empty.out()) == AMPX_OK);
  CHECK(ampx_tensor_fill(empty, 3.0) == AMPX_OK);
  empty.out();
  CHECK(log.calls == 1);  // a deleter is a deleter, whatever the size

  Tensor owner(upload<int32_t>(ctx, AMPX_I32, {5, 6}));
  void* base = nullptr;
  REQUIRE(ampx_tensor_data(owner, &base) == AMPX_OK);
  Tensor scalar;
  REQUIRE(ampx_tensor_wrap(ctx, AMPX_I32, 0, nullptr, static_cast<char*>(base) + 4, 4, nullptr,
                           nullptr, scalar.out()) == AMPX_OK);
  CHECK(download<int32_t>(scalar) == std::vector<int32_t>{6});
}

// ---- failure atomicity --------------------------------------------------

TEST_CASE("tensor: failed calls leave contents, name, shape and references unchanged") {
  Ctx ctx, other;
  const int64_t shape[2] = {2, 4};
  const std::vector<float> values = iota_f32(8, -3.0f);
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 2, shape, values.data(), 32, &t) == AMPX_OK);
  REQUIRE(ampx_tensor_set_name(t, "kept") == AMPX_OK);

  const std::vector<float> junk(16, 99.0f);
  Tensor wrong_count(upload(ctx, AMPX_F32, iota_f32(3)));
  Tensor foreign(upload(other, AMPX_F32, iota_f32(8)));
  ampx_tensor out = sentinel_tensor();
  int64_t dims[1] = {0};
  CHECK(ampx_tensor_copy_from_host(t, junk.data(), 64) == AMPX_ERR_SHAPE);
  CHECK(ampx_tensor_copy_from_host(t, junk.data(), 31) == AMPX_ERR_SHAPE);
  CHECK(ampx_tensor_copy(t, wrong_count) == AMPX_ERR_SHAPE);
  CHECK(ampx_tensor_copy(wrong_count, t) == AMPX_ERR_SHAPE);
  CHECK(ampx_tensor_copy(t, foreign) == AMPX_ERR_DEVICE);
  CHECK(ampx_tensor_cast(t, static_cast<ampx_dtype>(42), &out) == AMPX_ERR_DTYPE);
  CHECK(ampx_tensor_to_host(t, dims, 8) == AMPX_ERR_SHAPE);
  CHECK(ampx_tensor_shape(t, dims, 1) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_tensor_name(t, nullptr) == AMPX_ERR_INVALID_ARGUMENT);

  CHECK(download<float>(t) == values);
  CHECK(name_of(t) == "kept");
  CHECK(shape_of(t) == std::vector<int64_t>{2, 4});
  CHECK(download<float>(wrong_count) == iota_f32(3));
  CHECK(out == sentinel_tensor());
  CHECK(dims[0] == 0);
  // Still exactly one reference: one release makes the handle stale.
  ampx_tensor_release(t);
  int64_t numel = 0;
  CHECK(ampx_tensor_numel(t, &numel) == AMPX_ERR_STALE_HANDLE);
}
