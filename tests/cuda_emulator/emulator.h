// emulator.h -- what the parts of the CUDA emulator share (not seen by the
// code under test, which sees only the shim headers in include/).
//
// The emulator runs ampx's CUDA backend on the CPU: the kernels of src/backend/cuda/kernels/
// compiled as C++, every CUDA thread a fiber, the runtime API and cuBLASLt
// reimplemented over host memory. Streams execute their work as it is
// enqueued, except while captured into a graph, when the work is recorded
// and runs at each cudaGraphLaunch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

namespace ampx_emu {

// A failure inside work a stream runs (a kernel's deadlock, a bad access
// the emulator noticed). The stream keeps it as a sticky error, as a device
// keeps a kernel fault, and prints the message once.
struct DeviceFault : std::runtime_error {
  explicit DeviceFault(const std::string& what) : std::runtime_error(what) {}
};

// Runs `work` in `stream`'s order: now, or, while the stream is being
// captured, at every launch of the graph being made. Returns the error the
// runtime would (cudaErrorInvalidResourceHandle for a destroyed stream).
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work);

// Whether [ptr, ptr + bytes) lies inside one live device allocation.
bool is_device_memory(const void* ptr, size_t bytes);

// x rounded to TF32 (fp32's 8 exponent bits, 10 mantissa bits), ties to
// even; infinities and NaN unchanged: the emulator's model of the tensor
// cores' conversion of f32 operands (cuBLASLt's FAST_TF32, cuDNN's
// tensor-op math on f32 data).
inline float to_tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) {
    bits += 0xfffu + ((bits >> 13) & 1u);
    bits &= ~0x1fffu;
  }
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Records `error` as the calling thread's last error and returns it.
cudaError_t record_error(cudaError_t error);

}  // namespace ampx_emu
