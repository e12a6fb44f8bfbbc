// backend_fp8.cpp -- the front doors of the FP8 capabilities.
#include "core/backend_fp8.h"

#include "core/error.h"

namespace ampx::impl {

void check_fp8_quantize_args(const Fp8QuantizeArgs& q) {
  if (q.rows < 0 || q.cols < 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "quantize: sizes must not be negative (rows ", q.rows,
         ", cols ", q.cols, ")");
  if (!is_floating(q.x_type))
    fail(AMPX_ERR_DTYPE, "quantize: x is ", dtype_name(q.x_type), "; it needs f32, f16 or bf16");
  if (!is_fp8(q.y_type))
    fail(AMPX_ERR_DTYPE, "quantize: the output type is ", dtype_name(q.y_type),
         "; it needs f8e4m3 or f8e5m2");
  if (q.rows > 0 && q.cols > 0 && q.x == nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, "quantize: x is NULL");
}

void Fp8Primitives::quantize(const Fp8QuantizeArgs& args) {
  check_fp8_quantize_args(args);
  if (args.rows == 0 || args.cols == 0) return;
  if (args.y == nullptr && args.y_t == nullptr && args.amax == nullptr) return;
  run_quantize(args);
}

void Fp8Primitives::finish_step(const Fp8Slots& slots, const Fp8ScaleRule& rule) {
  if (slots.count < 0 || slots.history_len < 1)
    fail(AMPX_ERR_INTERNAL, "fp8 update: ", slots.count, " slots with a history of ",
         slots.history_len);
  if (slots.count > 0) run_finish_step(slots, rule);
}

void Fp8Primitives::scale_from_amax(const Fp8Slots& slots, int64_t slot, const float* amax,
                                    const Fp8ScaleRule& rule) {
  if (slot < 0 || slot >= slots.count || amax == nullptr)
    fail(AMPX_ERR_INTERNAL, "fp8 current scaling: slot ", slot, " of ", slots.count);
  run_scale_from_amax(slots, slot, amax, rule);
}

void Fp8Primitives::count_fp8_range(const void* x, DType x_type, int64_t count,
                                    const float* scale, DType y_type, int64_t* counts) {
  if (!is_floating(x_type) || !is_fp8(y_type) || count < 0 || counts == nullptr)
    fail(AMPX_ERR_INTERNAL, "fp8 range count: ", dtype_name(x_type), " into ",
         dtype_name(y_type), ", ", count, " elements");
  if (count > 0) run_count_fp8_range(x, x_type, count, scale, y_type, counts);
}

void check_fp8_gemm_args(const Fp8GemmArgs& g, bool pointers) {
  if (g.m < 0 || g.n < 0 || g.k < 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "fp8 gemm: sizes must not be negative (m ", g.m, ", n ", g.n,
         ", k ", g.k, ")");
  if (!is_fp8(g.a_type) || !is_fp8(g.b_type))
    fail(AMPX_ERR_DTYPE, "fp8 gemm: A is ", dtype_name(g.a_type), " and B ", dtype_name(g.b_type),
         "; both must be f8e4m3 or f8e5m2");
  if (g.a_type == DType::F8E5M2 && g.b_type == DType::F8E5M2)
    fail(AMPX_ERR_DTYPE, "fp8 gemm: A and B are both f8e5m2; one must be f8e4m3");
  const bool fp8_d = is_fp8(g.d_type);
  if (!fp8_d && !is_floating(g.d_type))
    fail(AMPX_ERR_DTYPE, "fp8 gemm: D is ", dtype_name(g.d_type),
         "; it must be f32, f16, bf16, f8e4m3 or f8e5m2");
  if (!fp8_d && (g.d_scale != nullptr || g.d_amax != nullptr))
    fail(AMPX_ERR_INVALID_ARGUMENT, "fp8 gemm: a D scale or amax needs an FP8 D, not ",
         dtype_name(g.d_type));
  if (fp8_d && g.bias != nullptr)
    fail(AMPX_ERR_INVALID_ARGUMENT, "fp8 gemm: a bias needs an f32, f16 or bf16 D");
  if (!pointers || g.m == 0 || g.n == 0) return;
  if (g.d == nullptr) fail(AMPX_ERR_INVALID_ARGUMENT, "fp8 gemm: D is NULL");
  if (g.k > 0 && (g.a == nullptr || g.b == nullptr))
    fail(AMPX_ERR_INVALID_ARGUMENT, "fp8 gemm: ", g.a == nullptr ? "A" : "B", " is NULL");
}

bool Fp8GemmPrimitives::supports(const Fp8GemmArgs& args, std::string* why) const {
  check_fp8_gemm_args(args, false);
  return run_supports(args, why);
}

void Fp8GemmPrimitives::gemm(const Fp8GemmArgs& args) {
  check_fp8_gemm_args(args, true);
  std::string why;
  if (!run_supports(args, &why))
    fail(AMPX_ERR_NOT_SUPPORTED, "fp8 gemm (m ", args.m, ", n ", args.n, ", k ", args.k,
         args.trans_a ? ", A^T" : "", args.trans_b ? ", B^T" : "", "): ", why);
  if (args.m == 0 || args.n == 0) return;
  run_gemm(args);
}

}  // namespace ampx::impl
