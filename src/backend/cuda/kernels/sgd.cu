// sgd.cu -- one SGD step over every parameter of an optimizer (torch.optim.SGD
// order, math::sgd_update), with fp32 master weights for f16/bf16 parameters.
//
//   skipped entirely when *found_inf != 0
//   w = P == F32 ? param : master;  first = (*step == 1)
//   sgd_update(w, load_float<G>(grad), momentum_buf, first, lr[group], wd[group])
//   P != F32: param = store_float<P>(w)
//
// Memory traffic per element: reads the grad (sizeof(G)) and w (4), writes w
// (4); with momentum reads and writes the buffer (4 + 4); f16/bf16 parameters
// add the rounded write (2). Nothing is read back to the host: lr, weight
// decay, the step count and the skip flag are all read on the device.
#include <cuda_runtime.h>

#include "multi_tensor.cuh"
#include "multi_tensor_ops.cuh"
#include "optim_step.cuh"
#include "math/convert.h"
#include "math/optim.h"

namespace ampx::impl {
namespace cuda {
namespace {

constexpr int kSgdDepth = kFirstState + 1;  // + the momentum buffer

template <int P, int G>
__global__ void __launch_bounds__(kBlockThreads)
    sgd_kernel(const __grid_constant__ TensorListArgs<kSgdDepth> args, math::SgdConfig config,
               StepScalars scalars) {
  if (step_skipped(scalars)) return;
  const BlockChunk c = block_chunk(args);
  const OptimView<P, G> p(args, c.slot, scalars);
  const bool first = p.step == 1;
  // Without momentum the buffer is neither required nor touched.
  float* const buffer =
      config.momentum != 0.0f ? static_cast<float*>(args.ptr[kFirstState][c.slot]) : nullptr;
  const int head = vector_head(c.begin, p.param, p.master, p.grad, buffer);
  for_each_packet<kOptimVector<P, G>>(c.begin, c.end, head, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto g = load_pack<W>(p.grad + j);
    auto w = load_pack<W>(p.weight + j);
    Pack<float, W> buf{};
    if (buffer != nullptr) buf = load_pack<W>(buffer + j);
#pragma unroll
    for (int k = 0; k < W; ++k)
      math::sgd_update(w.v[k], math::load_float<G>(g.v[k]), buf.v[k], first, p.lr,
                       p.weight_decay, config);
    store_pack(p.weight + j, w);
    if (buffer != nullptr) store_pack(buffer + j, buf);
    p.store_param(j, w);
  });
}

}  // namespace

cudaError_t launch_sgd_step(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                            const StepScalars& scalars, const LaunchConfig& launch) {
  return launch_optimizer<kSgdDepth>(
      params, [&](auto param_tag, auto grad_tag, const TensorListArgs<kSgdDepth>& args,
                  unsigned int blocks) {
        const auto kernel = sgd_kernel<decltype(param_tag)::value, decltype(grad_tag)::value>;
        return enqueue(kernel, blocks, launch, args, config, scalars);
      });
}

}  // namespace cuda
}  // namespace ampx::impl
