// ops_launch.cuh -- host-side launchers of the primitives of the ops
// (Backend::unary to cross_entropy_backward, and the k == 0 case of gemm):
// kernels/elementwise.cu, broadcast.cu, reduce.cu, softmax.cu
// and cross_entropy.cu.
//
// Plain C++ declarations, so the CUDA backend, which the host compiler
// builds, can include them. As for the other launchers, each one only
// enqueues on launch.stream and returns the first failing status: none
// waits for the device, copies to the host or allocates, so the ops of a
// training step stay capturable in a CUDA graph. Scratch memory comes from
// the caller. The backend checks dtypes first (a launcher given another
// type returns cudaErrorInvalidValue) and turns statuses into errors.
// Each computes what backend.h specifies for the primitive, with the
// per-element math of kernels/math that the CPU backend runs too.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend_nn.h"
#include "fill_convert.cuh"

namespace ampx::impl {
namespace cuda {

// ---- element-wise (elementwise.cu) ----------------------------------------

cudaError_t launch_unary(UnaryOp op, const void* x, void* y, DType type, int64_t count,
                         const LaunchConfig& launch);
cudaError_t launch_unary_backward(UnaryOp op, const void* x, const void* dy, void* dx, DType type,
                                  int64_t count, const LaunchConfig& launch);
// b_count must divide count (the backend checks it).
cudaError_t launch_binary(BinaryOp op, const void* a, const void* b, void* out, DType type,
                          int64_t count, int64_t b_count, const LaunchConfig& launch);
cudaError_t launch_binary_broadcast(BinaryOp op, const void* a, const void* b, void* out,
                                    DType type, const BroadcastLayout& layout,
                                    const LaunchConfig& launch);
cudaError_t launch_reduce_dims(DimReduce op, const void* x, DType type, const ReduceLayout& layout,
                               void* out, DType out_type, const LaunchConfig& launch);
cudaError_t launch_affine(const void* x, void* y, DType type, int64_t count, float scale,
                          float shift, const LaunchConfig& launch);
cudaError_t launch_add_into(void* dst, DType dst_type, const void* src, DType src_type,
                            int64_t count, const LaunchConfig& launch);
// c[b * stride + e] *= beta for b < batch, e < elements; beta == 0 writes
// zeros whatever c held. The matrices must not overlap (stride >= elements
// when batch > 1): GEMM's result when k or alpha is 0.
cudaError_t launch_scale_matrices(void* c, DType type, int64_t batch, int64_t elements,
                                  int64_t stride, float beta, const LaunchConfig& launch);
// GEMM's bias epilogue when cuBLASLt cannot fuse it: c[i][j] = p + beta *
// c[i][j] + bias[j] for i < m, j < n, in fp32 and rounded once, where p is
// product[i * n + j] (fp32, alpha applied) or 0 when product is null; beta
// == 0 ignores c's contents. bias has c's type.
cudaError_t launch_bias_epilogue(void* c, DType type, const float* product, float beta,
                                 const void* bias, int64_t m, int64_t n,
                                 const LaunchConfig& launch);

// ---- sums (reduce.cu) --------------------------------------------------------
// Both sums accumulate in double in an order fixed by the shapes and
// launch.max_blocks, never by scheduling: the same inputs give the same bits
// on every run. Each needs a scratch of *_partials() doubles (none: null).

int64_t sum_rows_partials(int64_t rows, int64_t cols, const LaunchConfig& launch);
cudaError_t launch_sum_rows(const void* x, DType type, int64_t rows, int64_t cols, void* out,
                            DType out_type, double* partials, const LaunchConfig& launch);

int64_t sum_all_partials(int64_t count, const LaunchConfig& launch);
cudaError_t launch_sum_all(const void* x, DType type, int64_t count, float* out, double* partials,
                           const LaunchConfig& launch);

// ---- rows (softmax.cu, cross_entropy.cu) -------------------------------------

cudaError_t launch_softmax(const void* x, void* y, DType type, int64_t rows, int64_t cols, bool log,
                           const LaunchConfig& launch);
cudaError_t launch_softmax_backward(const void* y, const void* dy, void* dx, DType type,
                                    int64_t rows, int64_t cols, bool log,
                                    const LaunchConfig& launch);
// A label outside [0, cols) that is not ignore_index (which the ops never
// pass) gives a NaN loss and a NaN gradient row instead of a read out of
// bounds.
cudaError_t launch_cross_entropy(const void* logits, DType type, const void* labels,
                                 DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                                 float* losses, const LaunchConfig& launch);
cudaError_t launch_cross_entropy_backward(const void* logits, DType type, const void* labels,
                                          DType label_type, int64_t rows, int64_t cols,
                                          int64_t ignore_index, const float* dloss,
                                          int64_t dloss_stride, float scale, void* dlogits,
                                          const LaunchConfig& launch);
cudaError_t launch_cross_entropy_smoothed(const void* logits, DType type, const void* labels,
                                          DType label_type, int64_t rows, int64_t cols,
                                          int64_t ignore_index, const float* class_weight,
                                          float smoothing, float* losses, float* row_weights,
                                          const LaunchConfig& launch);
cudaError_t launch_cross_entropy_smoothed_backward(const void* logits, DType type,
                                                   const void* labels, DType label_type,
                                                   int64_t rows, int64_t cols,
                                                   int64_t ignore_index, const float* class_weight,
                                                   float smoothing, const float* dloss,
                                                   int64_t dloss_stride, void* dlogits,
                                                   const LaunchConfig& launch);

}  // namespace cuda
}  // namespace ampx::impl
