// cblas_loader.h -- the CBLAS that cpu_gemm.cpp multiplies with, loaded when
// the program first needs it rather than linked.
//
// Loading at run time lets ampx choose OpenBLAS's kernels before OpenBLAS
// initialises: a linked OpenBLAS runs its CPU detection in its constructor,
// before any ampx code, and releases that predate a CPU model fall back to
// their slowest kernels on it (Debian 12's 0.3.21 picks SSE3 "Prescott"
// kernels on Emerald Rapids: 37 instead of 200 GFLOP/s on two cores). It
// also keeps OpenBLAS optional at run time: without one, the built-in
// kernel multiplies.
#pragma once

namespace ampx::impl {
namespace cpu {

struct Cblas {
  // cblas_sgemm with the CBLAS enum values as ints (row-major 101, no
  // transpose 111, transpose 112: fixed by the CBLAS standard).
  void (*sgemm)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                const float* a, int lda, const float* b, int ldb, float beta, float* c,
                int ldc) = nullptr;
  // OpenBLAS's process-wide thread count; both null for another CBLAS.
  void (*set_num_threads)(int threads) = nullptr;
  int (*get_num_threads)() = nullptr;
  // What was loaded, e.g. "libopenblas.so.0 (OpenBLAS 0.3.21 ... SkylakeX)".
  const char* description = "built-in kernel";
};

// The CBLAS to use, or nullptr for the built-in kernel. Decided once, on the
// first call (thread-safe), by the loader rule of optional libraries
// (core/optional_library.h):
//  - AMPX_BLAS=none: the built-in kernel;
//  - AMPX_BLAS=<file>: only that library (any CBLAS: OpenBLAS, BLIS, MKL's
//    libmkl_rt.so); if it cannot be loaded, the built-in kernel;
//  - unset: libopenblas.so.0, then libopenblas.so, else the built-in kernel.
// When ampx is the one to load OpenBLAS (the process has not loaded it
// already) and OPENBLAS_CORETYPE is unset, it is set for the length of the
// load to the best kernel family the CPU's features allow (COOPERLAKE with
// AVX512-BF16, SKYLAKEX with AVX-512, HASWELL with AVX2+FMA) and removed
// again; setting OPENBLAS_CORETYPE yourself overrides that choice. So is
// OPENBLAS_THREAD_TIMEOUT, to 4 (see open_openblas).
const Cblas* loaded_cblas();

// The text of loaded_cblas()->description, or "built-in kernel (why)", the
// reason listing every path tried.
const char* cblas_description();

}  // namespace cpu
}  // namespace ampx::impl
