// backend_attention.h -- fused scaled dot-product attention, a backend
// capability (backend.h) behind ampx_scaled_dot_product_attention.
//
// For batch b, query head h (its key/value head g = h / (heads / kv_heads),
// grouped-query attention) and query row i:
//   s_j   = scale * q_i . k_j + mask(b, h, i, j)   (-inf where causal and j > i)
//   p_j   = exp(s_j - lse_i),  lse_i = log sum_j exp(s_j)
//   out_i = sum_j p_j z_j v_j
// where z_j is the dropout factor of word n = ((b * heads + h) * q_len + i)
// * kv_len + j of ampx_dropout's stream (math::dropout_block(key, offset,
// n / 4) lane n % 4): 0 when dropped, dropout_scale when kept, 1 without
// dropout. A row whose scores are all -inf gets out_i = 0 and lse_i = -inf.
// The backward pass recomputes p from q, k and lse (nothing of size
// q_len x kv_len is kept):
//   dp_j = z_j dout_i . v_j,   ds_j = p_j (dp_j - dout_i . out_i)
//   dq_i = scale sum_j ds_j k_j,  dk_j += scale ds_j q_i,  dv_j += p_j z_j dout_i
// summed over the query heads that share a key/value head.
//
// Tensors are contiguous: q [batch, heads, q_len, head_dim], k [batch,
// kv_heads, kv_len, head_dim], v [batch, kv_heads, kv_len, value_dim], out
// [batch, heads, q_len, value_dim], lse F32 [batch, heads, q_len]; q, k, v,
// out and their gradients share one floating type, the mask has any
// floating type. Scores, softmax statistics and accumulations are fp32.
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace ampx::impl {

// The largest head_dim and value_dim the kernels take.
constexpr int64_t kMaxAttentionHeadDim = 256;

struct AttentionShape {
  int64_t batch = 0, heads = 0, kv_heads = 0, q_len = 0, kv_len = 0;
  int64_t head_dim = 0, value_dim = 0;
  float scale = 1.0f;
  bool causal = false;
  // Additive mask or nullptr: element (b, h, i, j) at mask[b * mask_strides[0]
  // + h * mask_strides[1] + i * mask_strides[2] + j * mask_strides[3]]
  // (stride 0 along a broadcast dimension).
  const void* mask = nullptr;
  DType mask_type = DType::F32;
  int64_t mask_strides[4] = {};
  // Dropout of the probabilities (threshold and scale of math/random.h).
  bool dropout = false;
  uint64_t seed = 0, offset = 0;
  uint32_t threshold = 0;
  float dropout_scale = 1.0f;
};

class AttentionPrimitives : public BackendCapability {
 public:
  static constexpr Capability kId = Capability::Attention;

  // out and lse (nullptr: not kept, as when no backward will run) from q,
  // k and v. batch, heads and q_len > 0; kv_len may be 0 (every row fully
  // masked).
  void forward(const AttentionShape& shape, const void* q, const void* k, const void* v,
               DType type, void* out, float* lse);
  // dq, dk and dv (each of `type`, all written) from the forward's
  // tensors, its lse and dout.
  void backward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                const void* out, const void* dout, const float* lse, DType type, void* dq,
                void* dk, void* dv);

 protected:
  virtual void run_forward(const AttentionShape& shape, const void* q, const void* k,
                           const void* v, DType type, void* out, float* lse) = 0;
  virtual void run_backward(const AttentionShape& shape, const void* q, const void* k,
                            const void* v, const void* out, const void* dout, const float* lse,
                            DType type, void* dq, void* dk, void* dv) = 0;
};

}  // namespace ampx::impl
