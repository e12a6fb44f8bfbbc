// unscale_with_stats.cu -- the loss scaler's unscale and inf check (as
// amp_scale.cu) with the precision doctor's per-parameter statistics taken
// in the same pass.
//
//   r = scale ? math::reciprocal_scale(*scale) : 1
//   u = load_float<S>(x) * r;  out = store_float<D>(u)   (skipped: check only)
//   *found_inf = 1 and nonfinite[tensor] = 1 if some u is inf or NaN
//   Stats: records[tensor] += the histogram bin of u and the counts of
//          math::GradStatsCounts (fp16 classes of u and x, amax of |x|,
//          sum of u^2)
//
// Memory traffic: as the unscale, count * (sizeof(S) + sizeof(D)), plus per
// block of 32Ki elements one 64-bit atomic per non-empty histogram bin and
// per non-zero count. Each warp keeps its own shared histogram, so the
// shared atomics of one bin contend within a warp only.
#include <cuda_runtime.h>

#include "grad_stats_ops.cuh"
#include "math/amp.h"
#include "math/convert.h"
#include "math/grad_stats.h"
#include "multi_tensor.cuh"

namespace ampx::impl {
namespace cuda {
namespace {

constexpr int kCheckOnly = 0;
constexpr int kWarps = kBlockThreads / 32;

__device__ __forceinline__ void add_count(int64_t* into, int value) {
  if (value != 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(into), static_cast<unsigned long long>(value));
}

__device__ __forceinline__ void add_count(int64_t* into, unsigned int value) {
  if (value != 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(into), static_cast<unsigned long long>(value));
}

// Slot arrays: ptr[0] = input, ptr[1] = output (null when checking only);
// tensor_info = the tensor's index in the list.
template <int S, int D, bool Stats>
__global__ void __launch_bounds__(kBlockThreads)
    unscale_with_stats_kernel(const __grid_constant__ TensorListArgs<2> args, const float* scale,
                              float* found_inf, int32_t* nonfinite,
                              math::GradStatsRecord* records) {
  const BlockChunk c = block_chunk(args);
  const int32_t tensor = args.tensor_info[c.slot];
  const auto* in = static_cast<const math::storage_t<S>*>(args.ptr[0][c.slot]);
  // The output dtype (a check-only pass has none: O stands in for the types).
  constexpr int O = D == kCheckOnly ? S : D;
  auto* out = static_cast<math::storage_t<O>*>(args.ptr[1][c.slot]);
  const float r = scale != nullptr ? math::reciprocal_scale(*scale) : 1.0f;

  __shared__ unsigned int histogram[kWarps][math::kGradStatsBins];
  if constexpr (Stats) {
    for (int i = threadIdx.x; i < kWarps * math::kGradStatsBins; i += kBlockThreads)
      histogram[i / math::kGradStatsBins][i % math::kGradStatsBins] = 0;
    __syncthreads();
  }
  unsigned int* warp_histogram = histogram[threadIdx.x / 32];
  math::GradStatsCounts counts;
  bool bad = false;
  const auto examine = [&](float x) {
    const float u = x * r;
    bad |= !math::is_finite(u);
    if constexpr (Stats) atomicAdd(&warp_histogram[counts.add(x, u)], 1u);
    return u;
  };
  constexpr int narrowest = sizeof(math::storage_t<S>) < sizeof(math::storage_t<O>)
                                ? sizeof(math::storage_t<S>)
                                : sizeof(math::storage_t<O>);
  constexpr int V = kVector<32, narrowest>;
  const int head = D == kCheckOnly ? vector_head(c.begin, in) : vector_head(c.begin, in, out);
  for_each_packet<V>(c.begin, c.end, head, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const auto x = load_pack<W>(in + j);
    if constexpr (D == kCheckOnly) {
#pragma unroll
      for (int k = 0; k < W; ++k) examine(math::load_float<S>(x.v[k]));
    } else {
      // In place (out == in, same dtype) is fine: each element is read and
      // then written by the same thread.
      Pack<math::storage_t<O>, W> y;
#pragma unroll
      for (int k = 0; k < W; ++k)
        y.v[k] = math::store_float<O>(examine(math::load_float<S>(x.v[k])));
      store_pack(out + j, y);
    }
  });
  if (bad) {
    if (found_inf != nullptr) *found_inf = 1.0f;
    if (nonfinite != nullptr) nonfinite[tensor] = 1;
  }
  if constexpr (Stats) {
    const auto sum = [](auto a, auto b) { return a + b; };
    const auto max = [](unsigned int a, unsigned int b) { return a > b ? a : b; };
    const int zero_u = block_reduce(counts.fp16_zero_unscaled, sum);
    const int subnormal_u = block_reduce(counts.fp16_subnormal_unscaled, sum);
    const int zero_x = block_reduce(counts.fp16_zero_scaled, sum);
    const int subnormal_x = block_reduce(counts.fp16_subnormal_scaled, sum);
    const int overflow_x = block_reduce(counts.fp16_overflow_scaled, sum);
    const int lost_x = block_reduce(counts.nonzero_lost_scaled, sum);
    const unsigned int amax = block_reduce(counts.amax_scaled_bits, max);
    const double squares = block_reduce(counts.sum_squares, sum);
    math::GradStatsRecord& record = records[tensor];
    // block_reduce synchronised the block: every shared histogram is complete.
    for (int b = threadIdx.x; b < math::kGradStatsBins; b += kBlockThreads) {
      unsigned int n = 0;
      for (int w = 0; w < kWarps; ++w) n += histogram[w][b];
      add_count(&record.bins[b], n);
    }
    if (threadIdx.x != 0) return;
    add_count(&record.fp16_zero_unscaled, zero_u);
    add_count(&record.fp16_subnormal_unscaled, subnormal_u);
    add_count(&record.fp16_zero_scaled, zero_x);
    add_count(&record.fp16_subnormal_scaled, subnormal_x);
    add_count(&record.fp16_overflow_scaled, overflow_x);
    add_count(&record.nonzero_lost_scaled, lost_x);
    if (amax != 0) atomicMax(&record.amax_scaled_bits, amax);
    if (squares != 0.0) atomicAdd(&record.sum_squares, squares);
  }
}

}  // namespace

cudaError_t launch_unscale_with_stats(const std::vector<TensorSpan>& ins,
                                      const std::vector<TensorSpan>& outs, const float* scale,
                                      float* found_inf, int32_t* nonfinite,
                                      math::GradStatsRecord* records, const LaunchConfig& launch) {
  const bool write = !outs.empty();
  std::vector<DType> in_types, out_types;
  for (size_t i = 0; i < ins.size(); ++i) {
    in_types.push_back(ins[i].dtype);
    out_types.push_back(write ? outs[i].dtype : ins[i].dtype);
  }
  for (const DtypeGroup& group : group_by_dtypes(in_types, out_types, element_counts(ins))) {
    const auto fill = [&](TensorListArgs<2>& args, int slot, int64_t i) {
      args.ptr[0][slot] = ins[static_cast<size_t>(i)].data;
      args.ptr[1][slot] = write ? outs[static_cast<size_t>(i)].data : nullptr;
      args.tensor_info[slot] = static_cast<int32_t>(i);
    };
    const auto run = [&](auto kernel) {
      return launch_group<2>(
          group, fill, [&](const TensorListArgs<2>& args, unsigned int blocks, int64_t) {
            return enqueue(kernel, blocks, launch, args, scale, found_inf, nonfinite, records);
          });
    };
    const auto with_stats = [&](auto s_tag, auto d_tag) {
      constexpr int S = decltype(s_tag)::value;
      constexpr int D = decltype(d_tag)::value;
      if (records != nullptr) return run(unscale_with_stats_kernel<S, D, true>);
      return run(unscale_with_stats_kernel<S, D, false>);
    };
    const cudaError_t status = visit_floating(group.first, [&](auto in_tag) {
      if (!write) return with_stats(in_tag, std::integral_constant<int, kCheckOnly>{});
      return visit_floating(group.second,
                            [&](auto out_tag) { return with_stats(in_tag, out_tag); });
    });
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace ampx::impl
