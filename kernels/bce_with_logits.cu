// bce_with_logits.cu -- element-wise binary cross-entropy of logits against
// targets, both of one floating type, in fp32 with an F32 result:
//
//   losses[i] = math::bce_with_logits_loss(logits[i], targets[i])
//             = max(x, 0) - x t + log1p(exp(-|x|))       (math/losses.h)
//
// The formula is the CPU backend's, operation for operation and without
// fused multiply-adds (--fmad=false), so the two backends differ only as
// CUDA's expf and log1pf differ from the host's (a few ulps; the tests
// derive the bound). The mean or sum over the losses is the reduction
// kernels' job, which keeps this one a pure map.
//
// Memory traffic: logits and targets are read once and the losses written
// once. Blocks take consecutive stretches (stretch.cuh) and their threads
// move 16-byte packets of the narrower arrays (32 bytes of the losses for
// fp16/bf16 inputs) where the three arrays share an alignment phase, single
// elements elsewhere.
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
    bce_with_logits_kernel(const Elem<D>* logits, const Elem<D>* targets, float* losses,
                           int64_t count, int64_t length) {
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
      ls.v[k] =
          math::bce_with_logits_loss(math::load_float<D>(xs.v[k]), math::load_float<D>(ts.v[k]));
    store_pack(losses + j, ls);
  });
}

}  // namespace

cudaError_t launch_bce_with_logits(const void* logits, const void* targets, DType type,
                                   int64_t count, float* losses, const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  const Stretches st = plan_stretches(count, launch);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(bce_with_logits_kernel<D>, st.blocks, launch,
                   static_cast<const Elem<D>*>(logits), static_cast<const Elem<D>*>(targets),
                   losses, count, st.length);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
