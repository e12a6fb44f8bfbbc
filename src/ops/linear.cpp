// linear.cpp -- matmul (torch.matmul's shapes: vectors, batches that
// broadcast) and linear (x W^T + b, optional fused activation), through the
// backend's GEMM.
#include "onnx/emitter.h"
#include "ops/broadcast.h"
#include "ops/formula.h"
#include "ops/fp8_product.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

// How one operand of a matmul is read by the batched product: its [M, K]
// (or [K, N]) matrices one per output batch element (Direct), one matrix
// shared by every batch element (Shared: batch stride 0), or copied out to
// the output's batch shape first (Expanded: broadcast along some batch
// dimensions but not all).
enum class BatchRead { Direct, Shared, Expanded };

// torch.matmul's shapes: a [..., M, K] (a 1-D a is [1, K], its M dropped
// from the output), b [..., K, N] (a 1-D b is [K, 1], its N dropped); the
// batch dimensions broadcast. `a_matrices` / `b_matrices` are the operands
// with the 1-D promotion (a shape of the operand's own memory). With
// `folded`, a's batch rows are one [batch * M, K] matrix times b's one
// [K, N] (b has one matrix, a its full batch).
struct MatmulShape {
  int64_t batch = 1, m = 0, k = 0, n = 0;
  Shape out_batch;  // the broadcast batch dimensions
  Shape a_matrices, b_matrices;
  BatchRead a_read = BatchRead::Direct, b_read = BatchRead::Direct;
  bool folded = false;
};

// `matrices` (an operand's shape, promoted) with its batch dimensions
// broadcast to s.out_batch.
Shape expanded_shape(const MatmulShape& s, const Shape& matrices) {
  Shape full = s.out_batch;
  full.ndim += 2;
  full.dims[full.ndim - 2] = matrices.dims[matrices.ndim - 2];
  full.dims[full.ndim - 1] = matrices.dims[matrices.ndim - 1];
  return full;
}

// The operand's matrices as the product reads them: its own memory, or a
// copy broadcast to the output's batch (kept alive by `copy`).
const void* batch_operand(DeviceContext& ctx, const MatmulShape& s, const DeviceTensor& t,
                          const Shape& matrices, BatchRead read, TensorRef& copy) {
  if (read != BatchRead::Expanded) return t.data();
  const Shape full = expanded_shape(s, matrices);
  copy = new_tensor(ctx, t.dtype, full);
  StridedCopy layout;
  layout.ndim = full.ndim;
  int64_t dst_stride = 1, src_stride = 1;
  for (int32_t d = full.ndim - 1; d >= 0; --d) {
    const int32_t own = d - (full.ndim - matrices.ndim);
    const int64_t own_extent = own >= 0 ? matrices.dims[own] : 1;
    layout.sizes[d] = full.dims[d];
    layout.dst_strides[d] = dst_stride;
    layout.src_strides[d] = own_extent == 1 ? 0 : src_stride;
    dst_stride *= full.dims[d];
    src_stride *= own_extent;
  }
  nn_of(ctx, "matmul").copy_strided(copy->data(), t.data(), dtype_size(t.dtype), layout);
  return copy->data();
}

int64_t batch_stride(BatchRead read, int64_t matrix_elements) {
  return read == BatchRead::Shared ? 0 : matrix_elements;
}

// The gradient of an operand read Shared or Expanded (not folded): the
// product computes it in F32 for every output batch element, summed here
// over the batch dimensions the operand was broadcast along and rounded
// once to its dtype.
TensorRef reduced_gradient(DeviceContext& ctx, DeviceTensor& per_batch,
                           const DeviceTensor& operand, const Shape& matrices) {
  TensorRef summed = sum_to_shape(ctx, "matmul", per_batch, matrices);
  if (operand.dtype == DType::F32)
    return TensorRef(DeviceTensor::alias(ctx, *summed, DType::F32, operand.shape));
  TensorRef grad = new_tensor(ctx, operand.dtype, operand.shape);
  ctx.backend().convert(grad->data(), grad->dtype, summed->data(), DType::F32, grad->numel());
  return grad;
}

class MatmulNode final : public Node {
 public:
  MatmulShape s{};
  const char* name() const override { return "matmul"; }
  // torch.matmul's shapes are numpy's matmul, which ONNX's MatMul follows.
  void onnx(onnx::Emitter& e) const override {
    e.output(0, e.op("MatMul", {e.input(0), e.input(1)}));
  }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& a = *inputs[0];
    DeviceTensor& b = *inputs[1];
    DeviceTensor& dy = *grads[0];
    // The strides are products of two extents: they fit in int64 whenever
    // the tensor written has elements (with none, nothing runs).
    TensorRef da, db, a_copy, b_copy;
    if (a.requires_grad) da = gradient(ctx, a, s.a_matrices, s.a_read, true, dy, b, b_copy);
    if (b.requires_grad) db = gradient(ctx, b, s.b_matrices, s.b_read, false, dy, a, a_copy);
    return grad_list(std::move(da), std::move(db));
  }
  bool has_backward_graph() const override { return true; }
  // dA = dY B^T and dB = A^T dY on the promoted matrices, each summed back
  // over the batch dimensions its operand was broadcast along.
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& a = *inputs[0];
    DeviceTensor& b = *inputs[1];
    Shape dy_shape = s.out_batch;
    dy_shape.dims[dy_shape.ndim++] = s.m;
    dy_shape.dims[dy_shape.ndim++] = s.n;
    TensorRef dy = f::reshape(*grads[0], dy_shape);
    TensorRef da, db;
    if (a.requires_grad) {
      TensorRef bt = f::transpose(*f::reshape(b, s.b_matrices), -1, -2);
      da = f::reshape(*f::sum_to(*f::matmul(*dy, *bt), s.a_matrices), a.shape);
    }
    if (b.requires_grad) {
      TensorRef at = f::transpose(*f::reshape(a, s.a_matrices), -1, -2);
      db = f::reshape(*f::sum_to(*f::matmul(*at, *dy), s.b_matrices), b.shape);
    }
    return grad_list(std::move(da), std::move(db));
  }

 private:
  // dA = dY B^T (for_a) or dB = A^T dY: each product of the batch into the
  // operand's gradient, or into F32 per-batch gradients then reduced. With
  // no output elements every gradient element is an empty sum.
  TensorRef gradient(DeviceContext& ctx, DeviceTensor& operand, const Shape& matrices,
                     BatchRead read, bool for_a, DeviceTensor& dy, DeviceTensor& other,
                     TensorRef& other_copy) {
    if (dy.numel() == 0) {
      TensorRef zeros = new_tensor(ctx, operand.dtype, operand.shape);
      ctx.backend().fill(zeros->data(), dtype_size(zeros->dtype), 0, zeros->numel());
      return zeros;
    }
    const bool direct = read == BatchRead::Direct || s.folded;
    TensorRef grad = direct ? new_tensor(ctx, operand.dtype, operand.shape)
                            : new_tensor(ctx, DType::F32, expanded_shape(s, matrices));
    const Shape& other_matrices = for_a ? s.b_matrices : s.a_matrices;
    const BatchRead other_read = for_a ? s.b_read : s.a_read;
    const void* other_data =
        batch_operand(ctx, s, other, other_matrices, other_read, other_copy);
    GemmArgs g;
    g.batch = s.folded ? 1 : s.batch;
    const int64_t rows = s.folded ? s.batch * s.m : s.m;
    if (for_a) {
      g.m = rows, g.n = s.k, g.k = s.n;
      g.a = dy.data(), g.a_batch_stride = s.m * s.n;
      g.b = other_data, g.trans_b = true, g.b_batch_stride = batch_stride(other_read, s.k * s.n);
      g.c_batch_stride = s.m * s.k;
    } else {
      g.m = s.k, g.n = s.n, g.k = rows;
      g.a = other_data, g.trans_a = true, g.a_batch_stride = batch_stride(other_read, s.m * s.k);
      g.b = dy.data(), g.b_batch_stride = s.m * s.n;
      g.c_batch_stride = s.k * s.n;
    }
    g.ab_type = operand.dtype, g.c = grad->data(), g.c_type = grad->dtype;
    gemm_of(ctx, name()).gemm(g);
    if (direct) return grad;
    return reduced_gradient(ctx, *grad, operand, matrices);
  }
};

class LinearNode final : public Node {
 public:
  int64_t rows = 0, in = 0, out = 0;
  Activation activation = Activation::None;
  // What the activation's derivative is read from: for ReLU the output
  // itself (relu'(z) is known from relu(z)'s sign and NaN-ness, as z's), so
  // no pre-activation copy is kept; for GELU, z = x W^T + b.
  TensorRef activation_input;
  const char* name() const override { return "linear"; }
  // Gemm with transB for a 2-D x (with a bias below opset 11, which made
  // Gemm's C optional), else MatMul by the transposed weight, then Add.
  void onnx(onnx::Emitter& e) const override {
    const std::string x = e.input(0), w = e.input(1);
    const bool bias = e.has_input(2);
    std::string z;
    if (e.input_tensor(0).shape.ndim == 2 && (bias || e.opset() >= 11)) {
      std::vector<std::string> args{x, w};
      if (bias) args.push_back(e.input(2));
      z = e.op("Gemm", args, {onnx::attr("transB", int64_t{1})});
    } else {
      const std::string wt =
          e.op("Transpose", {w}, {onnx::attr("perm", std::vector<int64_t>{1, 0})});
      z = e.op("MatMul", {x, wt});
      if (bias) z = e.op("Add", {z, e.input(2)});
    }
    if (activation == Activation::Relu) z = e.op("Relu", {z});
    if (activation == Activation::Gelu) z = e.gelu(z);
    e.output(0, z);
  }
  bool reads_input(size_t i) const override { return i < 2; }  // x and weight
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    DeviceTensor& w = *inputs[1];
    DeviceTensor* bias = inputs[2].get();
    TensorRef dz;
    if (activation == Activation::None) {
      dz = retained(*grads[0]);
    } else if (grads[0]) {
      dz = new_tensor(ctx, x.dtype, activation_input->shape);
      nn_of(ctx, name())
          .unary_backward(activation == Activation::Relu ? UnaryOp::Relu : UnaryOp::Gelu,
                          activation_input->data(), grads[0]->data(), dz->data(), x.dtype,
                          dz->numel());
    }
    for (size_t i = 1; i < grads.size(); ++i)  // Z's own gradients (graph_z)
      if (grads[i]) accumulate_grad(ctx, dz, *grads[i], false);
    TensorRef dx, dw, db;
    if (x.requires_grad) {  // dX = dZ W
      dx = new_tensor(ctx, x.dtype, x.shape);
      GemmArgs g;
      g.m = rows, g.n = in, g.k = out;
      g.a = dz->data(), g.b = w.data(), g.ab_type = x.dtype;
      g.c = dx->data(), g.c_type = x.dtype;
      gemm_of(ctx, name()).gemm(g);
    }
    if (w.requires_grad) {  // dW = dZ^T X
      dw = new_tensor(ctx, w.dtype, w.shape);
      GemmArgs g;
      g.m = out, g.n = in, g.k = rows;
      g.a = dz->data(), g.trans_a = true, g.b = x.data(), g.ab_type = x.dtype;
      g.c = dw->data(), g.c_type = w.dtype;
      gemm_of(ctx, name()).gemm(g);
    }
    if (bias && bias->requires_grad) {
      db = new_tensor(ctx, bias->dtype, bias->shape);
      nn_of(ctx, name()).sum_rows(dz->data(), x.dtype, rows, out, db->data(), bias->dtype);
    }
    return grad_list(std::move(dx), std::move(dw), std::move(db));
  }
  bool has_backward_graph() const override { return true; }
  // dZ = dY act'(Z) (+ Z's own gradients); dX = dZ W, dW = dZ^T X, db = the
  // rows' sum of dZ. ReLU's derivative needs only the output's signs.
  // GELU's derivative reads Z as a tensor of the graph: the saved values,
  // made a further output of this record (graph_z), so that the gradients
  // the formulas send to Z come back here and join dZ before the one set
  // of products, as torch's addmm record receives gelu_backward's -- not a
  // recomputed linear, whose own backward would repeat those products.
  std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                        const std::vector<DeviceTensor*>& grads) override {
    namespace f = formula;
    DeviceTensor& x = *inputs[0];
    DeviceTensor& w = *inputs[1];
    DeviceTensor* bias = inputs[2].get();
    TensorRef dz;
    if (activation == Activation::None) {
      dz = retained(*grads[0]);
    } else if (grads[0] && activation == Activation::Relu) {
      dz = TensorRef(op_relu_grad(*activation_input, *grads[0]));
    } else if (grads[0]) {
      dz = f::mul(*grads[0], *f::unary(UnaryOp::GeluDerivative, *graph_z(ctx)));
    }
    for (size_t i = 1; i < grads.size(); ++i)
      if (grads[i]) accumulate_grad(ctx, dz, *grads[i], true);
    const int64_t rows_out[2] = {rows, out}, rows_in[2] = {rows, in};
    TensorRef dz2 = f::reshape(*dz, make_shape(2, rows_out, dz->dtype));
    TensorRef dx, dw, db;
    if (x.requires_grad) dx = f::reshape(*f::matmul(*dz2, w), x.shape);
    if (w.requires_grad)
      dw = f::matmul(*f::transpose(*dz2, 0, 1), *f::reshape(x, make_shape(2, rows_in, x.dtype)));
    if (bias && bias->requires_grad) db = f::sum_dims(*dz2, {0}, false);
    return grad_list(std::move(dx), std::move(dw), std::move(db));
  }

 private:
  SavedOutputSlot graph_z_slot;
  // The saved Z as a tensor of the graph, an output of this record.
  TensorRef graph_z(DeviceContext& ctx) {
    return saved_as_output(ctx, *this, *activation_input, graph_z_slot);
  }
};

void check_same_dtype(const DeviceTensor& a, const DeviceTensor& b, const char* a_name,
                      const char* b_name) {
  if (a.dtype != b.dtype)
    fail(AMPX_ERR_DTYPE, "'", a_name, "' is ", a.describe(), " but '", b_name, "' is ",
         b.describe(), "; outside autocast they must share a dtype");
}

}  // namespace

namespace {

// The operand's shape with torch.matmul's promotion of a vector: [K] is
// [1, K] as a (`first`) and [K, 1] as b.
Shape promoted_matrices(const Shape& shape, bool first) {
  if (shape.ndim != 1) return shape;
  Shape m;
  m.ndim = 2;
  m.dims[first ? 0 : 1] = 1;
  m.dims[first ? 1 : 0] = shape.dims[0];
  return m;
}

// How an operand whose matrices are `matrices` is read against the output
// batch `out_batch`.
BatchRead batch_read(const Shape& matrices, const Shape& out_batch) {
  const int32_t own_batch = matrices.ndim - 2;
  bool all_ones = true, all_equal = true;
  for (int32_t d = 0; d < out_batch.ndim; ++d) {
    const int32_t own = d - (out_batch.ndim - own_batch);
    const int64_t extent = own >= 0 ? matrices.dims[own] : 1;
    if (extent != 1) all_ones = false;
    if (extent != out_batch.dims[d]) all_equal = false;
  }
  if (all_equal) return BatchRead::Direct;
  return all_ones ? BatchRead::Shared : BatchRead::Expanded;
}

MatmulShape matmul_shape(const DeviceTensor& a, const DeviceTensor& b) {
  const auto bad = [&](const char* why) {
    fail(AMPX_ERR_SHAPE, "'a' is ", a.describe(), " and 'b' is ", b.describe(), "; ", why,
         " (matmul takes a [..., M, K] or [K] and b [..., K, N] or [K], with batch "
         "dimensions that broadcast)");
  };
  if (a.shape.ndim < 1 || b.shape.ndim < 1) bad("a 0-D operand has no matrix");
  MatmulShape s;
  s.a_matrices = promoted_matrices(a.shape, true);
  s.b_matrices = promoted_matrices(b.shape, false);
  const Shape& am = s.a_matrices;
  const Shape& bm = s.b_matrices;
  s.m = am.dims[am.ndim - 2];
  s.k = am.dims[am.ndim - 1];
  s.n = bm.dims[bm.ndim - 1];
  if (bm.dims[bm.ndim - 2] != s.k) bad("a's last extent is not b's contracted one");
  const int32_t a_batch = am.ndim - 2, b_batch = bm.ndim - 2;
  s.out_batch.ndim = a_batch > b_batch ? a_batch : b_batch;
  for (int32_t d = 0; d < s.out_batch.ndim; ++d) {
    const int32_t ad = d - (s.out_batch.ndim - a_batch), bd = d - (s.out_batch.ndim - b_batch);
    const int64_t ea = ad >= 0 ? am.dims[ad] : 1, eb = bd >= 0 ? bm.dims[bd] : 1;
    if (ea != eb && ea != 1 && eb != 1) bad("the batch dimensions do not broadcast");
    s.out_batch.dims[d] = ea == 1 ? eb : ea;
  }
  s.a_read = batch_read(am, s.out_batch);
  s.b_read = batch_read(bm, s.out_batch);
  s.folded = s.a_read == BatchRead::Direct && s.b_read == BatchRead::Shared;
  return s;
}

// torch.matmul's output shape: the batch, then M unless a is a vector,
// then N unless b is.
Shape matmul_output_shape(const MatmulShape& s, const Shape& a, const Shape& b) {
  Shape out = s.out_batch;
  if (a.ndim > 1) out.dims[out.ndim++] = s.m;
  if (b.ndim > 1) out.dims[out.ndim++] = s.n;
  return out;
}

}  // namespace

DeviceTensor* op_matmul(DeviceTensor& a_in, DeviceTensor& b_in) {
  require_capabilities(*a_in.ctx, "matmul", Capability::Gemm);
  check_same_context(a_in, b_in, "a", "b");
  check_floating(a_in, "a");
  check_floating(b_in, "b");
  MatmulShape s = matmul_shape(a_in, b_in);
  // Checked before the batch's product, which no longer overflows.
  const Shape out_shape =
      make_shape(matmul_output_shape(s, a_in.shape, b_in.shape), a_in.dtype, "matmul's output");
  s.batch = s.out_batch.numel();
  if (s.a_read != BatchRead::Direct || s.b_read != BatchRead::Direct)
    require_capabilities(*a_in.ctx, "matmul (batch broadcasting)", Capability::Nn);
  DeviceContext& ctx = *a_in.ctx;
  if (PrecisionPolicy* fp8 = fp8_policy(ctx, "matmul"))
    if (DeviceTensor* out = try_fp8_matmul(*fp8, a_in, b_in)) return out;
  std::vector<TensorRef> in = op_inputs(ctx, "matmul", {&a_in, &b_in});
  DeviceTensor& a = *in[0];
  DeviceTensor& b = *in[1];
  check_same_dtype(a, b, "a", "b");
  TensorRef out = new_tensor(ctx, a.dtype, out_shape);
  if (out->numel() > 0) {  // then every stride below fits in int64
    TensorRef a_copy, b_copy;
    GemmArgs g;
    g.batch = s.folded ? 1 : s.batch, g.m = s.folded ? s.batch * s.m : s.m;
    g.n = s.n, g.k = s.k;
    g.a = batch_operand(ctx, s, a, s.a_matrices, s.a_read, a_copy);
    g.a_batch_stride = batch_stride(s.a_read, s.m * s.k);
    g.b = batch_operand(ctx, s, b, s.b_matrices, s.b_read, b_copy);
    g.b_batch_stride = batch_stride(s.b_read, s.k * s.n);
    g.ab_type = a.dtype, g.c = out->data(), g.c_type = a.dtype, g.c_batch_stride = s.m * s.n;
    gemm_of(ctx, "matmul").gemm(g);
  }
  if (should_record(ctx, {&a, &b})) {
    auto node = make_node<MatmulNode>({&in[0], &in[1]});
    node->s = s;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_linear(DeviceTensor& x_in, DeviceTensor& w_in, DeviceTensor* bias_in,
                        Activation activation) {
  require_capabilities(*x_in.ctx, "linear", Capability::Gemm, Capability::Nn);
  check_same_context(x_in, w_in, "x", "weight");
  if (bias_in) check_same_context(x_in, *bias_in, "x", "bias");
  check_floating(x_in, "x");
  check_floating(w_in, "weight");
  if (bias_in) check_floating(*bias_in, "bias");
  if (x_in.shape.ndim < 1 || w_in.shape.ndim != 2 ||
      x_in.shape.dims[x_in.shape.ndim - 1] != w_in.shape.dims[1])
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), " and 'weight' is ", w_in.describe(),
         "; linear takes x [..., in] and weight [out, in]");
  const int64_t in_features = w_in.shape.dims[1];
  const int64_t out_features = w_in.shape.dims[0];
  if (bias_in && !(bias_in->shape.ndim == 1 && bias_in->shape.dims[0] == out_features))
    fail(AMPX_ERR_SHAPE, "'bias' is ", bias_in->describe(), "; expected [", out_features, "]");
  DeviceContext& ctx = *x_in.ctx;
  if (PrecisionPolicy* fp8 = fp8_policy(ctx, "linear"))
    if (DeviceTensor* out = try_fp8_linear(*fp8, x_in, w_in, bias_in, activation)) return out;
  std::vector<TensorRef> in = op_inputs(ctx, "linear", {&x_in, &w_in, bias_in});
  DeviceTensor& x = *in[0];
  DeviceTensor& w = *in[1];
  DeviceTensor* bias = in[2].get();
  check_same_dtype(x, w, "x", "weight");
  if (bias) check_same_dtype(x, *bias, "x", "bias");
  // Not numel / in_features, which is 0/0 for in_features == 0.
  const int64_t rows = x.shape.extent_product(0, x.shape.ndim - 1);
  Shape out_shape = x.shape;
  out_shape.dims[out_shape.ndim - 1] = out_features;
  out_shape = make_shape(out_shape, x.dtype, "linear's output");
  TensorRef z = new_tensor(ctx, x.dtype, out_shape);
  if (z->numel() > 0) {
    GemmArgs g;
    g.m = rows, g.n = out_features, g.k = in_features;
    g.a = x.data(), g.b = w.data(), g.trans_b = true, g.ab_type = x.dtype;
    g.c = z->data(), g.c_type = x.dtype;
    g.bias = bias ? bias->data() : nullptr;
    gemm_of(ctx, "linear").gemm(g);
  }
  // ReLU in place (exact on the rounded z, so the same bits as on z in
  // fp32); GELU into a new tensor, z kept for its derivative.
  TensorRef out;
  if (activation == Activation::Gelu) {
    out = new_tensor(ctx, x.dtype, out_shape);
    if (out->numel() > 0)
      nn_of(ctx, "linear").unary(UnaryOp::Gelu, z->data(), out->data(), x.dtype, out->numel());
  } else {
    if (activation == Activation::Relu && z->numel() > 0)
      nn_of(ctx, "linear").unary(UnaryOp::Relu, z->data(), z->data(), x.dtype, z->numel());
    out = retained(*z);
  }
  if (should_record(ctx, {&x, &w, bias})) {
    auto node = make_node<LinearNode>({&in[0], &in[1], &in[2]});
    node->rows = rows, node->in = in_features, node->out = out_features;
    node->activation = activation;
    if (activation == Activation::Gelu) node->activation_input = std::move(z);
    if (activation == Activation::Relu) {
      node->activation_input = saved_output(ctx, *out);
      node->saves(*out);
    }
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
