// ops.h -- the differentiable ops of section 11 of ampx.h, device-agnostic:
// each validates its inputs, lets autocast choose the compute dtype, runs
// backend primitives, and records a Node whose backward also uses only
// backend primitives. Each returns the new output with one reference owned
// by the caller (the API layer hands it to a scope when one is open).
#pragma once

#include "core/backend.h"
#include "core/tensor.h"

namespace ampx {

enum class Reduction { Mean, Sum };
enum class Activation { None, Relu, Gelu };

Tensor* op_binary(BinaryOp op, Tensor& a, Tensor& b);
Tensor* op_affine(Tensor& x, float scale, float shift);
Tensor* op_unary(UnaryOp op, Tensor& x);
Tensor* op_sum(Tensor& x, bool mean);
Tensor* op_softmax(Tensor& x, bool log);
Tensor* op_cross_entropy(Tensor& logits, Tensor& labels, Reduction reduction, int64_t ignore_index);
Tensor* op_mse_loss(Tensor& input, Tensor& target, Reduction reduction);
Tensor* op_matmul(Tensor& a, Tensor& b);
Tensor* op_linear(Tensor& x, Tensor& weight, Tensor* bias, Activation activation);

}  // namespace ampx
