// context.h -- a device, its allocator and its memory statistics.
//
// Contexts and tensors are reference counted: every tensor holds a reference
// to its context, so a host language's finalizers may release them in any
// order. Memory bookkeeping is under a mutex because the last release of a
// tensor may come from another thread (a garbage collector's finalizer);
// everything else follows the one-thread-at-a-time rule of the C API.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "ampx/ampx.h"
#include "core/backend.h"
#include "core/backend_nn.h"

namespace ampx::impl {

// The base of every object a handle points to (tensors, optimizers,
// scalers, autocast policies): a type tag checked on every API call, and a
// reference count. Deliberately not polymorphic, so the tag sits at offset 0
// of every handle and reading it through a handle of the wrong type is a
// plain load (a vtable would make sanitizers flag the very check that
// catches such a mistake); `destroy` deletes the full object instead.
struct Object {
  Object(uint64_t live_magic, void (*destroy_fn)(Object*)) : magic(live_magic), destroy(destroy_fn) {}
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

  uint64_t magic;
  std::atomic<int64_t> refs{1};
  void (*destroy)(Object*);

 protected:
  ~Object() = default;
};

struct MemoryStats {
  uint64_t current_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t allocation_count = 0;
  uint64_t reserved_bytes = 0;
};

// State that a layer above core (autograd, autocast, scopes) keeps per
// context. Core owns it without knowing its type, so the dependency stays
// one-directional.
struct ContextExtension {
  virtual ~ContextExtension() = default;
};

class DeviceContext {
 public:
  static constexpr uint64_t kLiveMagic = 0x414d50582d435458ull;  // "AMPX-CTX"
  static constexpr uint64_t kDeadMagic = 0x646561642d637478ull;  // "dead-ctx"

  // Validates options (already merged with defaults) and creates the backend.
  static DeviceContext* create(const ampx_context_options& options);
  // A context on a backend made by the caller (a backend that is not built
  // in, such as the tests' core-only one), with options create() has
  // validated; their device fields are not read. Takes over the backend,
  // also when it throws.
  static DeviceContext* create_with_backend(const ampx_context_options& options,
                                            std::unique_ptr<Backend> backend);

  bool is_live() const { return magic_ == kLiveMagic; }
  bool is_dead() const { return magic_ == kDeadMagic; }

  // References held inside the library (one per tensor, one for all handle
  // references together).
  void retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release();

  // References the host program holds through ampx_context_retain/release.
  // Once they reach zero the handle is closed: it can no longer be used to
  // make objects, while existing tensors keep the context itself alive.
  bool is_open() const { return handle_refs_.load(std::memory_order_acquire) > 0; }
  void retain_handle() { handle_refs_.fetch_add(1, std::memory_order_relaxed); }
  // Returns false when the handle was already closed (a double release).
  bool release_handle();

  Backend& backend() { return *backend_; }
  uint64_t seed() const { return seed_; }

  // The position of the context's random stream: each random op takes the
  // next offset, so its numbers, keyed by the seed, are new, while a program
  // that repeats its random ops on a fresh context with the same seed gets
  // the same numbers. Checkpointing rewinds it to recompute a segment with
  // the numbers of its first run.
  uint64_t next_random_offset() { return random_offset_++; }
  uint64_t random_offset() const { return random_offset_; }
  void set_random_offset(uint64_t offset) { random_offset_ = offset; }

  // Whether f32 matrix products and convolutions may run in TF32
  // (ampx_context_set_tf32); passed on to the capabilities that multiply.
  bool tf32() const { return tf32_; }
  void set_tf32(bool allowed);

  // Device memory for tensor storage; throws AMPX_ERR_OUT_OF_MEMORY (with the
  // request and the current usage in the message) when it cannot be had.
  void* allocate(size_t bytes);
  void deallocate(void* ptr, size_t bytes);

  MemoryStats memory_stats();
  void reset_peak();

  // A fresh id for each tensor, so the tape can name tensors without
  // holding them.
  uint64_t next_tensor_id() { return ++last_tensor_id_; }

  // Index checks on the device (Backend::check_indices): the record of the
  // first out-of-range index an op met, made with the context; and
  // the number the next checked op gets, which a finding names.
  int64_t* index_record();
  int64_t next_checked_call() { return ++checked_calls_; }
  // If an op has recorded a bad index, clears the record and throws
  // AMPX_ERR_INVALID_ARGUMENT describing it; reading the record waits for
  // the device. The CPU ops call it right after their check; on a GPU every
  // call that waits for the device anyway calls it first, so a training
  // step enqueues without a round trip to the host and a bad label is
  // reported at the step's next synchronisation (meanwhile the kernels
  // treat it as documented in backend.h: NaN losses, zero rows).
  void raise_index_errors();
  // Runs nn.check_indices on `indices` (I32 or I64) with `check`, its call
  // number set to the next checked call, into the context's record and
  // *valid (see NnPrimitives::check_indices). Where the backend's work is
  // done when the call returns (the CPU), a finding is reported at once;
  // elsewhere at the next call that waits for the device.
  void check_indices(NnPrimitives& nn, const void* indices, DType type, int64_t count,
                     IndexCheck check, float* valid);
  // Copies device memory to the host, after reporting a pending index
  // finding: every read that waits for the device goes through here.
  void read_to_host(void* host_dst, const void* src, size_t bytes);

  std::unique_ptr<ContextExtension> autograd;  // see autograd/tape.h
  std::unique_ptr<ContextExtension> autocast;  // see autocast/autocast.h

  // Keeps a released object's shell (its magic already marked dead) for a
  // while, so that a use after release is reported instead of reading freed
  // memory. The shell is deleted later, or with the context.
  void quarantine(Object* shell) noexcept;

 private:
  DeviceContext() = default;
  ~DeviceContext();

  uint64_t magic_ = kLiveMagic;
  std::atomic<int64_t> refs_{1};
  std::atomic<int64_t> handle_refs_{1};
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Allocator> allocator_;
  uint64_t seed_ = 0;
  uint64_t random_offset_ = 0;
  bool tf32_ = false;
  std::atomic<uint64_t> last_tensor_id_{0};
  // The record lives in this array on the CPU, and on a GPU in memory of the
  // backend's own allocator, never the host's hooks (it is not a tensor).
  int64_t host_record_[kRecordFields] = {};
  std::unique_ptr<Allocator> record_allocator_;
  int64_t* index_record_ = nullptr;
  int64_t checked_calls_ = 0;

  std::mutex memory_mutex_;
  MemoryStats stats_;
  std::deque<Object*> quarantine_;
};

}  // namespace ampx::impl
