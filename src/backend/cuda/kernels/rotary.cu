// rotary.cu -- rotary position embeddings (core/backend_nn.h, RotaryShape):
// for each row of x [rows, positions, dim] at position t and pair i <
// dim / 2, (x_a, x_b) -> (x_a c - x_b s, x_b c + x_a s) with c = cos[t][i],
// s = sin[t][i] (math::rotate; inverse negates s, the backward pass). One
// thread per pair in a grid-stride loop: x read and out written once, the
// tables read once per row (from cache).
#include <cuda_runtime.h>

#include "core/dtype.h"
#include "math/attention.h"
#include "math/block_ops.h"
#include "nn_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    rotary_kernel(const Elem<D>* x, const void* cos, const void* sin, int table_kind,
                  Elem<D>* out, RotaryShape s, bool inverse) {
  const int64_t half = s.dim / 2;
  const int64_t pairs = s.rows * s.positions * half;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlockThreads;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(kBlockThreads) + threadIdx.x; p < pairs;
       p += step) {
    const int64_t row = p / half, i = p % half, t = row % s.positions;
    const int64_t ia = s.interleaved ? 2 * i : i, ib = s.interleaved ? 2 * i + 1 : i + half;
    const Elem<D>* v = x + row * s.dim;
    const math::Rotated r = math::rotate(math::load_float<D>(v[ia]), math::load_float<D>(v[ib]),
                                         math::attention_load(cos, table_kind, t * half + i),
                                         math::attention_load(sin, table_kind, t * half + i),
                                         inverse);
    out[row * s.dim + ia] = math::store_float<D>(r.a);
    out[row * s.dim + ib] = math::store_float<D>(r.b);
  }
}

}  // namespace

cudaError_t launch_rotary(const void* x, DType type, const void* cos, const void* sin,
                          DType table_type, void* out, const RotaryShape& shape, bool inverse,
                          const LaunchConfig& launch) {
  const int kind = table_type == DType::F32   ? math::kAttentionF32
                   : table_type == DType::F16 ? math::kAttentionF16
                                              : math::kAttentionBF16;
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    return enqueue(rotary_kernel<D>, grid_blocks(shape.rows * shape.positions * (shape.dim / 2), launch),
                   launch, static_cast<const Elem<D>*>(x), cos, sin, kind,
                   static_cast<Elem<D>*>(out), shape, inverse);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
