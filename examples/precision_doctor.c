/*
 * precision_doctor.c -- the precision doctor on gradients too small for fp16
 * (the seed paper's case for loss scaling).
 *
 * A deep narrow network -- 50 tanh layers 16 wide, 8 inputs, 4 outputs --
 * regresses y = 0.5 sin(a_k . x) in PURE fp16: F16 parameters, activations
 * and gradients (Adam keeps fp32 masters of F16 parameters by itself). Its
 * gradients are tiny: the loss is the mean squared error over 256 x 4
 * values times 2^-14, a stand-in for what makes real models' gradients that
 * small (a mean over millions of values -- tokens x vocabulary, pixels --,
 * small loss weights). The output's gradient, 2 (y - t) 2^-14 / 1024, is
 * mostly at or below 2^-25, which fp16 rounds to zero, and a gradient the
 * backward pass rounds to zero stays zero in every layer below. What reaches
 * the weights is built from the few samples whose output gradient survived
 * as 2^-24 (fp16's smallest subnormal): about half the weight gradients are
 * exactly zero, the rest a few multiples of 2^-24.
 *
 * It trains twice from the same weights, each time with a doctor attached
 * to the optimizer (ampx_doctor_create, statistics every 10th step):
 *   no loss scaling   backward seeded with 1, ampx_optimizer_step;
 *   dynamic scaling   ampx_backward(loss, scaler), ampx_scaler_step/update:
 *                     the backward runs on gradients 2^16 and more times
 *                     larger. growth_interval is 25 instead of torch's 2000,
 *                     since the run has only 250 steps: with 2000 the scale
 *                     would stay at 2^16, where up to 15% of these gradients
 *                     still underflow (the doctor then reports scale_too_low:
 *                     "allow it to grow").
 * After each run the program reads the doctor's latest sample: per
 * parameter, the fraction of its fp16 gradient that is zero or subnormal as
 * the backward produced it (fp16_zero_scaled + fp16_subnormal_scaled),
 * averaged over all elements; then the doctor's one-line summary and its
 * findings. The unscaled run's report (ampx_doctor_write_report: one HTML
 * file with the findings and every parameter's gradient histogram over
 * fp16's range) goes to --report PATH.
 *
 * Expect (250 steps, under 3 s on a 2-core CPU; --quick: 150 steps, 1.4 s):
 *   no loss scaling: 100% of the gradients zero or subnormal; the finding
 *     scale_too_low (no_loss_scaling); the loss stays near where it started
 *     (0.122 -> 0.114). Adam divides each gradient by its own size, so
 *     smallness alone would not hurt; zeros and a few samples' worth of
 *     2^-24s do;
 *   dynamic scaling: 0% zero or subnormal (the scale climbs to 2^25), no
 *     findings, and the loss falls 20x (-> 0.006).
 *
 * Run:   ampx_example_precision_doctor [--quick] [--steps N] [--report PATH]
 *        (PATH defaults to precision_doctor.html)
 * Exits 1 unless the unscaled run loses more than 50% of its gradients and
 * the doctor says so (scale_too_low, no_loss_scaling), the scaled run loses
 * less than 10%, and the scaled run ends below half the unscaled run's loss.
 */
#ifndef AMPX_EXPERIMENTAL
#define AMPX_EXPERIMENTAL /* the doctor, autograd and ops are experimental */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampx/ampx.h"

#define CHECK(call)                                                                   \
  do {                                                                                \
    ampx_status check_status_ = (call);                                               \
    if (check_status_ != AMPX_OK) {                                                   \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,            \
              ampx_last_error());                                                     \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

enum { kDepth = 50, kWidth = 16, kIn = 8, kOut = 4, kBatch = 256 };
enum { kLayers = kDepth + 1, kParams = 2 * kLayers }; /* 50 tanh layers + the output layer */
static const double kLossWeight = 1.0 / 16384.0;      /* 2^-14 */

static unsigned long long rng;
static double uniform(void) { /* [-1, 1) */
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return 2.0 * (double)(rng >> 11) / 9007199254740992.0 - 1.0;
}

/* An F16 tensor holding `values` rounded to fp16. */
static ampx_tensor f16_tensor(ampx_context ctx, int32_t ndim, const int64_t *shape,
                              const float *values, int64_t n) {
  ampx_tensor f32 = NULL, f16 = NULL;
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, values, (size_t)n * sizeof(float), &f32));
  CHECK(ampx_tensor_cast(f32, AMPX_F16, &f16));
  ampx_tensor_release(f32);
  return f16;
}

typedef struct run_result {
  double lost;       /* element-weighted fraction zero or subnormal in fp16 */
  double first_loss; /* the mean squared error (unweighted) at step 1 ... */
  double final_loss; /* ... and at the last step */
  int no_scaling_finding;
} run_result;

/* Trains the network from the same start; with `scaled`, under a dynamic
 * loss scaler. Writes the doctor's report to `report` unless NULL. */
static run_result train(const char *label, int scaled, int steps, const char *report) {
  static float values[kWidth * kWidth], xs[kBatch * kIn], ys[kBatch * kOut];
  ampx_context ctx = NULL;
  ampx_tensor params[kParams], x = NULL, y = NULL;
  run_result result = {0.0, 0.0, 0.0, 0};
  int l, i, j, k, step;
  CHECK(ampx_context_create(NULL, &ctx));

  /* Weights uniform in +-sqrt(3 / fan_in) (variance 1 / fan_in, as LeCun's
   * init), biases zero. */
  rng = 2;
  for (l = 0; l < kLayers; ++l) {
    const int fan_in = l == 0 ? kIn : kWidth, fan_out = l == kDepth ? kOut : kWidth;
    const int64_t shape[2] = {fan_out, fan_in};
    char name[32];
    for (i = 0; i < fan_out * fan_in; ++i) values[i] = (float)(sqrt(3.0 / fan_in) * uniform());
    params[2 * l] = f16_tensor(ctx, 2, shape, values, fan_out * fan_in);
    CHECK(ampx_tensor_zeros(ctx, AMPX_F16, 1, shape, &params[2 * l + 1]));
    snprintf(name, sizeof name, "layer%02d.weight", l);
    CHECK(ampx_tensor_set_name(params[2 * l], name)); /* the report lists them by name */
    snprintf(name, sizeof name, "layer%02d.bias", l);
    CHECK(ampx_tensor_set_name(params[2 * l + 1], name));
  }
  for (i = 0; i < kParams; ++i) CHECK(ampx_tensor_set_requires_grad(params[i], 1));

  /* The data: x uniform in [-1, 1]^8, y_k = 0.5 sin(a_k . x). */
  for (i = 0; i < kBatch; ++i) {
    for (j = 0; j < kIn; ++j) xs[i * kIn + j] = (float)uniform();
    for (k = 0; k < kOut; ++k) {
      double s = 0.0;
      for (j = 0; j < kIn; ++j) s += xs[i * kIn + j] * sin(1.7 * (k + 1) + 2.3 * j);
      ys[i * kOut + k] = (float)(0.5 * sin(s));
    }
  }
  const int64_t x_shape[2] = {kBatch, kIn}, y_shape[2] = {kBatch, kOut};
  x = f16_tensor(ctx, 2, x_shape, xs, kBatch * kIn);
  y = f16_tensor(ctx, 2, y_shape, ys, kBatch * kOut);

  ampx_optimizer opt = NULL; /* F16 parameters: Adam keeps fp32 masters */
  ampx_adam_options adam = AMPX_ADAM_OPTIONS_INIT;
  CHECK(ampx_optimizer_create_adam(ctx, params, kParams, &adam, &opt));
  ampx_scaler scaler = NULL;
  if (scaled) {
    ampx_scaler_options options = AMPX_SCALER_OPTIONS_INIT; /* starts at 65536 */
    options.growth_interval = 25;
    CHECK(ampx_scaler_create(ctx, &options, &scaler));
  }
  ampx_doctor doctor = NULL;
  ampx_doctor_options doctor_options = AMPX_DOCTOR_OPTIONS_INIT;
  doctor_options.interval = 10; /* statistics at steps 1, 11, 21, ... */
  CHECK(ampx_doctor_create(ctx, opt, &doctor_options, &doctor));

  for (step = 1; step <= steps; ++step) {
    ampx_tensor h = x, mse = NULL, loss = NULL;
    CHECK(ampx_scope_push(ctx));
    CHECK(ampx_optimizer_zero_grad(opt));
    for (l = 0; l < kLayers; ++l) {
      CHECK(ampx_linear(h, params[2 * l], params[2 * l + 1], AMPX_ACTIVATION_NONE, &h));
      if (l < kDepth) CHECK(ampx_tanh(h, &h));
    }
    CHECK(ampx_mse_loss(h, y, AMPX_REDUCTION_MEAN, &mse));
    CHECK(ampx_affine(mse, kLossWeight, 0.0, &loss));
    CHECK(ampx_backward(loss, scaler)); /* seeded with the scale, or with 1 */
    if (scaler) {
      CHECK(ampx_scaler_step(scaler, opt));
      CHECK(ampx_scaler_update(scaler));
    } else {
      CHECK(ampx_optimizer_step(opt));
    }
    if (step == 1 || step == steps) { /* a sync: only twice */
      float value = 0.0f;
      CHECK(ampx_tensor_to_host(mse, &value, sizeof value));
      *(step == 1 ? &result.first_loss : &result.final_loss) = value;
    }
    CHECK(ampx_scope_pop(ctx));
  }

  /* The latest sample: what the backward pass produced, per parameter. */
  ampx_doctor_overview overview = AMPX_DOCTOR_OVERVIEW_INIT;
  double lost = 0.0, elements = 0.0;
  CHECK(ampx_doctor_examine(doctor, &overview));
  for (i = 0; i < overview.param_count; ++i) {
    ampx_doctor_param_stats stats;
    memset(&stats, 0, sizeof stats);
    stats.struct_size = sizeof stats;
    CHECK(ampx_doctor_get_param_stats(doctor, i, &stats));
    lost += (stats.fp16_zero_scaled + stats.fp16_subnormal_scaled) * (double)stats.elements;
    elements += (double)stats.elements;
  }
  result.lost = elements > 0.0 ? lost / elements : 0.0;
  printf("%s: %.1f%% of gradients zero or subnormal in fp16, final loss %.4f\n", label,
         100.0 * result.lost, result.final_loss);

  const char *summary = NULL;
  CHECK(ampx_doctor_summary(doctor, &summary));
  printf("  %s\n", summary);
  for (i = 0; i < overview.finding_count; ++i) {
    ampx_doctor_finding finding;
    memset(&finding, 0, sizeof finding);
    finding.struct_size = sizeof finding;
    CHECK(ampx_doctor_get_finding(doctor, i, &finding));
    const char *cause = ampx_doctor_cause_name(finding.cause);
    printf("  finding %s%s%s%s: %s\n", ampx_doctor_finding_code_name(finding.code),
           *cause ? " (" : "", cause, *cause ? ")" : "", finding.message);
    result.no_scaling_finding |= finding.code == AMPX_DOCTOR_SCALE_TOO_LOW &&
                                 finding.cause == AMPX_DOCTOR_CAUSE_NO_LOSS_SCALING;
  }
  if (report) {
    CHECK(ampx_doctor_write_report(doctor, report));
    printf("  report written to %s\n", report);
  }

  ampx_doctor_release(doctor);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  for (i = 0; i < kParams; ++i) ampx_tensor_release(params[i]);
  ampx_tensor_release(x);
  ampx_tensor_release(y);
  ampx_context_release(ctx);
  return result;
}

int main(int argc, char **argv) {
  int steps = 250, i;
  const char *report = "precision_doctor.html";
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) steps = 150;
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--report") == 0 && i + 1 < argc) report = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--quick] [--steps N] [--report PATH]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 1) steps = 1;

  printf("%d tanh layers, %d wide, pure fp16, %d steps of Adam\n", kDepth, kWidth, steps);
  const run_result plain = train("no loss scaling", 0, steps, report);
  const run_result scaled = train("dynamic scaling", 1, steps, NULL);
  printf("(both start at loss %.4f; the unscaled run %s the no_loss_scaling finding)\n",
         plain.first_loss, plain.no_scaling_finding ? "got" : "did NOT get");

  const int underflows = plain.lost > 0.5, scaling_fixes = scaled.lost < 0.10;
  const int trains = scaled.final_loss < 0.5 * plain.final_loss;
  if (!underflows)
    fprintf(stderr, "FAILED: without loss scaling only %.1f%% of the gradients underflowed "
            "(expected more than 50%%)\n", 100.0 * plain.lost);
  if (!scaling_fixes)
    fprintf(stderr, "FAILED: with dynamic scaling %.1f%% of the gradients still underflowed "
            "(expected less than 10%%)\n", 100.0 * scaled.lost);
  if (!trains)
    fprintf(stderr, "FAILED: the scaled run's loss %.4f is not below half the unscaled run's "
            "%.4f\n", scaled.final_loss, plain.final_loss);
  if (!plain.no_scaling_finding)
    fprintf(stderr, "FAILED: the doctor did not find the unscaled run's underflow\n");
  if (!(underflows && scaling_fixes && trains && plain.no_scaling_finding)) return 1;
  printf("underflow: no scaling %.1f%% > 50%% (diagnosed), dynamic scaling %.1f%% < 10%%, "
         "final loss %.4f < %.4f / 2: OK\n",
         100.0 * plain.lost, 100.0 * scaled.lost, scaled.final_loss, plain.final_loss);
  return 0;
}
