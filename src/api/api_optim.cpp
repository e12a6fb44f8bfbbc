// api_optim.cpp -- optimizers, loss scalers, clipping and diagnostics.
#include <cfloat>
#include <cstddef>
#include <cmath>
#include <cstring>

#include "amp/scaler.h"
#include "api/guard.h"
#include "math/convert.h"
#include "optim/clip.h"
#include "optim/optimizer.h"

using namespace ampx::impl;

namespace {

FusedOptimizer& optimizer_arg(ampx_optimizer handle, const char* arg) {
  return object_arg<FusedOptimizer>(handle, arg, "an ampx_optimizer");
}

LossScaler& scaler_arg(ampx_scaler handle, const char* arg) {
  return object_arg<LossScaler>(handle, arg, "an ampx_scaler");
}

bool flag(int32_t value) { return value != 0; }

// While a data-parallel wrapper reduces an optimizer's gradients, a call
// that reads them is collective (section 14). `call` says what the other
// ranks do in it, judged from this rank's state (the same on every rank:
// checks of state -- the iteration's order, synchronization off -- fail
// alike everywhere, so only a rank whose own arguments fail makes the
// call's collectives alone); nullptr: none. When the body fails, the
// wrapper makes the collectives it did not reach, carrying the failure, so
// that no rank waits for this one.
using Call = GradientSync::Call;

template <class Body>
void collective(FusedOptimizer& o, const Call* call, const char* op, Body&& body) {
  GradientSync* sync = o.grad_sync;
  if (!sync || !call) {
    body();
    return;
  }
  const uint64_t before = sync->agreements();
  try {
    body();
  } catch (const StatusError& e) {
    if (o.grad_sync == sync) sync->join_failed(*call, before, e.status(), e.what(), op);
    throw;
  }
}

bool scaling(const FusedOptimizer& o) { return o.scaler && o.scaler->enabled(); }

// What the other ranks' ampx_scaler_unscale (step: false) or
// ampx_scaler_step does with this optimizer's state.
const Call* scaler_call(const FusedOptimizer& o, bool step) {
  static const Call unscale = Call::Unscale, step_only = Call::Step;
  const bool enabled = !o.scaler || o.scaler->enabled();
  if (o.amp_state == AmpState::Ready) return enabled ? &unscale : step ? &step_only : nullptr;
  if (o.amp_state == AmpState::Unscaled) return step ? &step_only : nullptr;
  return nullptr;
}

// The same for the other reads; none for clipping and steps while an
// enabled scaler's scale is still in the gradients (refused on every rank).
const Call* read_call(const FusedOptimizer& o, Call call, bool needs_unscaled = true) {
  static const Call calls[] = {Call::ReadGradients, Call::Unscale, Call::ClipNorm, Call::Step};
  if (needs_unscaled && scaling(o) && o.amp_state == AmpState::Ready) return nullptr;
  return &calls[static_cast<int>(call)];
}

ampx_optimizer to_handle(FusedOptimizer* o) { return reinterpret_cast<ampx_optimizer>(o); }
ampx_scaler to_handle(LossScaler* s) { return reinterpret_cast<ampx_scaler>(s); }

ScalerOptions scaler_options_from(const ampx_scaler_options& o) {
  ScalerOptions options;
  options.init_scale = o.init_scale;
  options.growth_factor = o.growth_factor;
  options.backoff_factor = o.backoff_factor;
  options.growth_interval = o.growth_interval;
  options.enabled = flag(o.enabled);
  options.hysteresis = o.hysteresis;
  options.min_scale = o.min_scale;
  options.max_scale = o.max_scale;
  options.consecutive_hysteresis = flag(o.consecutive_hysteresis);
  options.clamp_to_max_scale = flag(o.clamp_to_max_scale);
  return options;
}

}  // namespace

extern "C" {

// ---- optimizers --------------------------------------------------------------

ampx_sgd_options ampx_sgd_options_default(void) {
  ampx_sgd_options options = AMPX_SGD_OPTIONS_INIT;
  return options;
}

ampx_adam_options ampx_adam_options_default(void) {
  ampx_adam_options options = AMPX_ADAM_OPTIONS_INIT;
  return options;
}

ampx_adam_options ampx_adamw_options_default(void) {
  ampx_adam_options options = AMPX_ADAMW_OPTIONS_INIT;
  return options;
}

ampx_status ampx_optimizer_create_sgd(ampx_context ctx, const ampx_tensor* params, size_t count,
                                      const ampx_sgd_options* options, ampx_optimizer* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceContext& c = context_arg(ctx, "ctx");
    const ampx_sgd_options o = read_options(options, ampx_sgd_options_default(), "options");
    OptimizerHyper hyper;
    hyper.kind = OptimizerKind::Sgd;
    hyper.lr = o.lr;
    hyper.weight_decay = o.weight_decay;
    hyper.sgd.momentum = math::double_to_float(o.momentum);
    hyper.sgd.dampening = math::double_to_float(o.dampening);
    hyper.sgd.nesterov = flag(o.nesterov);
    hyper.sgd.maximize = flag(o.maximize);
    *out = to_handle(FusedOptimizer::create(c, tensor_list_arg(params, count, "params"), hyper));
  });
}

ampx_status ampx_optimizer_create_adam(ampx_context ctx, const ampx_tensor* params, size_t count,
                                       const ampx_adam_options* options, ampx_optimizer* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceContext& c = context_arg(ctx, "ctx");
    const ampx_adam_options o = read_options(options, ampx_adam_options_default(), "options");
    OptimizerHyper hyper;
    hyper.kind = OptimizerKind::Adam;
    hyper.lr = o.lr;
    hyper.weight_decay = o.weight_decay;
    hyper.adam.beta1 = o.beta1;
    hyper.adam.beta2 = o.beta2;
    hyper.adam.eps = math::double_to_float(o.eps);
    hyper.adam.amsgrad = flag(o.amsgrad);
    hyper.adam.maximize = flag(o.maximize);
    hyper.adam.decoupled_weight_decay = flag(o.decoupled_weight_decay);
    *out = to_handle(FusedOptimizer::create(c, tensor_list_arg(params, count, "params"), hyper));
  });
}

void ampx_optimizer_release(ampx_optimizer optimizer) {
  if (!optimizer) return;
  guard(__func__, [&] { optimizer_arg(optimizer, "optimizer").release(); });
}

ampx_status ampx_optimizer_add_group(ampx_optimizer optimizer, const ampx_tensor* params,
                                     size_t count, double lr, double weight_decay,
                                     int32_t* group_index) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    const int32_t group = o.add_group(tensor_list_arg(params, count, "params"), lr, weight_decay);
    if (group_index) *group_index = group;
  });
}

ampx_status ampx_optimizer_group_count(ampx_optimizer optimizer, int32_t* count) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    require_pointer(count, "count");
    *count = o.group_count();
  });
}

ampx_status ampx_optimizer_set_lr(ampx_optimizer optimizer, int32_t group, double lr) {
  return guard(__func__, [&] { optimizer_arg(optimizer, "optimizer").set_lr(group, lr); });
}

ampx_status ampx_optimizer_get_lr(ampx_optimizer optimizer, int32_t group, double* lr) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    require_pointer(lr, "lr");
    *lr = o.lr(group);
  });
}

ampx_status ampx_optimizer_step(ampx_optimizer optimizer) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    collective(o, scaling(o) ? nullptr : read_call(o, Call::Step), __func__,
               [&] { o.step_unscaled(); });
  });
}

ampx_status ampx_optimizer_zero_grad(ampx_optimizer optimizer) {
  return guard(__func__, [&] { optimizer_arg(optimizer, "optimizer").zero_grad(); });
}

ampx_status ampx_optimizer_state_tensor(ampx_optimizer optimizer, ampx_tensor param,
                                        ampx_optimizer_state kind, ampx_tensor* out) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    const DeviceTensor& p = tensor_arg(param, "param");
    require_pointer(out, "out");
    FusedOptimizer::StateKind state;
    switch (kind) {
      case AMPX_STATE_MASTER:
        state = FusedOptimizer::StateKind::Master;
        break;
      case AMPX_STATE_MOMENTUM:
        state = FusedOptimizer::StateKind::Momentum;
        break;
      case AMPX_STATE_EXP_AVG_SQ:
        state = FusedOptimizer::StateKind::ExpAvgSq;
        break;
      case AMPX_STATE_MAX_EXP_AVG_SQ:
        state = FusedOptimizer::StateKind::MaxExpAvgSq;
        break;
      default:
        fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'kind' is ", static_cast<int>(kind),
             ", which is not an ampx_optimizer_state");
    }
    DeviceTensor& result = o.state_tensor(p, state);
    result.retain();
    *out = to_handle(&result);
  });
}

ampx_status ampx_optimizer_param_steps(ampx_optimizer optimizer, ampx_tensor param,
                                       int64_t* steps) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    const DeviceTensor& p = tensor_arg(param, "param");
    require_pointer(steps, "steps");
    *steps = o.param_steps(p);
  });
}

ampx_status ampx_optimizer_state_size(ampx_optimizer optimizer, size_t* bytes) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    require_pointer(bytes, "bytes");
    *bytes = o.state_size();
  });
}

ampx_status ampx_optimizer_save_state(ampx_optimizer optimizer, void* buffer, size_t bytes) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    require_pointer(buffer, "buffer");
    o.save_state(buffer, bytes);
  });
}

ampx_status ampx_optimizer_load_state(ampx_optimizer optimizer, const void* buffer, size_t bytes) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    require_pointer(buffer, "buffer");
    o.load_state(buffer, bytes);
  });
}

ampx_status ampx_optimizer_last_step_taken(ampx_optimizer optimizer, int32_t* taken) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    require_pointer(taken, "taken");
    *taken = o.last_step_taken() ? 1 : 0;
  });
}

// ---- loss scaling ---------------------------------------------------------------

ampx_scaler_options ampx_scaler_options_default(void) {
  ampx_scaler_options options = AMPX_SCALER_OPTIONS_INIT;
  return options;
}

ampx_status ampx_scaler_create(ampx_context ctx, const ampx_scaler_options* options,
                               ampx_scaler* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceContext& c = context_arg(ctx, "ctx");
    const ampx_scaler_options o = read_options(options, ampx_scaler_options_default(), "options");
    *out = to_handle(LossScaler::create(c, scaler_options_from(o)));
  });
}

void ampx_scaler_release(ampx_scaler scaler) {
  if (!scaler) return;
  guard(__func__, [&] { scaler_arg(scaler, "scaler").release(); });
}

ampx_status ampx_scaler_attach(ampx_scaler scaler, ampx_optimizer optimizer) {
  return guard(__func__, [&] {
    LossScaler& s = scaler_arg(scaler, "scaler");
    s.attach(optimizer_arg(optimizer, "optimizer"));
  });
}

ampx_status ampx_scaler_scale_loss(ampx_scaler scaler, ampx_tensor loss, ampx_tensor* out) {
  return guard(__func__, [&] {
    LossScaler& s = scaler_arg(scaler, "scaler");
    DeviceTensor& l = tensor_arg(loss, "loss");
    require_pointer(out, "out");
    *out = to_handle(s.scale_loss(l));
  });
}

ampx_status ampx_scaler_scale_tensor(ampx_scaler scaler, ampx_tensor* out) {
  return guard(__func__, [&] {
    LossScaler& s = scaler_arg(scaler, "scaler");
    require_pointer(out, "out");
    s.scale_tensor().retain();
    *out = to_handle(&s.scale_tensor());
  });
}

ampx_status ampx_scaler_get_scale(ampx_scaler scaler, double* scale) {
  return guard(__func__, [&] {
    LossScaler& s = scaler_arg(scaler, "scaler");
    require_pointer(scale, "scale");
    *scale = s.read_state().scale;
  });
}

ampx_status ampx_scaler_unscale(ampx_scaler scaler, ampx_optimizer optimizer) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    collective(o, scaler_call(o, false), __func__, [&] { scaler_arg(scaler, "scaler").unscale(o); });
  });
}

ampx_status ampx_scaler_step(ampx_scaler scaler, ampx_optimizer optimizer) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    collective(o, scaler_call(o, true), __func__, [&] { scaler_arg(scaler, "scaler").step(o); });
  });
}

ampx_status ampx_scaler_update(ampx_scaler scaler) {
  return guard(__func__, [&] { scaler_arg(scaler, "scaler").update(false, 0.0); });
}

ampx_status ampx_scaler_update_to(ampx_scaler scaler, double new_scale) {
  return guard(__func__, [&] { scaler_arg(scaler, "scaler").update(true, new_scale); });
}

ampx_status ampx_scaler_found_inf(ampx_scaler scaler, ampx_optimizer optimizer, int32_t* found) {
  return guard(__func__, [&] {
    LossScaler& s = scaler_arg(scaler, "scaler");
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    require_pointer(found, "found");
    *found = s.found_inf(o) ? 1 : 0;
  });
}

ampx_status ampx_scaler_get_counters(ampx_scaler scaler, ampx_scaler_counters* counters) {
  return guard(__func__, [&] {
    LossScaler& s = scaler_arg(scaler, "scaler");
    require_pointer(counters, "counters");
    const math::ScalerState state = s.read_state();
    ampx_scaler_counters full = AMPX_SCALER_COUNTERS_INIT;
    full.updates = state.updates;
    full.skipped = state.skipped;
    full.backoffs = state.backoffs;
    full.growths = state.growths;
    write_struct(counters, full, "counters");
  });
}

ampx_status ampx_scaler_get_state(ampx_scaler scaler, ampx_scaler_state* state) {
  return guard(__func__, [&] {
    LossScaler& s = scaler_arg(scaler, "scaler");
    require_pointer(state, "state");
    const math::ScalerState d = s.read_state();
    const ScalerOptions& o = s.options();
    ampx_scaler_state full{};
    full.struct_size = sizeof full;
    full.scale = d.scale;
    full.growth_factor = o.growth_factor;
    full.backoff_factor = o.backoff_factor;
    full.growth_interval = o.growth_interval;
    full.growth_tracker = d.growth_tracker;
    full.hysteresis = o.hysteresis;
    full.hysteresis_left = d.hysteresis_left;
    full.min_scale = o.min_scale;
    full.max_scale = o.max_scale;
    full.counters = {sizeof(ampx_scaler_counters), d.updates, d.skipped, d.backoffs, d.growths};
    full.consecutive_hysteresis = o.consecutive_hysteresis ? 1 : 0;
    full.clamp_to_max_scale = o.clamp_to_max_scale ? 1 : 0;
    write_struct(state, full, "state");
  });
}

ampx_status ampx_scaler_set_state(ampx_scaler scaler, const ampx_scaler_state* state) {
  return guard(__func__, [&] {
    LossScaler& s = scaler_arg(scaler, "scaler");
    require_pointer(state, "state");
    // A state from a program built before the two flags were appended is
    // complete for that program; the flags then read as their defaults.
    constexpr size_t kFlagsStart = offsetof(ampx_scaler_state, consecutive_hysteresis);
    if (state->struct_size != kFlagsStart && state->struct_size < sizeof(ampx_scaler_state))
      fail(AMPX_ERR_INVALID_ARGUMENT, "state->struct_size is ", state->struct_size,
           "; a state to restore must be a complete ampx_scaler_state (from ampx_scaler_get_state): ",
           sizeof(ampx_scaler_state), " bytes, or ", kFlagsStart, " from a program built before ",
           "consecutive_hysteresis and clamp_to_max_scale");
    const bool has_flags = state->struct_size >= sizeof(ampx_scaler_state);
    ScalerOptions options = s.options();
    options.init_scale = state->scale;
    options.growth_factor = state->growth_factor;
    options.backoff_factor = state->backoff_factor;
    options.growth_interval = state->growth_interval;
    options.hysteresis = state->hysteresis;
    options.min_scale = state->min_scale;
    options.max_scale = state->max_scale;
    options.consecutive_hysteresis = has_flags && flag(state->consecutive_hysteresis);
    options.clamp_to_max_scale = has_flags && flag(state->clamp_to_max_scale);
    math::ScalerState d{};
    d.growth_tracker = state->growth_tracker;
    d.hysteresis_left = state->hysteresis_left;
    d.updates = state->counters.updates;
    d.skipped = state->counters.skipped;
    d.backoffs = state->counters.backoffs;
    d.growths = state->counters.growths;
    s.set_state(options, d);
  });
}

// ---- clipping and diagnostics ---------------------------------------------------

ampx_status ampx_clip_grad_norm(ampx_optimizer optimizer, double max_norm, double norm_type,
                                int32_t error_if_nonfinite, ampx_tensor* total_norm) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    collective(o, read_call(o, Call::ClipNorm), __func__, [&] {
      NormType type;
      if (norm_type == 2.0)
        type = NormType::L2;
      else if (std::isinf(norm_type) && norm_type > 0)
        type = NormType::Inf;
      else
        fail(AMPX_ERR_NOT_SUPPORTED, "norm_type is ", norm_type, "; supported are 2 and INFINITY");
      TensorRef total(clip_grad_norm(o, max_norm, type, flag(error_if_nonfinite)));
      if (total_norm) *total_norm = to_handle(total.take());
    });
  });
}

ampx_status ampx_clip_grad_value(ampx_optimizer optimizer, double clip_value) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    collective(o, read_call(o, Call::ReadGradients), __func__,
               [&] { clip_grad_value(o, clip_value); });
  });
}

ampx_status ampx_find_nonfinite_grads(ampx_optimizer optimizer, ampx_nonfinite_grad* entries,
                                      size_t capacity, size_t* found) {
  return guard(__func__, [&] {
    FusedOptimizer& o = optimizer_arg(optimizer, "optimizer");
    collective(o, read_call(o, Call::ReadGradients, false), __func__, [&] {
      require_pointer(found, "found");
      if (capacity > 0) require_pointer(entries, "entries");
      const std::vector<NonfiniteGradCount> list = find_nonfinite_grads(o);
      for (size_t i = 0; i < list.size() && i < capacity; ++i) {
        entries[i].param = to_handle(const_cast<DeviceTensor*>(list[i].param));
        entries[i].name = list[i].param->name.c_str();
        entries[i].nan_count = list[i].nan_count;
        entries[i].inf_count = list[i].inf_count;
      }
      *found = list.size();
    });
  });
}

}  // extern "C"
