// api_lr_schedule.cpp -- learning-rate schedules on the device (ampx.h
// section 17): the public struct to and from math::LrSchedule, whose
// decay_steps is total_steps - warmup_steps (linear, cosine) or step_size.
#include <cstdint>

#include "api/guard.h"
#include "math/lr_schedule.h"
#include "optim/optimizer.h"

using namespace ampx::impl;

namespace {

// Throws INVALID_ARGUMENT naming the field; `base_lr` goes in unchecked
// (validate_schedule checks it).
math::LrSchedule schedule_from(const ampx_lr_schedule* given, double base_lr) {
  const ampx_lr_schedule s = read_options(given, ampx_lr_schedule_default(), "schedule");
  if (s.warmup_steps < 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "warmup_steps is ", s.warmup_steps, "; it must be >= 0");
  math::LrSchedule out = math::constant_schedule(base_lr);
  out.warmup_steps = s.warmup_steps;
  out.warmup_start_factor = s.warmup_start_factor;
  out.decay = static_cast<int64_t>(s.decay);
  switch (s.decay) {
    case AMPX_LR_CONSTANT:
      break;
    case AMPX_LR_LINEAR:
    case AMPX_LR_COSINE:
      if (s.total_steps <= s.warmup_steps)
        fail(AMPX_ERR_INVALID_ARGUMENT, "total_steps is ", s.total_steps, " with warmup_steps ",
             s.warmup_steps, "; ", s.decay == AMPX_LR_LINEAR ? "linear" : "cosine",
             " decay needs total_steps > warmup_steps (it runs over the steps between)");
      out.decay_steps = s.total_steps - s.warmup_steps;
      if (s.decay == AMPX_LR_LINEAR)
        out.end_factor = s.end_factor;
      else
        out.min_lr = s.min_lr;
      break;
    case AMPX_LR_STEP:
      out.decay_steps = s.step_size;
      out.gamma = s.gamma;
      break;
    default:
      break;  // validate_schedule names the unknown decay
  }
  validate_schedule(out);
  return out;
}

ampx_lr_schedule public_schedule(const math::LrSchedule& s) {
  ampx_lr_schedule out = ampx_lr_schedule_default();
  out.warmup_steps = s.warmup_steps;
  out.warmup_start_factor = s.warmup_start_factor;
  out.decay = static_cast<ampx_lr_decay>(s.decay);
  switch (s.decay) {
    case math::kLrLinear:
      out.total_steps = s.warmup_steps + s.decay_steps;
      out.end_factor = s.end_factor;
      break;
    case math::kLrCosine:
      out.total_steps = s.warmup_steps + s.decay_steps;
      out.min_lr = s.min_lr;
      break;
    case math::kLrStep:
      out.step_size = s.decay_steps;
      out.gamma = s.gamma;
      break;
    default:
      break;
  }
  return out;
}

}  // namespace

extern "C" {

ampx_lr_schedule ampx_lr_schedule_default(void) {
  ampx_lr_schedule schedule = AMPX_LR_SCHEDULE_INIT;
  return schedule;
}

ampx_status ampx_optimizer_set_lr_schedule(ampx_optimizer optimizer, int32_t group,
                                           const ampx_lr_schedule* schedule) {
  return guard(__func__, [&] {
    FusedOptimizer& o = object_arg<FusedOptimizer>(optimizer, "optimizer", "an ampx_optimizer");
    const double base = o.lr(group);
    o.set_schedule(group, schedule_from(schedule, base));
  });
}

ampx_status ampx_optimizer_get_lr_schedule(ampx_optimizer optimizer, int32_t group,
                                           ampx_lr_schedule* out) {
  return guard(__func__, [&] {
    FusedOptimizer& o = object_arg<FusedOptimizer>(optimizer, "optimizer", "an ampx_optimizer");
    const math::LrSchedule& s = o.schedule(group);
    write_struct(out, public_schedule(s), "out");
  });
}

ampx_status ampx_optimizer_step_count(ampx_optimizer optimizer, int64_t* steps) {
  return guard(__func__, [&] {
    FusedOptimizer& o = object_arg<FusedOptimizer>(optimizer, "optimizer", "an ampx_optimizer");
    require_pointer(steps, "steps");
    *steps = o.step_count();
  });
}

ampx_status ampx_lr_schedule_value(const ampx_lr_schedule* schedule, double base_lr, int64_t step,
                                   double* lr) {
  return guard(__func__, [&] {
    require_pointer(schedule, "schedule");
    require_pointer(lr, "lr");
    if (step < 0) fail(AMPX_ERR_INVALID_ARGUMENT, "step is ", step, "; it must be >= 0");
    *lr = math::scheduled_lr(schedule_from(schedule, base_lr), step);
  });
}

}  // extern "C"
