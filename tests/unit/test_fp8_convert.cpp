// test_fp8_convert.cpp -- FP8 tensors (AMPX_F8E4M3, AMPX_F8E5M2): their
// conversions through the C API on the test device (the CPU, or the CUDA
// backend -- kernels calling cuda_fp8.h -- on the emulator or a GPU), the
// CPU's vectorised paths, and FP8 tensors in DLPack, safetensors and
// checkpoint files; every other op refuses them.
//
// The references (fp8_reference.h) share no code with kernels/math/fp8.h.
#include <dlpack/dlpack.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/convert_bulk.h"
#include "math/convert.h"
#include "fp8_reference.h"
#include "support.h"

using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::download;
using ampx_test::last_error;
using ampx_test::Tensor;
using ampx_test::upload;
using fp8_test::Fp8Format;
using fp8_test::is_nan_code;
using fp8_test::kE4M3;
using fp8_test::kE5M2;
using fp8_test::kFormats;
using fp8_test::reference_code;
using fp8_test::reference_value;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::string hex(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%x", v);
  return text;
}

// The boundaries of both formats: every finite value, the midpoints
// between neighbours (ties), the floats next to each, the top of the range
// (max, the tie above it, beyond, inf), signed zeros, float subnormals and
// NaNs; with both signs.
std::vector<float> boundary_inputs() {
  std::vector<float> out;
  const float inf = std::numeric_limits<float>::infinity();
  for (const Fp8Format* f : kFormats) {
    std::vector<double> finite;
    for (int code = 0; code <= f->max_code; ++code) finite.push_back(reference_value(*f, code));
    finite.push_back(f->max + std::ldexp(1.0, std::ilogb(f->max) - f->mantissa_bits));  // the next
    finite.push_back(2 * f->max);
    for (size_t i = 0; i < finite.size(); ++i) {
      const float v = static_cast<float>(finite[i]);
      for (float x : {v, std::nextafter(v, inf), std::nextafter(v, -inf)}) out.push_back(x);
      if (i + 1 < finite.size()) {
        const float mid = static_cast<float>((finite[i] + finite[i + 1]) / 2);
        for (float x : {mid, std::nextafter(mid, inf), std::nextafter(mid, 0.0f)}) out.push_back(x);
      }
    }
  }
  for (float x : {0.0f, inf, std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), float_of(0x007fffffu),
                  std::numeric_limits<float>::quiet_NaN(), float_of(0x7f800001u),
                  float_of(0x7fffffffu), 500.0f, 480.0f, 464.0f, 61440.0f, 60000.0f, 0x1p-10f,
                  0x1p-17f, 3 * 0x1p-18f})
    out.push_back(x);
  const size_t positive = out.size();
  for (size_t i = 0; i < positive; ++i) out.push_back(-out[i]);
  return out;
}

// Random floats: half uniform bit patterns (every exponent, NaNs,
// infinities, subnormals), half within and around FP8's range (exponents
// -24 to 18, any mantissa, either sign).
std::vector<float> random_inputs(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t r = rng();
    if (i % 2 == 0) {
      out[i] = float_of(r);
    } else {
      const uint32_t exponent = 127 - 24 + rng() % 43;
      out[i] = float_of((r & 0x807fffffu) | (exponent << 23));
    }
  }
  return out;
}

ampx_tensor f32_tensor(ampx_context ctx, const std::vector<float>& values) {
  return upload<float>(ctx, AMPX_F32, values);
}

ampx_tensor fp8_tensor(ampx_context ctx, const Fp8Format& f, const std::vector<uint8_t>& codes) {
  return upload<uint8_t>(ctx, f.dtype, codes);
}

ampx_tensor empty_like(ampx_context ctx, ampx_dtype dtype, int64_t n) {
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_empty(ctx, dtype, 1, &n, &t) == AMPX_OK);
  return t;
}

// Checks codes[i] == reference_code(values[i]) for all i; reports the
// first mismatches.
void check_codes(const Fp8Format& f, const std::vector<double>& values,
                 const std::vector<uint8_t>& codes, bool saturate, const char* path) {
  REQUIRE(codes.size() == values.size());
  size_t wrong = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const uint8_t expected = reference_code(f, values[i], saturate);
    if (codes[i] == expected) continue;
    if (++wrong <= 5)
      FAIL_CHECK(path, " ", f.name, saturate ? " saturating" : " non-saturating", ": ", values[i],
                 " (float bits ", hex(bits_of(static_cast<float>(values[i]))), ") became ",
                 hex(codes[i]), ", expected ", hex(expected));
  }
  CHECK_MESSAGE(wrong == 0, wrong, " of ", values.size(), " conversions differ (", path, ")");
}

// Every conversion path into f from F32 values: ampx_tensor_cast (torch's
// rule for the type) and ampx_tensor_copy_fp8 with both rules.
void check_encoding(ampx_context ctx, const std::vector<float>& inputs) {
  Tensor src(f32_tensor(ctx, inputs));
  const int64_t n = static_cast<int64_t>(inputs.size());
  const std::vector<double> values(inputs.begin(), inputs.end());
  for (const Fp8Format* f : kFormats) {
    Tensor cast;
    REQUIRE_MESSAGE(ampx_tensor_cast(src, f->dtype, cast.out()) == AMPX_OK, last_error());
    check_codes(*f, values, download<uint8_t>(cast), f->dtype == AMPX_F8E4M3, "ampx_tensor_cast");
    for (ampx_fp8_overflow rule : {AMPX_FP8_SATURATE, AMPX_FP8_NO_SATURATE}) {
      Tensor dst(empty_like(ctx, f->dtype, n));
      REQUIRE_MESSAGE(ampx_tensor_copy_fp8(dst, src, rule) == AMPX_OK, last_error());
      check_codes(*f, values, download<uint8_t>(dst), rule == AMPX_FP8_SATURATE,
                  "ampx_tensor_copy_fp8");
    }
  }
}

}  // namespace

TEST_CASE("fp8: all 256 codes decode exactly and round-trip (NaN stays NaN)") {
  Ctx ctx;
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  for (const Fp8Format* f : kFormats) {
    CAPTURE(f->name);
    Tensor t(fp8_tensor(ctx, *f, codes));
    Tensor as_f32, as_bf16;
    REQUIRE(ampx_tensor_cast(t, AMPX_F32, as_f32.out()) == AMPX_OK);
    REQUIRE(ampx_tensor_cast(t, AMPX_BF16, as_bf16.out()) == AMPX_OK);
    const std::vector<float> decoded = download<float>(as_f32);
    const std::vector<uint16_t> decoded_bf16 = download<uint16_t>(as_bf16);
    for (int i = 0; i < 256; ++i) {
      CAPTURE(i);
      const double expected = reference_value(*f, static_cast<uint8_t>(i));
      const float bf16 = float_of(static_cast<uint32_t>(decoded_bf16[i]) << 16);
      if (std::isnan(expected)) {
        CHECK(std::isnan(decoded[i]));
        CHECK(std::isnan(bf16));
        CHECK(std::signbit(decoded[i]) == ((i & 0x80) != 0));
      } else {
        CHECK(static_cast<double>(decoded[i]) == expected);
        CHECK(std::signbit(decoded[i]) == ((i & 0x80) != 0));  // -0 stays -0
        CHECK(static_cast<double>(bf16) == expected);           // exact in bf16 too
      }
    }
    // Back into FP8 with both rules: every code returns, a NaN as the NaN
    // of its sign, E5M2's infinities as themselves or (saturating) as max.
    for (ampx_fp8_overflow rule : {AMPX_FP8_SATURATE, AMPX_FP8_NO_SATURATE}) {
      Tensor back(empty_like(ctx, f->dtype, 256));
      REQUIRE(ampx_tensor_copy_fp8(back, as_f32, rule) == AMPX_OK);
      const std::vector<uint8_t> again = download<uint8_t>(back);
      for (int i = 0; i < 256; ++i) {
        CAPTURE(i);
        const uint8_t code = static_cast<uint8_t>(i);
        if (is_nan_code(*f, code))
          CHECK(again[i] == ((code & 0x80) | 0x7f));
        else if (std::isinf(reference_value(*f, code)) && rule == AMPX_FP8_SATURATE)
          CHECK(again[i] == ((code & 0x80) | f->max_code));
        else
          CHECK(again[i] == code);
      }
    }
  }
}

TEST_CASE("fp8: conversions from f32 at every boundary equal the double reference") {
  Ctx ctx;
  check_encoding(ctx, boundary_inputs());
}

TEST_CASE("fp8: a million random f32 values convert as the double reference") {
  Ctx ctx;
  check_encoding(ctx, random_inputs(size_t{1} << 20, 42));
}

TEST_CASE("fp8: f16 and bf16 convert through their exact float values") {
  Ctx ctx;
  std::vector<float> inputs = boundary_inputs();
  const std::vector<float> more = random_inputs(1 << 14, 7);
  inputs.insert(inputs.end(), more.begin(), more.end());
  Tensor src(f32_tensor(ctx, inputs));
  for (ampx_dtype wide : {AMPX_F16, AMPX_BF16}) {
    CAPTURE(ampx_dtype_name(wide));
    Tensor narrow;
    REQUIRE(ampx_tensor_cast(src, wide, narrow.out()) == AMPX_OK);
    // The 16-bit values, decoded from their fields.
    const std::vector<uint16_t> bits = download<uint16_t>(narrow);
    std::vector<double> values(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      const uint16_t b = bits[i];
      if (wide == AMPX_BF16) {
        values[i] = float_of(static_cast<uint32_t>(b) << 16);
        continue;
      }
      const int e = (b >> 10) & 0x1f, man = b & 0x3ff;
      const double sign = (b & 0x8000) ? -1.0 : 1.0;
      values[i] = e == 31 ? (man ? std::numeric_limits<double>::quiet_NaN()
                                 : sign * std::numeric_limits<double>::infinity())
                  : e == 0 ? sign * std::ldexp(man, -24)
                           : sign * std::ldexp(1024 + man, e - 25);
      if (man && e == 31 && (b & 0x8000)) values[i] = -values[i];
    }
    for (const Fp8Format* f : kFormats) {
      for (ampx_fp8_overflow rule : {AMPX_FP8_SATURATE, AMPX_FP8_NO_SATURATE}) {
        Tensor dst(empty_like(ctx, f->dtype, static_cast<int64_t>(inputs.size())));
        REQUIRE(ampx_tensor_copy_fp8(dst, narrow, rule) == AMPX_OK);
        check_codes(*f, values, download<uint8_t>(dst), rule == AMPX_FP8_SATURATE,
                    "ampx_tensor_copy_fp8 from 16 bits");
      }
    }
  }
}

TEST_CASE("fp8: torch's rules, as the brief checked them on torch 2.15") {
  Ctx ctx;
  const float inf = std::numeric_limits<float>::infinity();
  Tensor e4m3_in(f32_tensor(ctx, {500.0f, 480.0f, inf, -500.0f, 0x1p-10f}));
  Tensor e4m3;
  REQUIRE(ampx_tensor_cast(e4m3_in, AMPX_F8E4M3, e4m3.out()) == AMPX_OK);
  CHECK(download<uint8_t>(e4m3) == std::vector<uint8_t>{0x7e, 0x7e, 0x7e, 0xfe, 0x00});
  Tensor e5m2_in(f32_tensor(ctx, {61440.0f, inf, 60000.0f}));
  Tensor e5m2;
  REQUIRE(ampx_tensor_cast(e5m2_in, AMPX_F8E5M2, e5m2.out()) == AMPX_OK);
  CHECK(download<uint8_t>(e5m2) == std::vector<uint8_t>{0x7c, 0x7c, 0x7b});
  // ampx_tensor_fill rounds a double the same way.
  Tensor filled(empty_like(ctx, AMPX_F8E4M3, 2));
  REQUIRE(ampx_tensor_fill(filled, -1e9) == AMPX_OK);
  CHECK(download<uint8_t>(filled) == std::vector<uint8_t>{0xfe, 0xfe});
  REQUIRE(ampx_tensor_fill(filled, 0.1) == AMPX_OK);  // 0.1 -> 0.1015625 (13 * 2^-7)
  CHECK(download<uint8_t>(filled) == std::vector<uint8_t>{0x1d, 0x1d});
}

TEST_CASE("fp8: the CPU's vector paths give the scalar bits, with and without a scale") {
  using ampx::impl::CpuIsa;
  using ampx::impl::DType;
  std::vector<float> inputs = boundary_inputs();
  const std::vector<float> more = random_inputs(1 << 16, 3);
  inputs.insert(inputs.end(), more.begin(), more.end());
  const int64_t n = static_cast<int64_t>(inputs.size());
  // The same values as f32, and rounded to bf16 and f16 (the sources the
  // vector paths widen themselves).
  std::vector<uint16_t> as_bf16(inputs.size()), as_f16(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    as_bf16[i] = ampx::impl::math::float_to_bf16(inputs[i]);
    as_f16[i] = ampx::impl::math::float_to_half(inputs[i]);
  }
  const std::pair<DType, const void*> sources[] = {
      {DType::F32, inputs.data()}, {DType::BF16, as_bf16.data()}, {DType::F16, as_f16.data()}};
  for (const auto& [src_type, src] : sources) {
    CAPTURE(ampx::impl::dtype_name(src_type));
    for (DType dst : {DType::F8E4M3, DType::F8E5M2}) {
      for (float scale : {1.0f, 0.3f, 1024.0f}) {
        for (bool saturate : {true, false}) {
          std::vector<uint8_t> expected(inputs.size());
          const uint32_t expected_amax = ampx::impl::quantize_fp8_bulk_with(
              CpuIsa::Scalar, expected.data(), dst, src, src_type, n, &scale, saturate);
          for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Neon}) {
            if (!ampx::impl::cpu_isa_supported(isa)) continue;
            CAPTURE(ampx::impl::cpu_isa_name(isa));
            // Every length up to a few vectors, so each tail is exercised.
            for (int64_t count :
                 {n, int64_t{1}, int64_t{7}, int64_t{15}, int64_t{17}, int64_t{33}}) {
              std::vector<uint8_t> got(static_cast<size_t>(count));
              const uint32_t amax = ampx::impl::quantize_fp8_bulk_with(
                  isa, got.data(), dst, src, src_type, count, &scale, saturate);
              CHECK(std::vector<uint8_t>(expected.begin(), expected.begin() + count) == got);
              if (count == n) CHECK(amax == expected_amax);
            }
          }
          if (src_type != DType::F32) continue;
          // The amax is the largest |x| in amax order: NaN's bits win.
          uint32_t reference_amax = 0;
          for (float x : inputs) reference_amax = std::max(reference_amax, bits_of(x) & 0x7fffffffu);
          CHECK(expected_amax == reference_amax);
        }
      }
    }
  }
}

TEST_CASE("fp8: ampx_tensor_copy_fp8 refuses bad arguments and changes nothing") {
  Ctx ctx;
  Tensor src(f32_tensor(ctx, {1.0f, 2.0f}));
  Tensor dst(fp8_tensor(ctx, kE4M3, {0x11, 0x22}));
  Tensor f16_dst(empty_like(ctx, AMPX_F16, 2));
  Tensor ints(upload<int32_t>(ctx, AMPX_I32, {1, 2}));
  Tensor three(f32_tensor(ctx, {1.0f, 2.0f, 3.0f}));
  CHECK_FAILS_WITH(ampx_tensor_copy_fp8(f16_dst, src, AMPX_FP8_SATURATE), AMPX_ERR_DTYPE, "dst");
  CHECK_FAILS_WITH(ampx_tensor_copy_fp8(dst, ints, AMPX_FP8_SATURATE), AMPX_ERR_DTYPE, "src");
  CHECK_FAILS_WITH(ampx_tensor_copy_fp8(dst, three, AMPX_FP8_SATURATE), AMPX_ERR_SHAPE, "elements");
  CHECK_FAILS_WITH(ampx_tensor_copy_fp8(dst, src, static_cast<ampx_fp8_overflow>(3)),
                   AMPX_ERR_INVALID_ARGUMENT, "overflow");
  CHECK_FAILS_WITH(ampx_tensor_copy_fp8(nullptr, src, AMPX_FP8_SATURATE), AMPX_ERR_INVALID_ARGUMENT,
                   "dst");
  Ctx other;
  Tensor elsewhere(f32_tensor(other, {1.0f, 2.0f}));
  CHECK_FAILS_WITH(ampx_tensor_copy_fp8(dst, elsewhere, AMPX_FP8_SATURATE), AMPX_ERR_DEVICE,
                   "contexts");
  CHECK(download<uint8_t>(dst) == std::vector<uint8_t>{0x11, 0x22});
}

TEST_CASE("fp8: every op refuses FP8 inputs with AMPX_ERR_DTYPE") {
  Ctx ctx;
  Tensor x(fp8_tensor(ctx, kE4M3, {0x38, 0x40, 0x44, 0x48}));
  Tensor y(fp8_tensor(ctx, kE5M2, {0x3c, 0x40, 0x42, 0x44}));
  Tensor f(f32_tensor(ctx, {1, 2, 3, 4}));
  const int64_t shape[] = {2, 2};
  Tensor x2;
  REQUIRE(ampx_tensor_view(x, 0, AMPX_F8E4M3, 2, shape, x2.out()) == AMPX_OK);  // views may
  Tensor out;
  CHECK(ampx_add(x, f, out.out()) == AMPX_ERR_DTYPE);
  CHECK(ampx_add(f, y, out.out()) == AMPX_ERR_DTYPE);
  CHECK(ampx_relu(x, out.out()) == AMPX_ERR_DTYPE);
  CHECK(ampx_sum(y, out.out()) == AMPX_ERR_DTYPE);
  CHECK(ampx_matmul(x2, x2, out.out()) == AMPX_ERR_DTYPE);
  CHECK(ampx_linear(x2, x2, nullptr, AMPX_ACTIVATION_NONE, out.out()) == AMPX_ERR_DTYPE);
  CHECK_FAILS_WITH(ampx_reshape(x, 2, shape, out.out()), AMPX_ERR_DTYPE, "f8e4m3");
  CHECK_FAILS_WITH(ampx_transpose(x2, 0, 1, out.out()), AMPX_ERR_DTYPE, "f8e4m3");
  const ampx_tensor pair[] = {f, y};
  CHECK_FAILS_WITH(ampx_concat(pair, 2, 0, out.out()), AMPX_ERR_DTYPE, "tensors[1]");
  CHECK(out.handle == nullptr);
  CHECK(ampx_tensor_set_requires_grad(x, 1) == AMPX_ERR_DTYPE);
  CHECK(ampx_tensor_set_grad(f, y) == AMPX_ERR_DTYPE);
  ampx_optimizer opt = nullptr;
  const ampx_tensor params[] = {x};
  CHECK(ampx_optimizer_create_sgd(ctx, params, 1, nullptr, &opt) == AMPX_ERR_DTYPE);
  CHECK(opt == nullptr);
}

TEST_CASE("fp8: DLPack carries FP8 as DLPack 1.1's float8 codes") {
  Ctx ctx;
  for (const Fp8Format* f : kFormats) {
    CAPTURE(f->name);
    Tensor t(fp8_tensor(ctx, *f, {0x00, 0x38, 0xb8, 0x7b}));
    DLManagedTensor* dl = nullptr;
    REQUIRE(ampx_tensor_to_dlpack(t, &dl) == AMPX_OK);
    CHECK(int{dl->dl_tensor.dtype.code} == (f->dtype == AMPX_F8E4M3 ? 10 : 12));
    CHECK(int{dl->dl_tensor.dtype.bits} == 8);
    CHECK(int{dl->dl_tensor.dtype.lanes} == 1);
    // Imported back: the same type and bytes, sharing the memory.
    Tensor back;
    REQUIRE_MESSAGE(ampx_tensor_from_dlpack(ctx, dl, back.out()) == AMPX_OK, last_error());
    ampx_dtype dtype = static_cast<ampx_dtype>(0);
    REQUIRE(ampx_tensor_dtype(back, &dtype) == AMPX_OK);
    CHECK(dtype == f->dtype);
    CHECK(download<uint8_t>(back) == std::vector<uint8_t>{0x00, 0x38, 0xb8, 0x7b});
  }
}

TEST_CASE("fp8: safetensors files hold F8_E4M3 and F8_E5M2") {
  Ctx ctx;
  ampx_test::TempDir dir;
  const std::string path = dir.file("fp8.safetensors");
  Tensor a(fp8_tensor(ctx, kE4M3, {0x01, 0x7e, 0xfe, 0x80, 0x7f}));
  Tensor b(fp8_tensor(ctx, kE5M2, {0x7c, 0x7b, 0x01}));
  const ampx_tensor tensors[] = {a, b};
  const char* const names[] = {"a", "b"};
  REQUIRE_MESSAGE(ampx_safetensors_save(path.c_str(), tensors, names, 2, nullptr, nullptr, 0) ==
                      AMPX_OK,
                  last_error());
  const std::vector<unsigned char> bytes = ampx_test::read_bytes(path);
  const std::string header(bytes.begin() + 8, bytes.end());
  CHECK(contains(header, "\"dtype\":\"F8_E4M3\""));
  CHECK(contains(header, "\"dtype\":\"F8_E5M2\""));
  ampx_safetensors file = nullptr;
  REQUIRE(ampx_safetensors_open(ctx, path.c_str(), &file) == AMPX_OK);
  Tensor a2, b2;
  REQUIRE_MESSAGE(ampx_safetensors_load_tensor(file, "a", 0, a2.out()) == AMPX_OK, last_error());
  REQUIRE(ampx_safetensors_load_tensor(file, "b", 0, b2.out()) == AMPX_OK);
  CHECK(download<uint8_t>(a2) == std::vector<uint8_t>{0x01, 0x7e, 0xfe, 0x80, 0x7f});
  CHECK(download<uint8_t>(b2) == std::vector<uint8_t>{0x7c, 0x7b, 0x01});
  // Converted on request into another type: the exact values.
  Tensor as_f32(empty_like(ctx, AMPX_F32, 3));
  const char* const b_name[] = {"b"};
  const ampx_tensor into[] = {as_f32};
  REQUIRE(ampx_safetensors_load_into(file, b_name, into, 1, AMPX_SAFETENSORS_CONVERT) == AMPX_OK);
  CHECK(download<float>(as_f32) ==
        std::vector<float>{std::numeric_limits<float>::infinity(), 57344.0f, 0x1p-16f});
  ampx_safetensors_release(file);
}

TEST_CASE("fp8: checkpoint files save and restore FP8 tensors bit for bit") {
  Ctx ctx;
  ampx_test::TempDir dir;
  const std::string path = dir.file("fp8.ckpt");
  Tensor a(fp8_tensor(ctx, kE4M3, {0x01, 0x7e, 0xfe, 0xff}));
  REQUIRE(ampx_tensor_set_name(a, "a") == AMPX_OK);
  const ampx_tensor params[] = {a};
  REQUIRE_MESSAGE(ampx_checkpoint_file_save(path.c_str(), params, 1, nullptr, nullptr) == AMPX_OK,
                  last_error());
  REQUIRE(ampx_tensor_fill(a, 0.0) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_checkpoint_file_load(path.c_str(), params, 1, nullptr, nullptr) == AMPX_OK,
                  last_error());
  CHECK(download<uint8_t>(a) == std::vector<uint8_t>{0x01, 0x7e, 0xfe, 0xff});
}
