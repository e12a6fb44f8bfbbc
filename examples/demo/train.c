/*
 * train.c -- one training run of the neural field at one precision, written
 * as a torch.amp user writes the loop: autocast around the forward pass, the
 * backward pass seeded with the loss scale, unscale before clipping, a step
 * the scaler may skip, and an update of the scale.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

enum { kMaxLayers = 8, kBarWidth = 24 };

#define TRY(call)                                                              \
  do {                                                                         \
    status = (call);                                                           \
    if (status != AMPX_OK) {                                                   \
      fprintf(stderr, "\n%s failed: %s\n", #call, ampx_last_error());         \
      goto done;                                                               \
    }                                                                          \
  } while (0)

/* params holds weight, bias per layer; hidden layers end in a fused ReLU. */
static ampx_status forward(const ampx_tensor *params, int linear_layers, ampx_tensor x,
                           ampx_tensor *out) {
  ampx_tensor h = x;
  for (int l = 0; l < linear_layers; ++l) {
    ampx_activation act = l + 1 < linear_layers ? AMPX_ACTIVATION_RELU : AMPX_ACTIVATION_NONE;
    ampx_status status = ampx_linear(h, params[2 * l], params[2 * l + 1], act, &h);
    if (status != AMPX_OK) return status;
  }
  *out = h;
  return AMPX_OK;
}

static double uniform(uint64_t *rng, double bound) {
  return bound * (2.0 * (double)(demo_random_u64(rng) >> 11) / 9007199254740992.0 - 1.0);
}

/* He-uniform weights for the ReLU layers (they keep the activations' scale
 * through the depth), torch's 1/sqrt(in) for the output layer; biases zero
 * except the output's, which starts at mid-grey. The stream is seeded the
 * same for every run, so all precisions start from the same weights. */
static ampx_status make_params(ampx_context ctx, const demo_config *config, int inputs,
                               ampx_tensor *params) {
  uint64_t rng = 7u;
  const int linear_layers = config->layers + 1;
  for (int l = 0; l < linear_layers; ++l) {
    const int in = l == 0 ? inputs : config->hidden;
    const int out = l + 1 < linear_layers ? config->hidden : 3;
    const double bound = l + 1 < linear_layers ? sqrt(6.0 / in) : sqrt(1.0 / in);
    float *w = malloc(sizeof(float) * (size_t)in * (size_t)out);
    float *b = malloc(sizeof(float) * (size_t)out);
    if (!w || !b) {
      free(w);
      free(b);
      return AMPX_ERR_OUT_OF_MEMORY;
    }
    for (long i = 0; i < (long)in * out; ++i) w[i] = (float)uniform(&rng, bound);
    for (int i = 0; i < out; ++i) b[i] = l + 1 < linear_layers ? 0.0f : 0.5f;
    const int64_t wshape[2] = {out, in}, bshape[1] = {out};
    ampx_status status = ampx_tensor_from_host(ctx, AMPX_F32, 2, wshape, w,
                                               sizeof(float) * (size_t)in * out, &params[2 * l]);
    if (status == AMPX_OK)
      status = ampx_tensor_from_host(ctx, AMPX_F32, 1, bshape, b, sizeof(float) * (size_t)out,
                                     &params[2 * l + 1]);
    free(w);
    free(b);
    if (status == AMPX_OK) status = ampx_tensor_set_requires_grad(params[2 * l], 1);
    if (status == AMPX_OK) status = ampx_tensor_set_requires_grad(params[2 * l + 1], 1);
    if (status != AMPX_OK) return status;
  }
  return AMPX_OK;
}

static void report_progress(const demo_config *config, const demo_precision *precision,
                            int step, double loss, double scale, int *last_decile) {
  char scale_text[32];
  if (precision->scaler_enabled)
    snprintf(scale_text, sizeof scale_text, "2^%.0f", log2(scale));
  else
    snprintf(scale_text, sizeof scale_text, "off");
  if (config->progress_tty) {
    char bar[kBarWidth + 1];
    int filled = (int)((long)step * kBarWidth / config->steps);
    for (int i = 0; i < kBarWidth; ++i) bar[i] = i < filled ? '#' : '.';
    bar[kBarWidth] = '\0';
    /* \r and erase-to-end-of-line redraw the bar in place. */
    fprintf(stderr, "\r  %-4s [%s] %5d/%d  loss %.3e  scale %-5s\033[K", precision->name, bar,
            step, config->steps, loss, scale_text);
    if (step == config->steps) fputc('\n', stderr);
  } else {
    /* A log file gets one line per tenth of the run, not a redrawn bar. */
    int decile = (int)((long)step * 10 / config->steps);
    if (decile == *last_decile) return;
    *last_decile = decile;
    fprintf(stderr, "  %-4s step %5d/%d  loss %.3e  scale %s\n", precision->name, step,
            config->steps, loss, scale_text);
  }
  fflush(stderr);
}

static double learning_rate(const demo_config *config, int step) {
  /* Cosine decay to 5% of the peak: the last steps polish the fine detail. */
  double t = (double)(step - 1) / config->steps;
  return config->lr * (0.05 + 0.95 * 0.5 * (1.0 + cos(3.14159265358979323846 * t)));
}

ampx_status demo_train(ampx_context ctx, const demo_config *config, const demo_task *task,
                       const demo_precision *precision, demo_result *result) {
  ampx_status status = AMPX_OK;
  const int linear_layers = config->layers + 1;
  const int64_t rows = (int64_t)task->size * task->size;
  ampx_tensor params[2 * kMaxLayers] = {NULL};
  ampx_tensor x = NULL, target = NULL, image = NULL;
  ampx_optimizer opt = NULL;
  ampx_scaler scaler = NULL;
  ampx_autocast autocast = NULL;
  ampx_fp8_recipe recipe = NULL;
  int scope_open = 0, autocast_open = 0, grad_was_enabled = 1, grad_disabled = 0;
  int last_decile = 0;

  memset(result, 0, sizeof *result);
  result->counters.struct_size = sizeof result->counters;
  if (linear_layers > kMaxLayers) return AMPX_ERR_INVALID_ARGUMENT;
  const int max_points = config->steps / config->log_every + 2;
  result->steps = malloc(sizeof(int) * (size_t)max_points);
  result->losses = malloc(sizeof(double) * (size_t)max_points);
  result->scales = malloc(sizeof(double) * (size_t)max_points);
  result->image = malloc(sizeof(float) * 3 * (size_t)rows);
  if (!result->steps || !result->losses || !result->scales || !result->image) {
    fprintf(stderr, "out of host memory\n");
    return AMPX_ERR_OUT_OF_MEMORY;
  }

  /* Everything this run allocates is made after the reset, so the peak is
   * this run's alone (the previous run released all it had). */
  TRY(ampx_memory_reset_peak(ctx));
  const int64_t xshape[2] = {rows, task->inputs}, tshape[2] = {rows, 3};
  TRY(ampx_tensor_from_host(ctx, AMPX_F32, 2, xshape, task->features,
                            sizeof(float) * (size_t)(rows * task->inputs), &x));
  TRY(ampx_tensor_from_host(ctx, AMPX_F32, 2, tshape, task->target,
                            sizeof(float) * 3 * (size_t)rows, &target));
  TRY(make_params(ctx, config, task->inputs, params));

  ampx_adam_options adam = AMPX_ADAMW_OPTIONS_INIT;
  adam.lr = config->lr;
  TRY(ampx_optimizer_create_adam(ctx, params, 2 * (size_t)linear_layers, &adam, &opt));

  /* fp32 and bf16 get a disabled scaler (scale 1, a plain step), so one loop
   * serves all three precisions, as torch's GradScaler(enabled=False). */
  ampx_scaler_options scaler_options = AMPX_SCALER_OPTIONS_INIT;
  scaler_options.enabled = precision->scaler_enabled;
  scaler_options.growth_interval = config->growth_interval;
  TRY(ampx_scaler_create(ctx, &scaler_options, &scaler));
  TRY(ampx_scaler_attach(scaler, opt));
  if (precision->dtype != AMPX_F32) {
    ampx_autocast_options autocast_options = AMPX_AUTOCAST_OPTIONS_INIT;
    autocast_options.dtype = precision->dtype;
    if (precision->fp8) {
      /* Transformer Engine's delayed scaling (HYBRID: E4M3 forward, E5M2
       * gradients, amax history 1024). The demo's products are small (at
       * most 4096 x 128 x 64), far below the size where FP8 pays on a GPU,
       * so the size threshold is 0: every product that can runs in FP8. */
      TRY(ampx_fp8_recipe_create(ctx, NULL, &recipe));
      TRY(ampx_autocast_create(ctx, &autocast_options, &autocast));
      status = ampx_autocast_set_fp8(autocast, recipe, 0);
      if (status == AMPX_ERR_NOT_SUPPORTED) {
        snprintf(result->fp8_note, sizeof result->fp8_note, "%s", ampx_last_error());
        goto done;
      }
      TRY(status);
    } else {
      TRY(ampx_autocast_create(ctx, &autocast_options, &autocast));
    }
  }

  const double start = demo_now();
  for (int step = 1; step <= config->steps; ++step) {
    TRY(ampx_optimizer_set_lr(opt, 0, learning_rate(config, step)));
    /* The scope owns every op output of the step: popping it frees the
     * activations at once, with no release per intermediate. */
    TRY(ampx_scope_push(ctx));
    scope_open = 1;
    TRY(ampx_optimizer_zero_grad(opt));
    ampx_tensor prediction = NULL, loss = NULL;
    if (autocast) {
      TRY(ampx_autocast_enter(autocast));
      autocast_open = 1;
    }
    TRY(forward(params, linear_layers, x, &prediction));
    TRY(ampx_mse_loss(prediction, target, AMPX_REDUCTION_MEAN, &loss));
    if (autocast) {
      TRY(ampx_autocast_exit(autocast));
      autocast_open = 0;
    }
    TRY(ampx_backward(loss, scaler));
    /* Clipping must see true gradients: unscale first (ampx refuses to clip
     * scaled ones). */
    TRY(ampx_scaler_unscale(scaler, opt));
    TRY(ampx_clip_grad_norm(opt, config->clip_norm, 2.0, 0, NULL));
    TRY(ampx_scaler_step(scaler, opt));
    TRY(ampx_scaler_update(scaler));
    if (recipe) TRY(ampx_fp8_recipe_update(recipe));

    /* Reading values synchronizes with the device, so only every
     * log_every steps; the time of these reads is part of the throughput. */
    if (step % config->log_every == 0 || step == config->steps) {
      float loss_value = 0.0f;
      double scale = 1.0;
      TRY(ampx_tensor_to_host(loss, &loss_value, sizeof loss_value));
      TRY(ampx_scaler_get_scale(scaler, &scale));
      result->steps[result->points] = step;
      result->losses[result->points] = loss_value;
      result->scales[result->points] = scale;
      result->points++;
      result->final_loss = loss_value;
      report_progress(config, precision, step, loss_value, scale, &last_decile);
    }
    TRY(ampx_scope_pop(ctx));
    scope_open = 0;
  }
  TRY(ampx_context_synchronize(ctx));
  result->seconds = demo_now() - start;
  result->samples_per_second = (double)rows * config->steps / result->seconds;

  ampx_memory_stats stats = AMPX_MEMORY_STATS_INIT;
  TRY(ampx_memory_stats_get(ctx, &stats));
  result->peak_bytes = stats.peak_bytes;
  TRY(ampx_scaler_get_counters(scaler, &result->counters));
  TRY(ampx_scaler_get_scale(scaler, &result->final_scale));

  /* The reconstruction, in the run's precision, without recording. */
  TRY(ampx_set_grad_enabled(ctx, 0, &grad_was_enabled));
  grad_disabled = 1;
  TRY(ampx_scope_push(ctx));
  scope_open = 1;
  ampx_tensor prediction = NULL;
  if (autocast) {
    TRY(ampx_autocast_enter(autocast));
    autocast_open = 1;
  }
  TRY(forward(params, linear_layers, x, &prediction));
  if (autocast) {
    TRY(ampx_autocast_exit(autocast));
    autocast_open = 0;
  }
  TRY(ampx_tensor_cast(prediction, AMPX_F32, &image));
  if (recipe) {
    ampx_fp8_stats fp8 = AMPX_FP8_STATS_INIT;
    TRY(ampx_autocast_fp8_stats(autocast, &fp8));
    result->fp8_products = fp8.fp8_products;
    result->fp8_fallbacks = fp8.fallbacks;
    snprintf(result->fp8_note, sizeof result->fp8_note, "%s", fp8.last_fallback);
  }
  TRY(ampx_tensor_to_host(image, result->image, sizeof(float) * 3 * (size_t)rows));
  result->psnr = demo_psnr(result->image, task->target, 3 * (long)rows);

done:
  /* The regions close on every path; the first failure is the one reported. */
  {
    ampx_status closed = AMPX_OK;
    if (autocast_open && (closed = ampx_autocast_exit(autocast)) != AMPX_OK && status == AMPX_OK)
      status = closed;
    if (scope_open && (closed = ampx_scope_pop(ctx)) != AMPX_OK && status == AMPX_OK)
      status = closed;
    if (grad_disabled && (closed = ampx_set_grad_enabled(ctx, grad_was_enabled, NULL)) != AMPX_OK &&
        status == AMPX_OK)
      status = closed;
  }
  ampx_tensor_release(image);
  ampx_autocast_release(autocast);
  ampx_fp8_recipe_release(recipe);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  for (int i = 0; i < 2 * linear_layers; ++i) ampx_tensor_release(params[i]);
  ampx_tensor_release(x);
  ampx_tensor_release(target);
  return status;
}

void demo_result_free(demo_result *result) {
  free(result->steps);
  free(result->losses);
  free(result->scales);
  free(result->image);
  memset(result, 0, sizeof *result);
}
