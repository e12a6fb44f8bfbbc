/*
 * gan_two_scalers.c -- two models, two optimizers, two loss scalers (seed 2.4).
 *
 * A tiny GAN on a 1-D distribution: the generator G maps 4-D Gaussian noise
 * to one number, the discriminator D tells G's numbers from samples of
 * N(4, 1.25^2). Both train under autocast f16, each with its own AdamW and
 * its own dynamic loss scaler, alternating as GANs do:
 *
 *   D step: fake = G(z) with grad mode off (G is not trained here),
 *           loss_D = bce(D(real), 1) + bce(D(fake), 0),
 *           backward seeded by D's scale, step D through D's scaler.
 *   G step: loss_G = bce(D(G(z)), 1), backward seeded by G's scale, step G
 *           through G's scaler. The gradients this also leaves on D's
 *           parameters are zeroed before D's next step.
 *
 * Why two scalers: the two losses have unrelated gradient magnitudes, and an
 * overflow in one model must not skip the other's step or shrink its scale.
 * To make that visible, G's scaler starts at 2^24, far too high for f16:
 * its first backward passes overflow and it backs off on its own until the
 * gradients fit, while D's scaler (started at 2^10, growing every 50 clean
 * steps) climbs until it finds its own ceiling.
 *
 * Run:   ampx_example_gan_two_scalers [--quick] [--steps N] [--wgan-gp]
 * Prints the losses, the generated mean/std and both scales as it trains,
 * then both scalers' scales and counters. Exits 1 unless both scales are
 * finite and positive and the generated mean came within 1.0 of 4.
 *
 * --wgan-gp: the same two networks as a Wasserstein GAN with gradient
 * penalty (Gulrajani et al. 2017), in fp32, in fp16 with the two scalers
 * and in bf16: D is a critic (no sigmoid), loss_D = mean D(fake) - mean
 * D(real) + 0.1 mean (|dD/dx (x_hat)| - 1)^2 at random interpolates x_hat of
 * real and fake samples, loss_G = -mean D(G(z)). The penalty differentiates
 * D's input gradient with respect to D's weights (ampx_grad with
 * create_graph), following torch's AMP recipe under the scaler (ampx.h
 * section 9): the scaled critic output is differentiated, the input
 * gradient unscaled on the device, the penalty formed under autocast. fp16
 * needs the scalers as the plain GAN does; bf16 needs none. Exits 1 unless
 * every precision's generated mean came within 1.0 of 4.
 */
#ifndef AMPX_EXPERIMENTAL
#define AMPX_EXPERIMENTAL /* ampx_grad for the WGAN-GP variant */
#endif
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

enum { kNoise = 4, kHidden = 32, kBatch = 128 };
static const double kRealMean = 4.0, kRealStd = 1.25;

static unsigned long long rng = 2024;

static double uniform(void) { /* (0, 1) */
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

static double gaussian(void) { /* Box-Muller */
  return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
}

/* A two-layer perceptron: in -> kHidden (ReLU) -> 1. */
typedef struct net {
  ampx_tensor w1, b1, w2, b2;
} net;

static ampx_tensor make_param(ampx_context ctx, int32_t ndim, int64_t rows, int64_t fan_in) {
  const int64_t shape[2] = {rows, fan_in};
  const int64_t n = ndim == 1 ? rows : rows * fan_in;
  float values[kHidden * kHidden];
  ampx_tensor t = NULL;
  int64_t i;
  for (i = 0; i < n; ++i) values[i] = (float)((2.0 * uniform() - 1.0) / sqrt((double)fan_in));
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, values, (size_t)n * sizeof(float), &t));
  CHECK(ampx_tensor_set_requires_grad(t, 1));
  return t;
}

static void net_init(ampx_context ctx, net *m, int64_t in) {
  m->w1 = make_param(ctx, 2, kHidden, in);
  m->b1 = make_param(ctx, 1, kHidden, in);
  m->w2 = make_param(ctx, 2, 1, kHidden);
  m->b2 = make_param(ctx, 1, 1, kHidden);
}

static ampx_tensor net_forward(const net *m, ampx_tensor x) { /* scope-owned */
  ampx_tensor h = NULL, y = NULL;
  CHECK(ampx_linear(x, m->w1, m->b1, AMPX_ACTIVATION_RELU, &h));
  CHECK(ampx_linear(h, m->w2, m->b2, AMPX_ACTIVATION_NONE, &y));
  return y;
}

static ampx_optimizer net_optimizer(ampx_context ctx, net *m) {
  ampx_tensor params[4];
  ampx_adam_options adamw = AMPX_ADAMW_OPTIONS_INIT;
  ampx_optimizer opt = NULL;
  params[0] = m->w1, params[1] = m->b1, params[2] = m->w2, params[3] = m->b2;
  adamw.lr = 2e-3;
  adamw.beta1 = 0.5; /* the usual GAN setting: less momentum chasing a moving target */
  CHECK(ampx_optimizer_create_adam(ctx, params, 4, &adamw, &opt));
  return opt;
}

static void net_release(net *m) {
  ampx_tensor_release(m->w1);
  ampx_tensor_release(m->b1);
  ampx_tensor_release(m->w2);
  ampx_tensor_release(m->b2);
}

static ampx_scaler make_scaler(ampx_context ctx, double init_scale, int32_t growth_interval) {
  ampx_scaler_options options = AMPX_SCALER_OPTIONS_INIT;
  ampx_scaler scaler = NULL;
  options.init_scale = init_scale;
  options.growth_interval = growth_interval;
  CHECK(ampx_scaler_create(ctx, &options, &scaler));
  return scaler;
}

static void fill_noise(ampx_tensor t, int64_t n) {
  float values[kBatch * kNoise];
  int64_t i;
  for (i = 0; i < n; ++i) values[i] = (float)gaussian();
  CHECK(ampx_tensor_copy_from_host(t, values, (size_t)n * sizeof(float)));
}

static void fill_real(ampx_tensor t) {
  float values[kBatch];
  int i;
  for (i = 0; i < kBatch; ++i) values[i] = (float)(kRealMean + kRealStd * gaussian());
  CHECK(ampx_tensor_copy_from_host(t, values, sizeof values));
}

static float read_scalar(ampx_tensor t) {
  float v = 0.0f;
  CHECK(ampx_tensor_to_host(t, &v, sizeof v));
  return v;
}

/* Mean and standard deviation of a [kBatch, 1] tensor of any float type. */
static void moments(ampx_tensor t, double *mean, double *std) {
  float v[kBatch];
  ampx_tensor t32 = NULL;
  double s = 0.0, ss = 0.0;
  int i;
  CHECK(ampx_tensor_cast(t, AMPX_F32, &t32));
  CHECK(ampx_tensor_to_host(t32, v, sizeof v));
  ampx_tensor_release(t32);
  for (i = 0; i < kBatch; ++i) s += v[i];
  *mean = s / kBatch;
  for (i = 0; i < kBatch; ++i) ss += (v[i] - *mean) * (v[i] - *mean);
  *std = sqrt(ss / kBatch);
}

/* ---- WGAN-GP ---------------------------------------------------------------- */

typedef enum precision { FP32, FP16, BF16 } precision;
static const char *const kPrecisionNames[] = {"fp32", "fp16 + scalers", "bf16"};

/* WGAN-GP's usual schedule: several critic steps per generator step, the
 * critic faster than the generator. The penalty's weight is 0.1, not the
 * paper's 10: in one dimension the optimal critic's slope is -1 or +1
 * everywhere (the sign of the difference of the two distributions'
 * CDFs), so once the generator's mass passes the real one the critic must
 * turn its whole slope around, through 0, against the penalty -- with
 * weight w only once the distance of the means exceeds about 2w. */
enum { kCriticSteps = 5 };
static const double kCriticLr = 2e-3, kGeneratorLr = 5e-4, kPenaltyWeight = 0.1;

/* kPenaltyWeight mean (|dD/dx| - 1)^2 at x_hat (a leaf that requires grad), recorded;
 * scaler NULL: no scaling. Op outputs are owned by the open scope. */
static ampx_tensor gradient_penalty(const net *d, ampx_tensor x_hat, ampx_scaler scaler,
                                    ampx_autocast autocast) {
  ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
  ampx_tensor critic = NULL, total = NULL, seed = NULL, g = NULL, u = NULL, sq = NULL;
  ampx_tensor norm = NULL, off = NULL, off2 = NULL, mean = NULL, penalty = NULL;
  o.create_graph = 1;
  if (autocast) CHECK(ampx_autocast_enter(autocast));
  critic = net_forward(d, x_hat);
  if (autocast) CHECK(ampx_autocast_exit(autocast));
  CHECK(ampx_sum(critic, &total));
  if (scaler) {
    CHECK(ampx_scaler_scale_loss(scaler, total, &seed)); /* owned here */
    CHECK(ampx_grad(&seed, 1, NULL, &x_hat, 1, &o, &g));
    ampx_tensor_release(seed);
    CHECK(ampx_scaler_unscale_tensor(scaler, g, &u));
  } else {
    CHECK(ampx_grad(&total, 1, NULL, &x_hat, 1, &o, &u));
  }
  if (autocast) CHECK(ampx_autocast_enter(autocast));
  CHECK(ampx_mul(u, u, &sq));
  CHECK(ampx_sqrt(sq, &norm)); /* |dD/dx|: x is one number */
  CHECK(ampx_affine(norm, 1.0, -1.0, &off));
  CHECK(ampx_mul(off, off, &off2));
  CHECK(ampx_mean(off2, &mean));
  CHECK(ampx_affine(mean, kPenaltyWeight, 0.0, &penalty));
  if (autocast) CHECK(ampx_autocast_exit(autocast));
  return penalty;
}

/* Trains the WGAN-GP in one precision; returns the generated mean and std. */
static void wgan_gp(int steps, precision p, double *mean, double *std) {
  ampx_context ctx = NULL;
  net g, d;
  ampx_optimizer opt_g, opt_d;
  ampx_scaler scaler_g = NULL, scaler_d = NULL;
  ampx_autocast autocast = NULL;
  const int64_t z_shape[2] = {kBatch, kNoise}, x_shape[2] = {kBatch, 1};
  ampx_tensor z = NULL, real = NULL;
  int step;
  rng = 2024;
  CHECK(ampx_context_create(NULL, &ctx));
  net_init(ctx, &g, kNoise);
  net_init(ctx, &d, 1);
  {
    /* The critic's kinks spread over [-8, 8]: a ReLU critic whose units all
     * switch near 0 is linear over the data and cannot bend its slope where
     * the two distributions meet (the gradient of mean D(fake) - mean
     * D(real) moves no kink of a unit active on both). */
    float spread[kHidden];
    int k;
    for (k = 0; k < kHidden; ++k) spread[k] = (float)(16.0 * uniform() - 8.0);
    CHECK(ampx_tensor_copy_from_host(d.b1, spread, sizeof spread));
  }
  opt_g = net_optimizer(ctx, &g), opt_d = net_optimizer(ctx, &d);
  if (p == FP16) {
    scaler_g = make_scaler(ctx, 1024.0, 200);
    scaler_d = make_scaler(ctx, 1024.0, 200);
  }
  if (p != FP32) {
    ampx_autocast_options ao = AMPX_AUTOCAST_OPTIONS_INIT;
    ao.dtype = p == FP16 ? AMPX_F16 : AMPX_BF16;
    CHECK(ampx_autocast_create(ctx, &ao, &autocast));
  }
  CHECK(ampx_tensor_empty(ctx, AMPX_F32, 2, z_shape, &z));
  CHECK(ampx_tensor_empty(ctx, AMPX_F32, 2, x_shape, &real));
  CHECK(ampx_optimizer_set_lr(opt_d, 0, kCriticLr));
  CHECK(ampx_optimizer_set_lr(opt_g, 0, kGeneratorLr));
  for (step = 0; step < kCriticSteps * steps; ++step) {
    float fake_host[kBatch], real_host[kBatch], hat[kBatch];
    ampx_tensor fake = NULL, fake32 = NULL, x_hat = NULL, c_real, c_fake, m_real = NULL;
    ampx_tensor m_fake = NULL, w_dist = NULL, loss_d = NULL, loss_g = NULL, m_g = NULL;
    int32_t previous = 1;
    int i;
    /* -- critic: every step -- */
    CHECK(ampx_optimizer_zero_grad(opt_d));
    CHECK(ampx_scope_push(ctx));
    fill_noise(z, kBatch * kNoise);
    fill_real(real);
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    CHECK(ampx_set_grad_enabled(ctx, 0, &previous));
    fake = net_forward(&g, z);
    CHECK(ampx_set_grad_enabled(ctx, previous, NULL));
    if (autocast) CHECK(ampx_autocast_exit(autocast));
    CHECK(ampx_tensor_cast(fake, AMPX_F32, &fake32));
    CHECK(ampx_tensor_to_host(fake32, fake_host, sizeof fake_host));
    CHECK(ampx_tensor_to_host(real, real_host, sizeof real_host));
    for (i = 0; i < kBatch; ++i) {
      const double eps = uniform();
      hat[i] = (float)(eps * real_host[i] + (1 - eps) * fake_host[i]);
    }
    CHECK(ampx_tensor_from_host(ctx, AMPX_F32, 2, x_shape, hat, sizeof hat, &x_hat));
    CHECK(ampx_tensor_set_requires_grad(x_hat, 1));
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    c_real = net_forward(&d, real);
    c_fake = net_forward(&d, fake32);
    CHECK(ampx_mean(c_real, &m_real));
    CHECK(ampx_mean(c_fake, &m_fake));
    CHECK(ampx_sub(m_fake, m_real, &w_dist));
    if (autocast) CHECK(ampx_autocast_exit(autocast));
    CHECK(ampx_add(w_dist, gradient_penalty(&d, x_hat, scaler_d, autocast), &loss_d));
    CHECK(ampx_backward(loss_d, scaler_d));
    if (scaler_d) {
      CHECK(ampx_scaler_step(scaler_d, opt_d));
      CHECK(ampx_scaler_update(scaler_d));
    } else {
      CHECK(ampx_optimizer_step(opt_d));
    }
    ampx_tensor_release(fake32);
    ampx_tensor_release(x_hat);
    CHECK(ampx_scope_pop(ctx));
    if (step % kCriticSteps != kCriticSteps - 1) continue;
    /* -- generator: after every kCriticSteps critic steps -- */
    CHECK(ampx_optimizer_zero_grad(opt_g));
    CHECK(ampx_scope_push(ctx));
    fill_noise(z, kBatch * kNoise);
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    fake = net_forward(&g, z);
    CHECK(ampx_mean(net_forward(&d, fake), &m_g));
    CHECK(ampx_affine(m_g, -1.0, 0.0, &loss_g));
    if (autocast) CHECK(ampx_autocast_exit(autocast));
    CHECK(ampx_backward(loss_g, scaler_g));
    if (scaler_g) {
      CHECK(ampx_scaler_step(scaler_g, opt_g));
      CHECK(ampx_scaler_update(scaler_g));
    } else {
      CHECK(ampx_optimizer_step(opt_g));
    }
    moments(fake, mean, std);
    CHECK(ampx_scope_pop(ctx));
  }
  ampx_tensor_release(z);
  ampx_tensor_release(real);
  ampx_autocast_release(autocast);
  ampx_scaler_release(scaler_g);
  ampx_scaler_release(scaler_d);
  ampx_optimizer_release(opt_g);
  ampx_optimizer_release(opt_d);
  net_release(&g);
  net_release(&d);
  ampx_context_release(ctx);
}

static int run_wgan_gp(int steps) {
  int p, ok = 1;
  printf("WGAN-GP on N(%.1f, %.2f^2), %d steps\n", kRealMean, kRealStd, steps);
  printf("%-15s %10s %10s\n", "precision", "fake mean", "fake std");
  for (p = 0; p < 3; ++p) {
    double mean = 0, std = 0;
    wgan_gp(steps, (precision)p, &mean, &std);
    printf("%-15s %10.3f %10.3f\n", kPrecisionNames[p], mean, std);
    ok = ok && fabs(mean - kRealMean) < 1.0;
  }
  if (!ok) {
    fprintf(stderr, "FAILED: a generated mean is not within 1.0 of %.1f\n", kRealMean);
    return 1;
  }
  printf("WGAN-GP: generated mean within 1.0 of %.1f in fp32, fp16 + scalers and bf16: OK\n",
         kRealMean);
  return 0;
}

int main(int argc, char **argv) {
  int steps = 1500, step, i, wgan = 0;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) steps = 500;
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--wgan-gp") == 0) wgan = 1;
    else {
      fprintf(stderr, "usage: %s [--quick] [--steps N] [--wgan-gp]\n", argv[0]);
      return 2;
    }
  }
  if (wgan) return run_wgan_gp(steps);

  ampx_context ctx = NULL;
  CHECK(ampx_context_create(NULL, &ctx));
  net g, d;
  net_init(ctx, &g, kNoise);
  net_init(ctx, &d, 1);
  ampx_optimizer opt_g = net_optimizer(ctx, &g), opt_d = net_optimizer(ctx, &d);
  ampx_scaler scaler_g = make_scaler(ctx, 16777216.0, 2000);
  ampx_scaler scaler_d = make_scaler(ctx, 1024.0, 50);
  ampx_autocast autocast = NULL;
  CHECK(ampx_autocast_create(ctx, NULL, &autocast));

  const int64_t z_shape[2] = {kBatch, kNoise}, x_shape[2] = {kBatch, 1};
  ampx_tensor z = NULL, real = NULL, ones = NULL, zeros = NULL;
  CHECK(ampx_tensor_empty(ctx, AMPX_F32, 2, z_shape, &z));
  CHECK(ampx_tensor_empty(ctx, AMPX_F32, 2, x_shape, &real));
  CHECK(ampx_tensor_zeros(ctx, AMPX_F32, 2, x_shape, &zeros));
  CHECK(ampx_tensor_empty(ctx, AMPX_F32, 2, x_shape, &ones));
  CHECK(ampx_tensor_fill(ones, 1.0));

  double mean = 0.0, std = 0.0;
  printf("step  loss_D  loss_G  fake mean  fake std    scale_D    scale_G\n");
  for (step = 0; step < steps; ++step) {
    ampx_tensor fake = NULL, real_logits = NULL, fake_logits = NULL;
    ampx_tensor loss_real = NULL, loss_fake = NULL, loss_d = NULL, loss_g = NULL;
    int32_t previous = 1;

    /* -- discriminator -- */
    CHECK(ampx_optimizer_zero_grad(opt_d));
    CHECK(ampx_scope_push(ctx));
    fill_noise(z, kBatch * kNoise);
    fill_real(real);
    CHECK(ampx_autocast_enter(autocast));
    CHECK(ampx_set_grad_enabled(ctx, 0, &previous)); /* fake is data for D: no tape */
    fake = net_forward(&g, z);
    CHECK(ampx_set_grad_enabled(ctx, previous, NULL));
    real_logits = net_forward(&d, real);
    fake_logits = net_forward(&d, fake);
    CHECK(ampx_bce_with_logits(real_logits, ones, AMPX_REDUCTION_MEAN, &loss_real));
    CHECK(ampx_bce_with_logits(fake_logits, zeros, AMPX_REDUCTION_MEAN, &loss_fake));
    CHECK(ampx_add(loss_real, loss_fake, &loss_d));
    CHECK(ampx_autocast_exit(autocast));
    CHECK(ampx_backward(loss_d, scaler_d));
    CHECK(ampx_scaler_step(scaler_d, opt_d));
    CHECK(ampx_scaler_update(scaler_d));
    const float loss_d_value = read_scalar(loss_d);
    CHECK(ampx_scope_pop(ctx));

    /* -- generator -- */
    CHECK(ampx_optimizer_zero_grad(opt_g));
    CHECK(ampx_scope_push(ctx));
    fill_noise(z, kBatch * kNoise);
    CHECK(ampx_autocast_enter(autocast));
    fake = net_forward(&g, z);
    fake_logits = net_forward(&d, fake);
    CHECK(ampx_bce_with_logits(fake_logits, ones, AMPX_REDUCTION_MEAN, &loss_g));
    CHECK(ampx_autocast_exit(autocast));
    CHECK(ampx_backward(loss_g, scaler_g));
    CHECK(ampx_scaler_step(scaler_g, opt_g));
    CHECK(ampx_scaler_update(scaler_g));
    const float loss_g_value = read_scalar(loss_g);
    moments(fake, &mean, &std);
    CHECK(ampx_scope_pop(ctx));

    if (step % 100 == 0 || step == steps - 1) {
      double scale_d = 0.0, scale_g = 0.0;
      CHECK(ampx_scaler_get_scale(scaler_d, &scale_d));
      CHECK(ampx_scaler_get_scale(scaler_g, &scale_g));
      printf("%4d  %6.3f  %6.3f  %9.3f  %8.3f  %9.0f  %9.0f\n", step, loss_d_value,
             loss_g_value, mean, std, scale_d, scale_g);
    }
  }

  double scale_d = 0.0, scale_g = 0.0;
  ampx_scaler_counters counters_d = AMPX_SCALER_COUNTERS_INIT;
  ampx_scaler_counters counters_g = AMPX_SCALER_COUNTERS_INIT;
  CHECK(ampx_scaler_get_scale(scaler_d, &scale_d));
  CHECK(ampx_scaler_get_scale(scaler_g, &scale_g));
  CHECK(ampx_scaler_get_counters(scaler_d, &counters_d));
  CHECK(ampx_scaler_get_counters(scaler_g, &counters_g));
  printf("real data: mean %.3f, std %.3f; generated: mean %.3f, std %.3f\n", kRealMean, kRealStd,
         mean, std);
  printf("generator scaler:     %lld skipped steps, %lld backoffs, %lld growths\n",
         (long long)counters_g.skipped, (long long)counters_g.backoffs,
         (long long)counters_g.growths);
  printf("discriminator scaler: %lld skipped steps, %lld backoffs, %lld growths\n",
         (long long)counters_d.skipped, (long long)counters_d.backoffs,
         (long long)counters_d.growths);
  printf("generator scale: %g, discriminator scale: %g\n", scale_g, scale_d);

  const int scales_ok = isfinite(scale_g) && scale_g > 0.0 && isfinite(scale_d) && scale_d > 0.0;
  const int learned = fabs(mean - kRealMean) < 1.0;

  ampx_tensor_release(z);
  ampx_tensor_release(real);
  ampx_tensor_release(ones);
  ampx_tensor_release(zeros);
  ampx_autocast_release(autocast);
  ampx_scaler_release(scaler_g);
  ampx_scaler_release(scaler_d);
  ampx_optimizer_release(opt_g);
  ampx_optimizer_release(opt_d);
  net_release(&g);
  net_release(&d);
  ampx_context_release(ctx);
  if (!scales_ok) fprintf(stderr, "FAILED: a scale is not finite and positive\n");
  if (!learned) fprintf(stderr, "FAILED: the generated mean %.3f is not near %.1f\n", mean, kRealMean);
  return scales_ok && learned ? 0 : 1;
}
