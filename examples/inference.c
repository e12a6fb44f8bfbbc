/*
 * inference.c -- autocast inference: no grad mode, no scaler (seed 6.3).
 *
 * Serving a model needs neither gradients nor loss scaling: with grad mode
 * off (ampx_set_grad_enabled(ctx, 0, ...), torch.no_grad) ops record nothing
 * on the tape, so each activation can be freed as soon as the next layer has
 * consumed it, and autocast alone runs the matmuls in f16 or bf16.
 *
 * A 6-layer MLP (its weights stand in for a trained model's) classifies a
 * batch three ways: in fp32, under autocast f16 and under autocast bf16, all
 * with grad mode off. The program prints how far the low-precision logits
 * are from fp32 and how often the predicted class agrees, then shows what
 * grad mode off changes: the outputs do not require grad, ampx_backward
 * refuses them (nothing was recorded), no parameter gets a gradient, and the
 * forward pass peaks at less memory than the same pass with grad mode on,
 * where the tape keeps every activation alive for a backward pass.
 *
 * Run:   ampx_example_inference [--quick]
 * Exits 1 when the predictions disagree with fp32 on more than 2% of the
 * rows in f16 (5% in bf16), a tape or a gradient shows up, or grad mode off
 * saves no memory.
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

enum { kIn = 64, kHidden = 256, kClasses = 10, kLayers = 6, kMaxBatch = 1024 };

static unsigned long long rng = 31337;
static double uniform(void) { /* [-1, 1) */
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return 2.0 * (double)(rng >> 11) / 9007199254740992.0 - 1.0;
}

static ampx_tensor random_tensor(ampx_context ctx, int32_t ndim, const int64_t *shape,
                                 double bound) {
  int64_t n = 1, i;
  float *values;
  ampx_tensor t = NULL;
  for (i = 0; i < ndim; ++i) n *= shape[i];
  values = malloc((size_t)n * sizeof *values);
  if (!values) exit(1);
  for (i = 0; i < n; ++i) values[i] = (float)(bound * uniform());
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, values, (size_t)n * sizeof *values, &t));
  free(values);
  return t;
}

typedef struct model {
  ampx_tensor w[kLayers], b[kLayers];
} model;

/* No scope here on purpose: the caller owns each output, so the forward
 * pass can release an activation as soon as the next layer has used it --
 * which frees its memory only if no tape holds on to it. */
static ampx_tensor forward(const model *m, ampx_tensor x) {
  ampx_tensor h = x;
  int layer;
  CHECK(ampx_tensor_retain(x));
  for (layer = 0; layer < kLayers; ++layer) {
    ampx_tensor next = NULL;
    CHECK(ampx_linear(h, m->w[layer], m->b[layer],
                      layer + 1 < kLayers ? AMPX_ACTIVATION_RELU : AMPX_ACTIVATION_NONE, &next));
    ampx_tensor_release(h);
    h = next;
  }
  return h;
}

/* Logits as F32 on the host. */
static void read_logits(ampx_tensor logits, float *out, size_t bytes) {
  ampx_tensor logits32 = NULL;
  CHECK(ampx_tensor_cast(logits, AMPX_F32, &logits32));
  CHECK(ampx_tensor_to_host(logits32, out, bytes));
  ampx_tensor_release(logits32);
}

static int argmax(const float *row) {
  int best = 0, c;
  for (c = 1; c < kClasses; ++c)
    if (row[c] > row[best]) best = c;
  return best;
}

/* Bytes one forward pass over x adds at its peak to what the model and the
 * input hold, with grad mode as given. */
static uint64_t forward_peak(ampx_context ctx, const model *m, ampx_tensor x, int32_t grad) {
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT, after = AMPX_MEMORY_STATS_INIT;
  ampx_tensor logits = NULL;
  int32_t previous = 1;
  CHECK(ampx_set_grad_enabled(ctx, grad, &previous));
  CHECK(ampx_memory_reset_peak(ctx));
  CHECK(ampx_memory_stats_get(ctx, &before));
  logits = forward(m, x);
  CHECK(ampx_memory_stats_get(ctx, &after));
  ampx_tensor_release(logits); /* with grad on, this also drops the records */
  CHECK(ampx_set_grad_enabled(ctx, previous, NULL));
  return after.peak_bytes - before.current_bytes;
}

int main(int argc, char **argv) {
  int64_t batch = kMaxBatch;
  int i, layer;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) batch = 256;
    else {
      fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return 2;
    }
  }

  ampx_context ctx = NULL;
  CHECK(ampx_context_create(NULL, &ctx));
  model m;
  for (layer = 0; layer < kLayers; ++layer) {
    const int64_t in = layer == 0 ? kIn : kHidden, out = layer + 1 < kLayers ? kHidden : kClasses;
    const int64_t w_shape[2] = {out, in}, b_shape[1] = {out};
    m.w[layer] = random_tensor(ctx, 2, w_shape, sqrt(6.0 / (double)in)); /* He: variance kept through ReLUs */
    m.b[layer] = random_tensor(ctx, 1, b_shape, 0.1);
    /* As in a trained model, the weights are leaves that require grad:
     * only grad mode keeps them from being recorded. */
    CHECK(ampx_tensor_set_requires_grad(m.w[layer], 1));
    CHECK(ampx_tensor_set_requires_grad(m.b[layer], 1));
  }
  const int64_t x_shape[2] = {batch, kIn};
  ampx_tensor x = random_tensor(ctx, 2, x_shape, 1.7);

  static float reference[kMaxBatch * kClasses], low[kMaxBatch * kClasses];
  const size_t logits_bytes = (size_t)batch * kClasses * sizeof(float);
  const ampx_dtype dtypes[2] = {AMPX_F16, AMPX_BF16};
  int32_t previous = 1;
  int ok = 1, d;

  CHECK(ampx_set_grad_enabled(ctx, 0, &previous));
  ampx_tensor logits = forward(&m, x);
  read_logits(logits, reference, logits_bytes);
  ampx_tensor_release(logits);

  printf("dtype  logits dtype  max |logit - fp32|  argmax agrees with fp32\n");
  for (d = 0; d < 2; ++d) {
    ampx_autocast_options options = AMPX_AUTOCAST_OPTIONS_INIT;
    ampx_autocast autocast = NULL;
    ampx_dtype out_dtype = AMPX_F32;
    int32_t requires_grad = -1;
    double max_diff = 0.0;
    int agree = 0;
    options.dtype = dtypes[d];
    CHECK(ampx_autocast_create(ctx, &options, &autocast));
    CHECK(ampx_autocast_enter(autocast));
    logits = forward(&m, x);
    CHECK(ampx_autocast_exit(autocast));
    ampx_autocast_release(autocast);

    CHECK(ampx_tensor_dtype(logits, &out_dtype));
    CHECK(ampx_tensor_requires_grad(logits, &requires_grad));
    read_logits(logits, low, logits_bytes);
    for (i = 0; i < batch * kClasses; ++i)
      if (fabs(low[i] - reference[i]) > max_diff) max_diff = fabs(low[i] - reference[i]);
    for (i = 0; i < batch; ++i) agree += argmax(low + i * kClasses) == argmax(reference + i * kClasses);
    printf("%-5s  %12s  %17.4f  %6.1f%% of %lld rows\n", ampx_dtype_name(dtypes[d]),
           ampx_dtype_name(out_dtype), max_diff, 100.0 * agree / batch, (long long)batch);
    /* Random weights leave some rows with near-tied classes, which bf16's 8
     * significant bits flip more often than f16's 11. */
    ok &= out_dtype == dtypes[d] && agree >= (dtypes[d] == AMPX_F16 ? 0.98 : 0.95) * batch &&
          requires_grad == 0;

    /* Nothing was recorded, so there is nothing to backpropagate. */
    if (d == 0) {
      ampx_tensor total = NULL;
      ampx_status refused;
      CHECK(ampx_sum(logits, &total));
      refused = ampx_backward(total, NULL);
      printf("backward on the output: %s (%s)\n", ampx_status_string(refused),
             refused == AMPX_OK ? "it ran" : ampx_last_error());
      ok &= refused != AMPX_OK;
      ampx_tensor_release(total);
    }
    ampx_tensor_release(logits);
  }
  CHECK(ampx_set_grad_enabled(ctx, previous, NULL));

  int with_grad = 0;
  for (layer = 0; layer < kLayers; ++layer) {
    ampx_tensor g = NULL;
    CHECK(ampx_tensor_grad(m.w[layer], &g));
    with_grad += g != NULL;
    CHECK(ampx_tensor_grad(m.b[layer], &g));
    with_grad += g != NULL;
  }
  printf("parameters with a gradient: %d of %d\n", with_grad, 2 * kLayers);

  const uint64_t peak_off = forward_peak(ctx, &m, x, 0), peak_on = forward_peak(ctx, &m, x, 1);
  printf("forward pass peak over the weights: %llu bytes with grad mode off, %llu with it on\n",
         (unsigned long long)peak_off, (unsigned long long)peak_on);
  ok &= with_grad == 0 && peak_off < peak_on;
  if (ok) printf("no tape recorded, no gradients: inference needs no scaler and no backward state\n");

  ampx_tensor_release(x);
  for (layer = 0; layer < kLayers; ++layer) {
    ampx_tensor_release(m.w[layer]);
    ampx_tensor_release(m.b[layer]);
  }
  ampx_context_release(ctx);
  if (!ok) fprintf(stderr, "FAILED: see the lines above\n");
  return ok ? 0 : 1;
}
