/*
 * bench_dp_cpu.c -- data-parallel step time on the CPU, with the gradient
 * all-reduce overlapped with backward vs issued after it, side by side in
 * one run (rounds alternate, so both see the same machine noise).
 *
 *   mpirun -np 2 build/bench/bench_dp_cpu [--rounds R] [--steps S] [--width W]
 *
 * Each rank trains a 4-layer MLP of width W (fp32, SGD) on its slice of a
 * batch, one worker thread per rank. Two copies of the model are wrapped:
 * one with overlap (buckets go out as backward finishes them, 1 MiB first
 * bucket, then 4 MiB), one without (every bucket after backward). Prints
 * the median step time of each and their ratio on rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ampx/ampx.h"

#define CHECK(call)                                                                  \
  do {                                                                               \
    ampx_status check_status_ = (call);                                              \
    if (check_status_ != AMPX_OK) {                                                  \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,           \
              ampx_last_error());                                                    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
    }                                                                                \
  } while (0)

enum { kLayers = 4, kRows = 64 };

typedef struct model {
  ampx_tensor w[kLayers], b[kLayers];
  ampx_optimizer opt;
  ampx_data_parallel dp;
} model;

static void make_model(ampx_context ctx, ampx_comm comm, int width, int overlap, model *m) {
  int l;
  ampx_tensor params[2 * kLayers];
  for (l = 0; l < kLayers; ++l) {
    const int64_t w_shape[2] = {width, width}, b_shape[1] = {width};
    CHECK(ampx_tensor_zeros(ctx, AMPX_F32, 2, w_shape, &m->w[l]));
    CHECK(ampx_tensor_fill(m->w[l], 1.0 / width));
    CHECK(ampx_tensor_zeros(ctx, AMPX_F32, 1, b_shape, &m->b[l]));
    CHECK(ampx_tensor_set_requires_grad(m->w[l], 1));
    CHECK(ampx_tensor_set_requires_grad(m->b[l], 1));
    params[2 * l] = m->w[l];
    params[2 * l + 1] = m->b[l];
  }
  ampx_sgd_options sgd = AMPX_SGD_OPTIONS_INIT;
  sgd.lr = 1e-3;
  CHECK(ampx_optimizer_create_sgd(ctx, params, 2 * kLayers, &sgd, &m->opt));
  ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  options.bucket_bytes = (size_t)4 << 20;
  options.overlap = overlap;
  CHECK(ampx_data_parallel_create(comm, m->opt, &options, &m->dp));
}

static void step(ampx_context ctx, model *m, ampx_tensor x, ampx_tensor y) {
  ampx_tensor h = x, loss = NULL;
  int l;
  CHECK(ampx_optimizer_zero_grad(m->opt));
  CHECK(ampx_scope_push(ctx));
  for (l = 0; l < kLayers; ++l) {
    ampx_tensor next = NULL;
    CHECK(ampx_linear(h, m->w[l], m->b[l],
                      l + 1 < kLayers ? AMPX_ACTIVATION_RELU : AMPX_ACTIVATION_NONE, &next));
    h = next;
  }
  CHECK(ampx_mse_loss(h, y, AMPX_REDUCTION_MEAN, &loss));
  CHECK(ampx_backward(loss, NULL));
  CHECK(ampx_optimizer_step(m->opt));
  CHECK(ampx_scope_pop(ctx));
}

static int compare_doubles(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median over the rounds of the slowest rank's time per step. */
static double median(double *values, int n) {
  qsort(values, (size_t)n, sizeof *values, compare_doubles);
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

int main(int argc, char **argv) {
  int rank = 0, world = 1, rounds = 7, steps = 10, width = 1024, i, r;
  MPI_Comm comm_world = MPI_COMM_WORLD;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--width") == 0) width = atoi(argv[i + 1]);
  }
  if (rounds < 1 || rounds > 100 || steps < 1 || width < 8) {
    if (rank == 0) fprintf(stderr, "usage: %s [--rounds R] [--steps S] [--width W]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }

  ampx_context_options copts = AMPX_CONTEXT_OPTIONS_INIT;
  copts.num_threads = 1; /* one core per rank */
  ampx_context ctx = NULL;
  CHECK(ampx_context_create(&copts, &ctx));
  ampx_comm comm = NULL;
  CHECK(ampx_comm_from_mpi(ctx, &comm_world, &comm));
  model overlapped, after;
  make_model(ctx, comm, width, 1, &overlapped);
  make_model(ctx, comm, width, 0, &after);

  const int64_t x_shape[2] = {kRows, width};
  ampx_tensor x = NULL, y = NULL;
  CHECK(ampx_tensor_zeros(ctx, AMPX_F32, 2, x_shape, &x));
  CHECK(ampx_tensor_fill(x, 0.5));
  CHECK(ampx_tensor_zeros(ctx, AMPX_F32, 2, x_shape, &y));
  step(ctx, &overlapped, x, y); /* warm up both */
  step(ctx, &after, x, y);

  double *t_overlap = malloc(sizeof(double) * rounds), *t_after = malloc(sizeof(double) * rounds);
  for (r = 0; r < rounds; ++r) {
    model *order[2] = {&overlapped, &after};
    double *times[2] = {t_overlap, t_after};
    int k;
    if (r % 2) { /* alternate which goes first */
      order[0] = &after, order[1] = &overlapped;
      times[0] = t_after, times[1] = t_overlap;
    }
    for (k = 0; k < 2; ++k) {
      double start, local, slowest;
      MPI_Barrier(MPI_COMM_WORLD);
      start = MPI_Wtime();
      for (i = 0; i < steps; ++i) step(ctx, order[k], x, y);
      local = (MPI_Wtime() - start) / steps;
      MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times[k][r] = slowest;
    }
  }
  if (rank == 0) {
    const double a = median(t_overlap, rounds), b = median(t_after, rounds);
    const double mib = (double)kLayers * (width + 1.0) * width * 4.0 / (1 << 20);
    printf("bench_dp_cpu: %d ranks, 4 x %d-wide MLP (%.1f MiB of fp32 gradients), %d rows per "
           "rank, median of %d rounds x %d steps\n",
           world, width, mib, kRows, rounds, steps);
    printf("%-34s %12s\n", "all-reduce", "ms / step");
    printf("%-34s %12.2f\n", "overlapped with backward", 1e3 * a);
    printf("%-34s %12.2f\n", "after backward", 1e3 * b);
    printf("after / overlapped: %.3f\n", b / a);
  }
  free(t_overlap);
  free(t_after);
  ampx_tensor_release(x);
  ampx_tensor_release(y);
  for (r = 0; r < 2; ++r) {
    model *m = r ? &after : &overlapped;
    ampx_data_parallel_release(m->dp);
    ampx_optimizer_release(m->opt);
    for (i = 0; i < kLayers; ++i) {
      ampx_tensor_release(m->w[i]);
      ampx_tensor_release(m->b[i]);
    }
  }
  ampx_comm_release(comm);
  ampx_context_release(ctx);
  MPI_Finalize();
  return 0;
}
