// data_parallel_test.cpp -- ampx_data_parallel under mpirun (2 and 4 ranks,
// CPU contexts, the C API only, as a program would use it).
//
// Every rank trains on its slice of each global batch; after every step all
// ranks' parameters must be bitwise identical, and close to one process
// training on the whole batch (the same code without the wrapper). Each
// rank starts from its own random parameters, so equality also shows that
// rank 0's were broadcast.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ampx/ampx.hpp"

namespace {

int g_rank = 0, g_world = 1;

#define OK(call) REQUIRE_MESSAGE((call) == AMPX_OK, #call, ": ", std::string(ampx_last_error()))

enum { kIn = 8, kHidden = 16, kOut = 4, kBatch = 32 };

enum class Mode { Fp32, Fp16Scaler, Bf16 };

const char* mode_name(Mode m) {
  return m == Mode::Fp32 ? "fp32 + SGD" : m == Mode::Fp16Scaler ? "fp16 + scaler" : "bf16 + AdamW";
}
ampx_dtype param_dtype(Mode m) {
  return m == Mode::Fp32 ? AMPX_F32 : m == Mode::Fp16Scaler ? AMPX_F16 : AMPX_BF16;
}

double uniform(uint64_t& state) {  // [-1, 1)
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<double>(state >> 11) / 4503599627370496.0 - 1.0;
}

// The global batch of a step: inputs [kBatch, kIn], targets [kBatch, kOut].
void global_batch(int step, std::vector<float>& x, std::vector<float>& y) {
  uint64_t state = 1000 + static_cast<uint64_t>(step);
  x.resize(kBatch * kIn);
  y.resize(kBatch * kOut);
  for (float& v : x) v = static_cast<float>(uniform(state));
  for (int r = 0; r < kBatch; ++r)
    for (int o = 0; o < kOut; ++o)
      y[r * kOut + o] = static_cast<float>(std::sin(x[r * kIn + o] + 2.0 * x[r * kIn + o + 4]));
}

// A host float tensor converted to `dtype`.
ampx_tensor make_tensor(ampx_context ctx, ampx_dtype dtype, std::vector<int64_t> shape,
                        const float* values) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  ampx_tensor f32 = nullptr, out = nullptr;
  OK(ampx_tensor_from_host(ctx, AMPX_F32, static_cast<int32_t>(shape.size()), shape.data(), values,
                           static_cast<size_t>(n) * sizeof(float), &f32));
  if (dtype == AMPX_F32) return f32;
  OK(ampx_tensor_cast(f32, dtype, &out));
  ampx_tensor_release(f32);
  return out;
}

std::vector<float> to_floats(ampx_tensor t) {
  int64_t n = 0;
  REQUIRE(ampx_tensor_numel(t, &n) == AMPX_OK);
  ampx_tensor f32 = nullptr;
  OK(ampx_tensor_cast(t, AMPX_F32, &f32));
  std::vector<float> v(static_cast<size_t>(n));
  OK(ampx_tensor_to_host(f32, v.data(), v.size() * sizeof(float)));
  ampx_tensor_release(f32);
  return v;
}

std::vector<unsigned char> to_bytes(ampx_tensor t) {
  size_t bytes = 0;
  REQUIRE(ampx_tensor_nbytes(t, &bytes) == AMPX_OK);
  std::vector<unsigned char> v(bytes);
  OK(ampx_tensor_to_host(t, v.data(), bytes));
  return v;
}

// Whether every rank holds the same bytes.
bool same_on_every_rank(const std::vector<unsigned char>& mine) {
  std::vector<unsigned char> all(mine.size() * static_cast<size_t>(g_world));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
                static_cast<int>(mine.size()), MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 1; r < g_world; ++r)
    if (std::memcmp(all.data(), all.data() + r * mine.size(), mine.size()) != 0) return false;
  return true;
}

struct Trainer {
  Mode mode;
  ampx_context ctx = nullptr;
  ampx_tensor w1 = nullptr, b1 = nullptr, w2 = nullptr, b2 = nullptr;
  ampx_optimizer opt = nullptr;
  ampx_scaler scaler = nullptr;
  ampx_comm comm = nullptr;
  ampx_data_parallel dp = nullptr;
  double max_norm = 1.0;

  // seed picks the initial parameters; with `distributed` the batch is this
  // rank's slice and gradients are reduced over MPI_COMM_WORLD.
  Trainer(Mode m, uint64_t seed, bool distributed,
          ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT)
      : mode(m) {
    OK(ampx_context_create(nullptr, &ctx));
    uint64_t state = seed;
    auto param = [&](std::vector<int64_t> shape, double bound) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = static_cast<float>(bound * uniform(state));
      ampx_tensor t = make_tensor(ctx, param_dtype(mode), shape, v.data());
      OK(ampx_tensor_set_requires_grad(t, 1));
      return t;
    };
    w1 = param({kHidden, kIn}, 0.35);
    b1 = param({kHidden}, 0.35);
    w2 = param({kOut, kHidden}, 0.25);
    b2 = param({kOut}, 0.25);
    ampx_tensor params[4] = {w1, b1, w2, b2};
    if (mode == Mode::Bf16) {
      ampx_adam_options o = AMPX_ADAMW_OPTIONS_INIT;
      o.lr = 1e-2;
      OK(ampx_optimizer_create_adam(ctx, params, 4, &o, &opt));
    } else {
      ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
      o.lr = 0.05;
      o.momentum = 0.9;
      OK(ampx_optimizer_create_sgd(ctx, params, 4, &o, &opt));
    }
    if (mode == Mode::Fp16Scaler) {
      ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
      o.init_scale = 1024.0;
      o.growth_interval = 10;
      OK(ampx_scaler_create(ctx, &o, &scaler));
    }
    if (distributed) {
      MPI_Comm world = MPI_COMM_WORLD;
      OK(ampx_comm_from_mpi(ctx, &world, &comm));
      OK(ampx_data_parallel_create(comm, opt, &options, &dp));
    }
  }
  ~Trainer() {
    ampx_data_parallel_release(dp);
    ampx_comm_release(comm);
    ampx_scaler_release(scaler);
    ampx_optimizer_release(opt);
    for (ampx_tensor t : {w1, b1, w2, b2}) ampx_tensor_release(t);
    ampx_context_release(ctx);
  }
  std::vector<ampx_tensor> params() const { return {w1, b1, w2, b2}; }

  // Forward and backward of rows [first, first + rows) of the step's batch.
  void backward(int step, int first, int rows, ampx_reduction reduction = AMPX_REDUCTION_MEAN) {
    std::vector<float> x, y;
    global_batch(step, x, y);
    OK(ampx_scope_push(ctx));
    ampx_tensor bx = make_tensor(ctx, param_dtype(mode), {rows, kIn}, x.data() + first * kIn);
    ampx_tensor by = make_tensor(ctx, param_dtype(mode), {rows, kOut}, y.data() + first * kOut);
    ampx_tensor h = nullptr, out = nullptr, loss = nullptr;
    OK(ampx_linear(bx, w1, b1, AMPX_ACTIVATION_RELU, &h));
    OK(ampx_linear(h, w2, b2, AMPX_ACTIVATION_NONE, &out));
    OK(ampx_mse_loss(out, by, reduction, &loss));
    OK(ampx_backward(loss, scaler));
    ampx_tensor_release(bx);
    ampx_tensor_release(by);
    OK(ampx_scope_pop(ctx));
  }
  // unscale, clip, step, update -- the seed's loop after backward.
  void update() {
    ampx_tensor norm = nullptr;
    if (scaler) OK(ampx_scaler_unscale(scaler, opt));
    OK(ampx_clip_grad_norm(opt, max_norm, 2.0, 0, &norm));
    ampx_tensor_release(norm);
    if (scaler) {
      OK(ampx_scaler_step(scaler, opt));
      OK(ampx_scaler_update(scaler));
    } else {
      OK(ampx_optimizer_step(opt));
    }
  }
  void train_step(int step) {
    OK(ampx_optimizer_zero_grad(opt));
    const int rows = dp ? kBatch / g_world : kBatch;
    backward(step, dp ? g_rank * rows : 0, rows);
    update();
  }
  std::vector<unsigned char> param_bytes() const {
    std::vector<unsigned char> all;
    for (ampx_tensor t : params()) {
      const std::vector<unsigned char> b = to_bytes(t);
      all.insert(all.end(), b.begin(), b.end());
    }
    return all;
  }
  double scale() const {
    double s = 1.0;
    if (scaler) REQUIRE(ampx_scaler_get_scale(scaler, &s) == AMPX_OK);
    return s;
  }
};

// max |a - b| over max |b|.
double relative_difference(const Trainer& a, const Trainer& b) {
  double diff = 0.0, size = 0.0;
  for (size_t i = 0; i < a.params().size(); ++i) {
    const std::vector<float> x = to_floats(a.params()[i]), y = to_floats(b.params()[i]);
    for (size_t k = 0; k < x.size(); ++k) {
      diff = std::fmax(diff, std::fabs(static_cast<double>(x[k]) - y[k]));
      size = std::fmax(size, std::fabs(static_cast<double>(y[k])));
    }
  }
  return diff / size;
}

// The optimizer state bytes per parameter element: fp32 master (16-bit
// parameters) and moments (SGD's momentum; Adam's two).
int state_bytes_per_element(Mode mode) {
  return mode == Mode::Fp32 ? 4 : mode == Mode::Fp16Scaler ? 8 : 12;
}

int64_t parameter_elements() { return kHidden * kIn + kHidden + kOut * kHidden + kOut; }

void check_against_one_process(Mode mode, double tolerance, bool reduce_in_fp32,
                               int zero_stage = 0) {
  const std::string mode_text = mode_name(mode);
  CAPTURE(mode_text);
  CAPTURE(reduce_in_fp32);
  CAPTURE(zero_stage);
  ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  options.reduce_in_fp32 = reduce_in_fp32;
  options.zero_stage = zero_stage;
  Trainer ranks(mode, 7 + static_cast<uint64_t>(g_rank), true, options);
  Trainer single(mode, 7, false);  // rank 0's initial parameters, the whole batch
  // Under ZeRO-1 clipping must use the norm of every rank's part together:
  // a small max_norm makes every step clip, so a rank clipping by its own
  // part's norm would move away from the single process.
  if (zero_stage) ranks.max_norm = single.max_norm = 0.05;
  CHECK(same_on_every_rank(ranks.param_bytes()));
  bool identical = true;
  for (int step = 0; step < 50; ++step) {
    ranks.train_step(step);
    single.train_step(step);
    identical = identical && same_on_every_rank(ranks.param_bytes());
    CHECK(ranks.scale() == single.scale());
  }
  CHECK(identical);
  const double difference = relative_difference(ranks, single);
  if (g_rank == 0)
    MESSAGE(mode_text, reduce_in_fp32 ? std::string(" (fp32 reduction)") : std::string(),
            zero_stage ? std::string(" (ZeRO-1)") : std::string(), ": ", g_world,
            " ranks vs one process after 50 steps: max relative difference ", difference);
  CHECK(difference < tolerance);
  ampx_data_parallel_stats stats = AMPX_DATA_PARALLEL_STATS_INIT;
  OK(ampx_data_parallel_get_stats(ranks.dp, &stats));
  CHECK(stats.world_size == g_world);
  CHECK(stats.rank == g_rank);
  CHECK(stats.reductions == 50);
  // Each rank's optimizer state is its shard's (ZeRO-1), the parts adding
  // up to the whole model; otherwise every rank holds all of it.
  int64_t total = 0;
  MPI_Allreduce(&stats.shard_elements, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  CHECK(total == (zero_stage ? 1 : g_world) * parameter_elements());
  CHECK(stats.optimizer_state_bytes ==
        static_cast<uint64_t>(stats.shard_elements * state_bytes_per_element(mode)));
  if (zero_stage) CHECK(stats.shard_elements <= (parameter_elements() + 64 * 4) / g_world + 64);
}

}  // namespace

// Tolerances: the ranks sum the same products in another order (and round
// 16-bit gradients after the division by the world size and after each
// partial sum), so per step the gradients differ by a few units in the last
// place of their dtype; 50 steps of SGD with momentum (or Adam) carry that
// to about 1e-5 of the parameters' size in fp32 and a few 1e-3 in fp16 and
// bf16 (whose parameters themselves round at 2^-11 and 2^-8).
TEST_CASE(
    "every rank's parameters are bitwise identical after every step, and close to one process") {
  check_against_one_process(Mode::Fp32, 1e-5, false);
  check_against_one_process(Mode::Fp16Scaler, 5e-3, false);
  check_against_one_process(Mode::Fp16Scaler, 5e-3, true);
  check_against_one_process(Mode::Bf16, 3e-2, true);
  check_against_one_process(Mode::Bf16, 3e-2, false);
}

TEST_CASE("ZeRO-1: sharded optimizer state, the same replicas, each rank holding its part") {
  check_against_one_process(Mode::Fp32, 1e-5, false, 1);
  check_against_one_process(Mode::Fp16Scaler, 5e-3, false, 1);
  check_against_one_process(Mode::Fp16Scaler, 5e-3, true, 1);
  check_against_one_process(Mode::Bf16, 3e-2, true, 1);
}

TEST_CASE("ZeRO-1: each rank saves and loads its part, and resuming is bit-identical") {
  ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  options.zero_stage = 1;
  Trainer first(Mode::Fp16Scaler, 21, true, options);
  for (int step = 0; step < 10; ++step) first.train_step(step);
  size_t bytes = 0;
  OK(ampx_optimizer_state_size(first.opt, &bytes));
  std::vector<unsigned char> state(bytes);
  OK(ampx_optimizer_save_state(first.opt, state.data(), bytes));
  ampx_scaler_state scaler_state;
  std::memset(&scaler_state, 0, sizeof scaler_state);
  scaler_state.struct_size = sizeof scaler_state;
  OK(ampx_scaler_get_state(first.scaler, &scaler_state));
  std::vector<std::vector<unsigned char>> params;
  for (ampx_tensor t : first.params()) params.push_back(to_bytes(t));
  for (int step = 10; step < 20; ++step) first.train_step(step);

  Trainer resumed(Mode::Fp16Scaler, 99, true, options);
  for (size_t i = 0; i < params.size(); ++i)
    OK(ampx_tensor_copy_from_host(resumed.params()[i], params[i].data(), params[i].size()));
  OK(ampx_optimizer_load_state(resumed.opt, state.data(), bytes));
  OK(ampx_scaler_set_state(resumed.scaler, &scaler_state));
  for (int step = 10; step < 20; ++step) resumed.train_step(step);
  CHECK(resumed.param_bytes() == first.param_bytes());
  CHECK(same_on_every_rank(resumed.param_bytes()));
  ampx_tensor master = nullptr;
  CHECK(ampx_optimizer_state_tensor(resumed.opt, resumed.w1, AMPX_STATE_MASTER, &master) ==
        AMPX_ERR_NOT_SUPPORTED);
}

TEST_CASE("ZeRO-1: each rank's checkpoint file holds its part; resuming from them is bit-identical") {
  char dir_template[] = "/tmp/ampx-dp-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string path = std::string(dir_template) + "/rank" + std::to_string(g_rank) + ".ampx";
  ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  options.zero_stage = 1;
  Trainer first(Mode::Bf16, 31, true, options);
  for (int step = 0; step < 8; ++step) first.train_step(step);
  std::vector<ampx_tensor> params = first.params();
  OK(ampx_checkpoint_file_save(path.c_str(), params.data(), params.size(), first.opt, nullptr));
  for (int step = 8; step < 16; ++step) first.train_step(step);

  Trainer resumed(Mode::Bf16, 77, true, options);
  params = resumed.params();
  OK(ampx_checkpoint_file_load(path.c_str(), params.data(), params.size(), resumed.opt, nullptr));
  for (int step = 8; step < 16; ++step) resumed.train_step(step);
  CHECK(resumed.param_bytes() == first.param_bytes());
  std::remove(path.c_str());
  rmdir(dir_template);
}

TEST_CASE("an inf in one rank's gradient: every rank skips that step and backs off alike") {
  // The inf enters after the reduction (ampx_backward's end), where only
  // this rank's unscale can see it: without the MAX-reduction of
  // found-inf, the last rank would skip and the others would step.
  Trainer t(Mode::Fp16Scaler, 11, true);
  const int inject_at = 4;
  std::vector<double> scales;
  std::vector<int32_t> taken;
  for (int step = 0; step < 10; ++step) {
    OK(ampx_optimizer_zero_grad(t.opt));
    t.backward(step, g_rank * (kBatch / g_world), kBatch / g_world);
    if (step == inject_at && g_rank == g_world - 1) {
      ampx_tensor grad = nullptr;
      OK(ampx_tensor_grad(t.w2, &grad));
      std::vector<uint16_t> bits(kOut * kHidden);
      OK(ampx_tensor_to_host(grad, bits.data(), bits.size() * 2));
      bits[5] = 0x7c00;  // +inf in fp16
      OK(ampx_tensor_copy_from_host(grad, bits.data(), bits.size() * 2));
      ampx_tensor_release(grad);
    }
    t.update();
    int32_t stepped = -1;
    OK(ampx_optimizer_last_step_taken(t.opt, &stepped));
    taken.push_back(stepped);
    scales.push_back(t.scale());
    CHECK(same_on_every_rank(t.param_bytes()));
  }
  for (int step = 0; step < 10; ++step) CHECK(taken[step] == (step == inject_at ? 0 : 1));
  CHECK(scales[inject_at] == scales[inject_at - 1] * 0.5);
  std::vector<unsigned char> bytes(scales.size() * sizeof(double));
  std::memcpy(bytes.data(), scales.data(), bytes.size());
  CHECK(same_on_every_rank(bytes));
}

namespace {

// FP8 recipes under data parallel: a rank's view of one slot, and the
// reference of its delayed scaling (Transformer Engine's rule, over the
// amaxes MAX-reduced over the ranks; NaN propagates through the history).
struct SlotView {
  float scale, scale_inv, amax;
  std::vector<float> history;
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> b((3 + history.size()) * sizeof(float));
    const float head[3] = {scale, scale_inv, amax};
    std::memcpy(b.data(), head, sizeof head);
    std::memcpy(b.data() + sizeof head, history.data(), history.size() * sizeof(float));
    return b;
  }
};

SlotView read_slot(ampx_fp8_recipe recipe, int64_t slot, int len) {
  ampx_fp8_slot_info info = AMPX_FP8_SLOT_INFO_INIT;
  SlotView v;
  v.history.resize(static_cast<size_t>(len));
  OK(ampx_fp8_recipe_slot_get(recipe, slot, &info, v.history.data(), len));
  v.scale = info.scale, v.scale_inv = info.scale_inv, v.amax = info.amax;
  return v;
}

struct DelayedReference {
  float fp8_max;
  std::vector<float> history;  // oldest first
  float scale = 1.0f;
  // Transformer Engine's default update (ampx.h, section 18): a zero step
  // amax leaves history and scale; the history's max skips NaN, as fmaxf.
  void step(float amax) {
    if (amax == 0.0f) return;
    history.erase(history.begin());
    history.push_back(amax);
    float top = 0.0f;
    for (float a : history) top = std::fmax(top, a);
    if (top > 0.0f && std::isfinite(top)) {
      const float sf = fp8_max / top;
      scale = std::isinf(sf) ? 3.40282347e38f : sf;
    }
  }
};

// Quantizes a tensor whose amax is `amax` (NaN: it holds a NaN) into slot.
void quantize_with_amax(ampx_context ctx, ampx_fp8_recipe recipe, int64_t slot, ampx_dtype format,
                        float amax) {
  const float values[4] = {0.25f * amax, std::isnan(amax) ? 1.0f : -amax, 0.0f, amax};
  const int64_t n = 4;
  ampx_tensor src = nullptr, dst = nullptr;
  OK(ampx_tensor_from_host(ctx, AMPX_F32, 1, &n, values, sizeof values, &src));
  OK(ampx_tensor_empty(ctx, format, 1, &n, &dst));
  OK(ampx_fp8_quantize(recipe, slot, src, dst, nullptr));
  ampx_tensor_release(src);
  ampx_tensor_release(dst);
}

}  // namespace

TEST_CASE("FP8: amaxes are MAX-reduced with found-inf, so every rank's scales stay bitwise equal") {
  Trainer t(Mode::Fp16Scaler, 13, true);
  ampx_fp8_recipe_options o = ampx_fp8_recipe_options_default();
  o.amax_history_len = 3;
  ampx_fp8_recipe recipe = nullptr;
  OK(ampx_fp8_recipe_create(t.ctx, &o, &recipe));
  int64_t act = -1, grad = -1;
  OK(ampx_fp8_recipe_add_tensor(recipe, AMPX_FP8_FORWARD, "act", &act));
  OK(ampx_fp8_recipe_add_tensor(recipe, AMPX_FP8_BACKWARD, "grad", &grad));
  DelayedReference ref_act{448.0f, std::vector<float>(3, 0.0f)};
  DelayedReference ref_grad{57344.0f, std::vector<float>(3, 0.0f)};

  // A recipe of another context is refused and attaches nothing.
  ampx_context other_ctx = nullptr;
  OK(ampx_context_create(nullptr, &other_ctx));
  ampx_fp8_recipe other = nullptr;
  OK(ampx_fp8_recipe_create(other_ctx, &o, &other));
  CHECK(ampx_data_parallel_set_fp8_recipe(t.dp, other) == AMPX_ERR_DEVICE);
  ampx_fp8_recipe_release(other);
  ampx_context_release(other_ctx);
  CHECK(ampx_data_parallel_set_fp8_recipe(nullptr, recipe) != AMPX_OK);

  OK(ampx_data_parallel_set_fp8_recipe(t.dp, recipe));
  // Each rank sees its own amaxes, (rank + 1) times a step's base; at step
  // 3 the last rank's activation holds a NaN. Steps 0-4 go through the
  // scaler's unscale (the amaxes ride in found-inf's all-reduce: reduced
  // before ampx_fp8_recipe_update is called); steps 5-6 update without an
  // unscale in between (the update reduces them itself). The NaN is skipped
  // by the history's max (the reference's rule).
  for (int step = 0; step < 7; ++step) {
    CAPTURE(step);
    const float base = 0.75f * static_cast<float>(step + 1);
    const float mine = base * static_cast<float>(g_rank + 1);
    const bool nan_step = step == 3;
    quantize_with_amax(t.ctx, recipe, act, AMPX_F8E4M3,
                       nan_step && g_rank == g_world - 1 ? NAN : mine);
    quantize_with_amax(t.ctx, recipe, grad, AMPX_F8E5M2, 2.0f * mine);
    const float top = base * static_cast<float>(g_world);
    if (step < 5) {
      t.train_step(step);
      // Reduced by the unscale, before the update.
      const SlotView a = read_slot(recipe, act, 3);
      if (nan_step)
        CHECK(std::isnan(a.amax));
      else
        CHECK(a.amax == top);
      CHECK(read_slot(recipe, grad, 3).amax == 2.0f * top);
    }
    OK(ampx_fp8_recipe_update(recipe));
    ref_act.step(nan_step ? NAN : top);
    ref_grad.step(2.0f * top);
    const SlotView a = read_slot(recipe, act, 3), g = read_slot(recipe, grad, 3);
    CHECK(same_on_every_rank(a.bytes()));
    CHECK(same_on_every_rank(g.bytes()));
    CHECK(a.scale == ref_act.scale);
    CHECK(g.scale == ref_grad.scale);
    for (int i = 0; i < 3; ++i) {
      CHECK((std::isnan(a.history[i]) ? std::isnan(ref_act.history[i])
                                      : a.history[i] == ref_act.history[i]));
      CHECK(g.history[i] == ref_grad.history[i]);
    }
  }
  // Detached, each rank scales by its own amaxes again: the scales part.
  OK(ampx_data_parallel_set_fp8_recipe(t.dp, nullptr));
  quantize_with_amax(t.ctx, recipe, act, AMPX_F8E4M3, static_cast<float>(g_rank + 1));
  OK(ampx_fp8_recipe_update(recipe));
  if (g_world > 1) CHECK_FALSE(same_on_every_rank(read_slot(recipe, act, 3).bytes()));
  ampx_fp8_recipe_release(recipe);
}

TEST_CASE("FP8: recipes with different slot counts fail every rank, naming the ranks") {
  // The last rank's recipe has one slot more. Before the check, the ranks
  // reduced amax buffers of different lengths (a malformed collective).
  Trainer t(Mode::Fp16Scaler, 17, true);
  ampx_fp8_recipe_options o = ampx_fp8_recipe_options_default();
  o.amax_history_len = 2;
  ampx_fp8_recipe recipe = nullptr;
  OK(ampx_fp8_recipe_create(t.ctx, &o, &recipe));
  int64_t act = -1, grad = -1, extra = -1;
  OK(ampx_fp8_recipe_add_tensor(recipe, AMPX_FP8_FORWARD, "act", &act));
  OK(ampx_fp8_recipe_add_tensor(recipe, AMPX_FP8_BACKWARD, "grad", &grad));
  const bool last = g_rank == g_world - 1;
  if (last) OK(ampx_fp8_recipe_add_tensor(recipe, AMPX_FP8_FORWARD, "extra", &extra));
  OK(ampx_data_parallel_set_fp8_recipe(t.dp, recipe));
  const float mine = static_cast<float>(g_rank + 1);
  quantize_with_amax(t.ctx, recipe, act, AMPX_F8E4M3, mine);
  const std::string want_most = "rank " + std::to_string(g_world - 1) + " has 3";
  const std::string want_fewest = "rank 0 has 2";
  const std::string want_mine = "this rank, " + std::to_string(g_rank) + ", has " +
                                std::to_string(last ? 3 : 2);
  auto check_refused = [&](ampx_status status, const char* where) {
    CAPTURE(where);
    const std::string message = ampx_last_error();
    CHECK_MESSAGE(status == AMPX_ERR_INVALID_ARGUMENT, message);
    CHECK_MESSAGE(message.find("different slot counts") != std::string::npos, message);
    CHECK_MESSAGE(message.find(where) != std::string::npos, message);
    if (g_world > 1) {
      CHECK_MESSAGE(message.find(want_most) != std::string::npos, message);
      CHECK_MESSAGE(message.find(want_fewest) != std::string::npos, message);
    }
    CHECK_MESSAGE(message.find(want_mine) != std::string::npos, message);
    // No amax was reduced: each rank still has its own.
    CHECK(read_slot(recipe, act, 2).amax == mine);
  };
  if (g_world > 1) {
    // Where the update reduces the amaxes itself.
    check_refused(ampx_fp8_recipe_update(recipe), "ampx_fp8_recipe_update");
    // Where they ride in found-inf's all-reduce (the scaler's unscale).
    OK(ampx_optimizer_zero_grad(t.opt));
    t.backward(0, g_rank * (kBatch / g_world), kBatch / g_world);
    check_refused(ampx_scaler_unscale(t.scaler, t.opt), "unscale");
  }
  // Every rank failed at the same point: with the recipe detached the
  // wrapper goes on, and a recipe whose slots grow alike on every rank (two,
  // then a third at the second step) has every slot's amax reduced.
  OK(ampx_data_parallel_set_fp8_recipe(t.dp, nullptr));
  ampx_fp8_recipe_release(recipe);
  ampx_fp8_recipe same = nullptr;
  OK(ampx_fp8_recipe_create(t.ctx, &o, &same));
  OK(ampx_fp8_recipe_add_tensor(same, AMPX_FP8_FORWARD, "act", &act));
  OK(ampx_fp8_recipe_add_tensor(same, AMPX_FP8_BACKWARD, "grad", &grad));
  OK(ampx_data_parallel_set_fp8_recipe(t.dp, same));
  for (int step = 1; step < 4; ++step) {
    CAPTURE(step);
    if (step == 2) OK(ampx_fp8_recipe_add_tensor(same, AMPX_FP8_FORWARD, "extra", &extra));
    quantize_with_amax(t.ctx, same, act, AMPX_F8E4M3, mine * step);
    quantize_with_amax(t.ctx, same, grad, AMPX_F8E5M2, 2.0f * mine * step);
    if (step >= 2) quantize_with_amax(t.ctx, same, extra, AMPX_F8E4M3, 3.0f * mine * step);
    if (step != 3) t.train_step(step);  // step 3: the update reduces them
    OK(ampx_fp8_recipe_update(same));
    const float top = static_cast<float>(g_world * step);
    CHECK(read_slot(same, act, 2).history[1] == top);
    CHECK(read_slot(same, grad, 2).history[1] == 2.0f * top);
    if (step >= 2) CHECK(read_slot(same, extra, 2).history[1] == 3.0f * top);
  }
  OK(ampx_data_parallel_set_fp8_recipe(t.dp, nullptr));
  ampx_fp8_recipe_release(same);
}

namespace {

struct HookProbe {
  ampx_data_parallel dp = nullptr;
  std::vector<int32_t> launched;  // at each grad-ready notification
};

ampx_status probe_hook(void* data, ampx_tensor) {
  auto* probe = static_cast<HookProbe*>(data);
  ampx_data_parallel_stats stats = AMPX_DATA_PARALLEL_STATS_INIT;
  const ampx_status status = ampx_data_parallel_get_stats(probe->dp, &stats);
  probe->launched.push_back(stats.buckets_launched);
  return status;
}

}  // namespace

TEST_CASE("buckets go out while backward still runs") {
  for (int overlap = 0; overlap <= 1; ++overlap) {
    CAPTURE(overlap);
    ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
    options.bucket_bytes = 64;  // one parameter per bucket
    options.first_bucket_bytes = 64;
    options.overlap = overlap;
    Trainer t(Mode::Fp32, 3, true, options);
    ampx_data_parallel_stats stats = AMPX_DATA_PARALLEL_STATS_INIT;
    OK(ampx_data_parallel_get_stats(t.dp, &stats));
    CHECK(stats.bucket_count == 4);
    // Backward finishes the second layer's w2 and b2 (buckets 0 and 1 in
    // reverse parameter order) before it computes the first layer's: by the
    // second notification both buckets have gone out, while half of the
    // backward pass is still to run.
    HookProbe probe{t.dp, {}};
    OK(ampx_set_grad_ready_hook(t.ctx, probe_hook, &probe, nullptr));
    t.train_step(0);
    REQUIRE(probe.launched.size() == 4);
    CHECK(probe.launched[1] == (overlap ? 2 : 0));
    CHECK(probe.launched[3] == (overlap ? 4 : 0));
    OK(ampx_data_parallel_get_stats(t.dp, &stats));
    CHECK(stats.last_launched_early == (overlap ? 4 : 0));
    CHECK(stats.buckets_launched == 0);
    OK(ampx_set_grad_ready_hook(t.ctx, nullptr, nullptr, nullptr));
    CHECK(same_on_every_rank(t.param_bytes()));
  }
}

TEST_CASE("a second backward before the step accumulates as DDP does") {
  // Both passes reduce; the gradient is the average of the first parts plus
  // the average of the second: the same as one pass over both halves of
  // the slice with a summed loss.
  Trainer twice(Mode::Fp32, 5, true), once(Mode::Fp32, 5, true);
  const int rows = kBatch / g_world, first = g_rank * rows;
  for (int step = 0; step < 5; ++step) {
    OK(ampx_optimizer_zero_grad(twice.opt));
    twice.backward(step, first, rows / 2, AMPX_REDUCTION_SUM);
    twice.backward(step, first + rows / 2, rows - rows / 2, AMPX_REDUCTION_SUM);
    twice.update();
    OK(ampx_optimizer_zero_grad(once.opt));
    once.backward(step, first, rows, AMPX_REDUCTION_SUM);
    once.update();
  }
  CHECK(relative_difference(twice, once) < 1e-5);
  CHECK(same_on_every_rank(twice.param_bytes()));
  ampx_data_parallel_stats stats = AMPX_DATA_PARALLEL_STATS_INIT;
  OK(ampx_data_parallel_get_stats(twice.dp, &stats));
  CHECK(stats.reductions == 10);
}

TEST_CASE("gradient accumulation communicates once and matches the whole batch") {
  // Two micro-batches of each rank's slice, the first with sync off, vs the
  // slice in one backward; losses are sums, so the gradients add up.
  Trainer accumulating(Mode::Fp32, 5, true), whole(Mode::Fp32, 5, true);
  const int rows = kBatch / g_world, first = g_rank * rows;
  for (int step = 0; step < 5; ++step) {
    OK(ampx_optimizer_zero_grad(accumulating.opt));
    OK(ampx_data_parallel_set_sync(accumulating.dp, 0));
    accumulating.backward(step, first, rows / 2, AMPX_REDUCTION_SUM);
    ampx_data_parallel_stats stats = AMPX_DATA_PARALLEL_STATS_INIT;
    OK(ampx_data_parallel_get_stats(accumulating.dp, &stats));
    CHECK(stats.buckets_launched == 0);
    OK(ampx_data_parallel_set_sync(accumulating.dp, 1));
    accumulating.backward(step, first + rows / 2, rows - rows / 2, AMPX_REDUCTION_SUM);
    accumulating.update();
    OK(ampx_optimizer_zero_grad(whole.opt));
    whole.backward(step, first, rows, AMPX_REDUCTION_SUM);
    whole.update();
  }
  CHECK(relative_difference(accumulating, whole) < 1e-5);
  CHECK(same_on_every_rank(accumulating.param_bytes()));
}

TEST_CASE("ranks that registered different parameters all fail, naming the first difference") {
  const int last = g_world - 1;
  ampx_context ctx = nullptr;
  OK(ampx_context_create(nullptr, &ctx));
  MPI_Comm world = MPI_COMM_WORLD;
  ampx_comm comm = nullptr;
  OK(ampx_comm_from_mpi(ctx, &world, &comm));
  const int64_t a_shape[2] = {4, 3}, other_shape[2] = {3, 4}, b_shape[1] = {4};
  ampx_tensor a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  OK(ampx_tensor_zeros(ctx, AMPX_F32, 2, g_rank == last ? other_shape : a_shape, &a));
  OK(ampx_tensor_zeros(ctx, AMPX_F32, 1, b_shape, &b));
  OK(ampx_tensor_zeros(ctx, AMPX_F16, 1, b_shape, &c));
  OK(ampx_tensor_zeros(ctx, AMPX_F16, 1, b_shape, &d));
  auto try_create = [&](std::vector<ampx_tensor> params, ampx_data_parallel_options options,
                        ampx_status expected) {
    ampx_optimizer opt = nullptr;
    ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
    OK(ampx_optimizer_create_sgd(ctx, params.data(), params.size(), &o, &opt));
    ampx_data_parallel dp = nullptr;
    CHECK(ampx_data_parallel_create(comm, opt, &options, &dp) == expected);
    CHECK(dp == nullptr);
    const std::string message = ampx_last_error();
    ampx_optimizer_release(opt);
    return message;
  };
  const ampx_data_parallel_options defaults = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  std::string message = try_create({b, a}, defaults, AMPX_ERR_INVALID_ARGUMENT);
  CHECK(message.find("parameter 1 is f32[3, 4] on rank " + std::to_string(last) +
                     " but f32[4, 3] on rank 0") != std::string::npos);
  if (g_rank == last)
    message = try_create({b, c, d}, defaults, AMPX_ERR_INVALID_ARGUMENT);
  else
    message = try_create({b, c}, defaults, AMPX_ERR_INVALID_ARGUMENT);
  CHECK(message.find("rank " + std::to_string(last) + " has 3 parameters and rank 0 has 2") !=
        std::string::npos);
  ampx_data_parallel_options bad = defaults;
  if (g_rank == last) bad.bucket_bytes = 0;
  message = try_create({b}, bad, AMPX_ERR_INVALID_ARGUMENT);
  CHECK(message.find(g_rank == last ? "bucket_bytes is 0" : "could not join") != std::string::npos);
  // The communicator still works: the same parameters everywhere succeed.
  ampx_optimizer opt = nullptr;
  ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
  OK(ampx_optimizer_create_sgd(ctx, &b, 1, &o, &opt));
  ampx_data_parallel dp = nullptr;
  OK(ampx_data_parallel_create(comm, opt, nullptr, &dp));
  ampx_data_parallel_release(dp);
  ampx_optimizer_release(opt);
  for (ampx_tensor t : {a, b, c, d}) ampx_tensor_release(t);
  ampx_comm_release(comm);
  ampx_context_release(ctx);
}

TEST_CASE("bad handles and calls out of order are refused and change nothing") {
  Trainer t(Mode::Fp32, 9, true);
  ampx_data_parallel dp = nullptr;
  ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  CHECK(ampx_data_parallel_create(nullptr, t.opt, &options, &dp) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_data_parallel_create(reinterpret_cast<ampx_comm>(t.w1), t.opt, &options, &dp) ==
        AMPX_ERR_STALE_HANDLE);
  CHECK(std::string(ampx_last_error()).find("not an ampx_comm") != std::string::npos);
  CHECK(ampx_data_parallel_set_sync(reinterpret_cast<ampx_data_parallel>(t.opt), 0) ==
        AMPX_ERR_STALE_HANDLE);
  CHECK(ampx_comm_from_mpi(t.ctx, nullptr, &t.comm) == AMPX_ERR_INVALID_ARGUMENT);
  ampx_comm nccl = nullptr;
  int dummy = 0;
  CHECK(ampx_comm_from_nccl(t.ctx, &dummy, &nccl) == AMPX_ERR_NOT_SUPPORTED);
  CHECK(nccl == nullptr);
  CHECK(ampx_comm_set_timeout(t.comm, 0.0) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_comm_set_timeout(t.comm, NAN) == AMPX_ERR_INVALID_ARGUMENT);
  {
    // An optimizer of another context than the communicator's: refused on
    // every rank (a collective failure, as every rank passes such a pair).
    ampx_context other = nullptr;
    OK(ampx_context_create(nullptr, &other));
    ampx_tensor p = nullptr;
    const int64_t one[1] = {1};
    OK(ampx_tensor_zeros(other, AMPX_F32, 1, one, &p));
    ampx_optimizer foreign = nullptr;
    ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
    OK(ampx_optimizer_create_sgd(other, &p, 1, &sgd, &foreign));
    CHECK(ampx_data_parallel_create(t.comm, foreign, nullptr, &dp) == AMPX_ERR_DEVICE);
    CHECK(ampx_data_parallel_create(t.comm, t.opt, nullptr, &dp) == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(std::string(ampx_last_error()).find("already wrapped") != std::string::npos);
    ampx_optimizer_release(foreign);
    ampx_tensor_release(p);
    ampx_context_release(other);
  }
  options.struct_size = 0;
  CHECK(ampx_data_parallel_create(t.comm, t.opt, &options, &dp) == AMPX_ERR_INVALID_ARGUMENT);

  // Stepping with synchronization off would let the ranks drift apart.
  const std::vector<unsigned char> before = t.param_bytes();
  OK(ampx_data_parallel_set_sync(t.dp, 0));
  t.backward(0, g_rank * (kBatch / g_world), kBatch / g_world);
  CHECK(ampx_optimizer_step(t.opt) == AMPX_ERR_ORDER);
  CHECK(std::string(ampx_last_error()).find("synchronization is off") != std::string::npos);
  CHECK(t.param_bytes() == before);
  ampx_tensor norm = nullptr;
  CHECK(ampx_clip_grad_norm(t.opt, 1.0, 2.0, 0, &norm) == AMPX_ERR_ORDER);
  CHECK(ampx_data_parallel_reduce(t.dp) == AMPX_ERR_ORDER);
  OK(ampx_data_parallel_set_sync(t.dp, 1));
  ampx_data_parallel_stats stats = AMPX_DATA_PARALLEL_STATS_INIT;
  OK(ampx_data_parallel_reduce(t.dp));
  OK(ampx_data_parallel_reduce(t.dp));  // reduced already: nothing to do
  OK(ampx_data_parallel_get_stats(t.dp, &stats));
  CHECK(stats.reductions == 1);
  OK(ampx_optimizer_step(t.opt));
  CHECK(same_on_every_rank(t.param_bytes()));

  // An engine that reports a gradient twice in one round.
  ampx_tensor grad = nullptr;
  OK(ampx_tensor_grad(t.w2, &grad));
  ampx_tensor_release(grad);
  OK(ampx_grad_ready(t.w2));
  CHECK(ampx_grad_ready(t.w2) == AMPX_ERR_ORDER);
  CHECK(std::string(ampx_last_error()).find("reported final twice") != std::string::npos);
  OK(ampx_data_parallel_reduce(t.dp));
  OK(ampx_optimizer_step(t.opt));
  CHECK(same_on_every_rank(t.param_bytes()));

  // A gradient replaced behind the wrapper's back.
  ampx_tensor other = nullptr;
  const int64_t b2_shape[1] = {kOut};
  OK(ampx_tensor_zeros(t.ctx, AMPX_F32, 1, b2_shape, &other));
  OK(ampx_tensor_set_grad(t.b2, other));
  ampx_tensor_release(other);
  CHECK(ampx_grad_ready(t.b2) == AMPX_ERR_ORDER);
  CHECK(std::string(ampx_last_error()).find("no longer the bucket view") != std::string::npos);

  // The wrapper fixes the optimizer's param groups.
  CHECK(ampx_optimizer_add_group(t.opt, &t.w1, 1, 0.1, 0.0, nullptr) == AMPX_ERR_ORDER);
}

TEST_CASE("the C++ layer: Comm, DataParallel and its NoSync guard") {
  ampx::Context ctx;
  MPI_Comm world = MPI_COMM_WORLD;
  ampx::Comm comm = ampx::Comm::from_mpi(ctx, &world);
  CHECK(comm.rank() == g_rank);
  CHECK(comm.size() == g_world);
  const int64_t shape[1] = {3};
  auto filled = [&](double value) {
    ampx_tensor raw = nullptr;
    OK(ampx_tensor_zeros(ctx.get(), AMPX_F32, 1, shape, &raw));
    OK(ampx_tensor_fill(raw, value));
    return ampx::Tensor(raw);
  };
  ampx::Tensor w = filled(g_rank + 1.0), c = filled(g_rank + 1.0);
  OK(ampx_tensor_set_requires_grad(w.get(), 1));
  ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
  sgd.lr = 0.5;
  ampx::Optimizer opt = ampx::Optimizer::sgd(ctx, {&w}, sgd);
  ampx::DataParallel dp(comm, opt);  // w = rank 0's 1.0 everywhere
  auto backward = [&] {              // d/dw sum(w * c) = c = rank + 1
    OK(ampx_scope_push(ctx.get()));
    ampx_tensor product = nullptr, loss = nullptr;
    OK(ampx_mul(w.get(), c.get(), &product));
    OK(ampx_sum(product, &loss));
    OK(ampx_backward(loss, nullptr));
    OK(ampx_scope_pop(ctx.get()));
  };
  opt.zero_grad();
  {
    ampx::DataParallel::NoSync accumulate(dp);
    backward();
  }
  backward();
  opt.step();
  // The average over ranks of 2 (r + 1) is W + 1: w = 1 - 0.5 (W + 1).
  std::vector<float> values = to_floats(w.get());
  for (float v : values) CHECK(v == static_cast<float>(1.0 - 0.5 * (g_world + 1)));
  CHECK(dp.stats().reductions == 1);
  ampx_data_parallel_options bad = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  bad.zero_stage = 2;
  CHECK_THROWS_AS(ampx::DataParallel(comm, ampx::Optimizer::sgd(ctx, {&c}), bad), ampx::Error);
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A call every rank makes, `bad_rank` with its own wrong arguments: every
// rank must fail within a second with `status`, the bad rank with its own
// message (containing `own`), the others naming that rank and the status
// class. Returns this rank's message.
template <class Call>
std::string check_all_fail(int bad_rank, ampx_status status, const std::string& own,
                           const std::string& others, Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  const ampx_status got = call(g_rank == bad_rank);
  const double seconds = seconds_since(start);
  const std::string message = ampx_last_error();
  CAPTURE(message);
  CHECK(got == status);
  CHECK(seconds < 1.0);
  if (g_rank == bad_rank) {
    CHECK(contains(message, own));
  } else {
    CHECK(contains(message, "rank " + std::to_string(bad_rank) + " " + others));
    CHECK(contains(message, ampx_status_string(status)));
  }
  return message;
}

}  // namespace

TEST_CASE("one rank's bad argument to ampx_data_parallel_create fails every rank at once") {
  ampx_context ctx = nullptr;
  OK(ampx_context_create(nullptr, &ctx));
  MPI_Comm world = MPI_COMM_WORLD;
  ampx_comm comm = nullptr;
  OK(ampx_comm_from_mpi(ctx, &world, &comm));
  const int64_t shape[1] = {4};
  ampx_tensor p = nullptr;
  OK(ampx_tensor_zeros(ctx, AMPX_F32, 1, shape, &p));
  ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
  ampx_optimizer opt = nullptr, released = nullptr;
  OK(ampx_optimizer_create_sgd(ctx, &p, 1, &sgd, &opt));
  OK(ampx_optimizer_create_sgd(ctx, &p, 1, &sgd, &released));
  ampx_optimizer_release(released);
  struct Case {
    const char* name;
    ampx_status status;
    const char* own;
  };
  const Case cases[] = {
      {"a NULL optimizer", AMPX_ERR_INVALID_ARGUMENT, "argument 'optimizer' is NULL"},
      {"a tensor for the optimizer", AMPX_ERR_STALE_HANDLE, "is not an ampx_optimizer"},
      {"a released optimizer", AMPX_ERR_STALE_HANDLE, "already released"},
      {"a NULL out", AMPX_ERR_INVALID_ARGUMENT, "argument 'out' is NULL"},
      {"struct_size 0", AMPX_ERR_INVALID_ARGUMENT, "has struct_size 0"},
  };
  int index = 0;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const int bad_rank = index++ % g_world;  // rank 0 among the culprits
    check_all_fail(bad_rank, c.status, c.own, "could not join", [&](bool bad) {
      ampx_optimizer o = opt;
      ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
      ampx_data_parallel dp = nullptr;
      ampx_data_parallel* out = &dp;
      if (bad) {
        if (c.own == cases[0].own) o = nullptr;
        if (c.own == cases[1].own) o = reinterpret_cast<ampx_optimizer>(p);
        if (c.own == cases[2].own) o = released;
        if (c.own == cases[3].own) out = nullptr;
        if (c.own == cases[4].own) options.struct_size = 0;
      }
      const ampx_status status = ampx_data_parallel_create(comm, o, &options, out);
      CHECK(dp == nullptr);
      return status;
    });
  }
  // Nothing was changed: the same call with good arguments everywhere works.
  ampx_data_parallel dp = nullptr;
  OK(ampx_data_parallel_create(comm, opt, nullptr, &dp));
  ampx_data_parallel_release(dp);
  ampx_optimizer_release(opt);
  ampx_tensor_release(p);
  ampx_comm_release(comm);
  ampx_context_release(ctx);
}

TEST_CASE("ranks set up differently all fail at create, naming the first difference") {
  const int last = g_world - 1;
  const bool odd = g_rank == last;
  const std::string l = std::to_string(last);
  ampx_context ctx = nullptr;
  OK(ampx_context_create(nullptr, &ctx));
  MPI_Comm world = MPI_COMM_WORLD;
  ampx_comm comm = nullptr;
  OK(ampx_comm_from_mpi(ctx, &world, &comm));
  const int64_t shape[1] = {4};
  ampx_tensor a = nullptr, b = nullptr;
  OK(ampx_tensor_zeros(ctx, AMPX_F32, 1, shape, &a));
  OK(ampx_tensor_zeros(ctx, AMPX_F32, 1, shape, &b));
  // Each case sets up an optimizer (and scaler, options) that differs on the
  // last rank only; `expected` is the part of the message naming it.
  struct Setup {
    ampx_optimizer opt = nullptr;
    ampx_scaler scaler = nullptr;
    ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  };
  auto sgd = [&](double momentum) {
    ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
    o.lr = 0.1;
    o.momentum = momentum;
    ampx_optimizer opt = nullptr;
    OK(ampx_optimizer_create_sgd(ctx, &a, 1, &o, &opt));
    return opt;
  };
  auto attach = [&](Setup& s, int32_t growth_interval, double init_scale) {
    ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
    o.growth_interval = growth_interval;
    o.init_scale = init_scale;
    OK(ampx_scaler_create(ctx, &o, &s.scaler));
    OK(ampx_scaler_attach(s.scaler, s.opt));
  };
  struct Case {
    std::string expected;
    std::function<void(Setup&)> setup;
  };
  const std::vector<Case> cases = {
      {"bucket_bytes: rank " + l + " has 1000, rank 0 has 26214400",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         if (odd) s.options.bucket_bytes = 1000;
       }},
      {"first_bucket_bytes: rank " + l + " has 64, rank 0 has 1048576",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         if (odd) s.options.first_bucket_bytes = 64;
       }},
      {"average: rank " + l + " has 0, rank 0 has 1",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         s.options.average = odd ? 0 : 7;  // any non-zero value is 1
       }},
      {"reduce_in_fp32: rank " + l + " has 1, rank 0 has 0",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         if (odd) s.options.reduce_in_fp32 = -1;
       }},
      {"overlap: rank " + l + " has 0, rank 0 has 1",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         if (odd) s.options.overlap = 0;
       }},
      {"zero_stage: rank " + l + " has 1, rank 0 has 0",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         if (odd) s.options.zero_stage = 1;
       }},
      {"optimizer: rank " + l + " has AdamW, rank 0 has SGD",
       [&](Setup& s) {
         if (!odd) {
           s.opt = sgd(0.9);
           return;
         }
         ampx_adam_options o = AMPX_ADAMW_OPTIONS_INIT;
         OK(ampx_optimizer_create_adam(ctx, &a, 1, &o, &s.opt));
       }},
      {"momentum: rank " + l + " has 0.80000001192092896, rank 0 has 0.89999997615814209",
       [&](Setup& s) { s.opt = sgd(odd ? 0.8 : 0.9); }},
      {"param groups: rank " + l + " has 2, rank 0 has 1",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         if (odd) OK(ampx_optimizer_add_group(s.opt, &b, 1, 0.1, 0.0, nullptr));
       }},
      {"group 0 lr: rank " + l + " has 0.25, rank 0 has 0.10000000000000001",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         if (odd) OK(ampx_optimizer_set_lr(s.opt, 0, 0.25));
       }},
      {"group 0 schedule: rank " + l + " has cosine, rank 0 has constant",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         ampx_lr_schedule schedule = AMPX_LR_SCHEDULE_INIT;
         schedule.decay = AMPX_LR_COSINE;
         schedule.total_steps = 100;
         if (odd) OK(ampx_optimizer_set_lr_schedule(s.opt, 0, &schedule));
       }},
      {"scaler: rank " + l + " has attached, rank 0 has none",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         if (odd) attach(s, 2000, 65536.0);
       }},
      {"scaler growth_interval: rank " + l + " has 10, rank 0 has 2000",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         attach(s, odd ? 10 : 2000, 65536.0);
       }},
      {"scaler scale: rank " + l + " has 1024, rank 0 has 65536",
       [&](Setup& s) {
         s.opt = sgd(0.9);
         attach(s, 2000, odd ? 1024.0 : 65536.0);
       }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.expected);
    Setup s;
    c.setup(s);
    ampx_data_parallel dp = nullptr;
    const auto start = std::chrono::steady_clock::now();
    CHECK(ampx_data_parallel_create(comm, s.opt, &s.options, &dp) == AMPX_ERR_INVALID_ARGUMENT);
    CHECK(seconds_since(start) < 1.0);
    const std::string message = ampx_last_error();
    CAPTURE(message);
    CHECK(contains(message, c.expected));
    CHECK(dp == nullptr);
    ampx_scaler_release(s.scaler);
    ampx_optimizer_release(s.opt);
  }
  ampx_tensor_release(a);
  ampx_tensor_release(b);
  ampx_comm_release(comm);
  ampx_context_release(ctx);
}

TEST_CASE("step counts that differ before wrapping are rank 0's after it") {
  // Each rank steps its Adam optimizer a different number of times alone,
  // so the step counts (bias correction, the schedule's position) differ;
  // the wrapper broadcasts rank 0's with the parameters and moments, so one
  // step together leaves every rank bitwise equal.
  ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  Trainer t(Mode::Bf16, 5 + static_cast<uint64_t>(g_rank), false);
  ampx_lr_schedule schedule = AMPX_LR_SCHEDULE_INIT;
  schedule.warmup_steps = 10;
  schedule.decay = AMPX_LR_COSINE;
  schedule.total_steps = 40;
  OK(ampx_optimizer_set_lr_schedule(t.opt, 0, &schedule));
  for (int step = 0; step < 1 + 2 * g_rank; ++step) t.train_step(step);
  MPI_Comm world = MPI_COMM_WORLD;
  OK(ampx_comm_from_mpi(t.ctx, &world, &t.comm));
  OK(ampx_data_parallel_create(t.comm, t.opt, &options, &t.dp));
  for (ampx_tensor p : t.params()) {
    int64_t steps = 0;
    OK(ampx_optimizer_param_steps(t.opt, p, &steps));
    CHECK(steps == 1);  // rank 0's
  }
  for (int step = 0; step < 3; ++step) {
    t.train_step(100 + step);
    CHECK(same_on_every_rank(t.param_bytes()));
  }
  size_t bytes = 0;
  OK(ampx_optimizer_state_size(t.opt, &bytes));
  std::vector<unsigned char> state(bytes);
  OK(ampx_optimizer_save_state(t.opt, state.data(), bytes));
  CHECK(same_on_every_rank(state));
}

TEST_CASE("one rank's bad argument in a training step fails every rank at once") {
  const int last = g_world - 1;
  const int rows = kBatch / g_world;
  SUBCASE("unscale: the found-inf reduction carries the failure; the wrapper is then failed") {
    Trainer t(Mode::Fp16Scaler, 41, true);
    OK(ampx_scaler_attach(t.scaler, t.opt));
    t.train_step(0);
    OK(ampx_optimizer_zero_grad(t.opt));
    t.backward(1, g_rank * rows, rows);
    check_all_fail(last, AMPX_ERR_INVALID_ARGUMENT, "argument 'scaler' is NULL",
                   "failed its unscale", [&](bool bad) {
                     return ampx_scaler_unscale(bad ? nullptr : t.scaler, t.opt);
                   });
    // The ranks no longer agree where the iteration is: every collective
    // call through the wrapper fails on every rank, and nothing waits.
    const auto start = std::chrono::steady_clock::now();
    CHECK(ampx_scaler_unscale(t.scaler, t.opt) == AMPX_ERR_ORDER);
    CHECK(contains(ampx_last_error(), "wrapper failed earlier"));
    CHECK(ampx_data_parallel_reduce(t.dp) == AMPX_ERR_ORDER);
    CHECK(seconds_since(start) < 1.0);
    // A new wrapper (collective) trains on.
    ampx_data_parallel_release(t.dp);
    t.dp = nullptr;
    OK(ampx_data_parallel_create(t.comm, t.opt, nullptr, &t.dp));
    for (int step = 2; step < 4; ++step) t.train_step(step);
    CHECK(same_on_every_rank(t.param_bytes()));
  }
  SUBCASE("every rank failing alike leaves the wrapper usable: the call may be retried") {
    Trainer t(Mode::Fp16Scaler, 46, true);
    OK(ampx_scaler_attach(t.scaler, t.opt));
    OK(ampx_optimizer_zero_grad(t.opt));
    t.backward(0, g_rank * rows, rows);
    const auto start = std::chrono::steady_clock::now();
    CHECK(ampx_scaler_unscale(reinterpret_cast<ampx_scaler>(t.w1), t.opt) == AMPX_ERR_STALE_HANDLE);
    CHECK(seconds_since(start) < 1.0);
    CHECK(contains(ampx_last_error(), "is not an ampx_scaler"));
    t.update();
    CHECK(same_on_every_rank(t.param_bytes()));
    t.train_step(1);
    CHECK(same_on_every_rank(t.param_bytes()));
  }
  SUBCASE("a wrong-type scaler to ampx_scaler_step") {
    Trainer t(Mode::Fp16Scaler, 42, true);
    OK(ampx_scaler_attach(t.scaler, t.opt));
    OK(ampx_optimizer_zero_grad(t.opt));
    t.backward(0, g_rank * rows, rows);
    check_all_fail(last, AMPX_ERR_STALE_HANDLE, "is not an ampx_scaler", "failed its unscale",
                   [&](bool bad) {
                     return ampx_scaler_step(bad ? reinterpret_cast<ampx_scaler>(t.opt) : t.scaler,
                                             t.opt);
                   });
  }
  SUBCASE("ZeRO-1: the partial norms carry the failure of one rank's clipping") {
    ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
    options.zero_stage = 1;
    Trainer t(Mode::Bf16, 43, true, options);
    OK(ampx_optimizer_zero_grad(t.opt));
    t.backward(0, g_rank * rows, rows);
    check_all_fail(last, AMPX_ERR_NOT_SUPPORTED, "norm_type is 3", "failed its clipping",
                   [&](bool bad) {
                     ampx_tensor norm = nullptr;
                     const ampx_status status =
                         ampx_clip_grad_norm(t.opt, 1.0, bad ? 3.0 : 2.0, 0, &norm);
                     ampx_tensor_release(norm);
                     return status;
                   });
  }
  SUBCASE("ZeRO-1: the gathered parameters carry the failure of one rank's step") {
    ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
    options.zero_stage = 1;
    Trainer t(Mode::Fp16Scaler, 44, true, options);
    OK(ampx_optimizer_zero_grad(t.opt));
    t.backward(0, g_rank * rows, rows);
    OK(ampx_scaler_unscale(t.scaler, t.opt));
    check_all_fail(last, AMPX_ERR_INVALID_ARGUMENT, "argument 'scaler' is NULL",
                   "failed its optimizer step",
                   [&](bool bad) { return ampx_scaler_step(bad ? nullptr : t.scaler, t.opt); });
    // The failed rank sent its part unstepped: the replicas stay equal.
    CHECK(same_on_every_rank(t.param_bytes()));
  }
  SUBCASE("a call with no verdict of its own completes the reduction and fails alone") {
    // Gradients accumulated with synchronization off, then read: the
    // clipping's read reduces them. The last rank's clip_value is refused,
    // but it still makes the reduction the others wait for.
    Trainer t(Mode::Fp32, 45, true);
    OK(ampx_optimizer_zero_grad(t.opt));
    OK(ampx_data_parallel_set_sync(t.dp, 0));
    t.backward(0, g_rank * rows, rows);
    OK(ampx_data_parallel_set_sync(t.dp, 1));
    const auto start = std::chrono::steady_clock::now();
    const ampx_status status = ampx_clip_grad_value(t.opt, g_rank == last ? -1.0 : 0.5);
    CHECK(seconds_since(start) < 1.0);
    ampx_data_parallel_stats stats = AMPX_DATA_PARALLEL_STATS_INIT;
    OK(ampx_data_parallel_get_stats(t.dp, &stats));
    CHECK(stats.reductions == 1);
    if (g_rank == last) {
      CHECK(status == AMPX_ERR_INVALID_ARGUMENT);
      CHECK(contains(ampx_last_error(), "clip_value is -1"));
      OK(ampx_clip_grad_value(t.opt, 0.5));  // the retry: reduced already
    } else {
      CHECK(status == AMPX_OK);
    }
    OK(ampx_optimizer_step(t.opt));
    CHECK(same_on_every_rank(t.param_bytes()));
  }
}

TEST_CASE("ZeRO-1 with reduce_in_fp32 steps as ZeRO-0 does, bit for bit") {
  // Both round the fp32 sum to the gradient's dtype before the step (and
  // clipping is off: ZeRO-1 forms the norm from the ranks' partial norms).
  for (Mode mode : {Mode::Fp16Scaler, Mode::Bf16}) {
    const std::string mode_text = mode_name(mode);
    CAPTURE(mode_text);
    ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
    options.reduce_in_fp32 = 1;
    Trainer zero0(mode, 51, true, options);
    options.zero_stage = 1;
    Trainer zero1(mode, 51, true, options);
    zero0.max_norm = zero1.max_norm = 1e30;  // a coefficient of exactly 1
    int first_difference = -1;
    for (int step = 0; step < 20; ++step) {
      zero0.train_step(step);
      zero1.train_step(step);
      if (first_difference < 0 && zero0.param_bytes() != zero1.param_bytes())
        first_difference = step;
    }
    CHECK(first_difference == -1);
    CHECK(same_on_every_rank(zero1.param_bytes()));
  }
}

TEST_CASE("a rank that stops calling collectives: the others fail within the timeout") {
  // The last rank skips a step's reduction and joins it only after the
  // others gave up, so that every process ends normally: the abandoned
  // collective completes in the background while they wait in a barrier.
  const int last = g_world - 1;
  const double timeout = 1.0;
  const int rows = kBatch / g_world;
  Trainer t(Mode::Fp32, 61, true);
  OK(ampx_comm_set_timeout(t.comm, timeout));
  t.train_step(0);
  OK(ampx_optimizer_zero_grad(t.opt));
  if (g_rank != last) {
    // backward: the reduction of its buckets never completes.
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> x, y;
    global_batch(1, x, y);
    OK(ampx_scope_push(t.ctx));
    ampx_tensor bx = make_tensor(t.ctx, AMPX_F32, {rows, kIn}, x.data() + g_rank * rows * kIn);
    ampx_tensor by = make_tensor(t.ctx, AMPX_F32, {rows, kOut}, y.data() + g_rank * rows * kOut);
    ampx_tensor h = nullptr, out = nullptr, loss = nullptr;
    OK(ampx_linear(bx, t.w1, t.b1, AMPX_ACTIVATION_RELU, &h));
    OK(ampx_linear(h, t.w2, t.b2, AMPX_ACTIVATION_NONE, &out));
    OK(ampx_mse_loss(out, by, AMPX_REDUCTION_MEAN, &loss));
    CHECK(ampx_backward(loss, nullptr) == AMPX_ERR_DEVICE);
    const double waited = seconds_since(start);
    const std::string message = ampx_last_error();
    CAPTURE(message);
    CHECK(waited >= timeout);
    CHECK(waited < timeout + 1.0);
    CHECK(contains(message, "gradient reduction of ampx_backward did not complete within 1 s"));
    ampx_tensor_release(bx);
    ampx_tensor_release(by);
    OK(ampx_scope_pop(t.ctx));
    // Every later call on the communicator fails at once, naming it.
    const auto later = std::chrono::steady_clock::now();
    CHECK(ampx_optimizer_step(t.opt) == AMPX_ERR_DEVICE);
    CHECK(contains(ampx_last_error(), "failed earlier: gradient reduction of ampx_backward"));
    CHECK(ampx_data_parallel_reduce(t.dp) == AMPX_ERR_DEVICE);
    ampx_data_parallel dp = nullptr;
    CHECK(ampx_data_parallel_create(t.comm, t.opt, nullptr, &dp) == AMPX_ERR_DEVICE);
    CHECK(seconds_since(later) < 1.0);
    // What a program saves before it ends needs no collective.
    size_t bytes = 0;
    OK(ampx_optimizer_state_size(t.opt, &bytes));
    std::vector<unsigned char> state(bytes);
    OK(ampx_optimizer_save_state(t.opt, state.data(), bytes));
  } else {
    std::this_thread::sleep_for(std::chrono::duration<double>(timeout + 1.5));
    t.backward(1, g_rank * rows, rows);  // completes once the others' MPI progresses
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

namespace {

// A failed REQUIRE leaves its test case on this rank only, and the other
// ranks would wait for it in their next collective: end the job instead,
// as mpirun does for a rank that dies.
struct AbortOnFatal : doctest::IReporter {
  explicit AbortOnFatal(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override { abort_job(); }
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& in) override {
    if (in.m_failed && (in.m_at & doctest::assertType::is_require)) abort_job();
  }
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
  static void abort_job() {
    std::fprintf(stderr, "rank %d: a fatal check failed (above); ending the job\n", g_rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
};
REGISTER_LISTENER("abort_on_fatal", 1, AbortOnFatal);

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  doctest::Context context(argc, argv);
  // Only rank 0 prints the summary; every rank prints its failures.
  if (g_rank != 0) context.setOption("no-intro", true);
  const int failed = context.run();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed ? 1 : 0;
}
