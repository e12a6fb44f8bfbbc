// lr_schedule.h -- a param group's learning rate as a function of the
// optimizer's count of taken steps: a linear warm-up, then constant, linear,
// cosine or step decay, each the closed form of its torch.optim.lr_scheduler
// counterpart (LinearLR, CosineAnnealingLR, StepLR; SequentialLR switches
// from the warm-up to the decay at warmup_steps). Shared by the CPU backend,
// the CUDA kernel (backend/cuda/kernels/lr_schedule.cu) and ampx_lr_schedule_value, so all
// three compute the same doubles.
//
// With k the step count, W the warm-up steps, j = k - W and T decay_steps:
//   k < W:     base * (s + (1 - s) * k / W)           (s: warmup_start_factor)
//   constant:  base
//   linear:    base * (1 + (end_factor - 1) * min(j, T) / T)
//   cosine:    min_lr + (base - min_lr) * (1 + cos(pi * j / T)) / 2
//              (periodic past T, period 2T, as CosineAnnealingLR)
//   step:      base * gamma^floor(j / T)              (T: step_size)
#pragma once

#include <cmath>
#include <cstdint>

#include "math/convert.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

enum LrDecay : int32_t { kLrConstant = 0, kLrLinear = 1, kLrCosine = 2, kLrStep = 3 };

// One group's schedule as it lies in device memory: eight 8-byte words, so
// that the host can rewrite any field with one stream-ordered fill.
struct LrSchedule {
  double base_lr;              // the group's lr (creation, add_group, set_lr)
  double warmup_start_factor;  // in [0, 1]
  double end_factor;           // linear; in [0, 1]
  double min_lr;               // cosine
  double gamma;                // step; in (0, 1]
  int64_t warmup_steps;        // >= 0
  int64_t decay_steps;         // linear, cosine: total - warm-up; step: step_size; > 0
  int64_t decay;               // an LrDecay
};
static_assert(sizeof(LrSchedule) == 64, "LrSchedule is eight 8-byte words");

// A schedule that is the group's lr at every step. The step leaves such a
// group's rate as the host wrote it, so its base_lr on the device is never
// read.
inline LrSchedule constant_schedule(double base_lr) {
  return LrSchedule{base_lr, 0.0, 0.0, 0.0, 1.0, 0, 1, kLrConstant};
}

AMPX_HD bool is_constant(const LrSchedule& s) {
  return s.decay == kLrConstant && s.warmup_steps == 0;
}

AMPX_HD double scheduled_lr(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) {
    const double progress = static_cast<double>(step) / static_cast<double>(s.warmup_steps);
    return s.base_lr * (s.warmup_start_factor + (1.0 - s.warmup_start_factor) * progress);
  }
  const int64_t j = step - s.warmup_steps;
  const int64_t t = s.decay_steps;
  switch (s.decay) {
    case kLrLinear: {
      const int64_t done = j < t ? j : t;
      return s.base_lr *
             (1.0 + (s.end_factor - 1.0) * static_cast<double>(done) / static_cast<double>(t));
    }
    case kLrCosine: {
      // cos(pi * j / T) has period 2T: reducing j first keeps the argument
      // small (and exact) however long the run.
      const int64_t phase = j % (2 * t);
      constexpr double kPi = 3.141592653589793238462643383279502884;
      return s.min_lr + (s.base_lr - s.min_lr) *
                            (1.0 + cos(kPi * static_cast<double>(phase) / static_cast<double>(t))) /
                            2.0;
    }
    case kLrStep:
      return s.base_lr * pow(s.gamma, static_cast<double>(j / t));
    default:
      return s.base_lr;
  }
}

// The rate a step uses: the schedule's double rounded once to the fp32 the
// optimizer kernels read (as a constant rate is, see optimizer.cpp).
AMPX_HD float scheduled_lr_f32(const LrSchedule& s, int64_t step) {
  return double_to_float(scheduled_lr(s, step));
}

}  // namespace math
}  // namespace ampx::impl
