/*
 * bench_doctor.c -- what the precision doctor (ampx.h section 15) costs a
 * training step: four copies of one model trained side by side in one run,
 *
 *   none      no doctor
 *   off       a doctor attached with interval 0
 *   every100  interval 100 (the default: statistics on steps 1, 101, ...)
 *   every1    interval 1 (statistics on every step)
 *
 *   bench_doctor [--device cpu|cuda] [--rounds R] [--steps K] [--layers L]
 *                [--width W] [--batch B] [--inputs I] [--threads T] [--quick]
 *
 * The model and step are the demo's (examples/demo/train.c): L linear layers
 * (ReLU between; the first takes I inputs, the last gives 3 outputs, or 10
 * with --device cuda), fp32 parameters, He-uniform init from the same
 * splitmix64 stream for every copy, full batch of B rows of Fourier features
 * (cos/sin of random projections of a point), MSE loss; fp16 autocast, a
 * dynamic loss scaler (init 65536, x2 after 25 clean steps) attached to an
 * AdamW optimizer (lr 1e-2). One step: scope push, zero_grad, forward and
 * loss under autocast, scaled backward, unscale, clip the gradient norm to 1,
 * scaler step, scaler update, scope pop. Defaults: --device cpu is the
 * demo's model (L 4, W 64, I 128, B 4096: 128 Fourier features -> 3 x 64
 * ReLU -> RGB); --device cuda is the 8 x 4096 MLP of bench/bench_mlp_gpu.py
 * (L 8, W 4096, I 4096, B 8192, 10 outputs). --threads: the CPU context's
 * worker threads (default one per hardware thread). Without --device: CUDA
 * when ampx has a CUDA device (as the demo, and as tools/gpu-check.sh runs
 * it), else the CPU. --device cuda without a CUDA device prints "SKIPPED: no
 * CUDA device" and exits 0.
 *
 * Each round runs a block of K consecutive steps of every configuration in
 * turn, the order rotated by one each round, so all four see the same
 * machine noise. A block's time runs from a synchronized device to the end
 * of its last step with the loss read back and the context synchronized, so
 * GPU time is counted. K defaults to 100 so that every block of every100
 * holds exactly one sampled step. Prints per configuration:
 *   ms / step        the median over the rounds of the block's time per step
 *                    (monotonic clock), and its ratio to none's; the lines
 *                    `off/none 1.003`, `every100/none ...`, `every1/none ...`
 *                    repeat these ratios;
 *   per-round q1-q3  the quartiles of the block's time over none's block in
 *                    the same round: the noise;
 *   amp ms           the median over all timed steps of the time spent in
 *                    ampx_scaler_unscale and ampx_scaler_step + update, the
 *                    calls in which the doctor's hooks run (on CUDA: host time,
 *                    the enqueueing). every1's minus none's is the doctor's own
 *                    cost of a sampled step, a figure a noisy machine moves
 *                    much less than the whole step's.
 * Then the skipped steps and final loss of each copy (identical: the doctor
 * observes, it does not change the step) and each doctor's summary.
 * Defaults: 11 rounds on the CPU (about a minute for the demo's model on 2
 * cores); 7 on CUDA, fewer when the warm-up says they would take over 35 s
 * (tools/gpu-check.sh gives a benchmark 60 s): at least 3, with fewer steps
 * per block when even 3 would not fit. --quick: 3 rounds of 10 steps, a
 * smoke run.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#ifndef AMPX_EXPERIMENTAL /* the ampx target may define it already */
#define AMPX_EXPERIMENTAL
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ampx/ampx.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    ampx_status check_status_ = (call);                                              \
    if (check_status_ != AMPX_OK) {                                                  \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,           \
              ampx_last_error());                                                    \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

enum { kConfigs = 4, kMaxLayers = 32, kWarmup = 5, kMaxRounds = 1000 };

static const double kBudgetSeconds = 35.0; /* CUDA: the default rounds fit in this */

static const char *const kNames[kConfigs] = {"none", "off", "every100", "every1"};
static const int32_t kIntervals[kConfigs] = {-1, 0, 100, 1}; /* -1: no doctor */

typedef struct model {
  ampx_tensor params[2 * kMaxLayers];
  ampx_optimizer opt;
  ampx_scaler scaler;
  ampx_doctor doctor;
  double times[kMaxRounds]; /* seconds per step, one per round */
  double *amp_times;        /* per timed step: seconds in unscale + scaler step/update */
  int amp_count;
  float loss;               /* the loss of the latest step */
} model;

typedef struct setup {
  ampx_context ctx;
  ampx_autocast autocast;
  ampx_tensor x, target;
  int layers, width, inputs, outputs, batch;
} setup;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64, as the demo's stream (examples/demo/task.c). */
static uint64_t next_u64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double unit(uint64_t *state) { /* [0, 1) */
  return (double)(next_u64(state) >> 11) / 9007199254740992.0;
}

static ampx_tensor from_host(ampx_context ctx, int ndim, const int64_t *shape, const float *v) {
  int64_t n = 1;
  int i;
  ampx_tensor t = NULL;
  for (i = 0; i < ndim; ++i) n *= shape[i];
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, v, (size_t)n * sizeof *v, &t));
  return t;
}

/* The batch: per row a point (u, v) in the unit square, its Fourier features
 * cos/sin(2 pi f.(u, v)) with f ~ N(0, 6^2) per pair (the demo's scale), and
 * a smooth target in [0, 1] per output. */
static void make_data(setup *s) {
  const int pairs = s->inputs / 2;
  const double pi = 3.14159265358979323846;
  uint64_t rng = 20240611u;
  float *features = malloc(sizeof(float) * (size_t)s->batch * (size_t)s->inputs);
  float *target = malloc(sizeof(float) * (size_t)s->batch * (size_t)s->outputs);
  double *freq = malloc(sizeof(double) * 2 * (size_t)(pairs + 1));
  int64_t row;
  int j;
  if (!features || !target || !freq) {
    fprintf(stderr, "bench_doctor: out of host memory\n");
    exit(1);
  }
  for (j = 0; j < 2 * pairs; ++j) {
    const double a = unit(&rng) + 1e-12, b = unit(&rng);
    freq[j] = 6.0 * sqrt(-2.0 * log(a)) * cos(2.0 * pi * b);
  }
  for (row = 0; row < s->batch; ++row) {
    const double u = unit(&rng), v = unit(&rng);
    float *f = features + row * s->inputs;
    for (j = 0; j < pairs; ++j) {
      const double phase = 2.0 * pi * (freq[2 * j] * u + freq[2 * j + 1] * v);
      f[2 * j] = (float)cos(phase);
      f[2 * j + 1] = (float)sin(phase);
    }
    if (s->inputs % 2) f[s->inputs - 1] = (float)u;
    for (j = 0; j < s->outputs; ++j)
      target[row * s->outputs + j] = (float)(0.5 + 0.4 * sin(2.0 * pi * ((j + 1) * u + v)));
  }
  {
    const int64_t x_shape[2] = {s->batch, s->inputs}, t_shape[2] = {s->batch, s->outputs};
    s->x = from_host(s->ctx, 2, x_shape, features);
    s->target = from_host(s->ctx, 2, t_shape, target);
  }
  free(features);
  free(target);
  free(freq);
}

/* The demo's init: He-uniform for the ReLU layers, 1/sqrt(in) for the
 * output layer, biases zero but the output's (0.5). Every copy gets the same
 * weights (made once on the host), its own AdamW (lr 1e-2) and scaler, and
 * a doctor of interval intervals[k] (none when negative). */
static void make_models(const setup *s, const int32_t *intervals, model *models) {
  uint64_t rng = 7u;
  int l, k;
  memset(models, 0, sizeof(model) * kConfigs);
  for (l = 0; l < s->layers; ++l) {
    const int last = l + 1 == s->layers;
    const int in = l == 0 ? s->inputs : s->width, out = last ? s->outputs : s->width;
    const double bound = last ? sqrt(1.0 / in) : sqrt(6.0 / in);
    const int64_t w_shape[2] = {out, in}, b_shape[1] = {out};
    float *w = malloc(sizeof(float) * (size_t)in * (size_t)out);
    float *b = malloc(sizeof(float) * (size_t)out);
    int64_t i;
    if (!w || !b) {
      fprintf(stderr, "bench_doctor: out of host memory\n");
      exit(1);
    }
    for (i = 0; i < (int64_t)in * out; ++i) w[i] = (float)(bound * (2.0 * unit(&rng) - 1.0));
    for (i = 0; i < out; ++i) b[i] = last ? 0.5f : 0.0f;
    for (k = 0; k < kConfigs; ++k) {
      model *m = &models[k];
      m->params[2 * l] = from_host(s->ctx, 2, w_shape, w);
      m->params[2 * l + 1] = from_host(s->ctx, 1, b_shape, b);
      CHECK(ampx_tensor_set_requires_grad(m->params[2 * l], 1));
      CHECK(ampx_tensor_set_requires_grad(m->params[2 * l + 1], 1));
    }
    free(w);
    free(b);
  }
  for (k = 0; k < kConfigs; ++k) {
    model *m = &models[k];
    ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
    ampx_scaler_options scaler_options = AMPX_SCALER_OPTIONS_INIT;
    adam.lr = 1e-2;
    CHECK(ampx_optimizer_create_adam(s->ctx, m->params, 2 * (size_t)s->layers, &adam, &m->opt));
    scaler_options.growth_interval = 25;
    CHECK(ampx_scaler_create(s->ctx, &scaler_options, &m->scaler));
    CHECK(ampx_scaler_attach(m->scaler, m->opt));
    if (intervals[k] >= 0) {
      ampx_doctor_options doctor_options = AMPX_DOCTOR_OPTIONS_INIT;
      doctor_options.interval = intervals[k];
      CHECK(ampx_doctor_create(s->ctx, m->opt, &doctor_options, &m->doctor));
    }
  }
}

static void release_model(const setup *s, model *m) {
  int l;
  ampx_doctor_release(m->doctor);
  ampx_scaler_release(m->scaler);
  ampx_optimizer_release(m->opt);
  for (l = 0; l < 2 * s->layers; ++l) ampx_tensor_release(m->params[l]);
  free(m->amp_times);
}

/* One training step, as the demo's loop; read_loss: copy the loss to the
 * host after the update (which waits for the whole step on a device). Where
 * the doctor works -- ampx_scaler_unscale and ampx_scaler_step/update (its
 * hooks) -- is timed apart into m->amp_times when amp_times is set (host
 * time: on CUDA the enqueueing only). */
static void train_step(const setup *s, model *m, int read_loss) {
  ampx_tensor h = s->x, loss = NULL;
  double t0, t1, t2;
  int l;
  CHECK(ampx_scope_push(s->ctx));
  CHECK(ampx_optimizer_zero_grad(m->opt));
  CHECK(ampx_autocast_enter(s->autocast));
  for (l = 0; l < s->layers; ++l) {
    const ampx_activation act = l + 1 < s->layers ? AMPX_ACTIVATION_RELU : AMPX_ACTIVATION_NONE;
    CHECK(ampx_linear(h, m->params[2 * l], m->params[2 * l + 1], act, &h));
  }
  CHECK(ampx_mse_loss(h, s->target, AMPX_REDUCTION_MEAN, &loss));
  CHECK(ampx_autocast_exit(s->autocast));
  CHECK(ampx_backward(loss, m->scaler));
  t0 = now();
  CHECK(ampx_scaler_unscale(m->scaler, m->opt));
  t1 = now();
  CHECK(ampx_clip_grad_norm(m->opt, 1.0, 2.0, 0, NULL));
  t2 = now();
  CHECK(ampx_scaler_step(m->scaler, m->opt));
  CHECK(ampx_scaler_update(m->scaler));
  if (m->amp_times) m->amp_times[m->amp_count++] = (t1 - t0) + (now() - t2);
  if (read_loss) {
    ampx_tensor loss32 = NULL;
    CHECK(ampx_tensor_cast(loss, AMPX_F32, &loss32));
    CHECK(ampx_tensor_to_host(loss32, &m->loss, sizeof m->loss));
  }
  CHECK(ampx_scope_pop(s->ctx));
}

/* Seconds per step of a block of `steps` steps. */
static double run_block(const setup *s, model *m, int steps) {
  double start;
  int i;
  CHECK(ampx_context_synchronize(s->ctx));
  start = now();
  for (i = 0; i < steps; ++i) train_step(s, m, i + 1 == steps);
  CHECK(ampx_context_synchronize(s->ctx));
  return (now() - start) / steps;
}

static int compare_doubles(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile (linear between order statistics) of values[0..n); sorts. */
static double quantile(double *values, int n, double q) {
  double pos;
  int i;
  qsort(values, (size_t)n, sizeof *values, compare_doubles);
  pos = q * (n - 1);
  i = (int)pos;
  return i + 1 < n ? values[i] + (pos - i) * (values[i + 1] - values[i]) : values[n - 1];
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_doctor [--device cpu|cuda] [--rounds R] [--steps K] [--layers L]\n"
          "                    [--width W] [--batch B] [--inputs I] [--threads T] [--quick]\n"
          "  --device  default: CUDA when ampx has a CUDA device, else the CPU\n"
          "  --rounds  rounds (default 11 on the CPU; 7 on CUDA, fewer past ~35 s)\n"
          "  --steps   steps per configuration per round (default 100)\n"
          "  --layers  linear layers (cpu 4, cuda 8); --width hidden width (cpu 64,\n"
          "            cuda 4096); --inputs features (cpu 128, cuda 4096); --batch rows\n"
          "            (cpu 4096, cuda 8192)\n"
          "  --threads CPU worker threads (default: one per hardware thread)\n"
          "  --quick   3 rounds of 10 steps (a smoke run)\n");
}

int main(int argc, char **argv) {
  const char *device = NULL;
  int rounds = 0, steps = 0, layers = 0, width = 0, batch = 0, inputs = 0, threads = 0;
  int quick = 0;
  int on_cuda, i, r, k;
  setup s;
  model models[kConfigs];
  ampx_context_options context_options = AMPX_CONTEXT_OPTIONS_INIT;
  ampx_autocast_options autocast_options = AMPX_AUTOCAST_OPTIONS_INIT;
  double medians[kConfigs], step_seconds = 0.0;
  int have_cuda;

  for (i = 1; i < argc; ++i) {
    const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    int *number = NULL;
    if (strcmp(arg, "--quick") == 0) {
      quick = 1;
      continue;
    }
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (value == NULL) {
      usage(stderr);
      return 2;
    }
    if (strcmp(arg, "--device") == 0) device = value;
    else if (strcmp(arg, "--rounds") == 0) number = &rounds;
    else if (strcmp(arg, "--steps") == 0) number = &steps;
    else if (strcmp(arg, "--layers") == 0) number = &layers;
    else if (strcmp(arg, "--width") == 0) number = &width;
    else if (strcmp(arg, "--batch") == 0) number = &batch;
    else if (strcmp(arg, "--inputs") == 0) number = &inputs;
    else if (strcmp(arg, "--threads") == 0) number = &threads;
    else {
      usage(stderr);
      return 2;
    }
    if (number && (*number = atoi(value)) < 1) {
      fprintf(stderr, "bench_doctor: %s wants a positive number, not '%s'\n", arg, value);
      return 2;
    }
    ++i;
  }
  have_cuda = ampx_has_cuda() && ampx_cuda_device_count() > 0;
  if (device == NULL) {
    on_cuda = have_cuda;
  } else if (strcmp(device, "cuda") == 0) {
    on_cuda = 1;
  } else if (strcmp(device, "cpu") == 0) {
    on_cuda = 0;
  } else {
    fprintf(stderr, "bench_doctor: --device is cpu or cuda, not '%s'\n", device);
    return 2;
  }
  if (on_cuda && !have_cuda) {
    printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  if (layers > kMaxLayers || rounds > kMaxRounds) {
    fprintf(stderr, "bench_doctor: at most %d layers and %d rounds\n", kMaxLayers, kMaxRounds);
    return 2;
  }

  memset(&s, 0, sizeof s);
  s.layers = layers ? layers : on_cuda ? 8 : 4;
  s.width = width ? width : on_cuda ? 4096 : 64;
  s.inputs = inputs ? inputs : on_cuda ? 4096 : 128;
  s.batch = batch ? batch : on_cuda ? 8192 : 4096;
  s.outputs = on_cuda ? 10 : 3;
  const int rounds_given = rounds > 0 || quick, steps_given = steps > 0 || quick;
  if (steps == 0) steps = quick ? 10 : 100;
  if (quick && rounds == 0) rounds = 3;
  if (!rounds_given) rounds = on_cuda ? 7 : 11;

  context_options.device_type = on_cuda ? AMPX_DEVICE_CUDA : AMPX_DEVICE_CPU;
  context_options.num_threads = on_cuda ? 0 : threads;
  {
    const ampx_status status = ampx_context_create(&context_options, &s.ctx);
    if (status == AMPX_ERR_NO_DEVICE && on_cuda) {
      printf("SKIPPED: no CUDA device (%s)\n", ampx_last_error());
      return 0;
    }
    CHECK(status);
  }
  autocast_options.dtype = AMPX_F16;
  CHECK(ampx_autocast_create(s.ctx, &autocast_options, &s.autocast));
  make_data(&s);
  make_models(&s, kIntervals, models);

  /* Warm-up: every copy takes its first steps (the doctors' buffers and
   * sampled step 1 included) before any timing; the warm-up's pace sizes
   * the default number of rounds. */
  for (k = 0; k < kConfigs; ++k) {
    const double pace = run_block(&s, &models[k], kWarmup);
    /* The first copy's warm-up pays the device's lazy set-up too. */
    step_seconds = k == 0 || pace < step_seconds ? pace : step_seconds;
  }
  if (on_cuda && !rounds_given) {
    const int fit = (int)(kBudgetSeconds / (step_seconds * kConfigs * steps));
    if (fit < rounds) rounds = fit < 3 ? 3 : fit;
    if (fit < 3 && !steps_given) {
      steps = (int)(kBudgetSeconds / (step_seconds * kConfigs * rounds));
      if (steps < 10) steps = 10;
    }
  }

  {
    long params = 0;
    int l;
    for (l = 0; l < s.layers; ++l)
      params += ((long)(l == 0 ? s.inputs : s.width) + 1) *
                (l + 1 == s.layers ? s.outputs : s.width);
    printf("bench_doctor: the precision doctor's cost per training step, ampx %s\n",
           ampx_version_string());
    printf("device  %s\n", on_cuda ? "CUDA device 0"
                           : have_cuda ? "CPU"
                           : ampx_has_cuda() ? "CPU (no CUDA device found)"
                                             : "CPU (ampx built without CUDA)");
    printf("model   %d inputs -> %d x %d ReLU -> %d, %ld parameters (%d tensors); batch %d;\n"
           "        fp16 autocast, dynamic loss scaler (65536, x2 per 25 clean steps), AdamW,\n"
           "        MSE; step: backward, unscale, clip norm 1, scaler step + update\n",
           s.inputs, s.layers - 1, s.width, s.outputs, params,
           2 * s.layers, s.batch);
    printf("timing  %d rounds x %d steps per configuration, order rotated each round; "
           "median of the rounds\n\n", rounds, steps);
    if (steps < 100)
      printf("note    --steps %d < 100: a block of every100 may hold no sampled step\n\n", steps);
  }
  fflush(stdout);

  for (k = 0; k < kConfigs; ++k) {
    models[k].amp_times = malloc(sizeof(double) * (size_t)rounds * (size_t)steps);
    if (!models[k].amp_times) {
      fprintf(stderr, "bench_doctor: out of host memory\n");
      return 1;
    }
  }
  for (r = 0; r < rounds; ++r)
    for (i = 0; i < kConfigs; ++i) {
      k = (r + i) % kConfigs;
      models[k].times[r] = run_block(&s, &models[k], steps);
    }

  {
    double ratios[kConfigs][kMaxRounds], amp_medians[kConfigs];
    double scratch[kMaxRounds];
    printf("%-10s %8s %10s %8s %16s %10s\n", "doctor", "interval", "ms / step", "vs none",
           "per-round q1-q3", "amp ms");
    for (k = 0; k < kConfigs; ++k) {
      char interval[16], spread[32];
      for (r = 0; r < rounds; ++r) ratios[k][r] = models[k].times[r] / models[0].times[r];
      memcpy(scratch, models[k].times, sizeof(double) * (size_t)rounds);
      medians[k] = quantile(scratch, rounds, 0.5);
      amp_medians[k] = quantile(models[k].amp_times, models[k].amp_count, 0.5);
      memcpy(scratch, ratios[k], sizeof(double) * (size_t)rounds);
      if (k == 0) {
        spread[0] = '\0';
      } else {
        const double q1 = quantile(scratch, rounds, 0.25), q3 = quantile(scratch, rounds, 0.75);
        snprintf(spread, sizeof spread, "%.3f-%.3f", q1, q3);
      }
      if (kIntervals[k] < 0) snprintf(interval, sizeof interval, "-");
      else snprintf(interval, sizeof interval, "%d", kIntervals[k]);
      printf("%-10s %8s %10.4f %8.3f %16s %10.4f\n", kNames[k], interval, 1e3 * medians[k],
             medians[k] / medians[0], spread, 1e3 * amp_medians[k]);
    }
    printf("\n");
    for (k = 1; k < kConfigs; ++k) {
      double median_ratio;
      memcpy(scratch, ratios[k], sizeof(double) * (size_t)rounds);
      median_ratio = quantile(scratch, rounds, 0.5); /* sorts scratch */
      printf("%s/none %.3f   (per-round ratios: median %.3f, min %.3f, max %.3f)\n", kNames[k],
             medians[k] / medians[0], median_ratio, scratch[0], scratch[rounds - 1]);
    }
    printf("\namp ms: median over the timed steps of the time spent in ampx_scaler_unscale\n"
           "and ampx_scaler_step/update, where the doctor works%s.\n"
           "every1 - none in amp ms: %+.4f ms a step, %.2f%% of none's step\n",
           on_cuda ? " (host time: the enqueueing)" : "", 1e3 * (amp_medians[3] - amp_medians[0]),
           100.0 * (amp_medians[3] - amp_medians[0]) / medians[0]);
  }

  {
    int same = 1;
    printf("\n%-10s %8s %12s\n", "copy", "skipped", "final loss");
    for (k = 0; k < kConfigs; ++k) {
      ampx_scaler_counters counters = AMPX_SCALER_COUNTERS_INIT;
      CHECK(ampx_scaler_get_counters(models[k].scaler, &counters));
      printf("%-10s %8lld %12.6e\n", kNames[k], (long long)counters.skipped, models[k].loss);
      same = same && models[k].loss == models[0].loss;
    }
    printf("final losses identical in all four copies: %s\n", same ? "yes" : "no");
  }

  /* What the doctors saw (after the timing: a read synchronizes). */
  printf("\n");
  for (k = 1; k < kConfigs; ++k) {
    ampx_doctor_overview overview = AMPX_DOCTOR_OVERVIEW_INIT;
    const char *summary = NULL;
    CHECK(ampx_doctor_examine(models[k].doctor, &overview));
    CHECK(ampx_doctor_summary(models[k].doctor, &summary));
    printf("%-9s steps %lld, latest sample step %lld, history %d, missed %lld: %s\n", kNames[k],
           (long long)overview.steps, (long long)overview.sample_step, overview.history_count,
           (long long)overview.missed_steps, summary);
  }

  for (k = 0; k < kConfigs; ++k) release_model(&s, &models[k]);
  ampx_tensor_release(s.x);
  ampx_tensor_release(s.target);
  ampx_autocast_release(s.autocast);
  ampx_context_release(s.ctx);
  return 0;
}
