// reduce_dims.cpp -- sum, mean and amax over chosen dimensions, with or
// without keepdim (torch.sum / mean / amax with `dim`). The reductions run
// on the backend's reduce_dims (sums in double in a fixed order); the
// backward passes expand the output's gradient back over the reduced
// dimensions with a strided copy of stride 0.
#include <cmath>
#include <cstring>
#include <limits>

#include "onnx/emitter.h"
#include "ops/broadcast.h"
#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

const char* reduction_name(DimsReduction kind) {
  switch (kind) {
    case DimsReduction::Sum: return "sum";
    case DimsReduction::Mean: return "mean";
    case DimsReduction::Amax: return "amax";
  }
  return "?";
}

// dy (of x's shape with the reduced dimensions at extent 1, kept or not)
// copied to every position of x's shape.
TensorRef expand_over(DeviceContext& ctx, const char* op, const DeviceTensor& dy, const Shape& x,
                      uint32_t reduced) {
  TensorRef out = new_tensor(ctx, dy.dtype, x);
  if (out->numel() == 0) return out;
  StridedCopy layout;
  layout.ndim = x.ndim;
  int64_t dst = 1, src = 1;
  for (int32_t k = x.ndim - 1; k >= 0; --k) {
    layout.sizes[k] = x.dims[k];
    layout.dst_strides[k] = dst;
    dst *= x.dims[k];
    const bool r = (reduced >> k) & 1u;
    layout.src_strides[k] = r ? 0 : src;
    if (!r) src *= x.dims[k];
  }
  nn_of(ctx, op).copy_strided(out->data(), dy.data(), dtype_size(dy.dtype), layout);
  return out;
}

class ReduceDimsNode final : public Node {
 public:
  DimsReduction kind = DimsReduction::Sum;
  uint32_t reduced = 0;
  float scale = 1.0f;  // 1 / count for a mean
  TensorRef output;    // amax: the maxima, to find the elements that reached them
  const char* name() const override { return reduction_name(kind); }
  // ReduceSum, ReduceMean or ReduceMax over the reduced axes; keepdim is
  // read from the recorded output's rank.
  void onnx(onnx::Emitter& e) const override {
    const Shape& x = e.input_tensor(0).shape;
    std::vector<int64_t> axes;
    for (int32_t k = 0; k < x.ndim; ++k)
      if ((reduced >> k) & 1u) axes.push_back(k);
    if (axes.size() == static_cast<size_t>(x.ndim)) axes.clear();  // every axis
    const bool keepdims = e.output_shape(0).ndim == x.ndim && x.ndim > 0;
    const char* type = kind == DimsReduction::Sum    ? "ReduceSum"
                       : kind == DimsReduction::Mean ? "ReduceMean"
                                                     : "ReduceMax";
    e.output(0, e.reduce(type, e.input(0), axes, keepdims));
  }
  bool reads_input(size_t) const override { return kind == DimsReduction::Amax; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = expand_over(ctx, name(), *grads[0], x.shape, reduced);
    if (dx->numel() == 0) return grad_list(std::move(dx));
    NnPrimitives& nn = nn_of(ctx, name());
    if (kind == DimsReduction::Mean)
      nn.affine(dx->data(), dx->data(), dx->dtype, dx->numel(), scale, 0.0f);
    if (kind == DimsReduction::Amax) {
      // torch.amax's rule: the gradient is shared evenly among the elements
      // equal to the maximum. ties = (x == max); dx = dy * ties / count.
      TensorRef peak = expand_over(ctx, name(), *output, x.shape, reduced);
      TensorRef ties = new_tensor(ctx, x.dtype, x.shape);
      BroadcastLayout same;
      same.ndim = 1;
      same.sizes[0] = x.numel();
      same.a_strides[0] = same.b_strides[0] = 1;
      nn.binary_broadcast(BinaryOp::Equal, x.data(), peak->data(), ties->data(), x.dtype, same);
      TensorRef count = new_tensor(ctx, DType::F32, output->shape);
      reduce_over(ctx, name(), DimReduce::Sum, *ties, reduced, count->data(), DType::F32);
      TensorRef count_x = new_tensor(ctx, x.dtype, output->shape);
      ctx.backend().convert(count_x->data(), x.dtype, count->data(), DType::F32, count->numel());
      TensorRef spread = expand_over(ctx, name(), *count_x, x.shape, reduced);
      nn.binary(BinaryOp::Mul, dx->data(), ties->data(), dx->data(), x.dtype, x.numel(),
                x.numel());
      nn.binary(BinaryOp::Div, dx->data(), spread->data(), dx->data(), x.dtype, x.numel(),
                x.numel());
    }
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  // dy expanded back over the reduced dimensions (times 1/count for a
  // mean); amax's share among ties is a constant of x (zero second
  // derivative, as torch's): the first-order backward of a gradient of ones.
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& x = *inputs[0];
    Shape kept = x.shape;
    for (int32_t k = 0; k < kept.ndim; ++k)
      if ((reduced >> k) & 1u) kept.dims[k] = 1;
    TensorRef dy = f::reshape(*grads[0], kept);
    if (kind == DimsReduction::Mean) dy = f::affine(*dy, scale, 0.0f);
    TensorRef dx = f::expand(*dy, x.shape);
    if (kind != DimsReduction::Amax || x.numel() == 0) return grad_list(std::move(dx));
    TensorRef ones = new_tensor(ctx, x.dtype, output->shape);
    TensorRef ones_f32(make_filled_f32(ctx, output->shape, 1.0f));
    ctx.backend().convert(ones->data(), x.dtype, ones_f32->data(), DType::F32, ones->numel());
    std::vector<DeviceTensor*> unit = {ones.get()};
    TensorRef share = std::move(backward(ctx, unit)[0]);
    return grad_list(f::mul(*dx, *share));
  }
};

}  // namespace

DeviceTensor* op_reduce_dims(DeviceTensor& x_in, const int32_t* dims, int32_t ndims, bool keepdim,
                             DimsReduction kind) {
  const char* op = reduction_name(kind);
  require_capabilities(*x_in.ctx, op, Capability::Nn);
  check_floating(x_in, "x");
  const int32_t nd = x_in.shape.ndim;
  if (ndims < 0 || ndims > nd || (ndims > 0 && dims == nullptr))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'ndims' is ", ndims, " (dims ",
         dims ? "given" : "NULL", ") for '", x_in.describe(), "'; use 0 .. ", nd,
         " dimensions (0: all)");
  uint32_t reduced = 0;
  for (int32_t i = 0; i < ndims; ++i) {
    const int32_t d = dims[i] < 0 ? dims[i] + nd : dims[i];
    if (d < 0 || d >= nd)
      fail(AMPX_ERR_INVALID_ARGUMENT, "dims[", i, "] is ", dims[i], " but '", x_in.describe(),
           "' has ", nd, " dimensions (use -", nd, " .. ", nd - 1, ")");
    if (reduced & (1u << d))
      fail(AMPX_ERR_INVALID_ARGUMENT, "dimension ", d, " is named twice in dims");
    reduced |= 1u << d;
  }
  if (ndims == 0) reduced = nd == 0 ? 0 : (1u << nd) - 1;
  Shape out_shape;
  int64_t count = 1;
  for (int32_t k = 0; k < nd; ++k) {
    if (reduced & (1u << k)) {
      count *= x_in.shape.dims[k];
      if (kind == DimsReduction::Amax && x_in.shape.dims[k] == 0)
        fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), "; amax over dimension ", k,
             " of extent 0 has no maximum");
      if (!keepdim) continue;
      out_shape.dims[out_shape.ndim++] = 1;
    } else {
      out_shape.dims[out_shape.ndim++] = x_in.shape.dims[k];
    }
  }
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, op, {&x_in});
  DeviceTensor& x = *in[0];
  TensorRef out = new_tensor(ctx, x.dtype, out_shape);
  float scale = 1.0f;
  if (out->numel() > 0) {
    if (x.numel() == 0) {  // sums of nothing: 0, and a mean of nothing NaN
      TensorRef f32 = new_tensor(ctx, DType::F32, out_shape);
      const float value = kind == DimsReduction::Mean ? std::numeric_limits<float>::quiet_NaN() : 0;
      uint32_t bits;
      std::memcpy(&bits, &value, sizeof bits);
      ctx.backend().fill(f32->data(), 4, bits, f32->numel());
      ctx.backend().convert(out->data(), x.dtype, f32->data(), DType::F32, f32->numel());
    } else if (kind == DimsReduction::Mean) {
      // The sum rounded to fp32, times fp32(1 / count), rounded once more.
      scale = static_cast<float>(1.0 / static_cast<double>(count));
      TensorRef sum = new_tensor(ctx, DType::F32, out_shape);
      reduce_over(ctx, op, DimReduce::Sum, x, reduced, sum->data(), DType::F32);
      nn_of(ctx, op).affine(sum->data(), sum->data(), DType::F32, sum->numel(), scale, 0.0f);
      ctx.backend().convert(out->data(), x.dtype, sum->data(), DType::F32, sum->numel());
    } else {
      reduce_over(ctx, op, kind == DimsReduction::Amax ? DimReduce::Max : DimReduce::Sum, x,
                  reduced, out->data(), x.dtype);
    }
  }
  if (should_record(ctx, {&x})) {
    auto node = make_node<ReduceDimsNode>({&in[0]});
    node->kind = kind;
    node->reduced = reduced;
    node->scale = scale;
    if (kind == DimsReduction::Amax) {
      node->output = saved_output(ctx, *out);
      node->saves(*out);
    }
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
