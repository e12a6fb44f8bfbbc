// communicator.cpp -- ampx_comm's object: the transport, its timeout and
// the host-side collectives of setup.
#include "dist/communicator.h"

#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/tensor.h"

namespace ampx::impl {

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
  // The transport waits for what it started before it closes.
  try {
    transport_->finish_started();
  } catch (...) {
  }
  transport_.reset();
  wait_event_.reset();
  DeviceContext& ctx = *ctx_;
  ctx.quarantine(this);
  ctx.release();
}

void Communicator::check_usable() const {
  if (aborted_)
    fail(AMPX_ERR_DEVICE, "the ", library(),
         " communicator was aborted after a collective did not complete within the timeout; "
         "make a new communicator");
}

void Communicator::wait(Stream stream) {
  check_usable();
  transport_->finish_started();
  Backend& backend = ctx_->backend();
  if (backend.synchronous()) return;
  backend.record_event(*wait_event_, stream);
  const auto start = std::chrono::steady_clock::now();
  while (!backend.event_completed(*wait_event_)) {
    transport_->check_async_error();
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (waited.count() > timeout_seconds_) {
      aborted_ = true;
      transport_->abort();
      fail(AMPX_ERR_DEVICE, "a ", library(), " collective did not complete within ",
           timeout_seconds_,
           " s (a rank that died or never joined?); the communicator was aborted (see "
           "ampx_comm_set_timeout)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  transport_->check_async_error();
}

void Communicator::all_gather_host(const void* send, void* recv, size_t bytes) {
  check_usable();
  Backend& backend = ctx_->backend();
  if (backend.device_type() == AMPX_DEVICE_CPU) {
    transport_->all_gather(send, recv, bytes, Stream::Compute);
    return;
  }
  const int64_t world = size();
  TensorRef staging(DeviceTensor::empty(
      *ctx_, DType::I32, vector_shape(static_cast<int64_t>((bytes + 3) / 4 * (world + 1)))));
  char* base = static_cast<char*>(staging->data());
  char* device_recv = base + (bytes + 3) / 4 * 4;
  backend.copy_from_host(base, send, bytes);
  transport_->all_gather(base, device_recv, bytes, Stream::Compute);
  wait(Stream::Compute);
  backend.copy_to_host(recv, device_recv, bytes * static_cast<size_t>(world));
}

void Communicator::broadcast_host(void* data, size_t bytes, int32_t root) {
  check_usable();
  Backend& backend = ctx_->backend();
  if (backend.device_type() == AMPX_DEVICE_CPU) {
    transport_->broadcast(data, bytes, root, Stream::Compute);
    return;
  }
  TensorRef staging(
      DeviceTensor::empty(*ctx_, DType::I32, vector_shape(static_cast<int64_t>((bytes + 3) / 4))));
  backend.copy_from_host(staging->data(), data, bytes);
  transport_->broadcast(staging->data(), bytes, root, Stream::Compute);
  wait(Stream::Compute);
  backend.copy_to_host(data, staging->data(), bytes);
}

}  // namespace ampx::impl
