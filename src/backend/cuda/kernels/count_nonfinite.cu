// count_nonfinite.cu -- counts the NaNs and infinities of each tensor of a
// list (ampx_find_nonfinite_grads: which gradients hold them, and how many).
//
//   counts[2*i]     += NaN elements of tensor i
//   counts[2*i + 1] += infinite elements of tensor i
//
// Memory traffic: reads every element once. Each block reduces its chunk's
// counts and adds them with one 64-bit atomic per nonzero count, so the
// atomics are as few as the chunks that hold a non-finite value. The caller
// zeroes the counts first.
#include <cuda_runtime.h>

#include "multi_tensor.cuh"
#include "multi_tensor_ops.cuh"
#include "math/amp.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cuda {
namespace {

// Slot arrays: ptr[0] = the tensor; tensor_info = its index in the list.
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    count_nonfinite_kernel(const __grid_constant__ TensorListArgs<1> args, int64_t* counts) {
  const BlockChunk c = block_chunk(args);
  const auto* x = static_cast<const math::storage_t<D>*>(args.ptr[0][c.slot]);
  // A chunk has at most kChunkElements elements: int cannot overflow.
  int nans = 0;
  int infs = 0;
  constexpr int V = kVector<32, sizeof(math::storage_t<D>)>;
  for_each_packet<V>(c.begin, c.end, vector_head(c.begin, x), [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto p = load_pack<W>(x + j);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float v = math::load_float<D>(p.v[k]);
      nans += v != v;
      infs += !math::is_finite(v) && v == v;
    }
  });
  const auto sum = [](int a, int b) { return a + b; };
  nans = block_reduce(nans, sum);
  infs = block_reduce(infs, sum);
  if (threadIdx.x != 0) return;
  auto* tensor_counts =
      reinterpret_cast<unsigned long long*>(counts + 2 * int64_t{args.tensor_info[c.slot]});
  if (nans != 0) atomicAdd(tensor_counts, static_cast<unsigned long long>(nans));
  if (infs != 0) atomicAdd(tensor_counts + 1, static_cast<unsigned long long>(infs));
}

}  // namespace

cudaError_t launch_multi_tensor_count_nonfinite(const std::vector<TensorSpan>& tensors,
                                                int64_t* counts, const LaunchConfig& launch) {
  std::vector<DType> types;
  for (const TensorSpan& t : tensors) types.push_back(t.dtype);
  for (const DtypeGroup& group : group_by_dtypes(types, types, element_counts(tensors))) {
    const cudaError_t status = visit_floating(group.first, [&](auto tag) {
      const auto kernel = count_nonfinite_kernel<decltype(tag)::value>;
      return launch_group<1>(
          group,
          [&](TensorListArgs<1>& args, int slot, int64_t i) {
            args.ptr[0][slot] = tensors[static_cast<size_t>(i)].data;
            args.tensor_info[slot] = static_cast<int32_t>(i);
          },
          [&](const TensorListArgs<1>& args, unsigned int blocks, int64_t) {
            return enqueue(kernel, blocks, launch, args, counts);
          });
    });
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace ampx::impl
