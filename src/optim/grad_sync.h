// grad_sync.h -- what an optimizer asks of whoever reduces its gradients
// across ranks (dist/data_parallel.h), so that optim/ knows nothing of
// communication. At most one is attached to an optimizer.
#pragma once

namespace ampx::impl {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // Before anything reads the gradients for an update (unscale, clipping,
  // the step, the non-finite diagnostics): completes their reduction, once
  // per iteration. `op` names the caller for error messages.
  virtual void complete_gradients(const char* op) = 0;
  // found_inf (device F32[1], this rank's inf check) becomes the maximum
  // over every rank, in stream order, so that all ranks skip together.
  virtual void agree_found_inf(float* found_inf) = 0;
  // After the optimizer's step has been enqueued: the iteration is over.
  virtual void finish_step() = 0;
};

}  // namespace ampx::impl
