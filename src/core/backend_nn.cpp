// backend_nn.cpp -- the front doors of the nn primitives: the dtype checks
// of backend_nn.h, once, for all backends.
#include "core/backend_nn.h"

#include "core/error.h"

namespace ampx::impl {
namespace {

void require_float(const char* primitive, DType t) {
  if (!is_floating(t))
    fail(AMPX_ERR_DTYPE, primitive, ": got ", dtype_name(t), "; it needs f32, f16 or bf16");
}

void require_indices(const char* primitive, DType t) {
  if (t != DType::I32 && t != DType::I64)
    fail(AMPX_ERR_DTYPE, primitive, ": indices are ", dtype_name(t), "; they need i32 or i64");
}

void require_loss_stride(const char* primitive, int64_t stride) {
  if (stride != 0 && stride != 1)
    fail(AMPX_ERR_INTERNAL, primitive, ": dloss stride ", stride, " (0: one for all rows, 1: per row)");
}

void require_periods(const char* primitive, const BceWeights& w) {
  if ((w.weight && w.weight_period < 1) || (w.pos_weight && w.pos_weight_period < 1))
    fail(AMPX_ERR_INTERNAL, primitive, ": a weight period below 1");
}

void require_element_size(const char* primitive, size_t elem_size) {
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8)
    fail(AMPX_ERR_INTERNAL, primitive, ": elements of ", elem_size, " bytes");
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::GeluTanh: return "gelu_tanh";
    case UnaryOp::Silu: return "silu";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::GeluDerivative: return "gelu_derivative";
    case UnaryOp::GeluTanhDerivative: return "gelu_tanh_derivative";
  }
  return "?";
}

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Equal: return "equal";
  }
  return "?";
}

}  // namespace

void NnPrimitives::unary(UnaryOp op, const void* x, void* y, DType type, int64_t count) {
  const ProfileScope timed(profile(), "unary", unary_name(op));
  require_float("unary", type);
  run_unary(op, x, y, type, count);
}

void NnPrimitives::unary_backward(UnaryOp op, const void* x, const void* dy, void* dx, DType type,
                                  int64_t count) {
  const ProfileScope timed(profile(), "unary_backward", unary_name(op));
  require_float("unary_backward", type);
  run_unary_backward(op, x, dy, dx, type, count);
}

void NnPrimitives::binary(BinaryOp op, const void* a, const void* b, void* out, DType type,
                          int64_t count, int64_t b_count) {
  const ProfileScope timed(profile(), "binary", binary_name(op));
  require_float("binary", type);
  if (count > 0 && (b_count <= 0 || count % b_count != 0))
    fail(AMPX_ERR_INTERNAL, "binary: ", b_count, " does not divide ", count);
  run_binary(op, a, b, out, type, count, b_count);
}

void NnPrimitives::binary_broadcast(BinaryOp op, const void* a, const void* b, void* out,
                                    DType type, const BroadcastLayout& layout) {
  const ProfileScope timed(profile(), "binary_broadcast", binary_name(op));
  require_float("binary_broadcast", type);
  if (layout.ndim < 1 || layout.ndim > AMPX_MAX_DIMS)
    fail(AMPX_ERR_INTERNAL, "binary_broadcast: ", layout.ndim, " dimensions");
  for (int32_t k = 0; k < layout.ndim; ++k)
    if (layout.sizes[k] <= 0) fail(AMPX_ERR_INTERNAL, "binary_broadcast: extent ", layout.sizes[k]);
  run_binary_broadcast(op, a, b, out, type, layout);
}

void NnPrimitives::reduce_dims(DimReduce op, const void* x, DType type, const ReduceLayout& layout,
                               void* out, DType out_type) {
  const ProfileScope timed(profile(), "reduce_dims");
  require_float("reduce_dims", type);
  require_float("reduce_dims", out_type);
  if (layout.ndim < 1 || layout.ndim > AMPX_MAX_DIMS || (layout.reduced >> layout.ndim) != 0)
    fail(AMPX_ERR_INTERNAL, "reduce_dims: ", layout.ndim, " dimensions, mask ", layout.reduced);
  for (int32_t k = 0; k < layout.ndim; ++k)
    if (layout.sizes[k] <= 0) fail(AMPX_ERR_INTERNAL, "reduce_dims: extent ", layout.sizes[k]);
  run_reduce_dims(op, x, type, layout, out, out_type);
}

void NnPrimitives::masked_fill(const void* x, DType type, const void* mask, DType mask_type,
                               float value, void* out, const BroadcastLayout& layout) {
  const ProfileScope timed(profile(), "masked_fill");
  require_float("masked_fill", type);
  if (!is_valid_dtype(static_cast<int32_t>(mask_type)))
    fail(AMPX_ERR_DTYPE, "masked_fill: the mask's dtype ", static_cast<int>(mask_type));
  if (layout.ndim < 1 || layout.ndim > AMPX_MAX_DIMS)
    fail(AMPX_ERR_INTERNAL, "masked_fill: ", layout.ndim, " dimensions");
  for (int32_t k = 0; k < layout.ndim; ++k)
    if (layout.sizes[k] <= 0) fail(AMPX_ERR_INTERNAL, "masked_fill: extent ", layout.sizes[k]);
  run_masked_fill(x, type, mask, mask_type, value, out, layout);
}

void NnPrimitives::pow_scalar(const void* x, void* y, DType type, int64_t count, float exponent) {
  const ProfileScope timed(profile(), "pow_scalar");
  require_float("pow", type);
  if (count > 0) run_pow_scalar(x, y, type, count, exponent);
}

void NnPrimitives::pow_scalar_backward(const void* x, const void* dy, void* dx, DType type,
                                       int64_t count, float exponent) {
  const ProfileScope timed(profile(), "pow_scalar_backward");
  require_float("pow_backward", type);
  if (count > 0) run_pow_scalar_backward(x, dy, dx, type, count, exponent);
}

void NnPrimitives::rotary(const void* x, DType type, const void* cos, const void* sin,
                          DType table_type, void* out, const RotaryShape& shape, bool inverse) {
  const ProfileScope timed(profile(), "rotary");
  require_float("rotary", type);
  require_float("rotary", table_type);
  if (shape.rows <= 0 || shape.positions <= 0 || shape.dim <= 0 || shape.dim % 2 != 0)
    fail(AMPX_ERR_INTERNAL, "rotary: ", shape.rows, " x ", shape.positions, " x ", shape.dim);
  run_rotary(x, type, cos, sin, table_type, out, shape, inverse);
}

void NnPrimitives::affine(const void* x, void* y, DType type, int64_t count, float scale,
                          float shift) {
  const ProfileScope timed(profile(), "affine");
  require_float("affine", type);
  run_affine(x, y, type, count, scale, shift);
}

void NnPrimitives::add_into(void* dst, DType dst_type, const void* src, DType src_type,
                            int64_t count) {
  const ProfileScope timed(profile(), "add_into");
  require_float("add_into", dst_type);
  require_float("add_into", src_type);
  run_add_into(dst, dst_type, src, src_type, count);
}

void NnPrimitives::sum_rows(const void* x, DType type, int64_t rows, int64_t cols, void* out,
                            DType out_type) {
  const ProfileScope timed(profile(), "sum_rows");
  require_float("sum_rows", type);
  require_float("sum_rows", out_type);
  run_sum_rows(x, type, rows, cols, out, out_type);
}

void NnPrimitives::sum_all(const void* x, DType type, int64_t count, float* out) {
  const ProfileScope timed(profile(), "sum_all");
  require_float("sum_all", type);
  run_sum_all(x, type, count, out);
}

void NnPrimitives::softmax(const void* x, void* y, DType type, int64_t rows, int64_t cols,
                           bool log) {
  const ProfileScope timed(profile(), "softmax");
  require_float("softmax", type);
  run_softmax(x, y, type, rows, cols, log);
}

void NnPrimitives::softmax_backward(const void* y, const void* dy, void* dx, DType type,
                                    int64_t rows, int64_t cols, bool log) {
  const ProfileScope timed(profile(), "softmax_backward");
  require_float("softmax_backward", type);
  run_softmax_backward(y, dy, dx, type, rows, cols, log);
}

void NnPrimitives::cross_entropy(const void* logits, DType type, const void* labels,
                                 DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                                 float* losses) {
  const ProfileScope timed(profile(), "cross_entropy");
  require_float("cross_entropy", type);
  require_indices("cross_entropy", label_type);
  run_cross_entropy(logits, type, labels, label_type, rows, cols, ignore_index, losses);
}

void NnPrimitives::cross_entropy_backward(const void* logits, DType type, const void* labels,
                                          DType label_type, int64_t rows, int64_t cols,
                                          int64_t ignore_index, const float* dloss, float scale,
                                          void* dlogits, int64_t dloss_stride) {
  const ProfileScope timed(profile(), "cross_entropy_backward");
  require_float("cross_entropy_backward", type);
  require_indices("cross_entropy_backward", label_type);
  require_loss_stride("cross_entropy_backward", dloss_stride);
  run_cross_entropy_backward(logits, type, labels, label_type, rows, cols, ignore_index, dloss,
                             scale, dlogits, dloss_stride);
}

void NnPrimitives::cross_entropy_smoothed(const void* logits, DType type, const void* labels,
                                          DType label_type, int64_t rows, int64_t cols,
                                          int64_t ignore_index, const float* class_weight,
                                          float smoothing, float* losses, float* row_weights) {
  const ProfileScope timed(profile(), "cross_entropy_smoothed");
  require_float("cross_entropy_smoothed", type);
  require_indices("cross_entropy_smoothed", label_type);
  if (rows > 0 && cols > 0)
    run_cross_entropy_smoothed(logits, type, labels, label_type, rows, cols, ignore_index,
                               class_weight, smoothing, losses, row_weights);
}

void NnPrimitives::cross_entropy_smoothed_backward(const void* logits, DType type,
                                                   const void* labels, DType label_type,
                                                   int64_t rows, int64_t cols,
                                                   int64_t ignore_index, const float* class_weight,
                                                   float smoothing, const float* dloss,
                                                   void* dlogits, int64_t dloss_stride) {
  const ProfileScope timed(profile(), "cross_entropy_smoothed_backward");
  require_float("cross_entropy_smoothed_backward", type);
  require_indices("cross_entropy_smoothed_backward", label_type);
  require_loss_stride("cross_entropy_smoothed_backward", dloss_stride);
  if (rows > 0 && cols > 0)
    run_cross_entropy_smoothed_backward(logits, type, labels, label_type, rows, cols, ignore_index,
                                        class_weight, smoothing, dloss, dlogits, dloss_stride);
}

void NnPrimitives::layer_norm(const void* x, const void* weight, const void* bias, DType type,
                              int64_t rows, int64_t cols, float eps, void* y, float* mean,
                              float* rstd, bool centered) {
  const ProfileScope timed(profile(), "layer_norm");
  require_float("layer_norm", type);
  run_layer_norm(x, weight, bias, type, rows, cols, eps, y, mean, rstd, centered);
}

void NnPrimitives::layer_norm_backward(const void* x, const void* dy, const void* weight,
                                       DType type, int64_t rows, int64_t cols, const float* mean,
                                       const float* rstd, void* dx, void* dweight, void* dbias,
                                       bool centered) {
  const ProfileScope timed(profile(), "layer_norm_backward");
  require_float("layer_norm_backward", type);
  run_layer_norm_backward(x, dy, weight, type, rows, cols, mean, rstd, dx, dweight, dbias,
                          centered);
}

void NnPrimitives::batch_norm_stats(const void* x, DType type, int64_t n, int64_t channels,
                                    int64_t inner, float momentum, float* mean, float* var,
                                    float* running_mean, float* running_var) {
  const ProfileScope timed(profile(), "batch_norm_stats", dtype_name(type));
  require_float("batch_norm_stats", type);
  run_batch_norm_stats(x, type, n, channels, inner, momentum, mean, var, running_mean, running_var);
}

void NnPrimitives::batch_norm(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                              const float* mean, const float* var, const float* weight,
                              const float* bias, float eps, void* y) {
  const ProfileScope timed(profile(), "batch_norm", dtype_name(type));
  require_float("batch_norm", type);
  run_batch_norm(x, type, n, channels, inner, mean, var, weight, bias, eps, y);
}

void NnPrimitives::batch_norm_backward(const void* x, const void* dy, DType type, int64_t n,
                                       int64_t channels, int64_t inner, const float* mean,
                                       const float* var, const float* weight, float eps,
                                       bool batch_stats, void* dx, float* dweight, float* dbias) {
  const ProfileScope timed(profile(), "batch_norm_backward", dtype_name(type));
  require_float("batch_norm_backward", type);
  run_batch_norm_backward(x, dy, type, n, channels, inner, mean, var, weight, eps, batch_stats, dx,
                          dweight, dbias);
}

void NnPrimitives::gather_rows(const void* table, size_t row_bytes, int64_t table_rows,
                               const void* indices, DType index_type, int64_t count, void* out) {
  const ProfileScope timed(profile(), "gather_rows");
  require_indices("gather_rows", index_type);
  run_gather_rows(table, row_bytes, table_rows, indices, index_type, count, out);
}

void NnPrimitives::scatter_add_rows(const void* src, DType src_type, int64_t cols,
                                    const void* indices, DType index_type, int64_t count,
                                    float* dst, int64_t dst_rows) {
  const ProfileScope timed(profile(), "scatter_add_rows");
  require_float("scatter_add_rows", src_type);
  require_indices("scatter_add_rows", index_type);
  if (count <= 0 || cols <= 0 || dst_rows <= 0) return;  // nothing to add
  run_scatter_add_rows(src, src_type, cols, indices, index_type, count, dst, dst_rows);
}

void NnPrimitives::copy_strided(void* dst, const void* src, size_t elem_size,
                                const StridedCopy& layout) {
  const ProfileScope timed(profile(), "copy_strided");
  require_element_size("copy_strided", elem_size);
  if (layout.ndim < 0 || layout.ndim > AMPX_MAX_DIMS)
    fail(AMPX_ERR_INTERNAL, "copy_strided: ", layout.ndim, " dimensions");
  // An empty copy reaches no backend: the product of the other extents of
  // an empty tensor need not fit in int64, and nothing is to be done.
  for (int32_t k = 0; k < layout.ndim; ++k)
    if (layout.sizes[k] == 0) return;
  run_copy_strided(dst, src, elem_size, layout);
}

void NnPrimitives::dropout(const void* x, void* y, DType type, int64_t count, uint64_t seed,
                           uint64_t offset, uint32_t threshold, float scale) {
  const ProfileScope timed(profile(), "dropout");
  require_float("dropout", type);
  run_dropout(x, y, type, count, seed, offset, threshold, scale);
}

void NnPrimitives::bce_with_logits(const void* logits, const void* targets, DType type,
                                   int64_t count, float* losses, const BceWeights& weights) {
  const ProfileScope timed(profile(), "bce_with_logits");
  require_float("bce_with_logits", type);
  require_periods("bce_with_logits", weights);
  if (count <= 0) return;
  run_bce_with_logits(logits, targets, type, count, losses, weights);
}

void NnPrimitives::bce_with_logits_backward(const void* logits, const void* targets, DType type,
                                            int64_t count, const BceWeights& weights,
                                            const float* dloss, int64_t dloss_stride, float scale,
                                            void* d_logits, void* d_targets) {
  const ProfileScope timed(profile(), "bce_with_logits_backward");
  require_float("bce_with_logits_backward", type);
  require_periods("bce_with_logits_backward", weights);
  require_loss_stride("bce_with_logits_backward", dloss_stride);
  if (count <= 0 || (!d_logits && !d_targets)) return;
  run_bce_with_logits_backward(logits, targets, type, count, weights, dloss, dloss_stride, scale,
                               d_logits, d_targets);
}

void NnPrimitives::mse_loss(const void* input, const void* target, DType type, int64_t count,
                            float* losses) {
  const ProfileScope timed(profile(), "mse_loss");
  require_float("mse_loss", type);
  if (count <= 0) return;
  run_mse_loss(input, target, type, count, losses);
}

void NnPrimitives::mse_loss_backward(const void* input, const void* target, DType type,
                                     int64_t count, const float* dloss, int64_t dloss_stride,
                                     float scale, void* d_input, void* d_target) {
  const ProfileScope timed(profile(), "mse_loss_backward");
  require_float("mse_loss_backward", type);
  require_loss_stride("mse_loss_backward", dloss_stride);
  if (count <= 0 || (!d_input && !d_target)) return;
  run_mse_loss_backward(input, target, type, count, dloss, dloss_stride, scale, d_input,
                        d_target);
}

void NnPrimitives::check_indices(const void* indices, DType type, int64_t count,
                                 const IndexCheck& check, float* valid, int64_t* record) {
  const ProfileScope timed(profile(), "check_indices");
  require_indices("check_indices", type);
  run_check_indices(indices, type, count, check, valid, record);
}

}  // namespace ampx::impl
