// dropout.cu -- dropout of any floating type, computed in fp32 and rounded
// once when stored:
//
//   y[i] = math::dropout_value(x[i], word i, threshold, scale)
//
// where word i is lane i % 4 of math::dropout_block(math::dropout_key(seed),
// offset, i / 4) (math/random.h), exactly the words the CPU backend uses, so
// both backends give the same bits. One thread computes one Philox block
// and the four elements it covers; blocks are numbered with 64-bit
// counters, so counts past 2^32 elements keep distinct words.
//
// Memory traffic: x is read once and y written once; where both arrays are
// aligned to four elements, a thread moves its four elements as one 16-byte
// (fp32) or 8-byte (fp16/bf16) access. y may be x (in place): each thread
// reads its four elements before writing them, and no other thread touches
// them. The backward pass is the same launch on dy.
#include <cuda_runtime.h>

#include <cstdint>

#include "math/convert.h"
#include "math/random.h"
#include "multi_tensor.cuh"
#include "nn_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <int D>
using Elem = math::storage_t<D>;

// The four elements of one Philox block as one aligned access (ld/st of 16
// bytes for fp32, 8 for fp16/bf16).
template <class T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// Vector: x and y are aligned to 4 elements, so block b's elements 4b..4b+3
// load and store as one Quad; the last, partial block (count % 4 elements)
// takes the scalar path.
template <int D, bool Vector>
__global__ void __launch_bounds__(kBlockThreads)
    dropout_kernel(const Elem<D>* x, Elem<D>* y, int64_t count, math::PhiloxKey key,
                   uint64_t offset, uint32_t threshold, float scale) {
  const int64_t blocks = (count + 3) / 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks;
       b += step) {
    const math::Philox4x32 words = math::dropout_block(key, offset, static_cast<uint64_t>(b));
    const int64_t first = b * 4;
    if (Vector && first + 4 <= count) {
      Quad<Elem<D>> v = *reinterpret_cast<const Quad<Elem<D>>*>(x + first);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        v.v[k] = math::store_float<D>(
            math::dropout_value(math::load_float<D>(v.v[k]), words.v[k], threshold, scale));
      *reinterpret_cast<Quad<Elem<D>>*>(y + first) = v;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (first + k < count)
          y[first + k] = math::store_float<D>(math::dropout_value(
              math::load_float<D>(x[first + k]), words.v[k], threshold, scale));
    }
  }
}

}  // namespace

cudaError_t launch_dropout(const void* x, void* y, DType type, int64_t count, uint64_t seed,
                           uint64_t offset, uint32_t threshold, float scale,
                           const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  const math::PhiloxKey key = math::dropout_key(seed);
  return visit_floating(type, [&](auto tag) {
    constexpr int D = decltype(tag)::value;
    const uintptr_t quad = sizeof(Quad<Elem<D>>);
    const bool vector = reinterpret_cast<uintptr_t>(x) % quad == 0 &&
                        reinterpret_cast<uintptr_t>(y) % quad == 0;
    const auto kernel = vector ? dropout_kernel<D, true> : dropout_kernel<D, false>;
    return enqueue(kernel, grid_blocks((count + 3) / 4, launch), launch,
                   static_cast<const Elem<D>*>(x), static_cast<Elem<D>*>(y), count, key, offset,
                   threshold, scale);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
