// doctor_sample.cu -- writes one entry of the precision doctor's history:
// the step's scale and found-inf, which parameters held non-finite
// gradients, and on a sampled step the totals of the parameters' records.
//
//   first_nonfinite = max { i : nonfinite[i] } (the one backward reached
//   first), nonfinite_params = #{ i : nonfinite[i] }
//   found_inf = found_inf ? *found_inf != 0 : nonfinite_params > 0
//   records: elements = sum of every bin, fp16_lost_* = zero + subnormal
//            counts, sum_squares = sum of the records' (else -1 and 0)
//
// Memory traffic: reads count flags and, when sampled, count records (about
// 800 bytes each); one block, since a model has thousands of parameters at
// most and this runs once per step.
#include <cuda_runtime.h>

#include "grad_stats_ops.cuh"
#include "multi_tensor.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

__global__ void __launch_bounds__(kBlockThreads)
    doctor_sample_kernel(math::DoctorSample* entry, int64_t step, const float* scale,
                         const float* found_inf, const int32_t* nonfinite,
                         const math::GradStatsRecord* records, int32_t count) {
  int first = -1;
  int flagged = 0;
  long long elements = 0, lost_scaled = 0, lost_unscaled = 0;
  double squares = 0.0;
  for (int i = threadIdx.x; i < count; i += kBlockThreads) {
    if (nonfinite[i] != 0) {
      first = i;
      ++flagged;
    }
    if (records == nullptr) continue;
    const math::GradStatsRecord& r = records[i];
    for (int b = 0; b < math::kGradStatsBins; ++b) elements += r.bins[b];
    lost_scaled += r.fp16_zero_scaled + r.fp16_subnormal_scaled;
    lost_unscaled += r.fp16_zero_unscaled + r.fp16_subnormal_unscaled;
    squares += r.sum_squares;
  }
  const auto sum = [](auto a, auto b) { return a + b; };
  first = block_reduce(first, [](int a, int b) { return a > b ? a : b; });
  flagged = block_reduce(flagged, sum);
  elements = block_reduce(elements, sum);
  lost_scaled = block_reduce(lost_scaled, sum);
  lost_unscaled = block_reduce(lost_unscaled, sum);
  squares = block_reduce(squares, sum);
  if (threadIdx.x != 0) return;
  math::DoctorSample s{};
  s.step = step;
  s.scale = scale != nullptr ? *scale : 1.0f;
  const bool skipped = found_inf != nullptr ? *found_inf != 0.0f : flagged > 0;
  s.found_inf = skipped ? 1.0f : 0.0f;
  s.first_nonfinite = first;
  s.nonfinite_params = flagged;
  s.sum_squares = records != nullptr ? squares : -1.0;
  s.elements = elements;
  s.fp16_lost_scaled = lost_scaled;
  s.fp16_lost_unscaled = lost_unscaled;
  *entry = s;
}

}  // namespace

cudaError_t launch_record_sample(math::DoctorSample* entry, int64_t step, const float* scale,
                                 const float* found_inf, const int32_t* nonfinite,
                                 const math::GradStatsRecord* records, int32_t count,
                                 const LaunchConfig& launch) {
  return enqueue(doctor_sample_kernel, 1, launch, entry, step, scale, found_inf, nonfinite, records,
                 count);
}

}  // namespace cuda
}  // namespace ampx::impl
