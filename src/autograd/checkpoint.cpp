#include "autograd/checkpoint.h"

#include <string>
#include <utility>

#include "autocast/autocast.h"
#include "autograd/tape.h"
#include "core/error.h"
#include "onnx/emitter.h"

namespace ampx::impl {
namespace {

// Calls the program's segment and collects its outputs (op outputs, which
// the innermost scope -- opened by the caller -- owns), retained.
std::vector<TensorRef> call_segment(DeviceContext& ctx, ampx_segment_fn fn, void* user_data,
                                    const std::vector<DeviceTensor*>& inputs, size_t output_count) {
  std::vector<ampx_tensor> in;
  for (DeviceTensor* t : inputs) in.push_back(reinterpret_cast<ampx_tensor>(t));
  std::vector<ampx_tensor> out(output_count, nullptr);
  call_status_callback("the checkpointed segment",
                       [&] { return fn(user_data, in.data(), in.size(), out.data(), out.size()); });
  std::vector<TensorRef> result;
  for (size_t i = 0; i < out.size(); ++i) {
    auto* t = reinterpret_cast<DeviceTensor*>(out[i]);
    if (!t || t->magic != DeviceTensor::kLiveMagic)
      fail(AMPX_ERR_INVALID_ARGUMENT, "the checkpointed segment left outputs[", i,
           "] without a tensor");
    if (t->ctx != &ctx)
      fail(AMPX_ERR_DEVICE, "the segment's outputs[", i, "] belongs to another context");
    result.push_back(retained(*t));
  }
  return result;
}

// Runs `body` on a fresh tape and scope with recording set to `record`,
// then puts the program's tape, scope stack and grad mode back, also when
// body throws.
template <class Body>
void on_nested_tape(DeviceContext& ctx, bool record, Body&& body) {
  AutogradState& state = autograd_state(ctx);
  std::vector<std::unique_ptr<Node>> outer_tape;
  std::swap(outer_tape, state.tape);
  const uint64_t outer_generation = state.generation;
  const size_t outer_pruned = state.tape_size_after_prune;
  const bool outer_enabled = state.grad_enabled;
  state.generation = ++state.last_generation;
  state.tape_size_after_prune = 0;
  state.grad_enabled = record;
  state.scopes.emplace_back();
  struct Restore {
    AutogradState& state;
    std::vector<std::unique_ptr<Node>>& outer_tape;
    uint64_t generation;
    size_t pruned;
    bool enabled;
    ~Restore() {
      state.scopes.pop_back();
      state.tape.clear();
      std::swap(outer_tape, state.tape);
      state.generation = generation;
      state.tape_size_after_prune = pruned;
      state.grad_enabled = enabled;
    }
  } restore{state, outer_tape, outer_generation, outer_pruned, outer_enabled};
  body();
}

// Puts a saved stack of autocast regions in place of the context's own for
// its lifetime, with an empty cast cache, so that a recompute casts as the
// first run did although backward usually runs after the region closed.
class AutocastRegionsSwap {
 public:
  AutocastRegionsSwap(DeviceContext& ctx, const std::vector<PrecisionPolicy*>& regions)
      : state_(autocast_state(ctx)) {
    std::vector<PrecisionPolicy*> stack;
    stack.reserve(regions.size());
    for (PrecisionPolicy* policy : regions) {
      policy->refs.fetch_add(1, std::memory_order_relaxed);
      ++policy->entered;
      stack.push_back(policy);
    }
    std::swap(stack, state_.stack);
    outer_stack_ = std::move(stack);
    std::swap(outer_cache_, state_.cache);
  }
  ~AutocastRegionsSwap() {
    for (PrecisionPolicy* policy : state_.stack) {
      --policy->entered;
      policy->release();
    }
    state_.stack = std::move(outer_stack_);
    state_.cache = std::move(outer_cache_);
  }
  AutocastRegionsSwap(const AutocastRegionsSwap&) = delete;
  AutocastRegionsSwap& operator=(const AutocastRegionsSwap&) = delete;

 private:
  AutocastState& state_;
  std::vector<PrecisionPolicy*> outer_stack_;
  CastCache outer_cache_;
};

class CheckpointNode final : public Node {
 public:
  explicit CheckpointNode(Segment&& segment) : segment(std::move(segment)) {}

  Segment segment;  // its release hook runs when the record is destroyed
  size_t output_count = 0;
  uint64_t random_offset = 0;  // where the first run's random numbers started
  std::vector<PrecisionPolicy*> autocast_regions;  // open at the first run (retained)

  ~CheckpointNode() override {
    for (PrecisionPolicy* policy : autocast_regions) policy->release();
  }

  const char* name() const override { return "checkpoint"; }
  // The segment's recomputed ops: it runs again on a nested tape with
  // recording on (from copies of the inputs that require grad, as backward
  // runs it), and the records that make its outputs are emitted in place.
  void onnx(onnx::Emitter& e) const override {
    if (inputs.empty()) e.unsupported("a segment without inputs");
    DeviceContext& ctx = *inputs[0]->ctx;
    on_nested_tape(ctx, true, [&] {
      std::vector<TensorRef> copies;
      std::vector<DeviceTensor*> segment_inputs;
      for (size_t i = 0; i < inputs.size(); ++i) {
        TensorRef copy(DeviceTensor::empty(ctx, inputs[i]->dtype, inputs[i]->shape));
        ctx.backend().copy(copy->data(), inputs[i]->data(), inputs[i]->nbytes());
        if (is_floating(copy->dtype)) copy->requires_grad = true;
        e.bind(*copy, e.input(i));
        segment_inputs.push_back(copy.get());
        copies.push_back(std::move(copy));
      }
      const uint64_t resume_offset = ctx.random_offset();
      ctx.set_random_offset(random_offset);
      std::vector<TensorRef> outputs;
      try {
        const AutocastRegionsSwap regions(ctx, autocast_regions);
        outputs = call_segment(ctx, segment.fn, segment.user_data, segment_inputs, output_count);
      } catch (...) {
        ctx.set_random_offset(resume_offset);
        throw;
      }
      ctx.set_random_offset(resume_offset);
      std::vector<const DeviceTensor*> results;
      for (const TensorRef& out : outputs) results.push_back(out.get());
      onnx::emit_recorded(e.graph(), autograd_state(ctx).tape, results);
      for (size_t i = 0; i < outputs.size(); ++i) e.output(i, e.value_of(*outputs[i]));
    });
  }
  // The recompute accumulates into the parameters the segment reads
  // through user_data, which are not among this record's inputs.
  bool runs_nested_backward() const override { return true; }

  std::vector<TensorRef> backward(DeviceContext& ctx,
                                  const std::vector<DeviceTensor*>& output_grads) override {
    std::vector<TensorRef> input_grads(inputs.size());
    on_nested_tape(ctx, true, [&] {
      // Inputs that carry gradients are replaced by leaf copies, whose
      // gradients the nested backward fills; parameters the segment uses
      // directly receive theirs as in any backward.
      std::vector<TensorRef> detached;
      std::vector<DeviceTensor*> segment_inputs;
      for (TensorRef& in : inputs) {
        if (in && in->requires_grad) {
          TensorRef copy(DeviceTensor::empty(ctx, in->dtype, in->shape));
          ctx.backend().copy(copy->data(), in->data(), in->nbytes());
          copy->requires_grad = true;
          segment_inputs.push_back(copy.get());
          detached.push_back(std::move(copy));
        } else {
          segment_inputs.push_back(in.get());
          detached.emplace_back();
        }
      }
      // The recompute must draw the first run's random numbers (dropout
      // masks), then the stream continues where it was.
      const uint64_t resume_offset = ctx.random_offset();
      ctx.set_random_offset(random_offset);
      std::vector<TensorRef> outputs;
      try {
        const AutocastRegionsSwap regions(ctx, autocast_regions);
        outputs = call_segment(ctx, segment.fn, segment.user_data, segment_inputs, output_count);
      } catch (...) {
        ctx.set_random_offset(resume_offset);
        throw;
      }
      ctx.set_random_offset(resume_offset);
      std::unordered_map<uint64_t, TensorRef> grads;
      for (size_t i = 0; i < outputs.size(); ++i) {
        DeviceTensor& out = *outputs[i];
        if (!output_grads[i]) continue;
        if (on_tape(ctx, out)) {
          grads[out.id] = retained(*output_grads[i]);
        } else if (flows_grad(ctx, out)) {
          // The segment returned a leaf itself (an input's copy, a parameter).
          accumulate_into_leaf(ctx, out, *output_grads[i]);
        }
      }
      run_backward(ctx, grads);
      for (size_t i = 0; i < detached.size(); ++i) {
        if (!detached[i] || !detached[i]->grad) continue;
        input_grads[i] = retained(*detached[i]->grad);
      }
    });
    return input_grads;
  }
};

}  // namespace

std::vector<TensorRef> checkpoint(DeviceContext& ctx, Segment segment,
                                  const std::vector<DeviceTensor*>& inputs, size_t output_count) {
  ampx_segment_fn fn = segment.fn;
  void* user_data = segment.user_data;
  if (output_count == 0) fail(AMPX_ERR_INVALID_ARGUMENT, "a segment needs at least one output");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]->ctx != &ctx)
      fail(AMPX_ERR_DEVICE, "inputs[", i, "] belongs to a different context");
  const bool recording = autograd_state(ctx).grad_enabled;
  const uint64_t random_offset = ctx.random_offset();
  std::vector<TensorRef> outputs;
  on_nested_tape(ctx, false, [&] {
    outputs = call_segment(ctx, fn, user_data, inputs, output_count);
  });
  if (!recording) return outputs;
  // Recorded whenever grad mode is on: the segment may use parameters that
  // require grad without taking them as inputs.
  auto node = std::make_unique<CheckpointNode>(std::move(segment));
  for (DeviceTensor* t : inputs) {
    node->inputs.push_back(retained(*t));
  }
  node->output_count = output_count;
  node->random_offset = random_offset;
  if (ctx.autocast) {
    for (PrecisionPolicy* policy : autocast_state(ctx).stack) {
      policy->refs.fetch_add(1, std::memory_order_relaxed);
      node->autocast_regions.push_back(policy);
    }
  }
  std::vector<DeviceTensor*> raw;
  for (TensorRef& t : outputs) {
    // An output the segment did not make (one of its inputs, a parameter)
    // must not become this node's output: it gets a copy that does.
    bool made_here = !t->requires_grad && t->tape_generation == 0;
    for (const DeviceTensor* in : inputs) made_here = made_here && in != t.get();
    if (!made_here) {
      TensorRef copy(DeviceTensor::empty(ctx, t->dtype, t->shape));
      ctx.backend().copy(copy->data(), t->data(), t->nbytes());
      t = std::move(copy);
    }
    raw.push_back(t.get());
  }
  record(ctx, std::move(node), raw);
  return outputs;
}

}  // namespace ampx::impl
