// convert_bulk.cpp -- array conversions, scalar and vectorised.
//
// The vector kernels must agree bit for bit with convert.h, which is what the
// CUDA kernels run, so they use only instructions whose results are fully
// specified and equal to convert.h's rules:
//  - VCVTPS2PH with an explicit round-to-nearest-even immediate (independent
//    of MXCSR.RC) and VCVTPH2PS are exact IEEE conversions that keep
//    subnormals and quiet NaNs the way convert.h does;
//  - bf16 is rounded with integer arithmetic, not with VCVTNEPS2BF16, which
//    flushes subnormal inputs to zero and would disagree with convert.h;
//  - FP8 is rounded with fp8.h's integer arithmetic on 8 or 16 lanes (the
//    same shifts, variable per lane); decoding FP8 is a lookup in a table
//    of its 256 values, made by fp8.h.
// Tails are done by masked loads/stores (AVX-512) or by the scalar functions
// (AVX2, NEON), so no load ever reads past the end of an array.
// On AArch64 the NEON kernels use FCVT/FCVTN for f16 (IEEE conversions with
// the same NaN rule as F16C's; they round by FPCR, whose default is
// nearest-even without flushing, which C programs keep) and the same
// integer arithmetic as the x86 kernels for bf16 and FP8.
#include "core/convert_bulk.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "math/convert.h"
#include "math/fp8.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AMPX_X86_DISPATCH 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define AMPX_X86_DISPATCH 0
#endif
// NEON is part of every AArch64 CPU: no run-time detection.
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define AMPX_NEON 1
#include <arm_neon.h>
#else
#define AMPX_NEON 0
#endif

namespace ampx::impl {
namespace {

using Kernel = void (*)(void* dst, const void* src, int64_t count);

// ---- scalar: every pair, by convert.h's convert_value --------------------

template <int Dst, int Src>
void convert_scalar(void* dst, const void* src, int64_t count) {
  using D = math::storage_t<Dst>;
  using S = math::storage_t<Src>;
  // memcpy per element: tensors may hand us pointers at any byte offset.
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  for (int64_t i = 0; i < count; ++i) {
    S value;
    std::memcpy(&value, in + i * static_cast<int64_t>(sizeof(S)), sizeof value);
    const D result = math::convert_value<Dst, Src>(value);
    std::memcpy(out + i * static_cast<int64_t>(sizeof(D)), &result, sizeof result);
  }
}

template <int Src>
Kernel scalar_kernel_from(DType dst) {
  switch (dst) {
    case DType::F32: return &convert_scalar<AMPX_F32, Src>;
    case DType::F16: return &convert_scalar<AMPX_F16, Src>;
    case DType::BF16: return &convert_scalar<AMPX_BF16, Src>;
    case DType::I32: return &convert_scalar<AMPX_I32, Src>;
    case DType::I64: return &convert_scalar<AMPX_I64, Src>;
    case DType::F8E4M3: return &convert_scalar<AMPX_F8E4M3, Src>;
    case DType::F8E5M2: return &convert_scalar<AMPX_F8E5M2, Src>;
  }
  return nullptr;
}

Kernel scalar_kernel(DType dst, DType src) {
  switch (src) {
    case DType::F32: return scalar_kernel_from<AMPX_F32>(dst);
    case DType::F16: return scalar_kernel_from<AMPX_F16>(dst);
    case DType::BF16: return scalar_kernel_from<AMPX_BF16>(dst);
    case DType::I32: return scalar_kernel_from<AMPX_I32>(dst);
    case DType::I64: return scalar_kernel_from<AMPX_I64>(dst);
    case DType::F8E4M3: return scalar_kernel_from<AMPX_F8E4M3>(dst);
    case DType::F8E5M2: return scalar_kernel_from<AMPX_F8E5M2>(dst);
  }
  return nullptr;
}

// ---- FP8 ---------------------------------------------------------------------

// The float value of every FP8 byte, from fp8.h's decoding.
template <class Format>
const float* fp8_table() {
  static const struct Table {
    float value[256];
    Table() {
      for (int i = 0; i < 256; ++i) value[i] = math::fp8_to_float<Format>(static_cast<uint8_t>(i));
    }
  } table;
  return table.value;
}

template <class Format>
void fp8_to_f32(void* dst, const void* src, int64_t count) {
  const float* table = fp8_table<Format>();
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < count; ++i) std::memcpy(out + 4 * i, &table[in[i]], 4);
}

// One quantization loop (quantize_fp8_bulk): the source type S and the
// format are compile-time, the scale and the overflow rule not.
using QuantizeKernel = uint32_t (*)(uint8_t* dst, const unsigned char* src, int64_t count,
                                    const float* scale, bool saturate);

template <int Src, class Format>
uint32_t quantize_scalar(uint8_t* dst, const unsigned char* src, int64_t count,
                         const float* scale, bool saturate) {
  using S = math::storage_t<Src>;
  uint32_t amax = 0;
  for (int64_t i = 0; i < count; ++i) {
    S value;
    std::memcpy(&value, src + i * static_cast<int64_t>(sizeof(S)), sizeof value);
    float x = math::load_float<Src>(value);
    const uint32_t magnitude = math::float_bits(x) & 0x7fffffffu;
    if (magnitude > amax) amax = magnitude;
    if (scale != nullptr) x = x * *scale;
    dst[i] = math::float_to_fp8<Format>(x, saturate);
  }
  return amax;
}

template <class Format>
QuantizeKernel scalar_quantize_kernel(DType src) {
  switch (src) {
    case DType::F32: return &quantize_scalar<AMPX_F32, Format>;
    case DType::F16: return &quantize_scalar<AMPX_F16, Format>;
    case DType::BF16: return &quantize_scalar<AMPX_BF16, Format>;
    default: return nullptr;
  }
}

// Scalar access for the vector paths' tails, unaligned.
inline float load_f32(const unsigned char* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_f32(unsigned char* p, float v) { std::memcpy(p, &v, sizeof v); }
inline void store_u16(unsigned char* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

#if AMPX_X86_DISPATCH

constexpr int kRoundNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// ---- AVX2 + F16C: 8 elements per step -------------------------------------

#define AMPX_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))

AMPX_TARGET_AVX2 void f32_to_f16_avx2(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = _mm256_loadu_ps(reinterpret_cast<const float*>(in + 4 * i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), _mm256_cvtps_ph(v, kRoundNearestEven));
  }
  for (; i < count; ++i) store_u16(out + 2 * i, math::float_to_half(load_f32(in + 4 * i)));
}

AMPX_TARGET_AVX2 void f16_to_f32_avx2(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(reinterpret_cast<float*>(out + 4 * i), _mm256_cvtph_ps(h));
  }
  for (; i < count; ++i) store_f32(out + 4 * i, math::half_to_float(load_u16(in + 2 * i)));
}

// convert.h's float_to_bf16 on 8 lanes, leaving each result in the low half
// of its 32-bit lane.
AMPX_TARGET_AVX2 inline __m256i bf16_round_avx2(__m256i x) {
  const __m256i high = _mm256_srli_epi32(x, 16);
  const __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
  // Adding the rounding bias to a NaN could carry it into infinity; NaNs are
  // quietened and truncated instead. Magnitudes are < 2^31, so a signed
  // compare is an unsigned one here.
  const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

AMPX_TARGET_AVX2 void f32_to_bf16_avx2(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 4 * i));
    const __m256i r = bf16_round_avx2(x);
    // Every lane is <= 0xffff, so the saturating pack only narrows.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), packed);
  }
  for (; i < count; ++i) store_u16(out + 2 * i, math::float_to_bf16(load_f32(in + 4 * i)));
}

AMPX_TARGET_AVX2 void bf16_to_f32_avx2(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    const __m256i widened = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * i), widened);
  }
  for (; i < count; ++i) store_f32(out + 4 * i, math::bf16_to_float(load_u16(in + 2 * i)));
}

// fp8.h's float_to_fp8 on 8 lanes, each result in the low byte of its
// 32-bit lane. Every quantity stays below 2^31, so the signed compares and
// min/max are unsigned ones here.
template <class Format>
AMPX_TARGET_AVX2 inline __m256i fp8_round_avx2(__m256 value, __m256i overflow_code) {
  constexpr int M = Format::kMantissaBits;
  const __m256i zero = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i x = _mm256_castps_si256(value);
  const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 24), _mm256_set1_epi32(0x80));
  const __m256i significand = _mm256_or_si256(_mm256_and_si256(magnitude, _mm256_set1_epi32(0x7fffff)),
                                              _mm256_set1_epi32(0x800000));
  const __m256i k = _mm256_sub_epi32(_mm256_srli_epi32(magnitude, 23),
                                     _mm256_set1_epi32(127 - Format::kBias + 1));
  const __m256i below = _mm256_max_epi32(_mm256_sub_epi32(zero, k), zero);
  const __m256i shift =
      _mm256_min_epi32(_mm256_add_epi32(below, _mm256_set1_epi32(23 - M)), _mm256_set1_epi32(25));
  const __m256i odd = _mm256_and_si256(_mm256_srlv_epi32(significand, shift), one);
  const __m256i half_less_one = _mm256_sub_epi32(_mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one)), one);
  const __m256i rounded =
      _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(significand, half_less_one), odd), shift);
  __m256i code = _mm256_add_epi32(_mm256_slli_epi32(_mm256_max_epi32(k, zero), M), rounded);
  code = _mm256_blendv_epi8(code, overflow_code,
                            _mm256_cmpgt_epi32(code, _mm256_set1_epi32(Format::kMaxCode)));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7f),
                            _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000)));
  return _mm256_or_si256(code, sign);
}

template <int Src>
AMPX_TARGET_AVX2 inline __m256 load8_as_f32(const unsigned char* p) {
  if constexpr (Src == AMPX_F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (Src == AMPX_F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
  }
}

template <int Src, class Format>
AMPX_TARGET_AVX2 uint32_t quantize_avx2(uint8_t* dst, const unsigned char* src, int64_t count,
                                        const float* scale, bool saturate) {
  constexpr int64_t kSize = sizeof(math::storage_t<Src>);
  const __m256i overflow_code =
      _mm256_set1_epi32(static_cast<int>(saturate ? Format::kMaxCode : Format::kOverflowCode));
  const __m256 factor = _mm256_set1_ps(scale != nullptr ? *scale : 1.0f);
  // The low byte of each 32-bit lane, per 128-bit half.
  const __m256i gather = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  __m256i amax = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 x = load8_as_f32<Src>(src + kSize * i);
    amax = _mm256_max_epu32(amax, _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff)));
    const __m256 scaled = scale != nullptr ? _mm256_mul_ps(x, factor) : x;
    const __m256i bytes = _mm256_shuffle_epi8(fp8_round_avx2<Format>(scaled, overflow_code), gather);
    const uint32_t low = static_cast<uint32_t>(_mm256_cvtsi256_si32(bytes));
    const uint32_t high = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 4));
    std::memcpy(dst + i, &low, 4);
    std::memcpy(dst + i + 4, &high, 4);
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), amax);
  uint32_t result = quantize_scalar<Src, Format>(dst + i, src + kSize * i, count - i, scale, saturate);
  for (uint32_t lane : lanes) result = lane > result ? lane : result;
  return result;
}

// ---- AVX-512 (F, BW, VL): 16 elements per step, masked tail ---------------

// GCC 12's AVX-512 headers fill unused operands with self-initialised
// "undefined" vectors, which -Wmaybe-uninitialized (and, for the
// reductions, -Wuninitialized) reports at every inlined call (a false
// positive in the headers, not in this code).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define AMPX_TARGET_AVX512 __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl")))

AMPX_TARGET_AVX512 inline __mmask16 tail_mask(int64_t remaining) {
  return static_cast<__mmask16>((1u << remaining) - 1u);
}

AMPX_TARGET_AVX512 void f32_to_f16_avx512(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 v = _mm512_loadu_ps(in + 4 * i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), _mm512_cvtps_ph(v, kRoundNearestEven));
  }
  if (i < count) {
    const __mmask16 m = tail_mask(count - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, in + 4 * i);
    _mm256_mask_storeu_epi16(out + 2 * i, m, _mm512_cvtps_ph(v, kRoundNearestEven));
  }
}

AMPX_TARGET_AVX512 void f16_to_f32_avx512(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
    _mm512_storeu_ps(out + 4 * i, _mm512_cvtph_ps(h));
  }
  if (i < count) {
    const __mmask16 m = tail_mask(count - i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, in + 2 * i);
    _mm512_mask_storeu_ps(out + 4 * i, m, _mm512_cvtph_ps(h));
  }
}

// convert.h's float_to_bf16 on 16 lanes, narrowed to 16 bits.
AMPX_TARGET_AVX512 inline __m256i bf16_round_avx512(__m512i x) {
  const __m512i high = _mm512_srli_epi32(x, 16);
  const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __m512i magnitude = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, is_nan, quiet));
}

AMPX_TARGET_AVX512 void f32_to_bf16_avx512(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i x = _mm512_loadu_si512(in + 4 * i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), bf16_round_avx512(x));
  }
  if (i < count) {
    const __mmask16 m = tail_mask(count - i);
    const __m512i x = _mm512_maskz_loadu_epi32(m, in + 4 * i);
    _mm256_mask_storeu_epi16(out + 2 * i, m, bf16_round_avx512(x));
  }
}

AMPX_TARGET_AVX512 void bf16_to_f32_avx512(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
    _mm512_storeu_si512(out + 4 * i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
  if (i < count) {
    const __mmask16 m = tail_mask(count - i);
    const __m256i b = _mm256_maskz_loadu_epi16(m, in + 2 * i);
    _mm512_mask_storeu_epi32(out + 4 * i, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
}

// fp8_round_avx2 on 16 lanes.
template <class Format>
AMPX_TARGET_AVX512 inline __m512i fp8_round_avx512(__m512 value, __m512i overflow_code) {
  constexpr int M = Format::kMantissaBits;
  const __m512i zero = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i x = _mm512_castps_si512(value);
  const __m512i magnitude = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(x, 24), _mm512_set1_epi32(0x80));
  const __m512i significand = _mm512_or_si512(_mm512_and_si512(magnitude, _mm512_set1_epi32(0x7fffff)),
                                              _mm512_set1_epi32(0x800000));
  const __m512i k = _mm512_sub_epi32(_mm512_srli_epi32(magnitude, 23),
                                     _mm512_set1_epi32(127 - Format::kBias + 1));
  const __m512i below = _mm512_max_epi32(_mm512_sub_epi32(zero, k), zero);
  const __m512i shift =
      _mm512_min_epi32(_mm512_add_epi32(below, _mm512_set1_epi32(23 - M)), _mm512_set1_epi32(25));
  const __m512i odd = _mm512_and_si512(_mm512_srlv_epi32(significand, shift), one);
  const __m512i half_less_one = _mm512_sub_epi32(_mm512_sllv_epi32(one, _mm512_sub_epi32(shift, one)), one);
  const __m512i rounded =
      _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(significand, half_less_one), odd), shift);
  __m512i code = _mm512_add_epi32(_mm512_slli_epi32(_mm512_max_epi32(k, zero), M), rounded);
  code = _mm512_mask_mov_epi32(
      code, _mm512_cmpgt_epi32_mask(code, _mm512_set1_epi32(Format::kMaxCode)), overflow_code);
  code = _mm512_mask_mov_epi32(
      code, _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f800000)), _mm512_set1_epi32(0x7f));
  return _mm512_or_si512(code, sign);
}

template <int Src>
AMPX_TARGET_AVX512 inline __m512 load16_as_f32(__mmask16 m, const unsigned char* p) {
  if constexpr (Src == AMPX_F32) {
    return _mm512_maskz_loadu_ps(m, p);
  } else if constexpr (Src == AMPX_F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
}

template <int Src, class Format>
AMPX_TARGET_AVX512 uint32_t quantize_avx512(uint8_t* dst, const unsigned char* src, int64_t count,
                                            const float* scale, bool saturate) {
  constexpr int64_t kSize = sizeof(math::storage_t<Src>);
  const __m512i overflow_code =
      _mm512_set1_epi32(static_cast<int>(saturate ? Format::kMaxCode : Format::kOverflowCode));
  const __m512 factor = _mm512_set1_ps(scale != nullptr ? *scale : 1.0f);
  __m512i amax = _mm512_setzero_si512();
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 m = count - i >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(count - i);
    // Lanes past the end load as 0, which neither raises the amax nor is stored.
    const __m512 x = load16_as_f32<Src>(m, src + kSize * i);
    amax = _mm512_max_epu32(amax, _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
    const __m512 scaled = scale != nullptr ? _mm512_mul_ps(x, factor) : x;
    _mm512_mask_cvtepi32_storeu_epi8(dst + i, m, fp8_round_avx512<Format>(scaled, overflow_code));
  }
  return _mm512_reduce_max_epu32(amax);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

Kernel vector_kernel(CpuIsa isa, DType dst, DType src) {
  const bool wide = isa == CpuIsa::Avx512;
  if (isa == CpuIsa::Scalar) return nullptr;
  if (src == DType::F32 && dst == DType::F16) return wide ? f32_to_f16_avx512 : f32_to_f16_avx2;
  if (src == DType::F16 && dst == DType::F32) return wide ? f16_to_f32_avx512 : f16_to_f32_avx2;
  if (src == DType::F32 && dst == DType::BF16) return wide ? f32_to_bf16_avx512 : f32_to_bf16_avx2;
  if (src == DType::BF16 && dst == DType::F32) return wide ? bf16_to_f32_avx512 : bf16_to_f32_avx2;
  return nullptr;
}

template <class Format>
QuantizeKernel vector_quantize_kernel(CpuIsa isa, DType src) {
  if (isa == CpuIsa::Scalar) return nullptr;
  const bool wide = isa == CpuIsa::Avx512;
  switch (src) {
    case DType::F32: return wide ? quantize_avx512<AMPX_F32, Format> : quantize_avx2<AMPX_F32, Format>;
    case DType::F16: return wide ? quantize_avx512<AMPX_F16, Format> : quantize_avx2<AMPX_F16, Format>;
    case DType::BF16: return wide ? quantize_avx512<AMPX_BF16, Format> : quantize_avx2<AMPX_BF16, Format>;
    default: return nullptr;
  }
}

// F16C straight from CPUID: older clang (before 16) rejects "f16c" in
// __builtin_cpu_supports.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

CpuIsa hardware_cpu_isa() {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks (XGETBV) that the operating system
  // saves the wider registers, so a "supported" ISA is usable; F16C uses the
  // same YMM state as AVX2.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  if (!avx2) return CpuIsa::Scalar;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  return avx512 ? CpuIsa::Avx512 : CpuIsa::Avx2;
}

#elif AMPX_NEON

// ---- NEON (AArch64): 4 or 8 elements per step ------------------------------

// Byte loads and stores: LD1/ST1 need no alignment, and byte pointers make
// no claim of any.
inline float32x4_t load4_f32(const unsigned char* p) { return vreinterpretq_f32_u8(vld1q_u8(p)); }
inline void store4_f32(unsigned char* p, float32x4_t v) { vst1q_u8(p, vreinterpretq_u8_f32(v)); }
inline uint16x4_t load4_u16(const unsigned char* p) { return vreinterpret_u16_u8(vld1_u8(p)); }
inline void store4_u16(unsigned char* p, uint16x4_t v) { vst1_u8(p, vreinterpret_u8_u16(v)); }

void f32_to_f16_neon(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 4 <= count; i += 4)
    store4_u16(out + 2 * i, vreinterpret_u16_f16(vcvt_f16_f32(load4_f32(in + 4 * i))));
  for (; i < count; ++i) store_u16(out + 2 * i, math::float_to_half(load_f32(in + 4 * i)));
}

void f16_to_f32_neon(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 4 <= count; i += 4)
    store4_f32(out + 4 * i, vcvt_f32_f16(vreinterpret_f16_u16(load4_u16(in + 2 * i))));
  for (; i < count; ++i) store_f32(out + 4 * i, math::half_to_float(load_u16(in + 2 * i)));
}

// convert.h's float_to_bf16 on 4 lanes (as bf16_round_avx2).
inline uint16x4_t bf16_round_neon(uint32x4_t x) {
  const uint32x4_t high = vshrq_n_u32(x, 16);
  const uint32x4_t odd = vandq_u32(high, vdupq_n_u32(1));
  const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(vaddq_u32(x, vdupq_n_u32(0x7fff)), odd), 16);
  const uint32x4_t is_nan =
      vcgtq_u32(vandq_u32(x, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
  const uint32x4_t quiet = vorrq_u32(high, vdupq_n_u32(0x40));
  return vmovn_u32(vbslq_u32(is_nan, quiet, rounded));
}

void f32_to_bf16_neon(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 4 <= count; i += 4)
    store4_u16(out + 2 * i, bf16_round_neon(vreinterpretq_u32_u8(vld1q_u8(in + 4 * i))));
  for (; i < count; ++i) store_u16(out + 2 * i, math::float_to_bf16(load_f32(in + 4 * i)));
}

void bf16_to_f32_neon(void* dst, const void* src, int64_t count) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  int64_t i = 0;
  for (; i + 4 <= count; i += 4)
    vst1q_u8(out + 4 * i, vreinterpretq_u8_u32(vshll_n_u16(load4_u16(in + 2 * i), 16)));
  for (; i < count; ++i) store_f32(out + 4 * i, math::bf16_to_float(load_u16(in + 2 * i)));
}

// fp8.h's float_to_fp8 on 4 lanes (as fp8_round_avx2; NEON's shifts by a
// vector shift left for positive counts and right for negative ones).
template <class Format>
inline uint32x4_t fp8_round_neon(float32x4_t value, uint32x4_t overflow_code) {
  constexpr int M = Format::kMantissaBits;
  const int32x4_t zero = vdupq_n_s32(0);
  const uint32x4_t one = vdupq_n_u32(1);
  const uint32x4_t x = vreinterpretq_u32_f32(value);
  const uint32x4_t magnitude = vandq_u32(x, vdupq_n_u32(0x7fffffff));
  const uint32x4_t sign = vandq_u32(vshrq_n_u32(x, 24), vdupq_n_u32(0x80));
  const uint32x4_t significand =
      vorrq_u32(vandq_u32(magnitude, vdupq_n_u32(0x7fffff)), vdupq_n_u32(0x800000));
  const int32x4_t k = vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(magnitude, 23)),
                                vdupq_n_s32(127 - Format::kBias + 1));
  const int32x4_t below = vmaxq_s32(vnegq_s32(k), zero);
  const int32x4_t shift = vminq_s32(vaddq_s32(below, vdupq_n_s32(23 - M)), vdupq_n_s32(25));
  const int32x4_t right = vnegq_s32(shift);
  const uint32x4_t odd = vandq_u32(vshlq_u32(significand, right), one);
  const uint32x4_t half_less_one = vsubq_u32(vshlq_u32(one, vsubq_s32(shift, vdupq_n_s32(1))), one);
  const uint32x4_t rounded =
      vshlq_u32(vaddq_u32(vaddq_u32(significand, half_less_one), odd), right);
  uint32x4_t code =
      vaddq_u32(vshlq_n_u32(vreinterpretq_u32_s32(vmaxq_s32(k, zero)), M), rounded);
  code = vbslq_u32(vcgtq_u32(code, vdupq_n_u32(Format::kMaxCode)), overflow_code, code);
  code = vbslq_u32(vcgtq_u32(magnitude, vdupq_n_u32(0x7f800000)), vdupq_n_u32(0x7f), code);
  return vorrq_u32(code, sign);
}

template <int Src>
inline float32x4_t load4_as_f32(const unsigned char* p) {
  if constexpr (Src == AMPX_F32) {
    return load4_f32(p);
  } else if constexpr (Src == AMPX_F16) {
    return vcvt_f32_f16(vreinterpret_f16_u16(load4_u16(p)));
  } else {
    return vreinterpretq_f32_u32(vshll_n_u16(load4_u16(p), 16));
  }
}

template <int Src, class Format>
uint32_t quantize_neon(uint8_t* dst, const unsigned char* src, int64_t count, const float* scale,
                       bool saturate) {
  constexpr int64_t kSize = sizeof(math::storage_t<Src>);
  const uint32x4_t overflow_code =
      vdupq_n_u32(saturate ? Format::kMaxCode : Format::kOverflowCode);
  const float32x4_t factor = vdupq_n_f32(scale != nullptr ? *scale : 1.0f);
  const uint32x4_t magnitude_mask = vdupq_n_u32(0x7fffffff);
  uint32x4_t amax = vdupq_n_u32(0);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const float32x4_t lo = load4_as_f32<Src>(src + kSize * i);
    const float32x4_t hi = load4_as_f32<Src>(src + kSize * (i + 4));
    amax = vmaxq_u32(amax, vandq_u32(vreinterpretq_u32_f32(lo), magnitude_mask));
    amax = vmaxq_u32(amax, vandq_u32(vreinterpretq_u32_f32(hi), magnitude_mask));
    const uint32x4_t lo_code =
        fp8_round_neon<Format>(scale != nullptr ? vmulq_f32(lo, factor) : lo, overflow_code);
    const uint32x4_t hi_code =
        fp8_round_neon<Format>(scale != nullptr ? vmulq_f32(hi, factor) : hi, overflow_code);
    vst1_u8(dst + i, vmovn_u16(vcombine_u16(vmovn_u32(lo_code), vmovn_u32(hi_code))));
  }
  const uint32_t lanes = vmaxvq_u32(amax);
  const uint32_t tail = quantize_scalar<Src, Format>(dst + i, src + kSize * i, count - i, scale,
                                                     saturate);
  return lanes > tail ? lanes : tail;
}

Kernel vector_kernel(CpuIsa isa, DType dst, DType src) {
  if (isa != CpuIsa::Neon) return nullptr;
  if (src == DType::F32 && dst == DType::F16) return f32_to_f16_neon;
  if (src == DType::F16 && dst == DType::F32) return f16_to_f32_neon;
  if (src == DType::F32 && dst == DType::BF16) return f32_to_bf16_neon;
  if (src == DType::BF16 && dst == DType::F32) return bf16_to_f32_neon;
  return nullptr;
}

template <class Format>
QuantizeKernel vector_quantize_kernel(CpuIsa isa, DType src) {
  if (isa != CpuIsa::Neon) return nullptr;
  switch (src) {
    case DType::F32: return quantize_neon<AMPX_F32, Format>;
    case DType::F16: return quantize_neon<AMPX_F16, Format>;
    case DType::BF16: return quantize_neon<AMPX_BF16, Format>;
    default: return nullptr;
  }
}

CpuIsa hardware_cpu_isa() { return CpuIsa::Neon; }

#else  // neither x86-64 nor AArch64: the scalar code only

Kernel vector_kernel(CpuIsa, DType, DType) { return nullptr; }
template <class Format>
QuantizeKernel vector_quantize_kernel(CpuIsa, DType) { return nullptr; }
CpuIsa hardware_cpu_isa() { return CpuIsa::Scalar; }

#endif

CpuIsa best_cpu_isa() {
  static const CpuIsa best = hardware_cpu_isa();
  return best;
}

// The code paths a CPU whose best is `best` runs: the scalar one, `best`,
// and on x86-64 AVX2 below AVX-512.
bool runs_within(CpuIsa isa, CpuIsa best) {
  return isa == CpuIsa::Scalar || isa == best || (isa == CpuIsa::Avx2 && best == CpuIsa::Avx512);
}

bool equals_ignoring_case(const char* a, const char* b) {
  for (; *a && *b; ++a, ++b) {
    if (std::tolower(static_cast<unsigned char>(*a)) != std::tolower(static_cast<unsigned char>(*b)))
      return false;
  }
  return *a == *b;
}

void check_dtype(DType t, const char* which) {
  if (!is_valid_dtype(static_cast<int32_t>(t)))
    fail(AMPX_ERR_DTYPE, which, " is not a valid dtype (", static_cast<int32_t>(t), ")");
}

}  // namespace

bool cpu_isa_supported(CpuIsa isa) { return runs_within(isa, best_cpu_isa()); }

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Scalar: return "scalar";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Neon: return "neon";
  }
  return "unknown";
}

CpuIsa resolve_cpu_isa(CpuIsa best, const char* request) {
  if (request == nullptr) return best;
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Neon}) {
    if (equals_ignoring_case(request, cpu_isa_name(isa))) return runs_within(isa, best) ? isa : best;
  }
  return best;
}

CpuIsa detected_cpu_isa() {
  static const CpuIsa chosen = resolve_cpu_isa(best_cpu_isa(), std::getenv("AMPX_CPU_ISA"));
  return chosen;
}

void convert_bulk_with(CpuIsa isa, void* dst, DType dst_type, const void* src, DType src_type,
                       int64_t count) {
  check_dtype(dst_type, "the destination type");
  check_dtype(src_type, "the source type");
  if (count < 0) fail(AMPX_ERR_INVALID_ARGUMENT, "count must be >= 0, got ", count);
  if (!cpu_isa_supported(isa))
    fail(AMPX_ERR_NOT_SUPPORTED, "this CPU does not support the ", cpu_isa_name(isa), " code path");
  if (count == 0) return;
  if (dst == nullptr || src == nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, "NULL ", dst == nullptr ? "destination" : "source", " for ",
         count, " elements");
  if (dst_type == src_type) {
    std::memmove(dst, src, static_cast<size_t>(count) * dtype_size(src_type));
    return;
  }
  if (is_fp8(dst_type) && is_floating(src_type)) {
    quantize_fp8_bulk_with(isa, dst, dst_type, src, src_type, count, nullptr,
                           dst_type == DType::F8E4M3);
    return;
  }
  Kernel kernel = nullptr;
  if (dst_type == DType::F32 && src_type == DType::F8E4M3) kernel = fp8_to_f32<math::Fp8E4M3>;
  if (dst_type == DType::F32 && src_type == DType::F8E5M2) kernel = fp8_to_f32<math::Fp8E5M2>;
  if (kernel == nullptr) kernel = vector_kernel(isa, dst_type, src_type);
  if (kernel == nullptr) kernel = scalar_kernel(dst_type, src_type);
  kernel(dst, src, count);
}

uint32_t quantize_fp8_bulk_with(CpuIsa isa, void* dst, DType dst_type, const void* src,
                                DType src_type, int64_t count, const float* scale, bool saturate) {
  if (!is_fp8(dst_type))
    fail(AMPX_ERR_DTYPE, "quantize: the destination is ", dtype_name(dst_type), ", not an FP8 type");
  if (!is_floating(src_type))
    fail(AMPX_ERR_DTYPE, "quantize: the source is ", dtype_name(src_type), "; it needs f32, f16 or bf16");
  if (count < 0) fail(AMPX_ERR_INVALID_ARGUMENT, "count must be >= 0, got ", count);
  if (!cpu_isa_supported(isa))
    fail(AMPX_ERR_NOT_SUPPORTED, "this CPU does not support the ", cpu_isa_name(isa), " code path");
  if (count == 0) return 0;
  if (dst == nullptr || src == nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, "NULL ", dst == nullptr ? "destination" : "source", " for ",
         count, " elements");
  const bool e4m3 = dst_type == DType::F8E4M3;
  QuantizeKernel kernel = e4m3 ? vector_quantize_kernel<math::Fp8E4M3>(isa, src_type)
                               : vector_quantize_kernel<math::Fp8E5M2>(isa, src_type);
  if (kernel == nullptr)
    kernel = e4m3 ? scalar_quantize_kernel<math::Fp8E4M3>(src_type)
                  : scalar_quantize_kernel<math::Fp8E5M2>(src_type);
  return kernel(static_cast<uint8_t*>(dst), static_cast<const unsigned char*>(src), count, scale,
                saturate);
}

uint32_t quantize_fp8_bulk(void* dst, DType dst_type, const void* src, DType src_type,
                           int64_t count, const float* scale, bool saturate) {
  return quantize_fp8_bulk_with(detected_cpu_isa(), dst, dst_type, src, src_type, count, scale,
                                saturate);
}

void convert_bulk(void* dst, DType dst_type, const void* src, DType src_type, int64_t count) {
  convert_bulk_with(detected_cpu_isa(), dst, dst_type, src, src_type, count);
}

uint64_t element_bits_from_double(DType type, double value) {
  switch (type) {
    case DType::F32: return math::float_bits(math::store_double<AMPX_F32>(value));
    case DType::F16: return math::store_double<AMPX_F16>(value);
    case DType::BF16: return math::store_double<AMPX_BF16>(value);
    case DType::I32: return static_cast<uint32_t>(math::store_double<AMPX_I32>(value));
    case DType::I64: return static_cast<uint64_t>(math::store_double<AMPX_I64>(value));
    case DType::F8E4M3: return math::store_double<AMPX_F8E4M3>(value);
    case DType::F8E5M2: return math::store_double<AMPX_F8E5M2>(value);
  }
  check_dtype(type, "the element type");
  return 0;
}

}  // namespace ampx::impl
