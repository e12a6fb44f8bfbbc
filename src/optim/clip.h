// clip.h -- gradient clipping and non-finite gradient diagnostics over an
// optimizer's gradients (as its next step would use them).
#pragma once

#include <vector>

#include "optim/optimizer.h"

namespace ampx::impl {

// Clipping is refused (AMPX_ERR_ORDER) while the gradients are still
// multiplied by an enabled loss scaler's scale (AmpIteration).
// torch.nn.utils.clip_grad_norm_; returns a new F32[1] tensor holding the
// total norm. With error_if_nonfinite, synchronizes and throws before
// clipping anything when the total is not finite.
DeviceTensor* clip_grad_norm(FusedOptimizer& optimizer, double max_norm, NormType type,
                             bool error_if_nonfinite);

// torch.nn.utils.clip_grad_value_.
void clip_grad_value(FusedOptimizer& optimizer, double clip_value);

struct NonfiniteGradCount {
  const DeviceTensor* param;
  int64_t nan_count;
  int64_t inf_count;
};

// Parameters whose gradients hold NaN or inf, in parameter order.
// Synchronizes.
std::vector<NonfiniteGradCount> find_nonfinite_grads(FusedOptimizer& optimizer);

}  // namespace ampx::impl
