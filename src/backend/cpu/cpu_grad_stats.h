// cpu_grad_stats.h -- the CPU backend's precision-doctor passes (see
// backend_grad_stats.h for what each computes; the arguments were checked
// there). Per-chunk partial records are combined in chunk order, so the
// results never depend on the number of threads.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "core/backend_grad_stats.h"

namespace ampx::impl {
namespace cpu {

void unscale_with_stats(ThreadPool& pool, const std::vector<TensorSpan>& ins,
                        const std::vector<TensorSpan>& outs, const float* scale, float* found_inf,
                        int32_t* nonfinite, math::GradStatsRecord* records);
void count_lost_updates(ThreadPool& pool, const std::vector<LostUpdateSpan>& spans,
                        math::GradStatsRecord* records);
void record_sample(math::DoctorSample* entry, int64_t step, const float* scale,
                   const float* found_inf, const int32_t* nonfinite,
                   const math::GradStatsRecord* records, int32_t count);

}  // namespace cpu
}  // namespace ampx::impl
