#include "autograd/tape.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "amp/scaler.h"
#include "core/backend_nn.h"
#include "core/error.h"

namespace ampx {

AutogradState& autograd_state(Context& ctx) {
  if (!ctx.autograd) ctx.autograd = std::make_unique<AutogradState>();
  return static_cast<AutogradState&>(*ctx.autograd);
}

bool on_tape(Context& ctx, const Tensor& t) {
  return t.tape_generation != 0 && t.tape_generation == autograd_state(ctx).generation;
}

bool flows_grad(Context& ctx, const Tensor& t) {
  return t.requires_grad && (t.tape_generation == 0 || on_tape(ctx, t));
}

bool should_record(Context& ctx, const std::vector<Tensor*>& inputs) {
  // Once the program has released the context, nothing can backpropagate
  // (ampx_backward needs the tape that release dropped), and a record would
  // hold its inputs, which hold the context: it would never be destroyed.
  if (!ctx.is_open()) return false;
  if (!autograd_state(ctx).grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && flows_grad(ctx, *t)) return true;
  return false;
}

void prune_tape(Context& ctx) {
  AutogradState& state = autograd_state(ctx);
  for (auto it = state.tape.rbegin(); it != state.tape.rend(); ++it) {
    bool reachable = false;
    for (const auto& token : (*it)->output_tokens) reachable = reachable || !token.expired();
    if (!reachable) it->reset();
  }
  state.tape.erase(std::remove(state.tape.begin(), state.tape.end(), nullptr), state.tape.end());
  state.tape_size_after_prune = state.tape.size();
}

void prune_tape_if_doubled(Context& ctx) {
  AutogradState& state = autograd_state(ctx);
  if (state.tape.size() >= 64 && state.tape.size() >= 2 * state.tape_size_after_prune)
    prune_tape(ctx);
}

void record(Context& ctx, std::unique_ptr<Node> node, const std::vector<Tensor*>& outputs) {
  AutogradState& state = autograd_state(ctx);
  prune_tape_if_doubled(ctx);
  // Room first, so nothing below can fail half-way; grown geometrically
  // (reserving size + 1 would reallocate the whole tape at every record).
  if (state.tape.size() == state.tape.capacity())
    state.tape.reserve(std::max<size_t>(64, 2 * state.tape.capacity()));
  for (Tensor* out : outputs) {
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
void accumulate(Context& ctx, TensorRef& slot, Tensor& grad) {
  if (!slot) {
    grad.retain();
    slot = TensorRef(&grad);
    return;
  }
  if (slot->refs.load(std::memory_order_acquire) > 1) {
    TensorRef own(Tensor::empty(ctx, slot->dtype, slot->shape));
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

void accumulate_into_leaf(Context& ctx, Tensor& leaf, Tensor& grad) {
  NnPrimitives& nn = ctx.backend().require<NnPrimitives>("backward");
  if (!leaf.grad) {
    TensorRef zeros(Tensor::empty(ctx, leaf.dtype, leaf.shape));
    ctx.backend().fill(zeros->data(), dtype_size(leaf.dtype), 0, zeros->numel());
    leaf.grad = zeros.take();
  }
  nn.add_into(leaf.grad->data(), leaf.grad->dtype, grad.data(), grad.dtype, grad.numel());
}

// Refuses, before anything changes, a backward that would read memory the
// program wrote in place after an op recorded it (a new batch copied into
// an input, an optimizer step on parameters the forward used -- the GAN
// mistake of stepping one model between another's forward and backward):
// the gradients would silently mix old and new values. Only the records
// this backward runs are checked: those an output of which leads to loss.
namespace {

void check_saved_memory(AutogradState& state, const Tensor& loss) {
  std::unordered_set<uint64_t> needed{loss.id};
  for (size_t n = state.tape.size(); n-- > 0;) {
    const Node& node = *state.tape[n];
    const bool runs = std::any_of(node.output_ids.begin(), node.output_ids.end(),
                                  [&](uint64_t id) { return needed.count(id) != 0; });
    if (!runs) continue;
    for (const auto& [storage, version] : node.saved_versions)
      if (storage->version() != version)
        fail(AMPX_ERR_ORDER, "a tensor that '", node.name(),
             "' saved for backward (an input, or its output) was written in place after the op "
             "ran (ampx_tensor_copy_from_host/_copy/_fill, an optimizer step or zero_grad, a "
             "state load), so its gradients would mix old and new values; run the forward "
             "again after such writes");
    for (const TensorRef& input : node.inputs)
      if (input) needed.insert(input->id);
  }
}

}  // namespace

void run_backward(Context& ctx, std::unordered_map<uint64_t, TensorRef>& grads) {
  AutogradState& state = autograd_state(ctx);
  // By index: a node's backward may run a nested tape (checkpointing), which
  // swaps this vector out and back.
  for (size_t n = state.tape.size(); n-- > 0;) {
    Node& node = *state.tape[n];
    std::vector<Tensor*> output_grads;
    bool any = false;
    for (uint64_t id : node.output_ids) {
      auto found = grads.find(id);
      output_grads.push_back(found == grads.end() ? nullptr : found->second.get());
      any = any || found != grads.end();
    }
    if (!any) continue;
    std::vector<TensorRef> input_grads = node.backward(ctx, output_grads);
    for (uint64_t id : node.output_ids) grads.erase(id);  // no longer needed
    for (size_t i = 0; i < node.inputs.size() && i < input_grads.size(); ++i) {
      if (!node.inputs[i] || !input_grads[i]) continue;
      Tensor& input = *node.inputs[i];
      if (!flows_grad(ctx, input)) continue;
      if (on_tape(ctx, input))
        accumulate(ctx, grads[input.id], *input_grads[i]);
      else
        accumulate_into_leaf(ctx, input, *input_grads[i]);
    }
  }
}

void backward(Tensor& loss, Scaler* scaler) {
  Context& ctx = *loss.ctx;
  AutogradState& state = autograd_state(ctx);
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
    ~ClearOnExit() { clear_tape(state); }
  } clear_on_exit{state};

  Backend& backend = ctx.backend();
  std::unordered_map<uint64_t, TensorRef> grads;
  TensorRef seed(Tensor::empty(ctx, loss.dtype, loss.shape));
  if (scaler)
    backend.convert(seed->data(), loss.dtype, scaler->scale_tensor().data(), DType::F32, 1);
  else
    backend.fill(seed->data(), dtype_size(loss.dtype),
                 loss.dtype == DType::F32 ? 0x3f800000u : loss.dtype == DType::F16 ? 0x3c00u : 0x3f80u, 1);
  grads.emplace(loss.id, std::move(seed));
  run_backward(ctx, grads);
}

Tensor* deliver(Context& ctx, TensorRef output) {
  AutogradState& state = autograd_state(ctx);
  Tensor* handle = output.get();
  if (!state.scopes.empty()) {
    state.scopes.back().push_back(std::move(output));
    return handle;
  }
  return output.take();
}

}  // namespace ampx
