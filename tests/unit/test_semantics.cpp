// Semantics checked against the published algorithms, through the C API:
//
//   Adam/AdamW against torch.optim.Adam's _single_tensor_adam computed here
//   in double from the double betas the user gave (torch forms 1 - beta and
//   1 - beta^t from Python floats and rounds each once to fp32), including
//   after a state save/load, which must keep the betas' exact doubles.
//   The loss scaler's hysteresis as Megatron-LM / DeepSpeed count it, the
//   max_scale bound, and the new options through get/set_state and
//   checkpoint files (old layouts included).
//   mean keeps its input's dtype, in and outside autocast, as torch.mean.
//
// Tolerances are in units of 2^-24 (an fp32 rounding) of the reference
// value. The gradients keep one sign per element over the steps and the
// parameters share it, so no sum below cancels and every relative bound
// holds: one step takes at most 3 roundings per moment (2 for the
// parameter, whose update is 1e-3 of it); a few steps add a few more.
// Taking 1 - beta2 in fp32 after rounding beta2 moves exp_avg_sq by
// -1.3e-5 relative at beta2 = 0.999 (220 roundings), 1.7e-4 at 0.9999 and
// 1.4e-3 at 0.99999.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "io/crc32c.h"
#include "support.h"
#include "training_fixture.h"

using ampx_test::Ctx;
using ampx_test::download;
using ampx_test::last_error;
using ampx_test::Tensor;
using ampx_test::upload;

namespace {

constexpr double kRounding = 1.0 / (1 << 24);

// ---- Adam ------------------------------------------------------------------

struct AdamRef {
  std::vector<double> p, m, v;
  int64_t step = 0;
};

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
};

// torch.optim.Adam, _single_tensor_adam (not capturable, not amsgrad), in
// double: AdamW first decays the parameter by 1 - lr * wd; Adam adds wd * p
// to the gradient; exp_avg.lerp_(grad, 1 - beta1);
// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value = 1 - beta2);
// denom = sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps;
// param.addcdiv_(exp_avg, denom, value = -lr / (1 - beta1^t)).
void torch_adam_step(AdamRef& r, const std::vector<float>& grad, const AdamHyper& h) {
  r.step += 1;
  const double t = static_cast<double>(r.step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, t);
  const double step_size = h.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (size_t j = 0; j < r.p.size(); ++j) {
    double g = grad[j];
    if (h.weight_decay != 0.0) {
      if (h.decoupled)
        r.p[j] *= 1.0 - h.lr * h.weight_decay;
      else
        g += h.weight_decay * r.p[j];
    }
    r.m[j] += (1.0 - h.beta1) * (g - r.m[j]);
    r.v[j] = r.v[j] * h.beta2 + (1.0 - h.beta2) * g * g;
    const double denom = std::sqrt(r.v[j]) / bias_correction2_sqrt + h.eps;
    r.p[j] -= step_size * r.m[j] / denom;
  }
}

struct Optimizer {
  ampx_optimizer handle = nullptr;
  Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  ~Optimizer() { ampx_optimizer_release(handle); }
  operator ampx_optimizer() const { return handle; }
};

ampx_adam_options adam_options(const AdamHyper& h) {
  ampx_adam_options o = AMPX_ADAM_OPTIONS_INIT;
  o.lr = h.lr;
  o.beta1 = h.beta1;
  o.beta2 = h.beta2;
  o.eps = h.eps;
  o.weight_decay = h.weight_decay;
  o.decoupled_weight_decay = h.decoupled ? 1 : 0;
  return o;
}

constexpr size_t kAdamElements = 96;

std::vector<float> adam_initial_params() {
  std::vector<float> p(kAdamElements);
  for (size_t j = 0; j < p.size(); ++j) {
    const float sign = j % 3 == 0 ? -1.0f : 1.0f;
    p[j] = sign * (0.5f + static_cast<float>((j * 37) % 101) / 64.0f);
  }
  return p;
}

// Step k's gradient: the parameter's sign, magnitudes from 2^-6 to 4.
std::vector<float> adam_grad(int k) {
  std::vector<float> g(kAdamElements);
  for (size_t j = 0; j < g.size(); ++j) {
    const float sign = j % 3 == 0 ? -1.0f : 1.0f;
    const int e = static_cast<int>((j + 5 * static_cast<size_t>(k)) % 9) - 6;
    g[j] = sign * std::ldexp(1.0f + static_cast<float>((j * 13 + 7 * k) % 29) / 31.0f, e);
  }
  return g;
}

// The largest |got - want| / |want| over the elements, in roundings.
double error_in_roundings(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  for (size_t j = 0; j < got.size(); ++j)
    worst = std::max(worst, std::fabs(static_cast<double>(got[j]) - want[j]) /
                                (std::fabs(want[j]) * kRounding));
  return worst;
}

std::vector<float> state_of(ampx_optimizer opt, ampx_tensor param, ampx_optimizer_state kind) {
  Tensor t;
  REQUIRE_MESSAGE(ampx_optimizer_state_tensor(opt, param, kind, t.out()) == AMPX_OK,
                  last_error());
  return download<float>(t);
}

struct AdamErrors {
  double p = 0, m = 0, v = 0;
};

AdamErrors adam_errors(ampx_optimizer opt, ampx_tensor param, const AdamRef& r) {
  AdamErrors e;
  e.p = error_in_roundings(download<float>(param), r.p);
  e.m = error_in_roundings(state_of(opt, param, AMPX_STATE_MOMENTUM), r.m);
  e.v = error_in_roundings(state_of(opt, param, AMPX_STATE_EXP_AVG_SQ), r.v);
  return e;
}

void adam_step(ampx_optimizer opt, ampx_tensor grad, const std::vector<float>& g) {
  REQUIRE(ampx_tensor_copy_from_host(grad, g.data(), g.size() * sizeof(float)) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_optimizer_step(opt) == AMPX_OK, last_error());
}

AdamRef fresh_reference() {
  AdamRef r;
  const std::vector<float> p = adam_initial_params();
  r.p.assign(p.begin(), p.end());
  r.m.assign(p.size(), 0.0);
  r.v.assign(p.size(), 0.0);
  return r;
}

}  // namespace

TEST_CASE("semantics: Adam and AdamW equal torch's algorithm with double betas") {
  Ctx ctx;
  int cases = 0;
  double worst = 0.0;
  for (double beta2 : {0.999, 0.9999, 0.99999})
    for (int variant = 0; variant < 3; ++variant) {
      // Adam, Adam with L2 decay, AdamW.
      const AdamHyper h{1e-3, 0.9, beta2, 1e-8, variant == 0 ? 0.0 : 1e-2, variant == 2};
      CAPTURE(beta2);
      CAPTURE(variant);
      Tensor param(upload(ctx, AMPX_F32, adam_initial_params()));
      Tensor grad(upload(ctx, AMPX_F32, adam_grad(0)));
      REQUIRE(ampx_tensor_set_grad(param, grad) == AMPX_OK);
      Optimizer opt;
      const ampx_adam_options o = adam_options(h);
      REQUIRE_MESSAGE(ampx_optimizer_create_adam(ctx, &param.handle, 1, &o, &opt.handle) ==
                          AMPX_OK,
                      last_error());
      AdamRef ref = fresh_reference();
      for (int k = 0; k < 5; ++k) {
        CAPTURE(k);
        const std::vector<float> g = adam_grad(k);
        adam_step(opt, grad, g);
        torch_adam_step(ref, g, h);
        const AdamErrors e = adam_errors(opt, param, ref);
        // One step: a product and a sum per moment, each rounded once, and
        // fp32(1 - beta); later steps carry the earlier roundings, damped
        // by beta.
        const double bound = k == 0 ? 4.0 : 8.0;
        CHECK(e.m <= bound);
        CHECK(e.v <= bound);
        CHECK(e.p <= bound);
        worst = std::max({worst, e.m, e.v, e.p});
      }
      ++cases;
    }
  CHECK(cases == 9);
  MESSAGE("Adam vs torch's algorithm in double: worst error ", worst, " fp32 roundings");
}

TEST_CASE("semantics: an Adam state load restores the betas' exact doubles") {
  Ctx ctx;
  const AdamHyper h{1e-3, 0.95, 0.99999, 1e-8, 1e-2, true};
  Tensor pa(upload(ctx, AMPX_F32, adam_initial_params()));
  Tensor ga(upload(ctx, AMPX_F32, adam_grad(0)));
  Tensor pb(upload(ctx, AMPX_F32, adam_initial_params()));
  Tensor gb(upload(ctx, AMPX_F32, adam_grad(0)));
  REQUIRE(ampx_tensor_set_grad(pa, ga) == AMPX_OK);
  REQUIRE(ampx_tensor_set_grad(pb, gb) == AMPX_OK);
  Optimizer a, b;
  const ampx_adam_options oa = adam_options(h);
  // b starts with other betas: the load must replace them.
  const ampx_adam_options ob = ampx_adamw_options_default();
  REQUIRE(ampx_optimizer_create_adam(ctx, &pa.handle, 1, &oa, &a.handle) == AMPX_OK);
  REQUIRE(ampx_optimizer_create_adam(ctx, &pb.handle, 1, &ob, &b.handle) == AMPX_OK);
  AdamRef ref = fresh_reference();
  for (int k = 0; k < 2; ++k) {
    adam_step(a, ga, adam_grad(k));
    torch_adam_step(ref, adam_grad(k), h);
  }
  size_t bytes = 0;
  REQUIRE(ampx_optimizer_state_size(a, &bytes) == AMPX_OK);
  std::vector<unsigned char> saved(bytes), resaved(bytes);
  REQUIRE(ampx_optimizer_save_state(a, saved.data(), bytes) == AMPX_OK);
  REQUIRE_MESSAGE(ampx_optimizer_load_state(b, saved.data(), bytes) == AMPX_OK, last_error());
  REQUIRE(ampx_optimizer_save_state(b, resaved.data(), bytes) == AMPX_OK);
  CHECK(saved == resaved);
  for (int k = 2; k < 4; ++k) {
    adam_step(a, ga, adam_grad(k));
    adam_step(b, gb, adam_grad(k));
    torch_adam_step(ref, adam_grad(k), h);
  }
  // The restored optimizer steps exactly as the one that never stopped, and
  // both as torch with beta2 = 0.99999 (an fp32 beta2 would move
  // 1 - beta2^t by 1.4e-3 relative).
  CHECK(download<float>(pa) == download<float>(pb));
  CHECK(state_of(a, pa, AMPX_STATE_EXP_AVG_SQ) == state_of(b, pb, AMPX_STATE_EXP_AVG_SQ));
  CHECK(state_of(a, pa, AMPX_STATE_MOMENTUM) == state_of(b, pb, AMPX_STATE_MOMENTUM));
  const AdamErrors e = adam_errors(b, pb, ref);
  CHECK(e.m <= 8.0);
  CHECK(e.v <= 8.0);
  CHECK(e.p <= 8.0);
}

// ---- loss-scaler hysteresis and bounds -------------------------------------
//
// Megatron-LM's DynamicGradScaler.update and DeepSpeed's DynamicLossScaler
// (consecutive_hysteresis=False), restated: an overflow resets the growth
// tracker and spends one unit of the allowance; at 0 the scale backs off;
// the allowance comes back only when growth_interval clean updates in a row
// complete (when the scale would grow).

namespace {

struct Scaler {
  ampx_scaler handle = nullptr;
  Scaler() = default;
  Scaler(const Scaler&) = delete;
  Scaler& operator=(const Scaler&) = delete;
  ~Scaler() { ampx_scaler_release(handle); }
  operator ampx_scaler() const { return handle; }
};

// A scaler driving an SGD optimizer (lr 0) over one parameter whose
// gradient each iteration writes: 'I' an inf, 'C' a finite value.
struct ScalerRig {
  Ctx ctx;
  Tensor param;
  Tensor grad;
  Optimizer opt;
  Scaler scaler;

  explicit ScalerRig(const ampx_scaler_options& o)
      : param(upload(ctx, AMPX_F32, std::vector<float>{0.5f})),
        grad(upload(ctx, AMPX_F32, std::vector<float>{0.0f})) {
    REQUIRE(ampx_tensor_set_grad(param, grad) == AMPX_OK);
    ampx_sgd_options so = AMPX_SGD_OPTIONS_INIT;
    so.lr = 0.0;
    REQUIRE(ampx_optimizer_create_sgd(ctx, &param.handle, 1, &so, &opt.handle) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_scaler_create(ctx, &o, &scaler.handle) == AMPX_OK, last_error());
  }

  void run(const std::string& script) {
    for (char what : script) {
      const float g = what == 'I' ? INFINITY : 0.25f;
      REQUIRE(ampx_tensor_copy_from_host(grad, &g, sizeof g) == AMPX_OK);
      REQUIRE_MESSAGE(ampx_scaler_step(scaler, opt) == AMPX_OK, last_error());
      REQUIRE_MESSAGE(ampx_scaler_update(scaler) == AMPX_OK, last_error());
    }
  }

  ampx_scaler_state state() const {
    ampx_scaler_state s{};
    s.struct_size = sizeof s;
    REQUIRE(ampx_scaler_get_state(scaler, &s) == AMPX_OK);
    return s;
  }
};

ampx_scaler_options scaler_options(double init, int32_t interval, int32_t hysteresis) {
  ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
  o.init_scale = init;
  o.growth_interval = interval;
  o.hysteresis = hysteresis;
  return o;
}

}  // namespace

TEST_CASE("semantics: the new scaler options default to 0") {
  const ampx_scaler_options d = ampx_scaler_options_default();
  CHECK(d.struct_size == sizeof(ampx_scaler_options));
  CHECK(d.consecutive_hysteresis == 0);
  CHECK(d.clamp_to_max_scale == 0);
  const ampx_scaler_options init = AMPX_SCALER_OPTIONS_INIT;
  // Field by field: the padding after `hysteresis` is unspecified.
  CHECK(d.init_scale == init.init_scale);
  CHECK(d.growth_factor == init.growth_factor);
  CHECK(d.backoff_factor == init.backoff_factor);
  CHECK(d.growth_interval == init.growth_interval);
  CHECK(d.enabled == init.enabled);
  CHECK(d.hysteresis == init.hysteresis);
  CHECK(d.min_scale == init.min_scale);
  CHECK(d.max_scale == init.max_scale);
  CHECK(d.consecutive_hysteresis == init.consecutive_hysteresis);
  CHECK(d.clamp_to_max_scale == init.clamp_to_max_scale);
}

TEST_CASE("semantics: hysteresis counts overflows that are not consecutive") {
  SUBCASE("default: [inf, clean, inf] with hysteresis 2 backs off") {
    ScalerRig rig(scaler_options(1024, 100, 2));
    rig.run("I");
    CHECK(rig.state().scale == 1024);
    CHECK(rig.state().hysteresis_left == 1);
    rig.run("C");
    CHECK(rig.state().hysteresis_left == 1);  // a clean update restores nothing
    CHECK(rig.state().growth_tracker == 1);
    rig.run("I");
    const ampx_scaler_state s = rig.state();
    CHECK(s.scale == 512);
    CHECK(s.hysteresis_left == 0);
    CHECK(s.growth_tracker == 0);
    CHECK(s.counters.updates == 3);
    CHECK(s.counters.skipped == 2);
    CHECK(s.counters.backoffs == 1);
    CHECK(s.counters.growths == 0);
    // At 0 every further overflow backs off, clean updates between or not.
    rig.run("CI");
    CHECK(rig.state().scale == 256);
    CHECK(rig.state().counters.backoffs == 2);
  }
  SUBCASE("consecutive_hysteresis = 1: the clean update restores the allowance") {
    ampx_scaler_options o = scaler_options(1024, 100, 2);
    o.consecutive_hysteresis = 1;
    ScalerRig rig(o);
    rig.run("IC");
    CHECK(rig.state().hysteresis_left == 2);
    rig.run("I");
    const ampx_scaler_state s = rig.state();
    CHECK(s.scale == 1024);
    CHECK(s.hysteresis_left == 1);
    CHECK(s.counters.updates == 3);
    CHECK(s.counters.skipped == 2);
    CHECK(s.counters.backoffs == 0);
    CHECK(s.consecutive_hysteresis == 1);
    rig.run("I");  // two in a row
    CHECK(rig.state().scale == 512);
    CHECK(rig.state().counters.backoffs == 1);
  }
}

TEST_CASE("semantics: the hysteresis allowance is restored when a growth interval completes") {
  SUBCASE("with the growth") {
    ScalerRig rig(scaler_options(1024, 3, 3));
    rig.run("IIC");
    CHECK(rig.state().hysteresis_left == 1);
    rig.run("CC");  // the 3rd clean update in a row: growth
    ampx_scaler_state s = rig.state();
    CHECK(s.scale == 2048);
    CHECK(s.hysteresis_left == 3);
    CHECK(s.growth_tracker == 0);
    CHECK(s.counters.growths == 1);
    rig.run("IICI");  // three overflows, not consecutive, within one interval
    s = rig.state();
    CHECK(s.scale == 1024);
    CHECK(s.counters.backoffs == 1);
  }
  SUBCASE("when max_scale prevents the growth") {
    ampx_scaler_options o = scaler_options(2048, 2, 2);
    o.max_scale = 3000;
    ScalerRig rig(o);
    rig.run("ICC");
    const ampx_scaler_state s = rig.state();
    CHECK(s.scale == 2048);
    CHECK(s.hysteresis_left == 2);
    CHECK(s.growth_tracker == 0);
    CHECK(s.counters.growths == 0);
    rig.run("I");
    CHECK(rig.state().scale == 2048);  // tolerated: the allowance was back
  }
  SUBCASE("when the growth would be inf") {
    ScalerRig rig(scaler_options(3e38, 1, 2));
    rig.run("IC");
    const ampx_scaler_state s = rig.state();
    CHECK(s.scale == static_cast<double>(3e38f));
    CHECK(s.hysteresis_left == 2);
    CHECK(s.counters.growths == 0);
  }
}

TEST_CASE("semantics: a growth past max_scale is not taken unless clamp_to_max_scale") {
  SUBCASE("default: the scale stays a power of two below the cap") {
    ampx_scaler_options o = scaler_options(1024, 1, 1);
    o.max_scale = 3000;
    ScalerRig rig(o);
    rig.run("C");
    CHECK(rig.state().scale == 2048);
    rig.run("CCC");
    const ampx_scaler_state s = rig.state();
    CHECK(s.scale == 2048);
    CHECK(s.scale < o.max_scale);
    CHECK(s.counters.growths == 1);
    CHECK(s.growth_tracker == 0);
  }
  SUBCASE("a cap that is a reachable power of two is reached") {
    ampx_scaler_options o = scaler_options(1024, 1, 1);
    o.max_scale = 4096;
    ScalerRig rig(o);
    rig.run("CCCC");
    CHECK(rig.state().scale == 4096);
    CHECK(rig.state().counters.growths == 2);
  }
  SUBCASE("clamp_to_max_scale = 1: the scale is set to the cap") {
    ampx_scaler_options o = scaler_options(1024, 1, 1);
    o.max_scale = 3000;
    o.clamp_to_max_scale = 1;
    ScalerRig rig(o);
    rig.run("CC");
    CHECK(rig.state().scale == 3000);
    rig.run("CC");
    const ampx_scaler_state s = rig.state();
    CHECK(s.scale == 3000);
    CHECK(s.counters.growths == 2);  // only the updates that raised it
    CHECK(s.clamp_to_max_scale == 1);
  }
}

TEST_CASE("semantics: scaler get/set_state carry the new options; an older struct gets defaults") {
  ampx_scaler_options o = scaler_options(1024, 100, 2);
  o.consecutive_hysteresis = 1;
  o.clamp_to_max_scale = 1;
  o.max_scale = 1 << 20;
  ScalerRig source(o);
  source.run("ICI");
  const ampx_scaler_state saved = source.state();
  CHECK(saved.consecutive_hysteresis == 1);
  CHECK(saved.clamp_to_max_scale == 1);

  ScalerRig target(scaler_options(1024, 100, 2));
  REQUIRE_MESSAGE(ampx_scaler_set_state(target.scaler, &saved) == AMPX_OK, last_error());
  ampx_scaler_state got = target.state();
  CHECK(got.consecutive_hysteresis == 1);
  CHECK(got.clamp_to_max_scale == 1);
  CHECK(got.hysteresis_left == saved.hysteresis_left);
  CHECK(got.scale == saved.scale);
  // And the restored rule is applied: [clean, inf] does not back off.
  target.run("CI");
  CHECK(target.state().scale == saved.scale);

  // Only one of them, to tell the fields apart.
  ampx_scaler_state one = saved;
  one.consecutive_hysteresis = 0;
  REQUIRE(ampx_scaler_set_state(target.scaler, &one) == AMPX_OK);
  got = target.state();
  CHECK(got.consecutive_hysteresis == 0);
  CHECK(got.clamp_to_max_scale == 1);

  // A state as a program built before the flags fills it: the prefix.
  constexpr size_t kOldSize = offsetof(ampx_scaler_state, consecutive_hysteresis);
  CHECK(kOldSize == 104);
  ampx_scaler_state old = saved;
  old.struct_size = kOldSize;
  REQUIRE_MESSAGE(ampx_scaler_set_state(target.scaler, &old) == AMPX_OK, last_error());
  got = target.state();
  CHECK(got.consecutive_hysteresis == 0);
  CHECK(got.clamp_to_max_scale == 0);
  CHECK(got.scale == saved.scale);
  CHECK(got.counters.updates == saved.counters.updates);

  // Any other short size is refused and changes nothing.
  REQUIRE(ampx_scaler_set_state(target.scaler, &saved) == AMPX_OK);
  ampx_scaler_state odd = saved;
  odd.scale = 8;
  odd.struct_size = kOldSize + sizeof(int32_t);
  CHECK(ampx_scaler_set_state(target.scaler, &odd) == AMPX_ERR_INVALID_ARGUMENT);
  CHECK(ampx_test::contains(last_error(), "struct_size"));
  odd.struct_size = kOldSize - 8;
  CHECK(ampx_scaler_set_state(target.scaler, &odd) == AMPX_ERR_INVALID_ARGUMENT);
  got = target.state();
  CHECK(got.scale == saved.scale);
  CHECK(got.consecutive_hysteresis == 1);
  CHECK(got.clamp_to_max_scale == 1);

  // A reader built before the flags gets the prefix only.
  ampx_scaler_state prefix{};
  std::memset(&prefix, 0x5a, sizeof prefix);
  prefix.struct_size = kOldSize;
  REQUIRE(ampx_scaler_get_state(target.scaler, &prefix) == AMPX_OK);
  CHECK(prefix.scale == saved.scale);
  CHECK(prefix.consecutive_hysteresis == 0x5a5a5a5a);
}

namespace {

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::remove(path.c_str());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  REQUIRE(std::fclose(f) == 0);
}

// The file layout of ampx.h section 12: a 32-byte header (file size at 16,
// CRC-32C of the first 28 bytes at 28); sections of u32 tag, u32 reserved,
// u64 payload size, the payload and its CRC-32C; a CRC-32C of everything.
void reseal(std::vector<unsigned char>& f) {
  using ampx::impl::io::crc32c;
  const uint64_t size = f.size();
  std::memcpy(f.data() + 16, &size, 8);
  uint32_t crc = crc32c(f.data(), 28);
  std::memcpy(f.data() + 28, &crc, 4);
  uint32_t sections;
  std::memcpy(&sections, f.data() + 12, 4);
  size_t at = 32;
  for (uint32_t s = 0; s < sections; ++s) {
    uint64_t payload;
    std::memcpy(&payload, f.data() + at + 8, 8);
    crc = crc32c(f.data() + at, 16 + payload);
    std::memcpy(f.data() + at + 16 + payload, &crc, 4);
    at += 16 + payload + 4;
  }
  crc = crc32c(f.data(), f.size() - 4);
  std::memcpy(f.data() + f.size() - 4, &crc, 4);
}

// Offset of the section tagged `tag` (its header's first byte).
size_t find_section(const std::vector<unsigned char>& f, const char (&tag)[5]) {
  uint32_t sections;
  std::memcpy(&sections, f.data() + 12, 4);
  size_t at = 32;
  for (uint32_t s = 0; s < sections; ++s) {
    if (std::memcmp(f.data() + at, tag, 4) == 0) return at;
    uint64_t payload;
    std::memcpy(&payload, f.data() + at + 8, 8);
    at += 16 + payload + 4;
  }
  FAIL("no section ", tag);
  return 0;
}

struct TempFile {
  std::string path;
  TempFile() {
    char pattern[] = "/tmp/ampx-semantics-XXXXXX";
    const int fd = mkstemp(pattern);
    REQUIRE(fd >= 0);
    close(fd);
    path = pattern;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

}  // namespace

TEST_CASE("semantics: checkpoint files carry the new scaler options and read the old layout") {
  ampx_scaler_options o = scaler_options(1024, 100, 2);
  o.clamp_to_max_scale = 1;
  o.max_scale = 1 << 20;
  ScalerRig source(o);
  source.run("IC");
  const ampx_scaler_state saved = source.state();
  TempFile file;
  REQUIRE_MESSAGE(ampx_checkpoint_file_save(file.path.c_str(), nullptr, 0, nullptr,
                                            source.scaler) == AMPX_OK,
                  last_error());

  ampx_scaler_options other = scaler_options(4, 7, 3);
  other.consecutive_hysteresis = 1;
  ScalerRig target(other);
  REQUIRE_MESSAGE(ampx_checkpoint_file_load(file.path.c_str(), nullptr, 0, nullptr,
                                            target.scaler) == AMPX_OK,
                  last_error());
  ampx_scaler_state got = target.state();
  CHECK(got.consecutive_hysteresis == 0);
  CHECK(got.clamp_to_max_scale == 1);
  CHECK(got.scale == saved.scale);
  CHECK(got.hysteresis == 2);
  CHECK(got.hysteresis_left == 1);
  CHECK(got.growth_tracker == saved.growth_tracker);
  CHECK(got.max_scale == saved.max_scale);

  // The layout written before the two flags: the scaler section 8 bytes
  // shorter. Such a file resumes with the rule its writer applied.
  const std::vector<unsigned char> current = read_bytes(file.path);
  const size_t at = find_section(current, "SCAL");
  uint64_t payload;
  std::memcpy(&payload, current.data() + at + 8, 8);
  REQUIRE(payload == 104);
  std::vector<unsigned char> old = current;
  old.erase(old.begin() + static_cast<std::ptrdiff_t>(at + 16 + 96),
            old.begin() + static_cast<std::ptrdiff_t>(at + 16 + 104));
  const uint64_t old_payload = 96;
  std::memcpy(old.data() + at + 8, &old_payload, 8);
  reseal(old);
  write_bytes(file.path, old);
  ScalerRig from_old(scaler_options(4, 7, 3));
  REQUIRE_MESSAGE(ampx_checkpoint_file_load(file.path.c_str(), nullptr, 0, nullptr,
                                            from_old.scaler) == AMPX_OK,
                  last_error());
  got = from_old.state();
  CHECK(got.consecutive_hysteresis == 1);
  CHECK(got.clamp_to_max_scale == 1);
  CHECK(got.scale == saved.scale);
  CHECK(got.hysteresis_left == saved.hysteresis_left);
  CHECK(got.counters.updates == saved.counters.updates);

  // A flag that is neither 0 nor 1, or another section size: corrupt, and
  // the scaler is left as it was.
  std::vector<unsigned char> bad = current;
  bad[at + 16 + 96] = 2;
  reseal(bad);
  write_bytes(file.path, bad);
  const ampx_scaler_state before = target.state();
  CHECK(ampx_checkpoint_file_load(file.path.c_str(), nullptr, 0, nullptr, target.scaler) ==
        AMPX_ERR_CORRUPT);
  CHECK(ampx_test::contains(last_error(), "consecutive_hysteresis"));
  bad = current;
  bad.erase(bad.begin() + static_cast<std::ptrdiff_t>(at + 16 + 100),
            bad.begin() + static_cast<std::ptrdiff_t>(at + 16 + 104));
  const uint64_t short_payload = 100;
  std::memcpy(bad.data() + at + 8, &short_payload, 8);
  reseal(bad);
  write_bytes(file.path, bad);
  CHECK(ampx_checkpoint_file_load(file.path.c_str(), nullptr, 0, nullptr, target.scaler) ==
        AMPX_ERR_CORRUPT);
  const ampx_scaler_state after = target.state();
  CHECK(after.scale == before.scale);
  CHECK(after.consecutive_hysteresis == before.consecutive_hysteresis);
  CHECK(after.hysteresis == before.hysteresis);
}

// ---- mean keeps its input's dtype -------------------------------------------
//
// torch.mean is in neither of torch.autocast's lists, so it runs in its
// input's dtype, accumulating in fp32: here the fp32 sum times fp32(1/n),
// rounded once to the dtype. Its gradient is dy / n in x's dtype.

namespace {

struct Autocast {
  ampx_autocast handle = nullptr;
  Autocast(ampx_context ctx, ampx_dtype dtype) {
    ampx_autocast_options o = AMPX_AUTOCAST_OPTIONS_INIT;
    o.dtype = dtype;
    REQUIRE(ampx_autocast_create(ctx, &o, &handle) == AMPX_OK);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;
  ~Autocast() { ampx_autocast_release(handle); }
};

// The mean as the brief of the op states it, from the (exact) double sum of
// a few values whose fp32 sum is exact.
double reference_mean(ampx_dtype dtype, const std::vector<double>& x) {
  double sum = 0.0;
  for (double v : x) sum += v;
  const float inverse = 1.0f / static_cast<float>(x.size());
  return ampx_fixture::round_to(dtype, static_cast<float>(sum * static_cast<double>(inverse)));
}

}  // namespace

TEST_CASE("semantics: mean keeps f16/bf16, accumulating in fp32, in and outside autocast") {
  using ampx_fixture::dtype_of;
  using ampx_fixture::make;
  using ampx_fixture::values_of;
  Ctx ctx;
  // Sums that the input dtype itself could not hold (2049 is no f16, 257 no
  // bf16): a mean accumulated in the dtype would give 409.5 / 51.2.
  const std::vector<double> h_values = {2048, 1, 1, 1, 1};
  const std::vector<double> b_values = {256, 1, 1, 1, 1};
  CHECK(reference_mean(AMPX_F16, h_values) == 410.5);
  CHECK(reference_mean(AMPX_BF16, b_values) == 52.0);
  for (int autocast_dtype : {0, int{AMPX_F16}, int{AMPX_BF16}}) {
    CAPTURE(autocast_dtype);
    std::unique_ptr<Autocast> policy;
    if (autocast_dtype != 0) {
      policy = std::make_unique<Autocast>(ctx, static_cast<ampx_dtype>(autocast_dtype));
      REQUIRE(ampx_autocast_enter(policy->handle) == AMPX_OK);
    }
    for (ampx_dtype dtype : {AMPX_F16, AMPX_BF16}) {
      CAPTURE(dtype);
      const std::vector<double>& values = dtype == AMPX_F16 ? h_values : b_values;
      Tensor x(make(ctx, dtype, {5}, values, true));
      Tensor m;
      REQUIRE_MESSAGE(ampx_mean(x, m.out()) == AMPX_OK, last_error());
      CHECK(dtype_of(m) == dtype);
      CHECK(values_of(m) == std::vector<double>{reference_mean(dtype, values)});
      // sum stays fp32 (the fp32 class; outside autocast too).
      Tensor s;
      REQUIRE(ampx_sum(x, s.out()) == AMPX_OK);
      CHECK(dtype_of(s) == AMPX_F32);
      CHECK(values_of(s) == std::vector<double>{2052.0 - (dtype == AMPX_F16 ? 0 : 1792)});
      // d mean / dx = 1/n, in x's dtype.
      REQUIRE_MESSAGE(ampx_backward(m, nullptr) == AMPX_OK, last_error());
      ampx_tensor g = nullptr;
      REQUIRE(ampx_tensor_grad(x, &g) == AMPX_OK);
      REQUIRE(g != nullptr);
      CHECK(dtype_of(g) == dtype);
      const double fifth = ampx_fixture::round_to(dtype, 1.0f / 5.0f);
      CHECK(values_of(g) == std::vector<double>(5, fifth));
    }
    // An f32 input stays f32: mean is never lowered.
    const std::vector<double> tiny = {1.0 + std::ldexp(1.0, -12), -1.0};
    Tensor f(make(ctx, AMPX_F32, {2}, tiny, true));
    Tensor m;
    REQUIRE(ampx_mean(f, m.out()) == AMPX_OK);
    CHECK(dtype_of(m) == AMPX_F32);
    CHECK(values_of(m)[0] == std::ldexp(1.0, -13));
    REQUIRE_MESSAGE(ampx_backward(m, nullptr) == AMPX_OK, last_error());
    ampx_tensor g = nullptr;
    REQUIRE(ampx_tensor_grad(f, &g) == AMPX_OK);
    REQUIRE(g != nullptr);
    CHECK(dtype_of(g) == AMPX_F32);
    CHECK(values_of(g) == std::vector<double>(2, 0.5));
    if (policy) {
      ampx_op_class c = AMPX_OP_CLASS_MAX_ENUM;
      REQUIRE(ampx_autocast_op_class(policy->handle, "mean", &c) == AMPX_OK);
      CHECK(c == AMPX_OP_KEEP);
      REQUIRE(ampx_autocast_op_class(policy->handle, "sum", &c) == AMPX_OK);
      CHECK(c == AMPX_OP_FP32);
      REQUIRE(ampx_autocast_exit(policy->handle) == AMPX_OK);
    }
  }
}

TEST_CASE("semantics: a mean loss under autocast is the lowered matmul's dtype; grads reach f32 leaves") {
  using ampx_fixture::dtype_of;
  using ampx_fixture::make;
  using ampx_fixture::values_of;
  Ctx ctx;
  for (ampx_dtype lower : {AMPX_F16, AMPX_BF16}) {
    CAPTURE(lower);
    // x [2, 3] and w [3, 2], f32 leaves; both values exact in either dtype.
    const std::vector<double> xv = {0.5, -1, 2, 0.25, 1.5, -0.75};
    const std::vector<double> wv = {1, -0.5, 0.25, 2, -1, 0.75};
    Tensor x(make(ctx, AMPX_F32, {2, 3}, xv, false));
    Tensor w(make(ctx, AMPX_F32, {3, 2}, wv, true));
    Autocast policy(ctx, lower);
    REQUIRE(ampx_autocast_enter(policy.handle) == AMPX_OK);
    Tensor y, loss;
    REQUIRE_MESSAGE(ampx_matmul(x, w, y.out()) == AMPX_OK, last_error());
    REQUIRE(ampx_mean(y, loss.out()) == AMPX_OK);
    REQUIRE(ampx_autocast_exit(policy.handle) == AMPX_OK);
    CHECK(dtype_of(y) == lower);
    CHECK(dtype_of(loss) == lower);
    // y = x w: every product and sum here is exact in fp32 and in the dtype.
    double total = 0;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int k = 0; k < 3; ++k) total += xv[i * 3 + k] * wv[k * 2 + j];
    CHECK(values_of(loss)[0] == reference_mean(lower, std::vector<double>{total, 0, 0, 0}));
    REQUIRE_MESSAGE(ampx_backward(loss, nullptr) == AMPX_OK, last_error());
    ampx_tensor g = nullptr;
    REQUIRE(ampx_tensor_grad(w, &g) == AMPX_OK);
    REQUIRE(g != nullptr);
    CHECK(dtype_of(g) == AMPX_F32);
    // d loss / d w[k][j] = (x[0][k] + x[1][k]) / 4, with dy = 1/4 in the
    // dtype (exact) and each product of the matmul's backward exact.
    const std::vector<double> got = values_of(g);
    for (int k = 0; k < 3; ++k)
      for (int j = 0; j < 2; ++j) {
        CAPTURE(k);
        CAPTURE(j);
        CHECK(got[static_cast<size_t>(k * 2 + j)] == (xv[static_cast<size_t>(k)] + xv[static_cast<size_t>(3 + k)]) / 4);
      }
  }
}
