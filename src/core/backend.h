// backend.h -- what every device backend provides (the core), and how the
// optional parts of a backend (its capabilities) are found.
//
// The core is small: memory, copies, fill and convert, streams and events,
// synchronize. Everything else a backend may offer -- the multi-tensor AMP
// primitives, the primitives of the ops, GEMM, and the slots the next
// features fill (collectives, FP8, convolution, attention, gradient
// statistics) -- is a capability interface (backend_amp.h, backend_nn.h,
// backend_gemm.h) that a backend provides or not. Callers look one up with
// require<C>(op), which names the op and the device in an
// AMPX_ERR_NOT_SUPPORTED error when it is missing, or ask supports(id) first
// (as ggml's supports_op). Adding a backend or a capability touches no op.
//
// Every entry point is a non-virtual front door that validates its
// arguments once, then dispatches to the backend's implementation
// (protected virtuals), so backends never repeat the checks.
//
// Conventions for every primitive:
//  - pointers are device pointers of this backend (host pointers for the CPU);
//  - work is enqueued in order on the backend's compute stream unless the
//    comment says the call completes before returning;
//  - failures are reported by throwing ampx::impl::StatusError (see error.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "ampx/ampx.h"
#include "core/dtype.h"
#include "core/profile.h"

namespace ampx::impl {

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

// Memory for the intermediate results of one primitive call, given back when
// the call's work is enqueued. With a stream-ordered allocator (the CUDA
// pool) the work already queued still uses it and nothing waits for the
// device. Throws AMPX_ERR_OUT_OF_MEMORY naming the primitive when the memory
// cannot be had; zero bytes allocates nothing.
class ScratchBuffer {
 public:
  ScratchBuffer(Allocator& memory, size_t bytes, const char* primitive);
  ~ScratchBuffer() { memory_.deallocate(ptr_, bytes_); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  Allocator& memory_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

// The streams of a backend. Every primitive runs on Compute; Communication
// carries collectives, so that they overlap the computation that follows
// them. Work on different streams is ordered only through events.
enum class Stream { Compute, Communication };

// A point in one stream's work that another stream (or the host) can wait
// for: a cudaEvent_t on CUDA, nothing on a backend whose work completes
// before each call returns.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

// The optional parts of a backend, each with an interface header of its
// own (backend_amp.h, ...). (Collectives are no capability: they live in
// src/dist, over a transport of their own.)
enum class Capability : int {
  MultiTensorAmp,  // backend_amp.h: unscale, norms, clipping, scaler, optimizer steps
  Nn,              // backend_nn.h: the primitives of the ops
  Gemm,            // backend_gemm.h: matrix products
  Fp8Gemm,         // backend_fp8.h: matrix products of FP8 operands with scales
  Convolution,     // backend_conv.h: conv2d
  Pooling,         // backend_conv.h: max and average pooling over 2-D windows
  Attention,       // backend_attention.h: fused scaled dot-product attention
  GradStats,       // backend_grad_stats.h: gradient histograms of the precision doctor
  Fp8,             // backend_fp8.h: FP8 quantization and scaling-recipe updates
  Count
};

// "multi-tensor AMP primitives", "nn primitives", ...
const char* capability_name(Capability capability);

// The base of every capability interface.
class BackendCapability {
 public:
  virtual ~BackendCapability() = default;
  // Where the front doors time their calls (profile.h); nullptr: nowhere.
  void set_profile(PrimitiveProfile* profile) { profile_ = profile; }

 protected:
  PrimitiveProfile* profile() const { return profile_; }

 private:
  PrimitiveProfile* profile_ = nullptr;
};

// For capabilities that multiply f32 matrices: whether their products may
// run in TF32 (the context's ampx_context_set_tf32: inputs rounded to 10
// mantissa bits on tensor cores, fp32 sums). Off by default; a backend
// without such math ignores it.
class Tf32Setting {
 public:
  void set_tf32(bool allowed) { tf32_ = allowed; }
  bool tf32() const { return tf32_; }

 private:
  bool tf32_ = false;
};

// What a backend is, fixed when it is made.
struct BackendInfo {
  ampx_device_type device_type = AMPX_DEVICE_CPU;
  int32_t device_index = 0;
  // Alignment every allocation of this device gets (a power of two).
  size_t alignment = 64;
  // Work completes before each call returns (the CPU): results may be read
  // at once, events are trivial.
  bool synchronous = true;
  // For messages: "CPU", "CUDA device 0".
  std::string name;
};

class Backend {
 public:
  explicit Backend(BackendInfo info)
      : info_(std::move(info)), profile_(PrimitiveProfile::make_if_enabled(info_.name)) {}
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  ampx_device_type device_type() const { return info_.device_type; }
  int32_t device_index() const { return info_.device_index; }
  size_t alignment() const { return info_.alignment; }
  bool synchronous() const { return info_.synchronous; }
  const std::string& name() const { return info_.name; }
  // The timing of this backend's calls (AMPX_PROFILE, profile.h), or nullptr.
  PrimitiveProfile* profile() const { return profile_.get(); }

  // ---- capabilities ----------------------------------------------------------
  bool supports(Capability capability) const { return find_capability(capability) != nullptr; }
  BackendCapability* find_capability(Capability capability) const {
    const int i = static_cast<int>(capability);
    return i >= 0 && i < static_cast<int>(Capability::Count) ? capabilities_[i] : nullptr;
  }
  // The capability C (an interface with `static constexpr Capability kId`),
  // or nullptr.
  template <class C>
  C* find() const {
    return static_cast<C*>(find_capability(C::kId));
  }
  // The capability C; AMPX_ERR_NOT_SUPPORTED naming `op`, the capability and
  // the device when this backend does not provide it.
  template <class C>
  C& require(const char* op) const {
    if (C* c = find<C>()) return *c;
    refuse(op, C::kId);
  }
  [[noreturn]] void refuse(const char* op, Capability capability) const;

  // ---- memory ------------------------------------------------------------------

  // ampx's own allocator for this device (used when the host gives no hooks).
  virtual std::unique_ptr<Allocator> make_default_allocator() = 0;

  // Throws AMPX_ERR_DEVICE when `ptr` is not memory this backend's device can
  // address directly (used to validate wrapped and imported memory).
  virtual void check_device_pointer(const void* ptr, const char* what) = 0;

  // Copies; the host variants complete before returning. Copying 0 bytes,
  // or a region onto itself, does nothing.
  void copy_from_host(void* dst, const void* host_src, size_t bytes);
  void copy_to_host(void* host_dst, const void* src, size_t bytes);
  void copy(void* dst, const void* src, size_t bytes);

  // Writes `count` elements of `elem_size` bytes (1, 2, 4 or 8), each holding
  // the low elem_size bytes of `pattern` (little endian).
  void fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count);

  // dst[i] = convert(src[i]) for i < count, with the conversions of
  // kernels/math/convert.h. dst and src may be equal only when the types are.
  void convert(void* dst, DType dst_type, const void* src, DType src_type, int64_t count);

  // ---- streams and events --------------------------------------------------------

  // Waits for all work enqueued on every stream; reports asynchronous device
  // failures.
  virtual void synchronize() = 0;

  virtual std::unique_ptr<DeviceEvent> make_event() = 0;
  // Marks the current end of `stream`'s work in `event` (replacing what it
  // marked before).
  virtual void record_event(DeviceEvent& event, Stream stream) = 0;
  // Work enqueued on `stream` from now on starts only after the work
  // `event` marked has completed; the host does not wait.
  virtual void wait_event(Stream stream, const DeviceEvent& event) = 0;
  // Whether the work `event` marked has completed; never waits (true on a
  // synchronous backend). Reports asynchronous device failures.
  virtual bool event_completed(const DeviceEvent& event) = 0;
  // The device API's handle of `stream` (a cudaStream_t), for libraries
  // that enqueue on it themselves (NCCL, cuDNN); nullptr on the CPU.
  virtual void* native_stream(Stream stream) = 0;
  // Makes this backend's device the calling thread's current one, for
  // libraries that work on the current device (NCCL's communicator setup).
  virtual void make_current() {}

 protected:
  // Called by a backend's constructor for each capability it provides (the
  // object must live as long as the backend).
  template <class C>
  void provide(C& capability) {
    capability.set_profile(profile_.get());
    capabilities_[static_cast<int>(C::kId)] = &capability;
  }
  // Called by a backend's constructor for a capability it would provide
  // but cannot here (a library it needs is missing): refuse() tells why.
  void explain_missing(Capability capability, std::string why) {
    missing_why_[static_cast<int>(capability)] = std::move(why);
  }

  // The implementations behind the front doors above, called with valid
  // arguments and something to do (bytes > 0, count > 0, dst != src).
  virtual void run_copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void run_copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void run_copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void run_fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count) = 0;
  virtual void run_convert(void* dst, DType dst_type, const void* src, DType src_type,
                           int64_t count) = 0;

 private:
  BackendInfo info_;
  std::unique_ptr<PrimitiveProfile> profile_;
  BackendCapability* capabilities_[static_cast<int>(Capability::Count)] = {};
  std::string missing_why_[static_cast<int>(Capability::Count)];
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

}  // namespace ampx::impl
