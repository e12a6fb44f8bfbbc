// broadcast.cpp -- see broadcast.h.
#include "ops/broadcast.h"

#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

// The extent of `shape` aligned with dimension k of an ndim-dimensional
// output (1 where shape has fewer dimensions).
int64_t aligned_extent(const Shape& shape, int32_t ndim, int32_t k) {
  const int32_t m = k - (ndim - shape.ndim);
  return m >= 0 ? shape.dims[m] : 1;
}

// Row-major strides of `shape`, aligned with an ndim-dimensional output;
// 0 along the dimensions it is broadcast over.
void aligned_strides(const Shape& shape, int32_t ndim, int64_t* strides) {
  int64_t running = 1;
  for (int32_t k = ndim - 1; k >= 0; --k) {
    const int64_t extent = aligned_extent(shape, ndim, k);
    strides[k] = extent == 1 ? 0 : running;
    running *= extent;
  }
}

}  // namespace

Shape broadcast_shape(const DeviceTensor& a, const DeviceTensor& b, const char* op) {
  Shape out;
  out.ndim = a.shape.ndim > b.shape.ndim ? a.shape.ndim : b.shape.ndim;
  for (int32_t k = 0; k < out.ndim; ++k) {
    const int64_t ea = aligned_extent(a.shape, out.ndim, k);
    const int64_t eb = aligned_extent(b.shape, out.ndim, k);
    if (ea != eb && ea != 1 && eb != 1)
      fail(AMPX_ERR_SHAPE, op, ": 'a' is ", a.describe(), " and 'b' is ", b.describe(),
           "; they do not broadcast (aligned at the right, extents must be equal or 1)");
    out.dims[k] = ea == 1 ? eb : ea;
  }
  return make_shape(out, a.dtype, "a broadcast result's");
}

BroadcastLayout broadcast_layout(const Shape& out, const Shape& a, const Shape& b) {
  int64_t sa[AMPX_MAX_DIMS], sb[AMPX_MAX_DIMS];
  aligned_strides(a, out.ndim, sa);
  aligned_strides(b, out.ndim, sb);
  BroadcastLayout l;
  for (int32_t k = 0; k < out.ndim; ++k) {
    if (out.dims[k] == 1) continue;
    const int32_t last = l.ndim - 1;
    // Merged with the previous kept dimension when both operands step
    // through the two as through one.
    if (last >= 0 && l.a_strides[last] == sa[k] * out.dims[k] &&
        l.b_strides[last] == sb[k] * out.dims[k]) {
      l.sizes[last] *= out.dims[k];
      l.a_strides[last] = sa[k];
      l.b_strides[last] = sb[k];
      continue;
    }
    l.sizes[l.ndim] = out.dims[k];
    l.a_strides[l.ndim] = sa[k];
    l.b_strides[l.ndim] = sb[k];
    ++l.ndim;
  }
  if (l.ndim == 0) {  // a single element
    l.ndim = 1;
    l.sizes[0] = 1;
  }
  return l;
}

void reduce_over(DeviceContext& ctx, const char* op, DimReduce reduce, const DeviceTensor& x,
                 uint32_t reduced, void* out, DType out_type) {
  ReduceLayout l;
  bool last_reduced = false;
  for (int32_t k = 0; k < x.shape.ndim; ++k) {
    const int64_t extent = x.shape.dims[k];
    if (extent == 1) continue;
    const bool r = (reduced >> k) & 1u;
    if (l.ndim > 0 && r == last_reduced) {
      l.sizes[l.ndim - 1] *= extent;
      continue;
    }
    l.sizes[l.ndim] = extent;
    if (r) l.reduced |= 1u << l.ndim;
    ++l.ndim;
    last_reduced = r;
  }
  NnPrimitives& nn = nn_of(ctx, op);
  if (l.ndim == 0 || l.reduced == 0) {  // nothing to combine: a conversion
    ctx.backend().convert(out, out_type, x.data(), x.dtype, x.numel());
    return;
  }
  if (reduce == DimReduce::Sum && l.ndim == 2 && l.reduced == 1u) {
    nn.sum_rows(x.data(), x.dtype, l.sizes[0], l.sizes[1], out, out_type);
    return;
  }
  nn.reduce_dims(reduce, x.data(), x.dtype, l, out, out_type);
}

TensorRef sum_to_shape(DeviceContext& ctx, const char* op, DeviceTensor& full,
                       const Shape& target) {
  if (full.shape == target) return retained(full);
  TensorRef out = new_tensor(ctx, full.dtype, target);
  if (out->numel() == 0) return out;
  if (full.numel() == 0) {  // sums of nothing
    ctx.backend().fill(out->data(), dtype_size(out->dtype), 0, out->numel());
    return out;
  }
  uint32_t reduced = 0;
  for (int32_t k = 0; k < full.shape.ndim; ++k)
    if (aligned_extent(target, full.shape.ndim, k) == 1 && full.shape.dims[k] != 1)
      reduced |= 1u << k;
  reduce_over(ctx, op, DimReduce::Sum, full, reduced, out->data(), out->dtype);
  return out;
}

namespace {

// The strided copy that broadcasts a tensor of shape `from` to `to`.
StridedCopy expand_layout(const Shape& from, const Shape& to) {
  StridedCopy layout;
  layout.ndim = to.ndim;
  int64_t strides[AMPX_MAX_DIMS];
  aligned_strides(from, to.ndim, strides);
  int64_t dst = 1;
  for (int32_t k = to.ndim - 1; k >= 0; --k) {
    layout.sizes[k] = to.dims[k];
    layout.dst_strides[k] = dst;
    layout.src_strides[k] = strides[k];
    dst *= to.dims[k];
  }
  return layout;
}

class ExpandNode final : public Node {
 public:
  const char* name() const override { return "expand"; }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    return grad_list(sum_to_shape(ctx, name(), *grads[0], inputs[0]->shape));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(formula::sum_to(*grads[0], inputs[0]->shape));
  }
};

}  // namespace

DeviceTensor* op_expand(DeviceTensor& x, const Shape& shape) {
  require_capabilities(*x.ctx, "expand", Capability::Nn);
  DeviceContext& ctx = *x.ctx;
  TensorRef out = new_tensor(ctx, x.dtype, shape);
  if (out->numel() > 0)
    nn_of(ctx, "expand").copy_strided(out->data(), x.data(), dtype_size(x.dtype),
                                      expand_layout(x.shape, shape));
  if (should_record(ctx, {&x})) {
    auto node = std::make_unique<ExpandNode>();
    node->inputs.push_back(retained(x));
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

namespace formula {

TensorRef expand(DeviceTensor& x, const Shape& target) {
  if (x.shape == target) return retained(x);
  return TensorRef(op_expand(x, target));
}

TensorRef sum_to(DeviceTensor& x, const Shape& target) {
  if (x.shape == target) return retained(x);
  std::vector<int32_t> dims;
  for (int32_t k = 0; k < x.shape.ndim; ++k)
    if (aligned_extent(target, x.shape.ndim, k) == 1 && x.shape.dims[k] != 1) dims.push_back(k);
  TensorRef summed =
      dims.empty() ? retained(x)
                   : TensorRef(op_reduce_dims(x, dims.data(), static_cast<int32_t>(dims.size()),
                                              true, DimsReduction::Sum));
  return reshape(*summed, target);
}

TensorRef zeros(DeviceContext& ctx, DType dtype, const Shape& shape) {
  TensorRef out = new_tensor(ctx, dtype, shape);
  if (out->numel() > 0) ctx.backend().fill(out->data(), dtype_size(dtype), 0, out->numel());
  return out;
}

TensorRef detached(DeviceTensor& x) {
  TensorRef out = new_tensor(*x.ctx, x.dtype, x.shape);
  if (out->numel() > 0) x.ctx->backend().copy(out->data(), x.data(), x.nbytes());
  return out;
}

}  // namespace formula

}  // namespace ampx::impl
