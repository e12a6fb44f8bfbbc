// dnnl_conv.h -- the CPU backend's F32 and BF16 convolutions through
// oneDNN's convolution primitives, where oneDNN is used (dnnl_library.h).
//
// ampx's tensors stay NCHW (weights [O, C / groups, kh, kw]); each
// primitive picks its own blocked layouts, and the operands are reordered
// into them and the result back, which costs a pass over each operand
// against oneDNN's slow plain-layout kernels. Images whose primitive wants
// nChw16c are moved by cpu_layout.h's transposes, the rest (weights, other
// layouts) by oneDNN's reorders. Sums are fp32 and a BF16
// result is rounded once, as the im2col path (cpu_conv.cpp) computes; the
// order of the sums differs.
#pragma once

#include "backend/cpu/dnnl_library.h"
#include "backend/cpu/thread_pool.h"
#include "core/backend_conv.h"

namespace ampx::impl {
namespace cpu {

// Each computes what its namesake in cpu_ops.h computes, with as many
// OpenMP threads as the pool has (and the pool's own threads for the
// layout changes of cpu_layout.h), and returns true; or returns false,
// having written nothing, when oneDNN is not used, `type` is neither F32
// nor BF16, or oneDNN has no primitive for the shape. Throws
// AMPX_ERR_INTERNAL when oneDNN fails after it began writing the result.
// Thread-safe.
bool dnnl_conv2d_forward(ThreadPool& pool, const Conv2dShape& shape, const void* x, const void* w,
                         const void* bias, DType type, void* y);
bool dnnl_conv2d_backward_data(ThreadPool& pool, const Conv2dShape& shape, const void* dy,
                               const void* w, DType type, void* dx);
bool dnnl_conv2d_backward_weight(ThreadPool& pool, const Conv2dShape& shape, const void* dy,
                                 const void* x, DType type, void* dw, void* dbias);
// Both passes, dy moved into oneDNN's layout once when both primitives
// want it in the same one.
bool dnnl_conv2d_backward(ThreadPool& pool, const Conv2dShape& shape, const void* dy,
                          const void* x, const void* w, DType type, void* dx, void* dw,
                          void* dbias);

}  // namespace cpu
}  // namespace ampx::impl
