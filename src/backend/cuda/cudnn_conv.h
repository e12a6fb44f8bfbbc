// cudnn_conv.h -- the CUDA backend's convolution (core/backend_conv.h)
// through cuDNN 9's convolution API, with cuDNN loaded (dlopen) the first
// time a context on a CUDA device starts: libampx neither links cuDNN nor
// needs it, and without it the backend simply lacks the Convolution
// capability (ampx_conv2d answers AMPX_ERR_NOT_SUPPORTED with the reason).
//
// Math: f16 and bf16 tensors use tensor-core math with fp32 accumulation;
// f32 tensors use IEEE fp32 FMA math, never TF32, as ampx's GEMMs. The
// algorithms come from cuDNN's heuristics (no benchmarking runs, so a step
// stays capturable and nothing waits for the device), chosen once per shape
// and type and cached with the descriptors; each call's workspace comes
// from the backend's stream-ordered pool and goes back after the enqueue.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/backend_conv.h"
#include "backend/cuda/kernels/fill_convert.cuh"

namespace ampx::impl {
namespace cuda {

struct CudnnLibrary;

// cuDNN, loaded once per process; nullptr when it cannot be, with the
// reason in `why`. AMPX_CUDNN_LIBRARY names the file to load instead of
// libcudnn.so.9. Thread-safe.
const CudnnLibrary* load_cudnn(std::string* why);

class CudnnConvolution final : public ConvolutionPrimitives {
 public:
  // `memory` is the backend's stream-ordered pool on CUDA device
  // `device`, made current by every call; the cuDNN handle is made at the
  // first convolution.
  CudnnConvolution(const CudnnLibrary& library, int32_t device, std::unique_ptr<Allocator> memory,
                   const LaunchConfig& launch);
  ~CudnnConvolution() override;
  CudnnConvolution(const CudnnConvolution&) = delete;
  CudnnConvolution& operator=(const CudnnConvolution&) = delete;

 protected:
  void run_conv2d_forward(const Conv2dShape& shape, const void* x, const void* w,
                          const void* bias, DType type, void* y) override;
  void run_conv2d_backward_data(const Conv2dShape& shape, const void* dy, const void* w,
                                DType type, void* dx) override;
  void run_conv2d_backward_weight(const Conv2dShape& shape, const void* dy, const void* x,
                                  DType type, void* dw, void* dbias) override;

 private:
  struct Key {
    Conv2dShape shape;
    DType type;
    bool tf32;  // an f32 convolution in TF32 (tensor-op math)
    bool operator<(const Key& other) const;
  };
  struct Plan;

  const Plan& plan_for(const Conv2dShape& shape, DType type);
  void* handle();

  const CudnnLibrary& cudnn_;
  int32_t device_;
  std::unique_ptr<Allocator> memory_;
  LaunchConfig launch_;
  void* handle_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace cuda
}  // namespace ampx::impl
