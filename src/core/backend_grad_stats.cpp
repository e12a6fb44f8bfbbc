// backend_grad_stats.cpp -- the front doors of the precision doctor's
// device passes: every argument check of backend_grad_stats.h, once.
#include "core/backend_grad_stats.h"

#include "core/error.h"

namespace ampx::impl {

void GradStatsPrimitives::unscale_with_stats(const std::vector<TensorSpan>& ins,
                                             const std::vector<TensorSpan>& outs,
                                             const float* scale, float* found_inf,
                                             int32_t* nonfinite, math::GradStatsRecord* records) {
  const ProfileScope timed(profile(), "unscale_with_stats");
  check_scale_spans("unscale_with_stats", ins, outs);
  if (ins.empty()) return;
  run_unscale_with_stats(ins, outs, scale, found_inf, nonfinite, records);
}

void GradStatsPrimitives::count_lost_updates(const std::vector<LostUpdateSpan>& spans,
                                             math::GradStatsRecord* records) {
  const ProfileScope timed(profile(), "count_lost_updates");
  for (size_t i = 0; i < spans.size(); ++i) {
    const LostUpdateSpan& s = spans[i];
    if (s.param_dtype != DType::F16 && s.param_dtype != DType::BF16)
      fail(AMPX_ERR_DTYPE, "count_lost_updates: span ", i, " is ", dtype_name(s.param_dtype),
           "; lost updates are counted for f16 and bf16 parameters");
    if (s.count < 0 || s.record < 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "count_lost_updates: span ", i, " has ", s.count,
           " elements and record ", s.record);
    if (s.count > 0 && (!s.param || !s.param_before || !s.master || !s.master_before))
      fail(AMPX_ERR_INVALID_ARGUMENT, "count_lost_updates: span ", i, " lacks an array");
  }
  if (spans.empty()) return;
  if (records == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "count_lost_updates: records is null");
  run_count_lost_updates(spans, records);
}

void GradStatsPrimitives::record_sample(math::DoctorSample* entry, int64_t step, const float* scale,
                                        const float* found_inf, const int32_t* nonfinite,
                                        const math::GradStatsRecord* records, int32_t count) {
  const ProfileScope timed(profile(), "record_sample");
  if (entry == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "record_sample: entry is null");
  if (count < 0 || (count > 0 && nonfinite == nullptr))
    fail(AMPX_ERR_INVALID_ARGUMENT, "record_sample: ", count, " parameters without their flags");
  run_record_sample(entry, step, scale, found_inf, nonfinite, records, count);
}

}  // namespace ampx::impl
