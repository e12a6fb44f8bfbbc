/*
 * checkpointing.c -- gradient checkpointing trades compute for memory
 * (seed 5.2).
 *
 * A stack of residual MLP blocks, y = x + W2 gelu(W1 x + b1), runs forward
 * and backward under autocast f16 twice, on two contexts with the same
 * weights: once directly, once with every block wrapped in
 * ampx_checkpoint_segment. A direct run keeps each block's inner activations
 * (the [batch, 4 * width] pre-activation and GELU output) until backward
 * reaches it; a checkpointed run keeps only the blocks' inputs and outputs
 * and recomputes one block's inner activations at a time during backward.
 *
 * The program prints the peak bytes each run adds to what the weights, their
 * gradients and the data hold (ampx_memory_stats_get after
 * ampx_memory_reset_peak) and
 * checks that the gradients of every parameter are bit for bit the same:
 * the recomputation runs the same ops on the same values, under the same
 * autocast policy.
 *
 * Run:   ampx_example_checkpointing [--quick]
 * Exits 1 when a gradient differs or checkpointing does not lower the peak.
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

enum { kWidth = 128, kHidden = 4 * kWidth, kMaxBlocks = 8 };

typedef struct block {
  ampx_tensor w1, b1, w2;
} block;

/* The segment ampx_checkpoint_segment runs -- once in the forward pass and again in
 * the backward pass -- and the direct run calls as is. */
static ampx_status block_forward(void *user_data, const ampx_tensor *inputs, size_t input_count,
                                 ampx_tensor *outputs, size_t output_count) {
  const block *b = (const block *)user_data;
  ampx_tensor hidden = NULL, projected = NULL;
  ampx_status s;
  (void)input_count, (void)output_count;
  s = ampx_linear(inputs[0], b->w1, b->b1, AMPX_ACTIVATION_GELU, &hidden);
  if (s == AMPX_OK) s = ampx_linear(hidden, b->w2, NULL, AMPX_ACTIVATION_NONE, &projected);
  if (s == AMPX_OK) s = ampx_add(inputs[0], projected, &outputs[0]);
  return s;
}

static unsigned long long rng;

/* A parameter (requires_grad) gets its gradient attached up front, zeroed,
 * so that the gradients count among what the model holds, not in the
 * peak of the pass that backward accumulates into them. */
static ampx_tensor random_tensor(ampx_context ctx, int32_t ndim, const int64_t *shape,
                                 double bound, int requires_grad) {
  int64_t n = 1, i;
  float *values;
  ampx_tensor t = NULL;
  for (i = 0; i < ndim; ++i) n *= shape[i];
  values = malloc((size_t)n * sizeof *values);
  if (!values) exit(1);
  for (i = 0; i < n; ++i) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    values[i] = (float)(bound * (2.0 * (double)(rng >> 11) / 9007199254740992.0 - 1.0));
  }
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, values, (size_t)n * sizeof *values, &t));
  free(values);
  if (requires_grad) {
    ampx_tensor grad = NULL;
    CHECK(ampx_tensor_set_requires_grad(t, 1));
    CHECK(ampx_tensor_zeros(ctx, AMPX_F32, ndim, shape, &grad));
    CHECK(ampx_tensor_set_grad(t, grad));
    ampx_tensor_release(grad); /* the parameter holds it */
  }
  return t;
}

typedef struct run {
  ampx_context ctx;
  block blocks[kMaxBlocks];
  ampx_tensor x, target;
  uint64_t peak; /* bytes above the weights, their gradients and the data */
} run;

/* Builds the model (the same weights every time), then runs one forward
 * and backward pass and records its peak. */
static void run_once(run *r, int blocks, int64_t batch, int checkpointed) {
  const int64_t w1_shape[2] = {kHidden, kWidth}, b1_shape[1] = {kHidden};
  const int64_t w2_shape[2] = {kWidth, kHidden}, x_shape[2] = {batch, kWidth};
  ampx_autocast autocast = NULL;
  ampx_memory_stats before = AMPX_MEMORY_STATS_INIT, after = AMPX_MEMORY_STATS_INIT;
  ampx_tensor h, loss = NULL;
  int i;

  CHECK(ampx_context_create(NULL, &r->ctx));
  rng = 5;
  for (i = 0; i < blocks; ++i) {
    r->blocks[i].w1 = random_tensor(r->ctx, 2, w1_shape, 1.0 / sqrt((double)kWidth), 1);
    r->blocks[i].b1 = random_tensor(r->ctx, 1, b1_shape, 1.0 / sqrt((double)kWidth), 1);
    r->blocks[i].w2 = random_tensor(r->ctx, 2, w2_shape, 0.5 / sqrt((double)kHidden), 1);
  }
  r->x = random_tensor(r->ctx, 2, x_shape, 1.0, 0);
  r->target = random_tensor(r->ctx, 2, x_shape, 1.0, 0);
  CHECK(ampx_autocast_create(r->ctx, NULL, &autocast));

  CHECK(ampx_memory_reset_peak(r->ctx));
  CHECK(ampx_memory_stats_get(r->ctx, &before));
  CHECK(ampx_scope_push(r->ctx));
  CHECK(ampx_autocast_enter(autocast));
  h = r->x;
  for (i = 0; i < blocks; ++i) {
    ampx_tensor out = NULL;
    if (checkpointed) {
      ampx_segment segment = AMPX_SEGMENT_INIT;
      segment.fn = block_forward;
      segment.user_data = &r->blocks[i]; /* lives as long as the run: no release needed */
      CHECK(ampx_checkpoint_segment(r->ctx, &segment, &h, 1, &out, 1));
    }
    else CHECK(block_forward(&r->blocks[i], &h, 1, &out, 1));
    h = out;
  }
  CHECK(ampx_mse_loss(h, r->target, AMPX_REDUCTION_MEAN, &loss));
  CHECK(ampx_autocast_exit(autocast));
  /* Backward after the region, as usual: ampx_checkpoint_segment recomputes each
   * segment under the autocast regions its forward pass ran under. */
  CHECK(ampx_backward(loss, NULL));
  CHECK(ampx_scope_pop(r->ctx));
  CHECK(ampx_memory_stats_get(r->ctx, &after));
  r->peak = after.peak_bytes - before.current_bytes;
  ampx_autocast_release(autocast);
}

static void run_release(run *r, int blocks) {
  int i;
  for (i = 0; i < blocks; ++i) {
    ampx_tensor_release(r->blocks[i].w1);
    ampx_tensor_release(r->blocks[i].b1);
    ampx_tensor_release(r->blocks[i].w2);
  }
  ampx_tensor_release(r->x);
  ampx_tensor_release(r->target);
  ampx_context_release(r->ctx);
}

/* Whether two parameters' gradients hold the same bits. */
static int same_grad(ampx_tensor a, ampx_tensor b) {
  ampx_tensor ga = NULL, gb = NULL;
  size_t bytes = 0;
  void *da = NULL, *db = NULL;
  int same;
  CHECK(ampx_tensor_grad(a, &ga));
  CHECK(ampx_tensor_grad(b, &gb));
  if (!ga || !gb) return 0;
  CHECK(ampx_tensor_nbytes(ga, &bytes));
  da = malloc(bytes), db = malloc(bytes);
  if (!da || !db) exit(1);
  CHECK(ampx_tensor_to_host(ga, da, bytes));
  CHECK(ampx_tensor_to_host(gb, db, bytes));
  same = memcmp(da, db, bytes) == 0;
  free(da);
  free(db);
  return same;
}

int main(int argc, char **argv) {
  int blocks = kMaxBlocks, i;
  int64_t batch = 256;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) blocks = 4, batch = 128;
    else {
      fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return 2;
    }
  }

  run direct, checkpointed;
  run_once(&direct, blocks, batch, 0);
  run_once(&checkpointed, blocks, batch, 1);

  int identical = 1;
  for (i = 0; i < blocks; ++i) {
    identical &= same_grad(direct.blocks[i].w1, checkpointed.blocks[i].w1);
    identical &= same_grad(direct.blocks[i].b1, checkpointed.blocks[i].b1);
    identical &= same_grad(direct.blocks[i].w2, checkpointed.blocks[i].w2);
  }
  printf("%d residual blocks, width %d, hidden %d, batch %lld, autocast f16\n", blocks, kWidth,
         kHidden, (long long)batch);
  printf("peak bytes above weights, gradients and data: direct %llu, checkpointed %llu (%.0f%% less)\n",
         (unsigned long long)direct.peak, (unsigned long long)checkpointed.peak,
         100.0 * (1.0 - (double)checkpointed.peak / (double)direct.peak));
  printf("gradients of all %d parameters: %s\n", 3 * blocks,
         identical ? "bit for bit identical" : "DIFFERENT");
  const int ok = identical && checkpointed.peak < direct.peak;
  if (ok)
    printf("identical gradients, peak %llu -> %llu bytes\n", (unsigned long long)direct.peak,
           (unsigned long long)checkpointed.peak);

  run_release(&direct, blocks);
  run_release(&checkpointed, blocks);
  if (!ok) fprintf(stderr, "FAILED: see the lines above\n");
  return ok ? 0 : 1;
}
