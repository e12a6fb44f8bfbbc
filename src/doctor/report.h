// report.h -- what the precision doctor's report shows, as plain host data,
// and the HTML page made of it. The doctor (doctor.h) fills a Report from
// what it read back from the device; render_html knows nothing of devices.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "math/grad_stats.h"

namespace ampx::impl {
namespace doctor {

// One parameter's statistics of the latest sample.
struct ParamReport {
  std::string name;  // "" when unnamed: the page then shows "parameter <index>"
  int32_t index = 0;
  std::string param_dtype;  // "f16"
  std::string grad_dtype;
  int64_t elements = 0;
  std::array<int64_t, math::kGradStatsBins> histogram{};  // bins of math/grad_stats.h
  double amax = 0.0;         // max |u| (true gradient), finite elements
  double amax_scaled = 0.0;  // max |x| (as stored, at the scale)
  double grad_norm = 0.0;    // L2 norm of u over finite elements
  // Fractions of `elements` (0..1).
  double fp16_zero_unscaled = 0.0;
  double fp16_subnormal_unscaled = 0.0;
  double fp16_zero_scaled = 0.0;
  double fp16_subnormal_scaled = 0.0;
  double fp16_overflow_scaled = 0.0;
  double nonzero_lost_scaled = 0.0;  // non-zero at the scale, yet zero or subnormal in fp16
  // Doublings of the scale left before the largest gradient exceeds 65504;
  // has_headroom false when every element is zero (unbounded).
  int32_t headroom = 0;
  bool has_headroom = false;
  // Lost updates, fractions of `elements`; negative when not measured
  // (an fp32 parameter, or no step sampled yet).
  double lost_update_fraction = -1.0;
  double lost_without_master_fraction = -1.0;
  double master_changed_fraction = -1.0;  // elements whose master changed
};

// One step of the scale history.
struct SampleReport {
  int64_t step = 0;
  double scale = 1.0;
  bool found_inf = false;
  bool sampled = false;
  double grad_norm = 0.0;        // meaningful when sampled
  int32_t first_nonfinite = -1;  // parameter index, or -1
  int32_t nonfinite_params = 0;
  double fp16_lost_scaled = 0.0;    // fraction of the sampled elements (when sampled)
  double fp16_lost_unscaled = 0.0;  // ... without loss scaling
};

struct FindingReport {
  std::string code;        // "scale_oscillation", as ampx_doctor_finding_code_name
  std::string cause;       // "learning_rate", "" when none
  std::string param_name;  // the parameter the finding names, or ""
  int32_t param = -1;      // its index
  int64_t first_step = 0;
  int64_t last_step = 0;
  std::string message;  // one or two English sentences
};

struct Report {
  std::string title;          // "ampx precision doctor"
  std::string summary;        // the one-line summary (as ampx_doctor_summary)
  int64_t steps = 0;          // steps the doctor has seen
  int32_t interval = 0;       // sampling interval
  int64_t sample_step = 0;    // the step of the latest sample (0: none yet)
  double sample_scale = 1.0;  // the loss scale the latest sample's gradients carried
  std::string scaler;         // "dynamic, growth 2 every 2000 steps", "none"
  std::vector<ParamReport> params;
  std::vector<SampleReport> history;  // oldest first (increasing steps)
  std::vector<FindingReport> findings;
};

// One self-contained HTML5 page: inline CSS and SVG only (no script, no
// external reference of any kind), every string from the report escaped.
// Shows the summary and findings first, then the scale history (scale on a
// log2 axis over the steps, overflow steps marked, grad norm where
// sampled), then per parameter a histogram over the binades with fp16's
// subnormal range, normal range and overflow marked, and its figures.
std::string render_html(const Report& report);

}  // namespace doctor
}  // namespace ampx::impl
