/*
 * bench_mlp_cpu.c -- one MLP classifier training step in ampx, timed: the
 * ampx half of bench/bench_vs_torch_cpu.py, which runs the same step in
 * PyTorch side by side and prints the ratios. Runs alone too.
 *
 *   bench_mlp_cpu WIDTH DEPTH BATCH PRECISION THREADS STEPS
 *     PRECISION: fp32 | bf16 (autocast BF16, no scaler) | fp16 (autocast
 *     F16 with a dynamic loss scaler)
 *
 * The step: DEPTH linear layers of WIDTH (ReLU between, the last one to 10
 * classes), cross-entropy (mean), backward, AdamW step, zero_grad -- as
 * torch's `opt.zero_grad(); loss = F.cross_entropy(model(x), y);
 * loss.backward(); opt.step()`. Prints the median milliseconds per step over
 * STEPS timed steps (after 3 warm-up steps) as `ms_per_step <value>`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ampx/ampx.h"

#define CLASSES 10
#define MAX_DEPTH 16

#define CHECK(call)                                                                       \
  do {                                                                                    \
    ampx_status status_ = (call);                                                         \
    if (status_ != AMPX_OK) {                                                             \
      fprintf(stderr, "bench_mlp_cpu: %s failed: %s\n", #call, ampx_last_error());        \
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
  free(values);
  return t;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  ampx_context_options options = ampx_context_options_default();
  ampx_adam_options adamw = ampx_adamw_options_default();
  ampx_autocast_options policy_options = ampx_autocast_options_default();
  ampx_context ctx = NULL;
  ampx_autocast policy = NULL;
  ampx_scaler scaler = NULL;
  ampx_optimizer opt = NULL;
  ampx_tensor x = NULL, y = NULL, params[2 * MAX_DEPTH];
  int64_t *labels;
  double *times;
  int width, depth, batch, threads, steps, layer, step;
  const char *precision;

  if (argc != 7) {
    fprintf(stderr, "usage: bench_mlp_cpu WIDTH DEPTH BATCH fp32|bf16|fp16 THREADS STEPS\n");
    return 2;
  }
  width = atoi(argv[1]);
  depth = atoi(argv[2]);
  batch = atoi(argv[3]);
  precision = argv[4];
  threads = atoi(argv[5]);
  steps = atoi(argv[6]);
  if (width < 1 || depth < 1 || depth > MAX_DEPTH || batch < 1 || threads < 1 || steps < 1 ||
      (strcmp(precision, "fp32") && strcmp(precision, "bf16") && strcmp(precision, "fp16"))) {
    fprintf(stderr, "bench_mlp_cpu: bad arguments\n");
    return 2;
  }

  options.num_threads = threads;
  CHECK(ampx_context_create(&options, &ctx));
  {
    const int64_t x_shape[2] = {batch, width}, y_shape[1] = {batch};
    x = filled(ctx, 2, x_shape, 1.0f);
    labels = malloc((size_t)batch * sizeof *labels);
    for (layer = 0; layer < batch; ++layer) labels[layer] = layer % CLASSES;
    CHECK(ampx_tensor_from_host(ctx, AMPX_I64, 1, y_shape, labels,
                                (size_t)batch * sizeof *labels, &y));
  }
  for (layer = 0; layer < depth; ++layer) {
    const int64_t out = layer == depth - 1 ? CLASSES : width;
    const int64_t w_shape[2] = {out, width}, b_shape[1] = {out};
    const float bound = 1.0f / 32.0f;
    params[2 * layer] = filled(ctx, 2, w_shape, bound);
    params[2 * layer + 1] = filled(ctx, 1, b_shape, bound);
    CHECK(ampx_tensor_set_requires_grad(params[2 * layer], 1));
    CHECK(ampx_tensor_set_requires_grad(params[2 * layer + 1], 1));
  }
  CHECK(ampx_optimizer_create_adam(ctx, params, (size_t)(2 * depth), &adamw, &opt));
  if (strcmp(precision, "fp32") != 0) {
    policy_options.dtype = strcmp(precision, "bf16") == 0 ? AMPX_BF16 : AMPX_F16;
    CHECK(ampx_autocast_create(ctx, &policy_options, &policy));
  }
  if (strcmp(precision, "fp16") == 0) CHECK(ampx_scaler_create(ctx, NULL, &scaler));

  times = malloc((size_t)steps * sizeof *times);
  for (step = -3; step < steps; ++step) {
    ampx_tensor h = x, loss = NULL;
    const double start = now();
    CHECK(ampx_scope_push(ctx));
    if (policy) CHECK(ampx_autocast_enter(policy));
    for (layer = 0; layer < depth; ++layer) {
      const ampx_activation act = layer == depth - 1 ? AMPX_ACTIVATION_NONE : AMPX_ACTIVATION_RELU;
      CHECK(ampx_linear(h, params[2 * layer], params[2 * layer + 1], act, &h));
    }
    CHECK(ampx_cross_entropy(h, y, AMPX_REDUCTION_MEAN, -100, &loss));
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
  qsort(times, (size_t)steps, sizeof *times, by_value);
  printf("ms_per_step %.4f\n", 1e3 * times[steps / 2]);

  free(times);
  free(labels);
  ampx_autocast_release(policy);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  for (layer = 0; layer < 2 * depth; ++layer) ampx_tensor_release(params[layer]);
  ampx_tensor_release(x);
  ampx_tensor_release(y);
  ampx_context_release(ctx);
  return 0;
}
