// attention.cpp -- scaled dot-product attention (ampx.h section 11): shape
// and option checks, autocast, and a node whose backward recomputes the
// probabilities from q, k and the forward's log-sum-exp (the backend's
// AttentionPrimitives, core/backend_attention.h). Nothing of size
// q_len x kv_len is allocated here, forward or backward, except a mask the
// caller passed turned additive (an integer one) or expanded over leading
// extents one stride cannot walk.
#include <cmath>
#include <limits>

#include "core/backend_attention.h"
#include "math/random.h"
#include "onnx/emitter.h"
#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

const char* const kOp = "scaled_dot_product_attention";

// Extent d of t counted from the right (1 for a dimension t lacks).
int64_t from_right(const DeviceTensor& t, int32_t d) {
  return d < t.shape.ndim ? t.shape.dims[t.shape.ndim - 1 - d] : 1;
}

class AttentionNode final : public Node {
 public:
  AttentionShape shape;
  TensorRef mask;    // the additive mask the scores used (a constant: no gradient)
  TensorRef output;  // out, which the backward's dout . out term reads
  TensorRef lse;     // F32 [batch, heads, q_len]
  const char* name() const override { return kOp; }
  // Decomposed (torch.onnx's form): softmax(scale q k^T + mask) v, the
  // causal mask a constant [Tq, Tk] of 0 and -inf; key/value heads
  // repeated for grouped queries; dropout is the identity.
  void onnx(onnx::Emitter& e) const override {
    const AttentionShape& s = shape;
    std::string k = e.input(1), v = e.input(2);
    const Shape& q_shape = e.input_tensor(0).shape;
    const int32_t nd = q_shape.ndim;
    if (s.kv_heads != s.heads) {
      // [..., Hkv, T, D] -> [..., Hkv, r, T, D] -> [..., H, T, D]
      const int64_t r = s.heads / s.kv_heads;
      auto repeat = [&](const std::string& t, const Shape& shape) {
        Shape expanded;
        expanded.ndim = shape.ndim + 1;
        for (int32_t d = 0, o = 0; d < shape.ndim; ++d) {
          expanded.dims[o++] = shape.dims[d];
          if (d == shape.ndim - 3) expanded.dims[o++] = r;
        }
        std::vector<int64_t> ones(expanded.dims, expanded.dims + expanded.ndim);
        for (int32_t d = 0; d < expanded.ndim; ++d)
          if (d != shape.ndim - 2) ones[d] = 1;
        const std::string up = e.unsqueeze(t, {shape.ndim - 2});
        Shape merged = shape;
        merged.dims[shape.ndim - 3] = s.heads;
        return e.reshape(e.op("Expand", {up, e.ints(ones)}), merged);
      };
      k = repeat(k, e.input_tensor(1).shape);
      v = repeat(v, e.input_tensor(2).shape);
    }
    std::vector<int64_t> perm;
    for (int32_t d = 0; d < nd; ++d) perm.push_back(d);
    std::swap(perm[nd - 1], perm[nd - 2]);
    const std::string kt = e.op("Transpose", {k}, {onnx::attr("perm", perm)});
    std::string scores = e.op("Mul", {e.op("MatMul", {e.input(0), kt}), e.scalar(s.scale)});
    if (mask) scores = e.op("Add", {scores, e.constant(*mask)});
    if (s.causal) {
      std::vector<float> causal(static_cast<size_t>(s.q_len * s.kv_len), 0.0f);
      for (int64_t i = 0; i < s.q_len; ++i)
        for (int64_t j = i + 1; j < s.kv_len; ++j)
          causal[i * s.kv_len + j] = -std::numeric_limits<float>::infinity();
      scores = e.op("Add", {scores, e.floats(causal, {s.q_len, s.kv_len})});
    }
    const std::string weights = e.op("Softmax", {scores}, {onnx::attr("axis", int64_t{-1})});
    e.output(0, e.op("MatMul", {weights, v}));
  }
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

  bool has_backward_graph() const override { return true; }
  // The unfused formulas (torch's math path), so the gradients can be
  // differentiated again: with the heads grouped as [B, Hkv, G, T, .]
  // (G query heads per key/value head, broadcast in the products),
  //   s = scale q k^T + mask (-inf above the diagonal when causal), in F32
  //   p = softmax(s), pz = p z (dropout), dv = pz^T dout (summed over G),
  //   dp = z (dout v^T), ds = p (dp - sum(dp p)), dq = scale ds k,
  //   dk = scale ds^T q (summed over G);
  // p is recomputed by recorded ops from q and k, so its own derivative
  // flows. A row whose keys are all masked gives zeros, as the kernels do.
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& q = *inputs[0];
    DeviceTensor& k = *inputs[1];
    DeviceTensor& v = *inputs[2];
    const AttentionShape& s = shape;
    const int64_t groups = s.heads / s.kv_heads;
    const auto dims5 = [&](int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, DType t) {
      const int64_t d5[5] = {a, b, c, d, e};
      return make_shape(5, d5, t);
    };
    TensorRef q5 = f::reshape(q, dims5(s.batch, s.kv_heads, groups, s.q_len, s.head_dim, q.dtype));
    TensorRef k5 = f::reshape(k, dims5(s.batch, s.kv_heads, 1, s.kv_len, s.head_dim, k.dtype));
    TensorRef v5 = f::reshape(v, dims5(s.batch, s.kv_heads, 1, s.kv_len, s.value_dim, v.dtype));
    TensorRef dout =
        f::reshape(*grads[0], dims5(s.batch, s.kv_heads, groups, s.q_len, s.value_dim, q.dtype));
    TensorRef scores = f::affine(
        *f::cast(*f::matmul(*q5, *f::transpose(*k5, -1, -2)), DType::F32), s.scale, 0.0f);
    TensorRef empty_rows;
    if (mask) {
      const int64_t mk = from_right(*mask, 0), mq = from_right(*mask, 1), mh = from_right(*mask, 2);
      const Shape m5 = dims5(mask->numel() / (mk * mq * mh), mh == 1 ? 1 : s.kv_heads,
                             mh == 1 ? 1 : groups, mq, mk, mask->dtype);
      TensorRef mask5 = f::reshape(*mask, m5);
      scores = f::add(*scores, *mask5);
      empty_rows = fully_masked_rows(ctx, *mask5);
      scores = TensorRef(op_masked_fill(*scores, *empty_rows, 0.0));
    }
    if (s.causal) scores = TensorRef(op_masked_fill(*scores, *causal_mask(ctx), -INFINITY));
    TensorRef p(op_softmax(*scores, false));
    if (empty_rows) p = TensorRef(op_masked_fill(*p, *empty_rows, 0.0));
    const auto dropped = [&](DeviceTensor& t) {
      return s.dropout ? TensorRef(op_dropout_with(t, s.seed, s.offset, s.threshold,
                                                   s.dropout_scale))
                       : retained(t);
    };
    TensorRef dq, dk, dv;
    if (v.requires_grad) {
      TensorRef pz = f::cast(*dropped(*p), v.dtype);
      TensorRef per_group = f::matmul(*f::transpose(*pz, -1, -2), *dout);
      dv = f::reshape(*f::sum_to(*per_group, v5->shape), v.shape);
    }
    if (q.requires_grad || k.requires_grad) {
      TensorRef dp =
          dropped(*f::cast(*f::matmul(*dout, *f::transpose(*v5, -1, -2)), DType::F32));
      TensorRef ds = f::mul(*p, *f::sub(*dp, *f::sum_dims(*f::mul(*dp, *p), {-1}, true)));
      TensorRef dsq = f::cast(*f::affine(*ds, s.scale, 0.0f), q.dtype);
      if (q.requires_grad) dq = f::reshape(*f::matmul(*dsq, *k5), q.shape);
      if (k.requires_grad)
        dk = f::reshape(*f::sum_to(*f::matmul(*f::transpose(*dsq, -1, -2), *q5), k5->shape),
                        k.shape);
    }
    return grad_list(std::move(dq), std::move(dk), std::move(dv));
  }

 private:
  // I32 [q_len, kv_len]: 1 above the diagonal (the keys a causal row skips).
  TensorRef causal_mask(DeviceContext& ctx) const {
    std::vector<int32_t> above(static_cast<size_t>(shape.q_len * shape.kv_len));
    for (int64_t i = 0; i < shape.q_len; ++i)
      for (int64_t j = 0; j < shape.kv_len; ++j) above[i * shape.kv_len + j] = j > i ? 1 : 0;
    const int64_t dims[2] = {shape.q_len, shape.kv_len};
    return TensorRef(tensor_from_host(ctx, DType::I32, make_shape(2, dims, DType::I32),
                                      above.data(), above.size() * sizeof(int32_t)));
  }
  // F32 of mask's shape with its last extent 1: 1 where every key of the
  // row is masked (-inf), else 0 (a constant).
  static TensorRef fully_masked_rows(DeviceContext& ctx, DeviceTensor& mask) {
    TensorRef m = f32_copy(ctx, mask);
    const int32_t last = -1;
    TensorRef peak(op_reduce_dims(*m, &last, 1, true, DimsReduction::Amax));
    TensorRef minus_inf(make_filled_f32(ctx, peak->shape, -INFINITY));
    TensorRef rows = new_tensor(ctx, DType::F32, peak->shape);
    BroadcastLayout same;
    same.ndim = 1;
    same.sizes[0] = peak->numel();
    same.a_strides[0] = same.b_strides[0] = 1;
    nn_of(ctx, kOp).binary_broadcast(BinaryOp::Equal, peak->data(), minus_inf->data(),
                                     rows->data(), DType::F32, same);
    return rows;
  }
  static TensorRef f32_copy(DeviceContext& ctx, DeviceTensor& t) {
    TensorRef out = new_tensor(ctx, DType::F32, t.shape);
    ctx.backend().convert(out->data(), DType::F32, t.data(), t.dtype, t.numel());
    return out;
  }
};

void check_layout(const DeviceTensor& t, const char* name, const char* layout) {
  if (t.shape.ndim < 2)
    fail(AMPX_ERR_SHAPE, "'", name, "' is ", t.describe(), "; attention takes ", layout);
  for (int32_t d = 0; d < t.shape.ndim; ++d)
    if (t.shape.dims[d] == 0)
      fail(AMPX_ERR_SHAPE, "'", name, "' is ", t.describe(),
           "; attention needs at least one batch, head, position and feature");
}

// The shape's extents from q [..., H, Tq, D], k [..., Hkv, Tk, D] and
// v [..., Hkv, Tk, Dv] with equal leading (batch) extents, B their product:
// the memory of [B, H, T, D] (a 3-D tensor is one batch of heads, a 2-D
// one a single head).
AttentionShape attention_shape(const DeviceTensor& q, const DeviceTensor& k,
                               const DeviceTensor& v) {
  check_layout(q, "q", "q [..., heads, q_len, head_dim]");
  check_layout(k, "k", "k [..., kv_heads, kv_len, head_dim]");
  check_layout(v, "v", "v [..., kv_heads, kv_len, value_dim]");
  const int32_t nd = q.shape.ndim;
  bool ok = k.shape.ndim == nd && v.shape.ndim == nd;
  for (int32_t d = 3; ok && d < nd; ++d)
    ok = from_right(k, d) == from_right(q, d) && from_right(v, d) == from_right(q, d);
  ok = ok && from_right(k, 2) == from_right(v, 2) && from_right(k, 1) == from_right(v, 1) &&
       from_right(k, 0) == from_right(q, 0);
  if (!ok)
    fail(AMPX_ERR_SHAPE, "'q' is ", q.describe(), ", 'k' ", k.describe(), " and 'v' ", v.describe(),
         "; attention needs q [..., H, Tq, D], k [..., Hkv, Tk, D] and v [..., Hkv, Tk, Dv] "
         "with the same leading extents");
  if (from_right(q, 2) % from_right(k, 2) != 0)
    fail(AMPX_ERR_SHAPE, "'q' has ", from_right(q, 2), " heads and 'k' and 'v' ", from_right(k, 2),
         "; grouped-query attention needs the key/value heads to divide the query heads");
  if (from_right(q, 0) > kMaxAttentionHeadDim || from_right(v, 0) > kMaxAttentionHeadDim)
    fail(AMPX_ERR_SHAPE, "head_dim ", from_right(q, 0), " and value_dim ", from_right(v, 0),
         " must be at most ", kMaxAttentionHeadDim);
  AttentionShape s;
  s.batch = 1;
  for (int32_t d = 3; d < nd; ++d) s.batch *= from_right(q, d);
  s.heads = from_right(q, 2), s.kv_heads = from_right(k, 2);
  s.q_len = from_right(q, 1), s.kv_len = from_right(k, 1);
  s.head_dim = from_right(q, 0), s.value_dim = from_right(v, 0);
  return s;
}

// Whether `mask` broadcasts to the scores [..., H, Tq, Tk] of q, and whether
// one stride walks its batches of [B, H, Tq, Tk]: its leading extents are
// all 1 (one for every batch) or all q's. Other broadcasts of the leading
// extents are expanded first.
struct MaskFit {
  bool broadcasts = true, one_batch_stride = true;
};

MaskFit fit_mask(const DeviceTensor& mask, const DeviceTensor& q, const AttentionShape& s) {
  MaskFit fit;
  const int32_t nd = q.shape.ndim;
  const int64_t trailing[3] = {s.kv_len, s.q_len, s.heads};
  if (mask.shape.ndim < 2 || mask.shape.ndim > nd) fit.broadcasts = false;
  for (int32_t d = 0; fit.broadcasts && d < 3; ++d) {
    const int64_t extent = from_right(mask, d);
    fit.broadcasts = extent == 1 || extent == trailing[d];
  }
  bool all_one = true, all_equal = true;
  for (int32_t d = 3; fit.broadcasts && d < mask.shape.ndim; ++d) {
    const int64_t extent = from_right(mask, d);
    fit.broadcasts = extent == 1 || extent == from_right(q, d);
    all_one = all_one && extent == 1;
    all_equal = all_equal && extent == from_right(q, d);
  }
  fit.one_batch_stride = all_one || (all_equal && mask.shape.ndim == nd);
  if (!fit.broadcasts) {
    Shape scores = q.shape;
    scores.dims[nd - 1] = s.kv_len;
    fail(AMPX_ERR_SHAPE, "'mask' is ", mask.describe(), "; it must broadcast to the scores ",
         scores.str(), " ([..., H, Tq, Tk], from 2 dimensions to q's)");
  }
  return fit;
}

// The mask's strides over [B, H, Tq, Tk] (0 along a broadcast dimension);
// its leading extents are all 1 or all q's.
void set_mask_strides(const DeviceTensor& mask, AttentionShape& s) {
  int64_t stride = 1;
  for (int32_t d = 0; d < 3; ++d) {
    const int64_t extent = from_right(mask, d);
    s.mask_strides[3 - d] = extent == 1 ? 0 : stride;
    stride *= extent;
  }
  s.mask_strides[0] = mask.numel() == stride ? 0 : stride;
}

// An integer mask, torch's boolean attn_mask (non-zero: the key takes part),
// as the additive F32 mask of its shape: 0 where set, -inf elsewhere.
TensorRef additive_mask(DeviceContext& ctx, DeviceTensor& mask) {
  TensorRef excluded = new_tensor(ctx, DType::F32, mask.shape);
  ctx.backend().fill(excluded->data(), 4, 0xff800000u, excluded->numel());
  return TensorRef(op_masked_fill(*excluded, mask, 0.0));
}

// The mask with its leading extents expanded to q's (a copy), for the
// broadcasts one batch stride cannot express.
TensorRef expanded_mask(DeviceContext& ctx, DeviceTensor& mask, const DeviceTensor& q) {
  Shape leading = q.shape;
  for (int32_t d = 0; d < 3; ++d) leading.dims[q.shape.ndim - 1 - d] = 1;
  TensorRef zeros = new_tensor(ctx, mask.dtype, leading);
  ctx.backend().fill(zeros->data(), dtype_size(mask.dtype), 0, zeros->numel());
  return TensorRef(op_binary(BinaryOp::Add, mask, *zeros));
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
  MaskFit fit;
  if (mask_in) {
    check_same_context(q_in, *mask_in, "q", "mask");
    if (!is_floating(mask_in->dtype) && mask_in->dtype != DType::I32 &&
        mask_in->dtype != DType::I64)
      fail(AMPX_ERR_DTYPE, "'mask' is ", mask_in->describe(),
           "; a mask is floating (added to the scores) or i32/i64 (non-zero: the key takes part)");
    fit = fit_mask(*mask_in, q_in, s);
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

  TensorRef mask;
  if (mask_in) {
    mask = is_floating(mask_in->dtype) ? retained(*mask_in) : additive_mask(ctx, *mask_in);
    if (!fit.one_batch_stride) mask = expanded_mask(ctx, *mask, q_in);
    set_mask_strides(*mask, s);
  }
  std::vector<TensorRef> in = op_inputs(ctx, kOp, {&q_in, &k_in, &v_in, mask.get()});
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
  out_shape.dims[out_shape.ndim - 1] = s.value_dim;
  TensorRef out = new_tensor(ctx, q.dtype, out_shape);
  const bool recording = should_record(ctx, {&q, &k, &v});
  const int64_t lse_dims[3] = {s.batch, s.heads, s.q_len};
  TensorRef lse =
      recording ? new_tensor(ctx, DType::F32, make_shape(3, lse_dims, DType::F32)) : TensorRef();
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
                                                          lse ? static_cast<float*>(lse->data())
                                                              : nullptr);
  if (recording) {
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
