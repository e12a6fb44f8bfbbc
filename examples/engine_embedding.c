/*
 * engine_embedding.c -- the engine path: ampx inside a program that owns its
 * memory and its backward pass.
 *
 * The "engine" here keeps a linear model's weights as a plain malloc'ed
 * array of f16 values (as a renderer or a simulation stores them) and
 * computes the gradient of its loss analytically, by hand, into another
 * malloc'ed f16 array. ampx owns none of that memory: ampx_tensor_wrap makes
 * both arrays tensors without a copy, and ampx supplies only what is hard to
 * get right -- the dynamic loss scale, the inf/NaN check and step skipping,
 * clipping of the true (unscaled) gradients, and an Adam optimizer that
 * keeps fp32 master weights and writes the rounded f16 result back into
 * the engine's own array after each step.
 *
 * The engine multiplies its gradient by the current scale before rounding
 * it to f16, as a backward pass seeded with the scale would: small
 * gradients survive the rounding, and a scale too high for the values
 * overflows -- the first steps here do, and are skipped without touching
 * the engine's weights, while the scale backs off.
 *
 * Run:   ampx_example_engine_embedding [--quick] [--steps N]
 * Exits 1 unless the loss fell a hundredfold, the skipped first step left
 * the buffer untouched, and the engine's buffer (the same address as the
 * tensor's) holds exactly the optimizer's fp32 masters rounded to f16.
 */
#include <math.h>
#include <stdint.h>
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

enum { kFeatures = 32, kParams = kFeatures + 1 /* the bias */, kSamples = 256 };

/* ---- the engine's own f16 <-> float (IEEE binary16) ------------------------ */

static float half_to_float(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0) magnitude = ldexp(mantissa, -24); /* zero and subnormals */
  else if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
  else magnitude = ldexp(mantissa | 0x400, exponent - 25);
  return (float)(h & 0x8000 ? -magnitude : magnitude);
}

/* Round to nearest even (rint in the default rounding mode), as ampx does. */
static uint16_t float_to_half(float f) {
  const uint16_t sign = signbit(f) ? 0x8000 : 0;
  const double a = fabs((double)f);
  int e = 0;
  double q;
  if (isnan(f)) return sign | 0x7e00;
  if (a < ldexp(1.0, -14)) return sign | (uint16_t)rint(a * 16777216.0); /* 2^-24 units */
  q = rint(2048.0 * frexp(a, &e)); /* 11 significant bits: [1024, 2048] */
  if (q == 2048.0) q = 1024.0, ++e;
  if (e + 14 >= 31) return sign | 0x7c00; /* beyond 65504 after rounding: inf */
  return sign | (uint16_t)((e + 14) << 10) | (uint16_t)(q - 1024.0);
}

/* ---- the engine's model: y = w . x + b, loss = mean squared error ---------- */

static float features[kSamples][kFeatures];
static float targets[kSamples];
static unsigned long long rng = 777;

static double uniform(void) { /* [-1, 1) */
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return 2.0 * (double)(rng >> 11) / 9007199254740992.0 - 1.0;
}

static void make_data(void) {
  float truth[kParams];
  int i, j;
  for (j = 0; j < kParams; ++j) truth[j] = (float)(3.0 * uniform());
  for (i = 0; i < kSamples; ++i) {
    double y = truth[kFeatures];
    for (j = 0; j < kFeatures; ++j) {
      features[i][j] = (float)uniform();
      y += truth[j] * features[i][j];
    }
    targets[i] = (float)y;
  }
}

/* The engine's hand-written forward and backward: returns the loss and
 * writes scale * dloss/dparams, rounded to f16, into grad_f16. */
static double engine_backward(const uint16_t *params_f16, double scale, uint16_t *grad_f16) {
  double grad[kParams] = {0.0}, loss = 0.0;
  int i, j;
  for (i = 0; i < kSamples; ++i) {
    double prediction = half_to_float(params_f16[kFeatures]), residual;
    for (j = 0; j < kFeatures; ++j) prediction += half_to_float(params_f16[j]) * features[i][j];
    residual = prediction - targets[i];
    loss += residual * residual / kSamples;
    for (j = 0; j < kFeatures; ++j) grad[j] += 2.0 * residual * features[i][j] / kSamples;
    grad[kFeatures] += 2.0 * residual / kSamples;
  }
  for (j = 0; j < kParams; ++j) grad_f16[j] = float_to_half((float)(scale * grad[j]));
  return loss;
}

int main(int argc, char **argv) {
  int steps = 400, step, i;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) steps = 150;
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  make_data();

  /* The engine's memory: ampx never allocates or frees it. */
  uint16_t *params_f16 = calloc(kParams, sizeof *params_f16);
  uint16_t *grad_f16 = calloc(kParams, sizeof *grad_f16);
  if (!params_f16 || !grad_f16) return 1;

  ampx_context ctx = NULL;
  CHECK(ampx_context_create(NULL, &ctx));
  const int64_t shape[1] = {kParams};
  ampx_tensor params = NULL, grads = NULL;
  /* No deleter: the engine frees its arrays itself, after releasing the
   * tensors. */
  CHECK(ampx_tensor_wrap(ctx, AMPX_F16, 1, shape, params_f16, kParams * sizeof *params_f16, NULL,
                         NULL, &params));
  CHECK(ampx_tensor_wrap(ctx, AMPX_F16, 1, shape, grad_f16, kParams * sizeof *grad_f16, NULL, NULL,
                         &grads));
  CHECK(ampx_tensor_set_name(params, "engine.weights"));
  CHECK(ampx_tensor_set_grad(params, grads)); /* once: the engine rewrites it each step */

  ampx_optimizer opt = NULL;
  ampx_adam_options adam = AMPX_ADAM_OPTIONS_INIT;
  adam.lr = 0.05;
  CHECK(ampx_optimizer_create_adam(ctx, &params, 1, &adam, &opt));
  ampx_scaler scaler = NULL;
  CHECK(ampx_scaler_create(ctx, NULL, &scaler));
  CHECK(ampx_scaler_attach(scaler, opt));

  void *tensor_memory = NULL;
  CHECK(ampx_tensor_data(params, &tensor_memory));
  printf("engine buffer %p, tensor memory %p: %s\n", (void *)params_f16, tensor_memory,
         tensor_memory == (void *)params_f16 ? "the same memory, no copy" : "DIFFERENT");

  uint16_t before_first_step[kParams];
  double first_loss = 0.0, loss = 0.0;
  int untouched_by_skip = 1;
  printf("step        loss    scale  taken  grad-norm (clipped to 5)\n");
  for (step = 0; step < steps; ++step) {
    double scale = 0.0;
    int32_t taken = 0;
    float norm_value = 0.0f;
    ampx_tensor norm = NULL;
    memcpy(before_first_step, params_f16, sizeof before_first_step);
    /* A GPU engine would seed its backward with ampx_scaler_scale_tensor
     * instead: reading the scale here synchronizes, which costs nothing on
     * the CPU. */
    CHECK(ampx_scaler_get_scale(scaler, &scale));
    loss = engine_backward(params_f16, scale, grad_f16);
    if (step == 0) first_loss = loss;

    CHECK(ampx_scaler_unscale(scaler, opt));
    CHECK(ampx_clip_grad_norm(opt, 5.0, 2.0, 0, &norm)); /* true gradients, not scaled ones */
    CHECK(ampx_scaler_step(scaler, opt));
    CHECK(ampx_scaler_update(scaler));
    CHECK(ampx_optimizer_last_step_taken(opt, &taken));
    if (!taken && memcmp(before_first_step, params_f16, sizeof before_first_step) != 0)
      untouched_by_skip = 0;
    CHECK(ampx_tensor_to_host(norm, &norm_value, sizeof norm_value));
    ampx_tensor_release(norm);
    if (step < 6 || step % 50 == 0 || step == steps - 1)
      printf("%4d  %10.5f  %7.0f  %5s  %9.3f\n", step, loss, scale, taken ? "yes" : "no",
             norm_value);
  }

  /* The engine's array is what the optimizer wrote: its fp32 masters,
   * rounded to f16, in place. */
  float masters[kParams];
  ampx_tensor master = NULL;
  int matches_masters = 1;
  CHECK(ampx_optimizer_state_tensor(opt, params, AMPX_STATE_MASTER, &master));
  CHECK(ampx_tensor_to_host(master, masters, sizeof masters));
  ampx_tensor_release(master);
  for (i = 0; i < kParams; ++i) matches_masters &= params_f16[i] == float_to_half(masters[i]);
  printf("weights[0..3] in the engine's buffer: %.5f %.5f %.5f %.5f (fp32 masters %.7f %.7f %.7f %.7f)\n",
         half_to_float(params_f16[0]), half_to_float(params_f16[1]), half_to_float(params_f16[2]),
         half_to_float(params_f16[3]), masters[0], masters[1], masters[2], masters[3]);

  ampx_scaler_counters counters = AMPX_SCALER_COUNTERS_INIT;
  CHECK(ampx_scaler_get_counters(scaler, &counters));
  printf("loss %.5f -> %.6f; %lld overflowing steps skipped\n", first_loss, loss,
         (long long)counters.skipped);
  const int ok = tensor_memory == (void *)params_f16 && matches_masters && untouched_by_skip &&
                 counters.skipped >= 1 && loss < first_loss / 100.0;
  if (ok) printf("host buffer updated in place: it holds the fp32 masters rounded to f16\n");

  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  ampx_tensor_release(grads);
  ampx_tensor_release(params);
  ampx_context_release(ctx);
  free(grad_f16);
  free(params_f16);
  if (!ok) fprintf(stderr, "FAILED: see the lines above\n");
  return ok ? 0 : 1;
}
