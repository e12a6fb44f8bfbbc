// fp8.cpp (CUDA emulator) -- cuda_fp8.h's float -> FP8 conversion, worked
// out from the formats' definitions rather than from bit arithmetic, so
// that the kernels (which call it) and the CPU backend (kernels/math/fp8.h,
// integer shifts) are two independent implementations the tests compare.
//
// Each format's non-negative codes are in the order of their values. The
// code of |x| is found by a search in the table of those values, extended
// by the value the code after the largest finite one would have with an
// unbounded exponent (480 for E4M3, 2^16 for E5M2), which decides whether
// a magnitude near the top rounds down to the maximum or beyond it; ties go
// to the even code (the even mantissa). Beyond the maximum is overflow.
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

namespace {

struct Format {
  int exponent_bits;
  int mantissa_bits;
  int max_code;       // the largest finite value's code
  int overflow_code;  // what __NV_NOSAT gives beyond it
  double value[130];  // codes 0 .. max_code + 1

  Format(int e, int m, int max, int overflow)
      : exponent_bits(e), mantissa_bits(m), max_code(max), overflow_code(overflow) {
    const int bias = (1 << (e - 1)) - 1;
    for (int code = 0; code <= max_code + 1; ++code) {
      const int exponent = code >> m;
      const int mantissa = code & ((1 << m) - 1);
      const double fraction = static_cast<double>(mantissa) / (1 << m);
      value[code] = exponent == 0 ? std::ldexp(fraction, 1 - bias)
                                  : std::ldexp(1.0 + fraction, exponent - bias);
    }
  }
};

const Format& format_of(__nv_fp8_interpretation_t interpretation) {
  static const Format e4m3(4, 3, 0x7e, 0x7f);
  static const Format e5m2(5, 2, 0x7b, 0x7c);
  return interpretation == __NV_E4M3 ? e4m3 : e5m2;
}

}  // namespace

__nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t saturate,
                                         __nv_fp8_interpretation_t fp8_interpretation) {
  if (std::isnan(x)) return 0x7f;
  const Format& f = format_of(fp8_interpretation);
  const unsigned sign = std::signbit(x) ? 0x80u : 0u;
  const double magnitude = std::fabs(static_cast<double>(x));
  int code;
  if (magnitude >= f.value[f.max_code + 1]) {
    code = f.max_code + 1;
  } else {
    int low = 0, high = f.max_code + 1;  // value[low] <= magnitude < value[high]
    while (high - low > 1) {
      const int middle = (low + high) / 2;
      (f.value[middle] <= magnitude ? low : high) = middle;
    }
    const double below = magnitude - f.value[low], above = f.value[high] - magnitude;
    code = below < above || (below == above && low % 2 == 0) ? low : high;
  }
  if (code > f.max_code) code = saturate == __NV_SATFINITE ? f.max_code : f.overflow_code;
  return static_cast<__nv_fp8_storage_t>(sign | static_cast<unsigned>(code));
}
