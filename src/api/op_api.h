// op_api.h -- what the C entry points of the ops (section 11 of ampx.h)
// share: running an op under guard() and delivering its output, and the
// translation of the enums ops take.
#pragma once

#include "api/guard.h"
#include "autograd/tape.h"
#include "ops/ops.h"

namespace ampx::impl {

// Runs an op and hands its output to the open scope or the caller.
template <class Op>
ampx_status run_op(const char* function, ampx_tensor* out, Op&& op) {
  return guard(function, [&] {
    require_pointer(out, "out");
    TensorRef result(op());
    DeviceContext& ctx = *result->ctx;
    *out = to_handle(deliver(ctx, std::move(result)));
  });
}

inline Reduction reduction_arg(ampx_reduction r) {
  switch (r) {
    case AMPX_REDUCTION_MEAN: return Reduction::Mean;
    case AMPX_REDUCTION_SUM: return Reduction::Sum;
    case AMPX_REDUCTION_NONE: return Reduction::None;
    default: break;
  }
  fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'reduction' is ", static_cast<int>(r),
       "; use AMPX_REDUCTION_MEAN, AMPX_REDUCTION_SUM or AMPX_REDUCTION_NONE");
}

}  // namespace ampx::impl
