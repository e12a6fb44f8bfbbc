// export.cpp -- ampx_onnx_export: walks the current tape from the named
// outputs back to the named inputs, asks each record it reaches for its
// ONNX form (Node::onnx, beside each op), makes every other tensor a record
// reads an initializer, and writes the ModelProto with proto.h's writer.
#include "onnx/export.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "autograd/tape.h"
#include "core/convert_bulk.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "math/activations.h"
#include "onnx/emitter.h"
#include "onnx/proto.h"

namespace ampx::impl {

void Node::onnx(onnx::Emitter& e) const { e.unsupported("it has no ONNX form"); }

namespace onnx {

struct Initializer {
  std::string name;
  ElemType type = ElemType::Float;
  std::vector<int64_t> dims;
  std::string raw;  // little-endian elements
};

struct NodeSpec {
  std::string op_type;
  std::vector<std::string> inputs, outputs;
  std::vector<Attribute> attrs;
};

struct GraphState {
  const ExportSpec* spec = nullptr;
  std::vector<NodeSpec> nodes;
  std::vector<Initializer> initializers;
  std::unordered_map<uint64_t, std::string> values;  // tensor id -> the value holding it
  std::unordered_set<std::string> names;             // every value name taken
  size_t counter = 0;

  std::string fresh(const std::string& hint) {
    for (;;) {
      std::string name = cat(hint, "_", counter++);
      if (names.insert(name).second) return name;
    }
  }
  // `wanted` itself when it is free, else a fresh variant.
  std::string claim(const std::string& wanted) {
    if (!wanted.empty() && names.insert(wanted).second) return wanted;
    return fresh(wanted.empty() ? "initializer" : wanted);
  }

  // An initializer holding `t`'s values: floats as FLOAT (F16 with a Cast
  // to FLOAT after it when the spec asks for F16 weights), integers as
  // they are.
  std::string add_initializer(const DeviceTensor& t, const std::string& hint) {
    if (is_fp8(t.dtype))
      fail(AMPX_ERR_NOT_SUPPORTED, "'", t.describe(),
           "' is an FP8 tensor; ONNX export takes F32, F16, BF16, I32 and I64 values");
    Initializer init;
    for (int32_t d = 0; d < t.shape.ndim; ++d) init.dims.push_back(t.shape.dims[d]);
    std::string host(t.nbytes(), '\0');
    if (!host.empty()) t.ctx->read_to_host(&host[0], t.data(), host.size());
    const std::string name = claim(hint);
    if (!is_floating(t.dtype)) {
      init.type = t.dtype == DType::I32 ? ElemType::Int32 : ElemType::Int64;
      init.raw = std::move(host);
      init.name = name;
      initializers.push_back(std::move(init));
      return name;
    }
    const DType stored = spec->f16_weights ? DType::F16 : DType::F32;
    init.raw.assign(static_cast<size_t>(t.numel()) * dtype_size(stored), '\0');
    if (t.numel() > 0) convert_bulk(&init.raw[0], stored, host.data(), t.dtype, t.numel());
    if (stored == DType::F32) {
      init.type = ElemType::Float;
      init.name = name;
      initializers.push_back(std::move(init));
      return name;
    }
    init.type = ElemType::Float16;
    init.name = fresh(name + "_f16");
    const std::string f16 = init.name;
    initializers.push_back(std::move(init));
    nodes.push_back({"Cast", {f16}, {name}, {cast_to(ElemType::Float)}});
    return name;
  }

  std::string add_constant(ElemType type, const void* data, size_t bytes,
                           const std::vector<int64_t>& dims) {
    Initializer init;
    init.name = fresh("const");
    init.type = type;
    init.dims = dims;
    init.raw.assign(static_cast<const char*>(data), bytes);
    initializers.push_back(std::move(init));
    return initializers.back().name;
  }
};

// ---- Attribute helpers and the Emitter --------------------------------------

Attribute attr(const char* name, int64_t value) {
  Attribute a;
  a.kind = Attribute::Kind::Int;
  a.name = name;
  a.i = value;
  return a;
}
Attribute attr(const char* name, float value) {
  Attribute a;
  a.kind = Attribute::Kind::Float;
  a.name = name;
  a.f = value;
  return a;
}
Attribute attr(const char* name, std::vector<int64_t> values) {
  Attribute a;
  a.kind = Attribute::Kind::Ints;
  a.name = name;
  a.ints = std::move(values);
  return a;
}
Attribute attr_floats(const char* name, std::vector<float> values) {
  Attribute a;
  a.kind = Attribute::Kind::Floats;
  a.name = name;
  a.floats = std::move(values);
  return a;
}
Attribute attr_string(const char* name, std::string value) {
  Attribute a;
  a.kind = Attribute::Kind::String;
  a.name = name;
  a.s = std::move(value);
  return a;
}

int64_t Emitter::opset() const { return graph_.spec->opset; }
bool Emitter::symbolic_batch() const { return !graph_.spec->batch_dim.empty(); }

bool Emitter::has_input(size_t i) const {
  return i < record_.inputs.size() && static_cast<bool>(record_.inputs[i]);
}

const DeviceTensor& Emitter::input_tensor(size_t i) const {
  if (!has_input(i)) fail(AMPX_ERR_INTERNAL, "'", record_.name(), "' has no input ", i);
  return *record_.inputs[i];
}

std::string Emitter::input(size_t i) {
  const DeviceTensor& t = input_tensor(i);
  auto it = graph_.values.find(t.id);
  if (it == graph_.values.end())
    fail(AMPX_ERR_INTERNAL, "input ", i, " of '", record_.name(), "' has no ONNX value");
  return it->second;
}

const Shape& Emitter::output_shape(size_t i) const {
  if (i >= record_.output_shapes.size())
    fail(AMPX_ERR_INTERNAL, "'", record_.name(), "' has no output ", i);
  return record_.output_shapes[i];
}

void Emitter::output(size_t i, const std::string& value) {
  if (i >= record_.output_ids.size())
    fail(AMPX_ERR_INTERNAL, "'", record_.name(), "' has no output ", i);
  graph_.values[record_.output_ids[i]] = value;
}

std::vector<std::string> Emitter::op_n(const char* op_type, std::vector<std::string> inputs,
                                       std::vector<Attribute> attrs, size_t outputs) {
  NodeSpec n;
  n.op_type = op_type;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  std::string hint = op_type;
  std::transform(hint.begin(), hint.end(), hint.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (size_t k = 0; k < outputs; ++k) n.outputs.push_back(graph_.fresh(hint));
  std::vector<std::string> names = n.outputs;
  graph_.nodes.push_back(std::move(n));
  return names;
}

std::string Emitter::op(const char* op_type, std::vector<std::string> inputs,
                        std::vector<Attribute> attrs) {
  return op_n(op_type, std::move(inputs), std::move(attrs), 1)[0];
}

std::string Emitter::constant(const DeviceTensor& t) {
  auto it = graph_.values.find(t.id);
  if (it != graph_.values.end()) return it->second;
  std::string name = graph_.add_initializer(t, t.name.empty() ? "const" : t.name);
  graph_.values[t.id] = name;
  return name;
}

std::string Emitter::floats(const std::vector<float>& values, const std::vector<int64_t>& dims) {
  return graph_.add_constant(ElemType::Float, values.data(), values.size() * sizeof(float), dims);
}

std::string Emitter::ints(const std::vector<int64_t>& values, const std::vector<int64_t>& dims) {
  return graph_.add_constant(ElemType::Int64, values.data(), values.size() * sizeof(int64_t),
                             dims);
}

std::string Emitter::reduce(const char* op_type, const std::string& x, std::vector<int64_t> axes,
                            bool keepdims) {
  // ReduceSum took its axes as an input from opset 13, the other
  // reductions from 18.
  const int64_t input_from = std::string(op_type) == "ReduceSum" ? 13 : 18;
  std::vector<Attribute> attrs{attr("keepdims", int64_t{keepdims ? 1 : 0})};
  if (axes.empty()) return op(op_type, {x}, std::move(attrs));  // every axis
  if (opset() >= input_from) return op(op_type, {x, ints(axes)}, std::move(attrs));
  attrs.push_back(attr("axes", std::move(axes)));
  return op(op_type, {x}, std::move(attrs));
}

std::string Emitter::unsqueeze(const std::string& x, std::vector<int64_t> axes) {
  if (opset() >= 13) return op("Unsqueeze", {x, ints(axes)});
  return op("Unsqueeze", {x}, {attr("axes", std::move(axes))});
}

std::string Emitter::reshape(const std::string& x, const Shape& shape) {
  std::vector<int64_t> dims(shape.dims, shape.dims + shape.ndim);
  if (symbolic_batch() && !dims.empty()) dims[0] = -1;
  return op("Reshape", {x, ints(dims)});
}

std::string Emitter::gelu(const std::string& x) {
  if (opset() >= 20) return op("Gelu", {x});
  const std::string erf = op("Erf", {op("Div", {x, scalar(static_cast<float>(std::sqrt(2.0)))})});
  const std::string half_x = op("Mul", {x, scalar(0.5f)});
  return op("Mul", {half_x, op("Add", {erf, scalar(1.0f)})});
}

std::string Emitter::gelu_tanh(const std::string& x) {
  if (opset() >= 20) return op("Gelu", {x}, {attr_string("approximate", "tanh")});
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
  const std::string cube = op("Mul", {op("Mul", {x, x}), x});
  const std::string inner = op("Add", {x, op("Mul", {cube, scalar(math::kGeluTanhCubic)})});
  const std::string t = op("Tanh", {op("Mul", {inner, scalar(math::kSqrt2OverPi)})});
  return op("Mul", {op("Mul", {x, scalar(0.5f)}), op("Add", {t, scalar(1.0f)})});
}

std::string Emitter::normalize_last(const std::string& x, const std::string* weight,
                                    const std::string* bias, float eps, bool centered) {
  std::string y;
  if (centered) {
    const std::string d = op("Sub", {x, reduce("ReduceMean", x, {-1}, true)});
    const std::string var = reduce("ReduceMean", op("Mul", {d, d}), {-1}, true);
    y = op("Div", {d, op("Sqrt", {op("Add", {var, scalar(eps)})})});
  } else {
    const std::string ms = reduce("ReduceMean", op("Mul", {x, x}), {-1}, true);
    y = op("Div", {x, op("Sqrt", {op("Add", {ms, scalar(eps)})})});
  }
  if (weight) y = op("Mul", {y, *weight});
  if (bias) y = op("Add", {y, *bias});
  return y;
}

void Emitter::unsupported(const std::string& why) const {
  fail(AMPX_ERR_NOT_SUPPORTED, "ONNX export: op '", record_.name(), "' at opset ", opset(), ": ",
       why);
}

void Emitter::require_opset(int64_t minimum, const char* onnx_op) const {
  if (opset() < minimum)
    unsupported(cat("its form needs ", onnx_op, ", which ONNX has from opset ", minimum));
}

void emit_recorded(GraphState& g, const std::vector<std::unique_ptr<Node>>& tape,
                   const std::vector<const DeviceTensor*>& outputs) {
  // Which record made each tensor of the tape.
  std::unordered_map<uint64_t, size_t> maker;
  for (size_t n = 0; n < tape.size(); ++n)
    if (tape[n])
      for (uint64_t id : tape[n]->output_ids) maker[id] = n;

  // The records the outputs need, found from the outputs back; a walk
  // stops at values known already (the graph's inputs) and at tensors no
  // record made (initializers).
  std::vector<char> needed(tape.size(), 0);
  std::vector<const DeviceTensor*> pending(outputs);
  std::unordered_set<uint64_t> seen;
  while (!pending.empty()) {
    const DeviceTensor* t = pending.back();
    pending.pop_back();
    if (!seen.insert(t->id).second || g.values.count(t->id)) continue;
    auto it = maker.find(t->id);
    if (it == maker.end()) continue;
    const Node& node = *tape[it->second];
    if (node.freed())
      fail(AMPX_ERR_ORDER, "ONNX export: the record of '", node.name(),
           "' was freed by a backward pass; export after the forward, before backward (or "
           "backward with retain_graph)");
    if (needed[it->second]) continue;
    needed[it->second] = 1;
    for (const TensorRef& in : node.inputs)
      if (in) pending.push_back(in.get());
  }

  // Each needed record's form, in tape order (producers before consumers).
  for (size_t n = 0; n < tape.size(); ++n) {
    if (!needed[n]) continue;
    const Node& node = *tape[n];
    for (const TensorRef& in : node.inputs)
      if (in && !g.values.count(in->id))
        g.values[in->id] = g.add_initializer(*in, in->name.empty() ? "weight" : in->name);
    Emitter e(g, node);
    node.onnx(e);
    for (uint64_t id : node.output_ids)
      if (!g.values.count(id))
        fail(AMPX_ERR_INTERNAL, "the ONNX form of '", node.name(), "' left an output unbound");
  }
  // Outputs no record made (a leaf returned as it is).
  for (const DeviceTensor* t : outputs)
    if (!g.values.count(t->id))
      g.values[t->id] = g.add_initializer(*t, t->name.empty() ? "weight" : t->name);
}

std::string Emitter::value_of(const DeviceTensor& t) {
  auto it = graph_.values.find(t.id);
  if (it == graph_.values.end()) fail(AMPX_ERR_INTERNAL, "'", t.describe(), "' has no ONNX value");
  return it->second;
}

void Emitter::bind(const DeviceTensor& t, const std::string& value) { graph_.values[t.id] = value; }

// ---- the model file ---------------------------------------------------------

namespace {

void write_attribute(ProtoWriter& w, const Attribute& a) {
  // AttributeProto: name 1, f 2, i 3, s 4, floats 7, ints 8, type 20.
  ProtoWriter m;
  m.string_field(1, a.name);
  switch (a.kind) {
    case Attribute::Kind::Int:
      m.int_field(3, a.i);
      m.int_field(20, 2);
      break;
    case Attribute::Kind::Float:
      m.float_field(2, a.f);
      m.int_field(20, 1);
      break;
    case Attribute::Kind::String:
      m.string_field(4, a.s);
      m.int_field(20, 3);
      break;
    case Attribute::Kind::Ints:
      for (int64_t v : a.ints) m.int_field(8, v);
      m.int_field(20, 7);
      break;
    case Attribute::Kind::Floats:
      for (float v : a.floats) m.float_field(7, v);
      m.int_field(20, 6);
      break;
  }
  w.message_field(5, m);
}

// TensorProto: dims 1, data_type 2, name 8, raw_data 9, external_data 13,
// data_location 14.
ProtoWriter tensor_proto(const Initializer& init, const std::string* location, size_t offset) {
  ProtoWriter t;
  for (int64_t d : init.dims) t.int_field(1, d);
  t.int_field(2, static_cast<int32_t>(init.type));
  t.string_field(8, init.name);
  if (!location) {
    t.bytes_field(9, init.raw.data(), init.raw.size());
    return t;
  }
  auto entry = [&](const char* key, const std::string& value) {
    ProtoWriter e;
    e.string_field(1, key);
    e.string_field(2, value);
    t.message_field(13, e);
  };
  entry("location", *location);
  entry("offset", std::to_string(offset));
  entry("length", std::to_string(init.raw.size()));
  t.int_field(14, 1);  // EXTERNAL
  return t;
}

// ValueInfoProto with a tensor type: dim 0 named `batch` when non-empty.
ProtoWriter value_info(const std::string& name, ElemType type, const Shape& shape,
                       const std::string& batch) {
  ProtoWriter dims;
  for (int32_t d = 0; d < shape.ndim; ++d) {
    ProtoWriter dim;
    if (d == 0 && !batch.empty())
      dim.string_field(2, batch);
    else
      dim.int_field(1, shape.dims[d]);
    dims.message_field(1, dim);
  }
  ProtoWriter tensor;
  tensor.int_field(1, static_cast<int32_t>(type));
  tensor.message_field(2, dims);
  ProtoWriter tp;
  tp.message_field(1, tensor);
  ProtoWriter vi;
  vi.string_field(1, name);
  vi.message_field(2, tp);
  return vi;
}

ElemType io_type(const DeviceTensor& t) {
  if (is_floating(t.dtype)) return ElemType::Float;
  if (t.dtype == DType::I32) return ElemType::Int32;
  if (t.dtype == DType::I64) return ElemType::Int64;
  fail(AMPX_ERR_NOT_SUPPORTED, "'", t.describe(), "' cannot be a graph input or output");
}

int64_t ir_for_opset(int64_t opset) {
  // The IR version each ONNX release paired with its newest opset.
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  if (opset <= 22) return 10;
  return 11;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

constexpr size_t kProtobufLimit = (size_t{1} << 31) - 1;

}  // namespace

void export_model(const ExportSpec& spec) {
  DeviceContext& ctx = *spec.outputs.at(0)->ctx;
  AutogradState& state = autograd_state(ctx);
  GraphState g;
  g.spec = &spec;

  // Names: unique over inputs, outputs and constant outputs.
  std::unordered_set<std::string> io_names;
  auto take_name = [&](const std::string& name, const char* what, size_t i) {
    if (name.empty()) fail(AMPX_ERR_INVALID_ARGUMENT, what, "[", i, "] is an empty name");
    if (!io_names.insert(name).second)
      fail(AMPX_ERR_INVALID_ARGUMENT, "the name '", name, "' (", what, "[", i,
           "]) is given twice; graph input and output names must be unique");
    g.names.insert(name);
  };
  for (size_t i = 0; i < spec.inputs.size(); ++i) take_name(spec.input_names[i], "input_names", i);
  for (size_t i = 0; i < spec.outputs.size(); ++i)
    take_name(spec.output_names[i], "output_names", i);
  for (size_t i = 0; i < spec.constant_outputs.size(); ++i)
    take_name(spec.constant_output_names[i], "constant_output_names", i);

  std::unordered_set<uint64_t> input_ids;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const DeviceTensor& t = *spec.inputs[i];
    if (t.ctx != &ctx)
      fail(AMPX_ERR_DEVICE, "inputs[", i, "] belongs to another context than outputs[0]");
    if (!input_ids.insert(t.id).second)
      fail(AMPX_ERR_INVALID_ARGUMENT, "inputs[", i, "] ('", spec.input_names[i],
           "') is a tensor listed as an input before");
    io_type(t);
    g.values[t.id] = spec.input_names[i];
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i)
    if (spec.outputs[i]->ctx != &ctx)
      fail(AMPX_ERR_DEVICE, "outputs[", i, "] belongs to another context than outputs[0]");

  // Which tensors depend on an input (a record whose input does), in tape
  // order; a walk from the outputs needs only what leads to them.
  std::unordered_set<uint64_t> depends(input_ids);
  for (const auto& node : state.tape) {
    if (!node) continue;
    bool any = false;
    for (const TensorRef& in : node->inputs) any = any || (in && depends.count(in->id));
    if (any)
      for (uint64_t id : node->output_ids) depends.insert(id);
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i)
    if (!depends.count(spec.outputs[i]->id))
      fail(AMPX_ERR_INVALID_ARGUMENT, "outputs[", i, "] ('", spec.output_names[i],
           "') does not depend on any input: export a forward recorded on the tape (grad mode "
           "on, each input requiring grad: ampx_tensor_set_requires_grad before the forward), "
           "from outputs made by it; a value that is the same for every input is a constant "
           "output (options->constant_outputs)");
  // After the dependency check: an input that backward reached has a
  // gradient too, and is better told that its records are gone.
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    if (spec.inputs[i]->grad)
      fail(AMPX_ERR_INVALID_ARGUMENT, "inputs[", i, "] ('", spec.input_names[i],
           "') has a gradient attached: it is a parameter, which the export writes as an "
           "initializer by itself; name the example input the forward read instead");
  emit_recorded(g, state.tape,
                std::vector<const DeviceTensor*>(spec.outputs.begin(), spec.outputs.end()));

  // Graph outputs: a value a node made takes the output's name (renamed in
  // every node); an input, an initializer or a value named already is
  // copied by an Identity.
  std::unordered_map<std::string, std::string> rename;
  std::unordered_set<std::string> node_outputs;
  for (const NodeSpec& n : g.nodes)
    for (const std::string& o : n.outputs) node_outputs.insert(o);
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    const std::string& value = g.values.at(spec.outputs[i]->id);
    if (node_outputs.count(value) && !rename.count(value)) {
      rename[value] = spec.output_names[i];
    } else {
      const auto r = rename.find(value);
      g.nodes.push_back({"Identity", {r == rename.end() ? value : r->second},
                         {spec.output_names[i]}, {}});
    }
  }
  for (NodeSpec& n : g.nodes) {
    for (std::string& s : n.inputs) {
      auto it = rename.find(s);
      if (it != rename.end()) s = it->second;
    }
    for (std::string& s : n.outputs) {
      auto it = rename.find(s);
      if (it != rename.end()) s = it->second;
    }
  }

  // Constant outputs: a Constant node each (what ML-Agents' exporter writes).
  std::vector<Initializer> constant_values;
  for (size_t i = 0; i < spec.constant_outputs.size(); ++i) {
    GraphState scratch;
    ExportSpec f32 = spec;
    f32.f16_weights = false;
    scratch.spec = &f32;
    scratch.add_initializer(*spec.constant_outputs[i], "value");
    constant_values.push_back(std::move(scratch.initializers.at(0)));
  }

  // Sizes first: beyond protobuf's 2 GiB, the weights go to a side file.
  size_t weight_bytes = 0;
  for (const Initializer& init : g.initializers) weight_bytes += init.raw.size();
  const bool external = spec.external_data == ExternalData::Always ||
                        (weight_bytes > kProtobufLimit - (size_t{64} << 20) &&
                         spec.external_data == ExternalData::Beyond2GiB);
  if (!external && weight_bytes > kProtobufLimit - (size_t{64} << 20))
    fail(AMPX_ERR_NOT_SUPPORTED, "ONNX export: the weights take ", weight_bytes,
         " bytes, beyond the 2 GiB a protobuf message can hold; allow external data "
         "(options->external_data) to write them beside the model");

  ProtoWriter graph;
  for (const NodeSpec& n : g.nodes) {
    ProtoWriter node;
    for (const std::string& s : n.inputs) node.string_field(1, s);
    for (const std::string& s : n.outputs) node.string_field(2, s);
    node.string_field(3, g.fresh("node_" + n.op_type));
    node.string_field(4, n.op_type);
    for (const Attribute& a : n.attrs) write_attribute(node, a);
    graph.message_field(1, node);
  }
  for (size_t i = 0; i < constant_values.size(); ++i) {
    ProtoWriter node;
    node.string_field(2, spec.constant_output_names[i]);
    node.string_field(3, g.fresh("node_Constant"));
    node.string_field(4, "Constant");
    ProtoWriter a;
    a.string_field(1, "value");
    a.message_field(5, tensor_proto(constant_values[i], nullptr, 0));
    a.int_field(20, 4);  // TENSOR
    node.message_field(5, a);
    graph.message_field(1, node);
  }
  graph.string_field(2, "ampx");
  const std::string data_name = base_name(spec.path) + ".data";
  std::string side_data;
  for (const Initializer& init : g.initializers) {
    if (external) {
      // 4 KiB-aligned offsets, so a runtime may map each tensor.
      side_data.resize((side_data.size() + 4095) / 4096 * 4096, '\0');
      graph.message_field(5, tensor_proto(init, &data_name, side_data.size()));
      side_data += init.raw;
    } else {
      graph.message_field(5, tensor_proto(init, nullptr, 0));
    }
  }
  if (!spec.doc.empty()) graph.string_field(10, spec.doc);
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    graph.message_field(11, value_info(spec.input_names[i], io_type(*spec.inputs[i]),
                                       spec.inputs[i]->shape, spec.batch_dim));
  for (size_t i = 0; i < spec.outputs.size(); ++i)
    graph.message_field(12, value_info(spec.output_names[i], io_type(*spec.outputs[i]),
                                       spec.outputs[i]->shape, spec.batch_dim));
  for (size_t i = 0; i < constant_values.size(); ++i)
    graph.message_field(12, value_info(spec.constant_output_names[i], constant_values[i].type,
                                       spec.constant_outputs[i]->shape, ""));

  ProtoWriter model;
  model.int_field(1, spec.ir_version ? spec.ir_version : ir_for_opset(spec.opset));
  model.string_field(2, "ampx");
  model.string_field(3, cat(AMPX_VERSION_MAJOR, ".", AMPX_VERSION_MINOR, ".", AMPX_VERSION_PATCH));
  model.message_field(7, graph);
  ProtoWriter opset;
  opset.string_field(1, "");
  opset.int_field(2, spec.opset);
  model.message_field(8, opset);
  if (model.size() > kProtobufLimit)
    fail(AMPX_ERR_NOT_SUPPORTED, "ONNX export: the model takes ", model.size(),
         " bytes, beyond the 2 GiB a protobuf message can hold");

  // The side file first: a model is never renamed into place before the
  // weights it names are.
  const std::string data_path =
      spec.path.substr(0, spec.path.size() - base_name(spec.path).size()) + data_name;
  if (external) {
    io::AtomicFile data(data_path);
    data.write(reinterpret_cast<const unsigned char*>(side_data.data()), side_data.size());
    data.commit();
  }
  io::AtomicFile file(spec.path);
  file.write(reinterpret_cast<const unsigned char*>(model.bytes().data()), model.size());
  file.commit();
}

}  // namespace onnx
}  // namespace ampx::impl
