#include "doctor/doctor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "amp/scaler.h"
#include "core/error.h"
#include "doctor/diagnose.h"
#include "math/amp.h"

namespace ampx::impl {
namespace {

constexpr double kFp16Max = 65504.0;

static_assert(sizeof(math::GradStatsRecord) % sizeof(int32_t) == 0, "records are whole int32s");
static_assert(sizeof(math::DoctorSample) % sizeof(int32_t) == 0, "samples are whole int32s");

TensorRef device_bytes(DeviceContext& ctx, size_t bytes) {
  return TensorRef(
      DeviceTensor::empty(ctx, DType::I32, vector_shape(static_cast<int64_t>(bytes / 4))));
}

bool is_16_bit(DType t) { return t == DType::F16 || t == DType::BF16; }

// The largest k with amax * 2^k <= 65504 (amax > 0 and finite).
int32_t headroom_doublings(double amax) {
  int k = static_cast<int>(std::floor(std::log2(kFp16Max / amax)));
  while (std::ldexp(amax, k + 1) <= kFp16Max) ++k;
  while (std::ldexp(amax, k) > kFp16Max) --k;
  return k;
}

doctor::ParamReport param_report(const FusedOptimizer::Param& p, int32_t index,
                                 const math::GradStatsRecord& r, float sample_scale) {
  doctor::ParamReport out;
  out.name = p.param->name;
  out.index = index;
  out.param_dtype = dtype_name(p.param->dtype);
  const DeviceTensor* g = p.param->grad;
  out.grad_dtype = g ? dtype_name(g->dtype) : "none";
  for (int b = 0; b < math::kGradStatsBins; ++b) {
    out.histogram[static_cast<size_t>(b)] = r.bins[b];
    out.elements += r.bins[b];
  }
  const float amax_scaled = math::bits_float(r.amax_scaled_bits);
  out.amax_scaled = amax_scaled;
  // |u| = |x| * r rounds monotonically, so the largest |u| is this product.
  out.amax = amax_scaled * math::reciprocal_scale(sample_scale);
  out.grad_norm = std::sqrt(r.sum_squares);
  out.has_headroom = amax_scaled > 0.0f;
  out.headroom = out.has_headroom ? headroom_doublings(amax_scaled) : 0;
  if (out.elements > 0) {
    const double n = static_cast<double>(out.elements);
    out.fp16_zero_unscaled = static_cast<double>(r.fp16_zero_unscaled) / n;
    out.fp16_subnormal_unscaled = static_cast<double>(r.fp16_subnormal_unscaled) / n;
    out.fp16_zero_scaled = static_cast<double>(r.fp16_zero_scaled) / n;
    out.fp16_subnormal_scaled = static_cast<double>(r.fp16_subnormal_scaled) / n;
    out.fp16_overflow_scaled = static_cast<double>(r.fp16_overflow_scaled) / n;
    out.nonzero_lost_scaled = static_cast<double>(r.nonzero_lost_scaled) / n;
    if (is_16_bit(p.param->dtype)) {
      out.lost_update_fraction = static_cast<double>(r.lost_updates) / n;
      out.lost_without_master_fraction = static_cast<double>(r.lost_without_master) / n;
      out.master_changed_fraction = static_cast<double>(r.master_changed) / n;
    }
  }
  return out;
}

std::string describe_scaler(const LossScaler* scaler) {
  if (scaler == nullptr || !scaler->enabled()) return "none";
  const ScalerOptions& o = scaler->options();
  return cat("dynamic: x", o.growth_factor, " every ", o.growth_interval, " clean steps, x",
             o.backoff_factor, " on overflow", o.min_scale > 0.0 ? cat(", min ", o.min_scale) : "");
}

}  // namespace

void validate_doctor_options(const DoctorOptions& options) {
  if (options.interval < 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "interval is ", options.interval,
         "; it must be >= 0 (0 turns the doctor off)");
  if (options.history < 1 || options.history > (1 << 24))
    fail(AMPX_ERR_INVALID_ARGUMENT, "history is ", options.history,
         "; it must be in [1, 16777216] entries");
}

Doctor::Doctor(FusedOptimizer& optimizer, const DoctorOptions& options)
    : Object(kLiveMagic, &Doctor::destroy_shell),
      ctx_(&optimizer.context()),
      optimizer_(&optimizer),
      stats_(optimizer.context().backend().find<GradStatsPrimitives>()),
      options_(options) {}

Doctor::~Doctor() = default;

Doctor* Doctor::create(FusedOptimizer& optimizer, const DoctorOptions& options) {
  validate_doctor_options(options);
  optimizer.iteration().check_observer_attachable();
  DeviceContext& ctx = optimizer.context();
  ctx.backend().require<GradStatsPrimitives>("the precision doctor");
  TensorRef history =
      device_bytes(ctx, sizeof(math::DoctorSample) * static_cast<size_t>(options.history));
  TensorRef sample_scale(DeviceTensor::empty(ctx, DType::F32, vector_shape(1)));
  ctx.backend().fill(sample_scale->data(), 4, math::float_bits(1.0f), 1);
  auto* doctor = new Doctor(optimizer, options);
  doctor->history_ = std::move(history);
  doctor->sample_scale_ = std::move(sample_scale);
  ctx.retain();
  optimizer.refs.fetch_add(1, std::memory_order_relaxed);
  optimizer.iteration().attach_observer(*doctor);
  return doctor;
}

void Doctor::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  magic = kDeadMagic;
  optimizer_->iteration().detach_observer(*this);
  records_.reset();
  flags_.reset();
  history_.reset();
  sample_scale_.reset();
  param_before_.clear();
  master_before_.clear();
  report_ = doctor::Report{};
  findings_.clear();
  DeviceContext& ctx = *ctx_;
  optimizer_->release();
  ctx.quarantine(this);
  ctx.release();
}

void Doctor::set_interval(int32_t interval) {
  DoctorOptions options = options_;
  options.interval = interval;
  validate_doctor_options(options);
  options_.interval = interval;
}

std::vector<TensorSpan> Doctor::spans_by_param(const std::vector<TensorSpan>& with_grad) const {
  std::vector<TensorSpan> spans;
  size_t next = 0;
  for (const FusedOptimizer::Param& p : optimizer_->params()) {
    if (p.param->grad && next < with_grad.size())
      spans.push_back(with_grad[next++]);
    else
      spans.push_back({nullptr, DType::F32, 0});
  }
  if (next != with_grad.size())
    fail(AMPX_ERR_INTERNAL, "the doctor got ", with_grad.size(), " gradients for ", next,
         " parameters with one");
  return spans;
}

bool Doctor::ensure_buffers() {
  const size_t n = optimizer_->params().size();
  if (records_ && params_ == n) return true;
  try {
    TensorRef records = device_bytes(*ctx_, std::max<size_t>(n, 1) * sizeof(math::GradStatsRecord));
    TensorRef flags(DeviceTensor::empty(*ctx_, DType::I32, vector_shape(std::max<int64_t>(n, 1))));
    records_ = std::move(records);
    flags_ = std::move(flags);
    params_ = n;
    param_before_.clear();
    master_before_.clear();
    return true;
  } catch (const StatusError& e) {
    if (e.status() != AMPX_ERR_OUT_OF_MEMORY) throw;
    return false;
  }
}

bool Doctor::ensure_snapshots() {
  const std::vector<FusedOptimizer::Param>& params = optimizer_->params();
  if (param_before_.size() == params.size()) return true;
  try {
    std::vector<TensorRef> param_before, master_before;
    for (const FusedOptimizer::Param& p : params) {
      if (is_16_bit(p.param->dtype) && p.master) {
        param_before.emplace_back(DeviceTensor::empty(*ctx_, p.param->dtype, p.param->shape));
        master_before.emplace_back(DeviceTensor::empty(*ctx_, DType::F32, p.param->shape));
      } else {
        param_before.emplace_back();
        master_before.emplace_back();
      }
    }
    param_before_ = std::move(param_before);
    master_before_ = std::move(master_before);
    return true;
  } catch (const StatusError& e) {
    if (e.status() != AMPX_ERR_OUT_OF_MEMORY) throw;
    return false;
  }
}

bool Doctor::begin_iteration() {
  if (in_iteration_) return active_;
  in_iteration_ = true;
  unscaled_ = false;
  snapshots_ = false;
  const int64_t step = steps_ + 1;
  active_ = options_.interval > 0;
  sampled_ = active_ && (step - 1) % options_.interval == 0;
  if (active_ && !ensure_buffers()) {
    ++missed_steps_;
    active_ = sampled_ = false;
  }
  if (!active_) return false;
  Backend& backend = ctx_->backend();
  backend.fill(flags_->data(), 4, 0, static_cast<int64_t>(std::max<size_t>(params_, 1)));
  if (sampled_) backend.fill(records_->data(), 4, 0, records_->numel());
  return true;
}

void Doctor::unscale(const std::vector<TensorSpan>& ins, const std::vector<TensorSpan>& outs,
                     const float* scale, float* found_inf) {
  if (!begin_iteration()) {
    ctx_->backend().require<AmpPrimitives>("unscale").multi_tensor_scale(ins, outs, scale, true,
                                                                         found_inf);
    return;
  }
  auto* records = sampled_ ? static_cast<math::GradStatsRecord*>(records_->data()) : nullptr;
  stats_->unscale_with_stats(spans_by_param(ins), spans_by_param(outs), scale, found_inf,
                             static_cast<int32_t*>(flags_->data()), records);
  if (sampled_) ctx_->backend().copy(sample_scale_->data(), scale, sizeof(float));
  unscaled_ = true;
}

void Doctor::after_unscale(const float* scale, const float* found_inf) {
  if (active_ && unscaled_) record(scale, found_inf);
}

void Doctor::record(const float* scale, const float* found_inf) {
  const int64_t slot = entries_ % options_.history;
  auto* entry = static_cast<math::DoctorSample*>(history_->data()) + slot;
  stats_->record_sample(
      entry, steps_ + 1, scale, found_inf, static_cast<const int32_t*>(flags_->data()),
      sampled_ ? static_cast<const math::GradStatsRecord*>(records_->data()) : nullptr,
      static_cast<int32_t>(params_));
  ++entries_;
}

void Doctor::before_step() {
  if (!begin_iteration()) return;
  if (!sampled_) return;
  Backend& backend = ctx_->backend();
  if (!unscaled_) {
    // No scaler did the pass: the statistics take one of their own, of the
    // gradients the step is about to use, at scale 1.
    std::vector<TensorSpan> grads = optimizer_->effective_grads();
    stats_->unscale_with_stats(spans_by_param(grads), {}, nullptr, nullptr,
                               static_cast<int32_t*>(flags_->data()),
                               static_cast<math::GradStatsRecord*>(records_->data()));
    backend.fill(sample_scale_->data(), 4, math::float_bits(1.0f), 1);
    record(nullptr, nullptr);
  }
  if (!ensure_snapshots()) return;
  const std::vector<FusedOptimizer::Param>& params = optimizer_->params();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!param_before_[i] || !params[i].param->grad) continue;
    backend.copy(param_before_[i]->data(), params[i].param->data(), params[i].param->nbytes());
    backend.copy(master_before_[i]->data(), params[i].master->data(), params[i].master->nbytes());
  }
  snapshots_ = true;
}

void Doctor::after_step() {
  if (active_ && sampled_ && snapshots_) {
    std::vector<LostUpdateSpan> spans;
    const std::vector<FusedOptimizer::Param>& params = optimizer_->params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!param_before_[i] || !params[i].param->grad) continue;
      const FusedOptimizer::Param& p = params[i];
      spans.push_back({p.param->data(), param_before_[i]->data(), p.param->dtype,
                       static_cast<const float*>(p.master->data()),
                       static_cast<const float*>(master_before_[i]->data()), p.param->numel(),
                       static_cast<int32_t>(i)});
    }
    stats_->count_lost_updates(spans, static_cast<math::GradStatsRecord*>(records_->data()));
  }
  if (active_ && sampled_) sample_step_ = steps_ + 1;
  ++steps_;
  in_iteration_ = active_ = sampled_ = unscaled_ = snapshots_ = false;
}

void Doctor::read_back() {
  doctor::Report report;
  report.title = "ampx precision doctor";
  report.steps = steps_;
  report.interval = options_.interval;
  report.sample_step = sample_step_;
  report.scaler = describe_scaler(optimizer_->iteration().scaler());

  const size_t kept = static_cast<size_t>(std::min<int64_t>(entries_, options_.history));
  std::vector<math::DoctorSample> ring(kept);
  if (kept > 0)
    ctx_->read_to_host(ring.data(), history_->data(), kept * sizeof(math::DoctorSample));
  const size_t oldest =
      entries_ > options_.history ? static_cast<size_t>(entries_ % options_.history) : 0;
  for (size_t k = 0; k < kept; ++k) {
    const math::DoctorSample& s = ring[(oldest + k) % kept];
    doctor::SampleReport h;
    h.step = s.step;
    h.scale = s.scale;
    h.found_inf = s.found_inf != 0.0f;
    h.sampled = s.sum_squares >= 0.0;
    h.grad_norm = h.sampled ? std::sqrt(s.sum_squares) : 0.0;
    h.first_nonfinite = s.first_nonfinite;
    h.nonfinite_params = s.nonfinite_params;
    if (h.sampled && s.elements > 0) {
      h.fp16_lost_scaled =
          static_cast<double>(s.fp16_lost_scaled) / static_cast<double>(s.elements);
      h.fp16_lost_unscaled =
          static_cast<double>(s.fp16_lost_unscaled) / static_cast<double>(s.elements);
    }
    report.history.push_back(h);
  }

  if (sample_step_ > 0 && records_) {
    std::vector<math::GradStatsRecord> records(params_);
    ctx_->read_to_host(records.data(), records_->data(), params_ * sizeof(math::GradStatsRecord));
    float scale = 1.0f;
    ctx_->read_to_host(&scale, sample_scale_->data(), sizeof scale);
    report.sample_scale = scale;
    const std::vector<FusedOptimizer::Param>& params = optimizer_->params();
    for (size_t i = 0; i < params_ && i < params.size(); ++i)
      report.params.push_back(param_report(params[i], static_cast<int32_t>(i), records[i], scale));
  }

  doctor::ScalerFacts facts;
  if (const LossScaler* s = optimizer_->iteration().scaler(); s != nullptr && s->enabled()) {
    facts.scaling = true;
    facts.min_scale = s->options().min_scale;
    facts.backoff_factor = s->options().backoff_factor;
    facts.growth_interval = s->options().growth_interval;
  }
  findings_ = doctor::diagnose(report, facts);
  for (const doctor::Finding& f : findings_) {
    doctor::FindingReport r;
    r.code = doctor::finding_code_name(f.code);
    r.cause = doctor::finding_cause_name(f.cause);
    r.param = f.param;
    if (f.param >= 0 && static_cast<size_t>(f.param) < report.params.size())
      r.param_name = report.params[static_cast<size_t>(f.param)].name;
    r.first_step = f.first_step;
    r.last_step = f.last_step;
    r.message = f.message;
    report.findings.push_back(std::move(r));
  }
  report.summary = doctor::summary_line(report, missed_steps_);
  report_ = std::move(report);
  read_steps_ = steps_;
}

const doctor::Report& Doctor::examine() {
  if (read_steps_ != steps_) read_back();
  return report_;
}

}  // namespace ampx::impl
