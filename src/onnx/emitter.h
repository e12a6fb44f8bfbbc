// emitter.h -- what an op's ONNX form (Node::onnx, written beside the op's
// forward and backward) writes its nodes with. The exporter (export.cpp)
// walks the recorded forward and hands each record an Emitter: the names
// of the record's inputs, a place to bind its outputs, and node and
// constant builders that know the target opset. A form computes in fp32
// whatever dtypes the forward ran in (the exported graph's floats are all
// FLOAT), and at inference: dropout is the identity, batch norm reads its
// running statistics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ampx::impl {
class Node;
}

namespace ampx::impl::onnx {

// ONNX's TensorProto.DataType codes used here.
enum class ElemType : int32_t { Float = 1, Int32 = 6, Int64 = 7, Bool = 9, Float16 = 10 };

struct Attribute {
  enum class Kind { Int, Float, Ints, Floats, String } kind = Kind::Int;
  std::string name;
  int64_t i = 0;
  float f = 0.0f;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::string s;
};

Attribute attr(const char* name, int64_t value);
Attribute attr(const char* name, float value);
Attribute attr(const char* name, std::vector<int64_t> values);
Attribute attr_floats(const char* name, std::vector<float> values);
Attribute attr_string(const char* name, std::string value);
// Cast's `to`.
inline Attribute cast_to(ElemType type) {
  Attribute a;
  a.name = "to";
  a.i = static_cast<int64_t>(type);
  return a;
}

struct GraphState;  // export.cpp

class Emitter {
 public:
  Emitter(GraphState& graph, const Node& record) : graph_(graph), record_(record) {}

  int64_t opset() const;
  // Whether dim 0 of the graph's inputs and outputs is symbolic: a form
  // whose attributes or constants hold a shape writes the batch extent as
  // something ONNX infers (Reshape's -1) instead of the exported one.
  bool symbolic_batch() const;

  // The value computed for the record's input i (a graph input, an
  // initializer, or an earlier record's output); i must hold a tensor.
  std::string input(size_t i);
  bool has_input(size_t i) const;
  const DeviceTensor& input_tensor(size_t i) const;
  // The shape of the record's output i, as the forward made it.
  const Shape& output_shape(size_t i) const;
  // Makes `value` the record's output i.
  void output(size_t i, const std::string& value);

  // A node of type `op_type` (domain ai.onnx); returns its output's name
  // (`outputs` names for several).
  std::string op(const char* op_type, std::vector<std::string> inputs,
                 std::vector<Attribute> attrs = {});
  std::vector<std::string> op_n(const char* op_type, std::vector<std::string> inputs,
                                std::vector<Attribute> attrs, size_t outputs);

  // Initializers: values a tensor the record holds (a mask, a table),
  // converted to FLOAT if floating; float or int64 constants.
  std::string constant(const DeviceTensor& t);
  std::string floats(const std::vector<float>& values, const std::vector<int64_t>& dims);
  std::string scalar(float value) { return floats({value}, {}); }
  std::string ints(const std::vector<int64_t>& values, const std::vector<int64_t>& dims);
  std::string ints(const std::vector<int64_t>& values) {
    return ints(values, {static_cast<int64_t>(values.size())});
  }

  // The forms several ops share, each written once for every opset.
  // ReduceSum/ReduceMean/ReduceMax/ReduceProd... over `axes`: attribute below
  // the opset that made it an input (13 for ReduceSum, 18 for the others).
  std::string reduce(const char* op_type, const std::string& x, std::vector<int64_t> axes,
                     bool keepdims);
  std::string unsqueeze(const std::string& x, std::vector<int64_t> axes);
  // A shape for Reshape: `shape`, with dim 0 written -1 under a symbolic
  // batch (the other dims must then not depend on the batch).
  std::string reshape(const std::string& x, const Shape& shape);
  // x * 0.5 * (1 + erf(x / sqrt 2)): Gelu from opset 20.
  std::string gelu(const std::string& x);
  std::string gelu_tanh(const std::string& x);
  // A row-wise normalisation over the last axis: (x - mean) * rsqrt(var + eps)
  // (centered), or x * rsqrt(mean(x^2) + eps); then * weight + bias.
  std::string normalize_last(const std::string& x, const std::string* weight,
                             const std::string* bias, float eps, bool centered);

  // NOT_SUPPORTED naming the record's op and the opset.
  [[noreturn]] void unsupported(const std::string& why) const;
  // NOT_SUPPORTED unless the opset is at least `minimum`.
  void require_opset(int64_t minimum, const char* onnx_op) const;

  // For records that run a nested tape (checkpoint): the value of a tensor
  // `bind` named, and the naming of a nested tape's tensor.
  std::string value_of(const DeviceTensor& t);
  void bind(const DeviceTensor& t, const std::string& value);

  const Node& record() const { return record_; }
  GraphState& graph() { return graph_; }

 private:
  GraphState& graph_;
  const Node& record_;
};

// Emits the records of `tape` that `outputs` need, from the values bound
// already (the graph's inputs; a nested tape's inputs) back: each record's
// form, and an initializer for each other tensor they read.
void emit_recorded(GraphState& g, const std::vector<std::unique_ptr<Node>>& tape,
                   const std::vector<const DeviceTensor*>& outputs);

}  // namespace ampx::impl::onnx
