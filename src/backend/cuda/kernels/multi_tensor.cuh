// multi_tensor.cuh -- how the multi-tensor kernels receive their work, and
// the device-side loop every one of them runs over its chunk. Included only
// by the kernels/*.cu files (nvcc).
//
// Launch shape. The host groups the operation's tensors by dtype signature
// (one kernel instantiation per signature; a model usually has one), cuts
// each group into chunks of kChunkElements with plan_chunks, and packs them
// with plan_launches into launches of at most TensorListArgs<Depth>::kSlots
// tensors. A launch is one grid of one 256-thread block per chunk.
//
// Argument block. Everything a launch needs travels by value in the kernel
// parameters (TensorListArgs, under 32 KiB with the other parameters), so a
// launch needs no host-to-device copy and is capturable in a CUDA graph.
// Within a launch a tensor's chunks are consecutive, so the chunk table is
// stored run-length encoded: per tensor slot, the element range its chunks
// cover and the index of its first block. A block finds its slot with a
// binary search over first_block and derives its range; the table therefore
// costs nothing per chunk, and a launch is bounded by its tensors alone (up
// to kMaxLaunchChunks chunks).
//
// Vectorisation. Each thread moves packets of V elements, one or more whole
// 16-byte words (ld/st.global.v4) of every array, when all the chunk's
// arrays reach 16-byte alignment at one common element offset; the elements
// before that offset (head) and after the last whole packet (tail) are
// handled one per thread. Arrays that cannot share a phase (a wrapped tensor
// at an odd offset) are processed one element per thread throughout, still
// coalesced.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/backend_amp.h"
#include "core/multi_tensor.h"
#include "fill_convert.cuh"
#include "math/convert.h"

namespace ampx::impl {
namespace cuda {

// 32Ki elements per block: enough work to hide the block's setup (slot
// search, scalar reads), and small enough that a launch over a few million
// elements still has the hundreds of blocks that saturate HBM.
constexpr int64_t kChunkElements = int64_t{1} << 15;

// Keeps block indices and first_block comfortably inside int32.
constexpr int kMaxLaunchChunks = 1 << 20;

// Bytes of kernel parameters given to the tensor list. CUDA 12.1+ on Volta
// and newer takes 32764 bytes of parameters (4 KiB before): a launch then
// carries hundreds of tensors, so a model's whole list needs a launch or two
// and the grid is large enough to keep every SM busy to the end (measured on
// an H200: with 4 KiB, 1000 tensors took 12 launches and unscale reached
// 67% of copy bandwidth). The last 512 bytes are left to the kernels'
// scalar parameters, which stay under 256.
constexpr size_t kListArgBytes = 32764 - 512;

// The tensors of one launch. ptr[k][s] is the k-th array of slot s; which
// array is which is the kernel's convention.
template <int Depth>
struct TensorListArgs {
  static constexpr int kSlots = static_cast<int>(
      (kListArgBytes - sizeof(int32_t)) /
      (Depth * sizeof(void*) + 2 * sizeof(int64_t) + 2 * sizeof(int32_t)));

  void* ptr[Depth][kSlots];
  int64_t begin[kSlots];        // first element of the slot's first chunk
  int64_t end[kSlots];          // one past the last element of its last chunk
  int32_t first_block[kSlots];  // blockIdx.x of its first chunk; increasing
  int32_t tensor_info[kSlots];  // a per-tensor value: param group, list index
  int32_t slots;
};

// ---- device side ----------------------------------------------------------

// `W` elements of T moved as one unit: one scalar, or whole 16-byte vectors.
template <class T, int W>
struct alignas(W * sizeof(T) < 16 ? W * sizeof(T) : 16) Pack {
  T v[W];
};

template <int W, class T>
__device__ __forceinline__ Pack<std::remove_const_t<T>, W> load_pack(T* p) {
  Pack<std::remove_const_t<T>, W> r;
  if constexpr (W == 1) {
    r.v[0] = *p;
  } else {
    static_assert(sizeof(r) % 16 == 0, "a vector pack is whole 16-byte words");
    const uint4* src = reinterpret_cast<const uint4*>(p);
    uint4* dst = reinterpret_cast<uint4*>(&r);
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof(r) / 16); ++k) dst[k] = src[k];
  }
  return r;
}

template <int W, class T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, W>& r) {
  if constexpr (W == 1) {
    *p = r.v[0];
  } else {
    static_assert(sizeof(r) % 16 == 0, "a vector pack is whole 16-byte words");
    uint4* dst = reinterpret_cast<uint4*>(p);
    const uint4* src = reinterpret_cast<const uint4*>(&r);
#pragma unroll
    for (int k = 0; k < static_cast<int>(sizeof(r) / 16); ++k) dst[k] = src[k];
  }
}

// Elements per vector step for arrays whose narrowest element has `bytes`
// bytes, when each thread moves `packet` bytes of that array per step.
template <int packet, int bytes>
constexpr int kVector = packet / bytes;

template <int W>
using Width = std::integral_constant<int, W>;

struct BlockChunk {
  int slot;
  int64_t begin;
  int64_t end;
};

// The slot and element range of this block's chunk.
template <int Depth>
__device__ __forceinline__ BlockChunk block_chunk(const TensorListArgs<Depth>& args) {
  const int block = static_cast<int>(blockIdx.x);
  int low = 0;
  int high = args.slots - 1;
  while (low < high) {
    const int mid = (low + high + 1) / 2;
    if (args.first_block[mid] <= block)
      low = mid;
    else
      high = mid - 1;
  }
  const int64_t begin = args.begin[low] + (block - args.first_block[low]) * kChunkElements;
  const int64_t end = begin + kChunkElements < args.end[low] ? begin + kChunkElements : args.end[low];
  return {low, begin, end};
}

template <class T>
__device__ __forceinline__ bool aligned16_at(const T* array, int64_t i) {
  return array == nullptr || reinterpret_cast<uintptr_t>(array + i) % 16 == 0;
}

// The smallest h < 8 such that every non-null array is 16-byte aligned at
// element begin + h, or -1 when there is none (the arrays' phases differ).
// Eight tries cover every phase of 2-byte elements, hence of 4-byte ones.
template <class... T>
__device__ __forceinline__ int vector_head(int64_t begin, const T*... arrays) {
  for (int h = 0; h < 8; ++h)
    if ((aligned16_at(arrays, begin + h) && ...)) return h;
  return -1;
}

// Calls body(j, Width<V>{}) for packets of V elements starting at j, and
// body(j, Width<1>{}) for single elements, so that the block's threads
// together visit [begin, end) exactly once. `head` is vector_head's answer.
// V and the head/tail lengths are below the block size, so a head or a tail
// is one step of the block's threads.
template <int V, class Body>
__device__ __forceinline__ void for_each_packet(int64_t begin, int64_t end, int head, Body&& body) {
  static_assert(V < kBlockThreads, "a head or tail must fit in one pass of the block");
  const int64_t t = threadIdx.x;
  if (head < 0) {
    for (int64_t j = begin + t; j < end; j += kBlockThreads) body(j, Width<1>{});
    return;
  }
  const int64_t packed_begin = begin + head < end ? begin + head : end;
  if (begin + t < packed_begin) body(begin + t, Width<1>{});
  const int64_t packets = (end - packed_begin) / V;
  for (int64_t k = t; k < packets; k += kBlockThreads) body(packed_begin + k * V, Width<V>{});
  const int64_t tail = packed_begin + packets * V;
  if (tail + t < end) body(tail + t, Width<1>{});
}

// Combines every thread's v with op in a fixed order (so floating sums are
// reproducible); the result is valid in thread 0. The block must call it
// with all its threads; it may be called again right away.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op) {
  constexpr int kWarps = kBlockThreads / 32;
  __shared__ T warp_result[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) warp_result[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kWarps; ++w) v = op(v, warp_result[w]);
  __syncthreads();
  return v;
}

// ---- host side ------------------------------------------------------------

// The tensors of an operation's list that share a dtype signature.
struct DtypeGroup {
  DType first;
  DType second;
  std::vector<int64_t> members;  // indices into the list, in list order
  std::vector<int64_t> counts;   // their element counts
};

// Splits a list by signature (first[i], second[i]); groups come in the order
// of their first tensor, so the split is a function of the list alone.
inline std::vector<DtypeGroup> group_by_dtypes(const std::vector<DType>& first,
                                               const std::vector<DType>& second,
                                               const std::vector<int64_t>& counts) {
  std::vector<DtypeGroup> groups;
  for (size_t i = 0; i < counts.size(); ++i) {
    DtypeGroup* group = nullptr;
    for (DtypeGroup& g : groups)
      if (g.first == first[i] && g.second == second[i]) group = &g;
    if (group == nullptr) {
      groups.push_back({first[i], second[i], {}, {}});
      group = &groups.back();
    }
    group->members.push_back(static_cast<int64_t>(i));
    group->counts.push_back(counts[i]);
  }
  return groups;
}

// Enqueues the launches covering `group`. fill(args, slot, member) writes the
// pointers and tensor_info of one slot for list index `member`;
// enqueue_one(args, blocks, first_chunk) launches one grid, where first_chunk
// numbers the launch's first chunk within the group.
template <int Depth, class Fill, class Enqueue>
cudaError_t launch_group(const DtypeGroup& group, Fill&& fill, Enqueue&& enqueue_one) {
  using Args = TensorListArgs<Depth>;
  static_assert(sizeof(Args) <= kListArgBytes, "the tensor list outgrew its parameter budget");
  const std::vector<ampx::impl::PlannedLaunch> launches =
      plan_launches(plan_chunks(group.counts, kChunkElements), kMaxLaunchChunks, Args::kSlots);
  int64_t first_chunk = 0;
  for (const ampx::impl::PlannedLaunch& launch : launches) {
    Args args{};
    args.slots = static_cast<int32_t>(launch.tensors.size());
    for (size_t c = 0; c < launch.chunks.size(); ++c) {
      const LaunchChunk& chunk = launch.chunks[c];
      if (c == 0 || launch.chunks[c - 1].slot != chunk.slot) {
        args.first_block[chunk.slot] = static_cast<int32_t>(c);
        args.begin[chunk.slot] = chunk.begin;
      }
      args.end[chunk.slot] = chunk.end;
    }
    for (int s = 0; s < args.slots; ++s)
      fill(args, s, group.members[static_cast<size_t>(launch.tensors[static_cast<size_t>(s)])]);
    const auto blocks = static_cast<unsigned int>(launch.chunks.size());
    const cudaError_t status = enqueue_one(static_cast<const Args&>(args), blocks, first_chunk);
    if (status != cudaSuccess) return status;
    first_chunk += static_cast<int64_t>(launch.chunks.size());
  }
  return cudaSuccess;
}

// Enqueues `kernel` as a single thread: the per-step scalar updates, whose
// work is one value and whose cost is the launch itself.
template <class... Params, class... Args>
cudaError_t enqueue_single_thread(void (*kernel)(Params...), const LaunchConfig& launch,
                                  Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(1);
  config.stream = launch.stream;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace cuda
}  // namespace ampx::impl
