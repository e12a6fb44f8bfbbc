// pool2d.cu -- 2-D max and average pooling of each plane, forward and
// backward (core/backend_conv.h; the windows of math/pool.h, as the CPU's).
//
//   forward   y[n, p, q] = max or average of x[n] over output (p, q)'s window
//   backward  dx[n, a, b] = sum over the outputs (p, q) whose window holds
//             (a, b) of dy[n, p, q] (max: only where (a, b) is the window's
//             maximum; average: divided by the window's divisor)
//   gather    y[n, p, q] = src[n, argmax of x[n] over (p, q)'s window] (max
//             only: the backward's adjoint, for the differentiable formulas)
//
// One thread per output element forward, per input element backward. The
// backward pass gathers instead of scattering: each dx element is written
// once, by one thread, with no atomics, and its sum runs over (p, q) in
// row-major order, as the CPU backend adds, so both give the same bits.
// Max pooling's backward re-finds each covering window's maximum in x
// rather than keeping indices from the forward pass: a window of kh x kw
// reads per covering output, against a saved int64 per output.
// Traffic: forward reads x about kh kw / (sh sw) times (through the
// cache) and writes y once; backward writes dx once and reads dy (and, for
// max, x) for each covering window.
#include <cuda_runtime.h>

#include "core/dtype.h"
#include "math/convert.h"
#include "math/pool.h"
#include "nn_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

template <int D>
struct PlaneLoad {
  const Elem<D>* plane;
  __device__ float operator()(int64_t i) const { return math::load_float<D>(plane[i]); }
};

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    pool2d_forward_kernel(Pool2dShape s, const Elem<D>* x, Elem<D>* y) {
  const int64_t out_size = s.out_h * s.out_w, count = s.planes * out_size;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; i < count;
       i += step) {
    const int64_t plane = i / out_size, p = i % out_size / s.out_w, q = i % s.out_w;
    const Elem<D>* in = x + plane * s.in_h * s.in_w;
    float value = 0.0f;
    if (s.kind == PoolKind::Max) {
      const int64_t at = math::pool_window_argmax(s, PlaneLoad<D>{in}, p, q);
      value = at < 0 ? math::bits_float(0xff800000u) : math::load_float<D>(in[at]);
    } else {
      const math::AverageWindow win = math::pool_average_window(s, p, q);
      float sum = 0.0f;
      for (int64_t a = win.row_begin; a < win.row_end; ++a)
        for (int64_t b = win.col_begin; b < win.col_end; ++b)
          sum += math::load_float<D>(in[a * s.in_w + b]);
      if (win.row_begin < win.row_end && win.col_begin < win.col_end) value = sum / win.divisor;
    }
    y[i] = math::store_float<D>(value);
  }
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    pool2d_backward_kernel(Pool2dShape s, const Elem<D>* x, const Elem<D>* dy, Elem<D>* dx) {
  const int64_t in_size = s.in_h * s.in_w, count = s.planes * in_size;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  const bool max = s.kind == PoolKind::Max;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; i < count;
       i += step) {
    const int64_t plane = i / in_size, here = i % in_size, a = here / s.in_w, b = here % s.in_w;
    const Elem<D>* grad_out = dy + plane * s.out_h * s.out_w;
    const PlaneLoad<D> load{x + plane * in_size};
    const math::OutputRange rows = math::pool_outputs_covering(
        a, s.stride_h, s.pad_h, s.kernel_h, max ? s.dilation_h : 1, s.out_h);
    const math::OutputRange cols = math::pool_outputs_covering(
        b, s.stride_w, s.pad_w, s.kernel_w, max ? s.dilation_w : 1, s.out_w);
    float sum = 0.0f;
    for (int64_t p = rows.first; p < rows.last; ++p)
      for (int64_t q = cols.first; q < cols.last; ++q) {
        const float g = math::load_float<D>(grad_out[p * s.out_w + q]);
        if (max) {
          if (math::pool_window_argmax(s, load, p, q) == here) sum += g;
          continue;
        }
        const math::AverageWindow win = math::pool_average_window(s, p, q);
        if (a >= win.row_begin && a < win.row_end && b >= win.col_begin && b < win.col_end)
          sum += g / win.divisor;
      }
    dx[i] = math::store_float<D>(sum);
  }
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    max_pool2d_gather_kernel(Pool2dShape s, const Elem<D>* x, const Elem<D>* src, Elem<D>* y) {
  const int64_t in_size = s.in_h * s.in_w, out_size = s.out_h * s.out_w;
  const int64_t count = s.planes * out_size;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; i < count;
       i += step) {
    const int64_t plane = i / out_size, p = i % out_size / s.out_w, q = i % s.out_w;
    const int64_t at = math::pool_window_argmax(s, PlaneLoad<D>{x + plane * in_size}, p, q);
    y[i] = math::store_float<D>(at < 0 ? 0.0f : math::load_float<D>(src[plane * in_size + at]));
  }
}

}  // namespace

cudaError_t launch_pool2d_forward(const Pool2dShape& shape, const void* x, DType type, void* y,
                                  const LaunchConfig& launch) {
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(pool2d_forward_kernel<D>,
                   grid_blocks(shape.planes * shape.out_h * shape.out_w, launch), launch, shape,
                   static_cast<const Elem<D>*>(x), static_cast<Elem<D>*>(y));
  });
}

cudaError_t launch_pool2d_backward(const Pool2dShape& shape, const void* x, const void* dy,
                                   DType type, void* dx, const LaunchConfig& launch) {
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(pool2d_backward_kernel<D>,
                   grid_blocks(shape.planes * shape.in_h * shape.in_w, launch), launch, shape,
                   static_cast<const Elem<D>*>(x), static_cast<const Elem<D>*>(dy),
                   static_cast<Elem<D>*>(dx));
  });
}

cudaError_t launch_max_pool2d_gather(const Pool2dShape& shape, const void* x, const void* src,
                                     DType type, void* y, const LaunchConfig& launch) {
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(max_pool2d_gather_kernel<D>,
                   grid_blocks(shape.planes * shape.out_h * shape.out_w, launch), launch, shape,
                   static_cast<const Elem<D>*>(x), static_cast<const Elem<D>*>(src),
                   static_cast<Elem<D>*>(y));
  });
}

}  // namespace cuda
}  // namespace ampx::impl
