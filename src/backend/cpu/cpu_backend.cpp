// cpu_backend.cpp -- Backend on the host: aligned heap memory, memcpy, and
// element loops split over the context's thread pool. The multi-tensor
// primitives of mixed-precision training are in cpu_amp.cpp.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend/cpu/cpu_amp.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/thread_pool.h"
#include "core/convert_bulk.h"
#include "core/error.h"

namespace ampx {
namespace {

// 64 bytes: a cache line, and what AVX-512 loads like.
constexpr size_t kCpuAlignment = 64;

// Below this many elements a loop runs on the calling thread only.
constexpr int64_t kElementGrain = 1 << 15;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* ptr = std::aligned_alloc(kCpuAlignment, rounded);
    if (ptr) reserved_ += bytes;
    return ptr;
  }
  void deallocate(void* ptr, size_t bytes) override {
    std::free(ptr);
    reserved_ -= bytes;
  }
  uint64_t reserved_bytes() const override { return reserved_; }

 private:
  uint64_t reserved_ = 0;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}

  ampx_device_type device_type() const override { return AMPX_DEVICE_CPU; }
  int32_t device_index() const override { return 0; }
  size_t alignment() const override { return kCpuAlignment; }

  std::unique_ptr<Allocator> make_default_allocator() override {
    return std::make_unique<CpuAllocator>();
  }

  // Any host address is usable; there is nothing to verify.
  void check_device_pointer(const void*, const char*) override {}

  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    pool_.parallel_for(static_cast<int64_t>(bytes), kElementGrain * 8, [&](int64_t b, int64_t e) {
      std::memcpy(d + b, s + b, static_cast<size_t>(e - b));
    });
  }

  void fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count) override {
    pool_.parallel_for(count, kElementGrain, [&](int64_t b, int64_t e) {
      switch (elem_size) {
        case 1: fill_range(static_cast<uint8_t*>(dst), static_cast<uint8_t>(pattern), b, e); break;
        case 2: fill_range(static_cast<uint16_t*>(dst), static_cast<uint16_t>(pattern), b, e); break;
        case 4: fill_range(static_cast<uint32_t*>(dst), static_cast<uint32_t>(pattern), b, e); break;
        case 8: fill_range(static_cast<uint64_t*>(dst), pattern, b, e); break;
        default: fail(AMPX_ERR_INTERNAL, "fill: element size ", elem_size, " is not 1, 2, 4 or 8");
      }
    });
  }

  void convert(void* dst, DType dst_type, const void* src, DType src_type, int64_t count) override {
    const size_t dst_size = dtype_size(dst_type);
    const size_t src_size = dtype_size(src_type);
    pool_.parallel_for(count, kElementGrain, [&](int64_t b, int64_t e) {
      convert_bulk(static_cast<char*>(dst) + b * dst_size, dst_type,
                   static_cast<const char*>(src) + b * src_size, src_type, e - b);
    });
  }

  void synchronize() override {}

  void multi_tensor_scale(const std::vector<TensorSpan>& ins, const std::vector<TensorSpan>& outs,
                          const float* factor, bool reciprocal, float* found_inf) override {
    cpu::multi_tensor_scale(pool_, ins, outs, factor, reciprocal, found_inf);
  }
  void multi_tensor_norm(const std::vector<TensorSpan>& tensors, NormType type,
                         float* out) override {
    cpu::multi_tensor_norm(pool_, tensors, type, out);
  }
  void clip_coefficient(const float* total_norm, float max_norm, float* coef) override {
    cpu::clip_coefficient(total_norm, max_norm, coef);
  }
  void multi_tensor_clamp(const std::vector<TensorSpan>& tensors, float limit) override {
    cpu::multi_tensor_clamp(pool_, tensors, limit);
  }
  void multi_tensor_count_nonfinite(const std::vector<TensorSpan>& tensors,
                                    int64_t* counts) override {
    cpu::multi_tensor_count_nonfinite(pool_, tensors, counts);
  }
  void scaler_update(math::ScalerState* state, const std::vector<const float*>& found_infs,
                     const math::ScalerConfig& config, bool force, float forced_scale) override {
    cpu::scaler_update(state, found_infs, config, force, forced_scale);
  }
  void increment_steps(int64_t* steps, int64_t count, const float* found_inf) override {
    cpu::increment_steps(steps, count, found_inf);
  }
  void sgd_step(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                const StepScalars& scalars) override {
    cpu::sgd_step(pool_, params, config, scalars);
  }
  void adam_step(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                 const StepScalars& scalars) override {
    cpu::adam_step(pool_, params, config, scalars);
  }

  void unary(UnaryOp op, const void* x, void* y, DType type, int64_t count) override {
    cpu::unary(pool_, op, x, y, type, count);
  }
  void unary_backward(UnaryOp op, const void* x, const void* dy, void* dx, DType type,
                      int64_t count) override {
    cpu::unary_backward(pool_, op, x, dy, dx, type, count);
  }
  void binary(BinaryOp op, const void* a, const void* b, void* out, DType type, int64_t count,
              int64_t b_count) override {
    cpu::binary(pool_, op, a, b, out, type, count, b_count);
  }
  void affine(const void* x, void* y, DType type, int64_t count, float scale,
              float shift) override {
    cpu::affine(pool_, x, y, type, count, scale, shift);
  }
  void add_into(void* dst, DType dst_type, const void* src, DType src_type,
                int64_t count) override {
    cpu::add_into(pool_, dst, dst_type, src, src_type, count);
  }
  void sum_rows(const void* x, DType type, int64_t rows, int64_t cols, void* out,
                DType out_type) override {
    cpu::sum_rows(pool_, x, type, rows, cols, out, out_type);
  }
  void sum_all(const void* x, DType type, int64_t count, float* out) override {
    cpu::sum_all(pool_, x, type, count, out);
  }
  void softmax(const void* x, void* y, DType type, int64_t rows, int64_t cols, bool log) override {
    cpu::softmax(pool_, x, y, type, rows, cols, log);
  }
  void softmax_backward(const void* y, const void* dy, void* dx, DType type, int64_t rows,
                        int64_t cols, bool log) override {
    cpu::softmax_backward(pool_, y, dy, dx, type, rows, cols, log);
  }
  void cross_entropy(const void* logits, DType type, const void* labels, DType label_type,
                     int64_t rows, int64_t cols, int64_t ignore_index, float* losses) override {
    cpu::cross_entropy(pool_, logits, type, labels, label_type, rows, cols, ignore_index, losses);
  }
  void cross_entropy_backward(const void* logits, DType type, const void* labels,
                              DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                              const float* dloss, float scale, void* dlogits) override {
    cpu::cross_entropy_backward(pool_, logits, type, labels, label_type, rows, cols, ignore_index,
                                dloss, scale, dlogits);
  }
  void gemm(const GemmArgs& args) override { cpu::gemm(pool_, args); }
  void layer_norm(const void* x, const void* weight, const void* bias, DType type, int64_t rows,
                  int64_t cols, float eps, void* y, float* mean, float* rstd) override {
    cpu::layer_norm(pool_, x, weight, bias, type, rows, cols, eps, y, mean, rstd);
  }
  void layer_norm_backward(const void* x, const void* dy, const void* weight, DType type,
                           int64_t rows, int64_t cols, const float* mean, const float* rstd,
                           void* dx, void* dweight, void* dbias) override {
    cpu::layer_norm_backward(pool_, x, dy, weight, type, rows, cols, mean, rstd, dx, dweight,
                             dbias);
  }
  void batch_norm_stats(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                        float momentum, float* mean, float* var, float* running_mean,
                        float* running_var) override {
    cpu::batch_norm_stats(pool_, x, type, n, channels, inner, momentum, mean, var, running_mean,
                          running_var);
  }
  void batch_norm(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                  const float* mean, const float* var, const float* weight, const float* bias,
                  float eps, void* y) override {
    cpu::batch_norm(pool_, x, type, n, channels, inner, mean, var, weight, bias, eps, y);
  }
  void batch_norm_backward(const void* x, const void* dy, DType type, int64_t n, int64_t channels,
                           int64_t inner, const float* mean, const float* var,
                           const float* weight, float eps, bool batch_stats, void* dx,
                           float* dweight, float* dbias) override {
    cpu::batch_norm_backward(pool_, x, dy, type, n, channels, inner, mean, var, weight, eps,
                             batch_stats, dx, dweight, dbias);
  }
  void gather_rows(const void* table, size_t row_bytes, int64_t table_rows, const void* indices,
                   DType index_type, int64_t count, void* out) override {
    cpu::gather_rows(pool_, table, row_bytes, table_rows, indices, index_type, count, out);
  }
  void scatter_add_rows(const void* src, DType src_type, int64_t cols, const void* indices,
                        DType index_type, int64_t count, float* dst, int64_t dst_rows) override {
    cpu::scatter_add_rows(pool_, src, src_type, cols, indices, index_type, count, dst, dst_rows);
  }
  void copy_strided(void* dst, const void* src, size_t elem_size,
                    const StridedCopy& layout) override {
    cpu::copy_strided(pool_, dst, src, elem_size, layout);
  }
  void dropout(const void* x, void* y, DType type, int64_t count, uint64_t seed, uint64_t offset,
               uint32_t threshold, float scale) override {
    cpu::dropout(pool_, x, y, type, count, seed, offset, threshold, scale);
  }
  void bce_with_logits(const void* logits, const void* targets, DType type, int64_t count,
                       float* losses) override {
    cpu::bce_with_logits(pool_, logits, targets, type, count, losses);
  }
  void check_indices(const void* indices, DType type, int64_t count, const IndexCheck& check,
                     float* valid, int64_t* record) override {
    cpu::check_indices(indices, type, count, check, valid, record);
  }

 private:
  template <class T>
  static void fill_range(T* dst, T value, int64_t begin, int64_t end) {
    std::fill(dst + begin, dst + end, value);
  }

  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int32_t num_threads) {
  int threads = num_threads;
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace ampx
