/*
 * cnn_batchnorm.c -- a small residual CNN with batch norm learns to tell
 * textures and shapes apart in 32x32 colour images, in fp32, in fp16 with
 * dynamic loss scaling and in bf16: the seed's section 4.3 model (a
 * convolution followed by batch norm, kept in fp32 under autocast) and its
 * table (images/s, peak memory, final accuracy, scale events).
 *
 * The images are made by the program, four classes in random colours on a
 * noisy background: horizontal stripes, vertical stripes, a disc, a
 * checkerboard (random period, phase, position and size). The network:
 *
 *   stem   conv 3->C 3x3 pad 1, batch norm, ReLU, max pool 2     [B, C, 16, 16]
 *   block  x + bn(conv(relu(bn(conv(x)))))  then ReLU            (residual)
 *   down   conv C->2C 3x3 stride 2 pad 1, batch norm, ReLU       [B, 2C, 8, 8]
 *   block  as above at 2C
 *   head   global average pool, linear 2C->4
 *
 * Convolutions run in the autocast dtype; batch norm keeps its statistics,
 * scale and shift in fp32 (its running statistics are updated in fp32 in
 * place while training and used for evaluation). Each precision trains the
 * same initial weights with AdamW, warm-up and cosine decay, then is
 * evaluated on held-out images. Exits 1 unless every precision reaches
 * --target accuracy (default 90%) and the 16-bit ones are within one point
 * of fp32.
 *
 * Run:   ampx_example_cnn_batchnorm [--quick] [--steps N] [--batch B]
 *          [--width C] [--device cpu|cuda] [--target PERCENT]
 *        --quick: width 8, batch 32, 60 steps (the ctest settings)
 */
#define _POSIX_C_SOURCE 199309L
#ifndef AMPX_EXPERIMENTAL
#define AMPX_EXPERIMENTAL /* autograd, the ops and the LR schedules are experimental */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

enum { kSide = 32, kClasses = 4, kEvalImages = 512, kConvs = 6, kNorms = 6 };

typedef struct config {
  int width, batch, steps;
  double lr, target;
  ampx_device_type device;
} config;

/* ---- images ---------------------------------------------------------------- */

static unsigned long long rng_state = 4321;

static double uniform(void) { /* [0, 1) */
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

static int pick(int n) { return (int)(uniform() * n); }

/* One image of class `label` into pixels [3, 32, 32]. */
static void draw_image(int label, float *pixels) {
  float fg[3], bg[3];
  const int period = 4 + 2 * pick(3), phase = pick(period), cell = 3 + pick(3);
  const double cx = 10 + 12 * uniform(), cy = 10 + 12 * uniform(), r = 5 + 4 * uniform();
  int c, y, x;
  for (c = 0; c < 3; ++c) {
    fg[c] = (float)(0.5 + 0.5 * uniform());
    bg[c] = (float)(0.4 * uniform());
  }
  for (y = 0; y < kSide; ++y)
    for (x = 0; x < kSide; ++x) {
      int on = 0;
      switch (label) {
        case 0: on = (y + phase) % period < period / 2; break;
        case 1: on = (x + phase) % period < period / 2; break;
        case 2: on = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r; break;
        default: on = (x / cell + y / cell) % 2; break;
      }
      for (c = 0; c < 3; ++c)
        pixels[(c * kSide + y) * kSide + x] = (on ? fg[c] : bg[c]) + (float)(0.15 * uniform());
    }
}

/* `count` images with their labels (drawn in turn). */
static void make_images(int count, float *pixels, int64_t *labels) {
  int i;
  for (i = 0; i < count; ++i) {
    labels[i] = pick(kClasses);
    draw_image((int)labels[i], pixels + (size_t)i * 3 * kSide * kSide);
  }
}

/* ---- the model ----------------------------------------------------------------- */

typedef struct norm {
  ampx_tensor weight, bias, running_mean, running_var;
} norm;

typedef struct model {
  ampx_tensor conv[kConvs]; /* stem, block1 a/b, down, block2 a/b */
  norm bn[kNorms];
  ampx_tensor head, head_bias;
  ampx_tensor params[kConvs + 2 * kNorms + 2];
  int count;
} model;

/* Initial values, drawn once so that every precision starts alike:
 * He-normal convolutions, batch norm scale 1 and shift 0. */
typedef struct weights {
  float *conv[kConvs], *head;
  int64_t conv_shape[kConvs][4];
} weights;

static double normal(void) {
  const double u = uniform() + 1e-300, v = uniform();
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static weights draw_weights(const config *cfg) {
  const int64_t c = cfg->width;
  const int64_t shapes[kConvs][4] = {{c, 3, 3, 3},         {c, c, 3, 3},
                                     {c, c, 3, 3},         {2 * c, c, 3, 3},
                                     {2 * c, 2 * c, 3, 3}, {2 * c, 2 * c, 3, 3}};
  weights w;
  int i, j;
  for (i = 0; i < kConvs; ++i) {
    const int64_t fan_in = shapes[i][1] * 9, n = shapes[i][0] * fan_in;
    memcpy(w.conv_shape[i], shapes[i], sizeof shapes[i]);
    w.conv[i] = malloc((size_t)n * sizeof(float));
    if (!w.conv[i]) exit(1);
    for (j = 0; j < n; ++j) w.conv[i][j] = (float)(normal() * sqrt(2.0 / (double)fan_in));
  }
  w.head = malloc((size_t)(kClasses * 2 * c) * sizeof(float));
  if (!w.head) exit(1);
  for (j = 0; j < kClasses * 2 * c; ++j) w.head[j] = (float)(normal() / sqrt(2.0 * (double)c));
  return w;
}

static ampx_tensor tensor_of(ampx_context ctx, int ndim, const int64_t *shape, const float *values,
                             float fill, int requires_grad) {
  int64_t n = 1;
  int i;
  ampx_tensor t = NULL;
  float *buffer;
  for (i = 0; i < ndim; ++i) n *= shape[i];
  buffer = malloc((size_t)n * sizeof *buffer);
  if (!buffer) exit(1);
  for (i = 0; i < n; ++i) buffer[i] = values ? values[i] : fill;
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, buffer, (size_t)n * sizeof *buffer, &t));
  free(buffer);
  if (requires_grad) CHECK(ampx_tensor_set_requires_grad(t, 1));
  return t;
}

static model model_create(ampx_context ctx, const config *cfg, const weights *w) {
  model m;
  int i;
  const int64_t head_shape[2] = {kClasses, 2 * (int64_t)cfg->width}, classes[1] = {kClasses};
  memset(&m, 0, sizeof m);
  for (i = 0; i < kConvs; ++i)
    m.params[m.count++] = m.conv[i] = tensor_of(ctx, 4, w->conv_shape[i], w->conv[i], 0, 1);
  for (i = 0; i < kNorms; ++i) {
    const int64_t channels[1] = {w->conv_shape[i][0]};
    m.params[m.count++] = m.bn[i].weight = tensor_of(ctx, 1, channels, NULL, 1.0f, 1);
    m.params[m.count++] = m.bn[i].bias = tensor_of(ctx, 1, channels, NULL, 0.0f, 1);
    m.bn[i].running_mean = tensor_of(ctx, 1, channels, NULL, 0.0f, 0);
    m.bn[i].running_var = tensor_of(ctx, 1, channels, NULL, 1.0f, 0);
  }
  m.params[m.count++] = m.head = tensor_of(ctx, 2, head_shape, w->head, 0, 1);
  m.params[m.count++] = m.head_bias = tensor_of(ctx, 1, classes, NULL, 0.0f, 1);
  return m;
}

static void model_release(model *m) {
  int i;
  for (i = 0; i < m->count; ++i) ampx_tensor_release(m->params[i]);
  for (i = 0; i < kNorms; ++i) {
    ampx_tensor_release(m->bn[i].running_mean);
    ampx_tensor_release(m->bn[i].running_var);
  }
}

/* conv i (3x3, padding 1) then batch norm i, then ReLU when `relu`. Every
 * intermediate belongs to the open scope. */
static ampx_tensor conv_bn(const model *m, int i, ampx_tensor x, int stride, int training,
                           int relu) {
  ampx_conv2d_options o = AMPX_CONV2D_OPTIONS_INIT;
  ampx_tensor y = NULL, n = NULL, r = NULL;
  o.stride[0] = o.stride[1] = stride;
  o.padding[0] = o.padding[1] = 1;
  CHECK(ampx_conv2d(x, m->conv[i], NULL, &o, &y));
  CHECK(ampx_batch_norm(y, m->bn[i].weight, m->bn[i].bias, m->bn[i].running_mean,
                        m->bn[i].running_var, training, 0.1, 1e-5, &n));
  if (!relu) return n;
  CHECK(ampx_relu(n, &r));
  return r;
}

static ampx_tensor residual(const model *m, int first, ampx_tensor x, int training) {
  ampx_tensor inner = conv_bn(m, first, x, 1, training, 1);
  ampx_tensor branch = conv_bn(m, first + 1, inner, 1, training, 0);
  ampx_tensor sum = NULL, out = NULL;
  CHECK(ampx_add(x, branch, &sum));
  CHECK(ampx_relu(sum, &out));
  return out;
}

/* logits [B, 4] of images [B, 3, 32, 32]. */
static ampx_tensor forward(const model *m, const config *cfg, ampx_tensor images, int batch,
                           int training) {
  const int64_t flat[2] = {batch, 2 * (int64_t)cfg->width};
  ampx_tensor x = conv_bn(m, 0, images, 1, training, 1);
  ampx_tensor pooled = NULL, features = NULL, logits = NULL;
  CHECK(ampx_max_pool2d(x, 2, 2, NULL, &pooled));
  x = residual(m, 1, pooled, training);
  x = conv_bn(m, 3, x, 2, training, 1);
  x = residual(m, 4, x, training);
  CHECK(ampx_global_avg_pool2d(x, &pooled));
  CHECK(ampx_reshape(pooled, 2, flat, &features));
  CHECK(ampx_linear(features, m->head, m->head_bias, AMPX_ACTIVATION_NONE, &logits));
  return logits;
}

/* ---- training ----------------------------------------------------------------- */

typedef enum precision { FP32, FP16_SCALED, BF16 } precision;

static const char *const kPrecisionNames[] = {"fp32", "fp16 + scaler", "bf16"};

typedef struct run_result {
  double images_per_second, accuracy, final_scale;
  uint64_t peak_bytes;
  ampx_scaler_counters counters;
} run_result;

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Accuracy in percent on the held-out images, batch norm in evaluation
 * mode (the running statistics). */
static double accuracy(ampx_context ctx, const model *m, const config *cfg, ampx_autocast autocast,
                       const float *pixels, const int64_t *labels) {
  const int64_t shape[4] = {kEvalImages, 3, kSide, kSide};
  float *logits_host = malloc(kEvalImages * kClasses * sizeof *logits_host);
  ampx_tensor images = NULL, logits = NULL, logits32 = NULL;
  int32_t previous = 1;
  int i, c, correct = 0;
  if (!logits_host) exit(1);
  CHECK(ampx_set_grad_enabled(ctx, 0, &previous));
  CHECK(ampx_scope_push(ctx));
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, 4, shape, pixels,
                              (size_t)kEvalImages * 3 * kSide * kSide * sizeof(float), &images));
  if (autocast) CHECK(ampx_autocast_enter(autocast));
  logits = forward(m, cfg, images, kEvalImages, 0);
  if (autocast) CHECK(ampx_autocast_exit(autocast));
  CHECK(ampx_tensor_cast(logits, AMPX_F32, &logits32));
  CHECK(ampx_tensor_to_host(logits32, logits_host, kEvalImages * kClasses * sizeof(float)));
  CHECK(ampx_scope_pop(ctx));
  CHECK(ampx_set_grad_enabled(ctx, previous, NULL));
  for (i = 0; i < kEvalImages; ++i) {
    int best = 0;
    for (c = 1; c < kClasses; ++c)
      if (logits_host[i * kClasses + c] > logits_host[i * kClasses + best]) best = c;
    correct += best == labels[i];
  }
  free(logits_host);
  return 100.0 * correct / kEvalImages;
}

static run_result train(const config *cfg, const weights *w, precision p, const float *eval_pixels,
                        const int64_t *eval_labels) {
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  ampx_context ctx = NULL;
  ampx_autocast autocast = NULL;
  ampx_scaler scaler = NULL;
  ampx_optimizer opt = NULL;
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  ampx_adam_options adamw = AMPX_ADAMW_OPTIONS_INIT;
  ampx_lr_schedule schedule = AMPX_LR_SCHEDULE_INIT;
  const size_t image_floats = 3 * kSide * kSide;
  const int64_t image_shape[4] = {cfg->batch, 3, kSide, kSide}, label_shape[1] = {cfg->batch};
  float *pixels = malloc((size_t)cfg->batch * image_floats * sizeof *pixels);
  int64_t *labels = malloc((size_t)cfg->batch * sizeof *labels);
  ampx_tensor images = NULL, targets = NULL;
  run_result result;
  model m;
  double start;
  int step;

  memset(&result, 0, sizeof result);
  result.counters.struct_size = sizeof result.counters;
  if (!pixels || !labels) exit(1);
  options.device_type = cfg->device;
  CHECK(ampx_context_create(&options, &ctx));
  m = model_create(ctx, cfg, w);
  if (p != FP32) {
    ampx_autocast_options ao = AMPX_AUTOCAST_OPTIONS_INIT;
    ao.dtype = p == BF16 ? AMPX_BF16 : AMPX_F16;
    CHECK(ampx_autocast_create(ctx, &ao, &autocast));
  }
  if (p == FP16_SCALED) CHECK(ampx_scaler_create(ctx, NULL, &scaler));
  adamw.lr = cfg->lr;
  adamw.weight_decay = 1e-4;
  CHECK(ampx_optimizer_create_adam(ctx, m.params, (size_t)m.count, &adamw, &opt));
  schedule.warmup_steps = cfg->steps / 10;
  schedule.decay = AMPX_LR_COSINE;
  schedule.total_steps = cfg->steps;
  schedule.min_lr = cfg->lr / 20;
  CHECK(ampx_optimizer_set_lr_schedule(opt, 0, &schedule));
  CHECK(ampx_tensor_empty(ctx, AMPX_F32, 4, image_shape, &images));
  CHECK(ampx_tensor_empty(ctx, AMPX_I64, 1, label_shape, &targets));
  CHECK(ampx_memory_reset_peak(ctx));

  rng_state = 99; /* the same training images for every precision */
  start = seconds_now();
  for (step = 0; step < cfg->steps; ++step) {
    ampx_tensor logits = NULL, loss = NULL;
    make_images(cfg->batch, pixels, labels);
    CHECK(ampx_tensor_copy_from_host(images, pixels,
                                     (size_t)cfg->batch * image_floats * sizeof *pixels));
    CHECK(ampx_tensor_copy_from_host(targets, labels, (size_t)cfg->batch * sizeof *labels));
    CHECK(ampx_optimizer_zero_grad(opt));
    CHECK(ampx_scope_push(ctx));
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    logits = forward(&m, cfg, images, cfg->batch, 1);
    CHECK(ampx_cross_entropy(logits, targets, AMPX_REDUCTION_MEAN, -100, &loss));
    if (autocast) CHECK(ampx_autocast_exit(autocast));
    CHECK(ampx_backward(loss, scaler));
    if (scaler) {
      CHECK(ampx_scaler_step(scaler, opt));
      CHECK(ampx_scaler_update(scaler));
    } else {
      CHECK(ampx_optimizer_step(opt));
    }
    CHECK(ampx_scope_pop(ctx));
  }
  CHECK(ampx_context_synchronize(ctx));
  result.images_per_second = (double)cfg->steps * cfg->batch / (seconds_now() - start);
  CHECK(ampx_memory_stats_get(ctx, &stats));
  result.peak_bytes = stats.peak_bytes;
  if (scaler) {
    CHECK(ampx_scaler_get_counters(scaler, &result.counters));
    CHECK(ampx_scaler_get_scale(scaler, &result.final_scale));
  }
  result.accuracy = accuracy(ctx, &m, cfg, autocast, eval_pixels, eval_labels);

  ampx_tensor_release(images);
  ampx_tensor_release(targets);
  ampx_optimizer_release(opt);
  ampx_scaler_release(scaler);
  ampx_autocast_release(autocast);
  model_release(&m);
  ampx_context_release(ctx);
  free(pixels);
  free(labels);
  return result;
}

static config parse(int argc, char **argv) {
  config cfg = {16, 64, 300, 4e-3, 90.0, AMPX_DEVICE_CPU};
  int i;
  for (i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick")) {
      cfg.width = 8, cfg.batch = 32, cfg.steps = 60;
    } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
      cfg.steps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
      cfg.batch = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--width") && i + 1 < argc) {
      cfg.width = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--target") && i + 1 < argc) {
      cfg.target = atof(argv[++i]);
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      ++i;
      cfg.device = !strcmp(argv[i], "cuda") ? AMPX_DEVICE_CUDA : AMPX_DEVICE_CPU;
    } else {
      fprintf(stderr,
              "usage: %s [--quick] [--steps N] [--batch B] [--width C] [--device cpu|cuda] "
              "[--target PERCENT]\n",
              argv[0]);
      exit(2);
    }
  }
  if (cfg.width < 1 || cfg.batch < 2 || cfg.steps < 1) {
    fprintf(stderr, "width, batch (>= 2) and steps must be positive\n");
    exit(2);
  }
  return cfg;
}

int main(int argc, char **argv) {
  const config cfg = parse(argc, argv);
  const precision order[3] = {FP32, FP16_SCALED, BF16};
  float *eval_pixels = malloc((size_t)kEvalImages * 3 * kSide * kSide * sizeof *eval_pixels);
  int64_t *eval_labels = malloc(kEvalImages * sizeof *eval_labels);
  run_result results[3];
  weights w;
  int i, ok = 1;
  if (!eval_pixels || !eval_labels) return 1;
  printf("residual CNN, width %d, batch %d, %d steps on %s; %d classes of 32x32 images "
         "(stripes, stripes, disc, checkerboard)\n",
         cfg.width, cfg.batch, cfg.steps, cfg.device == AMPX_DEVICE_CUDA ? "CUDA" : "the CPU",
         kClasses);
  w = draw_weights(&cfg);
  rng_state = 7777; /* held-out images, never trained on */
  make_images(kEvalImages, eval_pixels, eval_labels);
  for (i = 0; i < 3; ++i) results[i] = train(&cfg, &w, order[i], eval_pixels, eval_labels);
  printf("\n%-14s %10s %14s %10s %22s\n", "precision", "images/s", "peak memory", "accuracy",
         "scale events");
  for (i = 0; i < 3; ++i) {
    char events[64] = "-";
    if (order[i] == FP16_SCALED)
      snprintf(events, sizeof events, "%lld skipped, scale %g", (long long)results[i].counters.skipped,
               results[i].final_scale);
    printf("%-14s %10.1f %10.2f MiB %9.1f%% %22s\n", kPrecisionNames[order[i]],
           results[i].images_per_second, (double)results[i].peak_bytes / (1024.0 * 1024.0),
           results[i].accuracy, events);
    ok = ok && results[i].accuracy >= cfg.target &&
         results[i].accuracy >= results[0].accuracy - 1.0;
  }
  if (ok)
    printf("accuracy at least %.1f%% in fp32, fp16 + scaler and bf16, 16-bit within 1 point: OK\n",
           cfg.target);
  else
    printf("accuracy target %.1f%% (16-bit within 1 point of fp32) missed\n", cfg.target);
  for (i = 0; i < kConvs; ++i) free(w.conv[i]);
  free(w.head);
  free(eval_pixels);
  free(eval_labels);
  return ok ? 0 : 1;
}
