// Grad-ready hooks through the C API: during ampx_backward each parameter
// is reported once, in backward order, only when its gradient is final (the
// hook copies the gradient to the host; after backward the copy must equal
// the final gradient bit for bit) -- for a 6-layer MLP, with gradient
// accumulation, a tied weight, checkpointed segments (and a weight tied
// across a segment's boundary); ampx_grad_ready for engines with their own
// backward; a failing hook fails backward with its status and message and
// the next step works; what a hook may not do; the hook's release is called
// exactly once; bad arguments.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support.h"
#include "unit/training_fixture.h"

using ampx_fixture::bytes_of;
using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

constexpr int kLayers = 6;
constexpr int64_t kWidth = 8, kBatch = 4;

std::vector<float> pseudo_random(size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (static_cast<float>(seed >> 8) / static_cast<float>(1 << 24) - 0.5f) * scale;
  }
  return v;
}

ampx_tensor param(ampx_context ctx, std::vector<int64_t> shape, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const std::vector<float> v = pseudo_random(static_cast<size_t>(n), seed, 1.0f);
  ampx_tensor t = nullptr;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, static_cast<int32_t>(shape.size()), shape.data(),
                                v.data(), v.size() * 4, &t) == AMPX_OK);
  REQUIRE(ampx_tensor_set_requires_grad(t, 1) == AMPX_OK);
  return t;
}

ampx_tensor grad_of(ampx_tensor t) {
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(t, &g) == AMPX_OK);
  return g;
}

// A 6-layer MLP whose layer l uses weights[w_of[l]] and biases[l]; layers
// [segment_begin, segment_end) run inside one ampx_checkpoint segment.
struct Net {
  std::vector<Tensor> weights, biases;
  std::vector<int> w_of;
  int segment_begin = -1, segment_end = -1;
  int segment_runs = 0;
  Tensor x;

  Net(ampx_context ctx, std::vector<int> weight_of_layer) : weights(), biases(kLayers), w_of(weight_of_layer) {
    int distinct = 0;
    for (int w : w_of) distinct = std::max(distinct, w + 1);
    weights = std::vector<Tensor>(static_cast<size_t>(distinct));
    uint32_t seed = 1;
    for (Tensor& w : weights) w.handle = param(ctx, {kWidth, kWidth}, seed++);
    for (Tensor& b : biases) b.handle = param(ctx, {kWidth}, seed++);
    const std::vector<float> input = pseudo_random(kBatch * kWidth, 99, 2.0f);
    const int64_t shape[] = {kBatch, kWidth};
    REQUIRE(ampx_tensor_from_host(ctx, AMPX_F32, 2, shape, input.data(), input.size() * 4,
                                  x.out()) == AMPX_OK);
  }

  ampx_tensor w(int layer) const { return weights[static_cast<size_t>(w_of[static_cast<size_t>(layer)])]; }
  ampx_tensor b(int layer) const { return biases[static_cast<size_t>(layer)]; }

  ampx_status layer(int l, ampx_tensor h, ampx_tensor* out) const {
    return ampx_linear(h, w(l), b(l), l + 1 < kLayers ? AMPX_ACTIVATION_RELU : AMPX_ACTIVATION_NONE,
                       out);
  }

  static ampx_status segment(void* user_data, const ampx_tensor* inputs, size_t, ampx_tensor* outputs,
                             size_t) {
    Net& net = *static_cast<Net*>(user_data);
    ++net.segment_runs;
    ampx_tensor h = inputs[0];
    for (int l = net.segment_begin; l < net.segment_end; ++l) {
      const ampx_status s = net.layer(l, h, &h);
      if (s != AMPX_OK) return s;
    }
    outputs[0] = h;
    return AMPX_OK;
  }

  // The loss mean(y * y), made inside the caller's scope.
  ampx_tensor forward(ampx_context ctx) {
    ampx_tensor h = x;
    for (int l = 0; l < kLayers; ++l) {
      if (l == segment_begin) {
        ampx_tensor out = nullptr;
        ampx_segment seg = AMPX_SEGMENT_INIT;
        seg.fn = segment;
        seg.user_data = this;
        REQUIRE_MESSAGE(ampx_checkpoint_segment(ctx, &seg, &h, 1, &out, 1) == AMPX_OK, last_error());
        h = out;
        l = segment_end - 1;
        continue;
      }
      REQUIRE_MESSAGE(layer(l, h, &h) == AMPX_OK, last_error());
    }
    ampx_tensor squared = nullptr, loss = nullptr;
    REQUIRE(ampx_mul(h, h, &squared) == AMPX_OK);
    REQUIRE(ampx_mean(squared, &loss) == AMPX_OK);
    return loss;
  }

  std::vector<ampx_tensor> params() const {
    std::vector<ampx_tensor> all;
    for (const Tensor& w : weights) all.push_back(w);
    for (const Tensor& b : biases) all.push_back(b);
    return all;
  }
};

// What a hook saw: the parameters in notification order, a copy of each
// gradient at that moment, and how often the segment had run by then.
struct Log {
  std::vector<ampx_tensor> order;
  std::vector<std::vector<uint8_t>> grads;
  std::vector<int> segment_runs;
  const Net* net = nullptr;
  int fail_at = -1;         // the call (0-based) that fails, if any
  bool fail_with_message = false;
  int calls = 0;
};

ampx_status record_hook(void* user_data, ampx_tensor p) {
  Log& log = *static_cast<Log*>(user_data);
  const int call = log.calls++;
  if (call == log.fail_at) {
    if (log.fail_with_message) {
      char byte = 0;
      ampx_tensor g = nullptr;
      if (ampx_tensor_grad(p, &g) != AMPX_OK) return AMPX_ERR_INTERNAL;
      if (ampx_tensor_to_host(g, &byte, 1) == AMPX_OK)  // fails: the hook's own error message
        return AMPX_ERR_INTERNAL;
    }
    return log.fail_with_message ? AMPX_ERR_IO : AMPX_ERR_DEVICE;
  }
  ampx_tensor g = nullptr;
  if (ampx_tensor_grad(p, &g) != AMPX_OK || !g) return AMPX_ERR_INTERNAL;
  size_t n = 0;
  if (ampx_tensor_nbytes(g, &n) != AMPX_OK) return AMPX_ERR_INTERNAL;
  std::vector<uint8_t> copy(n);
  const ampx_status s = ampx_tensor_to_host(g, copy.data(), n);
  if (s != AMPX_OK) return s;
  log.order.push_back(p);
  log.grads.push_back(std::move(copy));
  log.segment_runs.push_back(log.net ? log.net->segment_runs : 0);
  return AMPX_OK;
}

void install(ampx_context ctx, Log& log) {
  REQUIRE_MESSAGE(ampx_set_grad_ready_hook(ctx, record_hook, &log, nullptr) == AMPX_OK, last_error());
}

void train_step(ampx_context ctx, Net& net) {
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor loss = net.forward(ctx);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
}

// Each notification's copy equals the parameter's gradient now (nothing was
// added after it), and each parameter came once.
void check_final(const Log& log) {
  for (size_t i = 0; i < log.order.size(); ++i) {
    CAPTURE(i);
    CHECK(log.grads[i] == bytes_of(grad_of(log.order[i])));
    for (size_t j = 0; j < i; ++j) CHECK(log.order[j] != log.order[i]);
  }
}

int index_in(const std::vector<ampx_tensor>& order, ampx_tensor t) {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == t) return static_cast<int>(i);
  return -1;
}

}  // namespace

TEST_CASE("grad hooks: a 6-layer MLP reports every weight and bias once, in reverse layer order, "
          "with its final gradient") {
  Ctx ctx;
  Net net(ctx, {0, 1, 2, 3, 4, 5});
  Tensor unused(param(ctx, {3}, 77));  // requires grad, never reaches the loss
  Log log;
  install(ctx, log);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  ampx_tensor side = nullptr;
  REQUIRE(ampx_affine(unused, 2.0, 0.0, &side) == AMPX_OK);
  ampx_tensor loss = net.forward(ctx);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);

  std::vector<ampx_tensor> expected;
  for (int l = kLayers - 1; l >= 0; --l) {
    expected.push_back(net.w(l));
    expected.push_back(net.b(l));
  }
  CHECK(log.order == expected);
  check_final(log);
  CHECK(index_in(log.order, unused) == -1);
  CHECK(grad_of(unused) == nullptr);
}

TEST_CASE("grad hooks: with gradient accumulation every backward reports again") {
  Ctx ctx;
  Net net(ctx, {0, 1, 2, 3, 4, 5});
  Log first;
  install(ctx, first);
  train_step(ctx, net);
  REQUIRE(first.order.size() == 2 * kLayers);
  check_final(first);
  std::vector<std::vector<uint8_t>> after_first;
  for (ampx_tensor p : first.order) after_first.push_back(bytes_of(grad_of(p)));

  Log second;
  install(ctx, second);
  train_step(ctx, net);  // no zero_grad: the gradients accumulate
  CHECK(second.order == first.order);
  check_final(second);
  int changed = 0;
  for (size_t i = 0; i < second.grads.size(); ++i) changed += second.grads[i] != after_first[i];
  CHECK(changed > 0);  // the second report carries the sum, not the first pass's values
}

TEST_CASE("grad hooks: a weight tied across two layers is reported once, after its last use") {
  Ctx ctx;
  Net net(ctx, {0, 1, 2, 3, 1, 4});  // layers 1 and 4 share weights[1]
  Log log;
  install(ctx, log);
  train_step(ctx, net);
  const std::vector<ampx_tensor> expected = {net.w(5), net.b(5), net.b(4), net.w(3), net.b(3),
                                             net.w(2), net.b(2), net.w(1), net.b(1), net.w(0),
                                             net.b(0)};
  CHECK(log.order == expected);
  check_final(log);
}

TEST_CASE("grad hooks: parameters of a checkpointed segment are reported after its recompute") {
  Ctx ctx;
  Net net(ctx, {0, 1, 2, 3, 4, 5});
  net.segment_begin = 2;
  net.segment_end = 4;  // layers 2 and 3
  Log log;
  log.net = &net;
  install(ctx, log);
  train_step(ctx, net);
  CHECK(net.segment_runs == 2);
  // Layers 5 and 4 wait for the segment (it might have used them too), the
  // segment's own parameters follow in its backward order, then the rest.
  const std::vector<ampx_tensor> expected = {net.w(5), net.b(5), net.w(4), net.b(4),
                                             net.w(3), net.b(3), net.w(2), net.b(2),
                                             net.w(1), net.b(1), net.w(0), net.b(0)};
  CHECK(log.order == expected);
  for (int runs : log.segment_runs) CHECK(runs == 2);
  check_final(log);

  // The same gradients as without checkpointing.
  std::vector<std::vector<uint8_t>> checkpointed;
  for (ampx_tensor p : net.params()) checkpointed.push_back(bytes_of(grad_of(p)));
  for (ampx_tensor p : net.params()) REQUIRE(ampx_tensor_set_grad(p, nullptr) == AMPX_OK);
  net.segment_begin = net.segment_end = -1;
  Log plain;
  install(ctx, plain);
  train_step(ctx, net);
  std::vector<std::vector<uint8_t>> direct;
  for (ampx_tensor p : net.params()) direct.push_back(bytes_of(grad_of(p)));
  CHECK(direct == checkpointed);
}

TEST_CASE("grad hooks: weights tied across a segment's boundary wait for both uses") {
  Ctx ctx;
  // weights[0]: layer 0 (before the segment) and layer 2 (inside);
  // weights[3]: layer 3 (inside) and layer 5 (after the segment).
  Net net(ctx, {0, 1, 0, 3, 4, 3});
  net.segment_begin = 2;
  net.segment_end = 4;
  Log log;
  log.net = &net;
  install(ctx, log);
  train_step(ctx, net);
  const std::vector<ampx_tensor> expected = {net.w(5), net.b(5), net.w(4), net.b(4), net.b(3),
                                             net.b(2), net.w(1), net.b(1), net.w(0), net.b(0)};
  CHECK(log.order == expected);
  for (int runs : log.segment_runs) CHECK(runs == 2);
  check_final(log);
}

TEST_CASE("grad hooks: ampx_grad_ready reports an engine's own gradients") {
  Ctx ctx;
  Tensor a(param(ctx, {5}, 1)), b(param(ctx, {2, 3}, 2));
  Tensor ga(param(ctx, {5}, 3)), gb(param(ctx, {6}, 4));
  REQUIRE(ampx_tensor_set_grad(a, ga) == AMPX_OK);
  REQUIRE(ampx_tensor_set_grad(b, gb) == AMPX_OK);
  // No hook yet: nothing to tell, and that is fine.
  CHECK(ampx_grad_ready(a) == AMPX_OK);
  Log log;
  install(ctx, log);
  REQUIRE_MESSAGE(ampx_grad_ready(b) == AMPX_OK, last_error());
  REQUIRE_MESSAGE(ampx_grad_ready(a) == AMPX_OK, last_error());
  CHECK(log.order == std::vector<ampx_tensor>{b, a});
  check_final(log);

  Tensor bare(param(ctx, {2}, 5));
  CHECK_FAILS_WITH(ampx_grad_ready(bare), AMPX_ERR_INVALID_ARGUMENT, "has no gradient");
  CHECK_FAILS_WITH(ampx_grad_ready(nullptr), AMPX_ERR_INVALID_ARGUMENT, "'param' is NULL");
  log.fail_at = log.calls;
  log.fail_with_message = true;
  CHECK_FAILS_WITH(ampx_grad_ready(a), AMPX_ERR_IO, "grad-ready hook");
  CHECK(contains(last_error(), "ampx_grad_ready: "));
  CHECK(contains(last_error(), "ampx_tensor_to_host"));
  CHECK(log.order.size() == 2);
}

TEST_CASE("grad hooks: a failing hook fails backward with its status and message; the next step "
          "works") {
  Ctx ctx;
  Net net(ctx, {0, 1, 2, 3, 4, 5});
  REQUIRE(ampx_tensor_set_name(net.b(4), "block4.bias") == AMPX_OK);

  SUBCASE("the hook's own message is passed on") {
    Log log;
    log.fail_at = 3;  // the fourth report: layer 4's bias
    log.fail_with_message = true;
    install(ctx, log);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor loss = net.forward(ctx);
    CHECK_FAILS_WITH(ampx_backward(loss, nullptr), AMPX_ERR_IO, "grad-ready hook");
    const std::string message = last_error();
    CHECK(contains(message, "ampx_backward: "));
    CHECK(contains(message, "AMPX_ERR_IO"));
    CHECK(contains(message, "'block4.bias'"));
    CHECK(contains(message, "ampx_tensor_to_host: argument 'bytes' is 1"));
    CHECK(ampx_last_status() == AMPX_ERR_IO);
    CHECK(log.order.size() == 3);  // stopped at once
    // The tape was cleared.
    CHECK_FAILS_WITH(ampx_backward(loss, nullptr), AMPX_ERR_INVALID_ARGUMENT, "current tape");
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
  SUBCASE("a hook that leaves no message gets none from before the call") {
    Log log;
    log.fail_at = 0;
    install(ctx, log);
    CHECK(ampx_tensor_set_name(nullptr, "x") == AMPX_ERR_INVALID_ARGUMENT);  // an older error
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor loss = net.forward(ctx);
    CHECK_FAILS_WITH(ampx_backward(loss, nullptr), AMPX_ERR_DEVICE, "AMPX_ERR_DEVICE");
    CHECK(!contains(last_error(), "'tensor' is NULL"));
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }

  // The next step, with a hook that succeeds, reports everything with the
  // complete gradients of that step.
  for (ampx_tensor p : net.params()) REQUIRE(ampx_tensor_set_grad(p, nullptr) == AMPX_OK);
  Log good;
  install(ctx, good);
  CHECK(ampx_tensor_set_name(nullptr, "x") == AMPX_ERR_INVALID_ARGUMENT);
  train_step(ctx, net);
  CHECK(good.order.size() == 2 * kLayers);
  check_final(good);
  // A successful backward leaves the thread's last error as it was.
  CHECK(contains(last_error(), "'tensor' is NULL"));
  CHECK(ampx_last_status() == AMPX_ERR_INVALID_ARGUMENT);
}

namespace {

struct Meddler {
  ampx_context ctx = nullptr;
  ampx_tensor loss = nullptr;
  ampx_status backward = AMPX_OK, grad_ready = AMPX_OK, set_hook = AMPX_OK, op = AMPX_ERR_INTERNAL;
  int32_t op_requires_grad = -1;
  int released = 0;
  int calls = 0;
};

void count_release(void* user_data) { ++static_cast<Meddler*>(user_data)->released; }

ampx_status meddling_hook(void* user_data, ampx_tensor p) {
  Meddler& m = *static_cast<Meddler*>(user_data);
  if (m.calls++ > 0) return AMPX_OK;
  m.backward = ampx_backward(m.loss, nullptr);
  m.grad_ready = ampx_grad_ready(p);
  m.set_hook = ampx_set_grad_ready_hook(m.ctx, meddling_hook, &m, count_release);
  ampx_tensor doubled = nullptr;
  m.op = ampx_affine(p, 2.0, 0.0, &doubled);
  // The program's open scope owns `doubled`, as any op output.
  if (m.op == AMPX_OK && ampx_tensor_requires_grad(doubled, &m.op_requires_grad) != AMPX_OK)
    return AMPX_ERR_INTERNAL;
  return AMPX_OK;
}

}  // namespace

TEST_CASE("grad hooks: a hook cannot start a backward, report, or change hooks; its ops are not "
          "recorded") {
  Ctx ctx;
  Net net(ctx, {0, 1, 2, 3, 4, 5});
  Meddler m;
  m.ctx = ctx;
  REQUIRE(ampx_set_grad_ready_hook(ctx, meddling_hook, &m, nullptr) == AMPX_OK);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  m.loss = net.forward(ctx);
  REQUIRE_MESSAGE(ampx_backward(m.loss, nullptr) == AMPX_OK, last_error());
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  CHECK(m.calls == 2 * kLayers);
  CHECK(m.backward == AMPX_ERR_ORDER);
  CHECK(m.grad_ready == AMPX_ERR_ORDER);
  CHECK(m.set_hook == AMPX_ERR_ORDER);
  CHECK(m.released == 1);  // the refused call's closure, at once
  CHECK(m.op == AMPX_OK);
  CHECK(m.op_requires_grad == 0);
  // Grad mode is back on after the hooks.
  int32_t previous = -1;
  REQUIRE(ampx_set_grad_enabled(ctx, 1, &previous) == AMPX_OK);
  CHECK(previous == 1);
}

namespace {

struct ReleaseCount {
  int released = 0;
};

void release_counter(void* user_data) { ++static_cast<ReleaseCount*>(user_data)->released; }

ampx_status quiet_hook(void*, ampx_tensor) { return AMPX_OK; }

}  // namespace

TEST_CASE("grad hooks: release runs exactly once on replace, remove, context release and failure") {
  ReleaseCount a, b, c, d, e, f;
  {
    ampx_context ctx = ampx_test::test_context();
    REQUIRE(ampx_set_grad_ready_hook(ctx, quiet_hook, &a, release_counter) == AMPX_OK);
    CHECK(a.released == 0);
    REQUIRE(ampx_set_grad_ready_hook(ctx, quiet_hook, &b, release_counter) == AMPX_OK);
    CHECK(a.released == 1);  // replaced
    CHECK(b.released == 0);
    REQUIRE(ampx_set_grad_ready_hook(ctx, nullptr, nullptr, nullptr) == AMPX_OK);
    CHECK(b.released == 1);  // removed
    REQUIRE(ampx_set_grad_ready_hook(ctx, nullptr, &f, release_counter) == AMPX_OK);
    CHECK(f.released == 1);  // nothing to keep for a removal
    REQUIRE(ampx_set_grad_ready_hook(ctx, quiet_hook, &c, release_counter) == AMPX_OK);
    // A tensor keeps the context alive; the hook goes with the program's
    // last reference all the same.
    Tensor t(param(ctx, {2}, 1));
    Tensor g(param(ctx, {2}, 2));
    ampx_context_release(ctx);
    CHECK(c.released == 1);
    // The closed context: refused, and the closure released at once.
    CHECK_FAILS_WITH(ampx_set_grad_ready_hook(ctx, quiet_hook, &d, release_counter),
                     AMPX_ERR_STALE_HANDLE, "already released");
    CHECK(d.released == 1);
    // Reporting after the release tells no one.
    REQUIRE(ampx_tensor_set_grad(t, g) == AMPX_OK);
    CHECK(ampx_grad_ready(t) == AMPX_OK);
  }
  CHECK_FAILS_WITH(ampx_set_grad_ready_hook(nullptr, quiet_hook, &e, release_counter),
                   AMPX_ERR_INVALID_ARGUMENT, "'ctx' is NULL");
  CHECK(e.released == 1);
  CHECK(a.released == 1);
  CHECK(b.released == 1);
  CHECK(c.released == 1);
  // A context destroyed with its hook installed.
  ReleaseCount last;
  {
    Ctx ctx;
    REQUIRE(ampx_set_grad_ready_hook(ctx, quiet_hook, &last, release_counter) == AMPX_OK);
  }
  CHECK(last.released == 1);
}

TEST_CASE("grad hooks: bad arguments") {
  Ctx ctx;
  Tensor t(param(ctx, {2}, 1));
  ampx_tensor released = nullptr;
  {
    released = param(ctx, {2}, 2);
    ampx_tensor_release(released);
  }
  CHECK_FAILS_WITH(ampx_grad_ready(released), AMPX_ERR_STALE_HANDLE, "already released");
  CHECK_FAILS_WITH(ampx_grad_ready(t), AMPX_ERR_INVALID_ARGUMENT, "has no gradient");
  CHECK_FAILS_WITH(ampx_set_grad_ready_hook(reinterpret_cast<ampx_context>(t.handle), quiet_hook,
                                            nullptr, nullptr),
                   AMPX_ERR_STALE_HANDLE, "not an ampx_context");
}
