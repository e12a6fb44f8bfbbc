// scaler_update.cu -- the loss scaler's per-iteration update, on the device.
//
//   found = OR over i of (*found_infs[i] != 0)
//   force ? math::scaler_force(*state, found, forced_scale)
//         : math::scaler_update(*state, found, config)
//
// Memory traffic: a few dozen bytes. One thread: the work is one state, and
// the launch is the whole cost. The flags' addresses travel in the kernel
// parameters, so the host never reads a flag and builds no device array.
#include <cuda_runtime.h>

#include "multi_tensor.cuh"
#include "multi_tensor_ops.cuh"
#include "math/amp.h"

namespace ampx::impl {
namespace cuda {
namespace {

struct FoundInfFlags {
  const float* flag[kMaxScalerFlags];
  int32_t count;
};

__global__ void scaler_update_kernel(math::ScalerState* state,
                                     const __grid_constant__ FoundInfFlags flags,
                                     math::ScalerConfig config, bool force, float forced_scale) {
  bool found = false;
  for (int32_t i = 0; i < flags.count; ++i) found = found || *flags.flag[i] != 0.0f;
  if (force)
    math::scaler_force(*state, found, forced_scale);
  else
    math::scaler_update(*state, found, config);
}

}  // namespace

cudaError_t launch_scaler_update(math::ScalerState* state,
                                 const std::vector<const float*>& found_infs,
                                 const math::ScalerConfig& config, bool force, float forced_scale,
                                 const LaunchConfig& launch) {
  if (found_infs.size() > kMaxScalerFlags) return cudaErrorInvalidValue;
  FoundInfFlags flags{};
  for (size_t i = 0; i < found_infs.size(); ++i) flags.flag[i] = found_infs[i];
  flags.count = static_cast<int32_t>(found_infs.size());
  return enqueue_single_thread(scaler_update_kernel, launch, state, flags, config, force,
                               forced_scale);
}

}  // namespace cuda
}  // namespace ampx::impl
