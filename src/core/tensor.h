// tensor.h -- dense, contiguous, row-major arrays on a context's device.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "ampx/ampx.h"
#include "core/context.h"
#include "core/dtype.h"

namespace ampx::impl {

constexpr int kMaxDims = AMPX_MAX_DIMS;

struct Shape {
  int32_t ndim = 0;
  int64_t dims[kMaxDims] = {};

  // 0 when any extent is 0, whatever the others.
  int64_t numel() const { return extent_product(0, ndim); }
  // The product of dims[begin, end), for loop bounds and strides; 0 when one
  // of them is 0. Exact for any range of a shape make_shape accepts that has
  // elements. In a shape without elements a range without the zero may not
  // fit in int64; it reads 0, as there is nothing to loop over.
  int64_t extent_product(int32_t begin, int32_t end) const;
  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 3]"
};

// The one checked constructor of shapes, for those from the C API and those
// ops compute: ndim in [0, AMPX_MAX_DIMS], extents >= 0, and -- unless an
// extent is 0, in any position -- a byte size for `dtype` that fits in int64
// and size_t. SHAPE otherwise, naming `what` when given ("matmul's output").
// Every tensor's shape passes it (DeviceTensor::create checks), so numel()
// and nbytes() never wrap.
Shape make_shape(int32_t ndim, const int64_t* dims, DType dtype, const char* what = nullptr);
inline Shape make_shape(const Shape& proposed, DType dtype, const char* what = nullptr) {
  return make_shape(proposed.ndim, proposed.dims, dtype, what);
}

// The memory behind a tensor: either from the context's allocator, or
// external memory with an optional release callback.
class Storage {
 public:
  using ReleaseFn = void (*)(void* arg, void* data);

  static std::shared_ptr<Storage> allocate(DeviceContext& ctx, size_t bytes);
  // External memory used on `ctx`'s device; nothing is released until
  // set_release is called, so a creation that fails half-way never calls the
  // caller's deleter.
  static std::shared_ptr<Storage> external(DeviceContext& ctx, void* data, size_t bytes);
  void set_release(ReleaseFn release, void* release_arg) {
    release_ = release;
    release_arg_ = release_arg;
  }
  ~Storage();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

  // Counts the writes the program makes in place (tensor copies and fills,
  // optimizer steps, state loads), so backward can refuse a node whose saved
  // tensors changed after it was recorded, as torch's version counters do.
  // Writes through wrapped or DLPack-shared memory are not seen.
  uint64_t version() const { return version_; }
  void note_write() { ++version_; }

 private:
  Storage() = default;
  DeviceContext* owner_ = nullptr;  // set when the context's allocator owns data_
  DeviceContext* user_ = nullptr;   // the context external memory is used on
  void* data_ = nullptr;
  size_t bytes_ = 0;
  ReleaseFn release_ = nullptr;
  void* release_arg_ = nullptr;
  uint64_t version_ = 0;
};

struct DeviceTensor : Object {
  static constexpr uint64_t kLiveMagic = 0x414d50582d54534eull;  // "AMPX-TSN"
  static constexpr uint64_t kDeadMagic = 0x646561642d74736eull;  // "dead-tsn"

  DeviceTensor() : Object(kLiveMagic, [](Object* o) { delete static_cast<DeviceTensor*>(o); }) {}

  // Takes over one reference to ctx's caller: the tensor retains `ctx`.
  static DeviceTensor* create(DeviceContext& ctx, DType dtype, const Shape& shape,
                              std::shared_ptr<Storage> storage);
  // A tensor of new memory; shape checked as create checks it.
  static DeviceTensor* empty(DeviceContext& ctx, DType dtype, const Shape& shape);
  // A new tensor on base's memory, starting `extra_offset` bytes past base's
  // first element (base may itself be a view): it shares the storage, so it
  // keeps the memory alive and shares the version counter. The caller has
  // checked that dtype/shape fit inside base's bytes from there.
  static DeviceTensor* alias(DeviceContext& ctx, const DeviceTensor& base, DType dtype,
                             const Shape& shape, size_t extra_offset = 0);

  void retain() { refs.fetch_add(1, std::memory_order_relaxed); }
  void release();

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // Every access to a tensor's memory goes through here, so a view's offset
  // is never forgotten. No offset is applied to an empty storage's NULL.
  void* data() const {
    return byte_offset ? static_cast<char*>(storage->data()) + byte_offset : storage->data();
  }
  std::string describe() const;  // "f16[2, 3]"

  DeviceContext* ctx = nullptr;
  DType dtype = DType::F32;
  Shape shape;
  std::shared_ptr<Storage> storage;
  size_t byte_offset = 0;  // of the first element in storage (non-zero for some views)
  std::string name;
  DeviceTensor* grad = nullptr;  // retained; see ampx_tensor_set_grad
  uint64_t id = 0;         // unique within the context
  bool requires_grad = false;
  // Set when a recorded op made this tensor: the tape generation it belongs
  // to (a tensor of an older, cleared tape is treated as a constant).
  uint64_t tape_generation = 0;
  // Expires when the tensor is released, so the tape can tell which of its
  // records can still be reached without holding their outputs.
  std::shared_ptr<const void> tape_token;

 private:
  // create without the shape check, for callers that made it already.
  static DeviceTensor* assemble(DeviceContext& ctx, DType dtype, const Shape& shape,
                                std::shared_ptr<Storage> storage);
};

// Owns one reference to a tensor: internal code builds new objects with
// these so that a failure half-way releases everything it made.
class TensorRef {
 public:
  TensorRef() = default;
  explicit TensorRef(DeviceTensor* t) : t_(t) {}
  ~TensorRef() { reset(); }
  TensorRef(TensorRef&& other) noexcept : t_(other.t_) { other.t_ = nullptr; }
  TensorRef& operator=(TensorRef&& other) noexcept {
    if (this != &other) {
      reset();
      t_ = other.t_;
      other.t_ = nullptr;
    }
    return *this;
  }
  TensorRef(const TensorRef&) = delete;
  TensorRef& operator=(const TensorRef&) = delete;

  DeviceTensor* get() const { return t_; }
  DeviceTensor* operator->() const { return t_; }
  DeviceTensor& operator*() const { return *t_; }
  explicit operator bool() const { return t_ != nullptr; }
  // Hands the reference to the caller.
  DeviceTensor* take() {
    DeviceTensor* t = t_;
    t_ = nullptr;
    return t;
  }
  void reset() {
    if (t_) t_->release();
    t_ = nullptr;
  }

 private:
  DeviceTensor* t_ = nullptr;
};

// A new reference to t. Taking one this way, before any container insert,
// means an insert that throws (out of memory) releases it again.
inline TensorRef retained(DeviceTensor& t) {
  t.retain();
  return TensorRef(&t);
}

// A one-dimensional shape.
Shape vector_shape(int64_t count);

// ---- what the tensor section of the C API does, one function each ------------
// Each validates what the C shim cannot (byte counts, contexts, dtypes) and
// changes nothing when it throws.

// A new tensor of zeros.
DeviceTensor* make_zeros(DeviceContext& ctx, DType dtype, const Shape& shape);
// A new tensor holding `bytes` bytes of host memory (numel * element size).
DeviceTensor* tensor_from_host(DeviceContext& ctx, DType dtype, const Shape& shape,
                               const void* data, size_t bytes);
// A tensor on memory the caller owns (host memory for the CPU, device memory
// of the context's device otherwise), aligned to the element size; release
// is called with (release_arg, data) when its last user is gone, but not if
// this throws.
DeviceTensor* wrap_memory(DeviceContext& ctx, DType dtype, const Shape& shape, void* data,
                          size_t bytes, Storage::ReleaseFn release, void* release_arg);
// Host copies of a tensor's contents; `bytes` must be its nbytes.
void copy_tensor_to_host(const DeviceTensor& t, void* dst, size_t bytes);
void copy_tensor_from_host(DeviceTensor& t, const void* src, size_t bytes);
// dst = src converted to dst's type: same context, same element count.
void copy_converting(DeviceTensor& dst, const DeviceTensor& src);
// Every element = value converted to the tensor's type.
void fill_tensor(DeviceTensor& t, double value);
// Attaches (retains) `grad` as t's gradient, or detaches with nullptr:
// same context and element count, floating, and no cycle of gradients.
void set_grad(DeviceTensor& t, DeviceTensor* grad);

// A new F32 tensor of `shape` with every element `value`.
DeviceTensor* make_filled_f32(DeviceContext& ctx, const Shape& shape, float value);

}  // namespace ampx::impl
