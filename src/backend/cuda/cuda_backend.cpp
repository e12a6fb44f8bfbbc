// cuda_backend.cpp -- host side of the CUDA backend: device selection,
// stream, stream-ordered caching allocator, copies, kernel launches, GEMM
// through cuBLASLt (cublaslt_gemm.h).
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/kernels/attention_launch.cuh"
#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cudnn_conv.h"
#include "core/backend_amp.h"
#include "core/backend_attention.h"
#include "core/backend_conv.h"
#include "core/backend_fp8.h"
#include "core/backend_gemm.h"
#include "core/backend_grad_stats.h"
#include "core/backend_nn.h"
#include "core/error.h"
#include "core/multi_tensor.h"
#include "backend/cuda/kernels/fill_convert.cuh"
#include "backend/cuda/kernels/fp8_launch.cuh"
#include "backend/cuda/kernels/grad_stats_ops.cuh"
#include "backend/cuda/kernels/multi_tensor_ops.cuh"
#include "backend/cuda/kernels/nn_launch.cuh"
#include "backend/cuda/kernels/ops_launch.cuh"

namespace ampx::impl {
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

void use_device(int32_t device) { check(cudaSetDevice(device), "cudaSetDevice"); }

// State a backend shares with the allocators it makes. It is destroyed with
// the last of them, so the context may drop the backend and its allocator in
// either order.
struct CudaDevice {
  int32_t index = 0;
  int compute_capability = 0;  // major * 10 + minor
  cudaStream_t stream = nullptr;
  bool owns_stream = false;
  cudaMemPool_t pool = nullptr;
  cuda::LaunchConfig launch{};

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
    use_device(device_->index);
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
    use_device(device_->index);
    uint64_t reserved = 0;
    check(cudaMemPoolGetAttribute(device_->pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
          "cudaMemPoolGetAttribute(reserved)");
    return reserved;
  }

 private:
  std::shared_ptr<const CudaDevice> device_;
};

// A primitive's scratch (ScratchBuffer) from the backend's pool, on its stream.
struct StreamScratch {
  StreamScratch(std::shared_ptr<const CudaDevice> device, size_t bytes, const char* primitive)
      : allocator(std::move(device)), buffer(allocator, bytes, primitive) {}
  void* get() const { return buffer.get(); }

  CudaAllocator allocator;
  ScratchBuffer buffer;
};

class CudaEvent final : public DeviceEvent {
 public:
  explicit CudaEvent(int32_t device) : device_(device) {
    use_device(device_);
    // No timing: a timed event costs a GPU timestamp at every record.
    check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  ~CudaEvent() override {
    bool failed = cudaSetDevice(device_) != cudaSuccess;
    failed |= cudaEventDestroy(event_) != cudaSuccess;
    if (failed) cudaGetLastError();
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }

 private:
  int32_t device_;
  cudaEvent_t event_ = nullptr;
};

// The multi-tensor primitives (kernels/multi_tensor_ops.cuh). Their front
// doors (backend_amp.cpp) checked the arguments; the launchers only
// enqueue, so none of these waits for the device and a training step stays
// capturable in a CUDA graph.
class CudaAmp final : public AmpPrimitives {
 public:
  explicit CudaAmp(std::shared_ptr<const CudaDevice> device) : device_(std::move(device)) {}

 protected:
  void run_multi_tensor_scale(const std::vector<TensorSpan>& ins,
                              const std::vector<TensorSpan>& outs, const float* factor,
                              bool reciprocal, float* found_inf) override {
    use_device(device_->index);
    check(
        cuda::launch_multi_tensor_scale(ins, outs, factor, reciprocal, found_inf, device_->launch),
        "multi_tensor_scale kernel launch");
  }

  void run_multi_tensor_norm(const std::vector<TensorSpan>& tensors, NormType type,
                             float* out) override {
    use_device(device_->index);
    const auto partials = static_cast<size_t>(cuda::multi_tensor_norm_partials(tensors));
    const StreamScratch scratch(device_, partials * sizeof(double), "multi_tensor_norm");
    check(cuda::launch_multi_tensor_norm(tensors, type, static_cast<double*>(scratch.get()), out,
                                         device_->launch),
          "multi_tensor_norm kernel launch");
  }

  void run_clip_coefficient(const float* total_norm, float max_norm, float* coef) override {
    use_device(device_->index);
    check(cuda::launch_clip_coefficient(total_norm, max_norm, coef, device_->launch),
          "clip_coefficient kernel launch");
  }

  void run_multi_tensor_clamp(const std::vector<TensorSpan>& tensors, float limit) override {
    use_device(device_->index);
    check(cuda::launch_multi_tensor_clamp(tensors, limit, device_->launch),
          "multi_tensor_clamp kernel launch");
  }

  void run_multi_tensor_count_nonfinite(const std::vector<TensorSpan>& tensors,
                                        int64_t* counts) override {
    use_device(device_->index);
    // The kernels add each chunk's counts to these zeros; a zero-size tensor
    // has no chunk and keeps them.
    check(cudaMemsetAsync(counts, 0, 2 * tensors.size() * sizeof(int64_t), device_->stream),
          "cudaMemsetAsync (nonfinite counts)");
    check(cuda::launch_multi_tensor_count_nonfinite(tensors, counts, device_->launch),
          "multi_tensor_count_nonfinite kernel launch");
  }

  void run_scaler_update(math::ScalerState* state, const std::vector<const float*>& found_infs,
                         const math::ScalerConfig& config, bool force,
                         float forced_scale) override {
    if (found_infs.size() > cuda::kMaxScalerFlags)
      fail(AMPX_ERR_INTERNAL, "scaler_update: ", found_infs.size(),
           " found-inf flags (one per optimizer stepped since the last update); the CUDA "
           "backend combines at most ",
           cuda::kMaxScalerFlags, " in one update");
    use_device(device_->index);
    check(
        cuda::launch_scaler_update(state, found_infs, config, force, forced_scale, device_->launch),
        "scaler_update kernel launch");
  }

  void run_increment_steps(int64_t* steps, int64_t count, const float* found_inf) override {
    use_device(device_->index);
    check(cuda::launch_increment_steps(steps, count, found_inf, device_->launch),
          "increment_steps kernel launch");
  }

  void run_lr_schedule(const math::LrSchedule* schedules, int32_t groups, const int64_t* step,
                       float* lr) override {
    use_device(device_->index);
    check(cuda::launch_lr_schedule(schedules, groups, step, lr, device_->launch),
          "lr_schedule kernel launch");
  }

  void run_sgd_step(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                    const StepScalars& scalars) override {
    use_device(device_->index);
    check(cuda::launch_sgd_step(params, config, scalars, device_->launch),
          "sgd_step kernel launch");
  }

  void run_adam_step(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                     const StepScalars& scalars) override {
    use_device(device_->index);
    check(cuda::launch_adam_step(params, config, scalars, device_->launch),
          "adam_step kernel launch");
  }

 private:
  std::shared_ptr<const CudaDevice> device_;
};

// The primitives of the ops (kernels/ops_launch.cuh, nn_launch.cuh). Sums
// and sorts take their scratch from the pool in stream order
// (StreamScratch).
class CudaNn final : public NnPrimitives {
 public:
  explicit CudaNn(std::shared_ptr<const CudaDevice> device) : device_(std::move(device)) {}

 protected:
  void run_unary(UnaryOp op, const void* x, void* y, DType type, int64_t count) override {
    use_device(device_->index);
    check(cuda::launch_unary(op, x, y, type, count, device_->launch), "unary kernel launch");
  }

  void run_unary_backward(UnaryOp op, const void* x, const void* dy, void* dx, DType type,
                          int64_t count) override {
    use_device(device_->index);
    check(cuda::launch_unary_backward(op, x, dy, dx, type, count, device_->launch),
          "unary_backward kernel launch");
  }

  void run_binary(BinaryOp op, const void* a, const void* b, void* out, DType type, int64_t count,
                  int64_t b_count) override {
    use_device(device_->index);
    check(cuda::launch_binary(op, a, b, out, type, count, b_count, device_->launch),
          "binary kernel launch");
  }

  void run_binary_broadcast(BinaryOp op, const void* a, const void* b, void* out, DType type,
                            const BroadcastLayout& layout) override {
    use_device(device_->index);
    check(cuda::launch_binary_broadcast(op, a, b, out, type, layout, device_->launch),
          "binary_broadcast kernel launch");
  }

  void run_masked_fill(const void* x, DType type, const void* mask, DType mask_type, float value,
                       void* out, const BroadcastLayout& layout) override {
    use_device(device_->index);
    check(cuda::launch_masked_fill(x, type, mask, mask_type, value, out, layout, device_->launch),
          "masked_fill kernel launch");
  }

  void run_pow_scalar(const void* x, void* y, DType type, int64_t count,
                      float exponent) override {
    use_device(device_->index);
    check(cuda::launch_pow(x, y, type, count, exponent, device_->launch), "pow kernel launch");
  }

  void run_pow_scalar_backward(const void* x, const void* dy, void* dx, DType type, int64_t count,
                               float exponent) override {
    use_device(device_->index);
    check(cuda::launch_pow_backward(x, dy, dx, type, count, exponent, device_->launch),
          "pow_backward kernel launch");
  }

  void run_rotary(const void* x, DType type, const void* cos, const void* sin, DType table_type,
                  void* out, const RotaryShape& shape, bool inverse) override {
    use_device(device_->index);
    check(cuda::launch_rotary(x, type, cos, sin, table_type, out, shape, inverse, device_->launch),
          "rotary kernel launch");
  }

  void run_reduce_dims(DimReduce op, const void* x, DType type, const ReduceLayout& layout,
                       void* out, DType out_type) override {
    use_device(device_->index);
    check(cuda::launch_reduce_dims(op, x, type, layout, out, out_type, device_->launch),
          "reduce_dims kernel launch");
  }

  void run_affine(const void* x, void* y, DType type, int64_t count, float scale,
                  float shift) override {
    use_device(device_->index);
    check(cuda::launch_affine(x, y, type, count, scale, shift, device_->launch),
          "affine kernel launch");
  }

  void run_add_into(void* dst, DType dst_type, const void* src, DType src_type,
                    int64_t count) override {
    use_device(device_->index);
    check(cuda::launch_add_into(dst, dst_type, src, src_type, count, device_->launch),
          "add_into kernel launch");
  }

  void run_sum_rows(const void* x, DType type, int64_t rows, int64_t cols, void* out,
                    DType out_type) override {
    use_device(device_->index);
    const auto partials = static_cast<size_t>(cuda::sum_rows_partials(rows, cols, device_->launch));
    const StreamScratch scratch(device_, partials * sizeof(double), "sum_rows");
    check(cuda::launch_sum_rows(x, type, rows, cols, out, out_type,
                                static_cast<double*>(scratch.get()), device_->launch),
          "sum_rows kernel launch");
  }

  void run_sum_all(const void* x, DType type, int64_t count, float* out) override {
    use_device(device_->index);
    const auto partials = static_cast<size_t>(cuda::sum_all_partials(count, device_->launch));
    const StreamScratch scratch(device_, partials * sizeof(double), "sum_all");
    check(cuda::launch_sum_all(x, type, count, out, static_cast<double*>(scratch.get()),
                               device_->launch),
          "sum_all kernel launch");
  }

  void run_softmax(const void* x, void* y, DType type, int64_t rows, int64_t cols,
                   bool log) override {
    use_device(device_->index);
    check(cuda::launch_softmax(x, y, type, rows, cols, log, device_->launch),
          "softmax kernel launch");
  }

  void run_softmax_backward(const void* y, const void* dy, void* dx, DType type, int64_t rows,
                            int64_t cols, bool log) override {
    use_device(device_->index);
    check(cuda::launch_softmax_backward(y, dy, dx, type, rows, cols, log, device_->launch),
          "softmax_backward kernel launch");
  }

  void run_cross_entropy(const void* logits, DType type, const void* labels, DType label_type,
                         int64_t rows, int64_t cols, int64_t ignore_index, float* losses) override {
    use_device(device_->index);
    check(cuda::launch_cross_entropy(logits, type, labels, label_type, rows, cols, ignore_index,
                                     losses, device_->launch),
          "cross_entropy kernel launch");
  }

  void run_cross_entropy_backward(const void* logits, DType type, const void* labels,
                                  DType label_type, int64_t rows, int64_t cols,
                                  int64_t ignore_index, const float* dloss, float scale,
                                  void* dlogits, int64_t dloss_stride) override {
    use_device(device_->index);
    check(cuda::launch_cross_entropy_backward(logits, type, labels, label_type, rows, cols,
                                              ignore_index, dloss, dloss_stride, scale, dlogits,
                                              device_->launch),
          "cross_entropy_backward kernel launch");
  }

  void run_cross_entropy_smoothed(const void* logits, DType type, const void* labels,
                                  DType label_type, int64_t rows, int64_t cols,
                                  int64_t ignore_index, const float* class_weight,
                                  float smoothing, float* losses, float* row_weights) override {
    use_device(device_->index);
    check(cuda::launch_cross_entropy_smoothed(logits, type, labels, label_type, rows, cols,
                                              ignore_index, class_weight, smoothing, losses,
                                              row_weights, device_->launch),
          "cross_entropy_smoothed kernel launch");
  }

  void run_cross_entropy_smoothed_backward(const void* logits, DType type, const void* labels,
                                           DType label_type, int64_t rows, int64_t cols,
                                           int64_t ignore_index, const float* class_weight,
                                           float smoothing, const float* dloss,
                                           void* dlogits, int64_t dloss_stride) override {
    use_device(device_->index);
    check(cuda::launch_cross_entropy_smoothed_backward(logits, type, labels, label_type, rows,
                                                       cols, ignore_index, class_weight, smoothing,
                                                       dloss, dloss_stride, dlogits,
                                                       device_->launch),
          "cross_entropy_smoothed_backward kernel launch");
  }

  void run_layer_norm(const void* x, const void* weight, const void* bias, DType type, int64_t rows,
                      int64_t cols, float eps, void* y, float* mean, float* rstd,
                      bool centered) override {
    use_device(device_->index);
    check(cuda::launch_layer_norm(x, weight, bias, type, rows, cols, eps, y, mean, rstd, centered,
                                  device_->launch),
          "layer_norm kernel launch");
  }

  void run_layer_norm_backward(const void* x, const void* dy, const void* weight, DType type,
                               int64_t rows, int64_t cols, const float* mean, const float* rstd,
                               void* dx, void* dweight, void* dbias, bool centered) override {
    use_device(device_->index);
    const bool sums = dweight != nullptr || dbias != nullptr;  // the only users of scratch
    const StreamScratch scratch(
        device_, sums ? cuda::layer_norm_backward_scratch_bytes(rows, cols, device_->launch) : 0,
        "layer_norm_backward");
    check(cuda::launch_layer_norm_backward(x, dy, weight, type, rows, cols, mean, rstd, dx, dweight,
                                           dbias, centered, scratch.get(), device_->launch),
          "layer_norm_backward kernel launch");
  }

  void run_batch_norm_stats(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                            float momentum, float* mean, float* var, float* running_mean,
                            float* running_var) override {
    use_device(device_->index);
    const StreamScratch scratch(
        device_, cuda::batch_norm_stats_scratch_bytes(n, channels, inner, device_->launch),
        "batch_norm_stats");
    check(cuda::launch_batch_norm_stats(x, type, n, channels, inner, momentum, mean, var,
                                        running_mean, running_var, scratch.get(), device_->launch),
          "batch_norm_stats kernel launch");
  }

  void run_batch_norm(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                      const float* mean, const float* var, const float* weight, const float* bias,
                      float eps, void* y) override {
    use_device(device_->index);
    check(cuda::launch_batch_norm(x, type, n, channels, inner, mean, var, weight, bias, eps, y,
                                  device_->launch),
          "batch_norm kernel launch");
  }

  void run_batch_norm_backward(const void* x, const void* dy, DType type, int64_t n,
                               int64_t channels, int64_t inner, const float* mean, const float* var,
                               const float* weight, float eps, bool batch_stats, void* dx,
                               float* dweight, float* dbias) override {
    use_device(device_->index);
    const StreamScratch scratch(
        device_, cuda::batch_norm_backward_scratch_bytes(n, channels, inner, device_->launch),
        "batch_norm_backward");
    check(cuda::launch_batch_norm_backward(x, dy, type, n, channels, inner, mean, var, weight, eps,
                                           batch_stats, dx, dweight, dbias, scratch.get(),
                                           device_->launch),
          "batch_norm_backward kernel launch");
  }

  void run_gather_rows(const void* table, size_t row_bytes, int64_t table_rows, const void* indices,
                       DType index_type, int64_t count, void* out) override {
    use_device(device_->index);
    check(cuda::launch_gather_rows(table, row_bytes, table_rows, indices, index_type, count, out,
                                   device_->launch),
          "gather_rows kernel launch");
  }

  void run_scatter_add_rows(const void* src, DType src_type, int64_t cols, const void* indices,
                            DType index_type, int64_t count, float* dst,
                            int64_t dst_rows) override {
    use_device(device_->index);
    const StreamScratch scratch(
        device_, cuda::scatter_add_rows_scratch_bytes(count, index_type, device_->launch),
        "scatter_add_rows");
    check(cuda::launch_scatter_add_rows(src, src_type, cols, indices, index_type, count, dst,
                                        dst_rows, scratch.get(), device_->launch),
          "scatter_add_rows kernel launch");
  }

  void run_copy_strided(void* dst, const void* src, size_t elem_size,
                        const StridedCopy& layout) override {
    use_device(device_->index);
    check(cuda::launch_copy_strided(dst, src, elem_size, layout, device_->launch),
          "copy_strided kernel launch");
  }

  void run_dropout(const void* x, void* y, DType type, int64_t count, uint64_t seed,
                   uint64_t offset, uint32_t threshold, float scale) override {
    use_device(device_->index);
    check(cuda::launch_dropout(x, y, type, count, seed, offset, threshold, scale, device_->launch),
          "dropout kernel launch");
  }

  void run_check_indices(const void* indices, DType type, int64_t count, const IndexCheck& rule,
                         float* valid, int64_t* record) override {
    use_device(device_->index);
    const StreamScratch scratch(device_, cuda::check_indices_scratch_bytes(), "check_indices");
    check(cuda::launch_check_indices(indices, type, count, rule, valid, record, scratch.get(),
                                     device_->launch),
          "check_indices kernel launch");
  }

  void run_bce_with_logits(const void* logits, const void* targets, DType type, int64_t count,
                           float* losses, const BceWeights& weights) override {
    use_device(device_->index);
    check(cuda::launch_bce_with_logits(logits, targets, type, count, losses, weights,
                                       device_->launch),
          "bce_with_logits kernel launch");
  }

  void run_bce_with_logits_backward(const void* logits, const void* targets, DType type,
                                    int64_t count, const BceWeights& weights, const float* dloss,
                                    int64_t dloss_stride, float scale, void* d_logits,
                                    void* d_targets) override {
    use_device(device_->index);
    check(cuda::launch_bce_with_logits_backward(logits, targets, type, count, weights, dloss,
                                                dloss_stride, scale, d_logits, d_targets,
                                                device_->launch),
          "bce_with_logits backward kernel launch");
  }

  void run_mse_loss(const void* input, const void* target, DType type, int64_t count,
                    float* losses) override {
    use_device(device_->index);
    check(cuda::launch_mse_loss(input, target, type, count, losses, device_->launch),
          "mse_loss kernel launch");
  }

  void run_mse_loss_backward(const void* input, const void* target, DType type, int64_t count,
                             const float* dloss, int64_t dloss_stride, float scale, void* d_input,
                             void* d_target) override {
    use_device(device_->index);
    check(cuda::launch_mse_loss_backward(input, target, type, count, dloss, dloss_stride, scale,
                                         d_input, d_target, device_->launch),
          "mse_loss backward kernel launch");
  }

 private:
  std::shared_ptr<const CudaDevice> device_;
};

// cuBLASLt (cublaslt_gemm.h): the handle is created with the device
// current and lives as long as the backend.
class CudaGemm final : public GemmPrimitives {
 public:
  explicit CudaGemm(std::shared_ptr<const CudaDevice> device) : device_(std::move(device)) {
    use_device(device_->index);
    gemm_ = std::make_unique<cuda::CublasLtGemm>(std::make_unique<CudaAllocator>(device_),
                                                 device_->launch);
  }

 protected:
  void run_gemm(const GemmArgs& args) override {
    use_device(device_->index);
    gemm_->run(args, tf32());
  }

 public:
  // The cuBLASLt handle and workspace, shared with the FP8 products.
  cuda::CublasLtGemm& cublaslt() { return *gemm_; }

 private:
  std::shared_ptr<const CudaDevice> device_;
  std::unique_ptr<cuda::CublasLtGemm> gemm_;
};

// FP8 quantization and the recipes' updates (kernels/fp8_launch.cuh): any
// device, since cuda_fp8.h converts in software where the hardware lacks
// the instruction.
class CudaFp8 final : public Fp8Primitives {
 public:
  explicit CudaFp8(std::shared_ptr<const CudaDevice> device) : device_(std::move(device)) {}

 protected:
  void run_quantize(const Fp8QuantizeArgs& args) override {
    use_device(device_->index);
    check(cuda::launch_fp8_quantize(args, device_->launch), "fp8 quantize kernel launch");
  }
  void run_finish_step(const Fp8Slots& slots, const Fp8ScaleRule& rule) override {
    use_device(device_->index);
    check(cuda::launch_fp8_finish_step(slots, rule, device_->launch), "fp8 update kernel launch");
  }
  void run_scale_from_amax(const Fp8Slots& slots, int64_t slot, const float* amax,
                           const Fp8ScaleRule& rule) override {
    use_device(device_->index);
    check(cuda::launch_fp8_scale_from_amax(slots, slot, amax, rule, device_->launch),
          "fp8 scale kernel launch");
  }
  void run_count_fp8_range(const void* x, DType x_type, int64_t count, const float* scale,
                           DType y_type, int64_t* counts) override {
    use_device(device_->index);
    check(cuda::launch_fp8_count_range(x, x_type, count, scale, y_type, counts, device_->launch),
          "fp8 range count kernel launch");
  }

 private:
  std::shared_ptr<const CudaDevice> device_;
};

// FP8 products through cuBLASLt (CublasLtGemm::run_fp8), provided on
// devices of compute capability 8.9 and later. cuBLASLt's FP8 kernels take
// the TN layout (our B transposed, A not: x W^T as a linear layer stores
// it), dimensions that are multiples of 16 and 16-byte aligned matrices;
// supports() says which rule a product breaks, so the op can fall back.
class CudaFp8Gemm final : public Fp8GemmPrimitives {
 public:
  CudaFp8Gemm(std::shared_ptr<const CudaDevice> device, CudaGemm& gemm)
      : device_(std::move(device)), gemm_(gemm) {}

 protected:
  bool run_supports(const Fp8GemmArgs& g, std::string* why) const override {
    const auto refuse = [&](std::string reason) {
      if (why != nullptr) *why = std::move(reason);
      return false;
    };
    if (g.trans_a || !g.trans_b)
      return refuse(cat("cuBLASLt's FP8 products take A as stored and B transposed (TN); this one "
                        "has A", g.trans_a ? "^T" : "", " and B", g.trans_b ? "^T" : ""));
    if (g.m % 16 != 0 || g.n % 16 != 0 || g.k % 16 != 0)
      return refuse(cat("m ", g.m, ", n ", g.n, ", k ", g.k,
                        ": cuBLASLt's FP8 products need multiples of 16"));
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(g.a) || !aligned(g.b) || !aligned(g.d) || !aligned(g.bias))
      return refuse("cuBLASLt's FP8 products need 16-byte aligned matrices and bias");
    return true;
  }
  void run_gemm(const Fp8GemmArgs& args) override {
    use_device(device_->index);
    gemm_.cublaslt().run_fp8(args);
  }

 private:
  std::shared_ptr<const CudaDevice> device_;
  CudaGemm& gemm_;
};

// The precision doctor's passes (kernels/grad_stats_ops.cuh); front doors
// in backend_grad_stats.cpp.
class CudaGradStats final : public GradStatsPrimitives {
 public:
  explicit CudaGradStats(std::shared_ptr<const CudaDevice> device) : device_(std::move(device)) {}

 protected:
  void run_unscale_with_stats(const std::vector<TensorSpan>& ins,
                              const std::vector<TensorSpan>& outs, const float* scale,
                              float* found_inf, int32_t* nonfinite,
                              math::GradStatsRecord* records) override {
    use_device(device_->index);
    check(cuda::launch_unscale_with_stats(ins, outs, scale, found_inf, nonfinite, records,
                                          device_->launch),
          "unscale_with_stats kernel launch");
  }
  void run_count_lost_updates(const std::vector<LostUpdateSpan>& spans,
                              math::GradStatsRecord* records) override {
    use_device(device_->index);
    check(cuda::launch_count_lost_updates(spans, records, device_->launch),
          "count_lost_updates kernel launch");
  }
  void run_record_sample(math::DoctorSample* entry, int64_t step, const float* scale,
                         const float* found_inf, const int32_t* nonfinite,
                         const math::GradStatsRecord* records, int32_t count) override {
    use_device(device_->index);
    check(cuda::launch_record_sample(entry, step, scale, found_inf, nonfinite, records, count,
                                     device_->launch),
          "record_sample kernel launch");
  }

 private:
  std::shared_ptr<const CudaDevice> device_;
};

// Fused attention (kernels/attention_launch.cuh); the backward pass's
// per-row dout . out comes from the stream-ordered pool. f16 and bf16 run
// on the tensor cores where those kernels take the shape, unless
// AMPX_CUDA_ATTENTION=tiled asks for the fp32 tiles everywhere (to compare
// the two, or to set the tensor cores aside).
class CudaAttention final : public AttentionPrimitives {
 public:
  explicit CudaAttention(std::shared_ptr<const CudaDevice> device) : device_(std::move(device)) {
    const char* kernels = std::getenv("AMPX_CUDA_ATTENTION");
    tensor_cores_ = !(kernels && std::string(kernels) == "tiled");
  }

 protected:
  void run_forward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                   DType type, void* out, float* lse) override {
    use_device(device_->index);
    check(cuda::launch_attention_forward(shape, q, k, v, type, out, lse, tensor_cores_,
                                         device_->launch),
          "attention_forward kernel launch");
  }
  void run_backward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                    const void* out, const void* dout, const float* lse, DType type, void* dq,
                    void* dk, void* dv) override {
    use_device(device_->index);
    const StreamScratch scratch(device_, cuda::attention_backward_scratch_bytes(shape),
                                "attention_backward");
    check(cuda::launch_attention_backward(shape, q, k, v, out, dout, lse, type, dq, dk, dv,
                                          scratch.get(), tensor_cores_, device_->launch),
          "attention_backward kernel launch");
  }

 private:
  std::shared_ptr<const CudaDevice> device_;
  bool tensor_cores_ = true;
};

// Pooling (kernels/pool2d.cu); convolution is cuDNN's (cudnn_conv.h).
class CudaPooling final : public PoolingPrimitives {
 public:
  explicit CudaPooling(std::shared_ptr<const CudaDevice> device) : device_(std::move(device)) {}

 protected:
  void run_pool2d_forward(const Pool2dShape& shape, const void* x, DType type, void* y) override {
    use_device(device_->index);
    check(cuda::launch_pool2d_forward(shape, x, type, y, device_->launch),
          "pool2d_forward kernel launch");
  }
  void run_pool2d_backward(const Pool2dShape& shape, const void* x, const void* dy, DType type,
                           void* dx) override {
    use_device(device_->index);
    check(cuda::launch_pool2d_backward(shape, x, dy, type, dx, device_->launch),
          "pool2d_backward kernel launch");
  }
  void run_max_pool2d_gather(const Pool2dShape& shape, const void* x, const void* src, DType type,
                             void* y) override {
    use_device(device_->index);
    check(cuda::launch_max_pool2d_gather(shape, x, src, type, y, device_->launch),
          "max_pool2d_gather kernel launch");
  }

 private:
  std::shared_ptr<const CudaDevice> device_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<const CudaDevice> device)
      // 256: what every CUDA allocation routine guarantees, and what our pool returns.
      : Backend(BackendInfo{AMPX_DEVICE_CUDA, device->index, 256, false,
                            cat("CUDA device ", device->index)}),
        device_(device),
        amp_(device),
        nn_(device),
        gemm_(device),
        grad_stats_(device),
        attention_(device),
        pooling_(device),
        fp8_(device),
        fp8_gemm_(device, gemm_) {
    provide(amp_);
    provide(nn_);
    provide(gemm_);
    provide(grad_stats_);
    provide(attention_);
    provide(pooling_);
    provide(fp8_);
    if (device->compute_capability >= 89)
      provide(fp8_gemm_);
    else
      explain_missing(Capability::Fp8Gemm,
                      cat("CUDA device ", device->index, " has compute capability ",
                          device->compute_capability / 10, ".", device->compute_capability % 10,
                          "; FP8 products need 8.9 (Ada) or later"));
    std::string why;
    if (const cuda::CudnnLibrary* cudnn = cuda::load_cudnn(&why)) {
      convolution_ = std::make_unique<cuda::CudnnConvolution>(
          *cudnn, device_->index, std::make_unique<CudaAllocator>(device_), device_->launch);
      provide(*convolution_);
    } else {
      explain_missing(Capability::Convolution, why);
    }
  }

  ~CudaBackend() override {
    if (comm_stream_ == nullptr) return;
    // The driver releases the stream once its queued work has completed.
    bool failed = cudaSetDevice(device_->index) != cudaSuccess;
    failed |= cudaStreamDestroy(comm_stream_) != cudaSuccess;
    if (failed) cudaGetLastError();
  }

  std::unique_ptr<Allocator> make_default_allocator() override {
    return std::make_unique<CudaAllocator>(device_);
  }

  void check_device_pointer(const void* ptr, const char* what) override {
    use_device(device_->index);
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

  void synchronize() override {
    use_device(device_->index);
    check(cudaStreamSynchronize(device_->stream), "cudaStreamSynchronize");
    if (comm_stream_ != nullptr)
      check(cudaStreamSynchronize(comm_stream_), "cudaStreamSynchronize (communication)");
  }

  std::unique_ptr<DeviceEvent> make_event() override {
    return std::make_unique<CudaEvent>(device_->index);
  }

  void record_event(DeviceEvent& event, Stream stream) override {
    cudaStream_t target = stream_of(stream);
    check(cudaEventRecord(static_cast<CudaEvent&>(event).get(), target), "cudaEventRecord");
  }

  void wait_event(Stream stream, const DeviceEvent& event) override {
    cudaStream_t waiter = stream_of(stream);
    check(cudaStreamWaitEvent(waiter, static_cast<const CudaEvent&>(event).get(), 0),
          "cudaStreamWaitEvent");
  }

  bool event_completed(const DeviceEvent& event) override {
    const cudaError_t status = cudaEventQuery(static_cast<const CudaEvent&>(event).get());
    if (status == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: cleared so that it is not reported later
      return false;
    }
    check(status, "cudaEventQuery");
    return true;
  }

  void* native_stream(Stream stream) override { return stream_of(stream); }

  void make_current() override { use_device(device_->index); }

 protected:
  // backend.h promises that the host copies have completed on return, so the
  // caller may reuse or read its host buffer at once: hence the synchronize.
  void run_copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    use_device(device_->index);
    check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, device_->stream),
          "cudaMemcpyAsync (host to device)");
    check(cudaStreamSynchronize(device_->stream), "cudaStreamSynchronize");
  }

  void run_copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    use_device(device_->index);
    check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, device_->stream),
          "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(device_->stream), "cudaStreamSynchronize");
  }

  void run_copy(void* dst, const void* src, size_t bytes) override {
    use_device(device_->index);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, device_->stream),
          "cudaMemcpyAsync (device to device)");
  }

  void run_fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count) override {
    use_device(device_->index);
    check(cuda::launch_fill(dst, elem_size, pattern, count, device_->launch), "fill kernel launch");
  }

  void run_convert(void* dst, DType dst_type, const void* src, DType src_type,
                   int64_t count) override {
    use_device(device_->index);
    check(cuda::launch_convert(dst, dst_type, src, src_type, count, device_->launch),
          "convert kernel launch");
  }

 private:
  // The device made current; the communication stream made at its first
  // use (non-blocking, like ampx's own compute stream, so that neither
  // serialises with the legacy default stream).
  cudaStream_t stream_of(Stream stream) {
    use_device(device_->index);
    if (stream == Stream::Compute) return device_->stream;
    if (comm_stream_ == nullptr)
      check(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags (communication)");
    return comm_stream_;
  }

  std::shared_ptr<const CudaDevice> device_;
  cudaStream_t comm_stream_ = nullptr;
  CudaAmp amp_;
  CudaNn nn_;
  CudaGemm gemm_;
  CudaGradStats grad_stats_;
  CudaAttention attention_;
  CudaPooling pooling_;
  CudaFp8 fp8_;
  CudaFp8Gemm fp8_gemm_;
  std::unique_ptr<cuda::CudnnConvolution> convolution_;  // when cuDNN loads
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
    fail(AMPX_ERR_NO_DEVICE,
         "no usable CUDA device: cudaGetDeviceCount failed: ", cudaGetErrorString(status));
  }
  if (device_index < 0 || device_index >= count) {
    fail(AMPX_ERR_NO_DEVICE, "CUDA device index ", device_index, " is out of range: ", count,
         count == 1 ? " device is" : " devices are", " present");
  }

  use_device(device_index);
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
  device->compute_capability =
      device_attribute(cudaDevAttrComputeCapabilityMajor, device_index) * 10 +
      device_attribute(cudaDevAttrComputeCapabilityMinor, device_index);
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

}  // namespace ampx::impl
