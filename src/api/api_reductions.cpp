// api_reductions.cpp -- the C entry points of the reductions over chosen
// dimensions and of softmax over any dimension (section 11 of ampx.h).
#include "api/op_api.h"

using namespace ampx::impl;

extern "C" {

ampx_status ampx_sum_dims(ampx_tensor x, const int32_t* dims, int32_t ndims, int32_t keepdim,
                          ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_reduce_dims(tensor_arg(x, "x"), dims, ndims, keepdim != 0, DimsReduction::Sum);
  });
}

ampx_status ampx_mean_dims(ampx_tensor x, const int32_t* dims, int32_t ndims, int32_t keepdim,
                           ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_reduce_dims(tensor_arg(x, "x"), dims, ndims, keepdim != 0, DimsReduction::Mean);
  });
}

ampx_status ampx_amax(ampx_tensor x, const int32_t* dims, int32_t ndims, int32_t keepdim,
                      ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_reduce_dims(tensor_arg(x, "x"), dims, ndims, keepdim != 0, DimsReduction::Amax);
  });
}

ampx_status ampx_softmax_dim(ampx_tensor x, int32_t dim, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_softmax_dim(tensor_arg(x, "x"), dim, false); });
}

ampx_status ampx_log_softmax_dim(ampx_tensor x, int32_t dim, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_softmax_dim(tensor_arg(x, "x"), dim, true); });
}

}  // extern "C"
