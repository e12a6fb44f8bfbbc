// conv.cpp -- 2-D convolution and pooling (ampx.h section 11): shape and
// option checks with both shapes in every message, autocast, and nodes
// whose backward runs the backend's ConvolutionPrimitives and PoolingPrimitives
// (core/backend_conv.h). An unbatched [C, H, W] input is a batch of one.
#include "core/backend_conv.h"
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
};

class Pool2dNode final : public Node {
 public:
  Pool2dShape shape;
  const char* name() const override {
    return shape.kind == PoolKind::Max ? "max_pool2d" : "avg_pool2d";
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
  if (ws.dims[1] * p.groups != s.in_channels)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), " and 'weight' ", weight_in.describe(),
         "; with groups ", p.groups, " the weight needs ", s.in_channels / p.groups,
         " input channels per group (dimension 1)");
  s.out_channels = ws.dims[0];
  s.kernel_h = ws.dims[2], s.kernel_w = ws.dims[3];
  s.stride_h = p.stride[0], s.stride_w = p.stride[1];
  s.pad_h = p.padding[0], s.pad_w = p.padding[1];
  s.dilation_h = p.dilation[0], s.dilation_w = p.dilation[1];
  s.groups = p.groups;
  s.out_h = window_output_extent(s.in_h, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h, false);
  s.out_w = window_output_extent(s.in_w, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w, false);
  if (s.out_h < 1 || s.out_w < 1)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), " and 'weight' ", weight_in.describe(),
         "; the kernel (", (s.kernel_h - 1) * s.dilation_h + 1, " x ",
         (s.kernel_w - 1) * s.dilation_w + 1, " with dilation) is larger than the padded input (",
         s.in_h + 2 * s.pad_h, " x ", s.in_w + 2 * s.pad_w, ")");
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
  for (int d = 0; d < 2; ++d) {
    const int64_t effective = (p.kernel[d] - 1) * p.dilation[d] + 1;
    if (p.padding[d] > effective / 2)
      fail(AMPX_ERR_INVALID_ARGUMENT, op, ": 'padding' is (", p.padding[0], ", ", p.padding[1],
           ") and the kernel (", p.kernel[0], ", ", p.kernel[1],
           "); padding may be at most half the (dilated) kernel");
  }
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
  s.out_h = window_output_extent(s.in_h, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h, p.ceil_mode);
  s.out_w = window_output_extent(s.in_w, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w, p.ceil_mode);
  if (s.out_h < 1 || s.out_w < 1)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), "; a ", p.kernel[0], " x ", p.kernel[1],
         " window (dilation ", p.dilation[0], " x ", p.dilation[1], ") does not fit the padded ",
         s.in_h + 2 * s.pad_h, " x ", s.in_w + 2 * s.pad_w, " input");
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

}  // namespace ampx::impl
