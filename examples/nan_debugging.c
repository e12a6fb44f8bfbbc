/*
 * nan_debugging.c -- finding where a NaN comes from (seed 4.1) and reading
 * the scale history for oscillation (seed 4.2).
 *
 * Part 1. A skipped step says that some gradient held an inf or NaN, not
 * which. In a debugging run the loop asks, after unscaling, whether the
 * scaler found one (ampx_scaler_found_inf, which synchronizes -- fine while
 * debugging), and if so lists the parameters whose gradients hold non-finite
 * values with ampx_find_nonfinite_grads: by name (ampx_tensor_set_name),
 * with NaN and inf counts. Here a NaN is injected into one gradient of a
 * small MLP at one step, standing in for a bad batch or a bad custom op.
 *
 * Part 2. A scale that keeps rising and falling back means steps keep being
 * skipped. The history of ampx_scaler_get_scale after each update shows it:
 * with growth_interval 1 the scaler doubles after every clean step, so once
 * it reaches the scale at which the f16 gradients overflow it bounces there
 * and skips every other step. The program detects the pattern, then shows
 * that capping the scale where it bounced back to (max_scale) removes the
 * skips. (torch's growth_interval of 2000 avoids most of it too.)
 *
 * Run:   ampx_example_nan_debugging [--quick] [--steps N]
 * Exits 1 unless the poisoned parameter, and only it, was named, the
 * oscillation was detected, and the capped run skipped no step.
 */
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

enum { kIn = 8, kHidden = 32, kOut = 4, kSamples = 128, kParams = 4, kMaxSteps = 200 };
static const char *const kNames[kParams] = {"layer1.weight", "layer1.bias", "layer2.weight",
                                            "layer2.bias"};
enum { kPoisoned = 3, kPoisonStep = 4 }; /* layer2.bias, at step 4 */

static unsigned long long rng;
static float uniform(void) { /* [-1, 1) */
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)(2.0 * (double)(rng >> 11) / 9007199254740992.0 - 1.0);
}

typedef struct model {
  ampx_context ctx;
  ampx_tensor params[kParams]; /* w1, b1, w2, b2 */
  ampx_tensor x, y;
  ampx_optimizer opt;
  ampx_scaler scaler;
  ampx_autocast autocast;
} model;

static void model_init(model *m, const ampx_scaler_options *scaler_options) {
  const int64_t shapes[kParams][2] = {{kHidden, kIn}, {kHidden, 0}, {kOut, kHidden}, {kOut, 0}};
  const int64_t x_shape[2] = {kSamples, kIn}, y_shape[2] = {kSamples, kOut};
  static float x[kSamples * kIn], y[kSamples * kOut], values[kHidden * kHidden];
  ampx_adam_options adam = AMPX_ADAM_OPTIONS_INIT;
  int p, i;
  rng = 4242;
  for (i = 0; i < kSamples * kIn; ++i) x[i] = uniform();
  for (i = 0; i < kSamples * kOut; ++i) y[i] = uniform();
  CHECK(ampx_context_create(NULL, &m->ctx));
  for (p = 0; p < kParams; ++p) {
    const int32_t ndim = shapes[p][1] ? 2 : 1;
    const int64_t n = shapes[p][0] * (ndim == 2 ? shapes[p][1] : 1);
    const int64_t fan_in = p < 2 ? kIn : kHidden;
    for (i = 0; i < n; ++i) values[i] = uniform() / sqrtf((float)fan_in);
    CHECK(ampx_tensor_from_host(m->ctx, AMPX_F32, ndim, shapes[p], values,
                                (size_t)n * sizeof(float), &m->params[p]));
    CHECK(ampx_tensor_set_requires_grad(m->params[p], 1));
    CHECK(ampx_tensor_set_name(m->params[p], kNames[p])); /* what the report prints */
  }
  CHECK(ampx_tensor_from_host(m->ctx, AMPX_F32, 2, x_shape, x, sizeof x, &m->x));
  CHECK(ampx_tensor_from_host(m->ctx, AMPX_F32, 2, y_shape, y, sizeof y, &m->y));
  adam.lr = 1e-3;
  CHECK(ampx_optimizer_create_adam(m->ctx, m->params, kParams, &adam, &m->opt));
  CHECK(ampx_scaler_create(m->ctx, scaler_options, &m->scaler));
  CHECK(ampx_autocast_create(m->ctx, NULL, &m->autocast));
}

static void model_release(model *m) {
  int p;
  ampx_autocast_release(m->autocast);
  ampx_scaler_release(m->scaler);
  ampx_optimizer_release(m->opt);
  for (p = 0; p < kParams; ++p) ampx_tensor_release(m->params[p]);
  ampx_tensor_release(m->x);
  ampx_tensor_release(m->y);
  ampx_context_release(m->ctx);
}

/* Forward and scaled backward of one step, inside the caller's scope. */
static void forward_backward(model *m) {
  ampx_tensor h = NULL, prediction = NULL, loss = NULL;
  CHECK(ampx_optimizer_zero_grad(m->opt));
  CHECK(ampx_autocast_enter(m->autocast));
  CHECK(ampx_linear(m->x, m->params[0], m->params[1], AMPX_ACTIVATION_RELU, &h));
  CHECK(ampx_linear(h, m->params[2], m->params[3], AMPX_ACTIVATION_NONE, &prediction));
  CHECK(ampx_mse_loss(prediction, m->y, AMPX_REDUCTION_MEAN, &loss));
  CHECK(ampx_autocast_exit(m->autocast));
  CHECK(ampx_backward(loss, m->scaler));
}

/* Part 1: the debugging loop. Returns 1 when exactly the poisoned parameter
 * was reported. */
static int find_the_nan(int steps) {
  model m;
  int step, named_right = 0, reports = 0;
  model_init(&m, NULL);
  for (step = 0; step < steps; ++step) {
    int32_t found = 0;
    CHECK(ampx_scope_push(m.ctx));
    forward_backward(&m);
    if (step == kPoisonStep) {
      ampx_tensor grad = NULL;
      void *data = NULL;
      CHECK(ampx_tensor_grad(m.params[kPoisoned], &grad));
      CHECK(ampx_tensor_data(grad, &data));
      ((float *)data)[1] = NAN;
    }
    CHECK(ampx_scaler_unscale(m.scaler, m.opt));
    CHECK(ampx_scaler_found_inf(m.scaler, m.opt, &found));
    if (found) {
      ampx_nonfinite_grad entries[kParams];
      size_t count = 0, i;
      CHECK(ampx_find_nonfinite_grads(m.opt, entries, kParams, &count));
      printf("step %d: the scaler found a non-finite gradient; %zu parameter(s) hold one\n", step,
             count);
      for (i = 0; i < count && i < kParams; ++i) {
        printf("  non-finite gradient in '%s': %lld NaN, %lld inf\n", entries[i].name,
               (long long)entries[i].nan_count, (long long)entries[i].inf_count);
        named_right += strcmp(entries[i].name, kNames[kPoisoned]) == 0 &&
                       entries[i].param == m.params[kPoisoned];
      }
      reports += (int)count;
    }
    CHECK(ampx_scaler_step(m.scaler, m.opt));
    CHECK(ampx_scaler_update(m.scaler));
    CHECK(ampx_scope_pop(m.ctx));
  }
  model_release(&m);
  return named_right == 1 && reports == 1;
}

/* Part 2: trains `steps` steps and writes the scale after each update into
 * history. Returns the number of skipped steps. */
static int scale_history(const ampx_scaler_options *options, int steps, double *history) {
  model m;
  int step;
  ampx_scaler_counters counters = AMPX_SCALER_COUNTERS_INIT;
  model_init(&m, options);
  for (step = 0; step < steps; ++step) {
    CHECK(ampx_scope_push(m.ctx));
    forward_backward(&m);
    CHECK(ampx_scaler_step(m.scaler, m.opt));
    CHECK(ampx_scaler_update(m.scaler));
    CHECK(ampx_scaler_get_scale(m.scaler, &history[step])); /* a sync: fine for a debug run */
    CHECK(ampx_scope_pop(m.ctx));
  }
  CHECK(ampx_scaler_get_counters(m.scaler, &counters));
  model_release(&m);
  return (int)counters.skipped;
}

static void print_history(const double *history, int steps) {
  int step;
  printf("  log2(scale) after each update, '*' after a backoff:\n ");
  for (step = 0; step < steps; ++step) {
    const int dropped = step > 0 && history[step] < history[step - 1];
    printf(" %2.0f%s%s", log2(history[step]), dropped ? "*" : " ",
           step % 16 == 15 && step + 1 < steps ? "\n " : "");
  }
  printf("\n");
}

int main(int argc, char **argv) {
  int steps = 64, i;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) steps = 32;
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 24) steps = 24; /* room to climb to the overflow and bounce there */
  if (steps > kMaxSteps) steps = kMaxSteps;

  printf("part 1: which parameter holds the NaN?\n");
  const int nan_found = find_the_nan(10);

  printf("\npart 2: the scale history\n");
  static double history[kMaxSteps];
  ampx_scaler_options eager = AMPX_SCALER_OPTIONS_INIT;
  eager.init_scale = 1024.0;
  eager.growth_interval = 1;
  const int skipped = scale_history(&eager, steps, history);
  print_history(history, steps);

  /* Oscillation: after the first climb, backoff after backoff. The scale
   * each backoff lands on is one that did not overflow; the lowest of them
   * is safe for the whole run (the gradients shrink as the loss falls, so
   * the overflow point creeps up). */
  double low = INFINITY, high = 0.0;
  int backoffs = 0;
  for (i = 1; i < steps; ++i) {
    if (history[i] < history[i - 1]) {
      ++backoffs;
      if (history[i] < low) low = history[i];
    }
    if (history[i] > high) high = history[i];
  }
  const int oscillating = backoffs >= steps / 8;
  printf("  %d of %d steps skipped: %s, %d backoffs between 2^%.0f and 2^%.0f\n", skipped, steps,
         oscillating ? "the scale oscillates" : "no oscillation", backoffs,
         backoffs ? log2(low) : 0.0, log2(high));

  int capped_skips = -1;
  if (oscillating) {
    ampx_scaler_options capped = eager;
    capped.max_scale = low;
    capped_skips = scale_history(&capped, steps, history);
    printf("  fix: max_scale = 2^%.0f -> %d of %d steps skipped\n", log2(low), capped_skips,
           steps);
  }

  const int ok = nan_found && oscillating && capped_skips == 0;
  if (!nan_found) fprintf(stderr, "FAILED: the poisoned parameter '%s' was not named alone\n",
                          kNames[kPoisoned]);
  if (!ok) fprintf(stderr, "FAILED: see the lines above\n");
  return ok ? 0 : 1;
}
