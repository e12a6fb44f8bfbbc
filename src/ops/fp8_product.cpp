// fp8_product.cpp -- linear and matmul as FP8 products (fp8_product.h).
//
// One shape covers both: C [m, n] = A [m, k] op(B), where B is the weight,
// stored [n, k] and used transposed (linear: x W^T) or stored [k, n]
// (matmul). Forward quantizes A and B with their slots' scales (E4M3) and
// multiplies them with their inverse scales, fp32 sums, C in the policy's
// dtype (bias added in fp32 by the GEMM). Backward quantizes dC with its
// slot's scale (E5M2 under HYBRID) and runs both gradient products in FP8:
//   dA [m, k] = dC op(B)^T        dB = dC^T A (B [n, k]) or A^T dC (B [k, n])
// A device whose FP8 GEMM takes only cuBLASLt's TN layout (our A as
// stored, B transposed) needs some operands transposed: those copies come
// from the quantization itself (cast and transpose in one pass), made
// only for the products that will run. Every other backend multiplies the
// stored operands with transposes.
//
// The inverse scales a product used are copied (four bytes each) when the
// operands are quantized, so backward dequantizes with the scales of the
// very bytes it reads, whatever the recipe did in between (current
// scaling rescales a weight at each use).
#include "ops/fp8_product.h"

#include <string>
#include <utility>

#include "autograd/tape.h"
#include "core/backend_fp8.h"
#include "core/error.h"
#include "fp8/recipe.h"
#include "ops/formula.h"
#include "ops/op_util.h"

namespace ampx::impl {
namespace {

struct ProductShape {
  int64_t m = 0, n = 0, k = 0;
  bool b_transposed = false;  // B stored [n, k] (linear's weight)
};

// Whether `g` multiplies stored operands with transposes (the CPU), rather
// than only cuBLASLt's TN layout.
bool any_layout(const Fp8GemmPrimitives& g) {
  Fp8GemmArgs probe;
  probe.m = probe.n = probe.k = 16;
  probe.trans_a = true;
  return g.supports(probe, nullptr);
}

Fp8GemmArgs gemm_args(int64_t m, int64_t n, int64_t k, DType a_type, bool trans_a, DType b_type,
                      bool trans_b, DType d_type) {
  Fp8GemmArgs f;
  f.m = m, f.n = n, f.k = k;
  f.a_type = a_type, f.trans_a = trans_a;
  f.b_type = b_type, f.trans_b = trans_b;
  f.d_type = d_type;
  return f;
}

// The three products (forward, and the gradients that will be needed) in
// the layouts they will run in: can the device take them? *why when not.
bool products_supported(const Fp8GemmPrimitives& g, const Fp8Recipe& r, const ProductShape& s,
                        bool tn, DType out_type, const DeviceTensor& a, const DeviceTensor& b,
                        const void* bias, std::string* why) {
  const DType a_f = r.format_of(Fp8Role::Forward), b_f = a_f;
  const DType d_f = r.format_of(Fp8Role::Backward);
  Fp8GemmArgs forward = gemm_args(s.m, s.n, s.k, a_f, false, b_f, tn || s.b_transposed, out_type);
  forward.bias = bias;
  if (!g.supports(forward, why)) return false;
  const Fp8GemmArgs dgrad =
      gemm_args(s.m, s.k, s.n, d_f, false, b_f, tn || !s.b_transposed, a.dtype);
  if (a.requires_grad && !g.supports(dgrad, why)) return false;
  Fp8GemmArgs wgrad = s.b_transposed ? gemm_args(s.n, s.k, s.m, d_f, !tn, a_f, tn, b.dtype)
                                     : gemm_args(s.k, s.n, s.m, a_f, !tn, d_f, tn, b.dtype);
  return !b.requires_grad || g.supports(wgrad, why);
}

// A device copy of a slot's inverse scale.
TensorRef snapshot(DeviceContext& ctx, const float* scale_inv) {
  TensorRef copy = new_tensor(ctx, DType::F32, vector_shape(1));
  ctx.backend().copy(copy->data(), scale_inv, sizeof(float));
  return copy;
}

Shape matrix(int64_t rows, int64_t cols) {
  Shape s;
  s.ndim = 2;
  s.dims[0] = rows, s.dims[1] = cols;
  return s;
}

class Fp8ProductNode final : public Node {
 public:
  const char* op = "";
  ProductShape s;
  bool tn = false;
  // Which gradients the forward prepared for (the transposed copies TN
  // needs were kept for those only): decided once, there, and never from
  // requires_grad as it is at backward (the program may have changed it).
  bool need_da = false, need_db = false;
  Fp8Recipe* recipe = nullptr;  // retained
  Fp8Recipe::GemmSlots slots{};
  TensorRef a_q, a_t, b_q, b_t, a_scale_inv, b_scale_inv;
  Activation activation = Activation::None;
  TensorRef activation_input;  // as LinearNode keeps it

  ~Fp8ProductNode() override {
    if (recipe) recipe->release();
  }
  const char* name() const override { return op; }
  // The FP8 backward reads the quantized copies; the differentiable one
  // (backward_graph) reads the operands themselves.
  bool reads_input(size_t i) const override { return i < 2; }

  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& a = *inputs[0];
    DeviceTensor& b = *inputs[1];
    DeviceTensor* bias = inputs[2].get();
    TensorRef dc = gradient_before_activation(ctx, grads);
    Fp8GemmPrimitives& g = ctx.backend().require<Fp8GemmPrimitives>(op);
    const DType d_f = recipe->format(slots.grad_output);
    TensorRef dc_q, dc_t;
    if (need_da || (need_db && !tn)) dc_q = new_tensor(ctx, d_f, matrix(s.m, s.n));
    if (need_db && tn) dc_t = new_tensor(ctx, d_f, matrix(s.n, s.m));
    if (dc_q || dc_t)
      recipe->quantize(slots.grad_output, dc->data(), dc->dtype, s.m, s.n,
                       dc_q ? dc_q->data() : nullptr, dc_t ? dc_t->data() : nullptr);
    TensorRef dc_scale_inv = snapshot(ctx, recipe->scale_inv(slots.grad_output));
    const DType b_f = b_q->dtype;

    TensorRef da, db, dbias;
    if (need_da) {  // dA [m, k] = dC [m, n] op(B)^T
      da = new_tensor(ctx, a.dtype, a.shape);
      // op(B)^T is B [n, k] itself (as stored, or TN's [k, n] copy
      // transposed back) or, for B [k, n], B transposed.
      const bool copy = s.b_transposed && tn;
      Fp8GemmArgs f =
          gemm_args(s.m, s.k, s.n, d_f, false, b_f, copy || !s.b_transposed, a.dtype);
      f.a = dc_q->data(), f.a_scale_inv = static_cast<const float*>(dc_scale_inv->data());
      f.b = copy ? b_t->data() : b_q->data();
      f.b_scale_inv = static_cast<const float*>(b_scale_inv->data());
      f.d = da->data();
      g.gemm(f);
    }
    if (need_db) {
      db = new_tensor(ctx, b.dtype, b.shape);
      // B [n, k]: dB = dC^T A; B [k, n]: dB = A^T dC. With TN the
      // transposed copies are stored, otherwise the GEMM transposes.
      const bool dc_first = s.b_transposed;
      const DeviceTensor& first = dc_first ? (tn ? *dc_t : *dc_q) : (tn ? *a_t : *a_q);
      const DeviceTensor& second = dc_first ? (tn ? *a_t : *a_q) : (tn ? *dc_t : *dc_q);
      const int64_t rows = dc_first ? s.n : s.k, cols = dc_first ? s.k : s.n;
      Fp8GemmArgs f = gemm_args(rows, cols, s.m, first.dtype, !tn, second.dtype, tn, b.dtype);
      f.a = first.data(), f.b = second.data();
      const float* dc_inv = static_cast<const float*>(dc_scale_inv->data());
      const float* a_inv = static_cast<const float*>(a_scale_inv->data());
      f.a_scale_inv = dc_first ? dc_inv : a_inv;
      f.b_scale_inv = dc_first ? a_inv : dc_inv;
      f.d = db->data();
      g.gemm(f);
    }
    if (bias && bias->requires_grad) {
      dbias = new_tensor(ctx, bias->dtype, bias->shape);
      nn_of(ctx, op).sum_rows(dc->data(), dc->dtype, s.m, s.n, dbias->data(), bias->dtype);
    }
    return grad_list(std::move(da), std::move(db), std::move(dbias));
  }

  bool has_backward_graph() const override { return true; }
  // The same gradients with recorded ops, in the policy's dtype (bf16 or
  // f16) rather than FP8: the operands themselves (cast to that dtype), not
  // their quantized copies, so that the gradients can be differentiated
  // with respect to them. dZ = dY act'(Z) as linear's formula has it (Z, for
  // GELU, a further output of this record), then
  //   dA = dZ op(B)^T, dB = dZ^T A (B [n, k]) or A^T dZ (B [k, n]),
  //   dbias = the rows' sum of dZ,
  // each cast to its input's dtype.
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& a = *inputs[0];
    DeviceTensor& b = *inputs[1];
    DeviceTensor* bias = inputs[2].get();
    TensorRef dz;
    if (grads[0]) {
      if (activation == Activation::Relu)
        dz = TensorRef(op_relu_grad(*activation_input, *grads[0]));
      else if (activation == Activation::Gelu)
        dz = f::mul(*grads[0], *f::unary(UnaryOp::GeluDerivative,
                                         *saved_as_output(ctx, *this, *activation_input, graph_z)));
      else
        dz = retained(*grads[0]);
    }
    for (size_t i = 1; i < grads.size(); ++i)
      if (grads[i]) accumulate_grad(ctx, dz, *grads[i], true);
    const DType type = dz->dtype;
    const int64_t mn[2] = {s.m, s.n}, mk[2] = {s.m, s.k};
    TensorRef dz2 = f::reshape(*dz, make_shape(2, mn, type));
    TensorRef da, db, dbias;
    if (need_da) {
      TensorRef b2 = f::cast(b, type);
      TensorRef op_b_t = s.b_transposed ? std::move(b2) : f::transpose(*b2, 0, 1);  // [n, k]
      da = f::cast(*f::reshape(*f::matmul(*dz2, *op_b_t), a.shape), a.dtype);
    }
    if (need_db) {
      TensorRef a2 = f::reshape(*f::cast(a, type), make_shape(2, mk, type));
      db = s.b_transposed ? f::matmul(*f::transpose(*dz2, 0, 1), *a2)
                          : f::matmul(*f::transpose(*a2, 0, 1), *dz2);
      db = f::cast(*db, b.dtype);
    }
    if (bias && bias->requires_grad) dbias = f::cast(*f::sum_dims(*dz2, {0}, false), bias->dtype);
    return grad_list(std::move(da), std::move(db), std::move(dbias));
  }

 private:
  SavedOutputSlot graph_z;
  // dY through the activation's derivative, plus the gradients the
  // differentiable formula's Z received (further outputs).
  TensorRef gradient_before_activation(DeviceContext& ctx, const std::vector<DeviceTensor*>& grads) {
    TensorRef dz;
    if (grads[0] && activation == Activation::None) {
      dz = retained(*grads[0]);
    } else if (grads[0]) {
      DeviceTensor& dy = *grads[0];
      dz = new_tensor(ctx, dy.dtype, activation_input->shape);
      nn_of(ctx, op).unary_backward(activation == Activation::Relu ? UnaryOp::Relu : UnaryOp::Gelu,
                                    activation_input->data(), dy.data(), dz->data(), dy.dtype,
                                    dz->numel());
    }
    for (size_t i = 1; i < grads.size(); ++i)
      if (grads[i]) accumulate_grad(ctx, dz, *grads[i], false);
    return dz;
  }
};

void note_fallback(PrecisionPolicy& policy, const char* op, const std::string& why) {
  ++policy.fp8_fallbacks;
  policy.fp8_last_fallback = cat(op, ": ", why);
}

// The product, once the op decided it runs in FP8 (shapes checked).
DeviceTensor* run_product(const char* op, PrecisionPolicy& policy, DeviceTensor& a, DeviceTensor& b,
                          DeviceTensor* bias, const ProductShape& s, const Shape& out_shape,
                          Activation activation) {
  DeviceContext& ctx = *a.ctx;
  Fp8GemmPrimitives& g = ctx.backend().require<Fp8GemmPrimitives>(op);
  Fp8Recipe& r = *policy.fp8_recipe();
  const DType out_type = policy.dtype();
  const int64_t work_limit = policy.fp8_min_gemm_size();
  int64_t work = 0;
  const bool huge = __builtin_mul_overflow(s.m, s.n, &work) || __builtin_mul_overflow(work, s.k, &work);
  if (!huge && work < work_limit) {
    note_fallback(policy, op, cat("m * n * k = ", work, " is below the policy's min_gemm_size ",
                                  work_limit));
    return nullptr;
  }
  // Scaling state is kept per weight tensor for the recipe's life: a b made
  // by a recorded op (an activation as matmul's b, a weight recomputed each
  // step) is a new tensor every step and would add three slots each time.
  if (b.tape_generation != 0) {
    note_fallback(policy, op,
                  cat("the weight operand ", b.describe(),
                      " was computed by a recorded op; FP8 scaling state is kept per weight "
                      "tensor, so only tensors no recorded op made are multiplied in FP8"));
    return nullptr;
  }
  // With grad mode off nothing is recorded, so an activation cannot be told
  // from a weight by its tape generation; there the weights are the tensors
  // that require gradients (the parameters, which keep requiring them).
  if (!autograd_state(ctx).grad_enabled && !b.requires_grad) {
    note_fallback(policy, op,
                  cat("grad mode is off and the weight operand ", b.describe(),
                      " requires no gradient: it may be an activation, new at every call, and "
                      "FP8 scaling state is kept per weight tensor"));
    return nullptr;
  }
  const bool tn = !any_layout(g);
  TensorRef bias_cast;
  const void* bias_data = nullptr;
  if (bias) {
    bias_data = bias->data();
    if (bias->dtype != out_type) {
      bias_cast = new_tensor(ctx, out_type, bias->shape);
      ctx.backend().convert(bias_cast->data(), out_type, bias->data(), bias->dtype, bias->numel());
      bias_data = bias_cast->data();
    }
  }
  std::string why;
  if (!products_supported(g, r, s, tn, out_type, a, b, bias_data, &why)) {
    note_fallback(policy, op, why);
    return nullptr;
  }
  const Fp8Recipe::GemmSlots slots = r.gemm_slots(b);
  const bool recording = should_record(ctx, {&a, &b, bias});
  const bool need_da = recording && a.requires_grad, need_db = recording && b.requires_grad;

  auto node = std::make_unique<Fp8ProductNode>();
  node->op = op, node->s = s, node->tn = tn, node->slots = slots;
  node->need_da = need_da, node->need_db = need_db;
  const DType a_f = r.format(slots.input), b_f = r.format(slots.weight);
  node->a_q = new_tensor(ctx, a_f, matrix(s.m, s.k));
  if (tn && need_db) node->a_t = new_tensor(ctx, a_f, matrix(s.k, s.m));
  r.quantize(slots.input, a.data(), a.dtype, s.m, s.k, node->a_q->data(),
             node->a_t ? node->a_t->data() : nullptr);
  node->a_scale_inv = snapshot(ctx, r.scale_inv(slots.input));
  const int64_t b_rows = s.b_transposed ? s.n : s.k, b_cols = s.b_transposed ? s.k : s.n;
  node->b_q = new_tensor(ctx, b_f, matrix(b_rows, b_cols));
  // TN wants B as [n, k] forward and as [k, n] for dgrad: one of them is
  // the stored layout, the other the transposed copy.
  const bool b_t_needed = tn && (!s.b_transposed || need_da);
  if (b_t_needed) node->b_t = new_tensor(ctx, b_f, matrix(b_cols, b_rows));
  r.quantize(slots.weight, b.data(), b.dtype, b_rows, b_cols, node->b_q->data(),
             node->b_t ? node->b_t->data() : nullptr);
  node->b_scale_inv = snapshot(ctx, r.scale_inv(slots.weight));

  TensorRef z = new_tensor(ctx, out_type, out_shape);
  Fp8GemmArgs f = gemm_args(s.m, s.n, s.k, a_f, false, b_f, s.b_transposed || tn, out_type);
  f.a = node->a_q->data();
  f.b = s.b_transposed || !tn ? node->b_q->data() : node->b_t->data();
  f.a_scale_inv = static_cast<const float*>(node->a_scale_inv->data());
  f.b_scale_inv = static_cast<const float*>(node->b_scale_inv->data());
  f.d = z->data();
  f.bias = bias_data;
  g.gemm(f);
  ++policy.fp8_products;

  // The activation in the output's dtype, as linear does it.
  TensorRef out;
  if (activation == Activation::Gelu) {
    out = new_tensor(ctx, out_type, out_shape);
    if (out->numel() > 0)
      nn_of(ctx, op).unary(UnaryOp::Gelu, z->data(), out->data(), out_type, out->numel());
  } else {
    if (activation == Activation::Relu && z->numel() > 0)
      nn_of(ctx, op).unary(UnaryOp::Relu, z->data(), z->data(), out_type, z->numel());
    out = retained(*z);
  }
  if (!recording) return out.take();
  node->activation = activation;
  if (activation == Activation::Gelu) node->activation_input = std::move(z);
  if (activation == Activation::Relu) {
    node->activation_input = saved_output(ctx, *out);
    node->saves(*out);
  }
  node->inputs.push_back(retained(a));
  node->inputs.push_back(retained(b));
  node->inputs.push_back(bias ? retained(*bias) : TensorRef());
  r.retain();
  node->recipe = &r;
  record(ctx, std::move(node), {out.get()});
  return out.take();
}

}  // namespace

DeviceTensor* try_fp8_linear(PrecisionPolicy& policy, DeviceTensor& x, DeviceTensor& weight,
                             DeviceTensor* bias, Activation activation) {
  ProductShape s;
  s.k = weight.shape.dims[1];
  s.n = weight.shape.dims[0];
  s.m = x.shape.extent_product(0, x.shape.ndim - 1);
  s.b_transposed = true;
  Shape out_shape = x.shape;
  out_shape.dims[out_shape.ndim - 1] = s.n;
  out_shape = make_shape(out_shape, policy.dtype(), "linear's output");
  if (s.m == 0 || s.n == 0 || s.k == 0) {
    note_fallback(policy, "linear", "an empty product");
    return nullptr;
  }
  return run_product("linear", policy, x, weight, bias, s, out_shape, activation);
}

DeviceTensor* try_fp8_matmul(PrecisionPolicy& policy, DeviceTensor& a, DeviceTensor& b) {
  if (a.shape.ndim < 2 || b.shape.ndim != 2) {
    note_fallback(policy, "matmul",
                  cat("a is ", a.describe(), " and b ", b.describe(),
                      "; FP8 products take a [..., M, K] and a 2-D b"));
    return nullptr;
  }
  ProductShape s;
  s.k = b.shape.dims[0];
  s.n = b.shape.dims[1];
  s.m = a.shape.extent_product(0, a.shape.ndim - 1);
  Shape out_shape = a.shape;
  out_shape.dims[out_shape.ndim - 1] = s.n;
  out_shape = make_shape(out_shape, policy.dtype(), "matmul's output");
  if (s.m == 0 || s.n == 0 || s.k == 0) {
    note_fallback(policy, "matmul", "an empty product");
    return nullptr;
  }
  return run_product("matmul", policy, a, b, nullptr, s, out_shape, Activation::None);
}

}  // namespace ampx::impl
