// api_views.cpp -- tensor views and gradient hooks (section 13).
#include <cstdint>
#include <memory>
#include <string>

#include "api/guard.h"
#include "autograd/tape.h"

using namespace ampx::impl;

namespace {

// The program's hook and the closure it owns: destroyed with the listener
// that holds it, which is when release must run (replace, remove, or the
// autograd state going with the context's last program reference).
struct ApiHook {
  ampx_grad_ready_fn fn;
  void* user_data;
  void (*release)(void*);

  ApiHook(ampx_grad_ready_fn f, void* data, void (*r)(void*)) : fn(f), user_data(data), release(r) {}
  ~ApiHook() {
    if (release) release(user_data);
  }
  ApiHook(const ApiHook&) = delete;
  ApiHook& operator=(const ApiHook&) = delete;
};

std::string describe_param(const DeviceTensor& t) {
  return t.name.empty() ? cat("a parameter ", t.describe()) : cat("'", t.name, "' (", t.describe(), ")");
}

// The hook's failure carries the message it set while it ran, never an
// older one (call_status_callback).
void call_api_hook(const ApiHook& hook, DeviceTensor& leaf) {
  const std::string what =
      cat("the grad-ready hook (ampx_set_grad_ready_hook) for ", describe_param(leaf));
  call_status_callback(what.c_str(), [&] { return hook.fn(hook.user_data, to_handle(&leaf)); });
}

// Calls release(user_data) when the call ends unless the hook took it over,
// so the closure is released exactly once whatever happens.
struct PendingRelease {
  void* user_data;
  void (*release)(void*);
  ~PendingRelease() {
    if (release) release(user_data);
  }
};

// Keeps the program's context handle open while listeners run (see
// backward() in autograd/tape.cpp).
struct HandleHeld {
  DeviceContext& ctx;
  explicit HandleHeld(DeviceContext& c) : ctx(c) { ctx.retain_handle(); }
  ~HandleHeld() { ctx.release_handle(); }
  HandleHeld(const HandleHeld&) = delete;
  HandleHeld& operator=(const HandleHeld&) = delete;
};

}  // namespace

extern "C" {

ampx_status ampx_tensor_view(ampx_tensor base, size_t byte_offset, ampx_dtype dtype, int32_t ndim,
                             const int64_t* shape, ampx_tensor* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceTensor& b = tensor_arg(base, "base");
    const DType type = dtype_arg(dtype, "dtype");
    const Shape s = make_shape(ndim, shape, type);
    const size_t size = dtype_size(type);
    const size_t bytes = static_cast<size_t>(s.numel()) * size;
    const size_t available = b.nbytes();
    // Compared without adding, so an offset near SIZE_MAX cannot wrap.
    if (byte_offset > available || bytes > available - byte_offset)
      fail(AMPX_ERR_SHAPE, "a view of ", s.str(), " ", dtype_name(type), " (", bytes,
           " bytes) at byte_offset ", byte_offset, " does not fit inside 'base' ", b.describe(),
           " (", available, " bytes)");
    if (byte_offset % size != 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'byte_offset' is ", byte_offset,
           ", not a multiple of the ", size, "-byte size of ", dtype_name(type));
    // The base's own alignment only promises its element size (a wrapped
    // f16 buffer may start 2 bytes past a 4-byte boundary).
    if (bytes > 0 && (reinterpret_cast<uintptr_t>(b.data()) + byte_offset) % size != 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "a view at byte_offset ", byte_offset, " of 'base' (at ",
           b.data(), ") would start at an address not aligned to the ", size, "-byte size of ",
           dtype_name(type));
    *out = to_handle(DeviceTensor::alias(*b.ctx, b, type, s, byte_offset));
  });
}

ampx_status ampx_set_grad_ready_hook(ampx_context ctx, ampx_grad_ready_fn fn, void* user_data,
                                     void (*release)(void* user_data)) {
  return guard(__func__, [&] {
    // Inside the body, so a failure releases the closure before the error
    // is recorded (a release that calls ampx cannot overwrite it).
    PendingRelease pending{user_data, release};
    DeviceContext& c = context_arg(ctx, "ctx");
    AutogradState& state = autograd_state(c);
    if (state.notifying || state.in_backward)
      fail(AMPX_ERR_ORDER, "a backward pass or a grad-ready notification is running on this "
                           "context; change the hook after it returns");
    uint64_t installed = 0;
    if (fn) {
      auto hook = std::make_shared<ApiHook>(fn, user_data, release);
      pending.release = nullptr;  // the hook owns the closure now
      installed =
          add_grad_ready_listener(c, [hook](DeviceTensor& leaf) { call_api_hook(*hook, leaf); });
    }
    const uint64_t old = state.api_hook_listener;
    state.api_hook_listener = installed;
    if (old) remove_grad_ready_listener(c, old);
  });
}

ampx_status ampx_grad_ready(ampx_tensor param) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(param, "param");
    if (!t.grad)
      fail(AMPX_ERR_INVALID_ARGUMENT, "'param' (",
           t.name.empty() ? t.describe() : cat("'", t.name, "', ", t.describe()),
           ") has no gradient; attach one with ampx_tensor_set_grad first");
    DeviceContext& c = *t.ctx;
    // Listeners go with the program's last context reference: none is left.
    if (!c.is_open()) return;
    AutogradState& state = autograd_state(c);
    if (state.notifying)
      fail(AMPX_ERR_ORDER, "called from a grad-ready hook; a hook must not report gradients");
    if (state.in_backward)
      fail(AMPX_ERR_ORDER, "ampx_backward is running on this context and reports its gradients "
                           "itself");
    const HandleHeld held(c);
    notify_grad_ready(c, t);
  });
}

}  // extern "C"
