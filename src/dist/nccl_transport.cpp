// nccl_transport.cpp -- the NCCL transport: libnccl loaded with dlopen the
// first time a program makes a communicator for a CUDA context, so that
// libampx neither links NCCL nor needs it on machines without one. The few
// declarations of NCCL's C API (2.x) that ampx calls are made here rather
// than taken from nccl.h, which the build may not have.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/optional_library.h"
#include "platform/platform.h"
#include "dist/communicator.h"

namespace ampx::impl {
namespace {

// NCCL's ABI subset: ncclComm_t and cudaStream_t are opaque pointers, the
// enums are ints.
struct NcclUniqueId {
  char internal[kNcclUniqueIdBytes];
};
constexpr int kSuccess = 0, kInProgress = 7;  // ncclResult_t
constexpr int kInt8 = 0, kInt32 = 2, kInt64 = 4, kFloat16 = 6, kFloat32 = 7,
              kBfloat16 = 9;                 // ncclDataType_t
constexpr int kSum = 0, kMax = 2, kMin = 3;  // ncclRedOp_t
// ncclGetVersion's code of 2.10.0, the first NCCL with ncclBfloat16.
constexpr int kBfloat16Version = 21000;

struct Nccl {
  std::string path;
  int version = 0;
  int (*get_unique_id)(NcclUniqueId*);
  int (*comm_init_rank)(void**, int, NcclUniqueId, int);
  int (*comm_destroy)(void*);
  int (*comm_abort)(void*);
  int (*comm_count)(void*, int*);
  int (*comm_user_rank)(void*, int*);
  int (*comm_cu_device)(void*, int*);
  int (*comm_get_async_error)(void*, int*);
  const char* (*get_error_string)(int);
  int (*all_reduce)(const void*, void*, size_t, int, int, void*, void*);
  int (*broadcast)(const void*, void*, size_t, int, int, void*, void*);
  int (*all_gather)(const void*, void*, size_t, int, void*, void*);
  int (*reduce_scatter)(const void*, void*, size_t, int, int, void*, void*);
  int (*get_version)(int*);
};

template <class Fn>
void resolve(void* handle, const std::string& path, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(platform::library_symbol(handle, name));
  if (fn) return;
  platform::close_library(handle);
  fail(AMPX_ERR_NOT_SUPPORTED, "the NCCL library ", path, " has no ", name,
       " (ampx needs NCCL 2.4 or newer)");
}

const Nccl& load_nccl() {
  static std::mutex mutex;
  static const Nccl* loaded = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded) return *loaded;
  // By the loader rule of optional libraries (core/optional_library.h). By
  // its soname dlopen finds a libnccl the program has loaded already (a
  // framework's), so a host's communicator meets the NCCL that made it.
  LibrarySearch search("NCCL", "AMPX_NCCL_LIBRARY", {"libnccl.so.2", "libnccl.so"});
  void* handle = search.open();
  if (!handle) fail(AMPX_ERR_NOT_SUPPORTED, "NCCL support is not available: ", search.error());
  const std::string path = search.path();
  auto nccl = std::make_unique<Nccl>();
  nccl->path = path;
  resolve(handle, path, "ncclGetUniqueId", nccl->get_unique_id);
  resolve(handle, path, "ncclCommInitRank", nccl->comm_init_rank);
  resolve(handle, path, "ncclCommDestroy", nccl->comm_destroy);
  resolve(handle, path, "ncclCommAbort", nccl->comm_abort);
  resolve(handle, path, "ncclCommCount", nccl->comm_count);
  resolve(handle, path, "ncclCommUserRank", nccl->comm_user_rank);
  resolve(handle, path, "ncclCommCuDevice", nccl->comm_cu_device);
  resolve(handle, path, "ncclCommGetAsyncError", nccl->comm_get_async_error);
  resolve(handle, path, "ncclGetErrorString", nccl->get_error_string);
  resolve(handle, path, "ncclAllReduce", nccl->all_reduce);
  resolve(handle, path, "ncclBroadcast", nccl->broadcast);
  resolve(handle, path, "ncclAllGather", nccl->all_gather);
  resolve(handle, path, "ncclReduceScatter", nccl->reduce_scatter);
  resolve(handle, path, "ncclGetVersion", nccl->get_version);
  if (nccl->get_version(&nccl->version) != kSuccess) nccl->version = 0;
  loaded = nccl.release();  // kept loaded for the process, like the library itself
  return *loaded;
}

const char* error_text(const Nccl& nccl, int result) {
  const char* text = nccl.get_error_string(result);
  return text ? text : "unknown NCCL error";
}

// A nonblocking communicator (made so by the host) answers ncclInProgress
// while it enqueues in the background; NCCL asks that its asynchronous
// state leave ncclInProgress before the next call on it. `comm` is nullptr
// for calls that have none (or none left, after ncclCommAbort).
void check(const Nccl& nccl, void* comm, int result, const char* what) {
  while (result == kInProgress && comm) {
    std::this_thread::yield();
    int state = kSuccess;
    const int asked = nccl.comm_get_async_error(comm, &state);
    result = asked != kSuccess ? asked : state;
  }
  if (result != kSuccess) fail(AMPX_ERR_DEVICE, what, " failed: ", error_text(nccl, result));
}

int nccl_type(const Nccl& nccl, DType dtype) {
  switch (dtype) {
    case DType::F32:
      return kFloat32;
    case DType::F16:
      return kFloat16;
    case DType::I32:
      return kInt32;
    case DType::I64:
      return kInt64;
    case DType::BF16:
      if (nccl.version < kBfloat16Version)
        fail(AMPX_ERR_NOT_SUPPORTED, "bf16 collectives need NCCL 2.10 or newer; ", nccl.path,
             " reports version code ", nccl.version);
      return kBfloat16;
    case DType::F8E4M3:
    case DType::F8E5M2:
      break;  // ampx reduces no FP8 data (amaxes go as int32)
  }
  fail(AMPX_ERR_DTYPE, "no NCCL type for dtype ", static_cast<int32_t>(dtype));
}

int nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return kSum;
    case ReduceOp::Max:
      return kMax;
    case ReduceOp::Min:
      return kMin;
  }
  return kSum;
}

// The host never waits on a training step's collectives (they are ordered
// on the device by events), so a watchdog thread watches them, as torch's
// ProcessGroupNCCL does: each collective is followed by an event, and one
// that has not completed the timeout after it was enqueued aborts the
// communicator (ncclCommAbort ends its kernels, so nothing on the device
// or the host waits on them any more); every later call fails, naming it.
class NcclTransport final : public Transport {
 public:
  // `owned`: ampx made the communicator and destroys it; otherwise the host does.
  NcclTransport(const Nccl& nccl, DeviceContext& ctx, void* comm, bool owned, int rank, int size)
      : nccl_(nccl),
        backend_(ctx.backend()),
        comm_(comm),
        owned_(owned),
        rank_(rank),
        size_(size) {}
  ~NcclTransport() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    pending_.clear();
    spare_.clear();
    if (!comm_ || !owned_) return;
    try {
      backend_.make_current();
      nccl_.comm_destroy(comm_);
    } catch (...) {
    }
  }

  const char* library() const override { return "NCCL"; }
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  // Each collective is enqueued without holding mutex_: an enqueue may
  // block while the device is stalled on a dead peer's collective (a full
  // launch queue), and the watchdog must then still be able to abort.
  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Stream stream) override {
    if (count <= 0) return;
    const int type = nccl_type(nccl_, dtype);
    void* native = nullptr;
    void* comm = usable(stream, &native);
    check(nccl_, comm,
          nccl_.all_reduce(data, data, static_cast<size_t>(count), type, nccl_op(op), comm, native),
          "ncclAllReduce");
    watch(stream, cat("ncclAllReduce of ", count, " ", dtype_name(dtype), " elements"));
  }
  void broadcast(void* data, size_t bytes, int32_t root, Stream stream) override {
    if (bytes == 0) return;
    void* native = nullptr;
    void* comm = usable(stream, &native);
    check(nccl_, comm, nccl_.broadcast(data, data, bytes, kInt8, root, comm, native),
          "ncclBroadcast");
    watch(stream, cat("ncclBroadcast of ", bytes, " bytes"));
  }
  void all_gather(const void* send, void* recv, size_t bytes, Stream stream) override {
    if (bytes == 0) return;
    void* native = nullptr;
    void* comm = usable(stream, &native);
    check(nccl_, comm, nccl_.all_gather(send, recv, bytes, kInt8, comm, native), "ncclAllGather");
    watch(stream, cat("ncclAllGather of ", bytes, " bytes per rank"));
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                      Stream stream) override {
    if (count <= 0) return;
    const int type = nccl_type(nccl_, dtype);
    void* native = nullptr;
    void* comm = usable(stream, &native);
    check(nccl_, comm,
          nccl_.reduce_scatter(send, recv, static_cast<size_t>(count), type, nccl_op(op), comm,
                               native),
          "ncclReduceScatter");
    watch(stream, cat("ncclReduceScatter of ", count, " ", dtype_name(dtype), " elements per rank"));
  }
  void check_async_error() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!comm_) return;
    int state = kSuccess;
    const int result = nccl_.comm_get_async_error(comm_, &state);
    if (result != kSuccess) state = result;
    if (state != kSuccess && state != kInProgress)
      fail(AMPX_ERR_DEVICE,
           "the NCCL communicator reported an asynchronous error: ", error_text(nccl_, state));
  }
  void abort() override {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_locked();
  }
  void set_timeout(double seconds) override {
    std::lock_guard<std::mutex> lock(mutex_);
    timeout_seconds_ = seconds;
  }
  std::string timed_out() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return timed_out_;
  }

 private:
  struct Pending {
    std::unique_ptr<DeviceEvent> event;  // recorded after the collective
    std::chrono::steady_clock::time_point since;
    std::string what;
  };

  // The communicator to enqueue on and the stream (*native, a
  // cudaStream_t), with the device made current (NCCL works on it).
  void* usable(Stream stream, void** native) {
    void* comm = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      comm = comm_;
    }
    if (!comm) fail(AMPX_ERR_DEVICE, "the NCCL communicator was aborted");
    backend_.make_current();
    *native = backend_.native_stream(stream);
    return comm;
  }

  // After a collective was enqueued on `stream`: an event the watchdog
  // polls.
  void watch(Stream stream, std::string what) {
    std::unique_ptr<DeviceEvent> event;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!spare_.empty()) {
        event = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (!event) event = backend_.make_event();
    backend_.record_event(*event, stream);
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back({std::move(event), now, std::move(what)});
    if (!watchdog_.joinable()) watchdog_ = std::thread([this] { run_watchdog(); });
  }

  void run_watchdog() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      // Often enough to notice a timeout within a tenth of it (or 100 ms).
      const double poll = std::min(0.1, timeout_seconds_ / 10.0);
      wake_.wait_for(lock, std::chrono::duration<double>(poll));
      while (!pending_.empty()) {
        Pending& oldest = pending_.front();
        bool completed = true;
        try {
          completed = backend_.event_completed(*oldest.event);
        } catch (...) {
          // A device failure: the program's next synchronization reports it.
        }
        if (completed) {
          spare_.push_back(std::move(oldest.event));
          pending_.pop_front();
          continue;
        }
        const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - oldest.since;
        if (waited.count() > timeout_seconds_) {
          timed_out_ = cat(oldest.what, " did not complete within ", timeout_seconds_,
                           " s (ampx_comm_set_timeout): a rank died, hangs, or stopped calling "
                           "collectives; the watchdog aborted the communicator (ncclCommAbort)");
          try {
            abort_locked();
          } catch (...) {
          }
        }
        break;
      }
    }
  }

  // With mutex_ held.
  void abort_locked() {
    pending_.clear();
    if (!comm_) return;
    void* comm = comm_;
    comm_ = nullptr;  // ncclCommAbort frees it, whatever it answers
    backend_.make_current();
    check(nccl_, nullptr, nccl_.comm_abort(comm), "ncclCommAbort");
  }

  const Nccl& nccl_;
  Backend& backend_;
  void* comm_;
  bool owned_;
  int32_t rank_;
  int32_t size_;
  mutable std::mutex mutex_;  // comm_ and everything below, shared with the watchdog
  std::condition_variable wake_;
  std::deque<Pending> pending_;  // in enqueue order
  std::vector<std::unique_ptr<DeviceEvent>> spare_;
  std::string timed_out_;
  bool stop_ = false;
  std::thread watchdog_;
};

void require_cuda(DeviceContext& ctx) {
  Backend& backend = ctx.backend();
  if (backend.device_type() != AMPX_DEVICE_CUDA)
    fail(AMPX_ERR_NOT_SUPPORTED, "NCCL communicators move CUDA device memory; this context is ",
         backend.name(), " (CPU contexts use ampx_comm_from_mpi)");
}

// Reads the communicator's rank and size; destroys it on failure when owned.
std::unique_ptr<Transport> make_transport(const Nccl& nccl, DeviceContext& ctx, void* comm,
                                          bool owned) {
  try {
    int rank = 0, size = 0;
    ctx.backend().make_current();
    check(nccl, comm, nccl.comm_user_rank(comm, &rank), "ncclCommUserRank");
    check(nccl, comm, nccl.comm_count(comm, &size), "ncclCommCount");
    return std::make_unique<NcclTransport>(nccl, ctx, comm, owned, rank, size);
  } catch (...) {
    if (owned) nccl.comm_destroy(comm);
    throw;
  }
}

}  // namespace

std::unique_ptr<Transport> open_nccl_transport(DeviceContext& ctx, void* nccl_comm) {
  require_cuda(ctx);
  if (!nccl_comm) fail(AMPX_ERR_INVALID_ARGUMENT, "nccl_comm is NULL");
  const Nccl& nccl = load_nccl();
  int device = -1;
  ctx.backend().make_current();
  check(nccl, nccl_comm, nccl.comm_cu_device(nccl_comm, &device), "ncclCommCuDevice");
  if (device != ctx.backend().device_index())
    fail(AMPX_ERR_DEVICE, "the NCCL communicator is on CUDA device ", device,
         " but the context is on CUDA device ", ctx.backend().device_index());
  return make_transport(nccl, ctx, nccl_comm, false);
}

std::unique_ptr<Transport> create_nccl_transport(DeviceContext& ctx, const void* unique_id,
                                                 int32_t world_size, int32_t rank) {
  require_cuda(ctx);
  if (!unique_id) fail(AMPX_ERR_INVALID_ARGUMENT, "unique_id is NULL");
  if (world_size < 1)
    fail(AMPX_ERR_INVALID_ARGUMENT, "world_size is ", world_size, ", must be >= 1");
  if (rank < 0 || rank >= world_size)
    fail(AMPX_ERR_INVALID_ARGUMENT, "rank is ", rank, ", must be in [0, ", world_size, ")");
  const Nccl& nccl = load_nccl();
  NcclUniqueId id;
  std::memcpy(id.internal, unique_id, kNcclUniqueIdBytes);
  void* comm = nullptr;
  ctx.backend().make_current();
  check(nccl, nullptr, nccl.comm_init_rank(&comm, world_size, id, rank), "ncclCommInitRank");
  return make_transport(nccl, ctx, comm, true);
}

void nccl_unique_id(void* out) {
  const Nccl& nccl = load_nccl();
  NcclUniqueId id{};
  check(nccl, nullptr, nccl.get_unique_id(&id), "ncclGetUniqueId");
  std::memcpy(out, id.internal, kNcclUniqueIdBytes);
}

}  // namespace ampx::impl
