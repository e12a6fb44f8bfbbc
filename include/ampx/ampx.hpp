// ampx.hpp -- a header-only C++17 layer over the C API in ampx.h.
//
// It adds no ABI: every call goes through ampx.h. Handles become move-only
// RAII owners; a failing call throws ampx::Error carrying the status and the
// library's message. The thread rules of ampx.h apply unchanged.
#ifndef AMPX_HPP
#define AMPX_HPP

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ampx/ampx.h"

namespace ampx {

// A failed ampx call: its status and ampx_last_error() at the time.
class Error : public std::runtime_error {
 public:
  Error(ampx_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  ampx_status status() const noexcept { return status_; }

 private:
  ampx_status status_;
};

// Throws ampx::Error when `status` is not AMPX_OK.
inline void check(ampx_status status) {
  if (status != AMPX_OK) throw Error(status, ampx_last_error());
}

namespace detail {

// A move-only owner of one reference to a handle.
template <class Handle, void (*Release)(Handle)>
class Owner {
 public:
  Owner() = default;
  explicit Owner(Handle handle) noexcept : handle_(handle) {}
  ~Owner() { Release(handle_); }
  Owner(Owner&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Owner& operator=(Owner&& other) noexcept {
    if (this != &other) {
      Release(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;

  Handle get() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != nullptr; }
  // Gives up ownership without releasing.
  Handle detach() noexcept { return std::exchange(handle_, nullptr); }

 private:
  Handle handle_ = nullptr;
};

}  // namespace detail

class Context : public detail::Owner<ampx_context, ampx_context_release> {
 public:
  // A CPU context, or the device the options name.
  explicit Context(const ampx_context_options* options = nullptr) {
    ampx_context handle = nullptr;
    check(ampx_context_create(options, &handle));
    *this = Context(handle, Adopt{});
  }
  static Context cuda(int32_t device_index = 0) {
    ampx_context_options options = ampx_context_options_default();
    options.device_type = AMPX_DEVICE_CUDA;
    options.device_index = device_index;
    return Context(&options);
  }
  void synchronize() const { check(ampx_context_synchronize(get())); }
  ampx_memory_stats memory_stats() const {
    ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
    check(ampx_memory_stats_get(get(), &stats));
    return stats;
  }

 private:
  struct Adopt {};
  Context(ampx_context handle, Adopt) : Owner(handle) {}
};

class Tensor : public detail::Owner<ampx_tensor, ampx_tensor_release> {
 public:
  Tensor() = default;
  // Takes over one reference (as returned by the C API).
  explicit Tensor(ampx_tensor handle) noexcept : Owner(handle) {}

  static Tensor zeros(const Context& ctx, ampx_dtype dtype, std::vector<int64_t> shape) {
    ampx_tensor t = nullptr;
    check(ampx_tensor_zeros(ctx.get(), dtype, static_cast<int32_t>(shape.size()), shape.data(), &t));
    return Tensor(t);
  }
  static Tensor from_host(const Context& ctx, const std::vector<float>& values,
                          std::vector<int64_t> shape) {
    ampx_tensor t = nullptr;
    check(ampx_tensor_from_host(ctx.get(), AMPX_F32, static_cast<int32_t>(shape.size()),
                                shape.data(), values.data(), values.size() * sizeof(float), &t));
    return Tensor(t);
  }

  Tensor cast(ampx_dtype dtype) const {
    ampx_tensor t = nullptr;
    check(ampx_tensor_cast(get(), dtype, &t));
    return Tensor(t);
  }
  // The contents converted to float (on the host; synchronizes).
  std::vector<float> to_vector() const {
    Tensor f32 = cast(AMPX_F32);
    std::vector<float> values(static_cast<size_t>(f32.numel()));
    check(ampx_tensor_to_host(f32.get(), values.data(), values.size() * sizeof(float)));
    return values;
  }
  void fill(double value) { check(ampx_tensor_fill(get(), value)); }
  void copy_from(const Tensor& src) { check(ampx_tensor_copy(get(), src.get())); }
  void set_name(const std::string& name) { check(ampx_tensor_set_name(get(), name.c_str())); }
  std::string name() const {
    const char* n = nullptr;
    check(ampx_tensor_name(get(), &n));
    return n;
  }
  // Attaches `grad` (retained by this tensor) as its gradient.
  void set_grad(const Tensor& grad) { check(ampx_tensor_set_grad(get(), grad.get())); }
  int64_t numel() const {
    int64_t n = 0;
    check(ampx_tensor_numel(get(), &n));
    return n;
  }
  ampx_dtype dtype() const {
    ampx_dtype d = AMPX_F32;
    check(ampx_tensor_dtype(get(), &d));
    return d;
  }
};

class Optimizer : public detail::Owner<ampx_optimizer, ampx_optimizer_release> {
 public:
  static Optimizer adamw(const Context& ctx, std::initializer_list<const Tensor*> params,
                         ampx_adam_options options = ampx_adamw_options_default()) {
    std::vector<ampx_tensor> handles = handles_of(params);
    ampx_optimizer o = nullptr;
    check(ampx_optimizer_create_adam(ctx.get(), handles.data(), handles.size(), &options, &o));
    return Optimizer(o);
  }
  static Optimizer sgd(const Context& ctx, std::initializer_list<const Tensor*> params,
                       ampx_sgd_options options = ampx_sgd_options_default()) {
    std::vector<ampx_tensor> handles = handles_of(params);
    ampx_optimizer o = nullptr;
    check(ampx_optimizer_create_sgd(ctx.get(), handles.data(), handles.size(), &options, &o));
    return Optimizer(o);
  }
  void step() { check(ampx_optimizer_step(get())); }
  void zero_grad() { check(ampx_optimizer_zero_grad(get())); }
  void set_lr(double lr, int32_t group = 0) { check(ampx_optimizer_set_lr(get(), group, lr)); }
  // Clips the gradients by their total L2 norm; returns the norm before
  // clipping (synchronizes to read it).
  double clip_grad_norm(double max_norm) {
    ampx_tensor total = nullptr;
    check(ampx_clip_grad_norm(get(), max_norm, 2.0, 0, &total));
    return Tensor(total).to_vector().at(0);
  }

 private:
  explicit Optimizer(ampx_optimizer o) : Owner(o) {}
  static std::vector<ampx_tensor> handles_of(std::initializer_list<const Tensor*> params) {
    std::vector<ampx_tensor> handles;
    for (const Tensor* p : params) handles.push_back(p->get());
    return handles;
  }
};

class Scaler : public detail::Owner<ampx_scaler, ampx_scaler_release> {
 public:
  explicit Scaler(const Context& ctx, ampx_scaler_options options = ampx_scaler_options_default()) {
    ampx_scaler s = nullptr;
    check(ampx_scaler_create(ctx.get(), &options, &s));
    *this = Scaler(s);
  }
  void attach(const Optimizer& opt) { check(ampx_scaler_attach(get(), opt.get())); }
  void unscale(const Optimizer& opt) { check(ampx_scaler_unscale(get(), opt.get())); }
  void step(const Optimizer& opt) { check(ampx_scaler_step(get(), opt.get())); }
  void update() { check(ampx_scaler_update(get())); }
  double scale() const {
    double s = 0;
    check(ampx_scaler_get_scale(get(), &s));
    return s;
  }
  Tensor scale_tensor() const {
    ampx_tensor t = nullptr;
    check(ampx_scaler_scale_tensor(get(), &t));
    return Tensor(t);
  }
  ampx_scaler_counters counters() const {
    ampx_scaler_counters c = AMPX_SCALER_COUNTERS_INIT;
    check(ampx_scaler_get_counters(get(), &c));
    return c;
  }

 private:
  explicit Scaler(ampx_scaler s) : Owner(s) {}
};

}  // namespace ampx

#endif  // AMPX_HPP
