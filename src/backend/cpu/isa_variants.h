// isa_variants.h -- one loop body compiled for the baseline x86-64, AVX2 and
// AVX-512, chosen when the program runs (detected_cpu_isa(), which
// AMPX_CPU_ISA can lower).
//
// The library is built for baseline x86-64 (SSE2), so its plain loops are
// at most 4 floats or 2 doubles wide. A kernel -- a struct with a static
// run(...) -- is instead called through run_for_isa, which calls it from a
// wrapper compiled for the chosen instruction set with everything it calls
// inlined into it (flatten), so the whole body is vectorised for that set.
// The source is the same and the library is compiled with
// -ffp-contract=off, so no variant fuses a multiply and an add that another
// does not: every variant gives the same bits, as long as the body's sums
// keep a fixed order (independent lanes, never a reassociated reduction).
#pragma once

#include <utility>

#include "core/convert_bulk.h"

namespace ampx::impl {
namespace cpu {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <class Kernel, class... Args>
__attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl"), flatten)) void run_avx512(
    Args&&... args) {
  Kernel::run(std::forward<Args>(args)...);
}

template <class Kernel, class... Args>
__attribute__((target("avx2,f16c,fma"), flatten)) void run_avx2(Args&&... args) {
  Kernel::run(std::forward<Args>(args)...);
}
#endif

template <class Kernel, class... Args>
__attribute__((flatten)) void run_baseline(Args&&... args) {
  Kernel::run(std::forward<Args>(args)...);
}

// Kernel::run(args...) compiled for `isa` (a value detected_cpu_isa()
// returned, so one the CPU has).
template <class Kernel, class... Args>
void run_for_isa(CpuIsa isa, Args&&... args) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (isa == CpuIsa::Avx512) return run_avx512<Kernel>(std::forward<Args>(args)...);
  if (isa == CpuIsa::Avx2) return run_avx2<Kernel>(std::forward<Args>(args)...);
#else
  (void)isa;
#endif
  run_baseline<Kernel>(std::forward<Args>(args)...);
}

}  // namespace cpu
}  // namespace ampx::impl
