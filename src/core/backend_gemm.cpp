// backend_gemm.cpp -- the front door of the GEMM capability.
#include "core/backend_gemm.h"

#include "core/error.h"

namespace ampx::impl {

void check_gemm_args(const GemmArgs& g) {
  if (g.batch < 0 || g.m < 0 || g.n < 0 || g.k < 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "gemm: sizes must not be negative (batch ", g.batch, ", m ",
         g.m, ", n ", g.n, ", k ", g.k, ")");
  if (!is_floating(g.ab_type))
    fail(AMPX_ERR_DTYPE, "gemm: A and B are ", dtype_name(g.ab_type),
         "; they need f32, f16 or bf16");
  if (g.c_type != g.ab_type && g.c_type != DType::F32)
    fail(AMPX_ERR_DTYPE, "gemm: C is ", dtype_name(g.c_type), "; with ", dtype_name(g.ab_type),
         " inputs it must be ", dtype_name(g.ab_type), " or f32");
  if (g.bias != nullptr && g.batch != 1)
    fail(AMPX_ERR_INTERNAL, "gemm: a bias epilogue needs a single product, not ", g.batch);
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  if (g.c == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "gemm: C is NULL");
  if (g.k > 0 && (g.a == nullptr || g.b == nullptr))
    fail(AMPX_ERR_INVALID_ARGUMENT, "gemm: ", g.a == nullptr ? "A" : "B", " is NULL");
}

void GemmPrimitives::gemm(const GemmArgs& args) {
  const ProfileScope timed(profile(), "gemm", dtype_name(args.ab_type));
  check_gemm_args(args);
  if (args.batch == 0 || args.m == 0 || args.n == 0) return;
  run_gemm(args);
}

}  // namespace ampx::impl
