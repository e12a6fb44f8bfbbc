// binary.h -- the per-element math of the binary ops (core/backend_nn.h,
// BinaryOp), in fp32, shared by the CPU backend and the CUDA kernels.
#pragma once

#include "core/backend_nn.h"
#include "math/hd.h"

namespace ampx::impl {
namespace math {

template <BinaryOp Op>
AMPX_HD float binary_value(float a, float b) {
  if constexpr (Op == BinaryOp::Add)
    return a + b;
  else if constexpr (Op == BinaryOp::Sub)
    return a - b;
  else if constexpr (Op == BinaryOp::Mul)
    return a * b;
  else if constexpr (Op == BinaryOp::Div)
    return a / b;
  else
    return a == b ? 1.0f : 0.0f;
}

}  // namespace math
}  // namespace ampx::impl
