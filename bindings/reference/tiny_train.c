/*
 * tiny_train.c -- the reference run every binding reproduces bit for bit.
 *
 * A 4 -> 16 -> 2 regression MLP (ReLU), trained for 12 steps under bf16
 * autocast with a dynamic loss scaler and AdamW, on the CPU. Step 5 gets an
 * inf written into one element of w2's gradient, so the trajectory also
 * covers a skipped step and a backoff; growth_interval 3 makes the scale
 * grow twice. bindings/README.md states the recipe in words; each binding's
 * test runs it in its own language and compares its output with this
 * program's, line for line.
 *
 * Output, one line per step, then the final weights of w2:
 *   step <i> loss <fp32 bits, 8 hex digits> scale <scale after update, %.17g>
 *   w2 <32 groups of 8 hex digits, the fp32 bits of w2 in row-major order>
 */
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "ampx/ampx.h"

#define CHECK(call)                                                                       \
  do {                                                                                    \
    ampx_status status_ = (call);                                                         \
    if (status_ != AMPX_OK) {                                                             \
      fprintf(stderr, "tiny_train: %s failed: %s: %s\n", #call, ampx_status_string(status_), \
              ampx_last_error());                                                         \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static int parameter(ampx_context ctx, int32_t ndim, const int64_t *shape, const float *values,
                     const char *name, ampx_tensor *out) {
  int64_t n = ndim == 1 ? shape[0] : shape[0] * shape[1];
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, values, (size_t)n * sizeof(float), out));
  CHECK(ampx_tensor_set_requires_grad(*out, 1));
  CHECK(ampx_tensor_set_name(*out, name));
  return 0;
}

int main(void) {
  static const int64_t x_shape[2] = {8, 4}, y_shape[2] = {8, 2};
  static const int64_t w1_shape[2] = {16, 4}, b1_shape[1] = {16};
  static const int64_t w2_shape[2] = {2, 16}, b2_shape[1] = {2};
  float x[32], y[16], w1[64], b1[16], w2[32], b2[2];
  ampx_context ctx = NULL;
  ampx_tensor tx = NULL, ty = NULL, params[4] = {NULL, NULL, NULL, NULL};
  ampx_optimizer opt = NULL;
  ampx_scaler scaler = NULL;
  ampx_autocast autocast = NULL;
  ampx_adam_options adamw = ampx_adamw_options_default();
  ampx_scaler_options scaler_options = ampx_scaler_options_default();
  ampx_autocast_options autocast_options = ampx_autocast_options_default();
  int i, step;

  for (i = 0; i < 32; ++i) x[i] = (float)((i % 7) - 3) / 4.0f;
  for (i = 0; i < 16; ++i) y[i] = (float)((i % 5) - 2) / 2.0f;
  for (i = 0; i < 64; ++i) w1[i] = (float)((i * 37) % 17 - 8) / 32.0f;
  for (i = 0; i < 16; ++i) b1[i] = (float)((i % 3) - 1) / 100.0f;
  for (i = 0; i < 32; ++i) w2[i] = (float)((i * 29) % 13 - 6) / 32.0f;
  b2[0] = b2[1] = 0.0f;

  CHECK(ampx_context_create(NULL, &ctx));
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, 2, x_shape, x, sizeof x, &tx));
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, 2, y_shape, y, sizeof y, &ty));
  if (parameter(ctx, 2, w1_shape, w1, "w1", &params[0]) ||
      parameter(ctx, 1, b1_shape, b1, "b1", &params[1]) ||
      parameter(ctx, 2, w2_shape, w2, "w2", &params[2]) ||
      parameter(ctx, 1, b2_shape, b2, "b2", &params[3]))
    return 1;

  adamw.lr = 0.01;
  CHECK(ampx_optimizer_create_adam(ctx, params, 4, &adamw, &opt));
  scaler_options.init_scale = 1024.0;
  scaler_options.growth_interval = 3;
  CHECK(ampx_scaler_create(ctx, &scaler_options, &scaler));
  autocast_options.dtype = AMPX_BF16;
  CHECK(ampx_autocast_create(ctx, &autocast_options, &autocast));

  for (step = 0; step < 12; ++step) {
    ampx_tensor h = NULL, out = NULL, loss = NULL;
    float loss_value = 0.0f;
    double scale = 0.0;
    CHECK(ampx_scope_push(ctx));
    CHECK(ampx_autocast_enter(autocast));
    CHECK(ampx_linear(tx, params[0], params[1], AMPX_ACTIVATION_RELU, &h));
    CHECK(ampx_linear(h, params[2], params[3], AMPX_ACTIVATION_NONE, &out));
    CHECK(ampx_mse_loss(out, ty, AMPX_REDUCTION_MEAN, &loss));
    CHECK(ampx_autocast_exit(autocast));
    CHECK(ampx_tensor_to_host(loss, &loss_value, sizeof loss_value));
    CHECK(ampx_backward(loss, scaler));
    if (step == 5) {
      float grad[32];
      ampx_tensor g = NULL;
      CHECK(ampx_tensor_grad(params[2], &g));
      CHECK(ampx_tensor_to_host(g, grad, sizeof grad));
      grad[3] = 1.0f / 0.0f;
      CHECK(ampx_tensor_copy_from_host(g, grad, sizeof grad));
    }
    CHECK(ampx_scaler_unscale(scaler, opt));
    CHECK(ampx_clip_grad_norm(opt, 1.0, 2.0, 0, NULL));
    CHECK(ampx_scaler_step(scaler, opt));
    CHECK(ampx_scaler_update(scaler));
    CHECK(ampx_scaler_get_scale(scaler, &scale));
    CHECK(ampx_optimizer_zero_grad(opt));
    CHECK(ampx_scope_pop(ctx));
    printf("step %d loss %08x scale %.17g\n", step, (unsigned)bits_of(loss_value), scale);
  }

  CHECK(ampx_tensor_to_host(params[2], w2, sizeof w2));
  printf("w2");
  for (i = 0; i < 32; ++i) printf(" %08x", (unsigned)bits_of(w2[i]));
  printf("\n");

  ampx_autocast_release(autocast);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  for (i = 0; i < 4; ++i) ampx_tensor_release(params[i]);
  ampx_tensor_release(tx);
  ampx_tensor_release(ty);
  ampx_context_release(ctx);
  return 0;
}
