// convert_bulk.h -- converting arrays of elements between ampx's types on the
// CPU.
//
// Every element is converted with the rules of kernels/math/convert.h, and
// the vectorised paths are bit-identical to those scalar functions for every
// input (NaN payloads, subnormals, infinities and signed zeros included), so
// the choice of instruction set never changes a result, only its speed.
//
// One binary serves every x86-64 CPU: the AVX2 and AVX-512 code is compiled
// for those targets function by function and chosen when the program runs.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ampx::impl {

enum class CpuIsa { Scalar, Avx2, Avx512, Neon };

// Avx2 needs AVX2 + F16C + FMA; Avx512 needs AVX512F + AVX512BW + AVX512VL
// (and the operating system's support for the wider registers, which
// __builtin_cpu_supports checks). Neon is every AArch64 CPU's, and the
// only one there besides Scalar.
bool cpu_isa_supported(CpuIsa isa);

// "scalar", "avx2", "avx512", "neon".
const char* cpu_isa_name(CpuIsa isa);

// The best instruction set the running CPU supports, lowered by the
// environment variable AMPX_CPU_ISA=scalar|avx2|avx512|neon if it is set (it can
// never raise it above what the CPU supports; an unknown value is ignored).
// Decided once, on the first call; thread-safe.
CpuIsa detected_cpu_isa();

// The rule detected_cpu_isa applies, as a pure function so it can be tested:
// `request` is the value of AMPX_CPU_ISA (nullptr when unset) and `best` what
// the hardware supports.
CpuIsa resolve_cpu_isa(CpuIsa best, const char* request);

// Converts `count` elements from `src` (of type src_type) to `dst` (of type
// dst_type). Pointers need no alignment beyond one byte; the two arrays must
// not overlap unless the types are equal (then it is a memmove).
// count < 0 throws ampx::impl::StatusError(AMPX_ERR_INVALID_ARGUMENT).
void convert_bulk(void* dst, DType dst_type, const void* src, DType src_type, int64_t count);

// The same with a chosen instruction set, for tests and benchmarks; throws
// ampx::impl::StatusError(AMPX_ERR_NOT_SUPPORTED) when the CPU does not support `isa`.
void convert_bulk_with(CpuIsa isa, void* dst, DType dst_type, const void* src,
                       DType src_type, int64_t count);

// FP8 quantization: dst[i] = fp8(src[i] * *scale) (src[i] itself when
// scale is nullptr; the product in fp32, rounded once to fp32 as the CUDA
// kernels round it), rounded to dst_type (F8E4M3 or F8E5M2) as
// kernels/math/fp8.h does, saturating or not. src_type is F32, F16 or
// BF16. Returns the largest |src[i]| as float bits compared as unsigned
// integers (so a NaN, whose bits exceed infinity's, wins: the amax of a
// tensor holding NaN is NaN), or 0 for count 0. Throws as convert_bulk.
uint32_t quantize_fp8_bulk(void* dst, DType dst_type, const void* src, DType src_type,
                           int64_t count, const float* scale, bool saturate);
uint32_t quantize_fp8_bulk_with(CpuIsa isa, void* dst, DType dst_type, const void* src,
                                DType src_type, int64_t count, const float* scale, bool saturate);

// The bit pattern of `value` converted to `type` by convert.h's store_double
// (round to nearest even once; integers truncate, saturate, NaN -> 0), as an
// unsigned integer zero-extended from dtype_size(type) bytes (an i32 of -1 is
// 0xffffffff). On a little-endian host its first dtype_size(type) bytes are
// the element, which is how fill uses it.
uint64_t element_bits_from_double(DType type, double value);

}  // namespace ampx::impl
