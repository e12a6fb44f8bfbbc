// backend_fp8.h -- FP8, two backend capabilities (backend.h):
//
//  Fp8      quantization (cast with a scale, the amax recorded, optionally
//           transposed in the same pass) and the scaling recipes' updates,
//           on the device without a host synchronisation;
//  Fp8Gemm  matrix products of FP8 operands with per-tensor scales, fp32
//           accumulation, and an output of F32, F16, BF16 or FP8.
//
// A backend may have Fp8 without Fp8Gemm: casts run on any CUDA device,
// FP8 products need compute capability 8.9 (Ada) or later.
//
// Conventions (as backend.h): device pointers of the backend, work
// enqueued on its compute stream, failures thrown as StatusError. An amax
// is a float >= 0 (or NaN) compared and combined as its bits taken as an
// unsigned integer, which orders non-negative floats and puts every NaN
// above infinity: a NaN element makes the amax NaN, whatever the order in
// which the device combines partial results, and the CPU and the GPU agree
// bit for bit.
#pragma once

#include <cstdint>
#include <string>

#include "core/backend.h"

namespace ampx::impl {

// y = fp8(x * scale) for the rows x cols matrix x, with fp8.h's rounding
// (the product in fp32, then one rounding to FP8, saturating or not).
struct Fp8QuantizeArgs {
  const void* x = nullptr;
  DType x_type = DType::F32;  // F32, F16 or BF16
  int64_t rows = 0, cols = 0;
  void* y = nullptr;          // rows x cols of y_type, or nullptr
  void* y_t = nullptr;        // cols x rows of y_type (y transposed), or nullptr
  DType y_type = DType::F8E4M3;
  const float* scale = nullptr;  // device scalar; nullptr: no scaling
  float* amax = nullptr;         // device scalar: max(*amax, max |x|), or nullptr
  bool saturate = true;
};

// Throws naming the bad argument: negative sizes (INVALID_ARGUMENT), x not
// F32/F16/BF16 or y_type not FP8 (DTYPE), a missing x with elements
// (INVALID_ARGUMENT).
void check_fp8_quantize_args(const Fp8QuantizeArgs& args);

// The per-tensor state of one scaling recipe (src/fp8/recipe.h owns the
// memory), `count` slots of it:
//   amax[i]          the largest |x| quantized into slot i since the last
//                    update (0 after it);
//   history[i][j]    the amaxes of the last history_len updates, a ring:
//                    *position is the entry the next update writes;
//   scale[i], scale_inv[i], fp8_max[i] (448 or 57344 by the slot's format).
struct Fp8Slots {
  int64_t count = 0;
  float* amax = nullptr;
  float* history = nullptr;
  int32_t history_len = 0;
  int32_t* position = nullptr;
  float* scale = nullptr;
  float* scale_inv = nullptr;
  const float* fp8_max = nullptr;
};

// How an update turns amaxes into scales (kernels/math/fp8_scaling.h).
struct Fp8ScaleRule {
  bool delayed = true;        // false: current scaling (scale_from_amax)
  bool most_recent = false;   // delayed: this step's amax, not the history's max
  int32_t margin = 0;         // delayed: scale = (fp8_max / amax) / 2^margin
  bool power_of_two = false;  // current: scales rounded down to a power of two
};

class Fp8Primitives : public BackendCapability {
 public:
  static constexpr Capability kId = Capability::Fp8;

  // Quantizes (nothing to write when y, y_t and amax are all nullptr, or x
  // has no element).
  void quantize(const Fp8QuantizeArgs& args);

  // Ends a step for every slot: amax into the history at *position, then
  // (delayed rule) the new scale and its inverse from the history, amax
  // back to 0, *position advanced. The current rule keeps the scales.
  void finish_step(const Fp8Slots& slots, const Fp8ScaleRule& rule);

  // Current scaling of one slot: its scale and inverse from *amax (this
  // tensor's), and *amax folded into the slot's step amax.
  void scale_from_amax(const Fp8Slots& slots, int64_t slot, const float* amax,
                       const Fp8ScaleRule& rule);

  // The precision doctor's count for x quantized with *scale into y_type:
  // counts[0] += the non-zero finite elements, counts[1] += those that
  // round to zero (flushed), counts[2] += those beyond the largest finite
  // value (saturated, or overflowed without saturation). counts is three
  // device int64s.
  void count_fp8_range(const void* x, DType x_type, int64_t count, const float* scale,
                       DType y_type, int64_t* counts);

 protected:
  virtual void run_quantize(const Fp8QuantizeArgs& args) = 0;
  virtual void run_finish_step(const Fp8Slots& slots, const Fp8ScaleRule& rule) = 0;
  virtual void run_scale_from_amax(const Fp8Slots& slots, int64_t slot, const float* amax,
                                   const Fp8ScaleRule& rule) = 0;
  virtual void run_count_fp8_range(const void* x, DType x_type, int64_t count,
                                   const float* scale, DType y_type, int64_t* counts) = 0;
};

// D = fp8_or_16bit(alpha * a_scale_inv * b_scale_inv * op(A) op(B) + bias),
// row-major, op as GemmArgs (op(A) m x k, op(B) k x n, D m x n): the
// products of FP8 elements are exact, their sums fp32. With an FP8 D, the
// fp32 result is multiplied by d_scale and rounded saturating, and *d_amax
// (when given) is set to max |result| before d_scale (cuBLASLt's
// AMAX_D_POINTER). The scale pointers are device scalars (nullptr: 1).
struct Fp8GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  DType a_type = DType::F8E4M3;
  bool trans_a = false;
  const void* b = nullptr;
  DType b_type = DType::F8E4M3;
  bool trans_b = false;
  const float* a_scale_inv = nullptr;
  const float* b_scale_inv = nullptr;
  void* d = nullptr;
  DType d_type = DType::BF16;
  const float* d_scale = nullptr;  // FP8 D only
  float* d_amax = nullptr;         // FP8 D only
  const void* bias = nullptr;      // [n] of d_type; F32/F16/BF16 D only
  float alpha = 1.0f;
};

// Throws naming the bad argument: negative sizes (INVALID_ARGUMENT); A or
// B not FP8, both E5M2 (as cuBLASLt, a product needs an E4M3 operand), D
// not F32/F16/BF16/FP8 (DTYPE); d_scale, d_amax or a bias where D does not
// take them (INVALID_ARGUMENT); with `pointers`, missing matrices for a
// product that has elements.
void check_fp8_gemm_args(const Fp8GemmArgs& args, bool pointers);

class Fp8GemmPrimitives : public BackendCapability {
 public:
  static constexpr Capability kId = Capability::Fp8Gemm;

  // Whether this backend multiplies `args` in FP8 (checked as gemm checks
  // them, but for the matrices' pointers, which may be null: a caller asks
  // before it has the operands); when not, *why (may be nullptr) says why
  // -- the layout or a shape rule -- so it can fall back to a 16-bit
  // product and report the reason.
  bool supports(const Fp8GemmArgs& args, std::string* why) const;

  // Checks the arguments, then computes the product (nothing when m or n is
  // 0). NOT_SUPPORTED with supports()'s reason when it would say no.
  void gemm(const Fp8GemmArgs& args);

 protected:
  virtual bool run_supports(const Fp8GemmArgs& args, std::string* why) const = 0;
  virtual void run_gemm(const Fp8GemmArgs& args) = 0;
};

}  // namespace ampx::impl
