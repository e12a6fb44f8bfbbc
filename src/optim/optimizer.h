// optimizer.h -- SGD and Adam/AdamW over a parameter list, with fp32 master
// weights for F16/BF16 parameters and every per-step scalar on the device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend_amp.h"
#include "core/context.h"
#include "core/tensor.h"
#include "optim/grad_sync.h"
#include "optim/precision_observer.h"

namespace ampx::impl {

class LossScaler;

// Where an optimizer is in a loss-scaled iteration (torch's OptState).
enum class AmpState { Ready, Unscaled, Stepped };

enum class OptimizerKind : uint32_t { Sgd = 1, Adam = 2 };

struct OptimizerHyper {
  OptimizerKind kind = OptimizerKind::Sgd;
  math::SgdConfig sgd{};
  math::AdamConfig adam{};
  double lr = 1e-3;
  double weight_decay = 0.0;
};

// Throws AMPX_ERR_INVALID_ARGUMENT naming the option when a value is out of
// range (negative lr, betas outside [0, 1), nesterov without momentum...).
void validate_hyper(const OptimizerHyper& hyper);

// Throws AMPX_ERR_INVALID_ARGUMENT naming the field when a schedule cannot
// be run (an unknown decay, negative warm-up, no decay steps, factors
// outside [0, 1], a gamma outside (0, 1], a min_lr that is not a float
// rate). base_lr is checked as the group's lr is.
void validate_schedule(const math::LrSchedule& schedule);

class FusedOptimizer : public Object {
 public:
  static constexpr uint64_t kLiveMagic = 0x414d50582d4f5054ull;  // "AMPX-OPT"
  static constexpr uint64_t kDeadMagic = 0x646561642d6f7074ull;  // "dead-opt"

  struct Param {
    TensorRef param;            // the program's parameter
    TensorRef master;           // empty when param is F32
    TensorRef state[3];         // momentum/exp_avg, exp_avg_sq, max_exp_avg_sq
    TensorRef unscaled_grad;    // F32 copy of an F16/BF16 grad, made by unscale
    bool use_unscaled = false;  // unscaled_grad holds this iteration's gradient
    int32_t group = 0;

    DeviceTensor& master_or_param() const { return master ? *master : *param; }
  };

  static FusedOptimizer* create(DeviceContext& ctx, const std::vector<DeviceTensor*>& params,
                                const OptimizerHyper& hyper);
  void release();

  DeviceContext& context() const { return *ctx_; }
  const OptimizerHyper& hyper() const { return hyper_; }
  const std::vector<Param>& params() const { return params_; }
  int32_t group_count() const { return static_cast<int32_t>(schedules_host_.size()); }

  // A new param group (ORDER between an unscale/step and the update).
  int32_t add_group(const std::vector<DeviceTensor*>& params, double lr, double weight_decay);
  // A group's lr is the base (peak) rate of its schedule.
  void set_lr(int32_t group, double lr);
  double lr(int32_t group) const;
  double weight_decay(int32_t group) const {
    return weight_decay_host_[static_cast<size_t>(check_group(group))];
  }

  // The group's schedule from the next step on (its base_lr is ignored: the
  // group's lr is the base). Does not wait for the device.
  void set_schedule(int32_t group, const math::LrSchedule& schedule);
  const math::LrSchedule& schedule(int32_t group) const;
  // Steps taken since creation (skipped ones do not count), the position of
  // every group's schedule; synchronizes.
  int64_t step_count();

  // One step over every parameter with a gradient; skipped on the device
  // when found_inf (device, may be nullptr) is non-zero.
  void step(const float* found_inf);
  // ampx_optimizer_step: a step on the gradients as they are, refused
  // (ORDER) when an enabled scaler's scale is still in them.
  void step_unscaled();
  // Whether the latest step was taken (not skipped); synchronizes. ORDER
  // before the first step.
  bool last_step_taken();

  // ZeRO-1: the parameter list becomes `pieces`, each a 1-D view of the
  // elements [first, first + numel) of parameter `source`, with master and
  // state copied from that range of the source's and its step count; the
  // rest of the state is freed. Changes nothing when it throws.
  struct Piece {
    size_t source;
    DeviceTensor* view;  // borrowed; the optimizer retains it
    int64_t first;
  };
  void keep_pieces(const std::vector<Piece>& pieces);
  bool sharded() const { return sharded_; }

  // A parameter's state tensor of `kind`; NOT_SUPPORTED when this optimizer
  // keeps none (SGD without momentum, SGD's second moments, amsgrad off).
  enum class StateKind { Master, Momentum, ExpAvgSq, MaxExpAvgSq };
  DeviceTensor& state_tensor(const DeviceTensor& param, StateKind kind) const;
  void zero_grad();

  // The gradients the next step uses (unscaled copies where they exist),
  // one span per parameter that has a gradient, with their parameters.
  std::vector<TensorSpan> effective_grads(std::vector<const Param*>* owners = nullptr) const;

  // LossScaler support: makes sure every F16/BF16 gradient has an fp32
  // unscaled_grad buffer (allocating all before changing anything), and
  // returns the (in, out) spans unscale writes, one per parameter with a
  // gradient, in parameter order.
  void prepare_unscale(std::vector<TensorSpan>& ins, std::vector<TensorSpan>& outs);
  void mark_unscaled(bool unscaled);

  DeviceTensor& found_inf() const { return *found_inf_; }
  // The step counts (I64[params], each parameter's) and the steps taken
  // (I64[1], the schedules' position), which data-parallel setup
  // broadcasts with the parameters.
  DeviceTensor& param_step_counts() const { return *steps_; }
  DeviceTensor& steps_taken() const { return *step_count_; }
  bool has_stepped() const { return has_stepped_; }
  DeviceTensor& last_step_skipped() const { return *last_step_skipped_; }

  const Param& param_entry(const DeviceTensor& param, const char* arg) const;
  int64_t param_steps(const DeviceTensor& param);  // synchronizes

  size_t state_size() const;
  // Whether load_state takes a state of `bytes` for this optimizer's shape:
  // state_size(), or the size of the version-1 format (without schedules).
  bool loads_state_of_size(size_t bytes) const;
  void save_state(void* buffer, size_t bytes);
  // ORDER between an unscale/step and the update.
  void load_state(const void* buffer, size_t bytes);

  // Completes the cross-rank reduction of the gradients, when a
  // GradientSync is attached, before `op` reads them.
  void sync_gradients(const char* op) {
    if (grad_sync) grad_sync->complete_gradients(op);
  }

  // Set by the scaler the optimizer is attached to.
  LossScaler* scaler = nullptr;  // retained while attached
  // Set while a data-parallel wrapper (dist/data_parallel.h) owns the
  // gradients' reduction; it retains the optimizer meanwhile.
  GradientSync* grad_sync = nullptr;
  // Set while a precision doctor watches this optimizer; it retains the
  // optimizer meanwhile.
  PrecisionObserver* observer = nullptr;
  AmpState amp_state = AmpState::Ready;

 private:
  FusedOptimizer(DeviceContext& ctx, const OptimizerHyper& hyper);
  // The shell outlives release() in the context's quarantine, so it owns
  // nothing by then: release() frees everything through free_resources().
  ~FusedOptimizer();
  static void destroy_shell(Object* shell) { delete static_cast<FusedOptimizer*>(shell); }
  void free_resources();

  // New entries for `params` in `group`, with masters and zeroed state;
  // nothing is added to the optimizer until the caller commits them.
  std::vector<Param> make_params(const std::vector<DeviceTensor*>& params, int32_t group) const;
  int state_count() const;
  void write_lr(int32_t group);
  void write_weight_decay(int32_t group);
  void write_schedule(int32_t group);
  void fill_schedule(int64_t* words, const math::LrSchedule& schedule);
  static constexpr int kScheduleWords = sizeof(math::LrSchedule) / sizeof(int64_t);
  int64_t* schedule_words(int32_t group) const {
    return static_cast<int64_t*>(schedules_->data()) + kScheduleWords * group;
  }
  int32_t check_group(int32_t group) const;
  // Some group's schedule is not constant: the step computes the rates.
  bool scheduled() const;
  size_t state_size_of(uint32_t version) const;

  DeviceContext* ctx_;
  OptimizerHyper hyper_;
  std::vector<Param> params_;
  std::vector<double> weight_decay_host_;
  // Per group; base_lr is the group's lr (as last set).
  std::vector<math::LrSchedule> schedules_host_;
  TensorRef lr_;                 // F32[groups] on the device
  TensorRef schedules_;          // math::LrSchedule[groups], as I64[8 * groups]
  TensorRef step_count_;         // I64[1]: steps taken
  TensorRef weight_decay_;       // F32[groups]
  TensorRef steps_;              // I64[params]
  TensorRef found_inf_;          // F32[1]: set by the scaler's unscale
  TensorRef last_step_skipped_;  // F32[1]: found_inf as the last step saw it
  bool has_stepped_ = false;
  bool sharded_ = false;
};

}  // namespace ampx::impl
