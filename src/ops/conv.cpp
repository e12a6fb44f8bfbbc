// conv.cpp -- 2-D convolution and pooling (ampx.h section 11): shape and
// option checks with both shapes in every message, autocast, and nodes
// whose backward runs the backend's ConvolutionPrimitives and PoolingPrimitives
// (core/backend_conv.h). An unbatched [C, H, W] input is a batch of one.
#include "core/backend_conv.h"
#include "core/checked_math.h"
#include "onnx/emitter.h"
#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

ConvolutionPrimitives& conv_of(DeviceContext& ctx, const char* op) {
  return ctx.backend().require<ConvolutionPrimitives>(op);
}

PoolingPrimitives& pool_of(DeviceContext& ctx, const char* op) {
  return ctx.backend().require<PoolingPrimitives>(op);
}

// [N, C, H, W] or [C, H, W] (N = 1) with C, H and W > 0; N may be 0.
void image_extents(const DeviceTensor& x, const char* op, int64_t* n, int64_t* c, int64_t* h,
                   int64_t* w) {
  const Shape& s = x.shape;
  if (s.ndim != 3 && s.ndim != 4)
    fail(AMPX_ERR_SHAPE, "'x' is ", x.describe(), "; ", op,
         " takes [N, C, H, W] or an unbatched [C, H, W]");
  const int32_t first = s.ndim - 3;
  *n = s.ndim == 4 ? s.dims[0] : 1;
  *c = s.dims[first], *h = s.dims[first + 1], *w = s.dims[first + 2];
  if (*c == 0 || *h == 0 || *w == 0)
    fail(AMPX_ERR_SHAPE, "'x' is ", x.describe(), "; ", op,
         " needs at least one channel, row and column");
}

Shape image_shape(const DeviceTensor& like, int64_t n, int64_t c, int64_t h, int64_t w) {
  Shape s = like.shape;
  const int32_t first = s.ndim - 3;
  if (s.ndim == 4) s.dims[0] = n;
  s.dims[first] = c, s.dims[first + 1] = h, s.dims[first + 2] = w;
  return s;
}

void check_pair(const char* op, const char* name, const int64_t v[2], int64_t least) {
  for (int d = 0; d < 2; ++d)
    if (v[d] < least)
      fail(AMPX_ERR_INVALID_ARGUMENT, op, ": '", name, "' is (", v[0], ", ", v[1],
           "); each must be at least ", least);
}

class Conv2dNode final : public Node {
 public:
  Conv2dShape shape;
  bool has_bias = false;
  const char* name() const override { return "conv2d"; }
  // Conv; ONNX's pads run [top, left, bottom, right] (the begins of every
  // spatial axis, then the ends).
  void onnx(onnx::Emitter& e) const override {
    std::vector<std::string> args{e.input(0), e.input(1)};
    if (e.has_input(2)) args.push_back(e.input(2));
    const Conv2dShape& s = shape;
    e.output(0, e.op("Conv", args,
                     {onnx::attr("kernel_shape", std::vector<int64_t>{s.kernel_h, s.kernel_w}),
                      onnx::attr("strides", std::vector<int64_t>{s.stride_h, s.stride_w}),
                      onnx::attr("pads", std::vector<int64_t>{s.pad_h, s.pad_w, s.pad_h, s.pad_w}),
                      onnx::attr("dilations", std::vector<int64_t>{s.dilation_h, s.dilation_w}),
                      onnx::attr("group", s.groups)}));
  }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor& w = *inputs[1];
    DeviceTensor& dy = *grads[0];
    ConvolutionPrimitives& conv = conv_of(ctx, name());
    TensorRef dx, dw, db;
    const bool bias_grad = has_bias && inputs[2]->requires_grad;
    if (x.requires_grad && (w.requires_grad || bias_grad) && shape.batch > 0) {
      // Both gradients: one call, which may share the work on dy.
      dx = new_tensor(ctx, x.dtype, x.shape);
      dw = new_tensor(ctx, w.dtype, w.shape);
      if (bias_grad) db = new_tensor(ctx, inputs[2]->dtype, inputs[2]->shape);
      conv.conv2d_backward(shape, dy.data(), x.data(), w.data(), x.dtype, dx->data(), dw->data(),
                           db ? db->data() : nullptr);
      if (!w.requires_grad) dw = TensorRef();
      return grad_list(std::move(dx), std::move(dw), std::move(db));
    }
    if (x.requires_grad) {
      dx = new_tensor(ctx, x.dtype, x.shape);
      if (shape.batch > 0) conv.conv2d_backward_data(shape, dy.data(), w.data(), x.dtype, dx->data());
    }
    if (w.requires_grad || bias_grad) {
      dw = new_tensor(ctx, w.dtype, w.shape);
      if (bias_grad) db = new_tensor(ctx, inputs[2]->dtype, inputs[2]->shape);
      if (shape.batch > 0) {
        conv.conv2d_backward_weight(shape, dy.data(), x.data(), x.dtype, dw->data(),
                                    db ? db->data() : nullptr);
      } else {
        ctx.backend().fill(dw->data(), dtype_size(w.dtype), 0, dw->numel());
        if (db) ctx.backend().fill(db->data(), dtype_size(db->dtype), 0, db->numel());
      }
      if (!w.requires_grad) dw = TensorRef();
    }
    return grad_list(std::move(dx), std::move(dw), std::move(db));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor& w = *inputs[1];
    DeviceTensor& dy = *grads[0];
    TensorRef dx, dw, db;
    if (x.requires_grad) dx = TensorRef(op_conv2d_grad_input(dy, w, shape, x.shape));
    if (w.requires_grad) dw = TensorRef(op_conv2d_grad_weight(dy, x, shape, w.shape));
    if (has_bias && inputs[2]->requires_grad)
      db = dy.shape.ndim == 4 ? formula::sum_dims(dy, {0, 2, 3}, false)
                              : formula::sum_dims(dy, {1, 2}, false);
    return grad_list(std::move(dx), std::move(dw), std::move(db));
  }
};

// The backward products of a convolution as ops of their own (bilinear:
// dx(dy, w) and dw(dy, x)), for the differentiable formulas. For the inner
// product <G, dx(dy, w)> = <dy, conv(G, w)>, dx's gradients are conv(G, w)
// for dy and dw(dy, G) for w; likewise <G, dw(dy, x)> = <dy, conv(x, G)>
// gives conv(x, G) for dy and dx(dy, G) for x.
class Conv2dGradInputNode final : public Node {
 public:
  Conv2dShape shape;
  const char* name() const override { return "conv2d_backward_data"; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *inputs[0];
    DeviceTensor& w = *inputs[1];
    DeviceTensor& g = *grads[0];
    ConvolutionPrimitives& conv = conv_of(ctx, name());
    TensorRef d_dy = new_tensor(ctx, dy.dtype, dy.shape), d_w = new_tensor(ctx, w.dtype, w.shape);
    if (shape.batch > 0) {
      conv.conv2d_forward(shape, g.data(), w.data(), nullptr, dy.dtype, d_dy->data());
      conv.conv2d_backward_weight(shape, dy.data(), g.data(), dy.dtype, d_w->data(), nullptr);
    } else {
      ctx.backend().fill(d_w->data(), dtype_size(w.dtype), 0, d_w->numel());
    }
    return grad_list(std::move(d_dy), std::move(d_w));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *inputs[0];
    DeviceTensor& w = *inputs[1];
    DeviceTensor& g = *grads[0];
    return grad_list(TensorRef(op_conv2d_shaped(g, w, shape, dy.shape)),
                     TensorRef(op_conv2d_grad_weight(dy, g, shape, w.shape)));
  }
};

class Conv2dGradWeightNode final : public Node {
 public:
  Conv2dShape shape;
  const char* name() const override { return "conv2d_backward_weight"; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *inputs[0];
    DeviceTensor& x = *inputs[1];
    DeviceTensor& g = *grads[0];
    ConvolutionPrimitives& conv = conv_of(ctx, name());
    TensorRef d_dy = new_tensor(ctx, dy.dtype, dy.shape), d_x = new_tensor(ctx, x.dtype, x.shape);
    if (shape.batch > 0) {
      conv.conv2d_forward(shape, x.data(), g.data(), nullptr, dy.dtype, d_dy->data());
      conv.conv2d_backward_data(shape, dy.data(), g.data(), dy.dtype, d_x->data());
    }
    return grad_list(std::move(d_dy), std::move(d_x));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *inputs[0];
    DeviceTensor& x = *inputs[1];
    DeviceTensor& g = *grads[0];
    return grad_list(TensorRef(op_conv2d_shaped(x, g, shape, dy.shape)),
                     TensorRef(op_conv2d_grad_input(dy, g, shape, x.shape)));
  }
};

class Pool2dNode final : public Node {
 public:
  Pool2dShape shape;
  const char* name() const override {
    return shape.kind == PoolKind::Max ? "max_pool2d" : "avg_pool2d";
  }
  // MaxPool / AveragePool. ceil_mode is read back from the recorded output
  // extents, and refused where ONNX's rounding up would give another
  // extent than torch's (which drops a last window starting in the padding).
  void onnx(onnx::Emitter& e) const override {
    const Pool2dShape& s = shape;
    const bool max = s.kind == PoolKind::Max;
    bool ceil = false;
    const int64_t in[2] = {s.in_h, s.in_w}, out[2] = {s.out_h, s.out_w};
    const int64_t k[2] = {s.kernel_h, s.kernel_w}, st[2] = {s.stride_h, s.stride_w};
    const int64_t pad[2] = {s.pad_h, s.pad_w}, dil[2] = {s.dilation_h, s.dilation_w};
    for (int d = 0; d < 2; ++d) {
      const int64_t room = in[d] + 2 * pad[d] - (dil[d] * (k[d] - 1) + 1);
      if (out[d] != room / st[d] + 1) ceil = true;
    }
    for (int d = 0; d < 2 && ceil; ++d) {
      const int64_t room = in[d] + 2 * pad[d] - (dil[d] * (k[d] - 1) + 1);
      if (out[d] != (room + st[d] - 1) / st[d] + 1)
        e.unsupported("ceil_mode here drops a last window that starts in the padding, which "
                      "ONNX's ceil_mode keeps");
    }
    if (ceil) e.require_opset(10, "ceil_mode");
    const bool dilated = s.dilation_h != 1 || s.dilation_w != 1;
    if (!max && s.divisor != 0 && s.divisor != s.kernel_h * s.kernel_w)
      e.unsupported("AveragePool has no divisor_override");
    if (dilated) e.require_opset(max ? 10 : 19, "dilations");
    std::vector<onnx::Attribute> attrs{
        onnx::attr("kernel_shape", std::vector<int64_t>{s.kernel_h, s.kernel_w}),
        onnx::attr("strides", std::vector<int64_t>{s.stride_h, s.stride_w}),
        onnx::attr("pads", std::vector<int64_t>{s.pad_h, s.pad_w, s.pad_h, s.pad_w})};
    if (ceil) attrs.push_back(onnx::attr("ceil_mode", int64_t{1}));
    if (dilated)
      attrs.push_back(onnx::attr("dilations", std::vector<int64_t>{s.dilation_h, s.dilation_w}));
    if (!max)
      attrs.push_back(onnx::attr("count_include_pad", int64_t{s.count_include_pad ? 1 : 0}));
    e.output(0, e.op(max ? "MaxPool" : "AveragePool", {e.input(0)}, attrs));
  }
  bool reads_input(size_t) const override { return shape.kind == PoolKind::Max; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    if (shape.planes > 0)
      pool_of(ctx, name()).pool2d_backward(shape, x.data(), grads[0]->data(), x.dtype,
                                           dx->data());
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor* source = shape.kind == PoolKind::Max ? &x : nullptr;
    return grad_list(TensorRef(op_pool2d_grad(source, *grads[0], shape, x.shape)));
  }
};

// Pooling's backward as an op (inputs: x, read by max pooling only, and
// dy): linear in dy, whose gradient is the adjoint -- average pooling's
// forward, or max pooling's gather at the windows' maxima of x. Its
// gradient with respect to x is zero (the maxima's positions are piecewise
// constant), so none is returned.
class Pool2dGradNode final : public Node {
 public:
  Pool2dShape shape;
  const char* name() const override {
    return shape.kind == PoolKind::Max ? "max_pool2d_backward" : "avg_pool2d_backward";
  }
  bool reads_input(size_t i) const override { return i == 0; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *inputs[1];
    TensorRef d_dy = new_tensor(ctx, dy.dtype, dy.shape);
    if (shape.planes > 0) {
      if (shape.kind == PoolKind::Max)
        pool_of(ctx, name()).max_pool2d_gather(shape, inputs[0]->data(), grads[0]->data(),
                                               dy.dtype, d_dy->data());
      else
        pool_of(ctx, name()).pool2d_forward(shape, grads[0]->data(), dy.dtype, d_dy->data());
    }
    return grad_list(TensorRef(), std::move(d_dy));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *inputs[1];
    if (shape.kind == PoolKind::Max)
      return grad_list(TensorRef(),
                       TensorRef(op_max_pool2d_gather(*inputs[0], *grads[0], shape, dy.shape)));
    return grad_list(TensorRef(), TensorRef(op_pool2d_shaped(*grads[0], shape, dy.shape)));
  }
};

// Max pooling's gather (inputs: x, g): linear in g, its gradient the
// backward pass at x; zero with respect to x.
class MaxPool2dGatherNode final : public Node {
 public:
  Pool2dShape shape;
  const char* name() const override { return "max_pool2d_gather"; }
  bool reads_input(size_t i) const override { return i == 0; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor& g = *inputs[1];
    TensorRef d_g = new_tensor(ctx, g.dtype, g.shape);
    if (shape.planes > 0)
      pool_of(ctx, name()).pool2d_backward(shape, x.data(), grads[0]->data(), g.dtype,
                                           d_g->data());
    return grad_list(TensorRef(), std::move(d_g));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(TensorRef(),
                     TensorRef(op_pool2d_grad(inputs[0].get(), *grads[0], shape, inputs[1]->shape)));
  }
};

}  // namespace

DeviceTensor* op_conv2d(DeviceTensor& x_in, DeviceTensor& weight_in, DeviceTensor* bias_in,
                        const Conv2dParams& p) {
  const char* const op = "conv2d";
  DeviceContext& ctx = *x_in.ctx;
  require_capabilities(ctx, op, Capability::Convolution);
  check_same_context(x_in, weight_in, "x", "weight");
  if (bias_in) check_same_context(x_in, *bias_in, "x", "bias");
  check_floating(x_in, "x");
  check_floating(weight_in, "weight");
  if (bias_in) check_floating(*bias_in, "bias");
  check_pair(op, "stride", p.stride, 1);
  check_pair(op, "padding", p.padding, 0);
  check_pair(op, "dilation", p.dilation, 1);
  if (p.groups < 1)
    fail(AMPX_ERR_INVALID_ARGUMENT, op, ": 'groups' is ", p.groups, "; it must be at least 1");

  Conv2dShape s;
  image_extents(x_in, op, &s.batch, &s.in_channels, &s.in_h, &s.in_w);
  const Shape& ws = weight_in.shape;
  if (ws.ndim != 4 || ws.dims[0] == 0 || ws.dims[2] == 0 || ws.dims[3] == 0)
    fail(AMPX_ERR_SHAPE, "'weight' is ", weight_in.describe(), " and 'x' ", x_in.describe(),
         "; conv2d's weight is [out_channels, in_channels / groups, kh, kw]");
  if (s.in_channels % p.groups != 0 || ws.dims[0] % p.groups != 0)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), " and 'weight' ", weight_in.describe(),
         "; groups ", p.groups, " must divide both the ", s.in_channels,
         " input channels and the ", ws.dims[0], " output channels");
  if (checked_mul(ws.dims[1], p.groups, "weight's dimension 1 * groups") != s.in_channels)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), " and 'weight' ", weight_in.describe(),
         "; with groups ", p.groups, " the weight needs ", s.in_channels / p.groups,
         " input channels per group (dimension 1)");
  s.out_channels = ws.dims[0];
  s.kernel_h = ws.dims[2], s.kernel_w = ws.dims[3];
  s.stride_h = p.stride[0], s.stride_w = p.stride[1];
  s.pad_h = p.padding[0], s.pad_w = p.padding[1];
  s.dilation_h = p.dilation[0], s.dilation_w = p.dilation[1];
  s.groups = p.groups;
  const WindowExtents rows =
      window_extents(0, s.in_h, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h, false);
  const WindowExtents cols =
      window_extents(1, s.in_w, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w, false);
  s.out_h = rows.out, s.out_w = cols.out;
  if (s.out_h < 1 || s.out_w < 1)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), " and 'weight' ", weight_in.describe(),
         "; the kernel (", rows.span, " x ", cols.span,
         " with dilation) is larger than the padded input (", rows.padded, " x ", cols.padded, ")");
  if (bias_in && !(bias_in->shape.ndim == 1 && bias_in->shape.dims[0] == s.out_channels))
    fail(AMPX_ERR_SHAPE, "'bias' is ", bias_in->describe(), " and 'weight' ",
         weight_in.describe(), "; the bias needs [", s.out_channels, "]");

  std::vector<TensorRef> in = op_inputs(ctx, op, {&x_in, &weight_in, bias_in});
  DeviceTensor& x = *in[0];
  DeviceTensor& w = *in[1];
  if (w.dtype != x.dtype || (in[2] && in[2]->dtype != x.dtype))
    fail(AMPX_ERR_DTYPE, "'x' is ", x.describe(), ", 'weight' ", w.describe(),
         in[2] ? " and 'bias' " : "", in[2] ? in[2]->describe() : std::string(),
         "; outside autocast they must share a dtype");
  TensorRef out = new_tensor(ctx, x.dtype, image_shape(x, s.batch, s.out_channels, s.out_h, s.out_w));
  if (s.batch > 0)
    conv_of(ctx, op).conv2d_forward(s, x.data(), w.data(), in[2] ? in[2]->data() : nullptr,
                                    x.dtype, out->data());
  if (should_record(ctx, {&x, &w, in[2].get()})) {
    auto node = make_node<Conv2dNode>({&in[0], &in[1], &in[2]});
    node->shape = s;
    node->has_bias = static_cast<bool>(in[2]);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_pool2d(DeviceTensor& x_in, const Pool2dParams& p) {
  const bool max = p.kind == PoolKind::Max;
  const char* const op = max ? "max_pool2d" : "avg_pool2d";
  DeviceContext& ctx = *x_in.ctx;
  require_capabilities(ctx, op, Capability::Pooling);
  check_floating(x_in, "x");
  check_pair(op, "kernel_size", p.kernel, 1);
  check_pair(op, "stride", p.stride, 1);
  check_pair(op, "padding", p.padding, 0);
  check_pair(op, "dilation", p.dilation, 1);
  if (!max && (p.dilation[0] != 1 || p.dilation[1] != 1))
    fail(AMPX_ERR_INVALID_ARGUMENT, op, ": 'dilation' is (", p.dilation[0], ", ", p.dilation[1],
         "); average pooling has none (1, 1)");
  if (p.divisor < 0)
    fail(AMPX_ERR_INVALID_ARGUMENT, op, ": 'divisor_override' is ", p.divisor,
         "; it must be positive (0: none)");
  // A dilated kernel too large for int64 fits no input: SHAPE, before the
  // padding is compared with half of it.
  for (int d = 0; d < 2; ++d)
    if (p.padding[d] > window_span(d, p.kernel[d], p.dilation[d]) / 2)
      fail(AMPX_ERR_INVALID_ARGUMENT, op, ": 'padding' is (", p.padding[0], ", ", p.padding[1],
           ") and the kernel (", p.kernel[0], ", ", p.kernel[1], ") with dilation (",
           p.dilation[0], ", ", p.dilation[1],
           "); padding may be at most half the dilated kernel, dilation * (kernel - 1) + 1");
  int64_t n = 0, c = 0;
  Pool2dShape s;
  image_extents(x_in, op, &n, &c, &s.in_h, &s.in_w);
  s.kind = p.kind;
  s.kernel_h = p.kernel[0], s.kernel_w = p.kernel[1];
  s.stride_h = p.stride[0], s.stride_w = p.stride[1];
  s.pad_h = p.padding[0], s.pad_w = p.padding[1];
  s.dilation_h = p.dilation[0], s.dilation_w = p.dilation[1];
  s.count_include_pad = p.count_include_pad;
  s.divisor = p.divisor;
  const WindowExtents rows =
      window_extents(0, s.in_h, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h, p.ceil_mode);
  const WindowExtents cols =
      window_extents(1, s.in_w, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w, p.ceil_mode);
  s.out_h = rows.out, s.out_w = cols.out;
  if (s.out_h < 1 || s.out_w < 1)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), "; a ", p.kernel[0], " x ", p.kernel[1],
         " window (dilation ", p.dilation[0], " x ", p.dilation[1], ") does not fit the padded ",
         rows.padded, " x ", cols.padded, " input");
  if (!max && s.count_include_pad && s.divisor == 0)
    padded_window_size(rows, cols, s.kernel_h, s.kernel_w);
  s.planes = n * c;

  std::vector<TensorRef> in = op_inputs(ctx, op, {&x_in});
  DeviceTensor& x = *in[0];
  TensorRef out = new_tensor(ctx, x.dtype, image_shape(x, n, c, s.out_h, s.out_w));
  if (s.planes > 0) pool_of(ctx, op).pool2d_forward(s, x.data(), x.dtype, out->data());
  if (should_record(ctx, {&x})) {
    auto node = make_node<Pool2dNode>({&in[0]});
    node->shape = s;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_global_avg_pool2d(DeviceTensor& x) {
  int64_t n = 0, c = 0, h = 0, w = 0;
  image_extents(x, "global_avg_pool2d", &n, &c, &h, &w);
  const int32_t dims[2] = {x.shape.ndim - 2, x.shape.ndim - 1};
  return op_reduce_dims(x, dims, 2, true, DimsReduction::Mean);
}

DeviceTensor* op_conv2d_shaped(DeviceTensor& x, DeviceTensor& w, const Conv2dShape& s,
                               const Shape& y_shape) {
  DeviceContext& ctx = *x.ctx;
  require_capabilities(ctx, "conv2d", Capability::Convolution);
  TensorRef out = new_tensor(ctx, x.dtype, y_shape);
  if (s.batch > 0) conv_of(ctx, "conv2d").conv2d_forward(s, x.data(), w.data(), nullptr, x.dtype, out->data());
  if (should_record(ctx, {&x, &w})) {
    auto node = std::make_unique<Conv2dNode>();
    node->inputs.push_back(retained(x));
    node->inputs.push_back(retained(w));
    node->inputs.emplace_back();
    node->shape = s;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_conv2d_grad_input(DeviceTensor& dy, DeviceTensor& w, const Conv2dShape& s,
                                   const Shape& x_shape) {
  DeviceContext& ctx = *dy.ctx;
  require_capabilities(ctx, "conv2d_backward_data", Capability::Convolution);
  TensorRef out = new_tensor(ctx, dy.dtype, x_shape);
  if (s.batch > 0)
    conv_of(ctx, "conv2d_backward_data").conv2d_backward_data(s, dy.data(), w.data(), dy.dtype, out->data());
  if (should_record(ctx, {&dy, &w})) {
    auto node = std::make_unique<Conv2dGradInputNode>();
    node->inputs.push_back(retained(dy));
    node->inputs.push_back(retained(w));
    node->shape = s;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_conv2d_grad_weight(DeviceTensor& dy, DeviceTensor& x, const Conv2dShape& s,
                                    const Shape& w_shape) {
  DeviceContext& ctx = *dy.ctx;
  require_capabilities(ctx, "conv2d_backward_weight", Capability::Convolution);
  TensorRef out = new_tensor(ctx, dy.dtype, w_shape);
  if (s.batch > 0)
    conv_of(ctx, "conv2d_backward_weight")
        .conv2d_backward_weight(s, dy.data(), x.data(), dy.dtype, out->data(), nullptr);
  else
    ctx.backend().fill(out->data(), dtype_size(out->dtype), 0, out->numel());
  if (should_record(ctx, {&dy, &x})) {
    auto node = std::make_unique<Conv2dGradWeightNode>();
    node->inputs.push_back(retained(dy));
    node->inputs.push_back(retained(x));
    node->shape = s;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_pool2d_shaped(DeviceTensor& x, const Pool2dShape& s, const Shape& y_shape) {
  DeviceContext& ctx = *x.ctx;
  const char* op = s.kind == PoolKind::Max ? "max_pool2d" : "avg_pool2d";
  require_capabilities(ctx, op, Capability::Pooling);
  TensorRef out = new_tensor(ctx, x.dtype, y_shape);
  if (s.planes > 0) pool_of(ctx, op).pool2d_forward(s, x.data(), x.dtype, out->data());
  if (should_record(ctx, {&x})) {
    auto node = std::make_unique<Pool2dNode>();
    node->inputs.push_back(retained(x));
    node->shape = s;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_pool2d_grad(DeviceTensor* x, DeviceTensor& dy, const Pool2dShape& s,
                             const Shape& x_shape) {
  DeviceContext& ctx = *dy.ctx;
  const char* op = s.kind == PoolKind::Max ? "max_pool2d_backward" : "avg_pool2d_backward";
  require_capabilities(ctx, op, Capability::Pooling);
  TensorRef out = new_tensor(ctx, dy.dtype, x_shape);
  if (s.planes > 0)
    pool_of(ctx, op).pool2d_backward(s, x ? x->data() : nullptr, dy.data(), dy.dtype,
                                     out->data());
  if (should_record(ctx, {&dy})) {
    auto node = std::make_unique<Pool2dGradNode>();
    node->inputs.push_back(x ? retained(*x) : TensorRef());
    node->inputs.push_back(retained(dy));
    node->shape = s;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_max_pool2d_gather(DeviceTensor& x, DeviceTensor& g, const Pool2dShape& s,
                                   const Shape& y_shape) {
  DeviceContext& ctx = *g.ctx;
  require_capabilities(ctx, "max_pool2d_gather", Capability::Pooling);
  TensorRef out = new_tensor(ctx, g.dtype, y_shape);
  if (s.planes > 0)
    pool_of(ctx, "max_pool2d_gather").max_pool2d_gather(s, x.data(), g.data(), g.dtype, out->data());
  if (should_record(ctx, {&g})) {
    auto node = std::make_unique<MaxPool2dGatherNode>();
    node->inputs.push_back(retained(x));
    node->inputs.push_back(retained(g));
    node->shape = s;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
