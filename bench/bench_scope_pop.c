/*
 * bench_scope_pop.c -- the cost of a scope per op, the pattern of bindings
 * that wrap every op in ampx_scope_push/pop and keep its output (the Rust
 * binding, ampx.hpp). Runs a chain of N relu ops with recording on, each in
 * its own scope, for N and 4N in one run, and prints both times and their
 * ratio: 4 when a pop costs the same however long the tape is, 16 when each
 * pop walks the whole tape.
 *
 *   bench_scope_pop [N]     (default 4000; CPU, one thread)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ampx/ampx.h"

#define CHECK(call)                                                    \
  do {                                                                 \
    if ((call) != AMPX_OK) {                                           \
      fprintf(stderr, "%s failed: %s\n", #call, ampx_last_error());    \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Milliseconds for a chain of n ops, one scope each. */
static double chain_ms(int n) {
  ampx_context_options options = AMPX_CONTEXT_OPTIONS_INIT;
  options.num_threads = 1;
  ampx_context ctx = NULL;
  CHECK(ampx_context_create(&options, &ctx));
  const int64_t dims[1] = {16};
  float values[16] = {0};
  ampx_tensor h = NULL;
  CHECK(ampx_tensor_from_host(ctx, AMPX_F32, 1, dims, values, sizeof values, &h));
  CHECK(ampx_tensor_set_requires_grad(h, 1));
  const double start = now_ms();
  for (int i = 0; i < n; ++i) {
    ampx_tensor y = NULL;
    CHECK(ampx_scope_push(ctx));
    CHECK(ampx_relu(h, &y));
    CHECK(ampx_tensor_retain(y));
    CHECK(ampx_scope_pop(ctx));
    ampx_tensor_release(h);
    h = y;
  }
  const double elapsed = now_ms() - start;
  ampx_tensor_release(h);
  ampx_context_release(ctx);
  return elapsed;
}

int main(int argc, char **argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 4000;
  if (n <= 0) {
    fprintf(stderr, "usage: bench_scope_pop [N > 0]\n");
    return 2;
  }
  const double small = chain_ms(n), large = chain_ms(4 * n);
  printf("ops in the chain   ms      us/op\n");
  printf("%-16d %8.1f %8.2f\n", n, small, small * 1e3 / n);
  printf("%-16d %8.1f %8.2f\n", 4 * n, large, large * 1e3 / (4 * n));
  printf("time ratio for 4x the ops: %.1f (4 = linear, 16 = quadratic)\n", large / small);
  return 0;
}
