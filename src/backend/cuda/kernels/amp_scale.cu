// amp_scale.cu -- multiplies a list of tensors by one device scalar and
// records whether any product is not finite: the loss scaler's unscale and
// inf check in one pass, also used to apply a clipping coefficient.
//
//   m = reciprocal ? math::reciprocal_scale(*factor) : *factor
//   out[i] = store_float<D>(load_float<S>(in[i]) * m)     (skipped: check only)
//   *found_inf = 1 if any load_float<S>(in[i]) * m is inf or NaN
//
// Memory traffic: reads every input once (count * sizeof(S)); writes count *
// sizeof(D) unless the outputs are absent. found_inf is stored only by
// threads that saw a non-finite value: never cleared, and no atomics needed
// since every writer stores the same 1.0f.
#include <cuda_runtime.h>

#include "multi_tensor.cuh"
#include "multi_tensor_ops.cuh"
#include "math/amp.h"
#include "math/convert.h"

namespace ampx::impl {
namespace cuda {
namespace {

// The output dtype of a pass that only checks.
constexpr int kCheckOnly = 0;

// Slot arrays: ptr[0] = input, ptr[1] = output (null when checking only).
template <int S, int D>
__global__ void __launch_bounds__(kBlockThreads)
    scale_kernel(const __grid_constant__ TensorListArgs<2> args, const float* factor,
                 bool reciprocal, float* found_inf) {
  const BlockChunk c = block_chunk(args);
  const auto* in = static_cast<const math::storage_t<S>*>(args.ptr[0][c.slot]);
  const float m = reciprocal ? math::reciprocal_scale(*factor) : *factor;
  bool nonfinite = false;
  if constexpr (D == kCheckOnly) {
    constexpr int V = kVector<32, sizeof(math::storage_t<S>)>;
    for_each_packet<V>(c.begin, c.end, vector_head(c.begin, in), [&](int64_t j, auto width) {
      constexpr int W = decltype(width)::value;
      const auto x = load_pack<W>(in + j);
#pragma unroll
      for (int k = 0; k < W; ++k) nonfinite |= !math::is_finite(math::load_float<S>(x.v[k]) * m);
    });
  } else {
    // In place (out == in, same dtype) is fine: each element is read and
    // then written by the same thread.
    auto* out = static_cast<math::storage_t<D>*>(args.ptr[1][c.slot]);
    constexpr int narrowest = sizeof(math::storage_t<S>) < sizeof(math::storage_t<D>)
                                  ? sizeof(math::storage_t<S>)
                                  : sizeof(math::storage_t<D>);
    constexpr int V = kVector<32, narrowest>;
    for_each_packet<V>(c.begin, c.end, vector_head(c.begin, in, out), [&](int64_t j, auto width) {
      constexpr int W = decltype(width)::value;
      const auto x = load_pack<W>(in + j);
      Pack<math::storage_t<D>, W> y;
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float v = math::load_float<S>(x.v[k]) * m;
        nonfinite |= !math::is_finite(v);
        y.v[k] = math::store_float<D>(v);
      }
      store_pack(out + j, y);
    });
  }
  if (nonfinite && found_inf != nullptr) *found_inf = 1.0f;
}

}  // namespace

cudaError_t launch_multi_tensor_scale(const std::vector<TensorSpan>& ins,
                                      const std::vector<TensorSpan>& outs, const float* factor,
                                      bool reciprocal, float* found_inf,
                                      const LaunchConfig& launch) {
  const bool write = !outs.empty();
  if (!write && found_inf == nullptr) return cudaSuccess;
  std::vector<DType> in_types, out_types;
  for (size_t i = 0; i < ins.size(); ++i) {
    in_types.push_back(ins[i].dtype);
    out_types.push_back(write ? outs[i].dtype : ins[i].dtype);
  }
  for (const DtypeGroup& group : group_by_dtypes(in_types, out_types, element_counts(ins))) {
    const auto fill = [&](TensorListArgs<2>& args, int slot, int64_t i) {
      args.ptr[0][slot] = ins[static_cast<size_t>(i)].data;
      args.ptr[1][slot] = write ? outs[static_cast<size_t>(i)].data : nullptr;
    };
    const auto run = [&](auto kernel) {
      return launch_group<2>(group, fill, [&](const TensorListArgs<2>& args, unsigned int blocks, int64_t) {
        return enqueue(kernel, blocks, launch, args, factor, reciprocal, found_inf);
      });
    };
    const cudaError_t status = visit_floating(group.first, [&](auto in_tag) {
      constexpr int S = decltype(in_tag)::value;
      if (!write) return run(scale_kernel<S, kCheckOnly>);
      return visit_floating(group.second, [&](auto out_tag) {
        return run(scale_kernel<S, decltype(out_tag)::value>);
      });
    });
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace ampx::impl
