// backend_nn.h -- the primitives of the ops (section 11 of ampx.h), a
// backend capability (backend.h): element-wise functions, sums, softmax,
// losses, normalisation, indexing, strided copies and dropout. Their
// per-element math is in kernels/math.
//
// Front doors check the dtypes (AMPX_ERR_DTYPE naming the primitive); the
// ops above have validated shapes.
// Extents are > 0 unless a comment allows 0; statistics are F32 and
// computed in fp32 or wider.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/backend.h"

namespace ampx::impl {

// Element-wise functions of the ops; their math is in kernels/math/activations.h.
// The derivatives of gelu and gelu_tanh are functions of their own for the
// differentiable backward formulas (no op of ampx.h).
enum class UnaryOp {
  Relu,
  Gelu,
  GeluTanh,
  Silu,
  Sigmoid,
  Tanh,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  GeluDerivative,
  GeluTanhDerivative
};
// Equal gives 1 where a == b and 0 elsewhere (NaN equals nothing): the
// tie mask of amax's backward pass, never an op of its own.
enum class BinaryOp { Add, Sub, Mul, Div, Equal };

// Where a strided copy reads and writes: element (i_0, ..., i_{ndim-1}),
// i_k < sizes[k], goes from src[sum i_k src_strides[k]] to dst[sum i_k
// dst_strides[k]] (strides in elements). Transposes, concatenation and
// slicing are all such copies.
struct StridedCopy {
  int32_t ndim = 0;
  int64_t sizes[AMPX_MAX_DIMS] = {};
  int64_t dst_strides[AMPX_MAX_DIMS] = {};
  int64_t src_strides[AMPX_MAX_DIMS] = {};
};

// An element-wise op over an output of `ndim` extents `sizes` (row-major,
// contiguous): output element (i_0, ..., i_{ndim-1}) reads a at
// sum i_k a_strides[k] and b at sum i_k b_strides[k] (strides in elements,
// 0 along a dimension an operand is broadcast over). NumPy broadcasting.
struct BroadcastLayout {
  int32_t ndim = 0;
  int64_t sizes[AMPX_MAX_DIMS] = {};
  int64_t a_strides[AMPX_MAX_DIMS] = {};
  int64_t b_strides[AMPX_MAX_DIMS] = {};
};

// Reductions over chosen dimensions of a contiguous x of `ndim` extents
// `sizes`: output element j (row-major over the kept dimensions, in their
// order) combines the x elements that agree with j on every kept
// dimension, visited in row-major order over the reduced ones. Bit
// `reduced` & (1 << k) marks dimension k as reduced.
enum class DimReduce { Sum, Max };
struct ReduceLayout {
  int32_t ndim = 0;
  int64_t sizes[AMPX_MAX_DIMS] = {};
  uint32_t reduced = 0;
};

// Rotary position embedding of x viewed as [rows, positions, dim] (dim
// even): position t's pairs are rotated by the angles whose cosines and
// sines are cos[t][i], sin[t][i], i < dim / 2 (tables [positions, dim / 2]).
// The pairs are (i, i + dim / 2) (rotate-half, as Hugging Face's LLaMA) or
// (2i, 2i + 1) when interleaved (as Meta's original).
struct RotaryShape {
  int64_t rows = 0, positions = 0, dim = 0;
  bool interleaved = false;
};

// torch's weight and pos_weight of binary cross-entropy, F32 on the device
// (nullptr: none, i.e. 1): element i reads weight[i % weight_period] and
// pos_weight[i % pos_weight_period], so a tensor that repeats over the
// leading dimensions (pos_weight [C], one per class) is read in place.
struct BceWeights {
  const float* weight = nullptr;
  int64_t weight_period = 1;
  const float* pos_weight = nullptr;
  int64_t pos_weight_period = 1;
};

// The ops whose indices NnPrimitives::check_indices checks, named in a finding.
enum IndexCheckOp : int64_t { kCheckCrossEntropyLabels = 1, kCheckEmbeddingIndices = 2 };

// What check_indices looks for, and how its finding is labelled.
struct IndexCheck {
  int64_t limit = 0;        // indices must lie in [0, limit)
  bool has_ignore = false;  // ... unless equal to ignore_index
  int64_t ignore_index = 0;
  int64_t op = 0;    // IndexCheckOp, recorded with a finding
  int64_t call = 0;  // the op's call number, recorded with a finding
};

// The fields of the device record check_indices fills (int64 each).
enum IndexRecordField : int {
  kRecordPosition,
  kRecordValue,
  kRecordLimit,
  kRecordOp,
  kRecordCall,
  kRecordFields
};

class NnPrimitives : public BackendCapability {
 public:
  static constexpr Capability kId = Capability::Nn;

  // y = f(x), x and y of one floating type (in place allowed).
  void unary(UnaryOp op, const void* x, void* y, DType type, int64_t count);
  // dx = dy * f'(x), where x is the forward input.
  void unary_backward(UnaryOp op, const void* x, const void* dy, void* dx, DType type,
                      int64_t count);
  // out[i] = a[i] op b[i % b_count]; b_count divides count (b_count ==
  // count: no broadcast). One floating type throughout.
  void binary(BinaryOp op, const void* a, const void* b, void* out, DType type, int64_t count,
              int64_t b_count);
  // out = a op b with the broadcasting of `layout`; sizes > 0. One floating
  // type throughout; out does not overlap a or b.
  void binary_broadcast(BinaryOp op, const void* a, const void* b, void* out, DType type,
                        const BroadcastLayout& layout);
  // out = the sum (accumulated in double, in the layout's order) or the
  // maximum (NaN if any element is NaN, as torch.amax) of x over the
  // reduced dimensions; sizes > 0. x floating, out of any floating type.
  void reduce_dims(DimReduce op, const void* x, DType type, const ReduceLayout& layout, void* out,
                   DType out_type);
  // out = value where mask is set (math::mask_set; any dtype, read through
  // layout.b_strides), else x (contiguous: layout.a_strides); sizes > 0.
  // dx of the op is the same call on dy with value 0.
  void masked_fill(const void* x, DType type, const void* mask, DType mask_type, float value,
                   void* out, const BroadcastLayout& layout);
  // y = math::pow_value(x, exponent) and its gradient math::pow_grad.
  void pow_scalar(const void* x, void* y, DType type, int64_t count, float exponent);
  void pow_scalar_backward(const void* x, const void* dy, void* dx, DType type, int64_t count,
                           float exponent);
  // out = x rotated as `shape` says (math::rotate; inverse: the backward
  // pass). x and out of `type`, the tables of any floating table_type.
  void rotary(const void* x, DType type, const void* cos, const void* sin, DType table_type,
              void* out, const RotaryShape& shape, bool inverse);
  // y = x * scale + shift.
  void affine(const void* x, void* y, DType type, int64_t count, float scale, float shift);
  // dst += src, element-wise; the floating types may differ.
  void add_into(void* dst, DType dst_type, const void* src, DType src_type, int64_t count);
  // out[c] = sum over r of x[r * cols + c], accumulated in fp32 at least.
  void sum_rows(const void* x, DType type, int64_t rows, int64_t cols, void* out, DType out_type);
  // *out = sum of all elements (device F32 scalar); count may be 0.
  void sum_all(const void* x, DType type, int64_t count, float* out);
  // Softmax (or log-softmax) of each row of a rows x cols matrix.
  void softmax(const void* x, void* y, DType type, int64_t rows, int64_t cols, bool log);
  // dx from the forward output y and dy.
  void softmax_backward(const void* y, const void* dy, void* dx, DType type, int64_t rows,
                        int64_t cols, bool log);
  // Per-row cross-entropy losses[r] = logsumexp(x_r) - x_r[label_r] (0 where
  // label_r == ignore_index); labels are I32 or I64 and already checked.
  void cross_entropy(const void* logits, DType type, const void* labels, DType label_type,
                     int64_t rows, int64_t cols, int64_t ignore_index, float* losses);
  // dlogits_r = (softmax(x_r) - onehot(label_r)) * dloss[r * dloss_stride] *
  // scale (0 rows where ignored); dloss is on the device, F32: one scalar
  // for every row (stride 0, a reduced loss) or one per row (stride 1).
  void cross_entropy_backward(const void* logits, DType type, const void* labels, DType label_type,
                              int64_t rows, int64_t cols, int64_t ignore_index, const float* dloss,
                              float scale, void* dlogits, int64_t dloss_stride = 0);

  // Cross-entropy with label smoothing `smoothing` and class weights
  // (F32 [cols], nullptr: 1), math::smoothed_target: losses[r] = sum_c q_c
  // (lse_r - x_rc) and row_weights[r] = w[label_r] (0 for both where
  // label_r == ignore_index); labels already checked.
  void cross_entropy_smoothed(const void* logits, DType type, const void* labels,
                              DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                              const float* class_weight, float smoothing, float* losses,
                              float* row_weights);
  // dlogits_r = (p_r W_r - q_r) * dloss[r * dloss_stride] (0 rows where
  // ignored; dloss as in cross_entropy_backward).
  void cross_entropy_smoothed_backward(const void* logits, DType type, const void* labels,
                                       DType label_type, int64_t rows, int64_t cols,
                                       int64_t ignore_index, const float* class_weight,
                                       float smoothing, const float* dloss, void* dlogits,
                                       int64_t dloss_stride = 0);

  // Layer norm of each row of a rows x cols matrix: y = (x - mean) * rstd *
  // weight + bias, with the row's mean and rstd = 1 / sqrt(biased variance
  // + eps) also written to mean[rows] and rstd[rows]. weight and bias
  // ([cols], of `type`) may each be nullptr (1 and 0). Not centered: RMS
  // norm, the mean taken as 0 (mean[] holds zeros, rstd = 1 / sqrt(mean of
  // squares + eps)).
  void layer_norm(const void* x, const void* weight, const void* bias, DType type, int64_t rows,
                  int64_t cols, float eps, void* y, float* mean, float* rstd,
                  bool centered = true);
  // Its gradients from the forward's x, mean and rstd: dx, and dweight and
  // dbias ([cols], sums over the rows), all of `type`; an output that is
  // nullptr is not computed.
  void layer_norm_backward(const void* x, const void* dy, const void* weight, DType type,
                           int64_t rows, int64_t cols, const float* mean, const float* rstd,
                           void* dx, void* dweight, void* dbias, bool centered = true);
  // Batch-norm statistics of x viewed as [n, channels, inner]: each
  // channel's mean and biased variance over its n * inner elements. When
  // running_mean and running_var are not nullptr they are updated as torch
  // does, r = momentum * batch + (1 - momentum) * r, with the unbiased
  // variance for r_var (then n * inner > 1).
  void batch_norm_stats(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                        float momentum, float* mean, float* var, float* running_mean,
                        float* running_var);
  // y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c] on the same
  // view; x and y of `type`, the rest F32; weight and bias may be nullptr.
  void batch_norm(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                  const float* mean, const float* var, const float* weight, const float* bias,
                  float eps, void* y);
  // Its gradients: dx of `type`, dweight and dbias F32 [channels] (nullptr:
  // not computed). batch_stats: mean and var are this x's own statistics,
  // so the gradient also flows through them; else they are constants (the
  // running statistics of evaluation).
  void batch_norm_backward(const void* x, const void* dy, DType type, int64_t n, int64_t channels,
                           int64_t inner, const float* mean, const float* var, const float* weight,
                           float eps, bool batch_stats, void* dx, float* dweight, float* dbias);
  // out row i = table row indices[i] for i < count, rows of row_bytes bytes,
  // or zero bytes where indices[i] (I32 or I64) is outside [0, table_rows):
  // the op reports such an index (check_indices), possibly after this has
  // run, so it must never read outside the table.
  void gather_rows(const void* table, size_t row_bytes, int64_t table_rows, const void* indices,
                   DType index_type, int64_t count, void* out);
  // dst row indices[i] += src row i for i < count, rows of `cols` elements
  // (src floating, dst F32). Deterministic: every dst row receives its
  // additions in the order of i, whatever the device's parallelism. An
  // index outside [0, dst_rows) adds nothing (see gather_rows). Any extent
  // may be 0 (nothing to add).
  void scatter_add_rows(const void* src, DType src_type, int64_t cols, const void* indices,
                        DType index_type, int64_t count, float* dst, int64_t dst_rows);
  // The copy `layout` describes, of elements of elem_size bytes (1, 2, 4 or
  // 8); any extent may be 0. dst and src do not overlap.
  void copy_strided(void* dst, const void* src, size_t elem_size, const StridedCopy& layout);
  // y[i] = math::dropout_value(x[i], word i, threshold, scale), where word i
  // is lane i % 4 of math::dropout_block(math::dropout_key(seed), offset,
  // i / 4) (kernels/math/random.h). In place allowed. The backward pass is
  // the same call on dy.
  void dropout(const void* x, void* y, DType type, int64_t count, uint64_t seed, uint64_t offset,
               uint32_t threshold, float scale);
  // losses[i] = w_i math::bce_with_logits_loss(logits[i], targets[i], p_i),
  // w_i and p_i of `weights`; one floating type in, F32 out.
  void bce_with_logits(const void* logits, const void* targets, DType type, int64_t count,
                       float* losses, const BceWeights& weights = BceWeights());
  // Its gradients, math::bce_with_logits_grads with g = dloss[i *
  // dloss_stride] * scale * w_i (dloss as in cross_entropy_backward), of
  // `type`, rounded once; d_logits or d_targets may be nullptr (not
  // computed).
  void bce_with_logits_backward(const void* logits, const void* targets, DType type,
                                int64_t count, const BceWeights& weights, const float* dloss,
                                int64_t dloss_stride, float scale, void* d_logits,
                                void* d_targets);
  // losses[i] = math::squared_error(input[i], target[i]): one floating type
  // in, F32 out, the difference and square in fp32.
  void mse_loss(const void* input, const void* target, DType type, int64_t count, float* losses);
  // d_input[i] = math::squared_error_grad(input[i], target[i], g) with g =
  // dloss[i * dloss_stride] * scale, and d_target[i] its negative, of
  // `type`, rounded once; either may be nullptr (not computed).
  void mse_loss_backward(const void* input, const void* target, DType type, int64_t count,
                         const float* dloss, int64_t dloss_stride, float scale, void* d_input,
                         void* d_target);
  // Checks indices (I32 or I64) where they live, so that ops need no round
  // trip to the host: *valid (F32; skipped when nullptr) = how many of the
  // count indices are not check.ignore_index (with check.has_ignore), and,
  // when record[kRecordPosition] is -1 and some index is neither ignored nor
  // in [0, check.limit), record (kRecordFields device int64s) = the
  // position and value of the first such, check.limit, check.op and
  // check.call. A record already set is kept: it holds the earliest finding
  // until the context reads and clears it. count may be 0.
  void check_indices(const void* indices, DType type, int64_t count, const IndexCheck& check,
                     float* valid, int64_t* record);

 protected:
  virtual void run_unary(UnaryOp op, const void* x, void* y, DType type, int64_t count) = 0;
  virtual void run_unary_backward(UnaryOp op, const void* x, const void* dy, void* dx, DType type,
                                  int64_t count) = 0;
  virtual void run_binary(BinaryOp op, const void* a, const void* b, void* out, DType type,
                          int64_t count, int64_t b_count) = 0;
  virtual void run_binary_broadcast(BinaryOp op, const void* a, const void* b, void* out,
                                    DType type, const BroadcastLayout& layout) = 0;
  virtual void run_reduce_dims(DimReduce op, const void* x, DType type, const ReduceLayout& layout,
                               void* out, DType out_type) = 0;
  virtual void run_masked_fill(const void* x, DType type, const void* mask, DType mask_type,
                               float value, void* out, const BroadcastLayout& layout) = 0;
  virtual void run_pow_scalar(const void* x, void* y, DType type, int64_t count,
                              float exponent) = 0;
  virtual void run_pow_scalar_backward(const void* x, const void* dy, void* dx, DType type,
                                       int64_t count, float exponent) = 0;
  virtual void run_rotary(const void* x, DType type, const void* cos, const void* sin,
                          DType table_type, void* out, const RotaryShape& shape,
                          bool inverse) = 0;
  virtual void run_affine(const void* x, void* y, DType type, int64_t count, float scale,
                          float shift) = 0;
  virtual void run_add_into(void* dst, DType dst_type, const void* src, DType src_type,
                            int64_t count) = 0;
  virtual void run_sum_rows(const void* x, DType type, int64_t rows, int64_t cols, void* out,
                            DType out_type) = 0;
  virtual void run_sum_all(const void* x, DType type, int64_t count, float* out) = 0;
  virtual void run_softmax(const void* x, void* y, DType type, int64_t rows, int64_t cols,
                           bool log) = 0;
  virtual void run_softmax_backward(const void* y, const void* dy, void* dx, DType type,
                                    int64_t rows, int64_t cols, bool log) = 0;
  virtual void run_cross_entropy(const void* logits, DType type, const void* labels,
                                 DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                                 float* losses) = 0;
  virtual void run_cross_entropy_backward(const void* logits, DType type, const void* labels,
                                          DType label_type, int64_t rows, int64_t cols,
                                          int64_t ignore_index, const float* dloss, float scale,
                                          void* dlogits, int64_t dloss_stride) = 0;
  virtual void run_cross_entropy_smoothed(const void* logits, DType type, const void* labels,
                                          DType label_type, int64_t rows, int64_t cols,
                                          int64_t ignore_index, const float* class_weight,
                                          float smoothing, float* losses, float* row_weights) = 0;
  virtual void run_cross_entropy_smoothed_backward(const void* logits, DType type,
                                                   const void* labels, DType label_type,
                                                   int64_t rows, int64_t cols,
                                                   int64_t ignore_index,
                                                   const float* class_weight, float smoothing,
                                                   const float* dloss, void* dlogits,
                                                   int64_t dloss_stride) = 0;
  virtual void run_layer_norm(const void* x, const void* weight, const void* bias, DType type,
                              int64_t rows, int64_t cols, float eps, void* y, float* mean,
                              float* rstd, bool centered) = 0;
  virtual void run_layer_norm_backward(const void* x, const void* dy, const void* weight,
                                       DType type, int64_t rows, int64_t cols, const float* mean,
                                       const float* rstd, void* dx, void* dweight, void* dbias,
                                       bool centered) = 0;
  virtual void run_batch_norm_stats(const void* x, DType type, int64_t n, int64_t channels,
                                    int64_t inner, float momentum, float* mean, float* var,
                                    float* running_mean, float* running_var) = 0;
  virtual void run_batch_norm(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                              const float* mean, const float* var, const float* weight,
                              const float* bias, float eps, void* y) = 0;
  virtual void run_batch_norm_backward(const void* x, const void* dy, DType type, int64_t n,
                                       int64_t channels, int64_t inner, const float* mean,
                                       const float* var, const float* weight, float eps,
                                       bool batch_stats, void* dx, float* dweight,
                                       float* dbias) = 0;
  virtual void run_gather_rows(const void* table, size_t row_bytes, int64_t table_rows,
                               const void* indices, DType index_type, int64_t count, void* out) = 0;
  virtual void run_scatter_add_rows(const void* src, DType src_type, int64_t cols,
                                    const void* indices, DType index_type, int64_t count,
                                    float* dst, int64_t dst_rows) = 0;
  virtual void run_copy_strided(void* dst, const void* src, size_t elem_size,
                                const StridedCopy& layout) = 0;
  virtual void run_dropout(const void* x, void* y, DType type, int64_t count, uint64_t seed,
                           uint64_t offset, uint32_t threshold, float scale) = 0;
  virtual void run_bce_with_logits(const void* logits, const void* targets, DType type,
                                   int64_t count, float* losses, const BceWeights& weights) = 0;
  virtual void run_bce_with_logits_backward(const void* logits, const void* targets, DType type,
                                            int64_t count, const BceWeights& weights,
                                            const float* dloss, int64_t dloss_stride, float scale,
                                            void* d_logits, void* d_targets) = 0;
  virtual void run_mse_loss(const void* input, const void* target, DType type, int64_t count,
                            float* losses) = 0;
  virtual void run_mse_loss_backward(const void* input, const void* target, DType type,
                                     int64_t count, const float* dloss, int64_t dloss_stride,
                                     float scale, void* d_input, void* d_target) = 0;
  virtual void run_check_indices(const void* indices, DType type, int64_t count,
                                 const IndexCheck& check, float* valid, int64_t* record) = 0;
};

}  // namespace ampx::impl
