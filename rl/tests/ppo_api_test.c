/* libampx_rl's contract: bad input is a status with a message and changes
 * nothing; a resumed run equals an uninterrupted one bit for bit; runs are
 * deterministic for a seed; continuous actions respect their bounds. */
#include <ampx/ampx_rl.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define EXPECT(cond)                                                   \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                      \
    }                                                                  \
  } while (0)

/* A call that must fail with `status` and a message naming the function. */
#define EXPECT_STATUS(call, status, fn)                                                    \
  do {                                                                                     \
    ampx_status got_ = (call);                                                             \
    if (got_ != (status) || !strstr(ampx_last_error(), fn)) {                             \
      fprintf(stderr, "%s:%d: FAILED: %s gave %s (\"%s\"), expected %s\n", __FILE__,      \
              __LINE__, #call, ampx_status_string(got_), ampx_last_error(), #status);     \
      failures++;                                                                          \
    }                                                                                      \
  } while (0)

#define OK(call)                                                                          \
  do {                                                                                    \
    if ((call) != AMPX_OK) {                                                              \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, ampx_last_error()); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

#define NE 4

static ampx_ppo_options cartpole_options(int precision, int hidden) {
  ampx_ppo_options o = AMPX_PPO_OPTIONS_INIT;
  o.obs_dim = 4;
  o.action_dim = 2;
  o.num_envs = NE;
  o.n_steps = 16;
  o.batch_size = 32;
  o.n_epochs = 3;
  o.anneal_lr = 1;
  o.anneal_clip_range = 1;
  o.total_timesteps = 4000;
  o.layer_sizes[0] = o.layer_sizes[1] = hidden;
  o.precision = precision;
  o.normalize_obs = 1;
  o.normalize_reward = 1;
  o.clip_range_vf = 0.5;
  o.ent_coef = 0.01;
  o.seed = 42;
  return o;
}

typedef struct run {
  ampx_rl_env envs[NE];
  float obs[NE * 4];
  uint64_t action_hash;
  int step;
} run;

static void run_start(run *r) {
  r->action_hash = 1469598103934665603ull;
  r->step = 0;
  for (int e = 0; e < NE; ++e) {
    OK(ampx_rl_env_create("CartPole-v1", 100 + e, &r->envs[e]));
    OK(ampx_rl_env_reset(r->envs[e], r->obs + 4 * e, 4));
  }
}

static void run_steps(run *r, ampx_ppo agent, int steps) {
  float actions[NE], rewards[NE], final_obs[NE * 4];
  int32_t term[NE], trunc[NE];
  for (int s = 0; s < steps; ++s) {
    OK(ampx_ppo_act(agent, r->obs, NE * 4, actions, NE));
    for (int e = 0; e < NE; ++e) {
      double rw;
      r->action_hash = (r->action_hash ^ (uint64_t)actions[e]) * 1099511628211ull;
      OK(ampx_rl_env_step(r->envs[e], actions + e, 1, r->obs + 4 * e, 4, &rw, &term[e], &trunc[e]));
      rewards[e] = (float)rw;
      memcpy(final_obs + 4 * e, r->obs + 4 * e, sizeof(float) * 4);
      /* a short time limit of the test's own, so truncations bootstrap */
      if (!term[e] && r->step % 37 == 36) trunc[e] = 1;
      if (term[e] || trunc[e]) OK(ampx_rl_env_reset(r->envs[e], r->obs + 4 * e, 4));
    }
    OK(ampx_ppo_reward(agent, rewards, term, trunc, final_obs, NE));
    r->step += 1;
  }
}

static void run_end(run *r) {
  for (int e = 0; e < NE; ++e) ampx_rl_env_release(r->envs[e]);
}

static long file_bytes(const char *path, unsigned char **out) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *out = malloc((size_t)n);
  if (fread(*out, 1, (size_t)n, f) != (size_t)n) n = -1;
  fclose(f);
  return n;
}

static int same_stats(const ampx_ppo_stats *a, const ampx_ppo_stats *b) {
  return memcmp(a, b, sizeof *a) == 0;
}

static void test_resume(int precision, const char *dir) {
  char path_mid[512], path_a[512], path_b[512];
  snprintf(path_mid, sizeof path_mid, "%s/rl_mid_%d.ckpt", dir, precision);
  snprintf(path_a, sizeof path_a, "%s/rl_a_%d.ckpt", dir, precision);
  snprintf(path_b, sizeof path_b, "%s/rl_b_%d.ckpt", dir, precision);
  const ampx_ppo_options o = cartpole_options(precision, 32);
  /* 148 = 9 rollouts of 16 and 4 steps (mid-rollout), the last of them a
   * truncation whose bootstrap value is still pending at the save */
  const int total = 400, first = 148;

  run ra;
  ampx_ppo a;
  OK(ampx_ppo_create(&o, &a));
  run_start(&ra);
  run_steps(&ra, a, total);

  run rb;
  ampx_ppo b1, b2;
  OK(ampx_ppo_create(&o, &b1));
  run_start(&rb);
  run_steps(&rb, b1, first);
  OK(ampx_ppo_save(b1, path_mid));
  ampx_ppo_release(b1);
  ampx_ppo_options other_seed = o;
  other_seed.seed = 7; /* everything the seed made is replaced by the file */
  OK(ampx_ppo_create(&other_seed, &b2));
  OK(ampx_ppo_load(b2, path_mid));
  run_steps(&rb, b2, total - first);

  ampx_ppo_stats sa = AMPX_PPO_STATS_INIT, sb = AMPX_PPO_STATS_INIT;
  OK(ampx_ppo_get_stats(a, &sa));
  OK(ampx_ppo_get_stats(b2, &sb));
  EXPECT(sa.updates >= 20);
  EXPECT(same_stats(&sa, &sb));
  EXPECT(ra.action_hash == rb.action_hash);
  OK(ampx_ppo_save(a, path_a));
  OK(ampx_ppo_save(b2, path_b));
  unsigned char *fa = NULL, *fb = NULL;
  const long na = file_bytes(path_a, &fa), nb = file_bytes(path_b, &fb);
  EXPECT(na > 0 && na == nb && memcmp(fa, fb, (size_t)na) == 0);
  printf("resume (precision %d): %lld updates, mean return %.2f, loss scale %g; checkpoint files "
         "of the resumed and uninterrupted runs %s (%ld bytes)\n",
         precision, (long long)sa.updates, sa.mean_return, sa.loss_scale,
         na > 0 && na == nb && memcmp(fa, fb, (size_t)na) == 0 ? "identical" : "DIFFER", na);
  free(fa);
  free(fb);

  /* the same seed twice: the same run */
  run rc;
  ampx_ppo c;
  OK(ampx_ppo_create(&o, &c));
  run_start(&rc);
  run_steps(&rc, c, total);
  ampx_ppo_stats sc = AMPX_PPO_STATS_INIT;
  OK(ampx_ppo_get_stats(c, &sc));
  EXPECT(same_stats(&sa, &sc) && ra.action_hash == rc.action_hash);
  ampx_ppo_release(c);
  run_end(&rc);

  ampx_ppo_release(a);
  ampx_ppo_release(b2);
  run_end(&ra);
  run_end(&rb);
  remove(path_mid);
  remove(path_a);
  remove(path_b);
}

static void test_errors(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/rl_err.ckpt", dir);
  ampx_ppo agent = NULL;
  ampx_ppo_options o = cartpole_options(AMPX_RL_FP32, 16);
  EXPECT_STATUS(ampx_ppo_create(NULL, &agent), AMPX_ERR_INVALID_ARGUMENT, "ampx_ppo_create");
  EXPECT_STATUS(ampx_ppo_create(&o, NULL), AMPX_ERR_INVALID_ARGUMENT, "ampx_ppo_create");
  ampx_ppo_options bad = o;
  bad.obs_dim = 0;
  EXPECT_STATUS(ampx_ppo_create(&bad, &agent), AMPX_ERR_INVALID_ARGUMENT, "obs_dim");
  bad = o;
  bad.struct_size = 8;
  EXPECT_STATUS(ampx_ppo_create(&bad, &agent), AMPX_ERR_INVALID_ARGUMENT, "struct_size");
  bad = o;
  bad.batch_size = o.n_steps * o.num_envs + 1;
  EXPECT_STATUS(ampx_ppo_create(&bad, &agent), AMPX_ERR_INVALID_ARGUMENT, "batch_size");
  bad = o;
  bad.gamma = NAN;
  EXPECT_STATUS(ampx_ppo_create(&bad, &agent), AMPX_ERR_INVALID_ARGUMENT, "gamma");
  EXPECT(agent == NULL);

  OK(ampx_ppo_create(&o, &agent));
  float obs[NE * 4] = {0}, actions[NE], rewards[NE] = {1, 1, 1, 1}, probe[NE], probe2[NE];
  int32_t zeros[NE] = {0}, ones[NE] = {1, 1, 1, 1};
  for (int i = 0; i < NE * 4; ++i) obs[i] = 0.01f * (float)i;
  /* reward before act */
  EXPECT_STATUS(ampx_ppo_reward(agent, rewards, zeros, zeros, NULL, NE), AMPX_ERR_ORDER, "ampx_ppo_reward");
  /* wrong lengths, NaN observation */
  EXPECT_STATUS(ampx_ppo_act(agent, obs, NE * 4 - 1, actions, NE), AMPX_ERR_SHAPE, "ampx_ppo_act");
  EXPECT_STATUS(ampx_ppo_act(agent, obs, NE * 4, actions, NE + 1), AMPX_ERR_SHAPE, "ampx_ppo_act");
  EXPECT_STATUS(ampx_ppo_act(agent, NULL, NE * 4, actions, NE), AMPX_ERR_INVALID_ARGUMENT, "ampx_ppo_act");
  obs[5] = NAN;
  EXPECT_STATUS(ampx_ppo_act(agent, obs, NE * 4, actions, NE), AMPX_ERR_INVALID_ARGUMENT, "obs[5]");
  obs[5] = INFINITY;
  EXPECT_STATUS(ampx_ppo_act(agent, obs, NE * 4, actions, NE), AMPX_ERR_INVALID_ARGUMENT, "obs[5]");
  obs[5] = 0.05f;
  ampx_ppo_stats s0 = AMPX_PPO_STATS_INIT, s1 = AMPX_PPO_STATS_INIT;
  OK(ampx_ppo_get_stats(agent, &s0));
  EXPECT(s0.timesteps == 0 && isnan(s0.mean_return));
  /* the failed calls changed nothing: the first act still works */
  OK(ampx_ppo_act(agent, obs, NE * 4, actions, NE));
  for (int e = 0; e < NE; ++e) EXPECT(actions[e] == 0.0f || actions[e] == 1.0f);
  EXPECT_STATUS(ampx_ppo_act(agent, obs, NE * 4, actions, NE), AMPX_ERR_ORDER, "ampx_ppo_act");
  EXPECT_STATUS(ampx_ppo_save(agent, path), AMPX_ERR_ORDER, "ampx_ppo_save");
  rewards[2] = NAN;
  EXPECT_STATUS(ampx_ppo_reward(agent, rewards, zeros, zeros, NULL, NE), AMPX_ERR_INVALID_ARGUMENT, "rewards[2]");
  rewards[2] = 1;
  EXPECT_STATUS(ampx_ppo_reward(agent, rewards, zeros, ones, NULL, NE), AMPX_ERR_INVALID_ARGUMENT, "final_obs");
  float final_obs[NE * 4];
  memcpy(final_obs, obs, sizeof obs);
  final_obs[3] = NAN;
  EXPECT_STATUS(ampx_ppo_reward(agent, rewards, zeros, ones, final_obs, NE), AMPX_ERR_INVALID_ARGUMENT, "final_obs[3]");
  int32_t two[NE] = {0, 2, 0, 0};
  EXPECT_STATUS(ampx_ppo_reward(agent, rewards, two, zeros, NULL, NE), AMPX_ERR_INVALID_ARGUMENT, "terminated");
  EXPECT_STATUS(ampx_ppo_reward(agent, rewards, zeros, zeros, NULL, NE - 1), AMPX_ERR_SHAPE, "ampx_ppo_reward");
  OK(ampx_ppo_get_stats(agent, &s1));
  EXPECT(same_stats(&s0, &s1));
  OK(ampx_ppo_reward(agent, rewards, zeros, zeros, NULL, NE));

  /* predict (act-only) records nothing */
  OK(ampx_ppo_predict(agent, obs, NE, 1, probe, NE));
  OK(ampx_ppo_get_stats(agent, &s1));
  EXPECT(s1.timesteps == NE);
  EXPECT_STATUS(ampx_ppo_predict(agent, obs, NE, 1, probe, NE - 1), AMPX_ERR_SHAPE, "ampx_ppo_predict");

  /* checkpoints of other shapes are refused and change nothing */
  OK(ampx_ppo_save(agent, path));
  ampx_ppo_options wider = cartpole_options(AMPX_RL_FP32, 24);
  ampx_ppo other;
  OK(ampx_ppo_create(&wider, &other));
  OK(ampx_ppo_predict(other, obs, NE, 1, probe, NE));
  EXPECT_STATUS(ampx_ppo_load(other, path), AMPX_ERR_SHAPE, "pi.0.weight");
  OK(ampx_ppo_predict(other, obs, NE, 1, probe2, NE));
  EXPECT(memcmp(probe, probe2, sizeof probe) == 0);
  ampx_ppo_release(other);
  ampx_ppo_options more_envs = o;
  more_envs.num_envs = NE + 1;
  more_envs.batch_size = 16;
  OK(ampx_ppo_create(&more_envs, &other));
  EXPECT_STATUS(ampx_ppo_load(other, path), AMPX_ERR_SHAPE, "ampx_rl.ppo_state");
  ampx_ppo_release(other);
  ampx_ppo_options separate = o;
  separate.shared_network = 1;
  OK(ampx_ppo_create(&separate, &other));
  EXPECT(ampx_ppo_load(other, path) != AMPX_OK);
  ampx_ppo_release(other);
  EXPECT_STATUS(ampx_ppo_load(agent, "/nonexistent/dir/x.ckpt"), AMPX_ERR_IO, "");
  EXPECT_STATUS(ampx_ppo_load(agent, NULL), AMPX_ERR_INVALID_ARGUMENT, "ampx_ppo_load");
  remove(path);

  /* NULL and released handles */
  EXPECT_STATUS(ampx_ppo_act(NULL, obs, NE * 4, actions, NE), AMPX_ERR_INVALID_ARGUMENT, "agent is NULL");
  EXPECT_STATUS(ampx_ppo_get_stats(NULL, &s1), AMPX_ERR_INVALID_ARGUMENT, "ampx_ppo_get_stats");
  ampx_ppo_release(NULL);
  ampx_rl_env_release(NULL);
  ampx_ppo_release(agent);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  /* a released agent is recognised while its memory is not reused (as the
   * core's handles); ASan and TSan would rightly call this read a use
   * after free */
  EXPECT_STATUS(ampx_ppo_act(agent, obs, NE * 4, actions, NE), AMPX_ERR_STALE_HANDLE, "released");
#endif

  /* environments */
  ampx_rl_env env;
  EXPECT_STATUS(ampx_rl_env_create("MountainCar-v0", 0, &env), AMPX_ERR_INVALID_ARGUMENT, "MountainCar-v0");
  OK(ampx_rl_env_create("CartPole-v1", 0, &env));
  double r;
  int32_t t, u;
  float a = 1.0f, bad_action = 2.0f;
  EXPECT_STATUS(ampx_rl_env_step(env, &a, 1, obs, 4, &r, &t, &u), AMPX_ERR_ORDER, "reset");
  OK(ampx_rl_env_reset(env, obs, 4));
  EXPECT_STATUS(ampx_rl_env_step(env, &bad_action, 1, obs, 4, &r, &t, &u), AMPX_ERR_INVALID_ARGUMENT, "0 or 1");
  EXPECT_STATUS(ampx_rl_env_step(env, &a, 1, obs, 3, &r, &t, &u), AMPX_ERR_SHAPE, "obs_count");
  ampx_rl_env_release(env);
}

/* Pendulum with a shared one-layer ReLU trunk in bf16: continuous actions
 * stay in the bounds for the env, and the trained log std moves. */
static void test_continuous(void) {
  ampx_rl_env env;
  OK(ampx_rl_env_create("Pendulum-v1", 3, &env));
  float low, high;
  int32_t obs_dim, kind, adim;
  OK(ampx_rl_env_info(env, &obs_dim, &kind, &adim, &low, &high));
  EXPECT(obs_dim == 3 && kind == AMPX_RL_CONTINUOUS && adim == 1 && low == -2.0f && high == 2.0f);
  ampx_ppo_options o = AMPX_PPO_OPTIONS_INIT;
  o.obs_dim = 3;
  o.action_kind = AMPX_RL_CONTINUOUS;
  o.action_dim = 1;
  o.n_steps = 64;
  o.batch_size = 32;
  o.n_epochs = 2;
  o.action_low = &low;
  o.action_high = &high;
  o.log_std_init = 1.0; /* std e: many samples beyond the bounds */
  o.activation = AMPX_RL_RELU;
  o.shared_network = 1;
  o.layer_sizes[0] = 32;
  o.n_layers = 1;
  o.precision = AMPX_RL_BF16;
  ampx_ppo agent;
  OK(ampx_ppo_create(&o, &agent));
  float obs[3], act, fin[3];
  double r;
  int32_t t, u;
  int outside = 0;
  OK(ampx_rl_env_reset(env, obs, 3));
  for (int s = 0; s < 640; ++s) {
    OK(ampx_ppo_act(agent, obs, 3, &act, 1));
    EXPECT(act >= -2.0f && act <= 2.0f);
    outside += act == -2.0f || act == 2.0f;
    OK(ampx_rl_env_step(env, &act, 1, obs, 3, &r, &t, &u));
    float rw = (float)r;
    memcpy(fin, obs, sizeof fin);
    if (t || u) OK(ampx_rl_env_reset(env, obs, 3));
    OK(ampx_ppo_reward(agent, &rw, &t, &u, fin, 1));
  }
  ampx_ppo_stats s = AMPX_PPO_STATS_INIT;
  OK(ampx_ppo_get_stats(agent, &s));
  EXPECT(s.updates == 9 && s.episodes == 3 && outside > 100);
  EXPECT(isfinite(s.policy_loss) && isfinite(s.value_loss));
  /* entropy of a 1-D Gaussian: 0.5 + 0.5 log(2 pi) + log std; it moved from log std 1 */
  EXPECT(fabs(-s.entropy_loss - (1.4189385332046727 + 1.0)) > 1e-4);
  printf("continuous (Pendulum, bf16, shared relu trunk): %lld updates, %d of 640 actions at a bound, entropy %.4f\n",
         (long long)s.updates, outside, -s.entropy_loss);
  ampx_ppo_release(agent);
  ampx_rl_env_release(env);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  test_errors(dir);
  test_continuous();
  test_resume(AMPX_RL_FP32, dir);
  test_resume(AMPX_RL_FP16, dir);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("all passed\n");
  return 0;
}
