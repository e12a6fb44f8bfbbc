// ops.h -- the differentiable ops of section 11 of ampx.h, device-agnostic:
// each validates its inputs, lets autocast choose the compute dtype, runs
// backend primitives, and records a Node whose backward also uses only
// backend primitives. Each returns the new output with one reference owned
// by the caller (the API layer hands it to a scope when one is open).
#pragma once

#include <vector>

#include "core/backend_nn.h"
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

// norm.cpp
Tensor* op_layer_norm(Tensor& x, Tensor* weight, Tensor* bias, float eps);
Tensor* op_batch_norm(Tensor& x, Tensor* weight, Tensor* bias, Tensor* running_mean,
                      Tensor* running_var, bool training, float momentum, float eps);
// dropout.cpp
Tensor* op_dropout(Tensor& x, double p, bool training);
// shape.cpp
Tensor* op_reshape(Tensor& x, int32_t ndim, const int64_t* dims);
Tensor* op_transpose(Tensor& x, int32_t dim0, int32_t dim1);
Tensor* op_concat(const std::vector<Tensor*>& tensors, int32_t dim);
Tensor* op_embedding(Tensor& weight, Tensor& indices);
// loss.cpp
Tensor* op_bce_with_logits(Tensor& logits, Tensor& targets, Reduction reduction);

}  // namespace ampx
