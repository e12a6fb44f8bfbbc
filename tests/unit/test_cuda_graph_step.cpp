// test_cuda_graph_step.cpp -- a whole mixed-precision training step through
// the public C API (fp16 autocast forward with cross-entropy, scaled
// backward, unscale, clip, AdamW step, scaler update, zero_grad) captured in
// a CUDA graph on the host's stream and replayed, against the same steps
// run directly on a second context. A replay whose input holds an infinity
// must skip the step and back the scale off, as the direct run does; a
// step with a learning-rate schedule replays with each step's own rate. Any
// synchronisation or host copy inside the step would fail the capture, so
// the capture itself shows the step needs no round trip to the host.
// CUDA-only (the unit_cuda test).
#include "support.h"

#ifdef AMPX_WITH_CUDA

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using ampx_test::last_error;

namespace {

#define API_OK(call) REQUIRE_MESSAGE((call) == AMPX_OK, last_error())

constexpr int64_t kBatch = 64, kIn = 32, kHidden = 64, kClasses = 10;

// A context with a two-layer classifier, its AdamW optimizer, a dynamic
// loss scaler and an F16 autocast policy, on `stream`.
struct Trainer {
  ampx_context ctx = nullptr;
  ampx_tensor params[4] = {};
  ampx_tensor x = nullptr, labels = nullptr;
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;
  ampx_autocast autocast = nullptr;

  explicit Trainer(cudaStream_t stream) {
    ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
    options.device_type = AMPX_DEVICE_CUDA;
    options.cuda_stream = stream;
    API_OK(ampx_context_create(&options, &ctx));
    const int64_t shapes[4][2] = {{kHidden, kIn}, {kHidden, 0}, {kClasses, kHidden}, {kClasses, 0}};
    uint32_t lcg = 99;
    for (int i = 0; i < 4; ++i) {
      const bool bias = shapes[i][1] == 0;
      const int64_t n = bias ? shapes[i][0] : shapes[i][0] * shapes[i][1];
      std::vector<float> v(static_cast<size_t>(n));
      for (float& f : v) {
        lcg = lcg * 1664525u + 1013904223u;
        f = (static_cast<float>(lcg >> 8) / 16777216.0f - 0.5f) * 0.3f;
      }
      API_OK(ampx_tensor_from_host(ctx, AMPX_F32, bias ? 1 : 2, shapes[i], v.data(),
                                   v.size() * sizeof(float), &params[i]));
      API_OK(ampx_tensor_set_requires_grad(params[i], 1));
    }
    ampx_adam_options adamw = AMPX_ADAMW_OPTIONS_INIT;
    API_OK(ampx_optimizer_create_adam(ctx, params, 4, &adamw, &opt));
    ampx_scaler_options scaling = AMPX_SCALER_OPTIONS_INIT;
    scaling.init_scale = 1024.0;
    scaling.growth_interval = 2;
    API_OK(ampx_scaler_create(ctx, &scaling, &scaler));
    API_OK(ampx_autocast_create(ctx, nullptr, &autocast));
    const int64_t x_shape[2] = {kBatch, kIn};
    const int64_t y_shape[1] = {kBatch};
    API_OK(ampx_tensor_empty(ctx, AMPX_F32, 2, x_shape, &x));
    API_OK(ampx_tensor_empty(ctx, AMPX_I64, 1, y_shape, &labels));
  }
  ~Trainer() {
    ampx_tensor_release(x);
    ampx_tensor_release(labels);
    for (ampx_tensor p : params) ampx_tensor_release(p);
    ampx_autocast_release(autocast);
    ampx_scaler_release(scaler);
    ampx_optimizer_release(opt);
    ampx_context_release(ctx);
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The batch of step `k`; `overflow` puts an infinity into x.
  void load_batch(int k, bool overflow) {
    std::vector<float> xs(static_cast<size_t>(kBatch * kIn));
    std::vector<int64_t> ys(static_cast<size_t>(kBatch));
    for (size_t i = 0; i < xs.size(); ++i)
      xs[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + k));
    for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<int64_t>((i * 7 + k) % kClasses);
    if (overflow) xs[5] = std::numeric_limits<float>::infinity();
    API_OK(ampx_tensor_copy_from_host(x, xs.data(), xs.size() * sizeof(float)));
    API_OK(ampx_tensor_copy_from_host(labels, ys.data(), ys.size() * sizeof(int64_t)));
  }

  // One step, enqueued only; every tensor it makes is released in it.
  ampx_status step() {
    ampx_status s = AMPX_OK;
    const auto run = [&](ampx_status status) {
      if (s == AMPX_OK) s = status;
      return s == AMPX_OK;
    };
    ampx_tensor h = nullptr, logits = nullptr, loss = nullptr, norm = nullptr;
    run(ampx_optimizer_zero_grad(opt));
    run(ampx_scope_push(ctx));
    run(ampx_autocast_enter(autocast));
    if (run(ampx_linear(x, params[0], params[1], AMPX_ACTIVATION_RELU, &h)) &&
        run(ampx_linear(h, params[2], params[3], AMPX_ACTIVATION_NONE, &logits)))
      run(ampx_cross_entropy(logits, labels, AMPX_REDUCTION_MEAN, -100, &loss));
    run(ampx_autocast_exit(autocast));
    if (loss) {
      run(ampx_backward(loss, scaler));
      run(ampx_scaler_unscale(scaler, opt));
      run(ampx_clip_grad_norm(opt, 1.0, 2.0, 0, &norm));
      run(ampx_scaler_step(scaler, opt));
      run(ampx_scaler_update(scaler));
    }
    ampx_tensor_release(norm);
    run(ampx_scope_pop(ctx));
    return s;
  }

  std::vector<float> weights() {
    std::vector<float> all;
    for (ampx_tensor p : params) {
      const std::vector<float> v = ampx_test::download<float>(p);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
};

// One step of `trainer` captured on `stream` and instantiated; a failure in
// the step or the capture stops the test case with its message.
struct CapturedStep {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CapturedStep(Trainer& trainer, cudaStream_t stream) {
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    const ampx_status captured = trainer.step();
    const std::string capture_error = captured == AMPX_OK ? "" : last_error();
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    REQUIRE_MESSAGE(captured == AMPX_OK, capture_error);
    REQUIRE_MESSAGE(ended == cudaSuccess, cudaGetErrorString(ended));
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  }
  ~CapturedStep() {
    if (exec) CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
    if (graph) CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  }
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("cuda graph: a whole training step replays from a graph, an overflow skipped on the device") {
  SKIP_UNLESS_CUDA();
  cudaStream_t direct_stream = nullptr, graph_stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&direct_stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&graph_stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    Trainer direct(direct_stream), graphed(graph_stream);
    // A first step outside the graph makes the gradients, masters and
    // moments, which then live across replays.
    for (Trainer* t : {&direct, &graphed}) {
      t->load_batch(0, false);
      API_OK(t->step());
    }
    API_OK(ampx_context_synchronize(graphed.ctx));

    const CapturedStep captured(graphed, graph_stream);

    // Steps 1..5; step 3's batch overflows.
    std::vector<float> after_step2;
    for (int k = 1; k <= 5; ++k) {
      const bool overflow = k == 3;
      direct.load_batch(k, overflow);
      API_OK(direct.step());
      graphed.load_batch(k, overflow);
      REQUIRE(cudaGraphLaunch(captured.exec, graph_stream) == cudaSuccess);
      if (k == 2) after_step2 = graphed.weights();
      if (k == 3) {
        CAPTURE(k);
        CHECK(same_bits(graphed.weights(), after_step2));  // skipped
        CHECK(same_bits(direct.weights(), after_step2));
      }
    }
    API_OK(ampx_context_synchronize(graphed.ctx));
    CHECK(same_bits(graphed.weights(), direct.weights()));

    ampx_scaler_state want = {}, got = {};
    want.struct_size = got.struct_size = sizeof(ampx_scaler_state);
    want.counters.struct_size = got.counters.struct_size = sizeof(ampx_scaler_counters);
    API_OK(ampx_scaler_get_state(direct.scaler, &want));
    API_OK(ampx_scaler_get_state(graphed.scaler, &got));
    CHECK(got.scale == want.scale);
    CHECK(got.growth_tracker == want.growth_tracker);
    CHECK(got.counters.updates == 6);
    CHECK(got.counters.skipped == want.counters.skipped);
    CHECK(got.counters.skipped == 1);
    CHECK(got.counters.backoffs == 1);
    // 1024: steps 0-1 grow it (x2 after two clean updates), step 3 halves it,
    // steps 4-5 grow it again.
    CHECK(got.scale == 2048.0);
    int64_t steps = 0;
    API_OK(ampx_optimizer_param_steps(graphed.opt, graphed.params[0], &steps));
    CHECK(steps == 5);

  }
  CHECK(cudaStreamDestroy(direct_stream) == cudaSuccess);
  CHECK(cudaStreamDestroy(graph_stream) == cudaSuccess);
}

TEST_CASE("cuda graph: a replayed step follows its learning-rate schedule; a skipped step does not advance it") {
  SKIP_UNLESS_CUDA();
  // The graphed trainer's schedule runs on the device; the direct trainer
  // sets the same rates from the host (ampx_optimizer_set_lr) before each
  // step, from the closed form written out here, advancing only after steps
  // that were taken.
  ampx_lr_schedule schedule = AMPX_LR_SCHEDULE_INIT;
  schedule.warmup_steps = 2;
  schedule.warmup_start_factor = 0.1;
  schedule.decay = AMPX_LR_COSINE;
  schedule.total_steps = 6;
  schedule.min_lr = 1e-4;
  const double base = 1e-3;  // AdamW's default lr
  const auto rate = [&](int64_t k) {
    if (k < 2) return base * (0.1 + 0.9 * static_cast<double>(k) / 2.0);
    return 1e-4 + (base - 1e-4) * (1.0 + std::cos(3.14159265358979323846 * (k - 2) / 4.0)) / 2.0;
  };
  cudaStream_t direct_stream = nullptr, graph_stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&direct_stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&graph_stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    Trainer direct(direct_stream), graphed(graph_stream);
    API_OK(ampx_optimizer_set_lr_schedule(graphed.opt, 0, &schedule));
    int64_t taken = 0;
    for (Trainer* t : {&direct, &graphed}) t->load_batch(0, false);
    API_OK(ampx_optimizer_set_lr(direct.opt, 0, rate(taken)));
    API_OK(direct.step());
    API_OK(graphed.step());
    ++taken;
    API_OK(ampx_context_synchronize(graphed.ctx));

    const CapturedStep captured(graphed, graph_stream);

    // Steps 1..7 (through warm-up, the decay and past total_steps); step 3
    // overflows and is skipped.
    for (int k = 1; k <= 7; ++k) {
      const bool overflow = k == 3;
      direct.load_batch(k, overflow);
      API_OK(ampx_optimizer_set_lr(direct.opt, 0, rate(taken)));
      API_OK(direct.step());
      if (!overflow) ++taken;
      graphed.load_batch(k, overflow);
      REQUIRE(cudaGraphLaunch(captured.exec, graph_stream) == cudaSuccess);
      CAPTURE(k);
      CHECK(same_bits(graphed.weights(), direct.weights()));
    }
    int64_t steps = 0;
    API_OK(ampx_optimizer_step_count(graphed.opt, &steps));
    CHECK(steps == taken);
    CHECK(steps == 7);
  }
  CHECK(cudaStreamDestroy(direct_stream) == cudaSuccess);
  CHECK(cudaStreamDestroy(graph_stream) == cudaSuccess);
}

#endif  // AMPX_WITH_CUDA
