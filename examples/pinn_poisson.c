/*
 * pinn_poisson.c -- a physics-informed network solves Poisson's equation
 *   -(u_xx + u_yy) = 2 pi^2 sin(pi x) sin(pi y)  on (0, 1)^2,  u = 0 on the edge,
 * whose solution is u = sin(pi x) sin(pi y), in fp32, in fp16 with dynamic
 * loss scaling and in bf16.
 *
 * The trial solution is u(x, y) = 16 x (1 - x) y (1 - y) N(x, y), N an MLP
 * (2 -> W -> W -> W -> 1, tanh), so the boundary condition holds exactly
 * (Lagaris et al. 1998) and the loss is the residual alone:
 *   mean (u_xx + u_yy + f)^2
 * at random collocation points. The Laplacian comes from ampx_grad with
 * create_graph: g = grad u, then the gradients of g's two columns, whose
 * diagonal entries are u_xx and u_yy (the product with the boundary factor
 * is differentiated by the ops' own formulas). Training differentiates the
 * Laplacian once more with respect to the weights: third-order derivatives
 * of the network, through tanh's first three derivatives.
 *
 * The derivatives with respect to the coordinates are of order 1 to pi^2,
 * which fp16 holds without a scale; fp16 needs the scaler for the final
 * backward, whose parameter gradients are small. bf16 needs none.
 *
 * Each precision trains the same initial weights with Adam (the learning
 * rate decays by 10 over the run), then u is compared with the solution on
 * a 32 x 32 grid: the relative L2 error. Exits 1 unless every precision is
 * below --error (and the 16-bit ones within 2x fp32's plus 0.02).
 *
 * Run:   ampx_example_pinn_poisson [--quick] [--steps N] [--width W] [--points N]
 *        --quick: width 16, 96 points, 250 steps (the ctest settings)
 */
#ifndef AMPX_EXPERIMENTAL
#define AMPX_EXPERIMENTAL /* autograd, ampx_grad and the ops are experimental */
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

enum { kLayers = 4, kGrid = 32 };
static const double kPi = 3.141592653589793;

typedef struct config {
  int width, points, steps;
  double lr, error_bound;
} config;

static unsigned long long rng_state = 1618;

static double uniform(void) { /* [0, 1) */
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

static double normal(void) {
  return sqrt(-2.0 * log(1.0 - uniform())) * cos(2 * kPi * uniform());
}

static double solution(double x, double y) { return sin(kPi * x) * sin(kPi * y); }

/* ---- the network ----------------------------------------------------------------- */

typedef struct weights {
  float *w[kLayers], *b[kLayers];
  int64_t rows[kLayers], cols[kLayers];
} weights;

static weights draw_weights(int width) {
  weights w;
  int l;
  for (l = 0; l < kLayers; ++l) {
    const int64_t in = l == 0 ? 2 : width, out = l == kLayers - 1 ? 1 : width;
    int64_t i;
    w.rows[l] = out, w.cols[l] = in;
    w.w[l] = malloc(sizeof(float) * (size_t)(in * out));
    w.b[l] = calloc((size_t)out, sizeof(float));
    for (i = 0; i < in * out; ++i) w.w[l][i] = (float)(normal() * sqrt(1.0 / (double)in));
  }
  return w;
}

static ampx_tensor tensor_of(ampx_context ctx, int ndim, const int64_t *shape, const float *values,
                             int requires_grad) {
  ampx_tensor t = NULL;
  int64_t n = 1;
  int k;
  for (k = 0; k < ndim; ++k) n *= shape[k];
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, ndim, shape, values, (size_t)n * sizeof(float), &t));
  if (requires_grad) CHECK(ampx_tensor_set_requires_grad(t, 1));
  return t;
}

/* Column `which` of x [N, 2], as [N, 1]. */
static ampx_tensor column(ampx_tensor x, int which) {
  const int64_t sizes[2] = {1, 1};
  ampx_tensor pieces[2] = {NULL, NULL};
  CHECK(ampx_split(x, sizes, 2, 1, pieces));
  return pieces[which];
}

/* t (1 - t) for a column t. */
static ampx_tensor bump(ampx_tensor t) {
  ampx_tensor t2 = NULL, out = NULL;
  CHECK(ampx_mul(t, t, &t2));
  CHECK(ampx_sub(t, t2, &out));
  return out;
}

/* u(points) [N, 1] = 16 x (1 - x) y (1 - y) N(points) (16: the factor is
 * 1 at the centre, so N is of order 1); op outputs are owned by the open
 * scope. */
static ampx_tensor forward(ampx_tensor const *params, ampx_tensor points) {
  ampx_tensor h = points, product = NULL, factor = NULL, u = NULL;
  int l;
  for (l = 0; l < kLayers; ++l) {
    ampx_tensor z = NULL;
    CHECK(ampx_linear(h, params[2 * l], params[2 * l + 1], AMPX_ACTIVATION_NONE, &z));
    if (l < kLayers - 1) CHECK(ampx_tanh(z, &h));
    else h = z;
  }
  CHECK(ampx_mul(bump(column(points, 0)), bump(column(points, 1)), &product));
  CHECK(ampx_affine(product, 16.0, 0.0, &factor));
  CHECK(ampx_mul(factor, h, &u));
  return u;
}

/* d(sum y)/d x, recorded. */
static ampx_tensor gradient(ampx_tensor y, ampx_tensor x) {
  ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
  ampx_tensor total = NULL, g = NULL;
  o.create_graph = 1;
  CHECK(ampx_sum(y, &total));
  CHECK(ampx_grad(&total, 1, NULL, &x, 1, &o, &g));
  return g;
}

/* u_xx + u_yy at the points [N, 1]. */
static ampx_tensor laplacian(ampx_tensor u, ampx_tensor points) {
  ampx_tensor g = gradient(u, points), lap = NULL;
  ampx_tensor uxx = column(gradient(column(g, 0), points), 0);
  ampx_tensor uyy = column(gradient(column(g, 1), points), 1);
  CHECK(ampx_add(uxx, uyy, &lap));
  return lap;
}

static ampx_tensor mean_square(ampx_tensor x) {
  ampx_tensor sq = NULL, m = NULL;
  CHECK(ampx_mul(x, x, &sq));
  CHECK(ampx_mean(sq, &m));
  return m;
}

/* ---- training ---------------------------------------------------------------- */

typedef enum precision { FP32, FP16, BF16 } precision;
static const char *const kNames[] = {"fp32", "fp16 + scaler", "bf16"};

typedef struct result {
  double error, final_loss;
  long skipped;
} result;

static result train(const config *cfg, const weights *w0, precision p) {
  ampx_context ctx = NULL;
  ampx_tensor params[2 * kLayers];
  ampx_optimizer opt = NULL;
  ampx_scaler scaler = NULL;
  ampx_autocast autocast = NULL;
  ampx_adam_options ao = AMPX_ADAM_OPTIONS_INIT;
  ampx_scaler_options so = AMPX_SCALER_OPTIONS_INIT;
  const int n = cfg->points;
  float *inside = malloc(sizeof(float) * (size_t)n * 2);
  float *source = malloc(sizeof(float) * (size_t)n);
  float *grid = malloc(sizeof(float) * kGrid * kGrid * 2);
  float *u = malloc(sizeof(float) * kGrid * kGrid);
  result r;
  int l, step, i;
  memset(&r, 0, sizeof r);
  rng_state = 1618;
  CHECK(ampx_context_create(NULL, &ctx));
  for (l = 0; l < kLayers; ++l) {
    const int64_t ws[2] = {w0->rows[l], w0->cols[l]};
    params[2 * l] = tensor_of(ctx, 2, ws, w0->w[l], 1);
    params[2 * l + 1] = tensor_of(ctx, 1, &w0->rows[l], w0->b[l], 1);
  }
  ao.lr = cfg->lr;
  CHECK(ampx_optimizer_create_adam(ctx, params, 2 * kLayers, &ao, &opt));
  so.init_scale = 1024.0;
  so.growth_interval = 50;
  so.enabled = p == FP16;
  CHECK(ampx_scaler_create(ctx, &so, &scaler));
  if (p != FP32) {
    ampx_autocast_options co = AMPX_AUTOCAST_OPTIONS_INIT;
    co.dtype = p == FP16 ? AMPX_F16 : AMPX_BF16;
    CHECK(ampx_autocast_create(ctx, &co, &autocast));
  }
  for (step = 0; step < cfg->steps; ++step) {
    const int64_t ins[2] = {n, 2}, col[2] = {n, 1};
    ampx_tensor pts, f, u_in, lap, residual = NULL, loss = NULL;
    /* Exponential decay, from cfg->lr to cfg->lr / 10 over the run. */
    CHECK(ampx_optimizer_set_lr(opt, 0,
                                cfg->lr * pow(0.1, (double)step / (double)cfg->steps)));
    for (i = 0; i < n; ++i) {
      const double x = uniform(), y = uniform();
      inside[2 * i] = (float)x, inside[2 * i + 1] = (float)y;
      source[i] = (float)(2 * kPi * kPi * solution(x, y));
    }
    CHECK(ampx_scope_push(ctx));
    pts = tensor_of(ctx, 2, ins, inside, 1);
    f = tensor_of(ctx, 2, col, source, 0);
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    u_in = forward(params, pts);
    if (autocast) CHECK(ampx_autocast_exit(autocast));
    lap = laplacian(u_in, pts);
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    CHECK(ampx_add(lap, f, &residual));
    loss = mean_square(residual);
    if (autocast) CHECK(ampx_autocast_exit(autocast));
    CHECK(ampx_backward(loss, scaler));
    CHECK(ampx_scaler_step(scaler, opt));
    CHECK(ampx_scaler_update(scaler));
    CHECK(ampx_optimizer_zero_grad(opt));
    if (step == cfg->steps - 1) {
      float value = 0;
      ampx_tensor f32 = NULL;
      CHECK(ampx_tensor_cast(loss, AMPX_F32, &f32));
      CHECK(ampx_tensor_to_host(f32, &value, sizeof value));
      ampx_tensor_release(f32);
      r.final_loss = value;
    }
    ampx_tensor_release(pts);
    ampx_tensor_release(f);
    CHECK(ampx_scope_pop(ctx));
  }
  {
    const int64_t gshape[2] = {kGrid * kGrid, 2};
    double num = 0, den = 0;
    ampx_tensor pts, out;
    for (i = 0; i < kGrid * kGrid; ++i) {
      grid[2 * i] = (float)((i % kGrid + 0.5) / kGrid);
      grid[2 * i + 1] = (float)((i / kGrid + 0.5) / kGrid);
    }
    CHECK(ampx_scope_push(ctx));
    pts = tensor_of(ctx, 2, gshape, grid, 0);
    out = forward(params, pts);
    CHECK(ampx_tensor_to_host(out, u, sizeof(float) * kGrid * kGrid));
    for (i = 0; i < kGrid * kGrid; ++i) {
      const double want = solution(grid[2 * i], grid[2 * i + 1]);
      num += (u[i] - want) * (u[i] - want);
      den += want * want;
    }
    r.error = sqrt(num / den);
    ampx_tensor_release(pts);
    CHECK(ampx_scope_pop(ctx));
  }
  {
    ampx_scaler_counters c = AMPX_SCALER_COUNTERS_INIT;
    CHECK(ampx_scaler_get_counters(scaler, &c));
    r.skipped = (long)c.skipped;
  }
  ampx_autocast_release(autocast);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  for (l = 0; l < 2 * kLayers; ++l) ampx_tensor_release(params[l]);
  ampx_context_release(ctx);
  free(inside), free(source), free(grid), free(u);
  return r;
}

static config parse(int argc, char **argv) {
  config c;
  int i;
  c.width = 32, c.points = 256, c.steps = 2000, c.lr = 3e-3, c.error_bound = 0.005;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      c.width = 16, c.points = 96, c.steps = 250, c.lr = 1e-2, c.error_bound = 0.05;
    } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      c.steps = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--width") == 0 && i + 1 < argc) {
      c.width = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--points") == 0 && i + 1 < argc) {
      c.points = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--error") == 0 && i + 1 < argc) {
      c.error_bound = atof(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--quick] [--steps N] [--width W] [--points N] [--error E]\n",
              argv[0]);
      exit(2);
    }
  }
  return c;
}

int main(int argc, char **argv) {
  const config cfg = parse(argc, argv);
  const weights w = draw_weights(cfg.width);
  result r[3];
  int p, ok = 1, l;
  printf("PINN for -laplace(u) = 2 pi^2 sin(pi x) sin(pi y) on (0, 1)^2: width %d, %d points, "
         "%d steps\n", cfg.width, cfg.points, cfg.steps);
  printf("%-14s %12s %16s %8s\n", "precision", "final loss", "relative error", "skipped");
  for (p = 0; p < 3; ++p) {
    r[p] = train(&cfg, &w, (precision)p);
    printf("%-14s %12.4e %16.4f %8ld\n", kNames[p], r[p].final_loss, r[p].error, r[p].skipped);
    ok = ok && r[p].error < cfg.error_bound;
  }
  for (p = 1; p < 3; ++p) ok = ok && r[p].error < 2 * r[0].error + 0.02;
  for (l = 0; l < kLayers; ++l) free(w.w[l]), free(w.b[l]);
  if (!ok) {
    printf("FAILED: a precision missed the bound (relative error < %.3f, 16-bit within 2x fp32 + "
           "0.02)\n", cfg.error_bound);
    return 1;
  }
  printf("relative error below %.3f in fp32, fp16 + scaler and bf16: OK\n", cfg.error_bound);
  return 0;
}
