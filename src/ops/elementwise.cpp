// elementwise.cpp -- add/sub/mul/div with NumPy broadcasting, affine,
// activations and the element-wise functions (exp, log, sqrt, rsqrt).
// Equal shapes and a row vector b take the backend's plain binary
// primitive; other broadcasts its binary_broadcast, their gradients summed
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

// b is either a's shape or a row broadcast over a's leading dimensions.
bool is_row_of(const DeviceTensor& b, const DeviceTensor& a) {
  return a.shape.ndim >= 1 && b.shape.ndim == 1 && b.shape.dims[0] == a.shape.dims[a.shape.ndim - 1];
}

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
    const int64_t n = a.numel();
    const bool broadcast = b.numel() != n;
    TensorRef da, db;
    if (op == BinaryOp::Div) {
      // da = dy / b; db = -(dy / b) * a / b, summed over the broadcast rows.
      NnPrimitives& nn = nn_of(ctx, name());
      TensorRef quotient = new_tensor(ctx, a.dtype, a.shape);
      if (n > 0)
        nn.binary(BinaryOp::Div, dy.data(), b.data(), quotient->data(), a.dtype, n, b.numel());
      if (b.requires_grad) {
        TensorRef full = new_tensor(ctx, a.dtype, a.shape);
        if (n > 0) {
          nn.binary(BinaryOp::Mul, quotient->data(), a.data(), full->data(), a.dtype, n, n);
          nn.binary(BinaryOp::Div, full->data(), b.data(), full->data(), a.dtype, n, b.numel());
          nn.affine(full->data(), full->data(), a.dtype, n, -1.0f, 0.0f);
        }
        if (broadcast) {
          db = new_tensor(ctx, b.dtype, b.shape);
          nn.sum_rows(full->data(), a.dtype, n / b.numel(), b.numel(), db->data(), b.dtype);
        } else {
          db = std::move(full);
        }
      }
      if (a.requires_grad) da = std::move(quotient);
      return grad_list(std::move(da), std::move(db));
    }
    if (a.requires_grad) {
      if (op == BinaryOp::Mul) {
        da = new_tensor(ctx, a.dtype, a.shape);
        // As in the forward: the primitive takes no empty operand.
        if (n > 0)
          nn_of(ctx, name())
              .binary(BinaryOp::Mul, dy.data(), b.data(), da->data(), a.dtype, n, b.numel());
      } else {
        da = retained(dy);
      }
    }
    if (b.requires_grad) {
      // The gradient for every element of a, then summed over the broadcast rows.
      TensorRef full;
      if (op == BinaryOp::Add) {
        full = retained(dy);
      } else {
        full = new_tensor(ctx, a.dtype, a.shape);
        if (op == BinaryOp::Sub)
          nn_of(ctx, name()).affine(dy.data(), full->data(), a.dtype, n, -1.0f, 0.0f);
        else if (n > 0)
          nn_of(ctx, name())
              .binary(BinaryOp::Mul, dy.data(), a.data(), full->data(), a.dtype, n, n);
      }
      if (broadcast) {
        db = new_tensor(ctx, b.dtype, b.shape);
        nn_of(ctx, name())
            .sum_rows(full->data(), a.dtype, n / b.numel(), b.numel(), db->data(), b.dtype);
      } else {
        db = std::move(full);
      }
    }
    return grad_list(std::move(da), std::move(db));
  }
};

// a op b for operands that broadcast to `out_shape` in general.
class BroadcastBinaryNode final : public Node {
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
  // full op operand, where full has the broadcast shape.
  TensorRef combined(DeviceContext& ctx, BinaryOp with, DeviceTensor& full,
                     const DeviceTensor& operand) const {
    TensorRef out = new_tensor(ctx, full.dtype, full.shape);
    if (out->numel() > 0)
      nn_of(ctx, name())
          .binary_broadcast(with, full.data(), operand.data(), out->data(), full.dtype,
                            broadcast_layout(full.shape, full.shape, operand.shape));
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
  const bool plain = a_in.shape == b_in.shape || is_row_of(b_in, a_in);
  const Shape out_shape = plain ? a_in.shape : broadcast_shape(a_in, b_in, binary_name(op));
  DeviceContext& ctx = *a_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, binary_name(op), {&a_in, &b_in});
  DeviceTensor& a = *in[0];
  DeviceTensor& b = *in[1];
  if (!plain) {
    TensorRef out = new_tensor(ctx, a.dtype, out_shape);
    if (out->numel() > 0)
      nn_of(ctx, binary_name(op))
          .binary_broadcast(op, a.data(), b.data(), out->data(), a.dtype,
                            broadcast_layout(out_shape, a.shape, b.shape));
    if (should_record(ctx, {&a, &b})) {
      auto node = make_node<BroadcastBinaryNode>({&in[0], &in[1]});
      node->op = op;
      record(ctx, std::move(node), {out.get()});
    }
    return out.take();
  }
  TensorRef out = new_tensor(ctx, a.dtype, a.shape);
  if (a.numel() > 0)
    nn_of(ctx, binary_name(op))
        .binary(op, a.data(), b.data(), out->data(), a.dtype, a.numel(), b.numel());
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
