// elementwise.cpp -- add/sub/mul/div with NumPy broadcasting, affine,
// activations and the element-wise functions (exp, log, sqrt, rsqrt).
// Equal shapes and a row vector b take the backend's plain binary
// primitive; other broadcasts its binary_broadcast. Gradients are summed
// back to each operand's shape (ops/broadcast.h).
#include "ops/broadcast.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Equal: return "equal";
  }
  return "?";
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::GeluTanh: return "gelu_tanh";
    case UnaryOp::Silu: return "silu";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
  }
  return "?";
}

// out (of `out_shape`, with elements) = a op b: the plain primitive when b
// has a's shape or is a row repeated over a's leading dimensions, else the
// general broadcast.
void binary_into(NnPrimitives& nn, BinaryOp op, const DeviceTensor& a, const DeviceTensor& b,
                 void* out, const Shape& out_shape) {
  const bool row = a.shape.ndim >= 1 && b.shape.ndim == 1 &&
                   b.shape.dims[0] == a.shape.dims[a.shape.ndim - 1];
  if (out_shape == a.shape && (b.shape == a.shape || row))
    nn.binary(op, a.data(), b.data(), out, a.dtype, a.numel(), b.numel());
  else
    nn.binary_broadcast(op, a.data(), b.data(), out, a.dtype,
                        broadcast_layout(out_shape, a.shape, b.shape));
}

// full op operand, full having the output's shape.
void binary_into(NnPrimitives& nn, BinaryOp op, const DeviceTensor& full,
                 const DeviceTensor& operand, void* out) {
  binary_into(nn, op, full, operand, out, full.shape);
}

// a op b for operands that broadcast to the output's shape. Each operand's
// gradient is dy (times the other operand, or divided by b) summed back to
// the operand's shape.
class BinaryNode final : public Node {
 public:
  BinaryOp op = BinaryOp::Add;
  const char* name() const override { return binary_name(op); }
  bool reads_input(size_t) const override { return op == BinaryOp::Mul || op == BinaryOp::Div; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& a = *inputs[0];
    DeviceTensor& b = *inputs[1];
    DeviceTensor& dy = *grads[0];
    TensorRef da, db;
    if (op == BinaryOp::Add || op == BinaryOp::Sub) {
      if (a.requires_grad) da = sum_to_shape(ctx, name(), dy, a.shape);
      if (b.requires_grad) {
        db = sum_to_shape(ctx, name(), dy, b.shape);
        if (op == BinaryOp::Sub) db = negated(ctx, *db);
      }
      return grad_list(std::move(da), std::move(db));
    }
    if (op == BinaryOp::Mul) {
      if (a.requires_grad) da = sum_to_shape(ctx, name(), *combined(ctx, BinaryOp::Mul, dy, b), a.shape);
      if (b.requires_grad) db = sum_to_shape(ctx, name(), *combined(ctx, BinaryOp::Mul, dy, a), b.shape);
      return grad_list(std::move(da), std::move(db));
    }
    // Div: da = dy / b; db = -(dy / b) * a / b.
    TensorRef quotient = combined(ctx, BinaryOp::Div, dy, b);
    if (b.requires_grad) {
      TensorRef t = combined(ctx, BinaryOp::Mul, *quotient, a);
      t = combined(ctx, BinaryOp::Div, *t, b);
      db = negated(ctx, *sum_to_shape(ctx, name(), *t, b.shape));
    }
    if (a.requires_grad) da = sum_to_shape(ctx, name(), *quotient, a.shape);
    return grad_list(std::move(da), std::move(db));
  }

 private:
  // full op operand, where full has the output's shape.
  TensorRef combined(DeviceContext& ctx, BinaryOp with, DeviceTensor& full,
                     const DeviceTensor& operand) const {
    TensorRef out = new_tensor(ctx, full.dtype, full.shape);
    if (out->numel() > 0) binary_into(nn_of(ctx, name()), with, full, operand, out->data());
    return out;
  }
  TensorRef negated(DeviceContext& ctx, DeviceTensor& t) const {
    TensorRef out = new_tensor(ctx, t.dtype, t.shape);
    if (out->numel() > 0)
      nn_of(ctx, name()).affine(t.data(), out->data(), t.dtype, t.numel(), -1.0f, 0.0f);
    return out;
  }
};

class AffineNode final : public Node {
 public:
  float scale = 1.0f;
  const char* name() const override { return "affine"; }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    nn_of(ctx, name()).affine(grads[0]->data(), dx->data(), x.dtype, x.numel(), scale, 0.0f);
    return grad_list(std::move(dx));
  }
};

class UnaryNode final : public Node {
 public:
  UnaryOp op = UnaryOp::Relu;
  const char* name() const override { return unary_name(op); }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    nn_of(ctx, name())
        .unary_backward(op, x.data(), grads[0]->data(), dx->data(), x.dtype, x.numel());
    return grad_list(std::move(dx));
  }
};

}  // namespace

DeviceTensor* op_binary(BinaryOp op, DeviceTensor& a_in, DeviceTensor& b_in) {
  require_capabilities(*a_in.ctx, binary_name(op), Capability::Nn);
  check_same_context(a_in, b_in, "a", "b");
  check_floating(a_in, "a");
  check_floating(b_in, "b");
  const Shape out_shape =
      a_in.shape == b_in.shape ? a_in.shape : broadcast_shape(a_in, b_in, binary_name(op));
  DeviceContext& ctx = *a_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, binary_name(op), {&a_in, &b_in});
  DeviceTensor& a = *in[0];
  DeviceTensor& b = *in[1];
  TensorRef out = new_tensor(ctx, a.dtype, out_shape);
  if (out->numel() > 0) binary_into(nn_of(ctx, binary_name(op)), op, a, b, out->data(), out_shape);
  if (should_record(ctx, {&a, &b})) {
    auto node = make_node<BinaryNode>({&in[0], &in[1]});
    node->op = op;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_affine(DeviceTensor& x_in, float scale, float shift) {
  require_capabilities(*x_in.ctx, "affine", Capability::Nn);
  check_floating(x_in, "a");
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "affine", {&x_in});
  DeviceTensor& x = *in[0];
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  if (x.numel() > 0)
    nn_of(ctx, "affine").affine(x.data(), out->data(), x.dtype, x.numel(), scale, shift);
  if (should_record(ctx, {&x})) {
    auto node = make_node<AffineNode>({&in[0]});
    node->scale = scale;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_unary(UnaryOp op, DeviceTensor& x_in) {
  require_capabilities(*x_in.ctx, unary_name(op), Capability::Nn);
  check_floating(x_in, "x");
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, unary_name(op), {&x_in});
  DeviceTensor& x = *in[0];
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  if (x.numel() > 0)
    nn_of(ctx, unary_name(op)).unary(op, x.data(), out->data(), x.dtype, x.numel());
  if (should_record(ctx, {&x})) {
    auto node = make_node<UnaryNode>({&in[0]});
    node->op = op;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
