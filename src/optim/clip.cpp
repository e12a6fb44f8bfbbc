#include "optim/clip.h"

#include <cfloat>
#include <cmath>

#include "math/convert.h"
#include "core/error.h"

namespace ampx::impl {

DeviceTensor* clip_grad_norm(FusedOptimizer& optimizer, double max_norm, NormType type,
                             bool error_if_nonfinite) {
  if (!(max_norm >= 0.0) || !(max_norm <= FLT_MAX))
    fail(AMPX_ERR_INVALID_ARGUMENT, "max_norm is ", max_norm, "; it must be finite and >= 0");
  AmpIteration& iteration = optimizer.iteration();
  iteration.require_unscaled();
  DeviceContext& ctx = optimizer.context();
  AmpPrimitives& amp = ctx.backend().require<AmpPrimitives>("clip_grad_norm");
  iteration.reduce_gradients("clip_grad_norm");
  const std::vector<TensorSpan> grads = optimizer.effective_grads();
  TensorRef total(make_filled_f32(ctx, vector_shape(1), 0.0f));
  TensorRef coef(make_filled_f32(ctx, vector_shape(1), 1.0f));
  auto* total_ptr = static_cast<float*>(total->data());
  amp.multi_tensor_norm(grads, type, total_ptr);
  iteration.reduce_norm(total_ptr, type);
  if (error_if_nonfinite) {
    float value = 0.0f;
    ctx.read_to_host(&value, total_ptr, sizeof value);
    if (!std::isfinite(value))
      fail(AMPX_ERR_INVALID_ARGUMENT, "the total norm of the gradients is ", value,
           "; nothing was clipped (pass error_if_nonfinite = 0 to clip anyway)");
  }
  auto* coef_ptr = static_cast<float*>(coef->data());
  amp.clip_coefficient(total_ptr, math::double_to_float(max_norm), coef_ptr);
  amp.multi_tensor_scale(grads, grads, coef_ptr, false, nullptr);
  return total.take();
}

void clip_grad_value(FusedOptimizer& optimizer, double clip_value) {
  if (!(clip_value >= 0.0) || !(clip_value <= FLT_MAX))
    fail(AMPX_ERR_INVALID_ARGUMENT, "clip_value is ", clip_value, "; it must be finite and >= 0");
  optimizer.iteration().require_unscaled();
  optimizer.iteration().reduce_gradients("clip_grad_value");
  optimizer.context()
      .backend()
      .require<AmpPrimitives>("clip_grad_value")
      .multi_tensor_clamp(optimizer.effective_grads(), math::double_to_float(clip_value));
}

std::vector<NonfiniteGradCount> find_nonfinite_grads(FusedOptimizer& optimizer) {
  optimizer.iteration().reduce_gradients("find_nonfinite_grads");
  std::vector<const FusedOptimizer::Param*> owners;
  const std::vector<TensorSpan> grads = optimizer.effective_grads(&owners);
  std::vector<NonfiniteGradCount> found;
  if (grads.empty()) return found;
  DeviceContext& ctx = optimizer.context();
  TensorRef counts(
      DeviceTensor::empty(ctx, DType::I64, vector_shape(2 * static_cast<int64_t>(grads.size()))));
  ctx.backend()
      .require<AmpPrimitives>("find_nonfinite_grads")
      .multi_tensor_count_nonfinite(grads, static_cast<int64_t*>(counts->data()));
  std::vector<int64_t> host(2 * grads.size());
  ctx.read_to_host(host.data(), counts->data(), counts->nbytes());
  for (size_t i = 0; i < grads.size(); ++i)
    if (host[2 * i] + host[2 * i + 1] > 0)
      found.push_back({owners[i]->param.get(), host[2 * i], host[2 * i + 1]});
  return found;
}

}  // namespace ampx::impl
