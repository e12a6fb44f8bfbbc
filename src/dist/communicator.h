// communicator.h -- ampx_comm: a group of ranks made from the host's own MPI
// or NCCL communicator, bound to one context.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
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
  int32_t rank() const { return transport_->rank(); }
  int32_t size() const { return transport_->size(); }
  const char* library() const { return transport_->library(); }

  // How long a host wait on collectives may take before the communicator
  // fails (seconds).
  double timeout_seconds() const { return transport_->timeout_seconds(); }
  void set_timeout_seconds(double seconds) { transport_->set_timeout(seconds); }

  // The collectives of the transport (transport.h), each refused once the
  // communicator has failed, and failing it when a wait passes the timeout
  // (see check_usable). `keep`: the tensors whose memory the collective
  // uses; after a timeout they are kept until the process ends, as the
  // abandoned collective may still write them. `what` names the
  // collective in a timeout's message ("the all-reduce of found-inf").
  using Keep = std::initializer_list<const DeviceTensor*>;
  void all_reduce(Keep keep, void* data, int64_t count, DType dtype, ReduceOp op, Stream stream,
                  const char* what);
  void broadcast(Keep keep, void* data, size_t bytes, int32_t root, Stream stream,
                 const char* what);
  void all_gather(Keep keep, const void* send, void* recv, size_t bytes, Stream stream,
                  const char* what);
  void reduce_scatter(Keep keep, const void* send, void* recv, int64_t count, DType dtype,
                      ReduceOp op, Stream stream, const char* what);
  void progress();
  // Completes the collectives started on the communication stream (MPI;
  // NCCL orders them by events instead), within the timeout.
  void finish_started(const char* what);

  // Blocks until the work enqueued so far on `stream` has completed. Polls
  // the library's asynchronous errors meanwhile; after the timeout fails
  // the communicator and throws AMPX_ERR_DEVICE.
  void wait(Stream stream, const char* what);
  // AMPX_ERR_DEVICE, with the message of the failure, once a collective
  // passed the timeout: every later call fails so, and nothing waits on
  // the communicator again.
  void check_usable();
  bool failed() const { return !failure_.empty(); }

  // Collectives on host memory for setup and checks, complete on return
  // (staged through the context's memory, so a timeout leaves the caller's
  // memory alone).
  void all_gather_host(const void* send, void* recv, size_t bytes, const char* what);
  void broadcast_host(void* data, size_t bytes, int32_t root, const char* what);

 private:
  Communicator(DeviceContext& ctx, std::unique_ptr<Transport> transport);
  ~Communicator();
  static void destroy_shell(Object* shell) { delete static_cast<Communicator*>(shell); }

  void keep_in_flight(Keep keep);
  // Runs a transport call that may wait; a TimedOut fails the
  // communicator.
  template <class Call>
  void run(const char* what, Call&& call);
  [[noreturn]] void fail_timed_out(const std::string& what);

  DeviceContext* ctx_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<DeviceEvent> wait_event_;
  // Tensors used by collectives that have not been waited for.
  std::vector<TensorRef> in_flight_;
  std::string failure_;  // why the communicator failed; empty while usable
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
