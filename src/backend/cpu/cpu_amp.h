// cpu_amp.h -- the CPU backend's multi-tensor primitives of mixed-precision
// training (see backend_amp.h for what each computes; the arguments were
// checked there).
//
// Each runs over the chunk plan of core/multi_tensor.h, chunks split over
// the thread pool (a list with little work runs on the calling thread), and
// applies the per-element functions of kernels/math -- the same ones the
// CUDA kernels call. Results never depend on the number of threads.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "core/backend_amp.h"

namespace ampx::impl {
namespace cpu {

void multi_tensor_scale(ThreadPool& pool, const std::vector<TensorSpan>& ins,
                        const std::vector<TensorSpan>& outs, const float* factor, bool reciprocal,
                        float* found_inf);
void multi_tensor_norm(ThreadPool& pool, const std::vector<TensorSpan>& tensors, NormType type,
                       float* out);
void clip_coefficient(const float* total_norm, float max_norm, float* coef);
void multi_tensor_clamp(ThreadPool& pool, const std::vector<TensorSpan>& tensors, float limit);
void multi_tensor_count_nonfinite(ThreadPool& pool, const std::vector<TensorSpan>& tensors,
                                  int64_t* counts);
void scaler_update(math::ScalerState* state, const std::vector<const float*>& found_infs,
                   const math::ScalerConfig& config, bool force, float forced_scale);
void increment_steps(int64_t* steps, int64_t count, const float* found_inf);
void lr_schedule(const math::LrSchedule* schedules, int32_t groups, const int64_t* step, float* lr);
void sgd_step(ThreadPool& pool, const std::vector<OptimParam>& params,
              const math::SgdConfig& config, const StepScalars& scalars);
void adam_step(ThreadPool& pool, const std::vector<OptimParam>& params,
               const math::AdamConfig& config, const StepScalars& scalars);

}  // namespace cpu
}  // namespace ampx::impl
