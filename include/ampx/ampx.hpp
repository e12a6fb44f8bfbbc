// ampx.hpp -- a header-only C++17 layer over the C API in ampx.h.
//
// It adds no ABI: every call goes through ampx.h. Handles become move-only
// RAII owners; a failing call throws ampx::Error carrying the status and the
// library's message. The thread rules of ampx.h apply unchanged.
//
// Regions become guards (Autocast, Scope, GradMode/NoGrad) that close in
// their destructors, which never throw. The ops of ampx.h section 11 are
// free functions returning a Tensor the caller owns, whether or not a Scope
// is open: with C++ ownership, a Scope is only needed around direct C calls.
#ifndef AMPX_HPP
#define AMPX_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// This layer wraps the experimental tier of ampx.h (autograd, scopes,
// autocast, ops, checkpoint files), so it asks for it: including ampx.hpp
// makes sections 9-12 of ampx.h visible to the including file as well. (If
// ampx.h was already included without AMPX_EXPERIMENTAL, the include below
// adds the experimental declarations; see the end of ampx.h.)
#ifndef AMPX_EXPERIMENTAL
#define AMPX_EXPERIMENTAL
#endif
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

class Fp8Recipe;  // section 18, below

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
  // Lets f32 products and convolutions run in TF32 (ampx_context_set_tf32);
  // returns the former setting.
  bool set_tf32(bool allowed) const {
    int32_t previous = 0;
    check(ampx_context_set_tf32(get(), allowed ? 1 : 0, &previous));
    return previous != 0;
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

  // Adds a reference to a borrowed handle (a gradient, an op output owned
  // by a scope) and owns that one.
  static Tensor retained(ampx_tensor handle) {
    check(ampx_tensor_retain(handle));
    return Tensor(handle);
  }

  static Tensor empty(const Context& ctx, ampx_dtype dtype, std::vector<int64_t> shape) {
    ampx_tensor t = nullptr;
    check(ampx_tensor_empty(ctx.get(), dtype, static_cast<int32_t>(shape.size()), shape.data(), &t));
    return Tensor(t);
  }
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

  // Class labels and indices (I64), e.g. for cross_entropy and embedding.
  static Tensor from_host_i64(const Context& ctx, const std::vector<int64_t>& values,
                              std::vector<int64_t> shape) {
    ampx_tensor t = nullptr;
    check(ampx_tensor_from_host(ctx.get(), AMPX_I64, static_cast<int32_t>(shape.size()),
                                shape.data(), values.data(), values.size() * sizeof(int64_t), &t));
    return Tensor(t);
  }

  // The contents converted to `dtype` (torch's Tensor.to): recorded
  // (ampx_cast) when this tensor requires grad, so with grad mode on the
  // gradient comes back here in this tensor's dtype; otherwise the plain
  // ampx_tensor_cast. clone() is the cast to this tensor's own dtype.
  Tensor cast(ampx_dtype dtype) const;
  Tensor clone() const { return cast(dtype()); }
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
  // Attaches `grad` (retained by this tensor) as its gradient; an empty
  // Tensor detaches it.
  void set_grad(const Tensor& grad) { check(ampx_tensor_set_grad(get(), grad.get())); }
  // The attached gradient (sharing its memory), or an empty Tensor.
  Tensor grad() const {
    ampx_tensor g = nullptr;
    check(ampx_tensor_grad(get(), &g));
    return g ? retained(g) : Tensor();
  }
  void set_requires_grad(bool requires_grad = true) {
    check(ampx_tensor_set_requires_grad(get(), requires_grad ? 1 : 0));
  }
  bool requires_grad() const {
    int32_t r = 0;
    check(ampx_tensor_requires_grad(get(), &r));
    return r != 0;
  }
  std::vector<int64_t> shape() const {
    int32_t ndim = 0;
    check(ampx_tensor_ndim(get(), &ndim));
    std::vector<int64_t> dims(static_cast<size_t>(ndim));
    check(ampx_tensor_shape(get(), dims.data(), ndim));
    return dims;
  }
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
  // The group's learning-rate schedule from its next step on (ampx.h section
  // 17); the default schedule is the constant rate.
  void set_lr_schedule(const ampx_lr_schedule& schedule, int32_t group = 0) {
    check(ampx_optimizer_set_lr_schedule(get(), group, &schedule));
  }
  ampx_lr_schedule lr_schedule(int32_t group = 0) const {
    ampx_lr_schedule schedule = ampx_lr_schedule_default();
    check(ampx_optimizer_get_lr_schedule(get(), group, &schedule));
    return schedule;
  }
  // Steps taken (skipped ones do not count), the schedules' position.
  // Synchronizes.
  int64_t step_count() const {
    int64_t steps = 0;
    check(ampx_optimizer_step_count(get(), &steps));
    return steps;
  }
  // Clips the gradients by their total L2 norm; returns the norm before
  // clipping (synchronizes to read it; ampx::clip_grad_norm does not).
  double clip_grad_norm(double max_norm) {
    ampx_tensor total = nullptr;
    check(ampx_clip_grad_norm(get(), max_norm, 2.0, 0, &total));
    return Tensor(total).to_vector().at(0);
  }
  void clip_grad_value(double clip_value) { check(ampx_clip_grad_value(get(), clip_value)); }
  // Whether the last step was taken (false: skipped for inf/NaN). Synchronizes.
  bool last_step_taken() const {
    int32_t taken = 0;
    check(ampx_optimizer_last_step_taken(get(), &taken));
    return taken != 0;
  }
  std::vector<unsigned char> save_state() const {
    size_t bytes = 0;
    check(ampx_optimizer_state_size(get(), &bytes));
    std::vector<unsigned char> state(bytes);
    check(ampx_optimizer_save_state(get(), state.data(), state.size()));
    return state;
  }
  void load_state(const std::vector<unsigned char>& state) {
    check(ampx_optimizer_load_state(get(), state.data(), state.size()));
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
  // Ends the iteration with `new_scale` instead of the growth/backoff rule.
  void update_to(double new_scale) { check(ampx_scaler_update_to(get(), new_scale)); }
  // Whether the last unscale of opt's gradients found an inf/NaN. Synchronizes.
  bool found_inf(const Optimizer& opt) const {
    int32_t found = 0;
    check(ampx_scaler_found_inf(get(), opt.get(), &found));
    return found != 0;
  }
  Tensor scale_loss(const Tensor& loss) const {
    ampx_tensor t = nullptr;
    check(ampx_scaler_scale_loss(get(), loss.get(), &t));
    return Tensor(t);
  }
  // x * (1 / scale), recorded (the gradient-penalty recipe, ampx.h section 9).
  inline Tensor unscale_tensor(const Tensor& x) const;
  ampx_scaler_state state() const {
    ampx_scaler_state s{};
    s.struct_size = sizeof s;
    s.counters.struct_size = sizeof s.counters;
    check(ampx_scaler_get_state(get(), &s));
    return s;
  }
  void set_state(const ampx_scaler_state& s) { check(ampx_scaler_set_state(get(), &s)); }
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

// ---- data-parallel training (ampx.h section 14) ---------------------------------

// A group of ranks. from_mpi takes a pointer to the host's MPI_Comm (e.g.
// &comm); collective over its ranks, like every constructor here.
class Comm : public detail::Owner<ampx_comm, ampx_comm_release> {
 public:
  static Comm from_mpi(const Context& ctx, const void* mpi_comm) {
    ampx_comm c = nullptr;
    check(ampx_comm_from_mpi(ctx.get(), mpi_comm, &c));
    return Comm(c);
  }
  static Comm from_nccl(const Context& ctx, void* nccl_comm) {
    ampx_comm c = nullptr;
    check(ampx_comm_from_nccl(ctx.get(), nccl_comm, &c));
    return Comm(c);
  }
  // Rank 0 makes the id and sends its bytes to the other ranks itself.
  static std::array<unsigned char, AMPX_NCCL_UNIQUE_ID_BYTES> nccl_unique_id() {
    std::array<unsigned char, AMPX_NCCL_UNIQUE_ID_BYTES> id{};
    check(ampx_nccl_unique_id(id.data(), id.size()));
    return id;
  }
  static Comm init_nccl(const Context& ctx,
                        const std::array<unsigned char, AMPX_NCCL_UNIQUE_ID_BYTES>& id,
                        int32_t world_size, int32_t rank) {
    ampx_comm c = nullptr;
    check(ampx_comm_init_nccl(ctx.get(), id.data(), id.size(), world_size, rank, &c));
    return Comm(c);
  }
  int32_t rank() const {
    int32_t r = 0;
    check(ampx_comm_rank(get(), &r, nullptr));
    return r;
  }
  int32_t size() const {
    int32_t s = 0;
    check(ampx_comm_rank(get(), nullptr, &s));
    return s;
  }
  void set_timeout(double seconds) { check(ampx_comm_set_timeout(get(), seconds)); }

 private:
  explicit Comm(ampx_comm c) : Owner(c) {}
};

// An optimizer whose gradients are averaged over the ranks (DDP; ZeRO-1
// with options.zero_stage = 1).
class DataParallel : public detail::Owner<ampx_data_parallel, ampx_data_parallel_release> {
 public:
  DataParallel(const Comm& comm, const Optimizer& opt,
               ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT) {
    ampx_data_parallel dp = nullptr;
    check(ampx_data_parallel_create(comm.get(), opt.get(), &options, &dp));
    *this = DataParallel(dp);
  }
  void set_sync(bool sync) { check(ampx_data_parallel_set_sync(get(), sync ? 1 : 0)); }
  void reduce() { check(ampx_data_parallel_reduce(get())); }
  // MAX-reduces the recipe's step amaxes over the ranks before each update
  // (every rank attaches one with the same slots); null detaches it.
  inline void set_fp8_recipe(const Fp8Recipe* recipe);
  ampx_data_parallel_stats stats() const {
    ampx_data_parallel_stats s = AMPX_DATA_PARALLEL_STATS_INIT;
    check(ampx_data_parallel_get_stats(get(), &s));
    return s;
  }

  // Gradient accumulation (DDP's no_sync): synchronization off for the
  // guard's lifetime, on again after it.
  class NoSync {
   public:
    explicit NoSync(DataParallel& dp) : dp_(dp) { dp_.set_sync(false); }
    ~NoSync() {
      ampx_status ignored = ampx_data_parallel_set_sync(dp_.get(), 1);
      (void)ignored;
    }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DataParallel& dp_;
  };

 private:
  explicit DataParallel(ampx_data_parallel dp) : Owner(dp) {}
};

// ---- autograd -----------------------------------------------------------------

// Backpropagates from a one-element loss; the leaves' gradients come out
// multiplied by the scaler's scale when one is given.
inline void backward(const Tensor& loss) { check(ampx_backward(loss.get(), nullptr)); }
inline void backward(const Tensor& loss, const Scaler& scaler) {
  check(ampx_backward(loss.get(), scaler.get()));
}

// ampx_backward_ex: backward with retain_graph / create_graph (scaler may
// be null).
inline void backward(const Tensor& loss, const Scaler* scaler, bool retain_graph,
                     bool create_graph = false) {
  ampx_backward_options o = ampx_backward_options_default();
  o.retain_graph = retain_graph ? 1 : 0;
  o.create_graph = create_graph ? 1 : 0;
  check(ampx_backward_ex(loss.get(), scaler ? scaler->get() : nullptr, &o));
}

// Sets grad mode on the context for the guard's lifetime, then restores the
// previous setting.
class GradMode {
 public:
  GradMode(const Context& ctx, bool enabled) : ctx_(ctx.get()) {
    check(ampx_set_grad_enabled(ctx_, enabled ? 1 : 0, &previous_));
  }
  // Destructors never throw; these restores fail only when the context
  // was released meanwhile, and then there is nothing left to restore.
  ~GradMode() { (void)ampx_set_grad_enabled(ctx_, previous_, nullptr); }
  GradMode(const GradMode&) = delete;
  GradMode& operator=(const GradMode&) = delete;

 private:
  ampx_context ctx_;
  int32_t previous_ = 1;
};

// torch.no_grad(): nothing is recorded while it lives.
class NoGrad : public GradMode {
 public:
  explicit NoGrad(const Context& ctx) : GradMode(ctx, false) {}
};

// An ampx scope for the guard's lifetime: op outputs of direct C calls made
// meanwhile are owned by it and released when it ends.
class Scope {
 public:
  explicit Scope(const Context& ctx) : ctx_(ctx.get()) { check(ampx_scope_push(ctx_)); }
  ~Scope() { (void)ampx_scope_pop(ctx_); }  // see ~GradMode
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  ampx_context ctx_;
};

// ---- autocast -----------------------------------------------------------------

// An autocast policy: its dtype, and op-class overrides that last as long as
// it does. Enter it with an Autocast guard.
class AutocastPolicy : public detail::Owner<ampx_autocast, ampx_autocast_release> {
 public:
  AutocastPolicy() = default;  // none
  explicit AutocastPolicy(const Context& ctx, ampx_dtype dtype = AMPX_F16, bool cache = true) {
    ampx_autocast_options options = ampx_autocast_options_default();
    options.dtype = dtype;
    options.cache = cache ? 1 : 0;
    ampx_autocast a = nullptr;
    check(ampx_autocast_create(ctx.get(), &options, &a));
    *this = AutocastPolicy(a);
  }
  void set_op_class(const std::string& op, ampx_op_class op_class) {
    check(ampx_autocast_set_op_class(get(), op.c_str(), op_class));
  }
  ampx_op_class op_class(const std::string& op) const {
    ampx_op_class c = AMPX_OP_KEEP;
    check(ampx_autocast_op_class(get(), op.c_str(), &c));
    return c;
  }
  // Casts served from the cache and casts made into it.
  std::pair<int64_t, int64_t> cache_stats() const {
    int64_t hits = 0, misses = 0;
    check(ampx_autocast_cache_stats(get(), &hits, &misses));
    return {hits, misses};
  }
  // Makes it an FP8 policy with `recipe` (which it then holds a reference
  // to), for products of at least min_gemm_size = m * n * k (ampx.h section
  // 18); clear_fp8 makes it a plain one again.
  inline void set_fp8(const Fp8Recipe& recipe,
                      int64_t min_gemm_size = AMPX_FP8_DEFAULT_MIN_GEMM_SIZE);
  void clear_fp8() { check(ampx_autocast_set_fp8(get(), nullptr, 0)); }
  // Products run in FP8 and those that fell back, with the last reason.
  struct Fp8Stats {
    int64_t fp8_products = 0;
    int64_t fallbacks = 0;
    std::string last_fallback;
  };
  Fp8Stats fp8_stats() const {
    ampx_fp8_stats s = AMPX_FP8_STATS_INIT;
    check(ampx_autocast_fp8_stats(get(), &s));
    return {s.fp8_products, s.fallbacks, s.last_fallback ? s.last_fallback : ""};
  }

 private:
  explicit AutocastPolicy(ampx_autocast a) : Owner(a) {}
};

// An autocast region (torch.autocast): ops follow the policy while the
// guard lives. Regions nest; guards are destroyed in reverse order, as the
// C API requires.
class Autocast {
 public:
  explicit Autocast(const AutocastPolicy& policy) : policy_(policy.get()) {
    check(ampx_autocast_enter(policy_));
  }
  // A region with a policy of its own (no overrides, cache for this region).
  explicit Autocast(const Context& ctx, ampx_dtype dtype = AMPX_F16)
      : owned_(ctx, dtype), policy_(owned_.get()) {
    check(ampx_autocast_enter(policy_));
  }
  ~Autocast() { (void)ampx_autocast_exit(policy_); }  // see ~GradMode
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  AutocastPolicy owned_;  // set only by the constructor that makes its own
  ampx_autocast policy_;
};

// ---- clipping and diagnostics ---------------------------------------------------

// clip_grad_norm without a sync: the total norm stays on the device.
inline Tensor clip_grad_norm(Optimizer& opt, double max_norm, double norm_type = 2.0,
                             bool error_if_nonfinite = false) {
  ampx_tensor total = nullptr;
  check(ampx_clip_grad_norm(opt.get(), max_norm, norm_type, error_if_nonfinite ? 1 : 0, &total));
  return Tensor(total);
}
inline void clip_grad_value(Optimizer& opt, double clip_value) { opt.clip_grad_value(clip_value); }

struct NonfiniteGrad {
  std::string name;
  int64_t nan_count;
  int64_t inf_count;
};

// The parameters whose gradients hold NaN or inf, in parameter order.
inline std::vector<NonfiniteGrad> find_nonfinite_grads(const Optimizer& opt) {
  size_t found = 0;
  check(ampx_find_nonfinite_grads(opt.get(), nullptr, 0, &found));
  std::vector<ampx_nonfinite_grad> entries(found);
  check(ampx_find_nonfinite_grads(opt.get(), entries.data(), entries.size(), &found));
  std::vector<NonfiniteGrad> result;
  for (size_t i = 0; i < entries.size() && i < found; ++i)
    result.push_back({entries[i].name, entries[i].nan_count, entries[i].inf_count});
  return result;
}

// ---- ops (ampx.h section 11) --------------------------------------------------------

namespace detail {

// Runs one C op inside a scope of its own and keeps a reference to its
// output, so the caller owns it whether or not an outer scope is open (the
// C API cannot be asked whether one is).
template <class Call>
Tensor run_op(ampx_tensor any_input, Call call) {
  ampx_context ctx = nullptr;
  const ampx_status no_context = ampx_tensor_context(any_input, &ctx);
  if (no_context != AMPX_OK) {
    // An empty or stale input: the op's own message names the op.
    ampx_tensor out = nullptr;
    const ampx_status status = call(&out);
    throw Error(status != AMPX_OK ? status : no_context, ampx_last_error());
  }
  check(ampx_scope_push(ctx));
  ampx_tensor out = nullptr;
  ampx_status status = call(&out);
  if (status == AMPX_OK) status = ampx_tensor_retain(out);
  if (status != AMPX_OK) {
    Error error(status, ampx_last_error());
    (void)ampx_scope_pop(ctx);  // the op's error is the one to report
    throw error;
  }
  Tensor result(out);
  check(ampx_scope_pop(ctx));
  return result;
}

}  // namespace detail

inline Tensor Tensor::cast(ampx_dtype dtype) const {
  if (requires_grad())
    return detail::run_op(get(), [&](ampx_tensor* out) { return ampx_cast(get(), dtype, out); });
  ampx_tensor t = nullptr;
  check(ampx_tensor_cast(get(), dtype, &t));
  return Tensor(t);
}

#define AMPX_HPP_BINARY_OP(name)                                          \
  inline Tensor name(const Tensor& a, const Tensor& b) {                 \
    return detail::run_op(a.get(), [&](ampx_tensor* out) {              \
      return ampx_##name(a.get(), b.get(), out);                         \
    });                                                                  \
  }
AMPX_HPP_BINARY_OP(add)
AMPX_HPP_BINARY_OP(sub)
AMPX_HPP_BINARY_OP(mul)
AMPX_HPP_BINARY_OP(div)
AMPX_HPP_BINARY_OP(matmul)
AMPX_HPP_BINARY_OP(embedding)  // (weight, indices)
#undef AMPX_HPP_BINARY_OP

#define AMPX_HPP_UNARY_OP(name)                                                            \
  inline Tensor name(const Tensor& x) {                                                   \
    return detail::run_op(x.get(), [&](ampx_tensor* out) { return ampx_##name(x.get(), out); }); \
  }
AMPX_HPP_UNARY_OP(relu)
AMPX_HPP_UNARY_OP(gelu)
AMPX_HPP_UNARY_OP(gelu_tanh)
AMPX_HPP_UNARY_OP(silu)
AMPX_HPP_UNARY_OP(sigmoid)
AMPX_HPP_UNARY_OP(tanh)
AMPX_HPP_UNARY_OP(sum)
AMPX_HPP_UNARY_OP(mean)
AMPX_HPP_UNARY_OP(softmax)
AMPX_HPP_UNARY_OP(log_softmax)
AMPX_HPP_UNARY_OP(exp)
AMPX_HPP_UNARY_OP(log)
AMPX_HPP_UNARY_OP(sqrt)
AMPX_HPP_UNARY_OP(rsqrt)
AMPX_HPP_UNARY_OP(global_avg_pool2d)
#undef AMPX_HPP_UNARY_OP

inline Tensor pow(const Tensor& x, double exponent) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) { return ampx_pow(x.get(), exponent, out); });
}

inline Tensor softmax(const Tensor& x, int32_t dim) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) { return ampx_softmax_dim(x.get(), dim, out); });
}

inline Tensor log_softmax(const Tensor& x, int32_t dim) {
  return detail::run_op(x.get(),
                        [&](ampx_tensor* out) { return ampx_log_softmax_dim(x.get(), dim, out); });
}

// Reductions over `dims` (negative counts from the end), as torch's
// x.sum(dims, keepdim), x.mean(dims, keepdim) and x.amax(dims, keepdim).
#define AMPX_HPP_DIMS_OP(name, c_name)                                                    \
  inline Tensor name(const Tensor& x, const std::vector<int32_t>& dims, bool keepdim = false) { \
    return detail::run_op(x.get(), [&](ampx_tensor* out) {                                \
      return c_name(x.get(), dims.data(), static_cast<int32_t>(dims.size()), keepdim ? 1 : 0, \
                    out);                                                                 \
    });                                                                                   \
  }
AMPX_HPP_DIMS_OP(sum, ampx_sum_dims)
AMPX_HPP_DIMS_OP(mean, ampx_mean_dims)
AMPX_HPP_DIMS_OP(amax, ampx_amax)
#undef AMPX_HPP_DIMS_OP

inline Tensor affine(const Tensor& a, double scale, double shift) {
  return detail::run_op(a.get(), [&](ampx_tensor* out) { return ampx_affine(a.get(), scale, shift, out); });
}

inline Tensor cross_entropy(const Tensor& logits, const Tensor& labels,
                            ampx_reduction reduction = AMPX_REDUCTION_MEAN,
                            int64_t ignore_index = -100) {
  return detail::run_op(logits.get(), [&](ampx_tensor* out) {
    return ampx_cross_entropy(logits.get(), labels.get(), reduction, ignore_index, out);
  });
}

// With class weights (an empty Tensor(): none) and label smoothing.
inline Tensor cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& weight,
                            const ampx_cross_entropy_options& options) {
  return detail::run_op(logits.get(), [&](ampx_tensor* out) {
    return ampx_cross_entropy_ex(logits.get(), labels.get(), weight.get(), &options, out);
  });
}

inline Tensor mse_loss(const Tensor& input, const Tensor& target,
                       ampx_reduction reduction = AMPX_REDUCTION_MEAN) {
  return detail::run_op(input.get(), [&](ampx_tensor* out) {
    return ampx_mse_loss(input.get(), target.get(), reduction, out);
  });
}

inline Tensor bce_with_logits(const Tensor& logits, const Tensor& targets,
                              ampx_reduction reduction = AMPX_REDUCTION_MEAN) {
  return detail::run_op(logits.get(), [&](ampx_tensor* out) {
    return ampx_bce_with_logits(logits.get(), targets.get(), reduction, out);
  });
}

// With torch's weight and pos_weight (an empty Tensor(): none).
inline Tensor bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& weight,
                              const Tensor& pos_weight,
                              ampx_reduction reduction = AMPX_REDUCTION_MEAN) {
  ampx_bce_with_logits_options options = ampx_bce_with_logits_options_default();
  options.reduction = reduction;
  return detail::run_op(logits.get(), [&](ampx_tensor* out) {
    return ampx_bce_with_logits_ex(logits.get(), targets.get(), weight.get(), pos_weight.get(),
                                   &options, out);
  });
}

// An empty Tensor() as bias means none.
inline Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                     ampx_activation activation = AMPX_ACTIVATION_NONE) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_linear(x.get(), weight.get(), bias.get(), activation, out);
  });
}

// Empty Tensors as weight/bias mean none.
inline Tensor layer_norm(const Tensor& x, const Tensor& weight = Tensor(),
                         const Tensor& bias = Tensor(), double eps = 1e-5) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_layer_norm(x.get(), weight.get(), bias.get(), eps, out);
  });
}

// Empty Tensors mean none (the running statistics: both or neither).
inline Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var, bool training,
                         double momentum = 0.1, double eps = 1e-5) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_batch_norm(x.get(), weight.get(), bias.get(), running_mean.get(),
                           running_var.get(), training ? 1 : 0, momentum, eps, out);
  });
}

inline Tensor rms_norm(const Tensor& x, const Tensor& weight = Tensor(), double eps = 1e-6) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_rms_norm(x.get(), weight.get(), eps, out);
  });
}

// NCHW; an empty Tensor() as bias means none.
inline Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                     const ampx_conv2d_options& options = ampx_conv2d_options_default()) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_conv2d(x.get(), weight.get(), bias.get(), &options, out);
  });
}

inline Tensor max_pool2d(const Tensor& x, int64_t kernel_h, int64_t kernel_w,
                         const ampx_pool2d_options& options = ampx_pool2d_options_default()) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_max_pool2d(x.get(), kernel_h, kernel_w, &options, out);
  });
}

inline Tensor avg_pool2d(const Tensor& x, int64_t kernel_h, int64_t kernel_w,
                         const ampx_pool2d_options& options = ampx_pool2d_options_default()) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_avg_pool2d(x.get(), kernel_h, kernel_w, &options, out);
  });
}

// q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv]; an empty Tensor()
// as mask means none.
inline Tensor scaled_dot_product_attention(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor(),
    const ampx_attention_options& options = ampx_attention_options_default()) {
  return detail::run_op(q.get(), [&](ampx_tensor* out) {
    return ampx_scaled_dot_product_attention(q.get(), k.get(), v.get(), mask.get(), &options,
                                             out);
  });
}

inline Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_masked_fill(x.get(), mask.get(), value, out);
  });
}

inline Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin,
                               bool interleaved = false) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_rotary_embedding(x.get(), cos.get(), sin.get(), interleaved ? 1 : 0, out);
  });
}

inline Tensor permute(const Tensor& x, const std::vector<int32_t>& dims) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_permute(x.get(), static_cast<int32_t>(dims.size()), dims.data(), out);
  });
}

inline Tensor dropout(const Tensor& x, double p, bool training) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_dropout(x.get(), p, training ? 1 : 0, out);
  });
}

inline Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_reshape(x.get(), static_cast<int32_t>(shape.size()), shape.data(), out);
  });
}

inline Tensor transpose(const Tensor& x, int32_t dim0, int32_t dim1) {
  return detail::run_op(x.get(), [&](ampx_tensor* out) { return ampx_transpose(x.get(), dim0, dim1, out); });
}

inline Tensor concat(const std::vector<const Tensor*>& tensors, int32_t dim) {
  std::vector<ampx_tensor> handles;
  for (const Tensor* t : tensors) handles.push_back(t ? t->get() : nullptr);
  return detail::run_op(handles.empty() ? nullptr : handles.front(), [&](ampx_tensor* out) {
    return ampx_concat(handles.data(), handles.size(), dim, out);
  });
}

namespace detail {

// run_op for the ops that write several outputs: `call(outs, &written)`
// fills up to `capacity` handles and says how many.
template <class Call>
std::vector<Tensor> run_multi_op(ampx_tensor any_input, size_t capacity, Call call) {
  std::vector<ampx_tensor> outs(capacity, nullptr);
  size_t written = 0;
  ampx_context ctx = nullptr;
  const ampx_status no_context = ampx_tensor_context(any_input, &ctx);
  if (no_context != AMPX_OK) {
    const ampx_status status = call(outs.data(), &written);
    throw Error(status != AMPX_OK ? status : no_context, ampx_last_error());
  }
  check(ampx_scope_push(ctx));
  ampx_status status = call(outs.data(), &written);
  std::vector<Tensor> result;
  for (size_t i = 0; status == AMPX_OK && i < written; ++i) {
    status = ampx_tensor_retain(outs[i]);
    if (status == AMPX_OK) result.emplace_back(outs[i]);
  }
  if (status != AMPX_OK) {
    Error error(status, ampx_last_error());
    (void)ampx_scope_pop(ctx);
    throw error;
  }
  check(ampx_scope_pop(ctx));
  return result;
}

}  // namespace detail

inline Tensor Scaler::unscale_tensor(const Tensor& x) const {
  return detail::run_op(x.get(), [&](ampx_tensor* out) {
    return ampx_scaler_unscale_tensor(get(), x.get(), out);
  });
}

// Options of grad, as torch.autograd.grad's keywords (retain_graph -1:
// the value of create_graph).
struct GradOptions {
  bool create_graph = false;
  int retain_graph = -1;
  bool allow_unused = false;
};

// torch.autograd.grad(outputs, inputs, grad_outputs, ...): one gradient per
// input, owned by the caller (an empty Tensor for an unused input with
// allow_unused). grad_outputs empty, or one per output (null entries:
// ones, for one-element outputs).
inline std::vector<Tensor> grad(const std::vector<const Tensor*>& outputs,
                                const std::vector<const Tensor*>& inputs,
                                const std::vector<const Tensor*>& grad_outputs = {},
                                GradOptions options = GradOptions()) {
  std::vector<ampx_tensor> outs, ins, seeds;
  for (const Tensor* t : outputs) outs.push_back(t ? t->get() : nullptr);
  for (const Tensor* t : inputs) ins.push_back(t ? t->get() : nullptr);
  for (const Tensor* t : grad_outputs) seeds.push_back(t ? t->get() : nullptr);
  ampx_grad_options o = ampx_grad_options_default();
  o.create_graph = options.create_graph ? 1 : 0;
  o.retain_graph = options.retain_graph;
  o.allow_unused = options.allow_unused ? 1 : 0;
  std::vector<ampx_tensor> grads(ins.size(), nullptr);
  const auto call = [&] {
    return ampx_grad(outs.data(), outs.size(), seeds.empty() ? nullptr : seeds.data(), ins.data(),
                     ins.size(), &o, grads.data());
  };
  ampx_context ctx = nullptr;
  if (outs.empty() || ampx_tensor_context(outs[0], &ctx) != AMPX_OK) {
    const ampx_status status = call();  // its own message names what is wrong
    throw Error(status != AMPX_OK ? status : AMPX_ERR_INVALID_ARGUMENT, ampx_last_error());
  }
  check(ampx_scope_push(ctx));
  ampx_status status = call();
  std::vector<Tensor> result;
  for (size_t i = 0; status == AMPX_OK && i < grads.size(); ++i) {
    if (!grads[i]) {
      result.emplace_back();
      continue;
    }
    status = ampx_tensor_retain(grads[i]);
    if (status == AMPX_OK) result.emplace_back(grads[i]);
  }
  if (status != AMPX_OK) {
    Error error(status, ampx_last_error());
    (void)ampx_scope_pop(ctx);
    throw error;
  }
  check(ampx_scope_pop(ctx));
  return result;
}

// The gradient of a one-element output with respect to one input.
inline Tensor grad(const Tensor& output, const Tensor& input, GradOptions options = GradOptions()) {
  return std::move(grad({&output}, {&input}, {}, options)[0]);
}

// Pieces of sizes[k] along dim, as torch.split(x, sizes, dim).
inline std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes,
                                 int32_t dim) {
  return detail::run_multi_op(x.get(), sizes.size(), [&](ampx_tensor* outs, size_t* written) {
    *written = sizes.size();
    return ampx_split(x.get(), sizes.data(), sizes.size(), dim, outs);
  });
}

// At most `chunks` pieces along dim, as torch.chunk.
inline std::vector<Tensor> chunk(const Tensor& x, int32_t chunks, int32_t dim) {
  const size_t capacity = chunks > 0 ? static_cast<size_t>(chunks) : 1;
  return detail::run_multi_op(x.get(), capacity, [&](ampx_tensor* outs, size_t* written) {
    int32_t count = 0;
    const ampx_status status = ampx_chunk(x.get(), chunks, dim, outs, &count);
    *written = status == AMPX_OK ? static_cast<size_t>(count) : 0;
    return status;
  });
}

// ---- FP8 (ampx.h section 18) ------------------------------------------------------

// dst = src converted into dst's FP8 type (F8E4M3 or F8E5M2) with the
// overflow rule; Tensor::cast uses each type's torch rule instead.
inline void copy_fp8(Tensor& dst, const Tensor& src, ampx_fp8_overflow overflow) {
  check(ampx_tensor_copy_fp8(dst.get(), src.get(), overflow));
}

// A scaling recipe (Transformer Engine's DelayedScaling or
// Float8CurrentScaling): per slot, a scale, its inverse, the step's amax
// and an amax history, in device memory.
class Fp8Recipe : public detail::Owner<ampx_fp8_recipe, ampx_fp8_recipe_release> {
 public:
  explicit Fp8Recipe(const Context& ctx,
                     ampx_fp8_recipe_options options = ampx_fp8_recipe_options_default()) {
    ampx_fp8_recipe r = nullptr;
    check(ampx_fp8_recipe_create(ctx.get(), &options, &r));
    *this = Fp8Recipe(r);
  }
  // A new slot (scale 1, no history); returns its index. An empty name: none.
  int64_t add_tensor(ampx_fp8_role role, const std::string& name = "") {
    int64_t slot = 0;
    check(ampx_fp8_recipe_add_tensor(get(), role, name.empty() ? nullptr : name.c_str(), &slot));
    return slot;
  }
  int64_t slot_count() const {
    int64_t count = 0;
    check(ampx_fp8_recipe_slot_count(get(), &count));
    return count;
  }
  // Quantizes src with the slot's scale into dst and/or dst_transposed (an
  // empty Tensor: not written), folding src's amax into the slot's.
  void quantize(int64_t slot, const Tensor& src, const Tensor& dst,
                const Tensor& dst_transposed = Tensor()) {
    check(ampx_fp8_quantize(get(), slot, src.get(), dst.get(), dst_transposed.get()));
  }
  // The same into a new tensor of the slot's format and src's shape.
  Tensor quantize(int64_t slot, const Tensor& src) {
    ampx_context ctx = nullptr;
    check(ampx_tensor_context(src.get(), &ctx));
    const std::vector<int64_t> shape = src.shape();
    ampx_tensor t = nullptr;
    check(ampx_tensor_empty(ctx, slot_info(slot).dtype, static_cast<int32_t>(shape.size()),
                            shape.data(), &t));
    Tensor dst(t);
    quantize(slot, src, dst);
    return dst;
  }
  // Ends the step for every slot (histories, and delayed scaling's scales).
  void update() { check(ampx_fp8_recipe_update(get())); }
  // A [1] F32 view of the slot's scale (or inverse scale) that follows
  // every update.
  Tensor scale_tensor(int64_t slot, bool inverse = false) const {
    ampx_tensor t = nullptr;
    check(ampx_fp8_recipe_scale_tensor(get(), slot, inverse ? 1 : 0, &t));
    return Tensor(t);
  }
  // A slot read back (synchronizes); its amax history oldest first.
  struct Slot {
    std::string name;
    ampx_fp8_role role = AMPX_FP8_FORWARD;
    ampx_dtype dtype = AMPX_F8E4M3;
    float scale = 1.0f;
    float scale_inv = 1.0f;
    float amax = 0.0f;  // this step's, not yet in the history
    std::vector<float> history;
  };
  Slot slot(int64_t index) const {
    ampx_fp8_slot_info info = slot_info(index);
    Slot s;
    s.name = info.name ? info.name : "";
    s.role = info.role;
    s.dtype = info.dtype;
    s.scale = info.scale;
    s.scale_inv = info.scale_inv;
    s.amax = info.amax;
    s.history.resize(static_cast<size_t>(info.history_len));
    check(ampx_fp8_recipe_slot_get(get(), index, &info, s.history.data(), info.history_len));
    return s;
  }
  // What quantizing `tensor` at the slot's scale would flush and saturate
  // in either format (the precision doctor's FP8 check; synchronizes).
  ampx_fp8_tensor_report inspect(int64_t slot, const Tensor& tensor) const {
    ampx_fp8_tensor_report report = AMPX_FP8_TENSOR_REPORT_INIT;
    check(ampx_doctor_fp8_inspect(get(), slot, tensor.get(), &report));
    return report;
  }
  // A table of the slots, one line each (synchronizes).
  std::string summary() const {
    const char* text = nullptr;
    check(ampx_doctor_fp8_summary(get(), &text));
    return text;
  }

 private:
  explicit Fp8Recipe(ampx_fp8_recipe r) : Owner(r) {}
  ampx_fp8_slot_info slot_info(int64_t index) const {
    ampx_fp8_slot_info info = AMPX_FP8_SLOT_INFO_INIT;
    check(ampx_fp8_recipe_slot_get(get(), index, &info, nullptr, 0));
    return info;
  }
};

inline void AutocastPolicy::set_fp8(const Fp8Recipe& recipe, int64_t min_gemm_size) {
  check(ampx_autocast_set_fp8(get(), recipe.get(), min_gemm_size));
}

inline void DataParallel::set_fp8_recipe(const Fp8Recipe* recipe) {
  check(ampx_data_parallel_set_fp8_recipe(get(), recipe ? recipe->get() : nullptr));
}

// ONNX export (ampx_onnx_export): the recorded forward from `inputs` to
// `outputs`, each a tensor with its graph name; constant outputs and the
// rest in `options` (its constant_outputs fields are set from `constants`).
struct OnnxNamed {
  const Tensor* tensor;
  std::string name;
};

inline void onnx_export(const std::string& path, const std::vector<OnnxNamed>& inputs,
                        const std::vector<OnnxNamed>& outputs,
                        ampx_onnx_options options = ampx_onnx_options_default(),
                        const std::vector<OnnxNamed>& constants = {}) {
  auto lists = [](const std::vector<OnnxNamed>& named, std::vector<ampx_tensor>& handles,
                  std::vector<const char*>& names) {
    for (const OnnxNamed& n : named) {
      handles.push_back(n.tensor->get());
      names.push_back(n.name.c_str());
    }
  };
  std::vector<ampx_tensor> in, out, constant;
  std::vector<const char*> in_names, out_names, constant_names;
  lists(inputs, in, in_names);
  lists(outputs, out, out_names);
  lists(constants, constant, constant_names);
  if (!constants.empty()) {
    options.constant_outputs = constant.data();
    options.constant_output_names = constant_names.data();
    options.constant_output_count = constant.size();
  }
  check(ampx_onnx_export(path.c_str(), in.data(), in_names.data(), in.size(), out.data(),
                         out_names.data(), out.size(), &options));
}

}  // namespace ampx

#endif  // AMPX_HPP
