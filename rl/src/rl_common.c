#include "rl_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

ampx_status rl_fail(ampx_status status, const char *fmt, ...) {
  char message[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  return ampx_set_error(status, message);
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void rl_rng_seed(rl_rng *rng, uint64_t seed) {
  for (int i = 0; i < 4; ++i) rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rl_rng_next(rl_rng *rng) {
  uint64_t *s = rng->s;
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double rl_rng_uniform(rl_rng *rng) { return (double)(rl_rng_next(rng) >> 11) * 0x1.0p-53; }

double rl_rng_normal(rl_rng *rng) {
  /* 1 - u keeps the logarithm's argument in (0, 1]. */
  const double u1 = 1.0 - rl_rng_uniform(rng);
  const double u2 = rl_rng_uniform(rng);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t rl_rng_below(rl_rng *rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = rl_rng_next(rng); while (x >= limit);
  return x % n;
}
