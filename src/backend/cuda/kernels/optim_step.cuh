// optim_step.cuh -- what the optimizer kernels (sgd.cu, adam.cu) share: the
// layout of a parameter in the tensor list, its typed view on the device,
// and the launch over a parameter list grouped by (param, grad) dtypes.
// Included only by kernels/*.cu (nvcc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "multi_tensor.cuh"
#include "math/convert.h"

namespace ampx::impl {
namespace cuda {

// Arrays of a parameter's slot; the optimizer's state buffers follow from
// kFirstState on (SGD: momentum; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq).
// The slot's tensor_info is the parameter's group.
enum OptimArray : int { kParamArray, kMasterArray, kGradArray, kStepArray, kFirstState };

// One parameter of a step, typed: P is the parameter's dtype, G its
// gradient's. The update runs on `weight`, the fp32 value: the parameter
// itself when P is F32, else its master, from which the parameter is then
// rewritten (store_param).
template <int P, int G>
struct OptimView {
  math::storage_t<P>* param;
  float* master;  // null when P is F32
  float* weight;
  const math::storage_t<G>* grad;
  int64_t step;
  float lr;
  float weight_decay;

  template <int Depth>
  __device__ __forceinline__ OptimView(const TensorListArgs<Depth>& args, int slot,
                                       const StepScalars& scalars)
      : param(static_cast<math::storage_t<P>*>(args.ptr[kParamArray][slot])),
        master(static_cast<float*>(args.ptr[kMasterArray][slot])),
        grad(static_cast<const math::storage_t<G>*>(args.ptr[kGradArray][slot])),
        step(*static_cast<const int64_t*>(args.ptr[kStepArray][slot])),
        lr(scalars.lr[args.tensor_info[slot]]),
        weight_decay(scalars.weight_decay[args.tensor_info[slot]]) {
    if constexpr (P == AMPX_F32)
      weight = param;
    else
      weight = master;
  }

  // Rounds the updated fp32 values to the parameter (nothing to do for F32,
  // where the weight is the parameter).
  template <int W>
  __device__ __forceinline__ void store_param(int64_t j, const Pack<float, W>& w) const {
    if constexpr (P != AMPX_F32) {
      Pack<math::storage_t<P>, W> rounded;
#pragma unroll
      for (int k = 0; k < W; ++k) rounded.v[k] = math::store_float<P>(w.v[k]);
      store_pack(param + j, rounded);
    }
  }
};

// A whole step is skipped on the device when the scaler found an inf/NaN;
// every block checks, so no block touches a parameter.
__device__ __forceinline__ bool step_skipped(const StepScalars& scalars) {
  return scalars.found_inf != nullptr && *scalars.found_inf != 0.0f;
}

// Packets move 16 bytes of the narrower of the parameter and gradient types
// (so 32 bytes of each fp32 array): several arrays already keep many bytes in
// flight per thread, and registers stay few enough for full occupancy.
template <int P, int G>
constexpr int kOptimVector =
    kVector<16, (sizeof(math::storage_t<P>) < sizeof(math::storage_t<G>) ? sizeof(math::storage_t<P>)
                                                                          : sizeof(math::storage_t<G>))>;

// Enqueues one step over `params`: launch_kernel(param_tag, grad_tag, args,
// blocks) launches the kernel instantiated for that dtype pair. Depth is
// kFirstState plus the number of state buffers the slot carries.
template <int Depth, class LaunchKernel>
cudaError_t launch_optimizer(const std::vector<OptimParam>& params, LaunchKernel&& launch_kernel) {
  std::vector<DType> param_types, grad_types;
  for (const OptimParam& p : params) {
    param_types.push_back(p.param_dtype);
    grad_types.push_back(p.grad_dtype);
  }
  const auto fill = [&](TensorListArgs<Depth>& args, int slot, int64_t i) {
    const OptimParam& p = params[static_cast<size_t>(i)];
    float* const state[3] = {p.momentum, p.exp_avg_sq, p.max_exp_avg_sq};
    args.ptr[kParamArray][slot] = p.param;
    args.ptr[kMasterArray][slot] = p.master;
    // Read-only for the kernels; the list stores every array alike.
    args.ptr[kGradArray][slot] = const_cast<void*>(p.grad);
    args.ptr[kStepArray][slot] = const_cast<int64_t*>(p.step);
    for (int s = kFirstState; s < Depth; ++s) args.ptr[s][slot] = state[s - kFirstState];
    args.tensor_info[slot] = p.group;
  };
  for (const DtypeGroup& group : group_by_dtypes(param_types, grad_types, element_counts(params))) {
    const cudaError_t status = visit_floating(group.first, [&](auto param_tag) {
      return visit_floating(group.second, [&](auto grad_tag) {
        return launch_group<Depth>(group, fill, [&](const TensorListArgs<Depth>& args,
                                                     unsigned int blocks, int64_t) {
          return launch_kernel(param_tag, grad_tag, args, blocks);
        });
      });
    });
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace ampx::impl
