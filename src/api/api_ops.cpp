// api_ops.cpp -- autograd, scopes, autocast and the ops (sections 9-11).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "amp/scaler.h"
#include "api/guard.h"
#include "api/op_api.h"
#include "autocast/autocast.h"
#include "autograd/checkpoint.h"
#include "autograd/tape.h"
#include "fp8/recipe.h"
#include "math/convert.h"
#include "ops/ops.h"

using namespace ampx::impl;

namespace {

PrecisionPolicy& autocast_arg(ampx_autocast handle, const char* arg) {
  return object_arg<PrecisionPolicy>(handle, arg, "an ampx_autocast");
}

ampx_autocast to_handle(PrecisionPolicy* a) { return reinterpret_cast<ampx_autocast>(a); }

Activation activation_arg(ampx_activation a) {
  switch (a) {
    case AMPX_ACTIVATION_NONE: return Activation::None;
    case AMPX_ACTIVATION_RELU: return Activation::Relu;
    case AMPX_ACTIVATION_GELU: return Activation::Gelu;
    default: break;
  }
  fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'activation' is ", static_cast<int>(a),
       "; use an ampx_activation value");
}

OpClass op_class_arg(ampx_op_class c) {
  if (c < AMPX_OP_LOWER_PRECISION || c > AMPX_OP_KEEP)
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'op_class' is ", static_cast<int>(c),
         "; use an ampx_op_class value");
  return static_cast<OpClass>(c);
}

std::string op_name_arg(const char* name) {
  require_pointer(name, "op_name");
  if (!is_known_op(name))
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'op_name' is \"", name, "\", which names no op");
  return name;
}

}  // namespace

extern "C" {

// ---- autograd -------------------------------------------------------------------

ampx_status ampx_tensor_set_requires_grad(ampx_tensor tensor, int32_t requires_grad) {
  return guard(__func__, [&] {
    set_requires_grad(tensor_arg(tensor, "tensor"), requires_grad != 0);
  });
}

ampx_status ampx_tensor_requires_grad(ampx_tensor tensor, int32_t* requires_grad) {
  return guard(__func__, [&] {
    DeviceTensor& t = tensor_arg(tensor, "tensor");
    require_pointer(requires_grad, "requires_grad");
    *requires_grad = t.requires_grad ? 1 : 0;
  });
}

ampx_status ampx_set_grad_enabled(ampx_context ctx, int32_t enabled, int32_t* previous) {
  return guard(__func__, [&] {
    AutogradState& state = autograd_state(context_arg(ctx, "ctx"));
    if (previous) *previous = state.grad_enabled ? 1 : 0;
    state.grad_enabled = enabled != 0;
  });
}

ampx_status ampx_backward(ampx_tensor loss, ampx_scaler scaler) {
  return guard(__func__, [&] {
    DeviceTensor& l = tensor_arg(loss, "loss");
    LossScaler* s = scaler ? &object_arg<LossScaler>(scaler, "scaler", "an ampx_scaler") : nullptr;
    backward(l, s);
  });
}

ampx_grad_options ampx_grad_options_default(void) {
  ampx_grad_options options = AMPX_GRAD_OPTIONS_INIT;
  return options;
}

ampx_backward_options ampx_backward_options_default(void) {
  ampx_backward_options options = AMPX_BACKWARD_OPTIONS_INIT;
  return options;
}

ampx_status ampx_backward_ex(ampx_tensor loss, ampx_scaler scaler,
                             const ampx_backward_options* options) {
  return guard(__func__, [&] {
    DeviceTensor& l = tensor_arg(loss, "loss");
    LossScaler* s = scaler ? &object_arg<LossScaler>(scaler, "scaler", "an ampx_scaler") : nullptr;
    const ampx_backward_options o =
        read_options(options, ampx_backward_options_default(), "options");
    const bool create = o.create_graph != 0;
    backward_ex(l, s, o.retain_graph < 0 ? create : o.retain_graph != 0, create);
  });
}

ampx_status ampx_grad(const ampx_tensor* outputs, size_t output_count,
                      const ampx_tensor* grad_outputs, const ampx_tensor* inputs,
                      size_t input_count, const ampx_grad_options* options, ampx_tensor* grads) {
  return guard(__func__, [&] {
    GradRequest request;
    request.outputs = tensor_list_arg(outputs, output_count, "outputs");
    request.inputs = tensor_list_arg(inputs, input_count, "inputs");
    require_pointer(grads, "grads");
    if (grad_outputs) {
      for (size_t i = 0; i < output_count; ++i) {
        const std::string name = cat("grad_outputs[", i, "]");
        request.grad_outputs.push_back(grad_outputs[i] ? &tensor_arg(grad_outputs[i], name.c_str())
                                                       : nullptr);
      }
    }
    const ampx_grad_options o = read_options(options, ampx_grad_options_default(), "options");
    request.create_graph = o.create_graph != 0;
    request.retain_graph = o.retain_graph < 0 ? request.create_graph : o.retain_graph != 0;
    request.allow_unused = o.allow_unused != 0;
    if (request.outputs.empty())
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'output_count' is 0; ampx_grad needs an output");
    DeviceContext& ctx = *request.outputs[0]->ctx;
    // Room in the scope first: once the walk ran (and maybe freed records),
    // handing out the gradients must not fail.
    AutogradState& state = autograd_state(ctx);
    if (!state.scopes.empty()) state.scopes.back().reserve(state.scopes.back().size() + input_count);
    std::vector<TensorRef> result = grad(ctx, request);
    for (size_t i = 0; i < result.size(); ++i)
      grads[i] = result[i] ? to_handle(deliver(ctx, std::move(result[i]))) : nullptr;
  });
}

ampx_status ampx_scaler_unscale_tensor(ampx_scaler scaler, ampx_tensor x, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    LossScaler& s = object_arg<LossScaler>(scaler, "scaler", "an ampx_scaler");
    return s.unscale_tensor(tensor_arg(x, "x"));
  });
}

ampx_status ampx_scope_push(ampx_context ctx) {
  return guard(__func__, [&] { autograd_state(context_arg(ctx, "ctx")).scopes.emplace_back(); });
}

ampx_status ampx_scope_pop(ampx_context ctx) {
  return guard(__func__, [&] {
    pop_scope(context_arg(ctx, "ctx"));
  });
}

}  // extern "C"

namespace {

// Both checkpoint entry points, once the segment is held (so that its
// release hook runs on every failure below).
void checkpoint_call(ampx_context ctx, Segment segment, const char* fn_arg,
                     const ampx_tensor* inputs, size_t input_count, ampx_tensor* outputs,
                     size_t output_count) {
  if (!segment.fn) fail(AMPX_ERR_INVALID_ARGUMENT, "argument '", fn_arg, "' is NULL");
  DeviceContext& c = context_arg(ctx, "ctx");
  require_pointer(outputs, "outputs");
  const std::vector<DeviceTensor*> in = tensor_list_arg(inputs, input_count, "inputs");
  // Room in the scope first: once the record exists, handing out the
  // outputs must not fail (the call would fail with the record kept).
  AutogradState& state = autograd_state(c);
  if (!state.scopes.empty()) state.scopes.back().reserve(state.scopes.back().size() + output_count);
  std::vector<TensorRef> out = checkpoint(c, std::move(segment), in, output_count);
  for (size_t i = 0; i < out.size(); ++i) outputs[i] = to_handle(deliver(c, std::move(out[i])));
}

}  // namespace

extern "C" {

ampx_status ampx_checkpoint_segment(ampx_context ctx, const ampx_segment* segment,
                                    const ampx_tensor* inputs, size_t input_count,
                                    ampx_tensor* outputs, size_t output_count) {
  return guard(__func__, [&] {
    require_pointer(segment, "segment");
    if (segment->struct_size < sizeof(size_t) + sizeof(ampx_segment_fn))
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'segment' has struct_size ", segment->struct_size,
           "; set it to sizeof(ampx_segment) (or use AMPX_SEGMENT_INIT)");
    ampx_segment defaults = AMPX_SEGMENT_INIT;
    const ampx_segment given = read_options(segment, defaults, "segment");
    checkpoint_call(ctx, Segment(given.fn, given.user_data, given.release), "segment->fn", inputs,
                    input_count, outputs, output_count);
  });
}

ampx_status ampx_checkpoint(ampx_context ctx, ampx_segment_fn fn, void* user_data,
                            const ampx_tensor* inputs, size_t input_count, ampx_tensor* outputs,
                            size_t output_count) {
  return guard(__func__, [&] {
    checkpoint_call(ctx, Segment(fn, user_data, nullptr), "fn", inputs, input_count, outputs,
                    output_count);
  });
}

ampx_status ampx_scope_depth(ampx_context ctx, int32_t* depth) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    require_pointer(depth, "depth");
    *depth = scope_depth(c);
  });
}

// ---- autocast --------------------------------------------------------------------

ampx_autocast_options ampx_autocast_options_default(void) {
  ampx_autocast_options options = AMPX_AUTOCAST_OPTIONS_INIT;
  return options;
}

ampx_status ampx_autocast_create(ampx_context ctx, const ampx_autocast_options* options,
                                 ampx_autocast* out) {
  return guard(__func__, [&] {
    require_pointer(out, "out");
    DeviceContext& c = context_arg(ctx, "ctx");
    const ampx_autocast_options o =
        read_options(options, ampx_autocast_options_default(), "options");
    const DType dtype = dtype_arg(o.dtype, "options.dtype");
    *out = to_handle(PrecisionPolicy::create(c, dtype, o.enabled != 0, o.cache != 0));
  });
}

void ampx_autocast_release(ampx_autocast autocast) {
  if (!autocast) return;
  guard(__func__, [&] {
    autocast_arg(autocast, "autocast").release_unentered();
  });
}

ampx_status ampx_autocast_set_op_class(ampx_autocast autocast, const char* op_name,
                                       ampx_op_class op_class) {
  return guard(__func__, [&] {
    PrecisionPolicy& a = autocast_arg(autocast, "autocast");
    const std::string name = op_name_arg(op_name);
    a.set_op_class(name, op_class_arg(op_class));
  });
}

ampx_status ampx_autocast_op_class(ampx_autocast autocast, const char* op_name,
                                   ampx_op_class* op_class) {
  return guard(__func__, [&] {
    PrecisionPolicy& a = autocast_arg(autocast, "autocast");
    require_pointer(op_class, "op_class");
    *op_class = static_cast<ampx_op_class>(a.op_class(op_name_arg(op_name)));
  });
}

ampx_status ampx_autocast_enter(ampx_autocast autocast) {
  return guard(__func__, [&] { autocast_enter(autocast_arg(autocast, "autocast")); });
}

ampx_status ampx_autocast_exit(ampx_autocast autocast) {
  return guard(__func__, [&] { autocast_exit(autocast_arg(autocast, "autocast")); });
}

ampx_status ampx_autocast_set_fp8(ampx_autocast autocast, ampx_fp8_recipe recipe,
                                  int64_t min_gemm_size) {
  return guard(__func__, [&] {
    PrecisionPolicy& a = autocast_arg(autocast, "autocast");
    Fp8Recipe* fp8 =
        recipe ? &object_arg<Fp8Recipe>(recipe, "recipe", "an ampx_fp8_recipe") : nullptr;
    a.set_fp8(fp8, min_gemm_size);
  });
}

ampx_status ampx_autocast_fp8_stats(ampx_autocast autocast, ampx_fp8_stats* stats) {
  return guard(__func__, [&] {
    PrecisionPolicy& a = autocast_arg(autocast, "autocast");
    require_pointer(stats, "stats");
    ampx_fp8_stats full = AMPX_FP8_STATS_INIT;
    full.fp8_products = a.fp8_products;
    full.fallbacks = a.fp8_fallbacks;
    full.last_fallback = a.fp8_last_fallback.c_str();
    write_struct(stats, full, "stats");
  });
}

ampx_status ampx_autocast_cache_stats(ampx_autocast autocast, int64_t* hits, int64_t* misses) {
  return guard(__func__, [&] {
    PrecisionPolicy& a = autocast_arg(autocast, "autocast");
    if (hits) *hits = a.hits;
    if (misses) *misses = a.misses;
  });
}

// ---- ops ------------------------------------------------------------------------------

#define AMPX_BINARY_OP(fn, op)                                                              \
  ampx_status fn(ampx_tensor a, ampx_tensor b, ampx_tensor* out) {                          \
    return run_op(#fn, out, [&] { return op_binary(op, tensor_arg(a, "a"), tensor_arg(b, "b")); }); \
  }
AMPX_BINARY_OP(ampx_add, BinaryOp::Add)
AMPX_BINARY_OP(ampx_sub, BinaryOp::Sub)
AMPX_BINARY_OP(ampx_mul, BinaryOp::Mul)
AMPX_BINARY_OP(ampx_div, BinaryOp::Div)
#undef AMPX_BINARY_OP

ampx_status ampx_affine(ampx_tensor a, double scale, double shift, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_affine(tensor_arg(a, "a"), math::double_to_float(scale), math::double_to_float(shift));
  });
}

#define AMPX_UNARY_OP(fn, op)                                                          \
  ampx_status fn(ampx_tensor x, ampx_tensor* out) {                                    \
    return run_op(#fn, out, [&] { return op_unary(op, tensor_arg(x, "x")); });         \
  }
AMPX_UNARY_OP(ampx_relu, UnaryOp::Relu)
AMPX_UNARY_OP(ampx_gelu, UnaryOp::Gelu)
AMPX_UNARY_OP(ampx_gelu_tanh, UnaryOp::GeluTanh)
AMPX_UNARY_OP(ampx_silu, UnaryOp::Silu)
AMPX_UNARY_OP(ampx_sigmoid, UnaryOp::Sigmoid)
AMPX_UNARY_OP(ampx_tanh, UnaryOp::Tanh)
AMPX_UNARY_OP(ampx_exp, UnaryOp::Exp)
AMPX_UNARY_OP(ampx_log, UnaryOp::Log)
AMPX_UNARY_OP(ampx_sqrt, UnaryOp::Sqrt)
AMPX_UNARY_OP(ampx_rsqrt, UnaryOp::Rsqrt)
#undef AMPX_UNARY_OP

ampx_status ampx_sum(ampx_tensor x, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_sum(tensor_arg(x, "x"), false); });
}

ampx_status ampx_mean(ampx_tensor x, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_sum(tensor_arg(x, "x"), true); });
}

ampx_status ampx_softmax(ampx_tensor x, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_softmax(tensor_arg(x, "x"), false); });
}

ampx_status ampx_log_softmax(ampx_tensor x, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_softmax(tensor_arg(x, "x"), true); });
}

ampx_status ampx_cross_entropy(ampx_tensor logits, ampx_tensor labels, ampx_reduction reduction,
                               int64_t ignore_index, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_cross_entropy(tensor_arg(logits, "logits"), tensor_arg(labels, "labels"),
                            reduction_arg(reduction), ignore_index);
  });
}

ampx_cross_entropy_options ampx_cross_entropy_options_default(void) {
  ampx_cross_entropy_options options = AMPX_CROSS_ENTROPY_OPTIONS_INIT;
  return options;
}

ampx_status ampx_cross_entropy_ex(ampx_tensor logits, ampx_tensor labels, ampx_tensor weight,
                                  const ampx_cross_entropy_options* options, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    const ampx_cross_entropy_options o =
        read_options(options, ampx_cross_entropy_options_default(), "options");
    return op_cross_entropy(tensor_arg(logits, "logits"), tensor_arg(labels, "labels"),
                            reduction_arg(o.reduction), o.ignore_index,
                            weight ? &tensor_arg(weight, "weight") : nullptr, o.label_smoothing);
  });
}

ampx_status ampx_mse_loss(ampx_tensor input, ampx_tensor target, ampx_reduction reduction,
                          ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    return op_mse_loss(tensor_arg(input, "input"), tensor_arg(target, "target"),
                       reduction_arg(reduction));
  });
}

ampx_status ampx_matmul(ampx_tensor a, ampx_tensor b, ampx_tensor* out) {
  return run_op(__func__, out, [&] { return op_matmul(tensor_arg(a, "a"), tensor_arg(b, "b")); });
}

ampx_status ampx_linear(ampx_tensor x, ampx_tensor weight, ampx_tensor bias,
                        ampx_activation activation, ampx_tensor* out) {
  return run_op(__func__, out, [&] {
    DeviceTensor* b = bias ? &tensor_arg(bias, "bias") : nullptr;
    return op_linear(tensor_arg(x, "x"), tensor_arg(weight, "weight"), b,
                     activation_arg(activation));
  });
}

}  // extern "C"
