// norm.cpp -- layer norm, RMS norm and batch norm. Statistics are F32 whatever the
// input type: layer norm is an fp32-class op (autocast lifts its inputs),
// while batch norm keeps x's type and only its parameters, statistics and
// running statistics are F32, as torch's batch norm under autocast.
#include <cmath>

#include "onnx/emitter.h"
#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

void check_eps(float eps) {
  if (!(eps >= 0.0f) || !std::isfinite(eps))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'eps' is ", eps, "; it must be finite and >= 0");
}

void check_vector(const DeviceTensor& t, int64_t length, const char* name, const char* expected) {
  if (!(t.shape.ndim == 1 && t.shape.dims[0] == length))
    fail(AMPX_ERR_SHAPE, "'", name, "' is ", t.describe(), "; expected [", length, "] (", expected,
         ")");
}

void zero_fill(DeviceContext& ctx, DeviceTensor* t) {
  if (t && t->numel() > 0) ctx.backend().fill(t->data(), dtype_size(t->dtype), 0, t->numel());
}

class LayerNormNode final : public Node {
 public:
  int64_t rows = 0, cols = 0;
  bool centered = true;  // false: RMS norm
  float eps = 0.0f;
  TensorRef mean, rstd;  // F32 [rows]
  const char* name() const override { return centered ? "layer_norm" : "rms_norm"; }
  // Over the last axis: LayerNormalization from opset 17 (RMSNormalization
  // from 23), the same arithmetic decomposed below.
  void onnx(onnx::Emitter& e) const override {
    const std::string x = e.input(0);
    const bool fused = centered ? e.opset() >= 17 : e.opset() >= 23;
    if (!fused) {
      std::string w, b;
      if (e.has_input(1)) w = e.input(1);
      if (e.has_input(2)) b = e.input(2);
      return e.output(0, e.normalize_last(x, w.empty() ? nullptr : &w, b.empty() ? nullptr : &b,
                                          eps, centered));
    }
    std::vector<std::string> args{x, e.has_input(1) ? e.input(1)
                                                    : e.floats(std::vector<float>(cols, 1.0f),
                                                               {cols})};
    if (e.has_input(2)) args.push_back(e.input(2));
    e.output(0, e.op(centered ? "LayerNormalization" : "RMSNormalization", args,
                     {onnx::attr("axis", int64_t{-1}), onnx::attr("epsilon", eps)}));
  }
  bool reads_input(size_t i) const override { return i < 2; }  // x and weight
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor* w = inputs[1].get();
    DeviceTensor* b = inputs[2].get();
    TensorRef dx, dw, db;
    if (x.requires_grad) dx = new_tensor(ctx, x.dtype, x.shape);
    if (w && w->requires_grad) dw = new_tensor(ctx, w->dtype, w->shape);
    if (b && b->requires_grad) db = new_tensor(ctx, b->dtype, b->shape);
    if (rows > 0 && cols > 0) {
      nn_of(ctx, name())
          .layer_norm_backward(x.data(), grads[0]->data(), w ? w->data() : nullptr, x.dtype, rows,
                               cols, static_cast<const float*>(mean->data()),
                               static_cast<const float*>(rstd->data()), dx ? dx->data() : nullptr,
                               dw ? dw->data() : nullptr, db ? db->data() : nullptr, centered);
    } else {  // no rows: the parameters' gradients are empty sums
      zero_fill(ctx, dw.get());
      zero_fill(ctx, db.get());
    }
    return grad_list(std::move(dx), std::move(dw), std::move(db));
  }
  bool has_backward_graph() const override { return true; }
  // In F32, with the statistics recomputed by recorded ops (the saved ones
  // are constants): xhat = (x - mean) rstd, g = dy w,
  //   dx = rstd (g - mean(g) - xhat mean(g xhat))   (RMS norm: no mean(g)),
  //   dw = sum over rows of dy xhat, db = sum over rows of dy.
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& x = *inputs[0];
    DeviceTensor* w = inputs[1].get();
    DeviceTensor* b = inputs[2].get();
    TensorRef xf = f::cast(x, DType::F32);
    TensorRef dy = f::cast(*grads[0], DType::F32);
    TensorRef xc = centered ? f::sub(*xf, *f::mean_dims(*xf, {-1}, true)) : retained(*xf);
    TensorRef var = f::mean_dims(*f::mul(*xc, *xc), {-1}, true);
    TensorRef rstd_x = f::unary(UnaryOp::Rsqrt, *f::affine(*var, 1.0f, eps));
    TensorRef xhat = f::mul(*xc, *rstd_x);
    TensorRef dx, dw, db;
    if (x.requires_grad) {
      TensorRef g = w ? f::mul(*dy, *f::cast(*w, DType::F32)) : retained(*dy);
      TensorRef inner = f::sub(*g, *f::mul(*xhat, *f::mean_dims(*f::mul(*g, *xhat), {-1}, true)));
      if (centered) inner = f::sub(*inner, *f::mean_dims(*g, {-1}, true));
      dx = f::cast(*f::mul(*rstd_x, *inner), x.dtype);
    }
    const Shape row = vector_shape(cols);
    if (w && w->requires_grad) dw = f::cast(*f::sum_to(*f::mul(*dy, *xhat), row), w->dtype);
    if (b && b->requires_grad) db = f::cast(*f::sum_to(*dy, row), b->dtype);
    return grad_list(std::move(dx), std::move(dw), std::move(db));
  }
};

class BatchNormNode final : public Node {
 public:
  int64_t n = 0, channels = 0, inner = 0;
  float eps = 0.0f;
  bool batch_stats = false;
  TensorRef mean, var;  // F32 [channels]: the statistics the forward normalised with
  const char* name() const override { return "batch_norm"; }
  // BatchNormalization with the running statistics (inference), read at
  // export; without them, the batch's own, as torch's evaluation does.
  void onnx(onnx::Emitter& e) const override {
    const std::string x = e.input(0);
    const std::string w =
        e.has_input(1) ? e.input(1) : e.floats(std::vector<float>(channels, 1.0f), {channels});
    const std::string b =
        e.has_input(2) ? e.input(2) : e.floats(std::vector<float>(channels, 0.0f), {channels});
    if (running_mean) {
      e.output(0, e.op("BatchNormalization",
                       {x, w, b, e.constant(*running_mean), e.constant(*running_var)},
                       {onnx::attr("epsilon", eps)}));
      return;
    }
    const int32_t nd = e.input_tensor(0).shape.ndim;
    std::vector<int64_t> axes{0}, channel_dims{channels};
    for (int32_t k = 2; k < nd; ++k) axes.push_back(k), channel_dims.push_back(1);
    const std::string mean = e.reduce("ReduceMean", x, axes, true);
    const std::string d = e.op("Sub", {x, mean});
    const std::string var = e.reduce("ReduceMean", e.op("Mul", {d, d}), axes, true);
    const std::string y = e.op("Div", {d, e.op("Sqrt", {e.op("Add", {var, e.scalar(eps)})})});
    const std::string shape = e.ints(channel_dims);
    e.output(0, e.op("Add", {e.op("Mul", {y, e.op("Reshape", {w, shape})}),
                             e.op("Reshape", {b, shape})}));
  }
  TensorRef running_mean, running_var;  // for the ONNX form; constants
  bool reads_input(size_t i) const override { return i < 2; }  // x and weight
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor* w = inputs[1].get();
    DeviceTensor* b = inputs[2].get();
    TensorRef dx, dw, db;
    if (x.requires_grad) dx = new_tensor(ctx, x.dtype, x.shape);
    if (w && w->requires_grad) dw = new_tensor(ctx, DType::F32, w->shape);
    if (b && b->requires_grad) db = new_tensor(ctx, DType::F32, b->shape);
    if (x.numel() > 0) {
      nn_of(ctx, name())
          .batch_norm_backward(
              x.data(), grads[0]->data(), x.dtype, n, channels, inner,
              static_cast<const float*>(mean->data()), static_cast<const float*>(var->data()),
              w ? static_cast<const float*>(w->data()) : nullptr, eps, batch_stats,
              dx ? dx->data() : nullptr, dw ? static_cast<float*>(dw->data()) : nullptr,
              db ? static_cast<float*>(db->data()) : nullptr);
    } else {
      zero_fill(ctx, dw.get());
      zero_fill(ctx, db.get());
    }
    return grad_list(std::move(dx), std::move(dw), std::move(db));
  }
  bool has_backward_graph() const override { return true; }
  // On x viewed as [N, C, inner], in F32, per channel over dimensions 0
  // and 2: with the batch's statistics, recomputed by recorded ops,
  //   dx = rstd (g - mean(g) - xhat mean(g xhat)),  g = dy w;
  // with running statistics (constants), dx = g rstd.
  // dw = sum of dy xhat, db = sum of dy (F32 [C]).
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& x = *inputs[0];
    DeviceTensor* w = inputs[1].get();
    DeviceTensor* b = inputs[2].get();
    const int64_t view[3] = {n, channels, inner}, per_channel[3] = {1, channels, 1};
    const Shape c3 = make_shape(3, per_channel, DType::F32);
    TensorRef xf = f::cast(*f::reshape(x, make_shape(3, view, x.dtype)), DType::F32);
    TensorRef dy = f::cast(*f::reshape(*grads[0], make_shape(3, view, x.dtype)), DType::F32);
    TensorRef rstd_c, xhat;
    if (batch_stats) {
      TensorRef xc = f::sub(*xf, *f::mean_dims(*xf, {0, 2}, true));
      TensorRef v = f::mean_dims(*f::mul(*xc, *xc), {0, 2}, true);
      rstd_c = f::unary(UnaryOp::Rsqrt, *f::affine(*v, 1.0f, eps));
      xhat = f::mul(*xc, *rstd_c);
    } else {  // constants: no record
      TensorRef v = new_tensor(ctx, DType::F32, var->shape);
      NnPrimitives& nn = nn_of(ctx, name());
      nn.affine(var->data(), v->data(), DType::F32, channels, 1.0f, eps);
      nn.unary(UnaryOp::Rsqrt, v->data(), v->data(), DType::F32, channels);
      rstd_c = f::reshape(*v, c3);
      xhat = f::mul(*f::sub(*xf, *f::reshape(*mean, c3)), *rstd_c);
    }
    TensorRef dx, dw, db;
    if (x.requires_grad) {
      TensorRef g = w ? f::mul(*dy, *f::reshape(*w, c3)) : retained(*dy);
      TensorRef d;
      if (batch_stats) {
        TensorRef inner_term = f::sub(*f::sub(*g, *f::mean_dims(*g, {0, 2}, true)),
                                      *f::mul(*xhat, *f::mean_dims(*f::mul(*g, *xhat), {0, 2}, true)));
        d = f::mul(*rstd_c, *inner_term);
      } else {
        d = f::mul(*g, *rstd_c);
      }
      dx = f::reshape(*f::cast(*d, x.dtype), x.shape);
    }
    if (w && w->requires_grad) dw = f::sum_dims(*f::mul(*dy, *xhat), {0, 2}, false);
    if (b && b->requires_grad) db = f::sum_dims(*dy, {0, 2}, false);
    return grad_list(std::move(dx), std::move(dw), std::move(db));
  }
};

// Batch norm's F32 [channels] tensors: parameters and running statistics.
void check_channel_tensor(const DeviceTensor& x, const DeviceTensor* t, int64_t channels,
                          const char* name) {
  if (!t) return;
  check_same_context(x, *t, "x", name);
  if (t->dtype != DType::F32)
    fail(AMPX_ERR_DTYPE, "'", name, "' is ", t->describe(),
         "; batch norm keeps its parameters and statistics in f32 (also under autocast)");
  check_vector(*t, channels, name, "one per channel");
}

}  // namespace

namespace {

// Layer norm (centered) or RMS norm of x's rows; bias only when centered.
DeviceTensor* normalize_rows(DeviceTensor& x_in, DeviceTensor* w_in, DeviceTensor* b_in, float eps,
                             bool centered) {
  const char* op = centered ? "layer_norm" : "rms_norm";
  require_capabilities(*x_in.ctx, op, Capability::Nn);
  check_floating(x_in, "x");
  if (x_in.shape.ndim < 1)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), "; ", op, " needs at least one dimension");
  const int64_t cols = x_in.shape.dims[x_in.shape.ndim - 1];
  for (DeviceTensor* t : {w_in, b_in}) {
    if (!t) continue;
    const char* name = t == w_in ? "weight" : "bias";
    check_same_context(x_in, *t, "x", name);
    check_floating(*t, name);
    check_vector(*t, cols, name, "x's last dimension");
  }
  check_eps(eps);
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, op, {&x_in, w_in, b_in});
  DeviceTensor& x = *in[0];
  DeviceTensor* w = in[1].get();
  DeviceTensor* b = in[2].get();
  for (DeviceTensor* t : {w, b})
    if (t && t->dtype != x.dtype)
      fail(AMPX_ERR_DTYPE, "'x' is ", x.describe(), " but '", t == w ? "weight" : "bias", "' is ",
           t->describe(), "; outside autocast they must share a dtype");
  // Not numel / cols, which is 0/0 for cols == 0.
  const int64_t rows = x.shape.extent_product(0, x.shape.ndim - 1);
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  TensorRef mean = new_tensor(ctx, DType::F32, vector_shape(rows));
  TensorRef rstd = new_tensor(ctx, DType::F32, vector_shape(rows));
  if (out->numel() > 0)
    nn_of(ctx, op).layer_norm(x.data(), w ? w->data() : nullptr, b ? b->data() : nullptr, x.dtype,
                              rows, cols, eps, out->data(), static_cast<float*>(mean->data()),
                              static_cast<float*>(rstd->data()), centered);
  if (should_record(ctx, {&x, w, b})) {
    auto node = make_node<LayerNormNode>({&in[0], &in[1], &in[2]});
    node->rows = rows, node->cols = cols;
    node->centered = centered;
    node->eps = eps;
    node->mean = std::move(mean);
    node->rstd = std::move(rstd);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace

DeviceTensor* op_layer_norm(DeviceTensor& x, DeviceTensor* weight, DeviceTensor* bias, float eps) {
  return normalize_rows(x, weight, bias, eps, true);
}

DeviceTensor* op_rms_norm(DeviceTensor& x, DeviceTensor* weight, float eps) {
  return normalize_rows(x, weight, nullptr, eps, false);
}

DeviceTensor* op_batch_norm(DeviceTensor& x_in, DeviceTensor* weight, DeviceTensor* bias,
                            DeviceTensor* running_mean, DeviceTensor* running_var, bool training,
                            float momentum, float eps) {
  require_capabilities(*x_in.ctx, "batch_norm", Capability::Nn);
  check_floating(x_in, "x");
  const Shape& s = x_in.shape;
  if (s.ndim < 2)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(),
         "; batch norm takes [N, C] or [N, C, ...] ([N, C, L], [N, C, H, W], ...)");
  const int64_t n = s.dims[0], channels = s.dims[1], inner = s.extent_product(2, s.ndim);
  check_channel_tensor(x_in, weight, channels, "weight");
  check_channel_tensor(x_in, bias, channels, "bias");
  check_channel_tensor(x_in, running_mean, channels, "running_mean");
  check_channel_tensor(x_in, running_var, channels, "running_var");
  if (!running_mean != !running_var)
    fail(AMPX_ERR_INVALID_ARGUMENT,
         "only one of 'running_mean' and 'running_var' was given; pass both or neither");
  if (!(momentum >= 0.0f && momentum <= 1.0f))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'momentum' is ", momentum, "; it must be in [0, 1]");
  check_eps(eps);
  // torch: without running statistics, evaluation normalises with the
  // batch's own statistics too.
  const bool batch_stats = training || !running_mean;
  int64_t per_channel = 0;  // past int64 only without channels: many
  if (__builtin_mul_overflow(n, inner, &per_channel)) per_channel = INT64_MAX;
  if (training && per_channel <= 1)
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(),
         "; training needs more than one value per channel (N * L > 1)");
  DeviceContext& ctx = *x_in.ctx;
  Backend& backend = ctx.backend();
  std::vector<TensorRef> in = op_inputs(ctx, "batch_norm", {&x_in});
  DeviceTensor& x = *in[0];
  TensorRef mean = new_tensor(ctx, DType::F32, vector_shape(channels));
  TensorRef var = new_tensor(ctx, DType::F32, vector_shape(channels));
  // Allocated before the running statistics are updated in place, so that
  // running out of memory leaves them as they were.
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  if (!batch_stats) {
    // Copies: a later training step may update the running statistics
    // before this forward is backpropagated.
    backend.copy(mean->data(), running_mean->data(), mean->nbytes());
    backend.copy(var->data(), running_var->data(), var->nbytes());
  } else if (x.numel() > 0) {
    const bool update = training && running_mean;
    nn_of(ctx, "batch_norm")
        .batch_norm_stats(x.data(), x.dtype, n, channels, inner, momentum,
                          static_cast<float*>(mean->data()), static_cast<float*>(var->data()),
                          update ? static_cast<float*>(running_mean->data()) : nullptr,
                          update ? static_cast<float*>(running_var->data()) : nullptr);
  }
  if (x.numel() > 0)
    nn_of(ctx, "batch_norm")
        .batch_norm(x.data(), x.dtype, n, channels, inner, static_cast<const float*>(mean->data()),
                    static_cast<const float*>(var->data()),
                    weight ? static_cast<const float*>(weight->data()) : nullptr,
                    bias ? static_cast<const float*>(bias->data()) : nullptr, eps, out->data());
  if (should_record(ctx, {&x, weight, bias})) {
    TensorRef w_ref = weight ? retained(*weight) : TensorRef();
    TensorRef b_ref = bias ? retained(*bias) : TensorRef();
    auto node = make_node<BatchNormNode>({&in[0], &w_ref, &b_ref});
    node->n = n, node->channels = channels, node->inner = inner;
    node->eps = eps;
    node->batch_stats = batch_stats;
    if (running_mean) {
      node->running_mean = retained(*running_mean);
      node->running_var = retained(*running_var);
    }
    node->mean = std::move(mean);
    node->var = std::move(var);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
