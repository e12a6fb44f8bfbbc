// formula.h -- the pieces the differentiable backward formulas
// (Node::backward_graph) are written with. Each runs an op of ops.h, so
// during a create_graph walk (grad mode on, autocast off) it records
// itself and its result can be differentiated again; each returns an owned
// reference. The formulas compute in their inputs' dtypes: a mixed pair is
// cast explicitly (cast), never by autocast.
#pragma once

#include <initializer_list>
#include <vector>

#include "autocast/autocast.h"
#include "ops/ops.h"

namespace ampx::impl::formula {

inline TensorRef add(DeviceTensor& a, DeviceTensor& b) {
  return TensorRef(op_binary(BinaryOp::Add, a, b));
}
inline TensorRef sub(DeviceTensor& a, DeviceTensor& b) {
  return TensorRef(op_binary(BinaryOp::Sub, a, b));
}
inline TensorRef mul(DeviceTensor& a, DeviceTensor& b) {
  return TensorRef(op_binary(BinaryOp::Mul, a, b));
}
inline TensorRef div(DeviceTensor& a, DeviceTensor& b) {
  return TensorRef(op_binary(BinaryOp::Div, a, b));
}
// x * scale + shift.
inline TensorRef affine(DeviceTensor& x, float scale, float shift) {
  return TensorRef(op_affine(x, scale, shift));
}
inline TensorRef neg(DeviceTensor& x) { return affine(x, -1.0f, 0.0f); }
inline TensorRef unary(UnaryOp op, DeviceTensor& x) { return TensorRef(op_unary(op, x)); }
inline TensorRef cast(DeviceTensor& x, DType dtype) { return cast_to(*x.ctx, x, dtype); }
inline TensorRef reshape(DeviceTensor& x, const Shape& shape) {
  return TensorRef(op_reshape(x, shape.ndim, shape.dims));
}
inline TensorRef transpose(DeviceTensor& x, int32_t d0, int32_t d1) {
  return TensorRef(op_transpose(x, d0, d1));
}
inline TensorRef matmul(DeviceTensor& a, DeviceTensor& b) { return TensorRef(op_matmul(a, b)); }

// Sums or means over the dimensions listed (negative: from the end).
inline TensorRef sum_dims(DeviceTensor& x, std::initializer_list<int32_t> dims, bool keepdim) {
  const std::vector<int32_t> d(dims);
  return TensorRef(op_reduce_dims(x, d.data(), static_cast<int32_t>(d.size()), keepdim,
                                  DimsReduction::Sum));
}
inline TensorRef mean_dims(DeviceTensor& x, std::initializer_list<int32_t> dims, bool keepdim) {
  const std::vector<int32_t> d(dims);
  return TensorRef(op_reduce_dims(x, d.data(), static_cast<int32_t>(d.size()), keepdim,
                                  DimsReduction::Mean));
}

// x (whose shape broadcasts to `target`) copied along the broadcast
// dimensions: x itself when the shapes are equal.
TensorRef expand(DeviceTensor& x, const Shape& target);
// x summed over the dimensions `target` is broadcast along, in x's dtype,
// to target's shape (the gradient of expand): x itself when equal.
TensorRef sum_to(DeviceTensor& x, const Shape& target);

// A constant (recorded by nothing) of `dtype` and `shape`, every element 0.
TensorRef zeros(DeviceContext& ctx, DType dtype, const Shape& shape);
// A copy of x's values that records nothing: a constant.
TensorRef detached(DeviceTensor& x);

}  // namespace ampx::impl::formula
