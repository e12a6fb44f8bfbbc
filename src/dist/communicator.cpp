// communicator.cpp -- ampx_comm's object: the transport, its timeout and
// failure, and the host-side collectives of setup.
#include "dist/communicator.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace ampx::impl {
namespace {

// Tensors an abandoned collective may still write (MPI cannot cancel one):
// kept, reachable, until the process ends.
void keep_until_exit(std::vector<TensorRef>& tensors) {
  static std::mutex mutex;
  static auto* kept = new std::vector<TensorRef>;
  std::lock_guard<std::mutex> lock(mutex);
  for (TensorRef& t : tensors) kept->push_back(std::move(t));
  tensors.clear();
}

}  // namespace

Communicator::Communicator(DeviceContext& ctx, std::unique_ptr<Transport> transport)
    : Object(kLiveMagic, &Communicator::destroy_shell),
      ctx_(&ctx),
      transport_(std::move(transport)) {}

Communicator::~Communicator() = default;

Communicator* Communicator::create(DeviceContext& ctx, std::unique_ptr<Transport> transport) {
  std::unique_ptr<DeviceEvent> event = ctx.backend().make_event();
  auto* comm = new Communicator(ctx, std::move(transport));
  comm->wait_event_ = std::move(event);
  ctx.retain();
  return comm;
}

void Communicator::release() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  magic = kDeadMagic;
  // What was started completes first (within the timeout); a failed
  // communicator's transport keeps what it abandoned.
  if (!failed()) {
    try {
      finish_started("the collectives pending at ampx_comm_release");
    } catch (...) {
    }
  }
  if (failed()) keep_until_exit(in_flight_);
  in_flight_.clear();
  transport_.reset();
  wait_event_.reset();
  DeviceContext& ctx = *ctx_;
  ctx.quarantine(this);
  ctx.release();
}

void Communicator::check_usable() {
  if (failure_.empty()) {
    const std::string watchdog = transport_->timed_out();
    if (watchdog.empty()) return;
    failure_ = watchdog;
    keep_until_exit(in_flight_);
  }
  fail(AMPX_ERR_DEVICE, "the ", library(), " communicator failed earlier: ", failure_,
       "; every call on it fails from then on: save what is needed (a checkpoint) and end the "
       "process",
       std::strcmp(library(), "MPI") == 0
           ? " without MPI_Finalize, which would wait for the abandoned collective"
           : " (or make a new communicator)");
}

void Communicator::fail_timed_out(const std::string& what) {
  failure_ = cat(what, " did not complete within ", timeout_seconds(),
                 " s (ampx_comm_set_timeout): a rank died, hangs, or stopped calling collectives");
  transport_->abort();
  keep_until_exit(in_flight_);
  fail(AMPX_ERR_DEVICE, "the ", library(), " ", failure_,
       "; the communicator is failed and every later call on it fails: save what is needed (a "
       "checkpoint) and end the process",
       std::strcmp(library(), "MPI") == 0
           ? " without MPI_Finalize, which would wait for the abandoned collective"
           : " (or make a new communicator)");
}

void Communicator::keep_in_flight(Keep keep) {
  for (const DeviceTensor* t : keep)
    if (t) in_flight_.push_back(retained(const_cast<DeviceTensor&>(*t)));
}

template <class Call>
void Communicator::run(const char* what, Call&& call) {
  try {
    call();
  } catch (const TimedOut&) {
    fail_timed_out(what);
  }
}

void Communicator::all_reduce(Keep keep, void* data, int64_t count, DType dtype, ReduceOp op,
                              Stream stream, const char* what) {
  check_usable();
  keep_in_flight(keep);
  run(what, [&] { transport_->all_reduce(data, count, dtype, op, stream); });
  if (stream == Stream::Compute) in_flight_.clear();
}

void Communicator::broadcast(Keep keep, void* data, size_t bytes, int32_t root, Stream stream,
                             const char* what) {
  check_usable();
  keep_in_flight(keep);
  run(what, [&] { transport_->broadcast(data, bytes, root, stream); });
  if (stream == Stream::Compute) in_flight_.clear();
}

void Communicator::all_gather(Keep keep, const void* send, void* recv, size_t bytes,
                              Stream stream, const char* what) {
  check_usable();
  keep_in_flight(keep);
  run(what, [&] { transport_->all_gather(send, recv, bytes, stream); });
  if (stream == Stream::Compute) in_flight_.clear();
}

void Communicator::reduce_scatter(Keep keep, const void* send, void* recv, int64_t count,
                                  DType dtype, ReduceOp op, Stream stream, const char* what) {
  check_usable();
  keep_in_flight(keep);
  run(what, [&] { transport_->reduce_scatter(send, recv, count, dtype, op, stream); });
  if (stream == Stream::Compute) in_flight_.clear();
}

void Communicator::progress() {
  check_usable();
  transport_->progress();
}

void Communicator::finish_started(const char* what) {
  check_usable();
  run(what, [&] { transport_->finish_started(); });
  in_flight_.clear();
}

void Communicator::wait(Stream stream, const char* what) {
  finish_started(what);
  Backend& backend = ctx_->backend();
  if (backend.synchronous()) return;
  backend.record_event(*wait_event_, stream);
  const auto start = std::chrono::steady_clock::now();
  while (!backend.event_completed(*wait_event_)) {
    transport_->check_async_error();
    check_usable();
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (waited.count() > timeout_seconds()) fail_timed_out(what);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  transport_->check_async_error();
}

void Communicator::all_gather_host(const void* send, void* recv, size_t bytes, const char* what) {
  check_usable();
  Backend& backend = ctx_->backend();
  const int64_t world = size();
  const int64_t words = static_cast<int64_t>((bytes + 3) / 4);
  TensorRef staging(DeviceTensor::empty(*ctx_, DType::I32, vector_shape(words * (world + 1))));
  char* base = static_cast<char*>(staging->data());
  char* device_recv = base + words * 4;
  backend.copy_from_host(base, send, bytes);
  all_gather({staging.get()}, base, device_recv, bytes, Stream::Compute, what);
  wait(Stream::Compute, what);
  backend.copy_to_host(recv, device_recv, bytes * static_cast<size_t>(world));
}

void Communicator::broadcast_host(void* data, size_t bytes, int32_t root, const char* what) {
  check_usable();
  Backend& backend = ctx_->backend();
  TensorRef staging(
      DeviceTensor::empty(*ctx_, DType::I32, vector_shape(static_cast<int64_t>((bytes + 3) / 4))));
  backend.copy_from_host(staging->data(), data, bytes);
  broadcast({staging.get()}, staging->data(), bytes, root, Stream::Compute, what);
  wait(Stream::Compute, what);
  backend.copy_to_host(data, staging->data(), bytes);
}

}  // namespace ampx::impl
