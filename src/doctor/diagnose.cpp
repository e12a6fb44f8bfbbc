// diagnose.cpp -- the precision doctor's detectors and the evidence for
// their causes.
//
// The history is read as the scaler lived it. Overflows before the first
// clean step are calibration (the initial scale is a guess) and never a
// finding. After that, an overflow at a scale no clean step had reached is
// the scaler probing upwards, which is how dynamic scaling works; an
// overflow at a scale that had already worked is unexplained -- something
// changed in the gradients. The detectors:
//   scale_oscillation  two or more unexplained overflows;
//   scale_at_minimum   the scale ends sitting at min_scale, or the last
//                      kCollapseRun steps all overflowed (every step skipped);
//   scale_too_low      gradients lost to fp16's range while the scale has
//                      room: without loss scaling, fp16 gradients mostly
//                      zero or subnormal; with it, the bulk of the
//                      gradients far from the largest one's limit.
// The causes, from the evidence:
//   learning_rate    the gradient norm of the sampled clean steps rose
//                    (the last quarter's median >= kNormRise x the first
//                    quarter's) before the overflows;
//   unstable_op      the overflows were first (in backward order) in the same
//                    parameter, whose largest gradient is >= 2^kSpreadBits
//                    times the typical parameter's;
//   outlier_batches  the unexplained overflows were isolated single steps
//                    between clean ones, with no rise in the norm;
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
constexpr double kNormRise = 4.0;
constexpr int kSpreadBits = 12;
constexpr int kMinUnexplained = 2;
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

struct Evidence {
  size_t settled = 0;               // index of the first clean entry
  std::vector<size_t> unexplained;  // overflow entries at an already-proven scale
  std::vector<size_t> overflows;    // every overflow entry after settling
  bool norm_rising = false;
  double norm_rise = 0.0;
  int32_t same_param = -1;   // the parameter every overflow was first in, if one
  size_t collapse_from = 0;  // the trailing run of overflows starts here
  size_t collapse_run = 0;
};

Evidence gather(const Report& report) {
  const std::vector<SampleReport>& h = report.history;
  Evidence e;
  while (e.settled < h.size() && h[e.settled].found_inf) ++e.settled;
  double proven = 0.0;  // the largest scale a clean step had after settling
  std::vector<double> norms;
  int32_t first_param = -2;
  bool one_param = true;
  size_t overflow_count = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    const SampleReport& s = h[i];
    if (s.found_inf) {
      ++overflow_count;
      if (first_param == -2)
        first_param = s.first_nonfinite;
      else if (s.first_nonfinite != first_param)
        one_param = false;
    }
    if (i < e.settled) continue;
    if (s.found_inf) {
      e.overflows.push_back(i);
      if (s.scale <= proven) e.unexplained.push_back(i);
    } else {
      proven = std::max(proven, s.scale);
      if (s.sampled && std::isfinite(s.grad_norm) && s.grad_norm > 0.0)
        norms.push_back(s.grad_norm);
    }
  }
  if (overflow_count > 0 && one_param && first_param >= 0) e.same_param = first_param;
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

// The cause of overflow trouble, with a sentence of evidence.
FindingCause overflow_cause(const Report& report, const Evidence& e,
                            const std::vector<size_t>& events, std::string& why) {
  const std::vector<SampleReport>& h = report.history;
  if (e.norm_rising) {
    char rise[32];
    std::snprintf(rise, sizeof rise, "%.3g", e.norm_rise);
    why = cat("The gradient norm rose ", rise,
              "x over the clean steps before the overflows: the learning rate is likely too high "
              "(or warm-up too short).");
    return FindingCause::LearningRate;
  }
  const int32_t dominant = dominant_param(report);
  if (e.same_param >= 0 && (dominant < 0 || dominant == e.same_param)) {
    why = cat("Every overflow was first in ", param_label(report, e.same_param),
              ": an unstable op there (an exp, a division, a large residual) likely produces "
              "gradients far larger than the rest.");
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
              ") between clean ones with no rise in the gradient norm: likely outlier batches "
              "(check the data of those steps).");
    return FindingCause::OutlierBatches;
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
    std::vector<size_t> events;
    for (size_t i = e.collapse_from; i < h.size(); ++i) events.push_back(i);
    std::string why;
    const FindingCause cause = overflow_cause(report, e, events, why);
    const int64_t first = collapsed ? h[e.collapse_from].step : h.front().step;
    std::string what = at_floor ? cat("The loss scale sits at its minimum (", h.back().scale,
                                      ") and still overflows")
                                : cat("The last ", e.collapse_run,
                                      " steps all overflowed and were skipped (the "
                                      "scale fell to ",
                                      h.back().scale, "): training has stopped");
    out.push_back({FindingCode::ScaleAtMinimum, cause,
                   cause == FindingCause::UnstableOp ? e.same_param : -1, first, h.back().step,
                   what + ". " + why});
  }
  if (e.unexplained.size() >= static_cast<size_t>(kMinUnexplained)) {
    std::string why;
    const FindingCause cause = overflow_cause(report, e, e.unexplained, why);
    std::vector<int64_t> steps;
    for (size_t i : e.unexplained) steps.push_back(h[i].step);
    out.push_back(
        {FindingCode::ScaleOscillation, cause,
         cause == FindingCause::UnstableOp ? e.same_param : -1, h[e.unexplained.front()].step,
         h[e.unexplained.back()].step,
         cat("The loss scale keeps backing off at scales that had worked: ", e.unexplained.size(),
             " overflows at steps ", steps_list(steps), ". ", why)});
  }
}

void range_findings(const Report& report, const ScalerFacts& scaler, const Evidence& e,
                    std::vector<Finding>& out) {
  if (report.params.empty()) return;
  int64_t elements = 0, fp16_elements = 0;
  double lost = 0.0, subnormal = 0.0, nonzero_lost = 0.0;
  int32_t headroom = INT32_MAX;
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
  }
  if (elements == 0) return;
  const int64_t step = report.sample_step;
  if (!scaler.scaling && fp16_elements > 0) {
    const double n = static_cast<double>(fp16_elements);
    if (lost / n >= kUnscaledLost && subnormal / n >= kVisibleSubnormal &&
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
  if (dominant >= 0 && (e.same_param < 0 || e.same_param == dominant)) {
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
