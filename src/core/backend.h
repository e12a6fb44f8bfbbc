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
};

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
