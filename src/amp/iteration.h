// iteration.h -- the AMP iteration of one optimizer: its phases, the order
// they run in and who takes part in each. One per optimizer (it owns one);
// the loss scaler, the data-parallel gradient sync and the precision doctor
// plug into it, and nothing else sets its state.
//
// The phases of an iteration, as the C API runs them:
//
//   backward        ampx_backward (autograd/): the gradients, multiplied by
//                   the scaler's scale; a GradientSync reduces them across
//                   ranks as they become ready.
//   reduce          reduce_gradients(): the reduction is complete before
//                   anything reads the gradients (unscale, clipping, the
//                   step, the non-finite diagnostics).
//   unscale         ampx_scaler_unscale (or ampx_scaler_step's implicit
//                   one): gradients times 1/scale into fp32, found-inf set;
//                   the PrecisionObserver may do that pass itself (with its
//                   statistics), the GradientSync agrees found-inf over the
//                   ranks, then the observer sees the final verdict.
//                   READY -> UNSCALED.
//   clip            ampx_clip_grad_norm/_value: on unscaled gradients
//                   (require_unscaled); a sharded sync agrees the norm.
//   step            ampx_scaler_step (skipped on the device when found-inf
//                   is set; UNSCALED -> STEPPED) or ampx_optimizer_step
//                   (without an enabled scaler); the observer sees it
//                   before and after, the sync finishes the iteration.
//   update          ampx_scaler_update(_to): one scale update from the
//                   found-inf of every optimizer the scaler unscaled;
//                   every one of them returns to READY.
//
// The order rules (each an AMPX_ERR_ORDER) are all in iteration.cpp: unscale
// twice, unscale after step, step twice, clipping on gradients an enabled
// scaler's scale is still in, ampx_optimizer_step while an enabled scaler
// is attached or on such gradients, found-inf before an inf check, update
// with no inf check, and the between-iterations-only calls (param groups,
// loading state, checkpoints, wrapping for data-parallel). Gradients a
// backward with an enabled scaler accumulated into are marked (autograd),
// so stepping and clipping them is refused before any scaler is attached.
// A disabled scaler takes no part: its unscale does nothing and its step
// is a plain step, with the plain step's checks and the rule of one scaler
// per optimizer; its update does nothing.
//
// Adding a phase (FP8 amax reduction and scale update, higher-order
// gradients' final-backward hooks...) touches this type only: a method here
// that runs it, called at its place in the sequence in iteration.cpp (e.g.
// from unscale() next to the found-inf agreement, which a new amax
// reduction joins); a new Phase value if calls must be ordered around it,
// with its rule where the others are; a virtual function on the plug-in
// interface that takes part (GradientSync, PrecisionObserver), with a
// default that does nothing where not every plug-in needs it; and a case in
// collective() if the phase makes collectives under data-parallel training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend_amp.h"
#include "core/context.h"
#include "core/error.h"
#include "core/tensor.h"
#include "optim/grad_sync.h"
#include "optim/precision_observer.h"

namespace ampx::impl {

class FusedOptimizer;
class LossScaler;

class AmpIteration {
 public:
  // Where the optimizer is in a loss-scaled iteration (torch's OptState).
  enum class Phase { Ready, Unscaled, Stepped };

  explicit AmpIteration(FusedOptimizer& optimizer) : optimizer_(optimizer) {}
  AmpIteration(const AmpIteration&) = delete;
  AmpIteration& operator=(const AmpIteration&) = delete;

  // The device flags; changes nothing when it throws. free() before the
  // optimizer's context goes.
  void allocate(DeviceContext& ctx);
  void free();

  Phase phase() const { return phase_; }
  bool between_iterations() const { return phase_ == Phase::Ready; }
  // AMPX_ERR_ORDER with `message` unless between iterations.
  void require_between_iterations(const char* message) const;

  // ---- plug-ins (each attached at most once; attach checks, then changes
  // nothing unless it succeeds) ------------------------------------------

  // The loss scaler, retained while attached (until the optimizer is
  // released); null when none.
  LossScaler* scaler() const { return scaler_; }
  // An attached scaler that is enabled: the gradients carry its scale.
  bool scaling() const;
  // Throws unless `scaler` is attached or can be (same context, no other).
  void check_scaler_attachable(const LossScaler& scaler) const;
  void attach_scaler(LossScaler& scaler);  // ampx_scaler_attach

  // The data-parallel wrapper's gradient sync (it retains the optimizer
  // meanwhile); null when the optimizer is not wrapped.
  GradientSync* gradient_sync() const { return sync_; }
  // Throws unless a sync can be attached: none attached yet, and between
  // iterations.
  void check_sync_attachable() const;
  void attach_sync(GradientSync& sync);
  void detach_sync(const GradientSync& sync);

  // The precision doctor (it retains the optimizer meanwhile).
  PrecisionObserver* observer() const { return observer_; }
  void check_observer_attachable() const;
  void attach_observer(PrecisionObserver& observer);
  void detach_observer(const PrecisionObserver& observer);

  // The optimizer is being released: leaves the scaler's iteration and
  // releases it.
  void detach_all();

  // ---- phases ------------------------------------------------------------

  // Completes the cross-rank reduction, when a sync is attached, before
  // `op` reads the gradients.
  void reduce_gradients(const char* op);
  // `norm` (device F32[1]) of this rank's gradients becomes the norm of
  // every rank's where ranks hold different parts.
  void reduce_norm(float* norm, NormType type);
  // ampx_optimizer_zero_grad: false when no sync owns the gradients (the
  // optimizer zeroes its own).
  bool zero_synced_gradients();

  void unscale(LossScaler& scaler);      // ampx_scaler_unscale
  void scaler_step(LossScaler& scaler);  // ampx_scaler_step
  void plain_step();                     // ampx_optimizer_step
  // ampx_scaler_update(_to) (new_scale when force): ends the iteration of
  // every optimizer `scaler` unscaled.
  static void update(LossScaler& scaler, bool force, double new_scale);
  // ampx_scaler_found_inf; synchronizes.
  bool found_inf(const LossScaler& scaler);
  // This iteration's inf check (device F32[1]), which the update reads.
  const float* found_inf_flag() const { return static_cast<const float*>(found_inf_->data()); }
  // ampx_optimizer_last_step_taken: whether the latest step was taken (not
  // skipped); synchronizes. ORDER before the first step.
  bool last_step_taken();
  // Clipping: AMPX_ERR_ORDER while an enabled scaler's scale is still in
  // the gradients: an attached scaler's before its unscale, or any that a
  // backward put in (autograd marks those gradients), attached or not.
  void require_unscaled() const;
  // The gradients no longer carry a scale a backward put in (ampx's zero_grad).
  void forget_loss_scale();

  // ---- collectives ---------------------------------------------------------

  // The C API's calls that read the gradients; under data-parallel
  // training each is collective.
  enum class Call { Unscale, ScalerStep, Step, ClipNorm, ClipValue, FindNonfinite };

  // Runs `body`, the call `op`. While a sync is attached the call is
  // collective (section 14): what the other ranks do in it is judged from
  // this rank's phase (the same on every rank: checks of state fail alike
  // everywhere, so only a rank whose own arguments fail makes the call's
  // collectives alone). When the body fails, the sync makes the collectives
  // it did not reach, carrying the failure, so that no rank waits for this
  // one.
  template <class Body>
  void collective(Call call, const char* op, Body&& body) {
    GradientSync* sync = sync_;
    const GradientSync::Call* what = sync ? others_do(call) : nullptr;
    if (!what) {
      body();
      return;
    }
    const uint64_t before = sync->agreements();
    try {
      body();
    } catch (const StatusError& e) {
      if (sync_ == sync) sync->join_failed(*what, before, e.status(), e.what(), op);
      throw;
    }
  }

 private:
  // What the other ranks' `call` does from this rank's phase; nullptr: no
  // collective (refused on every rank, or nothing to agree).
  const GradientSync::Call* others_do(Call call) const;
  // The optimizer's step with found_inf (device, or nullptr), between the
  // observer's and the sync's hooks.
  void step(const float* found_inf);
  // Whether a parameter's gradient is marked as scaled by a backward.
  bool gradients_marked_scaled() const;

  FusedOptimizer& optimizer_;
  Phase phase_ = Phase::Ready;
  TensorRef found_inf_;          // F32[1]: set by unscale, read by step and update
  TensorRef last_step_skipped_;  // F32[1]: found_inf as the last step saw it
  bool has_stepped_ = false;
  LossScaler* scaler_ = nullptr;
  GradientSync* sync_ = nullptr;
  PrecisionObserver* observer_ = nullptr;
};

}  // namespace ampx::impl
