// backend.h -- the small interface every device backend implements.
//
// Core code (tensors, ops, optimizers) calls only these primitives; it never
// names CUDA or any other device API. Adding a backend means implementing
// this interface and registering it in backend_registry.cpp -- no op changes.
//
// Conventions for every primitive:
//  - pointers are device pointers of this backend (host pointers for the CPU);
//  - work may be enqueued asynchronously on the backend's stream unless the
//    comment says the call completes before returning;
//  - failures are reported by throwing ampx::Error (see error.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ampx/ampx.h"
#include "core/dtype.h"

namespace ampx {

// Raw memory of one device. Implementations need not be thread-safe: the
// context serialises calls.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nullptr when the memory cannot be had (never throws for that).
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  // Bytes held from the system, including any cache.
  virtual uint64_t reserved_bytes() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual ampx_device_type device_type() const = 0;
  virtual int32_t device_index() const = 0;
  // Alignment every allocation of this device gets (a power of two).
  virtual size_t alignment() const = 0;

  // ampx's own allocator for this device (used when the host gives no hooks).
  virtual std::unique_ptr<Allocator> make_default_allocator() = 0;

  // Throws AMPX_ERR_DEVICE when `ptr` is not memory this backend's device can
  // address directly (used to validate wrapped and imported memory).
  virtual void check_device_pointer(const void* ptr, const char* what) = 0;

  // Copies; the host variants complete before returning.
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;

  // Writes `count` elements of `elem_size` bytes (1, 2, 4 or 8), each holding
  // the low elem_size bytes of `pattern` (little endian).
  virtual void fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count) = 0;

  // dst[i] = convert(src[i]) for i < count, with the conversions of
  // kernels/math/convert.h. dst and src may be equal only when the types are.
  virtual void convert(void* dst, DType dst_type, const void* src, DType src_type,
                       int64_t count) = 0;

  // Waits for all enqueued work; reports asynchronous device failures.
  virtual void synchronize() = 0;
};

struct BackendOptions {
  ampx_device_type device_type = AMPX_DEVICE_CPU;
  int32_t device_index = 0;
  int32_t num_threads = 0;
  void* cuda_stream = nullptr;
};

// Creates the backend the options ask for; throws AMPX_ERR_NO_DEVICE when it
// is not built in or the device does not exist.
std::unique_ptr<Backend> create_backend(const BackendOptions& options);

// Number of usable CUDA devices (0 without the CUDA backend).
int32_t cuda_device_count();

}  // namespace ampx
