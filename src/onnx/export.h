// export.h -- ampx_onnx_export's core: the recorded forward from the named
// outputs back to the named inputs, as an ONNX model written atomically.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace ampx::impl::onnx {

enum class ExternalData { Never, Beyond2GiB, Always };

struct ExportSpec {
  std::string path;
  std::vector<DeviceTensor*> inputs, outputs, constant_outputs;
  std::vector<std::string> input_names, output_names, constant_output_names;
  int64_t opset = 17;
  int64_t ir_version = 0;  // 0: the opset's, at least 8
  std::string batch_dim;   // empty: static shapes
  bool f16_weights = false;
  ExternalData external_data = ExternalData::Beyond2GiB;
  std::string doc;         // the graph's doc_string
};

// The opsets an export may target.
constexpr int64_t kMinOpset = 9;
constexpr int64_t kMaxOpset = 23;

void export_model(const ExportSpec& spec);

}  // namespace ampx::impl::onnx
