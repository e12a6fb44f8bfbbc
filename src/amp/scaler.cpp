#include "amp/scaler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "autograd/tape.h"
#include "core/error.h"
#include "math/convert.h"
#include "optim/optimizer.h"

namespace ampx::impl {
namespace {

static_assert(sizeof(math::ScalerState) % sizeof(int32_t) == 0, "ScalerState is whole int32s");
static_assert(offsetof(math::ScalerState, scale) == 0, "the scale tensor aliases the first field");

// A scale lives on the device as a float: it must be a positive normal one
// (1e-50 is 0 as a float, and a subnormal scale's reciprocal is inf).
void check_scale_value(double value, const char* name) {
  if (!(value <= FLT_MAX) || !(math::double_to_float(value) >= FLT_MIN))
    fail(AMPX_ERR_INVALID_ARGUMENT, name, " is ", value,
         "; as the float it is kept in it must be finite and at least FLT_MIN (", FLT_MIN, ")");
}

// 0 (no bound) or a scale value.
void check_scale_bound(double value, const char* name) {
  if (value != 0.0) check_scale_value(value, name);
}

// x times the scale (or its reciprocal, inverse), in `dtype`, recorded on
// the tape: ampx_scaler_scale_loss and ampx_scaler_unscale_tensor. The node
// keeps a copy of the scale the forward used, so an update between the
// passes does not change the backward.
class ScaleNode final : public Node {
 public:
  bool inverse = false;
  TensorRef scale;  // F32 [1]
  const char* name() const override { return inverse ? "unscale_tensor" : "scale_loss"; }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    std::vector<TensorRef> result;
    result.emplace_back(scaled(ctx, *grads[0], *scale, inverse, inputs[0]->dtype, false));
    return result;
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    std::vector<TensorRef> result;
    result.emplace_back(scaled(ctx, *grads[0], *scale, inverse, inputs[0]->dtype, true));
    return result;
  }

  // x * scale (or / scale) into a new tensor of `dtype`, recorded when
  // `record` and x carries gradients.
  static DeviceTensor* scaled(DeviceContext& ctx, DeviceTensor& x, DeviceTensor& scale,
                              bool inverse, DType dtype, bool record_it) {
    AmpPrimitives& amp = ctx.backend().require<AmpPrimitives>(inverse ? "unscale_tensor"
                                                                       : "scale_loss");
    TensorRef out(DeviceTensor::empty(ctx, dtype, x.shape));
    if (x.numel() > 0)
      amp.multi_tensor_scale({{x.data(), x.dtype, x.numel()}}, {{out->data(), dtype, x.numel()}},
                             static_cast<const float*>(scale.data()), inverse, nullptr);
    if (record_it && should_record(ctx, {&x})) {
      auto node = std::make_unique<ScaleNode>();
      node->inverse = inverse;
      node->scale = retained(scale);
      node->inputs.push_back(retained(x));
      record(ctx, std::move(node), {out.get()});
    }
    return out.take();
  }
};

}  // namespace

void validate_scaler_options(const ScalerOptions& o) {
  check_scale_value(o.init_scale, "init_scale");
  if (!(o.growth_factor > 1.0) || !std::isfinite(o.growth_factor))
    fail(AMPX_ERR_INVALID_ARGUMENT, "growth_factor is ", o.growth_factor, "; it must be > 1");
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0))
    fail(AMPX_ERR_INVALID_ARGUMENT, "backoff_factor is ", o.backoff_factor,
         "; it must be in (0, 1)");
  if (o.growth_interval < 1)
    fail(AMPX_ERR_INVALID_ARGUMENT, "growth_interval is ", o.growth_interval, "; it must be >= 1");
  if (o.hysteresis < 1)
    fail(AMPX_ERR_INVALID_ARGUMENT, "hysteresis is ", o.hysteresis, "; it must be >= 1");
  check_scale_bound(o.min_scale, "min_scale (0 for none)");
  check_scale_bound(o.max_scale, "max_scale (0 for none)");
  if (o.max_scale > 0.0 && o.min_scale > o.max_scale)
    fail(AMPX_ERR_INVALID_ARGUMENT, "min_scale ", o.min_scale, " is above max_scale ", o.max_scale);
  if (o.init_scale < o.min_scale || (o.max_scale > 0.0 && o.init_scale > o.max_scale))
    fail(AMPX_ERR_INVALID_ARGUMENT, "init_scale ", o.init_scale, " is outside [min_scale ",
         o.min_scale, ", max_scale ", o.max_scale, "]");
}

LossScaler::LossScaler(DeviceContext& ctx, const ScalerOptions& options)
    : Object(kLiveMagic, &LossScaler::destroy_shell), ctx_(&ctx), options_(options) {
  ctx.retain();
}

LossScaler::~LossScaler() = default;

LossScaler* LossScaler::create(DeviceContext& ctx, const ScalerOptions& options) {
  validate_scaler_options(options);
  TensorRef state(DeviceTensor::empty(ctx, DType::I32,
                                      vector_shape(sizeof(math::ScalerState) / sizeof(int32_t))));
  TensorRef scale(DeviceTensor::alias(ctx, *state, DType::F32, vector_shape(1),
                                      offsetof(math::ScalerState, scale)));
  math::ScalerState initial{};
  initial.scale = options.enabled ? math::double_to_float(options.init_scale) : 1.0f;
  initial.hysteresis_left = options.hysteresis;
  ctx.backend().copy_from_host(state->data(), &initial, sizeof initial);
  auto* scaler = new LossScaler(ctx, options);
  scaler->state_ = std::move(state);
  scaler->scale_ = std::move(scale);
  return scaler;
}

void LossScaler::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  magic = kDeadMagic;
  state_.reset();
  scale_.reset();
  DeviceContext& ctx = *ctx_;
  ctx.quarantine(this);
  ctx.release();
}

math::ScalerConfig LossScaler::config() const {
  math::ScalerConfig c{};
  c.growth_factor = options_.growth_factor;
  c.backoff_factor = options_.backoff_factor;
  c.growth_interval = options_.growth_interval;
  c.hysteresis = options_.hysteresis;
  c.min_scale = math::double_to_float(options_.min_scale);
  c.max_scale = math::double_to_float(options_.max_scale);
  c.consecutive_hysteresis = options_.consecutive_hysteresis;
  c.clamp_to_max_scale = options_.clamp_to_max_scale;
  return c;
}

void LossScaler::check_attachable(const FusedOptimizer& optimizer) const {
  if (optimizer.scaler == this) return;
  if (optimizer.scaler)
    fail(AMPX_ERR_INVALID_ARGUMENT,
         "the optimizer is already attached to another scaler; an optimizer belongs to one scaler");
  if (&optimizer.context() != ctx_)
    fail(AMPX_ERR_DEVICE, "the optimizer belongs to a different context than the scaler");
}

void LossScaler::attach(FusedOptimizer& optimizer) {
  check_attachable(optimizer);
  if (optimizer.scaler == this) return;
  retain();
  optimizer.scaler = this;
  optimizer.amp_state = AmpState::Ready;
}

DeviceTensor* LossScaler::scale_loss(DeviceTensor& loss) {
  if (loss.ctx != ctx_) fail(AMPX_ERR_DEVICE, "'loss' belongs to a different context than the scaler");
  if (!is_floating(loss.dtype))
    fail(AMPX_ERR_DTYPE, "'loss' is ", loss.describe(), "; a loss is f32, f16 or bf16");
  // A disabled scaler's device scale is 1, so this is a plain f32 copy.
  return ScaleNode::scaled(*ctx_, loss, *scale_snapshot(), false,
                           DType::F32, true);
}

DeviceTensor* LossScaler::unscale_tensor(DeviceTensor& x) {
  if (x.ctx != ctx_) fail(AMPX_ERR_DEVICE, "'x' belongs to a different context than the scaler");
  if (!is_floating(x.dtype))
    fail(AMPX_ERR_DTYPE, "'x' is ", x.describe(), "; only floating tensors are unscaled");
  return ScaleNode::scaled(*ctx_, x, *scale_snapshot(), true, x.dtype, true);
}

TensorRef LossScaler::scale_snapshot() const {
  TensorRef copy(DeviceTensor::empty(*ctx_, DType::F32, scale_->shape));
  ctx_->backend().copy(copy->data(), scale_->data(), scale_->nbytes());
  return copy;
}

void LossScaler::unscale(FusedOptimizer& optimizer) {
  if (!options_.enabled) return;
  AmpPrimitives& amp = ctx_->backend().require<AmpPrimitives>("unscale");
  check_attachable(optimizer);
  if (optimizer.amp_state == AmpState::Unscaled)
    fail(AMPX_ERR_ORDER,
         "this optimizer's gradients were already unscaled since the last update; unscale once "
         "per iteration (unscale, [clip], step, update)");
  if (optimizer.amp_state == AmpState::Stepped)
    fail(AMPX_ERR_ORDER,
         "unscale after step: this optimizer already stepped in this iteration; call "
         "ampx_scaler_update before unscaling the next iteration's gradients");
  optimizer.sync_gradients("unscale");
  std::vector<TensorSpan> ins, outs;
  optimizer.prepare_unscale(ins, outs);
  // Attached only now that nothing can fail: a call that ran out of memory
  // leaves an unattached optimizer usable with ampx_optimizer_step.
  attach(optimizer);
  Backend& backend = ctx_->backend();
  float* found_inf = static_cast<float*>(optimizer.found_inf().data());
  backend.fill(found_inf, 4, 0, 1);
  const auto* scale = static_cast<const float*>(scale_->data());
  if (optimizer.observer)
    optimizer.observer->unscale(ins, outs, scale, found_inf);
  else
    amp.multi_tensor_scale(ins, outs, scale, true, found_inf);
  if (optimizer.grad_sync) optimizer.grad_sync->agree_found_inf(found_inf);
  if (optimizer.observer) optimizer.observer->after_unscale(scale, found_inf);
  optimizer.mark_unscaled(true);
  optimizer.amp_state = AmpState::Unscaled;
  if (std::find(active_.begin(), active_.end(), &optimizer) == active_.end())
    active_.push_back(&optimizer);
}

void LossScaler::step(FusedOptimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step(nullptr);
    return;
  }
  check_attachable(optimizer);
  if (optimizer.amp_state == AmpState::Stepped)
    fail(AMPX_ERR_ORDER,
         "step was already called for this optimizer since the last update; call "
         "ampx_scaler_update once per iteration, after every optimizer's step");
  if (optimizer.amp_state == AmpState::Ready) unscale(optimizer);
  optimizer.step(static_cast<const float*>(optimizer.found_inf().data()));
  optimizer.amp_state = AmpState::Stepped;
}

void LossScaler::update(bool force, double new_scale) {
  if (!options_.enabled) return;
  if (force) check_scale_value(new_scale, "new_scale");
  if (active_.empty())
    fail(AMPX_ERR_ORDER,
         "no inf checks were recorded since the last update; call ampx_scaler_step (or "
         "ampx_scaler_unscale) for at least one optimizer before ampx_scaler_update");
  std::vector<const float*> found_infs;
  for (FusedOptimizer* o : active_)
    found_infs.push_back(static_cast<const float*>(o->found_inf().data()));
  ctx_->backend()
      .require<AmpPrimitives>("the scaler update")
      .scaler_update(static_cast<math::ScalerState*>(state_->data()), found_infs, config(), force,
                     math::double_to_float(new_scale));
  for (FusedOptimizer* o : active_) {
    o->amp_state = AmpState::Ready;
    o->mark_unscaled(false);
  }
  active_.clear();
}

bool LossScaler::found_inf(FusedOptimizer& optimizer) {
  if (optimizer.scaler != this || optimizer.amp_state == AmpState::Ready)
    fail(AMPX_ERR_ORDER,
         "no inf check was recorded for this optimizer since the last update; call "
         "ampx_scaler_unscale or ampx_scaler_step first");
  float value = 0.0f;
  ctx_->read_to_host(&value, optimizer.found_inf().data(), sizeof value);
  return value != 0.0f;
}

math::ScalerState LossScaler::read_state() {
  math::ScalerState state{};
  ctx_->read_to_host(&state, state_->data(), sizeof state);
  return state;
}

void LossScaler::set_state(const ScalerOptions& options, const math::ScalerState& state) {
  if (iteration_in_progress())
    fail(AMPX_ERR_ORDER, "the scaler state can only be restored between iterations (after "
                         "ampx_scaler_update)");
  check_scale_value(options.init_scale, "state->scale");
  validate_scaler_options(options);
  if (state.growth_tracker < 0 || state.growth_tracker >= options.growth_interval)
    fail(AMPX_ERR_INVALID_ARGUMENT, "growth_tracker is ", state.growth_tracker,
         "; it must be in [0, growth_interval)");
  if (state.hysteresis_left < 0 || state.hysteresis_left > options.hysteresis)
    fail(AMPX_ERR_INVALID_ARGUMENT, "hysteresis_left is ", state.hysteresis_left,
         "; it must be in [0, hysteresis]");
  if (state.updates < 0 || state.skipped < 0 || state.backoffs < 0 || state.growths < 0 ||
      state.skipped > state.updates)
    fail(AMPX_ERR_INVALID_ARGUMENT, "the counters are inconsistent (negative, or more skipped "
                                    "than updates)");
  math::ScalerState device = state;
  device.scale = options.enabled ? math::double_to_float(options.init_scale) : 1.0f;
  restore(options, device);
}

void LossScaler::restore(const ScalerOptions& options, const math::ScalerState& state) {
  ctx_->backend().copy_from_host(state_->data(), &state, sizeof state);
  options_ = options;
}

void LossScaler::forget(const FusedOptimizer& optimizer) {
  active_.erase(std::remove(active_.begin(), active_.end(), &optimizer), active_.end());
}

}  // namespace ampx::impl
