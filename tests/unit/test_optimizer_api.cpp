// Optimizers through the public C API: SGD and Adam/AdamW against the
// double-precision references of training_fixture.h for every option
// combination, param groups and learning rates, parameters without
// gradients, zero_grad, state tensors, add_group, and every misuse.
//
// Tolerances. The library runs each update in fp32 on values of order
// `magnitude` (parameters, gradients and momenta are O(1) here); an element's
// update takes fewer than 10 fp32 operations, each rounding by at most 2^-24
// of its operands, and the hyperparameters travel as fp32 on the device
// (beta2 = 0.999 moves by 1.3e-8 relative, under a quarter of a rounding).
// One step is therefore checked to kStepUlps roundings of the magnitude. Over
// a run the roundings of successive steps are independent and grow like
// sqrt(steps): 25 steps of a few roundings each stay well under kRunUlps
// (about 1.9e-6 relative; observed at most 6). Any slip in the formulas --
// bias correction, the order of weight decay, a dampened first momentum
// step -- moves the result by 1e-4 or more. F16/BF16 parameters are checked
// on their fp32 master with the same bounds, and the parameter itself must
// then be exactly the master rounded to nearest even.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "training_fixture.h"

using namespace ampx_fixture;
using ampx_test::contains;
using ampx_test::Ctx;

namespace {

constexpr double kStepUlps = 4;
constexpr double kRunUlps = 32;

const ampx_dtype kFloatTypes[] = {AMPX_F32, AMPX_F16, AMPX_BF16};

ampx_optimizer sentinel_optimizer() {
  return reinterpret_cast<ampx_optimizer>(uintptr_t{0x5151});
}

uint64_t current_bytes(ampx_context ctx) {
  ampx_memory_stats s = AMPX_MEMORY_STATS_INIT;
  REQUIRE(ampx_memory_stats_get(ctx, &s) == AMPX_OK);
  return s.current_bytes;
}

struct OptimizerHandle {
  ampx_optimizer handle = nullptr;
  OptimizerHandle() = default;
  explicit OptimizerHandle(ampx_optimizer o) : handle(o) {}
  ~OptimizerHandle() { ampx_optimizer_release(handle); }
  OptimizerHandle(const OptimizerHandle&) = delete;
  OptimizerHandle& operator=(const OptimizerHandle&) = delete;
  operator ampx_optimizer() const { return handle; }
};

struct ScalerHandle {
  ampx_scaler handle = nullptr;
  explicit ScalerHandle(ampx_scaler s) : handle(s) {}
  ~ScalerHandle() { ampx_scaler_release(handle); }
  ScalerHandle(const ScalerHandle&) = delete;
  ScalerHandle& operator=(const ScalerHandle&) = delete;
  operator ampx_scaler() const { return handle; }
};

ampx_optimizer make_sgd(ampx_context ctx, const std::vector<ampx_tensor>& params,
                        const ampx_sgd_options& o) {
  ampx_optimizer opt = nullptr;
  REQUIRE_MESSAGE(ampx_optimizer_create_sgd(ctx, params.data(), params.size(), &o, &opt) ==
                      AMPX_OK,
                  last_error());
  return opt;
}

ampx_optimizer make_adam(ampx_context ctx, const std::vector<ampx_tensor>& params,
                         const ampx_adam_options& o) {
  ampx_optimizer opt = nullptr;
  REQUIRE_MESSAGE(ampx_optimizer_create_adam(ctx, params.data(), params.size(), &o, &opt) ==
                      AMPX_OK,
                  last_error());
  return opt;
}

// The fp32 values the optimizer updates: the parameter, or its master.
std::vector<double> updated_values(ampx_optimizer opt, ampx_tensor param) {
  Tensor master(state_of(opt, param, AMPX_STATE_MASTER));
  return values_of(master);
}

// Compares every element of `have` with the reference within `ulps` fp32
// roundings of `magnitude`; reports the worst element.
void check_close(const std::vector<double>& have, const std::vector<double>& want, double ulps,
                 double magnitude, const std::string& what) {
  REQUIRE(have.size() == want.size());
  size_t worst = 0;
  double worst_err = -1;
  for (size_t i = 0; i < have.size(); ++i) {
    const double err = std::fabs(have[i] - want[i]);
    if (!(err <= worst_err)) {
      worst_err = err;
      worst = i;
    }
  }
  if (have.empty()) return;
  INFO(what << ": element " << worst << " is " << have[worst] << ", reference " << want[worst]
            << " (" << worst_err / (kF32Eps * magnitude) << " roundings of " << magnitude
            << "; allowed " << ulps << ")");
  CHECK(close(have[worst], want[worst], ulps, magnitude));
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace

// ---- SGD ---------------------------------------------------------------------

TEST_CASE("optimizer: SGD matches the double reference for every option combination") {
  Ctx ctx;
  const int kSteps = 25;
  int combo = 0;
  for (double momentum : {0.0, 0.9})
    for (double dampening : {0.0, 0.25})
      for (int nesterov : {0, 1})
        for (double weight_decay : {0.0, 0.05})
          for (int maximize : {0, 1})
            for (ampx_dtype param_dtype : kFloatTypes) {
              if (nesterov && (momentum == 0.0 || dampening != 0.0)) continue;
              if (momentum == 0.0 && dampening != 0.0) continue;  // dampening unused
              // Gradient types rotate so every pair of types is met.
              const ampx_dtype grad_dtype = kFloatTypes[combo % 3];
              ++combo;
              CAPTURE(momentum);
              CAPTURE(dampening);
              CAPTURE(nesterov);
              CAPTURE(weight_decay);
              CAPTURE(maximize);
              CAPTURE(ampx_dtype_name(param_dtype));
              CAPTURE(ampx_dtype_name(grad_dtype));
              Rng rng(1000 + combo);
              // 67 elements: not a multiple of any vector width.
              Tensor p(make(ctx, param_dtype, rng.vector(67, -1, 1)));
              Tensor q(make(ctx, param_dtype, rng.vector(5, -1, 1)));
              ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
              o.lr = 0.05;
              o.momentum = momentum;
              o.dampening = dampening;
              o.nesterov = nesterov;
              o.weight_decay = weight_decay;
              o.maximize = maximize;
              OptimizerHandle opt(make_sgd(ctx, {p, q}, o));
              ampx_tensor gp = attach_grad(ctx, p, grad_dtype);
              ampx_tensor gq = attach_grad(ctx, q, grad_dtype);
              const SgdRef ref = sgd_ref_of(o);
              RefParam rp(values_of(p)), rq(values_of(q));
              double magnitude = 1;
              for (int step = 0; step < kSteps; ++step) {
                const std::vector<double> g1 = rng.vector(67, -1, 1);
                const std::vector<double> g2 = rng.vector(5, -1, 1);
                write(gp, g1);
                write(gq, g2);
                REQUIRE_MESSAGE(ampx_optimizer_step(opt) == AMPX_OK, last_error());
                // The reference sees the gradient as stored in its tensor.
                sgd_ref_step(rp, values_of(gp), ref, o.lr, o.weight_decay);
                sgd_ref_step(rq, values_of(gq), ref, o.lr, o.weight_decay);
                magnitude = std::max({magnitude, max_abs(rp.p), max_abs(rp.buf)});
              }
              const double ulps = kRunUlps;
              check_close(updated_values(opt, p), rp.p, ulps, magnitude, "p");
              check_close(updated_values(opt, q), rq.p, ulps, magnitude, "q");
              if (momentum != 0) {
                Tensor buf(state_of(opt, p, AMPX_STATE_MOMENTUM));
                check_close(values_of(buf), rp.buf, ulps, magnitude, "momentum buffer");
              }
              check_param_is_rounded_master(opt, p);
              check_param_is_rounded_master(opt, q);
              CHECK(steps_of(opt, p) == kSteps);
            }
  CHECK(combo == 48);
}

TEST_CASE("optimizer: a parameter spanning several work chunks updates every element") {
  // 70001 elements: more than one 64Ki chunk of the CPU backend and enough to
  // wake its worker threads, with a ragged tail.
  Ctx ctx;
  Rng rng(77);
  const size_t n = 70001;
  for (ampx_dtype param_dtype : {AMPX_F32, AMPX_BF16}) {
    CAPTURE(ampx_dtype_name(param_dtype));
    Tensor p(make(ctx, param_dtype, rng.vector(n, -1, 1)));
    ampx_adam_options o = AMPX_ADAMW_OPTIONS_INIT;
    o.lr = 0.01;
    o.amsgrad = 1;
    OptimizerHandle opt(make_adam(ctx, {p}, o));
    ampx_tensor g = attach_grad(ctx, p, AMPX_F32);
    RefParam r(values_of(p));
    for (int step = 0; step < 4; ++step) {
      write(g, rng.vector(n, -1, 1));
      REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
      adam_ref_step(r, values_of(g), adam_ref_of(o), o.lr, o.weight_decay);
    }
    check_close(updated_values(opt, p), r.p, kRunUlps, 1.0, "p");
    check_param_is_rounded_master(opt, p);
  }
}

// ---- Adam / AdamW ----------------------------------------------------------------

TEST_CASE("optimizer: Adam and AdamW match the double reference for every option combination") {
  Ctx ctx;
  const int kSteps = 20;
  int combo = 0;
  for (int decoupled : {0, 1})
    for (int amsgrad : {0, 1})
      for (int maximize : {0, 1})
        for (double weight_decay : {0.0, 0.1})
          for (double eps : {1e-8, 1e-3})
            for (ampx_dtype param_dtype : kFloatTypes) {
              const ampx_dtype grad_dtype = kFloatTypes[(combo / 3) % 3];
              // Two beta pairs: torch's defaults and a fast-forgetting one.
              const bool fast = combo % 2 == 1;
              ++combo;
              CAPTURE(decoupled);
              CAPTURE(amsgrad);
              CAPTURE(maximize);
              CAPTURE(weight_decay);
              CAPTURE(eps);
              CAPTURE(fast);
              CAPTURE(ampx_dtype_name(param_dtype));
              CAPTURE(ampx_dtype_name(grad_dtype));
              Rng rng(5000 + combo);
              Tensor p(make(ctx, param_dtype, rng.vector(67, -1, 1)));
              ampx_adam_options o =
                  decoupled ? ampx_adamw_options_default() : ampx_adam_options_default();
              o.lr = 0.01;
              o.beta1 = fast ? 0.5 : 0.9;
              o.beta2 = fast ? 0.8 : 0.999;
              o.eps = eps;
              o.weight_decay = weight_decay;
              o.amsgrad = amsgrad;
              o.maximize = maximize;
              OptimizerHandle opt(make_adam(ctx, {p}, o));
              ampx_tensor g = attach_grad(ctx, p, grad_dtype);
              const AdamRef ref = adam_ref_of(o);
              RefParam r(values_of(p));
              for (int step = 0; step < kSteps; ++step) {
                // Gradient sizes that shrink and grow again, so that v falls
                // below its running max and amsgrad matters.
                const double size = 1.0 / (1 + step % 4);
                write(g, rng.vector(67, -size, size));
                REQUIRE_MESSAGE(ampx_optimizer_step(opt) == AMPX_OK, last_error());
                adam_ref_step(r, values_of(g), ref, o.lr, o.weight_decay);
              }
              const double ulps = kRunUlps;
              check_close(updated_values(opt, p), r.p, ulps, 1.0 + max_abs(r.p), "p");
              Tensor m(state_of(opt, p, AMPX_STATE_MOMENTUM));
              Tensor v(state_of(opt, p, AMPX_STATE_EXP_AVG_SQ));
              check_close(values_of(m), r.m, ulps, 1.0, "exp_avg");
              check_close(values_of(v), r.v, ulps, 1.0, "exp_avg_sq");
              if (amsgrad) {
                Tensor vmax(state_of(opt, p, AMPX_STATE_MAX_EXP_AVG_SQ));
                check_close(values_of(vmax), r.vmax, ulps, 1.0, "max_exp_avg_sq");
              } else {
                Tensor none;
                CHECK(ampx_optimizer_state_tensor(opt, p, AMPX_STATE_MAX_EXP_AVG_SQ,
                                                  none.out()) == AMPX_ERR_NOT_SUPPORTED);
              }
              check_param_is_rounded_master(opt, p);
              CHECK(steps_of(opt, p) == kSteps);
            }
  CHECK(combo == 96);
}

TEST_CASE("optimizer: the option defaults are torch's") {
  const ampx_sgd_options s = ampx_sgd_options_default();
  CHECK(s.struct_size == sizeof(ampx_sgd_options));
  CHECK(s.lr == 1e-3);
  CHECK(s.momentum == 0.0);
  CHECK(s.dampening == 0.0);
  CHECK(s.weight_decay == 0.0);
  CHECK(s.nesterov == 0);
  CHECK(s.maximize == 0);
  const ampx_adam_options a = ampx_adam_options_default();
  CHECK(a.lr == 1e-3);
  CHECK(a.beta1 == 0.9);
  CHECK(a.beta2 == 0.999);
  CHECK(a.eps == 1e-8);
  CHECK(a.weight_decay == 0.0);
  CHECK(a.decoupled_weight_decay == 0);
  const ampx_adam_options w = ampx_adamw_options_default();
  CHECK(w.weight_decay == 1e-2);
  CHECK(w.decoupled_weight_decay == 1);

  // NULL options are the defaults: one step of each equals the reference
  // with the default hyperparameters.
  Ctx ctx;
  Tensor p(make(ctx, AMPX_F32, {0.5, -0.25, 2.0}));
  Tensor q(make(ctx, AMPX_F32, {0.5, -0.25, 2.0}));
  ampx_optimizer sgd = nullptr, adam = nullptr;
  REQUIRE(ampx_optimizer_create_sgd(ctx, &p.handle, 1, nullptr, &sgd) == AMPX_OK);
  REQUIRE(ampx_optimizer_create_adam(ctx, &q.handle, 1, nullptr, &adam) == AMPX_OK);
  OptimizerHandle own_sgd(sgd), own_adam(adam);
  write(attach_grad(ctx, p, AMPX_F32), {1.0, 2.0, -3.0});
  write(attach_grad(ctx, q, AMPX_F32), {1.0, 2.0, -3.0});
  REQUIRE(ampx_optimizer_step(sgd) == AMPX_OK);
  REQUIRE(ampx_optimizer_step(adam) == AMPX_OK);
  RefParam rs({0.5, -0.25, 2.0}), ra({0.5, -0.25, 2.0});
  sgd_ref_step(rs, {1.0, 2.0, -3.0}, SgdRef{}, 1e-3, 0.0);
  adam_ref_step(ra, {1.0, 2.0, -3.0}, AdamRef{}, 1e-3, 0.0);
  check_close(values_of(p), rs.p, kStepUlps, 2.0, "sgd");
  check_close(values_of(q), ra.p, kStepUlps, 2.0, "adam");
}

// ---- skipped steps ----------------------------------------------------------------

TEST_CASE("optimizer: SGD's momentum buffer starts at the first step taken, after a skipped one") {
  // With dampening, a buffer wrongly treated as already started would hold
  // (1 - dampening) * g after the first taken step instead of g.
  Ctx ctx;
  for (int nesterov : {0, 1}) {
    CAPTURE(nesterov);
    ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.dampening = nesterov ? 0.0 : 0.5;
    o.nesterov = nesterov;
    o.weight_decay = 0.01;
    const std::vector<double> init = {0.25, -0.5, 1.0, 0.125};
    Tensor p(make(ctx, AMPX_F16, init));
    OptimizerHandle opt(make_sgd(ctx, {p}, o));
    ampx_scaler scaler_handle = nullptr;
    ampx_scaler_options so = AMPX_SCALER_OPTIONS_INIT;
    so.init_scale = 1024;
    REQUIRE(ampx_scaler_create(ctx, &so, &scaler_handle) == AMPX_OK);
    ScalerHandle scaler(scaler_handle);
    ampx_tensor g = attach_grad(ctx, p, AMPX_F32);
    RefParam r(values_of(p));
    const SgdRef ref = sgd_ref_of(o);

    // Iteration 1 overflows: nothing may start.
    write(g, {1.0 * 1024, INFINITY, 0.5 * 1024, 0.0});
    const Snapshot before = snapshot(opt, {p});
    REQUIRE(ampx_scaler_step(scaler, opt) == AMPX_OK);
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
    int32_t taken = -1;
    REQUIRE(ampx_optimizer_last_step_taken(opt, &taken) == AMPX_OK);
    CHECK(taken == 0);
    CHECK(snapshot(opt, {p}) == before);
    CHECK(steps_of(opt, p) == 0);

    // Iterations 2..4 are clean; iteration 2 is the first step taken.
    for (int it = 0; it < 3; ++it) {
      const double scale = scale_of(scaler);
      const std::vector<double> grad = {0.5 - it, 0.25, -1.0, 2.0 + it};
      std::vector<double> scaled(grad.size());
      for (size_t i = 0; i < grad.size(); ++i) scaled[i] = grad[i] * scale;
      write(g, scaled);
      REQUIRE(ampx_scaler_step(scaler, opt) == AMPX_OK);
      REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
      sgd_ref_step(r, grad, ref, o.lr, o.weight_decay);
      Tensor buf(state_of(opt, p, AMPX_STATE_MOMENTUM));
      check_close(values_of(buf), r.buf, kRunUlps, 4.0, "momentum buffer");
      check_close(updated_values(opt, p), r.p, kRunUlps, 4.0, "master");
      check_param_is_rounded_master(opt, p);
    }
    CHECK(steps_of(opt, p) == 3);
  }
}

TEST_CASE("optimizer: Adam's bias correction counts only the steps taken") {
  Ctx ctx;
  Tensor p(make(ctx, AMPX_F32, {0.5, -0.5}));
  ampx_adam_options o = AMPX_ADAM_OPTIONS_INIT;
  o.lr = 0.1;
  OptimizerHandle opt(make_adam(ctx, {p}, o));
  ampx_scaler s = nullptr;
  REQUIRE(ampx_scaler_create(ctx, nullptr, &s) == AMPX_OK);
  ScalerHandle scaler(s);
  ampx_tensor g = attach_grad(ctx, p, AMPX_F16);
  RefParam r(values_of(p));
  for (int it = 0; it < 4; ++it) {
    const double scale = scale_of(scaler);
    const bool poisoned = it < 2;
    const std::vector<double> grad = {0.25 * (it + 1), -0.125};
    write(g, {poisoned ? NAN : grad[0] * scale, grad[1] * scale});
    REQUIRE(ampx_scaler_step(scaler, opt) == AMPX_OK);
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
    if (!poisoned) adam_ref_step(r, grad, adam_ref_of(o), o.lr, 0.0);
    CHECK(steps_of(opt, p) == r.steps);
  }
  check_close(values_of(p), r.p, kRunUlps, 1.0, "p");
}

// ---- groups and learning rates ------------------------------------------------------

TEST_CASE("optimizer: param groups keep their own lr and weight decay; set_lr applies from the next step") {
  Ctx ctx;
  for (int adam : {0, 1}) {
    CAPTURE(adam);
    Rng rng(31 + adam);
    Tensor a(make(ctx, AMPX_F32, rng.vector(9, -1, 1)));
    Tensor b(make(ctx, AMPX_BF16, rng.vector(4, -1, 1)));
    Tensor c(make(ctx, AMPX_F16, rng.vector(6, -1, 1)));
    ampx_sgd_options so = AMPX_SGD_OPTIONS_INIT;
    so.lr = 0.1;
    so.momentum = 0.5;
    so.weight_decay = 0.0;
    ampx_adam_options ao = AMPX_ADAMW_OPTIONS_INIT;
    ao.lr = 0.01;
    ao.weight_decay = 0.0;
    OptimizerHandle opt(adam ? make_adam(ctx, {a, b}, ao) : make_sgd(ctx, {a, b}, so));
    int32_t group = -1;
    REQUIRE(ampx_optimizer_add_group(opt, &c.handle, 1, 0.02, 0.3, &group) == AMPX_OK);
    CHECK(group == 1);
    int32_t count = 0;
    REQUIRE(ampx_optimizer_group_count(opt, &count) == AMPX_OK);
    CHECK(count == 2);
    double lr = 0;
    REQUIRE(ampx_optimizer_get_lr(opt, 1, &lr) == AMPX_OK);
    CHECK(lr == 0.02);
    REQUIRE(ampx_optimizer_get_lr(opt, 0, &lr) == AMPX_OK);
    CHECK(lr == (adam ? 0.01 : 0.1));

    std::vector<ampx_tensor> params = {a, b, c};
    std::vector<ampx_tensor> grads;
    std::vector<RefParam> refs;
    for (ampx_tensor p : params) {
      grads.push_back(attach_grad(ctx, p, AMPX_F32));
      refs.emplace_back(values_of(p));
    }
    const int group_of[] = {0, 0, 1};
    double group_lr[] = {adam ? 0.01 : 0.1, 0.02};
    const double group_wd[] = {0.0, 0.3};
    for (int step = 0; step < 8; ++step) {
      // A scheduler in the host program: both groups change every step.
      group_lr[0] *= 0.9;
      group_lr[1] = 0.02 + 0.01 * step;
      REQUIRE(ampx_optimizer_set_lr(opt, 0, group_lr[0]) == AMPX_OK);
      REQUIRE(ampx_optimizer_set_lr(opt, 1, group_lr[1]) == AMPX_OK);
      REQUIRE(ampx_optimizer_get_lr(opt, 1, &lr) == AMPX_OK);
      CHECK(lr == group_lr[1]);
      for (size_t i = 0; i < params.size(); ++i) {
        const std::vector<double> g = rng.vector(refs[i].p.size(), -1, 1);
        write(grads[i], g);
        const int gi = group_of[i];
        if (adam)
          adam_ref_step(refs[i], values_of(grads[i]), adam_ref_of(ao), group_lr[gi], group_wd[gi]);
        else
          sgd_ref_step(refs[i], values_of(grads[i]), sgd_ref_of(so), group_lr[gi], group_wd[gi]);
      }
      REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      CAPTURE(i);
      check_close(updated_values(opt, params[i]), refs[i].p, kRunUlps, 2.0, "param");
      check_param_is_rounded_master(opt, params[i]);
    }
  }
}

TEST_CASE("optimizer: parameters without a gradient are left alone and their steps do not advance") {
  Ctx ctx;
  for (int adam : {0, 1}) {
    CAPTURE(adam);
    Rng rng(90 + adam);
    Tensor a(make(ctx, AMPX_F32, rng.vector(5, -1, 1)));
    Tensor b(make(ctx, AMPX_F16, rng.vector(3, -1, 1)));
    Tensor c(make(ctx, AMPX_F32, rng.vector(4, -1, 1)));
    ampx_sgd_options so = AMPX_SGD_OPTIONS_INIT;
    so.lr = 0.1;
    so.momentum = 0.9;
    so.dampening = 0.5;  // makes a wrongly "non-first" buffer visible
    so.weight_decay = 0.1;
    ampx_adam_options ao = AMPX_ADAM_OPTIONS_INIT;
    ao.lr = 0.05;
    ao.weight_decay = 0.1;
    OptimizerHandle opt(adam ? make_adam(ctx, {a, b, c}, ao) : make_sgd(ctx, {a, b, c}, so));
    RefParam ra(values_of(a)), rb(values_of(b)), rc(values_of(c));
    auto ref_step = [&](RefParam& r, const std::vector<double>& g) {
      if (adam)
        adam_ref_step(r, g, adam_ref_of(ao), ao.lr, ao.weight_decay);
      else
        sgd_ref_step(r, g, sgd_ref_of(so), so.lr, so.weight_decay);
    };
    ampx_tensor ga = attach_grad(ctx, a, AMPX_F32);
    ampx_tensor gc = attach_grad(ctx, c, AMPX_F32);
    const std::vector<unsigned char> b_before = bytes_of(b);
    for (int step = 0; step < 3; ++step) {
      write(ga, rng.vector(5, -1, 1));
      write(gc, rng.vector(4, -1, 1));
      ref_step(ra, values_of(ga));
      ref_step(rc, values_of(gc));
      REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
    }
    CHECK(bytes_of(b) == b_before);
    CHECK(steps_of(opt, b) == 0);
    CHECK(steps_of(opt, a) == 3);
    CHECK(steps_of(opt, c) == 3);

    // b joins (its first step: a fresh buffer / t = 1) while a drops out.
    ampx_tensor gb = attach_grad(ctx, b, AMPX_F32);
    REQUIRE(ampx_tensor_set_grad(a, nullptr) == AMPX_OK);
    const std::vector<unsigned char> a_before = bytes_of(a);
    for (int step = 0; step < 2; ++step) {
      write(gb, rng.vector(3, -1, 1));
      write(gc, rng.vector(4, -1, 1));
      ref_step(rb, values_of(gb));
      ref_step(rc, values_of(gc));
      REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
    }
    CHECK(bytes_of(a) == a_before);
    CHECK(steps_of(opt, a) == 3);
    CHECK(steps_of(opt, b) == 2);
    CHECK(steps_of(opt, c) == 5);
    check_close(updated_values(opt, a), ra.p, kRunUlps, 2.0, "a");
    check_close(updated_values(opt, b), rb.p, kRunUlps, 2.0, "b");
    check_close(updated_values(opt, c), rc.p, kRunUlps, 2.0, "c");
    check_param_is_rounded_master(opt, b);
  }
}

// ---- zero_grad and state tensors -------------------------------------------------

TEST_CASE("optimizer: zero_grad zeroes every attached gradient and keeps it attached") {
  Ctx ctx;
  Tensor a(make(ctx, AMPX_F32, {1, 2, 3}));
  Tensor b(make(ctx, AMPX_F16, {1, 2}));
  Tensor c(make(ctx, AMPX_F32, {4}));
  ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
  o.lr = 0.5;
  OptimizerHandle opt(make_sgd(ctx, {a, b, c}, o));
  ampx_tensor ga = attach_grad(ctx, a, AMPX_F32);
  ampx_tensor gb = attach_grad(ctx, b, AMPX_BF16);
  write(ga, {1.5, -2, 3});
  write(gb, {-0.5, 7});
  REQUIRE(ampx_optimizer_zero_grad(opt) == AMPX_OK);
  CHECK(grad_of(a) == ga);
  CHECK(grad_of(b) == gb);
  CHECK(bytes_of(ga) == std::vector<unsigned char>(12, 0));
  CHECK(bytes_of(gb) == std::vector<unsigned char>(4, 0));
  ampx_tensor none = reinterpret_cast<ampx_tensor>(uintptr_t{1});
  REQUIRE(ampx_tensor_grad(c, &none) == AMPX_OK);
  CHECK(none == nullptr);
  // A step on zero gradients without decay or momentum changes nothing.
  const std::vector<unsigned char> a_before = bytes_of(a), b_before = bytes_of(b);
  REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
  CHECK(bytes_of(a) == a_before);
  CHECK(bytes_of(b) == b_before);
  CHECK(ampx_optimizer_zero_grad(nullptr) == AMPX_ERR_INVALID_ARGUMENT);
}

TEST_CASE("optimizer: state tensors expose masters and moments, and writing them changes the state") {
  Ctx ctx;
  Tensor f32(make(ctx, AMPX_F32, {0.5, -1.0, 2.0}));
  Tensor f16(make(ctx, AMPX_F16, {0.5, -1.0, 2.0}));
  Tensor stranger(make(ctx, AMPX_F32, {0.0}));

  SUBCASE("SGD without momentum keeps no moments; an F32 parameter is its own master") {
    OptimizerHandle opt(make_sgd(ctx, {f32, f16}, ampx_sgd_options_default()));
    Tensor master;
    REQUIRE(ampx_optimizer_state_tensor(opt, f32, AMPX_STATE_MASTER, master.out()) == AMPX_OK);
    CHECK(master.handle == f32.handle);
    Tensor m16(state_of(opt, f16, AMPX_STATE_MASTER));
    CHECK(dtype_of(m16) == AMPX_F32);
    CHECK(values_of(m16) == std::vector<double>{0.5, -1.0, 2.0});
    for (ampx_optimizer_state kind :
         {AMPX_STATE_MOMENTUM, AMPX_STATE_EXP_AVG_SQ, AMPX_STATE_MAX_EXP_AVG_SQ}) {
      CAPTURE(kind);
      ampx_tensor out = reinterpret_cast<ampx_tensor>(uintptr_t{0x77});
      CHECK_FAILS_WITH(ampx_optimizer_state_tensor(opt, f32, kind, &out), AMPX_ERR_NOT_SUPPORTED,
                       "keeps no");
      CHECK(out == reinterpret_cast<ampx_tensor>(uintptr_t{0x77}));
    }
    ampx_tensor out = nullptr;
    CHECK_FAILS_WITH(ampx_optimizer_state_tensor(opt, stranger, AMPX_STATE_MASTER, &out),
                     AMPX_ERR_INVALID_ARGUMENT, "not a parameter");
    CHECK_FAILS_WITH(ampx_optimizer_state_tensor(opt, f32, static_cast<ampx_optimizer_state>(99),
                                                 &out),
                     AMPX_ERR_INVALID_ARGUMENT, "kind");
    CHECK_FAILS_WITH(ampx_optimizer_state_tensor(opt, f32, AMPX_STATE_MASTER, nullptr),
                     AMPX_ERR_INVALID_ARGUMENT, "out");
    int64_t steps = 0;
    CHECK_FAILS_WITH(ampx_optimizer_param_steps(opt, stranger, &steps), AMPX_ERR_INVALID_ARGUMENT,
                     "not a parameter");
  }

  SUBCASE("a momentum buffer written between steps is the one the next step uses") {
    ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
    o.lr = 0.25;
    o.momentum = 0.5;
    OptimizerHandle opt(make_sgd(ctx, {f32}, o));
    Tensor buf(state_of(opt, f32, AMPX_STATE_MOMENTUM));
    CHECK(dtype_of(buf) == AMPX_F32);
    CHECK(values_of(buf) == std::vector<double>{0, 0, 0});
    ampx_tensor g = attach_grad(ctx, f32, AMPX_F32);
    RefParam r(values_of(f32));
    write(g, {1, 2, 3});
    sgd_ref_step(r, {1, 2, 3}, sgd_ref_of(o), o.lr, 0);
    REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
    write(buf, {10, -10, 0.5});
    r.buf = {10, -10, 0.5};
    sgd_ref_step(r, {1, 2, 3}, sgd_ref_of(o), o.lr, 0);
    REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
    check_close(values_of(f32), r.p, kRunUlps, 8.0, "p");
    check_close(values_of(buf), r.buf, kRunUlps, 8.0, "buf");
    Tensor none;
    CHECK(ampx_optimizer_state_tensor(opt, f32, AMPX_STATE_EXP_AVG_SQ, none.out()) ==
          AMPX_ERR_NOT_SUPPORTED);
  }

  SUBCASE("a master written between steps is rounded into its F16 parameter by the next step") {
    ampx_adam_options o = AMPX_ADAM_OPTIONS_INIT;
    o.amsgrad = 1;
    o.lr = 0.01;
    OptimizerHandle opt(make_adam(ctx, {f16}, o));
    Tensor master(state_of(opt, f16, AMPX_STATE_MASTER));
    for (ampx_optimizer_state kind : {AMPX_STATE_MOMENTUM, AMPX_STATE_EXP_AVG_SQ,
                                      AMPX_STATE_MAX_EXP_AVG_SQ}) {
      Tensor t(state_of(opt, f16, kind));
      CHECK(values_of(t) == std::vector<double>{0, 0, 0});
    }
    write(master, {1.0001, -3.3, 0.1});
    RefParam r(values_of(master));
    ampx_tensor g = attach_grad(ctx, f16, AMPX_F32);
    write(g, {0.5, 0.5, -0.5});
    adam_ref_step(r, {0.5, 0.5, -0.5}, adam_ref_of(o), o.lr, 0);
    REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
    check_close(values_of(master), r.p, kRunUlps, 4.0, "master");
    check_param_is_rounded_master(opt, f16);
  }
}

// ---- add_group ----------------------------------------------------------------

TEST_CASE("optimizer: add_group appends a group with fresh state and refuses bad input unchanged") {
  Ctx ctx;
  Tensor a(make(ctx, AMPX_F32, {1, 2}));
  Tensor b(make(ctx, AMPX_F16, {3}));
  Tensor c(make(ctx, AMPX_F32, {4, 5, 6}));
  Tensor ints;
  {
    const int32_t v[2] = {1, 2};
    const int64_t n = 2;
    REQUIRE(ampx_tensor_from_host(ctx, AMPX_I32, 1, &n, v, sizeof v, ints.out()) == AMPX_OK);
  }
  ampx_adam_options o = AMPX_ADAM_OPTIONS_INIT;
  o.amsgrad = 1;
  OptimizerHandle opt(make_adam(ctx, {a}, o));
  ampx_tensor ga = attach_grad(ctx, a, AMPX_F32);
  write(ga, {1, 1});
  REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);

  auto groups = [&] {
    int32_t n = -1;
    REQUIRE(ampx_optimizer_group_count(opt, &n) == AMPX_OK);
    return n;
  };
  const uint64_t bytes_before = current_bytes(ctx);
  const Snapshot before = snapshot(opt, {a});
  int32_t index = 42;
  const ampx_tensor dup[] = {b.handle, b.handle};
  CHECK_FAILS_WITH(ampx_optimizer_add_group(opt, dup, 2, 0.1, 0, &index),
                   AMPX_ERR_INVALID_ARGUMENT, "more than once");
  CHECK_FAILS_WITH(ampx_optimizer_add_group(opt, &a.handle, 1, 0.1, 0, &index),
                   AMPX_ERR_INVALID_ARGUMENT, "more than once");
  CHECK_FAILS_WITH(ampx_optimizer_add_group(opt, &b.handle, 1, -0.1, 0, &index),
                   AMPX_ERR_INVALID_ARGUMENT, "lr");
  CHECK_FAILS_WITH(ampx_optimizer_add_group(opt, &b.handle, 1, 0.1, -1, &index),
                   AMPX_ERR_INVALID_ARGUMENT, "weight_decay");
  CHECK_FAILS_WITH(ampx_optimizer_add_group(opt, &ints.handle, 1, 0.1, 0, &index), AMPX_ERR_DTYPE,
                   "params[0]");
  CHECK_FAILS_WITH(ampx_optimizer_add_group(opt, nullptr, 1, 0.1, 0, &index),
                   AMPX_ERR_INVALID_ARGUMENT, "params");
  const ampx_tensor with_null[] = {c.handle, nullptr};
  CHECK_FAILS_WITH(ampx_optimizer_add_group(opt, with_null, 2, 0.1, 0, &index),
                   AMPX_ERR_INVALID_ARGUMENT, "params[1]");
  CHECK(index == 42);
  CHECK(groups() == 1);
  CHECK(current_bytes(ctx) == bytes_before);
  CHECK(snapshot(opt, {a}) == before);
  int64_t steps = 0;
  CHECK(ampx_optimizer_param_steps(opt, b, &steps) == AMPX_ERR_INVALID_ARGUMENT);

  const ampx_tensor fresh[] = {b.handle, c.handle};
  REQUIRE(ampx_optimizer_add_group(opt, fresh, 2, 0.2, 0.0, &index) == AMPX_OK);
  CHECK(index == 1);
  REQUIRE(ampx_optimizer_add_group(opt, nullptr, 0, 0.3, 0.0, nullptr) == AMPX_OK);
  CHECK(groups() == 3);
  CHECK(snapshot(opt, {a}) == before);
  CHECK(steps_of(opt, b) == 0);
  for (ampx_tensor p : {b.handle, c.handle})
    for (ampx_optimizer_state kind :
         {AMPX_STATE_MOMENTUM, AMPX_STATE_EXP_AVG_SQ, AMPX_STATE_MAX_EXP_AVG_SQ}) {
      Tensor t(state_of(opt, p, kind));
      for (double v : values_of(t)) CHECK(v == 0.0);
    }
  Tensor mb(state_of(opt, b, AMPX_STATE_MASTER));
  CHECK(values_of(mb) == std::vector<double>{3});

  // The new group steps with its own lr, the first one with t = 1.
  ampx_tensor gc = attach_grad(ctx, c, AMPX_F32);
  write(gc, {1, -1, 0.5});
  write(ga, {0.5, 0.5});
  RefParam rc(values_of(c));
  adam_ref_step(rc, {1, -1, 0.5}, adam_ref_of(o), 0.2, 0.0);
  REQUIRE(ampx_optimizer_step(opt) == AMPX_OK);
  check_close(values_of(c), rc.p, kRunUlps, 8.0, "c");
  CHECK(steps_of(opt, a) == 2);
  CHECK(steps_of(opt, c) == 1);
  CHECK(steps_of(opt, b) == 0);

  // Between unscale and update the list of parameters must not change.
  ampx_scaler s = nullptr;
  REQUIRE(ampx_scaler_create(ctx, nullptr, &s) == AMPX_OK);
  ScalerHandle scaler(s);
  REQUIRE(ampx_scaler_unscale(scaler, opt) == AMPX_OK);
  Tensor d(make(ctx, AMPX_F32, {1}));
  CHECK_FAILS_WITH(ampx_optimizer_add_group(opt, &d.handle, 1, 0.1, 0, nullptr), AMPX_ERR_ORDER,
                   "ampx_scaler_update");
  CHECK(groups() == 3);
}

// ---- misuse --------------------------------------------------------------------

TEST_CASE("optimizer: bad options are refused naming the option, and nothing is created") {
  Ctx ctx;
  Tensor p(make(ctx, AMPX_F32, {1, 2, 3}));
  const uint64_t bytes_before = current_bytes(ctx);

  auto refuse_sgd = [&](ampx_sgd_options o, const char* option) {
    CAPTURE(option);
    ampx_optimizer out = sentinel_optimizer();
    CHECK_FAILS_WITH(ampx_optimizer_create_sgd(ctx, &p.handle, 1, &o, &out),
                     AMPX_ERR_INVALID_ARGUMENT, option);
    CHECK(out == sentinel_optimizer());
  };
  auto refuse_adam = [&](ampx_adam_options o, const char* option) {
    CAPTURE(option);
    ampx_optimizer out = sentinel_optimizer();
    CHECK_FAILS_WITH(ampx_optimizer_create_adam(ctx, &p.handle, 1, &o, &out),
                     AMPX_ERR_INVALID_ARGUMENT, option);
    CHECK(out == sentinel_optimizer());
  };

  ampx_sgd_options s = AMPX_SGD_OPTIONS_INIT;
  s.lr = -0.1;
  refuse_sgd(s, "lr");
  s.lr = NAN;
  refuse_sgd(s, "lr");
  s.lr = INFINITY;
  refuse_sgd(s, "lr");
  s = ampx_sgd_options_default();
  s.weight_decay = -1e-4;
  refuse_sgd(s, "weight_decay");
  s = ampx_sgd_options_default();
  s.momentum = -0.9;
  refuse_sgd(s, "momentum");
  s = ampx_sgd_options_default();
  s.nesterov = 1;  // momentum 0
  refuse_sgd(s, "nesterov");
  s.momentum = 0.9;
  s.dampening = 0.1;
  refuse_sgd(s, "nesterov");
  s = ampx_sgd_options_default();
  s.dampening = NAN;
  refuse_sgd(s, "dampening");
  s = ampx_sgd_options_default();
  s.struct_size = 0;
  refuse_sgd(s, "struct_size");

  ampx_adam_options a = AMPX_ADAM_OPTIONS_INIT;
  a.lr = -1e-3;
  refuse_adam(a, "lr");
  a = ampx_adamw_options_default();
  a.eps = -1e-8;
  refuse_adam(a, "eps");
  a = ampx_adamw_options_default();
  a.eps = NAN;
  refuse_adam(a, "eps");
  a = ampx_adam_options_default();
  a.weight_decay = -0.01;
  refuse_adam(a, "weight_decay");
  for (double beta : {-0.1, 1.0, 1.5, double{NAN}}) {
    CAPTURE(beta);
    a = ampx_adam_options_default();
    a.beta1 = beta;
    refuse_adam(a, "beta1");
    a = ampx_adam_options_default();
    a.beta2 = beta;
    refuse_adam(a, "beta2");
  }
  // A beta just below 1 is allowed, and 0 too.
  a = ampx_adam_options_default();
  a.beta1 = 0.0;
  a.beta2 = 0.9999999;
  ampx_optimizer ok = nullptr;
  REQUIRE(ampx_optimizer_create_adam(ctx, &p.handle, 1, &a, &ok) == AMPX_OK);
  ampx_optimizer_release(ok);
  CHECK(current_bytes(ctx) == bytes_before);
}

TEST_CASE("optimizer: bad parameters and handles are refused with a clear status") {
  Ctx ctx;
  Ctx other;
  Tensor p(make(ctx, AMPX_F32, {1, 2}));
  Tensor h(make(ctx, AMPX_F16, {3}));
  Tensor foreign(make(other, AMPX_F32, {1}));
  Tensor ints;
  {
    const int64_t v[1] = {7};
    const int64_t n = 1;
    REQUIRE(ampx_tensor_from_host(ctx, AMPX_I64, 1, &n, v, sizeof v, ints.out()) == AMPX_OK);
  }
  const uint64_t bytes_before = current_bytes(ctx);
  const ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
  ampx_optimizer out = sentinel_optimizer();

  const ampx_tensor with_ints[] = {p.handle, ints.handle};
  CHECK_FAILS_WITH(ampx_optimizer_create_sgd(ctx, with_ints, 2, &o, &out), AMPX_ERR_DTYPE,
                   "params[1]");
  const ampx_tensor dup[] = {p.handle, h.handle, p.handle};
  CHECK_FAILS_WITH(ampx_optimizer_create_sgd(ctx, dup, 3, &o, &out), AMPX_ERR_INVALID_ARGUMENT,
                   "more than once");
  const ampx_tensor mixed[] = {p.handle, foreign.handle};
  CHECK_FAILS_WITH(ampx_optimizer_create_adam(ctx, mixed, 2, nullptr, &out), AMPX_ERR_DEVICE,
                   "params[1]");
  CHECK_FAILS_WITH(ampx_optimizer_create_sgd(nullptr, &p.handle, 1, &o, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "ctx");
  CHECK_FAILS_WITH(ampx_optimizer_create_sgd(ctx, &p.handle, 1, &o, nullptr),
                   AMPX_ERR_INVALID_ARGUMENT, "out");
  CHECK_FAILS_WITH(ampx_optimizer_create_adam(ctx, nullptr, 2, nullptr, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "params");
  const ampx_tensor with_null[] = {p.handle, nullptr};
  CHECK_FAILS_WITH(ampx_optimizer_create_adam(ctx, with_null, 2, nullptr, &out),
                   AMPX_ERR_INVALID_ARGUMENT, "params[1]");
  // A tensor handle is not a context, and a context is not a tensor.
  CHECK_FAILS_WITH(ampx_optimizer_create_sgd(reinterpret_cast<ampx_context>(p.handle), &p.handle,
                                             1, &o, &out),
                   AMPX_ERR_STALE_HANDLE, "ctx");
  CHECK(out == sentinel_optimizer());
  CHECK(current_bytes(ctx) == bytes_before);

  // An empty optimizer is valid and its step does nothing.
  ampx_optimizer empty = nullptr;
  REQUIRE(ampx_optimizer_create_sgd(ctx, nullptr, 0, &o, &empty) == AMPX_OK);
  OptimizerHandle own_empty(empty);
  CHECK(ampx_optimizer_step(empty) == AMPX_OK);

  ampx_adam_options ao = AMPX_ADAMW_OPTIONS_INIT;
  OptimizerHandle opt(make_adam(ctx, {p, h}, ao));
  double lr = 0;
  for (int32_t group : {-1, 1, 1000}) {
    CAPTURE(group);
    CHECK_FAILS_WITH(ampx_optimizer_set_lr(opt, group, 0.5), AMPX_ERR_INVALID_ARGUMENT, "group");
    CHECK_FAILS_WITH(ampx_optimizer_get_lr(opt, group, &lr), AMPX_ERR_INVALID_ARGUMENT, "group");
  }
  CHECK_FAILS_WITH(ampx_optimizer_set_lr(opt, 0, -1.0), AMPX_ERR_INVALID_ARGUMENT, "lr");
  CHECK_FAILS_WITH(ampx_optimizer_set_lr(opt, 0, NAN), AMPX_ERR_INVALID_ARGUMENT, "lr");
  CHECK_FAILS_WITH(ampx_optimizer_get_lr(opt, 0, nullptr), AMPX_ERR_INVALID_ARGUMENT, "lr");
  REQUIRE(ampx_optimizer_get_lr(opt, 0, &lr) == AMPX_OK);
  CHECK(lr == ao.lr);
  CHECK_FAILS_WITH(ampx_optimizer_group_count(opt, nullptr), AMPX_ERR_INVALID_ARGUMENT, "count");
  CHECK_FAILS_WITH(ampx_optimizer_step(nullptr), AMPX_ERR_INVALID_ARGUMENT, "optimizer");
  CHECK_FAILS_WITH(ampx_optimizer_set_lr(nullptr, 0, 0.1), AMPX_ERR_INVALID_ARGUMENT, "optimizer");
  int64_t steps = 0;
  CHECK_FAILS_WITH(ampx_optimizer_param_steps(opt, p, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "steps");
  CHECK_FAILS_WITH(ampx_optimizer_param_steps(opt, nullptr, &steps), AMPX_ERR_INVALID_ARGUMENT,
                   "param");
  // A scaler handle is not an optimizer.
  ampx_scaler s = nullptr;
  REQUIRE(ampx_scaler_create(ctx, nullptr, &s) == AMPX_OK);
  ScalerHandle scaler(s);
  CHECK_FAILS_WITH(ampx_optimizer_step(reinterpret_cast<ampx_optimizer>(s)),
                   AMPX_ERR_STALE_HANDLE, "ampx_optimizer");
  int32_t taken = 5;
  CHECK_FAILS_WITH(ampx_optimizer_last_step_taken(opt, &taken), AMPX_ERR_ORDER, "not stepped");
  CHECK(taken == 5);
  CHECK_FAILS_WITH(ampx_optimizer_last_step_taken(opt, nullptr), AMPX_ERR_INVALID_ARGUMENT,
                   "taken");
  // A gradient of another context cannot be attached in the first place.
  Tensor g_foreign(make(other, AMPX_F32, {1, 1}));
  CHECK(ampx_tensor_set_grad(p, g_foreign) == AMPX_ERR_DEVICE);
  // Releasing NULL is a no-op.
  ampx_optimizer_release(nullptr);
}

TEST_CASE("optimizer: state_size and save_state check the buffer they are given") {
  Ctx ctx;
  Tensor p(make(ctx, AMPX_F32, {1, 2}));
  OptimizerHandle opt(make_sgd(ctx, {p}, ampx_sgd_options_default()));
  size_t bytes = 0;
  REQUIRE(ampx_optimizer_state_size(opt, &bytes) == AMPX_OK);
  CHECK(bytes > 0);
  std::vector<unsigned char> buffer(bytes + 1);
  CHECK_FAILS_WITH(ampx_optimizer_save_state(opt, buffer.data(), bytes + 1),
                   AMPX_ERR_INVALID_ARGUMENT, "bytes");
  CHECK_FAILS_WITH(ampx_optimizer_save_state(opt, buffer.data(), bytes - 1),
                   AMPX_ERR_INVALID_ARGUMENT, "bytes");
  CHECK_FAILS_WITH(ampx_optimizer_save_state(opt, nullptr, bytes), AMPX_ERR_INVALID_ARGUMENT,
                   "buffer");
  CHECK_FAILS_WITH(ampx_optimizer_state_size(opt, nullptr), AMPX_ERR_INVALID_ARGUMENT, "bytes");
  CHECK_FAILS_WITH(ampx_optimizer_load_state(opt, nullptr, bytes), AMPX_ERR_INVALID_ARGUMENT,
                   "buffer");
}

// The state format (optimizer.cpp): "AMPXOPT\0", ten u32 fields, then the
// f64 hyperparameters momentum, dampening, beta1 (at byte 64), ...; the last
// 8 bytes are the FNV-1a 64 hash of everything before them. A state whose
// checksum is right but whose values creation would refuse must be refused
// too, not trained with.
TEST_CASE("optimizer: load_state refuses hyperparameters that creation would refuse") {
  Ctx ctx;
  Tensor p(make(ctx, AMPX_F32, {1, 2}));
  ampx_tensor params[] = {p.handle};
  ampx_adam_options options = AMPX_ADAM_OPTIONS_INIT;
  OptimizerHandle opt;
  REQUIRE(ampx_optimizer_create_adam(ctx, params, 1, &options, &opt.handle) == AMPX_OK);
  size_t bytes = 0;
  REQUIRE(ampx_optimizer_state_size(opt, &bytes) == AMPX_OK);
  std::vector<unsigned char> state(bytes);
  REQUIRE(ampx_optimizer_save_state(opt, state.data(), bytes) == AMPX_OK);
  double beta1 = 0.0;
  std::memcpy(&beta1, state.data() + 64, sizeof beta1);
  REQUIRE(beta1 == doctest::Approx(0.9));
  beta1 = 1.5;
  std::memcpy(state.data() + 64, &beta1, sizeof beta1);
  reseal_optimizer_state(state);
  CHECK_FAILS_WITH(ampx_optimizer_load_state(opt, state.data(), bytes), AMPX_ERR_CORRUPT, "beta1");
}

TEST_CASE("optimizer: the tests' hand-written f16/bf16 rounding agrees with ampx_tensor_cast at the edges") {
  // check_param_is_rounded_master trusts f16_bits/bf16_bits; they must round
  // exactly like the library on the cases that matter: ties to even,
  // one ulp either side of a tie, subnormals, overflow and signed zeros.
  std::vector<float> values = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e-8f,
                               2.98023224e-08f, 2.98023259e-08f, 6.1035156e-05f, 3e38f, -1e-45f};
  for (uint32_t upper : {0x3f80u, 0x3f81u, 0x0080u, 0x0001u, 0x7f7fu, 0xc2aau}) {
    for (uint32_t low : {0x8000u, 0x7fffu, 0x8001u, 0x0000u, 0xffffu})
      values.push_back(float_of(upper << 16 | low));
  }
  for (int e = -24; e <= 15; ++e)
    for (double m : {1.0, 1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, 1.5 + 1.0 / 4096, 1.99951171875})
      values.push_back(static_cast<float>(std::ldexp(m, e)));
  Ctx ctx;
  std::vector<double> as_double(values.begin(), values.end());
  Tensor src(make(ctx, AMPX_F32, as_double));
  for (ampx_dtype to : {AMPX_F16, AMPX_BF16}) {
    CAPTURE(ampx_dtype_name(to));
    Tensor cast;
    REQUIRE(ampx_tensor_cast(src, to, cast.out()) == AMPX_OK);
    const std::vector<unsigned char> have = bytes_of(cast);
    const std::vector<unsigned char> want = encode(to, as_double);
    for (size_t i = 0; i < values.size(); ++i) {
      CAPTURE(values[i]);
      CHECK(std::memcmp(have.data() + 2 * i, want.data() + 2 * i, 2) == 0);
    }
  }
}
