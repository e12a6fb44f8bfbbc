// cpu_ops.h -- the CPU backend's primitives of the ops (backend.h), one file
// per family: cpu_elementwise.cpp (binary, affine, add_into, sums),
// cpu_nn.cpp (activations, softmax, cross-entropy), cpu_gemm.cpp (GEMM).
#pragma once

#include "backend/cpu/thread_pool.h"
#include "core/backend.h"

namespace ampx {
namespace cpu {

void unary(ThreadPool& pool, UnaryOp op, const void* x, void* y, DType type, int64_t count);
void unary_backward(ThreadPool& pool, UnaryOp op, const void* x, const void* dy, void* dx,
                    DType type, int64_t count);
void binary(ThreadPool& pool, BinaryOp op, const void* a, const void* b, void* out, DType type,
            int64_t count, int64_t b_count);
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
                            const float* dloss, float scale, void* dlogits);
void gemm(ThreadPool& pool, const GemmArgs& args);

}  // namespace cpu
}  // namespace ampx
