// pow.cu -- y = x^p for a number p and its gradient dx = dy p x^(p-1)
// (math::pow_value, math::pow_grad). One thread per element in a
// grid-stride loop; each array is read or written once.
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
    pow_kernel(const Elem<D>* x, Elem<D>* y, int64_t count, float p) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; i < count;
       i += step)
    y[i] = math::store_float<D>(math::pow_value(math::load_float<D>(x[i]), p));
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    pow_backward_kernel(const Elem<D>* x, const Elem<D>* dy, Elem<D>* dx, int64_t count, float p) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; i < count;
       i += step)
    dx[i] = math::store_float<D>(
        math::pow_grad(math::load_float<D>(x[i]), math::load_float<D>(dy[i]), p));
}

}  // namespace

cudaError_t launch_pow(const void* x, void* y, DType type, int64_t count, float exponent,
                       const LaunchConfig& launch) {
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(pow_kernel<D>, grid_blocks(count, launch), launch,
                   static_cast<const Elem<D>*>(x), static_cast<Elem<D>*>(y), count, exponent);
  });
}

cudaError_t launch_pow_backward(const void* x, const void* dy, void* dx, DType type,
                                int64_t count, float exponent, const LaunchConfig& launch) {
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(pow_backward_kernel<D>, grid_blocks(count, launch), launch,
                   static_cast<const Elem<D>*>(x), static_cast<const Elem<D>*>(dy),
                   static_cast<Elem<D>*>(dx), count, exponent);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
