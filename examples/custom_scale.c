/*
 * custom_scale.c -- taking control of the loss scale (seed 6.1), and saving
 * and restoring the scaler and the optimizer so that training resumes
 * exactly where it stopped.
 *
 * A linear model (y = x W^T + b, mean squared error, autocast f16, Adam)
 * trains on fixed data. Overflows are injected into chosen steps, as a
 * too-high scale or a bad batch would produce them, to show the scaler's
 * rules step by step:
 *
 *   hysteresis 2   a single overflow is skipped without lowering the
 *                  scale; the 2nd one before the allowance comes back (at
 *                  the next completed growth interval) backs off (Megatron
 *                  and DeepSpeed do this to ride out rare spikes);
 *   growth 3       three clean steps in a row double the scale;
 *   update_to      one update forces the scale to 1024 instead of applying
 *                  the rule (torch's scaler.update(new_scale)), e.g. to
 *                  recover from a known-bad phase by hand.
 *
 * After that, a checkpoint is taken: the parameters' values, the scaler's
 * state (ampx_scaler_get_state) and the optimizer's serialised state
 * (ampx_optimizer_save_state). Training goes on from there in the original
 * objects, and again in brand-new ones -- a new context, parameters with
 * other values, a scaler created with the default options -- restored from
 * the checkpoint. Both runs must end bit for bit the same.
 *
 * Run:   ampx_example_custom_scale [--quick] [--steps N]
 * (N: steps after the checkpoint). Exits 1 when a scale differs from the
 * rule's, a counter is off, or the resumed run differs in any bit.
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

enum { kIn = 8, kOut = 4, kSamples = 64, kCheckpointStep = 12, kForcedStep = 9 };
static const double kForcedScale = 1024.0;

/* Steps whose gradients get an inf: one alone (absorbed by hysteresis),
 * a consecutive pair (the second backs off), and one after the checkpoint,
 * so the resumed run must also have restored the hysteresis allowance. */
static int overflows_at(int step) { return step == 2 || step == 6 || step == 7 || step == 15; }

static float data_x[kSamples * kIn], data_y[kSamples * kOut];

static unsigned long long rng;
static float uniform(void) { /* [-1, 1) */
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)(2.0 * (double)(rng >> 11) / 9007199254740992.0 - 1.0);
}

static void make_data(void) {
  float truth[kOut * kIn];
  int i, j, k;
  rng = 99;
  for (i = 0; i < kOut * kIn; ++i) truth[i] = uniform();
  for (i = 0; i < kSamples; ++i) {
    for (k = 0; k < kIn; ++k) data_x[i * kIn + k] = uniform();
    for (j = 0; j < kOut; ++j) {
      float y = 0.0f;
      for (k = 0; k < kIn; ++k) y += truth[j * kIn + k] * data_x[i * kIn + k];
      data_y[i * kOut + j] = y;
    }
  }
}

typedef struct trainer {
  ampx_context ctx;
  ampx_tensor w, b, x, y;
  ampx_optimizer opt;
  ampx_scaler scaler;
  ampx_autocast autocast;
} trainer;

static ampx_tensor make_param(ampx_context ctx, int32_t ndim, const int64_t *shape, int64_t n) {
  float values[kOut * kIn];
  ampx_tensor t = NULL;
  int64_t i;
  for (i = 0; i < n; ++i) values[i] = 0.3f * uniform();
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, values, (size_t)n * sizeof(float), &t));
  CHECK(ampx_tensor_set_requires_grad(t, 1));
  return t;
}

/* A trainer whose parameters start from `init_seed`'s values. */
static void trainer_init(trainer *t, unsigned long long init_seed,
                         const ampx_scaler_options *scaler_options) {
  const int64_t w_shape[2] = {kOut, kIn}, b_shape[1] = {kOut};
  const int64_t x_shape[2] = {kSamples, kIn}, y_shape[2] = {kSamples, kOut};
  ampx_adam_options adam = AMPX_ADAM_OPTIONS_INIT;
  ampx_tensor params[2];
  CHECK(ampx_context_create(NULL, &t->ctx));
  rng = init_seed;
  t->w = make_param(t->ctx, 2, w_shape, kOut * kIn);
  t->b = make_param(t->ctx, 1, b_shape, kOut);
  CHECK(ampx_tensor_from_host(t->ctx, AMPX_F32, 2, x_shape, data_x, sizeof data_x, &t->x));
  CHECK(ampx_tensor_from_host(t->ctx, AMPX_F32, 2, y_shape, data_y, sizeof data_y, &t->y));
  params[0] = t->w, params[1] = t->b;
  adam.lr = 0.01;
  CHECK(ampx_optimizer_create_adam(t->ctx, params, 2, &adam, &t->opt));
  CHECK(ampx_scaler_create(t->ctx, scaler_options, &t->scaler));
  CHECK(ampx_autocast_create(t->ctx, NULL, &t->autocast));
}

static void trainer_release(trainer *t) {
  ampx_autocast_release(t->autocast);
  ampx_scaler_release(t->scaler);
  ampx_optimizer_release(t->opt);
  ampx_tensor_release(t->w);
  ampx_tensor_release(t->b);
  ampx_tensor_release(t->x);
  ampx_tensor_release(t->y);
  ampx_context_release(t->ctx);
}

/* One training step (step numbers are global, so a resumed run sees the
 * same injections). Returns whether the optimizer step was taken. */
static int32_t train_step(trainer *t, int step) {
  ampx_tensor prediction = NULL, loss = NULL;
  int32_t taken = 0;
  CHECK(ampx_optimizer_zero_grad(t->opt));
  CHECK(ampx_scope_push(t->ctx));
  CHECK(ampx_autocast_enter(t->autocast));
  CHECK(ampx_linear(t->x, t->w, t->b, AMPX_ACTIVATION_NONE, &prediction));
  CHECK(ampx_mse_loss(prediction, t->y, AMPX_REDUCTION_MEAN, &loss));
  CHECK(ampx_autocast_exit(t->autocast));
  CHECK(ampx_backward(loss, t->scaler));
  if (overflows_at(step)) {
    ampx_tensor grad = NULL;
    void *data = NULL;
    CHECK(ampx_tensor_grad(t->w, &grad));
    CHECK(ampx_tensor_data(grad, &data)); /* F32: autocast returns grads in the param's type */
    ((float *)data)[3] = INFINITY;
  }
  CHECK(ampx_scaler_step(t->scaler, t->opt));
  if (step == kForcedStep) CHECK(ampx_scaler_update_to(t->scaler, kForcedScale));
  else CHECK(ampx_scaler_update(t->scaler));
  CHECK(ampx_optimizer_last_step_taken(t->opt, &taken));
  CHECK(ampx_scope_pop(t->ctx));
  return taken;
}

static ampx_scaler_state scaler_state(ampx_scaler scaler) {
  ampx_scaler_state state;
  memset(&state, 0, sizeof state);
  state.struct_size = sizeof state;
  state.counters.struct_size = sizeof state.counters;
  CHECK(ampx_scaler_get_state(scaler, &state));
  return state;
}

typedef struct snapshot {
  float w[kOut * kIn], b[kOut];
} snapshot;

static snapshot params_of(const trainer *t) {
  snapshot s;
  CHECK(ampx_tensor_to_host(t->w, s.w, sizeof s.w));
  CHECK(ampx_tensor_to_host(t->b, s.b, sizeof s.b));
  return s;
}

static int failures = 0;
static void expect(int ok, const char *what) {
  if (!ok) {
    ++failures;
    fprintf(stderr, "FAILED: %s\n", what);
  }
}

int main(int argc, char **argv) {
  int resumed_steps = 40, step, i;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) resumed_steps = 10;
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) resumed_steps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  if (resumed_steps < 4) resumed_steps = 4; /* past the step-15 overflow */
  make_data();

  ampx_scaler_options options = AMPX_SCALER_OPTIONS_INIT;
  options.init_scale = 4096.0;
  options.growth_interval = 3;
  options.hysteresis = 2;
  trainer run;
  trainer_init(&run, 1, &options);

  printf("step  overflow  taken     scale  tracker  hysteresis_left\n");
  double previous_scale = options.init_scale;
  for (step = 0; step < kCheckpointStep; ++step) {
    const int32_t taken = train_step(&run, step);
    const ampx_scaler_state s = scaler_state(run.scaler);
    printf("%4d  %8s  %5s  %8.0f  %7d  %15d%s\n", step, overflows_at(step) ? "inf" : "-",
           taken ? "yes" : "no", s.scale, (int)s.growth_tracker, (int)s.hysteresis_left,
           step == kForcedStep ? "   <- update_to(1024)" : "");
    expect(taken == !overflows_at(step), "a step was taken or skipped against its gradients");
    if (step == 2) expect(s.scale == previous_scale, "a single overflow lowered the scale");
    if (step == 7) expect(s.scale == previous_scale * 0.5, "the 2nd overflow did not back off");
    if (step == kForcedStep) expect(s.scale == kForcedScale, "update_to did not set the scale");
    previous_scale = s.scale;
  }
  ampx_scaler_counters counters = AMPX_SCALER_COUNTERS_INIT;
  CHECK(ampx_scaler_get_counters(run.scaler, &counters));
  printf("counters: %lld updates, %lld skipped, %lld backoffs, %lld growths\n",
         (long long)counters.updates, (long long)counters.skipped, (long long)counters.backoffs,
         (long long)counters.growths);
  expect(counters.updates == kCheckpointStep && counters.skipped == 3 && counters.backoffs == 1,
         "the counters disagree with the injected overflows");

  /* -- checkpoint -- */
  const snapshot saved_params = params_of(&run);
  const ampx_scaler_state saved_scaler = scaler_state(run.scaler);
  size_t state_bytes = 0;
  CHECK(ampx_optimizer_state_size(run.opt, &state_bytes));
  void *saved_optimizer = malloc(state_bytes);
  if (!saved_optimizer) return 1;
  CHECK(ampx_optimizer_save_state(run.opt, saved_optimizer, state_bytes));
  printf("checkpoint at step %d: scale %.0f, optimizer state %zu bytes\n", kCheckpointStep,
         saved_scaler.scale, state_bytes);

  /* -- the uninterrupted run goes on -- */
  const int last = kCheckpointStep + resumed_steps;
  for (step = kCheckpointStep; step < last; ++step) train_step(&run, step);
  const snapshot straight = params_of(&run);
  const ampx_scaler_state straight_scaler = scaler_state(run.scaler);
  trainer_release(&run);

  /* -- a fresh process would do this: new objects, restored state -- */
  trainer resumed;
  trainer_init(&resumed, 2, NULL); /* other weights, default scaler options */
  CHECK(ampx_tensor_copy_from_host(resumed.w, saved_params.w, sizeof saved_params.w));
  CHECK(ampx_tensor_copy_from_host(resumed.b, saved_params.b, sizeof saved_params.b));
  CHECK(ampx_scaler_set_state(resumed.scaler, &saved_scaler));
  CHECK(ampx_optimizer_load_state(resumed.opt, saved_optimizer, state_bytes));
  free(saved_optimizer);
  for (step = kCheckpointStep; step < last; ++step) train_step(&resumed, step);
  const snapshot again = params_of(&resumed);
  const ampx_scaler_state resumed_scaler = scaler_state(resumed.scaler);
  trainer_release(&resumed);

  printf("after step %d: uninterrupted scale %.0f (%lld skipped), resumed scale %.0f (%lld skipped)\n",
         last - 1, straight_scaler.scale, (long long)straight_scaler.counters.skipped,
         resumed_scaler.scale, (long long)resumed_scaler.counters.skipped);
  const int same = memcmp(&straight, &again, sizeof straight) == 0 &&
                   straight_scaler.scale == resumed_scaler.scale &&
                   straight_scaler.growth_tracker == resumed_scaler.growth_tracker &&
                   straight_scaler.hysteresis_left == resumed_scaler.hysteresis_left &&
                   memcmp(&straight_scaler.counters, &resumed_scaler.counters,
                          sizeof straight_scaler.counters) == 0;
  expect(same, "the resumed run differs from the uninterrupted one");
  if (same) printf("resumed run matches the uninterrupted one: parameters bit for bit, scaler state\n");
  return failures == 0 ? 0 : 1;
}
