// cpu_fp8.h -- the CPU backend's FP8 capabilities (backend_fp8.h).
//
// Quantization runs convert_bulk's vectorised FP8 rounding (the bits of
// kernels/math/fp8.h) over the thread pool; recipe updates run
// kernels/math/fp8_scaling.h per slot. FP8 products decode A and B exactly
// to fp32 (every FP8 value is a float), multiply them with the fp32 GEMM
// (cpu::gemm, alpha times both dequantization factors), and round the
// result once to D -- so CI trains FP8 models end to end, on the same
// quantized values a GPU multiplies. Every layout is taken.
#pragma once

#include "backend/cpu/thread_pool.h"
#include "core/backend_fp8.h"

namespace ampx::impl {

class CpuFp8 final : public Fp8Primitives {
 public:
  explicit CpuFp8(ThreadPool& pool) : pool_(pool) {}

 protected:
  void run_quantize(const Fp8QuantizeArgs& args) override;
  void run_finish_step(const Fp8Slots& slots, const Fp8ScaleRule& rule) override;
  void run_scale_from_amax(const Fp8Slots& slots, int64_t slot, const float* amax,
                           const Fp8ScaleRule& rule) override;
  void run_count_fp8_range(const void* x, DType x_type, int64_t count, const float* scale,
                           DType y_type, int64_t* counts) override;

 private:
  ThreadPool& pool_;
};

class CpuFp8Gemm final : public Fp8GemmPrimitives {
 public:
  explicit CpuFp8Gemm(ThreadPool& pool) : pool_(pool) {}

 protected:
  bool run_supports(const Fp8GemmArgs&, std::string*) const override { return true; }
  void run_gemm(const Fp8GemmArgs& args) override;

 private:
  ThreadPool& pool_;
};

}  // namespace ampx::impl
