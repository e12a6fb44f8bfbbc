// reduce.cpp -- sum/mean, softmax/log-softmax, cross-entropy, MSE. Sums and
// losses return one F32 element (fp32 is where reductions belong); a mean
// returns its input's dtype, as torch's, from an fp32 accumulation.
#include <cmath>
#include <vector>

#include "onnx/emitter.h"
#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

class SumNode final : public Node {
 public:
  float scale = 1.0f;  // 1/n for a mean
  const char* name() const override { return "sum"; }
  // The sum over every element, times 1/n for a mean, as computed here.
  void onnx(onnx::Emitter& e) const override {
    std::string y = e.reduce("ReduceSum", e.input(0), {}, false);
    if (scale != 1.0f) y = e.op("Mul", {y, e.scalar(scale)});
    e.output(0, y);
  }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    TensorRef dy = grad_f32(ctx, *grads[0]);
    return grad_list(
        broadcast_scaled(ctx, name(), *inputs[0], static_cast<const float*>(dy->data()), scale));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& x = *inputs[0];
    TensorRef dy = f::cast(*grads[0], x.dtype);
    if (scale != 1.0f) dy = f::affine(*dy, scale, 0.0f);
    return grad_list(f::expand(*dy, x.shape));
  }
};

class SoftmaxNode final : public Node {
 public:
  bool log = false;
  TensorRef output;  // y, which the backward formulas read
  const char* name() const override { return log ? "log_softmax" : "softmax"; }
  // Over the last axis, which before opset 13 (rows of the input flattened
  // at `axis`) means the same.
  void onnx(onnx::Emitter& e) const override {
    e.output(0, e.op(log ? "LogSoftmax" : "Softmax", {e.input(0)},
                     {onnx::attr("axis", int64_t{-1})}));
  }
  bool reads_input(size_t) const override { return false; }  // reads its output
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    const int64_t cols = x.shape.dims[x.shape.ndim - 1];
    TensorRef dy = output_grad(ctx, grads, false);
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    if (x.numel() > 0)
      nn_of(ctx, name())
          .softmax_backward(output->data(), dy->data(), dx->data(), x.dtype, x.numel() / cols,
                            cols, log);
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  // The formulas read the saved y, as a tensor of the graph: made a further
  // output of this record, so that the gradient they send to y comes back
  // here (joining dy) and the second derivative flows through softmax's
  // own Jacobian, as torch's softmax_backward(grad, output). Recomputing y
  // from x instead would read x, which this record neither declares nor
  // saves (x written in place since would go unnoticed).
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    TensorRef dy = output_grad(ctx, grads, true);
    TensorRef y = saved_as_output(ctx, *this, *output, graph_y_slot);
    if (log)  // dy - exp(y) sum(dy)
      return grad_list(
          f::sub(*dy, *f::mul(*f::unary(UnaryOp::Exp, *y), *f::sum_dims(*dy, {-1}, true))));
    // y (dy - sum(dy y))
    return grad_list(f::mul(*y, *f::sub(*dy, *f::sum_dims(*f::mul(*dy, *y), {-1}, true))));
  }

 private:
  SavedOutputSlot graph_y_slot;
  // The output's gradient: the program's output's plus, once a formula made
  // y an output (graph_y_slot), the gradient sent to that one.
  TensorRef output_grad(DeviceContext& ctx, const std::vector<DeviceTensor*>& grads, bool graph) {
    TensorRef dy;
    for (DeviceTensor* g : grads)
      if (g) accumulate_grad(ctx, dy, *g, graph);
    return dy;
  }
};

// out = x / d for F32 scalars on the device, as x * (1 / d) with the
// reciprocal rounded once (math::reciprocal_scale); out may be x.
void divide_by_device_scalar(DeviceContext& ctx, const void* x, const DeviceTensor& d, void* out) {
  amp_of(ctx, "cross_entropy")
      .multi_tensor_scale({{const_cast<void*>(x), DType::F32, 1}}, {{out, DType::F32, 1}},
                          static_cast<const float*>(d.data()), true, nullptr);
}

// Cross-entropy's differentiable backward for logits [N, C]:
//   dlogits = (a_r p - q_r) g_r,
// p = softmax(logits), q_r the row's (smoothed, weighted) target, a_r =
// sum_c q_rc, g_r the row's loss gradient (divided by the mean's
// denominator). It is computed as G0 + a_r (p - p0) times g: G0 = a_r p - q_r
// by the fused primitive (a constant), p recorded and p0 its value, so the
// value is the primitive's to the bit while the derivative with respect to
// the logits is a_r's share of softmax's. a_r is the row's weight (1 or 0
// for an ignored row without class weights; with smoothing eps, (1 - eps)
// w_label + eps / C sum_c w_c).
TensorRef cross_entropy_graph(DeviceContext& ctx, DeviceTensor& logits, DeviceTensor& labels,
                              DeviceTensor& dloss, DeviceTensor* denominator, bool per_row,
                              int64_t ignore_index, const DeviceTensor* weight, float smoothing) {
  namespace f = formula;
  const char* op = "cross_entropy";
  NnPrimitives& nn = nn_of(ctx, op);
  const int64_t rows = logits.shape.dims[0], cols = logits.shape.dims[1];
  TensorRef g0 = new_tensor(ctx, logits.dtype, logits.shape);
  TensorRef one(make_filled_f32(ctx, scalar_shape(), 1.0f));
  const auto* one_f = static_cast<const float*>(one->data());
  const float* w = weight ? static_cast<const float*>(weight->data()) : nullptr;
  // Row weights without class weights are 1, or 0 where ignored.
  TensorRef valid = new_tensor(ctx, DType::F32, vector_shape(rows));
  TensorRef scratch = new_tensor(ctx, DType::F32, vector_shape(rows));
  TensorRef a = new_tensor(ctx, DType::F32, vector_shape(rows));
  if (rows > 0 && cols > 0) {
    if (w || smoothing > 0.0f)
      nn.cross_entropy_smoothed_backward(logits.data(), logits.dtype, labels.data(), labels.dtype,
                                         rows, cols, ignore_index, w, smoothing, one_f,
                                         g0->data(), 0);
    else
      nn.cross_entropy_backward(logits.data(), logits.dtype, labels.data(), labels.dtype, rows,
                                cols, ignore_index, one_f, 1.0f, g0->data(), 0);
    nn.cross_entropy_smoothed(logits.data(), logits.dtype, labels.data(), labels.dtype, rows, cols,
                              ignore_index, nullptr, 0.0f, static_cast<float*>(scratch->data()),
                              static_cast<float*>(valid->data()));
    if (w) {
      // a = (1 - eps) w_label + eps / C (sum_c w_c) valid
      TensorRef label_w = new_tensor(ctx, DType::F32, vector_shape(rows));
      nn.cross_entropy_smoothed(logits.data(), logits.dtype, labels.data(), labels.dtype, rows,
                                cols, ignore_index, w, 0.0f, static_cast<float*>(scratch->data()),
                                static_cast<float*>(label_w->data()));
      TensorRef w_sum = new_tensor(ctx, DType::F32, scalar_shape());
      nn.sum_all(w, DType::F32, cols, static_cast<float*>(w_sum->data()));
      amp_of(ctx, op).multi_tensor_scale({{valid->data(), DType::F32, rows}},
                                         {{a->data(), DType::F32, rows}},
                                         static_cast<const float*>(w_sum->data()), false, nullptr);
      nn.affine(a->data(), a->data(), DType::F32, rows, smoothing / static_cast<float>(cols), 0.0f);
      nn.affine(label_w->data(), label_w->data(), DType::F32, rows, 1.0f - smoothing, 0.0f);
      nn.binary(BinaryOp::Add, a->data(), label_w->data(), a->data(), DType::F32, rows, rows);
    } else {
      ctx.backend().copy(a->data(), valid->data(), a->nbytes());
    }
  } else {
    if (g0->numel() > 0) ctx.backend().fill(g0->data(), dtype_size(g0->dtype), 0, g0->numel());
    if (rows > 0) ctx.backend().fill(a->data(), 4, 0, rows);
  }
  const int64_t column[2] = {rows, 1};
  TensorRef a_col = f::cast(*f::reshape(*a, make_shape(2, column, DType::F32)), logits.dtype);
  TensorRef p(op_softmax(logits, false));
  TensorRef p0 = f::detached(*p);
  TensorRef dlogits = f::add(*f::mul(*f::sub(*p, *p0), *a_col), *g0);
  TensorRef g = retained(dloss);
  if (denominator) g = f::div(*g, *denominator);
  if (per_row) g = f::reshape(*g, make_shape(2, column, g->dtype));
  return f::mul(*dlogits, *f::cast(*g, logits.dtype));
}

class CrossEntropyNode final : public Node {
 public:
  int64_t ignore_index = -100;
  bool per_row = false;  // unreduced: the output holds one loss per row
  TensorRef valid;       // for a mean: the count of labels not ignored (F32 scalar)
  const char* name() const override { return "cross_entropy"; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& logits = *inputs[0];
    DeviceTensor& labels = *inputs[1];
    TensorRef dy = grad_f32(ctx, *grads[0]);
    if (valid) {  // into a new scalar: dy may be a tensor others hold
      TensorRef mean_dy = new_tensor(ctx, DType::F32, scalar_shape());
      divide_by_device_scalar(ctx, dy->data(), *valid, mean_dy->data());
      dy = std::move(mean_dy);
    }
    TensorRef dlogits = new_tensor(ctx, logits.dtype, logits.shape);
    const int64_t cols = logits.shape.dims[1];
    nn_of(ctx, name())
        .cross_entropy_backward(logits.data(), logits.dtype, labels.data(), labels.dtype,
                                logits.shape.dims[0], cols, ignore_index,
                                static_cast<const float*>(dy->data()), 1.0f, dlogits->data(),
                                per_row ? 1 : 0);
    return grad_list(std::move(dlogits));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(cross_entropy_graph(ctx, *inputs[0], *inputs[1], *grads[0], valid.get(),
                                         per_row, ignore_index, nullptr, 0.0f));
  }
};

// With label smoothing or class weights (core/backend_nn.h,
// cross_entropy_smoothed).
class SmoothedCrossEntropyNode final : public Node {
 public:
  int64_t ignore_index = -100;
  float smoothing = 0.0f;
  bool per_row = false;   // unreduced: the output holds one loss per row
  TensorRef weight;       // F32 [C] or empty: a constant
  TensorRef denominator;  // for a mean: the count or weight of the labels (F32 scalar)
  const char* name() const override { return "cross_entropy"; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& logits = *inputs[0];
    DeviceTensor& labels = *inputs[1];
    TensorRef dy = grad_f32(ctx, *grads[0]);
    if (denominator) {
      TensorRef mean_dy = new_tensor(ctx, DType::F32, scalar_shape());
      divide_by_device_scalar(ctx, dy->data(), *denominator, mean_dy->data());
      dy = std::move(mean_dy);
    }
    TensorRef dlogits = new_tensor(ctx, logits.dtype, logits.shape);
    nn_of(ctx, name())
        .cross_entropy_smoothed_backward(
            logits.data(), logits.dtype, labels.data(), labels.dtype, logits.shape.dims[0],
            logits.shape.dims[1], ignore_index,
            weight ? static_cast<const float*>(weight->data()) : nullptr, smoothing,
            static_cast<const float*>(dy->data()), dlogits->data(), per_row ? 1 : 0);
    return grad_list(std::move(dlogits));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(cross_entropy_graph(ctx, *inputs[0], *inputs[1], *grads[0],
                                         denominator.get(), per_row, ignore_index, weight.get(),
                                         smoothing));
  }
};

class MseNode final : public Node {
 public:
  float scale = 1.0f;        // 1/n for a mean
  bool per_element = false;  // unreduced: the output holds one loss per element
  const char* name() const override { return "mse_loss"; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    TensorRef dy = grad_f32(ctx, *grads[0]);
    DeviceTensor& input = *inputs[0];
    DeviceTensor& target = *inputs[1];
    // d/d input = 2 (input - target) dy / n; d/d target is its negative.
    TensorRef d_input, d_target;
    if (input.requires_grad) d_input = new_tensor(ctx, input.dtype, input.shape);
    if (target.requires_grad) d_target = new_tensor(ctx, target.dtype, target.shape);
    nn_of(ctx, name())
        .mse_loss_backward(input.data(), target.data(), input.dtype, input.numel(),
                           static_cast<const float*>(dy->data()), per_element ? 1 : 0, scale,
                           d_input ? d_input->data() : nullptr,
                           d_target ? d_target->data() : nullptr);
    return grad_list(std::move(d_input), std::move(d_target));
  }
  bool has_backward_graph() const override { return true; }
  // 2 (input - target) dy scale, the difference recomputed by a recorded op.
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& input = *inputs[0];
    DeviceTensor& target = *inputs[1];
    TensorRef dy = f::cast(*grads[0], input.dtype);
    TensorRef d_input =
        f::affine(*f::mul(*f::sub(input, target), *dy), 2.0f * scale, 0.0f);
    TensorRef d_target;
    if (target.requires_grad) d_target = f::neg(*d_input);
    return grad_list(std::move(d_input), std::move(d_target));
  }
};

int64_t last_dim(const DeviceTensor& x, const char* name) {
  if (x.shape.ndim < 1)
    fail(AMPX_ERR_SHAPE, "'", name, "' is ", x.describe(), "; this op needs at least one dimension");
  return x.shape.dims[x.shape.ndim - 1];
}

// Checks the labels where they live and counts those not ignored into
// *valid (a device F32 scalar; nullptr: not counted): no round trip to the
// host, so on a GPU the step stays asynchronous and a bad label is reported
// at the next synchronisation (DeviceContext::raise_index_errors); on the CPU, at
// once.
void check_labels(DeviceContext& ctx, const DeviceTensor& labels, int64_t classes,
                  int64_t ignore_index, float* valid) {
  IndexCheck check;
  check.limit = classes;
  check.has_ignore = true;
  check.ignore_index = ignore_index;
  check.op = kCheckCrossEntropyLabels;
  ctx.check_indices(nn_of(ctx, "cross_entropy"), labels.data(), labels.dtype, labels.numel(), check,
                    valid);
}

}  // namespace

DeviceTensor* op_sum(DeviceTensor& x_in, bool mean) {
  require_capabilities(*x_in.ctx, mean ? "mean" : "sum", Capability::Nn,
                       Capability::MultiTensorAmp);
  check_floating(x_in, "x");
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, mean ? "mean" : "sum", {&x_in});
  DeviceTensor& x = *in[0];
  const float scale = mean ? 1.0f / static_cast<float>(x.numel()) : 1.0f;
  // torch's mean keeps its input's dtype (it is in neither autocast list)
  // and accumulates in fp32; its sum here stays fp32 (the fp32 class).
  const DType out_dtype = mean ? x.dtype : DType::F32;
  TensorRef out = new_tensor(ctx, out_dtype, scalar_shape());
  TensorRef accumulator =
      out_dtype == DType::F32 ? retained(*out) : new_tensor(ctx, DType::F32, scalar_shape());
  auto* result = static_cast<float*>(accumulator->data());
  NnPrimitives& nn = nn_of(ctx, mean ? "mean" : "sum");
  nn.sum_all(x.data(), x.dtype, x.numel(), result);
  if (mean) nn.affine(result, result, DType::F32, 1, scale, 0.0f);
  if (out_dtype != DType::F32) ctx.backend().convert(out->data(), out_dtype, result, DType::F32, 1);
  if (should_record(ctx, {&x})) {
    auto node = make_node<SumNode>({&in[0]});
    node->scale = scale;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_softmax(DeviceTensor& x_in, bool log) {
  require_capabilities(*x_in.ctx, log ? "log_softmax" : "softmax", Capability::Nn);
  check_floating(x_in, "x");
  const int64_t cols = last_dim(x_in, "x");
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, log ? "log_softmax" : "softmax", {&x_in});
  DeviceTensor& x = *in[0];
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  if (x.numel() > 0)
    nn_of(ctx, log ? "log_softmax" : "softmax")
        .softmax(x.data(), out->data(), x.dtype, x.numel() / cols, cols, log);
  if (should_record(ctx, {&x})) {
    auto node = make_node<SoftmaxNode>({&in[0]});
    node->log = log;
    node->output = saved_output(ctx, *out);
    node->saves(*out);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_softmax_dim(DeviceTensor& x, int32_t dim, bool log) {
  const int32_t nd = x.shape.ndim;
  const int32_t d = dim < 0 ? dim + nd : dim;
  if (nd == 0 || d < 0 || d >= nd)
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'dim' is ", dim, " but '", x.describe(), "' has ", nd,
         " dimensions", nd ? "" : "; softmax needs at least one");
  if (d == nd - 1) return op_softmax(x, log);
  // The row primitive works on the last dimension: move `dim` there and
  // back (each move a recorded transpose, so the gradient follows).
  TensorRef moved(op_transpose(x, d, nd - 1));
  TensorRef y(op_softmax(*moved, log));
  return op_transpose(*y, d, nd - 1);
}

namespace {

// Cross-entropy with class weights or label smoothing, as torch's: a mean
// divides by the summed weights of the labels not ignored (their count
// without weights).
DeviceTensor* smoothed_cross_entropy(DeviceTensor& logits_in, DeviceTensor& labels,
                                     Reduction reduction, int64_t ignore_index,
                                     DeviceTensor* weight_in, float smoothing) {
  DeviceContext& ctx = *logits_in.ctx;
  const int64_t rows = logits_in.shape.dims[0];
  const int64_t cols = logits_in.shape.dims[1];
  const bool mean = reduction == Reduction::Mean;
  TensorRef valid = mean && !weight_in ? new_tensor(ctx, DType::F32, scalar_shape()) : TensorRef();
  check_labels(ctx, labels, cols, ignore_index, valid ? static_cast<float*>(valid->data()) : nullptr);
  TensorRef weight;
  if (weight_in) {
    weight = new_tensor(ctx, DType::F32, weight_in->shape);
    if (cols > 0)
      ctx.backend().convert(weight->data(), DType::F32, weight_in->data(), weight_in->dtype, cols);
  }
  std::vector<TensorRef> in = op_inputs(ctx, "cross_entropy", {&logits_in, &labels});
  DeviceTensor& logits = *in[0];
  NnPrimitives& nn = nn_of(ctx, "cross_entropy");
  TensorRef losses = new_tensor(ctx, DType::F32, vector_shape(rows));
  TensorRef row_weights = new_tensor(ctx, DType::F32, vector_shape(rows));
  if (rows > 0 && cols > 0) {
    nn.cross_entropy_smoothed(logits.data(), logits.dtype, labels.data(), labels.dtype, rows, cols,
                              ignore_index,
                              weight ? static_cast<const float*>(weight->data()) : nullptr,
                              smoothing, static_cast<float*>(losses->data()),
                              static_cast<float*>(row_weights->data()));
  } else if (rows > 0) {
    ctx.backend().fill(losses->data(), 4, 0, rows);
    ctx.backend().fill(row_weights->data(), 4, 0, rows);
  }
  const bool per_row = reduction == Reduction::None;
  TensorRef out = per_row ? std::move(losses) : new_tensor(ctx, DType::F32, scalar_shape());
  if (!per_row) nn.sum_all(losses->data(), DType::F32, rows, static_cast<float*>(out->data()));
  TensorRef denominator;
  if (mean && weight) {
    denominator = new_tensor(ctx, DType::F32, scalar_shape());
    nn.sum_all(row_weights->data(), DType::F32, rows, static_cast<float*>(denominator->data()));
  } else if (mean) {
    denominator = std::move(valid);
  }
  if (denominator) divide_by_device_scalar(ctx, out->data(), *denominator, out->data());
  if (should_record(ctx, {&logits})) {
    auto node = make_node<SmoothedCrossEntropyNode>({&in[0], &in[1]});
    node->ignore_index = ignore_index;
    node->smoothing = smoothing;
    node->per_row = per_row;
    node->weight = std::move(weight);
    node->denominator = std::move(denominator);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace

namespace {

// Cross-entropy of logits [N, C] against labels [N], checked by
// op_cross_entropy.
DeviceTensor* cross_entropy_rows(DeviceTensor& logits_in, DeviceTensor& labels,
                                 Reduction reduction, int64_t ignore_index,
                                 DeviceTensor* weight_in, float smoothing) {
  if (weight_in || smoothing > 0.0f)
    return smoothed_cross_entropy(logits_in, labels, reduction, ignore_index, weight_in,
                                  smoothing);
  DeviceContext& ctx = *logits_in.ctx;
  const int64_t rows = logits_in.shape.dims[0];
  const int64_t cols = logits_in.shape.dims[1];
  // The mean divides by the count of labels not ignored; torch's mean over
  // none is 0/0 = NaN, which multiplying by 1/0 gives too.
  const bool mean = reduction == Reduction::Mean;
  const bool per_row = reduction == Reduction::None;
  TensorRef valid = mean ? new_tensor(ctx, DType::F32, scalar_shape()) : TensorRef();
  check_labels(ctx, labels, cols, ignore_index,
               mean ? static_cast<float*>(valid->data()) : nullptr);
  std::vector<TensorRef> in = op_inputs(ctx, "cross_entropy", {&logits_in, &labels});
  DeviceTensor& logits = *in[0];
  Backend& backend = ctx.backend();
  TensorRef losses = new_tensor(ctx, DType::F32, vector_shape(rows));
  if (rows > 0 && cols > 0)
    nn_of(ctx, "cross_entropy")
        .cross_entropy(logits.data(), logits.dtype, labels.data(), labels.dtype, rows, cols,
                       ignore_index, static_cast<float*>(losses->data()));
  else if (rows > 0)
    backend.fill(losses->data(), 4, 0, rows);
  TensorRef out = per_row ? std::move(losses) : new_tensor(ctx, DType::F32, scalar_shape());
  if (!per_row)
    nn_of(ctx, "cross_entropy")
        .sum_all(losses->data(), DType::F32, rows, static_cast<float*>(out->data()));
  if (mean) divide_by_device_scalar(ctx, out->data(), *valid, out->data());
  if (should_record(ctx, {&logits})) {
    auto node = make_node<CrossEntropyNode>({&in[0], &in[1]});
    node->ignore_index = ignore_index;
    node->per_row = per_row;
    if (mean) node->valid = std::move(valid);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

// The shapes torch's cross_entropy takes: logits [C] with a 0-D label,
// [N, C] with labels [N], or [N, C, d1, ..., dk] with labels [N, d1, ...,
// dk] (a loss per position, e.g. per pixel).
void check_cross_entropy_shapes(const DeviceTensor& logits, const DeviceTensor& labels) {
  const int32_t nd = logits.shape.ndim;
  bool ok = nd >= 1 && labels.shape.ndim == nd - 1;
  for (int32_t d = 0, l = 0; ok && d < nd; ++d) {
    if (d == (nd == 1 ? 0 : 1)) continue;
    ok = labels.shape.dims[l++] == logits.shape.dims[d];
  }
  if (!ok)
    fail(AMPX_ERR_SHAPE, "'logits' is ", logits.describe(), " and 'labels' is ", labels.describe(),
         "; expected logits [N, C] and labels [N], logits [N, C, d1, ...] and labels [N, d1, ...], "
         "or logits [C] and a 0-D label");
}

}  // namespace

DeviceTensor* op_cross_entropy(DeviceTensor& logits_in, DeviceTensor& labels, Reduction reduction,
                               int64_t ignore_index, DeviceTensor* weight_in, double smoothing) {
  require_capabilities(*logits_in.ctx, "cross_entropy", Capability::Nn, Capability::MultiTensorAmp);
  check_same_context(logits_in, labels, "logits", "labels");
  check_floating(logits_in, "logits");
  if (labels.dtype != DType::I32 && labels.dtype != DType::I64)
    fail(AMPX_ERR_DTYPE, "'labels' is ", labels.describe(), "; class labels are i32 or i64");
  check_cross_entropy_shapes(logits_in, labels);
  const int32_t nd = logits_in.shape.ndim;
  const int64_t cols = logits_in.shape.dims[nd == 1 ? 0 : 1];
  if (!(smoothing >= 0.0 && smoothing <= 1.0))
    fail(AMPX_ERR_INVALID_ARGUMENT, "option 'label_smoothing' is ", smoothing,
         "; it must lie in [0, 1]");
  if (weight_in) {
    check_same_context(logits_in, *weight_in, "logits", "weight");
    check_floating(*weight_in, "weight");
    if (!(weight_in->shape.ndim == 1 && weight_in->shape.dims[0] == cols))
      fail(AMPX_ERR_SHAPE, "'weight' is ", weight_in->describe(), "; logits ",
           logits_in.describe(), " need one weight per class, [", cols, "]");
  }
  const auto eps = static_cast<float>(smoothing);
  if (nd == 2) return cross_entropy_rows(logits_in, labels, reduction, ignore_index, weight_in, eps);
  // One row per position: the classes moved last (a copy unless there is
  // only one position per image), the positions flattened.
  TensorRef logits;
  if (nd == 1) {
    logits = retained(logits_in);
  } else {
    int32_t order[AMPX_MAX_DIMS] = {0};
    for (int32_t d = 2; d < nd; ++d) order[d - 1] = d;
    order[nd - 1] = 1;
    logits = TensorRef(op_permute(logits_in, nd, order));
  }
  const int64_t rows = labels.numel();
  const int64_t row_dims[2] = {rows, cols};
  TensorRef matrix(op_reshape(*logits, 2, row_dims));
  TensorRef flat_labels(op_reshape(labels, 1, &rows));
  TensorRef out(
      cross_entropy_rows(*matrix, *flat_labels, reduction, ignore_index, weight_in, eps));
  if (reduction != Reduction::None) return out.take();
  return op_reshape(*out, labels.shape.ndim, labels.shape.dims);
}

DeviceTensor* op_mse_loss(DeviceTensor& input_in, DeviceTensor& target_in, Reduction reduction) {
  require_capabilities(*input_in.ctx, "mse_loss", Capability::Nn, Capability::MultiTensorAmp);
  check_same_context(input_in, target_in, "input", "target");
  check_floating(input_in, "input");
  check_floating(target_in, "target");
  if (!(input_in.shape == target_in.shape))
    fail(AMPX_ERR_SHAPE, "'input' is ", input_in.describe(), " but 'target' is ",
         target_in.describe(), "; they must have one shape");
  DeviceContext& ctx = *input_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "mse_loss", {&input_in, &target_in});
  DeviceTensor& input = *in[0];
  DeviceTensor& target = *in[1];
  if (input.dtype != target.dtype)
    fail(AMPX_ERR_DTYPE, "'input' is ", input.describe(), " but 'target' is ", target.describe(),
         "; outside autocast they must share a dtype");
  const int64_t n = input.numel();
  const bool per_element = reduction == Reduction::None;
  TensorRef losses = new_tensor(ctx, DType::F32, per_element ? input.shape : vector_shape(n));
  auto* loss_values = static_cast<float*>(losses->data());
  nn_of(ctx, "mse_loss").mse_loss(input.data(), target.data(), input.dtype, n, loss_values);
  const float scale = reduction == Reduction::Mean ? 1.0f / static_cast<float>(n) : 1.0f;
  TensorRef out = per_element ? std::move(losses) : new_tensor(ctx, DType::F32, scalar_shape());
  auto* result = static_cast<float*>(out->data());
  if (!per_element) nn_of(ctx, "mse_loss").sum_all(loss_values, DType::F32, n, result);
  if (reduction == Reduction::Mean)
    nn_of(ctx, "mse_loss").affine(result, result, DType::F32, 1, scale, 0.0f);
  if (should_record(ctx, {&input, &target})) {
    auto node = make_node<MseNode>({&in[0], &in[1]});
    node->scale = scale;
    node->per_element = per_element;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
