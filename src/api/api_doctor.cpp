// api_doctor.cpp -- the precision doctor (section 15).
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "api/guard.h"
#include "doctor/doctor.h"
#include "optim/optimizer.h"

using namespace ampx::impl;

namespace {

Doctor& doctor_arg(ampx_doctor handle, const char* arg) {
  return object_arg<Doctor>(handle, arg, "an ampx_doctor");
}

DoctorOptions options_from(const ampx_doctor_options* options) {
  DoctorOptions o;
  if (options == nullptr) return o;
  if (options->struct_size < sizeof(ampx_doctor_options))
    fail(AMPX_ERR_INVALID_ARGUMENT, "options->struct_size is ", options->struct_size,
         "; set it to sizeof(ampx_doctor_options) (or use AMPX_DOCTOR_OPTIONS_INIT)");
  o.interval = options->interval;
  o.history = options->history;
  return o;
}

ampx_dtype public_dtype(const std::string& name) {
  if (name == "f16") return AMPX_F16;
  if (name == "bf16") return AMPX_BF16;
  return AMPX_F32;
}

void write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    fail(AMPX_ERR_IO, "cannot open '", path, "' for writing: ", std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (written && closed) return;
  const int reason = written ? errno : write_errno;
  std::remove(path.c_str());
  fail(AMPX_ERR_IO, "cannot write '", path, "': ", std::strerror(reason));
}

}  // namespace

extern "C" {

ampx_doctor_options ampx_doctor_options_default(void) {
  ampx_doctor_options o = AMPX_DOCTOR_OPTIONS_INIT;
  return o;
}

ampx_status ampx_doctor_create(ampx_context ctx, ampx_optimizer optimizer,
                               const ampx_doctor_options* options, ampx_doctor* out) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    FusedOptimizer& o = object_arg<FusedOptimizer>(optimizer, "optimizer", "an ampx_optimizer");
    require_pointer(out, "out");
    if (&o.context() != &c)
      fail(AMPX_ERR_DEVICE, "the optimizer belongs to a different context than 'ctx'");
    // Handles point at the Object base (not the first base of a Doctor).
    Object* doctor = Doctor::create(o, options_from(options));
    *out = reinterpret_cast<ampx_doctor>(doctor);
  });
}

ampx_status ampx_doctor_set_interval(ampx_doctor doctor, int32_t interval) {
  return guard(__func__, [&] { doctor_arg(doctor, "doctor").set_interval(interval); });
}

ampx_status ampx_doctor_examine(ampx_doctor doctor, ampx_doctor_overview* overview) {
  return guard(__func__, [&] {
    Doctor& d = doctor_arg(doctor, "doctor");
    require_pointer(overview, "overview");
    const doctor::Report& r = d.examine();
    ampx_doctor_overview full = AMPX_DOCTOR_OVERVIEW_INIT;
    full.steps = r.steps;
    full.sample_step = r.sample_step;
    full.sample_scale = r.sample_scale;
    full.param_count = static_cast<int32_t>(r.params.size());
    full.history_count = static_cast<int32_t>(r.history.size());
    full.finding_count = static_cast<int32_t>(r.findings.size());
    full.missed_steps = d.missed_steps();
    write_struct(overview, full, "overview");
  });
}

ampx_status ampx_doctor_get_param_stats(ampx_doctor doctor, int32_t index,
                                        ampx_doctor_param_stats* stats) {
  return guard(__func__, [&] {
    Doctor& d = doctor_arg(doctor, "doctor");
    require_pointer(stats, "stats");
    if (stats->struct_size < sizeof(ampx_doctor_param_stats))
      fail(AMPX_ERR_INVALID_ARGUMENT, "stats->struct_size is ", stats->struct_size,
           "; set it to sizeof(ampx_doctor_param_stats)");
    const doctor::Report& r = d.examine();
    if (r.sample_step == 0)
      fail(AMPX_ERR_ORDER,
           "no step was sampled yet (the first sampled step is step 1 with an "
           "interval above 0)");
    if (index < 0 || static_cast<size_t>(index) >= r.params.size())
      fail(AMPX_ERR_INVALID_ARGUMENT, "index is ", index, "; the doctor has statistics of ",
           r.params.size(), " parameters");
    const doctor::ParamReport& p = r.params[static_cast<size_t>(index)];
    ampx_doctor_param_stats s{};
    s.struct_size = stats->struct_size;
    s.index = p.index;
    s.name = p.name.c_str();
    s.param_dtype = public_dtype(p.param_dtype);
    s.grad_dtype = public_dtype(p.grad_dtype);
    s.elements = p.elements;
    for (int b = 0; b < AMPX_DOCTOR_BINS; ++b) s.histogram[b] = p.histogram[static_cast<size_t>(b)];
    s.amax = p.amax;
    s.amax_scaled = p.amax_scaled;
    s.grad_norm = p.grad_norm;
    s.fp16_zero_unscaled = p.fp16_zero_unscaled;
    s.fp16_subnormal_unscaled = p.fp16_subnormal_unscaled;
    s.fp16_zero_scaled = p.fp16_zero_scaled;
    s.fp16_subnormal_scaled = p.fp16_subnormal_scaled;
    s.fp16_overflow_scaled = p.fp16_overflow_scaled;
    s.headroom = p.headroom;
    s.headroom_unbounded = p.has_headroom ? 0 : 1;
    s.lost_update_fraction = p.lost_update_fraction;
    s.lost_without_master_fraction = p.lost_without_master_fraction;
    std::memcpy(static_cast<void*>(stats), &s, sizeof s);
  });
}

ampx_status ampx_doctor_get_history(ampx_doctor doctor, ampx_doctor_sample* samples,
                                    int32_t capacity, int32_t* count) {
  return guard(__func__, [&] {
    Doctor& d = doctor_arg(doctor, "doctor");
    require_pointer(count, "count");
    if (capacity < 0) fail(AMPX_ERR_INVALID_ARGUMENT, "capacity is ", capacity);
    if (capacity > 0) require_pointer(samples, "samples");
    const doctor::Report& r = d.examine();
    const size_t n = std::min(r.history.size(), static_cast<size_t>(capacity));
    for (size_t i = 0; i < n; ++i) {
      const doctor::SampleReport& h = r.history[i];
      ampx_doctor_sample s{};
      s.step = h.step;
      s.scale = h.scale;
      s.found_inf = h.found_inf ? 1 : 0;
      s.sampled = h.sampled ? 1 : 0;
      s.grad_norm = h.grad_norm;
      s.first_overflow_param = h.first_nonfinite;
      s.overflow_params = h.nonfinite_params;
      s.fp16_lost_scaled = h.fp16_lost_scaled;
      s.fp16_lost_unscaled = h.fp16_lost_unscaled;
      samples[i] = s;
    }
    *count = static_cast<int32_t>(r.history.size());
  });
}

ampx_status ampx_doctor_get_finding(ampx_doctor doctor, int32_t index,
                                    ampx_doctor_finding* finding) {
  return guard(__func__, [&] {
    Doctor& d = doctor_arg(doctor, "doctor");
    require_pointer(finding, "finding");
    if (finding->struct_size < sizeof(ampx_doctor_finding))
      fail(AMPX_ERR_INVALID_ARGUMENT, "finding->struct_size is ", finding->struct_size,
           "; set it to sizeof(ampx_doctor_finding)");
    const doctor::Report& r = d.examine();
    if (index < 0 || static_cast<size_t>(index) >= r.findings.size())
      fail(AMPX_ERR_INVALID_ARGUMENT, "index is ", index, "; there are ", r.findings.size(),
           " findings");
    const doctor::Finding& f = d.findings()[static_cast<size_t>(index)];
    const doctor::FindingReport& text = r.findings[static_cast<size_t>(index)];
    ampx_doctor_finding out{};
    out.struct_size = finding->struct_size;
    out.code = static_cast<int32_t>(f.code);
    out.cause = static_cast<int32_t>(f.cause);
    out.param = f.param;
    out.param_name = text.param_name.c_str();
    out.first_step = f.first_step;
    out.last_step = f.last_step;
    out.message = text.message.c_str();
    std::memcpy(static_cast<void*>(finding), &out, sizeof out);
  });
}

const char* ampx_doctor_finding_code_name(int32_t code) {
  if (code < AMPX_DOCTOR_SCALE_OSCILLATION || code > AMPX_DOCTOR_GRADIENTS_VANISHED) return nullptr;
  return doctor::finding_code_name(static_cast<doctor::FindingCode>(code));
}

const char* ampx_doctor_cause_name(int32_t cause) {
  if (cause < AMPX_DOCTOR_CAUSE_NONE || cause > AMPX_DOCTOR_CAUSE_NO_LOSS_SCALING) return nullptr;
  return doctor::finding_cause_name(static_cast<doctor::FindingCause>(cause));
}

ampx_status ampx_doctor_summary(ampx_doctor doctor, const char** text) {
  return guard(__func__, [&] {
    Doctor& d = doctor_arg(doctor, "doctor");
    require_pointer(text, "text");
    *text = d.examine().summary.c_str();
  });
}

ampx_status ampx_doctor_write_report(ampx_doctor doctor, const char* path) {
  return guard(__func__, [&] {
    Doctor& d = doctor_arg(doctor, "doctor");
    require_pointer(path, "path");
    write_file(path, doctor::render_html(d.examine()));
  });
}

void ampx_doctor_release(ampx_doctor doctor) {
  if (!doctor) return;
  guard(__func__, [&] { doctor_arg(doctor, "doctor").release(); });
}

}  // extern "C"
