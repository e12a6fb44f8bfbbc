#include "autograd/tape.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "amp/scaler.h"
#include "autocast/autocast.h"
#include "core/backend_nn.h"
#include "core/error.h"
#include "ops/ops.h"

namespace ampx::impl {

AutogradState& autograd_state(DeviceContext& ctx) {
  if (!ctx.autograd) ctx.autograd = std::make_unique<AutogradState>();
  return static_cast<AutogradState&>(*ctx.autograd);
}

bool on_tape(DeviceContext& ctx, const DeviceTensor& t) {
  return t.tape_generation != 0 && t.tape_generation == autograd_state(ctx).generation;
}

bool carries_loss_scale(DeviceContext& ctx, const DeviceTensor& grad) {
  return autograd_state(ctx).loss_scaled_grads.count(grad.id) != 0;
}

void forget_loss_scale(DeviceContext& ctx, const DeviceTensor& grad) {
  autograd_state(ctx).loss_scaled_grads.erase(grad.id);
}

bool flows_grad(DeviceContext& ctx, const DeviceTensor& t) {
  return t.requires_grad && (t.tape_generation == 0 || on_tape(ctx, t));
}

std::vector<TensorRef> Node::backward_graph(DeviceContext&, const std::vector<DeviceTensor*>&) {
  fail(AMPX_ERR_NOT_SUPPORTED, "'", name(),
       "' has no differentiable backward formula, so its gradient cannot be differentiated "
       "again (create_graph)");
}

bool should_record(DeviceContext& ctx, const std::vector<DeviceTensor*>& inputs) {
  // Once the program has released the context, nothing can backpropagate
  // (ampx_backward needs the tape that release dropped), and a record would
  // hold its inputs, which hold the context: it would never be destroyed.
  if (!ctx.is_open()) return false;
  if (!autograd_state(ctx).grad_enabled) return false;
  for (const DeviceTensor* t : inputs)
    if (t && flows_grad(ctx, *t)) return true;
  return false;
}

void prune_tape(DeviceContext& ctx) {
  AutogradState& state = autograd_state(ctx);
  // A walk indexes this very tape: a record made during it (create_graph)
  // or a listener that pops a scope must not free records under it.
  if (state.notifying || state.walking > 0) return;
  for (auto it = state.tape.rbegin(); it != state.tape.rend(); ++it) {
    bool reachable = false;
    for (const auto& token : (*it)->output_tokens) reachable = reachable || !token.expired();
    if (!reachable) it->reset();
  }
  state.tape.erase(std::remove(state.tape.begin(), state.tape.end(), nullptr), state.tape.end());
  state.tape_size_after_prune = state.tape.size();
}

void prune_tape_if_doubled(DeviceContext& ctx) {
  AutogradState& state = autograd_state(ctx);
  if (state.tape.size() >= 64 && state.tape.size() >= 2 * state.tape_size_after_prune)
    prune_tape(ctx);
}

void record(DeviceContext& ctx, std::unique_ptr<Node> node,
            const std::vector<DeviceTensor*>& outputs) {
  AutogradState& state = autograd_state(ctx);
  prune_tape_if_doubled(ctx);
  // Room first, so nothing below can fail half-way; grown geometrically
  // (reserving size + 1 would reallocate the whole tape at every record).
  if (state.tape.size() == state.tape.capacity())
    state.tape.reserve(std::max<size_t>(64, 2 * state.tape.capacity()));
  for (DeviceTensor* out : outputs) add_output(ctx, *node, *out);
  for (size_t i = 0; i < node->inputs.size(); ++i)
    if (node->inputs[i] && node->reads_input(i)) node->saves(*node->inputs[i]);
  state.tape.push_back(std::move(node));
}

void add_output(DeviceContext& ctx, Node& node, DeviceTensor& out) {
  node.output_ids.reserve(node.output_ids.size() + 1);  // nothing changes if these throw
  node.output_tokens.reserve(node.output_tokens.size() + 1);
  node.output_shapes.reserve(node.output_shapes.size() + 1);
  if (!out.tape_token) out.tape_token = std::make_shared<char>(0);
  node.output_ids.push_back(out.id);
  node.output_tokens.push_back(out.tape_token);
  node.output_shapes.push_back(out.shape);
  out.requires_grad = true;
  out.tape_generation = autograd_state(ctx).generation;
}

TensorRef saved_as_output(DeviceContext& ctx, Node& node, const DeviceTensor& saved,
                          SavedOutputSlot& slot) {
  // The token expires exactly when the tensor's last reference goes
  // (DeviceTensor::release), so a live token means a live tensor.
  if (slot.index != SIZE_MAX && !node.output_tokens[slot.index].expired())
    return retained(*slot.tensor);
  TensorRef out(DeviceTensor::alias(ctx, saved, saved.dtype, saved.shape));
  if (slot.index == SIZE_MAX) {
    add_output(ctx, node, *out);
    slot.index = node.output_ids.size() - 1;
  } else {
    out->tape_token = std::make_shared<char>(0);
    node.output_ids[slot.index] = out->id;
    node.output_tokens[slot.index] = out->tape_token;
    out->requires_grad = true;
    out->tape_generation = autograd_state(ctx).generation;
  }
  slot.tensor = out.get();
  return out;
}

namespace {

// slot + grad as a recorded op (create_graph), in the slot's dtype.
TensorRef recorded_sum(DeviceContext& ctx, DeviceTensor& slot, DeviceTensor& grad) {
  TensorRef sum(op_binary(BinaryOp::Add, slot, grad));
  if (sum->dtype == slot.dtype) return sum;
  return cast_to(ctx, *sum, slot.dtype);
}

}  // namespace

void accumulate_grad(DeviceContext& ctx, TensorRef& slot, DeviceTensor& grad, bool graph) {
  if (slot && graph) {
    slot = recorded_sum(ctx, *slot, grad);
    return;
  }
  if (!slot) {
    grad.retain();
    slot = TensorRef(&grad);
    return;
  }
  if (slot->refs.load(std::memory_order_acquire) > 1) {
    TensorRef own(DeviceTensor::empty(ctx, slot->dtype, slot->shape));
    ctx.backend().copy(own->data(), slot->data(), slot->nbytes());
    slot = std::move(own);
  }
  ctx.backend()
      .require<NnPrimitives>("backward")
      .add_into(slot->data(), slot->dtype, grad.data(), grad.dtype, grad.numel());
}

namespace {

void clear_tape(AutogradState& state) {
  state.tape.clear();
  state.generation = ++state.last_generation;
}

// What a record becomes once a backward without retain_graph ran it: its
// inputs and saved tensors are released, its outputs still named, so a
// later walk that needs it is refused before anything changes.
class FreedNode final : public Node {
 public:
  explicit FreedNode(const char* op) : op_(op) {}
  const char* name() const override { return op_; }
  bool freed() const override { return true; }
  std::vector<TensorRef> backward(DeviceContext&, const std::vector<DeviceTensor*>&) override {
    fail(AMPX_ERR_INTERNAL, "a freed record of '", op_, "' was run");
  }

 private:
  const char* op_;  // names are string literals
};

// Frees the records a walk ran (runs[n], by tape index as planned; those it
// made lie past runs.size() and stay).
void free_records(AutogradState& state, const std::vector<char>& runs) {
  for (size_t n = 0; n < runs.size() && n < state.tape.size(); ++n) {
    if (!runs[n] || state.tape[n]->freed()) continue;
    auto freed = std::make_unique<FreedNode>(state.tape[n]->name());
    freed->output_ids = std::move(state.tape[n]->output_ids);
    freed->output_tokens = std::move(state.tape[n]->output_tokens);
    state.tape[n] = std::move(freed);
  }
}

}  // namespace

// What the outermost walk needs to tell listeners, in walk order, when each
// leaf's gradient is final. A leaf is due once the last running record that
// accumulates into it has been processed -- or, if that record is newer than
// the oldest running record with a nested backward (a checkpoint, which may
// reach any leaf through its recompute), once that record has: only then is
// no further accumulation possible. Leaves that only nested walks reach are
// due there too.
struct GradReadyPlan {
  struct Due {
    size_t after;  // notify once the record at this tape index is processed
    size_t last;   // the last running record (in walk order) taking the leaf as input
    size_t input;  // the leaf's last position among that record's inputs
    TensorRef leaf;
  };
  std::vector<Due> due;  // in notification order
  size_t next = 0;
  size_t barrier = SIZE_MAX;  // the oldest running record with a nested backward
  // Leaves made after the walk began belong to it (checkpoint's copies of
  // its inputs) and are never the program's parameters.
  uint64_t newest_leaf_id = 0;
  std::unordered_set<uint64_t> predicted, received, notified;
  std::vector<TensorRef> nested;  // reached by nested walks only, first-reached order
};

namespace {

void note_received(AutogradState& state, DeviceTensor& leaf) {
  GradReadyPlan* plan = state.grad_ready_plan;
  if (!plan || leaf.id > plan->newest_leaf_id) return;
  if (!plan->received.insert(leaf.id).second) return;
  if (state.node_backward_depth > 0 && plan->predicted.count(leaf.id) == 0) {
    plan->nested.push_back(retained(leaf));
  }
}

void notify_once(DeviceContext& ctx, GradReadyPlan& plan, DeviceTensor& leaf) {
  if (plan.received.count(leaf.id) == 0) return;  // no gradient reached it
  if (!plan.notified.insert(leaf.id).second) return;
  notify_grad_ready(ctx, leaf);
}

// Called after the walk processed tape index n (whether the record ran or
// not); SIZE_MAX at the end of the walk.
void notify_due(DeviceContext& ctx, GradReadyPlan& plan, size_t n) {
  while (plan.next < plan.due.size() && (n == SIZE_MAX || plan.due[plan.next].after == n)) {
    DeviceTensor& leaf = *plan.due[plan.next++].leaf;
    notify_once(ctx, plan, leaf);
  }
  if (n == plan.barrier || n == SIZE_MAX)
    for (size_t i = 0; i < plan.nested.size(); ++i) notify_once(ctx, plan, *plan.nested[i]);
}

}  // namespace

void accumulate_into_leaf(DeviceContext& ctx, DeviceTensor& leaf, DeviceTensor& grad, bool graph) {
  if (graph) {
    // torch's rule under create_graph: the gradient is replaced by a new,
    // recorded sum (a copy when there was none), so it can be
    // differentiated; the old tensor is not written.
    TensorRef sum;
    if (leaf.grad) {
      sum = recorded_sum(ctx, *leaf.grad, grad);
    } else {
      sum = TensorRef(op_affine(grad, 1.0f, 0.0f));
      if (sum->dtype != leaf.dtype) sum = cast_to(ctx, *sum, leaf.dtype);
    }
    // The sum carries a scale when this pass's part or the old one does.
    AutogradState& state = autograd_state(ctx);
    state.loss_scaled_grads.reserve(state.loss_scaled_grads.size() + 1);
    DeviceTensor* old = leaf.grad;
    const bool old_scaled = old && state.loss_scaled_grads.erase(old->id) != 0;
    leaf.grad = sum.take();
    if (old) old->release();
    if (state.scaling_pass || old_scaled) state.loss_scaled_grads.insert(leaf.grad->id);
    note_received(state, leaf);
    return;
  }
  NnPrimitives& nn = ctx.backend().require<NnPrimitives>("backward");
  if (!leaf.grad) {
    TensorRef zeros(DeviceTensor::empty(ctx, leaf.dtype, leaf.shape));
    ctx.backend().fill(zeros->data(), dtype_size(leaf.dtype), 0, zeros->numel());
    leaf.grad = zeros.take();
  }
  AutogradState& state = autograd_state(ctx);
  if (state.scaling_pass) state.loss_scaled_grads.insert(leaf.grad->id);
  nn.add_into(leaf.grad->data(), leaf.grad->dtype, grad.data(), grad.dtype, grad.numel());
  note_received(state, leaf);
}

namespace {

template <class Listener>
uint64_t add_listener(AutogradState& state, std::vector<std::pair<uint64_t, Listener>>& listeners,
                      Listener listener) {
  listeners.reserve(listeners.size() + 1);
  const uint64_t id = ++state.last_listener_id;
  listeners.emplace_back(id, std::move(listener));
  return id;
}

template <class Listener>
bool remove_listener(std::vector<std::pair<uint64_t, Listener>>& listeners, uint64_t id) {
  for (auto it = listeners.begin(); it != listeners.end(); ++it) {
    if (it->first != id) continue;
    // Moved out first: its destructor (a hook's release) may look at the list.
    Listener gone = std::move(it->second);
    listeners.erase(it);
    return true;
  }
  return false;
}

}  // namespace

uint64_t add_grad_ready_listener(DeviceContext& ctx, GradReadyListener listener) {
  AutogradState& state = autograd_state(ctx);
  return add_listener(state, state.grad_ready_listeners, std::move(listener));
}

bool remove_grad_ready_listener(DeviceContext& ctx, uint64_t id) {
  return remove_listener(autograd_state(ctx).grad_ready_listeners, id);
}

uint64_t add_backward_end_listener(DeviceContext& ctx, BackwardEndListener listener) {
  AutogradState& state = autograd_state(ctx);
  return add_listener(state, state.backward_end_listeners, std::move(listener));
}

bool remove_backward_end_listener(DeviceContext& ctx, uint64_t id) {
  return remove_listener(autograd_state(ctx).backward_end_listeners, id);
}

namespace {

void notify_backward_end(AutogradState& state, bool ok) {
  for (size_t i = 0; i < state.backward_end_listeners.size(); ++i) {
    const BackwardEndListener listener = state.backward_end_listeners[i].second;
    if (ok) {
      listener(true);
      continue;
    }
    try {
      listener(false);
    } catch (...) {
      // The pass failed already; its own error is the one to report.
    }
  }
}

}  // namespace

void notify_grad_ready(DeviceContext& ctx, DeviceTensor& leaf) {
  AutogradState& state = autograd_state(ctx);
  if (state.notifying)
    fail(AMPX_ERR_ORDER, "a grad-ready listener is already running on this context; listeners "
                         "must not report gradients themselves");
  if (state.grad_ready_listeners.empty()) return;
  // Ops a listener runs are not recorded: a record would join the tape the
  // walk is reading.
  struct Notifying {
    AutogradState& state;
    bool grad_enabled;
    ~Notifying() {
      state.notifying = false;
      state.grad_enabled = grad_enabled;
    }
  } notifying{state, state.grad_enabled};
  state.notifying = true;
  state.grad_enabled = false;
  leaf.retain();
  const TensorRef hold(&leaf);
  // By index: a listener may not add or remove listeners (the C API refuses
  // while one runs), but the list is read afresh each time regardless.
  for (size_t i = 0; i < state.grad_ready_listeners.size(); ++i) {
    const GradReadyListener listener = state.grad_ready_listeners[i].second;
    listener(leaf);
  }
}

// Refuses, before anything changes, a backward that would read memory the
// program wrote in place after an op recorded it (a new batch copied into
// an input, an optimizer step on parameters the forward used -- the GAN
// mistake of stepping one model between another's forward and backward):
// the gradients would silently mix old and new values. Only the records
// this backward runs are checked: those an output of which leads to loss.
namespace {

// Calls visit(n, node) for each record, newest first, that a walk seeded
// with gradients of the tensors `needed` names would run: those an output of
// which leads to a seed. It may run fewer (a record can return no gradient
// for an input), never more.
template <class Visit>
void for_each_running_node(AutogradState& state, std::unordered_set<uint64_t> needed,
                           Visit&& visit) {
  for (size_t n = state.tape.size(); n-- > 0;) {
    Node& node = *state.tape[n];
    const bool runs = std::any_of(node.output_ids.begin(), node.output_ids.end(),
                                  [&](uint64_t id) { return needed.count(id) != 0; });
    if (!runs) continue;
    visit(n, node);
    for (const TensorRef& input : node.inputs)
      if (input) needed.insert(input->id);
  }
}

void check_saved_memory(const Node& node) {
  for (const auto& [storage, version] : node.saved_versions)
    if (storage->version() != version)
      fail(AMPX_ERR_ORDER, "a tensor that '", node.name(),
           "' saved for backward (an input, or its output) was written in place after the op "
           "ran (ampx_tensor_copy_from_host/_copy/_fill, an optimizer step or zero_grad, a "
           "state load), so its gradients would mix old and new values; run the forward "
           "again after such writes");
}

void check_freed(const Node& node) {
  if (node.freed())
    fail(AMPX_ERR_ORDER, "the record of '", node.name(),
         "' was freed by an earlier backward that did not retain the graph; pass retain_graph "
         "(ampx_grad_options, ampx_backward_options) to every backward but the last one over "
         "the same graph, or run the forward again");
}

// The checks a walk seeded at `seeds` needs before it changes anything:
// freed records, inputs written in place, and, for create_graph or
// ampx_grad, records that cannot take part. Returns which records run
// (by tape index); for ampx_grad (`wanted` not null) only those that lead
// to a wanted tensor, whose ids (the wanted ones included) go to *leads.
std::vector<char> plan_walk(AutogradState& state, const std::unordered_set<uint64_t>& seeds,
                            bool create_graph, const std::unordered_set<uint64_t>* wanted,
                            std::unordered_set<uint64_t>* leads) {
  std::vector<char> runs(state.tape.size(), 0);
  // A freed record on the way is refused whether or not it leads to a
  // wanted tensor (its inputs, released, cannot tell).
  for_each_running_node(state, seeds, [&](size_t n, const Node& node) {
    check_freed(node);
    runs[n] = 1;
  });
  if (wanted) {
    *leads = *wanted;
    for (size_t n = 0; n < state.tape.size(); ++n) {
      const Node& node = *state.tape[n];
      const bool leads_on = std::any_of(node.inputs.begin(), node.inputs.end(), [&](const TensorRef& in) {
        return in && leads->count(in->id) != 0;
      });
      if (!leads_on) {
        runs[n] = 0;
        continue;
      }
      for (uint64_t id : node.output_ids) leads->insert(id);
    }
  }
  for (size_t n = state.tape.size(); n-- > 0;) {
    if (!runs[n]) continue;
    const Node& node = *state.tape[n];
    check_saved_memory(node);
    if ((create_graph || wanted) && node.runs_nested_backward())
      fail(AMPX_ERR_NOT_SUPPORTED, "'", node.name(), "' recomputes its segment in a nested "
           "backward that accumulates into the leaves it reaches, so it cannot run under ",
           create_graph ? "create_graph" : "ampx_grad",
           "; use ampx_backward (or ampx_backward_ex without create_graph), or compute the "
           "segment without checkpointing");
    if (create_graph && !node.has_backward_graph())
      fail(AMPX_ERR_NOT_SUPPORTED, "'", node.name(), "' has no differentiable backward formula, so "
           "its gradient cannot be differentiated again (create_graph)");
  }
  return runs;
}

std::unique_ptr<GradReadyPlan> plan_grad_ready(
    DeviceContext& ctx, AutogradState& state,
    const std::unordered_map<uint64_t, TensorRef>& grads) {
  auto plan = std::make_unique<GradReadyPlan>();
  plan->newest_leaf_id = ctx.next_tensor_id();  // ids only grow: later tensors have larger ones
  std::unordered_set<uint64_t> seeds;
  for (const auto& entry : grads) seeds.insert(entry.first);
  std::unordered_map<uint64_t, size_t> slot;  // leaf id -> its entry in plan->due
  for_each_running_node(state, std::move(seeds), [&](size_t n, Node& node) {
    if (node.runs_nested_backward()) plan->barrier = n;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      DeviceTensor* input = node.inputs[i].get();
      if (!input || !flows_grad(ctx, *input) || on_tape(ctx, *input)) continue;
      const auto [it, fresh] = slot.emplace(input->id, plan->due.size());
      if (fresh) {
        plan->due.push_back({0, n, i, retained(*input)});
      } else {
        plan->due[it->second].last = n;
        plan->due[it->second].input = i;
      }
    }
  });
  for (GradReadyPlan::Due& d : plan->due) {
    d.after = std::min(d.last, plan->barrier);
    plan->predicted.insert(d.leaf->id);
  }
  std::sort(plan->due.begin(), plan->due.end(),
            [](const GradReadyPlan::Due& a, const GradReadyPlan::Due& b) {
              if (a.after != b.after) return a.after > b.after;
              if (a.last != b.last) return a.last > b.last;
              return a.input < b.input;
            });
  return plan;
}

// For a walk with create_graph: grad mode on (the formulas record) and no
// autocast region (each formula computes in its record's dtypes), put back
// afterwards.
class GraphWalkScope {
 public:
  GraphWalkScope(DeviceContext& ctx, bool active) : state_(autograd_state(ctx)), active_(active) {
    if (!active_) return;
    enabled_ = state_.grad_enabled;
    state_.grad_enabled = true;
    std::swap(regions_, autocast_state(ctx).stack);
    autocast_ = &autocast_state(ctx);
  }
  ~GraphWalkScope() {
    if (!active_) return;
    state_.grad_enabled = enabled_;
    std::swap(regions_, autocast_->stack);
  }
  GraphWalkScope(const GraphWalkScope&) = delete;
  GraphWalkScope& operator=(const GraphWalkScope&) = delete;

 private:
  AutogradState& state_;
  bool active_;
  bool enabled_ = true;
  AutocastState* autocast_ = nullptr;
  std::vector<PrecisionPolicy*> regions_;
};

// A formula's result must match its input exactly, or the sums and the
// leaves' gradients would silently take another shape or dtype.
void check_formula_result(const Node& node, const DeviceTensor& input, const DeviceTensor& grad) {
  if (grad.dtype != input.dtype || !(grad.shape == input.shape))
    fail(AMPX_ERR_INTERNAL, "the differentiable backward of '", node.name(), "' gave ",
         grad.describe(), " for an input ", input.describe());
}

}  // namespace

void run_backward(DeviceContext& ctx, std::unordered_map<uint64_t, TensorRef>& grads,
                  const Walk& walk) {
  AutogradState& state = autograd_state(ctx);
  // Only the outermost walk notifies: a nested one (a checkpoint's
  // recompute) cannot know whether the outer walk reaches its leaves again.
  // A walk that collects its gradients (ampx_grad) notifies nobody.
  std::unique_ptr<GradReadyPlan> plan;
  if (state.node_backward_depth == 0 && !state.grad_ready_plan && !walk.captured &&
      !state.grad_ready_listeners.empty())
    plan = plan_grad_ready(ctx, state, grads);
  struct PlanInPlace {
    AutogradState& state;
    bool active;
    ~PlanInPlace() {
      if (active) state.grad_ready_plan = nullptr;
    }
  } plan_in_place{state, plan != nullptr};
  if (plan) state.grad_ready_plan = plan.get();
  struct Walking {
    int& count;
    ~Walking() { --count; }
  } walking{++state.walking};
  const GraphWalkScope graph_scope(ctx, walk.create_graph);
  const auto take_captured = [&](uint64_t id) {
    if (!walk.captured) return;
    auto slot = walk.captured->find(id);
    auto found = grads.find(id);
    if (slot == walk.captured->end() || found == grads.end()) return;
    slot->second = retained(*found->second);
  };
  // By index: a node's backward may run a nested tape (checkpointing), which
  // swaps this vector out and back, and records made under create_graph
  // join its end (they are not walked).
  for (size_t n = walk.runs ? walk.runs->size() : state.tape.size(); n-- > 0;) {
    Node& node = *state.tape[n];
    for (uint64_t id : node.output_ids) take_captured(id);
    if (walk.runs && !(*walk.runs)[n]) {
      for (uint64_t id : node.output_ids) grads.erase(id);
      if (plan) notify_due(ctx, *plan, n);
      continue;
    }
    std::vector<DeviceTensor*> output_grads;
    bool any = false;
    for (uint64_t id : node.output_ids) {
      auto found = grads.find(id);
      output_grads.push_back(found == grads.end() ? nullptr : found->second.get());
      any = any || found != grads.end();
    }
    if (any) {
      std::vector<TensorRef> input_grads;
      {
        struct InNode {
          int& depth;
          ~InNode() { --depth; }
        } in_node{++state.node_backward_depth};
        input_grads = walk.create_graph ? node.backward_graph(ctx, output_grads)
                                        : node.backward(ctx, output_grads);
      }
      for (uint64_t id : node.output_ids) grads.erase(id);  // no longer needed
      for (size_t i = 0; i < node.inputs.size() && i < input_grads.size(); ++i) {
        if (!node.inputs[i] || !input_grads[i]) continue;
        DeviceTensor& input = *node.inputs[i];
        if (!flows_grad(ctx, input)) continue;
        if (walk.create_graph) check_formula_result(node, input, *input_grads[i]);
        if (walk.captured) {
          if (walk.leads && walk.leads->count(input.id) == 0) continue;
          if (on_tape(ctx, input)) {
            accumulate_grad(ctx, grads[input.id], *input_grads[i], walk.create_graph);
          } else {
            auto slot = walk.captured->find(input.id);
            if (slot != walk.captured->end())
              accumulate_grad(ctx, slot->second, *input_grads[i], walk.create_graph);
          }
        } else if (on_tape(ctx, input)) {
          accumulate_grad(ctx, grads[input.id], *input_grads[i], walk.create_graph);
        } else {
          accumulate_into_leaf(ctx, input, *input_grads[i], walk.create_graph);
        }
      }
    }
    if (plan) notify_due(ctx, *plan, n);
  }
  if (walk.captured)
    for (auto& entry : grads) take_captured(entry.first);
  if (plan) notify_due(ctx, *plan, SIZE_MAX);
}

namespace {

// Keeps the tape from being pruned (records made meanwhile included) from a
// walk's planning to the freeing of what it ran, so the tape indices the
// plan holds stay valid.
class NoPrune {
 public:
  explicit NoPrune(AutogradState& state) : state_(state) { ++state_.walking; }
  ~NoPrune() { --state_.walking; }
  NoPrune(const NoPrune&) = delete;
  NoPrune& operator=(const NoPrune&) = delete;

 private:
  AutogradState& state_;
};

// Holds the program's context handle for a whole pass: a hook or a segment
// that releases the program's last context reference would otherwise drop
// the state the walk reads; the drop then happens when the pass is over.
struct HandleHeld {
  explicit HandleHeld(DeviceContext& c) : ctx(c), held(c.is_open()) {
    if (held) ctx.retain_handle();
  }
  ~HandleHeld() {
    if (held) ctx.release_handle();
  }
  HandleHeld(const HandleHeld&) = delete;
  HandleHeld& operator=(const HandleHeld&) = delete;
  DeviceContext& ctx;
  bool held;
};

void refuse_nested(AutogradState& state, const char* what) {
  if (state.in_backward)
    fail(AMPX_ERR_ORDER, "a backward pass is already running on this context (this call came "
                         "from a grad-ready hook or a checkpointed segment's recompute); run ",
         what, " after it returns");
}

// A one-element tensor of `like`'s dtype and shape holding 1.
TensorRef ones_like_scalar(DeviceContext& ctx, const DeviceTensor& like) {
  TensorRef seed(DeviceTensor::empty(ctx, like.dtype, like.shape));
  ctx.backend().fill(seed->data(), dtype_size(like.dtype),
                     like.dtype == DType::F32   ? 0x3f800000u
                     : like.dtype == DType::F16 ? 0x3c00u
                                                : 0x3f80u,
                     1);
  return seed;
}

// Why a tensor the program passed as an output to differentiate is not
// one: stale means the tape that made it was cleared by a backward.
[[noreturn]] void refuse_output(const DeviceTensor& t, const std::string& arg, bool legacy) {
  const bool stale = t.tape_generation != 0;
  if (stale && !legacy)
    fail(AMPX_ERR_ORDER, "'", arg, "' was made on a tape that an earlier backward cleared (a "
         "backward without retain_graph frees the graph); pass retain_graph to every backward "
         "but the last one over the same graph, or run the forward again");
  fail(AMPX_ERR_INVALID_ARGUMENT,
       "'", arg, "' was not made by a recorded op on the current tape (was grad mode off, did no "
       "input require grad, or was backward already called? ampx_backward_ex with "
       "retain_graph keeps the tape for another backward)");
}

void backward_pass(DeviceTensor& loss, LossScaler* scaler, bool retain_graph, bool create_graph,
                   bool legacy) {
  DeviceContext& ctx = *loss.ctx;
  const HandleHeld handle_held(ctx);
  AutogradState& state = autograd_state(ctx);
  refuse_nested(state, legacy ? "ampx_backward" : "ampx_backward_ex");
  if (loss.numel() != 1)
    fail(AMPX_ERR_SHAPE, "'loss' is ", loss.describe(),
         "; backward starts from a one-element loss (reduce it with ampx_sum or ampx_mean)");
  if (!is_floating(loss.dtype)) fail(AMPX_ERR_DTYPE, "'loss' is ", loss.describe());
  if (!on_tape(ctx, loss)) refuse_output(loss, "loss", legacy);
  if (scaler && &scaler->context() != &ctx)
    fail(AMPX_ERR_DEVICE, "'scaler' belongs to a different context than 'loss'");
  const NoPrune no_prune(state);
  const std::vector<char> runs = plan_walk(state, {loss.id}, create_graph, nullptr, nullptr);

  // Without retain_graph and create_graph the whole tape goes, also when
  // the pass fails (ampx_backward's rule); with create_graph only the
  // records this pass ran, once it succeeded (the gradients' records stay).
  const bool clear_all = !retain_graph && !create_graph;
  struct ClearOnExit {
    AutogradState& state;
    bool clear;
    ~ClearOnExit() {
      if (clear) clear_tape(state);
      state.in_backward = false;
      state.scaling_pass = false;
    }
  } clear_on_exit{state, clear_all};
  state.in_backward = true;
  // The gradients this pass accumulates into carry the scale.
  state.scaling_pass = scaler && scaler->enabled();

  std::unordered_map<uint64_t, TensorRef> grads;
  TensorRef seed = ones_like_scalar(ctx, loss);
  if (scaler)
    ctx.backend().convert(seed->data(), loss.dtype, scaler->scale_tensor().data(), DType::F32, 1);
  grads.emplace(loss.id, std::move(seed));
  // Listeners hear the pass that frees the graph, the last one over it.
  const bool final_pass = !retain_graph;
  std::vector<std::pair<uint64_t, GradReadyListener>> quiet;
  if (!final_pass) std::swap(quiet, state.grad_ready_listeners);
  struct ListenersBack {
    AutogradState& state;
    std::vector<std::pair<uint64_t, GradReadyListener>>& quiet;
    bool swapped;
    ~ListenersBack() {
      if (swapped) std::swap(quiet, state.grad_ready_listeners);
    }
  } listeners_back{state, quiet, !final_pass};
  Walk walk;
  walk.create_graph = create_graph;
  try {
    run_backward(ctx, grads, walk);
  } catch (...) {
    if (final_pass) notify_backward_end(state, false);
    throw;
  }
  if (!retain_graph && create_graph) free_records(state, runs);
  if (final_pass) notify_backward_end(state, true);
}

}  // namespace

void backward(DeviceTensor& loss, LossScaler* scaler) {
  backward_pass(loss, scaler, false, false, true);
}

void backward_ex(DeviceTensor& loss, LossScaler* scaler, bool retain_graph, bool create_graph) {
  backward_pass(loss, scaler, retain_graph, create_graph, false);
}

std::vector<TensorRef> grad(DeviceContext& ctx, const GradRequest& request) {
  const HandleHeld handle_held(ctx);
  AutogradState& state = autograd_state(ctx);
  refuse_nested(state, "ampx_grad");
  if (request.outputs.empty())
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'output_count' is 0; ampx_grad needs an output");
  if (request.inputs.empty())
    fail(AMPX_ERR_INVALID_ARGUMENT, "argument 'input_count' is 0; ampx_grad needs an input");
  // The seeds, checked before anything changes.
  std::vector<TensorRef> seeds;
  std::unordered_set<uint64_t> seed_ids;
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    DeviceTensor& out = *request.outputs[i];
    const std::string arg = cat("outputs[", i, "]");
    if (out.ctx != &ctx) fail(AMPX_ERR_DEVICE, "'", arg, "' belongs to another context");
    if (!is_floating(out.dtype))
      fail(AMPX_ERR_DTYPE, "'", arg, "' is ", out.describe(), "; only floating tensors have gradients");
    if (!flows_grad(ctx, out)) {
      if (!out.requires_grad && out.tape_generation == 0)
        fail(AMPX_ERR_INVALID_ARGUMENT, "'", arg, "' ", out.describe(),
             " does not require grad: no recorded op made it from a tensor that requires one");
      refuse_output(out, arg, false);
    }
    DeviceTensor* given = request.grad_outputs.empty() ? nullptr : request.grad_outputs[i];
    if (!given) {
      if (out.numel() != 1)
        fail(AMPX_ERR_SHAPE, "'", arg, "' is ", out.describe(), " and grad_outputs[", i,
             "] is NULL; a gradient of ones is implied only for a one-element output, so pass "
             "grad_outputs[", i, "] of the output's shape and dtype");
      seeds.push_back(ones_like_scalar(ctx, out));
    } else {
      if (given->ctx != &ctx)
        fail(AMPX_ERR_DEVICE, "'grad_outputs[", i, "]' belongs to another context");
      if (!(given->shape == out.shape))
        fail(AMPX_ERR_SHAPE, "'grad_outputs[", i, "]' is ", given->describe(), " but '", arg,
             "' is ", out.describe(), "; they must have one shape");
      if (given->dtype != out.dtype)
        fail(AMPX_ERR_DTYPE, "'grad_outputs[", i, "]' is ", given->describe(), " but '", arg,
             "' is ", out.describe(), "; they must have one dtype");
      seeds.push_back(retained(*given));
    }
    seed_ids.insert(out.id);
  }
  std::unordered_set<uint64_t> wanted;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    DeviceTensor& in = *request.inputs[i];
    if (in.ctx != &ctx) fail(AMPX_ERR_DEVICE, "'inputs[", i, "]' belongs to another context");
    if (!is_floating(in.dtype))
      fail(AMPX_ERR_DTYPE, "'inputs[", i, "]' is ", in.describe(), "; only floating tensors have gradients");
    if (!flows_grad(ctx, in)) {
      if (in.tape_generation != 0 && in.requires_grad)
        fail(AMPX_ERR_ORDER, "'inputs[", i, "]' was made on a tape that an earlier backward "
             "cleared; run the forward again");
      fail(AMPX_ERR_INVALID_ARGUMENT, "'inputs[", i, "]' ", in.describe(),
           " does not require grad: mark a leaf with ampx_tensor_set_requires_grad, or pass a "
           "tensor a recorded op made");
    }
    wanted.insert(in.id);
  }
  std::unordered_set<uint64_t> leads;
  const NoPrune no_prune(state);
  const std::vector<char> runs =
      plan_walk(state, seed_ids, request.create_graph, &wanted, &leads);
  // An input no record on the way takes, and no output is, gets no gradient.
  std::unordered_set<uint64_t> reached = seed_ids;
  for (size_t n = 0; n < runs.size(); ++n)
    if (runs[n])
      for (const TensorRef& in : state.tape[n]->inputs)
        if (in) reached.insert(in->id);
  for (size_t i = 0; i < request.inputs.size(); ++i)
    if (!request.allow_unused && reached.count(request.inputs[i]->id) == 0)
      fail(AMPX_ERR_INVALID_ARGUMENT, "'inputs[", i, "]' ", request.inputs[i]->describe(),
           " is not reached from the outputs (no recorded op on their way takes it); set "
           "allow_unused to get NULL for it");

  struct InBackward {
    AutogradState& state;
    ~InBackward() { state.in_backward = false; }
  } in_backward{state};
  state.in_backward = true;
  const GraphWalkScope graph_scope(ctx, request.create_graph);
  std::unordered_map<uint64_t, TensorRef> captured;
  for (uint64_t id : wanted) captured.emplace(id, TensorRef());
  std::unordered_map<uint64_t, TensorRef> grads;
  for (size_t i = 0; i < seeds.size(); ++i) {
    DeviceTensor& out = *request.outputs[i];
    if (on_tape(ctx, out)) {
      accumulate_grad(ctx, grads[out.id], *seeds[i], request.create_graph);
    } else {  // a leaf, which is then also an input (or reaches nothing)
      auto slot = captured.find(out.id);
      if (slot != captured.end()) accumulate_grad(ctx, slot->second, *seeds[i], request.create_graph);
    }
  }
  Walk walk;
  walk.create_graph = request.create_graph;
  walk.runs = &runs;
  walk.captured = &captured;
  walk.leads = &leads;
  run_backward(ctx, grads, walk);
  if (!request.retain_graph) free_records(state, runs);
  // Each result is the caller's own tensor on memory of its own: never a
  // grad_outputs tensor passed through (add's gradient is its dy) nor one
  // given for an earlier input, nor a view of either (reshape's gradient is
  // a view of its dy), which writing one would change under the other.
  std::unordered_set<const Storage*> handed;
  for (DeviceTensor* given : request.grad_outputs)
    if (given) handed.insert(given->storage.get());
  std::vector<TensorRef> result;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    DeviceTensor& in = *request.inputs[i];
    TensorRef& slot = captured[in.id];
    if (slot && handed.count(slot->storage.get()) != 0) {
      if (request.create_graph) {
        slot = TensorRef(op_affine(*slot, 1.0f, 0.0f));
      } else {
        TensorRef copy(DeviceTensor::empty(ctx, slot->dtype, slot->shape));
        if (copy->numel() > 0) ctx.backend().copy(copy->data(), slot->data(), copy->nbytes());
        slot = std::move(copy);
      }
    }
    if (slot) {
      handed.insert(slot->storage.get());
      result.push_back(retained(*slot));
    } else if (reached.count(in.id) != 0) {
      // Reached, but every record on the way gave it no gradient: zeros.
      TensorRef zeros(DeviceTensor::empty(ctx, in.dtype, in.shape));
      if (zeros->numel() > 0) ctx.backend().fill(zeros->data(), dtype_size(in.dtype), 0, zeros->numel());
      result.push_back(std::move(zeros));
    } else {
      result.emplace_back();
    }
  }
  return result;
}

void set_requires_grad(DeviceTensor& t, bool requires_grad) {
  if (on_tape(*t.ctx, t))
    fail(AMPX_ERR_INVALID_ARGUMENT, "the tensor was made by a recorded op; only leaves "
                                    "(tensors the program made) can be marked");
  if (requires_grad && !is_floating(t.dtype))
    fail(AMPX_ERR_DTYPE, "'tensor' is ", t.describe(),
         "; only f32, f16 and bf16 tensors have gradients");
  t.requires_grad = requires_grad;
}

void pop_scope(DeviceContext& ctx) {
  AutogradState& state = autograd_state(ctx);
  if (state.scopes.empty()) fail(AMPX_ERR_ORDER, "no scope is open (pushes and pops must pair)");
  // A pass over the tape only when this pop freed a recorded output: an
  // evaluation step's records then go with it at once, while a binding
  // that wraps every op in a scope and keeps the outputs pays nothing per
  // op (the amortised prune still bounds the tape). The one allocation
  // comes before the scope is closed, so running out of memory changes
  // nothing; what follows allocates nothing (prune_tape only frees).
  std::vector<std::weak_ptr<const void>> tokens;
  tokens.reserve(state.scopes.back().size());
  for (const TensorRef& t : state.scopes.back())
    if (t && t->tape_token) tokens.emplace_back(t->tape_token);
  std::vector<TensorRef> owned = std::move(state.scopes.back());
  state.scopes.pop_back();
  owned.clear();
  const bool freed_output = std::any_of(tokens.begin(), tokens.end(),
                                        [](const auto& token) { return token.expired(); });
  if (freed_output)
    prune_tape(ctx);
  else
    prune_tape_if_doubled(ctx);
}

int32_t scope_depth(DeviceContext& ctx) {
  const size_t open = autograd_state(ctx).scopes.size();
  if (open > static_cast<size_t>(INT32_MAX))
    fail(AMPX_ERR_INTERNAL, open, " scopes are open, more than an int32_t counts");
  return static_cast<int32_t>(open);
}

DeviceTensor* deliver(DeviceContext& ctx, TensorRef output) {
  AutogradState& state = autograd_state(ctx);
  DeviceTensor* handle = output.get();
  if (!state.scopes.empty()) {
    state.scopes.back().push_back(std::move(output));
    return handle;
  }
  return output.take();
}

}  // namespace ampx::impl
