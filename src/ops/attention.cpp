// attention.cpp -- scaled dot-product attention (ampx.h section 11): shape
// and option checks, autocast, and a node whose backward recomputes the
// probabilities from q, k and the forward's log-sum-exp (the backend's
// AttentionPrimitives, core/backend_attention.h). Nothing of size
// q_len x kv_len is allocated here, forward or backward.
#include <cmath>

#include "core/backend_attention.h"
#include "math/random.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

const char* const kOp = "scaled_dot_product_attention";

class AttentionNode final : public Node {
 public:
  AttentionShape shape;
  TensorRef mask;    // the additive mask the scores used (a constant: no gradient)
  TensorRef output;  // out, which the backward's dout . out term reads
  TensorRef lse;     // F32 [batch, heads, q_len]
  const char* name() const override { return kOp; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& q = *inputs[0];
    DeviceTensor& k = *inputs[1];
    DeviceTensor& v = *inputs[2];
    TensorRef dq = new_tensor(ctx, q.dtype, q.shape);
    TensorRef dk = new_tensor(ctx, k.dtype, k.shape);
    TensorRef dv = new_tensor(ctx, v.dtype, v.shape);
    AttentionShape s = shape;
    s.mask = mask ? mask->data() : nullptr;
    ctx.backend().require<AttentionPrimitives>(kOp).backward(
        s, q.data(), k.data(), v.data(), output->data(), grads[0]->data(),
        static_cast<const float*>(lse->data()), q.dtype, dq->data(), dk->data(), dv->data());
    return grad_list(q.requires_grad ? std::move(dq) : TensorRef(),
                     k.requires_grad ? std::move(dk) : TensorRef(),
                     v.requires_grad ? std::move(dv) : TensorRef());
  }
};

void check_4d(const DeviceTensor& t, const char* name, const char* layout) {
  if (t.shape.ndim != 4)
    fail(AMPX_ERR_SHAPE, "'", name, "' is ", t.describe(), "; attention takes ", layout);
  for (int32_t d = 0; d < 4; ++d)
    if (t.shape.dims[d] == 0)
      fail(AMPX_ERR_SHAPE, "'", name, "' is ", t.describe(),
           "; attention needs at least one batch, head, position and feature");
}

// The shape's extents from q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv].
AttentionShape attention_shape(const DeviceTensor& q, const DeviceTensor& k,
                               const DeviceTensor& v) {
  check_4d(q, "q", "q [batch, heads, q_len, head_dim]");
  check_4d(k, "k", "k [batch, kv_heads, kv_len, head_dim]");
  check_4d(v, "v", "v [batch, kv_heads, kv_len, value_dim]");
  const int64_t* qd = q.shape.dims;
  const int64_t* kd = k.shape.dims;
  const int64_t* vd = v.shape.dims;
  if (kd[0] != qd[0] || vd[0] != qd[0] || kd[1] != vd[1] || kd[2] != vd[2] || kd[3] != qd[3])
    fail(AMPX_ERR_SHAPE, "'q' is ", q.describe(), ", 'k' ", k.describe(), " and 'v' ", v.describe(),
         "; attention needs q [B, H, Tq, D], k [B, Hkv, Tk, D] and v [B, Hkv, Tk, Dv]");
  if (qd[1] % kd[1] != 0)
    fail(AMPX_ERR_SHAPE, "'q' has ", qd[1], " heads and 'k' and 'v' ", kd[1],
         "; grouped-query attention needs the key/value heads to divide the query heads");
  if (qd[3] > kMaxAttentionHeadDim || vd[3] > kMaxAttentionHeadDim)
    fail(AMPX_ERR_SHAPE, "head_dim ", qd[3], " and value_dim ", vd[3], " must be at most ",
         kMaxAttentionHeadDim);
  AttentionShape s;
  s.batch = qd[0], s.heads = qd[1], s.kv_heads = kd[1], s.q_len = qd[2], s.kv_len = kd[2];
  s.head_dim = qd[3], s.value_dim = vd[3];
  return s;
}

// The mask's strides over [B, H, Tq, Tk]: its shape, aligned at the right,
// must broadcast (each extent 1 or equal).
void set_mask_strides(const DeviceTensor& mask, AttentionShape& s) {
  const int64_t full[4] = {s.batch, s.heads, s.q_len, s.kv_len};
  const int32_t nd = mask.shape.ndim;
  bool ok = nd >= 2 && nd <= 4;
  int64_t stride = 1;
  for (int32_t d = 3; ok && d >= 0; --d) {
    const int32_t md = d - (4 - nd);
    const int64_t extent = md >= 0 ? mask.shape.dims[md] : 1;
    if (extent != 1 && extent != full[d]) ok = false;
    s.mask_strides[d] = extent == 1 ? 0 : stride;
    stride *= extent;
  }
  if (!ok)
    fail(AMPX_ERR_SHAPE, "'mask' is ", mask.describe(), "; it must broadcast to [", s.batch, ", ",
         s.heads, ", ", s.q_len, ", ", s.kv_len, "] ([B, H, Tq, Tk], 2 to 4 dimensions)");
}

}  // namespace

DeviceTensor* op_attention(DeviceTensor& q_in, DeviceTensor& k_in, DeviceTensor& v_in,
                           DeviceTensor* mask_in, bool causal, double scale, double dropout_p) {
  DeviceContext& ctx = *q_in.ctx;
  require_capabilities(ctx, kOp, Capability::Attention);
  check_same_context(q_in, k_in, "q", "k");
  check_same_context(q_in, v_in, "q", "v");
  check_floating(q_in, "q");
  check_floating(k_in, "k");
  check_floating(v_in, "v");
  AttentionShape s = attention_shape(q_in, k_in, v_in);
  if (mask_in) {
    check_same_context(q_in, *mask_in, "q", "mask");
    check_floating(*mask_in, "mask");
    set_mask_strides(*mask_in, s);
    if (causal)
      fail(AMPX_ERR_INVALID_ARGUMENT,
           "both a mask and causal were given; pass one (fold the causal part into the mask)");
  }
  if (!std::isfinite(scale))
    fail(AMPX_ERR_INVALID_ARGUMENT, "option 'scale' is ", scale,
         "; it must be finite (0 selects 1 / sqrt(head_dim))");
  if (!(dropout_p >= 0.0 && dropout_p < 1.0))
    fail(AMPX_ERR_INVALID_ARGUMENT, "option 'dropout_p' is ", dropout_p,
         "; attention dropout needs 0 <= p < 1");
  s.causal = causal;
  s.scale = static_cast<float>(scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim)));

  std::vector<TensorRef> in = op_inputs(ctx, kOp, {&q_in, &k_in, &v_in, mask_in});
  DeviceTensor& q = *in[0];
  DeviceTensor& k = *in[1];
  DeviceTensor& v = *in[2];
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    fail(AMPX_ERR_DTYPE, "'q' is ", q.describe(), ", 'k' ", k.describe(), " and 'v' ", v.describe(),
         "; outside autocast they must share a dtype");
  if (in[3]) {
    s.mask = in[3]->data();
    s.mask_type = in[3]->dtype;
  }
  Shape out_shape = q.shape;
  out_shape.dims[3] = s.value_dim;
  TensorRef out = new_tensor(ctx, q.dtype, out_shape);
  const int64_t lse_dims[3] = {s.batch, s.heads, s.q_len};
  TensorRef lse = new_tensor(ctx, DType::F32, make_shape(3, lse_dims, DType::F32));
  if (dropout_p > 0.0) {
    // Drawn once the outputs exist: a failed call leaves the stream as it was.
    s.dropout = true;
    s.seed = ctx.seed();
    s.offset = ctx.next_random_offset();
    s.threshold = math::dropout_threshold(dropout_p);
    s.dropout_scale = static_cast<float>(1.0 / (1.0 - dropout_p));
  }
  ctx.backend().require<AttentionPrimitives>(kOp).forward(s, q.data(), k.data(), v.data(), q.dtype,
                                                          out->data(),
                                                          static_cast<float*>(lse->data()));
  if (should_record(ctx, {&q, &k, &v})) {
    auto node = make_node<AttentionNode>({&in[0], &in[1], &in[2]});
    node->shape = s;
    node->shape.mask = nullptr;  // re-read from node->mask, which keeps it alive
    if (in[3]) {
      node->mask = retained(*in[3]);
      node->saves(*in[3]);
    }
    node->output = saved_output(ctx, *out);
    node->saves(*out);
    node->lse = std::move(lse);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
