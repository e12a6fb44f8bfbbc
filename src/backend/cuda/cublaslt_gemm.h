// cublaslt_gemm.h -- Backend::gemm of the CUDA backend (the contract is
// GemmArgs in backend.h), through cuBLASLt.
//
// Row-major products are handed to cuBLASLt, which is column-major, as their
// transpose: a row-major r x c matrix is the column-major c x r one, so
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with B as cuBLASLt's
// first operand. Accumulation is fp32 throughout (CUBLAS_COMPUTE_32F: f32
// inputs get IEEE fp32 products, never TF32; f16/bf16 inputs are multiplied
// exactly and summed in fp32), alpha and beta are fp32, and a low-precision
// C is rounded once at the end. Split-k algorithms are limited to those that
// combine their partial sums in fp32 in a fixed order, so a product gives
// the same bits on every run.
//
// k == 0 or alpha == 0 gives beta * C (zeros when beta == 0) without
// cuBLASLt, which may refuse k == 0 and would otherwise read A and B. The
// products of a batch go to cuBLASLt as one strided batch when their C
// matrices do not overlap and every stride is >= 0; otherwise one product
// at a time, in batch order, so that C stride 0 with beta 1 sums the
// products as on the CPU.
//
// A bias (GemmArgs::bias) is cuBLASLt's BIAS epilogue, added in fp32
// before C's rounding. Its vector must be 16-byte aligned there (an
// unaligned one is copied to aligned scratch first). Should cuBLASLt have
// no algorithm with the epilogue for a problem, the product goes to fp32
// scratch and a kernel adds beta * C and the bias and rounds C once, so
// the result is the fused epilogue's either way.
//
// FP8 products (run_fp8, backend_fp8.h's Fp8GemmArgs) use the same
// descriptors with FP8 A and B types, compute type 32F and fp32 scales:
// the dequantization factors of A and B as cuBLASLt's A/B scale pointers
// (its A is our B), an FP8 D's scale and amax as the D scale and
// AMAX_D pointers -- device pointers set on the descriptor for each call.
// C is D's layout with beta 0 (never read). cuBLASLt's FP8 kernels take
// only its TN layout (our trans_b, not trans_a) with dimensions that are
// multiples of 16; the caller (CudaFp8Gemm) checks that first. FAST_ACCUM
// stays off: the fp32 sums are promoted as cuBLASLt's accurate mode does.
//
// Nothing synchronizes: descriptors and the algorithm are chosen on the
// host (cuBLASLt's heuristic, whose answer is kept per problem), and the
// multiply is enqueued on the backend's stream.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "core/backend_fp8.h"
#include "core/backend_gemm.h"
#include "backend/cuda/kernels/fill_convert.cuh"

namespace ampx::impl {
namespace cuda {

class CublasLtGemm {
 public:
  // Creates the cuBLASLt handle on the current device and takes the
  // workspace from `memory`, the backend's stream-ordered pool, until
  // destruction. Throws AMPX_ERR_OUT_OF_MEMORY without the workspace and
  // AMPX_ERR_DEVICE when cuBLASLt cannot start.
  CublasLtGemm(std::unique_ptr<Allocator> memory, const LaunchConfig& launch);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Enqueues `args` on launch.stream, with the backend's device current;
  // f32 products in TF32 (cuBLASLt's COMPUTE_32F_FAST_TF32) when `tf32`.
  // Throws AMPX_ERR_INVALID_ARGUMENT / AMPX_ERR_DTYPE for arguments outside
  // the contract, AMPX_ERR_NOT_SUPPORTED when cuBLASLt has no algorithm
  // for the problem, and AMPX_ERR_DEVICE when a CUDA or cuBLASLt call
  // fails.
  void run(const GemmArgs& args, bool tf32);

  // Enqueues an FP8 product (valid arguments in the TN layout, m and n > 0).
  // Throws as run().
  void run_fp8(const Fp8GemmArgs& args);

 private:
  // Everything cuBLASLt's choice of algorithm depends on.
  struct Problem {
    int64_t batch, m, n, k;
    int64_t a_stride, b_stride, c_stride;  // 0 for a single product
    DType a_type, b_type, c_type;
    bool trans_a, trans_b;
    bool bias;
    bool tf32;  // f32 A and B multiplied in TF32
    bool d_amax;  // FP8: the AMAX_D pointer is set
    uint32_t a_align, b_align, c_align;  // bytes, powers of two up to 256
    bool operator<(const Problem& other) const;
  };
  struct Plan;

  // The bias pointer for cuBLASLt (see the top), valid for this call.
  class AlignedBias {
   public:
    AlignedBias(CublasLtGemm& gemm, const GemmArgs& args, bool needed);
    ~AlignedBias();
    AlignedBias(const AlignedBias&) = delete;
    AlignedBias& operator=(const AlignedBias&) = delete;
    const void* get() const { return ptr_; }

   private:
    Allocator& memory_;
    const void* ptr_;
    void* copy_ = nullptr;
    size_t bytes_ = 0;
  };

  // Products [first, first + count) of the batch, in one cuBLASLt call.
  void multiply(const GemmArgs& args, int64_t first, int64_t count);
  // alpha * A B into fp32 scratch, then bias added and D rounded once by a
  // kernel: the bias epilogue of either kind of product where cuBLASLt has
  // no algorithm with it. `fp8` (nullptr for 16/32-bit products) sets the
  // FP8 scale pointers.
  void product_then_bias(Problem problem, const Fp8GemmArgs* fp8, float alpha, float beta,
                         const void* a, const void* b, void* c, const void* bias);
  // The FP8 scale and amax pointers of `args` on `plan`'s descriptor.
  void set_fp8_pointers(const Plan& plan, const Fp8GemmArgs& args);
  // `fp8` (nullptr for 16/32-bit problems): the call's pointers, set on a
  // new plan's descriptor before cuBLASLt's heuristic sees it.
  const Plan& plan_for(const Problem& problem, const Fp8GemmArgs* fp8 = nullptr);

  std::unique_ptr<Allocator> memory_;
  LaunchConfig launch_;
  bool tf32_ = false;  // of the run in progress
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Problem, std::unique_ptr<Plan>> plans_;
};

}  // namespace cuda
}  // namespace ampx::impl
