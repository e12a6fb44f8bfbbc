#include "autograd/tape.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "amp/scaler.h"
#include "core/backend_nn.h"
#include "core/error.h"

namespace ampx::impl {

AutogradState& autograd_state(DeviceContext& ctx) {
  if (!ctx.autograd) ctx.autograd = std::make_unique<AutogradState>();
  return static_cast<AutogradState&>(*ctx.autograd);
}

bool on_tape(DeviceContext& ctx, const DeviceTensor& t) {
  return t.tape_generation != 0 && t.tape_generation == autograd_state(ctx).generation;
}

bool flows_grad(DeviceContext& ctx, const DeviceTensor& t) {
  return t.requires_grad && (t.tape_generation == 0 || on_tape(ctx, t));
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
  // A listener runs inside the walk, which indexes this very tape (a
  // listener that pops a scope must not free records under it).
  if (state.notifying) return;
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
  for (DeviceTensor* out : outputs) {
    if (!out->tape_token) out->tape_token = std::make_shared<char>(0);
    node->output_ids.push_back(out->id);
    node->output_tokens.push_back(out->tape_token);
    out->requires_grad = true;
    out->tape_generation = state.generation;
  }
  for (size_t i = 0; i < node->inputs.size(); ++i)
    if (node->inputs[i] && node->reads_input(i)) node->saves(*node->inputs[i]);
  state.tape.push_back(std::move(node));
}

namespace {

// Adds `grad` into `slot`: takes it when the slot is empty, else sums (into
// the slot's dtype). A node may hand the same tensor to several inputs (add
// passes dy to both), so a shared slot is copied before it is summed into.
void accumulate(DeviceContext& ctx, TensorRef& slot, DeviceTensor& grad) {
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

void clear_tape(AutogradState& state) {
  state.tape.clear();
  state.generation = ++state.last_generation;
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

void accumulate_into_leaf(DeviceContext& ctx, DeviceTensor& leaf, DeviceTensor& grad) {
  NnPrimitives& nn = ctx.backend().require<NnPrimitives>("backward");
  if (!leaf.grad) {
    TensorRef zeros(DeviceTensor::empty(ctx, leaf.dtype, leaf.shape));
    ctx.backend().fill(zeros->data(), dtype_size(leaf.dtype), 0, zeros->numel());
    leaf.grad = zeros.take();
  }
  nn.add_into(leaf.grad->data(), leaf.grad->dtype, grad.data(), grad.dtype, grad.numel());
  note_received(autograd_state(ctx), leaf);
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

void check_saved_memory(AutogradState& state, const DeviceTensor& loss) {
  for_each_running_node(state, {loss.id}, [](size_t, const Node& node) {
    for (const auto& [storage, version] : node.saved_versions)
      if (storage->version() != version)
        fail(AMPX_ERR_ORDER, "a tensor that '", node.name(),
             "' saved for backward (an input, or its output) was written in place after the op "
             "ran (ampx_tensor_copy_from_host/_copy/_fill, an optimizer step or zero_grad, a "
             "state load), so its gradients would mix old and new values; run the forward "
             "again after such writes");
  });
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

}  // namespace

void run_backward(DeviceContext& ctx, std::unordered_map<uint64_t, TensorRef>& grads) {
  AutogradState& state = autograd_state(ctx);
  // Only the outermost walk notifies: a nested one (a checkpoint's
  // recompute) cannot know whether the outer walk reaches its leaves again.
  std::unique_ptr<GradReadyPlan> plan;
  if (state.node_backward_depth == 0 && !state.grad_ready_plan &&
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
  // By index: a node's backward may run a nested tape (checkpointing), which
  // swaps this vector out and back.
  for (size_t n = state.tape.size(); n-- > 0;) {
    Node& node = *state.tape[n];
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
        input_grads = node.backward(ctx, output_grads);
      }
      for (uint64_t id : node.output_ids) grads.erase(id);  // no longer needed
      for (size_t i = 0; i < node.inputs.size() && i < input_grads.size(); ++i) {
        if (!node.inputs[i] || !input_grads[i]) continue;
        DeviceTensor& input = *node.inputs[i];
        if (!flows_grad(ctx, input)) continue;
        if (on_tape(ctx, input))
          accumulate(ctx, grads[input.id], *input_grads[i]);
        else
          accumulate_into_leaf(ctx, input, *input_grads[i]);
      }
    }
    if (plan) notify_due(ctx, *plan, n);
  }
  if (plan) notify_due(ctx, *plan, SIZE_MAX);
}

void backward(DeviceTensor& loss, LossScaler* scaler) {
  DeviceContext& ctx = *loss.ctx;
  // Held for the whole pass: a hook or a segment that releases the
  // program's last context reference would otherwise drop the state this
  // walk reads; the drop then happens when the pass is over.
  struct HandleHeld {
    DeviceContext& ctx;
    bool held;
    ~HandleHeld() {
      if (held) ctx.release_handle();
    }
  } handle_held{ctx, ctx.is_open()};
  if (handle_held.held) ctx.retain_handle();
  AutogradState& state = autograd_state(ctx);
  if (state.in_backward)
    fail(AMPX_ERR_ORDER, "a backward pass is already running on this context (this call came "
                         "from a grad-ready hook or a checkpointed segment's recompute); run "
                         "ampx_backward after it returns");
  if (loss.numel() != 1)
    fail(AMPX_ERR_SHAPE, "'loss' is ", loss.describe(),
         "; backward starts from a one-element loss (reduce it with ampx_sum or ampx_mean)");
  if (!is_floating(loss.dtype)) fail(AMPX_ERR_DTYPE, "'loss' is ", loss.describe());
  if (!on_tape(ctx, loss))
    fail(AMPX_ERR_INVALID_ARGUMENT,
         "'loss' was not made by a recorded op on the current tape (was grad mode off, did no "
         "input require grad, or was backward already called?)");
  if (scaler && &scaler->context() != &ctx)
    fail(AMPX_ERR_DEVICE, "'scaler' belongs to a different context than 'loss'");
  check_saved_memory(state, loss);

  struct ClearOnExit {
    AutogradState& state;
    ~ClearOnExit() {
      clear_tape(state);
      state.in_backward = false;
    }
  } clear_on_exit{state};
  state.in_backward = true;

  Backend& backend = ctx.backend();
  std::unordered_map<uint64_t, TensorRef> grads;
  TensorRef seed(DeviceTensor::empty(ctx, loss.dtype, loss.shape));
  if (scaler)
    backend.convert(seed->data(), loss.dtype, scaler->scale_tensor().data(), DType::F32, 1);
  else
    backend.fill(seed->data(), dtype_size(loss.dtype),
                 loss.dtype == DType::F32 ? 0x3f800000u : loss.dtype == DType::F16 ? 0x3c00u : 0x3f80u, 1);
  grads.emplace(loss.id, std::move(seed));
  try {
    run_backward(ctx, grads);
  } catch (...) {
    notify_backward_end(state, false);
    throw;
  }
  notify_backward_end(state, true);
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
