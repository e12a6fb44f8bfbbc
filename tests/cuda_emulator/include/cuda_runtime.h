// cuda_runtime.h (CUDA emulator) -- what kernels see: the function and
// variable qualifiers, threadIdx and friends, and the device intrinsics
// ampx's kernels use, for kernels compiled as C++ and run by the emulator
// (grid.cpp), one fiber per CUDA thread.
//
// __shared__ variables become static thread_local: the blocks of a grid run
// one after another on one host thread, so every thread of a block sees the
// same variable, as on the device. Warp intrinsics are collectives: each lane
// waits until every lane named in the mask has reached the same intrinsic
// with the same mask (a lane that never comes is reported as a deadlock,
// which on a GPU is undefined behaviour). __syncthreads waits for every
// thread of the block that has not exited.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static thread_local

// Kernels may ask for what only the emulator provides (src/backend/cuda/kernels/mma.cuh).
#define AMPX_CUDA_EMULATOR 1

namespace ampx_emu {

void block_barrier();

// The calling warp's mma.sync.aligned.m16n8k16.row.col.f32 on f16 (bf16
// false) or bf16 fragments: c += A B, with the fragment layout of the PTX
// ISA (src/backend/cuda/kernels/mma.cuh). A collective: every lane of the warp calls it.
void mma_16x8x16(bool bf16, float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

enum class WarpOp { Sync, Index, Up, Down, Xor, Ballot, MatchAny };
// Every lane of `mask` deposits `value` and `arg`; each gets back what `op`
// gives it (a shuffled value, a ballot or a match mask).
uint64_t warp_collective(WarpOp op, unsigned int mask, uint64_t value, int arg, int width);

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "8 bytes at most");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  return bits;
}
template <class T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace ampx_emu

// Where the running CUDA thread stands: the scheduler sets them for the
// fiber it switches to.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

inline void __syncthreads() { ampx_emu::block_barrier(); }
inline void __syncwarp(unsigned int mask = 0xffffffffu) {
  ampx_emu::warp_collective(ampx_emu::WarpOp::Sync, mask, 0, 0, 32);
}

template <class T>
T __shfl_sync(unsigned int mask, T v, int src_lane, int width = 32) {
  return ampx_emu::from_bits<T>(ampx_emu::warp_collective(
      ampx_emu::WarpOp::Index, mask, ampx_emu::to_bits(v), src_lane, width));
}
template <class T>
T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
  return ampx_emu::from_bits<T>(ampx_emu::warp_collective(
      ampx_emu::WarpOp::Up, mask, ampx_emu::to_bits(v), static_cast<int>(delta), width));
}
template <class T>
T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
  return ampx_emu::from_bits<T>(ampx_emu::warp_collective(
      ampx_emu::WarpOp::Down, mask, ampx_emu::to_bits(v), static_cast<int>(delta), width));
}
template <class T>
T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = 32) {
  return ampx_emu::from_bits<T>(ampx_emu::warp_collective(
      ampx_emu::WarpOp::Xor, mask, ampx_emu::to_bits(v), lane_mask, width));
}
inline unsigned int __ballot_sync(unsigned int mask, int predicate) {
  return static_cast<unsigned int>(
      ampx_emu::warp_collective(ampx_emu::WarpOp::Ballot, mask, predicate != 0, 0, 32));
}
template <class T>
unsigned int __match_any_sync(unsigned int mask, T v) {
  return static_cast<unsigned int>(ampx_emu::warp_collective(
      ampx_emu::WarpOp::MatchAny, mask, ampx_emu::to_bits(v), 0, 32));
}

inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }

inline unsigned int __float_as_uint(float v) { return ampx_emu::from_bits<unsigned int>(ampx_emu::to_bits(v)); }
inline float __uint_as_float(unsigned int v) { return ampx_emu::from_bits<float>(v); }
inline int __float_as_int(float v) { return ampx_emu::from_bits<int>(ampx_emu::to_bits(v)); }
inline float __int_as_float(int v) { return ampx_emu::from_bits<float>(static_cast<uint32_t>(v)); }

// Atomics return the old value, as on the device. A grid runs on one host
// thread, but two streams' grids may run at once, so they are real atomics.
template <class T>
T atomicAdd(T* address, T v) {
  if constexpr (std::is_integral<T>::value) {
    return __atomic_fetch_add(address, v, __ATOMIC_RELAXED);
  } else {
    T old;
    __atomic_load(address, &old, __ATOMIC_RELAXED);
    T sum = old + v;
    while (!__atomic_compare_exchange(address, &old, &sum, true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
      sum = old + v;
    }
    return old;
  }
}
template <class T>
T atomicMin(T* address, T v) {
  static_assert(std::is_integral<T>::value, "integers only, as on the device");
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (v < old && !__atomic_compare_exchange_n(address, &old, v, true, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED)) {
  }
  return old;
}
template <class T>
T atomicMax(T* address, T v) {
  static_assert(std::is_integral<T>::value, "integers only, as on the device");
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (v > old && !__atomic_compare_exchange_n(address, &old, v, true, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED)) {
  }
  return old;
}
