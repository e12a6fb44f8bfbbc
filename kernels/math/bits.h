// bits.h -- a float's bits and back, on the host and the device (the
// element conversions of convert.h and fp8.h are written on the bits).
#pragma once

#include <cstdint>
#include <cstring>

#include "math/hd.h"

namespace ampx::impl {
namespace math {

AMPX_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

AMPX_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace math
}  // namespace ampx::impl
