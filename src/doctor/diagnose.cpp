// diagnose.cpp -- the precision doctor's detectors and the evidence for
// their causes.
//
// The history is read as the scaler lived it. Overflows before the first
// run of kSettleRun clean steps are calibration (the initial scale is a
// guess) and never a finding by themselves. After that, dynamic scaling
// probes: it grows the scale until the largest gradients overflow, backs
// off, and grows again -- overflows of a few parameters at the top of the
// scale's range are how it works. An overflow is unexplained when probing
// cannot account for it: after kSettleRun clean steps, not just after a
// growth, and either every gradient non-finite at once (a spike), or first
// in a parameter whose gradients dwarf the rest, or at a scale kDeepDrop
// times below the best that had worked. The detectors:
//   scale_oscillation  two or more unexplained overflows;
//   scale_at_minimum   the scale ends sitting at min_scale, or the last
//                      kCollapseRun steps all overflowed (every step skipped);
//   gradients_vanished the gradients were alive, then (nearly) all zero;
//   scale_too_low      gradients lost to fp16's range while the scale has
//                      room: without loss scaling, fp16 gradients all
//                      zero, or mostly zero or subnormal; with it, 5% of the gradients lost
//                      while one parameter holds the scale down, or the
//                      scale 2^8 below the largest gradient's limit.
// The causes, from the evidence:
//   learning_rate    the gradient norm of the sampled clean steps rose
//                    (the last quarter's median >= kNormRise x the first
//                    quarter's); or a collapse in which every gradient
//                    overflowed whatever the scale (the weights blew up);
//                    or gradients that died;
//   unstable_op      the overflows were localized (some gradients stayed
//                    finite) and most were first, in backward order, in one
//                    parameter; or one parameter's largest gradient is
//                    >= 2^kSpreadBits times the typical parameter's;
//   outlier_batches  the unexplained overflows were isolated single steps
//                    between clean ones;
//   no_loss_scaling  fp16 gradients without a scaler.
#include "doctor/diagnose.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace ampx::impl {
namespace doctor {
namespace {

constexpr int kCollapseRun = 16;
// Calibration ends with the first run of this many clean steps.
constexpr int kSettleRun = 10;
constexpr double kNormRise = 4.0;
constexpr int kSpreadBits = 12;
constexpr int kMinUnexplained = 2;
constexpr double kDeepDrop = 16.0;
// An overflow this few steps after a growth, or after fewer than kSettleRun
// clean steps, is the scaler probing.
constexpr int kProbeWindow = 3;
constexpr int kOnsetEvents = 8;
// Without loss scaling: a finding when this much of the fp16 gradients is
// zero or subnormal, with some of it visibly subnormal (so that underflow,
// not structural zeros such as constant inputs, explains it).
constexpr double kUnscaledLost = 0.25;
constexpr double kVisibleSubnormal = 0.01;
constexpr int kNoScalingHeadroom = 4;
// With loss scaling: non-zero gradients lost at the scale, and the scale
// this many doublings below the largest gradient's limit.
constexpr double kScaledLost = 0.05;
constexpr int kScaledHeadroom = 8;
// Gradients vanished: from under kAliveLost lost (a tenth alive) to
// kDeadLost or more.
constexpr double kAliveLost = 0.9;
constexpr double kDeadLost = 0.99;

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100.0 * fraction);
  return text;
}

std::string steps_list(const std::vector<int64_t>& steps) {
  std::string out;
  const size_t shown = std::min<size_t>(steps.size(), 6);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + std::to_string(steps[i]);
  if (steps.size() > shown) out += cat(" and ", steps.size() - shown, " more");
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string param_label(const Report& report, int32_t index) {
  for (const ParamReport& p : report.params)
    if (p.index == index && !p.name.empty()) return "'" + p.name + "'";
  return cat("parameter ", index);
}

// The parameter holding the scale down: the largest gradient, when it is at
// least 2^kSpreadBits times the typical (element-weighted median) one.
int32_t dominant_param(const Report& report) {
  std::vector<std::pair<double, int64_t>> amaxes;
  const ParamReport* largest = nullptr;
  for (const ParamReport& p : report.params) {
    if (p.elements == 0 || !(p.amax_scaled > 0.0)) continue;
    amaxes.emplace_back(p.amax_scaled, p.elements);
    if (!largest || p.amax_scaled > largest->amax_scaled) largest = &p;
  }
  if (!largest || amaxes.size() < 2) return -1;
  std::sort(amaxes.begin(), amaxes.end());
  int64_t total = 0;
  for (const auto& a : amaxes) total += a.second;
  int64_t seen = 0;
  double typical = amaxes.back().first;
  for (const auto& a : amaxes) {
    seen += a.second;
    if (2 * seen >= total) {
      typical = a.first;
      break;
    }
  }
  return largest->amax_scaled >= std::ldexp(typical, kSpreadBits) ? largest->index : -1;
}

struct Evidence {
  size_t settled = 0;               // the first step of the first kSettleRun clean ones
  std::vector<size_t> calibration;  // overflow entries before it
  // Overflow entries after it that probing does not explain: every gradient
  // non-finite (a spike), first in the dominant parameter, or at a scale
  // kDeepDrop times below the best that had worked.
  std::vector<size_t> unexplained;
  std::vector<size_t> overflows;  // every overflow entry after settling
  bool norm_rising = false;
  double norm_rise = 0.0;
  size_t collapse_from = 0;  // the trailing run of overflows starts here
  size_t collapse_run = 0;
  int32_t params = 0;  // parameters with statistics (0: not known yet)
};

Evidence gather(const Report& report) {
  const std::vector<SampleReport>& h = report.history;
  const int32_t dominant = dominant_param(report);
  Evidence e;
  for (const ParamReport& p : report.params) e.params += p.elements > 0;
  e.settled = h.size();
  size_t clean = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    clean = h[i].found_inf ? 0 : clean + 1;
    if (clean == static_cast<size_t>(kSettleRun)) {
      e.settled = i + 1 - clean;
      break;
    }
  }
  double proven = 0.0;  // the largest scale a clean step had after settling
  std::vector<double> norms;
  size_t streak = 0;               // clean steps right before entry i
  size_t since_growth = h.size();  // entries since the scale last grew
  for (size_t i = 0; i < h.size(); ++i) {
    const SampleReport& s = h[i];
    if (i > 0 && s.scale > h[i - 1].scale) since_growth = 0;
    const size_t clean_before = streak;
    streak = s.found_inf ? 0 : streak + 1;
    const size_t after_growth = since_growth++;
    if (i < e.settled) {
      if (s.found_inf) e.calibration.push_back(i);
      continue;
    }
    if (s.found_inf) {
      e.overflows.push_back(i);
      const bool spike = e.params > 0 && s.nonfinite_params >= e.params;
      const bool in_dominant = dominant >= 0 && s.first_nonfinite == dominant;
      const bool deep = s.scale * kDeepDrop <= proven;
      const bool probe = after_growth < static_cast<size_t>(kProbeWindow) ||
                         clean_before < static_cast<size_t>(kSettleRun);
      if (!probe && (spike || in_dominant || deep)) e.unexplained.push_back(i);
    } else {
      proven = std::max(proven, s.scale);
      if (s.sampled && std::isfinite(s.grad_norm) && s.grad_norm > 0.0)
        norms.push_back(s.grad_norm);
    }
  }
  if (norms.size() >= 4) {
    const size_t quarter = norms.size() / 4;
    const double early = median({norms.begin(), norms.begin() + quarter});
    const double late = median({norms.end() - quarter, norms.end()});
    e.norm_rise = early > 0.0 ? late / early : 0.0;
    e.norm_rising = e.norm_rise >= kNormRise;
  }
  e.collapse_from = h.size();
  while (e.collapse_from > 0 && h[e.collapse_from - 1].found_inf) --e.collapse_from;
  e.collapse_run = h.size() - e.collapse_from;
  return e;
}

// An overflow in some parameters only, others' gradients finite: born in
// the network, not in its input (an outlier batch or blown-up weights make
// every gradient non-finite).
bool localized(const Evidence& e, const SampleReport& s) {
  return e.params > 0 && s.nonfinite_params < e.params;
}

// The parameter most of the first kOnsetEvents localized overflows of
// `events` (in step order) were first in, when localized overflows are at
// least two and half the events; else -1. The onset shows where trouble
// began: once weights blow up, overflows are everywhere.
int32_t localized_param(const Report& report, const Evidence& e,
                        const std::vector<size_t>& events) {
  std::vector<int32_t> firsts;
  size_t count = 0;
  for (size_t i : events) {
    if (!localized(e, report.history[i])) continue;
    ++count;
    if (firsts.size() < static_cast<size_t>(kOnsetEvents))
      firsts.push_back(report.history[i].first_nonfinite);
  }
  if (count < 2 || 2 * count < events.size()) return -1;
  std::sort(firsts.begin(), firsts.end());
  int32_t best = -1;
  size_t best_count = 0;
  for (size_t i = 0; i < firsts.size();) {
    size_t j = i;
    while (j < firsts.size() && firsts[j] == firsts[i]) ++j;
    if (j - i > best_count) {
      best = firsts[i];
      best_count = j - i;
    }
    i = j;
  }
  return best >= 0 && 4 * best_count >= 3 * firsts.size() ? best : -1;
}

std::string unstable_op_sentence(const Report& report, int32_t param) {
  return cat("The overflows started in ", param_label(report, param),
             " while other gradients stayed finite: an unstable op there (an exp, a division, a "
             "large residual) likely produces gradients far larger than the rest.");
}

std::string learning_rate_sentence(const Evidence& e) {
  if (!e.norm_rising)
    return "Every gradient became non-finite whatever the scale: the forward pass itself "
           "overflows, so the weights blew up -- the learning rate is likely too high.";
  char rise[32];
  std::snprintf(rise, sizeof rise, "%.3g", e.norm_rise);
  return cat("The gradient norm rose ", rise,
             "x over the clean steps before the overflows: the learning rate is likely too high "
             "(or warm-up too short).");
}

// The cause of repeated overflows `events` (after settling), with a
// sentence of evidence; *param gets the parameter an unstable op is in.
FindingCause oscillation_cause(const Report& report, const Evidence& e,
                               const std::vector<size_t>& events, int32_t* param,
                               std::string& why) {
  const std::vector<SampleReport>& h = report.history;
  *param = -1;
  if (e.norm_rising) {
    why = learning_rate_sentence(e);
    return FindingCause::LearningRate;
  }
  std::vector<size_t> all = e.calibration;
  all.insert(all.end(), events.begin(), events.end());
  if (const int32_t p = localized_param(report, e, all); p >= 0) {
    *param = p;
    why = unstable_op_sentence(report, p);
    return FindingCause::UnstableOp;
  }
  size_t isolated = 0;
  std::vector<int64_t> steps;
  for (size_t i : events) {
    const bool before_clean = i == 0 || !h[i - 1].found_inf;
    const bool after_clean = i + 1 >= h.size() || !h[i + 1].found_inf;
    if (before_clean && after_clean) ++isolated;
    steps.push_back(h[i].step);
  }
  if (!events.empty() && 4 * isolated >= 3 * events.size()) {
    why = cat("The overflows were isolated single steps (", steps_list(steps),
              ") between clean ones, with every gradient non-finite and no rise in the gradient "
              "norm: likely outlier batches (check the data of those steps).");
    return FindingCause::OutlierBatches;
  }
  why = "";
  return FindingCause::None;
}

// The cause of a scale that fell to its floor (the trailing overflows from
// e.collapse_from).
FindingCause collapse_cause(const Report& report, const Evidence& e, int32_t* param,
                            std::string& why) {
  const std::vector<SampleReport>& h = report.history;
  *param = -1;
  std::vector<size_t> before;
  for (size_t i = 0; i < e.collapse_from; ++i)
    if (h[i].found_inf) before.push_back(i);
  std::vector<size_t> run;
  for (size_t i = e.collapse_from; i < h.size(); ++i) run.push_back(i);
  // The overflows that led here, or the first of the run, show where it began.
  const std::vector<size_t>& start = before.size() >= 2 ? before : run;
  if (const int32_t p = localized_param(report, e, start); p >= 0) {
    *param = p;
    why = unstable_op_sentence(report, p);
    return FindingCause::UnstableOp;
  }
  size_t everywhere = 0;
  for (size_t i : run) everywhere += !localized(e, h[i]);
  if (e.norm_rising || (e.params > 0 && 5 * everywhere >= 4 * run.size())) {
    why = learning_rate_sentence(e);
    return FindingCause::LearningRate;
  }
  why = "";
  return FindingCause::None;
}

void scale_findings(const Report& report, const ScalerFacts& scaler, const Evidence& e,
                    std::vector<Finding>& out) {
  const std::vector<SampleReport>& h = report.history;
  if (!scaler.scaling || h.empty()) return;
  const double floor = std::max(scaler.min_scale, static_cast<double>(FLT_MIN));
  const bool at_floor = h.back().scale <= floor * (1.0 + 1e-6) && e.overflows.size() > 0;
  const bool collapsed = e.collapse_run >= static_cast<size_t>(kCollapseRun) && e.collapse_from > 0;
  if (at_floor || collapsed) {
    std::string why;
    int32_t param = -1;
    const FindingCause cause = collapse_cause(report, e, &param, why);
    const int64_t first = collapsed ? h[e.collapse_from].step : h.front().step;
    std::string what = at_floor ? cat("The loss scale sits at its minimum (", h.back().scale,
                                      ") and still overflows")
                                : cat("The last ", e.collapse_run,
                                      " steps all overflowed and were skipped (the "
                                      "scale fell to ",
                                      h.back().scale, "): training has stopped");
    out.push_back(
        {FindingCode::ScaleAtMinimum, cause, param, first, h.back().step, what + ". " + why});
  }
  // The overflows of a collapse belong to its finding.
  std::vector<size_t> events;
  for (size_t i : e.unexplained)
    if (!(at_floor || collapsed) || i < e.collapse_from) events.push_back(i);
  if (events.size() >= static_cast<size_t>(kMinUnexplained)) {
    std::string why;
    int32_t param = -1;
    const FindingCause cause = oscillation_cause(report, e, events, &param, why);
    std::vector<int64_t> steps;
    for (size_t i : events) steps.push_back(h[i].step);
    out.push_back(
        {FindingCode::ScaleOscillation, cause, param, h[events.front()].step, h[events.back()].step,
         cat("The loss scale keeps backing off at scales that had worked: ", events.size(),
             " overflows at steps ", steps_list(steps), ". ", why)});
  }
}

// Gradients that were alive and then all but vanished: the clean sampled
// steps before the last quarter had some with under kAliveLost of them lost
// at the scale, and every one of the last quarter has kDeadLost or more
// (units that stopped passing gradient: dead ReLUs after an update too large).
void vanish_findings(const Report& report, std::vector<Finding>& out) {
  std::vector<const SampleReport*> samples;
  for (const SampleReport& s : report.history)
    if (s.sampled && !s.found_inf) samples.push_back(&s);
  if (samples.size() < 8) return;
  const size_t last_quarter = samples.size() - samples.size() / 4;
  double alive = 1.0;
  for (size_t i = 0; i < last_quarter; ++i) alive = std::min(alive, samples[i]->fp16_lost_scaled);
  for (size_t i = last_quarter; i < samples.size(); ++i)
    if (samples[i]->fp16_lost_scaled < kDeadLost) return;
  if (alive >= kAliveLost) return;
  size_t died = 0;
  while (died < samples.size() && samples[died]->fp16_lost_scaled < kDeadLost) ++died;
  const int64_t step = samples[std::min(died, samples.size() - 1)]->step;
  out.push_back(
      {FindingCode::GradientsVanished, FindingCause::LearningRate, -1, step, samples.back()->step,
       cat("From step ", step, " on, ", percent(samples.back()->fp16_lost_scaled),
           " of the gradients are zero (or below fp16's range) where ", percent(1.0 - alive),
           " had been alive: the network stopped passing "
           "gradient (dead ReLUs, saturated units), typically after updates too large "
           "-- the learning rate is likely too high.")});
}

void range_findings(const Report& report, const ScalerFacts& scaler, const Evidence& e,
                    std::vector<Finding>& out) {
  if (report.params.empty()) return;
  int64_t elements = 0, fp16_elements = 0;
  double lost = 0.0, subnormal = 0.0, nonzero_lost = 0.0;
  int32_t headroom = INT32_MAX;
  bool all_zero = true;
  for (const ParamReport& p : report.params) {
    if (p.elements == 0) continue;
    const double n = static_cast<double>(p.elements);
    elements += p.elements;
    nonzero_lost += p.nonzero_lost_scaled * n;
    if (p.has_headroom) headroom = std::min(headroom, p.headroom);
    if (p.grad_dtype != "f16") continue;
    fp16_elements += p.elements;
    lost += (p.fp16_zero_scaled + p.fp16_subnormal_scaled) * n;
    subnormal += p.fp16_subnormal_scaled * n;
    all_zero = all_zero && p.fp16_zero_scaled == 1.0;
  }
  if (elements == 0) return;
  const int64_t step = report.sample_step;
  if (!scaler.scaling && fp16_elements > 0) {
    const double n = static_cast<double>(fp16_elements);
    // Every fp16 gradient exactly zero: nothing is left to show the
    // underflow, but no model's output layer has structural zeros only.
    if (all_zero) {
      out.push_back(
          {FindingCode::ScaleTooLow, FindingCause::NoLossScaling, -1, step, step,
           "Every fp16 gradient is exactly zero without loss scaling: they underflowed (use a "
           "dynamic loss scaler, or bf16), unless the loss does not depend on the parameters."});
    } else if (lost / n >= kUnscaledLost && subnormal / n >= kVisibleSubnormal &&
               headroom >= kNoScalingHeadroom) {
      out.push_back(
          {FindingCode::ScaleTooLow, FindingCause::NoLossScaling, -1, step, step,
           cat(percent(lost / n), " of the fp16 gradients are zero or subnormal (",
               percent(subnormal / n),
               " subnormal) without loss scaling, and the "
               "largest leaves room for a scale of 2^",
               headroom == INT32_MAX ? 0 : headroom, ": use a dynamic loss scaler (or bf16).")});
    }
    return;
  }
  if (!scaler.scaling) return;
  const int32_t dominant = dominant_param(report);
  const double lost_fraction = nonzero_lost / static_cast<double>(elements);
  if (lost_fraction < kScaledLost) return;
  if (dominant >= 0) {
    out.push_back({FindingCode::ScaleTooLow, FindingCause::UnstableOp, dominant, step, step,
                   cat(percent(lost_fraction),
                       " of the gradients are lost to fp16 underflow at "
                       "the scale, which ",
                       param_label(report, dominant),
                       " holds down: its largest gradient is over 2^", kSpreadBits,
                       " times the typical parameter's. An unstable op there is the likely "
                       "cause.")});
  } else if (headroom != INT32_MAX && headroom >= kScaledHeadroom) {
    out.push_back({FindingCode::ScaleTooLow, FindingCause::None, -1, step, step,
                   cat(percent(lost_fraction),
                       " of the gradients are lost to fp16 underflow "
                       "while the scale could grow 2^",
                       headroom,
                       " before the largest "
                       "overflows: allow it to grow (growth_interval, max_scale).")});
  }
}

}  // namespace

const char* finding_code_name(FindingCode code) {
  switch (code) {
    case FindingCode::ScaleOscillation:
      return "scale_oscillation";
    case FindingCode::ScaleAtMinimum:
      return "scale_at_minimum";
    case FindingCode::ScaleTooLow:
      return "scale_too_low";
    case FindingCode::GradientsVanished:
      return "gradients_vanished";
  }
  return "unknown";
}

const char* finding_cause_name(FindingCause cause) {
  switch (cause) {
    case FindingCause::None:
      return "";
    case FindingCause::LearningRate:
      return "learning_rate";
    case FindingCause::UnstableOp:
      return "unstable_op";
    case FindingCause::OutlierBatches:
      return "outlier_batches";
    case FindingCause::NoLossScaling:
      return "no_loss_scaling";
  }
  return "unknown";
}

std::vector<Finding> diagnose(const Report& report, const ScalerFacts& scaler) {
  const Evidence e = gather(report);
  std::vector<Finding> out;
  scale_findings(report, scaler, e, out);
  vanish_findings(report, out);
  range_findings(report, scaler, e, out);
  return out;
}

std::string summary_line(const Report& report, int64_t missed) {
  std::string line = cat("ampx doctor: ", report.steps, " steps");
  if (report.interval == 0) line += " (off)";
  int64_t elements = 0;
  double lost_scaled = 0.0, lost_unscaled = 0.0;
  int32_t headroom = INT32_MAX;
  for (const ParamReport& p : report.params) {
    const double n = static_cast<double>(p.elements);
    elements += p.elements;
    lost_scaled += (p.fp16_zero_scaled + p.fp16_subnormal_scaled) * n;
    lost_unscaled += (p.fp16_zero_unscaled + p.fp16_subnormal_unscaled) * n;
    if (p.has_headroom) headroom = std::min(headroom, p.headroom);
  }
  if (elements > 0) {
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", report.sample_scale);
    line += cat("; step ", report.sample_step, ": ", percent(lost_scaled / elements),
                " of gradients zero or subnormal in fp16 at scale ", scale, " (",
                percent(lost_unscaled / elements), " unscaled)");
    if (headroom != INT32_MAX) line += cat(", headroom 2^", headroom);
  }
  int64_t overflows = 0;
  for (const SampleReport& s : report.history) overflows += s.found_inf;
  line += cat("; ", overflows, " overflows in ", report.history.size(), " recorded steps");
  if (missed > 0) line += cat("; ", missed, " steps unobserved (out of memory)");
  line += "; ";
  if (report.findings.empty()) return line + "no findings";
  line += "findings:";
  for (const FindingReport& f : report.findings)
    line += " " + f.code + (f.cause.empty() ? "" : "(" + f.cause + ")");
  return line;
}

}  // namespace doctor
}  // namespace ampx::impl
