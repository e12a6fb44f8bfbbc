#include "amp/iteration.h"

#include "amp/scaler.h"
#include "autograd/tape.h"
#include "optim/optimizer.h"

namespace ampx::impl {

void AmpIteration::allocate(DeviceContext& ctx) {
  TensorRef found_inf(make_filled_f32(ctx, vector_shape(1), 0.0f));
  TensorRef last_step_skipped(make_filled_f32(ctx, vector_shape(1), 0.0f));
  found_inf_ = std::move(found_inf);
  last_step_skipped_ = std::move(last_step_skipped);
}

void AmpIteration::free() {
  found_inf_.reset();
  last_step_skipped_.reset();
}

void AmpIteration::require_between_iterations(const char* message) const {
  if (phase_ != Phase::Ready) fail(AMPX_ERR_ORDER, message);
}

// ---- plug-ins ----------------------------------------------------------------

bool AmpIteration::scaling() const { return scaler_ && scaler_->enabled(); }

void AmpIteration::check_scaler_attachable(const LossScaler& scaler) const {
  if (scaler_ == &scaler) return;
  if (scaler_)
    fail(AMPX_ERR_INVALID_ARGUMENT,
         "the optimizer is already attached to another scaler; an optimizer belongs to one scaler");
  if (&optimizer_.context() != &scaler.context())
    fail(AMPX_ERR_DEVICE, "the optimizer belongs to a different context than the scaler");
}

void AmpIteration::attach_scaler(LossScaler& scaler) {
  check_scaler_attachable(scaler);
  if (scaler_ == &scaler) return;
  scaler.retain();
  scaler_ = &scaler;
  phase_ = Phase::Ready;
}

void AmpIteration::check_sync_attachable() const {
  if (sync_)
    fail(AMPX_ERR_INVALID_ARGUMENT,
         "the optimizer is already wrapped by another ampx_data_parallel; release that first");
  require_between_iterations(
      "the optimizer is between unscale/step and update; create the "
      "data-parallel wrapper between iterations");
}

void AmpIteration::attach_sync(GradientSync& sync) { sync_ = &sync; }

void AmpIteration::detach_sync(const GradientSync& sync) {
  if (sync_ == &sync) sync_ = nullptr;
}

void AmpIteration::check_observer_attachable() const {
  if (observer_)
    fail(AMPX_ERR_INVALID_ARGUMENT,
         "the optimizer already has a precision doctor; an optimizer has one at most");
}

void AmpIteration::attach_observer(PrecisionObserver& observer) { observer_ = &observer; }

void AmpIteration::detach_observer(const PrecisionObserver& observer) {
  if (observer_ == &observer) observer_ = nullptr;
}

void AmpIteration::detach_all() {
  if (!scaler_) return;
  scaler_->forget(*this);
  LossScaler* scaler = scaler_;
  scaler_ = nullptr;
  scaler->release();
}

// ---- phases --------------------------------------------------------------------

void AmpIteration::reduce_gradients(const char* op) {
  if (sync_) sync_->complete_gradients(op);
}

void AmpIteration::reduce_norm(float* norm, NormType type) {
  if (sync_) sync_->global_norm(norm, type);
}

bool AmpIteration::zero_synced_gradients() {
  if (!sync_) return false;
  sync_->zero_gradients();
  return true;
}

void AmpIteration::unscale(LossScaler& scaler) {
  if (!scaler.enabled()) {
    check_scaler_attachable(scaler);
    return;
  }
  DeviceContext& ctx = scaler.context();
  AmpPrimitives& amp = ctx.backend().require<AmpPrimitives>("unscale");
  check_scaler_attachable(scaler);
  if (phase_ == Phase::Unscaled)
    fail(AMPX_ERR_ORDER,
         "this optimizer's gradients were already unscaled since the last update; unscale once "
         "per iteration (unscale, [clip], step, update)");
  if (phase_ == Phase::Stepped)
    fail(AMPX_ERR_ORDER,
         "unscale after step: this optimizer already stepped in this iteration; call "
         "ampx_scaler_update before unscaling the next iteration's gradients");
  reduce_gradients("unscale");
  std::vector<TensorSpan> ins, outs;
  optimizer_.prepare_unscale(ins, outs);
  // Attached only now that nothing can fail: a call that ran out of memory
  // leaves an unattached optimizer usable with ampx_optimizer_step.
  attach_scaler(scaler);
  auto* found_inf = static_cast<float*>(found_inf_->data());
  ctx.backend().fill(found_inf, 4, 0, 1);
  const auto* scale = static_cast<const float*>(scaler.scale_tensor().data());
  if (observer_)
    observer_->unscale(ins, outs, scale, found_inf);
  else
    amp.multi_tensor_scale(ins, outs, scale, true, found_inf);
  if (sync_) sync_->agree_found_inf(found_inf);
  if (observer_) observer_->after_unscale(scale, found_inf);
  optimizer_.mark_unscaled(true);
  forget_loss_scale();
  phase_ = Phase::Unscaled;
  scaler.enlist(*this);
}

void AmpIteration::scaler_step(LossScaler& scaler) {
  if (!scaler.enabled()) {
    check_scaler_attachable(scaler);
    plain_step();
    return;
  }
  check_scaler_attachable(scaler);
  if (phase_ == Phase::Stepped)
    fail(AMPX_ERR_ORDER,
         "step was already called for this optimizer since the last update; call "
         "ampx_scaler_update once per iteration, after every optimizer's step");
  if (phase_ == Phase::Ready) unscale(scaler);
  step(found_inf_flag());
  phase_ = Phase::Stepped;
}

void AmpIteration::plain_step() {
  if (scaling())
    fail(AMPX_ERR_ORDER,
         "this optimizer is used with a loss scaler, so its gradients are scaled; call "
         "ampx_scaler_step(scaler, optimizer), which unscales them and skips steps with "
         "inf/NaN gradients");
  if (gradients_marked_scaled())
    fail(AMPX_ERR_ORDER,
         "a backward with an enabled loss scaler scaled this optimizer's gradients, and they were "
         "not unscaled since; call ampx_scaler_step(scaler, optimizer), which unscales them and "
         "skips steps with inf/NaN gradients, or ampx_scaler_unscale(scaler, optimizer) first");
  step(nullptr);
}

void AmpIteration::step(const float* found_inf) {
  Backend& backend = optimizer_.context().backend();
  backend.require<AmpPrimitives>("the optimizer step");
  reduce_gradients("the optimizer step");
  if (observer_) observer_->before_step();
  optimizer_.apply_step(found_inf);
  if (found_inf)
    backend.copy(last_step_skipped_->data(), found_inf, sizeof(float));
  else
    backend.fill(last_step_skipped_->data(), 4, 0, 1);
  has_stepped_ = true;
  if (observer_) observer_->after_step();
  if (sync_) sync_->finish_step();
}

void AmpIteration::update(LossScaler& scaler, bool force, double new_scale) {
  if (!scaler.enabled()) return;
  if (force) scaler.check_new_scale(new_scale);
  const std::vector<AmpIteration*> unscaled = scaler.enlisted();
  if (unscaled.empty())
    fail(AMPX_ERR_ORDER,
         "no inf checks were recorded since the last update; call ampx_scaler_step (or "
         "ampx_scaler_unscale) for at least one optimizer before ampx_scaler_update");
  std::vector<const float*> found_infs;
  for (const AmpIteration* it : unscaled) found_infs.push_back(it->found_inf_flag());
  scaler.update_scale(found_infs, force, new_scale);
  for (AmpIteration* it : unscaled) {
    it->phase_ = Phase::Ready;
    it->optimizer_.mark_unscaled(false);
    scaler.forget(*it);
  }
}

bool AmpIteration::found_inf(const LossScaler& scaler) {
  if (scaler_ != &scaler || phase_ == Phase::Ready)
    fail(AMPX_ERR_ORDER,
         "no inf check was recorded for this optimizer since the last update; call "
         "ampx_scaler_unscale or ampx_scaler_step first");
  float value = 0.0f;
  optimizer_.context().read_to_host(&value, found_inf_->data(), sizeof value);
  return value != 0.0f;
}

bool AmpIteration::last_step_taken() {
  if (!has_stepped_) fail(AMPX_ERR_ORDER, "the optimizer has not stepped yet");
  float skipped = 0.0f;
  optimizer_.context().read_to_host(&skipped, last_step_skipped_->data(), sizeof skipped);
  return skipped == 0.0f;
}

void AmpIteration::require_unscaled() const {
  if ((scaling() && phase_ == Phase::Ready) || gradients_marked_scaled())
    fail(AMPX_ERR_ORDER,
         "this optimizer's gradients are still multiplied by the loss scale; call "
         "ampx_scaler_unscale(scaler, optimizer) first (clipping scaled gradients clips them far "
         "too hard, or not at all)");
}

bool AmpIteration::gradients_marked_scaled() const {
  DeviceContext& ctx = optimizer_.context();
  for (const FusedOptimizer::Param& p : optimizer_.params())
    if (p.param->grad && carries_loss_scale(ctx, *p.param->grad)) return true;
  return false;
}

void AmpIteration::forget_loss_scale() {
  DeviceContext& ctx = optimizer_.context();
  for (const FusedOptimizer::Param& p : optimizer_.params())
    if (p.param->grad) impl::forget_loss_scale(ctx, *p.param->grad);
}

// ---- collectives -----------------------------------------------------------------

const GradientSync::Call* AmpIteration::others_do(Call call) const {
  using Sync = GradientSync::Call;
  static const Sync read = Sync::ReadGradients, unscale = Sync::Unscale,
                    clip_norm = Sync::ClipNorm, step_only = Sync::Step;
  // A disabled scaler's unscale does nothing; an unattached one would attach.
  const bool unscales = !scaler_ || scaler_->enabled();
  const bool scaled = scaling() && phase_ == Phase::Ready;  // refused everywhere
  switch (call) {
    case Call::Unscale:
      return phase_ == Phase::Ready && unscales ? &unscale : nullptr;
    case Call::ScalerStep:
      if (phase_ == Phase::Ready) return unscales ? &unscale : &step_only;
      return phase_ == Phase::Unscaled ? &step_only : nullptr;
    case Call::Step:
      return scaling() ? nullptr : &step_only;
    case Call::ClipNorm:
      return scaled ? nullptr : &clip_norm;
    case Call::ClipValue:
      return scaled ? nullptr : &read;
    case Call::FindNonfinite:
      return &read;
  }
  return nullptr;
}

}  // namespace ampx::impl
