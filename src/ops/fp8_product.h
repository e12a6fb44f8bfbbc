// fp8_product.h -- linear and matmul as FP8 products, for an autocast
// policy with an FP8 recipe (ampx.h section 18, "FP8 under autocast").
#pragma once

#include "autocast/autocast.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace ampx::impl {

// act(x W^T + bias) with x [rows, in] (x's extents but the last folded
// into rows), W [out, in], in FP8 through the backend's Fp8Gemm, recorded
// for an FP8 backward; the output has the policy's dtype and x's shape
// with the last extent `out`. Returns nullptr, having counted a fallback
// with its reason in the policy, when the product should not run in FP8
// (too small, a shape the device refuses); the caller then runs the op as
// plain autocast. Arguments were checked by the op.
DeviceTensor* try_fp8_linear(PrecisionPolicy& policy, DeviceTensor& x, DeviceTensor& weight,
                             DeviceTensor* bias, Activation activation);

// a b for a [..., M, K] and a 2-D b [K, N], as try_fp8_linear (the weight
// is b). nullptr with a counted fallback for other shapes too.
DeviceTensor* try_fp8_matmul(PrecisionPolicy& policy, DeviceTensor& a, DeviceTensor& b);

}  // namespace ampx::impl
