// fp8_scaling.cu -- the scaling recipes' updates on the device
// (kernels/math/fp8_scaling.h has the rules), and the precision doctor's
// FP8 range count.
//
// finish_step: a warp per slot reads its history (history_len floats; the
// entry at *position replaced by the step's amax), reduces the max with
// shuffles on the bits, and lane 0 writes the entry, the scale, its inverse
// and a zero amax; a slot whose step amax is 0 instead has its ring
// rotated by the warp (not rolled); a one-thread kernel then advances
// *position, after every warp has read it. Memory traffic: each history
// read once (twice and written once for a slot not rolled).
//
// scale_from_amax: one thread.
//
// count_range: a grid-stride pass over x counting, per element, whether
// fp8(x * scale) would be zero or beyond the largest finite value; each
// block adds its three counts with 64-bit atomics.
#include <cuda_runtime.h>

#include "fp8_launch.cuh"
#include "math/convert.h"
#include "math/fp8.h"
#include "math/fp8_scaling.h"
#include "multi_tensor.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

constexpr int kSlotsPerBlock = kBlockThreads / 32;

// h[j] = h[j - 1] and h[0] = the old h[len - 1], by one warp: 32-entry
// chunks from the top down, each read whole (__syncwarp) before it is
// written, so no entry is overwritten before it is read (the last one is
// read first of all).
__device__ void rotate_right_by_one(float* h, int32_t len, int lane) {
  const float last = h[len - 1];
  __syncwarp();
  for (int32_t top = len; top > 0; top -= 32) {
    const int32_t j = top - 32 + lane;
    const float v = j > 0 ? h[j - 1] : last;
    __syncwarp();
    if (j >= 0) h[j] = v;
    __syncwarp();
  }
}

__global__ void __launch_bounds__(kBlockThreads)
    finish_step_kernel(Fp8Slots s, Fp8ScaleRule rule) {
  const int lane = threadIdx.x % 32;
  const int32_t position = *s.position;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kSlotsPerBlock + threadIdx.x / 32;
       i < s.count; i += static_cast<int64_t>(gridDim.x) * kSlotsPerBlock) {
    float* history = s.history + i * s.history_len;
    const float step_amax = s.amax[i];
    // Every lane reads the step's amax before lane 0 zeroes it below: the
    // branch on it must be the same for the whole warp.
    __syncwarp();
    if (rule.delayed && step_amax == 0.0f) {
      // Not rolled, the scale kept (math/fp8_scaling.h): the ring turns
      // under the shared position, so it is rotated to stay in place.
      rotate_right_by_one(history, s.history_len, lane);
      continue;
    }
    uint32_t a = math::float_bits(step_amax);
    if (rule.delayed && !rule.most_recent) {
      const uint32_t step_bits = math::history_amax_bits(step_amax);
      a = step_bits;
      for (int32_t j = lane; j < s.history_len; j += 32) {
        const uint32_t entry = j == position ? step_bits : math::history_amax_bits(history[j]);
        a = entry > a ? entry : a;
      }
      for (int offset = 16; offset > 0; offset /= 2) {
        const uint32_t other = __shfl_xor_sync(0xffffffffu, a, offset);
        a = other > a ? other : a;
      }
    }
    if (lane == 0) {
      history[position] = step_amax;
      if (rule.delayed) {
        const float scale = math::delayed_scale(math::bits_float(a), s.scale[i], s.fp8_max[i], rule.margin);
        s.scale[i] = scale;
        s.scale_inv[i] = 1.0f / scale;
      }
      s.amax[i] = 0.0f;
    }
  }
}

__global__ void advance_position_kernel(int32_t* position, int32_t history_len) {
  *position = (*position + 1) % history_len;
}

__global__ void scale_from_amax_kernel(Fp8Slots s, int64_t slot, const float* amax,
                                       bool power_of_two) {
  const float a = *amax;
  const float scale = math::current_scale(a, s.fp8_max[slot], power_of_two);
  s.scale[slot] = scale;
  s.scale_inv[slot] = 1.0f / scale;
  s.amax[slot] = math::amax_combine(s.amax[slot], a);
}

template <int S, class Format>
__global__ void __launch_bounds__(kBlockThreads)
    count_range_kernel(const math::storage_t<S>* __restrict__ x, int64_t count, const float* scale,
                       int64_t* counts) {
  const float factor = scale != nullptr ? *scale : 1.0f;
  int64_t nonzero = 0, flushed = 0, beyond = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float v = math::load_float<S>(x[i]);
    const uint32_t magnitude = math::float_bits(v) & 0x7fffffffu;
    if (magnitude == 0 || magnitude >= 0x7f800000u) continue;
    ++nonzero;
    const float scaled = scale != nullptr ? v * factor : v;
    const uint32_t code = math::fp8_round_magnitude<Format>(math::float_bits(scaled) & 0x7fffffffu);
    flushed += code == 0;
    beyond += code > Format::kMaxCode;
  }
  const auto sum = [](int64_t a, int64_t b) { return a + b; };
  nonzero = block_reduce(nonzero, sum);
  flushed = block_reduce(flushed, sum);
  beyond = block_reduce(beyond, sum);
  if (threadIdx.x != 0) return;
  auto* out = reinterpret_cast<unsigned long long*>(counts);
  if (nonzero != 0) atomicAdd(out, static_cast<unsigned long long>(nonzero));
  if (flushed != 0) atomicAdd(out + 1, static_cast<unsigned long long>(flushed));
  if (beyond != 0) atomicAdd(out + 2, static_cast<unsigned long long>(beyond));
}

}  // namespace

cudaError_t launch_fp8_finish_step(const Fp8Slots& slots, const Fp8ScaleRule& rule,
                                   const LaunchConfig& launch) {
  const int64_t groups = (slots.count + kSlotsPerBlock - 1) / kSlotsPerBlock;
  const unsigned int blocks =
      static_cast<unsigned int>(groups < launch.max_blocks ? groups : launch.max_blocks);
  cudaError_t status = enqueue(finish_step_kernel, blocks, launch, slots, rule);
  if (status != cudaSuccess) return status;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(1);
  config.stream = launch.stream;
  return cudaLaunchKernelEx(&config, advance_position_kernel, slots.position, slots.history_len);
}

cudaError_t launch_fp8_scale_from_amax(const Fp8Slots& slots, int64_t slot, const float* amax,
                                       const Fp8ScaleRule& rule, const LaunchConfig& launch) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(1);
  config.stream = launch.stream;
  return cudaLaunchKernelEx(&config, scale_from_amax_kernel, slots, slot, amax, rule.power_of_two);
}

cudaError_t launch_fp8_count_range(const void* x, DType x_type, int64_t count, const float* scale,
                                   DType y_type, int64_t* counts, const LaunchConfig& launch) {
  if (y_type != DType::F8E4M3 && y_type != DType::F8E5M2) return cudaErrorInvalidValue;
  return visit_floating(x_type, [&](auto tag) {
    constexpr int S = decltype(tag)::value;
    const auto* data = static_cast<const math::storage_t<S>*>(x);
    if (y_type == DType::F8E4M3)
      return enqueue(count_range_kernel<S, math::Fp8E4M3>, grid_blocks(count, launch), launch,
                     data, count, scale, counts);
    return enqueue(count_range_kernel<S, math::Fp8E5M2>, grid_blocks(count, launch), launch, data,
                   count, scale, counts);
  });
}

}  // namespace cuda
}  // namespace ampx::impl
