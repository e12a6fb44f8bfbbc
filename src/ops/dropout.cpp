// dropout.cpp -- inverted dropout with a counter-based mask: the node keeps
// the (seed, offset) that keyed the forward's Philox stream and the
// backward regenerates the very same mask from them, so no mask is stored.
#include "math/random.h"
#include "onnx/emitter.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

class DropoutNode final : public Node {
 public:
  bool identity = false;  // p == 0 or evaluation
  uint64_t seed = 0, offset = 0;
  uint32_t threshold = 0;
  float scale = 1.0f;
  const char* name() const override { return "dropout"; }
  // At inference dropout is the identity.
  void onnx(onnx::Emitter& e) const override { e.output(0, e.input(0)); }
  bool reads_input(size_t) const override { return false; }  // the mask is regenerated
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *grads[0];
    if (identity) return grad_list(retained(dy));
    TensorRef dx = new_tensor(ctx, dy.dtype, dy.shape);
    if (dx->numel() > 0)
      nn_of(ctx, name())
          .dropout(dy.data(), dx->data(), dy.dtype, dx->numel(), seed, offset, threshold, scale);
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  // The same mask times dy, recorded (its own backward is the mask again).
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *grads[0];
    if (identity) return grad_list(retained(dy));
    return grad_list(TensorRef(op_dropout_with(dy, seed, offset, threshold, scale)));
  }
};

}  // namespace

DeviceTensor* op_dropout(DeviceTensor& x_in, double p, bool training) {
  require_capabilities(*x_in.ctx, "dropout", Capability::Nn);
  check_floating(x_in, "x");
  if (!(p >= 0.0 && p < 1.0))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'p' is ", p, "; dropout needs 0 <= p < 1");
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "dropout", {&x_in});
  DeviceTensor& x = *in[0];
  auto node = std::make_unique<DropoutNode>();
  TensorRef out;
  if (p == 0.0 || !training) {
    // Nothing is dropped: the output shares x's memory, as torch returns
    // its input.
    node->identity = true;
    out = TensorRef(DeviceTensor::alias(ctx, x, x.dtype, x.shape));
  } else {
    // Allocated before the mask is drawn: a call that fails leaves the
    // random stream where it was, so a retry draws the mask it would have.
    out = new_tensor(ctx, x.dtype, x.shape);
    node->seed = ctx.seed();
    node->offset = ctx.next_random_offset();
    node->threshold = math::dropout_threshold(p);
    node->scale = static_cast<float>(1.0 / (1.0 - p));
    if (x.numel() > 0)
      nn_of(ctx, "dropout")
          .dropout(x.data(), out->data(), x.dtype, x.numel(), node->seed, node->offset,
                   node->threshold, node->scale);
  }
  if (should_record(ctx, {&x})) {
    node->inputs.push_back(std::move(in[0]));
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_dropout_with(DeviceTensor& x, uint64_t seed, uint64_t offset, uint32_t threshold,
                              float scale) {
  require_capabilities(*x.ctx, "dropout", Capability::Nn);
  DeviceContext& ctx = *x.ctx;
  TensorRef out = new_tensor(ctx, x.dtype, x.shape);
  if (x.numel() > 0)
    nn_of(ctx, "dropout").dropout(x.data(), out->data(), x.dtype, x.numel(), seed, offset,
                                  threshold, scale);
  if (should_record(ctx, {&x})) {
    auto node = std::make_unique<DropoutNode>();
    node->seed = seed, node->offset = offset, node->threshold = threshold, node->scale = scale;
    node->inputs.push_back(retained(x));
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
