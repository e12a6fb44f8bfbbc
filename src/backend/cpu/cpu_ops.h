// cpu_ops.h -- the CPU backend's primitives of the ops (backend_nn.h and
// backend_gemm.h; their arguments were checked there), one file
// per family: cpu_elementwise.cpp (binary, affine, add_into, sums),
// cpu_nn.cpp (activations, softmax, cross-entropy), cpu_gemm.cpp (GEMM),
// cpu_norm.cpp (layer and batch norm), cpu_shape.cpp (strided copies,
// gathers, scatter-adds), cpu_random.cpp (dropout), cpu_loss.cpp (BCE),
// cpu_attention.cpp (scaled dot-product attention), cpu_broadcast.cpp
// (broadcasting binary ops, reductions over chosen dimensions),
// cpu_block_ops.cpp (masked_fill, pow, rotary embeddings), cpu_conv.cpp
// (convolution and pooling, core/backend_conv.h).
#pragma once

#include "backend/cpu/thread_pool.h"
#include "core/backend_attention.h"
#include "core/backend_conv.h"
#include "core/backend_gemm.h"
#include "core/backend_nn.h"

namespace ampx::impl {
namespace cpu {

void unary(ThreadPool& pool, UnaryOp op, const void* x, void* y, DType type, int64_t count);
void unary_backward(ThreadPool& pool, UnaryOp op, const void* x, const void* dy, void* dx,
                    DType type, int64_t count);
void binary(ThreadPool& pool, BinaryOp op, const void* a, const void* b, void* out, DType type,
            int64_t count, int64_t b_count);
void binary_broadcast(ThreadPool& pool, BinaryOp op, const void* a, const void* b, void* out,
                      DType type, const BroadcastLayout& layout);
void reduce_dims(ThreadPool& pool, DimReduce op, const void* x, DType type,
                 const ReduceLayout& layout, void* out, DType out_type);
void masked_fill(ThreadPool& pool, const void* x, DType type, const void* mask, DType mask_type,
                 float value, void* out, const BroadcastLayout& layout);
void pow_scalar(ThreadPool& pool, const void* x, void* y, DType type, int64_t count,
                float exponent);
void pow_scalar_backward(ThreadPool& pool, const void* x, const void* dy, void* dx, DType type,
                         int64_t count, float exponent);
void rotary(ThreadPool& pool, const void* x, DType type, const void* cos, const void* sin,
            DType table_type, void* out, const RotaryShape& shape, bool inverse);
void affine(ThreadPool& pool, const void* x, void* y, DType type, int64_t count, float scale,
            float shift);
void add_into(ThreadPool& pool, void* dst, DType dst_type, const void* src, DType src_type,
              int64_t count);
void sum_rows(ThreadPool& pool, const void* x, DType type, int64_t rows, int64_t cols, void* out,
              DType out_type);
void sum_all(ThreadPool& pool, const void* x, DType type, int64_t count, float* out);
void softmax(ThreadPool& pool, const void* x, void* y, DType type, int64_t rows, int64_t cols,
             bool log);
void softmax_backward(ThreadPool& pool, const void* y, const void* dy, void* dx, DType type,
                      int64_t rows, int64_t cols, bool log);
void cross_entropy(ThreadPool& pool, const void* logits, DType type, const void* labels,
                   DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                   float* losses);
void cross_entropy_backward(ThreadPool& pool, const void* logits, DType type, const void* labels,
                            DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                            const float* dloss, float scale, void* dlogits, int64_t dloss_stride);
void cross_entropy_smoothed(ThreadPool& pool, const void* logits, DType type, const void* labels,
                            DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                            const float* class_weight, float smoothing, float* losses,
                            float* row_weights);
void cross_entropy_smoothed_backward(ThreadPool& pool, const void* logits, DType type,
                                     const void* labels, DType label_type, int64_t rows,
                                     int64_t cols, int64_t ignore_index, const float* class_weight,
                                     float smoothing, const float* dloss, void* dlogits,
                                     int64_t dloss_stride);
void gemm(ThreadPool& pool, const GemmArgs& args);
void layer_norm(ThreadPool& pool, const void* x, const void* weight, const void* bias, DType type,
                int64_t rows, int64_t cols, float eps, void* y, float* mean, float* rstd,
                bool centered);
void layer_norm_backward(ThreadPool& pool, const void* x, const void* dy, const void* weight,
                         DType type, int64_t rows, int64_t cols, const float* mean,
                         const float* rstd, void* dx, void* dweight, void* dbias, bool centered);
void batch_norm_stats(ThreadPool& pool, const void* x, DType type, int64_t n, int64_t channels,
                      int64_t inner, float momentum, float* mean, float* var, float* running_mean,
                      float* running_var);
void batch_norm(ThreadPool& pool, const void* x, DType type, int64_t n, int64_t channels,
                int64_t inner, const float* mean, const float* var, const float* weight,
                const float* bias, float eps, void* y);
void batch_norm_backward(ThreadPool& pool, const void* x, const void* dy, DType type, int64_t n,
                         int64_t channels, int64_t inner, const float* mean, const float* var,
                         const float* weight, float eps, bool batch_stats, void* dx,
                         float* dweight, float* dbias);
void gather_rows(ThreadPool& pool, const void* table, size_t row_bytes, int64_t table_rows,
                 const void* indices, DType index_type, int64_t count, void* out);
void scatter_add_rows(ThreadPool& pool, const void* src, DType src_type, int64_t cols,
                      const void* indices, DType index_type, int64_t count, float* dst,
                      int64_t dst_rows);
void check_indices(const void* indices, DType type, int64_t count, const IndexCheck& check,
                   float* valid, int64_t* record);
void attention_forward(ThreadPool& pool, const AttentionShape& shape, const void* q, const void* k,
                       const void* v, DType type, void* out, float* lse);
void attention_backward(ThreadPool& pool, const AttentionShape& shape, const void* q,
                        const void* k, const void* v, const void* out, const void* dout,
                        const float* lse, DType type, void* dq, void* dk, void* dv);
void conv2d_forward(ThreadPool& pool, const Conv2dShape& shape, const void* x, const void* w,
                    const void* bias, DType type, void* y);
void conv2d_backward_data(ThreadPool& pool, const Conv2dShape& shape, const void* dy, const void* w,
                          DType type, void* dx);
void conv2d_backward_weight(ThreadPool& pool, const Conv2dShape& shape, const void* dy,
                            const void* x, DType type, void* dw, void* dbias);
void conv2d_backward(ThreadPool& pool, const Conv2dShape& shape, const void* dy, const void* x,
                     const void* w, DType type, void* dx, void* dw, void* dbias);
void pool2d_forward(ThreadPool& pool, const Pool2dShape& shape, const void* x, DType type, void* y);
void pool2d_backward(ThreadPool& pool, const Pool2dShape& shape, const void* x, const void* dy,
                     DType type, void* dx);
void max_pool2d_gather(ThreadPool& pool, const Pool2dShape& shape, const void* x, const void* src,
                       DType type, void* y);
void copy_strided(ThreadPool& pool, void* dst, const void* src, size_t elem_size,
                  const StridedCopy& layout);
void dropout(ThreadPool& pool, const void* x, void* y, DType type, int64_t count, uint64_t seed,
             uint64_t offset, uint32_t threshold, float scale);
void bce_with_logits(ThreadPool& pool, const void* logits, const void* targets, DType type,
                     int64_t count, float* losses, const BceWeights& weights);
void bce_with_logits_backward(ThreadPool& pool, const void* logits, const void* targets,
                              DType type, int64_t count, const BceWeights& weights,
                              const float* dloss, int64_t dloss_stride, float scale,
                              void* d_logits, void* d_targets);
void mse_loss(ThreadPool& pool, const void* input, const void* target, DType type, int64_t count,
              float* losses);
void mse_loss_backward(ThreadPool& pool, const void* input, const void* target, DType type,
                       int64_t count, const float* dloss, int64_t dloss_stride, float scale,
                       void* d_input, void* d_target);

}  // namespace cpu
}  // namespace ampx::impl
