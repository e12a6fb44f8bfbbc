// shape.cpp -- reshape (a view sharing the input's memory), transpose and
// concat (materialised through the backend's strided copy), and embedding
// (a row gather whose backward scatter-adds).
#include <vector>

#include "core/checked_math.h"
#include "onnx/emitter.h"
#include "ops/formula.h"
#include "ops/op_util.h"
#include "ops/ops.h"

namespace ampx::impl {
namespace {

// dim in [-ndim, ndim), negative counting from the end (as torch).
int32_t dim_arg(int32_t dim, int32_t ndim, const char* name, const DeviceTensor& t) {
  const int32_t d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim)
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument '", name, "' is ", dim, " but '", t.describe(),
         "' has ", ndim, " dimensions (use -", ndim, " .. ", ndim - 1, ")");
  return d;
}

void contiguous_strides(const Shape& s, int64_t* strides) {
  for (int32_t k = 0; k < s.ndim; ++k) strides[k] = s.extent_product(k + 1, s.ndim);
}

// Writes `src` with dimensions d0 and d1 exchanged to `dst` (contiguous).
void transpose_into(NnPrimitives& nn, const DeviceTensor& src, void* dst, int32_t d0, int32_t d1) {
  StridedCopy layout;
  layout.ndim = src.shape.ndim;
  contiguous_strides(src.shape, layout.src_strides);
  std::swap(layout.src_strides[d0], layout.src_strides[d1]);
  Shape out = src.shape;
  std::swap(out.dims[d0], out.dims[d1]);
  contiguous_strides(out, layout.dst_strides);
  for (int32_t k = 0; k < out.ndim; ++k) layout.sizes[k] = out.dims[k];
  nn.copy_strided(dst, src.data(), dtype_size(src.dtype), layout);
}

// `rows` runs of `width` elements, each run `dst_pitch` (`src_pitch`)
// elements after the previous one: a piece of a concatenation.
StridedCopy block(int64_t rows, int64_t width, int64_t dst_pitch, int64_t src_pitch) {
  StridedCopy layout;
  layout.ndim = 2;
  layout.sizes[0] = rows, layout.sizes[1] = width;
  layout.dst_strides[0] = dst_pitch, layout.dst_strides[1] = 1;
  layout.src_strides[0] = src_pitch, layout.src_strides[1] = 1;
  return layout;
}

void* byte_offset(void* p, int64_t elements, DType dtype) {
  // An empty tensor has no memory: every copy from or into it is empty,
  // and an offset applied to NULL would be undefined behaviour.
  if (!p) return p;
  return static_cast<char*>(p) + elements * static_cast<int64_t>(dtype_size(dtype));
}

class ReshapeNode final : public Node {
 public:
  const char* name() const override { return "reshape"; }
  void onnx(onnx::Emitter& e) const override {
    e.output(0, e.reshape(e.input(0), e.output_shape(0)));
  }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    // A copy, not a view of dy: the tape sums gradients in place, which
    // must never write into memory another gradient shares.
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    ctx.backend().copy(dx->data(), grads[0]->data(), dx->nbytes());
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  // A view is fine here: a create_graph walk sums gradients out of place.
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(formula::reshape(*grads[0], inputs[0]->shape));
  }
};

class TransposeNode final : public Node {
 public:
  int32_t d0 = 0, d1 = 0;
  const char* name() const override { return "transpose"; }
  void onnx(onnx::Emitter& e) const override {
    std::vector<int64_t> perm;
    for (int32_t k = 0; k < e.input_tensor(0).shape.ndim; ++k) perm.push_back(k);
    std::swap(perm[d0], perm[d1]);
    e.output(0, e.op("Transpose", {e.input(0)}, {onnx::attr("perm", perm)}));
  }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    transpose_into(nn_of(ctx, name()), *grads[0], dx->data(), d0, d1);
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(formula::transpose(*grads[0], d0, d1));
  }
};

// Writes `src` permuted to `dst` (contiguous): output dimension k is
// dimension order[k] of src.
void permute_into(NnPrimitives& nn, const DeviceTensor& src, void* dst, const int32_t* order) {
  int64_t src_strides[AMPX_MAX_DIMS];
  contiguous_strides(src.shape, src_strides);
  StridedCopy layout;
  layout.ndim = src.shape.ndim;
  Shape out;
  out.ndim = src.shape.ndim;
  for (int32_t k = 0; k < out.ndim; ++k) {
    out.dims[k] = layout.sizes[k] = src.shape.dims[order[k]];
    layout.src_strides[k] = src_strides[order[k]];
  }
  contiguous_strides(out, layout.dst_strides);
  nn.copy_strided(dst, src.data(), dtype_size(src.dtype), layout);
}

class PermuteNode final : public Node {
 public:
  int32_t inverse[AMPX_MAX_DIMS] = {};  // the permutation that undoes the forward's
  const char* name() const override { return "permute"; }
  void onnx(onnx::Emitter& e) const override {
    const int32_t nd = e.input_tensor(0).shape.ndim;
    std::vector<int64_t> perm(nd);
    for (int32_t k = 0; k < nd; ++k) perm[inverse[k]] = k;
    e.output(0, e.op("Transpose", {e.input(0)}, {onnx::attr("perm", perm)}));
  }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& x = *inputs[0];
    TensorRef dx = new_tensor(ctx, x.dtype, x.shape);
    permute_into(nn_of(ctx, name()), *grads[0], dx->data(), inverse);
    return grad_list(std::move(dx));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    return grad_list(TensorRef(op_permute(*grads[0], inputs[0]->shape.ndim, inverse)));
  }
};

class ConcatNode final : public Node {
 public:
  int64_t outer = 0, inner = 0, total = 0;  // total: the output's extent along dim
  int32_t dim = 0;
  const char* name() const override { return "concat"; }
  void onnx(onnx::Emitter& e) const override {
    std::vector<std::string> parts;
    for (size_t i = 0; i < inputs.size(); ++i) parts.push_back(e.input(i));
    e.output(0, e.op("Concat", parts, {onnx::attr("axis", int64_t{dim})}));
  }
  bool reads_input(size_t) const override { return false; }
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *grads[0];
    std::vector<TensorRef> result;
    int64_t offset = 0;  // along dim
    for (const TensorRef& in : inputs) {
      const int64_t extent = in->shape.dims[dim];
      TensorRef dx;
      if (in->requires_grad) {
        dx = new_tensor(ctx, in->dtype, in->shape);
        if (dx->numel() > 0)
          nn_of(ctx, name())
              .copy_strided(dx->data(), byte_offset(dy.data(), offset * inner, dy.dtype),
                            dtype_size(dy.dtype),
                            block(outer, extent * inner, extent * inner, total * inner));
      }
      result.push_back(std::move(dx));
      offset += extent;
    }
    return result;
  }
  bool has_backward_graph() const override { return true; }
  // dy split back into the pieces (a recorded split).
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    std::vector<int64_t> sizes;
    for (const TensorRef& in : inputs) sizes.push_back(in->shape.dims[dim]);
    std::vector<TensorRef> pieces = op_split(*grads[0], sizes, dim);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!inputs[i]->requires_grad) pieces[i] = TensorRef();
    return pieces;
  }
};

class EmbeddingNode final : public Node {
 public:
  const char* name() const override { return "embedding"; }
  // Rows of the weight at the indices.
  void onnx(onnx::Emitter& e) const override {
    e.output(0, e.op("Gather", {e.input(0), e.input(1)}, {onnx::attr("axis", int64_t{0})}));
  }
  bool reads_input(size_t i) const override { return i == 1; }  // the indices
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    Backend& backend = ctx.backend();
    DeviceTensor& weight = *inputs[0];
    DeviceTensor& indices = *inputs[1];
    const int64_t cols = weight.shape.dims[1];
    // Summed in F32 whatever the weight's type: a frequent index adds many
    // rows, which an f16 sum would round at every step.
    TensorRef sum = new_tensor(ctx, DType::F32, weight.shape);
    if (sum->numel() == 0) return grad_list(new_tensor(ctx, weight.dtype, weight.shape));
    backend.fill(sum->data(), 4, 0, sum->numel());
    if (indices.numel() > 0)
      nn_of(ctx, name())
          .scatter_add_rows(grads[0]->data(), grads[0]->dtype, cols, indices.data(), indices.dtype,
                            indices.numel(), static_cast<float*>(sum->data()),
                            weight.shape.dims[0]);
    if (weight.dtype == DType::F32) return grad_list(std::move(sum));
    TensorRef dw = new_tensor(ctx, weight.dtype, weight.shape);
    backend.convert(dw->data(), weight.dtype, sum->data(), DType::F32, sum->numel());
    return grad_list(std::move(dw));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& weight = *inputs[0];
    return grad_list(
        TensorRef(op_embedding_grad(*grads[0], *inputs[1], weight.shape, weight.dtype)));
  }
};

// embedding's backward as an op: linear in dy, whose own gradient gathers
// the rows back (embedding of the gradient).
class EmbeddingGradNode final : public Node {
 public:
  const char* name() const override { return "embedding_backward"; }
  bool reads_input(size_t i) const override { return i == 1; }  // the indices
  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *inputs[0];
    DeviceTensor& indices = *inputs[1];
    DeviceTensor& g = *grads[0];
    TensorRef d_dy = new_tensor(ctx, dy.dtype, dy.shape);
    if (d_dy->numel() == 0) return grad_list(std::move(d_dy));
    const DeviceTensor* table = &g;
    TensorRef converted;
    if (g.dtype != dy.dtype) {
      converted = new_tensor(ctx, dy.dtype, g.shape);
      ctx.backend().convert(converted->data(), dy.dtype, g.data(), g.dtype, g.numel());
      table = converted.get();
    }
    nn_of(ctx, name()).gather_rows(table->data(),
                                   static_cast<size_t>(g.shape.dims[1]) * dtype_size(dy.dtype),
                                   g.shape.dims[0], indices.data(), indices.dtype,
                                   indices.numel(), d_dy->data());
    return grad_list(std::move(d_dy));
  }
  bool has_backward_graph() const override { return true; }
  std::vector<TensorRef> backward_graph(DeviceContext&,
                                        const std::vector<DeviceTensor*>& grads) override {
    DeviceTensor& dy = *inputs[0];
    TensorRef g = formula::cast(*grads[0], dy.dtype);
    return grad_list(formula::reshape(*TensorRef(op_embedding(*g, *inputs[1])), dy.shape));
  }
};

// Checks the indices where they live, as cross_entropy checks its labels:
// on the CPU a bad one fails the call; on a GPU it is reported at the next
// call that waits for the device, and meanwhile the gather gives its row as
// zeros and the gradient skips it (gather_rows, scatter_add_rows).
void check_embedding_indices(DeviceContext& ctx, const DeviceTensor& indices, int64_t rows) {
  IndexCheck check;
  check.limit = rows;
  check.op = kCheckEmbeddingIndices;
  ctx.check_indices(nn_of(ctx, "embedding"), indices.data(), indices.dtype, indices.numel(), check,
                    nullptr);
}

}  // namespace

DeviceTensor* op_reshape(DeviceTensor& x_in, int32_t ndim, const int64_t* dims) {
  check_not_fp8(x_in, "x");
  if (ndim < 0 || ndim > kMaxDims)
    fail(AMPX_ERR_SHAPE, "argument 'ndim' is ", ndim, "; use 0 .. ", kMaxDims);
  if (ndim > 0 && !dims) fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'shape' is NULL");
  Shape asked;
  asked.ndim = ndim;
  int32_t inferred = -1;
  for (int32_t k = 0; k < ndim; ++k) {
    asked.dims[k] = dims[k];
    if (dims[k] == -1 && inferred < 0) {
      inferred = k;
    } else if (dims[k] < 0) {
      fail(AMPX_ERR_SHAPE, "shape ", asked.str(), " for '", x_in.describe(),
           "': extents are >= 0, and only one may be -1 (inferred)");
    }
  }
  // The product of the given extents: 0 when one is 0, whatever the others
  // (an empty tensor has no elements in any order of its extents).
  bool has_zero = false;
  for (int32_t k = 0; k < ndim; ++k) has_zero = has_zero || (k != inferred && dims[k] == 0);
  int64_t known = has_zero ? 0 : 1;
  for (int32_t k = 0; k < ndim && !has_zero; ++k)
    if (k != inferred)
      known = checked_mul(known, dims[k], "shape ", asked.str(), " for '", x_in.describe(),
                          "' is too large: the product of its extents");
  const int64_t numel = x_in.numel();
  Shape shape = asked;
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0)
      fail(AMPX_ERR_SHAPE, "shape ", asked.str(), " cannot hold the ", numel, " elements of '",
           x_in.describe(), "' whatever the -1 stands for");
    shape.dims[inferred] = numel / known;
  } else if (known != numel) {
    fail(AMPX_ERR_SHAPE, "'x' is ", x_in.describe(), " (", numel, " elements) but shape ",
         asked.str(), " has ", known);
  }
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "reshape", {&x_in});
  DeviceTensor& x = *in[0];
  TensorRef out(DeviceTensor::alias(ctx, x, x.dtype, shape));
  if (should_record(ctx, {&x})) record(ctx, make_node<ReshapeNode>({&in[0]}), {out.get()});
  return out.take();
}

DeviceTensor* op_transpose(DeviceTensor& x_in, int32_t dim0, int32_t dim1) {
  require_capabilities(*x_in.ctx, "transpose", Capability::Nn);
  check_not_fp8(x_in, "x");
  const int32_t d0 = dim_arg(dim0, x_in.shape.ndim, "dim0", x_in);
  const int32_t d1 = dim_arg(dim1, x_in.shape.ndim, "dim1", x_in);
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "transpose", {&x_in});
  DeviceTensor& x = *in[0];
  Shape shape = x.shape;
  std::swap(shape.dims[d0], shape.dims[d1]);
  TensorRef out = new_tensor(ctx, x.dtype, shape);
  transpose_into(nn_of(ctx, "transpose"), x, out->data(), d0, d1);
  if (should_record(ctx, {&x})) {
    auto node = make_node<TransposeNode>({&in[0]});
    node->d0 = d0, node->d1 = d1;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_permute(DeviceTensor& x_in, int32_t ndim, const int32_t* dims) {
  require_capabilities(*x_in.ctx, "permute", Capability::Nn);
  check_not_fp8(x_in, "x");
  const int32_t nd = x_in.shape.ndim;
  if (ndim != nd || (nd > 0 && dims == nullptr))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'ndim' is ", ndim, " (dims ", dims ? "given" : "NULL",
         ") but '", x_in.describe(), "' has ", nd, " dimensions; permute lists each once");
  int32_t order[AMPX_MAX_DIMS] = {};
  uint32_t seen = 0;
  for (int32_t k = 0; k < nd; ++k) {
    order[k] = dim_arg(dims[k], nd, "dims", x_in);
    if (seen & (1u << order[k]))
      fail(AMPX_ERR_INVALID_ARGUMENT, "dimension ", order[k], " is listed twice in dims");
    seen |= 1u << order[k];
  }
  DeviceContext& ctx = *x_in.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "permute", {&x_in});
  DeviceTensor& x = *in[0];
  Shape shape = x.shape;
  for (int32_t k = 0; k < nd; ++k) shape.dims[k] = x.shape.dims[order[k]];
  TensorRef out = new_tensor(ctx, x.dtype, shape);
  if (nd > 0)
    permute_into(nn_of(ctx, "permute"), x, out->data(), order);
  else if (x.numel() > 0)
    ctx.backend().copy(out->data(), x.data(), x.nbytes());
  if (should_record(ctx, {&x})) {
    auto node = make_node<PermuteNode>({&in[0]});
    for (int32_t k = 0; k < nd; ++k) node->inverse[order[k]] = k;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_concat(const std::vector<DeviceTensor*>& tensors, int32_t dim_in) {
  if (tensors.empty())
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'count' is 0; concat needs a tensor");
  const DeviceTensor& first = *tensors[0];
  if (first.shape.ndim < 1)
    fail(AMPX_ERR_SHAPE, "'tensors[0]' is ", first.describe(),
         "; concat needs at least one dimension");
  require_capabilities(*first.ctx, "concat", Capability::Nn);
  for (size_t i = 0; i < tensors.size(); ++i)
    check_not_fp8(*tensors[i], cat("tensors[", i, "]").c_str());
  const int32_t dim = dim_arg(dim_in, first.shape.ndim, "dim", first);
  for (size_t i = 1; i < tensors.size(); ++i) {
    const DeviceTensor& t = *tensors[i];
    if (t.ctx != first.ctx)
      fail(AMPX_ERR_DEVICE, "'tensors[", i, "]' and 'tensors[0]' belong to different contexts");
    bool same = t.shape.ndim == first.shape.ndim;
    for (int32_t k = 0; same && k < t.shape.ndim; ++k)
      same = k == dim || t.shape.dims[k] == first.shape.dims[k];
    if (!same)
      fail(AMPX_ERR_SHAPE, "'tensors[", i, "]' is ", t.describe(), " and 'tensors[0]' is ",
           first.describe(), "; they may differ only in dimension ", dim);
    if (is_floating(t.dtype) != is_floating(first.dtype) ||
        (!is_floating(t.dtype) && t.dtype != first.dtype))
      fail(AMPX_ERR_DTYPE, "'tensors[", i, "]' is ", t.describe(), " and 'tensors[0]' is ",
           first.describe(),
           "; concat joins floating tensors (promoted to the widest type) or "
           "integer tensors of one type");
  }
  DeviceContext& ctx = *first.ctx;
  std::vector<TensorRef> in = op_inputs(ctx, "concat", tensors);
  const DType dtype = in[0]->dtype;
  const int64_t outer = first.shape.extent_product(0, dim);
  const int64_t inner = first.shape.extent_product(dim + 1, first.shape.ndim);
  int64_t total = 0;
  for (size_t i = 0; i < in.size(); ++i)
    total = checked_add(total, in[i]->shape.dims[dim], "concat's extent along dimension ", dim,
                        " up to 'tensors[", i, "]'");
  Shape shape = first.shape;
  shape.dims[dim] = total;
  TensorRef out = new_tensor(ctx, dtype, make_shape(shape, dtype, "concat's output"));
  // Only tensors with elements are copied: in an empty one the products of
  // its extents need not fit in int64 (with elements, each is at most numel).
  int64_t offset = 0;
  for (const TensorRef& t : in) {
    const int64_t extent = t->shape.dims[dim];
    if (t->numel() > 0)
      nn_of(ctx, "concat")
          .copy_strided(byte_offset(out->data(), offset * inner, dtype), t->data(),
                        dtype_size(dtype), block(outer, extent * inner, total * inner, extent * inner));
    offset += extent;
  }
  std::vector<DeviceTensor*> computed;
  std::vector<TensorRef*> refs;
  for (TensorRef& t : in) {
    computed.push_back(t.get());
    refs.push_back(&t);
  }
  if (should_record(ctx, computed)) {
    auto node = make_node<ConcatNode>(refs);
    node->outer = outer, node->inner = inner, node->total = total;
    node->dim = dim;
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

DeviceTensor* op_embedding(DeviceTensor& weight_in, DeviceTensor& indices) {
  require_capabilities(*weight_in.ctx, "embedding", Capability::Nn);
  check_same_context(weight_in, indices, "weight", "indices");
  check_floating(weight_in, "weight");
  if (indices.dtype != DType::I32 && indices.dtype != DType::I64)
    fail(AMPX_ERR_DTYPE, "'indices' is ", indices.describe(), "; indices are i32 or i64");
  if (weight_in.shape.ndim != 2)
    fail(AMPX_ERR_SHAPE, "'weight' is ", weight_in.describe(), "; embedding takes weight [V, D]");
  if (indices.shape.ndim >= kMaxDims)
    fail(AMPX_ERR_SHAPE, "'indices' is ", indices.describe(), "; the output [..., D] would have ",
         indices.shape.ndim + 1, " dimensions (at most ", kMaxDims, ")");
  DeviceContext& ctx = *weight_in.ctx;
  const int64_t rows = weight_in.shape.dims[0], cols = weight_in.shape.dims[1];
  check_embedding_indices(ctx, indices, rows);
  std::vector<TensorRef> in = op_inputs(ctx, "embedding", {&weight_in, &indices});
  DeviceTensor& weight = *in[0];
  Shape shape = indices.shape;
  shape.dims[shape.ndim++] = cols;
  TensorRef out = new_tensor(ctx, weight.dtype, make_shape(shape, weight.dtype, "embedding's output"));
  if (out->numel() > 0)
    nn_of(ctx, "embedding")
        .gather_rows(weight.data(), static_cast<size_t>(cols) * dtype_size(weight.dtype), rows,
                     indices.data(), indices.dtype, indices.numel(), out->data());
  if (should_record(ctx, {&weight}))
    record(ctx, make_node<EmbeddingNode>({&in[0], &in[1]}), {out.get()});
  return out.take();
}

DeviceTensor* op_embedding_grad(DeviceTensor& dy, DeviceTensor& indices, const Shape& weight_shape,
                                DType weight_dtype) {
  require_capabilities(*dy.ctx, "embedding_backward", Capability::Nn);
  DeviceContext& ctx = *dy.ctx;
  const int64_t cols = weight_shape.dims[1];
  // Summed in F32 whatever the weight's type, as EmbeddingNode's backward.
  TensorRef sum = new_tensor(ctx, DType::F32, weight_shape);
  if (sum->numel() > 0) {
    ctx.backend().fill(sum->data(), 4, 0, sum->numel());
    if (indices.numel() > 0)
      nn_of(ctx, "embedding_backward")
          .scatter_add_rows(dy.data(), dy.dtype, cols, indices.data(), indices.dtype,
                            indices.numel(), static_cast<float*>(sum->data()),
                            weight_shape.dims[0]);
  }
  TensorRef out = weight_dtype == DType::F32 ? std::move(sum) : new_tensor(ctx, weight_dtype, weight_shape);
  if (sum && out->numel() > 0)
    ctx.backend().convert(out->data(), weight_dtype, sum->data(), DType::F32, out->numel());
  if (should_record(ctx, {&dy})) {
    auto node = std::make_unique<EmbeddingGradNode>();
    node->inputs.push_back(retained(dy));
    node->inputs.push_back(retained(indices));
    record(ctx, std::move(node), {out.get()});
  }
  return out.take();
}

}  // namespace ampx::impl
