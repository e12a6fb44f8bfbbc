// backend_amp.h -- the multi-tensor primitives of mixed-precision training,
// a backend capability (backend.h): unscaling with the inf check, norms and
// clipping, the scaler's update and the fused optimizer steps. Each
// processes a whole list of tensors in one pass (one launch or two on a
// GPU), never one call per tensor. Scalars passed by pointer live in the
// backend's device memory; nothing here waits for the device.
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "math/amp.h"
#include "math/lr_schedule.h"
#include "math/optim.h"

namespace ampx::impl {

// One tensor of a multi-tensor operation: `count` elements of `dtype` at
// `data` (device memory).
struct TensorSpan {
  void* data;
  DType dtype;
  int64_t count;
};

enum class NormType { L2, Inf };

// One parameter of an optimizer step, with its fp32 state.
struct OptimParam {
  void* param;  // the model's weights, of param_dtype
  DType param_dtype;
  float* master;     // fp32 master copy; nullptr when param_dtype is F32
  const void* grad;  // gradient (already unscaled), of grad_dtype
  DType grad_dtype;
  float* momentum;        // SGD momentum buffer / Adam exp_avg; nullptr if unused
  float* exp_avg_sq;      // Adam; nullptr for SGD
  float* max_exp_avg_sq;  // Adam with amsgrad; nullptr otherwise
  const int64_t* step;    // device: steps taken by this parameter, this one included
  int64_t count;
  int32_t group;
};

// Device scalars an optimizer step reads; none is read back to the host.
struct StepScalars {
  const float* found_inf;     // skip the whole step when *found_inf != 0; may be nullptr
  const float* lr;            // per param group
  const float* weight_decay;  // per param group
};

// The checks of a multi-tensor scale's spans (floating, counts, outs empty
// or one per input with its count, in place only in the same dtype); the
// errors name `primitive`.
void check_scale_spans(const char* primitive, const std::vector<TensorSpan>& ins,
                       const std::vector<TensorSpan>& outs);

// The front doors below check their arguments (each error names the
// primitive, the tensor and the value) and then call the backend's run_*
// with valid arguments.
class AmpPrimitives : public BackendCapability {
 public:
  static constexpr Capability kId = Capability::MultiTensorAmp;

  // outs[i] = ins[i] * m with m = reciprocal ? reciprocal_scale(*factor)
  // : *factor, converted to outs[i].dtype (outs[i] may be ins[i] itself).
  // `outs` may be empty: then nothing is written except found_inf. When
  // found_inf is not null, *found_inf is set to 1 if any ins[i] * m is not
  // finite (and never cleared).
  void multi_tensor_scale(const std::vector<TensorSpan>& ins, const std::vector<TensorSpan>& outs,
                          const float* factor, bool reciprocal, float* found_inf);

  // *out = the norm of all elements of all tensors taken together (L2:
  // sqrt of the sum of squares, accumulated in at least fp32 with fp32
  // inputs; Inf: max |x|). NaN/inf elements make the result NaN/inf.
  void multi_tensor_norm(const std::vector<TensorSpan>& tensors, NormType type, float* out);

  // *coef = clip_coefficient(*total_norm, max_norm) (math/amp.h).
  void clip_coefficient(const float* total_norm, float max_norm, float* coef);

  // Every element x of every tensor becomes min(max(x, -limit), limit).
  void multi_tensor_clamp(const std::vector<TensorSpan>& tensors, float limit);

  // counts[2*i] = NaN elements of tensors[i], counts[2*i+1] = infinities.
  void multi_tensor_count_nonfinite(const std::vector<TensorSpan>& tensors, int64_t* counts);

  // One scaler update (math::scaler_update, or math::scaler_force when
  // `force`), with found_inf the OR of *found_infs[i] != 0.
  void scaler_update(math::ScalerState* state, const std::vector<const float*>& found_infs,
                     const math::ScalerConfig& config, bool force, float forced_scale);

  // steps[i] += 1 for i < count, unless *found_inf != 0 (found_inf may be
  // nullptr: always).
  void increment_steps(int64_t* steps, int64_t count, const float* found_inf);

  // lr[g] = math::scheduled_lr_f32(schedules[g], *step) for g < groups whose
  // schedule is not constant; the others keep their rate (all three
  // pointers device memory).
  void lr_schedule(const math::LrSchedule* schedules, int32_t groups, const int64_t* step,
                   float* lr);

  // One optimizer step over every parameter (math/optim.h), skipped entirely
  // when *scalars.found_inf != 0. Reads param->step after increment_steps.
  // F16/BF16 parameters are rewritten from their updated master.
  void sgd_step(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                const StepScalars& scalars);
  void adam_step(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                 const StepScalars& scalars);

 protected:
  virtual void run_multi_tensor_scale(const std::vector<TensorSpan>& ins,
                                      const std::vector<TensorSpan>& outs, const float* factor,
                                      bool reciprocal, float* found_inf) = 0;
  virtual void run_multi_tensor_norm(const std::vector<TensorSpan>& tensors, NormType type,
                                     float* out) = 0;
  virtual void run_clip_coefficient(const float* total_norm, float max_norm, float* coef) = 0;
  virtual void run_multi_tensor_clamp(const std::vector<TensorSpan>& tensors, float limit) = 0;
  virtual void run_multi_tensor_count_nonfinite(const std::vector<TensorSpan>& tensors,
                                                int64_t* counts) = 0;
  virtual void run_scaler_update(math::ScalerState* state,
                                 const std::vector<const float*>& found_infs,
                                 const math::ScalerConfig& config, bool force,
                                 float forced_scale) = 0;
  virtual void run_increment_steps(int64_t* steps, int64_t count, const float* found_inf) = 0;
  virtual void run_lr_schedule(const math::LrSchedule* schedules, int32_t groups,
                               const int64_t* step, float* lr) = 0;
  virtual void run_sgd_step(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                            const StepScalars& scalars) = 0;
  virtual void run_adam_step(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                             const StepScalars& scalars) = 0;
};

}  // namespace ampx::impl
