// loss.cpp -- binary cross-entropy with logits (torch's
// binary_cross_entropy_with_logits without weights): per-element losses in
// F32 by a backend primitive, reduced as the other losses are; the backward
// is built from element-wise primitives.
#include <cmath>

#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

class BceWithLogitsNode final : public Node {
 public:
  float scale = 1.0f;        // 1/n for a mean
  bool per_element = false;  // unreduced: the output holds one loss per element
  const char* name() const override { return "bce_with_logits"; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& logits = *inputs[0];
    DeviceTensor& targets = *inputs[1];
    TensorRef dy = grad_f32(ctx, *grads[0]);
    const auto* factor = static_cast<const float*>(dy->data());
    const int64_t n = logits.numel();
    TensorRef d_logits, d_targets;
    if (logits.requires_grad) {  // (sigmoid(x) - t) * dy * scale
      d_logits = new_tensor(ctx, logits.dtype, logits.shape);
      if (n > 0) {
        void* d = d_logits->data();
        nn_of(ctx, name()).unary(UnaryOp::Sigmoid, logits.data(), d, logits.dtype, n);
        nn_of(ctx, name()).binary(BinaryOp::Sub, d, targets.data(), d, logits.dtype, n, n);
        if (per_element) {
          d_logits = times_grad(ctx, name(), *d_logits, *dy, 1.0f, logits.dtype);
        } else {
          amp_of(ctx, name())
              .multi_tensor_scale({{d, logits.dtype, n}}, {{d, logits.dtype, n}}, factor, false,
                                  nullptr);
          nn_of(ctx, name()).affine(d, d, logits.dtype, n, scale, 0.0f);
        }
      }
    }
    if (targets.requires_grad && per_element) {  // -x * dy
      d_targets = times_grad(ctx, name(), logits, *dy, -1.0f, targets.dtype);
    } else if (targets.requires_grad) {  // -x * dy * scale
      d_targets = new_tensor(ctx, targets.dtype, targets.shape);
      if (n > 0) {
        void* d = d_targets->data();
        amp_of(ctx, name())
            .multi_tensor_scale({{logits.data(), logits.dtype, n}}, {{d, targets.dtype, n}}, factor,
                                false, nullptr);
        nn_of(ctx, name()).affine(d, d, targets.dtype, n, -scale, 0.0f);
      }
    }
    return grad_list(std::move(d_logits), std::move(d_targets));
  }
  bool has_backward_graph() const override { return true; }
  // (sigmoid(x) - t) dy and -x dy, times 1/n for a mean.
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& logits = *inputs[0];
    DeviceTensor& targets = *inputs[1];
    TensorRef dy = f::cast(*grads[0], logits.dtype);
    if (!per_element && scale != 1.0f) dy = f::affine(*dy, scale, 0.0f);
    TensorRef d_logits, d_targets;
    if (logits.requires_grad)
      d_logits = f::mul(*f::sub(*f::unary(UnaryOp::Sigmoid, logits), targets), *dy);
    if (targets.requires_grad) d_targets = f::mul(*f::neg(logits), *dy);
    return grad_list(std::move(d_logits), std::move(d_targets));
  }
};

}  // namespace

DeviceTensor* op_bce_with_logits(DeviceTensor& logits_in, DeviceTensor& targets_in,
                                 Reduction reduction) {
  require_capabilities(*logits_in.ctx, "bce_with_logits", Capability::Nn,
                       Capability::MultiTensorAmp);
  check_same_context(logits_in, targets_in, "logits", "targets");
  check_floating(logits_in, "logits");
  check_floating(targets_in, "targets");
  if (!(logits_in.shape == targets_in.shape))
    fail(AMPX_ERR_SHAPE, "'logits' is ", logits_in.describe(), " but 'targets' is ",
         targets_in.describe(), "; they must have one shape");
  DeviceContext& ctx = *logits_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "bce_with_logits", {&logits_in, &targets_in});
  DeviceTensor& logits = *in[0];
  DeviceTensor& targets = *in[1];
  if (logits.dtype != targets.dtype)
    fail(AMPX_ERR_DTYPE, "'logits' is ", logits.describe(), " but 'targets' is ",
         targets.describe(), "; outside autocast they must share a dtype");
  const int64_t n = logits.numel();
  const bool per_element = reduction == Reduction::None;
  TensorRef losses = new_tensor(ctx, DType::F32, per_element ? logits.shape : vector_shape(n));
  if (n > 0)
    nn_of(ctx, "bce_with_logits")
        .bce_with_logits(logits.data(), targets.data(), logits.dtype, n,
                         static_cast<float*>(losses->data()));
  // torch: the mean of no element is 0/0 = NaN.
  const float scale = reduction == Reduction::Sum ? 1.0f
                      : n > 0                     ? 1.0f / static_cast<float>(n)
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
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
