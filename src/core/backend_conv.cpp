// backend_conv.cpp -- the front doors of backend_conv.h: its argument
// checks, once for every backend.
#include "core/backend_conv.h"

#include "core/checked_math.h"
#include "core/error.h"

namespace ampx::impl {
namespace {

void check_type(const char* primitive, DType type) {
  if (!is_floating(type))
    fail(AMPX_ERR_DTYPE, primitive, ": tensors are ", dtype_name(type), "; f32, f16 or bf16 needed");
}

// The window along dimension d, its extents in range; `ceil_mode` true
// gives the largest output a pooling of this shape may have.
WindowExtents check_window(const char* primitive, int d, int64_t in, int64_t out, int64_t kernel,
                           int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  if (in <= 0 || out <= 0 || kernel <= 0 || stride <= 0 || pad < 0 || dilation <= 0)
    fail(AMPX_ERR_SHAPE, primitive, ": input extent ", in, ", output ", out, ", kernel ", kernel,
         ", stride ", stride, ", padding ", pad, ", dilation ", dilation);
  try {
    return window_extents(d, in, kernel, stride, pad, dilation, ceil_mode);
  } catch (const StatusError& e) {
    fail(e.status(), primitive, ": ", e.what());
  }
}

void check_conv(const char* primitive, const Conv2dShape& s, DType type) {
  check_type(primitive, type);
  if (s.batch <= 0 || s.groups <= 0 || s.in_channels <= 0 || s.out_channels <= 0 ||
      s.in_channels % s.groups != 0 || s.out_channels % s.groups != 0)
    fail(AMPX_ERR_SHAPE, primitive, ": batch ", s.batch, ", in_channels ", s.in_channels,
         ", out_channels ", s.out_channels, ", groups ", s.groups);
  const WindowExtents rows = check_window(primitive, 0, s.in_h, s.out_h, s.kernel_h, s.stride_h,
                                          s.pad_h, s.dilation_h, false);
  const WindowExtents cols = check_window(primitive, 1, s.in_w, s.out_w, s.kernel_w, s.stride_w,
                                          s.pad_w, s.dilation_w, false);
  if (rows.out != s.out_h || cols.out != s.out_w)
    fail(AMPX_ERR_SHAPE, primitive, ": output ", s.out_h, " x ", s.out_w,
         " is not what the input and window give");
}

void check_pool(const char* primitive, const Pool2dShape& s, DType type) {
  check_type(primitive, type);
  if (s.planes <= 0 || s.divisor < 0)
    fail(AMPX_ERR_SHAPE, primitive, ": planes ", s.planes, ", divisor ", s.divisor);
  // Pooling's shape does not say whether ceil_mode made it: its output may
  // be at most the rounded-up extent (whose windows the kernels' index
  // arithmetic is bounded by).
  const WindowExtents rows = check_window(primitive, 0, s.in_h, s.out_h, s.kernel_h, s.stride_h,
                                          s.pad_h, s.dilation_h, true);
  const WindowExtents cols = check_window(primitive, 1, s.in_w, s.out_w, s.kernel_w, s.stride_w,
                                          s.pad_w, s.dilation_w, true);
  if (s.out_h > rows.out || s.out_w > cols.out)
    fail(AMPX_ERR_SHAPE, primitive, ": output ", s.out_h, " x ", s.out_w,
         " is more than the input and window give");
  if (s.kind == PoolKind::Average && (s.dilation_h != 1 || s.dilation_w != 1))
    fail(AMPX_ERR_SHAPE, primitive, ": average pooling has no dilation");
  if (s.kind == PoolKind::Average && s.count_include_pad && s.divisor == 0) {
    try {
      padded_window_size(rows, cols, s.kernel_h, s.kernel_w);
    } catch (const StatusError& e) {
      fail(e.status(), primitive, ": ", e.what());
    }
  }
}

}  // namespace

int64_t window_span(int d, int64_t kernel, int64_t dilation) {
  const char* const kernel_name = d == 0 ? "kernel_h" : "kernel_w";
  const int64_t gaps =
      checked_mul(dilation, kernel - 1, "dilation[", d, "] * (", kernel_name, " - 1)");
  return checked_add(gaps, 1, "dilation[", d, "] * (", kernel_name, " - 1) + 1");
}

WindowExtents window_extents(int d, int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                             int64_t dilation, bool ceil_mode) {
  const char* const in_name = d == 0 ? "H" : "W";
  WindowExtents w;
  w.span = window_span(d, kernel, dilation);
  w.padded = checked_add(in, checked_mul(2, pad, "2 * padding[", d, "]"), in_name, " + 2 * padding[",
                         d, "]");
  // Both terms lie in [0, INT64_MAX], so their difference cannot wrap; the
  // rounding is done on the quotient rather than by adding stride - 1
  // first (torch's form), which could.
  const int64_t reach = w.padded - w.span;
  int64_t quotient = reach / stride;  // rounded toward zero
  if (reach % stride != 0) {
    if (ceil_mode && reach > 0) ++quotient;
    if (!ceil_mode && reach < 0) --quotient;
  }
  w.out = quotient + 1;
  // (out - 1) * stride >= in + pad, without the product: in + pad >= 1
  // whenever out > 1 (then padded > span >= 1).
  if (ceil_mode && w.out > 1 && w.out - 1 > (in + pad - 1) / stride) --w.out;
  return w;
}

int64_t padded_window_size(const WindowExtents& rows, const WindowExtents& cols,
                           int64_t kernel_h, int64_t kernel_w) {
  return checked_mul(kernel_h < rows.padded ? kernel_h : rows.padded,
                     kernel_w < cols.padded ? kernel_w : cols.padded,
                     "the averaging window's size min(kernel_h, H + 2 * padding[0]) * "
                     "min(kernel_w, W + 2 * padding[1])");
}

void ConvolutionPrimitives::conv2d_forward(const Conv2dShape& shape, const void* x, const void* w,
                                           const void* bias, DType type, void* y) {
  const ProfileScope timed(profile(), "conv2d_forward", dtype_name(type));
  check_conv("conv2d_forward", shape, type);
  run_conv2d_forward(shape, x, w, bias, type, y);
}

void ConvolutionPrimitives::conv2d_backward_data(const Conv2dShape& shape, const void* dy,
                                                 const void* w, DType type, void* dx) {
  const ProfileScope timed(profile(), "conv2d_backward_data", dtype_name(type));
  check_conv("conv2d_backward_data", shape, type);
  run_conv2d_backward_data(shape, dy, w, type, dx);
}

void ConvolutionPrimitives::conv2d_backward_weight(const Conv2dShape& shape, const void* dy,
                                                   const void* x, DType type, void* dw,
                                                   void* dbias) {
  const ProfileScope timed(profile(), "conv2d_backward_weight", dtype_name(type));
  check_conv("conv2d_backward_weight", shape, type);
  run_conv2d_backward_weight(shape, dy, x, type, dw, dbias);
}

void ConvolutionPrimitives::conv2d_backward(const Conv2dShape& shape, const void* dy,
                                            const void* x, const void* w, DType type, void* dx,
                                            void* dw, void* dbias) {
  const ProfileScope timed(profile(), "conv2d_backward", dtype_name(type));
  check_conv("conv2d_backward", shape, type);
  run_conv2d_backward(shape, dy, x, w, type, dx, dw, dbias);
}

void PoolingPrimitives::pool2d_forward(const Pool2dShape& shape, const void* x, DType type,
                                           void* y) {
  const ProfileScope timed(profile(), "pool2d_forward", dtype_name(type));
  check_pool("pool2d_forward", shape, type);
  run_pool2d_forward(shape, x, type, y);
}

void PoolingPrimitives::pool2d_backward(const Pool2dShape& shape, const void* x,
                                            const void* dy, DType type, void* dx) {
  const ProfileScope timed(profile(), "pool2d_backward", dtype_name(type));
  check_pool("pool2d_backward", shape, type);
  run_pool2d_backward(shape, x, dy, type, dx);
}

void PoolingPrimitives::max_pool2d_gather(const Pool2dShape& shape, const void* x,
                                          const void* src, DType type, void* y) {
  check_pool("max_pool2d_gather", shape, type);
  if (shape.kind != PoolKind::Max)
    fail(AMPX_ERR_INVALID_ARGUMENT, "max_pool2d_gather: the shape is of average pooling");
  run_max_pool2d_gather(shape, x, src, type, y);
}

}  // namespace ampx::impl
