// backend_conv.h -- 2-D convolution and pooling over NCHW tensors, two
// backend capabilities (backend.h): Convolution behind ampx_conv2d, Pooling
// behind ampx_max_pool2d and ampx_avg_pool2d (a backend may have pooling
// kernels of its own while its convolution needs a library it may lack).
//
// Convolution, for image n, output channel o of group g = o / (out_channels
// / groups) and output position (p, q):
//   y[n, o, p, q] = bias[o] + sum_{c, i, j} w[o, c, i, j]
//                   * x[n, g * Cg + c, p * sh - ph + i * dh, q * sw - pw + j * dw]
// with Cg = in_channels / groups and x read as 0 outside the image. Its
// gradients are the transposed sums:
//   dx[n, g Cg + c, a, b] = sum_{o in g, i, j : a = p sh - ph + i dh, ...} w[o, c, i, j] dy[n, o, p, q]
//   dw[o, c, i, j] = sum_{n, p, q} dy[n, o, p, q] x[n, g Cg + c, p sh - ph + i dh, ...]
//   dbias[o] = sum_{n, p, q} dy[n, o, p, q]
// x, w, y, bias and the gradients share one floating type; products are
// accumulated in fp32 and each result is rounded once.
//
// Pooling of each plane (n, c), torch's max_pool2d / avg_pool2d: the window
// of output (p, q) covers rows p * sh - ph + i * dh (i < kh) and columns
// likewise. Max takes the largest element inside the image (a NaN wins; of
// equal maxima the first in row-major order), and its gradient goes to that
// element alone. Average (no dilation) divides the sum of the elements
// inside the image by `divisor` when non-zero, else by the window's size
// clipped to the padded image (count_include_pad) or to the image.
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace ampx::impl {

struct Conv2dShape {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, out_h = 0, out_w = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

// A convolution or pooling window along dimension `d` (0: rows, 1:
// columns) of an input of extent `in`, for kernel, stride and dilation >= 1
// and pad >= 0:
//   span    = dilation (kernel - 1) + 1, the window's extent with its gaps
//   padded  = in + 2 pad
//   out     = floor((padded - span) / stride) + 1, the output extent; with
//             ceil_mode rounded up instead, less one when the last window
//             would start in the right padding ((out - 1) stride >= in +
//             pad), as torch. < 1 when the window does not fit; callers check.
// span and padded are computed with checked_math.h: one too large for
// int64 is AMPX_ERR_SHAPE naming the expression ("dilation[0] *
// (kernel_h - 1)", "H + 2 * padding[0]"); out is then exact (no step of it
// can wrap), and so is (out - 1) * stride, which is below padded.
struct WindowExtents {
  int64_t span = 0, padded = 0, out = 0;
};
int64_t window_span(int d, int64_t kernel, int64_t dilation);
WindowExtents window_extents(int d, int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                             int64_t dilation, bool ceil_mode);
// Average pooling with count_include_pad and no divisor divides by the
// window's size clipped to the padded input, at most
// min(kernel_h, H + 2 pad_h) * min(kernel_w, W + 2 pad_w): that product, or
// SHAPE when it overflows int64.
int64_t padded_window_size(const WindowExtents& rows, const WindowExtents& cols,
                           int64_t kernel_h, int64_t kernel_w);

enum class PoolKind { Max, Average };

struct Pool2dShape {
  int64_t planes = 0;  // batch * channels
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int64_t kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  PoolKind kind = PoolKind::Max;
  bool count_include_pad = true;  // average only
  int64_t divisor = 0;            // average only; 0: the window's size
};

class ConvolutionPrimitives : public BackendCapability, public Tf32Setting {
 public:
  static constexpr Capability kId = Capability::Convolution;

  // y [batch, out_channels, out_h, out_w] from x [batch, in_channels, in_h,
  // in_w], w [out_channels, in_channels / groups, kernel_h, kernel_w] and
  // bias [out_channels] (nullptr: none).
  void conv2d_forward(const Conv2dShape& shape, const void* x, const void* w, const void* bias,
                      DType type, void* y);
  // dx (written) from dy and w.
  void conv2d_backward_data(const Conv2dShape& shape, const void* dy, const void* w, DType type,
                            void* dx);
  // dw (written) and, when not nullptr, dbias (written) from dy and x.
  void conv2d_backward_weight(const Conv2dShape& shape, const void* dy, const void* x, DType type,
                              void* dw, void* dbias);
  // Both gradients of one convolution: what conv2d_backward_data writes to
  // dx and conv2d_backward_weight to dw and dbias (nullptr: none), the same
  // values, in one call, so that a backend can share the work on dy (the
  // CPU moves it into oneDNN's layout once).
  void conv2d_backward(const Conv2dShape& shape, const void* dy, const void* x, const void* w,
                       DType type, void* dx, void* dw, void* dbias);

 protected:
  virtual void run_conv2d_forward(const Conv2dShape& shape, const void* x, const void* w,
                                  const void* bias, DType type, void* y) = 0;
  virtual void run_conv2d_backward_data(const Conv2dShape& shape, const void* dy, const void* w,
                                        DType type, void* dx) = 0;
  virtual void run_conv2d_backward_weight(const Conv2dShape& shape, const void* dy,
                                          const void* x, DType type, void* dw, void* dbias) = 0;
  // By default the two passes one after the other.
  virtual void run_conv2d_backward(const Conv2dShape& shape, const void* dy, const void* x,
                                   const void* w, DType type, void* dx, void* dw, void* dbias) {
    run_conv2d_backward_data(shape, dy, w, type, dx);
    run_conv2d_backward_weight(shape, dy, x, type, dw, dbias);
  }
};

class PoolingPrimitives : public BackendCapability {
 public:
  static constexpr Capability kId = Capability::Pooling;

  // y [planes, out_h, out_w] from x [planes, in_h, in_w].
  void pool2d_forward(const Pool2dShape& shape, const void* x, DType type, void* y);
  // dx (written) from x and dy (max pooling re-finds each window's maximum
  // in x).
  void pool2d_backward(const Pool2dShape& shape, const void* x, const void* dy, DType type,
                       void* dx);
  // Max pooling only: y [planes, out_h, out_w] = src at the maximum of x
  // in each output's window (0 for a window with no tap in the image), src
  // of x's shape. The adjoint of the backward pass (dy -> dx) for a fixed
  // x: the differentiable formula of max pooling's backward uses it.
  void max_pool2d_gather(const Pool2dShape& shape, const void* x, const void* src, DType type,
                         void* y);

 protected:
  virtual void run_pool2d_forward(const Pool2dShape& shape, const void* x, DType type,
                                  void* y) = 0;
  virtual void run_pool2d_backward(const Pool2dShape& shape, const void* x, const void* dy,
                                   DType type, void* dx) = 0;
  virtual void run_max_pool2d_gather(const Pool2dShape& shape, const void* x, const void* src,
                                     DType type, void* y) = 0;
};

}  // namespace ampx::impl
