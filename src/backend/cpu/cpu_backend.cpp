// cpu_backend.cpp -- Backend on the host: aligned heap memory, memcpy, and
// element loops split over the context's thread pool; its capabilities
// forward to the loops of cpu_amp.cpp (mixed precision) and cpu_ops.h (the
// ops' primitives and GEMM).
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "backend/cpu/cpu_amp.h"
#include "backend/cpu/cpu_fp8.h"
#include "backend/cpu/cpu_grad_stats.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dnnl_library.h"
#include "backend/cpu/thread_pool.h"
#include "core/convert_bulk.h"
#include "core/error.h"
#include "platform/platform.h"

namespace ampx::impl {
namespace {

// 64 bytes: a cache line, and what AVX-512 loads like.
constexpr size_t kCpuAlignment = 64;

// Below this many elements a loop runs on the calling thread only.
constexpr int64_t kElementGrain = 1 << 15;

// Aligned heap memory that keeps the large blocks it is given back and
// hands them out again for requests of the same rounded size. The C
// library maps a large block for each request and unmaps it when freed, so
// every training step touched its activations' memory afresh: about 2,400
// page faults a step of bench_vs_torch_cpu.py's fp32 CNN (each a trip
// through the kernel to clear a page); with this cache a few hundred in the
// second step and none from the fifth. A step allocates the same sizes each
// time, so exact sizes are enough. At most as many bytes as were ever in
// use at once are kept (the context holds at most twice its peak), and all
// of them are given back when an allocation fails, before it is tried
// again.
class CpuAllocator final : public Allocator {
 public:
  ~CpuAllocator() override { release_cache(); }

  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* ptr = nullptr;
    if (rounded >= kCachedBlock) {
      const auto kept = cache_.find(rounded);
      if (kept != cache_.end()) {
        ptr = kept->second;
        cache_.erase(kept);
        cached_ -= rounded;
        reserved_ -= rounded;
      }
    }
    if (!ptr) ptr = platform::aligned_alloc(kCpuAlignment, rounded);
    if (!ptr && !cache_.empty()) {
      release_cache();
      ptr = platform::aligned_alloc(kCpuAlignment, rounded);
    }
    if (!ptr) return nullptr;
    reserved_ += bytes;
    live_ += rounded;
    peak_live_ = std::max(peak_live_, live_);
    return ptr;
  }
  void deallocate(void* ptr, size_t bytes) override {
    const size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    reserved_ -= bytes;
    live_ -= rounded;
    if (ptr && rounded >= kCachedBlock && cached_ + rounded <= peak_live_) {
      try {
        cache_.emplace(rounded, ptr);
        cached_ += rounded;
        reserved_ += rounded;
        return;
      } catch (...) {  // no memory for the entry: the block goes back
      }
    }
    platform::aligned_free(ptr);
  }
  uint64_t reserved_bytes() const override { return reserved_; }

 private:
  // Blocks from 128 KiB up are kept: the C library maps blocks from 128 KiB
  // up (more once it has seen larger ones freed), and smaller ones cost
  // little to get again. (From 256 KiB, a bf16 [1024, 64] activation was
  // mapped and unmapped at every use: a tenth of a bf16 eikonal step.)
  static constexpr size_t kCachedBlock = size_t{128} << 10;

  void release_cache() {
    for (const auto& kept : cache_) platform::aligned_free(kept.second);
    reserved_ -= cached_;
    cached_ = 0;
    cache_.clear();
  }

  std::multimap<size_t, void*> cache_;  // rounded size -> kept block
  size_t cached_ = 0;                   // bytes in cache_
  size_t live_ = 0, peak_live_ = 0;     // rounded bytes handed out
  uint64_t reserved_ = 0;               // bytes asked for and not given back, plus cached_
};

// Work on the CPU completes before each call returns, so events mark
// nothing and waits never wait.
class CpuEvent final : public DeviceEvent {};

class CpuAmp final : public AmpPrimitives {
 public:
  explicit CpuAmp(ThreadPool& pool) : pool_(pool) {}

 protected:
  void run_multi_tensor_scale(const std::vector<TensorSpan>& ins,
                              const std::vector<TensorSpan>& outs, const float* factor,
                              bool reciprocal, float* found_inf) override {
    cpu::multi_tensor_scale(pool_, ins, outs, factor, reciprocal, found_inf);
  }
  void run_multi_tensor_norm(const std::vector<TensorSpan>& tensors, NormType type,
                             float* out) override {
    cpu::multi_tensor_norm(pool_, tensors, type, out);
  }
  void run_clip_coefficient(const float* total_norm, float max_norm, float* coef) override {
    cpu::clip_coefficient(total_norm, max_norm, coef);
  }
  void run_multi_tensor_clamp(const std::vector<TensorSpan>& tensors, float limit) override {
    cpu::multi_tensor_clamp(pool_, tensors, limit);
  }
  void run_multi_tensor_count_nonfinite(const std::vector<TensorSpan>& tensors,
                                        int64_t* counts) override {
    cpu::multi_tensor_count_nonfinite(pool_, tensors, counts);
  }
  void run_scaler_update(math::ScalerState* state, const std::vector<const float*>& found_infs,
                         const math::ScalerConfig& config, bool force,
                         float forced_scale) override {
    cpu::scaler_update(state, found_infs, config, force, forced_scale);
  }
  void run_increment_steps(int64_t* steps, int64_t count, const float* found_inf) override {
    cpu::increment_steps(steps, count, found_inf);
  }
  void run_lr_schedule(const math::LrSchedule* schedules, int32_t groups, const int64_t* step,
                       float* lr) override {
    cpu::lr_schedule(schedules, groups, step, lr);
  }
  void run_sgd_step(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                    const StepScalars& scalars) override {
    cpu::sgd_step(pool_, params, config, scalars);
  }
  void run_adam_step(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                     const StepScalars& scalars) override {
    cpu::adam_step(pool_, params, config, scalars);
  }

 private:
  ThreadPool& pool_;
};

class CpuNn final : public NnPrimitives {
 public:
  explicit CpuNn(ThreadPool& pool) : pool_(pool) {}

 protected:
  void run_unary(UnaryOp op, const void* x, void* y, DType type, int64_t count) override {
    cpu::unary(pool_, op, x, y, type, count);
  }
  void run_unary_backward(UnaryOp op, const void* x, const void* dy, void* dx, DType type,
                          int64_t count) override {
    cpu::unary_backward(pool_, op, x, dy, dx, type, count);
  }
  void run_binary(BinaryOp op, const void* a, const void* b, void* out, DType type, int64_t count,
                  int64_t b_count) override {
    cpu::binary(pool_, op, a, b, out, type, count, b_count);
  }
  void run_binary_broadcast(BinaryOp op, const void* a, const void* b, void* out, DType type,
                            const BroadcastLayout& layout) override {
    cpu::binary_broadcast(pool_, op, a, b, out, type, layout);
  }
  void run_reduce_dims(DimReduce op, const void* x, DType type, const ReduceLayout& layout,
                       void* out, DType out_type) override {
    cpu::reduce_dims(pool_, op, x, type, layout, out, out_type);
  }
  void run_masked_fill(const void* x, DType type, const void* mask, DType mask_type, float value,
                       void* out, const BroadcastLayout& layout) override {
    cpu::masked_fill(pool_, x, type, mask, mask_type, value, out, layout);
  }
  void run_pow_scalar(const void* x, void* y, DType type, int64_t count,
                      float exponent) override {
    cpu::pow_scalar(pool_, x, y, type, count, exponent);
  }
  void run_pow_scalar_backward(const void* x, const void* dy, void* dx, DType type, int64_t count,
                               float exponent) override {
    cpu::pow_scalar_backward(pool_, x, dy, dx, type, count, exponent);
  }
  void run_rotary(const void* x, DType type, const void* cos, const void* sin, DType table_type,
                  void* out, const RotaryShape& shape, bool inverse) override {
    cpu::rotary(pool_, x, type, cos, sin, table_type, out, shape, inverse);
  }
  void run_affine(const void* x, void* y, DType type, int64_t count, float scale,
                  float shift) override {
    cpu::affine(pool_, x, y, type, count, scale, shift);
  }
  void run_add_into(void* dst, DType dst_type, const void* src, DType src_type,
                    int64_t count) override {
    cpu::add_into(pool_, dst, dst_type, src, src_type, count);
  }
  void run_sum_rows(const void* x, DType type, int64_t rows, int64_t cols, void* out,
                    DType out_type) override {
    cpu::sum_rows(pool_, x, type, rows, cols, out, out_type);
  }
  void run_sum_all(const void* x, DType type, int64_t count, float* out) override {
    cpu::sum_all(pool_, x, type, count, out);
  }
  void run_softmax(const void* x, void* y, DType type, int64_t rows, int64_t cols,
                   bool log) override {
    cpu::softmax(pool_, x, y, type, rows, cols, log);
  }
  void run_softmax_backward(const void* y, const void* dy, void* dx, DType type, int64_t rows,
                            int64_t cols, bool log) override {
    cpu::softmax_backward(pool_, y, dy, dx, type, rows, cols, log);
  }
  void run_cross_entropy(const void* logits, DType type, const void* labels, DType label_type,
                         int64_t rows, int64_t cols, int64_t ignore_index, float* losses) override {
    cpu::cross_entropy(pool_, logits, type, labels, label_type, rows, cols, ignore_index, losses);
  }
  void run_cross_entropy_backward(const void* logits, DType type, const void* labels,
                                  DType label_type, int64_t rows, int64_t cols,
                                  int64_t ignore_index, const float* dloss, float scale,
                                  void* dlogits, int64_t dloss_stride) override {
    cpu::cross_entropy_backward(pool_, logits, type, labels, label_type, rows, cols, ignore_index,
                                dloss, scale, dlogits, dloss_stride);
  }
  void run_cross_entropy_smoothed(const void* logits, DType type, const void* labels,
                                  DType label_type, int64_t rows, int64_t cols,
                                  int64_t ignore_index, const float* class_weight,
                                  float smoothing, float* losses, float* row_weights) override {
    cpu::cross_entropy_smoothed(pool_, logits, type, labels, label_type, rows, cols, ignore_index,
                                class_weight, smoothing, losses, row_weights);
  }
  void run_cross_entropy_smoothed_backward(const void* logits, DType type, const void* labels,
                                           DType label_type, int64_t rows, int64_t cols,
                                           int64_t ignore_index, const float* class_weight,
                                           float smoothing, const float* dloss,
                                           void* dlogits, int64_t dloss_stride) override {
    cpu::cross_entropy_smoothed_backward(pool_, logits, type, labels, label_type, rows, cols,
                                         ignore_index, class_weight, smoothing, dloss, dlogits,
                                         dloss_stride);
  }
  void run_layer_norm(const void* x, const void* weight, const void* bias, DType type, int64_t rows,
                      int64_t cols, float eps, void* y, float* mean, float* rstd,
                      bool centered) override {
    cpu::layer_norm(pool_, x, weight, bias, type, rows, cols, eps, y, mean, rstd, centered);
  }
  void run_layer_norm_backward(const void* x, const void* dy, const void* weight, DType type,
                               int64_t rows, int64_t cols, const float* mean, const float* rstd,
                               void* dx, void* dweight, void* dbias, bool centered) override {
    cpu::layer_norm_backward(pool_, x, dy, weight, type, rows, cols, mean, rstd, dx, dweight,
                             dbias, centered);
  }
  void run_batch_norm_stats(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                            float momentum, float* mean, float* var, float* running_mean,
                            float* running_var) override {
    cpu::batch_norm_stats(pool_, x, type, n, channels, inner, momentum, mean, var, running_mean,
                          running_var);
  }
  void run_batch_norm(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                      const float* mean, const float* var, const float* weight, const float* bias,
                      float eps, void* y) override {
    cpu::batch_norm(pool_, x, type, n, channels, inner, mean, var, weight, bias, eps, y);
  }
  void run_batch_norm_backward(const void* x, const void* dy, DType type, int64_t n,
                               int64_t channels, int64_t inner, const float* mean, const float* var,
                               const float* weight, float eps, bool batch_stats, void* dx,
                               float* dweight, float* dbias) override {
    cpu::batch_norm_backward(pool_, x, dy, type, n, channels, inner, mean, var, weight, eps,
                             batch_stats, dx, dweight, dbias);
  }
  void run_gather_rows(const void* table, size_t row_bytes, int64_t table_rows, const void* indices,
                       DType index_type, int64_t count, void* out) override {
    cpu::gather_rows(pool_, table, row_bytes, table_rows, indices, index_type, count, out);
  }
  void run_scatter_add_rows(const void* src, DType src_type, int64_t cols, const void* indices,
                            DType index_type, int64_t count, float* dst,
                            int64_t dst_rows) override {
    cpu::scatter_add_rows(pool_, src, src_type, cols, indices, index_type, count, dst, dst_rows);
  }
  void run_copy_strided(void* dst, const void* src, size_t elem_size,
                        const StridedCopy& layout) override {
    cpu::copy_strided(pool_, dst, src, elem_size, layout);
  }
  void run_dropout(const void* x, void* y, DType type, int64_t count, uint64_t seed,
                   uint64_t offset, uint32_t threshold, float scale) override {
    cpu::dropout(pool_, x, y, type, count, seed, offset, threshold, scale);
  }
  void run_bce_with_logits(const void* logits, const void* targets, DType type, int64_t count,
                           float* losses, const BceWeights& weights) override {
    cpu::bce_with_logits(pool_, logits, targets, type, count, losses, weights);
  }
  void run_bce_with_logits_backward(const void* logits, const void* targets, DType type,
                                    int64_t count, const BceWeights& weights, const float* dloss,
                                    int64_t dloss_stride, float scale, void* d_logits,
                                    void* d_targets) override {
    cpu::bce_with_logits_backward(pool_, logits, targets, type, count, weights, dloss,
                                  dloss_stride, scale, d_logits, d_targets);
  }
  void run_mse_loss(const void* input, const void* target, DType type, int64_t count,
                    float* losses) override {
    cpu::mse_loss(pool_, input, target, type, count, losses);
  }
  void run_mse_loss_backward(const void* input, const void* target, DType type, int64_t count,
                             const float* dloss, int64_t dloss_stride, float scale, void* d_input,
                             void* d_target) override {
    cpu::mse_loss_backward(pool_, input, target, type, count, dloss, dloss_stride, scale, d_input,
                           d_target);
  }
  void run_check_indices(const void* indices, DType type, int64_t count, const IndexCheck& check,
                         float* valid, int64_t* record) override {
    cpu::check_indices(indices, type, count, check, valid, record);
  }

 private:
  ThreadPool& pool_;
};

class CpuGemm final : public GemmPrimitives {
 public:
  explicit CpuGemm(ThreadPool& pool) : pool_(pool) {}

 protected:
  void run_gemm(const GemmArgs& args) override { cpu::gemm(pool_, args); }

 private:
  ThreadPool& pool_;
};

class CpuGradStats final : public GradStatsPrimitives {
 public:
  explicit CpuGradStats(ThreadPool& pool) : pool_(pool) {}

 protected:
  void run_unscale_with_stats(const std::vector<TensorSpan>& ins,
                              const std::vector<TensorSpan>& outs, const float* scale,
                              float* found_inf, int32_t* nonfinite,
                              math::GradStatsRecord* records) override {
    cpu::unscale_with_stats(pool_, ins, outs, scale, found_inf, nonfinite, records);
  }
  void run_count_lost_updates(const std::vector<LostUpdateSpan>& spans,
                              math::GradStatsRecord* records) override {
    cpu::count_lost_updates(pool_, spans, records);
  }
  void run_record_sample(math::DoctorSample* entry, int64_t step, const float* scale,
                         const float* found_inf, const int32_t* nonfinite,
                         const math::GradStatsRecord* records, int32_t count) override {
    cpu::record_sample(entry, step, scale, found_inf, nonfinite, records, count);
  }

 private:
  ThreadPool& pool_;
};

class CpuAttention final : public AttentionPrimitives {
 public:
  explicit CpuAttention(ThreadPool& pool) : pool_(pool) {}

 protected:
  void run_forward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                   DType type, void* out, float* lse) override {
    cpu::attention_forward(pool_, shape, q, k, v, type, out, lse);
  }
  void run_backward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                    const void* out, const void* dout, const float* lse, DType type, void* dq,
                    void* dk, void* dv) override {
    cpu::attention_backward(pool_, shape, q, k, v, out, dout, lse, type, dq, dk, dv);
  }

 private:
  ThreadPool& pool_;
};

class CpuConvolution final : public ConvolutionPrimitives {
 public:
  explicit CpuConvolution(ThreadPool& pool) : pool_(pool) {}

 protected:
  void run_conv2d_forward(const Conv2dShape& shape, const void* x, const void* w, const void* bias,
                          DType type, void* y) override {
    cpu::conv2d_forward(pool_, shape, x, w, bias, type, y);
  }
  void run_conv2d_backward_data(const Conv2dShape& shape, const void* dy, const void* w,
                                DType type, void* dx) override {
    cpu::conv2d_backward_data(pool_, shape, dy, w, type, dx);
  }
  void run_conv2d_backward_weight(const Conv2dShape& shape, const void* dy, const void* x,
                                  DType type, void* dw, void* dbias) override {
    cpu::conv2d_backward_weight(pool_, shape, dy, x, type, dw, dbias);
  }
  void run_conv2d_backward(const Conv2dShape& shape, const void* dy, const void* x, const void* w,
                           DType type, void* dx, void* dw, void* dbias) override {
    cpu::conv2d_backward(pool_, shape, dy, x, w, type, dx, dw, dbias);
  }

 private:
  ThreadPool& pool_;
};

class CpuPooling final : public PoolingPrimitives {
 public:
  explicit CpuPooling(ThreadPool& pool) : pool_(pool) {}

 protected:
  void run_pool2d_forward(const Pool2dShape& shape, const void* x, DType type, void* y) override {
    cpu::pool2d_forward(pool_, shape, x, type, y);
  }
  void run_pool2d_backward(const Pool2dShape& shape, const void* x, const void* dy, DType type,
                           void* dx) override {
    cpu::pool2d_backward(pool_, shape, x, dy, type, dx);
  }
  void run_max_pool2d_gather(const Pool2dShape& shape, const void* x, const void* src, DType type,
                             void* y) override {
    cpu::max_pool2d_gather(pool_, shape, x, src, type, y);
  }

 private:
  ThreadPool& pool_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads)
      : Backend(BackendInfo{AMPX_DEVICE_CPU, 0, kCpuAlignment, true, "CPU"}),
        pool_(threads),
        amp_(pool_),
        nn_(pool_),
        gemm_(pool_),
        grad_stats_(pool_),
        attention_(pool_),
        convolution_(pool_),
        pooling_(pool_),
        fp8_(pool_),
        fp8_gemm_(pool_) {
    provide(amp_);
    provide(nn_);
    provide(gemm_);
    provide(grad_stats_);
    provide(attention_);
    provide(convolution_);
    provide(pooling_);
    provide(fp8_);
    provide(fp8_gemm_);
  }
  // The context's oneDNN plans go with it.
  ~CpuBackend() override { cpu::release_dnnl_plans(pool_); }

  std::unique_ptr<Allocator> make_default_allocator() override {
    return std::make_unique<CpuAllocator>();
  }

  // Any host address is usable; there is nothing to verify.
  void check_device_pointer(const void*, const char*) override {}

  void synchronize() override {}
  std::unique_ptr<DeviceEvent> make_event() override { return std::make_unique<CpuEvent>(); }
  void record_event(DeviceEvent&, Stream) override {}
  void wait_event(Stream, const DeviceEvent&) override {}
  bool event_completed(const DeviceEvent&) override { return true; }
  void* native_stream(Stream) override { return nullptr; }

 protected:
  void run_copy_from_host(void* dst, const void* src, size_t bytes) override {
    run_copy(dst, src, bytes);
  }
  void run_copy_to_host(void* dst, const void* src, size_t bytes) override {
    run_copy(dst, src, bytes);
  }

  void run_copy(void* dst, const void* src, size_t bytes) override {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    pool_.parallel_for(static_cast<int64_t>(bytes), kElementGrain * 8, [&](int64_t b, int64_t e) {
      std::memcpy(d + b, s + b, static_cast<size_t>(e - b));
    });
  }

  void run_fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count) override {
    pool_.parallel_for(count, kElementGrain, [&](int64_t b, int64_t e) {
      switch (elem_size) {
        case 1:
          fill_range(static_cast<uint8_t*>(dst), static_cast<uint8_t>(pattern), b, e);
          break;
        case 2:
          fill_range(static_cast<uint16_t*>(dst), static_cast<uint16_t>(pattern), b, e);
          break;
        case 4:
          fill_range(static_cast<uint32_t*>(dst), static_cast<uint32_t>(pattern), b, e);
          break;
        default:
          fill_range(static_cast<uint64_t*>(dst), pattern, b, e);
          break;
      }
    });
  }

  void run_convert(void* dst, DType dst_type, const void* src, DType src_type,
                   int64_t count) override {
    const size_t dst_size = dtype_size(dst_type);
    const size_t src_size = dtype_size(src_type);
    pool_.parallel_for(count, kElementGrain, [&](int64_t b, int64_t e) {
      convert_bulk(static_cast<char*>(dst) + b * dst_size, dst_type,
                   static_cast<const char*>(src) + b * src_size, src_type, e - b);
    });
  }

 private:
  template <class T>
  static void fill_range(T* dst, T value, int64_t begin, int64_t end) {
    std::fill(dst + begin, dst + end, value);
  }

  ThreadPool pool_;
  CpuAmp amp_;
  CpuNn nn_;
  CpuGemm gemm_;
  CpuGradStats grad_stats_;
  CpuAttention attention_;
  CpuConvolution convolution_;
  CpuPooling pooling_;
  CpuFp8 fp8_;
  CpuFp8Gemm fp8_gemm_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int32_t num_threads) {
  int threads = num_threads;
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace ampx::impl
