// grad_sync.h -- what an optimizer asks of whoever reduces its gradients
// across ranks (dist/data_parallel.h), so that optim/ knows nothing of
// communication. At most one is attached to an optimizer.
#pragma once

#include <cstdint>
#include <string>

#include "core/backend_amp.h"

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
  // norm (device F32[1]) is the norm of this rank's gradients; it becomes
  // the norm of all ranks' together where ranks hold different parts
  // (sharded optimizer state), in stream order.
  virtual void global_norm(float* norm, NormType type) = 0;
  // ampx_optimizer_zero_grad: zeroes the gradients the wrapper owns (under
  // ZeRO-1 the optimizer's own gradients are only this rank's part).
  virtual void zero_gradients() = 0;
  // After the optimizer's step has been enqueued: the iteration is over.
  virtual void finish_step() = 0;

  // A call that reads the gradients is collective while they are wrapped:
  // what the other ranks do in it, from where this rank stopped.
  enum class Call {
    ReadGradients,  // complete the reduction (clip_grad_value, find_nonfinite_grads)
    Unscale,        // and agree on found-inf (the scaler's unscale)
    ClipNorm,       // and, sharded, on the norm (clip_grad_norm)
    Step,           // and, sharded, gather the stepped parameters
  };
  // How many collectives that carry the ranks' verdicts this rank has made
  // (taken before a call, for join_failed).
  virtual uint64_t agreements() const = 0;
  // The call `op` failed this rank's own checks (status, message) before
  // all its collectives ran (agreements() was `before` when it began):
  // makes the rest of them, carrying the failure, so that no rank waits
  // for this one; where they carry it, every rank fails the call. Throws
  // nothing: the caller reports its own error.
  virtual void join_failed(Call call, uint64_t before, ampx_status status, const std::string& message,
                           const char* op) noexcept = 0;
};

}  // namespace ampx::impl
