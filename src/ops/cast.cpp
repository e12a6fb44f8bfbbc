// cast.cpp -- ampx_cast: Tensor.to(dtype) and Tensor.clone() as torch
// records them. Not under autocast (torch's .to has no autocast class: the
// program asked for this dtype), and always a new tensor, also when the
// dtype is the input's (clone), so writing into the result never changes x.
#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

class CastOpNode final : public Node {
 public:
  const char* name() const override { return "cast"; }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    copy_converting(*dx, *grads[0]);
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  // The cast back is itself recorded (cast_to): the gradient of a gradient
  // that went through .to(bf16) goes through the same rounding.
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(formula::cast(*grads[0], inputs[0]->dtype));
  }
};

}  // namespace

DeviceTensor* op_cast(DeviceTensor& x, DType dtype) {
  DeviceContext& ctx = *x.ctx;
  TensorRef out = new_tensor(ctx, dtype, x.shape);
  copy_converting(*out, x);
  // An integer or FP8 result carries no gradient, as torch's .to(int).
  if (is_floating(x.dtype) && is_floating(dtype) && should_record(ctx, {&x})) {
    TensorRef in = retained(x);
    record(ctx, make_node<CastOpNode>({&in}), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
