/*
 * train_mlp.c -- the standard mixed-precision training loop (seed 3.2).
 *
 * A 2 -> 64 -> 64 -> 3 MLP learns to tell three concentric rings of 2-D
 * points apart (not linearly separable, so the hidden layers matter). Every
 * step is torch.amp's canonical recipe:
 *
 *   forward and loss under autocast (f16 matmuls, fp32 loss)
 *   backward seeded with the loss scale        ampx_backward(loss, scaler)
 *   unscale, so clipping sees true gradients   ampx_scaler_unscale
 *   clip by total norm                         ampx_clip_grad_norm
 *   step (skipped on the device on inf/NaN)    ampx_scaler_step
 *   grow or back off the scale                 ampx_scaler_update
 *
 * The parameters stay F32 (autocast casts them per region, as torch does);
 * AdamW keeps its moments in fp32. Each step runs inside a scope, so no
 * intermediate tensor is released by hand.
 *
 * Run:   ampx_example_train_mlp [--quick] [--steps N]
 * Prints the loss, the scale and the batch accuracy as it trains, then the
 * accuracy on the whole data set; exits 1 if that is below 90%.
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

enum { kIn = 2, kHidden = 64, kClasses = 3, kSamples = 1536, kBatch = 128 };

static unsigned long long rng = 12345;

static double uniform(void) { /* [0, 1) */
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static float data_x[kSamples * kIn];
static int64_t data_y[kSamples];

/* Class c lies on the ring of radius c + 1 with +-0.4 of radial noise: the
 * rings are 0.2 apart at their closest, so a good classifier nears 100%
 * but has to find the circular boundaries first. */
static void make_rings(void) {
  int i;
  for (i = 0; i < kSamples; ++i) {
    const int c = i % kClasses;
    const double angle = 6.283185307179586 * uniform();
    const double radius = c + 1.0 + 0.8 * (uniform() - 0.5);
    data_x[i * kIn + 0] = (float)(radius * cos(angle));
    data_x[i * kIn + 1] = (float)(radius * sin(angle));
    data_y[i] = c;
  }
}

typedef struct mlp {
  ampx_tensor w1, b1, w2, b2, w3, b3;
} mlp;

/* A [rows, fan_in] weight, or with bias set a [rows] bias, uniform in
 * +-1/sqrt(fan_in) as torch's nn.Linear initialises both. */
static ampx_tensor make_param(ampx_context ctx, int64_t rows, int64_t fan_in, int bias) {
  const int64_t shape[2] = {rows, fan_in};
  const int64_t n = bias ? rows : rows * fan_in;
  const double bound = 1.0 / sqrt((double)fan_in);
  float *values = malloc((size_t)n * sizeof *values);
  ampx_tensor t = NULL;
  int64_t i;
  if (!values) exit(1);
  for (i = 0; i < n; ++i) values[i] = (float)(bound * (2.0 * uniform() - 1.0));
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, bias ? 1 : 2, shape, values,
                              (size_t)n * sizeof *values, &t));
  CHECK(ampx_tensor_set_requires_grad(t, 1));
  free(values);
  return t;
}

/* Logits, owned by the open scope. */
static ampx_tensor forward(const mlp *m, ampx_tensor x) {
  ampx_tensor h1 = NULL, h2 = NULL, logits = NULL;
  CHECK(ampx_linear(x, m->w1, m->b1, AMPX_ACTIVATION_RELU, &h1));
  CHECK(ampx_linear(h1, m->w2, m->b2, AMPX_ACTIVATION_RELU, &h2));
  CHECK(ampx_linear(h2, m->w3, m->b3, AMPX_ACTIVATION_NONE, &logits));
  return logits;
}

static int argmax_matches(const float *logits, const int64_t *labels, int rows) {
  int i, c, right = 0;
  for (i = 0; i < rows; ++i) {
    int best = 0;
    for (c = 1; c < kClasses; ++c)
      if (logits[i * kClasses + c] > logits[i * kClasses + best]) best = c;
    right += best == labels[i];
  }
  return right;
}

int main(int argc, char **argv) {
  int steps = 600, step, i;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) steps = 150;
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  make_rings();

  ampx_context ctx = NULL;
  CHECK(ampx_context_create(NULL, &ctx));
  mlp m;
  m.w1 = make_param(ctx, kHidden, kIn, 0);
  m.b1 = make_param(ctx, kHidden, kIn, 1);
  m.w2 = make_param(ctx, kHidden, kHidden, 0);
  m.b2 = make_param(ctx, kHidden, kHidden, 1);
  m.w3 = make_param(ctx, kClasses, kHidden, 0);
  m.b3 = make_param(ctx, kClasses, kHidden, 1);
  ampx_tensor params[6];
  params[0] = m.w1, params[1] = m.b1, params[2] = m.w2;
  params[3] = m.b2, params[4] = m.w3, params[5] = m.b3;

  ampx_optimizer opt = NULL;
  ampx_adam_options adamw = AMPX_ADAMW_OPTIONS_INIT;
  adamw.lr = 1e-2;
  CHECK(ampx_optimizer_create_adam(ctx, params, 6, &adamw, &opt));
  ampx_scaler scaler = NULL; /* torch's defaults: 65536, x2 every 2000, x0.5 */
  CHECK(ampx_scaler_create(ctx, NULL, &scaler));
  ampx_autocast autocast = NULL;
  CHECK(ampx_autocast_create(ctx, NULL, &autocast)); /* f16 */

  /* One batch's tensors, refilled each step, so the loop allocates only
   * what the scope frees again. */
  const int64_t bx_shape[2] = {kBatch, kIn}, by_shape[1] = {kBatch};
  ampx_tensor bx = NULL, by = NULL;
  CHECK(ampx_tensor_empty(ctx, AMPX_F32, 2, bx_shape, &bx));
  CHECK(ampx_tensor_empty(ctx, AMPX_I64, 1, by_shape, &by));

  printf("step    loss    scale  batch-acc  grad-norm\n");
  for (step = 0; step < steps; ++step) {
    const int first = (step * kBatch) % kSamples;
    ampx_tensor logits = NULL, loss = NULL, norm = NULL;
    CHECK(ampx_tensor_copy_from_host(bx, data_x + first * kIn, sizeof(float) * kBatch * kIn));
    CHECK(ampx_tensor_copy_from_host(by, data_y + first, sizeof(int64_t) * kBatch));

    CHECK(ampx_optimizer_zero_grad(opt));
    CHECK(ampx_scope_push(ctx));
    CHECK(ampx_autocast_enter(autocast));
    logits = forward(&m, bx);
    CHECK(ampx_cross_entropy(logits, by, AMPX_REDUCTION_MEAN, -100, &loss));
    CHECK(ampx_autocast_exit(autocast));

    CHECK(ampx_backward(loss, scaler));
    CHECK(ampx_scaler_unscale(scaler, opt));
    CHECK(ampx_clip_grad_norm(opt, 1.0, 2.0, 0, &norm));
    CHECK(ampx_scaler_step(scaler, opt));
    CHECK(ampx_scaler_update(scaler));

    /* Reading values synchronizes; a real loop does it only now and then. */
    if (step % 50 == 0 || step == steps - 1) {
      float loss_value = 0.0f, norm_value = 0.0f;
      static float batch_logits[kBatch * kClasses];
      ampx_tensor logits32 = NULL;
      double scale = 0.0;
      CHECK(ampx_tensor_to_host(loss, &loss_value, sizeof loss_value));
      CHECK(ampx_tensor_to_host(norm, &norm_value, sizeof norm_value));
      CHECK(ampx_scaler_get_scale(scaler, &scale));
      CHECK(ampx_tensor_cast(logits, AMPX_F32, &logits32)); /* f16 under autocast */
      CHECK(ampx_tensor_to_host(logits32, batch_logits, sizeof batch_logits));
      ampx_tensor_release(logits32);
      printf("%4d  %6.4f  %7.0f  %8.1f%%  %9.4f\n", step, loss_value, scale,
             100.0 * argmax_matches(batch_logits, data_y + first, kBatch) / kBatch, norm_value);
    }
    ampx_tensor_release(norm);
    CHECK(ampx_scope_pop(ctx));
  }

  /* Evaluation: no tape, the same autocast precision as training. */
  static float all_logits[kSamples * kClasses];
  const int64_t x_shape[2] = {kSamples, kIn};
  ampx_tensor x = NULL, logits = NULL, logits32 = NULL;
  int32_t previous = 1;
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, 2, x_shape, data_x, sizeof data_x, &x));
  CHECK(ampx_set_grad_enabled(ctx, 0, &previous));
  CHECK(ampx_scope_push(ctx));
  CHECK(ampx_autocast_enter(autocast));
  logits = forward(&m, x);
  CHECK(ampx_autocast_exit(autocast));
  CHECK(ampx_tensor_cast(logits, AMPX_F32, &logits32));
  CHECK(ampx_tensor_to_host(logits32, all_logits, sizeof all_logits));
  ampx_tensor_release(logits32);
  CHECK(ampx_scope_pop(ctx));
  CHECK(ampx_set_grad_enabled(ctx, previous, NULL));

  ampx_scaler_counters counters = AMPX_SCALER_COUNTERS_INIT;
  CHECK(ampx_scaler_get_counters(scaler, &counters));
  const double accuracy = (double)argmax_matches(all_logits, data_y, kSamples) / kSamples;
  printf("skipped steps: %lld of %lld\n", (long long)counters.skipped, (long long)counters.updates);
  printf("final accuracy: %.1f%% on %d points after %d steps\n", 100.0 * accuracy, kSamples, steps);

  ampx_tensor_release(x);
  ampx_tensor_release(bx);
  ampx_tensor_release(by);
  for (i = 0; i < 6; ++i) ampx_tensor_release(params[i]);
  ampx_autocast_release(autocast);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  ampx_context_release(ctx);
  if (accuracy < 0.90) {
    fprintf(stderr, "FAILED: accuracy %.3f is below 0.90\n", accuracy);
    return 1;
  }
  return 0;
}
