// precision_observer.h -- what an optimizer's AMP iteration (amp/iteration.h)
// tells whoever watches the precision of its training (doctor/doctor.h), so
// that optim/ and amp/ know nothing of the doctor. At most one is attached to
// an optimizer; none costs nothing.
#pragma once

#include <vector>

#include "core/backend_amp.h"

namespace ampx::impl {

class PrecisionObserver {
 public:
  virtual ~PrecisionObserver() = default;
  // The scaler's unscale of this optimizer's gradients, in place of its
  // multi_tensor_scale(ins, outs, scale, reciprocal, found_inf): it must do
  // exactly that, and may look at the gradients in the same pass. ins and
  // outs hold one span per parameter with a gradient, in parameter order.
  virtual void unscale(const std::vector<TensorSpan>& ins, const std::vector<TensorSpan>& outs,
                       const float* scale, float* found_inf) = 0;
  // found_inf is final (agreed between ranks); scale is still the one the
  // gradients carry.
  virtual void after_unscale(const float* scale, const float* found_inf) = 0;
  // Around the optimizer's step (skipped or not), once per iteration.
  virtual void before_step() = 0;
  virtual void after_step() = 0;
};

}  // namespace ampx::impl
