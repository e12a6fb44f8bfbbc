// mma.cuh -- one warp's 16 x 8 x 16 matrix product on the tensor cores
// (PTX mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32):
//
//   C[16 x 8] += A[16 x 16] B[16 x 8],  A and B f16 or bf16, C fp32
//
// Each of the 32 lanes holds a fixed part of every operand ("fragments",
// PTX ISA: matrix fragments for mma.m16n8k16 with floating-point types).
// With lane = 4 g + t (g = lane / 4 in 0..7, t = lane % 4):
//
//   A  a[0]: row g,     columns 2t, 2t+1      a[1]: row g + 8, columns 2t, 2t+1
//      a[2]: row g,     columns 2t+8, 2t+9    a[3]: row g + 8, columns 2t+8, 2t+9
//   B  b[0]: rows 2t, 2t+1 of column g        b[1]: rows 2t+8, 2t+9 of column g
//   C  c[0], c[1]: row g, columns 2t, 2t+1    c[2], c[3]: row g + 8, the same columns
//
// a 32-bit register holding two 16-bit values, the lower column (or row,
// for B) in its low half. So C of two neighbouring 8-column products is,
// converted to 16 bits, the A fragment of a product over those 16 columns
// (the flash-attention reuse of the scores as weights).
//
// The products are exact in fp32 and summed in fp32. The CUDA emulator
// (tests/cuda_emulator, AMPX_CUDA_EMULATOR) computes the same products from
// the same fragment layout with every lane of the warp taking part, as on
// the device. Needs sm_80 or later.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "math/convert.h"

namespace ampx::impl {
namespace cuda {

// c += A B for the calling warp; every lane calls it with its fragments.
template <int D>
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  static_assert(D == AMPX_F16 || D == AMPX_BF16, "tensor-core products of f16 or bf16");
#if defined(__CUDA_ARCH__)
  if constexpr (D == AMPX_F16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#elif defined(AMPX_CUDA_EMULATOR)
  ampx_emu::mma_16x8x16(D == AMPX_BF16, c, a, b0, b1);
#endif
}

// Two 16-bit values in one register, `low` in the low half.
template <int D>
__device__ __forceinline__ uint32_t pack_pair(float low, float high) {
  return static_cast<uint32_t>(math::store_float<D>(low)) |
         static_cast<uint32_t>(math::store_float<D>(high)) << 16;
}

// p[0] and p[1] (4-byte aligned) as one register.
__device__ __forceinline__ uint32_t load_pair(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// p[0] and p[stride] as one register: two rows of one column.
__device__ __forceinline__ uint32_t load_pair_strided(const uint16_t* p, int stride) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[stride]) << 16;
}

}  // namespace cuda
}  // namespace ampx::impl
