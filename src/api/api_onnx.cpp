// api_onnx.cpp -- ONNX export (section 19 of ampx.h).
#include "api/guard.h"
#include "onnx/export.h"

using namespace ampx::impl;

namespace {

std::vector<std::string> names_arg(const char* const* names, size_t count, const char* arg) {
  if (count > 0) require_pointer(names, arg);
  std::vector<std::string> list;
  list.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const std::string what = cat(arg, "[", i, "]");
    list.emplace_back(require_pointer(names[i], what.c_str()));
  }
  return list;
}

}  // namespace

extern "C" {

ampx_onnx_options ampx_onnx_options_default(void) {
  ampx_onnx_options o = AMPX_ONNX_OPTIONS_INIT;
  return o;
}

ampx_status ampx_onnx_export(const char* path, const ampx_tensor* inputs,
                             const char* const* input_names, size_t input_count,
                             const ampx_tensor* outputs, const char* const* output_names,
                             size_t output_count, const ampx_onnx_options* options) {
  return guard(__func__, [&] {
    require_pointer(path, "path");
    if (*path == '\0') fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'path' is an empty string");
    const ampx_onnx_options o = read_options(options, ampx_onnx_options_default(), "options");
    onnx::ExportSpec spec;
    spec.path = path;
    spec.inputs = tensor_list_arg(inputs, input_count, "inputs");
    spec.input_names = names_arg(input_names, input_count, "input_names");
    if (output_count == 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'output_count' is 0; a model needs an output");
    spec.outputs = tensor_list_arg(outputs, output_count, "outputs");
    spec.output_names = names_arg(output_names, output_count, "output_names");
    spec.constant_outputs =
        tensor_list_arg(o.constant_outputs, o.constant_output_count, "options->constant_outputs");
    spec.constant_output_names = names_arg(o.constant_output_names, o.constant_output_count,
                                           "options->constant_output_names");
    spec.opset = o.opset == 0 ? 17 : o.opset;
    if (spec.opset < onnx::kMinOpset || spec.opset > onnx::kMaxOpset)
      fail(AMPX_ERR_INVALID_ARGUMENT, "options->opset is ", o.opset, "; ONNX export writes opsets ",
           onnx::kMinOpset, " to ", onnx::kMaxOpset, " (0: 17)");
    if (o.ir_version < 0 || o.ir_version == 1 || o.ir_version == 2 || o.ir_version > 11)
      fail(AMPX_ERR_INVALID_ARGUMENT, "options->ir_version is ", o.ir_version,
           "; 3 to 11, or 0 for the opset's (at least 8)");
    spec.ir_version = o.ir_version;
    if (o.batch_dim) {
      spec.batch_dim = o.batch_dim;
      if (spec.batch_dim.empty())
        fail(AMPX_ERR_INVALID_ARGUMENT, "options->batch_dim is an empty string (NULL: none)");
    }
    if (o.weight_type != 0 && o.weight_type != AMPX_ONNX_WEIGHTS_F32 &&
        o.weight_type != AMPX_ONNX_WEIGHTS_F16)
      fail(AMPX_ERR_INVALID_ARGUMENT, "options->weight_type is ", o.weight_type,
           "; AMPX_ONNX_WEIGHTS_F32 (1), AMPX_ONNX_WEIGHTS_F16 (2) or 0");
    spec.f16_weights = o.weight_type == AMPX_ONNX_WEIGHTS_F16;
    switch (o.external_data) {
      case 0:
      case AMPX_ONNX_EXTERNAL_BEYOND_2GIB:
        spec.external_data = onnx::ExternalData::Beyond2GiB;
        break;
      case AMPX_ONNX_EXTERNAL_NEVER: spec.external_data = onnx::ExternalData::Never; break;
      case AMPX_ONNX_EXTERNAL_ALWAYS: spec.external_data = onnx::ExternalData::Always; break;
      default:
        fail(AMPX_ERR_INVALID_ARGUMENT, "options->external_data is ", o.external_data,
             "; AMPX_ONNX_EXTERNAL_NEVER (1), _BEYOND_2GIB (2), _ALWAYS (3) or 0");
    }
    if (spec.ir_version != 0 && spec.ir_version < 4 && spec.external_data ==
        onnx::ExternalData::Always)
      fail(AMPX_ERR_INVALID_ARGUMENT, "options->ir_version ", spec.ir_version,
           " predates external data (IR 4)");
    onnx::export_model(spec);
  });
}

}  // extern "C"
