// api_ops_more.cpp -- the C entry points of the normalisation (layer, RMS,
// batch), dropout, shape, embedding and BCE ops (section 11 of ampx.h).
#include <string>
#include <vector>

#include "api/op_api.h"
#include "math/convert.h"

using namespace ampx::impl;

namespace {

DeviceTensor* optional_tensor(ampx_tensor handle, const char* arg) {
  return handle ? &tensor_arg(handle, arg) : nullptr;
}

}  // namespace

extern "C" {

ampx_status ampx_layer_norm(ampx_tensor x, ampx_tensor weight, ampx_tensor bias, double eps,
                            ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_layer_norm(tensor_arg(x, "x"), optional_tensor(weight, "weight"),
                         optional_tensor(bias, "bias"), math::double_to_float(eps));
  });
}

ampx_status ampx_rms_norm(ampx_tensor x, ampx_tensor weight, double eps, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_rms_norm(tensor_arg(x, "x"), optional_tensor(weight, "weight"),
                       math::double_to_float(eps));
  });
}

ampx_status ampx_batch_norm(ampx_tensor x, ampx_tensor weight, ampx_tensor bias,
                            ampx_tensor running_mean, ampx_tensor running_var, int32_t training,
                            double momentum, double eps, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_batch_norm(
        tensor_arg(x, "x"), optional_tensor(weight, "weight"), optional_tensor(bias, "bias"),
        optional_tensor(running_mean, "running_mean"), optional_tensor(running_var, "running_var"),
        training != 0, math::double_to_float(momentum), math::double_to_float(eps));
  });
}

ampx_status ampx_dropout(ampx_tensor x, double p, int32_t training, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_dropout(tensor_arg(x, "x"), p, training != 0); });
}

ampx_status ampx_embedding(ampx_tensor weight, ampx_tensor indices, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_embedding(tensor_arg(weight, "weight"), tensor_arg(indices, "indices"));
  });
}

ampx_status ampx_reshape(ampx_tensor x, int32_t ndim, const int64_t* shape, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_reshape(tensor_arg(x, "x"), ndim, shape); });
}

ampx_status ampx_transpose(ampx_tensor x, int32_t dim0, int32_t dim1, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_transpose(tensor_arg(x, "x"), dim0, dim1); });
}

ampx_status ampx_permute(ampx_tensor x, int32_t ndim, const int32_t* dims, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_permute(tensor_arg(x, "x"), ndim, dims); });
}

ampx_status ampx_concat(const ampx_tensor* tensors, size_t count, int32_t dim, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_concat(tensor_list_arg(tensors, count, "tensors"), dim);
  });
}

ampx_status ampx_bce_with_logits(ampx_tensor logits, ampx_tensor targets, ampx_reduction reduction,
                                 ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_bce_with_logits(tensor_arg(logits, "logits"), tensor_arg(targets, "targets"),
                              reduction_arg(reduction));
  });
}

}  // extern "C"
