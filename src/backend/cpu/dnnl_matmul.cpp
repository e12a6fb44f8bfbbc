// dnnl_matmul.cpp -- see dnnl_matmul.h. The products are row-major as
// GemmArgs: A [m, k] (stored [k, m] when trans_a), B [k, n] (stored [n, k]
// when trans_b), C [m, n], each matrix of a batch at its batch stride (0: one
// matrix shared by the batch, which oneDNN broadcasts). alpha is oneDNN's
// output scale, beta its sum post-op.
#include "backend/cpu/dnnl_matmul.h"

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ampx::impl {
namespace cpu {
namespace {

struct Dnnl {
  decltype(&dnnl_version) version = nullptr;
  decltype(&dnnl_get_effective_cpu_isa) effective_isa = nullptr;
  decltype(&dnnl_engine_create) engine_create = nullptr;
  decltype(&dnnl_stream_create) stream_create = nullptr;
  decltype(&dnnl_stream_wait) stream_wait = nullptr;
  decltype(&dnnl_stream_destroy) stream_destroy = nullptr;
  decltype(&dnnl_memory_desc_init_by_strides) memory_desc = nullptr;
  decltype(&dnnl_memory_create) memory_create = nullptr;
  decltype(&dnnl_memory_destroy) memory_destroy = nullptr;
  decltype(&dnnl_matmul_desc_init) matmul_desc = nullptr;
  decltype(&dnnl_primitive_attr_create) attr_create = nullptr;
  decltype(&dnnl_primitive_attr_destroy) attr_destroy = nullptr;
  decltype(&dnnl_primitive_attr_set_output_scales) attr_output_scales = nullptr;
  decltype(&dnnl_primitive_attr_set_post_ops) attr_post_ops = nullptr;
  decltype(&dnnl_post_ops_create) post_ops_create = nullptr;
  decltype(&dnnl_post_ops_destroy) post_ops_destroy = nullptr;
  decltype(&dnnl_post_ops_append_sum) post_ops_sum = nullptr;
  decltype(&dnnl_primitive_desc_create) pd_create = nullptr;
  decltype(&dnnl_primitive_desc_destroy) pd_destroy = nullptr;
  decltype(&dnnl_primitive_create) primitive_create = nullptr;
  decltype(&dnnl_primitive_destroy) primitive_destroy = nullptr;
  decltype(&dnnl_primitive_execute) execute = nullptr;
  // The OpenMP runtime oneDNN runs on; its thread count is the calling
  // thread's own setting, so setting it for one call disturbs no other.
  void (*omp_set_num_threads)(int) = nullptr;
  int (*omp_get_max_threads)() = nullptr;
  dnnl_engine_t engine = nullptr;
  std::string description;
};

template <class Fn>
bool resolve(void* handle, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  return fn != nullptr;
}

// Opens oneDNN, or says in `lib.description` why not (then returns false).
bool open_dnnl(Dnnl& lib) {
  const char* named = std::getenv("AMPX_DNNL_LIBRARY");
  const std::string path = named && *named ? named : "libdnnl.so.2";
  if (path == "none") {
    lib.description = "oneDNN off (AMPX_DNNL_LIBRARY=none)";
    return false;
  }
  const bool omp_loaded = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr;
  const bool set_policy = !omp_loaded && std::getenv("OMP_WAIT_POLICY") == nullptr;
  if (set_policy) setenv("OMP_WAIT_POLICY", "passive", 0);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (set_policy) unsetenv("OMP_WAIT_POLICY");
  if (!handle) {
    const char* error = dlerror();
    lib.description = "oneDNN not loaded (" + path + ": " + (error ? error : "not found") + ")";
    return false;
  }
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
      resolve(handle, "dnnl_matmul_desc_init", lib.matmul_desc) &&
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
    dlclose(handle);
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

dnnl_data_type_t dnnl_type(DType type) {
  return type == DType::BF16 ? dnnl_bf16 : type == DType::F16 ? dnnl_f16 : dnnl_f32;
}

// A product's primitive, made once per shape: making one costs tens of
// microseconds even with oneDNN's own cache, as much as a small product.
struct ShapeKey {
  int64_t batch, m, n, k, a_batch_stride, b_batch_stride, c_batch_stride;
  bool trans_a, trans_b, bias;
  DType ab_type, c_type;
  float alpha, beta;
  bool operator==(const ShapeKey& o) const {
    return std::memcmp(this, &o, sizeof(ShapeKey)) == 0;
  }
};

ShapeKey shape_key(const GemmArgs& g) {
  ShapeKey key;
  std::memset(&key, 0, sizeof key);  // padding too: keys compare bytewise
  key.batch = g.batch;
  key.m = g.m;
  key.n = g.n;
  key.k = g.k;
  key.a_batch_stride = g.a_batch_stride;
  key.b_batch_stride = g.b_batch_stride;
  key.c_batch_stride = g.c_batch_stride;
  key.trans_a = g.trans_a;
  key.trans_b = g.trans_b;
  key.bias = g.bias != nullptr;
  key.ab_type = g.ab_type;
  key.c_type = g.c_type;
  key.alpha = g.alpha;
  key.beta = g.beta;
  return key;
}

// A made primitive with the memory descriptors its arguments are bound by.
struct Made {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t a, b, c, bias;
};

// Everything made on the way to one primitive, released whatever happens.
struct Making {
  const Dnnl& d;
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t post_ops = nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  explicit Making(const Dnnl& lib) : d(lib) {}
  ~Making() {
    if (pd) d.pd_destroy(pd);
    if (post_ops) d.post_ops_destroy(post_ops);
    if (attr) d.attr_destroy(attr);
  }
  Making(const Making&) = delete;
  Making& operator=(const Making&) = delete;
};

// A [batch, rows, cols] matrix stored row-major (transposed: [cols, rows])
// at `batch_stride` elements per matrix.
bool describe(const Dnnl& d, dnnl_memory_desc_t* md, int64_t batch, int64_t rows, int64_t cols,
              bool transposed, int64_t batch_stride, DType type) {
  const bool shared = batch > 1 && batch_stride == 0;
  dnnl_dims_t dims = {shared ? 1 : batch, rows, cols};
  dnnl_dims_t strides = {shared ? rows * cols : batch_stride, transposed ? 1 : cols,
                         transposed ? rows : 1};
  if (batch == 1) strides[0] = rows * cols;
  return d.memory_desc(md, 3, dims, dnnl_type(type), strides) == dnnl_success;
}

bool make(const Dnnl& d, const GemmArgs& g, Made* made) {
  if (!describe(d, &made->a, g.batch, g.m, g.k, g.trans_a, g.a_batch_stride, g.ab_type) ||
      !describe(d, &made->b, g.batch, g.k, g.n, g.trans_b, g.b_batch_stride, g.ab_type) ||
      !describe(d, &made->c, g.batch, g.m, g.n, false, g.c_batch_stride, g.c_type) ||
      (g.bias && !describe(d, &made->bias, 1, 1, g.n, false, 0, g.c_type)))
    return false;
  dnnl_matmul_desc_t desc;
  if (d.matmul_desc(&desc, &made->a, &made->b, g.bias ? &made->bias : nullptr, &made->c) !=
      dnnl_success)
    return false;
  Making making(d);
  if (d.attr_create(&making.attr) != dnnl_success) return false;
  if (g.alpha != 1.0f && d.attr_output_scales(making.attr, 1, 0, &g.alpha) != dnnl_success)
    return false;
  if (g.beta != 0.0f) {
    if (d.post_ops_create(&making.post_ops) != dnnl_success ||
        d.post_ops_sum(making.post_ops, g.beta) != dnnl_success ||
        d.attr_post_ops(making.attr, making.post_ops) != dnnl_success)
      return false;
  }
  return d.pd_create(&making.pd, &desc, making.attr, d.engine, nullptr) == dnnl_success &&
         d.primitive_create(&made->primitive, making.pd) == dnnl_success;
}

// The primitives made so far, most recent last; a model has a few dozen
// shapes, so a short list searched linearly is enough, the oldest dropped
// when it is full. A primitive executes on several threads at once (each
// with its own stream); one dropped while another thread runs it would be
// freed under it, so entries are shared_ptrs.
class Primitives {
 public:
  explicit Primitives(const Dnnl& lib) : d_(lib) {}
  std::shared_ptr<const Made> find_or_make(const GemmArgs& g) {
    const ShapeKey key = shape_key(g);
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_)
      if (entry.first == key) return entry.second;
    auto made = std::shared_ptr<Made>(new Made, [&lib = d_](Made* m) {
      if (m->primitive) lib.primitive_destroy(m->primitive);
      delete m;
    });
    if (!make(d_, g, made.get())) return nullptr;
    if (entries_.size() == kCapacity) entries_.erase(entries_.begin());
    entries_.emplace_back(key, made);
    return made;
  }

 private:
  static constexpr size_t kCapacity = 128;
  const Dnnl& d_;
  std::mutex mutex_;
  std::vector<std::pair<ShapeKey, std::shared_ptr<const Made>>> entries_;
};

// This thread's stream: a stream is not meant to be shared across threads.
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

// The memory objects of one call, released whatever happens.
struct Bound {
  const Dnnl& d;
  dnnl_memory_t memory[4] = {};
  explicit Bound(const Dnnl& lib) : d(lib) {}
  ~Bound() {
    for (dnnl_memory_t m : memory)
      if (m) d.memory_destroy(m);
  }
  Bound(const Bound&) = delete;
  Bound& operator=(const Bound&) = delete;
};

struct Loaded {
  Dnnl lib;
  bool usable = false;
  Primitives primitives{lib};
};

// Never destroyed: at exit oneDNN may be torn down before ampx's statics.
Loaded& loaded() {
  static Loaded& state = *new Loaded;
  static std::once_flag once;
  std::call_once(once, [] { state.usable = open_dnnl(state.lib); });
  return state;
}

// Multiply-adds below which one thread beats waking the others: on two EPYC
// cores bench_mlp_cpu's bf16 step at width 256, batch 64 (4M per product)
// took 0.79 ms this way and 1.08 ms on both threads.
constexpr double kParallelProducts = 16.0 * 1024 * 1024;

bool run(const Dnnl& d, Primitives& primitives, int threads, const GemmArgs& g) {
  const std::shared_ptr<const Made> made = primitives.find_or_make(g);
  dnnl_stream_t stream = thread_stream(d);
  if (!made || !stream) return false;
  Bound bound(d);
  if (d.memory_create(&bound.memory[0], &made->a, d.engine, const_cast<void*>(g.a)) !=
          dnnl_success ||
      d.memory_create(&bound.memory[1], &made->b, d.engine, const_cast<void*>(g.b)) !=
          dnnl_success ||
      d.memory_create(&bound.memory[2], &made->c, d.engine, g.c) != dnnl_success ||
      (g.bias && d.memory_create(&bound.memory[3], &made->bias, d.engine,
                                 const_cast<void*>(g.bias)) != dnnl_success))
    return false;
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, bound.memory[0]},
                             {DNNL_ARG_WEIGHTS, bound.memory[1]},
                             {DNNL_ARG_DST, bound.memory[2]},
                             {DNNL_ARG_BIAS, bound.memory[3]}};
  // OpenMP's threads sleep between products (OMP_WAIT_POLICY=passive) and
  // take tens of microseconds to wake: a product shorter than that runs
  // faster on the calling thread alone.
  const double products = double(g.batch) * double(g.m) * double(g.n) * double(g.k);
  const int saved = d.omp_get_max_threads ? d.omp_get_max_threads() : 0;
  if (d.omp_set_num_threads) d.omp_set_num_threads(products < kParallelProducts ? 1 : threads);
  const dnnl_status_t status = d.execute(made->primitive, stream, g.bias ? 4 : 3, args);
  const dnnl_status_t waited = status == dnnl_success ? d.stream_wait(stream) : status;
  if (d.omp_set_num_threads) d.omp_set_num_threads(saved);
  // C may be partly written by now: no falling back to the other path.
  if (waited != dnnl_success)
    fail(AMPX_ERR_INTERNAL, "gemm: oneDNN's matmul failed (dnnl_status ", int{waited}, ")");
  return true;
}

}  // namespace

bool dnnl_gemm(int threads, const GemmArgs& g) {
  if (g.ab_type != DType::BF16 || (g.batch > 1 && g.c_batch_stride == 0) ||
      (g.bias && g.alpha != 1.0f) || g.batch == 0 || g.k == 0 || g.m == 0 || g.n == 0)
    return false;
  Loaded& state = loaded();
  return state.usable && run(state.lib, state.primitives, threads, g);
}

bool dnnl_available() { return loaded().usable; }

const char* dnnl_description() { return loaded().lib.description.c_str(); }

}  // namespace cpu
}  // namespace ampx::impl

#else  // built without oneDNN's headers

namespace ampx::impl {
namespace cpu {

bool dnnl_gemm(int, const GemmArgs&) { return false; }
bool dnnl_available() { return false; }
const char* dnnl_description() { return "oneDNN not used (built without its headers)"; }

}  // namespace cpu
}  // namespace ampx::impl

#endif
