// mse_loss.cu -- element-wise squared error of an input against a target of
// one floating type, with an F32 result, and its backward pass:
//
//   losses[i]   = (x - t)^2                          (math::squared_error)
//   d_input[i]  = 2 (x - t) dloss[i * stride] scale  (math::squared_error_grad)
//   d_target[i] = -d_input[i]
//
// The difference and the square are formed in fp32 from the inputs, so the
// F32 losses of 16-bit inputs carry fp32's accuracy (rounding the
// difference to f16 or bf16 first would cost up to 2^-11 or 2^-8 of it);
// each gradient is rounded to the inputs' type once. The formulas are the
// CPU backend's, operation for operation (--fmad=false): the two backends
// agree bit for bit. Mean and sum are the reduction kernels' job.
//
// Memory traffic: input and target are read once, the losses (or the
// gradients) written once. The forward pass's blocks take consecutive
// stretches (stretch.cuh) and their threads move 16-byte packets of the
// narrower arrays where the three share an alignment phase, single elements
// elsewhere; the backward pass is one thread per element in a grid-stride
// loop.
#include <cuda_runtime.h>

#include <cstdint>

#include "math/convert.h"
#include "math/losses.h"
#include "multi_tensor.cuh"
#include "nn_launch.cuh"
#include "stretch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    mse_loss_kernel(const Elem<D>* input, const Elem<D>* target, float* losses, int64_t count,
                    int64_t length) {
  constexpr int kPacketElems = kVector<16, sizeof(Elem<D>)>;
  const Stretch s = block_stretch(count, length);
  const int head = vector_head(s.begin, input, target, losses);
  for_each_packet<kPacketElems>(s.begin, s.end, head, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto xs = load_pack<W>(input + j);
    const auto ts = load_pack<W>(target + j);
    Pack<float, W> ls;
#pragma unroll
    for (int k = 0; k < W; ++k)
      ls.v[k] = math::squared_error(math::load_float<D>(xs.v[k]), math::load_float<D>(ts.v[k]));
    store_pack(losses + j, ls);
  });
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    mse_loss_backward_kernel(const Elem<D>* input, const Elem<D>* target, const float* dloss,
                             int64_t dloss_stride, float scale, Elem<D>* d_input,
                             Elem<D>* d_target, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; i < count;
       i += step) {
    const float g = math::squared_error_grad(math::load_float<D>(input[i]),
                                             math::load_float<D>(target[i]),
                                             dloss[i * dloss_stride] * scale);
    if (d_input) d_input[i] = math::store_float<D>(g);
    if (d_target) d_target[i] = math::store_float<D>(-g);
  }
}

}  // namespace

cudaError_t launch_mse_loss(const void* input, const void* target, DType type, int64_t count,
                            float* losses, const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  const Stretches st = plan_stretches(count, launch);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(mse_loss_kernel<D>, st.blocks, launch, static_cast<const Elem<D>*>(input),
                   static_cast<const Elem<D>*>(target), losses, count, st.length);
  });
}

cudaError_t launch_mse_loss_backward(const void* input, const void* target, DType type,
                                     int64_t count, const float* dloss, int64_t dloss_stride,
                                     float scale, void* d_input, void* d_target,
                                     const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(mse_loss_backward_kernel<D>, grid_blocks(count, launch), launch,
                   static_cast<const Elem<D>*>(input), static_cast<const Elem<D>*>(target), dloss,
                   dloss_stride, scale, static_cast<Elem<D>*>(d_input),
                   static_cast<Elem<D>*>(d_target), count);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
