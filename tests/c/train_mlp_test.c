/*
 * train_mlp_test.c -- a complete mixed-precision training program in plain
 * C99 through ampx.h alone: a 2 -> 32 -> 3 MLP classifier on three noisy 2-D
 * clusters, trained with the library's AdamW, once in fp32 and once under
 * autocast f16 with a dynamic loss scaler, every step inside a scope.
 *
 * What it asserts:
 *  - both runs reach >= 90% training accuracy (each cluster's centre is
 *    1.7 from the boundaries to its neighbours and the noise has a std of
 *    0.7 per axis, so a working classifier gets 98-100%);
 *  - the f16 run is within 3 points of the fp32 run (f16 rounding of
 *    weights and activations moves a few boundary points, not more);
 *  - an overflow injected into one gradient makes exactly that step skip
 *    (no parameter changes), halves the scale, and training carries on;
 *  - the memory held by the context after the loop equals that before it.
 *
 * Prints "N passed, N failed" and exits non-zero on any failure. No libm:
 * the data come from an integer LCG and constants.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ampx/ampx.h"

static int passed = 0;
static int failed = 0;

#define EXPECT(cond)                                                                     \
  do {                                                                                   \
    if (cond) {                                                                          \
      ++passed;                                                                          \
    } else {                                                                             \
      ++failed;                                                                          \
      fprintf(stderr, "%s:%d: FAILED: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              ampx_last_error());                                                        \
    }                                                                                    \
  } while (0)

/* A call that must succeed; on failure the run cannot go on meaningfully. */
#define CALL(call)                                                              \
  do {                                                                          \
    ampx_status call_status_ = (call);                                          \
    if (call_status_ != AMPX_OK) {                                              \
      ++failed;                                                                 \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, \
              ampx_status_string(call_status_), ampx_last_error());             \
      return 0;                                                                 \
    }                                                                           \
  } while (0)

#define N_PER_CLASS 80
#define N_SAMPLES (3 * N_PER_CLASS)
#define IN 2
#define HIDDEN 32
#define CLASSES 3
#define STEPS 150
#define INJECT_STEP 60
#define ACCURACY_MIN 0.90
#define F16_MARGIN 0.03

/* ---- data ------------------------------------------------------------------ */

static unsigned long long lcg_state;

static double lcg_uniform(void) { /* [0, 1) */
  lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(lcg_state >> 11) * (1.0 / 9007199254740992.0);
}

/* Sum of three uniforms: a bell of std 0.5 * 1.4 = 0.7, bounded by 2.1. */
static double lcg_noise(void) {
  return 1.4 * (lcg_uniform() + lcg_uniform() + lcg_uniform() - 1.5);
}

static float data_x[N_SAMPLES * IN];
static int64_t data_y[N_SAMPLES];

static void make_data(void) {
  /* Corners of an equilateral triangle of circumradius 2. */
  static const double centers[CLASSES][IN] = {{2.0, 0.0}, {-1.0, 1.7320508}, {-1.0, -1.7320508}};
  int i;
  lcg_state = 20240601ULL;
  for (i = 0; i < N_SAMPLES; ++i) {
    const int c = i % CLASSES;
    data_x[i * IN + 0] = (float)(centers[c][0] + lcg_noise());
    data_x[i * IN + 1] = (float)(centers[c][1] + lcg_noise());
    data_y[i] = c;
  }
}

/* ---- the model -------------------------------------------------------------- */

typedef struct model {
  ampx_tensor w1, b1, w2, b2;
} model;

static ampx_tensor param(ampx_context ctx, int32_t ndim, const int64_t *shape, double bound) {
  float values[HIDDEN * IN > CLASSES * HIDDEN ? HIDDEN * IN : CLASSES * HIDDEN];
  int64_t n = 1, i;
  ampx_tensor t = NULL;
  for (i = 0; i < ndim; ++i) n *= shape[i];
  for (i = 0; i < n; ++i) values[i] = (float)(bound * (2.0 * lcg_uniform() - 1.0));
  if (ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, values, (size_t)n * sizeof(float), &t) !=
          AMPX_OK ||
      ampx_tensor_set_requires_grad(t, 1) != AMPX_OK) {
    fprintf(stderr, "cannot make a parameter: %s\n", ampx_last_error());
    ampx_tensor_release(t);
    return NULL;
  }
  return t;
}

/* torch's default init bound for nn.Linear: 1/sqrt(fan_in). */
static int model_init(ampx_context ctx, model *m, unsigned long long seed) {
  static const int64_t w1_shape[2] = {HIDDEN, IN}, b1_shape[1] = {HIDDEN};
  static const int64_t w2_shape[2] = {CLASSES, HIDDEN}, b2_shape[1] = {CLASSES};
  lcg_state = seed;
  m->w1 = param(ctx, 2, w1_shape, 0.70710678);
  m->b1 = param(ctx, 1, b1_shape, 0.70710678);
  m->w2 = param(ctx, 2, w2_shape, 0.17677670);
  m->b2 = param(ctx, 1, b2_shape, 0.17677670);
  return m->w1 && m->b1 && m->w2 && m->b2;
}

static void model_release(model *m) {
  ampx_tensor_release(m->w1);
  ampx_tensor_release(m->b1);
  ampx_tensor_release(m->w2);
  ampx_tensor_release(m->b2);
}

/* Logits of the whole data set, owned by the open scope. */
static ampx_status forward(const model *m, ampx_tensor x, ampx_tensor *logits) {
  ampx_tensor h = NULL;
  ampx_status s = ampx_linear(x, m->w1, m->b1, AMPX_ACTIVATION_RELU, &h);
  return s != AMPX_OK ? s : ampx_linear(h, m->w2, m->b2, AMPX_ACTIVATION_NONE, logits);
}

static uint64_t bytes_in_use(ampx_context ctx) {
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  if (ampx_memory_stats_get(ctx, &stats) != AMPX_OK) return (uint64_t)-1;
  return stats.current_bytes;
}

/* Fraction of the data classified right, with grad mode off, in the same
 * precision as training. Returns -1 on an error. */
static double accuracy(ampx_context ctx, const model *m, ampx_tensor x, ampx_autocast policy) {
  static float logits_host[N_SAMPLES * CLASSES];
  ampx_tensor logits = NULL, logits32 = NULL;
  int32_t previous = 1;
  int i, right = 0, closed = 1, entered = 0;
  if (ampx_set_grad_enabled(ctx, 0, &previous) != AMPX_OK || ampx_scope_push(ctx) != AMPX_OK)
    return -1.0;
  if (policy) {
    entered = ampx_autocast_enter(policy) == AMPX_OK;
    if (!entered) right = -N_SAMPLES;
  }
  if (right == 0 && forward(m, x, &logits) == AMPX_OK &&
      ampx_tensor_cast(logits, AMPX_F32, &logits32) == AMPX_OK &&
      ampx_tensor_to_host(logits32, logits_host, sizeof logits_host) == AMPX_OK) {
    for (i = 0; i < N_SAMPLES; ++i) {
      const float *row = logits_host + i * CLASSES;
      int best = 0, c;
      for (c = 1; c < CLASSES; ++c)
        if (row[c] > row[best]) best = c;
      right += best == data_y[i];
    }
  } else {
    right = -N_SAMPLES;
  }
  ampx_tensor_release(logits32);
  if (entered && ampx_autocast_exit(policy) != AMPX_OK) closed = 0;
  if (ampx_scope_pop(ctx) != AMPX_OK) closed = 0;
  if (ampx_set_grad_enabled(ctx, previous, NULL) != AMPX_OK) closed = 0;
  if (!closed) return -1.0;
  return (double)right / N_SAMPLES;
}

/* ---- training ---------------------------------------------------------------- */

typedef struct run_result {
  double accuracy;
  double first_loss, last_loss;
  int skipped;
} run_result;

/* One run; with_f16 selects autocast f16 + a loss scaler. Returns 1 when
 * it could run to the end. */
static int train(int with_f16, run_result *result) {
  static const int64_t x_shape[2] = {N_SAMPLES, IN}, y_shape[1] = {N_SAMPLES};
  ampx_context ctx = NULL;
  ampx_tensor x = NULL, y = NULL;
  ampx_optimizer opt = NULL;
  ampx_scaler scaler = NULL;
  ampx_autocast policy = NULL;
  ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
  ampx_autocast_options ac = AMPX_AUTOCAST_OPTIONS_INIT;
  model m;
  ampx_tensor params[4];
  ampx_tensor attached[4];
  uint64_t baseline = 0;
  int step, ok = 1;

  memset(result, 0, sizeof *result);
  CALL(ampx_context_create(NULL, &ctx));
  CALL(ampx_tensor_from_host(ctx, AMPX_F32, 2, x_shape, data_x, sizeof data_x, &x));
  CALL(ampx_tensor_from_host(ctx, AMPX_I64, 1, y_shape, data_y, sizeof data_y, &y));
  if (!model_init(ctx, &m, 7ULL)) return 0; /* same initial weights in both runs */
  params[0] = m.w1, params[1] = m.b1, params[2] = m.w2, params[3] = m.b2;
  adam.lr = 0.02;
  CALL(ampx_optimizer_create_adam(ctx, params, 4, &adam, &opt));
  if (with_f16) {
    ac.dtype = AMPX_F16;
    CALL(ampx_autocast_create(ctx, &ac, &policy));
    CALL(ampx_scaler_create(ctx, NULL, &scaler)); /* torch's defaults: 65536, x2 / 2000, x0.5 */
  }

  /* The gradients live as long as training does: attached (zeros) up
   * front, as the first backward would create them, so that the baseline is
   * taken before the first step and backward accumulates into them. */
  for (step = 0; step < 4; ++step) {
    ampx_tensor g = NULL;
    CALL(ampx_tensor_cast(params[step], AMPX_F32, &g));
    CALL(ampx_tensor_fill(g, 0.0));
    CALL(ampx_tensor_set_grad(params[step], g));
    attached[step] = g; /* borrowed: the parameter holds it */
    ampx_tensor_release(g);
  }
  baseline = bytes_in_use(ctx);
  for (step = 0; step < STEPS && ok; ++step) {
    ampx_tensor logits = NULL, loss = NULL;
    float loss_value = 0.0f;
    CALL(ampx_scope_push(ctx));
    if (policy) CALL(ampx_autocast_enter(policy));
    CALL(forward(&m, x, &logits));
    CALL(ampx_cross_entropy(logits, y, AMPX_REDUCTION_MEAN, -100, &loss));
    if (policy) CALL(ampx_autocast_exit(policy));
    CALL(ampx_tensor_to_host(loss, &loss_value, sizeof loss_value));
    if (step == 0) result->first_loss = loss_value;
    result->last_loss = loss_value;
    CALL(ampx_backward(loss, scaler));

    if (scaler) {
      double scale_before = 0.0, scale_after = 0.0;
      int32_t taken = -1, found = -1;
      float w2_before[CLASSES * HIDDEN], w2_after[CLASSES * HIDDEN];
      if (step == INJECT_STEP) {
        /* An overflow as a too-high scale produces it: one element of one
         * (still scaled) gradient becomes inf. */
        ampx_tensor g = NULL;
        void *data = NULL;
        CALL(ampx_tensor_grad(m.w1, &g));
        CALL(ampx_tensor_data(g, &data));
        ((float *)data)[5] = INFINITY;
        CALL(ampx_tensor_to_host(m.w2, w2_before, sizeof w2_before));
      }
      CALL(ampx_scaler_get_scale(scaler, &scale_before));
      CALL(ampx_scaler_unscale(scaler, opt));
      CALL(ampx_clip_grad_norm(opt, 5.0, 2.0, 0, NULL));
      CALL(ampx_scaler_step(scaler, opt));
      CALL(ampx_scaler_found_inf(scaler, opt, &found));
      CALL(ampx_scaler_update(scaler));
      CALL(ampx_optimizer_last_step_taken(opt, &taken));
      CALL(ampx_scaler_get_scale(scaler, &scale_after));
      result->skipped += !taken;
      EXPECT(taken == !found);
      EXPECT(scale_after == (taken ? scale_before : scale_before * 0.5));
      if (step == INJECT_STEP) {
        EXPECT(found == 1);
        EXPECT(taken == 0);
        CALL(ampx_tensor_to_host(m.w2, w2_after, sizeof w2_after));
        EXPECT(memcmp(w2_before, w2_after, sizeof w2_before) == 0);
        printf("f16 run: injected overflow at step %d skipped, scale %g -> %g\n", step,
               scale_before, scale_after);
      }
      if (step == INJECT_STEP + 1) EXPECT(taken == 1); /* recovered at once */
    } else {
      CALL(ampx_clip_grad_norm(opt, 5.0, 2.0, 0, NULL));
      CALL(ampx_optimizer_step(opt));
    }
    CALL(ampx_optimizer_zero_grad(opt));
    CALL(ampx_scope_pop(ctx));

    if (bytes_in_use(ctx) != baseline) {
      fprintf(stderr, "step %d: %llu bytes in use, %llu before the loop\n", step,
              (unsigned long long)bytes_in_use(ctx), (unsigned long long)baseline);
      ok = 0;
    }
  }
  EXPECT(ok); /* every step ended at the baseline */
  EXPECT(bytes_in_use(ctx) == baseline);
  for (step = 0; step < 4; ++step) { /* backward accumulated into them */
    ampx_tensor g = NULL;
    CALL(ampx_tensor_grad(params[step], &g));
    EXPECT(g == attached[step]);
  }

  result->accuracy = accuracy(ctx, &m, x, policy);
  EXPECT(bytes_in_use(ctx) == baseline);

  ampx_autocast_release(policy);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  model_release(&m);
  ampx_tensor_release(x);
  ampx_tensor_release(y);
  ampx_context_release(ctx);
  return 1;
}

int main(void) {
  run_result fp32, f16;
  make_data();
  if (train(0, &fp32)) {
    printf("fp32 run: loss %.4f -> %.4f, accuracy %.1f%%\n", fp32.first_loss, fp32.last_loss,
           100.0 * fp32.accuracy);
    EXPECT(fp32.accuracy >= ACCURACY_MIN);
    EXPECT(fp32.last_loss < 0.5 * fp32.first_loss);
  }
  if (train(1, &f16)) {
    printf("f16 run:  loss %.4f -> %.4f, accuracy %.1f%%, %d skipped steps\n", f16.first_loss,
           f16.last_loss, 100.0 * f16.accuracy, f16.skipped);
    EXPECT(f16.accuracy >= ACCURACY_MIN);
    EXPECT(f16.last_loss < 0.5 * f16.first_loss);
    EXPECT(f16.accuracy >= fp32.accuracy - F16_MARGIN &&
           f16.accuracy <= fp32.accuracy + F16_MARGIN);
    EXPECT(f16.skipped >= 1);
    EXPECT(f16.skipped <= 10); /* the injected one plus the first backoffs */
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
