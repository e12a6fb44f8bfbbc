// api_tensor.cpp -- tensor creation, copies, conversion, queries.
#include <cstring>

#include "api/guard.h"

using namespace ampx::impl;

extern "C" {

ampx_status ampx_tensor_empty(ampx_context ctx, ampx_dtype dtype, int32_t ndim,
                              const int64_t* shape, ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceContext& c = context_arg(ctx, "ctx");
    const DType type = dtype_arg(dtype, "dtype");
    *out = to_handle(DeviceTensor::empty(c, type, make_shape(ndim, shape, type)));
  });
}

ampx_status ampx_tensor_zeros(ampx_context ctx, ampx_dtype dtype, int32_t ndim,
                              const int64_t* shape, ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceContext& c = context_arg(ctx, "ctx");
    const DType type = dtype_arg(dtype, "dtype");
    *out = to_handle(make_zeros(c, type, make_shape(ndim, shape, type)));
  });
}

ampx_status ampx_tensor_from_host(ampx_context ctx, ampx_dtype dtype, int32_t ndim,
                                  const int64_t* shape, const void* data, size_t bytes,
                                  ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceContext& c = context_arg(ctx, "ctx");
    const DType type = dtype_arg(dtype, "dtype");
    *out = to_handle(tensor_from_host(c, type, make_shape(ndim, shape, type), data, bytes));
  });
}

ampx_status ampx_tensor_wrap(ampx_context ctx, ampx_dtype dtype, int32_t ndim,
                             const int64_t* shape, void* data, size_t bytes, ampx_deleter deleter,
                             void* deleter_user_data, ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceContext& c = context_arg(ctx, "ctx");
    const DType type = dtype_arg(dtype, "dtype");
    // ampx_deleter has the (user_data, data) shape Storage expects.
    *out = to_handle(wrap_memory(c, type, make_shape(ndim, shape, type), data, bytes, deleter,
                                 deleter_user_data));
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
    copy_tensor_to_host(tensor_arg(tensor, "tensor"), dst, bytes);
  });
}

ampx_status ampx_tensor_copy_from_host(ampx_tensor tensor, const void* src, size_t bytes) {
  return guard(__func__, [&] {
    copy_tensor_from_host(tensor_arg(tensor, "tensor"), src, bytes);
  });
}

ampx_status ampx_tensor_copy(ampx_tensor dst, ampx_tensor src) {
  return guard(__func__, [&] {
    copy_converting(tensor_arg(dst, "dst"), tensor_arg(src, "src"));
  });
}

ampx_status ampx_tensor_cast(ampx_tensor src, ampx_dtype dtype, ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceTensor& s = tensor_arg(src, "src");
    TensorRef t(DeviceTensor::empty(*s.ctx, dtype_arg(dtype, "dtype"), s.shape));
    copy_converting(*t, s);
    *out = to_handle(t.take());
  });
}

ampx_status ampx_tensor_fill(ampx_tensor tensor, double value) {
  return guard(__func__, [&] {
    fill_tensor(tensor_arg(tensor, "tensor"), value);
  });
}

ampx_status ampx_tensor_set_name(ampx_tensor tensor, const char* name) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    t.name = name ? name : "";
  });
}

ampx_status ampx_tensor_name(ampx_tensor tensor, const char** name) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(name, "name");
    *name = t.name.c_str();
  });
}

ampx_status ampx_tensor_dtype(ampx_tensor tensor, ampx_dtype* dtype) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(dtype, "dtype");
    *dtype = static_cast<ampx_dtype>(t.dtype);
  });
}

ampx_status ampx_tensor_ndim(ampx_tensor tensor, int32_t* ndim) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(ndim, "ndim");
    *ndim = t.shape.ndim;
  });
}

ampx_status ampx_tensor_shape(ampx_tensor tensor, int64_t* dims, int32_t capacity) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
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
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(numel, "numel");
    *numel = t.numel();
  });
}

ampx_status ampx_tensor_nbytes(ampx_tensor tensor, size_t* nbytes) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(nbytes, "nbytes");
    *nbytes = t.nbytes();
  });
}

ampx_status ampx_tensor_data(ampx_tensor tensor, void** data) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(data, "data");
    *data = t.data();
  });
}

ampx_status ampx_tensor_context(ampx_tensor tensor, ampx_context* ctx) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(ctx, "ctx");
    *ctx = to_handle(t.ctx);
  });
}

}  // extern "C"

extern "C" {

ampx_status ampx_tensor_set_grad(ampx_tensor tensor, ampx_tensor grad) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    set_grad(t, grad ? &tensor_arg(grad, "grad") : nullptr);
  });
}

ampx_status ampx_tensor_grad(ampx_tensor tensor, ampx_tensor* grad) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(grad, "grad");
    *grad = t.grad ? to_handle(t.grad) : nullptr;
  });
}

}  // extern "C"
