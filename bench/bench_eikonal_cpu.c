/*
 * bench_eikonal_cpu.c -- one eikonal training step of a neural SDF in
 * ampx, timed: the ampx half of bench/bench_eikonal_vs_torch_cpu.py, which
 * runs the same step in PyTorch side by side and prints the ratios. Runs
 * alone too.
 *
 *   bench_eikonal_cpu WIDTH POINTS PRECISION THREADS STEPS
 *     PRECISION: fp32 | bf16 (autocast BF16, no scaler) | fp16 (autocast
 *     F16 with a dynamic loss scaler, the gradient-penalty recipe)
 *
 * The step, as torch's `f = mlp(p); g, = torch.autograd.grad(f.sum(), p,
 * create_graph=True); loss = (f ** 2).mean() + ((g.norm(dim=1) - 1) **
 * 2).mean(); loss.backward(); opt.step(); opt.zero_grad()`: an MLP 2 ->
 * WIDTH -> WIDTH -> WIDTH -> 1 with GELU, POINTS random points of [-1, 1]^2
 * that require grad, Adam. Prints the median milliseconds per step over
 * STEPS timed steps (after 3 warm-up steps) as `ms_per_step <value>`, and
 * the largest bytes the context's allocator held during the timed steps
 * (create_graph keeps the forward's tape alive through the second backward)
 * as `peak_bytes <value>`, and the growth of the process's resident set
 * from before the first step to its high-water mark after the last (read
 * from /proc/self/status; 0 where that file is absent) as
 * `rss_growth_bytes <value>`, the measure the PyTorch side prints too.
 */
#ifndef AMPX_EXPERIMENTAL
#define AMPX_EXPERIMENTAL
#endif
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ampx/ampx.h"

#define LAYERS 4

#define CHECK(call)                                                                       \
  do {                                                                                    \
    ampx_status status_ = (call);                                                         \
    if (status_ != AMPX_OK) {                                                             \
      fprintf(stderr, "bench_eikonal_cpu: %s failed: %s\n", #call, ampx_last_error());    \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static unsigned lcg = 12345u;

static float uniform(float bound) {
  lcg = lcg * 1664525u + 1013904223u;
  return ((float)(lcg >> 8) / 16777216.0f * 2.0f - 1.0f) * bound;
}

static ampx_tensor filled(ampx_context ctx, int ndim, const int64_t *shape, float bound) {
  int64_t n = 1, i;
  float *values;
  ampx_tensor t = NULL;
  for (i = 0; i < ndim; ++i) n *= shape[i];
  values = malloc((size_t)n * sizeof *values);
  for (i = 0; i < n; ++i) values[i] = uniform(bound);
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, values, (size_t)n * sizeof *values, &t));
  CHECK(ampx_tensor_set_requires_grad(t, 1));
  free(values);
  return t;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A field of /proc/self/status ("VmRSS:", "VmHWM:") in bytes; 0 if absent. */
static unsigned long long status_bytes(const char *field) {
  char line[256];
  unsigned long long kib = 0;
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, strlen(field)) == 0) kib = strtoull(line + strlen(field), NULL, 10);
  fclose(f);
  return kib * 1024ull;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  ampx_context_options options = ampx_context_options_default();
  ampx_adam_options adam = ampx_adam_options_default();
  ampx_autocast_options policy_options = ampx_autocast_options_default();
  ampx_grad_options grad_options = ampx_grad_options_default();
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  ampx_context ctx = NULL;
  ampx_autocast policy = NULL;
  ampx_scaler scaler = NULL;
  ampx_optimizer opt = NULL;
  ampx_tensor points = NULL, params[2 * LAYERS];
  double *times;
  int width, npoints, threads, steps, layer, step;
  unsigned long long rss_before, rss_peak;
  const char *precision;

  if (argc != 6) {
    fprintf(stderr, "usage: bench_eikonal_cpu WIDTH POINTS fp32|bf16|fp16 THREADS STEPS\n");
    return 2;
  }
  width = atoi(argv[1]);
  npoints = atoi(argv[2]);
  precision = argv[3];
  threads = atoi(argv[4]);
  steps = atoi(argv[5]);
  if (width < 1 || npoints < 1 || threads < 1 || steps < 1 ||
      (strcmp(precision, "fp32") && strcmp(precision, "bf16") && strcmp(precision, "fp16"))) {
    fprintf(stderr, "bench_eikonal_cpu: bad arguments\n");
    return 2;
  }
  options.num_threads = threads;
  CHECK(ampx_context_create(&options, &ctx));
  {
    const int64_t p_shape[2] = {npoints, 2};
    points = filled(ctx, 2, p_shape, 1.0f);
  }
  for (layer = 0; layer < LAYERS; ++layer) {
    const int64_t in = layer == 0 ? 2 : width, out = layer == LAYERS - 1 ? 1 : width;
    const int64_t w_shape[2] = {out, in}, b_shape[1] = {out};
    params[2 * layer] = filled(ctx, 2, w_shape, 1.0f / (float)in);
    params[2 * layer + 1] = filled(ctx, 1, b_shape, 0.1f);
  }
  CHECK(ampx_optimizer_create_adam(ctx, params, 2 * LAYERS, &adam, &opt));
  if (strcmp(precision, "fp32") != 0) {
    policy_options.dtype = strcmp(precision, "bf16") == 0 ? AMPX_BF16 : AMPX_F16;
    CHECK(ampx_autocast_create(ctx, &policy_options, &policy));
  }
  if (strcmp(precision, "fp16") == 0) CHECK(ampx_scaler_create(ctx, NULL, &scaler));
  grad_options.create_graph = 1;

  times = malloc((size_t)steps * sizeof *times);
  rss_before = status_bytes("VmRSS:");
  for (step = -3; step < steps; ++step) {
    ampx_tensor h = points, f = NULL, total = NULL, seed = NULL, g = NULL, sq = NULL;
    ampx_tensor norm2 = NULL, norm = NULL, off = NULL, off2 = NULL, e = NULL, f2 = NULL;
    ampx_tensor m = NULL, loss = NULL;
    const int32_t dim = 1;
    const double start = now();
    if (step == 0) CHECK(ampx_memory_reset_peak(ctx));
    CHECK(ampx_scope_push(ctx));
    if (policy) CHECK(ampx_autocast_enter(policy));
    for (layer = 0; layer < LAYERS; ++layer) {
      const ampx_activation act = layer == LAYERS - 1 ? AMPX_ACTIVATION_NONE : AMPX_ACTIVATION_GELU;
      CHECK(ampx_linear(h, params[2 * layer], params[2 * layer + 1], act, &h));
    }
    f = h;
    if (policy) CHECK(ampx_autocast_exit(policy));
    CHECK(ampx_sum(f, &total));
    if (scaler) {
      ampx_tensor scaled_g = NULL;
      CHECK(ampx_scaler_scale_loss(scaler, total, &seed));
      CHECK(ampx_grad(&seed, 1, NULL, &points, 1, &grad_options, &scaled_g));
      ampx_tensor_release(seed);
      CHECK(ampx_scaler_unscale_tensor(scaler, scaled_g, &g));
    } else {
      CHECK(ampx_grad(&total, 1, NULL, &points, 1, &grad_options, &g));
    }
    if (policy) CHECK(ampx_autocast_enter(policy));
    CHECK(ampx_mul(g, g, &sq));
    CHECK(ampx_sum_dims(sq, &dim, 1, 0, &norm2));
    CHECK(ampx_sqrt(norm2, &norm));
    CHECK(ampx_affine(norm, 1.0, -1.0, &off));
    CHECK(ampx_mul(off, off, &off2));
    CHECK(ampx_mean(off2, &e));
    CHECK(ampx_mul(f, f, &f2));
    CHECK(ampx_mean(f2, &m));
    CHECK(ampx_add(m, e, &loss));
    if (policy) CHECK(ampx_autocast_exit(policy));
    CHECK(ampx_backward(loss, scaler));
    if (scaler) {
      CHECK(ampx_scaler_step(scaler, opt));
      CHECK(ampx_scaler_update(scaler));
    } else {
      CHECK(ampx_optimizer_step(opt));
    }
    CHECK(ampx_optimizer_zero_grad(opt));
    CHECK(ampx_scope_pop(ctx));
    if (step >= 0) times[step] = now() - start;
  }
  CHECK(ampx_memory_stats_get(ctx, &stats));
  rss_peak = status_bytes("VmHWM:");
  qsort(times, (size_t)steps, sizeof *times, by_value);
  printf("peak_bytes %llu\n", (unsigned long long)stats.peak_bytes);
  printf("rss_growth_bytes %llu\n", rss_peak > rss_before ? rss_peak - rss_before : 0ull);
  printf("ms_per_step %.4f\n", 1e3 * times[steps / 2]);

  free(times);
  ampx_autocast_release(policy);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  for (layer = 0; layer < 2 * LAYERS; ++layer) ampx_tensor_release(params[layer]);
  ampx_tensor_release(points);
  ampx_context_release(ctx);
  return 0;
}
