// diagnose.h -- the precision doctor's findings: what the statistics of the
// latest sample and the scale history say is wrong, each with its likely
// cause and the steps that show it. Plain host code over a doctor::Report.
#pragma once

#include <string>
#include <vector>

#include "doctor/report.h"

namespace ampx::impl {
namespace doctor {

// What the diagnosis needs to know of the scaler.
struct ScalerFacts {
  bool scaling = false;  // a scaler attached and enabled
  double min_scale = 0.0;
  double backoff_factor = 0.5;
  int32_t growth_interval = 2000;
};

// Finding codes and causes, as ampx.h's AMPX_DOCTOR_FINDING_* and
// AMPX_DOCTOR_CAUSE_*.
enum class FindingCode : int32_t {
  ScaleOscillation = 1,
  ScaleAtMinimum = 2,
  ScaleTooLow = 3,
  GradientsVanished = 4
};
enum class FindingCause : int32_t {
  None = 0,
  LearningRate = 1,
  UnstableOp = 2,
  OutlierBatches = 3,
  NoLossScaling = 4
};
const char* finding_code_name(FindingCode code);     // "scale_oscillation"
const char* finding_cause_name(FindingCause cause);  // "learning_rate", "" for None

struct Finding {
  FindingCode code;
  FindingCause cause;
  int32_t param;  // the parameter named, or -1
  int64_t first_step;
  int64_t last_step;
  std::string message;
};

// The findings of `report` (its params and history; its findings are not
// read), most important first.
std::vector<Finding> diagnose(const Report& report, const ScalerFacts& scaler);

// One line for logs: steps, the latest sample's fp16 loss fractions and
// headroom, overflows in the history, and the findings' codes (or "healthy").
// `missed` counts steps the doctor could not observe (out of memory).
std::string summary_line(const Report& report, int64_t missed);

}  // namespace doctor
}  // namespace ampx::impl
