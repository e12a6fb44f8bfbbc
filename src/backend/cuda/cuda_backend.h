// cuda_backend.h -- the CUDA implementation of the Backend interface.
//
// A CUDA backend is bound to one device and one stream. Every call makes its
// device current on the calling thread first (the host may have switched
// devices, and tensors may be released from any thread) and leaves it
// current: restoring the previous device could create a CUDA context on a
// device the host never meant to use (cudaGetDevice reports device 0 on a
// thread that never chose one).
//
// Device memory comes from a cudaMemPool private to the backend, allocated
// and freed in stream order on the backend's stream, so repeated tensor
// allocations never reach cudaMalloc and the pattern stays capturable in a
// CUDA graph. The pool keeps what it has reserved (release threshold
// UINT64_MAX) until the backend and every allocator made from it are gone.
//
// GEMM goes through cuBLASLt (cublaslt_gemm.h): the backend creates its
// handle and takes a 32 MiB workspace from the pool when it is made, and
// gives both back when it is destroyed.
#pragma once

#include <cstdint>
#include <memory>

#include "core/backend.h"

namespace ampx::impl {

// A backend on CUDA device `device_index`. `cuda_stream` (a cudaStream_t) is
// adopted when non-null: borrowed, never destroyed by ampx, and it must
// outlive the backend and its allocators. Otherwise the backend creates its
// own non-blocking stream and destroys it with the last of the backend and its
// allocators.
// Throws AMPX_ERR_NO_DEVICE when there is no usable driver or device, the
// index is out of range, or the device cannot run this build's kernels;
// AMPX_ERR_DEVICE when `cuda_stream` belongs to another device (detected with
// CUDA 12.8 or newer) or a CUDA or cuBLASLt call fails;
// AMPX_ERR_OUT_OF_MEMORY without memory for cuBLASLt's workspace.
std::unique_ptr<Backend> make_cuda_backend(int32_t device_index, void* cuda_stream);

// Number of CUDA devices; 0 when there is no driver or no device. Never
// throws and prints nothing.
int32_t cuda_device_count_impl() noexcept;

}  // namespace ampx::impl
