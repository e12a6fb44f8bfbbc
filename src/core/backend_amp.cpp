// backend_amp.cpp -- the front doors of the multi-tensor AMP primitives: every
// argument check of backend_amp.h, once, for all backends.
#include "core/backend_amp.h"

#include <string>

#include "core/error.h"

namespace ampx::impl {
namespace {

void check_float_tensors(const char* primitive, const std::vector<TensorSpan>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpan& t = tensors[i];
    if (!is_floating(t.dtype))
      fail(AMPX_ERR_DTYPE, primitive, ": tensor ", i, " is ", dtype_name(t.dtype),
           "; only f32, f16 and bf16 are accepted");
    if (t.count < 0) fail(AMPX_ERR_SHAPE, primitive, ": tensor ", i, " has ", t.count, " elements");
    if (t.count > 0 && t.data == nullptr)
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": tensor ", i, " has ", t.count,
           " elements and no data");
  }
}

void check_scalars(const char* primitive, const StepScalars& scalars) {
  if (scalars.lr == nullptr || scalars.weight_decay == nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": lr and weight_decay must both be given");
}

// The checks every optimizer applies; needs_state[s] says that the
// configuration reads state<s>, which must then be present.
void check_params(const char* primitive, const std::vector<OptimParam>& params,
                  const bool (&needs_state)[3]) {
  for (size_t i = 0; i < params.size(); ++i) {
    const OptimParam& p = params[i];
    if (!is_floating(p.param_dtype) || !is_floating(p.grad_dtype))
      fail(AMPX_ERR_DTYPE, primitive, ": parameter ", i, " is ", dtype_name(p.param_dtype),
           " with a ", dtype_name(p.grad_dtype), " gradient; only f32, f16 and bf16 are accepted");
    if (p.count < 0)
      fail(AMPX_ERR_SHAPE, primitive, ": parameter ", i, " has ", p.count, " elements");
    if (p.group < 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " has group ", p.group);
    if (p.step == nullptr)
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " has no step counter");
    if ((p.master != nullptr) != (p.param_dtype != DType::F32))
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " is ",
           dtype_name(p.param_dtype), p.master ? " and has" : " and has no",
           " fp32 master (f16 and bf16 parameters need one, f32 parameters are their own)");
    if (p.count == 0) continue;
    if (p.param == nullptr || p.grad == nullptr)
      fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " lacks its data or gradient");
    float* const state[3] = {p.momentum, p.exp_avg_sq, p.max_exp_avg_sq};
    for (int s = 0; s < 3; ++s)
      if (needs_state[s] && state[s] == nullptr)
        fail(AMPX_ERR_INVALID_ARGUMENT, primitive, ": parameter ", i, " has no state", s,
             " buffer, which this configuration uses");
  }
}

void check_sgd_args(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                    const StepScalars& scalars) {
  check_scalars("sgd_step", scalars);
  if (config.nesterov && (config.momentum <= 0.0f || config.dampening != 0.0f))
    fail(AMPX_ERR_INVALID_ARGUMENT, "sgd_step: nesterov needs momentum > 0 and dampening 0 (got ",
         config.momentum, " and ", config.dampening, ")");
  const bool needs_state[3] = {config.momentum != 0.0f, false, false};
  check_params("sgd_step", params, needs_state);
}

void check_adam_args(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                     const StepScalars& scalars) {
  check_scalars("adam_step", scalars);
  const bool needs_state[3] = {true, true, config.amsgrad};
  check_params("adam_step", params, needs_state);
}

}  // namespace

void check_scale_spans(const char* primitive, const std::vector<TensorSpan>& ins,
                       const std::vector<TensorSpan>& outs) {
  check_float_tensors((std::string(primitive) + " (input)").c_str(), ins);
  check_float_tensors((std::string(primitive) + " (output)").c_str(), outs);
  if (outs.empty()) return;
  if (outs.size() != ins.size())
    fail(AMPX_ERR_SHAPE, primitive, ": ", ins.size(), " inputs but ", outs.size(), " outputs");
  for (size_t i = 0; i < ins.size(); ++i) {
    if (outs[i].count != ins[i].count)
      fail(AMPX_ERR_SHAPE, primitive, ": input ", i, " has ", ins[i].count,
           " elements but its output ", outs[i].count);
    if (outs[i].data == ins[i].data && ins[i].count > 0 && outs[i].dtype != ins[i].dtype)
      fail(AMPX_ERR_DTYPE, primitive, ": output ", i, " is its input but ",
           dtype_name(outs[i].dtype), " instead of ", dtype_name(ins[i].dtype));
  }
}

void AmpPrimitives::multi_tensor_scale(const std::vector<TensorSpan>& ins,
                                       const std::vector<TensorSpan>& outs, const float* factor,
                                       bool reciprocal, float* found_inf) {
  const ProfileScope timed(profile(), "multi_tensor_scale");
  check_scale_spans("multi_tensor_scale", ins, outs);
  if (factor == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "multi_tensor_scale: factor is null");
  if (outs.empty() && found_inf == nullptr) return;
  run_multi_tensor_scale(ins, outs, factor, reciprocal, found_inf);
}

void AmpPrimitives::multi_tensor_norm(const std::vector<TensorSpan>& tensors, NormType type,
                                      float* out) {
  const ProfileScope timed(profile(), "multi_tensor_norm");
  check_float_tensors("multi_tensor_norm", tensors);
  if (out == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "multi_tensor_norm: out is null");
  run_multi_tensor_norm(tensors, type, out);
}

void AmpPrimitives::clip_coefficient(const float* total_norm, float max_norm, float* coef) {
  const ProfileScope timed(profile(), "clip_coefficient");
  if (total_norm == nullptr || coef == nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, "clip_coefficient: total_norm and coef must both be given");
  run_clip_coefficient(total_norm, max_norm, coef);
}

void AmpPrimitives::multi_tensor_clamp(const std::vector<TensorSpan>& tensors, float limit) {
  const ProfileScope timed(profile(), "multi_tensor_clamp");
  check_float_tensors("multi_tensor_clamp", tensors);
  if (!(limit >= 0.0f))
    fail(AMPX_ERR_INVALID_ARGUMENT, "multi_tensor_clamp: limit is ", limit, "; it must be >= 0");
  run_multi_tensor_clamp(tensors, limit);
}

void AmpPrimitives::multi_tensor_count_nonfinite(const std::vector<TensorSpan>& tensors,
                                                 int64_t* counts) {
  const ProfileScope timed(profile(), "multi_tensor_count_nonfinite");
  check_float_tensors("multi_tensor_count_nonfinite", tensors);
  if (tensors.empty()) return;
  if (counts == nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, "multi_tensor_count_nonfinite: counts is null");
  run_multi_tensor_count_nonfinite(tensors, counts);
}

void AmpPrimitives::scaler_update(math::ScalerState* state,
                                  const std::vector<const float*>& found_infs,
                                  const math::ScalerConfig& config, bool force,
                                  float forced_scale) {
  const ProfileScope timed(profile(), "scaler_update");
  if (state == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "scaler_update: state is null");
  for (size_t i = 0; i < found_infs.size(); ++i)
    if (found_infs[i] == nullptr)
      fail(AMPX_ERR_INVALID_ARGUMENT, "scaler_update: found_infs[", i, "] is null");
  run_scaler_update(state, found_infs, config, force, forced_scale);
}

void AmpPrimitives::increment_steps(int64_t* steps, int64_t count, const float* found_inf) {
  const ProfileScope timed(profile(), "increment_steps");
  if (count < 0 || (count > 0 && steps == nullptr))
    fail(AMPX_ERR_INVALID_ARGUMENT, "increment_steps: ", count, " counters at ",
         static_cast<const void*>(steps));
  if (count > 0) run_increment_steps(steps, count, found_inf);
}

void AmpPrimitives::lr_schedule(const math::LrSchedule* schedules, int32_t groups,
                                const int64_t* step, float* lr) {
  const ProfileScope timed(profile(), "lr_schedule");
  if (groups < 0 || (groups > 0 && (schedules == nullptr || step == nullptr || lr == nullptr)))
    fail(AMPX_ERR_INVALID_ARGUMENT, "lr_schedule: ", groups, " groups, schedules ",
         static_cast<const void*>(schedules), ", step ", static_cast<const void*>(step), ", lr ",
         static_cast<const void*>(lr));
  if (groups > 0) run_lr_schedule(schedules, groups, step, lr);
}

void AmpPrimitives::sgd_step(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                             const StepScalars& scalars) {
  const ProfileScope timed(profile(), "sgd_step");
  check_sgd_args(params, config, scalars);
  run_sgd_step(params, config, scalars);
}

void AmpPrimitives::adam_step(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                              const StepScalars& scalars) {
  const ProfileScope timed(profile(), "adam_step");
  check_adam_args(params, config, scalars);
  run_adam_step(params, config, scalars);
}

}  // namespace ampx::impl
