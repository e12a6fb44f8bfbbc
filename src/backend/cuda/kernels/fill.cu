// fill.cu -- sets `count` elements of 1, 2, 4 or 8 bytes to one bit pattern.
//
//   dst[i] = pattern (low sizeof(T) bytes), i < count
//
// Memory traffic: writes count * sizeof(T) bytes, reads nothing.
//
// The bulk is written as 16-byte vectors (one st.global.v4 per thread per
// iteration). Because dst is aligned to the element size and 16 is a multiple
// of every element size, each 16-byte-aligned address starts an element, so
// a vector holding the pattern repeated is in phase with the elements. The at
// most 15 elements before the first aligned address and the fewer than 16
// bytes after the last whole vector are written one element per thread.
#include <cuda_runtime.h>

#include "fill_convert.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

template <class T>
__global__ void fill_kernel(T* __restrict__ dst, T value, uint4 vector, int64_t head,
                            int64_t vectors, int64_t count) {
  constexpr int64_t per_vector = 16 / sizeof(T);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  uint4* body = reinterpret_cast<uint4*>(dst + head);
  for (int64_t i = first; i < vectors; i += stride) body[i] = vector;

  const int64_t tail = head + vectors * per_vector;
  const int64_t scalars = head + (count - tail);
  if (first < scalars) dst[first < head ? first : tail + (first - head)] = value;
}

// The pattern's low sizeof(T) bytes repeated across 64 bits.
template <class T>
uint64_t replicate(uint64_t pattern) {
  uint64_t word = static_cast<T>(pattern);
  for (unsigned shift = 8 * sizeof(T); shift < 64; shift *= 2) word |= word << shift;
  return word;
}

template <class T>
cudaError_t fill_typed(void* dst, uint64_t pattern, int64_t count, const LaunchConfig& launch) {
  constexpr int64_t per_vector = 16 / sizeof(T);
  const uint64_t word = replicate<T>(pattern);
  const auto low = static_cast<unsigned int>(word);
  const auto high = static_cast<unsigned int>(word >> 32);

  const auto address = reinterpret_cast<uintptr_t>(dst);
  const auto to_boundary = static_cast<int64_t>((16 - address % 16) % 16 / sizeof(T));
  const int64_t head = to_boundary < count ? to_boundary : count;
  const int64_t vectors = (count - head) / per_vector;
  const int64_t scalars = count - vectors * per_vector;

  return enqueue(fill_kernel<T>, grid_blocks(vectors > scalars ? vectors : scalars, launch), launch,
                 static_cast<T*>(dst), static_cast<T>(pattern), make_uint4(low, high, low, high),
                 head, vectors, count);
}

}  // namespace

cudaError_t launch_fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count,
                        const LaunchConfig& launch) {
  if (count <= 0) return cudaSuccess;
  switch (elem_size) {
    case 1: return fill_typed<uint8_t>(dst, pattern, count, launch);
    case 2: return fill_typed<uint16_t>(dst, pattern, count, launch);
    case 4: return fill_typed<uint32_t>(dst, pattern, count, launch);
    case 8: return fill_typed<uint64_t>(dst, pattern, count, launch);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, fill_kernel<uint32_t>);
}

}  // namespace cuda
}  // namespace ampx::impl
