// api_conv.cpp -- the C entry points of convolution and pooling (section
// 11 of ampx.h).
#include "api/op_api.h"

using namespace ampx::impl;

namespace {

void copy_pair(int64_t dst[2], const int64_t src[2]) { dst[0] = src[0], dst[1] = src[1]; }

Pool2dParams pool_params(PoolKind kind, int64_t kernel_h, int64_t kernel_w,
                         const ampx_pool2d_options* options) {
  const ampx_pool2d_options o = read_options(options, ampx_pool2d_options_default(), "options");
  Pool2dParams p;
  p.kind = kind;
  p.kernel[0] = kernel_h, p.kernel[1] = kernel_w;
  if (o.stride[0] == 0 && o.stride[1] == 0)
    copy_pair(p.stride, p.kernel);
  else
    copy_pair(p.stride, o.stride);
  copy_pair(p.padding, o.padding);
  copy_pair(p.dilation, o.dilation);
  p.ceil_mode = o.ceil_mode != 0;
  p.count_include_pad = o.count_include_pad != 0;
  p.divisor = o.divisor_override;
  return p;
}

}  // namespace

extern "C" {

ampx_conv2d_options ampx_conv2d_options_default(void) { return AMPX_CONV2D_OPTIONS_INIT; }

ampx_pool2d_options ampx_pool2d_options_default(void) { return AMPX_POOL2D_OPTIONS_INIT; }

ampx_status ampx_conv2d(ampx_tensor x, ampx_tensor weight, ampx_tensor bias,
                        const ampx_conv2d_options* options, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    const ampx_conv2d_options o = read_options(options, ampx_conv2d_options_default(), "options");
    Conv2dParams p;
    copy_pair(p.stride, o.stride);
    copy_pair(p.padding, o.padding);
    copy_pair(p.dilation, o.dilation);
    p.groups = o.groups;
    return op_conv2d(tensor_arg(x, "x"), tensor_arg(weight, "weight"),
                     bias ? &tensor_arg(bias, "bias") : nullptr, p);
  });
}

ampx_status ampx_max_pool2d(ampx_tensor x, int64_t kernel_h, int64_t kernel_w,
                            const ampx_pool2d_options* options, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_pool2d(tensor_arg(x, "x"), pool_params(PoolKind::Max, kernel_h, kernel_w, options));
  });
}

ampx_status ampx_avg_pool2d(ampx_tensor x, int64_t kernel_h, int64_t kernel_w,
                            const ampx_pool2d_options* options, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_pool2d(tensor_arg(x, "x"),
                     pool_params(PoolKind::Average, kernel_h, kernel_w, options));
  });
}

ampx_status ampx_global_avg_pool2d(ampx_tensor x, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_global_avg_pool2d(tensor_arg(x, "x")); });
}

}  // extern "C"
