/*
 * eikonal_sdf.c -- a neural signed-distance field of a 2-D shape, trained
 * with an eikonal term, in fp32, in fp16 with dynamic loss scaling and in
 * bf16: the gradient of the network with respect to its input is itself
 * trained, which needs the gradient of a gradient (ampx_grad with
 * create_graph).
 *
 * The shape is a rounded rectangle (half extents 0.55 x 0.3, corner radius
 * 0.1) in [-1, 1]^2, whose exact signed distance is known:
 *   q = |p| - b + r,  sdf(p) = |max(q, 0)| + min(max(q.x, q.y), 0) - r.
 * The network f: R^2 -> R is an MLP (2 -> W -> W -> W -> 1, GELU). Each step
 * samples points on the boundary (with their outward normals n) and points
 * in the square, and minimises, as IGR (Gropp et al. 2020) does,
 *   mean f(p_s)^2 + mean |grad f(p_s) - n|^2 + 0.1 mean (|grad f(p)| - 1)^2,
 * the last the eikonal term: a signed distance has a gradient of norm 1.
 *
 * Mixed precision follows torch's gradient-penalty recipe (ampx.h section
 * 9): the forward runs under autocast; the scaler's scale_loss seeds the
 * input gradients (taken with create_graph, so the scale keeps small fp16
 * gradients alive), unscale_tensor divides them by the scale on the device,
 * the penalty terms are formed under autocast, and the usual scaled
 * backward, step and update follow. fp16 needs that scaler: the parameter
 * gradients of the last layers fall below fp16's range otherwise. bf16
 * needs none.
 *
 * Each precision trains the same initial weights with Adam, then is
 * evaluated on a 64 x 64 grid: the mean of ||grad f| - 1| (the eikonal
 * residual), the mean |f - sdf| on the true boundary (the surface error)
 * and over the square. Exits 1 unless every precision reaches the stated
 * bounds (--eikonal, --surface) and the 16-bit surface errors are within
 * 2x fp32's (plus 0.01).
 *
 * Run:   ampx_example_eikonal_sdf [--quick] [--steps N] [--width W] [--points N]
 *        --quick: width 24, 128 points, 300 steps (the ctest settings)
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

enum { kLayers = 4, kGrid = 64 };
static const double kHalfX = 0.55, kHalfY = 0.3, kRadius = 0.1;

typedef struct config {
  int width, points, steps;
  double lr, eikonal_bound, surface_bound;
} config;

/* ---- the shape --------------------------------------------------------------- */

static double sdf(double x, double y) {
  const double qx = fabs(x) - kHalfX + kRadius, qy = fabs(y) - kHalfY + kRadius;
  const double ox = qx > 0 ? qx : 0, oy = qy > 0 ? qy : 0;
  const double inside = qx > qy ? qx : qy;
  return sqrt(ox * ox + oy * oy) + (inside < 0 ? inside : 0) - kRadius;
}

static unsigned long long rng_state = 2718;

static double uniform(void) { /* [0, 1) */
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* A point on the boundary, uniform in arc length, with its outward normal:
 * four straight sides and four quarter circles. */
static void boundary_point(double t, double *p, double *n) {
  const double sx = kHalfX - kRadius, sy = kHalfY - kRadius;
  const double arc = 0.5 * 3.141592653589793 * kRadius;
  const double lengths[8] = {2 * sx, arc, 2 * sy, arc, 2 * sx, arc, 2 * sy, arc};
  double total = 0, at;
  int k;
  for (k = 0; k < 8; ++k) total += lengths[k];
  at = t * total;
  for (k = 0; k < 7 && at > lengths[k]; ++k) at -= lengths[k];
  {
    /* Counter-clockwise from the bottom side: side, corner, side, ... Corner
     * i turns a quarter from angle -pi/2 + i pi/2 about its centre. */
    static const double centre_x[4] = {1, 1, -1, -1}, centre_y[4] = {-1, 1, 1, -1};
    const double quarter = 0.5 * 3.141592653589793;
    const int i = k / 2;
    switch (k) {
      case 0: p[0] = -sx + at, p[1] = -kHalfY, n[0] = 0, n[1] = -1; break;
      case 2: p[0] = kHalfX, p[1] = -sy + at, n[0] = 1, n[1] = 0; break;
      case 4: p[0] = sx - at, p[1] = kHalfY, n[0] = 0, n[1] = 1; break;
      case 6: p[0] = -kHalfX, p[1] = sy - at, n[0] = -1, n[1] = 0; break;
      default: {
        const double angle = -quarter + i * quarter + at / kRadius;
        n[0] = cos(angle), n[1] = sin(angle);
        p[0] = centre_x[i] * sx + kRadius * n[0];
        p[1] = centre_y[i] * sy + kRadius * n[1];
      }
    }
  }
}

/* ---- the network --------------------------------------------------------------- */

typedef struct weights {
  float *w[kLayers], *b[kLayers];
  int64_t rows[kLayers], cols[kLayers];
} weights;

static double normal(void) {
  return sqrt(-2.0 * log(1.0 - uniform())) * cos(6.283185307179586 * uniform());
}

static weights draw_weights(int width) {
  weights w;
  int l;
  for (l = 0; l < kLayers; ++l) {
    const int64_t in = l == 0 ? 2 : width, out = l == kLayers - 1 ? 1 : width;
    int64_t i;
    w.rows[l] = out, w.cols[l] = in;
    w.w[l] = malloc(sizeof(float) * (size_t)(in * out));
    w.b[l] = calloc((size_t)out, sizeof(float));
    for (i = 0; i < in * out; ++i) w.w[l][i] = (float)(normal() * sqrt(2.0 / (double)in));
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

/* f(points) [N, 1]; op outputs are owned by the open scope. */
static ampx_tensor forward(ampx_tensor const *params, ampx_tensor points) {
  ampx_tensor h = points;
  int l;
  for (l = 0; l < kLayers; ++l) {
    ampx_tensor out = NULL;
    CHECK(ampx_linear(h, params[2 * l], params[2 * l + 1],
                      l == kLayers - 1 ? AMPX_ACTIVATION_NONE : AMPX_ACTIVATION_GELU, &out));
    h = out;
  }
  return h;
}

/* The gradient of f with respect to the points, recorded (create_graph).
 * With a scaler, the seed is the scale and the result is unscaled on the
 * device: the gradient-penalty recipe. */
static ampx_tensor input_gradient(ampx_tensor f, ampx_tensor points, ampx_scaler scaler) {
  ampx_grad_options o = AMPX_GRAD_OPTIONS_INIT;
  ampx_tensor total = NULL, seed = NULL, g = NULL;
  o.create_graph = 1;
  CHECK(ampx_sum(f, &total));
  if (!scaler) {
    CHECK(ampx_grad(&total, 1, NULL, &points, 1, &o, &g));
    return g;
  }
  CHECK(ampx_scaler_scale_loss(scaler, total, &seed)); /* owned by us */
  CHECK(ampx_grad(&seed, 1, NULL, &points, 1, &o, &g));
  ampx_tensor_release(seed);
  {
    ampx_tensor unscaled = NULL;
    CHECK(ampx_scaler_unscale_tensor(scaler, g, &unscaled));
    return unscaled;
  }
}

/* |g| per row of g [N, 2]: [N]. */
static ampx_tensor row_norm(ampx_tensor g) {
  const int32_t dim = 1;
  ampx_tensor squares = NULL, sum = NULL, norm = NULL;
  CHECK(ampx_mul(g, g, &squares));
  CHECK(ampx_sum_dims(squares, &dim, 1, 0, &sum));
  CHECK(ampx_sqrt(sum, &norm));
  return norm;
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
  double eikonal, surface, field, final_loss;
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
  float *surface = malloc(sizeof(float) * (size_t)n * 2);
  float *normals = malloc(sizeof(float) * (size_t)n * 2);
  float *random = malloc(sizeof(float) * (size_t)n * 2);
  float *grid = malloc(sizeof(float) * kGrid * kGrid * 2);
  result r;
  int l, step, i;
  memset(&r, 0, sizeof r);
  rng_state = 31415;
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
    const int64_t pts[2] = {n, 2};
    ampx_tensor on = NULL, nrm = NULL, off = NULL, f_on, f_off, g_on, g_off, loss = NULL;
    ampx_tensor t1, t2, t3, diff = NULL, ones_shift = NULL, sum12 = NULL, w3 = NULL;
    for (i = 0; i < n; ++i) {
      double pt[2], nn[2];
      boundary_point(uniform(), pt, nn);
      surface[2 * i] = (float)pt[0], surface[2 * i + 1] = (float)pt[1];
      normals[2 * i] = (float)nn[0], normals[2 * i + 1] = (float)nn[1];
      random[2 * i] = (float)(2 * uniform() - 1), random[2 * i + 1] = (float)(2 * uniform() - 1);
    }
    CHECK(ampx_scope_push(ctx));
    on = tensor_of(ctx, 2, pts, surface, 1);
    nrm = tensor_of(ctx, 2, pts, normals, 0);
    off = tensor_of(ctx, 2, pts, random, 1);
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    f_on = forward(params, on);
    f_off = forward(params, off);
    if (autocast) CHECK(ampx_autocast_exit(autocast));
    g_on = input_gradient(f_on, on, p == FP16 ? scaler : NULL);
    g_off = input_gradient(f_off, off, p == FP16 ? scaler : NULL);
    if (autocast) CHECK(ampx_autocast_enter(autocast));
    t1 = mean_square(f_on);                              /* f = 0 on the boundary */
    CHECK(ampx_sub(g_on, nrm, &diff));                   /* grad f = n there */
    t2 = mean_square(diff);
    CHECK(ampx_affine(row_norm(g_off), 1.0, -1.0, &ones_shift)); /* |grad f| - 1 */
    t3 = mean_square(ones_shift);
    CHECK(ampx_add(t1, t2, &sum12));
    CHECK(ampx_affine(t3, 0.1, 0.0, &w3));
    CHECK(ampx_add(sum12, w3, &loss));
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
    ampx_tensor_release(on);
    ampx_tensor_release(nrm);
    ampx_tensor_release(off);
    CHECK(ampx_scope_pop(ctx));
  }
  {
    /* Evaluation in fp32 without autocast: the trained weights' field. */
    const int64_t gshape[2] = {kGrid * kGrid, 2}, bshape[2] = {n, 2};
    ampx_tensor pts, f, g, bpts, fb;
    float *fv = malloc(sizeof(float) * kGrid * kGrid), *gv = malloc(sizeof(float) * kGrid * kGrid * 2);
    float *bv = malloc(sizeof(float) * (size_t)n);
    for (i = 0; i < kGrid * kGrid; ++i) {
      grid[2 * i] = (float)(-1 + (2.0 * (i % kGrid) + 1) / kGrid);
      grid[2 * i + 1] = (float)(-1 + (2.0 * (i / kGrid) + 1) / kGrid);
    }
    for (i = 0; i < n; ++i) {
      double pt[2], nn[2];
      boundary_point((i + 0.5) / n, pt, nn);
      surface[2 * i] = (float)pt[0], surface[2 * i + 1] = (float)pt[1];
    }
    CHECK(ampx_scope_push(ctx));
    pts = tensor_of(ctx, 2, gshape, grid, 1);
    f = forward(params, pts);
    g = input_gradient(f, pts, NULL);
    CHECK(ampx_tensor_to_host(f, fv, sizeof(float) * kGrid * kGrid));
    CHECK(ampx_tensor_to_host(g, gv, sizeof(float) * kGrid * kGrid * 2));
    bpts = tensor_of(ctx, 2, bshape, surface, 0);
    fb = forward(params, bpts);
    CHECK(ampx_tensor_to_host(fb, bv, sizeof(float) * (size_t)n));
    for (i = 0; i < kGrid * kGrid; ++i) {
      r.eikonal += fabs(sqrt((double)gv[2 * i] * gv[2 * i] + (double)gv[2 * i + 1] * gv[2 * i + 1]) - 1);
      r.field += fabs(fv[i] - sdf(grid[2 * i], grid[2 * i + 1]));
    }
    r.eikonal /= kGrid * kGrid;
    r.field /= kGrid * kGrid;
    for (i = 0; i < n; ++i) r.surface += fabs(bv[i]);
    r.surface /= n;
    ampx_tensor_release(pts);
    ampx_tensor_release(bpts);
    CHECK(ampx_scope_pop(ctx));
    free(fv), free(gv), free(bv);
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
  free(surface), free(normals), free(random), free(grid);
  return r;
}

static config parse(int argc, char **argv) {
  config c;
  int i;
  c.width = 48, c.points = 256, c.steps = 1500, c.lr = 2e-3;
  c.eikonal_bound = 0.07, c.surface_bound = 0.01;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      c.width = 24, c.points = 128, c.steps = 300, c.lr = 5e-3;
      c.eikonal_bound = 0.15, c.surface_bound = 0.03;
    } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      c.steps = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--width") == 0 && i + 1 < argc) {
      c.width = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--points") == 0 && i + 1 < argc) {
      c.points = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--eikonal") == 0 && i + 1 < argc) {
      c.eikonal_bound = atof(argv[++i]);
    } else if (strcmp(argv[i], "--surface") == 0 && i + 1 < argc) {
      c.surface_bound = atof(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--quick] [--steps N] [--width W] [--points N] [--eikonal E] "
                      "[--surface S]\n", argv[0]);
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
  printf("neural SDF of a rounded rectangle: width %d, %d points, %d steps\n", cfg.width,
         cfg.points, cfg.steps);
  printf("%-14s %12s %16s %16s %12s %8s\n", "precision", "final loss", "mean||grad f|-1|",
         "surface error", "|f - sdf|", "skipped");
  for (p = 0; p < 3; ++p) {
    r[p] = train(&cfg, &w, (precision)p);
    printf("%-14s %12.4e %16.4f %16.4f %12.4f %8ld\n", kNames[p], r[p].final_loss, r[p].eikonal,
           r[p].surface, r[p].field, r[p].skipped);
    ok = ok && r[p].eikonal < cfg.eikonal_bound && r[p].surface < cfg.surface_bound;
  }
  for (p = 1; p < 3; ++p) ok = ok && r[p].surface < 2 * r[0].surface + 0.01;
  for (l = 0; l < kLayers; ++l) free(w.w[l]), free(w.b[l]);
  if (!ok) {
    printf("FAILED: a precision missed the bounds (eikonal < %.3f, surface < %.3f, 16-bit surface "
           "within 2x fp32 + 0.01)\n", cfg.eikonal_bound, cfg.surface_bound);
    return 1;
  }
  printf("eikonal residual below %.3f and surface error below %.3f in fp32, fp16 + scaler and "
         "bf16: OK\n", cfg.eikonal_bound, cfg.surface_bound);
  return 0;
}
