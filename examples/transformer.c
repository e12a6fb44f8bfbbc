/*
 * transformer.c -- a small decoder-only Transformer learns to write like a
 * licence text, in fp32, in fp16 with dynamic loss scaling and in bf16; and
 * the seed's deep case, where pure fp16 without loss scaling stalls.
 *
 * The model is a character-level language model of pre-norm blocks:
 *
 *   x = embedding(tokens) + embedding'(positions)        [B, T, d]
 *   per block:  x = x + W_o attention(norm(x))            causal, H heads
 *               x = x + W_2 gelu(W_1 norm(x) + b_1) + b_2
 *   logits = W_head norm(x)                               [B, T, vocab]
 *   loss = cross_entropy(logits, the next characters)
 *
 * attention is ampx_scaled_dot_product_attention on [B, H, T, d / H] heads
 * (queries, keys and values are three linear maps of the normalised x,
 * reshaped and transposed), norm a layer norm with a learned scale, and
 * the positions a learned [T, d] table looked up by position index. The text is a document a Debian package ships on every system
 * (base-files' GPL-3 licence; --text PATH for another), read at run time;
 * the program says which. Its distinct bytes are the vocabulary.
 *
 * Training mode (default) trains the same initial weights three times --
 * fp32; autocast f16 with a dynamic loss scaler (torch.amp's recipe:
 * backward seeded with the scale, unscale, clip, step, update); autocast
 * bf16 without a scaler -- with AdamW, warm-up and cosine decay, and prints
 * one row per precision: tokens/s, the context's peak memory, and the loss
 * on held-out text at the end. It then samples a line from the f16 model.
 * Exits 1 unless every precision's held-out loss ends below
 * --target (default 2.5 nats per character; the vocabulary's uniform
 * distribution is about 4.3).
 *
 * Deep mode (--deep): a deep narrow model (16 blocks 32 wide) in PURE fp16
 * -- F16 parameters, activations and gradients; Adam keeps fp32 masters --
 * with small initial weights (std 0.02 / sqrt(2 * layers) in the residual
 * branches' output maps, as GPT-2 scales them, and 1e-3 for the head) and
 * its loss weighted by 2^-16 (a stand-in for what makes large models'
 * gradients small: a mean over millions of tokens). The gradient reaching
 * the logits is then mostly below fp16's smallest subnormal, 2^-24, and a
 * gradient rounded to zero stays zero in every layer below. It trains twice
 * from the same weights: without loss scaling (backward seeded with 1) and
 * with the dynamic scaler, printing the two loss curves side by side, the
 * fraction of gradient elements that are exactly zero after the first
 * backward pass, and the scaler's skipped steps. Exits 1 unless the
 * unscaled run loses most of its gradients and ends above the scaled run.
 *
 * Run:   ampx_example_transformer [--quick] [--deep] [--steps N]
 *          [--device cpu|cuda] [--layers L] [--width D] [--heads H]
 *          [--context T] [--batch B] [--target LOSS] [--text PATH]
 *        --quick: 2 layers, T 32, 300 steps (with --deep: 16 layers, 100 steps)
 *        --gpt2: 12 layers 768 wide, 12 heads, T 1024, batch 8 (GPU scale)
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

enum { kMaxLayers = 64, kParamsPerLayer = 10, kEvalBatches = 4 };

/* Deep mode: the loss is weighted by 2^-16 before backward. */
static const double kDeepLossWeight = 1.0 / 65536.0;

typedef struct config {
  int layers, width, heads, context, batch, steps;
  double lr, target;
  int deep;
  ampx_device_type device;
  const char *text_path;
} config;

/* ---- text -------------------------------------------------------------- */

typedef struct corpus {
  const char *path;
  int64_t *tokens; /* the text as vocabulary indices */
  int64_t length, train_length;
  int vocab;
  unsigned char symbols[256]; /* index -> byte */
} corpus;

static const char *const kTextCandidates[] = {
    "/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/GPL-2",
    "/usr/share/common-licenses/Apache-2.0", "/usr/share/dict/words"};

static corpus load_corpus(const char *path) {
  corpus c;
  FILE *f = NULL;
  size_t i, n = 0, capacity = 1 << 16;
  int index[256], byte;
  unsigned char *bytes = malloc(capacity);
  memset(&c, 0, sizeof c);
  if (path) {
    f = fopen(path, "rb");
    c.path = path;
  } else {
    for (i = 0; i < sizeof kTextCandidates / sizeof *kTextCandidates && !f; ++i) {
      f = fopen(kTextCandidates[i], "rb");
      c.path = kTextCandidates[i];
    }
  }
  if (!f || !bytes) {
    fprintf(stderr, "no text to train on (%s)\n", path ? path : "none of the usual documents");
    exit(1);
  }
  while ((byte = fgetc(f)) != EOF) {
    if (n == capacity) {
      capacity *= 2;
      bytes = realloc(bytes, capacity);
      if (!bytes) exit(1);
    }
    bytes[n++] = (unsigned char)byte;
  }
  fclose(f);
  for (i = 0; i < 256; ++i) index[i] = -1;
  for (i = 0; i < n; ++i) index[bytes[i]] = 1;
  for (i = 0; i < 256; ++i)
    if (index[i] == 1) {
      c.symbols[c.vocab] = (unsigned char)i;
      index[i] = c.vocab++;
    }
  c.tokens = malloc(n * sizeof *c.tokens);
  if (!c.tokens) exit(1);
  for (i = 0; i < n; ++i) c.tokens[i] = index[bytes[i]];
  c.length = (int64_t)n;
  c.train_length = c.length - c.length / 10; /* the last tenth is held out */
  free(bytes);
  return c;
}

static unsigned long long rng_state = 2024;

static double uniform(void) { /* [0, 1) */
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

static double normal(void) {
  const double u = uniform() + 1e-300, v = uniform();
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Batch `index` of a fixed sequence of windows: inputs [B, T] and the next
 * characters as targets [B * T], from the training text or the held-out
 * tail. */
static void make_batch(const corpus *c, const config *cfg, int held_out, long index,
                       int64_t *inputs, int64_t *targets) {
  const int64_t first = held_out ? c->train_length : 0;
  const int64_t span = (held_out ? c->length - c->train_length : c->train_length) - cfg->context - 1;
  unsigned long long state = 0x9e3779b97f4a7c15ULL * (unsigned long long)(index + 1) + held_out;
  int b, t;
  for (b = 0; b < cfg->batch; ++b) {
    int64_t start;
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    start = first + (int64_t)((state >> 17) % (unsigned long long)span);
    for (t = 0; t < cfg->context; ++t) {
      inputs[b * cfg->context + t] = c->tokens[start + t];
      targets[b * cfg->context + t] = c->tokens[start + t + 1];
    }
  }
}

/* ---- the model ----------------------------------------------------------- */

typedef struct layer {
  ampx_tensor norm1, wq, wk, wv, wo, norm2, w1, b1, w2, b2;
} layer;

typedef struct model {
  ampx_tensor embedding, positions, final_norm, head;
  layer layers[kMaxLayers];
  int count; /* parameters */
  ampx_tensor params[4 + kMaxLayers * kParamsPerLayer];
  ampx_tensor position_index[2]; /* I64 t at [b, t]: [B, T] for training, [1, T] for sampling */
} model;

/* Initial values of every parameter, drawn once so that each precision
 * starts from the same weights. */
typedef struct weights {
  float *values[4 + kMaxLayers * kParamsPerLayer];
  int64_t shapes[4 + kMaxLayers * kParamsPerLayer][2];
  int ndims[4 + kMaxLayers * kParamsPerLayer];
  int count;
} weights;

static void draw(weights *w, int64_t rows, int64_t cols, double std, double constant) {
  const int64_t n = rows * (cols ? cols : 1);
  int64_t i;
  float *values = malloc((size_t)n * sizeof *values);
  if (!values) exit(1);
  for (i = 0; i < n; ++i) values[i] = (float)(std > 0 ? std * normal() : constant);
  w->values[w->count] = values;
  w->shapes[w->count][0] = rows;
  w->shapes[w->count][1] = cols;
  w->ndims[w->count] = cols ? 2 : 1;
  ++w->count;
}

/* In the order model_create consumes them. */
static weights draw_weights(const config *cfg, int vocab) {
  weights w;
  const int64_t d = cfg->width;
  const double branch_std = 0.02 / sqrt(2.0 * cfg->layers);
  int l;
  memset(&w, 0, sizeof w);
  draw(&w, vocab, d, 0.02, 0);
  draw(&w, cfg->context, d, 0.02, 0);
  draw(&w, d, 0, 0, 1.0);
  draw(&w, vocab, d, cfg->deep ? 1e-3 : 0.02, 0);
  for (l = 0; l < cfg->layers; ++l) {
    draw(&w, d, 0, 0, 1.0);
    draw(&w, d, d, 0.02, 0);
    draw(&w, d, d, 0.02, 0);
    draw(&w, d, d, 0.02, 0);
    draw(&w, d, d, branch_std, 0);
    draw(&w, d, 0, 0, 1.0);
    draw(&w, 4 * d, d, 0.02, 0);
    draw(&w, 4 * d, 0, 0, 0.0);
    draw(&w, d, 4 * d, branch_std, 0);
    draw(&w, d, 0, 0, 0.0);
  }
  return w;
}

static ampx_tensor make_param(ampx_context ctx, const weights *w, int i, ampx_dtype dtype) {
  ampx_tensor t = NULL, cast = NULL;
  const int64_t n = w->shapes[i][0] * (w->ndims[i] == 2 ? w->shapes[i][1] : 1);
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, w->ndims[i], w->shapes[i], w->values[i],
                              (size_t)n * sizeof(float), &t));
  if (dtype != AMPX_F32) {
    CHECK(ampx_tensor_cast(t, dtype, &cast));
    ampx_tensor_release(t);
    t = cast;
  }
  CHECK(ampx_tensor_set_requires_grad(t, 1));
  return t;
}

/* [batch, T] holding the position t in every row. */
static ampx_tensor position_index(ampx_context ctx, int batch, int context) {
  const int64_t shape[2] = {batch, context};
  int64_t *values = malloc((size_t)batch * (size_t)context * sizeof *values);
  ampx_tensor t = NULL;
  int i;
  if (!values) exit(1);
  for (i = 0; i < batch * context; ++i) values[i] = i % context;
  CHECK(ampx_tensor_from_host(ctx, AMPX_I64, 2, shape, values,
                              (size_t)batch * (size_t)context * sizeof *values, &t));
  free(values);
  return t;
}

static model model_create(ampx_context ctx, const config *cfg, const weights *w,
                          ampx_dtype dtype) {
  model m;
  int l, next = 0;
  memset(&m, 0, sizeof m);
  m.embedding = m.params[m.count++] = make_param(ctx, w, next++, dtype);
  m.positions = m.params[m.count++] = make_param(ctx, w, next++, dtype);
  m.final_norm = m.params[m.count++] = make_param(ctx, w, next++, dtype);
  m.head = m.params[m.count++] = make_param(ctx, w, next++, dtype);
  for (l = 0; l < cfg->layers; ++l) {
    layer *y = &m.layers[l];
    ampx_tensor *fields[kParamsPerLayer];
    int f;
    fields[0] = &y->norm1, fields[1] = &y->wq, fields[2] = &y->wk, fields[3] = &y->wv;
    fields[4] = &y->wo, fields[5] = &y->norm2, fields[6] = &y->w1, fields[7] = &y->b1;
    fields[8] = &y->w2, fields[9] = &y->b2;
    for (f = 0; f < kParamsPerLayer; ++f)
      *fields[f] = m.params[m.count++] = make_param(ctx, w, next++, dtype);
  }
  m.position_index[0] = position_index(ctx, cfg->batch, cfg->context);
  m.position_index[1] = position_index(ctx, 1, cfg->context);
  return m;
}

static void model_release(model *m) {
  int i;
  for (i = 0; i < m->count; ++i) ampx_tensor_release(m->params[i]);
  ampx_tensor_release(m->position_index[0]);
  ampx_tensor_release(m->position_index[1]);
}


/* [B, T, d] -> [B, H, T, d / H]: the heads of one projection. */
static ampx_tensor split_heads(ampx_tensor x, const config *cfg, int batch) {
  const int64_t shape[4] = {batch, cfg->context, cfg->heads, cfg->width / cfg->heads};
  ampx_tensor r = NULL, t = NULL;
  CHECK(ampx_reshape(x, 4, shape, &r));
  CHECK(ampx_transpose(r, 1, 2, &t));
  return t;
}

/* Logits [B * T, vocab] of inputs [B, T] (I64), owned by the open scope. */
static ampx_tensor forward(const model *m, const config *cfg, int vocab, ampx_tensor inputs,
                           int batch) {
  const int64_t merged[3] = {batch, cfg->context, cfg->width};
  const int64_t rows[2] = {(int64_t)batch * cfg->context, vocab};
  ampx_attention_options causal = AMPX_ATTENTION_OPTIONS_INIT;
  ampx_tensor x = NULL, tokens = NULL, placed = NULL, logits = NULL, flat = NULL, n = NULL;
  int l;
  causal.causal = 1;
  CHECK(ampx_embedding(m->embedding, inputs, &tokens));
  CHECK(ampx_embedding(m->positions, m->position_index[batch == cfg->batch ? 0 : 1], &placed));
  CHECK(ampx_add(tokens, placed, &x));
  for (l = 0; l < cfg->layers; ++l) {
    const layer *y = &m->layers[l];
    ampx_tensor q = NULL, k = NULL, v = NULL, heads = NULL, joined = NULL, attended = NULL;
    ampx_tensor projected = NULL, hidden = NULL, out = NULL, mid = NULL;
    CHECK(ampx_layer_norm(x, y->norm1, NULL, 1e-5, &n));
    CHECK(ampx_linear(n, y->wq, NULL, AMPX_ACTIVATION_NONE, &q));
    CHECK(ampx_linear(n, y->wk, NULL, AMPX_ACTIVATION_NONE, &k));
    CHECK(ampx_linear(n, y->wv, NULL, AMPX_ACTIVATION_NONE, &v));
    CHECK(ampx_scaled_dot_product_attention(split_heads(q, cfg, batch), split_heads(k, cfg, batch),
                                            split_heads(v, cfg, batch), NULL, &causal, &heads));
    CHECK(ampx_transpose(heads, 1, 2, &joined));
    CHECK(ampx_reshape(joined, 3, merged, &attended));
    CHECK(ampx_linear(attended, y->wo, NULL, AMPX_ACTIVATION_NONE, &projected));
    CHECK(ampx_add(x, projected, &mid));
    CHECK(ampx_layer_norm(mid, y->norm2, NULL, 1e-5, &n));
    CHECK(ampx_linear(n, y->w1, y->b1, AMPX_ACTIVATION_GELU, &hidden));
    CHECK(ampx_linear(hidden, y->w2, y->b2, AMPX_ACTIVATION_NONE, &out));
    CHECK(ampx_add(mid, out, &x));
  }
  CHECK(ampx_layer_norm(x, m->final_norm, NULL, 1e-5, &n));
  CHECK(ampx_linear(n, m->head, NULL, AMPX_ACTIVATION_NONE, &logits));
  CHECK(ampx_reshape(logits, 2, rows, &flat));
  return flat;
}

/* ---- training ------------------------------------------------------------ */

typedef enum precision { FP32, FP16_SCALED, BF16, PURE_FP16, PURE_FP16_SCALED } precision;

static const char *const kPrecisionNames[] = {"fp32", "fp16 + scaler", "bf16", "pure fp16",
                                              "pure fp16 + scaler"};

typedef struct run_result {
  double tokens_per_second, held_out_loss, zero_gradient_fraction;
  uint64_t peak_bytes;
  int64_t skipped;
  float *curve; /* the training loss every `curve_every` steps */
} run_result;

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double held_out_loss(ampx_context ctx, const model *m, const config *cfg,
                            const corpus *c, ampx_autocast autocast, ampx_tensor inputs,
                            ampx_tensor targets, int64_t *in_host, int64_t *target_host) {
  double total = 0.0;
  int32_t previous = 1;
  int i;
  const size_t tokens = (size_t)cfg->batch * (size_t)cfg->context;
  CHECK(ampx_set_grad_enabled(ctx, 0, &previous));
  for (i = 0; i < kEvalBatches; ++i) {
    ampx_tensor logits = NULL, loss = NULL;
    float value = 0.0f;
    make_batch(c, cfg, 1, i, in_host, target_host);
    CHECK(ampx_tensor_copy_from_host(inputs, in_host, tokens * sizeof(int64_t)));
    CHECK(ampx_tensor_copy_from_host(targets, target_host, tokens * sizeof(int64_t)));
    CHECK(ampx_scope_push(ctx));
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    logits = forward(m, cfg, c->vocab, inputs, cfg->batch);
    CHECK(ampx_cross_entropy(logits, targets, AMPX_REDUCTION_MEAN, -100, &loss));
    if (autocast) CHECK(ampx_autocast_exit(autocast));
    CHECK(ampx_tensor_to_host(loss, &value, sizeof value));
    CHECK(ampx_scope_pop(ctx));
    total += value;
  }
  CHECK(ampx_set_grad_enabled(ctx, previous, NULL));
  return total / kEvalBatches;
}

/* The fraction of the parameters' gradient elements that are exactly 0. */
static double zero_gradient_fraction(const model *m) {
  int64_t zeros = 0, total = 0, i, numel;
  int p;
  for (p = 0; p < m->count; ++p) {
    ampx_tensor grad = NULL, grad32 = NULL;
    float *values;
    CHECK(ampx_tensor_grad(m->params[p], &grad));
    CHECK(ampx_tensor_numel(m->params[p], &numel));
    total += numel;
    if (!grad) {
      zeros += numel;
      continue;
    }
    CHECK(ampx_tensor_cast(grad, AMPX_F32, &grad32));
    values = malloc((size_t)numel * sizeof *values);
    if (!values) exit(1);
    CHECK(ampx_tensor_to_host(grad32, values, (size_t)numel * sizeof *values));
    for (i = 0; i < numel; ++i) zeros += values[i] == 0.0f;
    free(values);
    ampx_tensor_release(grad32); /* grad itself is borrowed */
  }
  return (double)zeros / (double)total;
}

/* Trains a fresh copy of the initial weights in one precision; leaves the
 * trained model in *out when out is not NULL (with its context in *out_ctx). */
static run_result train(const config *cfg, const corpus *c, const weights *w, precision p,
                        int curve_every, model *out, ampx_context *out_ctx) {
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  ampx_context ctx = NULL;
  ampx_autocast autocast = NULL;
  ampx_scaler scaler = NULL;
  ampx_optimizer opt = NULL;
  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  ampx_adam_options adamw = AMPX_ADAMW_OPTIONS_INIT;
  ampx_lr_schedule schedule = AMPX_LR_SCHEDULE_INIT;
  ampx_scaler_counters counters = AMPX_SCALER_COUNTERS_INIT;
  run_result result;
  model m;
  const int pure = p == PURE_FP16 || p == PURE_FP16_SCALED;
  const int scaled = p == FP16_SCALED || p == PURE_FP16_SCALED;
  const size_t tokens = (size_t)cfg->batch * (size_t)cfg->context;
  const int64_t in_shape[2] = {cfg->batch, cfg->context}, target_shape[1] = {(int64_t)tokens};
  int64_t *in_host = malloc(tokens * sizeof *in_host);
  int64_t *target_host = malloc(tokens * sizeof *target_host);
  ampx_tensor inputs = NULL, targets = NULL;
  double start;
  int step;

  memset(&result, 0, sizeof result);
  result.curve = calloc((size_t)(cfg->steps / curve_every + 1), sizeof *result.curve);
  if (!in_host || !target_host || !result.curve) exit(1);
  options.device_type = cfg->device;
  options.seed = 7;
  CHECK(ampx_context_create(&options, &ctx));
  m = model_create(ctx, cfg, w, pure ? AMPX_F16 : AMPX_F32);
  if (p == FP16_SCALED || p == BF16) {
    ampx_autocast_options ao = AMPX_AUTOCAST_OPTIONS_INIT;
    ao.dtype = p == BF16 ? AMPX_BF16 : AMPX_F16;
    CHECK(ampx_autocast_create(ctx, &ao, &autocast));
  }
  if (scaled) {
    ampx_scaler_options so = AMPX_SCALER_OPTIONS_INIT;
    if (pure) so.growth_interval = 25; /* a short run: let the scale climb */
    CHECK(ampx_scaler_create(ctx, &so, &scaler));
  }
  adamw.lr = cfg->lr;
  adamw.weight_decay = 0.01;
  CHECK(ampx_optimizer_create_adam(ctx, m.params, (size_t)m.count, &adamw, &opt));
  schedule.warmup_steps = cfg->steps / 10;
  schedule.decay = AMPX_LR_COSINE;
  schedule.total_steps = cfg->steps;
  schedule.min_lr = cfg->lr / 10;
  CHECK(ampx_optimizer_set_lr_schedule(opt, 0, &schedule));
  CHECK(ampx_tensor_empty(ctx, AMPX_I64, 2, in_shape, &inputs));
  CHECK(ampx_tensor_empty(ctx, AMPX_I64, 1, target_shape, &targets));
  CHECK(ampx_memory_reset_peak(ctx));

  start = seconds_now();
  for (step = 0; step < cfg->steps; ++step) {
    ampx_tensor logits = NULL, loss = NULL, weighted = NULL;
    make_batch(c, cfg, 0, step, in_host, target_host);
    CHECK(ampx_tensor_copy_from_host(inputs, in_host, tokens * sizeof *in_host));
    CHECK(ampx_tensor_copy_from_host(targets, target_host, tokens * sizeof *target_host));
    CHECK(ampx_optimizer_zero_grad(opt));
    CHECK(ampx_scope_push(ctx));
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    logits = forward(&m, cfg, c->vocab, inputs, cfg->batch);
    CHECK(ampx_cross_entropy(logits, targets, AMPX_REDUCTION_MEAN, -100, &loss));
    if (autocast) CHECK(ampx_autocast_exit(autocast));
    /* Deep mode's stand-in for a mean over millions of tokens. */
    if (pure) CHECK(ampx_affine(loss, kDeepLossWeight, 0.0, &weighted));
    CHECK(ampx_backward(pure ? weighted : loss, scaler));
    if (pure && step == 0) result.zero_gradient_fraction = zero_gradient_fraction(&m);
    if (scaler) {
      CHECK(ampx_scaler_unscale(scaler, opt));
      CHECK(ampx_clip_grad_norm(opt, pure ? kDeepLossWeight : 1.0, 2.0, 0, NULL));
      CHECK(ampx_scaler_step(scaler, opt));
      CHECK(ampx_scaler_update(scaler));
    } else {
      CHECK(ampx_clip_grad_norm(opt, pure ? kDeepLossWeight : 1.0, 2.0, 0, NULL));
      CHECK(ampx_optimizer_step(opt));
    }
    if (step % curve_every == 0)
      CHECK(ampx_tensor_to_host(loss, &result.curve[step / curve_every], sizeof(float)));
    CHECK(ampx_scope_pop(ctx));
  }
  CHECK(ampx_context_synchronize(ctx));
  result.tokens_per_second = (double)cfg->steps * (double)tokens / (seconds_now() - start);
  CHECK(ampx_memory_stats_get(ctx, &stats));
  result.peak_bytes = stats.peak_bytes;
  if (scaler) {
    CHECK(ampx_scaler_get_counters(scaler, &counters));
    result.skipped = counters.skipped;
  }
  result.held_out_loss =
      held_out_loss(ctx, &m, cfg, c, autocast, inputs, targets, in_host, target_host);

  ampx_tensor_release(inputs);
  ampx_tensor_release(targets);
  ampx_optimizer_release(opt);
  ampx_scaler_release(scaler);
  ampx_autocast_release(autocast);
  free(in_host);
  free(target_host);
  if (out) {
    *out = m;
    *out_ctx = ctx;
  } else {
    model_release(&m);
    ampx_context_release(ctx);
  }
  return result;
}

/* Continues a line from a newline, one character at a time (temperature
 * 0.8): the window holds the line so far at positions 0..t-1, and causal
 * attention makes position t-1's logits independent of the rest. */
static void sample_line(const model *m, const config *cfg, const corpus *c, ampx_context ctx) {
  const int64_t shape[2] = {1, cfg->context};
  int64_t *window = calloc((size_t)cfg->context, sizeof *window);
  float *logits_host = malloc((size_t)cfg->context * (size_t)c->vocab * sizeof *logits_host);
  double *weights_host = malloc((size_t)c->vocab * sizeof *weights_host);
  char line[121];
  int length = 0, t = 0, i;
  int32_t previous = 1;
  ampx_tensor inputs = NULL;
  if (!window || !logits_host || !weights_host) exit(1);
  for (i = 0; i < c->vocab; ++i)
    if (c->symbols[i] == '\n') window[0] = i;
  t = 1;
  CHECK(ampx_tensor_empty(ctx, AMPX_I64, 2, shape, &inputs));
  CHECK(ampx_set_grad_enabled(ctx, 0, &previous));
  while (length < 120) {
    ampx_tensor logits = NULL, logits32 = NULL;
    const float *row;
    double total = 0.0, pick, max = -1e30;
    int next = 0;
    CHECK(ampx_tensor_copy_from_host(inputs, window, (size_t)cfg->context * sizeof *window));
    CHECK(ampx_scope_push(ctx));
    logits = forward(m, cfg, c->vocab, inputs, 1);
    CHECK(ampx_tensor_cast(logits, AMPX_F32, &logits32));
    CHECK(ampx_tensor_to_host(logits32, logits_host,
                              (size_t)cfg->context * (size_t)c->vocab * sizeof *logits_host));
    ampx_tensor_release(logits32);
    CHECK(ampx_scope_pop(ctx));
    row = logits_host + (size_t)(t - 1) * (size_t)c->vocab;
    for (i = 0; i < c->vocab; ++i) max = row[i] > max ? row[i] : max;
    for (i = 0; i < c->vocab; ++i) total += weights_host[i] = exp((row[i] - max) / 0.8);
    pick = uniform() * total;
    for (next = 0; next < c->vocab - 1 && (pick -= weights_host[next]) > 0; ++next) {
    }
    if (c->symbols[next] == '\n') break;
    line[length++] = (char)c->symbols[next];
    if (t == cfg->context) { /* slide the window */
      memmove(window, window + 1, (size_t)(cfg->context - 1) * sizeof *window);
      --t;
    }
    window[t++] = next;
  }
  line[length] = '\0';
  CHECK(ampx_set_grad_enabled(ctx, previous, NULL));
  ampx_tensor_release(inputs);
  printf("sample (fp16 + scaler model): \"%s\"\n", line);
  free(window);
  free(logits_host);
  free(weights_host);
}

static int run_precisions(const config *cfg, const corpus *c, const weights *w) {
  const precision order[3] = {FP32, FP16_SCALED, BF16};
  run_result results[3];
  model sampled;
  ampx_context sample_ctx = NULL;
  int i, ok = 1;
  for (i = 0; i < 3; ++i) {
    const int keep = order[i] == FP16_SCALED;
    results[i] = train(cfg, c, w, order[i], cfg->steps, keep ? &sampled : NULL,
                       keep ? &sample_ctx : NULL);
  }
  printf("\n%-14s %12s %14s %16s %8s\n", "precision", "tokens/s", "peak memory",
         "held-out loss", "skipped");
  for (i = 0; i < 3; ++i) {
    printf("%-14s %12.0f %11.2f MiB %16.4f %8lld\n", kPrecisionNames[order[i]],
           results[i].tokens_per_second, (double)results[i].peak_bytes / (1024.0 * 1024.0),
           results[i].held_out_loss, (long long)results[i].skipped);
    ok = ok && results[i].held_out_loss < cfg->target;
    free(results[i].curve);
  }
  sample_line(&sampled, cfg, c, sample_ctx);
  model_release(&sampled);
  ampx_context_release(sample_ctx);
  printf("held-out loss below %.2f in fp32, fp16 + scaler and bf16: %s\n", cfg->target,
         ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

static int run_deep(const config *cfg, const corpus *c, const weights *w) {
  const int every = cfg->steps / 10 > 0 ? cfg->steps / 10 : 1;
  const run_result plain = train(cfg, c, w, PURE_FP16, every, NULL, NULL);
  const run_result scaled = train(cfg, c, w, PURE_FP16_SCALED, every, NULL, NULL);
  const double first = plain.curve[0];
  int i, ok;
  printf("\n%6s %14s %20s\n", "step", "no scaling", "dynamic scaling");
  for (i = 0; i * every < cfg->steps; ++i)
    printf("%6d %14.4f %20.4f\n", i * every, plain.curve[i], scaled.curve[i]);
  printf("held-out loss: no scaling %.4f, dynamic scaling %.4f (started at %.4f)\n",
         plain.held_out_loss, scaled.held_out_loss, first);
  printf("gradient elements exactly zero after the first backward: no scaling %.1f%%, "
         "dynamic scaling %.1f%%; skipped steps with the scaler: %lld\n",
         100.0 * plain.zero_gradient_fraction, 100.0 * scaled.zero_gradient_fraction,
         (long long)scaled.skipped);
  /* Some zeros are exact with any scale: the embedding rows of characters
   * that no window of the first batch holds. */
  ok = plain.zero_gradient_fraction > 0.5 && scaled.zero_gradient_fraction < 0.25 &&
       plain.held_out_loss > scaled.held_out_loss + 0.25;
  printf("deep fp16: no scaling stalls at %.2f, dynamic scaling trains to %.2f: %s\n",
         plain.held_out_loss, scaled.held_out_loss, ok ? "OK" : "FAILED");
  free(plain.curve);
  free(scaled.curve);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  config cfg = {4, 64, 4, 64, 16, 300, 3e-3, 2.5, 0, AMPX_DEVICE_CPU, NULL};
  corpus c;
  weights w;
  int i, rc, quick = 0;
  /* The presets first, whatever their position, so that explicit values
   * given with them win. */
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--deep") == 0) cfg.deep = 1;
    if (strcmp(argv[i], "--quick") == 0) quick = 1;
    if (strcmp(argv[i], "--gpt2") == 0)
      cfg.layers = 12, cfg.width = 768, cfg.heads = 12, cfg.context = 1024, cfg.batch = 8,
      cfg.lr = 6e-4;
  }
  if (cfg.deep) cfg.layers = 16, cfg.width = 32, cfg.heads = 2, cfg.context = 32;
  if (quick) cfg.steps = cfg.deep ? 100 : 300, cfg.context = 32;
  if (quick && !cfg.deep) cfg.layers = 2;
  for (i = 1; i < argc; ++i) {
    const char *a = argv[i];
    const int more = i + 1 < argc;
    if (strcmp(a, "--quick") == 0 || strcmp(a, "--deep") == 0 || strcmp(a, "--gpt2") == 0) continue;
    if (strcmp(a, "--steps") == 0 && more) cfg.steps = atoi(argv[++i]);
    else if (strcmp(a, "--layers") == 0 && more) cfg.layers = atoi(argv[++i]);
    else if (strcmp(a, "--width") == 0 && more) cfg.width = atoi(argv[++i]);
    else if (strcmp(a, "--heads") == 0 && more) cfg.heads = atoi(argv[++i]);
    else if (strcmp(a, "--context") == 0 && more) cfg.context = atoi(argv[++i]);
    else if (strcmp(a, "--batch") == 0 && more) cfg.batch = atoi(argv[++i]);
    else if (strcmp(a, "--target") == 0 && more) cfg.target = atof(argv[++i]);
    else if (strcmp(a, "--text") == 0 && more) cfg.text_path = argv[++i];
    else if (strcmp(a, "--device") == 0 && more) {
      const char *d = argv[++i];
      if (strcmp(d, "cuda") == 0) cfg.device = AMPX_DEVICE_CUDA;
      else if (strcmp(d, "cpu") != 0) a = NULL;
    } else a = NULL;
    if (!a || cfg.layers < 1 || cfg.layers > kMaxLayers || cfg.heads < 1 ||
        cfg.width % cfg.heads != 0 || cfg.context < 2 || cfg.batch < 1 || cfg.steps < 1) {
      fprintf(stderr,
              "usage: %s [--quick] [--deep] [--gpt2] [--steps N] [--device cpu|cuda] "
              "[--layers L<=%d] [--width D] [--heads H | D] [--context T>=2] [--batch B] "
              "[--target LOSS] [--text PATH]\n",
              argv[0], kMaxLayers);
      return 2;
    }
  }
  c = load_corpus(cfg.text_path);
  if (c.length - c.train_length < cfg.context + 2) {
    fprintf(stderr, "%s is too short for a context of %d\n", c.path, cfg.context);
    return 1;
  }
  printf("text: %s (%lld bytes, %d distinct; the last tenth held out)\n", c.path,
         (long long)c.length, c.vocab);
  printf("model: %d layers, width %d, %d heads, context %d, batch %d, %d steps on %s\n",
         cfg.layers, cfg.width, cfg.heads, cfg.context, cfg.batch, cfg.steps,
         cfg.device == AMPX_DEVICE_CUDA ? "cuda" : "cpu");
  w = draw_weights(&cfg, c.vocab);
  rc = cfg.deep ? run_deep(&cfg, &c, &w) : run_precisions(&cfg, &c, &w);
  for (i = 0; i < w.count; ++i) free(w.values[i]);
  free(c.tokens);
  return rc;
}
