/*
 * data_parallel.c -- the standard mixed-precision loop in every process of a
 * data-parallel job (seed 5.3): one process per device, a scaler in each.
 *
 *   mpirun -np 4 build/examples/ampx_example_data_parallel [--quick]
 *
 * Each of the N ranks takes its 1/N of every global batch of the rings data
 * set (train_mlp.c's) and runs the same loop as one process would:
 *
 *   forward and loss under autocast             (f16 matmuls, fp32 loss)
 *   backward seeded with the loss scale         ampx_backward: the gradient
 *                                               buckets are averaged over the
 *                                               ranks while it runs
 *   unscale (found-inf agreed by every rank)    ampx_scaler_unscale
 *   clip by total norm                          ampx_clip_grad_norm
 *   step (skipped alike on every rank)          ampx_scaler_step
 *   grow or back off the scale                  ampx_scaler_update
 *
 * Every rank starts from its own random weights; ampx_data_parallel_create
 * broadcasts rank 0's. At the end rank 0 prints the accuracy and checks that
 * every rank holds bitwise the same parameters; exits 1 if not, or if the
 * accuracy is below 90%.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampx/ampx.h"

#define CHECK(call)                                                                     \
  do {                                                                                  \
    ampx_status check_status_ = (call);                                                 \
    if (check_status_ != AMPX_OK) {                                                     \
      fprintf(stderr, "rank %d: %s:%d: %s failed: %s\n", rank, __FILE__, __LINE__, #call, \
              ampx_last_error());                                                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                     \
    }                                                                                   \
  } while (0)

enum { kIn = 2, kHidden = 64, kClasses = 3, kSamples = 1536, kBatch = 128, kParams = 6 };

static int rank = 0, world = 1;
static unsigned long long rng = 12345;

static double uniform(void) { /* [0, 1) */
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static float data_x[kSamples * kIn];
static int64_t data_y[kSamples];

static void make_rings(void) { /* the same points on every rank */
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

static ampx_tensor make_param(ampx_context ctx, int64_t rows, int64_t fan_in, int bias) {
  const int64_t shape[2] = {rows, fan_in};
  const int64_t n = bias ? rows : rows * fan_in;
  const double bound = 1.0 / sqrt((double)fan_in);
  float *values = malloc((size_t)n * sizeof *values);
  ampx_tensor t = NULL;
  int64_t i;
  if (!values) MPI_Abort(MPI_COMM_WORLD, 1);
  for (i = 0; i < n; ++i) values[i] = (float)(bound * (2.0 * uniform() - 1.0));
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, bias ? 1 : 2, shape, values,
                              (size_t)n * sizeof *values, &t));
  CHECK(ampx_tensor_set_requires_grad(t, 1));
  free(values);
  return t;
}

static ampx_tensor forward(ampx_tensor *p, ampx_tensor x) {
  ampx_tensor h1 = NULL, h2 = NULL, logits = NULL;
  CHECK(ampx_linear(x, p[0], p[1], AMPX_ACTIVATION_RELU, &h1));
  CHECK(ampx_linear(h1, p[2], p[3], AMPX_ACTIVATION_RELU, &h2));
  CHECK(ampx_linear(h2, p[4], p[5], AMPX_ACTIVATION_NONE, &logits));
  return logits;
}

/* FNV-1a of every parameter's bytes: equal on every rank, or the replicas
 * have drifted apart. */
static unsigned long long parameter_digest(ampx_tensor *params) {
  unsigned long long hash = 1469598103934665603ULL;
  int i;
  for (i = 0; i < kParams; ++i) {
    size_t bytes = 0, k;
    unsigned char *host;
    CHECK(ampx_tensor_nbytes(params[i], &bytes));
    host = malloc(bytes);
    if (!host) MPI_Abort(MPI_COMM_WORLD, 1);
    CHECK(ampx_tensor_to_host(params[i], host, bytes));
    for (k = 0; k < bytes; ++k) hash = (hash ^ host[k]) * 1099511628211ULL;
    free(host);
  }
  return hash;
}

int main(int argc, char **argv) {
  int steps = 600, step, i;
  MPI_Comm comm_world;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  comm_world = MPI_COMM_WORLD;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) steps = 150;
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
  }
  if (kBatch % world != 0) {
    if (rank == 0) fprintf(stderr, "the batch of %d does not split into %d ranks\n", kBatch, world);
    MPI_Finalize();
    return 2;
  }
  const int rows = kBatch / world;
  make_rings();
  rng += (unsigned long long)rank; /* each rank's own initial weights */

  ampx_context ctx = NULL;
  CHECK(ampx_context_create(NULL, &ctx));
  ampx_tensor params[kParams];
  params[0] = make_param(ctx, kHidden, kIn, 0);
  params[1] = make_param(ctx, kHidden, kIn, 1);
  params[2] = make_param(ctx, kHidden, kHidden, 0);
  params[3] = make_param(ctx, kHidden, kHidden, 1);
  params[4] = make_param(ctx, kClasses, kHidden, 0);
  params[5] = make_param(ctx, kClasses, kHidden, 1);

  ampx_optimizer opt = NULL;
  ampx_adam_options adamw = AMPX_ADAMW_OPTIONS_INIT;
  adamw.lr = 1e-2;
  CHECK(ampx_optimizer_create_adam(ctx, params, kParams, &adamw, &opt));
  ampx_scaler scaler = NULL;
  CHECK(ampx_scaler_create(ctx, NULL, &scaler));
  ampx_autocast autocast = NULL;
  CHECK(ampx_autocast_create(ctx, NULL, &autocast));

  /* The job's communicator, and the optimizer wrapped for it: rank 0's
   * weights go to every rank, the gradients become views of buckets. */
  ampx_comm comm = NULL;
  CHECK(ampx_comm_from_mpi(ctx, &comm_world, &comm));
  ampx_data_parallel dp = NULL;
  CHECK(ampx_data_parallel_create(comm, opt, NULL, &dp));

  const int64_t bx_shape[2] = {rows, kIn}, by_shape[1] = {rows};
  ampx_tensor bx = NULL, by = NULL;
  CHECK(ampx_tensor_empty(ctx, AMPX_F32, 2, bx_shape, &bx));
  CHECK(ampx_tensor_empty(ctx, AMPX_I64, 1, by_shape, &by));

  if (rank == 0) printf("%d ranks, %d rows each per step\nstep    loss    scale\n", world, rows);
  for (step = 0; step < steps; ++step) {
    const int first = (step * kBatch) % kSamples + rank * rows;
    ampx_tensor logits = NULL, loss = NULL, norm = NULL;
    CHECK(ampx_tensor_copy_from_host(bx, data_x + first * kIn, sizeof(float) * rows * kIn));
    CHECK(ampx_tensor_copy_from_host(by, data_y + first, sizeof(int64_t) * rows));

    CHECK(ampx_optimizer_zero_grad(opt));
    CHECK(ampx_scope_push(ctx));
    CHECK(ampx_autocast_enter(autocast));
    logits = forward(params, bx);
    CHECK(ampx_cross_entropy(logits, by, AMPX_REDUCTION_MEAN, -100, &loss));
    CHECK(ampx_autocast_exit(autocast));

    CHECK(ampx_backward(loss, scaler));
    CHECK(ampx_scaler_unscale(scaler, opt));
    CHECK(ampx_clip_grad_norm(opt, 1.0, 2.0, 0, &norm));
    CHECK(ampx_scaler_step(scaler, opt));
    CHECK(ampx_scaler_update(scaler));

    if (rank == 0 && (step % 50 == 0 || step == steps - 1)) {
      float loss_value = 0.0f;
      double scale = 0.0;
      CHECK(ampx_tensor_to_host(loss, &loss_value, sizeof loss_value)); /* rank 0's part */
      CHECK(ampx_scaler_get_scale(scaler, &scale));
      printf("%4d  %6.4f  %7.0f\n", step, loss_value, scale);
    }
    ampx_tensor_release(norm);
    CHECK(ampx_scope_pop(ctx));
  }

  /* Accuracy on the whole data set, on every rank (they are identical). */
  static float all_logits[kSamples * kClasses];
  const int64_t x_shape[2] = {kSamples, kIn};
  ampx_tensor x = NULL, logits = NULL, logits32 = NULL;
  int32_t previous = 1;
  int right = 0;
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, 2, x_shape, data_x, sizeof data_x, &x));
  CHECK(ampx_set_grad_enabled(ctx, 0, &previous));
  CHECK(ampx_scope_push(ctx));
  CHECK(ampx_autocast_enter(autocast));
  logits = forward(params, x);
  CHECK(ampx_autocast_exit(autocast));
  CHECK(ampx_tensor_cast(logits, AMPX_F32, &logits32));
  CHECK(ampx_tensor_to_host(logits32, all_logits, sizeof all_logits));
  ampx_tensor_release(logits32);
  CHECK(ampx_scope_pop(ctx));
  CHECK(ampx_set_grad_enabled(ctx, previous, NULL));
  for (i = 0; i < kSamples; ++i) {
    int c, best = 0;
    for (c = 1; c < kClasses; ++c)
      if (all_logits[i * kClasses + c] > all_logits[i * kClasses + best]) best = c;
    right += best == data_y[i];
  }
  const double accuracy = (double)right / kSamples;

  unsigned long long digest = parameter_digest(params), *digests = malloc(sizeof *digests * world);
  int identical = 1;
  ampx_scaler_counters counters = AMPX_SCALER_COUNTERS_INIT;
  CHECK(ampx_scaler_get_counters(scaler, &counters));
  MPI_Gather(&digest, 1, MPI_UNSIGNED_LONG_LONG, digests, 1, MPI_UNSIGNED_LONG_LONG, 0,
             MPI_COMM_WORLD);
  if (rank == 0) {
    for (i = 1; i < world; ++i) identical = identical && digests[i] == digests[0];
    printf("skipped steps: %lld of %lld (the same on every rank)\n", (long long)counters.skipped,
           (long long)counters.updates);
    printf("final accuracy: %.1f%% on %d points after %d steps\n", 100.0 * accuracy, kSamples,
           steps);
    printf(identical ? "parameters bitwise identical on all %d ranks\n"
                     : "FAILED: the ranks' parameters differ (%d ranks)\n",
           world);
  }
  free(digests);
  MPI_Bcast(&identical, 1, MPI_INT, 0, MPI_COMM_WORLD);

  ampx_tensor_release(x);
  ampx_tensor_release(bx);
  ampx_tensor_release(by);
  ampx_data_parallel_release(dp);
  ampx_comm_release(comm);
  for (i = 0; i < kParams; ++i) ampx_tensor_release(params[i]);
  ampx_autocast_release(autocast);
  ampx_scaler_release(scaler);
  ampx_optimizer_release(opt);
  ampx_context_release(ctx);
  MPI_Finalize();
  if (accuracy < 0.90) {
    if (rank == 0) fprintf(stderr, "FAILED: accuracy %.3f is below 0.90\n", accuracy);
    return 1;
  }
  return identical ? 0 : 1;
}
