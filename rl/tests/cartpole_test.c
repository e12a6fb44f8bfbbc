/* CartPole-v1 with RL Baselines3 Zoo's PPO hyperparameters (8 envs,
 * n_steps 32, batch 256, gamma 0.98, lambda 0.8, 20 epochs, ent 0, lr 1e-3
 * and clip 0.2 annealed linearly, 64-64 tanh, 100k steps), from C.
 * Usage: ampx_rl_cartpole_test fp32|bf16|fp16 [seed] [threads]
 * Passes when the mean return of the last 100 episodes reaches 475; prints
 * the steps it took and the wall time (also read by bench/bench_rl_vs_sb3.py). */
#include <ampx/ampx_rl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NUM_ENVS 8
#define TOTAL 100000

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                              \
  do {                                                                           \
    if ((call) != AMPX_OK) {                                                     \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,       \
              ampx_last_error());                                                \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

int main(int argc, char **argv) {
  const char *precision = argc > 1 ? argv[1] : "fp32";
  const unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
  const int threads = argc > 3 ? atoi(argv[3]) : 1;
  ampx_ppo_options o = AMPX_PPO_OPTIONS_INIT;
  o.obs_dim = 4;
  o.action_kind = AMPX_RL_DISCRETE;
  o.action_dim = 2;
  o.num_envs = NUM_ENVS;
  o.n_steps = 32;
  o.batch_size = 256;
  o.n_epochs = 20;
  o.gamma = 0.98;
  o.gae_lambda = 0.8;
  o.ent_coef = 0.0;
  o.learning_rate = 1e-3;
  o.clip_range = 0.2;
  o.anneal_lr = 1;
  o.anneal_clip_range = 1;
  o.total_timesteps = TOTAL;
  o.seed = seed;
  o.num_threads = threads;
  if (strcmp(precision, "fp32") == 0) o.precision = AMPX_RL_FP32;
  else if (strcmp(precision, "bf16") == 0) o.precision = AMPX_RL_BF16;
  else if (strcmp(precision, "fp16") == 0) o.precision = AMPX_RL_FP16;
  else {
    fprintf(stderr, "usage: %s fp32|bf16|fp16 [seed] [threads]\n", argv[0]);
    return 2;
  }
  ampx_ppo agent;
  CHECK(ampx_ppo_create(&o, &agent));
  ampx_rl_env envs[NUM_ENVS];
  float obs[NUM_ENVS * 4], final_obs[NUM_ENVS * 4], actions[NUM_ENVS], rewards[NUM_ENVS];
  int32_t term[NUM_ENVS], trunc[NUM_ENVS];
  for (int e = 0; e < NUM_ENVS; ++e) {
    CHECK(ampx_rl_env_create("CartPole-v1", seed * 1000 + (unsigned long long)e, &envs[e]));
    CHECK(ampx_rl_env_reset(envs[e], obs + 4 * e, 4));
  }
  const double t0 = now();
  long long solved_at = -1;
  double solved_time = 0;
  ampx_ppo_stats s = AMPX_PPO_STATS_INIT;
  for (long long step = 0; step < TOTAL; step += NUM_ENVS) {
    CHECK(ampx_ppo_act(agent, obs, NUM_ENVS * 4, actions, NUM_ENVS));
    for (int e = 0; e < NUM_ENVS; ++e) {
      double r;
      CHECK(ampx_rl_env_step(envs[e], actions + e, 1, obs + 4 * e, 4, &r, &term[e], &trunc[e]));
      rewards[e] = (float)r;
      memcpy(final_obs + 4 * e, obs + 4 * e, sizeof(float) * 4);
      if (term[e] || trunc[e]) CHECK(ampx_rl_env_reset(envs[e], obs + 4 * e, 4));
    }
    CHECK(ampx_ppo_reward(agent, rewards, term, trunc, final_obs, NUM_ENVS));
    CHECK(ampx_ppo_get_stats(agent, &s));
    if (solved_at < 0 && s.episodes >= 100 && s.mean_return >= 475.0) {
      solved_at = s.timesteps;
      solved_time = now() - t0;
    }
  }
  const double wall = now() - t0;
  printf("precision %s seed %llu threads %d: solved_at %lld steps %.2f s; final mean return %.1f "
         "(%lld episodes), %lld updates, loss scale %g, skipped %lld, wall %.2f s\n",
         precision, seed, threads, solved_at, solved_time, s.mean_return, (long long)s.episodes,
         (long long)s.updates, s.loss_scale, (long long)s.skipped_steps, wall);
  for (int e = 0; e < NUM_ENVS; ++e) ampx_rl_env_release(envs[e]);
  ampx_ppo_release(agent);
  return solved_at >= 0 ? 0 : 1;
}
