// broadcast.cu -- the broadcasting binary op and reductions over chosen
// dimensions (core/backend_nn.h: BroadcastLayout, ReduceLayout).
//
//   binary_broadcast  out[i] = a[offset_a(i)] op b[offset_b(i)], the offsets
//                     from i's multi-index and each operand's strides (0
//                     along a broadcast dimension)
//   reduce_dims       out[j] = sum (in double) or max over the elements of
//                     x that agree with j on the kept dimensions
//
// One thread per output element in a grid-stride loop. A reduction visits
// its elements in row-major order over the reduced dimensions and adds in
// double, the order and precision of the CPU backend (cpu_broadcast.cpp):
// both give the same bits. Memory traffic: binary_broadcast writes out once
// and reads each operand element once per output element that uses it
// (from cache when broadcast); reduce_dims reads x once.
#include <cuda_runtime.h>

#include "core/dtype.h"
#include "math/binary.h"
#include "math/convert.h"
#include "ops_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

template <int D, BinaryOp Op>
__global__ void __launch_bounds__(kBlockThreads)
    binary_broadcast_kernel(const Elem<D>* a, const Elem<D>* b, Elem<D>* out, BroadcastLayout l,
                            int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; i < count;
       i += step) {
    int64_t rest = i, oa = 0, ob = 0;
    for (int32_t k = l.ndim - 1; k >= 0; --k) {
      const int64_t c = rest % l.sizes[k];
      rest /= l.sizes[k];
      oa += c * l.a_strides[k];
      ob += c * l.b_strides[k];
    }
    out[i] = math::store_float<D>(
        math::binary_value<Op>(math::load_float<D>(a[oa]), math::load_float<D>(b[ob])));
  }
}

// The kept and the reduced dimensions of a ReduceLayout with x's strides.
struct ReducePlan {
  int32_t kept = 0, reduced = 0;
  int64_t kept_size[AMPX_MAX_DIMS] = {}, kept_stride[AMPX_MAX_DIMS] = {};
  int64_t reduced_size[AMPX_MAX_DIMS] = {}, reduced_stride[AMPX_MAX_DIMS] = {};
  int64_t outputs = 1, per_output = 1;
};

ReducePlan plan_of(const ReduceLayout& l) {
  ReducePlan p;
  int64_t stride[AMPX_MAX_DIMS];
  int64_t running = 1;
  for (int32_t k = l.ndim - 1; k >= 0; --k) {
    stride[k] = running;
    running *= l.sizes[k];
  }
  for (int32_t k = 0; k < l.ndim; ++k) {
    if (l.reduced & (1u << k)) {
      p.reduced_size[p.reduced] = l.sizes[k];
      p.reduced_stride[p.reduced++] = stride[k];
      p.per_output *= l.sizes[k];
    } else {
      p.kept_size[p.kept] = l.sizes[k];
      p.kept_stride[p.kept++] = stride[k];
      p.outputs *= l.sizes[k];
    }
  }
  return p;
}

template <int D, int O, bool Max>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_dims_kernel(const Elem<D>* x, Elem<O>* out, ReducePlan p) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; j < p.outputs;
       j += step) {
    int64_t base = 0, rest = j;
    for (int32_t k = p.kept - 1; k >= 0; --k) {
      base += rest % p.kept_size[k] * p.kept_stride[k];
      rest /= p.kept_size[k];
    }
    double sum = 0.0;
    float max = math::bits_float(0xff800000u);
    for (int64_t r = 0; r < p.per_output; ++r) {
      int64_t offset = base, left = r;
      for (int32_t k = p.reduced - 1; k >= 0; --k) {
        offset += left % p.reduced_size[k] * p.reduced_stride[k];
        left /= p.reduced_size[k];
      }
      const float v = math::load_float<D>(x[offset]);
      if (!Max)
        sum += v;
      else if ((v > max || v != v) && max == max)
        max = v;
    }
    out[j] = Max ? math::store_float<O>(max) : math::store_double<O>(sum);
  }
}

}  // namespace

cudaError_t launch_binary_broadcast(BinaryOp op, const void* a, const void* b, void* out,
                                    DType type, const BroadcastLayout& layout,
                                    const LaunchConfig& launch) {
  int64_t count = 1;
  for (int32_t k = 0; k < layout.ndim; ++k) count *= layout.sizes[k];
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const auto* x = static_cast<const Elem<D>*>(a);
    const auto* y = static_cast<const Elem<D>*>(b);
    auto* z = static_cast<Elem<D>*>(out);
    const unsigned int blocks = grid_blocks(count, launch);
    switch (op) {
      case BinaryOp::Add:
        return enqueue(binary_broadcast_kernel<D, BinaryOp::Add>, blocks, launch, x, y, z, layout,
                       count);
      case BinaryOp::Sub:
        return enqueue(binary_broadcast_kernel<D, BinaryOp::Sub>, blocks, launch, x, y, z, layout,
                       count);
      case BinaryOp::Mul:
        return enqueue(binary_broadcast_kernel<D, BinaryOp::Mul>, blocks, launch, x, y, z, layout,
                       count);
      case BinaryOp::Div:
        return enqueue(binary_broadcast_kernel<D, BinaryOp::Div>, blocks, launch, x, y, z, layout,
                       count);
      case BinaryOp::Equal:
        break;
    }
    return enqueue(binary_broadcast_kernel<D, BinaryOp::Equal>, blocks, launch, x, y, z, layout,
                   count);
  });
}

cudaError_t launch_reduce_dims(DimReduce op, const void* x, DType type, const ReduceLayout& layout,
                               void* out, DType out_type, const LaunchConfig& launch) {
  const ReducePlan plan = plan_of(layout);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return visit_floating(out_type, [&](auto out_tag) {
      constexpr int O = decltype(out_tag)::value;
      const auto kernel =
          op == DimReduce::Max ? reduce_dims_kernel<D, O, true> : reduce_dims_kernel<D, O, false>;
      return enqueue(kernel, grid_blocks(plan.outputs, launch), launch,
                     static_cast<const Elem<D>*>(x), static_cast<Elem<O>*>(out), plan);
    });
  });
}

}  // namespace cuda
}  // namespace ampx::impl
