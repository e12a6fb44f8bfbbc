// doctor.h -- the precision doctor: watches one optimizer (and the scaler it
// is attached to) and keeps, on the device, per-parameter gradient
// statistics of every interval-th step and a history of every step's scale
// and inf check; reads them back and diagnoses them only when asked.
//
// A step's work, when the doctor is on (interval > 0):
//   scaler's unscale   unscale_with_stats with per-parameter non-finite
//                      flags; on a sampled step with the statistics too
//                      (one pass either way), then one history entry;
//   optimizer's step   on a sampled step, a copy of the 16-bit parameters
//                      and their masters before, the lost-update count
//                      after; without a scaler, a statistics-only pass and
//                      the history entry of the sampled step.
// With interval 0 nothing of this runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend_grad_stats.h"
#include "core/context.h"
#include "core/tensor.h"
#include "doctor/diagnose.h"
#include "doctor/report.h"
#include "optim/optimizer.h"
#include "optim/precision_observer.h"

namespace ampx::impl {

struct DoctorOptions {
  int32_t interval = 100;  // sample every interval-th step (1, 1 + interval, ...); 0: off
  int32_t history = 4096;  // history entries kept (the latest)
};

// Throws AMPX_ERR_INVALID_ARGUMENT naming the option.
void validate_doctor_options(const DoctorOptions& options);

class Doctor final : public Object, public PrecisionObserver {
 public:
  static constexpr uint64_t kLiveMagic = 0x414d50582d444f43ull;  // "AMPX-DOC"
  static constexpr uint64_t kDeadMagic = 0x646561642d646f63ull;  // "dead-doc"

  // Attaches to `optimizer` (which it retains); INVALID_ARGUMENT when one
  // is attached already, NOT_SUPPORTED when the backend lacks gradient
  // statistics.
  static Doctor* create(FusedOptimizer& optimizer, const DoctorOptions& options);
  void release();

  FusedOptimizer& optimizer() const { return *optimizer_; }
  int32_t interval() const { return options_.interval; }
  // Takes effect from the next step; INVALID_ARGUMENT when negative.
  void set_interval(int32_t interval);

  // Reads the device state back (synchronizes) when steps were taken since
  // the last read, and diagnoses it. The reference stays valid until the
  // next call.
  const doctor::Report& examine();
  // The findings of the latest examine(), with their codes.
  const std::vector<doctor::Finding>& findings() const { return findings_; }
  int64_t missed_steps() const { return missed_steps_; }

  // PrecisionObserver.
  void unscale(const std::vector<TensorSpan>& ins, const std::vector<TensorSpan>& outs,
               const float* scale, float* found_inf) override;
  void after_unscale(const float* scale, const float* found_inf) override;
  void before_step() override;
  void after_step() override;

 private:
  Doctor(FusedOptimizer& optimizer, const DoctorOptions& options);
  ~Doctor();
  static void destroy_shell(Object* shell) { delete static_cast<Doctor*>(shell); }

  // The parameters' spans in parameter order; those without a gradient are
  // empty.
  std::vector<TensorSpan> spans_by_param(const std::vector<TensorSpan>& with_grad) const;
  // Starts the iteration's bookkeeping at its first hook; false when the
  // doctor does nothing this step.
  bool begin_iteration();
  // Device buffers for the optimizer's current parameters; false (and the
  // step goes unobserved) when memory ran out.
  bool ensure_buffers();
  bool ensure_snapshots();
  void record(const float* scale, const float* found_inf);
  void read_back();

  DeviceContext* ctx_;
  FusedOptimizer* optimizer_;
  GradStatsPrimitives* stats_;
  DoctorOptions options_;

  TensorRef records_;                    // math::GradStatsRecord[params]
  TensorRef flags_;                      // I32[params]: non-finite gradient this step
  TensorRef history_;                    // math::DoctorSample[options_.history]
  TensorRef sample_scale_;               // F32[1]: the scale of the latest sample
  std::vector<TensorRef> param_before_;  // per parameter: copy before the step (16-bit ones)
  std::vector<TensorRef> master_before_;
  size_t params_ = 0;  // parameters the buffers are for

  int64_t steps_ = 0;         // steps completed
  int64_t entries_ = 0;       // history entries written
  int64_t sample_step_ = 0;   // the latest sampled step
  int64_t missed_steps_ = 0;  // steps not observed for lack of memory
  bool in_iteration_ = false;
  bool active_ = false;     // this iteration is observed
  bool sampled_ = false;    // ... and sampled
  bool unscaled_ = false;   // the scaler's unscale ran this iteration
  bool snapshots_ = false;  // the copies before the step were taken

  int64_t read_steps_ = -1;  // steps_ when the report was made
  doctor::Report report_;
  std::vector<doctor::Finding> findings_;
};

}  // namespace ampx::impl
