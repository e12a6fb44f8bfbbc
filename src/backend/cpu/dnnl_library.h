// dnnl_library.h -- oneDNN (the C API of oneDNN 2.x), opened at run time,
// for the CPU backend's bf16 matrix products (dnnl_matmul.h) and its
// convolutions (dnnl_conv.h).
//
// libdnnl.so.2 (Debian's libdnnl2), or the file AMPX_DNNL_LIBRARY names, is
// opened on first use; "none" there, or AMPX_BLAS=none (ampx's own kernels
// for everything), turns it off. It is used only on a CPU that multiplies
// bf16 natively (AVX512-BF16 or AMX, as oneDNN itself detects it). When
// ampx loads oneDNN's OpenMP runtime first and neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT is set, they are set to passive and 1000 for the load, so
// that OpenMP's idle threads poll briefly and then sleep instead of
// spinning against ampx's own and OpenBLAS's threads on the same cores.
#pragma once

namespace ampx::impl {
namespace cpu {

// Whether oneDNN computes in this process (decided on the first call of
// any function here, thread-safe).
bool dnnl_available();

// "oneDNN 2.6.3 (AVX512-BF16)", or why it is not used.
const char* dnnl_description();

}  // namespace cpu
}  // namespace ampx::impl

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace ampx::impl {
namespace cpu {

// The entry points ampx calls, resolved from the opened library.
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
  decltype(&dnnl_memory_desc_init_by_tag) memory_desc_by_tag = nullptr;
  decltype(&dnnl_memory_desc_equal) memory_desc_equal = nullptr;
  decltype(&dnnl_memory_desc_get_size) memory_desc_size = nullptr;
  decltype(&dnnl_matmul_desc_init) matmul_desc = nullptr;
  decltype(&dnnl_dilated_convolution_forward_desc_init) conv_forward_desc = nullptr;
  decltype(&dnnl_dilated_convolution_backward_data_desc_init) conv_backward_data_desc = nullptr;
  decltype(&dnnl_dilated_convolution_backward_weights_desc_init) conv_backward_weights_desc =
      nullptr;
  decltype(&dnnl_reorder_primitive_desc_create) reorder_pd_create = nullptr;
  decltype(&dnnl_primitive_desc_query_md) pd_query_md = nullptr;
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

// The opened library, or nullptr when it is not used. Never unloaded.
const Dnnl* dnnl_library();

inline dnnl_data_type_t dnnl_type(DType type) {
  return type == DType::BF16 ? dnnl_bf16 : type == DType::F16 ? dnnl_f16 : dnnl_f32;
}

// The calling thread's stream (a stream is not to be shared by threads), or
// nullptr if none can be made.
dnnl_stream_t thread_stream(const Dnnl& d);

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

// The primitives made so far, one per Key (compared bytewise: set padding
// too), most recent last, so that a training step does not describe and
// create its primitives (a convolution's reorders too) again on every call;
// what that costs was not measured apart. A model has a few dozen
// shapes, so a short list searched linearly is enough, the oldest dropped
// when it is full. A primitive executes on several threads at once (each
// with its own stream); one dropped while another thread runs it would be
// freed under it, so entries are shared_ptrs. Value::release(const Dnnl&)
// destroys what a Value holds.
template <class Key, class Value>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(const Dnnl& d) : d_(d) {}

  // The entry for `key`, made by `make(Value*)` (false: it cannot be, and
  // nullptr is returned) if there is none.
  template <class Make>
  std::shared_ptr<const Value> find_or_make(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_)
      if (std::memcmp(&entry.first, &key, sizeof(Key)) == 0) return entry.second;
    std::shared_ptr<Value> value(new Value, [&d = d_](Value* v) {
      v->release(d);
      delete v;
    });
    if (!make(value.get())) return nullptr;
    if (entries_.size() == kCapacity) entries_.erase(entries_.begin());
    entries_.emplace_back(key, value);
    return value;
  }

 private:
  static constexpr size_t kCapacity = 128;
  const Dnnl& d_;
  std::mutex mutex_;
  std::vector<std::pair<Key, std::shared_ptr<const Value>>> entries_;
};

// Sets the OpenMP threads oneDNN runs the calling thread's primitives on
// for a scope: `threads`, or 1 for less work than kParallelProducts
// multiply-adds, and restores the setting after. Some primitives (the
// convolutions' jit kernels) fix their thread count when they are created,
// from this setting, and later open their parallel regions with exactly that
// many threads whatever the setting then: such a primitive must be created
// inside the scope and cached per threads().
class OmpThreads {
 public:
  OmpThreads(const Dnnl& d, int threads, double multiply_adds);
  ~OmpThreads();
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

  // The thread count set for the scope.
  int threads() const { return threads_; }

 private:
  const Dnnl& d_;
  int saved_ = 0;
  int threads_ = 1;
};

}  // namespace cpu
}  // namespace ampx::impl

#endif
