// test_lr_schedule.cpp -- learning-rate schedules on the device (ampx.h
// section 17) through the public C API: ampx_lr_schedule_value against the
// closed forms written out here in double; SGD steps whose parameter moves
// by exactly the scheduled fp32 rate each step, for several groups with
// different schedules; steps the scaler skips leaving every schedule where
// it was; the step count and schedules surviving a state save/load (and
// version-1 states, from before schedules, still loading); every bad input
// refused with the field named and nothing changed. Runs on every test
// device (the CUDA emulator included). Values against torch.optim's
// schedulers are checked in bindings/python/tests/test_lr_schedule.py; a
// step replayed from a CUDA graph in test_cuda_graph_step.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "support.h"

using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

#define API_OK(call) REQUIRE_MESSAGE((call) == AMPX_OK, last_error())

constexpr double kPi = 3.14159265358979323846;

// The formulas of ampx.h section 17, as a reader of the header would write
// them (no reduction of the cosine's argument).
double reference_lr(const ampx_lr_schedule& s, double base, int64_t k) {
  if (k < s.warmup_steps)
    return base * (s.warmup_start_factor +
                   (1.0 - s.warmup_start_factor) * static_cast<double>(k) / s.warmup_steps);
  const double j = static_cast<double>(k - s.warmup_steps);
  const double t = static_cast<double>(s.total_steps - s.warmup_steps);
  switch (s.decay) {
    case AMPX_LR_LINEAR:
      return base * (1.0 + (s.end_factor - 1.0) * std::min(j, t) / t);
    case AMPX_LR_COSINE:
      return s.min_lr + (base - s.min_lr) * (1.0 + std::cos(kPi * j / t)) / 2.0;
    case AMPX_LR_STEP:
      return base * std::pow(s.gamma, std::floor(j / static_cast<double>(s.step_size)));
    default:
      return base;
  }
}

ampx_lr_schedule warmup_then(ampx_lr_decay decay, int64_t warmup, int64_t total) {
  ampx_lr_schedule s = AMPX_LR_SCHEDULE_INIT;
  s.warmup_steps = warmup;
  s.warmup_start_factor = 0.1;
  s.decay = decay;
  s.total_steps = total;
  s.end_factor = 0.05;
  s.min_lr = 1e-4;
  s.step_size = 7;
  s.gamma = 0.5;
  return s;
}

struct Optimizer {
  ampx_optimizer handle = nullptr;
  Optimizer() = default;
  // Plain SGD (no momentum or decay) over `param` at rate `lr`.
  Optimizer(ampx_context ctx, ampx_tensor param, double lr) {
    ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
    sgd.lr = lr;
    API_OK(ampx_optimizer_create_sgd(ctx, &param, 1, &sgd, &handle));
  }
  ~Optimizer() { ampx_optimizer_release(handle); }
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  operator ampx_optimizer() const { return handle; }
};

// Parameters of `count` zeros, each with a gradient of ones: an SGD step
// (no momentum or decay) subtracts exactly the group's fp32 rate.
struct Model {
  std::vector<Tensor> params, grads;
  Model(ampx_context ctx, int count)
      : params(static_cast<size_t>(count)), grads(static_cast<size_t>(count)) {
    for (int i = 0; i < count; ++i) {
      params[static_cast<size_t>(i)].handle =
          ampx_test::upload<float>(ctx, AMPX_F32, std::vector<float>(3, 0.0f));
      grads[static_cast<size_t>(i)].handle =
          ampx_test::upload<float>(ctx, AMPX_F32, std::vector<float>(3, 1.0f));
      API_OK(ampx_tensor_set_grad(params[static_cast<size_t>(i)], grads[static_cast<size_t>(i)]));
    }
  }
  float value(int i) { return ampx_test::download<float>(params[static_cast<size_t>(i)])[2]; }
  void set_grads(float g) {
    for (Tensor& t : grads) API_OK(ampx_tensor_fill(t, g));
  }
};

// Equal in the fields the decay uses (the others read back as defaults).
bool same_schedule(const ampx_lr_schedule& a, const ampx_lr_schedule& b) {
  if (a.warmup_steps != b.warmup_steps || a.warmup_start_factor != b.warmup_start_factor ||
      a.decay != b.decay)
    return false;
  switch (a.decay) {
    case AMPX_LR_LINEAR:
      return a.total_steps == b.total_steps && a.end_factor == b.end_factor;
    case AMPX_LR_COSINE:
      return a.total_steps == b.total_steps && a.min_lr == b.min_lr;
    case AMPX_LR_STEP:
      return a.step_size == b.step_size && a.gamma == b.gamma;
    default:
      return true;
  }
}

ampx_lr_schedule schedule_of(ampx_optimizer opt, int32_t group) {
  ampx_lr_schedule s = AMPX_LR_SCHEDULE_INIT;
  API_OK(ampx_optimizer_get_lr_schedule(opt, group, &s));
  return s;
}

int64_t step_count(ampx_optimizer opt) {
  int64_t steps = -1;
  API_OK(ampx_optimizer_step_count(opt, &steps));
  return steps;
}

}  // namespace

TEST_CASE("lr schedule: ampx_lr_schedule_value is each decay's closed form, warm-up first") {
  const double base = 3e-3;
  for (ampx_lr_decay decay : {AMPX_LR_CONSTANT, AMPX_LR_LINEAR, AMPX_LR_COSINE, AMPX_LR_STEP}) {
    for (int64_t warmup : {int64_t{0}, int64_t{1}, int64_t{25}}) {
      const ampx_lr_schedule s = warmup_then(decay, warmup, 400);
      CAPTURE(static_cast<int>(decay));
      CAPTURE(warmup);
      for (int64_t k = 0; k < 1000; ++k) {
        double lr = -1;
        API_OK(ampx_lr_schedule_value(&s, base, k, &lr));
        const double want = reference_lr(s, base, k);
        if (std::fabs(lr - want) > 1e-14 * base) {
          CAPTURE(k);
          CHECK(lr == doctest::Approx(want).epsilon(1e-12));
        }
      }
    }
  }
  // Landmarks, independent of the formulas' form.
  ampx_lr_schedule cosine = warmup_then(AMPX_LR_COSINE, 10, 110);
  double lr = 0;
  API_OK(ampx_lr_schedule_value(&cosine, base, 0, &lr));
  CHECK(lr == doctest::Approx(0.1 * base).epsilon(1e-15));
  API_OK(ampx_lr_schedule_value(&cosine, base, 10, &lr));
  CHECK(lr == doctest::Approx(base).epsilon(1e-15));
  API_OK(ampx_lr_schedule_value(&cosine, base, 60, &lr));
  CHECK(lr == doctest::Approx((base + 1e-4) / 2).epsilon(1e-14));
  API_OK(ampx_lr_schedule_value(&cosine, base, 110, &lr));
  CHECK(lr == doctest::Approx(1e-4).epsilon(1e-14));
  API_OK(ampx_lr_schedule_value(&cosine, base, 210, &lr));  // period 2T: back at the top
  CHECK(lr == doctest::Approx(base).epsilon(1e-14));
  ampx_lr_schedule linear = warmup_then(AMPX_LR_LINEAR, 0, 100);
  API_OK(ampx_lr_schedule_value(&linear, base, 5000, &lr));
  CHECK(lr == doctest::Approx(0.05 * base).epsilon(1e-15));
  ampx_lr_schedule step = warmup_then(AMPX_LR_STEP, 3, 0);
  API_OK(ampx_lr_schedule_value(&step, base, 3 + 7 * 4 + 6, &lr));
  CHECK(lr == base / 16);
  // A schedule far along keeps its argument exact: cosine 2^30 periods on.
  cosine.total_steps = cosine.warmup_steps + 1000;
  API_OK(ampx_lr_schedule_value(&cosine, base, 10 + 2000 * (int64_t{1} << 30) + 500, &lr));
  CHECK(lr == doctest::Approx((base + 1e-4) / 2).epsilon(1e-12));
}

TEST_CASE("lr schedule: each group steps with its own scheduled fp32 rate, on the device") {
  Ctx ctx;
  Model model(ctx, 3);
  ampx_tensor first = model.params[0];
  Optimizer opt(ctx, first, 0.01);
  ampx_tensor second = model.params[1], third = model.params[2];
  API_OK(ampx_optimizer_add_group(opt, &second, 1, 0.02, 0.0, nullptr));
  API_OK(ampx_optimizer_add_group(opt, &third, 1, 0.03, 0.0, nullptr));
  const ampx_lr_schedule cosine = warmup_then(AMPX_LR_COSINE, 10, 60);
  const ampx_lr_schedule step = warmup_then(AMPX_LR_STEP, 4, 0);
  API_OK(ampx_optimizer_set_lr_schedule(opt, 0, &cosine));
  API_OK(ampx_optimizer_set_lr_schedule(opt, 1, &step));
  // Group 2 keeps its constant rate.
  const double bases[3] = {0.01, 0.02, 0.03};
  const ampx_lr_schedule schedules[3] = {cosine, step, AMPX_LR_SCHEDULE_INIT};
  float want[3] = {0, 0, 0};
  for (int64_t k = 0; k < 150; ++k) {
    API_OK(ampx_optimizer_step(opt));
    for (int g = 0; g < 3; ++g) {
      want[g] -= static_cast<float>(reference_lr(schedules[g], bases[g], k));
      if (model.value(g) != want[g]) {
        CAPTURE(k);
        CAPTURE(g);
        CHECK(model.value(g) == want[g]);
      }
    }
  }
  CHECK(step_count(opt) == 150);
  CHECK(same_schedule(schedule_of(opt, 0), cosine));
  CHECK(same_schedule(schedule_of(opt, 1), step));
  CHECK(same_schedule(schedule_of(opt, 2), AMPX_LR_SCHEDULE_INIT));
  double lr = 0;
  API_OK(ampx_optimizer_get_lr(opt, 0, &lr));
  CHECK(lr == 0.01);  // the base, as set
  // A constant group takes a new rate beside scheduled ones.
  API_OK(ampx_optimizer_set_lr(opt, 2, 0.0625));
  API_OK(ampx_optimizer_step(opt));
  want[2] -= 0.0625f;
  want[1] -= static_cast<float>(reference_lr(step, 0.02, 150));
  want[0] -= static_cast<float>(reference_lr(cosine, 0.01, 150));
  CHECK(model.value(2) == want[2]);
  CHECK(model.value(1) == want[1]);

  // set_lr changes the base the schedule scales; a constant schedule again
  // gives the group its base rate.
  API_OK(ampx_optimizer_set_lr(opt, 0, 0.5));
  API_OK(ampx_optimizer_step(opt));
  want[0] -= static_cast<float>(reference_lr(cosine, 0.5, 151));
  CHECK(model.value(0) == want[0]);
  API_OK(ampx_optimizer_set_lr_schedule(opt, 0, nullptr));
  API_OK(ampx_optimizer_step(opt));
  want[0] -= 0.5f;
  CHECK(model.value(0) == want[0]);
  CHECK(same_schedule(schedule_of(opt, 0), AMPX_LR_SCHEDULE_INIT));
}

TEST_CASE("lr schedule: a step the scaler skips leaves the schedule where it was") {
  Ctx ctx;
  Model model(ctx, 1);
  ampx_tensor p = model.params[0];
  Optimizer opt(ctx, p, 0.1);
  const ampx_lr_schedule linear = warmup_then(AMPX_LR_LINEAR, 3, 12);
  API_OK(ampx_optimizer_set_lr_schedule(opt, 0, &linear));
  ampx_scaler_options scaling = AMPX_SCALER_OPTIONS_INIT;
  scaling.init_scale = 1.0;
  ampx_scaler scaler = nullptr;
  API_OK(ampx_scaler_create(ctx, &scaling, &scaler));
  float want = 0;
  int64_t taken = 0;
  double scale = 1.0;
  for (int i = 0; i < 20; ++i) {
    const bool overflow = i == 2 || i == 5 || i == 6;
    CAPTURE(i);
    // The gradient, once unscaled, is 1 (or inf).
    model.set_grads(overflow ? INFINITY : static_cast<float>(scale));
    API_OK(ampx_scaler_unscale(scaler, opt));
    API_OK(ampx_scaler_step(scaler, opt));
    API_OK(ampx_scaler_update(scaler));
    if (!overflow) want -= static_cast<float>(reference_lr(linear, 0.1, taken++));
    CHECK(model.value(0) == want);
    CHECK(step_count(opt) == taken);
    API_OK(ampx_scaler_get_scale(scaler, &scale));
  }
  CHECK(taken == 17);
  ampx_scaler_release(scaler);
}

TEST_CASE("lr schedule: the step count and the schedules travel with the optimizer's state") {
  Ctx ctx;
  Model a(ctx, 2), b(ctx, 2);
  Optimizer opt_a, opt_b;
  ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
  adam.lr = 0.01;
  ampx_tensor pa[2] = {a.params[0], a.params[1]}, pb[2] = {b.params[0], b.params[1]};
  API_OK(ampx_optimizer_create_adam(ctx, pa, 1, &adam, &opt_a.handle));
  API_OK(ampx_optimizer_add_group(opt_a, pa + 1, 1, 0.02, 0.0, nullptr));
  API_OK(ampx_optimizer_create_adam(ctx, pb, 1, &adam, &opt_b.handle));
  API_OK(ampx_optimizer_add_group(opt_b, pb + 1, 1, 0.02, 0.0, nullptr));
  const ampx_lr_schedule cosine = warmup_then(AMPX_LR_COSINE, 5, 40);
  const ampx_lr_schedule step = warmup_then(AMPX_LR_STEP, 2, 0);
  API_OK(ampx_optimizer_set_lr_schedule(opt_a, 0, &cosine));
  API_OK(ampx_optimizer_set_lr_schedule(opt_a, 1, &step));
  for (int k = 0; k < 7; ++k) API_OK(ampx_optimizer_step(opt_a));

  size_t bytes = 0;
  API_OK(ampx_optimizer_state_size(opt_a, &bytes));
  std::vector<unsigned char> state(bytes);
  API_OK(ampx_optimizer_save_state(opt_a, state.data(), bytes));
  API_OK(ampx_optimizer_load_state(opt_b, state.data(), bytes));
  CHECK(step_count(opt_b) == 7);
  CHECK(same_schedule(schedule_of(opt_b, 0), cosine));
  CHECK(same_schedule(schedule_of(opt_b, 1), step));
  for (int k = 0; k < 30; ++k) {
    API_OK(ampx_optimizer_step(opt_a));
    API_OK(ampx_optimizer_step(opt_b));
  }
  for (int i = 0; i < 2; ++i)
    CHECK(ampx_test::download<float>(a.params[static_cast<size_t>(i)]) ==
          ampx_test::download<float>(b.params[static_cast<size_t>(i)]));

  SUBCASE("a version-1 state (no schedules) loads, counting the most steps a parameter took") {
    // Version 1 is version 2 without the count and the schedules, which
    // follow the header (88 bytes) and the groups (16 bytes each); the
    // FNV-1a checksum closes the buffer.
    constexpr size_t kHeader = 88, kGroups = 2 * 16, kSchedules = 8 + 2 * 64;
    std::vector<unsigned char> v1(state.begin(), state.begin() + kHeader + kGroups);
    v1.insert(v1.end(), state.begin() + kHeader + kGroups + kSchedules, state.end() - 8);
    const uint32_t version = 1;
    std::memcpy(v1.data() + 8, &version, sizeof version);
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char byte : v1) hash = (hash ^ byte) * 0x100000001b3ull;
    v1.resize(v1.size() + 8);
    std::memcpy(v1.data() + v1.size() - 8, &hash, sizeof hash);
    API_OK(ampx_optimizer_load_state(opt_b, v1.data(), v1.size()));
    CHECK(step_count(opt_b) == 7);
    CHECK(same_schedule(schedule_of(opt_b, 0), AMPX_LR_SCHEDULE_INIT));
    CHECK(same_schedule(schedule_of(opt_b, 1), AMPX_LR_SCHEDULE_INIT));
  }
  SUBCASE("a schedule damaged in the state is refused and nothing changes") {
    // warmup_steps of group 0's schedule, its sixth word, becomes negative;
    // the checksum is made to match so that the schedule check is reached.
    const size_t at = 88 + 2 * 16 + 8 + 5 * 8;
    const int64_t bad = -3;
    std::memcpy(state.data() + at, &bad, sizeof bad);
    uint64_t hash = 0xcbf29ce484222325ull;
    for (size_t i = 0; i + 8 < state.size(); ++i) hash = (hash ^ state[i]) * 0x100000001b3ull;
    std::memcpy(state.data() + state.size() - 8, &hash, sizeof hash);
    ampx_optimizer fresh_handle = nullptr;
    API_OK(ampx_optimizer_create_adam(ctx, pb, 1, &adam, &fresh_handle));
    Optimizer fresh;
    fresh.handle = fresh_handle;
    API_OK(ampx_optimizer_add_group(fresh, pb + 1, 1, 0.02, 0.0, nullptr));
    CHECK_FAILS_WITH(ampx_optimizer_load_state(fresh, state.data(), state.size()), AMPX_ERR_CORRUPT,
                     "warmup_steps");
    CHECK(step_count(fresh) == 0);
    CHECK(same_schedule(schedule_of(fresh, 0), AMPX_LR_SCHEDULE_INIT));
  }
}

TEST_CASE("lr schedule: bad schedules are refused, naming the field, and change nothing") {
  Ctx ctx;
  Model model(ctx, 1);
  Optimizer opt(ctx, model.params[0], 1e-3);
  const ampx_lr_schedule good = warmup_then(AMPX_LR_COSINE, 4, 20);
  API_OK(ampx_optimizer_set_lr_schedule(opt, 0, &good));

  struct Bad {
    const char* field;
    ampx_lr_schedule schedule;
  };
  std::vector<Bad> bad;
  auto add = [&](const char* field, auto edit) {
    ampx_lr_schedule s = good;
    edit(s);
    bad.push_back({field, s});
  };
  add("warmup_steps", [](ampx_lr_schedule& s) { s.warmup_steps = -1; });
  add("total_steps", [](ampx_lr_schedule& s) { s.total_steps = 0; });
  add("total_steps", [](ampx_lr_schedule& s) { s.total_steps = s.warmup_steps; });
  add("total_steps", [](ampx_lr_schedule& s) {
    s.decay = AMPX_LR_LINEAR;
    s.total_steps = 0;
  });
  add("warmup_start_factor", [](ampx_lr_schedule& s) { s.warmup_start_factor = 1.5; });
  add("warmup_start_factor", [](ampx_lr_schedule& s) { s.warmup_start_factor = NAN; });
  add("end_factor", [](ampx_lr_schedule& s) {
    s.decay = AMPX_LR_LINEAR;
    s.end_factor = -0.1;
  });
  add("min_lr", [](ampx_lr_schedule& s) { s.min_lr = -1e-3; });
  add("min_lr", [](ampx_lr_schedule& s) { s.min_lr = 1e300; });
  add("step_size", [](ampx_lr_schedule& s) {
    s.decay = AMPX_LR_STEP;
    s.step_size = 0;
  });
  add("gamma", [](ampx_lr_schedule& s) {
    s.decay = AMPX_LR_STEP;
    s.gamma = 0.0;
  });
  add("gamma", [](ampx_lr_schedule& s) {
    s.decay = AMPX_LR_STEP;
    s.gamma = 2.0;
  });
  add("decay", [](ampx_lr_schedule& s) { s.decay = static_cast<ampx_lr_decay>(7); });
  add("struct_size", [](ampx_lr_schedule& s) { s.struct_size = 0; });
  for (const Bad& b : bad) {
    CAPTURE(b.field);
    CHECK_FAILS_WITH(ampx_optimizer_set_lr_schedule(opt, 0, &b.schedule), AMPX_ERR_INVALID_ARGUMENT,
                     b.field);
    double lr = 0;
    CHECK_FAILS_WITH(ampx_lr_schedule_value(&b.schedule, 0.1, 3, &lr), AMPX_ERR_INVALID_ARGUMENT,
                     b.field);
    CHECK(same_schedule(schedule_of(opt, 0), good));
  }
  // Fields a decay does not use are not checked.
  ampx_lr_schedule unused = good;
  unused.gamma = 7.0;
  unused.step_size = -4;
  unused.end_factor = 9.0;
  API_OK(ampx_optimizer_set_lr_schedule(opt, 0, &unused));
  const ampx_lr_schedule read = schedule_of(opt, 0);
  CHECK(same_schedule(read, good));
  CHECK(read.gamma == 0.1);  // unused: the defaults
  CHECK(read.step_size == 1);
  CHECK(read.end_factor == 0.0);

  CHECK_FAILS_WITH(ampx_optimizer_set_lr_schedule(opt, 1, &good), AMPX_ERR_INVALID_ARGUMENT,
                   "group");
  CHECK_FAILS_WITH(ampx_optimizer_set_lr_schedule(opt, -1, &good), AMPX_ERR_INVALID_ARGUMENT,
                   "group");
  CHECK_FAILS_WITH(ampx_optimizer_get_lr_schedule(opt, 0, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "out");
  ampx_lr_schedule tiny = AMPX_LR_SCHEDULE_INIT;
  tiny.struct_size = 1;
  CHECK_FAILS_WITH(ampx_optimizer_get_lr_schedule(opt, 0, &tiny), AMPX_ERR_INVALID_ARGUMENT,
                   "struct_size");
  CHECK_FAILS_WITH(ampx_optimizer_step_count(opt, nullptr), AMPX_ERR_INVALID_ARGUMENT, "steps");
  CHECK_FAILS_WITH(ampx_optimizer_set_lr_schedule(nullptr, 0, &good), AMPX_ERR_INVALID_ARGUMENT,
                   "optimizer");
  double lr = 0;
  CHECK_FAILS_WITH(ampx_lr_schedule_value(&good, 0.1, -1, &lr), AMPX_ERR_INVALID_ARGUMENT, "step");
  CHECK_FAILS_WITH(ampx_lr_schedule_value(&good, -0.1, 0, &lr), AMPX_ERR_INVALID_ARGUMENT, "lr");
  CHECK_FAILS_WITH(ampx_lr_schedule_value(nullptr, 0.1, 0, &lr), AMPX_ERR_INVALID_ARGUMENT,
                   "schedule");
  CHECK_FAILS_WITH(ampx_lr_schedule_value(&good, 0.1, 0, nullptr), AMPX_ERR_INVALID_ARGUMENT, "lr");
  // The schedule is still the good one, and steps follow it.
  API_OK(ampx_optimizer_step(opt));
  CHECK(model.value(0) == -static_cast<float>(reference_lr(good, 1e-3, 0)));
}

TEST_CASE("lr schedule: a group added later follows the optimizer's count") {
  Ctx ctx;
  Model model(ctx, 2);
  ampx_tensor p0 = model.params[0], p1 = model.params[1];
  Optimizer opt(ctx, p0, 0.25);
  const ampx_lr_schedule step = warmup_then(AMPX_LR_STEP, 0, 0);
  API_OK(ampx_optimizer_set_lr_schedule(opt, 0, &step));
  for (int k = 0; k < 9; ++k) API_OK(ampx_optimizer_step(opt));
  int32_t group = -1;
  API_OK(ampx_optimizer_add_group(opt, &p1, 1, 0.5, 0.0, &group));
  CHECK(group == 1);
  CHECK(same_schedule(schedule_of(opt, 1), AMPX_LR_SCHEDULE_INIT));
  API_OK(ampx_optimizer_set_lr_schedule(opt, 1, &step));
  API_OK(ampx_optimizer_step(opt));  // count 9: floor(9 / 7) = 1 decay
  CHECK(model.value(1) == -0.25f);
  CHECK(step_count(opt) == 10);
}
