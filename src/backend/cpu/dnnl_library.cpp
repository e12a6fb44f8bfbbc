// dnnl_library.cpp -- see dnnl_library.h.
#include "backend/cpu/dnnl_library.h"

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/optional_library.h"
#include "platform/platform.h"

namespace ampx::impl {
namespace cpu {
namespace {

template <class Fn>
bool resolve(void* handle, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(platform::library_symbol(handle, name));
  return fn != nullptr;
}

// Opens oneDNN, or says in `lib.description` why not (then returns false).
bool open_dnnl(Dnnl& lib) {
  // By the loader rule of optional libraries (core/optional_library.h).
  LibrarySearch search("oneDNN", "AMPX_DNNL_LIBRARY", {"libdnnl.so.2"});
  if (search.off()) {
    lib.description = search.error();
    return false;
  }
  const char* blas = std::getenv("AMPX_BLAS");
  if (blas && std::strcmp(blas, "none") == 0) {
    lib.description = "oneDNN off (AMPX_BLAS=none: ampx's own kernel for every product)";
    return false;
  }
  // libgomp reads its wait policy once, when it loads. Passive with a short
  // spin: its idle threads poll about 1000 times (a few microseconds) and
  // then sleep, instead of spinning on the cores ampx's own threads need
  // (libgomp's default) or always paying a kernel wake-up (passive alone).
  // The CNN step of bench_vs_torch_cpu.py, two EPYC cores, bf16: 10.9-11.3
  // ms passive alone, 8.9-9.1 ms with 1000 polls (3000: 9.2-9.6, 30000:
  // 16-17, the default: 14.7-15.5).
  const bool omp_loaded = platform::loaded_library("libgomp.so.1") != nullptr;
  const bool set_policy = !omp_loaded && std::getenv("OMP_WAIT_POLICY") == nullptr &&
                          std::getenv("GOMP_SPINCOUNT") == nullptr;
  if (set_policy) {
    platform::set_environment("OMP_WAIT_POLICY", "passive");
    platform::set_environment("GOMP_SPINCOUNT", "1000");
  }
  void* handle = search.open();
  if (set_policy) {
    platform::unset_environment("OMP_WAIT_POLICY");
    platform::unset_environment("GOMP_SPINCOUNT");
  }
  if (!handle) {
    lib.description = search.error();
    return false;
  }
  const std::string& path = search.path();
  const bool complete =
      resolve(handle, "dnnl_version", lib.version) &&
      resolve(handle, "dnnl_get_effective_cpu_isa", lib.effective_isa) &&
      resolve(handle, "dnnl_engine_create", lib.engine_create) &&
      resolve(handle, "dnnl_stream_create", lib.stream_create) &&
      resolve(handle, "dnnl_stream_wait", lib.stream_wait) &&
      resolve(handle, "dnnl_stream_destroy", lib.stream_destroy) &&
      resolve(handle, "dnnl_memory_desc_init_by_strides", lib.memory_desc) &&
      resolve(handle, "dnnl_memory_create", lib.memory_create) &&
      resolve(handle, "dnnl_memory_destroy", lib.memory_destroy) &&
      resolve(handle, "dnnl_memory_desc_init_by_tag", lib.memory_desc_by_tag) &&
      resolve(handle, "dnnl_memory_desc_equal", lib.memory_desc_equal) &&
      resolve(handle, "dnnl_memory_desc_get_size", lib.memory_desc_size) &&
      resolve(handle, "dnnl_matmul_desc_init", lib.matmul_desc) &&
      resolve(handle, "dnnl_dilated_convolution_forward_desc_init", lib.conv_forward_desc) &&
      resolve(handle, "dnnl_dilated_convolution_backward_data_desc_init",
              lib.conv_backward_data_desc) &&
      resolve(handle, "dnnl_dilated_convolution_backward_weights_desc_init",
              lib.conv_backward_weights_desc) &&
      resolve(handle, "dnnl_reorder_primitive_desc_create", lib.reorder_pd_create) &&
      resolve(handle, "dnnl_primitive_desc_query_md", lib.pd_query_md) &&
      resolve(handle, "dnnl_primitive_attr_create", lib.attr_create) &&
      resolve(handle, "dnnl_primitive_attr_destroy", lib.attr_destroy) &&
      resolve(handle, "dnnl_primitive_attr_set_output_scales", lib.attr_output_scales) &&
      resolve(handle, "dnnl_primitive_attr_set_post_ops", lib.attr_post_ops) &&
      resolve(handle, "dnnl_post_ops_create", lib.post_ops_create) &&
      resolve(handle, "dnnl_post_ops_destroy", lib.post_ops_destroy) &&
      resolve(handle, "dnnl_post_ops_append_sum", lib.post_ops_sum) &&
      resolve(handle, "dnnl_primitive_desc_create", lib.pd_create) &&
      resolve(handle, "dnnl_primitive_desc_destroy", lib.pd_destroy) &&
      resolve(handle, "dnnl_primitive_create", lib.primitive_create) &&
      resolve(handle, "dnnl_primitive_destroy", lib.primitive_destroy) &&
      resolve(handle, "dnnl_primitive_execute", lib.execute);
  if (!complete) {
    lib.description = "oneDNN not used (" + path + " lacks the oneDNN 2.x C API)";
    platform::close_library(handle);
    return false;
  }
  resolve(handle, "omp_set_num_threads", lib.omp_set_num_threads);
  resolve(handle, "omp_get_max_threads", lib.omp_get_max_threads);
  const dnnl_version_t* v = lib.version();
  const std::string name = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
                           "." + std::to_string(v->patch);
  if (lib.effective_isa() < dnnl_cpu_isa_avx512_core_bf16) {
    lib.description = name + " not used: the CPU has no native bf16 (AVX512-BF16)";
    return false;  // kept open: unloading a runtime with threads is not safe
  }
  if (lib.engine_create(&lib.engine, dnnl_cpu, 0) != dnnl_success) {
    lib.description = name + " not used: no CPU engine";
    return false;
  }
  lib.description = name + (lib.effective_isa() >= dnnl_cpu_isa_avx512_core_amx
                                ? " (AMX bf16)"
                                : " (AVX512-BF16)");
  return true;
}

struct Loaded {
  Dnnl lib;
  bool usable = false;
};

// Never destroyed: at exit oneDNN may be torn down before ampx's statics.
Loaded& loaded() {
  static Loaded& state = *new Loaded;
  static std::once_flag once;
  std::call_once(once, [] { state.usable = open_dnnl(state.lib); });
  return state;
}

// Multiply-adds below which one thread beats waking the others: OpenMP's
// threads sleep between primitives (OMP_WAIT_POLICY=passive) and take tens
// of microseconds to wake. On two EPYC cores bench_mlp_cpu's bf16 step at
// width 256, batch 64 (4M per product) took 0.79 ms on one thread and
// 1.08 ms on both.
constexpr double kParallelProducts = 16.0 * 1024 * 1024;

}  // namespace

const Dnnl* dnnl_library() {
  const Loaded& state = loaded();
  return state.usable ? &state.lib : nullptr;
}

bool dnnl_available() { return loaded().usable; }

namespace {

std::atomic<int64_t> live_plans{0};

struct Registry {
  std::mutex mutex;
  std::unordered_map<const ThreadPool*,
                     std::array<std::shared_ptr<void>, static_cast<size_t>(PlanKind::Count)>>
      by_pool;
};

// Never destroyed, as the library: a context still alive at exit keeps its
// plans.
Registry& registry() {
  static Registry& r = *new Registry;
  return r;
}

}  // namespace

std::shared_ptr<void> context_plans(const ThreadPool& pool, PlanKind kind, const Dnnl& d,
                                    std::shared_ptr<void> (*make)(const Dnnl& d)) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::shared_ptr<void>& slot = r.by_pool[&pool][static_cast<int>(kind)];
  if (!slot) slot = make(d);
  return slot;
}

void release_dnnl_plans(const ThreadPool& pool) {
  Registry& r = registry();
  decltype(r.by_pool)::node_type released;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    released = r.by_pool.extract(&pool);
  }
  // The plans are destroyed here, outside the lock.
}

void count_plans(int64_t delta) { live_plans.fetch_add(delta, std::memory_order_relaxed); }

int64_t dnnl_live_plans() { return live_plans.load(std::memory_order_relaxed); }

const char* dnnl_description() { return loaded().lib.description.c_str(); }

dnnl_stream_t thread_stream(const Dnnl& d) {
  struct Owned {
    const Dnnl* d = nullptr;
    dnnl_stream_t stream = nullptr;
    ~Owned() {
      if (stream) d->stream_destroy(stream);
    }
  };
  thread_local Owned owned;
  if (!owned.stream && d.stream_create(&owned.stream, d.engine, dnnl_stream_default_flags) ==
                           dnnl_success)
    owned.d = &d;
  return owned.stream;
}

OmpThreads::OmpThreads(const Dnnl& d, int threads, double multiply_adds)
    : d_(d), threads_(multiply_adds < kParallelProducts ? 1 : threads) {
  if (!d.omp_set_num_threads) return;
  saved_ = d.omp_get_max_threads();
  d.omp_set_num_threads(threads_);
}

OmpThreads::~OmpThreads() {
  if (d_.omp_set_num_threads) d_.omp_set_num_threads(saved_);
}

}  // namespace cpu
}  // namespace ampx::impl

#else  // built without oneDNN's headers

namespace ampx::impl {
namespace cpu {

bool dnnl_available() { return false; }
const char* dnnl_description() { return "oneDNN not used (built without its headers)"; }
void release_dnnl_plans(const ThreadPool&) {}
int64_t dnnl_live_plans() { return 0; }

}  // namespace cpu
}  // namespace ampx::impl

#endif
