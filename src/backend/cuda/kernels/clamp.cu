// clamp.cu -- clamps every element of a list of tensors to [-limit, limit]
// (torch.nn.utils.clip_grad_value_).
//
//   x[i] = x[i] < -limit ? store_float<D>(-limit)
//        : x[i] >  limit ? store_float<D>(limit)
//        : x[i]                       (NaN included, bits untouched)
//
// Memory traffic: reads every element once; writes back only the packets
// (16 or 32 bytes) that hold an element out of bounds, so clamping gradients
// that are already within bounds costs a read of them and nothing more.
#include <cuda_runtime.h>

#include "multi_tensor.cuh"
#include "multi_tensor_ops.cuh"
#include "math/convert.h"

namespace ampx::impl {
namespace cuda {
namespace {

// Slot arrays: ptr[0] = the tensor.
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    clamp_kernel(const __grid_constant__ TensorListArgs<1> args, float limit) {
  const BlockChunk c = block_chunk(args);
  auto* x = static_cast<math::storage_t<D>*>(args.ptr[0][c.slot]);
  const auto low = math::store_float<D>(-limit);
  const auto high = math::store_float<D>(limit);
  constexpr int V = kVector<32, sizeof(math::storage_t<D>)>;
  for_each_packet<V>(c.begin, c.end, vector_head(c.begin, x), [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    auto p = load_pack<W>(x + j);
    bool changed = false;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float v = math::load_float<D>(p.v[k]);
      if (v < -limit) {
        p.v[k] = low;
        changed = true;
      } else if (v > limit) {
        p.v[k] = high;
        changed = true;
      }
    }
    // Unchanged elements of a packet are rewritten with their own bits.
    if (changed) store_pack(x + j, p);
  });
}

}  // namespace

cudaError_t launch_multi_tensor_clamp(const std::vector<TensorSpan>& tensors, float limit,
                                      const LaunchConfig& launch) {
  std::vector<DType> types;
  for (const TensorSpan& t : tensors) types.push_back(t.dtype);
  for (const DtypeGroup& group : group_by_dtypes(types, types, element_counts(tensors))) {
    const cudaError_t status = visit_floating(group.first, [&](auto tag) {
      const auto kernel = clamp_kernel<decltype(tag)::value>;
      return launch_group<1>(
          group,
          [&](TensorListArgs<1>& args, int slot, int64_t i) {
            args.ptr[0][slot] = tensors[static_cast<size_t>(i)].data;
          },
          [&](const TensorListArgs<1>& args, unsigned int blocks, int64_t) {
            return enqueue(kernel, blocks, launch, args, limit);
          });
    });
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace ampx::impl
