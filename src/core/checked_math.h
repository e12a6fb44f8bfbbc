// checked_math.h -- int64 size arithmetic that cannot wrap.
//
// Extents, window sizes and byte offsets computed from what a caller passed
// (a padding, a dilation, a kernel extent, a tensor's extents) go through
// these, so that a product or sum too large for int64 is an
// AMPX_ERR_SHAPE naming the expression and its operands -- never a wrapped
// value that passes the checks after it (conv2d with dilation INT64_MAX
// once gave an output taller than its input), and never the undefined
// behaviour of signed overflow in C++.
#pragma once

#include <cstdint>
#include <utility>

#include "core/error.h"

namespace ampx::impl {

// a * b, or SHAPE: "<what> = a * b overflows int64". `what` is any parts
// operator<< takes (formatted only on failure), naming the expression as
// the caller knows it ("dilation[0] * (kernel_h - 1)").
template <class... What>
int64_t checked_mul(int64_t a, int64_t b, What&&... what) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    fail(AMPX_ERR_SHAPE, std::forward<What>(what)..., " = ", a, " * ", b, " overflows int64");
  return product;
}

// a + b, or SHAPE: "<what> = a + b overflows int64".
template <class... What>
int64_t checked_add(int64_t a, int64_t b, What&&... what) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    fail(AMPX_ERR_SHAPE, std::forward<What>(what)..., " = ", a, " + ", b, " overflows int64");
  return sum;
}

}  // namespace ampx::impl
