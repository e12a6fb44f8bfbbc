// api_tensor.cpp -- tensor creation, copies, conversion, queries.
#include <cstring>

#include "api/guard.h"
#include "core/convert_bulk.h"

using namespace ampx;

namespace {

void check_byte_count(const Tensor& t, size_t bytes, const char* arg) {
  if (bytes != t.nbytes())
    fail(AMPX_ERR_SHAPE, "argument '", arg, "' is ", bytes, " bytes but tensor ", t.describe(),
         " holds ", t.nbytes(), " bytes");
}

// Copies src into dst with conversion; both already validated.
void copy_converting(Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype == src.dtype)
    dst.ctx->backend().copy(dst.data(), src.data(), dst.nbytes());
  else
    dst.ctx->backend().convert(dst.data(), dst.dtype, src.data(), src.dtype, dst.numel());
}

ampx_tensor new_tensor(ampx_context ctx, ampx_dtype dtype, int32_t ndim, const int64_t* shape,
                       bool zero) {
  Context& c = context_arg(ctx, "ctx");
  const DType type = dtype_arg(dtype, "dtype");
  const Shape s = make_shape(ndim, shape, type);
  Tensor* t = Tensor::empty(c, type, s);
  if (zero && t->numel() > 0) {
    try {
      c.backend().fill(t->data(), dtype_size(type), 0, t->numel());
    } catch (...) {
      t->release();
      throw;
    }
  }
  return to_handle(t);
}

}  // namespace

extern "C" {

ampx_status ampx_tensor_empty(ampx_context ctx, ampx_dtype dtype, int32_t ndim,
                              const int64_t* shape, ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    *out = new_tensor(ctx, dtype, ndim, shape, false);
  });
}

ampx_status ampx_tensor_zeros(ampx_context ctx, ampx_dtype dtype, int32_t ndim,
                              const int64_t* shape, ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    *out = new_tensor(ctx, dtype, ndim, shape, true);
  });
}

ampx_status ampx_tensor_from_host(ampx_context ctx, ampx_dtype dtype, int32_t ndim,
                                  const int64_t* shape, const void* data, size_t bytes,
                                  ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    Context& c = context_arg(ctx, "ctx");
    const DType type = dtype_arg(dtype, "dtype");
    const Shape s = make_shape(ndim, shape, type);
    const size_t expected = static_cast<size_t>(s.numel()) * dtype_size(type);
    if (bytes != expected)
      fail(AMPX_ERR_SHAPE, "argument 'bytes' is ", bytes, " but shape ", s.str(), " of ",
           dtype_name(type), " needs ", expected, " bytes");
    if (expected > 0) require_pointer(data, "data");
    Tensor* t = Tensor::empty(c, type, s);
    try {
      c.backend().copy_from_host(t->data(), data, expected);
    } catch (...) {
      t->release();
      throw;
    }
    *out = to_handle(t);
  });
}

ampx_status ampx_tensor_wrap(ampx_context ctx, ampx_dtype dtype, int32_t ndim,
                             const int64_t* shape, void* data, size_t bytes, ampx_deleter deleter,
                             void* deleter_user_data, ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    Context& c = context_arg(ctx, "ctx");
    const DType type = dtype_arg(dtype, "dtype");
    const Shape s = make_shape(ndim, shape, type);
    const size_t expected = static_cast<size_t>(s.numel()) * dtype_size(type);
    if (bytes != expected)
      fail(AMPX_ERR_SHAPE, "argument 'bytes' is ", bytes, " but shape ", s.str(), " of ",
           dtype_name(type), " needs ", expected, " bytes");
    if (expected > 0) {
      require_pointer(data, "data");
      if (reinterpret_cast<uintptr_t>(data) % dtype_size(type) != 0)
        fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'data' (", data, ") is not aligned to the ",
             dtype_size(type), "-byte size of ", dtype_name(type));
      c.backend().check_device_pointer(data, "argument 'data'");
    }
    auto storage = Storage::external(c, data, expected);
    Tensor* t = Tensor::create(c, type, s, storage);
    // ampx_deleter has the (user_data, data) shape Storage expects.
    storage->set_release(deleter, deleter_user_data);
    *out = to_handle(t);
  });
}

ampx_status ampx_tensor_retain(ampx_tensor tensor) {
  return guard(__func__, [&] { tensor_arg(tensor, "tensor").retain(); });
}

void ampx_tensor_release(ampx_tensor tensor) {
  if (!tensor) return;
  guard(__func__, [&] { tensor_arg(tensor, "tensor").release(); });
}

ampx_status ampx_tensor_to_host(ampx_tensor tensor, void* dst, size_t bytes) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    check_byte_count(t, bytes, "bytes");
    if (bytes == 0) return;
    require_pointer(dst, "dst");
    t.ctx->read_to_host(dst, t.data(), bytes);
  });
}

ampx_status ampx_tensor_copy_from_host(ampx_tensor tensor, const void* src, size_t bytes) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    check_byte_count(t, bytes, "bytes");
    if (bytes == 0) return;
    require_pointer(src, "src");
    t.ctx->backend().copy_from_host(t.data(), src, bytes);
    t.storage->note_write();
  });
}

ampx_status ampx_tensor_copy(ampx_tensor dst, ampx_tensor src) {
  return guard(__func__, [&] {
    Tensor& d = tensor_arg(dst, "dst");
    Tensor& s = tensor_arg(src, "src");
    if (d.ctx != s.ctx)
      fail(AMPX_ERR_DEVICE, "'dst' and 'src' belong to different contexts");
    if (d.numel() != s.numel())
      fail(AMPX_ERR_SHAPE, "'dst' is ", d.describe(), " (", d.numel(), " elements) but 'src' is ",
           s.describe(), " (", s.numel(), " elements)");
    copy_converting(d, s);
    d.storage->note_write();
  });
}

ampx_status ampx_tensor_cast(ampx_tensor src, ampx_dtype dtype, ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    Tensor& s = tensor_arg(src, "src");
    const DType type = dtype_arg(dtype, "dtype");
    Tensor* t = Tensor::empty(*s.ctx, type, s.shape);
    try {
      copy_converting(*t, s);
    } catch (...) {
      t->release();
      throw;
    }
    *out = to_handle(t);
  });
}

ampx_status ampx_tensor_fill(ampx_tensor tensor, double value) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    if (t.numel() == 0) return;
    t.ctx->backend().fill(t.data(), dtype_size(t.dtype), element_bits_from_double(t.dtype, value),
                          t.numel());
    t.storage->note_write();
  });
}

ampx_status ampx_tensor_set_name(ampx_tensor tensor, const char* name) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    t.name = name ? name : "";
  });
}

ampx_status ampx_tensor_name(ampx_tensor tensor, const char** name) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    require_pointer(name, "name");
    *name = t.name.c_str();
  });
}

ampx_status ampx_tensor_dtype(ampx_tensor tensor, ampx_dtype* dtype) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    require_pointer(dtype, "dtype");
    *dtype = static_cast<ampx_dtype>(t.dtype);
  });
}

ampx_status ampx_tensor_ndim(ampx_tensor tensor, int32_t* ndim) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    require_pointer(ndim, "ndim");
    *ndim = t.shape.ndim;
  });
}

ampx_status ampx_tensor_shape(ampx_tensor tensor, int64_t* dims, int32_t capacity) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    if (t.shape.ndim == 0) return;
    require_pointer(dims, "dims");
    if (capacity < t.shape.ndim)
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'capacity' is ", capacity, " but the tensor has ",
           t.shape.ndim, " dimensions");
    std::memcpy(dims, t.shape.dims, sizeof(int64_t) * static_cast<size_t>(t.shape.ndim));
  });
}

ampx_status ampx_tensor_numel(ampx_tensor tensor, int64_t* numel) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    require_pointer(numel, "numel");
    *numel = t.numel();
  });
}

ampx_status ampx_tensor_nbytes(ampx_tensor tensor, size_t* nbytes) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    require_pointer(nbytes, "nbytes");
    *nbytes = t.nbytes();
  });
}

ampx_status ampx_tensor_data(ampx_tensor tensor, void** data) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    require_pointer(data, "data");
    *data = t.data();
  });
}

ampx_status ampx_tensor_context(ampx_tensor tensor, ampx_context* ctx) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    require_pointer(ctx, "ctx");
    *ctx = to_handle(t.ctx);
  });
}

}  // extern "C"

extern "C" {

ampx_status ampx_tensor_set_grad(ampx_tensor tensor, ampx_tensor grad) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    Tensor* g = grad ? &tensor_arg(grad, "grad") : nullptr;
    if (g) {
      if (g == &t) fail(AMPX_ERR_INVALID_ARGUMENT, "a tensor cannot be its own gradient");
      // Each tensor retains its gradient: a cycle would keep all of them
      // (and their context) alive forever.
      for (const Tensor* link = g->grad; link; link = link->grad)
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
    Tensor* old = t.grad;
    t.grad = g;
    if (old) old->release();
  });
}

ampx_status ampx_tensor_grad(ampx_tensor tensor, ampx_tensor* grad) {
  return guard(__func__, [&] {
    Tensor& t = tensor_arg(tensor, "tensor");
    require_pointer(grad, "grad");
    *grad = t.grad ? to_handle(t.grad) : nullptr;
  });
}

}  // extern "C"
