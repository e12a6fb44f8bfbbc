/* GAE(lambda) as Stable-Baselines3's RolloutBuffer computes it, with SB3's
 * bootstrap of truncated episodes folded in. Internal to libampx_rl (and
 * its tests). */
#ifndef AMPX_RL_GAE_H
#define AMPX_RL_GAE_H

#include <stddef.h>
#include <stdint.h>

/* Arrays are [n_steps][n_envs], row-major. rewards[t] is the reward of
 * step t, already including gamma * V(final observation) where step t
 * truncated an episode (rl_bootstrap_truncated). episode_starts[t] is 1
 * where step t's observation begins an episode (the previous step ended
 * one); last_dones[e] says whether the rollout's last step ended env e's
 * episode, last_values[e] is V of the observation after it. Writes
 * advantages and returns (advantages + values), computed in double. */
void rl_compute_gae(size_t n_steps, size_t n_envs, double gamma, double lambda,
                    const float *rewards, const float *values, const uint8_t *episode_starts,
                    const uint8_t *last_dones, const float *last_values, float *advantages,
                    float *returns);

/* SB3's bootstrap of time-limit truncations: rewards[e] += gamma *
 * terminal_values[e] where truncated[e] (truncated and not terminated). */
void rl_bootstrap_truncated(size_t n_envs, double gamma, const uint8_t *truncated,
                            const float *terminal_values, float *rewards);

#endif
