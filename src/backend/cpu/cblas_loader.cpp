// cblas_loader.cpp -- loads the CBLAS for the CPU GEMM (see cblas_loader.h).
#include "backend/cpu/cblas_loader.h"

#include <cstdlib>
#include <string>

#include "core/optional_library.h"
#include "platform/platform.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace ampx::impl {
namespace cpu {
namespace {

// OpenBLAS's name for the best kernel family this CPU can run, or nullptr to
// leave OpenBLAS's own detection alone.
const char* openblas_core_for_this_cpu() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the registers.
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512cd");
  if (avx512) {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool bf16 = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)) != 0;
    return bf16 ? "COOPERLAKE" : "SKYLAKEX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "HASWELL";
#endif
  return nullptr;
}

// Settings OpenBLAS reads once, while it loads, and that ampx chooses unless
// the host already has: the kernel family (its own detection falls back to
// SSE3 kernels on CPUs newer than the release), and how long its idle
// workers spin. By default they spin on sched_yield for about 2^28 cycles
// after every call, taking the cores from ampx's pool, which runs the
// element-wise work between GEMMs; 4, the least allowed (2^4 cycles), puts
// them to sleep at once, and waking them costs one futex call per GEMM.
struct LoadSetting {
  const char* name;
  const char* value;
};

// OpenBLAS by its default names: a copy already loaded as it is, else a
// new one with the settings above.
void* open_openblas(LibrarySearch& search) {
  for (const std::string& name : search.paths()) {
    if (void* already = platform::loaded_library(name)) return already;
  }
  const LoadSetting settings[] = {{"OPENBLAS_CORETYPE", openblas_core_for_this_cpu()},
                                  {"OPENBLAS_THREAD_TIMEOUT", "4"}};
  bool set[2] = {false, false};
  for (size_t i = 0; i < 2; ++i) {
    set[i] = settings[i].value && !std::getenv(settings[i].name);
    if (set[i]) platform::set_environment(settings[i].name, settings[i].value);
  }
  void* handle = search.open();
  for (size_t i = 0; i < 2; ++i)
    if (set[i]) platform::unset_environment(settings[i].name);
  return handle;
}

// Why the built-in kernel computes every product (none when a CBLAS does).
std::string& not_loaded() {
  static std::string why;
  return why;
}

// By the loader rule of optional libraries (core/optional_library.h).
Cblas load() {
  Cblas blas;
  LibrarySearch search("OpenBLAS", "AMPX_BLAS", platform::library_file_names("openblas", "0"));
  void* handle = search.off() ? nullptr : search.chosen() ? search.open() : open_openblas(search);
  if (!handle) {
    not_loaded() = search.error();
    return blas;
  }
  blas.sgemm = reinterpret_cast<decltype(blas.sgemm)>(platform::library_symbol(handle, "cblas_sgemm"));
  if (!blas.sgemm) {
    not_loaded() = search.path() + " has no cblas_sgemm";
    return Cblas{};
  }
  blas.set_num_threads =
      reinterpret_cast<decltype(blas.set_num_threads)>(platform::library_symbol(handle, "openblas_set_num_threads"));
  blas.get_num_threads =
      reinterpret_cast<decltype(blas.get_num_threads)>(platform::library_symbol(handle, "openblas_get_num_threads"));
  if (!blas.set_num_threads || !blas.get_num_threads)
    blas.set_num_threads = nullptr, blas.get_num_threads = nullptr;

  static std::string description;
  description = platform::file_of_code(reinterpret_cast<const void*>(blas.sgemm));
  if (description.empty()) description = search.path();
  using ConfigFn = const char* (*)();
  if (auto config = reinterpret_cast<ConfigFn>(platform::library_symbol(handle, "openblas_get_config")))
    description += std::string(" (") + config() + ")";
  blas.description = description.c_str();
  return blas;
}

}  // namespace

const Cblas* loaded_cblas() {
  static const Cblas blas = load();
  return blas.sgemm ? &blas : nullptr;
}

const char* cblas_description() {
  const Cblas* blas = loaded_cblas();
  if (blas) return blas->description;
  static const std::string description = "built-in kernel (" + not_loaded() + ")";
  return description.c_str();
}

}  // namespace cpu
}  // namespace ampx::impl
