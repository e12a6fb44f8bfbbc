// multi_tensor_norm.cu -- the total norm of a list of tensors, and the
// clipping coefficient derived from it (torch.nn.utils.clip_grad_norm_).
//
//   pass 1, one block per chunk:  partials[c] = sum of x^2 (L2) or max |x|
//                                 (Inf) over chunk c, in double
//   pass 2, one block:            total = sum (L2) or max (Inf) of partials
//                                 in chunk order; *out = sqrt(total) or total
//   clip:                         *coef = math::clip_coefficient(*total_norm, max_norm)
//
// Memory traffic: reads every element once, writes 8 bytes per chunk, then
// reads those back once. The order of every addition is fixed by the chunk
// plan and the block shape (never by scheduling or atomics), so a norm is
// the same on every run. A NaN element makes the result NaN: sums propagate
// it, and the max keeps it explicitly.
#include <cuda_runtime.h>

#include "multi_tensor.cuh"
#include "multi_tensor_ops.cuh"
#include "math/amp.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cuda {
namespace {

// fmax would drop a NaN operand; the Inf norm must return it.
__device__ __forceinline__ double max_keeping_nan(double a, double b) {
  return (a != a || a > b) ? a : b;
}

template <NormType Type>
__device__ __forceinline__ double combine(double a, double b) {
  if constexpr (Type == NormType::L2)
    return a + b;
  else
    return max_keeping_nan(a, b);
}

// Slot arrays: ptr[0] = the tensor. The block's partial goes to
// partials[first_partial + blockIdx.x].
template <int D, NormType Type>
__global__ void __launch_bounds__(kBlockThreads)
    norm_partials_kernel(const __grid_constant__ TensorListArgs<1> args, double* partials,
                         int64_t first_partial) {
  const BlockChunk c = block_chunk(args);
  const auto* x = static_cast<const math::storage_t<D>*>(args.ptr[0][c.slot]);
  double acc = 0.0;
  constexpr int V = kVector<32, sizeof(math::storage_t<D>)>;
  for_each_packet<V>(c.begin, c.end, vector_head(c.begin, x), [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto p = load_pack<W>(x + j);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const double v = math::load_float<D>(p.v[k]);
      acc = Type == NormType::L2 ? acc + v * v : max_keeping_nan(acc, fabs(v));
    }
  });
  acc = block_reduce(acc, [](double a, double b) { return combine<Type>(a, b); });
  if (threadIdx.x == 0) partials[first_partial + blockIdx.x] = acc;
}

template <NormType Type>
__global__ void __launch_bounds__(kBlockThreads)
    norm_total_kernel(const double* partials, int64_t count, float* out) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kBlockThreads) acc = combine<Type>(acc, partials[i]);
  acc = block_reduce(acc, [](double a, double b) { return combine<Type>(a, b); });
  if (threadIdx.x == 0) *out = static_cast<float>(Type == NormType::L2 ? sqrt(acc) : acc);
}

__global__ void clip_coefficient_kernel(const float* total_norm, float max_norm, float* coef) {
  *coef = math::clip_coefficient(*total_norm, max_norm);
}

template <NormType Type>
cudaError_t launch_norm(const std::vector<TensorSpan>& tensors, double* partials, float* out,
                        const LaunchConfig& launch) {
  std::vector<DType> types;
  for (const TensorSpan& t : tensors) types.push_back(t.dtype);
  // Groups take consecutive ranges of partials, in group order.
  int64_t group_base = 0;
  for (const DtypeGroup& group : group_by_dtypes(types, types, element_counts(tensors))) {
    const auto fill = [&](TensorListArgs<1>& args, int slot, int64_t i) {
      args.ptr[0][slot] = tensors[static_cast<size_t>(i)].data;
    };
    int64_t group_chunks = 0;
    const cudaError_t status = visit_floating(group.first, [&](auto tag) {
      const auto kernel = norm_partials_kernel<decltype(tag)::value, Type>;
      return launch_group<1>(group, fill, [&](const TensorListArgs<1>& args, unsigned int blocks,
                                              int64_t first_chunk) {
        group_chunks = first_chunk + blocks;
        return enqueue(kernel, blocks, launch, args, partials, group_base + first_chunk);
      });
    });
    if (status != cudaSuccess) return status;
    group_base += group_chunks;
  }
  return enqueue(norm_total_kernel<Type>, 1, launch, static_cast<const double*>(partials),
                 group_base, out);
}

}  // namespace

int64_t multi_tensor_norm_partials(const std::vector<TensorSpan>& tensors) {
  return static_cast<int64_t>(plan_chunks(element_counts(tensors), kChunkElements).size());
}

cudaError_t launch_multi_tensor_norm(const std::vector<TensorSpan>& tensors, NormType type,
                                     double* partials, float* out, const LaunchConfig& launch) {
  return type == NormType::L2 ? launch_norm<NormType::L2>(tensors, partials, out, launch)
                              : launch_norm<NormType::Inf>(tensors, partials, out, launch);
}

cudaError_t launch_clip_coefficient(const float* total_norm, float max_norm, float* coef,
                                    const LaunchConfig& launch) {
  return enqueue_single_thread(clip_coefficient_kernel, launch, total_norm, max_norm, coef);
}

}  // namespace cuda
}  // namespace ampx::impl
