// api_attention.cpp -- the C entry points of scaled dot-product attention
// (section 11 of ampx.h).
#include "api/op_api.h"

using namespace ampx::impl;

extern "C" {

ampx_attention_options ampx_attention_options_default(void) {
  return AMPX_ATTENTION_OPTIONS_INIT;
}

ampx_status ampx_scaled_dot_product_attention(ampx_tensor q, ampx_tensor k, ampx_tensor v,
                                              ampx_tensor mask,
                                              const ampx_attention_options* options,
                                              ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    const ampx_attention_options o =
        read_options(options, ampx_attention_options_default(), "options");
    return op_attention(tensor_arg(q, "q"), tensor_arg(k, "k"), tensor_arg(v, "v"),
                        mask ? &tensor_arg(mask, "mask") : nullptr, o.causal != 0, o.scale,
                        o.dropout_p);
  });
}

}  // extern "C"
