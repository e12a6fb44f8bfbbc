// runtime.cpp (CUDA emulator) -- the runtime API of include/cuda_runtime_api.h
// over host memory and host threads: one emulated device, streams that run
// their work in order on a thread of their own, stream capture into graphs,
// stream-ordered pools, pinned memory and the thread's last error.
//
// What it checks that a GPU would also refuse or get wrong:
//   - device memory is a registry of allocations: cuBLASLt's operands and the
//     pointer queries see host memory as host memory; copies, memsets and
//     cuBLASLt's operands must lie inside an allocation as asked for (not as
//     rounded up to 256 bytes underneath); a new allocation is
//     filled with 0xff bytes (NaN, index -1), as stale device memory would
//     hold garbage, so a kernel reading what nobody wrote shows it;
//   - work runs on the stream's thread while the host goes on, so a result
//     read without a synchronization races, as on a GPU;
//   - while a stream is captured (thread-local or global mode), what cannot
//     be in a graph fails with cudaErrorStreamCaptureUnsupported and
//     invalidates the capture: synchronizing or querying the stream, a
//     synchronous cudaMalloc/cudaFree/cudaMemcpy/cudaMemset or device
//     synchronization on the capturing thread, a copy to or from pageable
//     host memory;
//   - a fault inside a kernel (a barrier deadlock, see grid.cpp) stops the
//     process with its description: on a GPU it is a sticky error that
//     every later call returns.
// Device properties: compute capability 9.0, 4 multiprocessors of 2048
// threads (few resident blocks keep the emulation quick while still giving
// multi-block grids), 4 GiB of memory.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "emulator.h"

struct CUstream_st;
struct CUgraph_st;
struct CUgraphExec_st;
struct CUmemPoolHandle_st {
  size_t used = 0;
  size_t used_high = 0;
};

namespace ampx_emu {
namespace {

constexpr size_t kTotalMemory = size_t{4} << 30;
constexpr size_t kAllocationAlignment = 256;

thread_local cudaError_t last_error = cudaSuccess;

[[noreturn]] void device_fault(const std::string& message) {
  std::fprintf(stderr, "ampx CUDA emulator: device fault: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

// ---- memory ------------------------------------------------------------------

enum class MemoryKind { Device, Pinned };

struct Allocation {
  size_t bytes;      // as allocated: rounded up to kAllocationAlignment
  size_t requested;  // as asked for: what accesses are checked against
  MemoryKind kind;
  CUmemPoolHandle_st* pool;
  const void* graph;  // the graph whose capture made it, while that graph lives
  bool freed;         // a free was issued (graph memory: inside or outside the graph)
};

struct Memory {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> allocations;
  size_t device_bytes = 0;
};

Memory& memory() {
  static Memory* m = new Memory;  // outlives every static destructor that frees
  return *m;
}

cudaError_t allocate(void** ptr, size_t bytes, MemoryKind kind, CUmemPoolHandle_st* pool,
                     const void* graph) {
  if (ptr == nullptr) return record_error(cudaErrorInvalidValue);
  *ptr = nullptr;
  const size_t size = std::max<size_t>(1, (bytes + kAllocationAlignment - 1) /
                                              kAllocationAlignment * kAllocationAlignment);
  Memory& m = memory();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (kind == MemoryKind::Device && (size > kTotalMemory || m.device_bytes + size > kTotalMemory))
      return record_error(cudaErrorMemoryAllocation);
    if (kind == MemoryKind::Device) m.device_bytes += size;
  }
  void* p = std::aligned_alloc(kAllocationAlignment, size);
  if (p == nullptr) {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (kind == MemoryKind::Device) m.device_bytes -= size;
    return record_error(cudaErrorMemoryAllocation);
  }
  if (kind == MemoryKind::Device) std::memset(p, 0xff, size);
  std::lock_guard<std::mutex> lock(m.mutex);
  m.allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{size, bytes, kind, pool, graph, false};
  if (pool != nullptr) {
    pool->used += size;
    pool->used_high = std::max(pool->used_high, pool->used);
  }
  *ptr = p;
  return cudaSuccess;
}

// Frees an allocation of `kind` starting at `ptr`; false when there is none.
bool release(void* ptr, MemoryKind kind) {
  Memory& m = memory();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    const auto it = m.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == m.allocations.end() || it->second.kind != kind) return false;
    if (kind == MemoryKind::Device) m.device_bytes -= it->second.bytes;
    if (it->second.pool != nullptr) it->second.pool->used -= it->second.bytes;
    m.allocations.erase(it);
  }
  std::free(ptr);
  return true;
}

// The allocation containing `ptr`, if any (copied out under the lock).
bool find_allocation(const void* ptr, uintptr_t* base, Allocation* found) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  auto it = m.allocations.upper_bound(p);
  if (it == m.allocations.begin()) return false;
  --it;
  if (p >= it->first + it->second.bytes) return false;
  *base = it->first;
  *found = it->second;
  return true;
}

bool is_pinned(const void* ptr) {
  uintptr_t base = 0;
  Allocation a{};
  return find_allocation(ptr, &base, &a) && a.kind == MemoryKind::Pinned;
}

// ---- graphs ------------------------------------------------------------------

// Memory taken while capturing belongs to the graph, as the runtime's graph
// allocations do: its address stays reserved for every replay even once
// freed (in the graph or after a replay), and is released with the graph;
// memory never freed outlives the graph and is the program's to free.
struct GraphData {
  std::vector<std::function<void()>> work;
  std::vector<void*> owned;
  ~GraphData() {
    std::vector<void*> freed;
    {
      Memory& m = memory();
      std::lock_guard<std::mutex> lock(m.mutex);
      for (void* p : owned) {
        const auto it = m.allocations.find(reinterpret_cast<uintptr_t>(p));
        if (it == m.allocations.end() || it->second.graph != this) continue;
        if (it->second.freed) freed.push_back(p);
        it->second.graph = nullptr;
      }
    }
    for (void* p : freed) release(p, MemoryKind::Device);
  }
};

}  // namespace
}  // namespace ampx_emu

struct CUgraph_st {
  std::shared_ptr<ampx_emu::GraphData> data;
};
struct CUgraphExec_st {
  std::shared_ptr<ampx_emu::GraphData> data;
};

// ---- streams -----------------------------------------------------------------

struct CUstream_st {
  bool blocking = true;  // synchronises with the legacy default stream
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  bool running = false;  // the worker is executing an item
  bool stopping = false;
  std::thread worker;

  // Capture state, under `mutex`.
  std::shared_ptr<ampx_emu::GraphData> capture;
  bool capture_invalidated = false;
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;

  void work() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      std::function<void()> item = std::move(queue.front());
      queue.pop_front();
      running = true;
      lock.unlock();
      try {
        item();
      } catch (const ampx_emu::DeviceFault& fault) {
        ampx_emu::device_fault(fault.what());
      }
      lock.lock();
      running = false;
      changed.notify_all();
    }
  }

  bool idle() const { return queue.empty() && !running; }
};

struct CUevent_st {
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t recorded = 0;   // records made (host side)
  uint64_t completed = 0;  // the highest record whose marked work has run
};

namespace ampx_emu {
namespace {

// Live streams by handle. Walks over them (device synchronization) hold a
// reference, so a stream destroyed meanwhile by another thread stays valid
// until they are done with it.
struct Streams {
  std::mutex mutex;
  std::map<CUstream_st*, std::shared_ptr<CUstream_st>> live;
};

Streams& streams() {
  static Streams* s = new Streams;
  return *s;
}

bool is_live(cudaStream_t stream) {
  Streams& s = streams();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.live.count(stream) != 0;
}

void wait_idle(CUstream_st* stream) {
  std::unique_lock<std::mutex> lock(stream->mutex);
  stream->changed.wait(lock, [&] { return stream->idle(); });
}

// Work on the legacy default stream (nullptr) waits for every blocking
// stream and then runs at once, on the calling thread.
std::vector<std::shared_ptr<CUstream_st>> live_streams() {
  Streams& s = streams();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<std::shared_ptr<CUstream_st>> all;
  for (const auto& entry : s.live) all.push_back(entry.second);
  return all;
}

void wait_blocking_streams() {
  for (const auto& stream : live_streams())
    if (stream->blocking) wait_idle(stream.get());
}

// Captures this thread must not break: those it began in global or
// thread-local mode, and every global-mode capture.
bool capture_forbids_unsafe_calls() {
  Streams& s = streams();
  std::lock_guard<std::mutex> lock(s.mutex);
  bool forbidden = false;
  for (const auto& entry : s.live) {
    CUstream_st* st = entry.first;
    std::lock_guard<std::mutex> stream_lock(st->mutex);
    if (!st->capture) continue;
    const bool applies = st->capture_mode == cudaStreamCaptureModeGlobal ||
                         (st->capture_mode == cudaStreamCaptureModeThreadLocal &&
                          st->capture_thread == std::this_thread::get_id());
    if (applies) {
      st->capture_invalidated = true;
      forbidden = true;
    }
  }
  return forbidden;
}

// A call that may not happen during a capture: fails it and invalidates the
// captures it would break.
cudaError_t refuse_if_capturing() {
  return capture_forbids_unsafe_calls() ? record_error(cudaErrorStreamCaptureUnsupported)
                                        : cudaSuccess;
}

bool capturing(CUstream_st* stream) {
  std::lock_guard<std::mutex> lock(stream->mutex);
  return stream->capture != nullptr;
}

void invalidate_capture(CUstream_st* stream) {
  std::lock_guard<std::mutex> lock(stream->mutex);
  if (stream->capture) stream->capture_invalidated = true;
}

// The graph `stream` is capturing into, or nullptr.
std::shared_ptr<GraphData> capture_of(cudaStream_t stream) {
  if (stream == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(stream->mutex);
  return stream->capture;
}

void synchronize_all() {
  for (const auto& stream : live_streams()) wait_idle(stream.get());
}

cudaError_t create_stream(cudaStream_t* out, bool blocking) {
  if (out == nullptr) return record_error(cudaErrorInvalidValue);
  auto stream = std::make_shared<CUstream_st>();
  stream->blocking = blocking;
  CUstream_st* handle = stream.get();
  stream->worker = std::thread([handle] { handle->work(); });
  Streams& s = streams();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.live[handle] = std::move(stream);
  *out = handle;
  return cudaSuccess;
}

// Copies between host and device memory, in stream order. A pageable host
// source is read now (the runtime stages it before returning); a copy to
// pageable host memory returns only when done, as the runtime's does.
cudaError_t copy_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return record_error(cudaErrorInvalidValue);
  uintptr_t base = 0;
  Allocation a{};
  const bool dst_device = find_allocation(dst, &base, &a) && a.kind == MemoryKind::Device;
  const bool src_device = find_allocation(src, &base, &a) && a.kind == MemoryKind::Device;
  if (!dst_device && !src_device) {
    std::memmove(dst, src, bytes);  // host to host
    return cudaSuccess;
  }
  // The device side must lie inside its allocation (as asked for, not as
  // rounded up): a copy past a tensor's end is a bug a GPU may not show.
  if ((dst_device && !is_device_memory(dst, bytes)) || (src_device && !is_device_memory(src, bytes)))
    return record_error(cudaErrorInvalidValue);
  const bool pageable_src = !src_device && !is_pinned(src);
  const bool pageable_dst = !dst_device && !is_pinned(dst);
  if (stream != nullptr && capturing(stream) && (pageable_src || pageable_dst)) {
    invalidate_capture(stream);
    return record_error(cudaErrorStreamCaptureUnsupported);
  }
  if (pageable_src) {
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    return enqueue(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  }
  const cudaError_t status = enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  if (status == cudaSuccess && pageable_dst && stream != nullptr) wait_idle(stream);
  return status;
}

struct Events {
  std::mutex mutex;
  std::map<CUevent_st*, std::shared_ptr<CUevent_st>> live;
};

Events& events() {
  static Events* e = new Events;
  return *e;
}

std::shared_ptr<CUevent_st> live_event(cudaEvent_t event) {
  Events& e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  const auto it = e.live.find(event);
  return it == e.live.end() ? nullptr : it->second;
}

}  // namespace

cudaError_t record_error(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

bool is_device_memory(const void* ptr, size_t bytes) {
  uintptr_t base = 0;
  Allocation a{};
  if (!find_allocation(ptr, &base, &a) || a.kind != MemoryKind::Device) return false;
  return reinterpret_cast<uintptr_t>(ptr) - base + bytes <= a.requested;
}

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work) {
  if (stream == nullptr) {
    wait_blocking_streams();
    try {
      work();
    } catch (const DeviceFault& fault) {
      device_fault(fault.what());
    }
    return cudaSuccess;
  }
  if (!is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(stream->mutex);
  if (stream->capture) {
    if (stream->capture_invalidated) return record_error(cudaErrorStreamCaptureInvalidated);
    stream->capture->work.push_back(std::move(work));
    return cudaSuccess;
  }
  stream->queue.push_back(std::move(work));
  stream->changed.notify_all();
  return cudaSuccess;
}

}  // namespace ampx_emu

using namespace ampx_emu;

// ---- errors ------------------------------------------------------------------

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorCallRequiresNewerDriver: return "cudaErrorCallRequiresNewerDriver";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    default: return cudaGetErrorName(error);
  }
}

// ---- devices -----------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return record_error(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : record_error(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return record_error(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

// The emulated device is a compute capability 9.0 one (Hopper), unless
// AMPX_EMULATOR_COMPUTE_CAPABILITY says otherwise ("8.0": an A100, which
// lacks FP8 products), read at each query so a test can change it before
// it creates a context.
static int emulated_compute_capability(bool major) {
  const char* text = std::getenv("AMPX_EMULATOR_COMPUTE_CAPABILITY");
  int ma = 9, mi = 0;
  if (text != nullptr && std::sscanf(text, "%d.%d", &ma, &mi) != 2) ma = 9, mi = 0;
  return major ? ma : mi;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (value == nullptr) return record_error(cudaErrorInvalidValue);
  if (device != 0) return record_error(cudaErrorInvalidDevice);
  switch (attribute) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 4; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = emulated_compute_capability(true); return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = emulated_compute_capability(false); return cudaSuccess;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; return cudaSuccess;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; return cudaSuccess;
  }
  return record_error(cudaErrorInvalidValue);
}

cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t refused = refuse_if_capturing()) return refused;
  synchronize_all();
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return record_error(cudaErrorInvalidValue);
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  *total_bytes = kTotalMemory;
  *free_bytes = kTotalMemory - m.device_bytes;
  return cudaSuccess;
}

// ---- streams and graphs ------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return create_stream(stream, true); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (flags & ~cudaStreamNonBlocking) return record_error(cudaErrorInvalidValue);
  return create_stream(stream, (flags & cudaStreamNonBlocking) == 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || !is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (capturing(stream)) {
    invalidate_capture(stream);
    return record_error(cudaErrorStreamCaptureUnsupported);
  }
  std::shared_ptr<CUstream_st> owner;
  {
    Streams& s = streams();
    std::lock_guard<std::mutex> lock(s.mutex);
    const auto it = s.live.find(stream);
    if (it == s.live.end()) return record_error(cudaErrorInvalidResourceHandle);
    owner = std::move(it->second);
    s.live.erase(it);
  }
  // The runtime releases the stream once its queued work is done; the worker
  // finishes the queue before it stops.
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->stopping = true;
    stream->changed.notify_all();
  }
  stream->worker.join();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream == nullptr) {  // the legacy stream's work ran when it was enqueued
    if (const cudaError_t refused = refuse_if_capturing()) return refused;
    wait_blocking_streams();
    return cudaSuccess;
  }
  if (!is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (capturing(stream)) {
    invalidate_capture(stream);
    return record_error(cudaErrorStreamCaptureUnsupported);
  }
  wait_idle(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (stream == nullptr) return cudaSuccess;
  if (!is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (capturing(stream)) {
    invalidate_capture(stream);
    return record_error(cudaErrorStreamCaptureUnsupported);
  }
  std::lock_guard<std::mutex> lock(stream->mutex);
  return stream->idle() ? cudaSuccess : record_error(cudaErrorNotReady);
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  if (device == nullptr) return record_error(cudaErrorInvalidValue);
  if (stream != nullptr && !is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return record_error(cudaErrorInvalidValue);
  *status = cudaStreamCaptureStatusNone;
  if (stream == nullptr) return cudaSuccess;
  if (!is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(stream->mutex);
  if (stream->capture)
    *status = stream->capture_invalidated ? cudaStreamCaptureStatusInvalidated
                                          : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (stream == nullptr) return record_error(cudaErrorStreamCaptureUnsupported);
  if (!is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(stream->mutex);
  if (stream->capture) return record_error(cudaErrorIllegalState);
  stream->capture = std::make_shared<GraphData>();
  stream->capture_invalidated = false;
  stream->capture_mode = mode;
  stream->capture_thread = std::this_thread::get_id();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return record_error(cudaErrorInvalidValue);
  *graph = nullptr;
  if (stream == nullptr || !is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  std::shared_ptr<GraphData> captured;
  bool invalidated = false;
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    if (!stream->capture) return record_error(cudaErrorIllegalState);
    if (stream->capture_mode != cudaStreamCaptureModeRelaxed &&
        stream->capture_thread != std::this_thread::get_id())
      return record_error(cudaErrorStreamCaptureWrongThread);
    captured = std::move(stream->capture);
    stream->capture = nullptr;
    invalidated = stream->capture_invalidated;
    stream->capture_invalidated = false;
  }
  if (invalidated) return record_error(cudaErrorStreamCaptureInvalidated);
  *graph = new CUgraph_st{std::move(captured)};
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return record_error(cudaErrorInvalidValue);
  return enqueue(stream, [fn, user_data] { fn(user_data); });
}

// ---- events -------------------------------------------------------------------
// An event counts the records made of it and the records whose marked work
// has run: a record enqueues "completed = n" on its stream, a wait enqueues
// "until completed >= the records made so far". Records and waits inside a
// capture are refused (the emulator does not model cross-stream graphs).

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr || (flags & ~cudaEventDisableTiming) != 0)
    return record_error(cudaErrorInvalidValue);
  auto created = std::make_shared<CUevent_st>();
  Events& e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  *event = created.get();
  e.live[created.get()] = std::move(created);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Events& e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  // Work already enqueued that refers to the event keeps it alive.
  if (e.live.erase(event) == 0) return record_error(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::shared_ptr<CUevent_st> owner = live_event(event);
  if (!owner) return record_error(cudaErrorInvalidResourceHandle);
  if (stream != nullptr && capturing(stream)) {
    invalidate_capture(stream);
    return record_error(cudaErrorStreamCaptureUnsupported);
  }
  uint64_t mark = 0;
  {
    std::lock_guard<std::mutex> lock(owner->mutex);
    mark = ++owner->recorded;
  }
  return enqueue(stream, [owner, mark] {
    std::lock_guard<std::mutex> lock(owner->mutex);
    if (owner->completed < mark) owner->completed = mark;
    owner->changed.notify_all();
  });
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  std::shared_ptr<CUevent_st> owner = live_event(event);
  if (!owner || flags != 0)
    return record_error(owner ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
  if (stream != nullptr && capturing(stream)) {
    invalidate_capture(stream);
    return record_error(cudaErrorStreamCaptureUnsupported);
  }
  uint64_t mark = 0;
  {
    std::lock_guard<std::mutex> lock(owner->mutex);
    mark = owner->recorded;
  }
  if (mark == 0) return cudaSuccess;  // never recorded: nothing to wait for
  return enqueue(stream, [owner, mark] {
    std::unique_lock<std::mutex> lock(owner->mutex);
    owner->changed.wait(lock, [&] { return owner->completed >= mark; });
  });
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::shared_ptr<CUevent_st> owner = live_event(event);
  if (!owner) return record_error(cudaErrorInvalidResourceHandle);
  if (const cudaError_t refused = refuse_if_capturing()) return refused;
  std::unique_lock<std::mutex> lock(owner->mutex);
  const uint64_t mark = owner->recorded;
  owner->changed.wait(lock, [&] { return owner->completed >= mark; });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::shared_ptr<CUevent_st> owner = live_event(event);
  if (!owner) return record_error(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(owner->mutex);
  return owner->completed >= owner->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return record_error(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->data};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return record_error(cudaErrorInvalidValue);
  std::shared_ptr<GraphData> data = exec->data;
  return enqueue(stream, [data] {
    for (const auto& item : data->work) item();
  });
}

// Destroying a graph that is still running is allowed: the work holds the
// recording.
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (exec == nullptr) return record_error(cudaErrorInvalidValue);
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (graph == nullptr) return record_error(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}

// ---- memory ------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (const cudaError_t refused = refuse_if_capturing()) return refused;
  return allocate(ptr, bytes, MemoryKind::Device, nullptr, nullptr);
}

// Like the runtime's, waits for the device first: queued work may still use
// the memory.
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (const cudaError_t refused = refuse_if_capturing()) return refused;
  synchronize_all();
  {
    Memory& m = memory();
    std::lock_guard<std::mutex> lock(m.mutex);
    const auto it = m.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != m.allocations.end() && it->second.graph != nullptr) {
      if (it->second.freed) return record_error(cudaErrorInvalidValue);
      it->second.freed = true;  // graph memory: see GraphData
      return cudaSuccess;
    }
  }
  return release(ptr, MemoryKind::Device) ? cudaSuccess : record_error(cudaErrorInvalidValue);
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  if (const cudaError_t refused = refuse_if_capturing()) return refused;
  return allocate(ptr, bytes, MemoryKind::Pinned, nullptr, nullptr);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (const cudaError_t refused = refuse_if_capturing()) return refused;
  synchronize_all();
  return release(ptr, MemoryKind::Pinned) ? cudaSuccess : record_error(cudaErrorInvalidValue);
}

// On the legacy default stream, which waits for blocking streams only: a
// program that reads what a non-blocking stream (ampx's own) computes must
// synchronise that stream first, here as on a GPU.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (const cudaError_t refused = refuse_if_capturing()) return refused;
  return copy_async(dst, src, bytes, nullptr);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  return copy_async(dst, src, bytes, stream);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (const cudaError_t refused = refuse_if_capturing()) return refused;
  return cudaMemsetAsync(dst, value, bytes, nullptr);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!is_device_memory(dst, bytes)) return record_error(cudaErrorInvalidValue);
  return enqueue(stream, [dst, value, bytes] { std::memset(dst, value, bytes); });
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return record_error(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{cudaMemoryTypeUnregistered, -2, nullptr, nullptr};
  uintptr_t base = 0;
  Allocation a{};
  if (!find_allocation(ptr, &base, &a)) return cudaSuccess;
  void* p = const_cast<void*>(ptr);
  if (a.kind == MemoryKind::Device) {
    *attributes = cudaPointerAttributes{cudaMemoryTypeDevice, 0, p, nullptr};
  } else {
    *attributes = cudaPointerAttributes{cudaMemoryTypeHost, 0, p, p};
  }
  return cudaSuccess;
}

// ---- stream-ordered pools ----------------------------------------------------

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr || props->location.type != cudaMemLocationTypeDevice ||
      props->allocType != cudaMemAllocationTypePinned)
    return record_error(cudaErrorInvalidValue);
  if (props->location.id != 0) return record_error(cudaErrorInvalidDevice);
  *pool = new CUmemPoolHandle_st;
  return cudaSuccess;
}

// Allocations still out stay valid, as the runtime's do until freed.
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  if (pool == nullptr) return record_error(cudaErrorInvalidValue);
  {
    Memory& m = memory();
    std::lock_guard<std::mutex> lock(m.mutex);
    for (auto& entry : m.allocations)
      if (entry.second.pool == pool) entry.second.pool = nullptr;
  }
  delete pool;
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) {
  if (pool == nullptr || value == nullptr) return record_error(cudaErrorInvalidValue);
  return attribute == cudaMemPoolAttrReleaseThreshold ? cudaSuccess
                                                      : record_error(cudaErrorInvalidValue);
}

// The emulated pool caches nothing: what it has reserved is what is in use.
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) {
  if (pool == nullptr || value == nullptr) return record_error(cudaErrorInvalidValue);
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  uint64_t result = 0;
  switch (attribute) {
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent: result = pool->used; break;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh: result = pool->used_high; break;
    default: return record_error(cudaErrorInvalidValue);
  }
  std::memcpy(value, &result, sizeof result);
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t) {
  return pool == nullptr ? record_error(cudaErrorInvalidValue) : cudaSuccess;
}

// The memory is taken at once, as the runtime gives an address at once.
// Taken while the stream is captured, it belongs to the graph: valid at
// every replay, freed with the graph unless freed outside it first.
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t bytes, cudaMemPool_t pool,
                                    cudaStream_t stream) {
  if (pool == nullptr) return record_error(cudaErrorInvalidValue);
  if (stream != nullptr && !is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  const std::shared_ptr<GraphData> graph = capture_of(stream);
  const cudaError_t status = allocate(ptr, bytes, MemoryKind::Device, pool, graph.get());
  if (status == cudaSuccess && graph) {
    std::lock_guard<std::mutex> lock(stream->mutex);
    graph->owned.push_back(*ptr);
  }
  return status;
}

// Refused (cudaErrorInvalidValue): a pointer that does not start a device
// allocation, a second free of one, and, during a capture, memory the graph
// did not allocate itself -- every replay would free it again.
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return cudaSuccess;
  if (stream != nullptr && !is_live(stream)) return record_error(cudaErrorInvalidResourceHandle);
  const std::shared_ptr<GraphData> capture = capture_of(stream);
  {
    Memory& m = memory();
    std::lock_guard<std::mutex> lock(m.mutex);
    const auto it = m.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == m.allocations.end() || it->second.kind != MemoryKind::Device || it->second.freed)
      return record_error(cudaErrorInvalidValue);
    Allocation& a = it->second;
    if (a.graph != nullptr) {  // graph memory: see GraphData
      a.freed = true;
      return cudaSuccess;
    }
    if (!capture) a.freed = true;
  }
  if (capture) {
    invalidate_capture(stream);
    return record_error(cudaErrorInvalidValue);
  }
  return enqueue(stream, [ptr] { release(ptr, MemoryKind::Device); });
}
