// The precision doctor's diagnosis of scripted runs: a 4-layer ReLU MLP
// trained in pure fp16 (fp16 parameters and gradients, fp32 masters) with a
// dynamic loss scaler on a fixed regression task, and one thing wrong in
// each run, with SGD and with Adam, ReLU, GELU or no activation:
//   a learning rate 100x too high   -> a finding caused by the learning rate
//                                      (in the runs where it does harm);
//   one parameter's gradient x 1e8  -> a finding of an unstable op naming it;
//   one outlier batch in 200        -> a finding of outlier batches;
//   nothing                         -> no finding at all.
// The diagnosis is host code over what the device recorded (the kernels
// are checked against a reference in test_doctor.cpp), so the runs take the
// CPU only.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "training_fixture.h"

using ampx_fixture::make;
using ampx_fixture::values_of;
using ampx_fixture::write;
using ampx_test::Ctx;
using ampx_test::last_error;
using ampx_test::Tensor;

namespace {

constexpr int64_t kIn = 16, kHidden = 64, kOut = 4, kBatch = 64;
constexpr int kLayers = 4;
constexpr int kSteps = 600;

struct RunSetup {
  bool adam = false;  // Adam (lr 1e-3), else SGD with momentum 0.9 (lr 0.02)
  ampx_activation activation = AMPX_ACTIVATION_RELU;
  double lr_factor = 1.0;
  int boosted_param = -1;  // this parameter's gradient is multiplied by 1e8
  int outlier_every = 0;   // every n-th batch has inputs 300x larger
};

uint64_t next(uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return s >> 11;
}
double uniform(uint64_t& s) {
  return 2.0 * static_cast<double>(next(s)) / 9007199254740992.0 - 1.0;
}

struct Finding {
  int32_t code, cause, param;
  std::string message;
};

struct Result {
  std::vector<Finding> findings;
  std::string summary;
  std::vector<std::string> names;
};

Result train(const RunSetup& setup) {
  Ctx ctx;
  uint64_t seed = 7;
  std::vector<Tensor> params(2 * kLayers);
  std::vector<ampx_tensor> handles;
  for (int l = 0; l < kLayers; ++l) {
    const int64_t in = l == 0 ? kIn : kHidden, out = l == kLayers - 1 ? kOut : kHidden;
    std::vector<double> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out), 0.0);
    for (double& v : w) v = uniform(seed) * std::sqrt(3.0 / static_cast<double>(in));
    *params[2 * l].out() = make(ctx, AMPX_F16, {out, in}, w, true);
    *params[2 * l + 1].out() = make(ctx, AMPX_F16, {out}, b, true);
    for (int k = 0; k < 2; ++k) {
      const std::string name = "layer" + std::to_string(l + 1) + (k ? ".bias" : ".weight");
      REQUIRE(ampx_tensor_set_name(params[2 * l + k], name.c_str()) == AMPX_OK);
      handles.push_back(params[2 * l + k]);
    }
  }
  std::vector<double> x(kBatch * kIn), y(kBatch * kOut);
  for (double& v : x) v = uniform(seed);
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::tanh(x[i % x.size()] + x[(i * 7) % x.size()]);
  std::vector<double> outlier = x;
  for (double& v : outlier) v *= 300.0;
  Tensor input(make(ctx, AMPX_F16, {kBatch, kIn}, x));
  Tensor outlier_input(make(ctx, AMPX_F16, {kBatch, kIn}, outlier));
  Tensor target(make(ctx, AMPX_F16, {kBatch, kOut}, y));

  ampx_optimizer opt = nullptr;
  if (setup.adam) {
    ampx_adam_options adam = AMPX_ADAM_OPTIONS_INIT;
    adam.lr = 1e-3 * setup.lr_factor;
    REQUIRE(ampx_optimizer_create_adam(ctx, handles.data(), handles.size(), &adam, &opt) ==
            AMPX_OK);
  } else {
    ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
    sgd.lr = 0.02 * setup.lr_factor;
    sgd.momentum = 0.9;
    REQUIRE(ampx_optimizer_create_sgd(ctx, handles.data(), handles.size(), &sgd, &opt) == AMPX_OK);
  }
  ampx_scaler_options so = AMPX_SCALER_OPTIONS_INIT;
  so.growth_interval = 100;
  ampx_scaler scaler = nullptr;
  REQUIRE(ampx_scaler_create(ctx, &so, &scaler) == AMPX_OK);
  ampx_doctor_options doctor_options = AMPX_DOCTOR_OPTIONS_INIT;
  doctor_options.interval = 5;
  ampx_doctor doctor = nullptr;
  REQUIRE_MESSAGE(ampx_doctor_create(ctx, opt, &doctor_options, &doctor) == AMPX_OK, last_error());

  for (int step = 1; step <= kSteps; ++step) {
    REQUIRE(ampx_scope_push(ctx) == AMPX_OK);
    REQUIRE(ampx_optimizer_zero_grad(opt) == AMPX_OK);
    const bool outlier_step = setup.outlier_every > 0 && step % setup.outlier_every == 0;
    ampx_tensor h = outlier_step ? outlier_input.handle : input.handle;
    for (int l = 0; l < kLayers; ++l) {
      ampx_tensor next_h = nullptr;
      const ampx_activation act = l == kLayers - 1 ? AMPX_ACTIVATION_NONE : setup.activation;
      REQUIRE_MESSAGE(ampx_linear(h, params[2 * l], params[2 * l + 1], act, &next_h) == AMPX_OK,
                      last_error());
      h = next_h;
    }
    ampx_tensor loss = nullptr;
    REQUIRE(ampx_mse_loss(h, target, AMPX_REDUCTION_MEAN, &loss) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_backward(loss, scaler) == AMPX_OK, last_error());
    if (setup.boosted_param >= 0) {
      ampx_tensor g = nullptr;
      REQUIRE(ampx_tensor_grad(params[setup.boosted_param], &g) == AMPX_OK);
      std::vector<double> v = values_of(g);
      for (double& e : v) e *= 1e8;
      write(g, v);
    }
    REQUIRE_MESSAGE(ampx_scaler_step(scaler, opt) == AMPX_OK, last_error());
    REQUIRE(ampx_scaler_update(scaler) == AMPX_OK);
    REQUIRE(ampx_scope_pop(ctx) == AMPX_OK);
  }

  Result result;
  for (const Tensor& p : params) {
    const char* name = nullptr;
    REQUIRE(ampx_tensor_name(p, &name) == AMPX_OK);
    result.names.push_back(name);
  }
  ampx_doctor_overview o = AMPX_DOCTOR_OVERVIEW_INIT;
  REQUIRE_MESSAGE(ampx_doctor_examine(doctor, &o) == AMPX_OK, last_error());
  CHECK(o.steps == kSteps);
  CHECK(o.history_count == kSteps);
  for (int32_t i = 0; i < o.finding_count; ++i) {
    ampx_doctor_finding f{};
    f.struct_size = sizeof f;
    REQUIRE(ampx_doctor_get_finding(doctor, i, &f) == AMPX_OK);
    result.findings.push_back({f.code, f.cause, f.param, f.message});
    CHECK(std::string(f.param_name) == (f.param >= 0 ? result.names[f.param] : ""));
  }
  const char* summary = nullptr;
  REQUIRE(ampx_doctor_summary(doctor, &summary) == AMPX_OK);
  result.summary = summary;
  ampx_doctor_release(doctor);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  return result;
}

bool has_cause(const Result& r, ampx_doctor_cause cause, int32_t param = -2) {
  for (const Finding& f : r.findings)
    if (f.cause == cause && (param == -2 || f.param == param)) return true;
  return false;
}

void show(const Result& r) {
  MESSAGE(r.summary);
  for (const Finding& f : r.findings)
    MESSAGE(std::string(ampx_doctor_finding_code_name(f.code)), " (",
            std::string(ampx_doctor_cause_name(f.cause)), "): ", f.message);
}

// Every optimizer and activation of the runs.
std::vector<RunSetup> variants() {
  std::vector<RunSetup> out;
  for (bool adam : {false, true})
    for (ampx_activation a : {AMPX_ACTIVATION_RELU, AMPX_ACTIVATION_GELU, AMPX_ACTIVATION_NONE}) {
      RunSetup s;
      s.adam = adam;
      s.activation = a;
      out.push_back(s);
    }
  return out;
}

}  // namespace

TEST_CASE("doctor causes: a healthy run has no finding") {
  if (ampx_test::test_device() != AMPX_DEVICE_CPU) return;
  for (const RunSetup& s : variants()) {
    CAPTURE(s.adam);
    CAPTURE(static_cast<int>(s.activation));
    const Result r = train(s);
    show(r);
    CHECK(r.findings.empty());
  }
}

TEST_CASE("doctor causes: a learning rate 100x too high is named the cause") {
  if (ampx_test::test_device() != AMPX_DEVICE_CPU) return;
  // Runs where it does harm: ReLU units die (with SGD and with Adam), and a
  // network without activations diverges until every step overflows. (With
  // GELU this task still trains at 100x: nothing to diagnose.)
  std::vector<RunSetup> runs(3);
  runs[1].adam = true;
  runs[2].activation = AMPX_ACTIVATION_NONE;
  for (RunSetup& s : runs) {
    s.lr_factor = 100.0;
    CAPTURE(s.adam);
    CAPTURE(static_cast<int>(s.activation));
    const Result r = train(s);
    show(r);
    CHECK(has_cause(r, AMPX_DOCTOR_CAUSE_LEARNING_RATE));
  }
}

TEST_CASE("doctor causes: a parameter whose gradient is 1e8 too large is named") {
  if (ampx_test::test_device() != AMPX_DEVICE_CPU) return;
  // 1e8, not less: at 1e6 the Adam run without activations loses only 1-4%
  // of its gradients at the scale the boosted one allows on some CPUs (their
  // GEMMs round differently, so the runs differ), under the 5% at which a
  // loss is a finding; at 1e8 the Adam runs lose over half of them and the
  // SGD runs' scale falls to its minimum (here, an AMD EPYC).
  for (RunSetup s : variants()) {
    s.boosted_param = 4;  // layer3.weight
    CAPTURE(s.adam);
    CAPTURE(static_cast<int>(s.activation));
    const Result r = train(s);
    show(r);
    CHECK(has_cause(r, AMPX_DOCTOR_CAUSE_UNSTABLE_OP, 4));
  }
}

TEST_CASE("doctor causes: one outlier batch in 200 is named the cause") {
  if (ampx_test::test_device() != AMPX_DEVICE_CPU) return;
  for (RunSetup s : variants()) {
    s.outlier_every = 200;
    CAPTURE(s.adam);
    CAPTURE(static_cast<int>(s.activation));
    const Result r = train(s);
    show(r);
    CHECK(has_cause(r, AMPX_DOCTOR_CAUSE_OUTLIER_BATCHES));
  }
}
