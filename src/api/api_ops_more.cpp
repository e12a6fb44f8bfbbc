// api_ops_more.cpp -- the C entry points of the normalisation (layer, RMS,
// batch), dropout, shape (reshape to split and chunk), embedding, the
// block ops (masked_fill, pow, rotary embeddings) and BCE (section 11 of
// ampx.h).
#include <string>
#include <vector>

#include "api/op_api.h"
#include "math/convert.h"

using namespace ampx::impl;

namespace {

DeviceTensor* optional_tensor(ampx_tensor handle, const char* arg) {
  return handle ? &tensor_arg(handle, arg) : nullptr;
}

// Hands every piece to the open scope (or the caller), once all exist.
void deliver_all(DeviceContext& ctx, std::vector<TensorRef> pieces, ampx_tensor* outs) {
  for (size_t k = 0; k < pieces.size(); ++k)
    outs[k] = to_handle(deliver(ctx, std::move(pieces[k])));
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

ampx_status ampx_masked_fill(ampx_tensor x, ampx_tensor mask, double value, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_masked_fill(tensor_arg(x, "x"), tensor_arg(mask, "mask"), value);
  });
}

ampx_status ampx_pow(ampx_tensor x, double exponent, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_pow(tensor_arg(x, "x"), exponent); });
}

ampx_status ampx_rotary_embedding(ampx_tensor x, ampx_tensor cos, ampx_tensor sin,
                                  int32_t interleaved, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_rotary(tensor_arg(x, "x"), tensor_arg(cos, "cos"), tensor_arg(sin, "sin"),
                     interleaved != 0);
  });
}

ampx_status ampx_split(ampx_tensor x, const int64_t* sizes, size_t count, int32_t dim,
                       ampx_tensor* outs) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(x, "x");
    require_pointer(outs, "outs");
    if (count > 0) require_pointer(sizes, "sizes");
    deliver_all(*t.ctx, op_split(t, std::vector<int64_t>(sizes, sizes + count), dim), outs);
  });
}

ampx_status ampx_chunk(ampx_tensor x, int32_t chunks, int32_t dim, ampx_tensor* outs,
                       int32_t* count) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(x, "x");
    require_pointer(outs, "outs");
    require_pointer(count, "count");
    std::vector<TensorRef> pieces = op_split(t, chunk_sizes(t, chunks, dim), dim);
    const auto made = static_cast<int32_t>(pieces.size());
    deliver_all(*t.ctx, std::move(pieces), outs);
    *count = made;
  });
}

ampx_status ampx_bce_with_logits(ampx_tensor logits, ampx_tensor targets, ampx_reduction reduction,
                                 ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_bce_with_logits(tensor_arg(logits, "logits"), tensor_arg(targets, "targets"),
                              reduction_arg(reduction));
  });
}

ampx_bce_with_logits_options ampx_bce_with_logits_options_default(void) {
  ampx_bce_with_logits_options options = AMPX_BCE_WITH_LOGITS_OPTIONS_INIT;
  return options;
}

ampx_status ampx_bce_with_logits_ex(ampx_tensor logits, ampx_tensor targets, ampx_tensor weight,
                                    ampx_tensor pos_weight,
                                    const ampx_bce_with_logits_options* options,
                                    ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    const ampx_bce_with_logits_options o =
        read_options(options, ampx_bce_with_logits_options_default(), "options");
    return op_bce_with_logits(tensor_arg(logits, "logits"), tensor_arg(targets, "targets"),
                              reduction_arg(o.reduction),
                              weight ? &tensor_arg(weight, "weight") : nullptr,
                              pos_weight ? &tensor_arg(pos_weight, "pos_weight") : nullptr);
  });
}

}  // extern "C"
