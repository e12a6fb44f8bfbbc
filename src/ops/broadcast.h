// broadcast.h -- NumPy broadcasting for the ops: the shape two operands
// broadcast to, the layouts of the backend's binary_broadcast and
// reduce_dims primitives (simplified: extents of 1 dropped, adjacent
// dimensions that step alike merged), and the sum that brings a gradient of
// the broadcast shape back to an operand's shape.
#pragma once

#include "core/backend_nn.h"
#include "core/tensor.h"

namespace ampx::impl {

// The shape a and b broadcast to (aligned at the right, each extent equal
// or 1); SHAPE naming both shapes and `op` otherwise.
Shape broadcast_shape(const DeviceTensor& a, const DeviceTensor& b, const char* op);

// The layout computing an output of shape `out` from operands of shapes a
// and b, each of which broadcasts to `out`. out has elements.
BroadcastLayout broadcast_layout(const Shape& out, const Shape& a, const Shape& b);

// A new tensor of `target`'s shape and `full`'s dtype: full (whose shape
// `target` broadcasts to) summed over the dimensions target is broadcast
// along. Retains full itself when the shapes are equal.
TensorRef sum_to_shape(DeviceContext& ctx, const char* op, DeviceTensor& full,
                       const Shape& target);

// x's extents with the dimensions of `reduced` (bit k: dimension k) summed
// or maximised, in the simplified layout the primitive takes; out_type
// names the result's dtype. x has elements.
void reduce_over(DeviceContext& ctx, const char* op, DimReduce reduce, const DeviceTensor& x,
                 uint32_t reduced, void* out, DType out_type);

}  // namespace ampx::impl
