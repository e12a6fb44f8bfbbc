// cuda_fp8.h (CUDA emulator) -- the FP8 conversion ampx's kernels use
// (src/backend/cuda/kernels/fp8_cast.cuh), implemented by the emulator's fp8.cpp. Names,
// types and numeric values are cuda_fp8.h's.
#pragma once

typedef unsigned char __nv_fp8_storage_t;

typedef enum __nv_saturation_t {
  __NV_NOSAT = 0,      // beyond the largest finite value: NaN (E4M3), infinity (E5M2)
  __NV_SATFINITE = 1,  // beyond the largest finite value, infinities included: +-max
} __nv_saturation_t;

typedef enum __nv_fp8_interpretation_t {
  __NV_E4M3 = 0,
  __NV_E5M2 = 1,
} __nv_fp8_interpretation_t;

// x rounded to the FP8 format, to nearest with ties to even, subnormals
// kept; every NaN becomes the positive NaN 0x7f, as cuda_fp8.h's does.
__nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t saturate,
                                         __nv_fp8_interpretation_t fp8_interpretation);
