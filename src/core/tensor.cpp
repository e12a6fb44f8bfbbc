#include "core/tensor.h"

#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace ampx {

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

Shape make_shape(int32_t ndim, const int64_t* dims, DType dtype) {
  if (ndim < 0 || ndim > kMaxDims)
    fail(AMPX_ERR_SHAPE, "ndim is ", ndim, "; it must be in [0, ", kMaxDims, "]");
  if (ndim > 0 && dims == nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, "shape is NULL but ndim is ", ndim);
  Shape shape;
  shape.ndim = ndim;
  // Keep numel * element size representable in both int64 and size_t.
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dtype_size(dtype);
  uint64_t numel = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (dims[i] < 0) fail(AMPX_ERR_SHAPE, "shape[", i, "] is ", dims[i], "; extents must be >= 0");
    shape.dims[i] = dims[i];
  }
  for (int32_t i = 0; i < ndim; ++i) {
    if (dims[i] == 0) return shape;
    if (numel > limit / static_cast<uint64_t>(dims[i]))
      fail(AMPX_ERR_SHAPE, "shape ", shape.str(), " of ", dtype_name(dtype),
           " is too large: its byte size overflows");
    numel *= static_cast<uint64_t>(dims[i]);
  }
  return shape;
}

std::shared_ptr<Storage> Storage::allocate(Context& ctx, size_t bytes) {
  std::shared_ptr<Storage> storage(new Storage());
  if (bytes > 0) {
    storage->data_ = ctx.allocate(bytes);
    storage->owner_ = &ctx;
    storage->bytes_ = bytes;
  }
  return storage;
}

std::shared_ptr<Storage> Storage::external(Context& ctx, void* data, size_t bytes) {
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

Tensor* Tensor::create(Context& ctx, DType dtype, const Shape& shape,
                       std::shared_ptr<Storage> storage) {
  auto* tensor = new Tensor();
  tensor->ctx = &ctx;
  tensor->dtype = dtype;
  tensor->shape = shape;
  tensor->storage = std::move(storage);
  tensor->id = ctx.next_tensor_id();
  ctx.retain();
  return tensor;
}

Tensor* Tensor::empty(Context& ctx, DType dtype, const Shape& shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return create(ctx, dtype, shape, Storage::allocate(ctx, bytes));
}

Tensor* Tensor::alias(Context& ctx, const Tensor& base, DType dtype, const Shape& shape,
                      size_t extra_offset) {
  Tensor* tensor = create(ctx, dtype, shape, base.storage);
  tensor->byte_offset = base.byte_offset + extra_offset;
  return tensor;
}

void Tensor::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Context* owner = ctx;
  magic = kDeadMagic;
  storage.reset();
  name.clear();
  name.shrink_to_fit();
  tape_token.reset();
  Tensor* old_grad = grad;
  grad = nullptr;
  if (old_grad) old_grad->release();
  owner->quarantine(this);
  owner->release();
}


std::string Tensor::describe() const { return cat(dtype_name(dtype), shape.str()); }

Shape vector_shape(int64_t count) {
  Shape shape;
  shape.ndim = 1;
  shape.dims[0] = count;
  return shape;
}

Tensor* make_filled_f32(Context& ctx, const Shape& shape, float value) {
  TensorRef t(Tensor::empty(ctx, DType::F32, shape));
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
  }
  return "invalid";
}

}  // namespace ampx
