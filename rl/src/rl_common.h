/* Shared by the RL layer's sources: errors through ampx_set_error, the
 * random stream, handle tags. Only ampx.h is used below this layer. */
#ifndef AMPX_RL_COMMON_H
#define AMPX_RL_COMMON_H

#include <ampx/ampx_rl.h>

#include <stdint.h>

/* Formats a message "function: ..." into the calling thread's ampx error. */
ampx_status rl_fail(ampx_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* xoshiro256** seeded by splitmix64: small, fast, and its whole state is
 * four words that a checkpoint can hold. */
typedef struct rl_rng {
  uint64_t s[4];
} rl_rng;

void rl_rng_seed(rl_rng *rng, uint64_t seed);
uint64_t rl_rng_next(rl_rng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double rl_rng_uniform(rl_rng *rng);
/* Standard normal (Box-Muller; both draws consumed per call, so the
 * stream's position depends only on the number of calls). */
double rl_rng_normal(rl_rng *rng);
/* Uniform integer in [0, n) (n > 0), without modulo bias. */
uint64_t rl_rng_below(rl_rng *rng, uint64_t n);

#endif
