/*
 * bench_fp8_gpu.c -- FP8 against bf16 on the GPU, side by side in one run:
 *
 *  1. linear throughput (forward, no grad): y = x W^T under bf16 autocast
 *     and under FP8 autocast (quantization of x and W with their recipe
 *     scales included, as every FP8 linear pays it), for M x K x N =
 *     1024 x 2048 x 1024 (where torchao measured FP8 at 0.80x bf16 on an
 *     H100) and 4096 x 8192 x 16384 (1.39x); TFLOP/s = 2 M K N / time;
 *  2. a training step of an MLP of 8 linear layers 4096 x 4096 (ReLU
 *     between, MSE loss, AdamW), batch 8192, forward + backward + step
 *     (+ the recipe's update for FP8);
 * with the fraction of the device's dense FP8 peak each FP8 product
 * reached (the peak from a table of known devices by name; "?" otherwise).
 *
 * Timing: each case runs 3 times unmeasured, then `repeats` times between
 * two synchronizations; the median of 5 such rounds is printed. Prints
 * "SKIPPED: no CUDA device" (exit 0) without a GPU, and the reason the FP8
 * column is missing on a device without FP8 products.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ampx/ampx.h"

#define CHECK(call)                                                          \
  do {                                                                       \
    ampx_status status_ = (call);                                            \
    if (status_ != AMPX_OK) {                                                \
      fprintf(stderr, "%s failed: %s\n", #call, ampx_last_error());          \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Dense FP8 (E4M3, fp32 accumulation) tensor-core peak in TFLOP/s of known
 * devices, from NVIDIA's data sheets; 0 when unknown. */
static double fp8_peak_tflops(const char *name) {
  if (strstr(name, "H100") && strstr(name, "PCIe")) return 1513.0;
  if (strstr(name, "H100") || strstr(name, "H200") || strstr(name, "H800")) return 1979.0;
  if (strstr(name, "L40S")) return 733.0;
  if (strstr(name, "L4")) return 242.5;
  return 0.0;
}

static ampx_tensor random_tensor(ampx_context ctx, ampx_dtype dtype, int64_t rows, int64_t cols,
                                 float bound, uint64_t seed) {
  const size_t n = (size_t)(rows * cols);
  float *host = malloc(n * sizeof(float));
  if (!host) exit(1);
  uint64_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    host[i] = bound * ((float)(s >> 40) / 8388608.0f - 1.0f);
  }
  const int64_t shape[2] = {rows, cols};
  ampx_tensor f32 = NULL, out = NULL;
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, 2, shape, host, n * sizeof(float), &f32));
  free(host);
  if (dtype == AMPX_F32) return f32;
  CHECK(ampx_tensor_cast(f32, dtype, &out));
  ampx_tensor_release(f32);
  return out;
}

typedef void (*work_fn)(void *state);

/* Median seconds per call of fn over 5 rounds of `repeats` calls. */
static double time_it(ampx_context ctx, work_fn fn, void *state, int repeats) {
  double rounds[5];
  for (int i = 0; i < 3; ++i) fn(state);
  CHECK(ampx_context_synchronize(ctx));
  for (int r = 0; r < 5; ++r) {
    const double t0 = now();
    for (int i = 0; i < repeats; ++i) fn(state);
    CHECK(ampx_context_synchronize(ctx));
    rounds[r] = (now() - t0) / repeats;
  }
  qsort(rounds, 5, sizeof rounds[0], compare);
  return rounds[2];
}

/* ---- linear ------------------------------------------------------------------ */

typedef struct linear_case {
  ampx_context ctx;
  ampx_autocast policy;
  ampx_fp8_recipe recipe; /* NULL for bf16 */
  ampx_tensor x, w;
} linear_case;

static void run_linear(void *p) {
  linear_case *c = p;
  CHECK(ampx_scope_push(c->ctx));
  CHECK(ampx_autocast_enter(c->policy));
  ampx_tensor y = NULL;
  CHECK(ampx_linear(c->x, c->w, NULL, AMPX_ACTIVATION_NONE, &y));
  CHECK(ampx_autocast_exit(c->policy));
  CHECK(ampx_scope_pop(c->ctx));
}

/* ---- MLP step ---------------------------------------------------------------- */

enum { kLayers = 8, kWidth = 4096, kBatch = 8192 };

typedef struct mlp_case {
  ampx_context ctx;
  ampx_autocast policy;
  ampx_fp8_recipe recipe;
  ampx_tensor params[2 * kLayers];
  ampx_tensor x, target;
  ampx_optimizer opt;
} mlp_case;

static void run_mlp_step(void *p) {
  mlp_case *c = p;
  CHECK(ampx_scope_push(c->ctx));
  CHECK(ampx_optimizer_zero_grad(c->opt));
  CHECK(ampx_autocast_enter(c->policy));
  ampx_tensor h = c->x, loss = NULL;
  for (int l = 0; l < kLayers; ++l)
    CHECK(ampx_linear(h, c->params[2 * l], c->params[2 * l + 1],
                      l + 1 < kLayers ? AMPX_ACTIVATION_RELU : AMPX_ACTIVATION_NONE, &h));
  CHECK(ampx_mse_loss(h, c->target, AMPX_REDUCTION_MEAN, &loss));
  CHECK(ampx_autocast_exit(c->policy));
  CHECK(ampx_backward(loss, NULL));
  CHECK(ampx_optimizer_step(c->opt));
  if (c->recipe) CHECK(ampx_fp8_recipe_update(c->recipe));
  CHECK(ampx_scope_pop(c->ctx));
}

/* A bf16 policy, made FP8 with `recipe` (when not NULL) and no size
 * threshold: every product measured runs in FP8. *status is set_fp8's
 * (NOT_SUPPORTED below compute capability 8.9). */
static ampx_autocast make_policy(ampx_context ctx, ampx_fp8_recipe recipe, ampx_status *status) {
  ampx_autocast_options o = AMPX_AUTOCAST_OPTIONS_INIT;
  o.dtype = AMPX_BF16;
  ampx_autocast policy = NULL;
  CHECK(ampx_autocast_create(ctx, &o, &policy));
  *status = recipe ? ampx_autocast_set_fp8(policy, recipe, 0) : AMPX_OK;
  return policy;
}

int main(void) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 || ampx_cuda_device_count() == 0) {
    printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  struct cudaDeviceProp props;
  if (cudaGetDeviceProperties(&props, 0) != cudaSuccess) {
    fprintf(stderr, "cudaGetDeviceProperties failed\n");
    return 1;
  }
  const double peak = fp8_peak_tflops(props.name);
  printf("bench_fp8_gpu: %s (compute capability %d.%d); dense FP8 peak %s\n", props.name,
         props.major, props.minor, peak > 0 ? "from the data sheet" : "unknown");

  ampx_context_options co = AMPX_CONTEXT_OPTIONS_INIT;
  co.device_type = AMPX_DEVICE_CUDA;
  ampx_context ctx = NULL;
  CHECK(ampx_context_create(&co, &ctx));
  ampx_status status = AMPX_OK;
  ampx_autocast bf16 = make_policy(ctx, NULL, &status);
  CHECK(status);
  ampx_fp8_recipe recipe = NULL;
  CHECK(ampx_fp8_recipe_create(ctx, NULL, &recipe));
  ampx_autocast fp8 = make_policy(ctx, recipe, &status);
  if (status != AMPX_OK) {
    printf("FP8: not measured: %s\n", ampx_last_error());
    ampx_autocast_release(fp8);
    fp8 = NULL;
  }

  /* 1. linear, forward only. */
  CHECK(ampx_set_grad_enabled(ctx, 0, NULL));
  const int64_t shapes[2][3] = {{1024, 2048, 1024}, {4096, 8192, 16384}};
  printf("\nlinear forward (y = x W^T, bf16 output), median of 5 rounds\n");
  printf("%-22s %12s %12s %12s %12s %8s %10s\n", "M x K x N", "bf16 (ms)", "bf16 TFLOP/s",
         "fp8 (ms)", "fp8 TFLOP/s", "fp8/bf16", "FP8 peak");
  for (int s = 0; s < 2; ++s) {
    const int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
    linear_case c = {ctx, bf16, NULL, random_tensor(ctx, AMPX_BF16, m, k, 2.0f, 1),
                     random_tensor(ctx, AMPX_BF16, n, k, 0.05f, 2)};
    const double flops = 2.0 * (double)m * (double)k * (double)n;
    const int repeats = s == 0 ? 50 : 5;
    const double t_bf16 = time_it(ctx, run_linear, &c, repeats);
    printf("%5lld x %5lld x %5lld  %12.3f %12.1f", (long long)m, (long long)k, (long long)n,
           1e3 * t_bf16, flops / t_bf16 / 1e12);
    if (fp8) {
      c.policy = fp8;
      const double t_fp8 = time_it(ctx, run_linear, &c, repeats);
      char fraction[16] = "?";
      if (peak > 0) snprintf(fraction, sizeof fraction, "%.1f%%", 100.0 * flops / t_fp8 / 1e12 / peak);
      printf(" %12.3f %12.1f %7.2fx %10s\n", 1e3 * t_fp8, flops / t_fp8 / 1e12, t_bf16 / t_fp8,
             fraction);
    } else {
      printf(" %12s %12s %8s %10s\n", "-", "-", "-", "-");
    }
    ampx_tensor_release(c.x);
    ampx_tensor_release(c.w);
  }
  CHECK(ampx_set_grad_enabled(ctx, 1, NULL));

  /* 2. The MLP step. */
  printf("\nMLP step: %d x linear %d x %d (ReLU), batch %d, MSE, AdamW; forward + backward + "
         "step\n", kLayers, kWidth, kWidth, kBatch);
  mlp_case mlp;
  memset(&mlp, 0, sizeof mlp);
  mlp.ctx = ctx;
  const int64_t bias_shape[1] = {kWidth};
  for (int l = 0; l < kLayers; ++l) {
    mlp.params[2 * l] = random_tensor(ctx, AMPX_F32, kWidth, kWidth, 0.027f, 10 + (uint64_t)l);
    CHECK(ampx_tensor_zeros(ctx, AMPX_F32, 1, bias_shape, &mlp.params[2 * l + 1]));
    CHECK(ampx_tensor_set_requires_grad(mlp.params[2 * l], 1));
    CHECK(ampx_tensor_set_requires_grad(mlp.params[2 * l + 1], 1));
  }
  mlp.x = random_tensor(ctx, AMPX_F32, kBatch, kWidth, 1.0f, 99);
  mlp.target = random_tensor(ctx, AMPX_F32, kBatch, kWidth, 0.1f, 98);
  ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
  CHECK(ampx_optimizer_create_adam(ctx, mlp.params, 2 * kLayers, &adam, &mlp.opt));
  mlp.policy = bf16;
  const double step_bf16 = time_it(ctx, run_mlp_step, &mlp, 3);
  printf("%-10s %10.2f ms/step\n", "bf16", 1e3 * step_bf16);
  if (fp8) {
    mlp.policy = fp8;
    mlp.recipe = recipe;
    const double step_fp8 = time_it(ctx, run_mlp_step, &mlp, 3);
    /* The step's FP8 products: forward, dgrad and wgrad per layer (the
     * first layer's dgrad is not needed: x has no gradient). */
    const double flops = 2.0 * kBatch * (double)kWidth * kWidth * (3 * kLayers - 1);
    char fraction[16] = "?";
    if (peak > 0)
      snprintf(fraction, sizeof fraction, "%.1f%%", 100.0 * flops / step_fp8 / 1e12 / peak);
    printf("%-10s %10.2f ms/step   fp8/bf16 %.2fx   products at %s of the FP8 peak (whole "
           "step's time)\n",
           "fp8", 1e3 * step_fp8, step_bf16 / step_fp8, fraction);
    ampx_fp8_stats stats = AMPX_FP8_STATS_INIT;
    CHECK(ampx_autocast_fp8_stats(fp8, &stats));
    printf("           %lld products in FP8, %lld fell back to bf16%s%s\n",
           (long long)stats.fp8_products, (long long)stats.fallbacks,
           stats.fallbacks ? ": " : "", stats.fallbacks ? stats.last_fallback : "");
  }
  ampx_optimizer_release(mlp.opt);
  for (int i = 0; i < 2 * kLayers; ++i) ampx_tensor_release(mlp.params[i]);
  ampx_tensor_release(mlp.x);
  ampx_tensor_release(mlp.target);
  ampx_autocast_release(fp8);
  ampx_autocast_release(bf16);
  ampx_fp8_recipe_release(recipe);
  ampx_context_release(ctx);
  return 0;
}
