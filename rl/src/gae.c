#include "gae.h"

void rl_compute_gae(size_t n_steps, size_t n_envs, double gamma, double lambda,
                    const float *rewards, const float *values, const uint8_t *episode_starts,
                    const uint8_t *last_dones, const float *last_values, float *advantages,
                    float *returns) {
  for (size_t e = 0; e < n_envs; ++e) {
    double last_gae = 0.0;
    for (size_t t = n_steps; t-- > 0;) {
      const size_t i = t * n_envs + e;
      double next_non_terminal, next_value;
      if (t == n_steps - 1) {
        next_non_terminal = 1.0 - last_dones[e];
        next_value = last_values[e];
      } else {
        next_non_terminal = 1.0 - episode_starts[i + n_envs];
        next_value = values[i + n_envs];
      }
      const double delta = rewards[i] + gamma * next_value * next_non_terminal - values[i];
      last_gae = delta + gamma * lambda * next_non_terminal * last_gae;
      advantages[i] = (float)last_gae;
      returns[i] = (float)(last_gae + values[i]);
    }
  }
}

void rl_bootstrap_truncated(size_t n_envs, double gamma, const uint8_t *truncated,
                            const float *terminal_values, float *rewards) {
  for (size_t e = 0; e < n_envs; ++e)
    if (truncated[e]) rewards[e] = (float)(rewards[e] + gamma * terminal_values[e]);
}
