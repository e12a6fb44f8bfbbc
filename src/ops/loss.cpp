// loss.cpp -- binary cross-entropy with logits (torch's
// binary_cross_entropy_with_logits, with its weight and pos_weight):
// per-element losses in F32 by a backend primitive, reduced as the other
// losses are; the backward pass is one primitive too, in fp32, each
// gradient rounded to its input's type once.
#include <cmath>

#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

// A weight in the form the primitives read (BceWeights): F32, element i of
// the logits reading values[i % period].
struct PeriodicWeight {
  TensorRef values;
  int64_t period = 1;
};

// `w`, which must broadcast to `shape` without changing it (torch multiplies
// the loss by it in place), as an F32 copy: the tensor itself when it
// repeats over leading dimensions only (pos_weight [C], weight [T, C] over
// [N, T, C], a 0-D weight), else expanded to `shape`.
PeriodicWeight periodic_weight(DeviceContext& ctx, const DeviceTensor& w, const Shape& shape,
                               const char* name, const DeviceTensor& logits) {
  check_same_context(logits, w, "logits", name);
  check_floating(w, name);
  const int32_t offset = shape.ndim - w.shape.ndim;
  bool broadcasts = offset >= 0;
  for (int32_t d = 0; broadcasts && d < w.shape.ndim; ++d)
    broadcasts = w.shape.dims[d] == 1 || w.shape.dims[d] == shape.dims[d + offset];
  if (!broadcasts)
    fail(AMPX_ERR_SHAPE, "'", name, "' is ", w.describe(), " and 'logits' is ", logits.describe(),
         "; ", name, " must broadcast to the logits' shape ", shape.str(),
         " (aligned at the right, each extent equal or 1)");
  PeriodicWeight out;
  const int64_t n = shape.numel();
  if (n == 0) return out;  // nothing reads it
  TensorRef values = new_tensor(ctx, DType::F32, w.shape);
  ctx.backend().convert(values->data(), DType::F32, w.data(), w.dtype, w.numel());
  // Past its leading extents of 1, does w equal the trailing extents of shape?
  int32_t first = 0;
  while (first < w.shape.ndim && w.shape.dims[first] == 1) ++first;
  bool periodic = true;
  for (int32_t d = first; periodic && d < w.shape.ndim; ++d)
    periodic = w.shape.dims[d] == shape.dims[d + offset];
  if (periodic) {
    out.period = w.numel();
    out.values = std::move(values);
    return out;
  }
  StridedCopy layout;
  layout.ndim = shape.ndim;
  int64_t dst_stride = 1, src_stride = 1;
  for (int32_t d = shape.ndim - 1; d >= 0; --d) {
    layout.sizes[d] = shape.dims[d];
    layout.dst_strides[d] = dst_stride;
    dst_stride *= shape.dims[d];
    const int32_t k = d - offset;  // w's dimension aligned with d, if any
    const bool repeated = k < 0 || w.shape.dims[k] == 1;
    layout.src_strides[d] = repeated ? 0 : src_stride;
    if (k >= 0) src_stride *= w.shape.dims[k];
  }
  out.values = new_tensor(ctx, DType::F32, shape);
  nn_of(ctx, "bce_with_logits").copy_strided(out.values->data(), values->data(), 4, layout);
  out.period = n;
  return out;
}

BceWeights weights_of(const PeriodicWeight& weight, const PeriodicWeight& pos_weight) {
  BceWeights w;
  if (weight.values) {
    w.weight = static_cast<const float*>(weight.values->data());
    w.weight_period = weight.period;
  }
  if (pos_weight.values) {
    w.pos_weight = static_cast<const float*>(pos_weight.values->data());
    w.pos_weight_period = pos_weight.period;
  }
  return w;
}

class BceWithLogitsNode final : public Node {
 public:
  float scale = 1.0f;        // 1/n for a mean
  bool per_element = false;  // unreduced: the output holds one loss per element
  PeriodicWeight weight, pos_weight;  // constants: no gradient
  const char* name() const override { return "bce_with_logits"; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& logits = *inputs[0];
    DeviceTensor& targets = *inputs[1];
    TensorRef dy = grad_f32(ctx, *grads[0]);
    TensorRef d_logits, d_targets;
    if (logits.requires_grad) d_logits = new_tensor(ctx, logits.dtype, logits.shape);
    if (targets.requires_grad) d_targets = new_tensor(ctx, targets.dtype, targets.shape);
    nn_of(ctx, name())
        .bce_with_logits_backward(logits.data(), targets.data(), logits.dtype, logits.numel(),
                                  weights_of(weight, pos_weight),
                                  static_cast<const float*>(dy->data()), per_element ? 1 : 0,
                                  scale, d_logits ? d_logits->data() : nullptr,
                                  d_targets ? d_targets->data() : nullptr);
    return grad_list(std::move(d_logits), std::move(d_targets));
  }
  bool has_backward_graph() const override { return true; }
  // The first-order formulas above with recorded ops: w ((1 + (p - 1) t)
  // sigmoid(x) - p t) dy and w ((1 - p) log sigmoid(x) - x) dy (log
  // sigmoid(-x) = log sigmoid(x) - x), each times 1/n for a mean. The
  // weights are constants, cast to the logits' dtype as the formulas
  // compute in it.
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& logits = *inputs[0];
    DeviceTensor& targets = *inputs[1];
    TensorRef dy = f::cast(*grads[0], logits.dtype);
    if (!per_element && scale != 1.0f) dy = f::affine(*dy, scale, 0.0f);
    TensorRef w, p;
    if (weight.values) w = f::cast(*weight.values, logits.dtype);
    if (pos_weight.values) p = f::cast(*pos_weight.values, logits.dtype);
    TensorRef d_logits, d_targets;
    if (logits.requires_grad) {
      TensorRef sig = f::unary(UnaryOp::Sigmoid, logits);
      if (p) {
        TensorRef pt = f::mul(targets, *p);
        TensorRef log_weight = f::affine(*f::sub(*pt, targets), 1.0f, 1.0f);
        d_logits = f::sub(*f::mul(*log_weight, *sig), *pt);
      } else {
        d_logits = f::sub(*sig, targets);
      }
      if (w) d_logits = f::mul(*d_logits, *w);
      d_logits = f::mul(*d_logits, *dy);
    }
    if (targets.requires_grad) {
      TensorRef d = f::neg(logits);
      if (p) {
        TensorRef log_sig = f::unary(UnaryOp::Log, *f::unary(UnaryOp::Sigmoid, logits));
        d = f::add(*f::mul(*log_sig, *f::affine(*p, -1.0f, 1.0f)), *d);
      }
      if (w) d = f::mul(*d, *w);
      d_targets = f::mul(*d, *dy);
    }
    return grad_list(std::move(d_logits), std::move(d_targets));
  }
};

}  // namespace

DeviceTensor* op_bce_with_logits(DeviceTensor& logits_in, DeviceTensor& targets_in,
                                 Reduction reduction, DeviceTensor* weight_in,
                                 DeviceTensor* pos_weight_in) {
  require_capabilities(*logits_in.ctx, "bce_with_logits", Capability::Nn,
                       Capability::MultiTensorAmp);
  check_same_context(logits_in, targets_in, "logits", "targets");
  check_floating(logits_in, "logits");
  check_floating(targets_in, "targets");
  if (!(logits_in.shape == targets_in.shape))
    fail(AMPX_ERR_SHAPE, "'logits' is ", logits_in.describe(), " but 'targets' is ",
         targets_in.describe(), "; they must have one shape");
  // The weights are checked and copied before autocast's casts are
  // recorded, so that a refusal changes nothing.
  DeviceContext& ctx = *logits_in.ctx;
  PeriodicWeight weight, pos_weight;
  if (weight_in) weight = periodic_weight(ctx, *weight_in, logits_in.shape, "weight", logits_in);
  if (pos_weight_in)
    pos_weight =
        periodic_weight(ctx, *pos_weight_in, logits_in.shape, "pos_weight", logits_in);
  std::vector<TensorRef> in = op_inputs(ctx, "bce_with_logits", {&logits_in, &targets_in});
  DeviceTensor& logits = *in[0];
  DeviceTensor& targets = *in[1];
  if (logits.dtype != targets.dtype)
    fail(AMPX_ERR_DTYPE, "'logits' is ", logits.describe(), " but 'targets' is ",
         targets.describe(), "; outside autocast they must share a dtype");
  const int64_t n = logits.numel();
  const bool per_element = reduction == Reduction::None;
  TensorRef losses = new_tensor(ctx, DType::F32, per_element ? logits.shape : vector_shape(n));
  nn_of(ctx, "bce_with_logits")
      .bce_with_logits(logits.data(), targets.data(), logits.dtype, n,
                       static_cast<float*>(losses->data()), weights_of(weight, pos_weight));
  // torch: the mean of no element is 0/0 = NaN.
  const float scale = reduction != Reduction::Mean ? 1.0f
                      : n > 0                      ? 1.0f / static_cast<float>(n)
                                                   : NAN;
  TensorRef out = per_element ? std::move(losses) : new_tensor(ctx, DType::F32, scalar_shape());
  auto* result = static_cast<float*>(out->data());
  if (!per_element) nn_of(ctx, "bce_with_logits").sum_all(losses->data(), DType::F32, n, result);
  if (reduction == Reduction::Mean)
    nn_of(ctx, "bce_with_logits").affine(result, result, DType::F32, 1, scale, 0.0f);
  if (should_record(ctx, {&logits, &targets})) {
    auto node = make_node<BceWithLogitsNode>({&in[0], &in[1]});
    node->scale = scale;
    node->per_element = per_element;
    node->weight = std::move(weight);
    node->pos_weight = std::move(pos_weight);
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
