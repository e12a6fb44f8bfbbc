// scaler.h -- dynamic loss scaling (torch.amp.GradScaler semantics) with its
// state -- scale, growth tracker, hysteresis, counters -- in device memory.
#pragma once

#include <vector>

#include "core/backend_amp.h"
#include "core/context.h"
#include "core/tensor.h"

namespace ampx::impl {

class FusedOptimizer;

struct ScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int32_t growth_interval = 2000;
  bool enabled = true;
  int32_t hysteresis = 1;
  double min_scale = 0.0;
  double max_scale = 0.0;
  bool consecutive_hysteresis = false;  // see math::ScalerConfig
  bool clamp_to_max_scale = false;
};

// Throws AMPX_ERR_INVALID_ARGUMENT naming the first bad option.
void validate_scaler_options(const ScalerOptions& options);

class LossScaler : public Object {
 public:
  static constexpr uint64_t kLiveMagic = 0x414d50582d53434cull;  // "AMPX-SCL"
  static constexpr uint64_t kDeadMagic = 0x646561642d73636cull;  // "dead-scl"

  static LossScaler* create(DeviceContext& ctx, const ScalerOptions& options);
  void retain() { refs.fetch_add(1, std::memory_order_relaxed); }
  void release();

  DeviceContext& context() const { return *ctx_; }
  bool enabled() const { return options_.enabled; }

  // Throws unless `optimizer` is attached to this scaler or can be.
  void check_attachable(const FusedOptimizer& optimizer) const;
  void attach(FusedOptimizer& optimizer);
  // loss * scale (F32) and x * (1 / scale) (x's dtype): new tensors,
  // recorded on the tape (their backward multiplies by the same factor,
  // the scale as it was when they ran).
  DeviceTensor* scale_loss(DeviceTensor& loss);
  DeviceTensor* unscale_tensor(DeviceTensor& x);
  DeviceTensor& scale_tensor() const { return *scale_; }
  void unscale(FusedOptimizer& optimizer);
  void step(FusedOptimizer& optimizer);
  void update(bool force, double new_scale);
  bool found_inf(FusedOptimizer& optimizer);  // synchronizes

  math::ScalerState read_state();  // synchronizes
  const ScalerOptions& options() const { return options_; }
  // Replaces options and device state together (validated by the caller).
  void restore(const ScalerOptions& options, const math::ScalerState& state);
  // A state the program restores (ampx_scaler_set_state): options with
  // init_scale standing for the current scale, and the tracker, hysteresis
  // allowance and counters of `state` (its scale is not read). Validated
  // like the options, and the tracker in [0, growth_interval), the
  // allowance in [0, hysteresis], the counters non-negative with skipped <=
  // updates; AMPX_ERR_ORDER during an iteration. Changes nothing on error.
  void set_state(const ScalerOptions& options, const math::ScalerState& state);
  bool iteration_in_progress() const { return !active_.empty(); }

  // An attached optimizer being destroyed.
  void forget(const FusedOptimizer& optimizer);

 private:
  LossScaler(DeviceContext& ctx, const ScalerOptions& options);
  ~LossScaler();
  static void destroy_shell(Object* shell) {
    delete static_cast<LossScaler*>(shell);
  }  // see FusedOptimizer: release() frees, the shell owns nothing
  math::ScalerConfig config() const;
  TensorRef scale_snapshot() const;  // a copy of the device scale

  DeviceContext* ctx_;
  ScalerOptions options_;
  TensorRef state_;  // the bytes of one math::ScalerState
  TensorRef scale_;  // F32[1] sharing state_'s memory: ScalerState::scale
  // Optimizers unscaled since the last update (attached ones; not retained:
  // an optimizer removes itself when destroyed).
  std::vector<FusedOptimizer*> active_;
};

}  // namespace ampx::impl
