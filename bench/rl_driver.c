/* The ampx_rl half of bench_rl_vs_sb3.py: PPO on a reference env with the
 * benchmark's hyperparameters (the same as the script gives SB3), stepping
 * its envs as SB3's DummyVecEnv does (auto-reset, final observation kept).
 * Usage: ampx_rl_bench_driver CartPole-v1|Pendulum-v1 seed threads
 * Prints one line: solved_at (steps to a mean return of 475 over the last
 * 100 episodes; -1 if never; CartPole), solve_s, final mean return, wall_s. */
#include <ampx/ampx_rl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                                       \
  do {                                                                                    \
    if ((call) != AMPX_OK) {                                                              \
      fprintf(stderr, "%s failed: %s\n", #call, ampx_last_error());                       \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s CartPole-v1|Pendulum-v1 seed threads\n", argv[0]);
    return 2;
  }
  const char *name = argv[1];
  const unsigned long long seed = strtoull(argv[2], NULL, 10);
  const int cartpole = strcmp(name, "CartPole-v1") == 0;
  ampx_ppo_options o = AMPX_PPO_OPTIONS_INIT;
  long long total;
  float low = -2.0f, high = 2.0f;
  if (cartpole) { /* RL Baselines3 Zoo's tuned CartPole-v1 */
    o.obs_dim = 4;
    o.action_dim = 2;
    o.num_envs = 8;
    o.n_steps = 32;
    o.batch_size = 256;
    o.n_epochs = 20;
    o.gamma = 0.98;
    o.gae_lambda = 0.8;
    o.learning_rate = 1e-3;
    o.clip_range = 0.2;
    o.anneal_lr = 1;
    o.anneal_clip_range = 1;
    total = 100000;
  } else { /* RL Zoo's Pendulum-v1 without gSDE, batch 256 */
    o.obs_dim = 3;
    o.action_kind = AMPX_RL_CONTINUOUS;
    o.action_dim = 1;
    o.action_low = &low;
    o.action_high = &high;
    o.num_envs = 4;
    o.n_steps = 1024;
    o.batch_size = 256;
    o.n_epochs = 10;
    o.gamma = 0.9;
    o.gae_lambda = 0.95;
    o.learning_rate = 1e-3;
    o.clip_range = 0.2;
    total = 200000;
  }
  o.ent_coef = 0.0;
  o.total_timesteps = total;
  o.seed = seed;
  o.num_threads = atoi(argv[3]);
  const int n = o.num_envs, d = o.obs_dim;
  ampx_ppo agent;
  CHECK(ampx_ppo_create(&o, &agent));
  ampx_rl_env envs[8];
  float obs[8 * 4], fin[8 * 4], act[8], rew[8];
  int32_t term[8], trunc[8];
  for (int e = 0; e < n; ++e) {
    CHECK(ampx_rl_env_create(name, seed * 1000 + (unsigned long long)e, &envs[e]));
    CHECK(ampx_rl_env_reset(envs[e], obs + d * e, (size_t)d));
  }
  ampx_ppo_stats s = AMPX_PPO_STATS_INIT;
  long long solved_at = -1;
  double solve_s = -1;
  const double t0 = now();
  /* as SB3's learn: whole rollouts until total is reached, each one trained */
  const long long per_rollout = (long long)n * o.n_steps;
  const long long acts = (total + per_rollout - 1) / per_rollout * o.n_steps;
  for (long long i = 0; i < acts; ++i) {
    CHECK(ampx_ppo_act(agent, obs, (size_t)(n * d), act, (size_t)n));
    for (int e = 0; e < n; ++e) {
      double r;
      CHECK(ampx_rl_env_step(envs[e], act + e, 1, obs + d * e, (size_t)d, &r, &term[e], &trunc[e]));
      rew[e] = (float)r;
      memcpy(fin + d * e, obs + d * e, sizeof(float) * (size_t)d);
      if (term[e] || trunc[e]) CHECK(ampx_rl_env_reset(envs[e], obs + d * e, (size_t)d));
    }
    CHECK(ampx_ppo_reward(agent, rew, term, trunc, fin, (size_t)n));
    CHECK(ampx_ppo_get_stats(agent, &s));
    if (cartpole && solved_at < 0 && s.episodes >= 100 && s.mean_return >= 475.0) {
      solved_at = s.timesteps;
      solve_s = now() - t0;
    }
  }
  CHECK(ampx_ppo_act(agent, obs, (size_t)(n * d), act, (size_t)n)); /* trains the last rollout */
  const double wall = now() - t0;
  CHECK(ampx_ppo_get_stats(agent, &s));
  printf("solved_at=%lld solve_s=%.3f final_return=%.3f wall_s=%.3f updates=%lld\n", solved_at,
         solve_s, s.mean_return, wall, (long long)s.updates);
  for (int e = 0; e < n; ++e) ampx_rl_env_release(envs[e]);
  ampx_ppo_release(agent);
  return 0;
}
