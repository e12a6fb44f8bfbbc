#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/convert_bulk.h"
#include "core/error.h"

namespace ampx::impl {

bool Shape::operator==(const Shape& other) const {
  if (ndim != other.ndim) return false;
  for (int32_t i = 0; i < ndim; ++i)
    if (dims[i] != other.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream out;
  out << '[';
  for (int32_t i = 0; i < ndim; ++i) out << (i ? ", " : "") << dims[i];
  out << ']';
  return out.str();
}

int64_t Shape::extent_product(int32_t begin, int32_t end) const {
  uint64_t product = 1;
  bool overflow = false;
  for (int32_t i = begin; i < end; ++i) {
    if (dims[i] == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(product, static_cast<uint64_t>(dims[i]), &product);
  }
  return overflow || product > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
             ? 0
             : static_cast<int64_t>(product);
}

Shape make_shape(int32_t ndim, const int64_t* dims, DType dtype, const char* what) {
  // Spelled out only when failing: this runs for every tensor made.
  const char* subject = what ? what : "";
  const char* space = what ? " " : "";
  if (ndim < 0 || ndim > kMaxDims)
    fail(AMPX_ERR_SHAPE, subject, space, "ndim is ", ndim, "; it must be in [0, ", kMaxDims, "]");
  if (ndim > 0 && dims == nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, "shape is NULL but ndim is ", ndim);
  Shape shape;
  shape.ndim = ndim;
  bool empty = false;
  for (int32_t i = 0; i < ndim; ++i) {
    if (dims[i] < 0)
      fail(AMPX_ERR_SHAPE, subject, space, "shape[", i, "] is ", dims[i], "; extents must be >= 0");
    shape.dims[i] = dims[i];
    empty = empty || dims[i] == 0;
  }
  if (empty) return shape;
  // numel * element size representable in both int64 and size_t.
  const uint64_t limit =
      std::min<uint64_t>(std::numeric_limits<int64_t>::max(), std::numeric_limits<size_t>::max()) /
      dtype_size(dtype);
  uint64_t numel = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (numel > limit / static_cast<uint64_t>(dims[i]))
      fail(AMPX_ERR_SHAPE, subject, space, "shape ", shape.str(), " of ", dtype_name(dtype),
           " is too large: its byte size overflows");
    numel *= static_cast<uint64_t>(dims[i]);
  }
  return shape;
}

std::shared_ptr<Storage> Storage::allocate(DeviceContext& ctx, size_t bytes) {
  std::shared_ptr<Storage> storage(new Storage());
  if (bytes > 0) {
    storage->data_ = ctx.allocate(bytes);
    storage->owner_ = &ctx;
    storage->bytes_ = bytes;
  }
  return storage;
}

std::shared_ptr<Storage> Storage::external(DeviceContext& ctx, void* data, size_t bytes) {
  std::shared_ptr<Storage> storage(new Storage());
  storage->user_ = &ctx;
  storage->data_ = data;
  storage->bytes_ = bytes;
  return storage;
}

Storage::~Storage() {
  if (owner_) {
    owner_->deallocate(data_, bytes_);  // stream-ordered where the device has streams
    return;
  }
  if (!release_) return;
  // The owner may reuse the memory as soon as its deleter runs, so work
  // still queued on the device must finish first.
  if (!user_->backend().synchronous()) {
    try {
      user_->backend().synchronize();
    } catch (...) {
      // A device failure is reported by the next call that synchronizes;
      // the memory is handed back regardless.
    }
  }
  release_(release_arg_, data_);
}

DeviceTensor* DeviceTensor::create(DeviceContext& ctx, DType dtype, const Shape& shape,
                                   std::shared_ptr<Storage> storage) {
  make_shape(shape, dtype, "a tensor's");
  return assemble(ctx, dtype, shape, std::move(storage));
}

DeviceTensor* DeviceTensor::assemble(DeviceContext& ctx, DType dtype, const Shape& shape,
                                     std::shared_ptr<Storage> storage) {
  auto* tensor = new DeviceTensor();
  tensor->ctx = &ctx;
  tensor->dtype = dtype;
  tensor->shape = shape;
  tensor->storage = std::move(storage);
  tensor->id = ctx.next_tensor_id();
  ctx.retain();
  return tensor;
}

DeviceTensor* DeviceTensor::empty(DeviceContext& ctx, DType dtype, const Shape& shape) {
  make_shape(shape, dtype, "a tensor's");
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return assemble(ctx, dtype, shape, Storage::allocate(ctx, bytes));
}

DeviceTensor* DeviceTensor::alias(DeviceContext& ctx, const DeviceTensor& base, DType dtype,
                                  const Shape& shape, size_t extra_offset) {
  DeviceTensor* tensor = create(ctx, dtype, shape, base.storage);
  tensor->byte_offset = base.byte_offset + extra_offset;
  return tensor;
}

void DeviceTensor::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  DeviceContext* owner = ctx;
  magic = kDeadMagic;
  storage.reset();
  name.clear();
  name.shrink_to_fit();
  tape_token.reset();
  DeviceTensor* old_grad = grad;
  grad = nullptr;
  if (old_grad) old_grad->release();
  owner->quarantine(this);
  owner->release();
}

std::string DeviceTensor::describe() const { return cat(dtype_name(dtype), shape.str()); }

Shape vector_shape(int64_t count) {
  Shape shape;
  shape.ndim = 1;
  shape.dims[0] = count;
  return shape;
}

namespace {

void check_byte_count(const DeviceTensor& t, size_t bytes, const char* arg) {
  if (bytes != t.nbytes())
    fail(AMPX_ERR_SHAPE, "argument '", arg, "' is ", bytes, " bytes but tensor ", t.describe(),
         " holds ", t.nbytes(), " bytes");
}

size_t byte_size_for(DType dtype, const Shape& shape, size_t bytes) {
  const size_t expected = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (bytes != expected)
    fail(AMPX_ERR_SHAPE, "argument 'bytes' is ", bytes, " but shape ", shape.str(), " of ",
         dtype_name(dtype), " needs ", expected, " bytes");
  return expected;
}

}  // namespace

DeviceTensor* make_zeros(DeviceContext& ctx, DType dtype, const Shape& shape) {
  TensorRef t(DeviceTensor::empty(ctx, dtype, shape));
  if (t->numel() > 0) ctx.backend().fill(t->data(), dtype_size(dtype), 0, t->numel());
  return t.take();
}

DeviceTensor* tensor_from_host(DeviceContext& ctx, DType dtype, const Shape& shape,
                               const void* data, size_t bytes) {
  const size_t expected = byte_size_for(dtype, shape, bytes);
  if (expected > 0 && data == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'data' is NULL");
  TensorRef t(DeviceTensor::empty(ctx, dtype, shape));
  ctx.backend().copy_from_host(t->data(), data, expected);
  return t.take();
}

DeviceTensor* wrap_memory(DeviceContext& ctx, DType dtype, const Shape& shape, void* data,
                          size_t bytes, Storage::ReleaseFn release, void* release_arg) {
  const size_t expected = byte_size_for(dtype, shape, bytes);
  if (expected > 0) {
    if (data == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'data' is NULL");
    if (reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) != 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'data' (", data, ") is not aligned to the ",
           dtype_size(dtype), "-byte size of ", dtype_name(dtype));
    ctx.backend().check_device_pointer(data, "argument 'data'");
  }
  auto storage = Storage::external(ctx, data, expected);
  DeviceTensor* t = DeviceTensor::create(ctx, dtype, shape, storage);
  storage->set_release(release, release_arg);
  return t;
}

void copy_tensor_to_host(const DeviceTensor& t, void* dst, size_t bytes) {
  check_byte_count(t, bytes, "bytes");
  if (bytes == 0) return;
  if (dst == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'dst' is NULL");
  t.ctx->read_to_host(dst, t.data(), bytes);
}

void copy_tensor_from_host(DeviceTensor& t, const void* src, size_t bytes) {
  check_byte_count(t, bytes, "bytes");
  if (bytes == 0) return;
  if (src == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'src' is NULL");
  t.ctx->backend().copy_from_host(t.data(), src, bytes);
  t.storage->note_write();
}

void copy_converting(DeviceTensor& dst, const DeviceTensor& src) {
  if (dst.ctx != src.ctx) fail(AMPX_ERR_DEVICE, "'dst' and 'src' belong to different contexts");
  if (dst.numel() != src.numel())
    fail(AMPX_ERR_SHAPE, "'dst' is ", dst.describe(), " (", dst.numel(), " elements) but 'src' is ",
         src.describe(), " (", src.numel(), " elements)");
  if (dst.numel() == 0) return;
  if (dst.dtype == src.dtype)
    dst.ctx->backend().copy(dst.data(), src.data(), dst.nbytes());
  else
    dst.ctx->backend().convert(dst.data(), dst.dtype, src.data(), src.dtype, dst.numel());
  dst.storage->note_write();
}

void fill_tensor(DeviceTensor& t, double value) {
  if (t.numel() == 0) return;
  t.ctx->backend().fill(t.data(), dtype_size(t.dtype), element_bits_from_double(t.dtype, value),
                        t.numel());
  t.storage->note_write();
}

void set_grad(DeviceTensor& t, DeviceTensor* g) {
  if (g) {
    if (g == &t) fail(AMPX_ERR_INVALID_ARGUMENT, "a tensor cannot be its own gradient");
    // Each tensor retains its gradient: a cycle would keep all of them
    // (and their context) alive forever.
    for (const DeviceTensor* link = g->grad; link; link = link->grad)
      if (link == &t)
        fail(AMPX_ERR_INVALID_ARGUMENT,
             "'tensor' is already the gradient of 'grad' (directly or through other gradients); "
             "gradients cannot form a cycle");
    if (g->ctx != t.ctx)
      fail(AMPX_ERR_DEVICE, "'grad' belongs to a different context than 'tensor'");
    if (g->numel() != t.numel())
      fail(AMPX_ERR_SHAPE, "'grad' is ", g->describe(), " but 'tensor' is ", t.describe(),
           "; a gradient has the tensor's number of elements");
    if (!is_floating(g->dtype))
      fail(AMPX_ERR_DTYPE, "'grad' is ", g->describe(), "; gradients are f32, f16 or bf16");
    g->retain();
  }
  DeviceTensor* old = t.grad;
  t.grad = g;
  if (old) old->release();
}

DeviceTensor* make_filled_f32(DeviceContext& ctx, const Shape& shape, float value) {
  TensorRef t(DeviceTensor::empty(ctx, DType::F32, shape));
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if (t->numel() > 0) ctx.backend().fill(t->data(), 4, bits, t->numel());
  return t.take();
}

void fail_not_floating(DType t) {
  fail(AMPX_ERR_INTERNAL, "a floating-point primitive reached dtype ", dtype_name(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F8E4M3: return "f8e4m3";
    case DType::F8E5M2: return "f8e5m2";
  }
  return "invalid";
}

}  // namespace ampx::impl
