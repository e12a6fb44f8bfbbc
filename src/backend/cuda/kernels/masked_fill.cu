// masked_fill.cu -- out[i] = mask(i) set ? value : x[i] (math::mask_set),
// the mask broadcast to x's shape through layout.b_strides. One thread per
// element in a grid-stride loop; reads x once and the mask once per
// element that uses it (from cache when broadcast), writes out once.
#include <cuda_runtime.h>

#include "core/dtype.h"
#include "math/block_ops.h"
#include "nn_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    masked_fill_kernel(const Elem<D>* x, const void* mask, int32_t mask_kind, Elem<D> fill,
                       Elem<D>* out, BroadcastLayout l, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; i < count;
       i += step) {
    int64_t rest = i, ox = 0, om = 0;
    for (int32_t k = l.ndim - 1; k >= 0; --k) {
      const int64_t c = rest % l.sizes[k];
      rest /= l.sizes[k];
      ox += c * l.a_strides[k];
      om += c * l.b_strides[k];
    }
    out[i] = math::mask_set(mask, mask_kind, om) ? fill : x[ox];
  }
}

}  // namespace

cudaError_t launch_masked_fill(const void* x, DType type, const void* mask, DType mask_type,
                               float value, void* out, const BroadcastLayout& layout,
                               const LaunchConfig& launch) {
  int64_t count = 1;
  for (int32_t k = 0; k < layout.ndim; ++k) count *= layout.sizes[k];
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(masked_fill_kernel<D>, grid_blocks(count, launch), launch,
                   static_cast<const Elem<D>*>(x), mask, static_cast<int32_t>(mask_type),
                   math::store_float<D>(value), static_cast<Elem<D>*>(out), layout, count);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
