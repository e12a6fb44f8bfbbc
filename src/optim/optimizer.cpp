#include "optim/optimizer.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "math/convert.h"

namespace ampx::impl {
namespace {

uint32_t float_bits_of(double value) {
  const float f = math::double_to_float(value);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

void check_non_negative(double value, const char* name) {
  if (!(value >= 0.0) || !std::isfinite(value))
    fail(AMPX_ERR_INVALID_ARGUMENT, name, " is ", value, "; it must be finite and >= 0");
}

// lr and weight decay reach the device as floats: 1e300 would be inf there.
void check_float_rate(double value, const char* name) {
  if (!(value >= 0.0) || !(value <= FLT_MAX))
    fail(AMPX_ERR_INVALID_ARGUMENT, name, " is ", value,
         "; it must be >= 0 and finite as the float the device uses (at most FLT_MAX, ", FLT_MAX,
         ")");
}

// ---- state serialisation ---------------------------------------------------

constexpr char kStateMagic[8] = {'A', 'M', 'P', 'X', 'O', 'P', 'T', '\0'};
// Version 2 adds the step count and the groups' schedules; version 1 states
// (from before schedules) still load.
constexpr uint32_t kStateVersion = 2;

struct StateHeader {
  char magic[8];
  uint32_t version;
  uint32_t kind;
  uint32_t group_count;
  uint32_t param_count;
  uint32_t state_count;
  uint32_t nesterov;
  uint32_t maximize;
  uint32_t amsgrad;
  uint32_t decoupled_weight_decay;
  uint32_t reserved;
  double momentum;
  double dampening;
  double beta1;
  double beta2;
  double eps;
};

struct StateGroup {
  double lr;
  double weight_decay;
};

struct StateParam {
  uint32_t group;
  uint32_t dtype;
  uint32_t ndim;
  uint32_t reserved;
  int64_t dims[kMaxDims];
  int64_t steps;
};

uint64_t fnv1a(const unsigned char* data, size_t bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace

void validate_hyper(const OptimizerHyper& h) {
  check_float_rate(h.lr, "lr");
  check_float_rate(h.weight_decay, "weight_decay");
  if (h.kind == OptimizerKind::Sgd) {
    check_non_negative(h.sgd.momentum, "momentum");
    if (!std::isfinite(h.sgd.dampening))
      fail(AMPX_ERR_INVALID_ARGUMENT, "dampening is ", h.sgd.dampening, "; it must be finite");
    if (h.sgd.nesterov && (h.sgd.momentum <= 0.0f || h.sgd.dampening != 0.0f))
      fail(AMPX_ERR_INVALID_ARGUMENT, "nesterov needs momentum > 0 and dampening 0 (momentum is ",
           h.sgd.momentum, ", dampening ", h.sgd.dampening, ")");
  } else {
    if (!(h.adam.beta1 >= 0.0 && h.adam.beta1 < 1.0))
      fail(AMPX_ERR_INVALID_ARGUMENT, "beta1 is ", h.adam.beta1, "; it must be in [0, 1)");
    if (!(h.adam.beta2 >= 0.0 && h.adam.beta2 < 1.0))
      fail(AMPX_ERR_INVALID_ARGUMENT, "beta2 is ", h.adam.beta2, "; it must be in [0, 1)");
    check_non_negative(h.adam.eps, "eps");
  }
}

void validate_schedule(const math::LrSchedule& s) {
  check_float_rate(s.base_lr, "lr");
  if (s.warmup_steps < 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "warmup_steps is ", s.warmup_steps, "; it must be >= 0");
  if (!(s.warmup_start_factor >= 0.0 && s.warmup_start_factor <= 1.0))
    fail(AMPX_ERR_INVALID_ARGUMENT, "warmup_start_factor is ", s.warmup_start_factor,
         "; it must be in [0, 1]");
  switch (s.decay) {
    case math::kLrConstant:
      break;
    case math::kLrLinear:
    case math::kLrCosine:
      if (s.decay_steps <= 0)
        fail(AMPX_ERR_INVALID_ARGUMENT, "total_steps is ", s.warmup_steps + s.decay_steps,
             " with warmup_steps ", s.warmup_steps, "; ",
             s.decay == math::kLrLinear ? "linear" : "cosine",
             " decay needs total_steps > warmup_steps (the decay runs over the steps between)");
      if (s.decay == math::kLrLinear && !(s.end_factor >= 0.0 && s.end_factor <= 1.0))
        fail(AMPX_ERR_INVALID_ARGUMENT, "end_factor is ", s.end_factor, "; it must be in [0, 1]");
      if (s.decay == math::kLrCosine) check_float_rate(s.min_lr, "min_lr");
      // The cosine's period, 2 * (total_steps - warmup_steps), is an int64.
      if (s.decay == math::kLrCosine && s.decay_steps > (int64_t{1} << 61))
        fail(AMPX_ERR_INVALID_ARGUMENT, "total_steps - warmup_steps is ", s.decay_steps,
             "; cosine decay takes at most 2^61 steps");
      break;
    case math::kLrStep:
      if (s.decay_steps <= 0)
        fail(AMPX_ERR_INVALID_ARGUMENT, "step_size is ", s.decay_steps, "; it must be > 0");
      if (!(s.gamma > 0.0 && s.gamma <= 1.0))
        fail(AMPX_ERR_INVALID_ARGUMENT, "gamma is ", s.gamma, "; it must be in (0, 1]");
      break;
    default:
      fail(AMPX_ERR_INVALID_ARGUMENT, "decay is ", s.decay,
           ", which is not an ampx_lr_decay (CONSTANT, LINEAR, COSINE or STEP)");
  }
}

FusedOptimizer::FusedOptimizer(DeviceContext& ctx, const OptimizerHyper& hyper)
    : Object(kLiveMagic, &FusedOptimizer::destroy_shell), ctx_(&ctx), hyper_(hyper) {
  ctx.retain();
}

FusedOptimizer::~FusedOptimizer() = default;

void FusedOptimizer::free_resources() {
  params_.clear();
  lr_.reset();
  schedules_.reset();
  step_count_.reset();
  weight_decay_.reset();
  steps_.reset();
  iteration_.free();
}

FusedOptimizer* FusedOptimizer::create(DeviceContext& ctx, const std::vector<DeviceTensor*>& params,
                                       const OptimizerHyper& hyper) {
  validate_hyper(hyper);
  auto* opt = new FusedOptimizer(ctx, hyper);
  try {
    opt->iteration_.allocate(ctx);
    opt->step_count_ = TensorRef(DeviceTensor::empty(ctx, DType::I64, vector_shape(1)));
    ctx.backend().fill(opt->step_count_->data(), 8, 0, 1);
    opt->add_group(params, hyper.lr, hyper.weight_decay);
  } catch (...) {
    opt->free_resources();
    ctx.release();
    delete opt;
    throw;
  }
  return opt;
}

void FusedOptimizer::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  magic = kDeadMagic;
  iteration_.detach_all();
  free_resources();
  DeviceContext& ctx = *ctx_;
  ctx.quarantine(this);
  ctx.release();
}

namespace {

int state_count_of(const OptimizerHyper& hyper) {
  if (hyper.kind == OptimizerKind::Sgd) return hyper.sgd.momentum != 0.0f ? 1 : 0;
  return hyper.adam.amsgrad ? 3 : 2;
}

}  // namespace

int FusedOptimizer::state_count() const { return state_count_of(hyper_); }

std::vector<FusedOptimizer::Param> FusedOptimizer::make_params(
    const std::vector<DeviceTensor*>& params, int32_t group) const {
  std::vector<Param> made;
  made.reserve(params.size());
  for (DeviceTensor* t : params) {
    Param entry;
    entry.group = group;
    t->retain();
    entry.param = TensorRef(t);
    if (t->dtype != DType::F32) {
      entry.master = TensorRef(DeviceTensor::empty(*ctx_, DType::F32, t->shape));
      if (t->numel() > 0)
        ctx_->backend().convert(entry.master->data(), DType::F32, t->data(), t->dtype, t->numel());
    }
    for (int k = 0; k < state_count(); ++k)
      entry.state[k] = TensorRef(make_filled_f32(*ctx_, t->shape, 0.0f));
    made.push_back(std::move(entry));
  }
  return made;
}

int32_t FusedOptimizer::add_group(const std::vector<DeviceTensor*>& params, double lr,
                                  double weight_decay) {
  iteration_.require_between_iterations(
      "param groups can only be added between iterations (after "
      "ampx_scaler_update), not between unscale/step and update");
  if (iteration_.gradient_sync())
    fail(AMPX_ERR_ORDER,
         "the optimizer is wrapped for data-parallel training, whose gradient "
         "buckets are fixed; add param groups before ampx_data_parallel_create");
  check_float_rate(lr, "lr");
  check_float_rate(weight_decay, "weight_decay");
  std::unordered_set<const DeviceTensor*> seen;
  for (const Param& p : params_) seen.insert(p.param.get());
  for (size_t i = 0; i < params.size(); ++i) {
    const DeviceTensor* t = params[i];
    if (t->ctx != ctx_)
      fail(AMPX_ERR_DEVICE, "params[", i, "] belongs to a different context than the optimizer");
    if (!is_floating(t->dtype))
      fail(AMPX_ERR_DTYPE, "params[", i, "] is ", t->describe(),
           "; parameters must be f32, f16 or bf16");
    if (!seen.insert(t).second)
      fail(AMPX_ERR_INVALID_ARGUMENT, "params[", i, "] (", t->describe(),
           t->name.empty() ? "" : " '", t->name, t->name.empty() ? "" : "'",
           ") appears more than once in the optimizer");
  }
  const int32_t group = group_count();
  const int64_t old_params = static_cast<int64_t>(params_.size());
  const int64_t new_params = old_params + static_cast<int64_t>(params.size());

  std::vector<Param> made = make_params(params, group);
  {
    Backend& backend = ctx_->backend();
    TensorRef lr_new(DeviceTensor::empty(*ctx_, DType::F32, vector_shape(group + 1)));
    TensorRef wd_new(DeviceTensor::empty(*ctx_, DType::F32, vector_shape(group + 1)));
    TensorRef steps_new(DeviceTensor::empty(*ctx_, DType::I64, vector_shape(new_params)));
    TensorRef schedules_new(
        DeviceTensor::empty(*ctx_, DType::I64, vector_shape(kScheduleWords * (group + 1))));
    if (group > 0) {
      backend.copy(lr_new->data(), lr_->data(), lr_->nbytes());
      backend.copy(wd_new->data(), weight_decay_->data(), weight_decay_->nbytes());
      backend.copy(schedules_new->data(), schedules_->data(), schedules_->nbytes());
    }
    if (old_params > 0) backend.copy(steps_new->data(), steps_->data(), steps_->nbytes());
    if (new_params > old_params)
      backend.fill(static_cast<int64_t*>(steps_new->data()) + old_params, 8, 0,
                   new_params - old_params);
    backend.fill(static_cast<float*>(lr_new->data()) + group, 4, float_bits_of(lr), 1);
    backend.fill(static_cast<float*>(wd_new->data()) + group, 4, float_bits_of(weight_decay), 1);
    fill_schedule(static_cast<int64_t*>(schedules_new->data()) + kScheduleWords * group,
                  math::constant_schedule(lr));
    weight_decay_host_.reserve(weight_decay_host_.size() + 1);
    schedules_host_.reserve(schedules_host_.size() + 1);
    params_.reserve(params_.size() + made.size());
    // Nothing below can fail: commit.
    lr_ = std::move(lr_new);
    weight_decay_ = std::move(wd_new);
    steps_ = std::move(steps_new);
    schedules_ = std::move(schedules_new);
  }
  weight_decay_host_.push_back(weight_decay);
  schedules_host_.push_back(math::constant_schedule(lr));
  for (Param& p : made) params_.push_back(std::move(p));
  return group;
}

void FusedOptimizer::keep_pieces(const std::vector<Piece>& pieces) {
  Backend& backend = ctx_->backend();
  std::vector<Param> made;
  made.reserve(pieces.size());
  TensorRef steps_new(
      DeviceTensor::empty(*ctx_, DType::I64, vector_shape(static_cast<int64_t>(pieces.size()))));
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    const Param& source = params_.at(piece.source);
    const Shape shape = piece.view->shape;
    const size_t offset = static_cast<size_t>(piece.first) * sizeof(float);
    const size_t bytes = static_cast<size_t>(piece.view->numel()) * sizeof(float);
    Param entry;
    entry.group = source.group;
    entry.param = retained(*piece.view);
    if (source.master) {
      entry.master = TensorRef(DeviceTensor::empty(*ctx_, DType::F32, shape));
      backend.copy(entry.master->data(), static_cast<char*>(source.master->data()) + offset, bytes);
    }
    for (int k = 0; k < state_count(); ++k) {
      entry.state[k] = TensorRef(DeviceTensor::empty(*ctx_, DType::F32, shape));
      backend.copy(entry.state[k]->data(), static_cast<char*>(source.state[k]->data()) + offset,
                   bytes);
    }
    backend.copy(static_cast<int64_t*>(steps_new->data()) + i,
                 static_cast<const int64_t*>(steps_->data()) + piece.source, sizeof(int64_t));
    made.push_back(std::move(entry));
  }
  params_ = std::move(made);
  steps_ = std::move(steps_new);
  sharded_ = true;
}

void FusedOptimizer::set_lr(int32_t group, double lr) {
  check_group(group);
  check_float_rate(lr, "lr");
  math::LrSchedule& schedule = schedules_host_[static_cast<size_t>(group)];
  schedule.base_lr = lr;
  write_lr(group);
  // The device reads a record only while it is not constant (set_schedule
  // writes it whole): a program that sets the rate itself every step pays
  // for one fill, as before schedules.
  if (math::is_constant(schedule)) return;
  uint64_t base_bits;
  std::memcpy(&base_bits, &lr, sizeof base_bits);
  ctx_->backend().fill(schedule_words(group), 8, base_bits, 1);  // LrSchedule::base_lr
}

double FusedOptimizer::lr(int32_t group) const {
  return schedules_host_[static_cast<size_t>(check_group(group))].base_lr;
}

int32_t FusedOptimizer::check_group(int32_t group) const {
  if (group < 0 || group >= group_count())
    fail(AMPX_ERR_INVALID_ARGUMENT, "group is ", group, " but the optimizer has ", group_count(),
         " group(s)");
  return group;
}

void FusedOptimizer::set_schedule(int32_t group, const math::LrSchedule& schedule) {
  check_group(group);
  math::LrSchedule s = schedule;
  s.base_lr = lr(group);
  validate_schedule(s);
  fill_schedule(schedule_words(group), s);
  // A group whose schedule became constant steps at its base rate again.
  write_lr(group);
  schedules_host_[static_cast<size_t>(group)] = s;
}

bool FusedOptimizer::scheduled() const {
  for (const math::LrSchedule& s : schedules_host_)
    if (!math::is_constant(s)) return true;
  return false;
}

const math::LrSchedule& FusedOptimizer::schedule(int32_t group) const {
  return schedules_host_[static_cast<size_t>(check_group(group))];
}

int64_t FusedOptimizer::step_count() {
  int64_t steps = 0;
  ctx_->read_to_host(&steps, step_count_->data(), sizeof steps);
  return steps;
}

std::vector<TensorSpan> FusedOptimizer::effective_grads(std::vector<const Param*>* owners) const {
  std::vector<TensorSpan> spans;
  for (const Param& p : params_) {
    const DeviceTensor* g = p.param->grad;
    if (!g) continue;
    if (p.use_unscaled)
      spans.push_back({p.unscaled_grad->data(), DType::F32, p.unscaled_grad->numel()});
    else
      spans.push_back({g->data(), g->dtype, g->numel()});
    if (owners) owners->push_back(&p);
  }
  return spans;
}

void FusedOptimizer::apply_step(const float* found_inf) {
  AmpPrimitives& amp = ctx_->backend().require<AmpPrimitives>("the optimizer step");
  std::vector<OptimParam> list;
  auto* steps = static_cast<int64_t*>(steps_->data());
  // Step counters advance in runs of consecutive parameters that have a
  // gradient (usually one run: all of them).
  int64_t run_begin = -1;
  auto flush_run = [&](int64_t end) {
    if (run_begin >= 0) amp.increment_steps(steps + run_begin, end - run_begin, found_inf);
    run_begin = -1;
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    const DeviceTensor* g = p.param->grad;
    if (!g) {
      flush_run(static_cast<int64_t>(i));
      continue;
    }
    if (run_begin < 0) run_begin = static_cast<int64_t>(i);
    OptimParam op{};
    op.param = p.param->data();
    op.param_dtype = p.param->dtype;
    op.master = p.master ? static_cast<float*>(p.master->data()) : nullptr;
    if (p.use_unscaled) {
      op.grad = p.unscaled_grad->data();
      op.grad_dtype = DType::F32;
    } else {
      op.grad = g->data();
      op.grad_dtype = g->dtype;
    }
    float* state[3] = {};
    for (int k = 0; k < 3; ++k)
      if (p.state[k]) state[k] = static_cast<float*>(p.state[k]->data());
    op.momentum = state[0];
    op.exp_avg_sq = state[1];
    op.max_exp_avg_sq = state[2];
    op.step = steps + i;
    op.count = p.param->numel();
    op.group = p.group;
    list.push_back(op);
  }
  flush_run(static_cast<int64_t>(params_.size()));
  if (scheduled())
    amp.lr_schedule(static_cast<const math::LrSchedule*>(schedules_->data()), group_count(),
                    static_cast<const int64_t*>(step_count_->data()),
                    static_cast<float*>(lr_->data()));

  StepScalars scalars{found_inf, static_cast<const float*>(lr_->data()),
                      static_cast<const float*>(weight_decay_->data())};
  if (hyper_.kind == OptimizerKind::Sgd)
    amp.sgd_step(list, hyper_.sgd, scalars);
  else
    amp.adam_step(list, hyper_.adam, scalars);
  amp.increment_steps(static_cast<int64_t*>(step_count_->data()), 1, found_inf);
  for (const Param& p : params_)
    if (p.param->grad) p.param->storage->note_write();
}

DeviceTensor& FusedOptimizer::state_tensor(const DeviceTensor& param, StateKind kind) const {
  const Param& entry = param_entry(param, "param");
  const bool adam = hyper_.kind == OptimizerKind::Adam;
  switch (kind) {
    case StateKind::Master:
      return entry.master_or_param();
    case StateKind::Momentum:
      if (!entry.state[0])
        fail(AMPX_ERR_NOT_SUPPORTED, "this optimizer keeps no momentum buffer (momentum is 0)");
      return *entry.state[0];
    case StateKind::ExpAvgSq:
      if (!adam)
        fail(AMPX_ERR_NOT_SUPPORTED, "this optimizer keeps no exp_avg_sq (it is not Adam)");
      return *entry.state[1];
    case StateKind::MaxExpAvgSq:
      if (!adam || !entry.state[2])
        fail(AMPX_ERR_NOT_SUPPORTED, "this optimizer keeps no max_exp_avg_sq (amsgrad is off)");
      return *entry.state[2];
  }
  fail(AMPX_ERR_INTERNAL, "unknown optimizer state kind");
}

void FusedOptimizer::zero_grad() {
  iteration_.forget_loss_scale();  // zeros carry no scale
  if (iteration_.zero_synced_gradients()) return;
  // A gradient a create_graph backward made is a recorded op's output:
  // zeroed in place it would stay one, and the next create_graph backward
  // would record old + new, chaining every iteration's graph to the next
  // (and differentiating through the old one). It is replaced by a new
  // tensor that records nothing (zeroed below), as torch detaches it; the
  // replacements are made first, so running out of memory changes nothing.
  std::vector<TensorRef> detached(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const DeviceTensor* g = params_[i].param->grad;
    if (g && g->tape_generation != 0)
      detached[i] = TensorRef(DeviceTensor::empty(*ctx_, g->dtype, g->shape));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!detached[i]) continue;
    DeviceTensor& param = *params_[i].param;
    DeviceTensor* old = param.grad;
    param.grad = detached[i].take();
    old->release();
  }
  for (const Param& p : params_) {
    DeviceTensor* g = p.param->grad;
    if (g && g->numel() > 0) {
      ctx_->backend().fill(g->data(), dtype_size(g->dtype), 0, g->numel());
      g->storage->note_write();
    }
  }
}

void FusedOptimizer::prepare_unscale(std::vector<TensorSpan>& ins, std::vector<TensorSpan>& outs) {
  // Allocate every missing fp32 buffer first, so running out of memory
  // changes nothing.
  std::vector<std::pair<Param*, TensorRef>> allocated;
  for (Param& p : params_) {
    const DeviceTensor* g = p.param->grad;
    if (!g || g->dtype == DType::F32) continue;
    if (p.unscaled_grad && p.unscaled_grad->numel() == g->numel()) continue;
    allocated.emplace_back(&p, TensorRef(DeviceTensor::empty(*ctx_, DType::F32, p.param->shape)));
  }
  for (auto& [p, buffer] : allocated) {
    p->unscaled_grad = std::move(buffer);
  }
  for (Param& p : params_) {
    DeviceTensor* g = p.param->grad;
    if (!g) continue;
    ins.push_back({g->data(), g->dtype, g->numel()});
    if (g->dtype == DType::F32)
      outs.push_back({g->data(), DType::F32, g->numel()});
    else
      outs.push_back({p.unscaled_grad->data(), DType::F32, g->numel()});
  }
}

void FusedOptimizer::mark_unscaled(bool unscaled) {
  for (Param& p : params_) {
    const DeviceTensor* g = p.param->grad;
    p.use_unscaled = unscaled && g && g->dtype != DType::F32;
  }
}

const FusedOptimizer::Param& FusedOptimizer::param_entry(const DeviceTensor& param,
                                                         const char* arg) const {
  if (sharded_)
    fail(AMPX_ERR_NOT_SUPPORTED,
         "the optimizer's state is sharded over the ranks (ZeRO-1): this "
         "rank keeps the state of parts of parameters only");
  for (const Param& p : params_)
    if (p.param.get() == &param) return p;
  fail(AMPX_ERR_INVALID_ARGUMENT, "argument '", arg, "' (", param.describe(),
       param.name.empty() ? "" : " '", param.name, param.name.empty() ? "" : "'",
       ") is not a parameter of this optimizer");
}

int64_t FusedOptimizer::param_steps(const DeviceTensor& param) {
  const Param& entry = param_entry(param, "param");
  const size_t index = static_cast<size_t>(&entry - params_.data());
  int64_t steps = 0;
  ctx_->read_to_host(&steps, static_cast<const int64_t*>(steps_->data()) + index, sizeof steps);
  return steps;
}

// ---- state save / load ----------------------------------------------------

size_t FusedOptimizer::state_size_of(uint32_t version) const {
  size_t bytes = sizeof(StateHeader) + sizeof(StateGroup) * schedules_host_.size() +
                 sizeof(StateParam) * params_.size();
  if (version >= 2) bytes += sizeof(int64_t) + sizeof(math::LrSchedule) * schedules_host_.size();
  for (const Param& p : params_)
    bytes += static_cast<size_t>(p.param->numel()) * sizeof(float) *
             static_cast<size_t>(1 + state_count());
  return bytes + sizeof(uint64_t);
}

size_t FusedOptimizer::state_size() const { return state_size_of(kStateVersion); }

bool FusedOptimizer::loads_state_of_size(size_t bytes) const {
  return bytes == state_size_of(kStateVersion) || bytes == state_size_of(1);
}

void FusedOptimizer::save_state(void* buffer, size_t bytes) {
  if (bytes != state_size())
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'bytes' is ", bytes, " but the state takes ",
         state_size(), " bytes (ampx_optimizer_state_size)");
  auto* out = static_cast<unsigned char*>(buffer);
  StateHeader header{};
  std::memcpy(header.magic, kStateMagic, sizeof kStateMagic);
  header.version = kStateVersion;
  header.kind = static_cast<uint32_t>(hyper_.kind);
  header.group_count = static_cast<uint32_t>(schedules_host_.size());
  header.param_count = static_cast<uint32_t>(params_.size());
  header.state_count = static_cast<uint32_t>(state_count());
  header.nesterov = hyper_.sgd.nesterov;
  header.maximize = hyper_.kind == OptimizerKind::Sgd ? hyper_.sgd.maximize : hyper_.adam.maximize;
  header.amsgrad = hyper_.adam.amsgrad;
  header.decoupled_weight_decay = hyper_.adam.decoupled_weight_decay;
  header.momentum = hyper_.sgd.momentum;
  header.dampening = hyper_.sgd.dampening;
  header.beta1 = hyper_.adam.beta1;
  header.beta2 = hyper_.adam.beta2;
  header.eps = hyper_.adam.eps;
  std::memcpy(out, &header, sizeof header);
  size_t at = sizeof header;
  for (size_t g = 0; g < schedules_host_.size(); ++g) {
    StateGroup group{schedules_host_[g].base_lr, weight_decay_host_[g]};
    std::memcpy(out + at, &group, sizeof group);
    at += sizeof group;
  }
  const int64_t taken = step_count();
  std::memcpy(out + at, &taken, sizeof taken);
  at += sizeof taken;
  for (const math::LrSchedule& schedule : schedules_host_) {
    std::memcpy(out + at, &schedule, sizeof schedule);
    at += sizeof schedule;
  }
  std::vector<int64_t> steps(params_.size());
  Backend& backend = ctx_->backend();
  if (!steps.empty()) ctx_->read_to_host(steps.data(), steps_->data(), steps_->nbytes());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    StateParam sp{};
    sp.group = static_cast<uint32_t>(p.group);
    sp.dtype = static_cast<uint32_t>(p.param->dtype);
    sp.ndim = static_cast<uint32_t>(p.param->shape.ndim);
    std::memcpy(sp.dims, p.param->shape.dims, sizeof sp.dims);
    sp.steps = steps[i];
    std::memcpy(out + at, &sp, sizeof sp);
    at += sizeof sp;
  }
  for (const Param& p : params_) {
    const size_t n = p.param->numel() * sizeof(float);
    if (n == 0) continue;
    backend.copy_to_host(out + at, p.master_or_param().data(), n);
    at += n;
    for (int k = 0; k < state_count(); ++k) {
      backend.copy_to_host(out + at, p.state[k]->data(), n);
      at += n;
    }
  }
  const uint64_t checksum = fnv1a(out, at);
  std::memcpy(out + at, &checksum, sizeof checksum);
}

void FusedOptimizer::load_state(const void* buffer, size_t bytes) {
  iteration_.require_between_iterations(
      "optimizer state can only be loaded between iterations (after "
      "ampx_scaler_update)");
  const auto* in = static_cast<const unsigned char*>(buffer);
  StateHeader header{};
  if (bytes < sizeof header + sizeof(uint64_t))
    fail(AMPX_ERR_CORRUPT, "the state is ", bytes, " bytes, too short to be an optimizer state");
  std::memcpy(&header, in, sizeof header);
  if (std::memcmp(header.magic, kStateMagic, sizeof kStateMagic) != 0)
    fail(AMPX_ERR_CORRUPT, "the buffer is not an ampx optimizer state (bad magic)");
  if (header.version != kStateVersion && header.version != 1)
    fail(AMPX_ERR_CORRUPT, "optimizer state format version ", header.version,
         " is not supported (this library reads versions 1 to ", kStateVersion, ")");
  uint64_t checksum = 0;
  std::memcpy(&checksum, in + bytes - sizeof checksum, sizeof checksum);
  if (checksum != fnv1a(in, bytes - sizeof checksum))
    fail(AMPX_ERR_CORRUPT, "the optimizer state's checksum does not match: the data is damaged");
  if (header.kind != static_cast<uint32_t>(hyper_.kind))
    fail(AMPX_ERR_CORRUPT, "the state was saved from ",
         header.kind == static_cast<uint32_t>(OptimizerKind::Sgd) ? "an SGD" : "an Adam",
         " optimizer but this one is ", hyper_.kind == OptimizerKind::Sgd ? "SGD" : "Adam");
  // AdamW is a kind of its own, as in checkpoint files: adopting the saved
  // flag would silently turn an Adam optimizer into AdamW (or back) under
  // a binding's Adam/AdamW class.
  if (hyper_.kind == OptimizerKind::Adam &&
      (header.decoupled_weight_decay != 0) != hyper_.adam.decoupled_weight_decay)
    fail(AMPX_ERR_CORRUPT, "the state was saved from an ",
         header.decoupled_weight_decay ? "AdamW" : "Adam", " optimizer but this one is ",
         hyper_.adam.decoupled_weight_decay ? "AdamW" : "Adam",
         "; create an optimizer of the saved kind to load it");
  if (header.group_count != schedules_host_.size() || header.param_count != params_.size())
    fail(AMPX_ERR_CORRUPT, "the state has ", header.group_count, " group(s) and ",
         header.param_count, " parameter(s) but the optimizer has ", schedules_host_.size(),
         " and ", params_.size());
  if (header.state_count != static_cast<uint32_t>(state_count()))
    fail(AMPX_ERR_CORRUPT, "the state keeps ", header.state_count,
         " buffer(s) per parameter but this optimizer keeps ", state_count(),
         " (momentum / amsgrad settings differ)");
  const size_t expected = state_size_of(header.version);
  if (bytes != expected)
    fail(AMPX_ERR_CORRUPT, "the state is ", bytes, " bytes but ", expected, " were expected");
  size_t at = sizeof header;
  std::vector<StateGroup> groups(schedules_host_.size());
  for (StateGroup& g : groups) {
    std::memcpy(&g, in + at, sizeof g);
    at += sizeof g;
    if (!(g.lr >= 0.0) || !(g.weight_decay >= 0.0) || !(g.lr <= FLT_MAX) ||
        !(g.weight_decay <= FLT_MAX))
      fail(AMPX_ERR_CORRUPT, "the state holds learning rate ", g.lr, " and weight decay ",
           g.weight_decay, "; each must be >= 0 and at most FLT_MAX");
  }
  // Version 1 has no schedules: every group keeps its rate, and the step
  // count is taken as the most any parameter has taken.
  int64_t taken = -1;
  std::vector<math::LrSchedule> schedules;
  if (header.version >= 2) {
    std::memcpy(&taken, in + at, sizeof taken);
    at += sizeof taken;
    if (taken < 0) fail(AMPX_ERR_CORRUPT, "the state holds a negative step count, ", taken);
    schedules.resize(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      std::memcpy(&schedules[g], in + at, sizeof schedules[g]);
      at += sizeof schedules[g];
      try {
        validate_schedule(schedules[g]);
      } catch (const StatusError& e) {
        fail(AMPX_ERR_CORRUPT, "the state holds an invalid schedule for group ", g, ": ", e.what());
      }
      if (schedules[g].base_lr != groups[g].lr)
        fail(AMPX_ERR_CORRUPT, "the schedule of group ", g, " has base rate ", schedules[g].base_lr,
             " but the group's rate is ", groups[g].lr);
    }
  } else {
    for (const StateGroup& g : groups) schedules.push_back(math::constant_schedule(g.lr));
  }
  std::vector<int64_t> steps(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    StateParam sp{};
    std::memcpy(&sp, in + at, sizeof sp);
    at += sizeof sp;
    const DeviceTensor& t = *params_[i].param;
    Shape shape;
    shape.ndim = static_cast<int32_t>(sp.ndim);
    if (sp.ndim > static_cast<uint32_t>(kMaxDims))
      fail(AMPX_ERR_CORRUPT, "parameter ", i, " has ", sp.ndim, " dimensions in the state");
    std::memcpy(shape.dims, sp.dims, sizeof shape.dims);
    if (!(shape == t.shape))
      fail(AMPX_ERR_SHAPE, "parameter ", i, (t.name.empty() ? "" : " '"), t.name,
           (t.name.empty() ? "" : "'"), " is ", t.shape.str(), " but the state holds ",
           shape.str());
    if (sp.dtype != static_cast<uint32_t>(t.dtype))
      fail(AMPX_ERR_DTYPE, "parameter ", i, " is ", dtype_name(t.dtype),
           " but the state was saved for dtype ", sp.dtype);
    if (sp.group != static_cast<uint32_t>(params_[i].group))
      fail(AMPX_ERR_CORRUPT, "parameter ", i, " is in group ", params_[i].group,
           " but the state puts it in group ", sp.group);
    if (sp.steps < 0) fail(AMPX_ERR_CORRUPT, "parameter ", i, " has a negative step count");
    steps[i] = sp.steps;
  }
  if (taken < 0) {
    taken = 0;
    for (int64_t n : steps) taken = n > taken ? n : taken;
  }
  OptimizerHyper restored = hyper_;
  restored.sgd.nesterov = header.nesterov != 0;
  restored.sgd.momentum = math::double_to_float(header.momentum);
  restored.sgd.dampening = math::double_to_float(header.dampening);
  restored.sgd.maximize = header.maximize != 0;
  restored.adam.maximize = header.maximize != 0;
  restored.adam.amsgrad = header.amsgrad != 0;
  restored.adam.decoupled_weight_decay = header.decoupled_weight_decay != 0;
  restored.adam.beta1 = header.beta1;
  restored.adam.beta2 = header.beta2;
  restored.adam.eps = math::double_to_float(header.eps);
  try {
    validate_hyper(restored);
  } catch (const StatusError& e) {
    fail(AMPX_ERR_CORRUPT, "the state holds invalid hyperparameters: ", e.what());
  }
  // The buffers are those of the current settings: hyperparameters that
  // would need others (momentum from 0, amsgrad on or off) would leave the
  // step reading buffers that do not exist.
  if (state_count_of(restored) != state_count())
    fail(AMPX_ERR_CORRUPT, "the state's momentum / amsgrad settings need ",
         state_count_of(restored), " buffer(s) per parameter but the state holds ", state_count());
  // Everything is validated: apply.
  hyper_ = restored;
  Backend& backend = ctx_->backend();
  for (size_t g = 0; g < groups.size(); ++g) {
    weight_decay_host_[g] = groups[g].weight_decay;
    schedules_host_[g] = schedules[g];
    write_lr(static_cast<int32_t>(g));
    write_weight_decay(static_cast<int32_t>(g));
    write_schedule(static_cast<int32_t>(g));
  }
  backend.fill(step_count_->data(), 8, static_cast<uint64_t>(taken), 1);
  if (!steps.empty()) backend.copy_from_host(steps_->data(), steps.data(), steps_->nbytes());
  for (Param& p : params_) {
    const size_t n = p.param->numel() * sizeof(float);
    if (n == 0) continue;
    backend.copy_from_host(p.master_or_param().data(), in + at, n);
    at += n;
    for (int k = 0; k < state_count(); ++k) {
      backend.copy_from_host(p.state[k]->data(), in + at, n);
      at += n;
    }
    if (p.master)
      backend.convert(p.param->data(), p.param->dtype, p.master->data(), DType::F32,
                      p.param->numel());
    p.param->storage->note_write();
  }
}

void FusedOptimizer::write_lr(int32_t group) {
  ctx_->backend().fill(static_cast<float*>(lr_->data()) + group, 4, float_bits_of(lr(group)), 1);
}

// Eight stream-ordered fills rather than a copy from the host, which would
// wait for the device.
void FusedOptimizer::fill_schedule(int64_t* words, const math::LrSchedule& schedule) {
  uint64_t bits[kScheduleWords];
  std::memcpy(bits, &schedule, sizeof bits);
  for (int w = 0; w < kScheduleWords; ++w) ctx_->backend().fill(words + w, 8, bits[w], 1);
}

void FusedOptimizer::write_schedule(int32_t group) {
  fill_schedule(schedule_words(group), schedules_host_[static_cast<size_t>(group)]);
}

void FusedOptimizer::write_weight_decay(int32_t group) {
  ctx_->backend().fill(static_cast<float*>(weight_decay_->data()) + group, 4,
                       float_bits_of(weight_decay_host_[static_cast<size_t>(group)]), 1);
}

}  // namespace ampx::impl
