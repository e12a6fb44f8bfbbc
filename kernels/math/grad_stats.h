// grad_stats.h -- the per-element math of the precision doctor's gradient
// statistics, shared by the CPU backend and the CUDA kernels, and the
// records they accumulate into (device memory, read by the host only when a
// report is asked for).
//
// For a gradient element x as stored (scaled by the loss scale S when a
// scaler is in use) the doctor looks at two values:
//   x          what the backward produced at the current scale;
//   u = x * r  the true gradient, r = math::reciprocal_scale(S) in fp32
//              (exactly what unscale writes; r = 1 without a scaler).
// The histogram bins u by binade; the fp16 classes are those of
// fp16(u) and fp16(x), fp16 being round-to-nearest-even (float_to_half).
#pragma once

#include <cstdint>

#include "math/convert.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

// Histogram bins of |u| (the layout ampx.h documents as AMPX_DOCTOR_BIN_*):
//   0                    u == 0
//   1                    0 < |u| < 2^kGradStatsMinExponent
//   2 + (e - min)        2^e <= |u| < 2^(e+1), e = kGradStatsMinExponent..15
//   kGradStatsBinHuge    2^16 <= |u| < inf (always infinite in fp16)
//   kGradStatsBinNonfinite  inf or NaN
constexpr int kGradStatsMinExponent = -64;
constexpr int kGradStatsMaxExponent = 15;
constexpr int kGradStatsBinTiny = 1;
constexpr int kGradStatsBinFirstBinade = 2;
constexpr int kGradStatsBinHuge =
    kGradStatsBinFirstBinade + (kGradStatsMaxExponent - kGradStatsMinExponent + 1);
constexpr int kGradStatsBinNonfinite = kGradStatsBinHuge + 1;
constexpr int kGradStatsBins = kGradStatsBinNonfinite + 1;

AMPX_HD int grad_stats_bin(float u) {
  const uint32_t magnitude = float_bits(u) & 0x7fffffffu;
  if (magnitude == 0) return 0;
  if (magnitude >= 0x7f800000u) return kGradStatsBinNonfinite;
  // Subnormal floats (biased exponent 0) are far below 2^-64.
  const int e = static_cast<int>(magnitude >> 23) - 127;
  if (e < kGradStatsMinExponent) return kGradStatsBinTiny;
  if (e > kGradStatsMaxExponent) return kGradStatsBinHuge;
  return kGradStatsBinFirstBinade + (e - kGradStatsMinExponent);
}

// What a float becomes in fp16, decided on the bits of |v| with the
// thresholds of round-to-nearest-even (the same answers as float_to_half):
//   |v| <= 2^-25                  zero (2^-25 is a tie, and zero is even)
//   |v| <  2^-14 - 2^-25          subnormal (the tie below 2^-14 goes up to
//                                 it: the largest subnormal is odd)
//   |v| <  65520                  normal (65520 is the tie above 65504)
//   otherwise, and inf and NaN    infinite
enum Fp16Class : int { kFp16Zero = 0, kFp16Subnormal = 1, kFp16Normal = 2, kFp16Infinite = 3 };

constexpr uint32_t kFp16ZeroBelowOrAt = 0x33000000u;  // 2^-25
constexpr uint32_t kFp16NormalFrom = 0x387fe000u;     // 2^-14 - 2^-25
constexpr uint32_t kFp16InfiniteFrom = 0x477ff000u;   // 65520

AMPX_HD int fp16_class_of_magnitude(uint32_t magnitude_bits) {
  if (magnitude_bits <= kFp16ZeroBelowOrAt) return kFp16Zero;
  if (magnitude_bits < kFp16NormalFrom) return kFp16Subnormal;
  if (magnitude_bits < kFp16InfiniteFrom) return kFp16Normal;
  return kFp16Infinite;
}

AMPX_HD int fp16_class(float v) { return fp16_class_of_magnitude(float_bits(v) & 0x7fffffffu); }

// The statistics of one parameter's gradient on one sampled step. Counts
// are of elements; sums are atomic on the GPU, so the order of additions
// (and the last bits of sum_squares) may vary there.
struct GradStatsRecord {
  int64_t bins[kGradStatsBins];
  int64_t fp16_zero_unscaled;       // finite u with fp16(u) == 0 (u == 0 included)
  int64_t fp16_subnormal_unscaled;  // fp16(u) subnormal
  int64_t fp16_zero_scaled;         // finite x with fp16(x) == 0
  int64_t fp16_subnormal_scaled;    // fp16(x) subnormal
  int64_t fp16_overflow_scaled;     // x not finite, or fp16(x) infinite
  int64_t nonzero_lost_scaled;      // x != 0 with fp16(x) zero or subnormal
  // Written by the optimizer step's pass (count_lost_updates): elements
  // whose fp32 master changed; of those, the ones whose 16-bit parameter
  // kept its value, and the ones a 16-bit parameter updated without a
  // master (p + (master_new - master_old), rounded) would have kept.
  int64_t master_changed;
  int64_t lost_updates;
  int64_t lost_without_master;
  double sum_squares;         // of the finite u, in double
  uint32_t amax_scaled_bits;  // float bits of max |x| over finite x
  uint32_t reserved;
};

// A thread's (or a CPU chunk's) counts before they are added to a record.
struct GradStatsCounts {
  int32_t fp16_zero_unscaled = 0;
  int32_t fp16_subnormal_unscaled = 0;
  int32_t fp16_zero_scaled = 0;
  int32_t fp16_subnormal_scaled = 0;
  int32_t fp16_overflow_scaled = 0;
  int32_t nonzero_lost_scaled = 0;
  uint32_t amax_scaled_bits = 0;
  double sum_squares = 0.0;

  // Counts the stored value x and its unscaled u; returns u's bin, which
  // the caller counts (a histogram does not fit in a GPU thread).
  AMPX_HD int add(float x, float u) {
    constexpr uint32_t kMagnitude = 0x7fffffffu;
    constexpr uint32_t kInfinity = 0x7f800000u;
    const uint32_t mu = float_bits(u) & kMagnitude;
    const uint32_t mx = float_bits(x) & kMagnitude;
    if (mu < kInfinity) {
      const int cu = fp16_class_of_magnitude(mu);
      fp16_zero_unscaled += cu == kFp16Zero;
      fp16_subnormal_unscaled += cu == kFp16Subnormal;
      sum_squares += static_cast<double>(u) * static_cast<double>(u);
    }
    if (mx < kInfinity) {
      const int cx = fp16_class_of_magnitude(mx);
      fp16_zero_scaled += cx == kFp16Zero;
      fp16_subnormal_scaled += cx == kFp16Subnormal;
      fp16_overflow_scaled += cx == kFp16Infinite;
      nonzero_lost_scaled += mx != 0 && cx <= kFp16Subnormal;
      if (mx > amax_scaled_bits) amax_scaled_bits = mx;
    } else {
      ++fp16_overflow_scaled;
    }
    return grad_stats_bin(u);
  }
};

// One step in the doctor's history ring.
struct DoctorSample {
  int64_t step;        // the doctor's step number (1 = the first seen)
  float scale;         // the loss scale the gradients carry (1 without a scaler)
  float found_inf;     // the step was skipped (non-zero)
  double sum_squares;  // of the sampled unscaled gradients; -1 if not sampled
  // The parameter backward reached first among those with a non-finite
  // gradient: the highest index, parameters being listed in forward order
  // (an inf born in one layer spreads to the layers below it). -1: none.
  int32_t first_nonfinite;
  int32_t nonfinite_params;    // parameters with a non-finite gradient
  int64_t elements;            // sampled elements (0 if not sampled)
  int64_t fp16_lost_scaled;    // sampled elements zero or subnormal in fp16 at the scale
  int64_t fp16_lost_unscaled;  // ... without loss scaling
};

}  // namespace math
}  // namespace ampx::impl
