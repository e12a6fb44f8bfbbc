// The precision doctor through the C API, against references computed here
// in double precision: gradients with values planted at every binade
// boundary that matters to fp16 (2^-25, 2^-24, 2^-15, 2^-14, 65504, 65520,
// 2^16) and far outside it, stored as f32, f16 and bf16, with and without a
// loss scale; the histogram, the fp16 fractions, amax and headroom must be
// exactly the reference's. Lost updates are checked against the parameters
// and masters read before and after the step; the history against the
// steps' known scales and overflows. Then bad input.
//
// The reference rounds to fp16 on its own (in double, nearest-even, from
// fp16's definition), not with the library's conversion.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "support.h"

using ampx_test::contains;
using ampx_test::Ctx;
using ampx_test::last_error;

namespace {

constexpr int kBins = AMPX_DOCTOR_BINS;

// ---- the reference ------------------------------------------------------------

// v rounded to fp16 (ties to even), as a double; inf beyond the range.
double round_to_fp16(double v) {
  if (std::isnan(v)) return v;
  const double a = std::fabs(v);
  if (a >= 65520.0) return std::copysign(INFINITY, v);
  // The spacing of fp16 values around a: 2^-24 below 2^-14, else 2^(e-10).
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int exponent = std::max(e - 1, -14);
  const double quantum = std::ldexp(1.0, exponent - 10);
  const double q = a / quantum;
  double n = std::floor(q);
  const double rest = q - n;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(n, 2.0) != 0.0)) n += 1.0;
  return std::copysign(n * quantum, v);
}

enum Class { kZero, kSubnormal, kNormal, kInfinite };

Class fp16_class(double v) {
  const double h = std::fabs(round_to_fp16(v));
  if (h == 0.0) return kZero;
  if (std::isinf(h) || std::isnan(h)) return kInfinite;
  return h < std::ldexp(1.0, -14) ? kSubnormal : kNormal;
}

int bin_of(double u) {
  if (std::isnan(u) || std::isinf(u)) return AMPX_DOCTOR_BIN_NONFINITE;
  const double a = std::fabs(u);
  if (a == 0.0) return AMPX_DOCTOR_BIN_ZERO;
  int e = 0;
  std::frexp(a, &e);
  const int binade = e - 1;
  if (binade < -64) return AMPX_DOCTOR_BIN_TINY;
  if (binade > 15) return AMPX_DOCTOR_BIN_HUGE;
  return AMPX_DOCTOR_BIN_BINADE(binade);
}

struct Expected {
  int64_t histogram[kBins] = {};
  int64_t zero_u = 0, subnormal_u = 0, zero_x = 0, subnormal_x = 0, overflow_x = 0;
  double amax = 0.0, amax_scaled = 0.0;
  double squares = 0.0;
};

// The statistics of stored values `xs` (as doubles) at loss scale `scale`.
Expected reference(const std::vector<double>& xs, double scale) {
  const double r = static_cast<float>(1.0 / scale);  // as the library takes 1/scale
  Expected e;
  for (double x : xs) {
    const double u = static_cast<float>(x * r);  // the fp32 product (exact in double first)
    ++e.histogram[bin_of(u)];
    if (std::isfinite(u)) {
      const Class c = fp16_class(u);
      e.zero_u += c == kZero;
      e.subnormal_u += c == kSubnormal;
      e.squares += u * u;
    }
    if (std::isfinite(x)) {
      const Class c = fp16_class(x);
      e.zero_x += c == kZero;
      e.subnormal_x += c == kSubnormal;
      e.overflow_x += c == kInfinite;
      e.amax_scaled = std::max(e.amax_scaled, std::fabs(x));
    } else {
      ++e.overflow_x;
    }
  }
  e.amax = static_cast<float>(e.amax_scaled * r);
  return e;
}

// ---- planting -------------------------------------------------------------------

// Values at and next to each boundary, both signs, plus zeros, far outliers
// and (when `nonfinite`) inf and NaN: as floats, before storage rounding.
std::vector<float> planted_values(bool nonfinite) {
  const double boundaries[] = {std::ldexp(1.0, -80),
                               std::ldexp(1.0, -64),
                               std::ldexp(1.0, -25),
                               std::ldexp(1.0, -24),
                               std::ldexp(1.0, -15),
                               std::ldexp(1.0, -14),
                               std::ldexp(1.0, -14) - std::ldexp(1.0, -25),
                               1.0,
                               65504.0,
                               65520.0,
                               std::ldexp(1.0, 16),
                               1e30};
  std::vector<float> v = {0.0f, -0.0f, 1e-45f /* fp32 subnormal */};
  for (double b : boundaries) {
    const float f = static_cast<float>(b);
    for (float x : {std::nextafter(f, 0.0f), f, std::nextafter(f, INFINITY)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  // A spread over the binades between.
  for (int e = -30; e <= 15; ++e) v.push_back(std::ldexp(1.37f, e));
  if (nonfinite) {
    v.push_back(INFINITY);
    v.push_back(-INFINITY);
    v.push_back(NAN);
  }
  return v;
}

uint16_t to_half_bits(double v) {
  // Exact for every value round_to_fp16 returns.
  const double h = round_to_fp16(v);
  const uint16_t sign = std::signbit(h) ? 0x8000 : 0;
  const double a = std::fabs(h);
  if (std::isnan(h)) return 0x7e00;
  if (std::isinf(a)) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(a / std::ldexp(1.0, -24));
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m 2^e
  const int biased = e - 1 + 15;
  const auto mantissa = static_cast<uint16_t>((m * 2.0 - 1.0) * 1024.0);
  return sign | static_cast<uint16_t>(biased << 10) | mantissa;
}

double half_bits_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * mantissa * std::ldexp(1.0, -24);
  return sign * (1.0 + mantissa / 1024.0) * std::ldexp(1.0, exponent - 15);
}

uint16_t to_bf16_bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

double bf16_bits_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A gradient tensor of `dtype` holding `values` rounded to it; the stored
// values as doubles go to *stored.
ampx_tensor make_grad(ampx_context ctx, ampx_dtype dtype, const std::vector<float>& values,
                      std::vector<double>* stored) {
  stored->clear();
  if (dtype == AMPX_F32) {
    for (float v : values) stored->push_back(v);
    return ampx_test::upload(ctx, dtype, values);
  }
  std::vector<uint16_t> bits;
  for (float v : values) {
    bits.push_back(dtype == AMPX_F16 ? to_half_bits(v) : to_bf16_bits(v));
    stored->push_back(dtype == AMPX_F16 ? half_bits_value(bits.back())
                                        : bf16_bits_value(bits.back()));
  }
  return ampx_test::upload(ctx, dtype, bits);
}

ampx_tensor zeros(ampx_context ctx, ampx_dtype dtype, int64_t n) {
  ampx_tensor t = nullptr;
  REQUIRE_MESSAGE(ampx_tensor_zeros(ctx, dtype, 1, &n, &t) == AMPX_OK, last_error());
  return t;
}

struct Handles {
  ampx_optimizer optimizer = nullptr;
  ampx_scaler scaler = nullptr;
  ampx_doctor doctor = nullptr;
  ~Handles() {
    ampx_doctor_release(doctor);
    ampx_scaler_release(scaler);
    ampx_optimizer_release(optimizer);
  }
};

ampx_optimizer make_sgd(ampx_context ctx, const std::vector<ampx_tensor>& params, double lr) {
  ampx_sgd_options o = AMPX_SGD_OPTIONS_INIT;
  o.lr = lr;
  ampx_optimizer opt = nullptr;
  REQUIRE_MESSAGE(ampx_optimizer_create_sgd(ctx, params.data(), params.size(), &o, &opt) == AMPX_OK,
                  last_error());
  return opt;
}

ampx_doctor make_doctor(ampx_context ctx, ampx_optimizer opt, int32_t interval) {
  ampx_doctor_options o = AMPX_DOCTOR_OPTIONS_INIT;
  o.interval = interval;
  ampx_doctor d = nullptr;
  REQUIRE_MESSAGE(ampx_doctor_create(ctx, opt, &o, &d) == AMPX_OK, last_error());
  return d;
}

ampx_scaler make_scaler(ampx_context ctx, double init_scale) {
  ampx_scaler_options o = AMPX_SCALER_OPTIONS_INIT;
  o.init_scale = init_scale;
  ampx_scaler s = nullptr;
  REQUIRE_MESSAGE(ampx_scaler_create(ctx, &o, &s) == AMPX_OK, last_error());
  return s;
}

ampx_doctor_param_stats param_stats(ampx_doctor d, int32_t index) {
  ampx_doctor_param_stats s{};
  s.struct_size = sizeof s;
  REQUIRE_MESSAGE(ampx_doctor_get_param_stats(d, index, &s) == AMPX_OK, last_error());
  return s;
}

void check_against(const ampx_doctor_param_stats& s, const Expected& e, int64_t n) {
  CHECK(s.elements == n);
  for (int b = 0; b < kBins; ++b) {
    CAPTURE(b);
    CHECK(s.histogram[b] == e.histogram[b]);
  }
  const double dn = static_cast<double>(n);
  CHECK(s.fp16_zero_unscaled == static_cast<double>(e.zero_u) / dn);
  CHECK(s.fp16_subnormal_unscaled == static_cast<double>(e.subnormal_u) / dn);
  CHECK(s.fp16_zero_scaled == static_cast<double>(e.zero_x) / dn);
  CHECK(s.fp16_subnormal_scaled == static_cast<double>(e.subnormal_x) / dn);
  CHECK(s.fp16_overflow_scaled == static_cast<double>(e.overflow_x) / dn);
  CHECK(s.amax_scaled == e.amax_scaled);
  CHECK(s.amax == e.amax);
  // The one atomic sum: equal to a few ulps of double.
  CHECK(s.grad_norm == doctest::Approx(std::sqrt(e.squares)).epsilon(1e-12));
  if (e.amax_scaled > 0.0) {
    CHECK(s.headroom_unbounded == 0);
    CHECK(std::ldexp(e.amax_scaled, s.headroom) <= 65504.0);
    CHECK(std::ldexp(e.amax_scaled, s.headroom + 1) > 65504.0);
  } else {
    CHECK(s.headroom_unbounded == 1);
  }
}

}  // namespace

TEST_CASE("doctor: histograms and fp16 fractions equal a double reference at every boundary") {
  Ctx ctx;
  for (ampx_dtype dtype : {AMPX_F32, AMPX_F16, AMPX_BF16}) {
    for (double scale : {1.0, 1024.0, 3.0}) {
      for (bool with_scaler : {false, true}) {
        if (!with_scaler && scale != 1.0) continue;
        CAPTURE(ampx_dtype_name(dtype));
        CAPTURE(scale);
        CAPTURE(with_scaler);
        // Parameter 0 holds the planted values; parameter 1 a finite spread
        // (with the scaler, non-finite values would skip the step: they go
        // in a run of their own below).
        const std::vector<float> planted = planted_values(!with_scaler);
        std::vector<float> spread;
        for (int i = 0; i < 1000; ++i)
          spread.push_back(std::ldexp(0.5f + i / 2000.0f, -40 + i % 60));
        const std::vector<std::vector<float>> grads = {planted, spread};
        std::deque<ampx_test::Tensor> params;
        std::vector<ampx_tensor> handles;
        std::vector<std::vector<double>> stored(grads.size());
        for (size_t p = 0; p < grads.size(); ++p) {
          params.emplace_back(zeros(ctx, dtype, static_cast<int64_t>(grads[p].size())));
          ampx_test::Tensor g(make_grad(ctx, dtype, grads[p], &stored[p]));
          REQUIRE(ampx_tensor_set_grad(params.back(), g) == AMPX_OK);
          handles.push_back(params.back());
        }
        Handles h;
        h.optimizer = make_sgd(ctx, handles, 0.0);
        h.doctor = make_doctor(ctx, h.optimizer, 1);
        if (with_scaler) {
          h.scaler = make_scaler(ctx, scale);
          REQUIRE_MESSAGE(ampx_scaler_step(h.scaler, h.optimizer) == AMPX_OK, last_error());
          REQUIRE(ampx_scaler_update(h.scaler) == AMPX_OK);
        } else {
          REQUIRE_MESSAGE(ampx_optimizer_step(h.optimizer) == AMPX_OK, last_error());
        }
        ampx_doctor_overview o = AMPX_DOCTOR_OVERVIEW_INIT;
        REQUIRE_MESSAGE(ampx_doctor_examine(h.doctor, &o) == AMPX_OK, last_error());
        CHECK(o.steps == 1);
        CHECK(o.sample_step == 1);
        CHECK(o.sample_scale == (with_scaler ? scale : 1.0));
        REQUIRE(o.param_count == 2);
        for (size_t p = 0; p < grads.size(); ++p) {
          CAPTURE(p);
          const ampx_doctor_param_stats s = param_stats(h.doctor, static_cast<int32_t>(p));
          CHECK(s.index == static_cast<int32_t>(p));
          CHECK(s.grad_dtype == dtype);
          check_against(s, reference(stored[p], with_scaler ? scale : 1.0),
                        static_cast<int64_t>(grads[p].size()));
        }
      }
    }
  }
}

TEST_CASE("doctor: a scaled run's overflow is recorded with the parameter it was first in") {
  Ctx ctx;
  const int64_t n = 64;
  ampx_test::Tensor a(zeros(ctx, AMPX_F16, n)), b(zeros(ctx, AMPX_F16, n));
  std::vector<ampx_tensor> params = {a, b};
  Handles h;
  h.optimizer = make_sgd(ctx, params, 0.0);
  h.doctor = make_doctor(ctx, h.optimizer, 2);
  h.scaler = make_scaler(ctx, 1024.0);
  // Steps 1..5; step 3 has an inf in parameter 1; expected scales: 1024,
  // 1024, 1024 (overflow: backs off), 512, 512.
  const double scales[] = {1024, 1024, 1024, 512, 512};
  for (int step = 1; step <= 5; ++step) {
    std::vector<float> ga(n, 0.25f), gb(n, 1.0f);
    if (step == 3) gb[7] = INFINITY;
    std::vector<double> stored;
    ampx_test::Tensor grad_a(make_grad(ctx, AMPX_F16, ga, &stored));
    ampx_test::Tensor grad_b(make_grad(ctx, AMPX_F16, gb, &stored));
    REQUIRE(ampx_tensor_set_grad(a, grad_a) == AMPX_OK);
    REQUIRE(ampx_tensor_set_grad(b, grad_b) == AMPX_OK);
    REQUIRE_MESSAGE(ampx_scaler_step(h.scaler, h.optimizer) == AMPX_OK, last_error());
    REQUIRE(ampx_scaler_update(h.scaler) == AMPX_OK);
  }
  int32_t count = 0;
  REQUIRE(ampx_doctor_get_history(h.doctor, nullptr, 0, &count) == AMPX_OK);
  REQUIRE(count == 5);
  std::vector<ampx_doctor_sample> history(5);
  REQUIRE(ampx_doctor_get_history(h.doctor, history.data(), 5, &count) == AMPX_OK);
  for (int i = 0; i < 5; ++i) {
    CAPTURE(i);
    CHECK(history[i].step == i + 1);
    CHECK(history[i].scale == scales[i]);
    CHECK(history[i].found_inf == (i == 2 ? 1 : 0));
    CHECK(history[i].first_overflow_param == (i == 2 ? 1 : -1));
    CHECK(history[i].overflow_params == (i == 2 ? 1 : 0));
    CHECK(history[i].sampled == (i % 2 == 0 ? 1 : 0));  // steps 1, 3, 5
  }
  // Step 5, sampled: the stored 0.25 and 1 leave 2^17 and 2^15 of room;
  // the norm is of the true gradients, x / 512.
  ampx_doctor_overview o = AMPX_DOCTOR_OVERVIEW_INIT;
  REQUIRE(ampx_doctor_examine(h.doctor, &o) == AMPX_OK);
  CHECK(o.sample_step == 5);
  CHECK(o.sample_scale == 512.0);
  CHECK(param_stats(h.doctor, 0).headroom == 17);
  CHECK(param_stats(h.doctor, 1).headroom == 15);
  CHECK(param_stats(h.doctor, 0).amax == 0.25 / 512);
  CHECK(history[4].grad_norm == doctest::Approx(std::sqrt(n * (0.0625 + 1.0)) / 512));
}

TEST_CASE(
    "doctor: lost updates of fp16 parameters equal the count from the values around the step") {
  Ctx ctx;
  const int64_t n = 4096;
  // Parameters near 1 (fp16 ulp 2^-10) and gradients whose update lr * g
  // spans from far below half an ulp to several ulps.
  std::vector<uint16_t> p_bits;
  std::vector<float> g;
  for (int64_t i = 0; i < n; ++i) {
    p_bits.push_back(to_half_bits(1.0 + (i % 7) * std::ldexp(1.0, -10)));
    g.push_back(std::ldexp(1.0f + (i % 13) / 13.0f, -16 + static_cast<int>(i % 12)));
  }
  ampx_test::Tensor param(ampx_test::upload(ctx, AMPX_F16, p_bits));
  std::vector<double> stored;
  ampx_test::Tensor grad(make_grad(ctx, AMPX_F16, g, &stored));
  REQUIRE(ampx_tensor_set_grad(param, grad) == AMPX_OK);
  std::vector<ampx_tensor> params = {param};
  Handles h;
  h.optimizer = make_sgd(ctx, params, 1.0);
  h.doctor = make_doctor(ctx, h.optimizer, 1);
  ampx_test::Tensor master;
  REQUIRE(ampx_optimizer_state_tensor(h.optimizer, param, AMPX_STATE_MASTER, master.out()) ==
          AMPX_OK);
  // Two steps, so that the second starts from a master that differs from
  // its parameter.
  for (int step = 0; step < 2; ++step) {
    const std::vector<uint16_t> p_before = ampx_test::download<uint16_t>(param);
    const std::vector<float> m_before = ampx_test::download<float>(master);
    REQUIRE_MESSAGE(ampx_optimizer_step(h.optimizer) == AMPX_OK, last_error());
    const std::vector<uint16_t> p_after = ampx_test::download<uint16_t>(param);
    const std::vector<float> m_after = ampx_test::download<float>(master);
    int64_t lost = 0, lost_without = 0, changed = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (m_after[i] == m_before[i]) continue;
      ++changed;
      lost += p_after[i] == p_before[i];
      const double direct = static_cast<float>(half_bits_value(p_before[i]) +
                                               static_cast<double>(m_after[i] - m_before[i]));
      lost_without += to_half_bits(direct) == p_before[i];
    }
    REQUIRE(changed > 0);
    const ampx_doctor_param_stats s = param_stats(h.doctor, 0);
    CAPTURE(step);
    CHECK(s.lost_update_fraction == static_cast<double>(lost) / n);
    CHECK(s.lost_without_master_fraction == static_cast<double>(lost_without) / n);
    // The point of masters: fewer updates lost with them than without.
    CHECK(lost_without > 0);
    CHECK(lost <= lost_without);
  }
}

TEST_CASE("doctor: an fp32 parameter has no lost updates; interval 0 samples nothing") {
  Ctx ctx;
  ampx_test::Tensor param(zeros(ctx, AMPX_F32, 8));
  ampx_test::Tensor grad(ampx_test::upload(ctx, AMPX_F32, std::vector<float>(8, 1.0f)));
  REQUIRE(ampx_tensor_set_grad(param, grad) == AMPX_OK);
  std::vector<ampx_tensor> params = {param};
  Handles h;
  h.optimizer = make_sgd(ctx, params, 0.1);
  h.doctor = make_doctor(ctx, h.optimizer, 0);
  REQUIRE(ampx_optimizer_step(h.optimizer) == AMPX_OK);
  ampx_doctor_overview o = AMPX_DOCTOR_OVERVIEW_INIT;
  REQUIRE(ampx_doctor_examine(h.doctor, &o) == AMPX_OK);
  CHECK(o.steps == 1);
  CHECK(o.sample_step == 0);
  CHECK(o.history_count == 0);
  ampx_doctor_param_stats s{};
  s.struct_size = sizeof s;
  CHECK_FAILS_WITH(ampx_doctor_get_param_stats(h.doctor, 0, &s), AMPX_ERR_ORDER, "sampled");
  REQUIRE(ampx_doctor_set_interval(h.doctor, 1) == AMPX_OK);
  REQUIRE(ampx_optimizer_step(h.optimizer) == AMPX_OK);
  s = param_stats(h.doctor, 0);
  CHECK(s.lost_update_fraction == -1.0);
  CHECK(s.lost_without_master_fraction == -1.0);
  CHECK(s.histogram[AMPX_DOCTOR_BIN_BINADE(0)] == 8);
}

// Without a scaler, the doctor's verdict on one sampled step of two f16
// parameters (64 elements each) with planted fp16 gradients.
struct UnscaledFinding {
  int32_t code, cause, param;
  std::string message;  // a copy: the doctor's strings die with it
};

std::vector<UnscaledFinding> unscaled_findings(const std::vector<uint16_t>& first,
                                               const std::vector<uint16_t>& second) {
  Ctx ctx;
  std::deque<ampx_test::Tensor> params, grads;  // not movable
  std::vector<ampx_tensor> handles;
  for (const std::vector<uint16_t>* bits : {&first, &second}) {
    params.emplace_back(zeros(ctx, AMPX_F16, static_cast<int64_t>(bits->size())));
    grads.emplace_back(ampx_test::upload(ctx, AMPX_F16, *bits));
    REQUIRE(ampx_tensor_set_grad(params.back(), grads.back()) == AMPX_OK);
    handles.push_back(params.back());
  }
  Handles h;
  h.optimizer = make_sgd(ctx, handles, 0.0);
  h.doctor = make_doctor(ctx, h.optimizer, 1);
  REQUIRE(ampx_optimizer_step(h.optimizer) == AMPX_OK);
  ampx_doctor_overview o = AMPX_DOCTOR_OVERVIEW_INIT;
  REQUIRE(ampx_doctor_examine(h.doctor, &o) == AMPX_OK);
  std::vector<UnscaledFinding> out;
  for (int32_t i = 0; i < o.finding_count; ++i) {
    ampx_doctor_finding f{};
    f.struct_size = sizeof f;
    REQUIRE(ampx_doctor_get_finding(h.doctor, i, &f) == AMPX_OK);
    out.push_back({f.code, f.cause, f.param, f.message});
  }
  return out;
}

bool no_loss_scaling(const std::vector<UnscaledFinding>& findings) {
  return findings.size() == 1 && findings[0].code == AMPX_DOCTOR_SCALE_TOO_LOW &&
         findings[0].cause == AMPX_DOCTOR_CAUSE_NO_LOSS_SCALING && findings[0].param == -1;
}

TEST_CASE("doctor: fp16 gradients without a scaler: underflow is a finding, structural zeros not") {
  const uint16_t zero = 0x0000, smallest = 0x0001 /* 2^-24 */, one = 0x3c00;
  const uint16_t eighth = 0x3000 /* 0.125: 2^3 below 1, 2^19 below 65504 */;
  // Everything underflowed to zero: no subnormal left to show it.
  const std::vector<UnscaledFinding> all_zero =
      unscaled_findings(std::vector<uint16_t>(64, zero), std::vector<uint16_t>(64, zero));
  CHECK(no_loss_scaling(all_zero));
  CHECK(contains(all_zero.at(0).message, "exactly zero"));
  // Half zero, a quarter 2^-24 (the rest 1/8): underflow, room to scale.
  std::vector<uint16_t> mixed(64, zero);
  for (size_t i = 0; i < 16; ++i) mixed[i] = smallest;
  for (size_t i = 16; i < 32; ++i) mixed[i] = eighth;
  const std::vector<UnscaledFinding> underflow =
      unscaled_findings(mixed, std::vector<uint16_t>(64, zero));
  CHECK(no_loss_scaling(underflow));
  CHECK(contains(underflow.at(0).message, "subnormal"));
  // Zeros with no subnormal among the rest: structural (constant inputs,
  // unused rows), not underflow.
  std::vector<uint16_t> structural(64, zero);
  for (size_t i = 0; i < 32; ++i) structural[i] = one;
  CHECK(unscaled_findings(structural, std::vector<uint16_t>(64, one)).empty());
  // Subnormals, but the largest gradient at fp16's limit: a scale would
  // overflow it, so loss scaling is no remedy to report.
  std::vector<uint16_t> no_room = mixed;
  no_room[63] = 0x7bff;  // 65504
  CHECK(unscaled_findings(no_room, std::vector<uint16_t>(64, zero)).empty());
}

TEST_CASE("doctor: bad input gets a clear status and training goes on") {
  Ctx ctx;
  Ctx other;
  ampx_test::Tensor param(ampx_test::upload(ctx, AMPX_F16, std::vector<uint16_t>(8, 0x3c00)));
  ampx_test::Tensor grad(ampx_test::upload(ctx, AMPX_F16, std::vector<uint16_t>(8, 0x3c00)));
  REQUIRE(ampx_tensor_set_grad(param, grad) == AMPX_OK);
  std::vector<ampx_tensor> params = {param};
  Handles h;
  h.optimizer = make_sgd(ctx, params, 0.5);
  ampx_doctor_options o = AMPX_DOCTOR_OPTIONS_INIT;
  o.interval = -1;
  ampx_doctor d = nullptr;
  CHECK_FAILS_WITH(ampx_doctor_create(ctx, h.optimizer, &o, &d), AMPX_ERR_INVALID_ARGUMENT,
                   "interval");
  CHECK(d == nullptr);
  o.interval = 1;
  o.history = 0;
  CHECK_FAILS_WITH(ampx_doctor_create(ctx, h.optimizer, &o, &d), AMPX_ERR_INVALID_ARGUMENT,
                   "history");
  o.history = 16;
  CHECK_FAILS_WITH(ampx_doctor_create(other, h.optimizer, &o, &d), AMPX_ERR_DEVICE,
                   "different context");
  CHECK_FAILS_WITH(ampx_doctor_create(ctx, nullptr, &o, &d), AMPX_ERR_INVALID_ARGUMENT,
                   "optimizer");
  REQUIRE(ampx_doctor_create(ctx, h.optimizer, &o, &h.doctor) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_doctor_create(ctx, h.optimizer, &o, &d), AMPX_ERR_INVALID_ARGUMENT,
                   "already has a precision doctor");
  CHECK_FAILS_WITH(ampx_doctor_set_interval(h.doctor, -5), AMPX_ERR_INVALID_ARGUMENT, "interval");

  REQUIRE(ampx_optimizer_step(h.optimizer) == AMPX_OK);
  CHECK_FAILS_WITH(ampx_doctor_write_report(h.doctor, "/nonexistent-dir/report.html"), AMPX_ERR_IO,
                   "/nonexistent-dir/report.html");
  ampx_doctor_param_stats s{};
  s.struct_size = sizeof s;
  CHECK_FAILS_WITH(ampx_doctor_get_param_stats(h.doctor, 1, &s), AMPX_ERR_INVALID_ARGUMENT,
                   "index");
  s.struct_size = 8;
  CHECK_FAILS_WITH(ampx_doctor_get_param_stats(h.doctor, 0, &s), AMPX_ERR_INVALID_ARGUMENT,
                   "struct_size");
  int32_t count = 0;
  CHECK_FAILS_WITH(ampx_doctor_get_history(h.doctor, nullptr, 3, &count), AMPX_ERR_INVALID_ARGUMENT,
                   "samples");
  CHECK(ampx_doctor_finding_code_name(99) == nullptr);
  CHECK(std::string(ampx_doctor_cause_name(AMPX_DOCTOR_CAUSE_LEARNING_RATE)) == "learning_rate");

  // Training is unaffected: the step after these took effect as without
  // a doctor (1 - 0.5 * 1 twice = 0).
  REQUIRE(ampx_optimizer_step(h.optimizer) == AMPX_OK);
  for (uint16_t v : ampx_test::download<uint16_t>(param)) CHECK(v == 0);
  ampx_doctor_overview overview = AMPX_DOCTOR_OVERVIEW_INIT;
  REQUIRE(ampx_doctor_examine(h.doctor, &overview) == AMPX_OK);
  CHECK(overview.steps == 2);
  ampx_doctor_release(h.doctor);
  h.doctor = nullptr;
  // Released, the optimizer takes a doctor again.
  REQUIRE(ampx_doctor_create(ctx, h.optimizer, &o, &h.doctor) == AMPX_OK);
}
