// backend_conv.cpp -- the front doors of backend_conv.h: its argument
// checks, once for every backend.
#include "core/backend_conv.h"

#include "core/error.h"

namespace ampx::impl {
namespace {

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

void check_type(const char* primitive, DType type) {
  if (!is_floating(type))
    fail(AMPX_ERR_DTYPE, primitive, ": tensors are ", dtype_name(type), "; f32, f16 or bf16 needed");
}

void check_window(const char* primitive, int64_t in, int64_t out, int64_t kernel, int64_t stride,
                  int64_t pad, int64_t dilation) {
  if (in <= 0 || out <= 0 || kernel <= 0 || stride <= 0 || pad < 0 || dilation <= 0)
    fail(AMPX_ERR_SHAPE, primitive, ": input extent ", in, ", output ", out, ", kernel ", kernel,
         ", stride ", stride, ", padding ", pad, ", dilation ", dilation);
}

void check_conv(const char* primitive, const Conv2dShape& s, DType type) {
  check_type(primitive, type);
  if (s.batch <= 0 || s.groups <= 0 || s.in_channels <= 0 || s.out_channels <= 0 ||
      s.in_channels % s.groups != 0 || s.out_channels % s.groups != 0)
    fail(AMPX_ERR_SHAPE, primitive, ": batch ", s.batch, ", in_channels ", s.in_channels,
         ", out_channels ", s.out_channels, ", groups ", s.groups);
  check_window(primitive, s.in_h, s.out_h, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h);
  check_window(primitive, s.in_w, s.out_w, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w);
  if (window_output_extent(s.in_h, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h, false) !=
          s.out_h ||
      window_output_extent(s.in_w, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w, false) != s.out_w)
    fail(AMPX_ERR_SHAPE, primitive, ": output ", s.out_h, " x ", s.out_w,
         " is not what the input and window give");
}

void check_pool(const char* primitive, const Pool2dShape& s, DType type) {
  check_type(primitive, type);
  if (s.planes <= 0 || s.divisor < 0)
    fail(AMPX_ERR_SHAPE, primitive, ": planes ", s.planes, ", divisor ", s.divisor);
  check_window(primitive, s.in_h, s.out_h, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h);
  check_window(primitive, s.in_w, s.out_w, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w);
  if (s.kind == PoolKind::Average && (s.dilation_h != 1 || s.dilation_w != 1))
    fail(AMPX_ERR_SHAPE, primitive, ": average pooling has no dilation");
}

}  // namespace

int64_t window_output_extent(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                             int64_t dilation, bool ceil_mode) {
  int64_t out =
      floor_div(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) +
      1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
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

}  // namespace ampx::impl
