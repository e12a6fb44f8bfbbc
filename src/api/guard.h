// guard.h -- what every C entry point does around its body.
//
// guard() runs the body, catches everything, and turns it into a status and
// the thread's last-error message ("<function>: <what went wrong>"). Nothing
// escapes into C. The argument helpers validate handles and pointers with
// messages that name the argument.
#pragma once

#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "ampx/ampx.h"
#include "core/context.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ampx::impl {

// The longest message ampx_last_error returns, with its terminating NUL.
constexpr size_t kLastErrorBytes = 4096;

// Records "<function>: <text><more>" (function and more may be NULL) as the
// thread's last error, cut to kLastErrorBytes. Allocates nothing.
void set_last_error(ampx_status status, const char* function, const char* text,
                    const char* more = nullptr) noexcept;

template <class Body>
ampx_status guard(const char* function, Body&& body) noexcept {
  try {
    body();
    return AMPX_OK;
  } catch (const StatusError& e) {
    set_last_error(e.status(), function, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error(AMPX_ERR_OUT_OF_MEMORY, function, "out of host memory");
    return AMPX_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(AMPX_ERR_INTERNAL, function, "internal error: ", e.what());
    return AMPX_ERR_INTERNAL;
  } catch (...) {
    set_last_error(AMPX_ERR_INTERNAL, function, "internal error (unknown exception)");
    return AMPX_ERR_INTERNAL;
  }
}

template <class T>
T* require_pointer(T* ptr, const char* arg) {
  if (!ptr) fail(AMPX_ERR_INVALID_ARGUMENT, "argument '", arg, "' is NULL");
  return ptr;
}

inline DeviceContext& context_arg(ampx_context handle, const char* arg) {
  auto* ctx = reinterpret_cast<DeviceContext*>(require_pointer(handle, arg));
  if (ctx->is_live() && ctx->is_open()) return *ctx;
  if (ctx->is_live())
    fail(AMPX_ERR_STALE_HANDLE, "argument '", arg,
         "' is a context the program already released with ampx_context_release");
  if (ctx->is_dead()) fail(AMPX_ERR_STALE_HANDLE, "argument '", arg, "' is a context that was destroyed");
  fail(AMPX_ERR_STALE_HANDLE, "argument '", arg, "' is not an ampx_context");
}

// Checks a handle of an Object type T (with kLiveMagic/kDeadMagic).
template <class T, class Handle>
T& object_arg(Handle handle, const char* arg, const char* type_name) {
  auto* object = reinterpret_cast<Object*>(require_pointer(handle, arg));
  if (object->magic == T::kLiveMagic) return *static_cast<T*>(object);
  if (object->magic == T::kDeadMagic)
    fail(AMPX_ERR_STALE_HANDLE, "argument '", arg, "' is ", type_name,
         " that was already released");
  fail(AMPX_ERR_STALE_HANDLE, "argument '", arg, "' is not ", type_name);
}

inline DeviceTensor& tensor_arg(ampx_tensor handle, const char* arg) {
  return object_arg<DeviceTensor>(handle, arg, "an ampx_tensor");
}

// The tensors of a handle array `arg`[0..count-1] (NULL allowed when count
// is 0), each checked and named "<arg>[i]" in an error.
inline std::vector<DeviceTensor*> tensor_list_arg(const ampx_tensor* handles, size_t count,
                                                  const char* arg) {
  if (count > 0) require_pointer(handles, arg);
  std::vector<DeviceTensor*> list;
  list.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const std::string name = cat(arg, "[", i, "]");
    list.push_back(&tensor_arg(handles[i], name.c_str()));
  }
  return list;
}

inline DType dtype_arg(ampx_dtype value, const char* arg) {
  if (!is_valid_dtype(static_cast<int32_t>(value)))
    fail(AMPX_ERR_DTYPE, "argument '", arg, "' is ", static_cast<int>(value),
         ", which is not an ampx_dtype (AMPX_F32=1 .. AMPX_F8E5M2=7)");
  return static_cast<DType>(value);
}

inline ampx_tensor to_handle(DeviceTensor* t) { return reinterpret_cast<ampx_tensor>(t); }
inline ampx_context to_handle(DeviceContext* c) { return reinterpret_cast<ampx_context>(c); }

// Reads a caller's options struct: fields beyond its struct_size keep the
// defaults, so older callers keep working as fields are appended.
template <class Options>
Options read_options(const Options* given, Options defaults, const char* arg) {
  if (!given) return defaults;
  if (given->struct_size < sizeof(size_t))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument '", arg, "' has struct_size ", given->struct_size,
         "; set it to sizeof the struct (or use the INIT macro)");
  const size_t known = given->struct_size < sizeof(Options) ? given->struct_size : sizeof(Options);
  std::memcpy(static_cast<void*>(&defaults), given, known);
  defaults.struct_size = sizeof(Options);
  return defaults;
}

// Copies the first `struct_size` bytes of `full` into `dst`, keeping the
// caller's struct_size (for output structs that may grow).
template <class Struct>
void write_struct(Struct* dst, Struct full, const char* arg) {
  require_pointer(dst, arg);
  const size_t given = dst->struct_size;
  if (given < sizeof(size_t))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument '", arg, "' has struct_size ", given,
         "; set it to sizeof the struct (or use its INIT macro)");
  full.struct_size = given;
  std::memcpy(static_cast<void*>(dst), &full, given < sizeof full ? given : sizeof full);
}

}  // namespace ampx::impl
