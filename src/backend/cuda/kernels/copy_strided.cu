// copy_strided.cu -- the strided copy of backend.h's StridedCopy: element
// (i_0, ..., i_{n-1}) goes from src[sum i_k src_strides[k]] to
// dst[sum i_k dst_strides[k]], elements of 1, 2, 4 or 8 bytes moved as
// opaque words (transpose, concatenation, slicing; any dtype).
//
// The host first simplifies the layout without changing the copy: extents
// of 1 are dropped (their index is always 0), and a dimension is merged into
// the next inner one wherever both sides step over that inner one
// contiguously (stride_k == size_{k+1} stride_{k+1} in dst and in src). A
// contiguous copy so becomes one dimension, a batched transpose at most
// three. One thread per element then splits its linear index, innermost
// fastest, into the remaining dimensions: consecutive threads move
// consecutive elements of the innermost dimension, so whichever side has
// stride 1 there is accessed coalesced (a transpose reads or writes the
// other side with a stride, as in the naive transpose). The index split is
// done in 32-bit arithmetic when the element count allows it, as 64-bit
// division costs several times more, and the dimension count is a template
// parameter for up to 3 dimensions so the divisions unroll with the sizes
// held in registers.
//
// Memory traffic: each element is read once and written once.
#include <cuda_runtime.h>

#include <cstdint>

#include "nn_launch.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

constexpr int kMaxDims = AMPX_MAX_DIMS;

// The simplified layout, right-aligned: its n dimensions occupy slots
// kMaxDims - n .. kMaxDims - 1 (innermost last), and the slots in front hold
// extent 1 and stride 0, so a kernel for N dimensions reads only the last N
// slots with indices known at compile time (no local-memory copy of the
// parameter).
struct Layout {
  int64_t sizes[kMaxDims];
  int64_t dst_strides[kMaxDims];
  int64_t src_strides[kMaxDims];
};

template <size_t Size>
struct WordOf;
template <>
struct WordOf<1> {
  using type = uint8_t;
};
template <>
struct WordOf<2> {
  using type = uint16_t;
};
template <>
struct WordOf<4> {
  using type = uint32_t;
};
template <>
struct WordOf<8> {
  using type = uint64_t;
};

// N: the number of dimensions the kernel splits into (the slots read);
// Index: uint32_t when the element count fits, else uint64_t.
template <class T, int N, class Index>
__global__ void __launch_bounds__(kBlockThreads)
    copy_strided_kernel(T* dst, const T* src, Layout l, Index total) {
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index t = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += step) {
    Index rest = t;
    int64_t d = 0, s = 0;
#pragma unroll
    for (int k = kMaxDims - 1; k > kMaxDims - N; --k) {
      const Index size = static_cast<Index>(l.sizes[k]);
      const Index q = rest / size;
      const auto i = static_cast<int64_t>(rest - q * size);
      rest = q;
      d += i * l.dst_strides[k];
      s += i * l.src_strides[k];
    }
    // The outermost dimension takes what is left: no division.
    d += static_cast<int64_t>(rest) * l.dst_strides[kMaxDims - N];
    s += static_cast<int64_t>(rest) * l.src_strides[kMaxDims - N];
    dst[d] = src[s];
  }
}

template <class T, class Index>
cudaError_t enqueue_copy(void* dst, const void* src, const Layout& l, int n, int64_t total,
                         const LaunchConfig& launch) {
  const unsigned int blocks = grid_blocks(total, launch);
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  const auto count = static_cast<Index>(total);
  switch (n) {
    case 1: return enqueue(copy_strided_kernel<T, 1, Index>, blocks, launch, d, s, l, count);
    case 2: return enqueue(copy_strided_kernel<T, 2, Index>, blocks, launch, d, s, l, count);
    case 3: return enqueue(copy_strided_kernel<T, 3, Index>, blocks, launch, d, s, l, count);
    default:
      // Rare (4 or more dimensions that do not merge): split over every slot,
      // the extents of 1 in front included.
      return enqueue(copy_strided_kernel<T, kMaxDims, Index>, blocks, launch, d, s, l, count);
  }
}

template <class T>
cudaError_t enqueue_copy(void* dst, const void* src, const Layout& l, int n, int64_t total,
                         const LaunchConfig& launch) {
  if (total <= static_cast<int64_t>(UINT32_MAX) - static_cast<int64_t>(kBlockThreads) *
                                                       launch.max_blocks)
    return enqueue_copy<T, uint32_t>(dst, src, l, n, total, launch);
  return enqueue_copy<T, uint64_t>(dst, src, l, n, total, launch);
}

}  // namespace

cudaError_t launch_copy_strided(void* dst, const void* src, size_t elem_size,
                                const StridedCopy& layout, const LaunchConfig& launch) {
  if (layout.ndim < 0 || layout.ndim > kMaxDims) return cudaErrorInvalidValue;
  // Simplified dimensions, outermost first.
  int64_t sizes[kMaxDims], dst_strides[kMaxDims], src_strides[kMaxDims];
  int n = 0;
  int64_t total = 1;
  for (int k = 0; k < layout.ndim; ++k) {
    const int64_t size = layout.sizes[k];
    if (size == 0) return cudaSuccess;
    total *= size;
    if (size == 1) continue;
    sizes[n] = size;
    dst_strides[n] = layout.dst_strides[k];
    src_strides[n] = layout.src_strides[k];
    ++n;
  }
  // Merge each dimension into the one outside it where both sides continue
  // contiguously; walking from the inside, the merged dimension can merge
  // again with the next one out.
  int m = 0;  // dimensions kept, innermost first in the scratch order below
  int64_t keep_sizes[kMaxDims], keep_dst[kMaxDims], keep_src[kMaxDims];
  for (int k = n - 1; k >= 0; --k) {
    if (m > 0 && dst_strides[k] == keep_sizes[m - 1] * keep_dst[m - 1] &&
        src_strides[k] == keep_sizes[m - 1] * keep_src[m - 1]) {
      keep_sizes[m - 1] *= sizes[k];
      continue;
    }
    keep_sizes[m] = sizes[k];
    keep_dst[m] = dst_strides[k];
    keep_src[m] = src_strides[k];
    ++m;
  }
  // Right-align into the kernel's layout (keep_* is innermost first).
  Layout l;
  for (int k = 0; k < kMaxDims; ++k) {
    l.sizes[k] = 1;
    l.dst_strides[k] = 0;
    l.src_strides[k] = 0;
  }
  for (int j = 0; j < m; ++j) {
    l.sizes[kMaxDims - 1 - j] = keep_sizes[j];
    l.dst_strides[kMaxDims - 1 - j] = keep_dst[j];
    l.src_strides[kMaxDims - 1 - j] = keep_src[j];
  }
  // No dimension left (ndim 0, or every extent 1): one element, which the
  // one-dimensional kernel copies from slot kMaxDims - 1 (extent 1).
  const int dims = m > 0 ? m : 1;
  switch (elem_size) {
    case 1: return enqueue_copy<WordOf<1>::type>(dst, src, l, dims, total, launch);
    case 2: return enqueue_copy<WordOf<2>::type>(dst, src, l, dims, total, launch);
    case 4: return enqueue_copy<WordOf<4>::type>(dst, src, l, dims, total, launch);
    case 8: return enqueue_copy<WordOf<8>::type>(dst, src, l, dims, total, launch);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace ampx::impl
