// cpu_gemm.h -- the CPU GEMM's built-in fp32 kernel, declared apart from
// cpu_ops.h so the tests can run it in builds where cpu::gemm multiplies
// with BLAS.
#pragma once

#include "backend/cpu/thread_pool.h"
#include "core/backend_gemm.h"

namespace ampx::impl {
namespace cpu {

// cpu::gemm with the library's own cache-blocked kernel in place of CBLAS's
// sgemm: what cpu::gemm runs when no CBLAS could be loaded. Same contract
// (backend_gemm.h's GemmArgs), same conversions, same threading of the batch.
void gemm_fallback(ThreadPool& pool, const GemmArgs& args);

}  // namespace cpu
}  // namespace ampx::impl
