// backend_grad_stats.h -- the precision doctor's device passes, a backend
// capability (backend.h): the unscale with per-parameter gradient
// statistics in the same pass, the lost-update count of an optimizer step,
// and the one-entry summary written into the doctor's history. Records and
// flags live in the backend's device memory; nothing here waits for the
// device.
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend_amp.h"
#include "math/grad_stats.h"

namespace ampx::impl {

// One 16-bit parameter around an optimizer step: its value and fp32 master
// before the step (copies), and after.
struct LostUpdateSpan {
  const void* param;  // after the step
  const void* param_before;
  DType param_dtype;    // F16 or BF16
  const float* master;  // after the step
  const float* master_before;
  int64_t count;
  int32_t record;  // index of the record it counts into
};

class GradStatsPrimitives : public BackendCapability {
 public:
  static constexpr Capability kId = Capability::GradStats;

  // AmpPrimitives::multi_tensor_scale(ins, outs, scale, reciprocal = true,
  // found_inf) -- scale == nullptr stands for 1 -- and, in the same pass
  // over ins: nonfinite[i] = 1 when ins[i] * r has a non-finite element
  // (never cleared; nonfinite may be nullptr), and, when records is not
  // nullptr, records[i] accumulates ins[i]'s statistics (math/grad_stats.h).
  // The caller zeroes flags and records first.
  void unscale_with_stats(const std::vector<TensorSpan>& ins, const std::vector<TensorSpan>& outs,
                          const float* scale, float* found_inf, int32_t* nonfinite,
                          math::GradStatsRecord* records);

  // For each span: records[span.record] gets master_changed, lost_updates
  // and lost_without_master added (math::GradStatsRecord).
  void count_lost_updates(const std::vector<LostUpdateSpan>& spans, math::GradStatsRecord* records);

  // *entry = the history entry of one step: `step`, *scale (1 when null),
  // *found_inf (when null: whether any nonfinite[i] is set), the highest i
  // with nonfinite[i] set and their number, and, when records is not nullptr, the
  // totals of records[0..count) (else sum_squares = -1, elements = 0).
  void record_sample(math::DoctorSample* entry, int64_t step, const float* scale,
                     const float* found_inf, const int32_t* nonfinite,
                     const math::GradStatsRecord* records, int32_t count);

 protected:
  virtual void run_unscale_with_stats(const std::vector<TensorSpan>& ins,
                                      const std::vector<TensorSpan>& outs, const float* scale,
                                      float* found_inf, int32_t* nonfinite,
                                      math::GradStatsRecord* records) = 0;
  virtual void run_count_lost_updates(const std::vector<LostUpdateSpan>& spans,
                                      math::GradStatsRecord* records) = 0;
  virtual void run_record_sample(math::DoctorSample* entry, int64_t step, const float* scale,
                                 const float* found_inf, const int32_t* nonfinite,
                                 const math::GradStatsRecord* records, int32_t count) = 0;
};

}  // namespace ampx::impl
