// lr_schedule.cu -- writes each param group's learning rate for the coming
// optimizer step from its schedule and the optimizer's count of taken steps
// (math/lr_schedule.h), so that a step replayed from a CUDA graph uses the
// rate of its own step and the host is not involved.
//
//   lr[g] = fp32(scheduled_lr(schedules[g], *step)) for g < groups whose
//   schedule is not constant (the others keep the rate the host wrote)
//
// Memory traffic: reads the 8-byte count and 64 bytes per group, writes 4
// bytes per group; one thread per group (a handful), a few double
// operations each.
#include <cuda_runtime.h>

#include "math/lr_schedule.h"
#include "multi_tensor.cuh"
#include "multi_tensor_ops.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

__global__ void __launch_bounds__(kBlockThreads)
    lr_schedule_kernel(const math::LrSchedule* schedules, int32_t groups, const int64_t* step,
                       float* lr) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < groups && !math::is_constant(schedules[g]))
    lr[g] = math::scheduled_lr_f32(schedules[g], *step);
}

}  // namespace

cudaError_t launch_lr_schedule(const math::LrSchedule* schedules, int32_t groups,
                               const int64_t* step, float* lr, const LaunchConfig& launch) {
  if (groups <= 0) return cudaSuccess;
  return enqueue(lr_schedule_kernel, grid_blocks(groups, launch), launch, schedules, groups, step,
                 lr);
}

}  // namespace cuda
}  // namespace ampx::impl
