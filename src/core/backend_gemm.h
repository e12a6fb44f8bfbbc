// backend_gemm.h -- matrix products, a backend capability (backend.h).
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace ampx::impl {

// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b < batch, row-major,
// accumulated in fp32 at least. op(A) is m x k (A is k x m when trans_a),
// op(B) is k x n (B is n x k when trans_b), C is m x n. A and B share a
// floating type; C may have that type or F32. beta == 0 ignores C's old
// contents (NaN included).
//
// Bias epilogue (a single product, batch == 1): with bias ([n], of c_type)
// not nullptr, C[i][j] = alpha * (AB)[i][j] + beta * C[i][j] + bias[j] in
// fp32 before C's one rounding -- cuBLASLt's BIAS epilogue, so a linear
// layer's bias costs no pass of its own over C.
struct GemmArgs {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  const void* a = nullptr;
  bool trans_a = false;
  int64_t a_batch_stride = 0;  // elements
  const void* b = nullptr;
  bool trans_b = false;
  int64_t b_batch_stride = 0;
  DType ab_type = DType::F32;
  void* c = nullptr;
  DType c_type = DType::F32;
  int64_t c_batch_stride = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* bias = nullptr;
};

// Throws naming the bad argument: negative sizes (INVALID_ARGUMENT), A/B not
// floating or C neither their type nor F32 (DTYPE), a bias with a batch
// (INTERNAL), missing matrices for a product that has elements.
void check_gemm_args(const GemmArgs& args);

class GemmPrimitives : public BackendCapability, public Tf32Setting {
 public:
  static constexpr Capability kId = Capability::Gemm;

  // Checks the arguments, then computes the product (nothing when batch, m
  // or n is 0).
  void gemm(const GemmArgs& args);

 protected:
  virtual void run_gemm(const GemmArgs& args) = 0;
};

}  // namespace ampx::impl
