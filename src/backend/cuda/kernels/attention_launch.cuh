// attention_launch.cuh -- host-side launchers of scaled dot-product
// attention (core/backend_attention.h): kernels/attention_forward.cu and
// attention_backward.cu, sharing attention_tiles.cuh, and, with
// tensor_cores, the f16/bf16 kernels of attention_*_mma.cu wherever they
// take the shape (attention_mma.cuh).
//
// The rules of ops_launch.cuh hold: each launcher only enqueues on
// launch.stream and returns the first failing status; it never waits,
// copies to the host or allocates. The backward pass takes its scratch from
// the caller (attention_backward_scratch_bytes). Every sum runs in an order
// fixed by the shapes: the same inputs give the same bits on every run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/backend_attention.h"
#include "fill_convert.cuh"

namespace ampx::impl {
namespace cuda {

cudaError_t launch_attention_forward(const AttentionShape& shape, const void* q, const void* k,
                                     const void* v, DType type, void* out, float* lse,
                                     bool tensor_cores, const LaunchConfig& launch);

size_t attention_backward_scratch_bytes(const AttentionShape& shape);
cudaError_t launch_attention_backward(const AttentionShape& shape, const void* q, const void* k,
                                      const void* v, const void* out, const void* dout,
                                      const float* lse, DType type, void* dq, void* dk, void* dv,
                                      void* scratch, bool tensor_cores, const LaunchConfig& launch);

}  // namespace cuda
}  // namespace ampx::impl
