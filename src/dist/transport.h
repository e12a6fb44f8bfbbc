// transport.h -- a communication library's group of ranks (MPI or NCCL), as
// ampx's communicators use it. ampx never moves bytes between ranks itself.
//
// Collectives act on memory of the context's device (host memory for the
// CPU) and are issued in the same order on every rank. Each names the
// backend stream whose order it joins:
//  - NCCL enqueues it on that stream (the host does not wait);
//  - MPI (the CPU, whose backend is synchronous) completes it, and every
//    collective started before it, before returning on Stream::Compute,
//    and on Stream::Communication only starts it: progress() advances what
//    was started, finish_started() completes it.
// A host wait lasts at most the timeout (set_timeout); past it the call
// throws TimedOut and the operations stay pending until abort().
// Failures throw StatusError (AMPX_ERR_DEVICE naming the library's message).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/backend.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ampx::impl {

enum class ReduceOp { Sum, Max, Min };

// A host wait on collectives that passed the timeout.
class TimedOut : public StatusError {
 public:
  using StatusError::StatusError;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* library() const = 0;  // "MPI", "NCCL"
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  // data[0..count) becomes the reduction over every rank's data.
  virtual void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Stream stream) = 0;
  // Every rank's data becomes root's.
  virtual void broadcast(void* data, size_t bytes, int32_t root, Stream stream) = 0;
  // recv[r * bytes, (r + 1) * bytes) = rank r's send, for every rank r;
  // send may be recv + rank() * bytes (in place).
  virtual void all_gather(const void* send, void* recv, size_t bytes, Stream stream) = 0;
  // recv[0, count) = the reduction over ranks of their send[rank() * count,
  // (rank() + 1) * count); send holds size() * count elements.
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                              Stream stream) = 0;

  virtual void progress() {}
  virtual void finish_started() {}
  // Throws AMPX_ERR_DEVICE when the library reported an asynchronous
  // failure of this communicator (a peer that died, a network error).
  virtual void check_async_error() {}
  // Ends the communicator's pending work so that nothing waits on it again
  // (after a timeout); every later collective fails.
  virtual void abort() {}

  // The longest a host wait may take (seconds).
  virtual void set_timeout(double seconds) { timeout_seconds_ = seconds; }
  double timeout_seconds() const { return timeout_seconds_; }
  // A watchdog's finding (NCCL): the description of a collective that
  // passed the timeout while nothing waited on it on the host, after which
  // the transport aborted itself; empty while none did.
  virtual std::string timed_out() const { return {}; }

 protected:
  double timeout_seconds_ = 600.0;
};

}  // namespace ampx::impl
