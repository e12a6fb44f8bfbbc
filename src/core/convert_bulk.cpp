// convert_bulk.cpp -- array conversions, scalar and vectorised.
//
// The vector kernels must agree bit for bit with convert.h, which is what the
// CUDA kernels run, so they use only instructions whose results are fully
// specified and equal to convert.h's rules:
//  - VCVTPS2PH with an explicit round-to-nearest-even immediate (independent
//    of MXCSR.RC) and VCVTPH2PS are exact IEEE conversions that keep
//    subnormals and quiet NaNs the way convert.h does;
//  - bf16 is rounded with integer arithmetic, not with VCVTNEPS2BF16, which
//    flushes subnormal inputs to zero and would disagree with convert.h.
// Tails are done by masked loads/stores (AVX-512) or by the scalar functions
// (AVX2), so no load ever reads past the end of an array.
#include "core/convert_bulk.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "math/convert.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AMPX_X86_DISPATCH 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define AMPX_X86_DISPATCH 0
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
  }
  return nullptr;
}

#if AMPX_X86_DISPATCH

// Scalar helpers for the AVX2 tails, with unaligned access.
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

// ---- AVX-512 (F, BW, VL): 16 elements per step, masked tail ---------------

// GCC 12's AVX-512 headers fill unused operands with self-initialised
// "undefined" vectors, which -Wmaybe-uninitialized reports at every inlined
// call (a false positive in the headers, not in this code).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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

#else  // not x86-64: the scalar code only

Kernel vector_kernel(CpuIsa, DType, DType) { return nullptr; }
CpuIsa hardware_cpu_isa() { return CpuIsa::Scalar; }

#endif

CpuIsa best_cpu_isa() {
  static const CpuIsa best = hardware_cpu_isa();
  return best;
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

bool cpu_isa_supported(CpuIsa isa) {
  return static_cast<int>(isa) <= static_cast<int>(best_cpu_isa()) &&
         static_cast<int>(isa) >= static_cast<int>(CpuIsa::Scalar);
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Scalar: return "scalar";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512: return "avx512";
  }
  return "unknown";
}

CpuIsa resolve_cpu_isa(CpuIsa best, const char* request) {
  if (request == nullptr) return best;
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512}) {
    if (equals_ignoring_case(request, cpu_isa_name(isa)))
      return static_cast<int>(isa) < static_cast<int>(best) ? isa : best;
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
  Kernel kernel = vector_kernel(isa, dst_type, src_type);
  if (kernel == nullptr) kernel = scalar_kernel(dst_type, src_type);
  kernel(dst, src, count);
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
  }
  check_dtype(type, "the element type");
  return 0;
}

}  // namespace ampx::impl
