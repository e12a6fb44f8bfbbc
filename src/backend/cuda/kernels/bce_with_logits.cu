// bce_with_logits.cu -- element-wise binary cross-entropy of logits against
// targets, both of one floating type, in fp32 with an F32 result, with
// torch's optional weight w and pos_weight p (BceWeights, F32, element i
// reading w[i % period] and p[i % period]):
//
//   losses[i] = w_i math::bce_with_logits_loss(logits[i], targets[i], p_i)
//             = w_i ((1 - t) x - (1 + (p_i - 1) t) log sigmoid(x))  (math/losses.h)
//
// and its backward pass: with g = dloss[i * stride] * scale * w_i,
//
//   d_logits[i]  = g ((1 + (p_i - 1) t) sigmoid(x) - p_i t)
//   d_targets[i] = g (log sigmoid(-x) - p_i log sigmoid(x))   (-g x without p)
//
// each rounded to the inputs' type once (math::bce_with_logits_grads).
//
// The formulas are the CPU backend's, operation for operation and without
// fused multiply-adds (--fmad=false), so the two backends differ only as
// CUDA's expf and log1pf differ from the host's (a few ulps; the tests
// derive the bound). The mean or sum over the losses is the reduction
// kernels' job, which keeps this one a pure map.
//
// Memory traffic: logits and targets are read once and the losses (or the
// gradients) written once; the weights add 4 bytes an element each, fewer
// where they repeat (pos_weight [C] stays in cache). The forward pass's
// blocks take consecutive stretches (stretch.cuh) and their threads move
// 16-byte packets of the narrower arrays (32 bytes of the losses for
// fp16/bf16 inputs) where the three arrays share an alignment phase, single
// elements elsewhere; the backward pass is one thread per element in a
// grid-stride loop.
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

__device__ __forceinline__ float weight_at(const float* w, int64_t period, int64_t i) {
  return w ? w[i % period] : 1.0f;
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    bce_with_logits_kernel(const Elem<D>* logits, const Elem<D>* targets, float* losses,
                           BceWeights weights, int64_t count, int64_t length) {
  constexpr int kPacketElems = kVector<16, sizeof(Elem<D>)>;
  const Stretch s = block_stretch(count, length);
  const int head = vector_head(s.begin, logits, targets, losses);
  for_each_packet<kPacketElems>(s.begin, s.end, head, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto xs = load_pack<W>(logits + j);
    const auto ts = load_pack<W>(targets + j);
    Pack<float, W> ls;
#pragma unroll
    for (int k = 0; k < W; ++k)
      ls.v[k] = weight_at(weights.weight, weights.weight_period, j + k) *
                math::bce_with_logits_loss(
                    math::load_float<D>(xs.v[k]), math::load_float<D>(ts.v[k]),
                    weight_at(weights.pos_weight, weights.pos_weight_period, j + k));
    store_pack(losses + j, ls);
  });
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    bce_with_logits_backward_kernel(const Elem<D>* logits, const Elem<D>* targets,
                                    BceWeights weights, const float* dloss, int64_t dloss_stride,
                                    float scale, Elem<D>* d_logits, Elem<D>* d_targets,
                                    int64_t count) {
  const bool has_pos_weight = weights.pos_weight != nullptr;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; i < count;
       i += step) {
    const float g =
        dloss[i * dloss_stride] * scale * weight_at(weights.weight, weights.weight_period, i);
    const math::BceGrads d = math::bce_with_logits_grads(
        math::load_float<D>(logits[i]), math::load_float<D>(targets[i]),
        weight_at(weights.pos_weight, weights.pos_weight_period, i), has_pos_weight, g);
    if (d_logits) d_logits[i] = math::store_float<D>(d.logit);
    if (d_targets) d_targets[i] = math::store_float<D>(d.target);
  }
}

}  // namespace

cudaError_t launch_bce_with_logits(const void* logits, const void* targets, DType type,
                                   int64_t count, float* losses, const BceWeights& weights,
                                   const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  const Stretches st = plan_stretches(count, launch);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(bce_with_logits_kernel<D>, st.blocks, launch,
                   static_cast<const Elem<D>*>(logits), static_cast<const Elem<D>*>(targets),
                   losses, weights, count, st.length);
  });
}

cudaError_t launch_bce_with_logits_backward(const void* logits, const void* targets, DType type,
                                            int64_t count, const BceWeights& weights,
                                            const float* dloss, int64_t dloss_stride, float scale,
                                            void* d_logits, void* d_targets,
                                            const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(bce_with_logits_backward_kernel<D>, grid_blocks(count, launch), launch,
                   static_cast<const Elem<D>*>(logits), static_cast<const Elem<D>*>(targets),
                   weights, dloss, dloss_stride, scale, static_cast<Elem<D>*>(d_logits),
                   static_cast<Elem<D>*>(d_targets), count);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
