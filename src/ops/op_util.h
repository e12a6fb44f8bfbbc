// op_util.h -- small pieces every op uses.
#pragma once

#include <cstring>
#include <utility>
#include <vector>

#include "autocast/autocast.h"
#include "autograd/tape.h"
#include "core/backend_amp.h"
#include "core/backend_gemm.h"
#include "core/backend_nn.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ampx::impl {

// The capabilities of ctx's backend an op needs; NOT_SUPPORTED naming `op`
// and the device when the backend lacks one.
inline NnPrimitives& nn_of(DeviceContext& ctx, const char* op) {
  return ctx.backend().require<NnPrimitives>(op);
}
inline AmpPrimitives& amp_of(DeviceContext& ctx, const char* op) {
  return ctx.backend().require<AmpPrimitives>(op);
}
inline GemmPrimitives& gemm_of(DeviceContext& ctx, const char* op) {
  return ctx.backend().require<GemmPrimitives>(op);
}

// Checks up front, before an op changes anything (autocast's casts are
// recorded on the tape), that the backend has every capability it uses.
template <class... Capabilities>
void require_capabilities(DeviceContext& ctx, const char* op, Capabilities... capabilities) {
  for (Capability c : {capabilities...})
    if (!ctx.backend().supports(c)) ctx.backend().refuse(op, c);
}

inline void check_same_context(const DeviceTensor& a, const DeviceTensor& b, const char* a_name,
                               const char* b_name) {
  if (a.ctx != b.ctx)
    fail(AMPX_ERR_DEVICE, "'", a_name, "' and '", b_name, "' belong to different contexts");
}

inline void check_floating(const DeviceTensor& t, const char* name) {
  if (!is_floating(t.dtype))
    fail(AMPX_ERR_DTYPE, "'", name, "' is ", t.describe(), "; this op needs f32, f16 or bf16");
}

// For the ops that take any dtype (reshape, transpose, permute, concat,
// split, a mask): FP8 tensors are for casts and FP8 products only (as
// torch refuses to promote float8 types), so every op refuses them.
inline void check_not_fp8(const DeviceTensor& t, const char* name) {
  if (is_fp8(t.dtype))
    fail(AMPX_ERR_DTYPE, "'", name, "' is ", t.describe(),
         "; ops do not take FP8 tensors (cast to f32, f16 or bf16 first)");
}

inline TensorRef new_tensor(DeviceContext& ctx, DType dtype, const Shape& shape) {
  return TensorRef(DeviceTensor::empty(ctx, dtype, shape));
}

inline Shape scalar_shape() { return Shape{}; }

// A second tensor on t's memory, for a node that saves its own output for
// backward: holding the output itself would keep its tape token alive, so
// the record could never be pruned once the program released the output.
inline TensorRef saved_output(DeviceContext& ctx, DeviceTensor& t) {
  return TensorRef(DeviceTensor::alias(ctx, t, t.dtype, t.shape));
}

// Builds a node's input list from the (cast) inputs it was computed on.
template <class NodeT>
std::unique_ptr<NodeT> make_node(std::vector<TensorRef*> inputs) {
  auto node = std::make_unique<NodeT>();
  for (TensorRef* in : inputs) node->inputs.push_back(in && *in ? retained(**in) : TensorRef());
  return node;
}

inline std::vector<TensorRef> grad_list(TensorRef a, TensorRef b = TensorRef(),
                                        TensorRef c = TensorRef()) {
  std::vector<TensorRef> list;
  list.push_back(std::move(a));
  list.push_back(std::move(b));
  list.push_back(std::move(c));
  return list;
}

// A tensor of `like`'s dtype and shape holding `value` * (*factor), where
// factor is a device F32 scalar: the backward of reductions.
inline TensorRef broadcast_scaled(DeviceContext& ctx, const char* op, const DeviceTensor& like,
                                  const float* factor, float value) {
  TensorRef out = new_tensor(ctx, like.dtype, like.shape);
  if (out->numel() == 0) return out;
  Backend& backend = ctx.backend();
  AmpPrimitives& amp = amp_of(ctx, op);
  TensorRef ones = new_tensor(ctx, DType::F32, like.shape);
  float one = value;
  uint32_t bits;
  std::memcpy(&bits, &one, sizeof bits);
  backend.fill(ones->data(), 4, bits, ones->numel());
  amp.multi_tensor_scale({{ones->data(), DType::F32, ones->numel()}},
                         {{out->data(), out->dtype, out->numel()}}, factor, false, nullptr);
  return out;
}

// An output's gradient in F32 on the device (a loss's: a scalar, or one
// value per row or element when unreduced).
inline TensorRef grad_f32(DeviceContext& ctx, DeviceTensor& grad) {
  if (grad.dtype == DType::F32) return retained(grad);
  TensorRef f32 = new_tensor(ctx, DType::F32, grad.shape);
  if (grad.numel() > 0)
    ctx.backend().convert(f32->data(), DType::F32, grad.data(), grad.dtype, grad.numel());
  return f32;
}

}  // namespace ampx::impl
