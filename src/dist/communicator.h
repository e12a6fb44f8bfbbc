// communicator.h -- ampx_comm: a group of ranks made from the host's own MPI
// or NCCL communicator, bound to one context.
#pragma once

#include <cstdint>
#include <memory>

#include "core/context.h"
#include "dist/transport.h"

namespace ampx::impl {

class Communicator : public Object {
 public:
  static constexpr uint64_t kLiveMagic = 0x414d50582d434f4dull;  // "AMPX-COM"
  static constexpr uint64_t kDeadMagic = 0x646561642d636f6dull;  // "dead-com"

  // Takes over `transport`; retains ctx.
  static Communicator* create(DeviceContext& ctx, std::unique_ptr<Transport> transport);
  void retain() { refs.fetch_add(1, std::memory_order_relaxed); }
  void release();

  DeviceContext& context() const { return *ctx_; }
  Transport& transport() const { return *transport_; }
  int32_t rank() const { return transport_->rank(); }
  int32_t size() const { return transport_->size(); }
  const char* library() const { return transport_->library(); }

  // How long a host wait on collectives may take before the communicator
  // is aborted (seconds).
  double timeout_seconds() const { return timeout_seconds_; }
  void set_timeout_seconds(double seconds) { timeout_seconds_ = seconds; }

  // Blocks until the work enqueued so far on `stream` has completed. Polls
  // the library's asynchronous errors meanwhile; after the timeout aborts
  // the communicator and throws AMPX_ERR_DEVICE. Throws AMPX_ERR_DEVICE at
  // once when the communicator was aborted before.
  void wait(Stream stream);
  void check_usable() const;

  // Collectives on host memory for setup and checks, complete on return
  // (staged through device memory when the device is not the host).
  void all_gather_host(const void* send, void* recv, size_t bytes);
  void broadcast_host(void* data, size_t bytes, int32_t root);

 private:
  Communicator(DeviceContext& ctx, std::unique_ptr<Transport> transport);
  ~Communicator();
  static void destroy_shell(Object* shell) { delete static_cast<Communicator*>(shell); }

  DeviceContext* ctx_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<DeviceEvent> wait_event_;
  double timeout_seconds_ = 600.0;
  bool aborted_ = false;
};

// The transports (dist/mpi_transport.cpp, dist/nccl_transport.cpp). Each
// throws AMPX_ERR_NOT_SUPPORTED naming the library when it cannot be
// loaded, and AMPX_ERR_DEVICE when the library refuses.

// From a pointer to the host's MPI_Comm; collective over its ranks.
std::unique_ptr<Transport> open_mpi_transport(const void* mpi_comm);
// From the host's ncclComm_t, for a CUDA context; the host keeps owning it.
std::unique_ptr<Transport> open_nccl_transport(DeviceContext& ctx, void* nccl_comm);
// A new NCCL communicator for a CUDA context from a unique id every rank
// received from rank 0 (ncclCommInitRank); ampx owns it.
std::unique_ptr<Transport> create_nccl_transport(DeviceContext& ctx, const void* unique_id,
                                                 int32_t world_size, int32_t rank);
// ncclGetUniqueId into `out` (kNcclUniqueIdBytes).
constexpr size_t kNcclUniqueIdBytes = 128;
void nccl_unique_id(void* out);

}  // namespace ampx::impl
