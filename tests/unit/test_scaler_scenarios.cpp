// Loss scaling scenarios after PyTorch's GradScaler suite, on the engine path:
// the test plays a host program with its own backward pass (small models
// evaluated here in double), which writes its gradients multiplied by the
// current scale into F16, BF16 or F32 gradient tensors attached to the
// parameters, then hands them to ampx_scaler_step / ampx_scaler_update.
//
// The yardstick is an fp32 control: the same parameters and optimizer, fed
// the same gradients unscaled in fp32 through ampx_optimizer_step, skipping
// the iterations the host knows overflowed. Scales here are powers of two, so
// value/scale is exact in fp32 for every value a gradient tensor holds: the
// scaled path must then reproduce the control BIT for bit, and the control
// itself is checked against the double-precision reference of
// training_fixture.h within fp32 tolerance (kRunUlps roundings of the
// magnitude; see test_optimizer_api.cpp for the bound).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "training_fixture.h"

using namespace ampx_fixture;
using ampx_test::contains;
using ampx_test::Ctx;

namespace {

// A run of ~12 steps of a few fp32 roundings each (sqrt growth), with margin.
constexpr double kRunUlps = 32;

using Grads = std::vector<std::vector<double>>;

// ---- handles ---------------------------------------------------------------------

struct Optimizer {
  ampx_optimizer handle = nullptr;
  explicit Optimizer(ampx_optimizer o = nullptr) : handle(o) {}
  ~Optimizer() { ampx_optimizer_release(handle); }
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  operator ampx_optimizer() const { return handle; }
};

struct Scaler {
  ampx_scaler handle = nullptr;
  explicit Scaler(ampx_context ctx, const ampx_scaler_options& o) {
    REQUIRE_MESSAGE(ampx_scaler_create(ctx, &o, &handle) == AMPX_OK, last_error());
  }
  ~Scaler() { ampx_scaler_release(handle); }
  Scaler(const Scaler&) = delete;
  Scaler& operator=(const Scaler&) = delete;
  operator ampx_scaler() const { return handle; }
};

ampx_scaler_options scaler_options(double init, int32_t interval) {
  ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
  o.init_scale = init;
  o.growth_interval = interval;
  return o;
}

using OptimizerFactory = std::function<ampx_optimizer(ampx_context, const std::vector<ampx_tensor>&)>;

OptimizerFactory adam_factory(ampx_adam_options o) {
  return [o](ampx_context ctx, const std::vector<ampx_tensor>& params) {
    ampx_optimizer opt = nullptr;
    REQUIRE_MESSAGE(ampx_optimizer_create_adam(ctx, params.data(), params.size(), &o, &opt) ==
                        AMPX_OK,
                    last_error());
    return opt;
  };
}

OptimizerFactory sgd_factory(ampx_sgd_options o) {
  return [o](ampx_context ctx, const std::vector<ampx_tensor>& params) {
    ampx_optimizer opt = nullptr;
    REQUIRE_MESSAGE(ampx_optimizer_create_sgd(ctx, params.data(), params.size(), &o, &opt) ==
                        AMPX_OK,
                    last_error());
    return opt;
  };
}

ampx_adam_options adamw(double lr) {
  ampx_adam_options o = AMPX_ADAMW_OPTIONS_INIT;
  o.lr = lr;
  return o;
}

ampx_sgd_options sgd_momentum(double lr) {
  ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
  o.lr = lr;
  o.momentum = 0.9;
  o.weight_decay = 1e-3;
  return o;
}

// ---- host models (the engine's own forward and backward, in double) ----------------

struct Model {
  virtual ~Model() = default;
  virtual std::vector<size_t> sizes() const = 0;
  // Gradients of the loss of mini-batch `batch` at parameter values `p`.
  virtual Grads grads(int batch, const Grads& p) const = 0;
};

// Linear regression y = x.w + b on a pool of 64 examples, loss
// 0.5 * mean((x.w + b - y)^2) over batches of 8. Parameters: w[d], b[1].
struct Regression : Model {
  size_t d;
  std::vector<std::vector<double>> x;
  std::vector<double> y;

  Regression(size_t dims, uint64_t seed) : d(dims) {
    Rng rng(seed);
    const std::vector<double> w = rng.vector(d, -2, 2);
    const double b = rng.uniform(-1, 1);
    for (int i = 0; i < 64; ++i) {
      x.push_back(rng.vector(d, -1, 1));
      double t = b + rng.uniform(-0.05, 0.05);
      for (size_t j = 0; j < d; ++j) t += x.back()[j] * w[j];
      y.push_back(t);
    }
  }
  std::vector<size_t> sizes() const override { return {d, 1}; }
  Grads grads(int batch, const Grads& p) const override {
    Grads g = {std::vector<double>(d, 0.0), {0.0}};
    for (int k = 0; k < 8; ++k) {
      const size_t row = static_cast<size_t>(batch * 8 + k) % x.size();
      double r = p[1][0] - y[row];
      for (size_t j = 0; j < d; ++j) r += x[row][j] * p[0][j];
      for (size_t j = 0; j < d; ++j) g[0][j] += r * x[row][j] / 8;
      g[1][0] += r / 8;
    }
    return g;
  }
};

// Two layers: h = tanh(W1 x), out = w2.h, loss 0.5 * mean((out - y)^2) over
// batches of 4. Parameters: W1[hidden * in] (row-major), w2[hidden].
struct Mlp : Model {
  size_t in = 3, hidden = 5;
  std::vector<std::vector<double>> x;
  std::vector<double> y;

  explicit Mlp(uint64_t seed) {
    Rng rng(seed);
    for (int i = 0; i < 32; ++i) {
      x.push_back(rng.vector(in, -1, 1));
      y.push_back(std::sin(2 * x.back()[0]) + x.back()[1] * x.back()[2]);
    }
  }
  std::vector<size_t> sizes() const override { return {hidden * in, hidden}; }
  Grads grads(int batch, const Grads& p) const override {
    Grads g = {std::vector<double>(hidden * in, 0.0), std::vector<double>(hidden, 0.0)};
    for (int k = 0; k < 4; ++k) {
      const std::vector<double>& xi = x[static_cast<size_t>(batch * 4 + k) % x.size()];
      const double yi = y[static_cast<size_t>(batch * 4 + k) % x.size()];
      std::vector<double> h(hidden);
      double out = 0;
      for (size_t j = 0; j < hidden; ++j) {
        double a = 0;
        for (size_t i = 0; i < in; ++i) a += p[0][j * in + i] * xi[i];
        h[j] = std::tanh(a);
        out += p[1][j] * h[j];
      }
      const double r = (out - yi) / 4;
      for (size_t j = 0; j < hidden; ++j) {
        g[1][j] += r * h[j];
        const double back = r * p[1][j] * (1 - h[j] * h[j]);
        for (size_t i = 0; i < in; ++i) g[0][j * in + i] += back * xi[i];
      }
    }
    return g;
  }
};

// Independent quadratic bowls 0.5 * a (p - t)^2 per element plus a gradient
// noise that depends on the batch: any list of parameter sizes.
struct Bowls : Model {
  std::vector<size_t> n;
  Grads target, curvature;

  Bowls(std::vector<size_t> sizes_, uint64_t seed) : n(std::move(sizes_)) {
    Rng rng(seed);
    for (size_t s : n) {
      target.push_back(rng.vector(s, -1, 1));
      curvature.push_back(rng.vector(s, 0.2, 2));
    }
  }
  std::vector<size_t> sizes() const override { return n; }
  Grads grads(int batch, const Grads& p) const override {
    Rng noise(9000 + static_cast<uint64_t>(batch));
    Grads g(n.size());
    for (size_t k = 0; k < n.size(); ++k)
      for (size_t i = 0; i < n[k]; ++i)
        g[k].push_back(curvature[k][i] * (p[k][i] - target[k][i]) + noise.uniform(-0.1, 0.1));
    return g;
  }
};

// ---- one model trained through a scaler, next to its fp32 control -------------------

struct Trainee {
  ampx_context ctx;
  const Model& model;
  ampx_dtype grad_dtype;
  std::vector<ampx_tensor> params, control_params;  // owned
  std::vector<ampx_tensor> grads, control_grads;    // borrowed from the params
  Optimizer opt, control;
  std::vector<std::vector<unsigned char>> written;  // what the host last wrote

  Trainee(ampx_context c, const Model& m, const std::vector<ampx_dtype>& param_dtypes,
          ampx_dtype grads_dtype, const OptimizerFactory& make_optimizer, uint64_t seed)
      : ctx(c), model(m), grad_dtype(grads_dtype) {
    Rng rng(seed);
    const std::vector<size_t> sizes = model.sizes();
    REQUIRE(sizes.size() == param_dtypes.size());
    for (size_t k = 0; k < sizes.size(); ++k) {
      const std::vector<double> init = rng.vector(sizes[k], -1, 1);
      params.push_back(make(ctx, param_dtypes[k], init));
      control_params.push_back(make(ctx, param_dtypes[k], init));
      grads.push_back(attach_grad(ctx, params.back(), grad_dtype));
      control_grads.push_back(attach_grad(ctx, control_params.back(), AMPX_F32));
    }
    opt.handle = make_optimizer(ctx, params);
    control.handle = make_optimizer(ctx, control_params);
  }
  ~Trainee() {
    for (ampx_tensor t : params) ampx_tensor_release(t);
    for (ampx_tensor t : control_params) ampx_tensor_release(t);
  }
  Trainee(const Trainee&) = delete;
  Trainee& operator=(const Trainee&) = delete;

  // The host's forward and backward at the parameters as they are stored.
  Grads backward(int batch) const {
    Grads values;
    for (ampx_tensor p : params) values.push_back(values_of(p));
    return model.grads(batch, values);
  }

  // Writes g * scale into the gradient tensors (rounded to their type; the
  // first element of the last parameter replaced by `poison` unless it is
  // 0). Returns the values the tensors then hold divided by the scale -- the
  // unscaled gradient, exact for a power-of-two scale -- and sets *overflow
  // when one of them is not finite.
  Grads write_scaled(const Grads& g, double scale, double poison, bool* overflow) {
    Grads effective(g.size());
    written.assign(g.size(), {});
    *overflow = false;
    for (size_t k = 0; k < g.size(); ++k) {
      std::vector<double> scaled(g[k].size());
      for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = g[k][i] * scale;
      if (poison != 0 && k + 1 == g.size()) scaled[0] = poison;
      written[k] = encode(grad_dtype, scaled);
      REQUIRE(ampx_tensor_copy_from_host(grads[k], written[k].data(), written[k].size()) ==
              AMPX_OK);
      for (double v : decode(grad_dtype, written[k])) {
        effective[k].push_back(v / scale);
        if (!std::isfinite(v)) *overflow = true;
      }
    }
    return effective;
  }

  void control_step(const Grads& effective) {
    for (size_t k = 0; k < effective.size(); ++k) write(control_grads[k], effective[k]);
    REQUIRE_MESSAGE(ampx_optimizer_step(control) == AMPX_OK, last_error());
  }

  void check_matches_control() const {
    CHECK(snapshot(opt, params) == snapshot(control, control_params));
  }

  // Low-precision gradients are unscaled into fp32 copies, never in place.
  void check_grads_untouched() const {
    if (grad_dtype == AMPX_F32) return;
    for (size_t k = 0; k < grads.size(); ++k) CHECK(bytes_of(grads[k]) == written[k]);
  }

  bool last_taken() const {
    int32_t taken = -1;
    REQUIRE_MESSAGE(ampx_optimizer_last_step_taken(opt, &taken) == AMPX_OK, last_error());
    return taken == 1;
  }
};

int32_t found_inf(ampx_scaler s, ampx_optimizer o) {
  int32_t found = -1;
  REQUIRE_MESSAGE(ampx_scaler_found_inf(s, o, &found) == AMPX_OK, last_error());
  return found;
}

void check_close(const std::vector<double>& have, const std::vector<double>& want, double ulps,
                 double magnitude) {
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < have.size(); ++i) {
    INFO("element " << i << ": " << have[i] << " vs reference " << want[i]);
    CHECK(close(have[i], want[i], ulps, magnitude));
  }
}

std::vector<double> master_values(ampx_optimizer opt, ampx_tensor param) {
  Tensor master(state_of(opt, param, AMPX_STATE_MASTER));
  return values_of(master);
}

}  // namespace

// ---- 1. scaled training with an injected inf step vs the fp32 control ------------------

TEST_CASE("scaler: scaled f16/bf16/f32 grads with AdamW and one inf step match an fp32 control that skips it") {
  const Regression task(6, 11);
  for (ampx_dtype grad_dtype : {AMPX_F16, AMPX_BF16, AMPX_F32})
    for (ampx_dtype param_dtype : {AMPX_F32, AMPX_F16}) {
      CAPTURE(ampx_dtype_name(grad_dtype));
      CAPTURE(ampx_dtype_name(param_dtype));
      Ctx ctx;
      ampx_adam_options o = adamw(0.05);
      o.weight_decay = 0.02;
      Trainee t(ctx, task, {param_dtype, param_dtype}, grad_dtype, adam_factory(o), 3);
      Scaler scaler(ctx, scaler_options(1024, 3));
      ScalerRef sref = ScalerRef::from(scaler_options(1024, 3));
      std::vector<RefParam> ref;
      for (ampx_tensor p : t.params) ref.emplace_back(values_of(p));
      const int kPoisoned = 5;
      int overflows = 0;
      for (int it = 0; it < 12; ++it) {
        CAPTURE(it);
        const double scale = scale_of(scaler);
        const Grads g = t.backward(it);
        bool overflow = false;
        const Grads eff = t.write_scaled(g, scale, it == kPoisoned ? INFINITY : 0.0, &overflow);
        CHECK(overflow == (it == kPoisoned));  // the scale stays small enough here
        const Snapshot before = snapshot(t.opt, t.params);
        REQUIRE_MESSAGE(ampx_scaler_step(scaler, t.opt) == AMPX_OK, last_error());
        CHECK(found_inf(scaler, t.opt) == (overflow ? 1 : 0));
        REQUIRE_MESSAGE(ampx_scaler_update(scaler) == AMPX_OK, last_error());
        sref.update(overflow);
        CHECK(t.last_taken() == !overflow);
        t.check_grads_untouched();
        if (overflow) {
          ++overflows;
          CHECK(snapshot(t.opt, t.params) == before);
        } else {
          t.control_step(eff);
          for (size_t k = 0; k < ref.size(); ++k)
            adam_ref_step(ref[k], eff[k], adam_ref_of(o), o.lr, o.weight_decay);
        }
        t.check_matches_control();
      }
      check_scaler_matches(scaler, sref);
      CHECK(overflows == 1);
      for (size_t k = 0; k < ref.size(); ++k) {
        CHECK(steps_of(t.opt, t.params[k]) == 11);
        check_close(master_values(t.opt, t.params[k]), ref[k].p, kRunUlps, 2.0);
        check_param_is_rounded_master(t.opt, t.params[k]);
      }
    }
}

// ---- 2. the update rule ----------------------------------------------------------------

namespace {

// A scaler driven by a script of iterations: 'C' clean, 'I' an inf gradient,
// 'N' a NaN gradient. After every update the scaler's whole state is
// compared with the reference rule.
struct ScriptRig {
  Ctx ctx;
  Tensor p;
  Optimizer opt;
  ampx_tensor g = nullptr;
  Scaler scaler;
  ScalerRef ref;

  explicit ScriptRig(const ampx_scaler_options& o)
      : p(make(ctx, AMPX_F32, {0.5})), scaler(ctx, o), ref(ScalerRef::from(o)) {
    ampx_sgd_options so = AMPX_SGD_OPTIONS_INIT;
    so.lr = 0.0;
    ampx_tensor list[] = {p.handle};
    REQUIRE(ampx_optimizer_create_sgd(ctx, list, 1, &so, &opt.handle) == AMPX_OK);
    g = attach_grad(ctx, p, AMPX_F32);
    check_scaler_matches(scaler, ref);
  }

  void iterate(char what) {
    const double scale = scale_of(scaler);
    write(g, {what == 'I' ? INFINITY : what == 'N' ? NAN : 0.25 * scale});
    REQUIRE_MESSAGE(ampx_scaler_step(scaler, opt) == AMPX_OK, last_error());
    REQUIRE_MESSAGE(ampx_scaler_update(scaler) == AMPX_OK, last_error());
    ref.update(what != 'C');
    check_scaler_matches(scaler, ref);
    CHECK(std::isfinite(scale_of(scaler)));
  }

  void run(const std::string& script) {
    for (size_t i = 0; i < script.size(); ++i) {
      CAPTURE(script);
      CAPTURE(i);
      iterate(script[i]);
    }
  }
};

}  // namespace

TEST_CASE("scaler: growth comes exactly at the growth_interval-th clean update; an overflow backs off and resets the tracker") {
  ampx_scaler_options o = scaler_options(1024, 3);
  ScriptRig rig(o);
  rig.run("CC");
  CHECK(scale_of(rig.scaler) == 1024);
  CHECK(scaler_state_of(rig.scaler).growth_tracker == 2);
  rig.run("C");
  CHECK(scale_of(rig.scaler) == 2048);
  CHECK(scaler_state_of(rig.scaler).growth_tracker == 0);
  rig.run("CCI");
  CHECK(scale_of(rig.scaler) == 1024);
  CHECK(scaler_state_of(rig.scaler).growth_tracker == 0);
  // The tracker restarted: two clean updates are not enough any more.
  rig.run("CC");
  CHECK(scale_of(rig.scaler) == 1024);
  rig.run("CNICCCCCCIC");

  // Scale = init * growth^growths * backoff^skips (hysteresis 1, no bounds).
  const ampx_scaler_state s = scaler_state_of(rig.scaler);
  CHECK(s.counters.skipped == s.counters.backoffs);
  CHECK(s.counters.updates == 19);
  CHECK(s.scale == 1024 * std::pow(2.0, static_cast<double>(s.counters.growths)) *
                       std::pow(0.5, static_cast<double>(s.counters.skipped)));
}

TEST_CASE("scaler: other growth and backoff factors follow the same rule") {
  ampx_scaler_options o = scaler_options(4096, 1);
  o.growth_factor = 3;
  o.backoff_factor = 0.25;
  ScriptRig rig(o);
  rig.run("CCICNCIICCC");
  const ampx_scaler_state s = scaler_state_of(rig.scaler);
  CHECK(s.counters.growths == 7);
  CHECK(s.counters.skipped == 4);
  CHECK(s.scale == 4096 * std::pow(3.0, 7) * std::pow(0.25, 4));
}

TEST_CASE("scaler: hysteresis 2 and 3 back off only at the Nth consecutive overflow") {
  SUBCASE("hysteresis 2") {
    ampx_scaler_options o = scaler_options(1024, 2);
    o.hysteresis = 2;
    o.consecutive_hysteresis = 1;  // the rule this case states; no longer the default
    ScriptRig rig(o);
    rig.run("I");
    CHECK(scale_of(rig.scaler) == 1024);  // tolerated once
    CHECK(scaler_state_of(rig.scaler).hysteresis_left == 1);
    rig.run("I");
    CHECK(scale_of(rig.scaler) == 512);
    rig.run("I");
    CHECK(scale_of(rig.scaler) == 256);  // and at every further consecutive one
    rig.run("C");
    CHECK(scaler_state_of(rig.scaler).hysteresis_left == 2);  // a clean update restores it
    rig.run("ICIICCCIIIC");
  }
  SUBCASE("hysteresis 3") {
    ampx_scaler_options o = scaler_options(1 << 20, 4);
    o.hysteresis = 3;
    o.consecutive_hysteresis = 1;  // the rule this case states; no longer the default
    ScriptRig rig(o);
    rig.run("IIC");
    CHECK(scale_of(rig.scaler) == (1 << 20));
    rig.run("III");
    CHECK(scale_of(rig.scaler) == (1 << 19));
    rig.run("NCCCCIICIIII");
    const ampx_scaler_state s = scaler_state_of(rig.scaler);
    CHECK(s.counters.skipped > s.counters.backoffs);
  }
}

TEST_CASE("scaler: min_scale and max_scale bound the scale") {
  SUBCASE("min_scale") {
    ampx_scaler_options o = scaler_options(1024, 100);
    o.min_scale = 256;
    ScriptRig rig(o);
    rig.run("IIIII");
    CHECK(scale_of(rig.scaler) == 256);
    CHECK(scaler_state_of(rig.scaler).counters.backoffs == 2);
    CHECK(scaler_state_of(rig.scaler).counters.skipped == 5);
  }
  SUBCASE("min_scale that is not a backoff multiple") {
    ampx_scaler_options o = scaler_options(1024, 100);
    o.min_scale = 300;
    ScriptRig rig(o);
    rig.run("III");
    CHECK(scale_of(rig.scaler) == 300);
  }
  SUBCASE("max_scale") {
    ampx_scaler_options o = scaler_options(1024, 1);
    o.max_scale = 3000;
    o.clamp_to_max_scale = 1;  // the rule this case states; no longer the default
    ScriptRig rig(o);
    rig.run("CCCC");
    CHECK(scale_of(rig.scaler) == 3000);
    CHECK(scaler_state_of(rig.scaler).counters.growths == 2);
    rig.run("ICCC");
  }
}

TEST_CASE("scaler: a scale near the float maximum never grows into infinity") {
  SUBCASE("growth 2 from 1e38") {
    ScriptRig rig(scaler_options(1e38, 1));
    rig.run("C");
    CHECK(scale_of(rig.scaler) == static_cast<float>(static_cast<double>(1e38f) * 2));
    rig.run("CCCC");
    CHECK(scale_of(rig.scaler) == static_cast<float>(static_cast<double>(1e38f) * 2));
    CHECK(scaler_state_of(rig.scaler).counters.growths == 1);
    CHECK(scaler_state_of(rig.scaler).growth_tracker == 0);
  }
  SUBCASE("growth 4 from 1e38") {
    ampx_scaler_options o = scaler_options(1e38, 2);
    o.growth_factor = 4;
    ScriptRig rig(o);
    rig.run("CCCCCI");
    CHECK(scaler_state_of(rig.scaler).counters.growths == 0);
  }
}

TEST_CASE("scaler: update_to forces the scale and leaves the tracker alone") {
  ScriptRig rig(scaler_options(1024, 3));
  rig.run("CC");
  const double scale = scale_of(rig.scaler);
  write(rig.g, {0.25 * scale});
  REQUIRE(ampx_scaler_step(rig.scaler, rig.opt) == AMPX_OK);
  // Invalid values are refused and the iteration stays open.
  for (double bad : {0.0, -2.0, double{INFINITY}, double{NAN}, 1e39}) {
    CAPTURE(bad);
    CHECK_FAILS_WITH(ampx_scaler_update_to(rig.scaler, bad), AMPX_ERR_INVALID_ARGUMENT,
                     "new_scale");
  }
  check_scaler_matches(rig.scaler, rig.ref);
  REQUIRE(ampx_scaler_update_to(rig.scaler, 77.5) == AMPX_OK);
  rig.ref.force(false, 77.5);
  check_scaler_matches(rig.scaler, rig.ref);
  CHECK(scaler_state_of(rig.scaler).growth_tracker == 2);
  rig.run("C");  // the third clean update since the last growth
  CHECK(scale_of(rig.scaler) == 155);

  // Forced after an overflow: counted as skipped, no backoff.
  write(rig.g, {INFINITY});
  REQUIRE(ampx_scaler_step(rig.scaler, rig.opt) == AMPX_OK);
  REQUIRE(ampx_scaler_update_to(rig.scaler, 4096) == AMPX_OK);
  rig.ref.force(true, 4096);
  check_scaler_matches(rig.scaler, rig.ref);
  rig.run("CCCI");
}

TEST_CASE("scaler: invalid options and states are refused naming the field") {
  Ctx ctx;
  auto refuse = [&](ampx_scaler_options o, const char* field) {
    CAPTURE(field);
    ampx_scaler out = reinterpret_cast<ampx_scaler>(uintptr_t{0x99});
    CHECK_FAILS_WITH(ampx_scaler_create(ctx, &o, &out), AMPX_ERR_INVALID_ARGUMENT, field);
    CHECK(out == reinterpret_cast<ampx_scaler>(uintptr_t{0x99}));
  };
  const ampx_scaler_options d = ampx_scaler_options_default();
  CHECK(d.init_scale == 65536.0);
  CHECK(d.growth_factor == 2.0);
  CHECK(d.backoff_factor == 0.5);
  CHECK(d.growth_interval == 2000);
  CHECK(d.enabled == 1);
  CHECK(d.hysteresis == 1);
  ampx_scaler_options o = d;
  for (double bad : {1.0, 0.5, double{NAN}, double{INFINITY}}) {
    o = d;
    o.growth_factor = bad;
    refuse(o, "growth_factor");
  }
  for (double bad : {0.0, 1.0, -0.5, double{NAN}}) {
    o = d;
    o.backoff_factor = bad;
    refuse(o, "backoff_factor");
  }
  o = d;
  o.growth_interval = 0;
  refuse(o, "growth_interval");
  for (double bad : {0.0, -1.0, double{INFINITY}, double{NAN}, 1e39}) {
    o = d;
    o.init_scale = bad;
    refuse(o, "init_scale");
  }
  o = d;
  o.hysteresis = 0;
  refuse(o, "hysteresis");
  o = d;
  o.min_scale = -1;
  refuse(o, "min_scale");
  o = d;
  o.max_scale = -1;
  refuse(o, "max_scale");
  o = d;
  o.min_scale = 100;
  o.max_scale = 10;
  o.init_scale = 50;
  refuse(o, "min_scale");
  o = d;
  o.max_scale = 1000;
  refuse(o, "init_scale");
  o = d;
  o.struct_size = 0;
  refuse(o, "struct_size");
  ampx_scaler s = nullptr;
  CHECK_FAILS_WITH(ampx_scaler_create(nullptr, &d, &s), AMPX_ERR_INVALID_ARGUMENT, "ctx");
  CHECK_FAILS_WITH(ampx_scaler_create(ctx, &d, nullptr), AMPX_ERR_INVALID_ARGUMENT, "out");

  Scaler scaler(ctx, scaler_options(1024, 5));
  const ampx_scaler_state good = scaler_state_of(scaler);
  auto refuse_state = [&](ampx_scaler_state st, const char* field) {
    CAPTURE(field);
    CHECK_FAILS_WITH(ampx_scaler_set_state(scaler, &st), AMPX_ERR_INVALID_ARGUMENT, field);
    const ampx_scaler_state now = scaler_state_of(scaler);
    CHECK(now.scale == good.scale);
    CHECK(now.growth_interval == good.growth_interval);
    CHECK(now.growth_tracker == good.growth_tracker);
  };
  ampx_scaler_state st = good;
  st.growth_tracker = 5;
  refuse_state(st, "growth_tracker");
  st = good;
  st.growth_tracker = -1;
  refuse_state(st, "growth_tracker");
  st = good;
  st.scale = -1;
  refuse_state(st, "scale");
  st = good;
  st.backoff_factor = 2;
  refuse_state(st, "backoff_factor");
  st = good;
  st.hysteresis_left = 2;
  refuse_state(st, "hysteresis_left");
  st = good;
  st.counters.skipped = st.counters.updates + 1;
  refuse_state(st, "counters");
  st = good;
  st.struct_size = sizeof(size_t);
  refuse_state(st, "struct_size");
  CHECK_FAILS_WITH(ampx_scaler_set_state(scaler, nullptr), AMPX_ERR_INVALID_ARGUMENT, "state");
  CHECK_FAILS_WITH(ampx_scaler_get_state(scaler, nullptr), AMPX_ERR_INVALID_ARGUMENT, "state");
  double scale = 0;
  CHECK_FAILS_WITH(ampx_scaler_get_scale(nullptr, &scale), AMPX_ERR_INVALID_ARGUMENT, "scaler");
  ampx_scaler_release(nullptr);
}

TEST_CASE("scaler: scale_loss and scale_tensor carry the current scale") {
  Ctx ctx;
  Scaler scaler(ctx, scaler_options(1024, 1));
  Tensor loss(make(ctx, AMPX_BF16, {1.5, -0.25}));
  Tensor scaled;
  REQUIRE(ampx_scaler_scale_loss(scaler, loss, scaled.out()) == AMPX_OK);
  CHECK(dtype_of(scaled) == AMPX_F32);
  CHECK(values_of(scaled) == std::vector<double>{1536, -256});
  Tensor scale;
  REQUIRE(ampx_scaler_scale_tensor(scaler, scale.out()) == AMPX_OK);
  CHECK(values_of(scale) == std::vector<double>{1024});
  Tensor ints;
  const int32_t v = 1;
  const int64_t n = 1;
  REQUIRE(ampx_tensor_from_host(ctx, AMPX_I32, 1, &n, &v, sizeof v, ints.out()) == AMPX_OK);
  Tensor none;
  CHECK_FAILS_WITH(ampx_scaler_scale_loss(scaler, ints, none.out()), AMPX_ERR_DTYPE, "loss");
}

// ---- 3. gradient accumulation -------------------------------------------------------

TEST_CASE("scaler: gradients accumulated over micro-batches before unscale match the control") {
  const Mlp task(21);
  const int kMicro = 3;
  const double kMaxGrad = 1.5;
  for (ampx_dtype grad_dtype : {AMPX_F32, AMPX_F16}) {
    CAPTURE(ampx_dtype_name(grad_dtype));
    Ctx ctx;
    const ampx_sgd_options o = sgd_momentum(0.1);
    Trainee t(ctx, task, {AMPX_F32, AMPX_F32}, grad_dtype, sgd_factory(o), 8);
    // A second control accumulates the unscaled gradients in fp32, knowing
    // nothing of the scale.
    Trainee fp32(ctx, task, {AMPX_F32, AMPX_F32}, AMPX_F32, sgd_factory(o), 8);
    Scaler scaler(ctx, scaler_options(256, 2));
    for (int it = 0; it < 8; ++it) {
      CAPTURE(it);
      const double scale = scale_of(scaler);
      Grads acc_scaled, acc_fp32;
      for (int micro = 0; micro < kMicro; ++micro) {
        const Grads g = t.backward(it * kMicro + micro);
        const Grads gc = fp32.backward(it * kMicro + micro);
        for (const auto& v : g)
          for (double x : v) REQUIRE(std::fabs(x) <= kMaxGrad);  // the bound below assumes it
        if (micro == 0) {
          acc_scaled.assign(g.size(), {});
          acc_fp32.assign(g.size(), {});
          for (size_t k = 0; k < g.size(); ++k) {
            acc_scaled[k].assign(g[k].size(), 0.0);
            acc_fp32[k].assign(g[k].size(), 0.0);
          }
        }
        // The engine adds each micro-batch into its gradient buffer, in the
        // buffer's own precision.
        for (size_t k = 0; k < g.size(); ++k)
          for (size_t i = 0; i < g[k].size(); ++i) {
            acc_scaled[k][i] =
                round_to(grad_dtype, acc_scaled[k][i] + round_to(grad_dtype, g[k][i] * scale));
            acc_fp32[k][i] = round_to(AMPX_F32, acc_fp32[k][i] + round_to(AMPX_F32, gc[k][i]));
          }
      }
      Grads eff(acc_scaled.size());
      for (size_t k = 0; k < acc_scaled.size(); ++k) {
        write(t.grads[k], acc_scaled[k]);
        for (double v : acc_scaled[k]) {
          REQUIRE(std::isfinite(v));  // the control would not skip
          eff[k].push_back(v / scale);
        }
      }
      REQUIRE(ampx_scaler_step(scaler, t.opt) == AMPX_OK);
      REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
      t.control_step(eff);
      t.check_matches_control();
      for (size_t k = 0; k < acc_fp32.size(); ++k) write(fp32.grads[k], acc_fp32[k]);
      REQUIRE(ampx_optimizer_step(fp32.opt) == AMPX_OK);
      if (grad_dtype == AMPX_F32) {
        // Scaling by a power of two commutes with every fp32 rounding.
        CHECK(eff == acc_fp32);
        CHECK(snapshot(t.opt, t.params) == snapshot(fp32.opt, fp32.params));
      } else {
        // Worst case against fp32 accumulation: per element 3 conversions
        // and 3 additions, each rounding by 2^-11 of at most 3 * max|g|;
        // momentum 0.9 carries an error at most 10-fold, lr 0.1, 8 steps.
        const double grad_err = 2 * kMicro * std::ldexp(1.0, -11) * kMicro * kMaxGrad;
        for (size_t k = 0; k < t.params.size(); ++k) {
          const std::vector<double> a = values_of(t.params[k]);
          const std::vector<double> b = values_of(fp32.params[k]);
          for (size_t i = 0; i < a.size(); ++i)
            CHECK(std::fabs(a[i] - b[i]) <= 8 * 10 * o.lr * grad_err);
        }
      }
    }
    CHECK(scaler_state_of(scaler).counters.growths == 4);
  }
}

// ---- 4. two optimizers, one scaler ----------------------------------------------------------

TEST_CASE("scaler: with two optimizers an inf in B's grads skips only B and the scale backs off once") {
  Ctx ctx;
  const Regression task_a(4, 41), task_b(3, 42);
  Trainee a(ctx, task_a, {AMPX_F32, AMPX_F32}, AMPX_F16, sgd_factory(sgd_momentum(0.05)), 1);
  Trainee b(ctx, task_b, {AMPX_F16, AMPX_F32}, AMPX_F32, adam_factory(adamw(0.02)), 2);
  Scaler scaler(ctx, scaler_options(2048, 2));
  ScalerRef ref = ScalerRef::from(scaler_options(2048, 2));
  for (int it = 0; it < 7; ++it) {
    CAPTURE(it);
    const double scale = scale_of(scaler);
    bool over_a = false, over_b = false;
    const Grads ea = a.write_scaled(a.backward(it), scale, 0.0, &over_a);
    const Grads eb = b.write_scaled(b.backward(it), scale, it == 2 ? NAN : 0.0, &over_b);
    REQUIRE(!over_a);
    CHECK(over_b == (it == 2));
    const Snapshot b_before = snapshot(b.opt, b.params);
    if (it % 2 == 0) {
      REQUIRE(ampx_scaler_unscale(scaler, a.opt) == AMPX_OK);
      REQUIRE(ampx_scaler_step(scaler, a.opt) == AMPX_OK);
      REQUIRE(ampx_scaler_step(scaler, b.opt) == AMPX_OK);
    } else {  // the other order: the OR does not care
      REQUIRE(ampx_scaler_step(scaler, b.opt) == AMPX_OK);
      REQUIRE(ampx_scaler_step(scaler, a.opt) == AMPX_OK);
    }
    CHECK(found_inf(scaler, a.opt) == 0);
    CHECK(found_inf(scaler, b.opt) == (over_b ? 1 : 0));
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
    ref.update(over_a || over_b);
    check_scaler_matches(scaler, ref);
    CHECK(a.last_taken());
    CHECK(b.last_taken() == !over_b);
    a.control_step(ea);
    if (over_b)
      CHECK(snapshot(b.opt, b.params) == b_before);
    else
      b.control_step(eb);
    a.check_matches_control();
    b.check_matches_control();
    a.check_grads_untouched();
  }
  const ampx_scaler_state s = scaler_state_of(scaler);
  CHECK(s.counters.backoffs == 1);
  CHECK(s.counters.skipped == 1);
  CHECK(steps_of(a.opt, a.params[0]) == 7);
  CHECK(steps_of(b.opt, b.params[0]) == 6);
}

// ---- 5. two scalers --------------------------------------------------------------------

TEST_CASE("scaler: two scalers (GAN) keep independent scales for their own optimizers") {
  Ctx ctx;
  const Regression task_g(5, 51), task_d(4, 52);
  Trainee gen(ctx, task_g, {AMPX_BF16, AMPX_F32}, AMPX_F16, adam_factory(adamw(0.01)), 1);
  Trainee dis(ctx, task_d, {AMPX_F32, AMPX_F32}, AMPX_BF16, sgd_factory(sgd_momentum(0.05)), 2);
  ampx_scaler_options og = scaler_options(4096, 2);
  ampx_scaler_options od = scaler_options(256, 3);
  od.growth_factor = 4;
  od.backoff_factor = 0.25;
  Scaler sg(ctx, og), sd(ctx, od);
  ScalerRef rg = ScalerRef::from(og), rd = ScalerRef::from(od);
  REQUIRE(ampx_scaler_attach(sg, gen.opt) == AMPX_OK);
  REQUIRE(ampx_scaler_attach(sg, gen.opt) == AMPX_OK);  // again: a no-op
  for (int it = 0; it < 8; ++it) {
    CAPTURE(it);
    // Discriminator step.
    bool over_d = false;
    const Grads ed =
        dis.write_scaled(dis.backward(it), scale_of(sd), it == 1 ? -INFINITY : 0.0, &over_d);
    REQUIRE(ampx_scaler_step(sd, dis.opt) == AMPX_OK);
    REQUIRE(ampx_scaler_update(sd) == AMPX_OK);
    rd.update(over_d);
    if (!over_d) dis.control_step(ed);
    // Generator step.
    bool over_g = false;
    const Grads eg =
        gen.write_scaled(gen.backward(it), scale_of(sg), it == 3 ? INFINITY : 0.0, &over_g);
    REQUIRE(ampx_scaler_step(sg, gen.opt) == AMPX_OK);
    REQUIRE(ampx_scaler_update(sg) == AMPX_OK);
    rg.update(over_g);
    if (!over_g) gen.control_step(eg);
    check_scaler_matches(sg, rg);
    check_scaler_matches(sd, rd);
    gen.check_matches_control();
    dis.check_matches_control();
  }
  CHECK(scale_of(sg) != scale_of(sd));
  // An optimizer belongs to one scaler.
  const Snapshot before = snapshot(gen.opt, gen.params);
  CHECK_FAILS_WITH(ampx_scaler_step(sd, gen.opt), AMPX_ERR_INVALID_ARGUMENT, "another scaler");
  CHECK_FAILS_WITH(ampx_scaler_unscale(sd, gen.opt), AMPX_ERR_INVALID_ARGUMENT, "another scaler");
  CHECK_FAILS_WITH(ampx_scaler_attach(sd, gen.opt), AMPX_ERR_INVALID_ARGUMENT, "another scaler");
  CHECK(snapshot(gen.opt, gen.params) == before);
  check_scaler_matches(sd, rd);
  CHECK_FAILS_WITH(ampx_scaler_update(sd), AMPX_ERR_ORDER, "ampx_scaler_step");
}

// ---- 6. clipping --------------------------------------------------------------------

TEST_CASE("scaler: clipping after unscale (norm 2, inf norm, value) gives the control's result") {
  const Regression task(7, 61);
  for (ampx_dtype grad_dtype : {AMPX_F16, AMPX_F32})
    for (int mode : {0, 1, 2}) {  // L2 norm, inf norm, value
      CAPTURE(ampx_dtype_name(grad_dtype));
      CAPTURE(mode);
      Ctx ctx;
      const ampx_sgd_options o = sgd_momentum(0.05);
      Trainee t(ctx, task, {AMPX_F32, AMPX_F32}, grad_dtype, sgd_factory(o), 4);
      Scaler scaler(ctx, scaler_options(1024, 3));
      std::vector<RefParam> ref;
      for (ampx_tensor p : t.params) ref.emplace_back(values_of(p));
      for (int it = 0; it < 8; ++it) {
        CAPTURE(it);
        bool overflow = false;
        const Grads eff = t.write_scaled(t.backward(it), scale_of(scaler), 0.0, &overflow);
        REQUIRE(!overflow);
        double l2 = 0, linf = 0;
        for (const auto& v : eff)
          for (double x : v) {
            l2 += x * x;
            linf = std::max(linf, std::fabs(x));
          }
        l2 = std::sqrt(l2);
        // Odd iterations clip hard, even ones leave room (coefficient 1).
        const double total = mode == 0 ? l2 : linf;
        const double limit = (it % 2 ? 0.5 : 2.0) * total;
        REQUIRE(ampx_scaler_unscale(scaler, t.opt) == AMPX_OK);
        for (size_t k = 0; k < eff.size(); ++k) write(t.control_grads[k], eff[k]);
        Grads clipped = eff;
        if (mode == 2) {
          REQUIRE(ampx_clip_grad_value(t.opt, limit) == AMPX_OK);
          REQUIRE(ampx_clip_grad_value(t.control, limit) == AMPX_OK);
          const double c = static_cast<float>(limit);
          for (auto& v : clipped)
            for (double& x : v) x = std::min(std::max(x, -c), c);
        } else {
          const double type = mode == 0 ? 2.0 : INFINITY;
          Tensor norm, control_norm;
          REQUIRE_MESSAGE(ampx_clip_grad_norm(t.opt, limit, type, 1, norm.out()) == AMPX_OK,
                          last_error());
          REQUIRE(ampx_clip_grad_norm(t.control, limit, type, 0, control_norm.out()) == AMPX_OK);
          const std::vector<double> have = values_of(norm);
          REQUIRE(have.size() == 1);
          CHECK(bytes_of(norm) == bytes_of(control_norm));
          if (mode == 1)
            CHECK(have[0] == linf);  // a max of fp32 values is exact
          else  // a sum of 8 squares, even accumulated in fp32: <= 8 roundings
            CHECK(close(have[0], l2, 8, l2));
          const double coef = std::min(limit / (total + 1e-6), 1.0);
          for (auto& v : clipped)
            for (double& x : v) x *= coef;
        }
        if (grad_dtype == AMPX_F32)
          for (size_t k = 0; k < clipped.size(); ++k) {
            // fp32 coefficient (3 roundings) and product (1): 4 roundings of |g|.
            const std::vector<double> have = values_of(t.grads[k]);
            for (size_t i = 0; i < have.size(); ++i)
              CHECK(close(have[i], clipped[k][i], 4, std::fabs(eff[k][i])));
            if (it % 2 == 0) CHECK(have == eff[k]);  // coefficient 1: untouched
          }
        t.check_grads_untouched();
        REQUIRE(ampx_scaler_step(scaler, t.opt) == AMPX_OK);
        REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
        REQUIRE(ampx_optimizer_step(t.control) == AMPX_OK);
        t.check_matches_control();
        for (size_t k = 0; k < ref.size(); ++k)
          sgd_ref_step(ref[k], clipped[k], sgd_ref_of(o), o.lr, o.weight_decay);
      }
      for (size_t k = 0; k < ref.size(); ++k)
        check_close(values_of(t.params[k]), ref[k].p, kRunUlps, 4.0);
    }
}

TEST_CASE("scaler: clipping scaled gradients is refused with AMPX_ERR_ORDER, from the very first iteration") {
  const Regression task(5, 71);
  for (int attach_first : {1, 0}) {
    CAPTURE(attach_first);
    Ctx ctx;
    Trainee t(ctx, task, {AMPX_F32, AMPX_F32}, AMPX_F32, sgd_factory(sgd_momentum(0.05)), 5);
    Scaler scaler(ctx, scaler_options(1024, 2));
    if (attach_first) REQUIRE(ampx_scaler_attach(scaler, t.opt) == AMPX_OK);
    for (int it = 0; it < 3; ++it) {
      CAPTURE(it);
      bool overflow = false;
      const Grads eff = t.write_scaled(t.backward(it), scale_of(scaler), 0.0, &overflow);
      const bool known = attach_first || it > 0;  // an unattached optimizer is unknown yet
      if (known) {
        const Snapshot before = snapshot(t.opt, t.params);
        const ampx_tensor sentinel = reinterpret_cast<ampx_tensor>(uintptr_t{0x1234});
        ampx_tensor total = sentinel;
        CHECK_FAILS_WITH(ampx_clip_grad_norm(t.opt, 0.1, 2.0, 0, &total), AMPX_ERR_ORDER,
                         "ampx_scaler_unscale");
        CHECK(contains(last_error(), "first"));
        CHECK_FAILS_WITH(ampx_clip_grad_norm(t.opt, 0.1, INFINITY, 1, &total), AMPX_ERR_ORDER,
                         "ampx_scaler_unscale");
        CHECK(total == sentinel);
        CHECK_FAILS_WITH(ampx_clip_grad_value(t.opt, 0.01), AMPX_ERR_ORDER,
                         "ampx_scaler_unscale");
        for (size_t k = 0; k < t.grads.size(); ++k) CHECK(bytes_of(t.grads[k]) == t.written[k]);
        CHECK(snapshot(t.opt, t.params) == before);
        CHECK(scale_of(scaler) == (it == 2 ? 2048 : 1024));
      }
      // The refusal changed no state: the iteration proceeds as usual.
      REQUIRE(ampx_scaler_step(scaler, t.opt) == AMPX_OK);
      REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
      t.control_step(eff);
      t.check_matches_control();
    }
  }
}

TEST_CASE("scaler: a non-finite total norm with error_if_nonfinite clips nothing") {
  Ctx ctx;
  const Regression task(4, 72);
  Trainee t(ctx, task, {AMPX_F32, AMPX_F32}, AMPX_F32, sgd_factory(sgd_momentum(0.05)), 6);
  Scaler scaler(ctx, scaler_options(1024, 2));
  bool overflow = false;
  t.write_scaled(t.backward(0), 1024, INFINITY, &overflow);
  REQUIRE(ampx_scaler_unscale(scaler, t.opt) == AMPX_OK);
  std::vector<std::vector<unsigned char>> unscaled;
  for (ampx_tensor g : t.grads) unscaled.push_back(bytes_of(g));
  Tensor total;
  CHECK_FAILS_WITH(ampx_clip_grad_norm(t.opt, 0.01, 2.0, 1, total.out()),
                   AMPX_ERR_INVALID_ARGUMENT, "norm");
  CHECK(total.handle == nullptr);
  for (size_t k = 0; k < t.grads.size(); ++k) CHECK(bytes_of(t.grads[k]) == unscaled[k]);
  CHECK_FAILS_WITH(ampx_clip_grad_norm(t.opt, 1.0, 3.0, 0, total.out()), AMPX_ERR_NOT_SUPPORTED,
                   "norm_type");
  CHECK_FAILS_WITH(ampx_clip_grad_norm(t.opt, -1.0, 2.0, 0, total.out()),
                   AMPX_ERR_INVALID_ARGUMENT, "max_norm");
  CHECK_FAILS_WITH(ampx_clip_grad_value(t.opt, -1.0), AMPX_ERR_INVALID_ARGUMENT, "clip_value");
  // Without the check the total is reported and the step is still skipped.
  REQUIRE(ampx_clip_grad_norm(t.opt, 0.01, 2.0, 0, total.out()) == AMPX_OK);
  CHECK(std::isinf(values_of(total)[0]));
  const Snapshot before = snapshot(t.opt, t.params);
  REQUIRE(ampx_scaler_step(scaler, t.opt) == AMPX_OK);
  CHECK(snapshot(t.opt, t.params) == before);
  REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
}

// ---- 7. order errors ------------------------------------------------------------------

TEST_CASE("scaler: every call out of order is AMPX_ERR_ORDER, names what to call and changes nothing") {
  Ctx ctx;
  const Regression task(5, 81);
  Trainee t(ctx, task, {AMPX_F16, AMPX_F32}, AMPX_F16, adam_factory(adamw(0.01)), 7);
  Scaler scaler(ctx, scaler_options(1024, 2));
  REQUIRE(ampx_scaler_attach(scaler, t.opt) == AMPX_OK);
  size_t state_bytes = 0;
  REQUIRE(ampx_optimizer_state_size(t.opt, &state_bytes) == AMPX_OK);
  std::vector<unsigned char> saved(state_bytes);
  REQUIRE(ampx_optimizer_save_state(t.opt, saved.data(), saved.size()) == AMPX_OK);
  const ampx_scaler_state saved_scaler = scaler_state_of(scaler);

  // Everything observable, to compare after each refusal.
  auto expect_unchanged = [&](const Snapshot& before, const ampx_scaler_state& scaler_before) {
    CHECK(snapshot(t.opt, t.params) == before);
    const ampx_scaler_state now = scaler_state_of(scaler);
    CHECK(now.scale == scaler_before.scale);
    CHECK(now.growth_tracker == scaler_before.growth_tracker);
    CHECK(now.counters.updates == scaler_before.counters.updates);
    t.check_grads_untouched();
  };

  // Before anything: attached, READY.
  Snapshot before = snapshot(t.opt, t.params);
  ampx_scaler_state scaler_before = scaler_state_of(scaler);
  int32_t found = 7;
  CHECK_FAILS_WITH(ampx_scaler_found_inf(scaler, t.opt, &found), AMPX_ERR_ORDER,
                   "ampx_scaler_unscale");
  CHECK(found == 7);
  CHECK_FAILS_WITH(ampx_scaler_update(scaler), AMPX_ERR_ORDER, "ampx_scaler_step");
  CHECK_FAILS_WITH(ampx_scaler_update_to(scaler, 4.0), AMPX_ERR_ORDER, "ampx_scaler_step");
  int32_t taken = 7;
  CHECK_FAILS_WITH(ampx_optimizer_last_step_taken(t.opt, &taken), AMPX_ERR_ORDER, "stepped");
  CHECK(taken == 7);

  for (int it = 0; it < 3; ++it) {
    CAPTURE(it);
    bool overflow = false;
    const Grads eff = t.write_scaled(t.backward(it), scale_of(scaler), 0.0, &overflow);
    before = snapshot(t.opt, t.params);
    scaler_before = scaler_state_of(scaler);
    CHECK_FAILS_WITH(ampx_optimizer_step(t.opt), AMPX_ERR_ORDER, "ampx_scaler_step");
    expect_unchanged(before, scaler_before);

    REQUIRE(ampx_scaler_unscale(scaler, t.opt) == AMPX_OK);
    CHECK(found_inf(scaler, t.opt) == 0);
    CHECK_FAILS_WITH(ampx_scaler_unscale(scaler, t.opt), AMPX_ERR_ORDER, "update");
    CHECK_FAILS_WITH(ampx_optimizer_step(t.opt), AMPX_ERR_ORDER, "ampx_scaler_step");
    CHECK_FAILS_WITH(ampx_scaler_set_state(scaler, &saved_scaler), AMPX_ERR_ORDER,
                     "ampx_scaler_update");
    CHECK_FAILS_WITH(ampx_optimizer_load_state(t.opt, saved.data(), saved.size()),
                     AMPX_ERR_ORDER, "ampx_scaler_update");
    expect_unchanged(before, scaler_before);

    REQUIRE(ampx_scaler_step(scaler, t.opt) == AMPX_OK);
    const Snapshot stepped = snapshot(t.opt, t.params);
    CHECK(stepped != before);
    CHECK_FAILS_WITH(ampx_scaler_step(scaler, t.opt), AMPX_ERR_ORDER, "ampx_scaler_update");
    CHECK_FAILS_WITH(ampx_scaler_unscale(scaler, t.opt), AMPX_ERR_ORDER, "ampx_scaler_update");
    CHECK_FAILS_WITH(ampx_optimizer_step(t.opt), AMPX_ERR_ORDER, "ampx_scaler_step");
    CHECK_FAILS_WITH(ampx_scaler_set_state(scaler, &saved_scaler), AMPX_ERR_ORDER,
                     "ampx_scaler_update");
    CHECK_FAILS_WITH(ampx_optimizer_load_state(t.opt, saved.data(), saved.size()),
                     AMPX_ERR_ORDER, "ampx_scaler_update");
    expect_unchanged(stepped, scaler_before);

    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
    CHECK_FAILS_WITH(ampx_scaler_found_inf(scaler, t.opt, &found), AMPX_ERR_ORDER,
                     "ampx_scaler_unscale");
    CHECK_FAILS_WITH(ampx_scaler_update(scaler), AMPX_ERR_ORDER, "ampx_scaler_step");
    CHECK(t.last_taken());
    // The refused second unscale did not divide the gradients again: the
    // step used them exactly as the control does.
    t.control_step(eff);
    t.check_matches_control();
  }
  CHECK(scaler_state_of(scaler).counters.updates == 3);
  // Between iterations both restores are allowed again.
  CHECK(ampx_scaler_set_state(scaler, &saved_scaler) == AMPX_OK);
  CHECK(ampx_optimizer_load_state(t.opt, saved.data(), saved.size()) == AMPX_OK);
  CHECK(steps_of(t.opt, t.params[0]) == 0);
  CHECK(scale_of(scaler) == 1024);
  CHECK_FAILS_WITH(ampx_scaler_step(nullptr, t.opt), AMPX_ERR_INVALID_ARGUMENT, "scaler");
  CHECK_FAILS_WITH(ampx_scaler_step(scaler, nullptr), AMPX_ERR_INVALID_ARGUMENT, "optimizer");
  CHECK_FAILS_WITH(ampx_scaler_found_inf(scaler, t.opt, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "found");
}

// ---- 8. save / load ------------------------------------------------------------------

namespace {

// Three parameters of three types in two groups, trained with AMSGrad Adam
// through a scaler with F16 gradients.
struct Checkpointed {
  static const Bowls& task() {
    static const Bowls bowls({5, 3, 4}, 91);
    return bowls;
  }
  std::vector<ampx_tensor> params;
  std::vector<ampx_tensor> grads;
  Optimizer opt;
  std::unique_ptr<Scaler> scaler;

  Checkpointed(ampx_context ctx, const std::vector<double>& init_values, double lr,
               const ampx_scaler_options& so,
               const std::vector<ampx_dtype>& dtypes = {AMPX_F32, AMPX_F16, AMPX_BF16},
               const std::vector<size_t>& sizes = {5, 3, 4}) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      params.push_back(make(ctx, dtypes[k], std::vector<double>(sizes[k], init_values[k])));
      grads.push_back(attach_grad(ctx, params.back(), AMPX_F16));
    }
    ampx_adam_options o = AMPX_ADAM_OPTIONS_INIT;
    o.lr = lr;
    o.amsgrad = 1;
    o.weight_decay = 0.01;
    REQUIRE(ampx_optimizer_create_adam(ctx, params.data(), 2, &o, &opt.handle) == AMPX_OK);
    REQUIRE(ampx_optimizer_add_group(opt, params.data() + 2, 1, lr * 3, 0.0, nullptr) == AMPX_OK);
    scaler = std::make_unique<Scaler>(ctx, so);
  }
  ~Checkpointed() {
    for (ampx_tensor p : params) ampx_tensor_release(p);
  }

  void iterate(int it, bool poison) {
    Grads values;
    for (ampx_tensor p : params) values.push_back(values_of(p));
    const Grads g = task().grads(it, values);
    const double scale = scale_of(*scaler);
    for (size_t k = 0; k < g.size(); ++k) {
      std::vector<double> scaled(g[k].size());
      for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = g[k][i] * scale;
      if (poison && k == 1) scaled[1] = NAN;
      write(grads[k], scaled);
    }
    REQUIRE(ampx_scaler_step(*scaler, opt) == AMPX_OK);
    REQUIRE(ampx_scaler_update(*scaler) == AMPX_OK);
  }

  std::vector<unsigned char> save() {
    size_t bytes = 0;
    REQUIRE(ampx_optimizer_state_size(opt, &bytes) == AMPX_OK);
    std::vector<unsigned char> buffer(bytes);
    REQUIRE(ampx_optimizer_save_state(opt, buffer.data(), bytes) == AMPX_OK);
    return buffer;
  }
};

void check_same_scaler_state(const ampx_scaler_state& a, const ampx_scaler_state& b) {
  CHECK(a.scale == b.scale);
  CHECK(a.growth_factor == b.growth_factor);
  CHECK(a.backoff_factor == b.backoff_factor);
  CHECK(a.growth_interval == b.growth_interval);
  CHECK(a.growth_tracker == b.growth_tracker);
  CHECK(a.hysteresis == b.hysteresis);
  CHECK(a.hysteresis_left == b.hysteresis_left);
  CHECK(a.min_scale == b.min_scale);
  CHECK(a.max_scale == b.max_scale);
  CHECK(a.counters.updates == b.counters.updates);
  CHECK(a.counters.skipped == b.counters.skipped);
  CHECK(a.counters.backoffs == b.counters.backoffs);
  CHECK(a.counters.growths == b.counters.growths);
}

}  // namespace

TEST_CASE("scaler: a run saved mid-way and restored into fresh objects continues bit-identically") {
  Ctx ctx;
  ampx_scaler_options so = scaler_options(512, 3);
  so.hysteresis = 2;
  so.max_scale = 1 << 20;
  Checkpointed run(ctx, {0.5, -0.25, 0.75}, 0.02, so);
  const int kBefore = 5, kAfter = 7;
  for (int it = 0; it < kBefore; ++it) run.iterate(it, it == 2);
  const std::vector<unsigned char> optimizer_state = run.save();
  const ampx_scaler_state scaler_state = scaler_state_of(*run.scaler);
  CHECK(scaler_state.growth_tracker == 2);  // mid-interval: the next clean update grows
  for (int it = kBefore; it < kBefore + kAfter; ++it) run.iterate(it, it == 8 || it == 9);
  const Snapshot expected = snapshot(run.opt, run.params);
  const ampx_scaler_state expected_scaler = scaler_state_of(*run.scaler);

  // Fresh parameters (other values), a fresh optimizer with another lr, a
  // fresh scaler with default options.
  Checkpointed fresh(ctx, {0, 0, 0}, 0.5, ampx_scaler_options_default());
  REQUIRE_MESSAGE(ampx_optimizer_load_state(fresh.opt, optimizer_state.data(),
                                            optimizer_state.size()) == AMPX_OK,
                  last_error());
  REQUIRE(ampx_scaler_set_state(*fresh.scaler, &scaler_state) == AMPX_OK);
  double lr = 0;
  REQUIRE(ampx_optimizer_get_lr(fresh.opt, 1, &lr) == AMPX_OK);
  CHECK(lr == 0.06);
  check_same_scaler_state(scaler_state_of(*fresh.scaler), scaler_state);
  for (ampx_tensor p : fresh.params) check_param_is_rounded_master(fresh.opt, p);
  for (int it = kBefore; it < kBefore + kAfter; ++it) fresh.iterate(it, it == 8 || it == 9);
  CHECK(snapshot(fresh.opt, fresh.params) == expected);
  check_same_scaler_state(scaler_state_of(*fresh.scaler), expected_scaler);
}

TEST_CASE("scaler: a damaged or mismatching optimizer state is refused and changes nothing") {
  Ctx ctx;
  const ampx_scaler_options so = scaler_options(512, 3);
  Checkpointed source(ctx, {0.5, -0.25, 0.75}, 0.02, so);
  for (int it = 0; it < 3; ++it) source.iterate(it, false);
  const std::vector<unsigned char> good = source.save();

  Checkpointed target(ctx, {0.1, 0.2, 0.3}, 0.01, so);
  target.iterate(0, false);
  const Snapshot before = snapshot(target.opt, target.params);
  auto unchanged = [&] {
    CHECK(snapshot(target.opt, target.params) == before);
    double lr = 0;
    REQUIRE(ampx_optimizer_get_lr(target.opt, 1, &lr) == AMPX_OK);
    CHECK(lr == 0.03);
  };

  for (size_t at : {size_t{0}, size_t{9}, good.size() / 2, good.size() - 120, good.size() - 1}) {
    CAPTURE(at);
    std::vector<unsigned char> bad = good;
    bad[at] ^= 0x10;
    CHECK(ampx_optimizer_load_state(target.opt, bad.data(), bad.size()) == AMPX_ERR_CORRUPT);
    unchanged();
  }
  for (size_t length : {size_t{0}, size_t{16}, good.size() / 2, good.size() - 1}) {
    CAPTURE(length);
    CHECK(ampx_optimizer_load_state(target.opt, good.data(), length) == AMPX_ERR_CORRUPT);
    unchanged();
  }
  std::vector<unsigned char> longer = good;
  longer.resize(good.size() + 8, 0);
  CHECK(ampx_optimizer_load_state(target.opt, longer.data(), longer.size()) == AMPX_ERR_CORRUPT);
  unchanged();

  // Same sizes in bytes, but shapes or types that do not match.
  Checkpointed shapes(ctx, {0.1, 0.2, 0.3}, 0.01, so, {AMPX_F32, AMPX_F16, AMPX_BF16}, {5, 4, 3});
  const Snapshot shapes_before = snapshot(shapes.opt, shapes.params);
  CHECK_FAILS_WITH(ampx_optimizer_load_state(shapes.opt, good.data(), good.size()),
                   AMPX_ERR_SHAPE, "parameter 1");
  CHECK(snapshot(shapes.opt, shapes.params) == shapes_before);
  Checkpointed types(ctx, {0.1, 0.2, 0.3}, 0.01, so, {AMPX_F32, AMPX_BF16, AMPX_BF16});
  const Snapshot types_before = snapshot(types.opt, types.params);
  CHECK_FAILS_WITH(ampx_optimizer_load_state(types.opt, good.data(), good.size()),
                   AMPX_ERR_DTYPE, "parameter 1");
  CHECK(snapshot(types.opt, types.params) == types_before);
}

// ampx.h: a state that does not fit the optimizer (another kind, parameter or
// group count, buffer layout or group assignment) is AMPX_ERR_CORRUPT.
TEST_CASE("scaler: an optimizer state of another kind or layout is AMPX_ERR_CORRUPT") {
  Ctx ctx;
  Tensor a(make(ctx, AMPX_F32, {1, 2}));
  Tensor b(make(ctx, AMPX_F32, {3}));
  ampx_tensor both[] = {a.handle, b.handle};
  ampx_adam_options ao = AMPX_ADAM_OPTIONS_INIT;
  Optimizer adam;
  REQUIRE(ampx_optimizer_create_adam(ctx, both, 2, &ao, &adam.handle) == AMPX_OK);
  size_t bytes = 0;
  REQUIRE(ampx_optimizer_state_size(adam, &bytes) == AMPX_OK);
  std::vector<unsigned char> state(bytes);
  REQUIRE(ampx_optimizer_save_state(adam, state.data(), bytes) == AMPX_OK);

  Optimizer sgd, amsgrad, fewer, regrouped;
  ampx_sgd_options so = AMPX_SGD_OPTIONS_INIT;
  so.momentum = 0.9;
  REQUIRE(ampx_optimizer_create_sgd(ctx, both, 2, &so, &sgd.handle) == AMPX_OK);
  ao.amsgrad = 1;
  REQUIRE(ampx_optimizer_create_adam(ctx, both, 2, &ao, &amsgrad.handle) == AMPX_OK);
  ao.amsgrad = 0;
  REQUIRE(ampx_optimizer_create_adam(ctx, both, 1, &ao, &fewer.handle) == AMPX_OK);
  REQUIRE(ampx_optimizer_create_adam(ctx, both, 1, &ao, &regrouped.handle) == AMPX_OK);
  REQUIRE(ampx_optimizer_add_group(regrouped, both + 1, 1, 1e-3, 0, nullptr) == AMPX_OK);
  for (ampx_optimizer o : {sgd.handle, amsgrad.handle, fewer.handle, regrouped.handle}) {
    const std::vector<unsigned char> params_before = bytes_of(a);
    CHECK(ampx_optimizer_load_state(o, state.data(), state.size()) == AMPX_ERR_CORRUPT);
    CHECK(bytes_of(a) == params_before);
  }
}

// ampx.h: Adam and AdamW are different kinds for ampx_optimizer_load_state.
TEST_CASE("scaler: an Adam state does not load into AdamW, nor the reverse") {
  Ctx ctx;
  Tensor a(make(ctx, AMPX_F32, {1, 2}));
  ampx_tensor params[] = {a.handle};
  ampx_adam_options adam_options = AMPX_ADAM_OPTIONS_INIT;
  ampx_adam_options adamw_options = AMPX_ADAMW_OPTIONS_INIT;
  Optimizer adam, adamw;
  REQUIRE(ampx_optimizer_create_adam(ctx, params, 1, &adam_options, &adam.handle) == AMPX_OK);
  REQUIRE(ampx_optimizer_create_adam(ctx, params, 1, &adamw_options, &adamw.handle) == AMPX_OK);
  size_t bytes = 0;
  REQUIRE(ampx_optimizer_state_size(adam, &bytes) == AMPX_OK);
  std::vector<unsigned char> adam_state(bytes), adamw_state(bytes);
  REQUIRE(ampx_optimizer_save_state(adam, adam_state.data(), bytes) == AMPX_OK);
  REQUIRE(ampx_optimizer_save_state(adamw, adamw_state.data(), bytes) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_optimizer_load_state(adamw, adam_state.data(), bytes), AMPX_ERR_CORRUPT,
                   "saved from an Adam optimizer but this one is AdamW");
  CHECK_FAILS_WITH(ampx_optimizer_load_state(adam, adamw_state.data(), bytes), AMPX_ERR_CORRUPT,
                   "saved from an AdamW optimizer but this one is Adam");
  CHECK(ampx_optimizer_load_state(adam, adam_state.data(), bytes) == AMPX_OK);
  CHECK(ampx_optimizer_load_state(adamw, adamw_state.data(), bytes) == AMPX_OK);
}

// ---- 9. a disabled scaler ----------------------------------------------------------------

TEST_CASE("scaler: a disabled scaler is a transparent pass-through (the bf16 recipe)") {
  Ctx ctx;
  const Regression task(6, 101);
  Trainee t(ctx, task, {AMPX_BF16, AMPX_BF16}, AMPX_BF16, adam_factory(adamw(0.02)), 9);
  ampx_scaler_options so = scaler_options(65536, 1);
  so.enabled = 0;
  Scaler scaler(ctx, so);
  CHECK(scale_of(scaler) == 1);
  Tensor scale;
  REQUIRE(ampx_scaler_scale_tensor(scaler, scale.out()) == AMPX_OK);
  CHECK(values_of(scale) == std::vector<double>{1});
  Tensor loss(make(ctx, AMPX_BF16, {2.5}));
  Tensor scaled;
  REQUIRE(ampx_scaler_scale_loss(scaler, loss, scaled.out()) == AMPX_OK);
  CHECK(dtype_of(scaled) == AMPX_F32);
  CHECK(values_of(scaled) == std::vector<double>{2.5});
  CHECK(ampx_scaler_update(scaler) == AMPX_OK);  // nothing recorded, nothing to do

  for (int it = 0; it < 6; ++it) {
    CAPTURE(it);
    bool overflow = false;
    const Grads eff = t.write_scaled(t.backward(it), 1.0, 0.0, &overflow);
    REQUIRE(ampx_scaler_unscale(scaler, t.opt) == AMPX_OK);
    t.check_grads_untouched();
    for (size_t k = 0; k < eff.size(); ++k) write(t.control_grads[k], eff[k]);
    if (it % 2) {
      // No unscale is needed before clipping: the gradients are not scaled.
      // (2^-4 is a bf16 value, so both clamp to the same limit.)
      REQUIRE(ampx_clip_grad_value(t.opt, 0.0625) == AMPX_OK);
      REQUIRE(ampx_clip_grad_value(t.control, 0.0625) == AMPX_OK);
    }
    if (it == 3) {
      REQUIRE(ampx_optimizer_step(t.opt) == AMPX_OK);  // allowed: nothing is scaled
    } else {
      REQUIRE(ampx_scaler_step(scaler, t.opt) == AMPX_OK);
    }
    REQUIRE(ampx_optimizer_step(t.control) == AMPX_OK);
    if (it == 4) {
      // Exactly ampx_optimizer_step, so a second call is a second step.
      REQUIRE(ampx_scaler_step(scaler, t.opt) == AMPX_OK);
      REQUIRE(ampx_optimizer_step(t.control) == AMPX_OK);
    }
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
    CHECK(t.last_taken());
    t.check_matches_control();
    for (ampx_tensor p : t.params) check_param_is_rounded_master(t.opt, p);
  }
  CHECK(steps_of(t.opt, t.params[0]) == 7);
  const ampx_scaler_state st = scaler_state_of(scaler);
  CHECK(st.scale == 1);
  CHECK(st.counters.updates == 0);
  CHECK(st.counters.skipped == 0);
  CHECK(scale_of(scaler) == 1);
}

// ---- 10. low-precision gradients are unscaled into fp32 -------------------------------------

TEST_CASE("scaler: f16 and bf16 gradients are unscaled into fp32, never in place") {
  Ctx ctx;
  SUBCASE("f16: a gradient that in-place unscaling would flush to zero arrives intact") {
    // 1e-8 * 65536 is a normal f16 number; divided by 65536 in f16 it would
    // be below half the smallest subnormal (2^-25) and become 0, and 1e-6
    // would keep only 5 significant bits as a subnormal.
    const std::vector<double> wanted = {1e-3, 1e-8, -1e-6, 3e-5, 0.0};
    Tensor p(make(ctx, AMPX_F32, std::vector<double>(wanted.size(), 0.0)));
    ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
    o.lr = 1.0;  // p = 0 - 1 * g: the parameter shows the gradient exactly
    Optimizer opt;
    REQUIRE(ampx_optimizer_create_sgd(ctx, &p.handle, 1, &o, &opt.handle) == AMPX_OK);
    ampx_tensor g = attach_grad(ctx, p, AMPX_F16);
    Scaler scaler(ctx, ampx_scaler_options_default());
    REQUIRE(scale_of(scaler) == 65536);
    std::vector<double> scaled;
    for (double w : wanted) scaled.push_back(w * 65536);
    write(g, scaled);
    const std::vector<unsigned char> written = bytes_of(g);
    REQUIRE(ampx_scaler_step(scaler, opt) == AMPX_OK);
    CHECK(bytes_of(g) == written);
    const std::vector<double> stored = values_of(g);
    const std::vector<double> have = values_of(p);
    for (size_t i = 0; i < wanted.size(); ++i) {
      CAPTURE(i);
      CHECK(have[i] == -stored[i] / 65536);  // exact: a power-of-two scale
      // f16 holds w * 65536 to 2^-11 relative, so the effect is w to that.
      CHECK(std::fabs(-have[i] - wanted[i]) <= std::ldexp(std::fabs(wanted[i]), -11));
    }
    CHECK(have[1] != 0.0);
    CHECK(f16_bits(stored[1] / 65536) == 0);  // what in-place unscaling would give
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
  }
  SUBCASE("bf16: the unscaled value keeps fp32's 24 bits") {
    // Scale 3: 1/3 is not a power of two, so the unscaled values need more
    // than bf16's 8 significant bits.
    Tensor p(make(ctx, AMPX_F32, {0, 0, 0, 0}));
    ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
    o.lr = 1.0;
    Optimizer opt;
    REQUIRE(ampx_optimizer_create_sgd(ctx, &p.handle, 1, &o, &opt.handle) == AMPX_OK);
    ampx_tensor g = attach_grad(ctx, p, AMPX_BF16);
    Scaler scaler(ctx, scaler_options(3.0, 1000));
    write(g, {1.0, 0.3, -5.5, 1e-20});
    const std::vector<unsigned char> written = bytes_of(g);
    REQUIRE(ampx_scaler_step(scaler, opt) == AMPX_OK);
    CHECK(bytes_of(g) == written);
    // The reciprocal is taken in double and rounded to fp32, then one fp32
    // product (exact in double, rounded once).
    const double reciprocal = static_cast<float>(1.0 / 3.0);
    const std::vector<double> stored = values_of(g);
    const std::vector<double> have = values_of(p);
    int needs_fp32 = 0;
    for (size_t i = 0; i < stored.size(); ++i) {
      CAPTURE(i);
      const double unscaled = static_cast<float>(stored[i] * reciprocal);
      CHECK(have[i] == -unscaled);
      if (round_to(AMPX_BF16, unscaled) != unscaled) ++needs_fp32;
    }
    CHECK(needs_fp32 >= 3);
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
  }
}

// ---- 11. finding non-finite gradients -------------------------------------------------------

TEST_CASE("scaler: find_nonfinite_grads names the poisoned parameters with their counts") {
  Ctx ctx;
  Tensor p0(make(ctx, AMPX_F32, {1, 2, 3}));
  Tensor p1(make(ctx, AMPX_F16, {1, 2, 3, 4}));
  Tensor p2(make(ctx, AMPX_F32, {1, 2}));
  Tensor p3(make(ctx, AMPX_BF16, {1, 2, 3}));
  Tensor p4(make(ctx, AMPX_F32, {5}));
  Tensor p5(make(ctx, AMPX_F32, {1, 1}));
  REQUIRE(ampx_tensor_set_name(p0, "embed.weight") == AMPX_OK);
  REQUIRE(ampx_tensor_set_name(p1, "layer1.weight") == AMPX_OK);
  REQUIRE(ampx_tensor_set_name(p3, "layer3.bias") == AMPX_OK);
  REQUIRE(ampx_tensor_set_name(p4, "head.weight") == AMPX_OK);
  const ampx_tensor list[] = {p0, p1, p2, p3, p4, p5};
  Optimizer opt;
  REQUIRE(ampx_optimizer_create_sgd(ctx, list, 6, nullptr, &opt.handle) == AMPX_OK);
  write(attach_grad(ctx, p0, AMPX_F32), {1, 2, 3});
  write(attach_grad(ctx, p1, AMPX_F16), {NAN, INFINITY, -INFINITY, 70000});  // 70000: inf in f16
  write(attach_grad(ctx, p2, AMPX_F32), {NAN, 1});                           // unnamed
  write(attach_grad(ctx, p3, AMPX_BF16), {1, NAN, NAN});
  // p4 has no gradient; p5 a clean one.
  write(attach_grad(ctx, p5, AMPX_F16), {0, -0.0});

  struct Expect {
    ampx_tensor param;
    const char* name;
    int64_t nans, infs;
  };
  const Expect expect[] = {{p1, "layer1.weight", 1, 3}, {p2, "", 1, 0}, {p3, "layer3.bias", 2, 0}};
  auto check_entries = [&](const ampx_nonfinite_grad* entries, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      CAPTURE(i);
      CHECK(entries[i].param == expect[i].param);
      REQUIRE(entries[i].name != nullptr);
      CHECK(std::string(entries[i].name) == expect[i].name);
      CHECK(entries[i].nan_count == expect[i].nans);
      CHECK(entries[i].inf_count == expect[i].infs);
    }
  };

  size_t found = 99;
  REQUIRE(ampx_find_nonfinite_grads(opt, nullptr, 0, &found) == AMPX_OK);
  CHECK(found == 3);
  ampx_nonfinite_grad entries[8];
  for (ampx_nonfinite_grad& e : entries) e = {nullptr, "untouched", -1, -1};
  REQUIRE(ampx_find_nonfinite_grads(opt, entries, 2, &found) == AMPX_OK);
  CHECK(found == 3);
  check_entries(entries, 2);
  CHECK(std::string(entries[2].name) == "untouched");
  CHECK(entries[2].nan_count == -1);
  REQUIRE(ampx_find_nonfinite_grads(opt, entries, 8, &found) == AMPX_OK);
  CHECK(found == 3);
  check_entries(entries, 3);
  CHECK(entries[3].param == nullptr);

  // After unscale the report reads the fp32 copies the step would use.
  Scaler scaler(ctx, scaler_options(1024, 10));
  REQUIRE(ampx_scaler_unscale(scaler, opt) == AMPX_OK);
  CHECK(found_inf(scaler, opt) == 1);
  REQUIRE(ampx_find_nonfinite_grads(opt, entries, 8, &found) == AMPX_OK);
  CHECK(found == 3);
  check_entries(entries, 3);

  CHECK_FAILS_WITH(ampx_find_nonfinite_grads(opt, nullptr, 2, &found), AMPX_ERR_INVALID_ARGUMENT,
                   "entries");
  CHECK_FAILS_WITH(ampx_find_nonfinite_grads(opt, entries, 8, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "found");
  CHECK_FAILS_WITH(ampx_find_nonfinite_grads(nullptr, entries, 8, &found),
                   AMPX_ERR_INVALID_ARGUMENT, "optimizer");
}

// ---- 12. the iteration's rules with ampx's own backward -------------------------------------

namespace {

// p = [1, 2] (F32, requires grad) and SGD(lr 0.125) over it, not attached to
// any scaler; loss = sum(p * p), so a backward seeded with scale s gives
// the gradients 2 s p.
struct Quadratic {
  Ctx ctx;
  Tensor p;
  Optimizer opt;
  Quadratic() : p(make(ctx, AMPX_F32, {2}, {1.0, 2.0}, true)) {
    ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
    o.lr = 0.125;
    REQUIRE(ampx_optimizer_create_sgd(ctx, &p.handle, 1, &o, &opt.handle) == AMPX_OK);
  }
  void backward(ampx_scaler scaler) {
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    ampx_tensor sq = nullptr, loss = nullptr;
    REQUIRE(ampx_mul(p, p, &sq) == AMPX_OK);
    REQUIRE(ampx_sum(sq, &loss) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, scaler) == AMPX_OK, last_error());
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }
  std::vector<double> grad() const { return values_of(grad_of(p)); }
  std::vector<double> value() const { return values_of(p); }
};

}  // namespace

TEST_CASE("scaler: gradients a backward scaled are refused by step and clipping, attached or not") {
  // The README's promise without ampx_scaler_attach: the backward knows it
  // scaled these gradients. Parameters [1, 2], scale 65536: the refused
  // step would have used the gradients [131072, 262144].
  enum class Call { Step, ClipNorm, ClipValue };
  for (const Call call : {Call::Step, Call::ClipNorm, Call::ClipValue}) {
    CAPTURE(static_cast<int>(call));
    Quadratic q;
    Scaler scaler(q.ctx, scaler_options(65536, 2000));
    q.backward(scaler);
    CHECK(q.grad() == std::vector<double>{131072, 262144});
    const auto run = [&] {
      switch (call) {
        case Call::Step: return ampx_optimizer_step(q.opt);
        case Call::ClipNorm: return ampx_clip_grad_norm(q.opt, 1.0, 2.0, 0, nullptr);
        case Call::ClipValue: return ampx_clip_grad_value(q.opt, 1.0);
      }
      return AMPX_OK;
    };
    CHECK_FAILS_WITH(run(), AMPX_ERR_ORDER, "ampx_scaler_unscale");
    CHECK(q.grad() == std::vector<double>{131072, 262144});
    CHECK(q.value() == std::vector<double>{1, 2});
    // A disabled scaler's step is ampx_optimizer_step, with its checks.
    ampx_scaler_options off = scaler_options(65536, 2000);
    off.enabled = 0;
    Scaler disabled(q.ctx, off);
    CHECK_FAILS_WITH(ampx_scaler_step(disabled, q.opt), AMPX_ERR_ORDER, "ampx_scaler_unscale");
    CHECK(q.value() == std::vector<double>{1, 2});
    // Once unscaled, the same call runs; the scaler's step then steps with
    // the unscaled gradients [2, 4].
    REQUIRE(ampx_scaler_unscale(scaler, q.opt) == AMPX_OK);
    CHECK(q.grad() == std::vector<double>{2, 4});
    if (call != Call::Step) REQUIRE(run() == AMPX_OK);
    REQUIRE(ampx_scaler_step(scaler, q.opt) == AMPX_OK);
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
    if (call == Call::Step) CHECK(q.value() == std::vector<double>{0.75, 1.5});
  }
}

TEST_CASE("scaler: after zero_grad, or a backward without a scaler or with a disabled one, nothing is marked") {
  {
    Quadratic q;
    Scaler scaler(q.ctx, scaler_options(65536, 2000));
    q.backward(scaler);
    REQUIRE(ampx_optimizer_zero_grad(q.opt) == AMPX_OK);
    REQUIRE(ampx_optimizer_step(q.opt) == AMPX_OK);  // zeros carry no scale
    q.backward(nullptr);
    REQUIRE(ampx_optimizer_step(q.opt) == AMPX_OK);
    CHECK(q.value() == std::vector<double>{0.75, 1.5});
    ampx_scaler_options off = scaler_options(65536, 2000);
    off.enabled = 0;
    Scaler disabled(q.ctx, off);
    REQUIRE(ampx_optimizer_zero_grad(q.opt) == AMPX_OK);
    q.backward(disabled);
    REQUIRE(ampx_optimizer_step(q.opt) == AMPX_OK);
    REQUIRE(ampx_scaler_step(disabled, q.opt) == AMPX_OK);
  }
}

TEST_CASE("scaler: a disabled scaler's unscale and step keep the one-scaler rule") {
  // With an enabled S1 attached and a backward through it, the disabled
  // S2's calls used to return OK: step stepped with gradients still
  // multiplied by 65536, unscale did nothing.
  Quadratic q;
  Scaler s1(q.ctx, scaler_options(65536, 2000));
  ampx_scaler_options off = scaler_options(65536, 2000);
  off.enabled = 0;
  Scaler s2(q.ctx, off);
  REQUIRE(ampx_scaler_attach(s1, q.opt) == AMPX_OK);
  q.backward(s1);
  CHECK_FAILS_WITH(ampx_scaler_step(s2, q.opt), AMPX_ERR_INVALID_ARGUMENT, "another scaler");
  CHECK_FAILS_WITH(ampx_scaler_unscale(s2, q.opt), AMPX_ERR_INVALID_ARGUMENT, "another scaler");
  CHECK(q.grad() == std::vector<double>{131072, 262144});
  CHECK(q.value() == std::vector<double>{1, 2});
  REQUIRE(ampx_scaler_step(s1, q.opt) == AMPX_OK);
  REQUIRE(ampx_scaler_update(s1) == AMPX_OK);
  CHECK(q.value() == std::vector<double>{0.75, 1.5});
}

TEST_CASE("scaler: the header's rules for update and for ampx_optimizer_step") {
  // update: refused when no optimizer was unscaled since the last update
  // (torch's "No inf checks were recorded"); an unscale without a step is
  // enough, as torch's unscale_ then update.
  Quadratic q;
  Scaler scaler(q.ctx, scaler_options(65536, 1));
  CHECK_FAILS_WITH(ampx_scaler_update(scaler), AMPX_ERR_ORDER, "ampx_scaler_unscale");
  q.backward(scaler);
  REQUIRE(ampx_scaler_unscale(scaler, q.opt) == AMPX_OK);
  REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
  CHECK(scale_of(scaler) == 131072);  // a clean update at interval 1 grows
  CHECK(q.value() == std::vector<double>{1, 2});
  // ampx_optimizer_step: refused while the optimizer is attached to an
  // enabled scaler, also after an unscale (its found-inf check would be
  // bypassed): ampx_scaler_step steps it.
  REQUIRE(ampx_optimizer_zero_grad(q.opt) == AMPX_OK);
  q.backward(scaler);
  CHECK_FAILS_WITH(ampx_optimizer_step(q.opt), AMPX_ERR_ORDER, "ampx_scaler_step");
  REQUIRE(ampx_scaler_unscale(scaler, q.opt) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_optimizer_step(q.opt), AMPX_ERR_ORDER, "ampx_scaler_step");
  CHECK(q.value() == std::vector<double>{1, 2});
  REQUIRE(ampx_scaler_step(scaler, q.opt) == AMPX_OK);
  REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
  CHECK(q.value() == std::vector<double>{0.75, 1.5});
}
