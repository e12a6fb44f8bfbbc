/*
 * bench_checkpoint.c -- what gradient checkpointing (ampx_checkpoint_segment) saves
 * and costs: one training step of a residual MLP, run directly and with
 * every block checkpointed, on the best device present. Prints the peak
 * bytes held (ampx_memory_stats) and the time per step of both, measured
 * alternately in one run.
 *
 *   bench_checkpoint [blocks] [width] [batch]     (defaults 8 256 256)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ampx/ampx.h"

#define CHECK(call)                                                        \
  do {                                                                     \
    ampx_status status_ = (call);                                          \
    if (status_ != AMPX_OK) {                                              \
      fprintf(stderr, "%s failed: %s\n", #call, ampx_last_error());       \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

typedef struct block {
  ampx_tensor w1, b1, w2;
} block;

static ampx_status block_segment(void *user_data, const ampx_tensor *inputs, size_t input_count,
                                 ampx_tensor *outputs, size_t output_count) {
  const block *b = (const block *)user_data;
  ampx_tensor hidden = NULL, projected = NULL;
  ampx_status s;
  (void)input_count;
  (void)output_count;
  s = ampx_linear(inputs[0], b->w1, b->b1, AMPX_ACTIVATION_GELU, &hidden);
  if (s == AMPX_OK) s = ampx_linear(hidden, b->w2, NULL, AMPX_ACTIVATION_NONE, &projected);
  if (s == AMPX_OK) s = ampx_add(inputs[0], projected, &outputs[0]);
  return s;
}

static ampx_tensor random_tensor(ampx_context ctx, int64_t rows, int64_t cols, float scale,
                                 unsigned *seed) {
  const int64_t shape[2] = {rows, cols};
  const int ndim = rows > 0 ? 2 : 1;
  const int64_t n = (rows > 0 ? rows : 1) * cols;
  float *values = malloc((size_t)n * sizeof *values);
  ampx_tensor t = NULL;
  int64_t i;
  for (i = 0; i < n; ++i) {
    *seed = *seed * 1664525u + 1013904223u;
    values[i] = ((float)(*seed >> 8) / 16777216.0f - 0.5f) * scale;
  }
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, ndim == 2 ? shape : &shape[1], values,
                              (size_t)n * sizeof *values, &t));
  free(values);
  return t;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One step; returns seconds and stores the peak bytes. */
static double step(ampx_context ctx, block *blocks, int count, ampx_tensor x, int checkpointed,
                   unsigned long long *peak) {
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  ampx_tensor h = x, loss = NULL;
  double start;
  int i;
  CHECK(ampx_context_synchronize(ctx));
  CHECK(ampx_memory_reset_peak(ctx));
  start = now();
  CHECK(ampx_scope_push(ctx));
  for (i = 0; i < count; ++i) {
    ampx_tensor out = NULL;
    if (checkpointed) {
      ampx_segment segment = AMPX_SEGMENT_INIT;
      segment.fn = block_segment;
      segment.user_data = &blocks[i];
      CHECK(ampx_checkpoint_segment(ctx, &segment, &h, 1, &out, 1));
    } else
      CHECK(block_segment(&blocks[i], &h, 1, &out, 1));
    h = out;
  }
  CHECK(ampx_mean(h, &loss));
  CHECK(ampx_backward(loss, NULL));
  CHECK(ampx_scope_pop(ctx));
  CHECK(ampx_context_synchronize(ctx));
  CHECK(ampx_memory_stats_get(ctx, &stats));
  *peak = (unsigned long long)stats.peak_bytes;
  return now() - start;
}

int main(int argc, char **argv) {
  const int count = argc > 1 ? atoi(argv[1]) : 8;
  const int64_t width = argc > 2 ? atoll(argv[2]) : 256;
  const int64_t batch = argc > 3 ? atoll(argv[3]) : 256;
  const int64_t hidden = 4 * width;
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  ampx_context ctx = NULL;
  block *blocks = calloc((size_t)count, sizeof *blocks);
  unsigned seed = 7;
  unsigned long long peak[2] = {0, 0}, base = 0;
  double best[2] = {1e30, 1e30};
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  ampx_tensor x;
  int i, round;

  if (ampx_cuda_device_count() > 0) options.device_type = AMPX_DEVICE_CUDA;
  if (ampx_context_create(&options, &ctx) != AMPX_OK) {
    printf("SKIPPED: %s\n", ampx_last_error());
    return 0;
  }
  for (i = 0; i < count; ++i) {
    blocks[i].w1 = random_tensor(ctx, hidden, width, 0.1f, &seed);
    blocks[i].b1 = random_tensor(ctx, 0, hidden, 0.1f, &seed);
    blocks[i].w2 = random_tensor(ctx, width, hidden, 0.05f, &seed);
    CHECK(ampx_tensor_set_requires_grad(blocks[i].w1, 1));
    CHECK(ampx_tensor_set_requires_grad(blocks[i].b1, 1));
    CHECK(ampx_tensor_set_requires_grad(blocks[i].w2, 1));
  }
  x = random_tensor(ctx, batch, width, 2.0f, &seed);
  /* One untimed step each way first: gradients get allocated once. */
  step(ctx, blocks, count, x, 0, &peak[0]);
  step(ctx, blocks, count, x, 1, &peak[1]);
  CHECK(ampx_memory_stats_get(ctx, &stats));
  base = (unsigned long long)stats.current_bytes;
  for (round = 0; round < 3; ++round)
    for (i = 0; i < 2; ++i) {
      const double t = step(ctx, blocks, count, x, i, &peak[i]);
      if (t < best[i]) best[i] = t;
    }
  printf("ampx %s on %s: %d residual blocks %lld -> %lld -> %lld, batch %lld, fp32\n",
         ampx_version_string(), options.device_type == AMPX_DEVICE_CUDA ? "CUDA" : "the CPU",
         count, (long long)width, (long long)hidden, (long long)width, (long long)batch);
  printf("parameters + gradients held throughout: %.1f MiB\n\n", base / 1048576.0);
  printf("%-14s %14s %16s %12s\n", "run", "peak MiB", "activations MiB", "ms/step");
  for (i = 0; i < 2; ++i)
    printf("%-14s %14.1f %16.1f %12.1f\n", i ? "checkpointed" : "direct", peak[i] / 1048576.0,
           (peak[i] - base) / 1048576.0, best[i] * 1e3);
  printf("\ncheckpointing: activation memory x%.2f, time x%.2f (best of 3 each, alternated)\n",
         (double)(peak[1] - base) / (double)(peak[0] - base), best[1] / best[0]);

  for (i = 0; i < count; ++i) {
    ampx_tensor_release(blocks[i].w1);
    ampx_tensor_release(blocks[i].b1);
    ampx_tensor_release(blocks[i].w2);
  }
  free(blocks);
  ampx_tensor_release(x);
  ampx_context_release(ctx);
  return 0;
}
