// backend_attention.cpp -- the front doors of backend_attention.h: its
// argument checks, once for every backend.
#include "core/backend_attention.h"

#include "core/error.h"

namespace ampx::impl {
namespace {

void check_shape(const char* primitive, const AttentionShape& s, DType type) {
  if (!is_floating(type))
    fail(AMPX_ERR_DTYPE, primitive, ": tensors are ", dtype_name(type), "; f32, f16 or bf16 needed");
  if (s.mask && !is_floating(s.mask_type))
    fail(AMPX_ERR_DTYPE, primitive, ": the mask is ", dtype_name(s.mask_type),
         "; f32, f16 or bf16 needed");
  if (s.batch <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.q_len <= 0 || s.kv_len < 0 ||
      s.heads % s.kv_heads != 0)
    fail(AMPX_ERR_SHAPE, primitive, ": batch ", s.batch, ", heads ", s.heads, ", kv_heads ",
         s.kv_heads, ", q_len ", s.q_len, ", kv_len ", s.kv_len);
  if (s.head_dim <= 0 || s.head_dim > kMaxAttentionHeadDim || s.value_dim <= 0 ||
      s.value_dim > kMaxAttentionHeadDim)
    fail(AMPX_ERR_SHAPE, primitive, ": head_dim ", s.head_dim, " and value_dim ", s.value_dim,
         " must lie in [1, ", kMaxAttentionHeadDim, "]");
}

}  // namespace

void AttentionPrimitives::forward(const AttentionShape& shape, const void* q, const void* k,
                                  const void* v, DType type, void* out, float* lse) {
  const ProfileScope timed(profile(), "forward");
  check_shape("attention_forward", shape, type);
  run_forward(shape, q, k, v, type, out, lse);
}

void AttentionPrimitives::backward(const AttentionShape& shape, const void* q, const void* k,
                                   const void* v, const void* out, const void* dout,
                                   const float* lse, DType type, void* dq, void* dk, void* dv) {
  const ProfileScope timed(profile(), "backward");
  check_shape("attention_backward", shape, type);
  run_backward(shape, q, k, v, out, dout, lse, type, dq, dk, dv);
}

}  // namespace ampx::impl
