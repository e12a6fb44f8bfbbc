// ops.h -- the differentiable ops of section 11 of ampx.h, device-agnostic:
// each validates its inputs, lets autocast choose the compute dtype, runs
// backend primitives, and records a Node whose backward also uses only
// backend primitives. Each returns the new output with one reference owned
// by the caller (the API layer hands it to a scope when one is open).
#pragma once

#include <vector>

#include "core/backend_conv.h"
#include "core/backend_nn.h"
#include "core/tensor.h"

namespace ampx::impl {

enum class Reduction { Mean, Sum, None };
enum class Activation { None, Relu, Gelu };
enum class DimsReduction { Sum, Mean, Amax };

DeviceTensor* op_binary(BinaryOp op, DeviceTensor& a, DeviceTensor& b);
DeviceTensor* op_affine(DeviceTensor& x, float scale, float shift);
// cast.cpp: ampx_cast (a new tensor, recorded between floating types).
DeviceTensor* op_cast(DeviceTensor& x, DType dtype);
DeviceTensor* op_unary(UnaryOp op, DeviceTensor& x);
DeviceTensor* op_sum(DeviceTensor& x, bool mean);
DeviceTensor* op_softmax(DeviceTensor& x, bool log);
DeviceTensor* op_softmax_dim(DeviceTensor& x, int32_t dim, bool log);
// weight: class weights [C] or nullptr; smoothing in [0, 1] (torch's
// label_smoothing).
DeviceTensor* op_cross_entropy(DeviceTensor& logits, DeviceTensor& labels, Reduction reduction,
                               int64_t ignore_index, DeviceTensor* weight = nullptr,
                               double smoothing = 0.0);
DeviceTensor* op_mse_loss(DeviceTensor& input, DeviceTensor& target, Reduction reduction);
DeviceTensor* op_matmul(DeviceTensor& a, DeviceTensor& b);
DeviceTensor* op_linear(DeviceTensor& x, DeviceTensor& weight, DeviceTensor* bias,
                        Activation activation);

// norm.cpp
DeviceTensor* op_layer_norm(DeviceTensor& x, DeviceTensor* weight, DeviceTensor* bias, float eps);
DeviceTensor* op_rms_norm(DeviceTensor& x, DeviceTensor* weight, float eps);
DeviceTensor* op_batch_norm(DeviceTensor& x, DeviceTensor* weight, DeviceTensor* bias,
                            DeviceTensor* running_mean, DeviceTensor* running_var, bool training,
                            float momentum, float eps);
// dropout.cpp
DeviceTensor* op_dropout(DeviceTensor& x, double p, bool training);
// shape.cpp
DeviceTensor* op_reshape(DeviceTensor& x, int32_t ndim, const int64_t* dims);
DeviceTensor* op_transpose(DeviceTensor& x, int32_t dim0, int32_t dim1);
DeviceTensor* op_permute(DeviceTensor& x, int32_t ndim, const int32_t* dims);
DeviceTensor* op_concat(const std::vector<DeviceTensor*>& tensors, int32_t dim);
DeviceTensor* op_embedding(DeviceTensor& weight, DeviceTensor& indices);
// reduce_dims.cpp: over the dimensions listed (ndims 0: all)
DeviceTensor* op_reduce_dims(DeviceTensor& x, const int32_t* dims, int32_t ndims, bool keepdim,
                             DimsReduction kind);
// attention.cpp; scale 0 selects 1 / sqrt(head_dim)
DeviceTensor* op_attention(DeviceTensor& q, DeviceTensor& k, DeviceTensor& v, DeviceTensor* mask,
                           bool causal, double scale, double dropout_p);
// block_ops.cpp
DeviceTensor* op_masked_fill(DeviceTensor& x, DeviceTensor& mask, double value);
DeviceTensor* op_pow(DeviceTensor& x, double exponent);
DeviceTensor* op_rotary(DeviceTensor& x, DeviceTensor& cos, DeviceTensor& sin, bool interleaved);
std::vector<TensorRef> op_split(DeviceTensor& x, const std::vector<int64_t>& sizes, int32_t dim);
// The sizes torch.chunk(x, chunks, dim) gives its pieces.
std::vector<int64_t> chunk_sizes(const DeviceTensor& x, int32_t chunks, int32_t dim);
// conv.cpp
struct Conv2dParams {
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  int64_t groups = 1;
};
DeviceTensor* op_conv2d(DeviceTensor& x, DeviceTensor& weight, DeviceTensor* bias,
                        const Conv2dParams& params);
struct Pool2dParams {
  PoolKind kind = PoolKind::Max;
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  bool ceil_mode = false;
  bool count_include_pad = true;
  int64_t divisor = 0;  // 0: the window's size
};
DeviceTensor* op_pool2d(DeviceTensor& x, const Pool2dParams& params);
// The mean over H and W with keepdim: [N, C, 1, 1] (or [C, 1, 1]).
DeviceTensor* op_global_avg_pool2d(DeviceTensor& x);
// loss.cpp
// weight and pos_weight (nullptr: none) broadcast to the logits' shape.
DeviceTensor* op_bce_with_logits(DeviceTensor& logits, DeviceTensor& targets, Reduction reduction,
                                 DeviceTensor* weight = nullptr, DeviceTensor* pos_weight = nullptr);

// ---- internal ops of the differentiable backward formulas (formula.h) ------
// Not in ampx.h and not under autocast (a create_graph walk turns it off).
// Each records a node whose own backward, first-order and differentiable,
// is written in the same way.

// broadcast.cpp: x broadcast to `shape` (a copy).
DeviceTensor* op_expand(DeviceTensor& x, const Shape& shape);
// elementwise.cpp: dy where `mask` > 0, else 0 (relu's derivative, as
// torch's threshold_backward); mask is any tensor of dy's shape and dtype
// with relu's input's signs. The gradient with respect to mask is 0.
DeviceTensor* op_relu_grad(DeviceTensor& mask, DeviceTensor& dy);
// dropout.cpp: x times the dropout mask drawn at (seed, offset), as
// ampx_dropout drew it.
DeviceTensor* op_dropout_with(DeviceTensor& x, uint64_t seed, uint64_t offset, uint32_t threshold,
                              float scale);
// shape.cpp: embedding's backward, dy [..., D] scatter-added at `indices`
// into [V, D] (summed in F32, rounded to `weight_dtype`).
DeviceTensor* op_embedding_grad(DeviceTensor& dy, DeviceTensor& indices, const Shape& weight_shape,
                                DType weight_dtype);
// block_ops.cpp: x rotated by the tables as `shape` says (inverse: back).
DeviceTensor* op_rotary_with(DeviceTensor& x, DeviceTensor& cos, DeviceTensor& sin,
                             const RotaryShape& shape, bool inverse);
// conv.cpp: the three products of a convolution of shape `s`: y from x
// and w (no bias), dx from dy and w, dw from dy and x; each result has the
// shape given.
DeviceTensor* op_conv2d_shaped(DeviceTensor& x, DeviceTensor& w, const Conv2dShape& s,
                               const Shape& y_shape);
DeviceTensor* op_conv2d_grad_input(DeviceTensor& dy, DeviceTensor& w, const Conv2dShape& s,
                                   const Shape& x_shape);
DeviceTensor* op_conv2d_grad_weight(DeviceTensor& dy, DeviceTensor& x, const Conv2dShape& s,
                                    const Shape& w_shape);
// conv.cpp: pooling of shape `s` forward; its backward (x: the forward's
// input, read by max pooling only, nullptr for average); and max pooling's
// gather, g at each window's maximum of x (the backward's adjoint).
DeviceTensor* op_pool2d_shaped(DeviceTensor& x, const Pool2dShape& s, const Shape& y_shape);
DeviceTensor* op_pool2d_grad(DeviceTensor* x, DeviceTensor& dy, const Pool2dShape& s,
                             const Shape& x_shape);
DeviceTensor* op_max_pool2d_gather(DeviceTensor& x, DeviceTensor& g, const Pool2dShape& s,
                                   const Shape& y_shape);

}  // namespace ampx::impl
