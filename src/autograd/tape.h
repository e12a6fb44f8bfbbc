// tape.h -- reverse-mode automatic differentiation on a per-context tape.
//
// Ops append a Node when grad mode is on and an input requires a gradient.
// The tape is a list in creation order, so walking it backwards is a valid
// topological order. Nodes hold their inputs (and whatever they saved) but
// name their outputs by tensor id only, so outputs the program releases are
// really freed; their gradients are kept in a map during backward.
//
// The context's scopes (op outputs owned until popped) and grad mode live
// here too: they are the same layer's state.
//
// Higher-order gradients (create_graph): every node has a second backward,
// backward_graph, that computes the same gradients with recorded ops
// (ops.h), so the gradients join the tape and can be differentiated again,
// the way torch's derivative formulas are written once as differentiable
// code. A walk without create_graph runs backward() (the fused first-order
// primitives) as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace ampx::impl {

class LossScaler;
namespace onnx {
class Emitter;
}

class Node {
 public:
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  // Given the gradients of the outputs (nullptr for an output no gradient
  // reached), returns the gradients of `inputs`, in order (an empty ref for
  // an input that gets none). Each has its input's shape and dtype.
  virtual std::vector<TensorRef> backward(DeviceContext& ctx,
                                          const std::vector<DeviceTensor*>& output_grads) = 0;

  // The same gradients computed with recorded ops, so they can be
  // differentiated again. It runs with grad mode on and autocast off: each
  // formula computes in the dtypes the forward ran in (the inputs a node
  // holds are the ones it computed on, casts included). Each result has its
  // input's shape and dtype. Only called when has_backward_graph().
  virtual std::vector<TensorRef> backward_graph(DeviceContext& ctx,
                                                const std::vector<DeviceTensor*>& output_grads);
  virtual bool has_backward_graph() const { return false; }

  // Whether a backward without retain_graph ran this record and released
  // what it held (FreedNode).
  virtual bool freed() const { return false; }

  // Whether backward reads input i's values (not just its shape): record()
  // notes the memory of those inputs (saves), so backward can refuse to run
  // on values written in place since. An op that keeps its output for
  // backward calls saves() on it too.
  virtual bool reads_input(size_t) const { return true; }
  void saves(const DeviceTensor& t) {
    saved_versions.emplace_back(t.storage.get(), t.storage->version());
  }

  // Whether backward runs a nested tape (checkpointing recomputes its
  // segment), which may accumulate into leaves that are not among `inputs`:
  // the walk cannot tell in advance which leaves such a node reaches.
  virtual bool runs_nested_backward() const { return false; }

  // This record's ONNX form (onnx/emitter.h), written beside the op as its
  // backward formulas are: the nodes computing its outputs from its
  // inputs at inference. The default is NOT_SUPPORTED naming the op.
  virtual void onnx(onnx::Emitter& e) const;

  std::vector<TensorRef> inputs;
  std::vector<std::pair<const Storage*, uint64_t>> saved_versions;
  std::vector<uint64_t> output_ids;
  std::vector<std::weak_ptr<const void>> output_tokens;  // expired once released
  std::vector<Shape> output_shapes;  // as recorded, for the ONNX forms
};

// Told that `leaf`'s gradient is final for the backward pass that runs (its
// last accumulation is enqueued). Throwing stops that backward.
using GradReadyListener = std::function<void(DeviceTensor& leaf)>;

// Told when an ampx_backward pass has walked the whole tape (ok: it
// succeeded; throwing then fails the pass) or stopped on a failure (!ok;
// what it throws then is dropped), before the tape is cleared.
using BackwardEndListener = std::function<void(bool ok)>;

struct GradReadyPlan;  // tape.cpp

struct AutogradState : ContextExtension {
  bool grad_enabled = true;
  uint64_t generation = 1;       // of the current tape
  uint64_t last_generation = 1;  // generations are never reused
  std::vector<std::unique_ptr<Node>> tape;
  size_t tape_size_after_prune = 0;
  std::vector<std::vector<TensorRef>> scopes;

  // Listeners by id (see add_grad_ready_listener), and the one
  // ampx_set_grad_ready_hook installed (0: none).
  std::vector<std::pair<uint64_t, GradReadyListener>> grad_ready_listeners;
  std::vector<std::pair<uint64_t, BackwardEndListener>> backward_end_listeners;
  uint64_t last_listener_id = 0;
  uint64_t api_hook_listener = 0;
  bool in_backward = false;     // backward() runs (a nested walk included)
  int walking = 0;              // walks in progress: the tape is indexed, never pruned
  bool notifying = false;       // a listener runs
  int node_backward_depth = 0;  // Node::backward calls in progress
  GradReadyPlan* grad_ready_plan = nullptr;  // of the outermost walk, while it runs
  // Gradients (by tensor id) that a backward seeded with an enabled
  // scaler's scale accumulated into, until unscaled or zeroed: stepping or
  // clipping them is refused whether or not the optimizer was attached.
  std::unordered_set<uint64_t> loss_scaled_grads;
  bool scaling_pass = false;  // such a backward runs
};

AutogradState& autograd_state(DeviceContext& ctx);

// Whether an op with these inputs would be recorded.
bool should_record(DeviceContext& ctx, const std::vector<DeviceTensor*>& inputs);

// Records `node` (whose inputs are set) as the maker of `outputs`, which then
// require grad. Call only when should_record said so.
void record(DeviceContext& ctx, std::unique_ptr<Node> node,
            const std::vector<DeviceTensor*>& outputs);

// Makes `out` a further output of `node`, a record already on the tape:
// for a backward formula that reads a tensor the record saved (not one of
// its outputs) and must send that tensor's gradient back to the record.
// Its gradient then reaches node.backward after the earlier outputs'.
void add_output(DeviceContext& ctx, Node& node, DeviceTensor& out);

// A tensor on `saved`'s memory that is an output of `node` (a record on the
// tape), for a differentiable formula that reads what the record saved (its
// output, a pre-activation) and must send that tensor's gradient back to
// the record, where it reaches node.backward as a further output's
// gradient. The record must not hold it (its tape token would keep the
// record alive for good), so `slot`, kept by the record, remembers it:
// while it lives later walks get it back (a Hessian-vector product loop
// over a retained graph adds no output), and once released the next one
// takes its place. The record then has one output more, at slot.index.
struct SavedOutputSlot {
  size_t index = SIZE_MAX;          // in node.output_ids; SIZE_MAX: none made yet
  DeviceTensor* tensor = nullptr;   // alive while node.output_tokens[index] is
};
TensorRef saved_as_output(DeviceContext& ctx, Node& node, const DeviceTensor& saved,
                          SavedOutputSlot& slot);

// Adds `grad` into `slot`: takes it when the slot is empty, else sums (into
// the slot's dtype). A node may hand the same tensor to several inputs (add
// passes dy to both), so a shared slot is copied before it is summed into.
// With `graph` (create_graph) the sum is a new, recorded tensor.
void accumulate_grad(DeviceContext& ctx, TensorRef& slot, DeviceTensor& grad, bool graph);

// Whether a backward with an enabled scaler accumulated into `grad` (a
// leaf's gradient) since forget_loss_scale was last called for it.
bool carries_loss_scale(DeviceContext& ctx, const DeviceTensor& grad);
// `grad` no longer carries a loss scale (unscaled, or zeroed).
void forget_loss_scale(DeviceContext& ctx, const DeviceTensor& grad);

// Whether `t` was made by an op on the current tape.
bool on_tape(DeviceContext& ctx, const DeviceTensor& t);

// Whether gradients flow into `t`: a leaf that requires grad, or an output
// of the current tape (an output of a cleared tape is a constant).
bool flows_grad(DeviceContext& ctx, const DeviceTensor& t);

// Drops the records none of whose outputs the program can still reach (a
// forward that was never backpropagated), so evaluation loops with
// recording on do not grow. Records are dropped newest first, so releasing
// one record's inputs frees the older records they came from in one pass.
void prune_tape(DeviceContext& ctx);

// prune_tape when the tape has doubled since the last one (and holds 64
// records or more): amortised, one pass per doubling, for callers that run
// often (every record, every inner scope's pop).
void prune_tape_if_doubled(DeviceContext& ctx);

// ampx_backward: seeds with the scaler's scale (or 1), accumulates into
// leaves, clears the tape (also when it fails).
void backward(DeviceTensor& loss, LossScaler* scaler);

// ampx_backward_ex: as backward, but with retain_graph the tape is kept for
// another backward (grad-ready listeners and backward-end listeners then do
// not run: they run in the backward that frees the tape), and with
// create_graph the gradients are computed with recorded ops. Without
// retain_graph and with create_graph, the records this walk ran are freed
// (FreedNode) and the gradient records it made stay.
void backward_ex(DeviceTensor& loss, LossScaler* scaler, bool retain_graph, bool create_graph);

// ampx_grad: the gradients of `outputs` (seeded with grad_outputs, nullptr
// entries: ones for one-element outputs) with respect to `inputs`, as new
// tensors (an empty ref for an input no gradient reaches, allow_unused).
// Accumulates into no leaf and notifies no listener. Without retain_graph
// the records the walk ran are freed.
struct GradRequest {
  std::vector<DeviceTensor*> outputs;
  std::vector<DeviceTensor*> grad_outputs;  // empty, or one per output (entries may be nullptr)
  std::vector<DeviceTensor*> inputs;
  bool create_graph = false;
  bool retain_graph = false;
  bool allow_unused = false;
};
std::vector<TensorRef> grad(DeviceContext& ctx, const GradRequest& request);

// Subscribes to grad-ready notifications (ampx_backward's, and the
// program's ampx_grad_ready); returns an id for remove_grad_ready_listener.
// Listeners run in subscription order on the thread running backward.
uint64_t add_grad_ready_listener(DeviceContext& ctx, GradReadyListener listener);
// Drops a listener (destroying its callable); false when the id is unknown.
bool remove_grad_ready_listener(DeviceContext& ctx, uint64_t id);
// The same for the ends of ampx_backward's passes (ids from the same count).
uint64_t add_backward_end_listener(DeviceContext& ctx, BackwardEndListener listener);
bool remove_backward_end_listener(DeviceContext& ctx, uint64_t id);

// Runs every listener for `leaf`, with grad mode off and the tape protected
// from pruning; rethrows what a listener throws. Refused (ORDER) while a
// listener already runs.
void notify_grad_ready(DeviceContext& ctx, DeviceTensor& leaf);

// leaf.grad += grad (creating a zero gradient of the leaf's dtype first).
// With graph (create_graph) the gradient is replaced by a recorded sum.
void accumulate_into_leaf(DeviceContext& ctx, DeviceTensor& leaf, DeviceTensor& grad,
                          bool graph = false);

// How a walk runs (run_backward). The default: first-order primitives,
// every record a gradient reaches, leaves accumulated into.
struct Walk {
  bool create_graph = false;  // backward_graph, gradients summed with recorded ops
  // Which records run, by tape index (records past its size, made during
  // the walk, never do); nullptr: every record a gradient reaches.
  const std::vector<char>* runs = nullptr;
  // ampx_grad: gradients of the tensors whose ids are keys are collected
  // here instead of accumulated into leaves (an intermediate's is taken
  // when its maker runs, or at the end); other leaves get nothing, and
  // gradients of tensors not in `leads` (which lead to no key) are dropped.
  std::unordered_map<uint64_t, TensorRef>* captured = nullptr;
  const std::unordered_set<uint64_t>* leads = nullptr;
};

// Walks the current tape from newest to oldest, starting from `grads`
// (gradients of tape outputs, by tensor id), accumulating into leaves.
void run_backward(DeviceContext& ctx, std::unordered_map<uint64_t, TensorRef>& grads,
                  const Walk& walk = Walk());

// Marks a leaf as needing a gradient (or not): INVALID_ARGUMENT for an op
// output, DTYPE for an integer tensor asked to require one.
void set_requires_grad(DeviceTensor& t, bool requires_grad);

// Closes the innermost scope (ORDER when none is open), releasing what it
// owns, then drops the records that nothing reachable needs any more.
void pop_scope(DeviceContext& ctx);
// How many scopes are open.
int32_t scope_depth(DeviceContext& ctx);

// Hands a new op output to the innermost scope, if one is open; returns the
// handle the program gets (borrowed from the scope, or owned).
DeviceTensor* deliver(DeviceContext& ctx, TensorRef output);

}  // namespace ampx::impl
