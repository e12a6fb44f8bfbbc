// Allocation-failure injection: a training step run with its Nth tensor
// allocation refused, for every N the step makes.
//
// The context gets host allocator hooks (ampx_allocator) that count requests,
// refuse exactly one chosen request, and track every live block. The step is
// the full C loop of a mixed-precision program -- scope, autocast f16 forward
// through linear/relu, batch norm (training: running statistics updated in
// place), dropout, linear and cross-entropy, backward seeded by the scaler,
// unscale, clip, scaler step, update, zero_grad, scope pop -- over F32 and
// F16 parameters with AdamW, so master weights and the fp32 unscale buffers
// of F16 gradients are allocated too. The program reacts to a failure as a
// careful C program would: it retries the call that failed; when backward
// fails (the tape is gone) it drops the forward and runs it again.
//
// What is promised, and checked for every N:
//  - every call returns AMPX_OK or AMPX_ERR_OUT_OF_MEMORY, and exactly one
//    call reports the refused allocation;
//  - a failed op, unscale, clip, scaler step/update or zero_grad changes
//    nothing observable: parameters, masters and moments, step counts,
//    gradients, running statistics, the scaler's state, its per-optimizer
//    state (READY / UNSCALED, probed through the calls it allows) and, for
//    the optimizer and scaler calls, the context's bytes in use;
//  - a failed backward changes no parameter, optimizer or scaler state (the
//    gradients it had accumulated into are zeroed by the program);
//  - once memory is available again the step completes, and training ends
//    bit-identical to a run that never failed -- where the failure was in
//    backward, to a run that also made the discarded forward (that forward
//    drew its dropout mask and updated the running statistics, as it would
//    in any program that repeats a forward);
//  - after everything is released, no block is left live in the hooks.
#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "platform/platform.h"
#include "training_fixture.h"

using namespace ampx_fixture;

namespace {

// Host memory for one context that refuses the request numbered `refuse`
// (counted from 1 over the context's life; 0 refuses nothing).
struct FaultAllocator {
  std::mutex mutex;
  std::unordered_map<void*, size_t> live;
  int64_t requests = 0;
  int64_t refuse = 0;
  int64_t refused = 0;
  int64_t bad_frees = 0;  // frees of unknown blocks or with the wrong size

  static void* alloc(void* user, size_t bytes, size_t alignment) {
    auto& self = *static_cast<FaultAllocator*>(user);
    std::lock_guard<std::mutex> lock(self.mutex);
    if (++self.requests == self.refuse) {
      ++self.refused;
      return nullptr;
    }
    const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* ptr = ampx::impl::platform::aligned_alloc(alignment, rounded);
    if (ptr) self.live.emplace(ptr, bytes);
    return ptr;
  }

  static void release(void* user, void* ptr, size_t bytes) {
    auto& self = *static_cast<FaultAllocator*>(user);
    std::lock_guard<std::mutex> lock(self.mutex);
    auto it = self.live.find(ptr);
    if (it == self.live.end() || it->second != bytes) {
      ++self.bad_frees;
      return;
    }
    self.live.erase(it);
    ampx::impl::platform::aligned_free(ptr);
  }

  int64_t request_count() {
    std::lock_guard<std::mutex> lock(mutex);
    return requests;
  }
};

constexpr int64_t kBatch = 8, kIn = 6, kHidden = 16, kClasses = 4;

std::vector<int64_t> dims(std::initializer_list<int64_t> d) { return d; }

struct Model {
  FaultAllocator memory;
  ampx_context ctx = nullptr;
  ampx_tensor x = nullptr, labels = nullptr;
  ampx_tensor w1 = nullptr, b1 = nullptr, w2 = nullptr, b2 = nullptr;
  ampx_tensor running_mean = nullptr, running_var = nullptr;
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;
  ampx_autocast policy = nullptr;

  Model() {
    ampx_context_options o = ampx_context_options_default();
    o.num_threads = 1;
    o.seed = 7;
    o.allocator = {sizeof(ampx_allocator), &FaultAllocator::alloc, &FaultAllocator::release, &memory};
    REQUIRE_MESSAGE(ampx_context_create(&o, &ctx) == AMPX_OK, last_error());
    Rng rng(11);
    x = make(ctx, AMPX_F32, dims({kBatch, kIn}), rng.vector(kBatch * kIn, -1.0, 1.0));
    std::vector<int64_t> label_values(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) label_values[i] = i % kClasses;
    const int64_t n = kBatch;
    REQUIRE(ampx_tensor_from_host(ctx, AMPX_I64, 1, &n, label_values.data(),
                                  sizeof(int64_t) * kBatch, &labels) == AMPX_OK);
    w1 = make(ctx, AMPX_F32, dims({kHidden, kIn}), rng.vector(kHidden * kIn, -0.4, 0.4), true);
    b1 = make(ctx, AMPX_F32, dims({kHidden}), rng.vector(kHidden, -0.4, 0.4), true);
    w2 = make(ctx, AMPX_F16, dims({kClasses, kHidden}), rng.vector(kClasses * kHidden, -0.25, 0.25),
              true);
    b2 = make(ctx, AMPX_F32, dims({kClasses}), rng.vector(kClasses, -0.25, 0.25), true);
    running_mean = make(ctx, AMPX_F32, dims({kHidden}), std::vector<double>(kHidden, 0.0));
    running_var = make(ctx, AMPX_F32, dims({kHidden}), std::vector<double>(kHidden, 1.0));
    const ampx_tensor params[] = {w1, b1, w2, b2};
    ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
    adam.lr = 1e-2;
    REQUIRE(ampx_optimizer_create_adam(ctx, params, 4, &adam, &opt) == AMPX_OK);
    // A scale small enough that no scaled gradient overflows: every step
    // is taken, so a wrongly skipped or repeated one shows.
    ampx_scaler_options so = AMPX_SCALER_OPTIONS_INIT;
    so.init_scale = 256.0;
    so.growth_interval = 2;
    REQUIRE(ampx_scaler_create(ctx, &so, &scaler) == AMPX_OK);
    REQUIRE(ampx_autocast_create(ctx, nullptr, &policy) == AMPX_OK);
  }

  // Releases everything; the hooks must then hold no block.
  ~Model() {
    ampx_autocast_release(policy);
    ampx_scaler_release(scaler);
    ampx_optimizer_release(opt);
    for (ampx_tensor t : {x, labels, w1, b1, w2, b2, running_mean, running_var})
      ampx_tensor_release(t);
    ampx_context_release(ctx);
    CHECK(memory.live.empty());
    CHECK(memory.bad_frees == 0);
  }

  std::vector<ampx_tensor> params() const { return {w1, b1, w2, b2}; }

  uint64_t bytes_in_use() const {
    ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
    REQUIRE(ampx_memory_stats_get(ctx, &stats) == AMPX_OK);
    return stats.current_bytes;
  }
};

// Everything a call of the step could change that the program can see.
struct State {
  Snapshot optimizer;
  std::vector<std::vector<unsigned char>> grads;
  std::vector<std::vector<unsigned char>> running_stats;
  std::vector<double> scaler;              // ampx_scaler_state fields
  ampx_status found_inf_status = AMPX_OK;  // ORDER unless unscaled/stepped
  int32_t found_inf = -1;
  // ORDER while attached to an enabled scaler with scaled gradients, or
  // while a gradient carries the scale of a backward (part of the
  // gradients' state); the probe clamps to FLT_MAX, which leaves the
  // finite gradients here as they are.
  ampx_status clip_status = AMPX_OK;
  uint64_t bytes = 0;

  bool same_except_grads(const State& o) const {
    return optimizer == o.optimizer && running_stats == o.running_stats && scaler == o.scaler &&
           found_inf_status == o.found_inf_status && found_inf == o.found_inf;
  }
  bool same_except_memory(const State& o) const {
    return same_except_grads(o) && grads == o.grads && clip_status == o.clip_status;
  }
};

State capture(const Model& m) {
  State s;
  s.optimizer = snapshot(m.opt, m.params());
  for (ampx_tensor p : m.params()) {
    ampx_tensor g = nullptr;
    REQUIRE(ampx_tensor_grad(p, &g) == AMPX_OK);
    s.grads.push_back(g ? bytes_of(g) : std::vector<unsigned char>());
  }
  s.running_stats = {bytes_of(m.running_mean), bytes_of(m.running_var)};
  const ampx_scaler_state st = scaler_state_of(m.scaler);
  s.scaler = {st.scale,
              static_cast<double>(st.growth_tracker),
              static_cast<double>(st.hysteresis_left),
              static_cast<double>(st.counters.updates),
              static_cast<double>(st.counters.skipped),
              static_cast<double>(st.counters.backoffs),
              static_cast<double>(st.counters.growths)};
  s.found_inf_status = ampx_scaler_found_inf(m.scaler, m.opt, &s.found_inf);
  s.clip_status = ampx_clip_grad_value(m.opt, FLT_MAX);
  s.bytes = m.bytes_in_use();
  return s;
}

enum class Kind {
  Op,        // atomic, but may leave a cast in the autocast region's cache
  Backward,  // may have accumulated into some gradients
  Exact,     // optimizer and scaler calls: nothing at all changes
};

struct Runner {
  Model& m;
  int failures = 0;  // calls that returned AMPX_ERR_OUT_OF_MEMORY
  bool backward_failed = false;

  // Runs `call` once. A failure must be OUT_OF_MEMORY and leave the state
  // as `kind` promises; returns whether the call succeeded.
  template <class Call>
  bool attempt(const char* what, Kind kind, Call call) {
    const State before = capture(m);
    const ampx_status status = call();
    if (status == AMPX_OK) return true;
    ++failures;
    INFO(what, ": ", last_error());
    REQUIRE(status == AMPX_ERR_OUT_OF_MEMORY);
    const State after = capture(m);
    switch (kind) {
      case Kind::Op:
        CHECK(after.same_except_memory(before));
        break;
      case Kind::Backward:
        CHECK(after.same_except_grads(before));
        break;
      case Kind::Exact:
        CHECK(after.same_except_memory(before));
        CHECK(after.bytes == before.bytes);
        break;
    }
    return false;
  }

  // Retries a call that changes nothing when it fails until it succeeds
  // (one refused allocation: at most one retry).
  template <class Call>
  void retry(const char* what, Kind kind, Call call) {
    for (int tries = 0; !attempt(what, kind, call); ++tries) REQUIRE(tries < 1);
  }

  void check(ampx_status status) { REQUIRE_MESSAGE(status == AMPX_OK, last_error()); }

  // The forward pass, in the open scope and autocast region; returns the
  // loss (owned by the scope).
  ampx_tensor forward() {
    ampx_tensor h = nullptr, n = nullptr, d = nullptr, logits = nullptr, loss = nullptr;
    retry("linear 1", Kind::Op,
          [&] { return ampx_linear(m.x, m.w1, m.b1, AMPX_ACTIVATION_RELU, &h); });
    retry("batch_norm", Kind::Op, [&] {
      return ampx_batch_norm(h, nullptr, nullptr, m.running_mean, m.running_var, 1, 0.1, 1e-5, &n);
    });
    retry("dropout", Kind::Op, [&] { return ampx_dropout(n, 0.25, 1, &d); });
    retry("linear 2", Kind::Op,
          [&] { return ampx_linear(d, m.w2, m.b2, AMPX_ACTIVATION_NONE, &logits); });
    retry("cross_entropy", Kind::Op,
          [&] { return ampx_cross_entropy(logits, m.labels, AMPX_REDUCTION_MEAN, -100, &loss); });
    return loss;
  }

  // One training step. With `discarded_forward`, a forward is made and
  // dropped first, as the program does when backward fails.
  void step(bool discarded_forward) {
    if (discarded_forward) {
      check(ampx_scope_push(m.ctx));
      check(ampx_autocast_enter(m.policy));
      forward();
      check(ampx_autocast_exit(m.policy));
      check(ampx_scope_pop(m.ctx));
    }
    for (int tries = 0;; ++tries) {
      REQUIRE(tries < 2);
      check(ampx_scope_push(m.ctx));
      check(ampx_autocast_enter(m.policy));
      const ampx_tensor loss = forward();
      check(ampx_autocast_exit(m.policy));
      if (attempt("backward", Kind::Backward, [&] { return ampx_backward(loss, m.scaler); })) break;
      backward_failed = true;
      retry("zero_grad", Kind::Exact, [&] { return ampx_optimizer_zero_grad(m.opt); });
      check(ampx_scope_pop(m.ctx));
    }
    retry("unscale", Kind::Exact, [&] { return ampx_scaler_unscale(m.scaler, m.opt); });
    retry("clip", Kind::Exact, [&] {
      ampx_tensor total = nullptr;
      const ampx_status s = ampx_clip_grad_norm(m.opt, 1.0, 2.0, 0, &total);
      ampx_tensor_release(total);
      return s;
    });
    retry("scaler step", Kind::Exact, [&] { return ampx_scaler_step(m.scaler, m.opt); });
    retry("update", Kind::Exact, [&] { return ampx_scaler_update(m.scaler); });
    retry("zero_grad", Kind::Exact, [&] { return ampx_optimizer_zero_grad(m.opt); });
    check(ampx_scope_pop(m.ctx));
  }
};

constexpr int kSteps = 3;

// The state after kSteps steps, the step `discarded_at` (or none: -1) made
// with a discarded forward first.
State reference_run(int discarded_at) {
  Model m;
  Runner r{m};
  for (int s = 0; s < kSteps; ++s) r.step(s == discarded_at);
  REQUIRE(r.failures == 0);
  return capture(m);
}

}  // namespace

TEST_CASE("fault injection: every allocation of a training step fails once, cleanly") {
  // Step 0 allocates what training keeps (gradients, unscale buffers) on
  // top of the per-step work of step 1.
  int64_t step_requests[2] = {};
  {
    Model m;
    Runner r{m};
    for (int s = 0; s < 2; ++s) {
      const int64_t before = m.memory.request_count();
      r.step(false);
      step_requests[s] = m.memory.request_count() - before;
    }
  }
  REQUIRE(step_requests[0] > 0);
  REQUIRE(step_requests[1] > 0);
  const State plain = reference_run(-1);
  const State discarded[2] = {reference_run(0), reference_run(1)};

  int64_t injected = 0;
  for (int failing_step = 0; failing_step < 2; ++failing_step) {
    for (int64_t n = 1; n <= step_requests[failing_step]; ++n) {
      CAPTURE(failing_step);
      CAPTURE(n);
      {
        Model m;
        Runner r{m};
        for (int s = 0; s < kSteps; ++s) {
          if (s == failing_step) {
            m.memory.refuse = m.memory.request_count() + n;
            const int before_failures = r.failures;
            const uint64_t bytes_before = m.bytes_in_use();
            r.step(false);
            CHECK(m.memory.refused == 1);
            CHECK(r.failures == before_failures + 1);
            // The step's own memory is returned whether or not it failed.
            if (failing_step == 1) CHECK(m.bytes_in_use() == bytes_before);
            m.memory.refuse = 0;
          } else {
            r.step(false);
          }
        }
        const State end = capture(m);
        // A failed backward made the program run that step's forward twice.
        const State& want = r.backward_failed ? discarded[failing_step] : plain;
        CHECK(end.same_except_memory(want));
        CHECK(end.bytes == want.bytes);
      }
      ++injected;
    }
  }
  MESSAGE("allocation points injected: ", injected, " (first step ", step_requests[0],
          ", later step ", step_requests[1], ")");
}

// Paths on which memory used to stay allocated for good (or, for the
// optimizer state, a step read buffers that did not exist): each must leave
// the hooks empty once the program has released what it owns.
TEST_CASE("fault injection: release paths leave no memory behind") {
  FaultAllocator memory;
  ampx_context_options o = ampx_context_options_default();
  o.num_threads = 1;
  o.allocator = {sizeof(ampx_allocator), &FaultAllocator::alloc, &FaultAllocator::release, &memory};

  SUBCASE("ops on the tensors of a released context record nothing") {
    ampx_context ctx = nullptr;
    REQUIRE(ampx_context_create(&o, &ctx) == AMPX_OK);
    ampx_tensor w = make(ctx, AMPX_F32, dims({4}), {1, -2, 3, -4}, true);
    ampx_context_release(ctx);
    ampx_tensor y = nullptr;
    REQUIRE(ampx_relu(w, &y) == AMPX_OK);
    int32_t flows = 1;
    REQUIRE(ampx_tensor_requires_grad(y, &flows) == AMPX_OK);
    CHECK(flows == 0);
    ampx_tensor_release(y);
    ampx_tensor_release(w);
  }
  SUBCASE("a policy still entered when its context is released") {
    ampx_context ctx = nullptr;
    ampx_autocast policy = nullptr;
    REQUIRE(ampx_context_create(&o, &ctx) == AMPX_OK);
    REQUIRE(ampx_autocast_create(ctx, nullptr, &policy) == AMPX_OK);
    REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
    ampx_context_release(ctx);  // ends the region
    CHECK(ampx_autocast_enter(policy) == AMPX_ERR_STALE_HANDLE);
    ampx_autocast_release(policy);
  }
  SUBCASE("gradients cannot form a cycle") {
    ampx_context ctx = nullptr;
    REQUIRE(ampx_context_create(&o, &ctx) == AMPX_OK);
    ampx_tensor a = make(ctx, AMPX_F32, dims({2}), {1, 2});
    ampx_tensor b = make(ctx, AMPX_F32, dims({2}), {3, 4});
    ampx_tensor c = make(ctx, AMPX_F32, dims({2}), {5, 6});
    REQUIRE(ampx_tensor_set_grad(a, b) == AMPX_OK);
    REQUIRE(ampx_tensor_set_grad(b, c) == AMPX_OK);
    CHECK(ampx_tensor_set_grad(c, a) == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(ampx_tensor_set_grad(b, a) == AMPX_ERR_INVALID_ARGUMENT);
    for (ampx_tensor t : {a, b, c}) ampx_tensor_release(t);
    ampx_context_release(ctx);
  }
  SUBCASE("a state whose momentum needs other buffers is refused") {
    ampx_context ctx = nullptr;
    REQUIRE(ampx_context_create(&o, &ctx) == AMPX_OK);
    ampx_tensor p = make(ctx, AMPX_F32, dims({3}), {1, 2, 3});
    ampx_optimizer plain = nullptr;
    ampx_sgd_options so = AMPX_SGD_OPTIONS_INIT;
    REQUIRE(ampx_optimizer_create_sgd(ctx, &p, 1, &so, &plain) == AMPX_OK);
    std::vector<unsigned char> state;
    size_t bytes = 0;
    REQUIRE(ampx_optimizer_state_size(plain, &bytes) == AMPX_OK);
    state.resize(bytes);
    REQUIRE(ampx_optimizer_save_state(plain, state.data(), bytes) == AMPX_OK);
    // The same state with momentum 0.9 written into its header (the format's
    // StateHeader: 8 magic bytes, 10 uint32, then momentum as a double) and
    // its FNV-1a checksum recomputed: valid-looking, but SGD without
    // momentum keeps no momentum buffer for the step to use.
    const double momentum = 0.9;
    std::memcpy(state.data() + 8 + 10 * 4, &momentum, sizeof momentum);
    reseal_optimizer_state(state);
    CHECK(ampx_optimizer_load_state(plain, state.data(), bytes) == AMPX_ERR_CORRUPT);
    ampx_tensor g = attach_grad(ctx, p, AMPX_F32);
    write(g, {1, 1, 1});
    CHECK(ampx_optimizer_step(plain) == AMPX_OK);
    ampx_optimizer_release(plain);
    ampx_tensor_release(p);
    ampx_context_release(ctx);
  }
  CHECK(memory.live.empty());
  CHECK(memory.bad_frees == 0);
}
