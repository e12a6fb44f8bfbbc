// linear.cpp -- matmul (2-D and batched) and linear (x W^T + b, optional
// fused activation), through the backend's GEMM.
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

struct MatmulShape {
  int64_t batch, m, k, n;
};

class MatmulNode final : public Node {
 public:
  MatmulShape s{};
  const char* name() const override { return "matmul"; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& a = *inputs[0];
    DeviceTensor& b = *inputs[1];
    DeviceTensor& dy = *grads[0];
    // The strides are products of two extents: they fit in int64 whenever
    // the tensor written has elements (with none, nothing runs).
    TensorRef da, db;
    if (a.requires_grad) da = new_tensor(ctx, a.dtype, a.shape);
    if (da && da->numel() > 0) {  // dA = dY B^T
      GemmArgs g;
      g.batch = s.batch, g.m = s.m, g.n = s.k, g.k = s.n;
      g.a = dy.data(), g.a_batch_stride = s.m * s.n;
      g.b = b.data(), g.trans_b = true, g.b_batch_stride = s.k * s.n;
      g.ab_type = a.dtype, g.c = da->data(), g.c_type = a.dtype, g.c_batch_stride = s.m * s.k;
      gemm_of(ctx, name()).gemm(g);
    }
    if (b.requires_grad) db = new_tensor(ctx, b.dtype, b.shape);
    if (db && db->numel() > 0) {  // dB = A^T dY
      GemmArgs g;
      g.batch = s.batch, g.m = s.k, g.n = s.n, g.k = s.m;
      g.a = a.data(), g.trans_a = true, g.a_batch_stride = s.m * s.k;
      g.b = dy.data(), g.b_batch_stride = s.m * s.n;
      g.ab_type = a.dtype, g.c = db->data(), g.c_type = b.dtype, g.c_batch_stride = s.k * s.n;
      gemm_of(ctx, name()).gemm(g);
    }
    return grad_list(std::move(da), std::move(db));
  }
};

class LinearNode final : public Node {
 public:
  int64_t rows = 0, in = 0, out = 0;
  Activation activation = Activation::None;
  // What the activation's derivative is read from: for ReLU the output
  // itself (relu'(z) is known from relu(z)'s sign and NaN-ness, as z's), so
  // no pre-activation copy is kept; for GELU, z = x W^T + b.
  TensorRef activation_input;
  const char* name() const override { return "linear"; }
  bool reads_input(size_t i) const override { return i < 2; }  // x and weight
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor& w = *inputs[1];
    DeviceTensor* bias = inputs[2].get();
    TensorRef dz;
    if (activation == Activation::None) {
      dz = retained(*grads[0]);
    } else {
      dz = new_tensor(ctx, x.dtype, activation_input->shape);
      nn_of(ctx, name())
          .unary_backward(activation == Activation::Relu ? UnaryOp::Relu : UnaryOp::Gelu,
                          activation_input->data(), grads[0]->data(), dz->data(), x.dtype,
                          dz->numel());
    }
    TensorRef dx, dw, db;
    if (x.requires_grad) {  // dX = dZ W
      dx = new_tensor(ctx, x.dtype, x.shape);
      GemmArgs g;
      g.m = rows, g.n = in, g.k = out;
      g.a = dz->data(), g.b = w.data(), g.ab_type = x.dtype;
      g.c = dx->data(), g.c_type = x.dtype;
      gemm_of(ctx, name()).gemm(g);
    }
    if (w.requires_grad) {  // dW = dZ^T X
      dw = new_tensor(ctx, w.dtype, w.shape);
      GemmArgs g;
      g.m = out, g.n = in, g.k = rows;
      g.a = dz->data(), g.trans_a = true, g.b = x.data(), g.ab_type = x.dtype;
      g.c = dw->data(), g.c_type = w.dtype;
      gemm_of(ctx, name()).gemm(g);
    }
    if (bias && bias->requires_grad) {
      db = new_tensor(ctx, bias->dtype, bias->shape);
      nn_of(ctx, name()).sum_rows(dz->data(), x.dtype, rows, out, db->data(), bias->dtype);
    }
    return grad_list(std::move(dx), std::move(dw), std::move(db));
  }
};

void check_same_dtype(const DeviceTensor& a, const DeviceTensor& b, const char* a_name,
                      const char* b_name) {
  if (a.dtype != b.dtype)
    fail(AMPX_ERR_DTYPE, "'", a_name, "' is ", a.describe(), " but '", b_name, "' is ",
         b.describe(), "; outside autocast they must share a dtype");
}

}  // namespace

DeviceTensor* op_matmul(DeviceTensor& a_in, DeviceTensor& b_in) {
  require_capabilities(*a_in.ctx, "matmul", Capability::Gemm);
  check_same_context(a_in, b_in, "a", "b");
  check_floating(a_in, "a");
  check_floating(b_in, "b");
  const Shape& as = a_in.shape;
  const Shape& bs = b_in.shape;
  MatmulShape s{};
  if (as.ndim == 2 && bs.ndim == 2 && as.dims[1] == bs.dims[0]) {
    s = {1, as.dims[0], as.dims[1], bs.dims[1]};
  } else if (as.ndim == 3 && bs.ndim == 3 && as.dims[0] == bs.dims[0] && as.dims[2] == bs.dims[1]) {
    s = {as.dims[0], as.dims[1], as.dims[2], bs.dims[2]};
  } else {
    fail(AMPX_ERR_SHAPE, "'a' is ", a_in.describe(), " and 'b' is ", b_in.describe(),
         "; matmul takes [M, K] x [K, N] or [B, M, K] x [B, K, N]");
  }
  DeviceContext& ctx = *a_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "matmul", {&a_in, &b_in});
  DeviceTensor& a = *in[0];
  DeviceTensor& b = *in[1];
  check_same_dtype(a, b, "a", "b");
  Shape out_shape;
  out_shape.ndim = as.ndim;
  if (as.ndim == 3) out_shape.dims[0] = s.batch;
  out_shape.dims[as.ndim - 2] = s.m;
  out_shape.dims[as.ndim - 1] = s.n;
  TensorRef out = new_tensor(ctx, a.dtype, make_shape(out_shape, a.dtype, "matmul's output"));
  if (out->numel() > 0) {  // then every stride below fits in int64
    GemmArgs g;
    g.batch = s.batch, g.m = s.m, g.n = s.n, g.k = s.k;
    g.a = a.data(), g.a_batch_stride = s.m * s.k;
    g.b = b.data(), g.b_batch_stride = s.k * s.n;
    g.ab_type = a.dtype, g.c = out->data(), g.c_type = a.dtype, g.c_batch_stride = s.m * s.n;
    gemm_of(ctx, "matmul").gemm(g);
  }
  if (should_record(ctx, {&a, &b})) {
    auto node = make_node<MatmulNode>({&in[0], &in[1]});
    node->s = s;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_linear(DeviceTensor& x_in, DeviceTensor& w_in, DeviceTensor* bias_in,
                        Activation activation) {
  require_capabilities(*x_in.ctx, "linear", Capability::Gemm, Capability::Nn);
  check_same_context(x_in, w_in, "x", "weight");
  if (bias_in) check_same_context(x_in, *bias_in, "x", "bias");
  check_floating(x_in, "x");
  check_floating(w_in, "weight");
  if (bias_in) check_floating(*bias_in, "bias");
  if (x_in.shape.ndim < 1 || w_in.shape.ndim != 2 ||
      x_in.shape.dims[x_in.shape.ndim - 1] != w_in.shape.dims[1])
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), " and 'weight' is ", w_in.describe(),
         "; linear takes x [..., in] and weight [out, in]");
  const int64_t in_features = w_in.shape.dims[1];
  const int64_t out_features = w_in.shape.dims[0];
  if (bias_in && !(bias_in->shape.ndim == 1 && bias_in->shape.dims[0] == out_features))
    fail(AMPX_ERR_SHAPE, "'bias' is ", bias_in->describe(), "; expected [", out_features, "]");
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "linear", {&x_in, &w_in, bias_in});
  DeviceTensor& x = *in[0];
  DeviceTensor& w = *in[1];
  DeviceTensor* bias = in[2].get();
  check_same_dtype(x, w, "x", "weight");
  if (bias) check_same_dtype(x, *bias, "x", "bias");
  // Not numel / in_features, which is 0/0 for in_features == 0.
  const int64_t rows = x.shape.extent_product(0, x.shape.ndim - 1);
  Shape out_shape = x.shape;
  out_shape.dims[out_shape.ndim - 1] = out_features;
  out_shape = make_shape(out_shape, x.dtype, "linear's output");
  TensorRef z = new_tensor(ctx, x.dtype, out_shape);
  if (z->numel() > 0) {
    GemmArgs g;
    g.m = rows, g.n = out_features, g.k = in_features;
    g.a = x.data(), g.b = w.data(), g.trans_b = true, g.ab_type = x.dtype;
    g.c = z->data(), g.c_type = x.dtype;
    g.bias = bias ? bias->data() : nullptr;
    gemm_of(ctx, "linear").gemm(g);
  }
  // ReLU in place (exact on the rounded z, so the same bits as on z in
  // fp32); GELU into a new tensor, z kept for its derivative.
  TensorRef out;
  if (activation == Activation::Gelu) {
    out = new_tensor(ctx, x.dtype, out_shape);
    if (out->numel() > 0)
      nn_of(ctx, "linear").unary(UnaryOp::Gelu, z->data(), out->data(), x.dtype, out->numel());
  } else {
    if (activation == Activation::Relu && z->numel() > 0)
      nn_of(ctx, "linear").unary(UnaryOp::Relu, z->data(), z->data(), x.dtype, z->numel());
    out = retained(*z);
  }
  if (should_record(ctx, {&x, &w, bias})) {
    auto node = make_node<LinearNode>({&in[0], &in[1], &in[2]});
    node->rows = rows, node->in = in_features, node->out = out_features;
    node->activation = activation;
    if (activation == Activation::Gelu) node->activation_input = std::move(z);
    if (activation == Activation::Relu) {
      node->activation_input = saved_output(ctx, *out);
      node->saves(*out);
    }
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
