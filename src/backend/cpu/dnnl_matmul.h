// dnnl_matmul.h -- BF16 matrix products through oneDNN's matmul, for CPUs
// that multiply bf16 natively (AVX512-BF16, AMX), loaded at run time.
//
// The fp32 path (cpu_gemm.cpp) converts bf16 operands to fp32 and calls
// sgemm: on a CPU with AVX512-BF16 oneDNN's bf16 kernels multiply the bf16
// values directly; on two EPYC cores bench_mlp_cpu's bf16 step (width 1024,
// batch 256) takes 9.5 ms instead of 26 (AMPX_DNNL_LIBRARY=none), and
// bench/bench_vs_torch_cpu.py sets it beside PyTorch's. The
// result is the same product: each bf16 x bf16 is exact in fp32, the sums
// are fp32, alpha, the bias and beta * C are applied in fp32, and a bf16 C
// is rounded once.
//
// oneDNN is optional (dnnl_library.h says when it is used); without it the
// fp32 path multiplies. Products under 16M multiply-adds run on the calling
// thread alone.
#pragma once

#include "backend/cpu/dnnl_library.h"
#include "backend/cpu/thread_pool.h"
#include "core/backend_gemm.h"

namespace ampx::impl {
namespace cpu {

// Computes `args` (checked by the front door) with oneDNN on `threads`
// threads and returns true; returns false, having touched nothing, when
// oneDNN is not loaded, the CPU lacks native bf16, or the product is not
// one it takes (operands other than BF16, a batch summed into one C
// (c_batch_stride 0), a bias with alpha != 1, an empty product). Throws
// AMPX_ERR_INTERNAL when oneDNN fails after it began writing C.
// Thread-safe.
bool dnnl_gemm(ThreadPool& pool, const GemmArgs& args);

}  // namespace cpu
}  // namespace ampx::impl
