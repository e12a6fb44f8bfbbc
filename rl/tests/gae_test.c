/* GAE(lambda) of libampx_rl (src/gae.c) against a double-precision
 * transcription of Stable-Baselines3's: OnPolicyAlgorithm.collect_rollouts
 * adds gamma * V(terminal observation) to the reward of a step that hit the
 * time limit, then RolloutBuffer.compute_returns_and_advantage runs
 * backwards with next_non_terminal from the episode starts. Random rewards,
 * values and episode ends (terminations and truncations both), several
 * gammas and lambdas; float storage allows ~1e-6 relative. */
#include "gae.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define T 64
#define N 5

static double urand(void) { return rand() / (RAND_MAX + 1.0); }

int main(void) {
  srand(7);
  static float rewards[T * N], values[T * N], adv[T * N], ret[T * N], term_values[T * N];
  static uint8_t starts[T * N], terminated[T * N], truncated[T * N];
  static double ref_adv[T * N], ref_ret[T * N];
  const double settings[][2] = {{0.98, 0.8}, {0.99, 0.95}, {1.0, 1.0}, {0.9, 0.0}};
  double worst = 0;
  int truncations = 0;
  for (size_t s = 0; s < sizeof settings / sizeof settings[0]; ++s) {
    const double gamma = settings[s][0], lambda = settings[s][1];
    uint8_t last_dones[N];
    float last_values[N];
    for (int i = 0; i < T * N; ++i) {
      rewards[i] = (float)(urand() * 2 - 0.5);
      values[i] = (float)(urand() * 10 - 3);
      term_values[i] = (float)(urand() * 10 - 3);
      const double u = urand();
      terminated[i] = u < 0.06;
      truncated[i] = u >= 0.06 && u < 0.12; /* time limit, not terminated */
      truncations += truncated[i];
    }
    for (int e = 0; e < N; ++e) {
      last_values[e] = (float)(urand() * 10 - 3);
      starts[e] = 1;
    }
    /* episode_starts[t] = the previous step ended an episode */
    for (int t = 1; t < T; ++t)
      for (int e = 0; e < N; ++e)
        starts[t * N + e] = terminated[(t - 1) * N + e] || truncated[(t - 1) * N + e];
    for (int e = 0; e < N; ++e)
      last_dones[e] = terminated[(T - 1) * N + e] || truncated[(T - 1) * N + e];

    /* the reference, in double, as SB3 writes it */
    double r_boot[T * N];
    for (int i = 0; i < T * N; ++i)
      r_boot[i] = rewards[i] + (truncated[i] ? gamma * term_values[i] : 0.0);
    for (int e = 0; e < N; ++e) {
      double last_gae_lam = 0;
      for (int step = T - 1; step >= 0; --step) {
        double next_non_terminal, next_values;
        if (step == T - 1) {
          next_non_terminal = 1.0 - last_dones[e];
          next_values = last_values[e];
        } else {
          next_non_terminal = 1.0 - starts[(step + 1) * N + e];
          next_values = values[(step + 1) * N + e];
        }
        const int i = step * N + e;
        const double delta = r_boot[i] + gamma * next_values * next_non_terminal - values[i];
        last_gae_lam = delta + gamma * lambda * next_non_terminal * last_gae_lam;
        ref_adv[i] = last_gae_lam;
        ref_ret[i] = last_gae_lam + values[i];
      }
    }

    for (int t = 0; t < T; ++t) rl_bootstrap_truncated(N, gamma, truncated + t * N, term_values + t * N, rewards + t * N);
    rl_compute_gae(T, N, gamma, lambda, rewards, values, starts, last_dones, last_values, adv, ret);
    for (int i = 0; i < T * N; ++i) {
      const double ea = fabs(adv[i] - ref_adv[i]) / (1.0 + fabs(ref_adv[i]));
      const double er = fabs(ret[i] - ref_ret[i]) / (1.0 + fabs(ref_ret[i]));
      worst = fmax(worst, fmax(ea, er));
      if (!(ea < 2e-6 && er < 2e-6)) {
        printf("FAIL gamma %g lambda %g index %d: adv %.9g vs %.9g, return %.9g vs %.9g\n", gamma,
               lambda, i, adv[i], ref_adv[i], ret[i], ref_ret[i]);
        return 1;
      }
    }
  }
  printf("GAE equals SB3's formula (double reference): %d truncations bootstrapped, worst relative "
         "difference %.2e\n", truncations, worst);
  return 0;
}
