// adam.cu -- one Adam/AdamW step over every parameter of an optimizer
// (torch.optim.Adam/AdamW order, math::adam_update), with fp32 master
// weights for f16/bf16 parameters.
//
//   skipped entirely when *found_inf != 0
//   per block:    f = math::adam_step_factors(*step, lr[group], wd[group])
//                 (fp32 betas, 1 - beta, AdamW's decay, bias corrections)
//   per element:  w = P == F32 ? param : master
//                 adam_update(w, load_float<G>(grad), m, v, vmax, wd, f)
//                 P != F32: param = store_float<P>(w)
//
// Memory traffic per element: reads the grad (sizeof(G)), w, m and v (12),
// writes w, m and v (12); amsgrad adds vmax (4 + 4); f16/bf16 parameters add
// the rounded write (2). bf16 params and grads: 28 bytes per parameter.
// Nothing is read back to the host.
#include <cuda_runtime.h>

#include "multi_tensor.cuh"
#include "multi_tensor_ops.cuh"
#include "optim_step.cuh"
#include "math/convert.h"
#include "math/optim.h"

namespace ampx::impl {
namespace cuda {
namespace {

constexpr int kAdamDepth = kFirstState + 3;  // + exp_avg, exp_avg_sq, max_exp_avg_sq

template <int P, int G, bool Amsgrad>
__global__ void __launch_bounds__(kBlockThreads)
    adam_kernel(const __grid_constant__ TensorListArgs<kAdamDepth> args, math::AdamConfig config,
                StepScalars scalars) {
  if (step_skipped(scalars)) return;
  const BlockChunk c = block_chunk(args);
  const OptimView<P, G> p(args, c.slot, scalars);
  // Every thread derives the factors itself: a few double operations, and no
  // barrier to share them.
  const math::AdamStepFactors factors =
      math::adam_step_factors(p.step, p.lr, p.weight_decay, config);
  float* const exp_avg = static_cast<float*>(args.ptr[kFirstState][c.slot]);
  float* const exp_avg_sq = static_cast<float*>(args.ptr[kFirstState + 1][c.slot]);
  // Without amsgrad the running max is neither required nor touched.
  float* const max_exp_avg_sq =
      Amsgrad ? static_cast<float*>(args.ptr[kFirstState + 2][c.slot]) : nullptr;
  const int head =
      vector_head(c.begin, p.param, p.master, p.grad, exp_avg, exp_avg_sq, max_exp_avg_sq);
  for_each_packet<kOptimVector<P, G>>(c.begin, c.end, head, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto g = load_pack<W>(p.grad + j);
    auto w = load_pack<W>(p.weight + j);
    auto m = load_pack<W>(exp_avg + j);
    auto v = load_pack<W>(exp_avg_sq + j);
    Pack<float, W> v_max{};
    if constexpr (Amsgrad) v_max = load_pack<W>(max_exp_avg_sq + j);
#pragma unroll
    for (int k = 0; k < W; ++k)
      math::adam_update(w.v[k], math::load_float<G>(g.v[k]), m.v[k], v.v[k], v_max.v[k],
                        p.weight_decay, factors, config);
    store_pack(p.weight + j, w);
    store_pack(exp_avg + j, m);
    store_pack(exp_avg_sq + j, v);
    if constexpr (Amsgrad) store_pack(max_exp_avg_sq + j, v_max);
    p.store_param(j, w);
  });
}

}  // namespace

cudaError_t launch_adam_step(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                             const StepScalars& scalars, const LaunchConfig& launch) {
  return launch_optimizer<kAdamDepth>(
      params, [&](auto param_tag, auto grad_tag, const TensorListArgs<kAdamDepth>& args,
                  unsigned int blocks) {
        constexpr int P = decltype(param_tag)::value;
        constexpr int G = decltype(grad_tag)::value;
        const auto kernel = config.amsgrad ? adam_kernel<P, G, true> : adam_kernel<P, G, false>;
        return enqueue(kernel, blocks, launch, args, config, scalars);
      });
}

}  // namespace cuda
}  // namespace ampx::impl
