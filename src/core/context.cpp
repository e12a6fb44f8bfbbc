#include "core/context.h"

#include <algorithm>
#include <iterator>
#include <cstdint>

#include "core/backend_conv.h"
#include "core/backend_gemm.h"
#include "core/error.h"

namespace ampx::impl {
namespace {

constexpr size_t kIndexRecordBytes = kRecordFields * sizeof(int64_t);

// Released tensor shells kept per context for use-after-release detection.
// A shell is ~200 bytes, so this bounds the cost at under 1 MiB.
constexpr size_t kQuarantineShells = 4096;

// Memory from the host program's hooks.
class HookAllocator final : public Allocator {
 public:
  HookAllocator(const ampx_allocator& hooks, size_t alignment)
      : hooks_(hooks), alignment_(alignment) {}

  void* allocate(size_t bytes) override {
    void* ptr = hooks_.alloc(hooks_.user_data, bytes, alignment_);
    if (ptr && reinterpret_cast<uintptr_t>(ptr) % alignment_ != 0) {
      hooks_.free(hooks_.user_data, ptr, bytes);
      fail(AMPX_ERR_INVALID_ARGUMENT, "the allocator hook returned ", ptr,
           ", which is not aligned to the requested ", alignment_, " bytes");
    }
    if (ptr) held_ += bytes;
    return ptr;
  }
  void deallocate(void* ptr, size_t bytes) override {
    hooks_.free(hooks_.user_data, ptr, bytes);
    held_ -= bytes;
  }
  uint64_t reserved_bytes() const override { return held_; }

 private:
  ampx_allocator hooks_;
  size_t alignment_;
  uint64_t held_ = 0;
};

}  // namespace

DeviceContext* DeviceContext::create(const ampx_context_options& options) {
  if (options.device_type != AMPX_DEVICE_CPU && options.device_type != AMPX_DEVICE_CUDA)
    fail(AMPX_ERR_INVALID_ARGUMENT, "options.device_type is ", static_cast<int>(options.device_type),
         "; expected AMPX_DEVICE_CPU (1) or AMPX_DEVICE_CUDA (2)");
  if (options.device_index < 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "options.device_index is ", options.device_index,
         "; it must be >= 0");
  if (options.device_type == AMPX_DEVICE_CPU && options.device_index != 0)
    fail(AMPX_ERR_NO_DEVICE, "options.device_index is ", options.device_index,
         " but there is only one CPU device (index 0)");
  if (options.num_threads < 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "options.num_threads is ", options.num_threads,
         "; use 0 for one thread per core or a positive count");
  if ((options.allocator.alloc == nullptr) != (options.allocator.free == nullptr))
    fail(AMPX_ERR_INVALID_ARGUMENT,
         "options.allocator must set both alloc and free, or neither (alloc is ",
         options.allocator.alloc ? "set" : "NULL", ", free is ",
         options.allocator.free ? "set" : "NULL", ")");
  if (options.device_type == AMPX_DEVICE_CPU && options.cuda_stream != nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, "options.cuda_stream must be NULL for a CPU context");

  BackendOptions backend_options;
  backend_options.device_type = options.device_type;
  backend_options.device_index = options.device_index;
  backend_options.num_threads = options.num_threads;
  backend_options.cuda_stream = options.cuda_stream;

  return create_with_backend(options, create_backend(backend_options));
}

DeviceContext* DeviceContext::create_with_backend(const ampx_context_options& options,
                                                  std::unique_ptr<Backend> backend) {
  if (!backend) fail(AMPX_ERR_INTERNAL, "a context needs a backend");
  auto* ctx = new DeviceContext();
  ctx->backend_ = std::move(backend);
  try {
    if (options.allocator.alloc)
      ctx->allocator_ = std::make_unique<HookAllocator>(options.allocator, ctx->backend_->alignment());
    else
      ctx->allocator_ = ctx->backend_->make_default_allocator();
    // Made now, not at the first checked op: that op may be enqueued while
    // the host captures its stream into a CUDA graph, and memory allocated
    // then belongs to the graph.
    ctx->index_record();
  } catch (...) {
    delete ctx;
    throw;
  }
  ctx->seed_ = options.seed;
  return ctx;
}

DeviceContext::~DeviceContext() {
  magic_ = kDeadMagic;
  autograd.reset();
  autocast.reset();
  for (Object* shell : quarantine_) shell->destroy(shell);
  if (record_allocator_) record_allocator_->deallocate(index_record_, kIndexRecordBytes);
  record_allocator_.reset();
  // The allocator may hold cached device memory that the backend frees.
  allocator_.reset();
  backend_.reset();
}

// Made when the context is created; 40 bytes of the library's own, outside
// the memory statistics and the host's allocator hooks.
int64_t* DeviceContext::index_record() {
  if (index_record_) return index_record_;
  if (backend_->synchronous()) {
    std::fill(std::begin(host_record_), std::end(host_record_), int64_t{-1});
    index_record_ = host_record_;
    return index_record_;
  }
  auto memory = backend_->make_default_allocator();
  void* record = memory->allocate(kIndexRecordBytes);
  if (!record) fail(AMPX_ERR_OUT_OF_MEMORY, "no device memory for the index-check record");
  try {
    backend_->fill(record, sizeof(int64_t), ~uint64_t{0}, kRecordFields);
  } catch (...) {
    memory->deallocate(record, kIndexRecordBytes);
    throw;
  }
  record_allocator_ = std::move(memory);
  index_record_ = static_cast<int64_t*>(record);
  return index_record_;
}

void DeviceContext::raise_index_errors() {
  if (!index_record_) return;
  int64_t found[kRecordFields];
  backend_->copy_to_host(found, index_record_, kIndexRecordBytes);
  if (found[kRecordPosition] == -1) return;
  backend_->fill(index_record_, sizeof(int64_t), ~uint64_t{0}, kRecordFields);
  const char* later = backend_->synchronous()
                          ? ""
                          : "; found on the device by that call and reported at the first call "
                            "after it that waits for the device (results computed from the bad "
                            "index since are not valid)";
  if (found[kRecordOp] == kCheckEmbeddingIndices)
    fail(AMPX_ERR_INVALID_ARGUMENT, "embedding (checked op ", found[kRecordCall],
         " of this context): indices[", found[kRecordPosition], "] (in row-major order) is ",
         found[kRecordValue], " but 'weight' has ", found[kRecordLimit], " rows", later);
  fail(AMPX_ERR_INVALID_ARGUMENT, "cross_entropy (checked op ", found[kRecordCall],
       " of this context): labels[", found[kRecordPosition], "] is ", found[kRecordValue],
       " but there are ", found[kRecordLimit], " classes and it is not ignore_index", later);
}

void DeviceContext::check_indices(NnPrimitives& nn, const void* indices, DType type, int64_t count,
                                  IndexCheck check, float* valid) {
  check.call = next_checked_call();
  nn.check_indices(indices, type, count, check, valid, index_record());
  if (backend_->synchronous()) raise_index_errors();
}

void DeviceContext::read_to_host(void* host_dst, const void* src, size_t bytes) {
  raise_index_errors();
  backend_->copy_to_host(host_dst, src, bytes);
}

void DeviceContext::release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

bool DeviceContext::release_handle() {
  int64_t refs = handle_refs_.load(std::memory_order_acquire);
  do {
    if (refs <= 0) return false;
  } while (!handle_refs_.compare_exchange_weak(refs, refs - 1, std::memory_order_acq_rel));
  if (refs == 1) {
    // The tape and open scopes hold tensors, which hold the context: drop
    // them now that the program can no longer reach them.
    autograd.reset();
    autocast.reset();
    release();
  }
  return true;
}

void* DeviceContext::allocate(size_t bytes) {
  const ProfileScope timed(backend_->profile(), "tensor memory", "allocate");
  std::lock_guard<std::mutex> lock(memory_mutex_);
  void* ptr = allocator_->allocate(bytes);
  if (!ptr)
    fail(AMPX_ERR_OUT_OF_MEMORY, "could not allocate ", bytes, " bytes of ",
         backend_->device_type() == AMPX_DEVICE_CPU ? "host" : "device", " memory (",
         stats_.current_bytes, " bytes in use by this context)");
  stats_.current_bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  ++stats_.allocation_count;
  return ptr;
}

void DeviceContext::deallocate(void* ptr, size_t bytes) {
  const ProfileScope timed(backend_->profile(), "tensor memory", "free");
  std::lock_guard<std::mutex> lock(memory_mutex_);
  allocator_->deallocate(ptr, bytes);
  stats_.current_bytes -= bytes;
}

MemoryStats DeviceContext::memory_stats() {
  std::lock_guard<std::mutex> lock(memory_mutex_);
  MemoryStats stats = stats_;
  stats.reserved_bytes = std::max(allocator_->reserved_bytes(), stats.current_bytes);
  return stats;
}

void DeviceContext::set_tf32(bool allowed) {
  tf32_ = allowed;
  if (GemmPrimitives* gemm = backend().find<GemmPrimitives>()) gemm->set_tf32(allowed);
  if (ConvolutionPrimitives* conv = backend().find<ConvolutionPrimitives>()) conv->set_tf32(allowed);
}

void DeviceContext::reset_peak() {
  std::lock_guard<std::mutex> lock(memory_mutex_);
  stats_.peak_bytes = stats_.current_bytes;
}

void DeviceContext::quarantine(Object* shell) noexcept {
  Object* evicted = nullptr;
  {
    std::lock_guard<std::mutex> lock(memory_mutex_);
    try {
      quarantine_.push_back(shell);
    } catch (...) {
      // No memory for the list: the shell goes at once, and a later use of
      // its handle is no longer recognised as stale.
      evicted = shell;
    }
    if (!evicted && quarantine_.size() > kQuarantineShells) {
      evicted = quarantine_.front();
      quarantine_.pop_front();
    }
  }
  if (evicted) evicted->destroy(evicted);
}

}  // namespace ampx::impl
