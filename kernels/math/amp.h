// amp.h -- per-element and per-step math of dynamic loss scaling, shared by
// the CPU backend and the CUDA kernels (torch.amp.GradScaler's rules, plus
// hysteresis and scale bounds).
#pragma once

#include <cfloat>
#include <cstdint>

#include "math/convert.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

// The scaler's state as it lives in device memory. A training step reads
// and writes it only on the device; the host reads it on request.
struct ScalerState {
  float scale;
  int32_t growth_tracker;   // clean updates since the last growth or overflow
  int32_t hysteresis_left;  // overflows still tolerated before backing off
  int32_t reserved;         // keeps the counters 8-byte aligned
  int64_t updates;          // update() calls
  int64_t skipped;          // updates that saw a non-finite gradient
  int64_t backoffs;         // times the scale was lowered
  int64_t growths;          // times the scale was raised
};

struct ScalerConfig {
  double growth_factor;
  double backoff_factor;
  int32_t growth_interval;
  int32_t hysteresis;  // 1 = back off on every overflow, as PyTorch
  float min_scale;     // 0 = no floor
  float max_scale;     // 0 = no ceiling (growth still never reaches inf)
  // false (Megatron-LM, DeepSpeed's default): the allowance is restored
  // only when a growth interval completes; true: by every clean update.
  bool consecutive_hysteresis = false;
  // false: a growth past max_scale is not taken, so the scale stays a
  // power-of-two multiple of the last one and scaling stays exact; true:
  // the scale is clamped to max_scale.
  bool clamp_to_max_scale = false;
};

AMPX_HD bool is_finite(float x) { return x - x == 0.0f; }

// 1/scale taken in double, then rounded to float, as PyTorch does.
AMPX_HD float reciprocal_scale(float scale) {
  return double_to_float(1.0 / static_cast<double>(scale));
}

// One update() of the scale.
//  overflow: tracker = 0; the allowance drops by one (not below 0); once it
//            is 0 the scale backs off, scale *= backoff, but not below
//            min_scale nor below FLT_MIN, the smallest normal float (so the
//            scale never reaches 0 and its reciprocal stays finite); counted
//            as a backoff only when the scale fell;
//  clean:    tracker += 1 (consecutive_hysteresis: the allowance is
//            restored); at growth_interval the tracker restarts, the
//            allowance is restored, and the scale grows by growth_factor
//            when the result is finite and not above max_scale (with
//            clamp_to_max_scale: capped at max_scale instead). The allowance
//            is restored even when no growth follows: a whole interval was
//            clean.
AMPX_HD void scaler_update(ScalerState& s, bool found_inf, const ScalerConfig& c) {
  ++s.updates;
  if (found_inf) {
    ++s.skipped;
    s.growth_tracker = 0;
    if (s.hysteresis_left > 0) --s.hysteresis_left;
    if (s.hysteresis_left == 0) {
      float lowered = double_to_float(static_cast<double>(s.scale) * c.backoff_factor);
      const float floor = c.min_scale > FLT_MIN ? c.min_scale : FLT_MIN;
      if (lowered < floor) lowered = floor;
      if (lowered < s.scale) {
        s.scale = lowered;
        ++s.backoffs;
      }
    }
    return;
  }
  if (c.consecutive_hysteresis) s.hysteresis_left = c.hysteresis;
  const int32_t successful = s.growth_tracker + 1;
  if (successful < c.growth_interval) {
    s.growth_tracker = successful;
    return;
  }
  s.growth_tracker = 0;
  s.hysteresis_left = c.hysteresis;
  float grown = double_to_float(static_cast<double>(s.scale) * c.growth_factor);
  if (!is_finite(grown)) return;
  if (c.max_scale > 0.0f && grown > c.max_scale) {
    if (!c.clamp_to_max_scale) return;
    grown = c.max_scale;
  }
  if (grown > s.scale) {
    s.scale = grown;
    ++s.growths;
  }
}

// update() with a scale given by the program (GradScaler.update(new_scale)):
// the scale is replaced, the tracker and hysteresis are left as they are.
AMPX_HD void scaler_force(ScalerState& s, bool found_inf, float new_scale) {
  ++s.updates;
  if (found_inf) ++s.skipped;
  s.scale = new_scale;
}

// Gradient clipping by total norm: the factor every gradient is multiplied
// by (torch.nn.utils.clip_grad_norm_). A NaN norm gives a NaN factor, as
// torch.clamp(max=1) does, so the NaN reaches every gradient.
AMPX_HD float clip_coefficient(float total_norm, float max_norm) {
  const float coef = max_norm / (total_norm + 1e-6f);
  return coef > 1.0f ? 1.0f : coef;
}

}  // namespace math
}  // namespace ampx::impl
