// cuda_backend.cpp -- host side of the CUDA backend: device selection,
// stream, stream-ordered caching allocator, copies, kernel launches.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "fill_convert.cuh"

namespace ampx {
namespace {

// Throws AMPX_ERR_DEVICE naming the failed call. The runtime also records the
// failure in the thread's last-error slot; it is cleared so that a later
// cudaGetLastError -- a launch check of ours or a call in the host program --
// does not report it a second time. (Sticky errors, which corrupt the
// context, cannot be cleared and keep being reported, as they should.)
void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  fail(AMPX_ERR_DEVICE, what, " failed: ", cudaGetErrorString(status));
}

void make_current(int32_t device) { check(cudaSetDevice(device), "cudaSetDevice"); }

// State a backend shares with the allocators it makes. It is destroyed with
// the last of them, so the context may drop the backend and its allocator in
// either order.
struct CudaDevice {
  int32_t index = 0;
  cudaStream_t stream = nullptr;
  bool owns_stream = false;
  cudaMemPool_t pool = nullptr;
  cuda::Launch launch{};

  CudaDevice() = default;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  // Work still queued is not waited for: the driver releases the pool and the
  // stream once their pending operations have completed. Failures (e.g. the
  // runtime already unloading at process exit) leave nothing to undo.
  ~CudaDevice() {
    bool failed = cudaSetDevice(index) != cudaSuccess;
    if (pool != nullptr) failed |= cudaMemPoolDestroy(pool) != cudaSuccess;
    if (owns_stream) failed |= cudaStreamDestroy(stream) != cudaSuccess;
    if (failed) cudaGetLastError();
  }
};

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(std::shared_ptr<const CudaDevice> device) : device_(std::move(device)) {}

  void* allocate(size_t bytes) override {
    make_current(device_->index);
    // A zero-byte tensor still gets an address of its own.
    const size_t size = bytes == 0 ? 1 : bytes;
    void* ptr = nullptr;
    cudaError_t status = cudaMallocFromPoolAsync(&ptr, size, device_->pool, device_->stream);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      // The pool's idle memory may be split into pieces none of which fits;
      // returning them to the driver lets it map one contiguous range.
      check(cudaMemPoolTrimTo(device_->pool, 0), "cudaMemPoolTrimTo");
      status = cudaMallocFromPoolAsync(&ptr, size, device_->pool, device_->stream);
      if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return nullptr;
      }
    }
    check(status, "cudaMallocFromPoolAsync");
    return ptr;
  }

  // Called on tensor release, which cannot report a failure. A free fails only
  // when the device is already in an error state, which the next checked call
  // on the context reports.
  void deallocate(void* ptr, size_t /*bytes*/) override {
    if (ptr == nullptr) return;
    bool failed = cudaSetDevice(device_->index) != cudaSuccess;
    failed |= cudaFreeAsync(ptr, device_->stream) != cudaSuccess;
    if (failed) cudaGetLastError();
  }

  uint64_t reserved_bytes() const override {
    make_current(device_->index);
    uint64_t reserved = 0;
    check(cudaMemPoolGetAttribute(device_->pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
          "cudaMemPoolGetAttribute(reserved)");
    return reserved;
  }

 private:
  std::shared_ptr<const CudaDevice> device_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<const CudaDevice> device) : device_(std::move(device)) {}

  ampx_device_type device_type() const override { return AMPX_DEVICE_CUDA; }
  int32_t device_index() const override { return device_->index; }
  // What every CUDA allocation routine guarantees, and what our pool returns.
  size_t alignment() const override { return 256; }

  std::unique_ptr<Allocator> make_default_allocator() override {
    return std::make_unique<CudaAllocator>(device_);
  }

  void check_device_pointer(const void* ptr, const char* what) override {
    make_current(device_->index);
    cudaPointerAttributes attributes{};
    check(cudaPointerGetAttributes(&attributes, ptr), "cudaPointerGetAttributes");
    switch (attributes.type) {
      case cudaMemoryTypeDevice:
      case cudaMemoryTypeManaged:
        if (attributes.device == device_->index) return;
        fail(AMPX_ERR_DEVICE, what, " (", ptr, ") is memory of CUDA device ", attributes.device,
             ", but the context is on CUDA device ", device_->index);
      case cudaMemoryTypeHost:
        fail(AMPX_ERR_DEVICE, what, " (", ptr, ") is pinned host memory; a context on CUDA device ",
             device_->index, " needs memory of that device");
      case cudaMemoryTypeUnregistered:
        break;
    }
    fail(AMPX_ERR_DEVICE, what, " (", ptr, ") is host memory (not allocated by CUDA); a context ",
         "on CUDA device ", device_->index, " needs memory of that device");
  }

  // backend.h promises that the host copies have completed on return, so the
  // caller may reuse or read its host buffer at once: hence the synchronize.
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    make_current(device_->index);
    check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, device_->stream),
          "cudaMemcpyAsync (host to device)");
    check(cudaStreamSynchronize(device_->stream), "cudaStreamSynchronize");
  }

  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    make_current(device_->index);
    check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, device_->stream),
          "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(device_->stream), "cudaStreamSynchronize");
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    make_current(device_->index);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, device_->stream),
          "cudaMemcpyAsync (device to device)");
  }

  void fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count) override {
    if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8) {
      fail(AMPX_ERR_INTERNAL, "fill: element size ", elem_size, " is not 1, 2, 4 or 8");
    }
    make_current(device_->index);
    check(cuda::launch_fill(dst, elem_size, pattern, count, device_->launch), "fill kernel launch");
  }

  void convert(void* dst, DType dst_type, const void* src, DType src_type,
               int64_t count) override {
    make_current(device_->index);
    check(cuda::launch_convert(dst, dst_type, src, src_type, count, device_->launch),
          "convert kernel launch");
  }

  void synchronize() override {
    make_current(device_->index);
    check(cudaStreamSynchronize(device_->stream), "cudaStreamSynchronize");
  }

  // The multi-tensor kernels of mixed-precision training are not written for
  // CUDA yet; until they are, these fail cleanly instead of falling back to
  // a host round trip that would break the no-sync rule.
  void multi_tensor_scale(const std::vector<TensorSpan>&, const std::vector<TensorSpan>&,
                          const float*, bool, float*) override {
    not_yet("multi_tensor_scale");
  }
  void multi_tensor_norm(const std::vector<TensorSpan>&, NormType, float*) override {
    not_yet("multi_tensor_norm");
  }
  void clip_coefficient(const float*, float, float*) override { not_yet("clip_coefficient"); }
  void multi_tensor_clamp(const std::vector<TensorSpan>&, float) override {
    not_yet("multi_tensor_clamp");
  }
  void multi_tensor_count_nonfinite(const std::vector<TensorSpan>&, int64_t*) override {
    not_yet("multi_tensor_count_nonfinite");
  }
  void scaler_update(math::ScalerState*, const std::vector<const float*>&,
                     const math::ScalerConfig&, bool, float) override {
    not_yet("scaler_update");
  }
  void increment_steps(int64_t*, int64_t, const float*) override { not_yet("increment_steps"); }
  void sgd_step(const std::vector<OptimParam>&, const math::SgdConfig&,
                const StepScalars&) override {
    not_yet("sgd_step");
  }
  void adam_step(const std::vector<OptimParam>&, const math::AdamConfig&,
                 const StepScalars&) override {
    not_yet("adam_step");
  }

 private:
  [[noreturn]] static void not_yet(const char* primitive) {
    fail(AMPX_ERR_NOT_SUPPORTED, primitive, " is not implemented on the CUDA backend yet");
  }

  std::shared_ptr<const CudaDevice> device_;
};

int device_attribute(cudaDeviceAttr attribute, int32_t device) {
  int value = 0;
  check(cudaDeviceGetAttribute(&value, attribute, device), "cudaDeviceGetAttribute");
  return value;
}

// Fails when `stream` belongs to another device: work enqueued there would
// not see this device's memory. Where the question cannot be asked safely the
// caller is trusted: runtimes before 12.8 have no cudaStreamGetDevice, older
// drivers do not implement it, and on a stream being captured into a graph
// some drivers reject it and invalidate the host's capture.
void check_stream_device(cudaStream_t stream, int32_t device) {
#if CUDART_VERSION >= 12080
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing(cuda_stream)");
  if (capture != cudaStreamCaptureStatusNone) return;
  int stream_device = -1;
  const cudaError_t status = cudaStreamGetDevice(stream, &stream_device);
  if (status == cudaErrorCallRequiresNewerDriver) {
    cudaGetLastError();
    return;
  }
  check(status, "cudaStreamGetDevice(cuda_stream)");
  if (stream_device != device) {
    fail(AMPX_ERR_DEVICE, "cuda_stream belongs to CUDA device ", stream_device,
         ", but the context is on CUDA device ", device);
  }
#else
  static_cast<void>(stream);
  static_cast<void>(device);
#endif
}

}  // namespace

int32_t cuda_device_count_impl() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int32_t device_index, void* cuda_stream) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    fail(AMPX_ERR_NO_DEVICE, "no usable CUDA device: cudaGetDeviceCount failed: ",
         cudaGetErrorString(status));
  }
  if (device_index < 0 || device_index >= count) {
    fail(AMPX_ERR_NO_DEVICE, "CUDA device index ", device_index, " is out of range: ", count,
         count == 1 ? " device is" : " devices are", " present");
  }

  make_current(device_index);
  // Checked here rather than at the first launch, so that an unsupported GPU
  // is reported when the context is made, not in the middle of training.
  const cudaError_t image = cuda::probe_kernel_image();
  if (image != cudaSuccess) {
    cudaGetLastError();
    fail(AMPX_ERR_NO_DEVICE, "CUDA device ", device_index, " (compute capability ",
         device_attribute(cudaDevAttrComputeCapabilityMajor, device_index), ".",
         device_attribute(cudaDevAttrComputeCapabilityMinor, device_index),
         ") cannot run this build of ampx: ", cudaGetErrorString(image));
  }
  if (device_attribute(cudaDevAttrMemoryPoolsSupported, device_index) == 0) {
    fail(AMPX_ERR_NO_DEVICE, "CUDA device ", device_index,
         " does not support stream-ordered memory pools, which ampx's allocator needs");
  }

  auto device = std::make_shared<CudaDevice>();
  device->index = device_index;
  const int resident_threads =
      device_attribute(cudaDevAttrMultiProcessorCount, device_index) *
      device_attribute(cudaDevAttrMaxThreadsPerMultiProcessor, device_index);
  device->launch.max_blocks =
      resident_threads >= cuda::kBlockThreads ? resident_threads / cuda::kBlockThreads : 1;

  if (cuda_stream != nullptr) {
    const auto stream = static_cast<cudaStream_t>(cuda_stream);
    check_stream_device(stream, device_index);
    device->stream = stream;
  } else {
    cudaStream_t stream = nullptr;
    // Non-blocking: ampx's work must not serialise with the legacy default
    // stream the host program may be using.
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    device->stream = stream;
    device->owns_stream = true;
  }
  device->launch.stream = device->stream;

  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_index;
  cudaMemPool_t pool = nullptr;
  check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  device->pool = pool;
  // Keep freed memory cached across synchronizations instead of returning it
  // to the driver at each one (the default threshold is 0).
  uint64_t threshold = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
        "cudaMemPoolSetAttribute(release threshold)");

  return std::make_unique<CudaBackend>(std::move(device));
}

}  // namespace ampx
