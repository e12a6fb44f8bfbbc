// fp8_cast.cuh -- float -> FP8 in CUDA kernels, by cuda_fp8.h.
//
// __nv_cvt_float_to_fp8 rounds to nearest even, keeps subnormals and
// applies the overflow rule asked for (__NV_SATFINITE: beyond the largest
// finite value, infinities included, to +-max; __NV_NOSAT: to NaN in E4M3,
// +-inf in E5M2) -- from sm_89 on with a cvt.rn.satfinite instruction for
// the saturating case, elsewhere in software. It returns NaN without its
// sign, which torch's casts and the CPU backend (kernels/math/fp8.h) keep,
// so NaN is handled here; every other input gives fp8.h's bits.
//
// Only the conversion: the kernels that quantize (convert.cu,
// fp8_quantize.cu) read and write the memory.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "ampx/ampx.h"
#include "math/bits.h"

namespace ampx::impl {
namespace cuda {

template <int D>
__device__ __forceinline__ uint8_t fp8_from_float(float x, bool saturate) {
  static_assert(D == AMPX_F8E4M3 || D == AMPX_F8E5M2, "an FP8 type");
  const uint32_t bits = math::float_bits(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint8_t>(((bits >> 24) & 0x80u) | 0x7fu);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, saturate ? __NV_SATFINITE : __NV_NOSAT,
                                                    D == AMPX_F8E4M3 ? __NV_E4M3 : __NV_E5M2));
}

// fp8(x * factor) when `scaled`, else fp8(x). A NaN x is converted as
// itself: a GPU's multiply returns the canonical (positive) NaN, where the
// CPU's keeps x's sign.
template <int D>
__device__ __forceinline__ uint8_t fp8_from_scaled(float x, bool scaled, float factor,
                                                   bool saturate) {
  return fp8_from_float<D>(scaled && x == x ? x * factor : x, saturate);
}

}  // namespace cuda
}  // namespace ampx::impl
