// elementwise.cpp -- add/sub/mul/div with NumPy broadcasting, affine,
// activations and the element-wise functions (exp, log, sqrt, rsqrt).
// Equal shapes and a row vector b take the backend's plain binary
// primitive; other broadcasts its binary_broadcast. Gradients are summed
// back to each operand's shape (ops/broadcast.h).
#include "math/activations.h"
#include "ops/broadcast.h"
#include "ops/formula.h"
#include "onnx/emitter.h"
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
    case UnaryOp::GeluDerivative: return "gelu_derivative";
    case UnaryOp::GeluTanhDerivative: return "gelu_tanh_derivative";
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
  // ONNX: the same op with numpy broadcasting; equal gives 1 or 0 as
  // floats, as ampx's does.
  void onnx(onnx::Emitter& e) const override {
    const std::string a = e.input(0), b = e.input(1);
    switch (op) {
      case BinaryOp::Add: return e.output(0, e.op("Add", {a, b}));
      case BinaryOp::Sub: return e.output(0, e.op("Sub", {a, b}));
      case BinaryOp::Mul: return e.output(0, e.op("Mul", {a, b}));
      case BinaryOp::Div: return e.output(0, e.op("Div", {a, b}));
      case BinaryOp::Equal:
        e.require_opset(11, "Equal on floats");
        return e.output(
            0, e.op("Cast", {e.op("Equal", {a, b})}, {onnx::cast_to(onnx::ElemType::Float)}));
    }
  }
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

  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& a = *inputs[0];
    DeviceTensor& b = *inputs[1];
    DeviceTensor& dy = *grads[0];
    TensorRef da, db;
    switch (op) {
      case BinaryOp::Add:
      case BinaryOp::Sub:
        if (a.requires_grad) da = f::sum_to(dy, a.shape);
        if (b.requires_grad) db = f::sum_to(dy, b.shape);
        if (db && op == BinaryOp::Sub) db = f::neg(*db);
        break;
      case BinaryOp::Mul:
        if (a.requires_grad) da = f::sum_to(*f::mul(dy, b), a.shape);
        if (b.requires_grad) db = f::sum_to(*f::mul(dy, a), b.shape);
        break;
      default: {  // Div: da = dy / b; db = -(dy / b) * a / b
        TensorRef quotient = f::div(dy, b);
        if (a.requires_grad) da = f::sum_to(*quotient, a.shape);
        if (b.requires_grad)
          db = f::neg(*f::sum_to(*f::div(*f::mul(*quotient, a), b), b.shape));
      }
    }
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
  float shift = 0.0f;  // for the ONNX form; the backward needs the scale only
  void onnx(onnx::Emitter& e) const override {
    std::string y = e.input(0);
    if (scale != 1.0f) y = e.op("Mul", {y, e.scalar(scale)});
    if (shift != 0.0f) y = e.op("Add", {y, e.scalar(shift)});
    if (y == e.input(0)) y = e.op("Identity", {y});
    e.output(0, y);
  }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    nn_of(ctx, name()).affine(grads[0]->data(), dx->data(), x.dtype, x.numel(), scale, 0.0f);
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(formula::affine(*grads[0], scale, 0.0f));
  }
};

class UnaryNode final : public Node {
 public:
  UnaryOp op = UnaryOp::Relu;
  const char* name() const override { return unary_name(op); }
  void onnx(onnx::Emitter& e) const override {
    const std::string x = e.input(0);
    switch (op) {
      case UnaryOp::Relu: return e.output(0, e.op("Relu", {x}));
      case UnaryOp::Gelu: return e.output(0, e.gelu(x));
      case UnaryOp::GeluTanh: return e.output(0, e.gelu_tanh(x));
      case UnaryOp::Silu: return e.output(0, e.op("Mul", {x, e.op("Sigmoid", {x})}));
      case UnaryOp::Sigmoid: return e.output(0, e.op("Sigmoid", {x}));
      case UnaryOp::Tanh: return e.output(0, e.op("Tanh", {x}));
      case UnaryOp::Exp: return e.output(0, e.op("Exp", {x}));
      case UnaryOp::Log: return e.output(0, e.op("Log", {x}));
      case UnaryOp::Sqrt: return e.output(0, e.op("Sqrt", {x}));
      case UnaryOp::Rsqrt: return e.output(0, e.op("Reciprocal", {e.op("Sqrt", {x})}));
      default: e.unsupported("a backward formula's internal op");
    }
  }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    nn_of(ctx, name())
        .unary_backward(op, x.data(), grads[0]->data(), dx->data(), x.dtype, x.numel());
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor& dy = *grads[0];
    namespace f = formula;
    switch (op) {
      case UnaryOp::Relu: return grad_list(TensorRef(op_relu_grad(x, dy)));
      case UnaryOp::Log: return grad_list(f::div(dy, x));
      case UnaryOp::Sqrt:  // dy * 0.5 / sqrt(x)
        return grad_list(f::div(*f::affine(dy, 0.5f, 0.0f), *f::unary(UnaryOp::Sqrt, x)));
      case UnaryOp::Rsqrt:  // dy * -0.5 rsqrt(x) / x
        return grad_list(
            f::mul(*f::affine(dy, -0.5f, 0.0f), *f::div(*f::unary(UnaryOp::Rsqrt, x), x)));
      default: return grad_list(f::mul(dy, *derivative(x)));
    }
  }

 private:
  // f'(x), written with recorded ops (or, for the gelus, as an element-wise
  // function whose own backward is f'').
  TensorRef derivative(DeviceTensor& x) const {
    namespace f = formula;
    switch (op) {
      case UnaryOp::Gelu: return f::unary(UnaryOp::GeluDerivative, x);
      case UnaryOp::GeluTanh: return f::unary(UnaryOp::GeluTanhDerivative, x);
      case UnaryOp::Silu: {  // s (1 + x (1 - s))
        TensorRef s = f::unary(UnaryOp::Sigmoid, x);
        return f::mul(*s, *f::affine(*f::mul(x, *f::affine(*s, -1.0f, 1.0f)), 1.0f, 1.0f));
      }
      case UnaryOp::Sigmoid: {  // s (1 - s)
        TensorRef s = f::unary(UnaryOp::Sigmoid, x);
        return f::mul(*s, *f::affine(*s, -1.0f, 1.0f));
      }
      case UnaryOp::Tanh: {  // 1 - t^2
        TensorRef t = f::unary(UnaryOp::Tanh, x);
        return f::affine(*f::mul(*t, *t), -1.0f, 1.0f);
      }
      case UnaryOp::Exp: return f::unary(UnaryOp::Exp, x);
      case UnaryOp::GeluDerivative: {  // phi(x) (2 - x^2)
        TensorRef x2 = f::mul(x, x);
        TensorRef pdf = f::affine(*f::unary(UnaryOp::Exp, *f::affine(*x2, -0.5f, 0.0f)),
                                  math::kInvSqrt2Pi, 0.0f);
        return f::mul(*pdf, *f::affine(*x2, -1.0f, 2.0f));
      }
      case UnaryOp::GeluTanhDerivative: {
        // s' (2 z' + x z'' + x z'^2 (1 - 2 s)), z = 2 c (x + a x^3)
        const float c = math::kSqrt2OverPi, a = math::kGeluTanhCubic;
        TensorRef x2 = f::mul(x, x);
        TensorRef s = f::unary(UnaryOp::Sigmoid, *f::mul(x, *f::affine(*x2, 2 * c * a, 2 * c)));
        TensorRef slope = f::mul(*s, *f::affine(*s, -1.0f, 1.0f));
        TensorRef dz = f::affine(*x2, 6 * c * a, 2 * c);
        TensorRef x_ddz = f::affine(*x2, 12 * c * a, 0.0f);
        TensorRef curve = f::mul(*f::mul(x, *f::mul(*dz, *dz)), *f::affine(*s, -2.0f, 1.0f));
        TensorRef bracket = f::add(*f::add(*f::affine(*dz, 2.0f, 0.0f), *x_ddz), *curve);
        return f::mul(*slope, *bracket);
      }
      default: break;
    }
    fail(AMPX_ERR_INTERNAL, "no derivative formula for '", name(), "'");
  }
};

// dy where mask > 0, else 0 (relu's derivative). Linear in dy, piecewise
// constant in the mask: its gradient with respect to dy is the same
// selection, with respect to the mask zero (none is returned; ampx_grad
// gives zeros for an input reached only so).
class ReluGradNode final : public Node {
 public:
  const char* name() const override { return "relu_backward"; }
  bool reads_input(size_t i) const override { return i == 0; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& mask = *inputs[0];
    TensorRef d_dy = new_tensor(ctx, mask.dtype, mask.shape);
    if (mask.numel() > 0)
      nn_of(ctx, name()).unary_backward(UnaryOp::Relu, mask.data(), grads[0]->data(),
                                        d_dy->data(), mask.dtype, mask.numel());
    return grad_list(TensorRef(), std::move(d_dy));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(TensorRef(), TensorRef(op_relu_grad(*inputs[0], *grads[0])));
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
    node->shift = shift;
    node->scale = scale;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_unary(UnaryOp op, DeviceTensor& x_in) {
  require_capabilities(*x_in.ctx, unary_name(op), Capability::Nn);
  check_floating(x_in, "x");
  DeviceContext& ctx = *x_in.ctx;
  // The derivatives are no ops of ampx.h: only formulas call them, with
  // autocast off, and they have no autocast class.
  const bool internal = op == UnaryOp::GeluDerivative || op == UnaryOp::GeluTanhDerivative;
  std::vector<TensorRef> in;
  if (internal)
    in.push_back(retained(x_in));
  else
    in = op_inputs(ctx, unary_name(op), {&x_in});
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

DeviceTensor* op_relu_grad(DeviceTensor& mask, DeviceTensor& dy) {
  require_capabilities(*dy.ctx, "relu_backward", Capability::Nn);
  check_same_context(mask, dy, "mask", "dy");
  if (mask.dtype != dy.dtype || !(mask.shape == dy.shape))
    fail(AMPX_ERR_INTERNAL, "relu_backward: mask ", mask.describe(), " and dy ", dy.describe());
  DeviceContext& ctx = *dy.ctx;
  TensorRef out = new_tensor(ctx, dy.dtype, dy.shape);
  if (dy.numel() > 0)
    nn_of(ctx, "relu_backward")
        .unary_backward(UnaryOp::Relu, mask.data(), dy.data(), out->data(), dy.dtype, dy.numel());
  if (should_record(ctx, {&mask, &dy})) {
    auto node = std::make_unique<ReluGradNode>();
    node->inputs.push_back(retained(mask));
    node->inputs.push_back(retained(dy));
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
