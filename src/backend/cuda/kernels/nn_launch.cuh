// nn_launch.cuh -- host-side launchers of the second group of the ops'
// primitives (Backend::layer_norm to bce_with_logits): kernels/layer_norm.cu,
// batch_norm.cu, gather_scatter.cu, copy_strided.cu, dropout.cu,
// bce_with_logits.cu, mse_loss.cu, check_indices.cu, masked_fill.cu, pow.cu,
// rotary.cu and pool2d.cu.
//
// The rules of ops_launch.cuh hold here too: plain C++ declarations; each
// launcher only enqueues on launch.stream and returns the first failing
// status, never waits for the device, copies to the host or allocates, so a
// training step stays capturable in a CUDA graph. Scratch memory comes from
// the caller, sized by the *_scratch_bytes() function beside the launcher
// (0: pass nullptr); scratch is stream-ordered, so its contents on entry are
// undefined. Each computes what backend.h specifies for the primitive, with
// the per-element math of kernels/math that the CPU backend runs too.
// Reductions (statistics, gradient sums) add in an order fixed by the shapes
// and launch.max_blocks, never by scheduling: the same inputs give the same
// bits on every run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/backend_conv.h"
#include "core/backend_nn.h"
#include "fill_convert.cuh"

namespace ampx::impl {
namespace cuda {

// ---- normalisation (layer_norm.cu, batch_norm.cu) ----------------------------

cudaError_t launch_layer_norm(const void* x, const void* weight, const void* bias, DType type,
                              int64_t rows, int64_t cols, float eps, void* y, float* mean,
                              float* rstd, bool centered, const LaunchConfig& launch);
size_t layer_norm_backward_scratch_bytes(int64_t rows, int64_t cols, const LaunchConfig& launch);
cudaError_t launch_layer_norm_backward(const void* x, const void* dy, const void* weight,
                                       DType type, int64_t rows, int64_t cols, const float* mean,
                                       const float* rstd, void* dx, void* dweight, void* dbias,
                                       bool centered, void* scratch, const LaunchConfig& launch);

size_t batch_norm_stats_scratch_bytes(int64_t n, int64_t channels, int64_t inner,
                                      const LaunchConfig& launch);
cudaError_t launch_batch_norm_stats(const void* x, DType type, int64_t n, int64_t channels,
                                    int64_t inner, float momentum, float* mean, float* var,
                                    float* running_mean, float* running_var, void* scratch,
                                    const LaunchConfig& launch);
cudaError_t launch_batch_norm(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                              const float* mean, const float* var, const float* weight,
                              const float* bias, float eps, void* y, const LaunchConfig& launch);
size_t batch_norm_backward_scratch_bytes(int64_t n, int64_t channels, int64_t inner,
                                         const LaunchConfig& launch);
cudaError_t launch_batch_norm_backward(const void* x, const void* dy, DType type, int64_t n,
                                       int64_t channels, int64_t inner, const float* mean,
                                       const float* var, const float* weight, float eps,
                                       bool batch_stats, void* dx, float* dweight, float* dbias,
                                       void* scratch, const LaunchConfig& launch);

// ---- indexing and copies (gather_scatter.cu, copy_strided.cu) ----------------

cudaError_t launch_gather_rows(const void* table, size_t row_bytes, int64_t table_rows,
                               const void* indices, DType index_type, int64_t count, void* out,
                               const LaunchConfig& launch);
size_t scatter_add_rows_scratch_bytes(int64_t count, DType index_type, const LaunchConfig& launch);
cudaError_t launch_scatter_add_rows(const void* src, DType src_type, int64_t cols,
                                    const void* indices, DType index_type, int64_t count,
                                    float* dst, int64_t dst_rows, void* scratch,
                                    const LaunchConfig& launch);
cudaError_t launch_copy_strided(void* dst, const void* src, size_t elem_size,
                                const StridedCopy& layout, const LaunchConfig& launch);

// ---- index checks (check_indices.cu) -----------------------------------------

size_t check_indices_scratch_bytes();
cudaError_t launch_check_indices(const void* indices, DType type, int64_t count,
                                 const IndexCheck& check, float* valid, int64_t* record,
                                 void* scratch, const LaunchConfig& launch);

// ---- the Transformer-block ops (masked_fill.cu, pow.cu, rotary.cu) ----------

cudaError_t launch_masked_fill(const void* x, DType type, const void* mask, DType mask_type,
                               float value, void* out, const BroadcastLayout& layout,
                               const LaunchConfig& launch);
cudaError_t launch_pow(const void* x, void* y, DType type, int64_t count, float exponent,
                       const LaunchConfig& launch);
cudaError_t launch_pow_backward(const void* x, const void* dy, void* dx, DType type,
                                int64_t count, float exponent, const LaunchConfig& launch);
// Pooling (core/backend_conv.h's PoolingPrimitives): pool2d.cu.
cudaError_t launch_pool2d_forward(const Pool2dShape& shape, const void* x, DType type, void* y,
                                  const LaunchConfig& launch);
cudaError_t launch_pool2d_backward(const Pool2dShape& shape, const void* x, const void* dy,
                                   DType type, void* dx, const LaunchConfig& launch);
cudaError_t launch_max_pool2d_gather(const Pool2dShape& shape, const void* x, const void* src,
                                     DType type, void* y, const LaunchConfig& launch);
cudaError_t launch_rotary(const void* x, DType type, const void* cos, const void* sin,
                          DType table_type, void* out, const RotaryShape& shape, bool inverse,
                          const LaunchConfig& launch);

// ---- dropout and the element-wise losses (dropout.cu, bce_with_logits.cu, ----
// ---- mse_loss.cu) --------------------------------------------------------------

cudaError_t launch_dropout(const void* x, void* y, DType type, int64_t count, uint64_t seed,
                           uint64_t offset, uint32_t threshold, float scale,
                           const LaunchConfig& launch);
cudaError_t launch_bce_with_logits(const void* logits, const void* targets, DType type,
                                   int64_t count, float* losses, const BceWeights& weights,
                                   const LaunchConfig& launch);
cudaError_t launch_bce_with_logits_backward(const void* logits, const void* targets, DType type,
                                            int64_t count, const BceWeights& weights,
                                            const float* dloss, int64_t dloss_stride, float scale,
                                            void* d_logits, void* d_targets,
                                            const LaunchConfig& launch);
cudaError_t launch_mse_loss(const void* input, const void* target, DType type, int64_t count,
                            float* losses, const LaunchConfig& launch);
cudaError_t launch_mse_loss_backward(const void* input, const void* target, DType type,
                                     int64_t count, const float* dloss, int64_t dloss_stride,
                                     float scale, void* d_input, void* d_target,
                                     const LaunchConfig& launch);

}  // namespace cuda
}  // namespace ampx::impl
