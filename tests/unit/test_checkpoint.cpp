// Gradient checkpointing: the same gradients as running the segments
// directly (bit for bit: the same ops run on the same values), less memory
// held between the passes, and clear errors from bad segments.
#include <cstddef>
#include <cstring>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::make;
using ampx_fixture::values_of;
using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

// The cases below before "checkpoint_segment" exercise the deprecated
// ampx_checkpoint on purpose: it must keep working until it is removed.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

// A residual MLP block, y = x + gelu(x W1^T + b1) W2^T, whose parameters the
// segment reads from user_data.
struct Block {
  Tensor w1, b1, w2;
};

ampx_status block_segment(void* user_data, const ampx_tensor* inputs, size_t, ampx_tensor* outputs,
                          size_t) {
  const Block& b = *static_cast<const Block*>(user_data);
  ampx_tensor hidden = nullptr, projected = nullptr;
  ampx_status s = ampx_linear(inputs[0], b.w1, b.b1, AMPX_ACTIVATION_GELU, &hidden);
  if (s == AMPX_OK) s = ampx_linear(hidden, b.w2, nullptr, AMPX_ACTIVATION_NONE, &projected);
  if (s == AMPX_OK) s = ampx_add(inputs[0], projected, &outputs[0]);
  return s;
}

std::vector<double> random_values(size_t n, uint32_t seed, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = ((seed >> 8) / double(1 << 24) - 0.5) * scale;
  }
  return v;
}

struct Model {
  static constexpr int64_t kWidth = 64, kHidden = 256, kBatch = 32, kBlocks = 4;
  std::vector<Block> blocks;
  Tensor x;

  explicit Model(ampx_context ctx) : blocks(kBlocks) {
    uint32_t seed = 1;
    for (Block& b : blocks) {
      *b.w1.out() = make(ctx, AMPX_F32, {kHidden, kWidth}, random_values(kHidden * kWidth, seed++, 0.2), true);
      *b.b1.out() = make(ctx, AMPX_F32, {kHidden}, random_values(kHidden, seed++, 0.2), true);
      *b.w2.out() = make(ctx, AMPX_F32, {kWidth, kHidden}, random_values(kWidth * kHidden, seed++, 0.1), true);
    }
    *x.out() = make(ctx, AMPX_F32, {kBatch, kWidth}, random_values(kBatch * kWidth, 99, 2.0));
  }

  // Forward (under `policy` when given) + backward after the region, as
  // torch programs do, inside a scope; returns the peak bytes reached.
  uint64_t train_step(ampx_context ctx, bool checkpointed, ampx_autocast policy = nullptr) {
    REQUIRE(ampx_memory_reset_peak(ctx) == AMPX_OK);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    if (policy) REQUIRE(ampx_autocast_enter(policy) == AMPX_OK);
    ampx_tensor h = x;
    for (Block& b : blocks) {
      ampx_tensor out = nullptr;
      if (checkpointed)
        REQUIRE_MESSAGE(ampx_checkpoint(ctx, block_segment, &b, &h, 1, &out, 1) == AMPX_OK, last_error());
      else
        REQUIRE(block_segment(&b, &h, 1, &out, 1) == AMPX_OK);
      h = out;
    }
    ampx_tensor loss = nullptr;
    REQUIRE(ampx_mean(h, &loss) == AMPX_OK);
    if (policy) REQUIRE(ampx_autocast_exit(policy) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
    ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
    REQUIRE(ampx_memory_stats_get(ctx, &stats) == AMPX_OK);
    return stats.peak_bytes;
  }

  std::vector<std::vector<double>> grads() const {
    std::vector<std::vector<double>> all;
    for (const Block& b : blocks)
      for (ampx_tensor p : {b.w1.handle, b.b1.handle, b.w2.handle}) {
        ampx_tensor g = nullptr;
        REQUIRE(ampx_tensor_grad(p, &g) == AMPX_OK);
        REQUIRE(g != nullptr);
        all.push_back(values_of(g));
      }
    return all;
  }
};

}  // namespace

TEST_CASE("checkpoint: gradients equal the direct run's, bit for bit, with a lower peak") {
  OPS_REQUIRE_CPU();
  Ctx direct_ctx, checkpoint_ctx;
  Model direct(direct_ctx), checkpointed(checkpoint_ctx);
  const uint64_t direct_peak = direct.train_step(direct_ctx, false);
  const uint64_t checkpoint_peak = checkpointed.train_step(checkpoint_ctx, true);
  CHECK(direct.grads() == checkpointed.grads());
  // Direct: every block keeps its [32, 256] pre-activation and activation
  // for backward; checkpointed: only block inputs/outputs stay, and one
  // block's activations exist at a time during the recompute.
  MESSAGE("peak bytes: direct " << direct_peak << ", checkpointed " << checkpoint_peak);
  CHECK(checkpoint_peak < direct_peak);
}

TEST_CASE("checkpoint: the recompute runs under the autocast regions of the first run") {
  // backward comes after the region closed; a recompute without autocast
  // would compute in fp32 and mix dtypes with the f16/bf16 gradients.
  OPS_REQUIRE_CPU();
  for (ampx_dtype dtype : {AMPX_F16, AMPX_BF16}) {
    CAPTURE(dtype);
    Ctx direct_ctx, checkpoint_ctx;
    Model direct(direct_ctx), checkpointed(checkpoint_ctx);
    ampx_autocast_options options = ampx_autocast_options_default();
    options.dtype = dtype;
    ampx_autocast direct_policy = nullptr, checkpoint_policy = nullptr;
    REQUIRE(ampx_autocast_create(direct_ctx, &options, &direct_policy) == AMPX_OK);
    REQUIRE(ampx_autocast_create(checkpoint_ctx, &options, &checkpoint_policy) == AMPX_OK);
    direct.train_step(direct_ctx, false, direct_policy);
    checkpointed.train_step(checkpoint_ctx, true, checkpoint_policy);
    CHECK(direct.grads() == checkpointed.grads());
    ampx_tensor g = nullptr;
    ampx_dtype grad_dtype = AMPX_I32;
    REQUIRE(ampx_tensor_grad(checkpointed.blocks[0].w1, &g) == AMPX_OK);
    REQUIRE(ampx_tensor_dtype(g, &grad_dtype) == AMPX_OK);
    CHECK(grad_dtype == AMPX_F32);
    ampx_autocast_release(direct_policy);
    ampx_autocast_release(checkpoint_policy);
  }
}

TEST_CASE("checkpoint: a second step accumulates like the direct run, and nothing leaks") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Model m(ctx);
  m.train_step(ctx, true);
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &before) == AMPX_OK);
  const std::vector<std::vector<double>> once = m.grads();
  m.train_step(ctx, true);
  const std::vector<std::vector<double>> twice = m.grads();
  for (size_t i = 0; i < once.size(); ++i)
    for (size_t j = 0; j < once[i].size(); ++j) CHECK(twice[i][j] == doctest::Approx(2 * once[i][j]).epsilon(1e-6));
  ampx_memory_stats after = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &after) == AMPX_OK);
  CHECK(after.current_bytes == before.current_bytes);
}

namespace {

ampx_status failing_segment(void*, const ampx_tensor* inputs, size_t, ampx_tensor* outputs, size_t) {
  // A shape error made on purpose: its status and message must come back.
  return ampx_matmul(inputs[0], inputs[0], &outputs[0]);
}

ampx_status silent_segment(void*, const ampx_tensor*, size_t, ampx_tensor*, size_t) { return AMPX_OK; }

ampx_status identity_segment(void*, const ampx_tensor* inputs, size_t, ampx_tensor* outputs, size_t) {
  outputs[0] = inputs[0];
  return AMPX_OK;
}

}  // namespace

TEST_CASE("checkpoint: bad segments are reported, and an identity segment passes gradients") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {2, 3}, {1, 2, 3, 4, 5, 6}, true));
  ampx_tensor out = nullptr;
  ampx_tensor in = x;
  CHECK_FAILS_WITH(ampx_checkpoint(ctx, nullptr, nullptr, &in, 1, &out, 1), AMPX_ERR_INVALID_ARGUMENT, "fn");
  CHECK_FAILS_WITH(ampx_checkpoint(ctx, identity_segment, nullptr, &in, 1, &out, 0),
                   AMPX_ERR_INVALID_ARGUMENT, "output");
  CHECK_FAILS_WITH(ampx_checkpoint(ctx, failing_segment, nullptr, &in, 1, &out, 1), AMPX_ERR_SHAPE,
                   "segment");
  CHECK(contains(last_error(), "matmul"));
  CHECK_FAILS_WITH(ampx_checkpoint(ctx, silent_segment, nullptr, &in, 1, &out, 1),
                   AMPX_ERR_INVALID_ARGUMENT, "outputs[0]");
  CHECK(out == nullptr);

  // The identity's output is a copy owned by the checkpoint, so x itself
  // stays a leaf, and the gradient of sum(out) reaches x as ones.
  REQUIRE(ampx_checkpoint(ctx, identity_segment, nullptr, &in, 1, &out, 1) == AMPX_OK);
  Tensor owned(out);
  CHECK(out != in);
  Tensor loss;
  REQUIRE(ampx_sum(out, loss.out()) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(x, &g) == AMPX_OK);
  REQUIRE(g != nullptr);
  CHECK(values_of(g) == std::vector<double>(6, 1.0));
}

namespace {

// Dropout inside a segment: the recompute must draw the same mask.
ampx_status dropout_segment(void* user_data, const ampx_tensor* inputs, size_t, ampx_tensor* outputs,
                            size_t) {
  const Block& b = *static_cast<const Block*>(user_data);
  ampx_tensor hidden = nullptr;
  ampx_status s = ampx_linear(inputs[0], b.w1, b.b1, AMPX_ACTIVATION_RELU, &hidden);
  if (s == AMPX_OK) s = ampx_dropout(hidden, 0.5, 1, &outputs[0]);
  return s;
}

std::vector<double> dropout_grads(bool checkpointed) {
  ampx_context_options options = ampx_context_options_default();
  options.device_type = ampx_test::test_device();
  options.seed = 1234;
  ampx_context raw = nullptr;
  REQUIRE(ampx_context_create(&options, &raw) == AMPX_OK);
  Block b;
  *b.w1.out() = make(raw, AMPX_F32, {16, 8}, random_values(128, 3, 0.5), true);
  *b.b1.out() = make(raw, AMPX_F32, {16}, random_values(16, 4, 0.5), true);
  Tensor x(make(raw, AMPX_F32, {4, 8}, random_values(32, 5, 1.0)));
  ampx_tensor in = x, out = nullptr, loss = nullptr;
  REQUIRE(ampx_scope_push(raw) == AMPX_OK);
  if (checkpointed)
    REQUIRE_MESSAGE(ampx_checkpoint(raw, dropout_segment, &b, &in, 1, &out, 1) == AMPX_OK, last_error());
  else
    REQUIRE(dropout_segment(&b, &in, 1, &out, 1) == AMPX_OK);
  REQUIRE(ampx_sum(out, &loss) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
  REQUIRE(ampx_scope_pop(raw) == AMPX_OK);
  ampx_tensor g = nullptr;
  REQUIRE(ampx_tensor_grad(b.w1, &g) == AMPX_OK);
  REQUIRE(g != nullptr);
  std::vector<double> values = values_of(g);
  // The tensors (released after this) keep the context alive until then.
  ampx_context_release(raw);
  return values;
}

}  // namespace

TEST_CASE("checkpoint: dropout inside a segment recomputes with the same mask") {
  const std::vector<double> direct = dropout_grads(false);
  const std::vector<double> checkpointed = dropout_grads(true);
  CHECK(direct == checkpointed);
  // The mask dropped something: some gradient rows are zero, some not.
  size_t zeros = 0;
  for (double v : direct) zeros += v == 0.0;
  CHECK(zeros > 0);
  CHECK(zeros < direct.size());
}

// ---- ampx_checkpoint_segment: the release hook and callback messages ------------------

namespace {

struct Counted {
  int runs = 0;
  int releases = 0;
};

ampx_status counted_tanh(void* user_data, const ampx_tensor* inputs, size_t, ampx_tensor* outputs,
                         size_t) {
  ++static_cast<Counted*>(user_data)->runs;
  return ampx_tanh(inputs[0], &outputs[0]);
}

void counted_release(void* user_data) { ++static_cast<Counted*>(user_data)->releases; }

ampx_segment counted_segment(Counted& counted, ampx_segment_fn fn = counted_tanh) {
  ampx_segment segment = AMPX_SEGMENT_INIT;
  segment.fn = fn;
  segment.user_data = &counted;
  segment.release = counted_release;
  return segment;
}

ampx_status io_failure_segment(void*, const ampx_tensor*, size_t, ampx_tensor*, size_t) {
  return ampx_set_error(AMPX_ERR_IO, "batch file missing");
}

ampx_status wordless_failure_segment(void*, const ampx_tensor*, size_t, ampx_tensor*, size_t) {
  return AMPX_ERR_CORRUPT;
}

}  // namespace

TEST_CASE("checkpoint_segment: release runs exactly once on every path") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {2, 3}, {1, 2, 3, 4, 5, 6}, true));
  ampx_tensor in = x;

  SUBCASE("backward ran the record") {
    Counted c;
    const ampx_segment segment = counted_segment(c);
    ampx_tensor out = nullptr;
    REQUIRE(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 1) == AMPX_OK);
    Tensor owned(out);
    CHECK(c.runs == 1);
    CHECK(c.releases == 0);  // the record still needs the data
    Tensor loss;
    REQUIRE(ampx_sum(out, loss.out()) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    CHECK(c.runs == 2);
    CHECK(c.releases == 1);
  }
  SUBCASE("the record was pruned without backward") {
    Counted c;
    const ampx_segment segment = counted_segment(c);
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor out = nullptr;
    REQUIRE(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 1) == AMPX_OK);
    CHECK(c.releases == 0);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);  // frees the output: the record goes
    CHECK(c.runs == 1);
    CHECK(c.releases == 1);
  }
  SUBCASE("grad mode off: nothing recorded, released before returning") {
    Counted c;
    const ampx_segment segment = counted_segment(c);
    REQUIRE(ampx_set_grad_enabled(ctx, 0, nullptr) == AMPX_OK);
    ampx_tensor out = nullptr;
    REQUIRE(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 1) == AMPX_OK);
    Tensor owned(out);
    CHECK(c.runs == 1);
    CHECK(c.releases == 1);
    REQUIRE(ampx_set_grad_enabled(ctx, 1, nullptr) == AMPX_OK);
  }
  SUBCASE("failed calls release before returning and change nothing") {
    Counted c;
    ampx_tensor out = nullptr;
    ampx_segment segment = counted_segment(c);
    CHECK_FAILS_WITH(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 0),
                     AMPX_ERR_INVALID_ARGUMENT, "output");
    CHECK(c.releases == 1);
    CHECK_FAILS_WITH(ampx_checkpoint_segment(nullptr, &segment, &in, 1, &out, 1),
                     AMPX_ERR_INVALID_ARGUMENT, "ctx");
    CHECK(c.releases == 2);
    CHECK_FAILS_WITH(ampx_checkpoint_segment(ctx, &segment, &in, 1, nullptr, 1),
                     AMPX_ERR_INVALID_ARGUMENT, "outputs");
    CHECK(c.releases == 3);
    segment.fn = nullptr;
    CHECK_FAILS_WITH(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 1),
                     AMPX_ERR_INVALID_ARGUMENT, "segment->fn");
    CHECK(c.releases == 4);
    segment = counted_segment(c, io_failure_segment);
    CHECK_FAILS_WITH(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 1), AMPX_ERR_IO,
                     "batch file missing");
    CHECK(c.releases == 5);
    CHECK(c.runs == 0);
    CHECK(out == nullptr);
    // A struct ampx cannot read: no release (it cannot know the hook).
    segment = counted_segment(c);
    segment.struct_size = 4;
    CHECK_FAILS_WITH(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 1),
                     AMPX_ERR_INVALID_ARGUMENT, "struct_size");
    CHECK_FAILS_WITH(ampx_checkpoint_segment(ctx, nullptr, &in, 1, &out, 1),
                     AMPX_ERR_INVALID_ARGUMENT, "segment");
    CHECK(c.releases == 5);
  }
  SUBCASE("an older, shorter ampx_segment reads release as NULL") {
    Counted c;
    ampx_segment segment = counted_segment(c);
    segment.struct_size = offsetof(ampx_segment, release);
    ampx_tensor out = nullptr;
    REQUIRE(ampx_set_grad_enabled(ctx, 0, nullptr) == AMPX_OK);
    REQUIRE(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 1) == AMPX_OK);
    Tensor owned(out);
    CHECK(c.runs == 1);
    CHECK(c.releases == 0);
    REQUIRE(ampx_set_grad_enabled(ctx, 1, nullptr) == AMPX_OK);
  }
}

TEST_CASE("checkpoint_segment: a pending record is released with the context") {
  OPS_REQUIRE_CPU();
  Counted c;
  const ampx_segment segment = counted_segment(c);
  ampx_context raw = nullptr;
  REQUIRE(ampx_context_create(nullptr, &raw) == AMPX_OK);
  ampx_tensor out = nullptr;
  {
    Tensor x(make(raw, AMPX_F32, {3}, {1, 2, 3}, true));
    ampx_tensor in = x;
    REQUIRE(ampx_checkpoint_segment(raw, &segment, &in, 1, &out, 1) == AMPX_OK);
  }
  CHECK(c.releases == 0);
  ampx_context_release(raw);  // the program's last reference: the tape goes
  CHECK(c.releases == 1);
  ampx_tensor_release(out);
  CHECK(c.releases == 1);
  CHECK(c.runs == 1);
}

TEST_CASE("checkpoint_segment: the message the caller sees is the segment's own") {
  OPS_REQUIRE_CPU();
  Ctx ctx;
  Tensor x(make(ctx, AMPX_F32, {2}, {1, 2}, true));
  ampx_tensor in = x, out = nullptr;
  ampx_segment segment = AMPX_SEGMENT_INIT;
  segment.fn = io_failure_segment;
  CHECK_FAILS_WITH(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 1), AMPX_ERR_IO,
                   "batch file missing");
  CHECK(contains(last_error(), "ampx_checkpoint_segment"));
  CHECK(ampx_last_status() == AMPX_ERR_IO);

  // An unrelated earlier failure must not be passed off as the segment's.
  CHECK_FAILS_WITH(ampx_tensor_fill(nullptr, 0.0), AMPX_ERR_INVALID_ARGUMENT, "tensor");
  segment.fn = wordless_failure_segment;
  CHECK_FAILS_WITH(ampx_checkpoint_segment(ctx, &segment, &in, 1, &out, 1), AMPX_ERR_CORRUPT,
                   "without a message");
  CHECK_FALSE(contains(last_error(), "ampx_tensor_fill"));
  // The deprecated entry point reports the same way.
  CHECK_FAILS_WITH(ampx_checkpoint(ctx, wordless_failure_segment, nullptr, &in, 1, &out, 1),
                   AMPX_ERR_CORRUPT, "without a message");
  CHECK(out == nullptr);
}

TEST_CASE("checkpoint_segment: ampx_set_error sets status and message and returns the status") {
  CHECK(ampx_set_error(AMPX_ERR_NOT_SUPPORTED, "custom words") == AMPX_ERR_NOT_SUPPORTED);
  CHECK(ampx_last_status() == AMPX_ERR_NOT_SUPPORTED);
  CHECK(std::strcmp(ampx_last_error(), "custom words") == 0);
  CHECK(ampx_set_error(AMPX_ERR_IO, nullptr) == AMPX_ERR_IO);
  CHECK(std::strcmp(ampx_last_error(), "") == 0);
}

TEST_CASE("scopes: ampx_scope_depth counts the open scopes") {
  Ctx ctx;
  int32_t depth = -1;
  REQUIRE(ampx_scope_depth(ctx, &depth) == AMPX_OK);
  CHECK(depth == 0);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
  REQUIRE(ampx_scope_depth(ctx, &depth) == AMPX_OK);
  CHECK(depth == 2);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  REQUIRE(ampx_scope_depth(ctx, &depth) == AMPX_OK);
  CHECK(depth == 1);
  REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  depth = 7;
  CHECK_FAILS_WITH(ampx_scope_depth(ctx, nullptr), AMPX_ERR_INVALID_ARGUMENT, "depth");
  CHECK_FAILS_WITH(ampx_scope_depth(nullptr, &depth), AMPX_ERR_INVALID_ARGUMENT, "ctx");
  CHECK(depth == 7);
}
