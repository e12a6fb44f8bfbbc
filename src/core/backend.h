// backend.h -- the small interface every device backend implements.
//
// Core code (tensors, ops, optimizers) calls only these primitives; it never
// names CUDA or any other device API. Adding a backend means implementing
// this interface and registering it in backend_registry.cpp -- no op changes.
//
// Conventions for every primitive:
//  - pointers are device pointers of this backend (host pointers for the CPU);
//  - work may be enqueued asynchronously on the backend's stream unless the
//    comment says the call completes before returning;
//  - failures are reported by throwing ampx::Error (see error.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <vector>

#include "ampx/ampx.h"
#include "core/dtype.h"
#include "math/amp.h"
#include "math/optim.h"

namespace ampx {

// Raw memory of one device. Implementations need not be thread-safe: the
// context serialises calls.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nullptr when the memory cannot be had (never throws for that).
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  // Bytes held from the system, including any cache.
  virtual uint64_t reserved_bytes() const = 0;
};

// One tensor of a multi-tensor operation: `count` elements of `dtype` at
// `data` (device memory). Multi-tensor primitives process a whole list in
// one pass (one launch on a GPU), never one call per tensor.
struct TensorSpan {
  void* data;
  DType dtype;
  int64_t count;
};

enum class NormType { L2, Inf };

// One parameter of an optimizer step, with its fp32 state.
struct OptimParam {
  void* param;             // the model's weights, of param_dtype
  DType param_dtype;
  float* master;           // fp32 master copy; nullptr when param_dtype is F32
  const void* grad;        // gradient (already unscaled), of grad_dtype
  DType grad_dtype;
  float* state0;           // SGD momentum buffer / Adam exp_avg; nullptr if unused
  float* state1;           // Adam exp_avg_sq
  float* state2;           // Adam max_exp_avg_sq (amsgrad); nullptr otherwise
  const int64_t* step;     // device: steps taken by this parameter, this one included
  int64_t count;
  int32_t group;
};

// Device scalars an optimizer step reads; none is read back to the host.
struct StepScalars {
  const float* found_inf;     // skip the whole step when *found_inf != 0; may be nullptr
  const float* lr;            // per param group
  const float* weight_decay;  // per param group
};

// Element-wise functions of the ops (section 11 of ampx.h); their math is
// in kernels/math/activations.h.
enum class UnaryOp { Relu, Gelu, GeluTanh, Silu, Sigmoid, Tanh };
enum class BinaryOp { Add, Sub, Mul };

// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b < batch, row-major,
// accumulated in fp32 at least. op(A) is m x k (A is k x m when trans_a),
// op(B) is k x n (B is n x k when trans_b), C is m x n. A and B share a
// floating type; C may have that type or F32. beta == 0 ignores C's old
// contents (NaN included).
//
// Bias epilogue (a single product, batch == 1): with bias ([n], of c_type)
// not nullptr, C[i][j] = alpha * (AB)[i][j] + beta * C[i][j] + bias[j] in
// fp32 before C's one rounding -- cuBLASLt's BIAS epilogue, so a linear
// layer's bias costs no pass of its own over C.
struct GemmArgs {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  const void* a = nullptr;
  bool trans_a = false;
  int64_t a_batch_stride = 0;  // elements
  const void* b = nullptr;
  bool trans_b = false;
  int64_t b_batch_stride = 0;
  DType ab_type = DType::F32;
  void* c = nullptr;
  DType c_type = DType::F32;
  int64_t c_batch_stride = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* bias = nullptr;
};

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

// The ops whose indices Backend::check_indices checks, named in a finding.
enum IndexCheckOp : int64_t { kCheckCrossEntropyLabels = 1, kCheckEmbeddingIndices = 2 };

// What Backend::check_indices looks for, and how its finding is labelled.
struct IndexCheck {
  int64_t limit = 0;          // indices must lie in [0, limit)
  bool has_ignore = false;    // ... unless equal to ignore_index
  int64_t ignore_index = 0;
  int64_t op = 0;             // IndexCheckOp, recorded with a finding
  int64_t call = 0;           // the op's call number, recorded with a finding
};

// The fields of the device record check_indices fills (int64 each).
enum IndexRecordField : int { kRecordPosition, kRecordValue, kRecordLimit, kRecordOp, kRecordCall,
                              kRecordFields };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual ampx_device_type device_type() const = 0;
  virtual int32_t device_index() const = 0;
  // Alignment every allocation of this device gets (a power of two).
  virtual size_t alignment() const = 0;

  // ampx's own allocator for this device (used when the host gives no hooks).
  virtual std::unique_ptr<Allocator> make_default_allocator() = 0;

  // Throws AMPX_ERR_DEVICE when `ptr` is not memory this backend's device can
  // address directly (used to validate wrapped and imported memory).
  virtual void check_device_pointer(const void* ptr, const char* what) = 0;

  // Copies; the host variants complete before returning.
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;

  // Writes `count` elements of `elem_size` bytes (1, 2, 4 or 8), each holding
  // the low elem_size bytes of `pattern` (little endian).
  virtual void fill(void* dst, size_t elem_size, uint64_t pattern, int64_t count) = 0;

  // dst[i] = convert(src[i]) for i < count, with the conversions of
  // kernels/math/convert.h. dst and src may be equal only when the types are.
  virtual void convert(void* dst, DType dst_type, const void* src, DType src_type,
                       int64_t count) = 0;

  // Waits for all enqueued work; reports asynchronous device failures.
  virtual void synchronize() = 0;

  // ---- multi-tensor primitives of mixed-precision training --------------
  // Scalars passed by pointer live in this backend's device memory.

  // outs[i] = ins[i] * m with m = reciprocal ? reciprocal_scale(*factor)
  // : *factor, converted to outs[i].dtype (outs[i] may be ins[i] itself).
  // `outs` may be empty: then nothing is written except found_inf. When
  // found_inf is not null, *found_inf is set to 1 if any ins[i] * m is not
  // finite (and never cleared).
  virtual void multi_tensor_scale(const std::vector<TensorSpan>& ins,
                                  const std::vector<TensorSpan>& outs, const float* factor,
                                  bool reciprocal, float* found_inf) = 0;

  // *out = the norm of all elements of all tensors taken together (L2:
  // sqrt of the sum of squares, accumulated in at least fp32 with fp32
  // inputs; Inf: max |x|). NaN/inf elements make the result NaN/inf.
  virtual void multi_tensor_norm(const std::vector<TensorSpan>& tensors, NormType type,
                                 float* out) = 0;

  // *coef = clip_coefficient(*total_norm, max_norm) (math/amp.h).
  virtual void clip_coefficient(const float* total_norm, float max_norm, float* coef) = 0;

  // Every element x of every tensor becomes min(max(x, -limit), limit).
  virtual void multi_tensor_clamp(const std::vector<TensorSpan>& tensors, float limit) = 0;

  // counts[2*i] = NaN elements of tensors[i], counts[2*i+1] = infinities.
  virtual void multi_tensor_count_nonfinite(const std::vector<TensorSpan>& tensors,
                                            int64_t* counts) = 0;

  // One scaler update (math::scaler_update, or math::scaler_force when
  // `force`), with found_inf the OR of *found_infs[i] != 0.
  virtual void scaler_update(math::ScalerState* state, const std::vector<const float*>& found_infs,
                             const math::ScalerConfig& config, bool force, float forced_scale) = 0;

  // steps[i] += 1 for i < count, unless *found_inf != 0 (found_inf may be
  // nullptr: always).
  virtual void increment_steps(int64_t* steps, int64_t count, const float* found_inf) = 0;

  // One optimizer step over every parameter (math/optim.h), skipped entirely
  // when *scalars.found_inf != 0. Reads param->step after increment_steps.
  // F16/BF16 parameters are rewritten from their updated master.
  virtual void sgd_step(const std::vector<OptimParam>& params, const math::SgdConfig& config,
                        const StepScalars& scalars) = 0;
  virtual void adam_step(const std::vector<OptimParam>& params, const math::AdamConfig& config,
                         const StepScalars& scalars) = 0;

  // ---- primitives of the ops (autograd issue) ----------------------------
  // A backend that lacks one reports AMPX_ERR_NOT_SUPPORTED through these
  // defaults, so ops fail cleanly on it until it is ported.

  // y = f(x), x and y of one floating type (in place allowed).
  virtual void unary(UnaryOp op, const void* x, void* y, DType type, int64_t count);
  // dx = dy * f'(x), where x is the forward input.
  virtual void unary_backward(UnaryOp op, const void* x, const void* dy, void* dx, DType type,
                              int64_t count);
  // out[i] = a[i] op b[i % b_count]; b_count divides count (b_count ==
  // count: no broadcast). One floating type throughout.
  virtual void binary(BinaryOp op, const void* a, const void* b, void* out, DType type,
                      int64_t count, int64_t b_count);
  // y = x * scale + shift.
  virtual void affine(const void* x, void* y, DType type, int64_t count, float scale, float shift);
  // dst += src, element-wise; the floating types may differ.
  virtual void add_into(void* dst, DType dst_type, const void* src, DType src_type, int64_t count);
  // out[c] = sum over r of x[r * cols + c], accumulated in fp32 at least.
  virtual void sum_rows(const void* x, DType type, int64_t rows, int64_t cols, void* out,
                        DType out_type);
  // *out = sum of all elements (device F32 scalar).
  virtual void sum_all(const void* x, DType type, int64_t count, float* out);
  // Softmax (or log-softmax) of each row of a rows x cols matrix.
  virtual void softmax(const void* x, void* y, DType type, int64_t rows, int64_t cols, bool log);
  // dx from the forward output y and dy.
  virtual void softmax_backward(const void* y, const void* dy, void* dx, DType type, int64_t rows,
                                int64_t cols, bool log);
  // Per-row cross-entropy losses[r] = logsumexp(x_r) - x_r[label_r] (0 where
  // label_r == ignore_index); labels are I32 or I64 and already validated.
  virtual void cross_entropy(const void* logits, DType type, const void* labels,
                             DType label_type, int64_t rows, int64_t cols, int64_t ignore_index,
                             float* losses);
  // dlogits_r = (softmax(x_r) - onehot(label_r)) * (*dloss) * scale (0 rows
  // where ignored); dloss is a device F32 scalar.
  virtual void cross_entropy_backward(const void* logits, DType type, const void* labels,
                                      DType label_type, int64_t rows, int64_t cols,
                                      int64_t ignore_index, const float* dloss, float scale,
                                      void* dlogits);
  virtual void gemm(const GemmArgs& args);

  // ---- normalisation, indexing, dropout, losses ------------------------------
  // Same rule: defaults refuse with AMPX_ERR_NOT_SUPPORTED. Extents are > 0
  // unless a comment allows 0; statistics are F32 and computed in fp32 or
  // wider.

  // Layer norm of each row of a rows x cols matrix: y = (x - mean) * rstd *
  // weight + bias, with the row's mean and rstd = 1 / sqrt(biased variance
  // + eps) also written to mean[rows] and rstd[rows]. weight and bias
  // ([cols], of `type`) may each be nullptr (1 and 0).
  virtual void layer_norm(const void* x, const void* weight, const void* bias, DType type,
                          int64_t rows, int64_t cols, float eps, void* y, float* mean, float* rstd);
  // Its gradients from the forward's x, mean and rstd: dx, and dweight and
  // dbias ([cols], sums over the rows), all of `type`; an output that is
  // nullptr is not computed.
  virtual void layer_norm_backward(const void* x, const void* dy, const void* weight, DType type,
                                   int64_t rows, int64_t cols, const float* mean, const float* rstd,
                                   void* dx, void* dweight, void* dbias);
  // Batch-norm statistics of x viewed as [n, channels, inner]: each
  // channel's mean and biased variance over its n * inner elements. When
  // running_mean and running_var are not nullptr they are updated as torch
  // does, r = momentum * batch + (1 - momentum) * r, with the unbiased
  // variance for r_var (then n * inner > 1).
  virtual void batch_norm_stats(const void* x, DType type, int64_t n, int64_t channels,
                                int64_t inner, float momentum, float* mean, float* var,
                                float* running_mean, float* running_var);
  // y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c] on the same
  // view; x and y of `type`, the rest F32; weight and bias may be nullptr.
  virtual void batch_norm(const void* x, DType type, int64_t n, int64_t channels, int64_t inner,
                          const float* mean, const float* var, const float* weight,
                          const float* bias, float eps, void* y);
  // Its gradients: dx of `type`, dweight and dbias F32 [channels] (nullptr:
  // not computed). batch_stats: mean and var are this x's own statistics,
  // so the gradient also flows through them; else they are constants (the
  // running statistics of evaluation).
  virtual void batch_norm_backward(const void* x, const void* dy, DType type, int64_t n,
                                   int64_t channels, int64_t inner, const float* mean,
                                   const float* var, const float* weight, float eps,
                                   bool batch_stats, void* dx, float* dweight, float* dbias);
  // out row i = table row indices[i] for i < count, rows of row_bytes bytes,
  // or zero bytes where indices[i] (I32 or I64) is outside [0, table_rows):
  // the op reports such an index (check_indices), possibly after this has
  // run, so it must never read outside the table.
  virtual void gather_rows(const void* table, size_t row_bytes, int64_t table_rows,
                           const void* indices, DType index_type, int64_t count, void* out);
  // dst row indices[i] += src row i for i < count, rows of `cols` elements
  // (src floating, dst F32). Deterministic: every dst row receives its
  // additions in the order of i, whatever the device's parallelism. An
  // index outside [0, dst_rows) adds nothing (see gather_rows).
  virtual void scatter_add_rows(const void* src, DType src_type, int64_t cols, const void* indices,
                                DType index_type, int64_t count, float* dst, int64_t dst_rows);
  // The copy `layout` describes, of elements of elem_size bytes (1, 2, 4 or
  // 8); any extent may be 0. dst and src do not overlap.
  virtual void copy_strided(void* dst, const void* src, size_t elem_size, const StridedCopy& layout);
  // y[i] = math::dropout_value(x[i], word i, threshold, scale), where word i
  // is lane i % 4 of math::dropout_block(math::dropout_key(seed), offset,
  // i / 4) (kernels/math/random.h). In place allowed. The backward pass is
  // the same call on dy.
  virtual void dropout(const void* x, void* y, DType type, int64_t count, uint64_t seed,
                       uint64_t offset, uint32_t threshold, float scale);
  // losses[i] = math::bce_with_logits_loss(logits[i], targets[i]), one
  // floating type in, F32 out.
  virtual void bce_with_logits(const void* logits, const void* targets, DType type, int64_t count,
                               float* losses);
  // Checks indices (I32 or I64) where they live, so that ops need no round
  // trip to the host: *valid (F32; skipped when nullptr) = how many of the
  // count indices are not check.ignore_index (with check.has_ignore), and,
  // when record[kRecordPosition] is -1 and some index is neither ignored nor
  // in [0, check.limit), record (kRecordFields device int64s) = the
  // position and value of the first such, check.limit, check.op and
  // check.call. A record already set is kept: it holds the earliest finding
  // until the context reads and clears it. count may be 0.
  virtual void check_indices(const void* indices, DType type, int64_t count,
                             const IndexCheck& check, float* valid, int64_t* record);

};

struct BackendOptions {
  ampx_device_type device_type = AMPX_DEVICE_CPU;
  int32_t device_index = 0;
  int32_t num_threads = 0;
  void* cuda_stream = nullptr;
};

// Creates the backend the options ask for; throws AMPX_ERR_NO_DEVICE when it
// is not built in or the device does not exist.
std::unique_ptr<Backend> create_backend(const BackendOptions& options);

// Number of usable CUDA devices (0 without the CUDA backend).
int32_t cuda_device_count();

}  // namespace ampx
