// block_ops.cpp -- the remaining ops of a Transformer block: masked_fill,
// pow with a number exponent, rotary position embeddings, and split /
// chunk (copies of slices along one dimension, with a backward pass that
// places each output's gradient back in its slice).
#include <cmath>
#include <vector>

#include "math/convert.h"
#include "onnx/emitter.h"
#include "ops/broadcast.h"
#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {


class MaskedFillNode final : public Node {
 public:
  TensorRef mask;  // a constant: no gradient
  const char* name() const override { return "masked_fill"; }
  // x where the mask is zero, else the value.
  void onnx(onnx::Emitter& e) const override {
    const std::string where =
        e.op("Cast", {e.constant(*mask)}, {onnx::cast_to(onnx::ElemType::Bool)});
    e.output(0, e.op("Where", {where, e.scalar(value), e.input(0)}));
  }
  float value = 0.0f;  // for the ONNX form
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor& dy = *grads[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    if (dx->numel() > 0)
      nn_of(ctx, name()).masked_fill(dy.data(), dy.dtype, mask->data(), mask->dtype, 0.0f,
                                     dx->data(), broadcast_layout(x.shape, x.shape, mask->shape));
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(TensorRef(op_masked_fill(*grads[0], *mask, 0.0)));
  }
};

class PowNode final : public Node {
 public:
  float exponent = 1.0f;
  const char* name() const override { return "pow"; }
  void onnx(onnx::Emitter& e) const override {
    e.output(0, e.op("Pow", {e.input(0), e.scalar(exponent)}));
  }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    nn_of(ctx, name()).pow_scalar_backward(x.data(), grads[0]->data(), dx->data(), x.dtype,
                                           x.numel(), exponent);
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  // dy p x^(p - 1); 0 for p == 0 (as the fused backward).
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& x = *inputs[0];
    if (exponent == 0.0f) return grad_list(f::zeros(ctx, x.dtype, x.shape));
    TensorRef slope = f::affine(*TensorRef(op_pow(x, exponent - 1.0f)), exponent, 0.0f);
    return grad_list(f::mul(*grads[0], *slope));
  }
};

class RotaryNode final : public Node {
 public:
  RotaryShape shape;
  bool inverse = false;  // the forward rotated back (a backward's own record)
  TensorRef cos, sin;    // constants: no gradient
  const char* name() const override { return "rotary_embedding"; }
  bool reads_input(size_t) const override { return false; }
  // A rotation's gradient is the rotation back.
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    if (dx->numel() > 0)
      nn_of(ctx, name()).rotary(grads[0]->data(), x.dtype, cos->data(), sin->data(), cos->dtype,
                                dx->data(), shape, !inverse);
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(TensorRef(op_rotary_with(*grads[0], *cos, *sin, shape, !inverse)));
  }
};

// The copy between slice [offset, offset + size) of dimension `dim` of a
// tensor of `shape` and a contiguous tensor of the slice's shape.
struct Slice {
  StridedCopy layout;   // sizes [outer, size, inner]; src strides of the whole tensor
  int64_t offset = 0;   // elements from the whole tensor's start to the slice's
};

Slice slice_of(const Shape& shape, int32_t dim, int64_t offset, int64_t size) {
  Slice s;
  const int64_t outer = shape.extent_product(0, dim), inner = shape.extent_product(dim + 1, shape.ndim);
  const int64_t extent = shape.dims[dim];
  s.layout.ndim = 3;
  s.layout.sizes[0] = outer, s.layout.sizes[1] = size, s.layout.sizes[2] = inner;
  s.layout.src_strides[0] = extent * inner, s.layout.src_strides[1] = inner;
  s.layout.src_strides[2] = 1;
  s.layout.dst_strides[0] = size * inner, s.layout.dst_strides[1] = inner;
  s.layout.dst_strides[2] = 1;
  s.offset = offset * inner;
  return s;
}

class SplitNode final : public Node {
 public:
  int32_t dim = 0;
  std::vector<int64_t> sizes;
  const char* name() const override { return "split"; }
  // Split's sizes: an attribute below opset 13, an input from it.
  void onnx(onnx::Emitter& e) const override {
    std::vector<onnx::Attribute> attrs{onnx::attr("axis", int64_t{dim})};
    std::vector<std::string> args{e.input(0)};
    if (e.opset() >= 13)
      args.push_back(e.ints(sizes));
    else
      attrs.push_back(onnx::attr("split", sizes));
    const std::vector<std::string> parts = e.op_n("Split", args, attrs, sizes.size());
    for (size_t k = 0; k < parts.size(); ++k) e.output(k, parts[k]);
  }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    if (dx->numel() == 0) return grad_list(std::move(dx));
    const size_t width = dtype_size(x.dtype);
    // Outputs no gradient reached leave zeros in their slices.
    ctx.backend().fill(dx->data(), width, 0, dx->numel());
    int64_t offset = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      Slice s = slice_of(x.shape, dim, offset, sizes[k]);
      offset += sizes[k];
      if (!grads[k] || grads[k]->numel() == 0) continue;
      std::swap(s.layout.src_strides, s.layout.dst_strides);
      nn_of(ctx, name()).copy_strided(static_cast<char*>(dx->data()) + s.offset * width,
                                      grads[k]->data(), width, s.layout);
    }
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  // The pieces' gradients joined (a recorded concat), zeros for a piece no
  // gradient reached.
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    std::vector<TensorRef> zeros;
    std::vector<DeviceTensor*> pieces;
    for (size_t k = 0; k < sizes.size(); ++k) {
      if (grads[k]) {
        pieces.push_back(grads[k]);
        continue;
      }
      Shape piece = x.shape;
      piece.dims[dim] = sizes[k];
      zeros.push_back(formula::zeros(ctx, x.dtype, piece));
      pieces.push_back(zeros.back().get());
    }
    return grad_list(TensorRef(op_concat(pieces, dim)));
  }
};

int32_t dim_of(int32_t dim, const DeviceTensor& x) {
  const int32_t nd = x.shape.ndim;
  const int32_t d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd)
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'dim' is ", dim, " but '", x.describe(), "' has ",
         nd, " dimensions (use -", nd, " .. ", nd - 1, ")");
  return d;
}

}  // namespace

DeviceTensor* op_masked_fill(DeviceTensor& x_in, DeviceTensor& mask, double value) {
  require_capabilities(*x_in.ctx, "masked_fill", Capability::Nn);
  check_same_context(x_in, mask, "x", "mask");
  check_floating(x_in, "x");
  check_not_fp8(mask, "mask");
  if (!(broadcast_shape(x_in, mask, "masked_fill") == x_in.shape))
    fail(AMPX_ERR_SHAPE, "'mask' is ", mask.describe(), " and 'x' ", x_in.describe(),
         "; the mask must broadcast to x's shape");
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "masked_fill", {&x_in});
  DeviceTensor& x = *in[0];
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  if (x.numel() > 0)
    nn_of(ctx, "masked_fill")
        .masked_fill(x.data(), x.dtype, mask.data(), mask.dtype, math::double_to_float(value),
                     out->data(), broadcast_layout(x.shape, x.shape, mask.shape));
  if (should_record(ctx, {&x})) {
    auto node = make_node<MaskedFillNode>({&in[0]});
    node->mask = retained(mask);
    node->value = math::double_to_float(value);
    node->saves(mask);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_pow(DeviceTensor& x_in, double exponent) {
  require_capabilities(*x_in.ctx, "pow", Capability::Nn);
  check_floating(x_in, "x");
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "pow", {&x_in});
  DeviceTensor& x = *in[0];
  const float p = math::double_to_float(exponent);
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  nn_of(ctx, "pow").pow_scalar(x.data(), out->data(), x.dtype, x.numel(), p);
  if (should_record(ctx, {&x})) {
    auto node = make_node<PowNode>({&in[0]});
    node->exponent = p;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_rotary(DeviceTensor& x_in, DeviceTensor& cos, DeviceTensor& sin,
                        bool interleaved) {
  require_capabilities(*x_in.ctx, "rotary_embedding", Capability::Nn);
  check_same_context(x_in, cos, "x", "cos");
  check_same_context(x_in, sin, "x", "sin");
  check_floating(x_in, "x");
  check_floating(cos, "cos");
  check_floating(sin, "sin");
  const Shape& xs = x_in.shape;
  if (xs.ndim < 2 || xs.dims[xs.ndim - 1] % 2 != 0)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(),
         "; rotary embeddings take x [..., T, D] with D even");
  const int64_t T = xs.dims[xs.ndim - 2], D = xs.dims[xs.ndim - 1];
  for (const DeviceTensor* t : {&cos, &sin})
    if (!(t->shape.ndim == 2 && t->shape.dims[0] == T && t->shape.dims[1] == D / 2))
      fail(AMPX_ERR_SHAPE, "'", t == &cos ? "cos" : "sin", "' is ", t->describe(), "; x ",
           x_in.describe(), " needs tables [", T, ", ", D / 2, "]");
  if (cos.dtype != sin.dtype)
    fail(AMPX_ERR_DTYPE, "'cos' is ", cos.describe(), " and 'sin' ", sin.describe(),
         "; the tables share a dtype");
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "rotary_embedding", {&x_in});
  DeviceTensor& x = *in[0];
  RotaryShape shape;
  shape.positions = T, shape.dim = D, shape.interleaved = interleaved;
  shape.rows = T * D > 0 ? x.numel() / (T * D) : 0;
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  if (x.numel() > 0)
    nn_of(ctx, "rotary_embedding")
        .rotary(x.data(), x.dtype, cos.data(), sin.data(), cos.dtype, out->data(), shape, false);
  if (should_record(ctx, {&x})) {
    auto node = make_node<RotaryNode>({&in[0]});
    node->shape = shape;
    node->cos = retained(cos);
    node->sin = retained(sin);
    node->saves(cos);
    node->saves(sin);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_rotary_with(DeviceTensor& x, DeviceTensor& cos, DeviceTensor& sin,
                             const RotaryShape& shape, bool inverse) {
  require_capabilities(*x.ctx, "rotary_embedding", Capability::Nn);
  DeviceContext& ctx = *x.ctx;
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  if (x.numel() > 0)
    nn_of(ctx, "rotary_embedding")
        .rotary(x.data(), x.dtype, cos.data(), sin.data(), cos.dtype, out->data(), shape, inverse);
  if (should_record(ctx, {&x})) {
    auto node = std::make_unique<RotaryNode>();
    node->inputs.push_back(retained(x));
    node->shape = shape;
    node->inverse = inverse;
    node->cos = retained(cos);
    node->sin = retained(sin);
    node->saves(cos);
    node->saves(sin);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

std::vector<TensorRef> op_split(DeviceTensor& x_in, const std::vector<int64_t>& sizes,
                                int32_t dim_in) {
  require_capabilities(*x_in.ctx, "split", Capability::Nn);
  check_not_fp8(x_in, "x");
  if (x_in.shape.ndim == 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "'x' is ", x_in.describe(), "; split needs a dimension");
  const int32_t dim = dim_of(dim_in, x_in);
  if (sizes.empty()) fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'count' is 0; split needs a size");
  const int64_t extent = x_in.shape.dims[dim];
  int64_t total = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] < 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "sizes[", k, "] is ", sizes[k], "; sizes are >= 0");
    if (sizes[k] > extent - total)
      fail(AMPX_ERR_SHAPE, "sizes[0 .. ", k, "] add up to more than dimension ", dim, " of '",
           x_in.describe(), "' (", extent, ")");
    total += sizes[k];
  }
  if (total != extent)
    fail(AMPX_ERR_SHAPE, "the sizes add up to ", total, " but dimension ", dim, " of '",
         x_in.describe(), "' is ", extent);
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "split", {&x_in});
  DeviceTensor& x = *in[0];
  const size_t width = dtype_size(x.dtype);
  std::vector<TensorRef> outs;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    Shape shape = x.shape;
    shape.dims[dim] = size;
    TensorRef out = new_tensor(ctx, x.dtype, shape);
    // A slice only of a piece with elements: x then has some, so its
    // strides fit in int64 (in an empty x they need not: [0, 2^40, 2^40]).
    if (out->numel() > 0) {
      const Slice s = slice_of(x.shape, dim, offset, size);
      nn_of(ctx, "split").copy_strided(out->data(),
                                       static_cast<const char*>(x.data()) + s.offset * width,
                                       width, s.layout);
    }
    offset += size;
    outs.push_back(std::move(out));
  }
  if (should_record(ctx, {&x})) {
    auto node = make_node<SplitNode>({&in[0]});
    node->dim = dim;
    node->sizes = sizes;
    std::vector<DeviceTensor*> made;
    for (TensorRef& t : outs) made.push_back(t.get());
    record(ctx, std::move(node), made);
  }
  return outs;
}

std::vector<int64_t> chunk_sizes(const DeviceTensor& x, int32_t chunks, int32_t dim_in) {
  if (chunks < 1)
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'chunks' is ", chunks, "; it must be at least 1");
  if (x.shape.ndim == 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, "'x' is ", x.describe(), "; chunk needs a dimension");
  const int64_t n = x.shape.dims[dim_of(dim_in, x)];
  // torch.chunk: pieces of ceil(n / chunks), the last one smaller; fewer
  // than `chunks` when they run out first.
  if (n == 0) return std::vector<int64_t>(static_cast<size_t>(chunks), 0);
  const int64_t piece = n / chunks + (n % chunks != 0);  // n + chunks - 1 could wrap
  std::vector<int64_t> sizes;
  for (int64_t left = n; left > 0; left -= piece) sizes.push_back(left < piece ? left : piece);
  return sizes;
}

}  // namespace ampx::impl
