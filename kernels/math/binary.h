// binary.h -- the per-element math of the binary ops (BinaryOp, a primitive
// of core/backend_nn.h), in fp32, shared by the CPU backend and the CUDA
// kernels.
#pragma once

#include "math/hd.h"

namespace ampx::impl {

// Equal gives 1 where a == b and 0 elsewhere (NaN equals nothing): the
// tie mask of amax's backward pass, never an op of its own.
enum class BinaryOp { Add, Sub, Mul, Div, Equal };

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
