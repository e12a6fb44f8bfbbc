/* CartPole-v1 and Pendulum-v1 with Gymnasium 1.x's dynamics, in the same
 * precision as Gymnasium computes them under NumPy 2's promotion rules:
 * the state in double, Pendulum's torque terms in float32 (a float32 action
 * times a Python float stays float32), observations rounded to float32. */
#include "rl_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* np.pi, the double nearest pi */
static const double PI = 3.141592653589793;

#define ENV_TAG 0x52454e56u /* "RENV" */

enum { ENV_CARTPOLE = 1, ENV_PENDULUM = 2 };

struct ampx_rl_env_s {
  uint32_t tag;
  int kind;
  double state[4];
  int32_t steps;
  int32_t max_steps;
  int done;
  rl_rng rng;
};

static ampx_status check_env(ampx_rl_env env, const char *fn) {
  if (!env) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: env is NULL", fn);
  if (env->tag != ENV_TAG)
    return rl_fail(AMPX_ERR_STALE_HANDLE, "%s: env was released or is not an ampx_rl_env", fn);
  return AMPX_OK;
}

static int32_t obs_dim_of(int kind) { return kind == ENV_CARTPOLE ? 4 : 3; }
static size_t state_len_of(int kind) { return kind == ENV_CARTPOLE ? 4 : 2; }

static void write_obs(const struct ampx_rl_env_s *env, float *obs) {
  if (env->kind == ENV_CARTPOLE) {
    for (int i = 0; i < 4; ++i) obs[i] = (float)env->state[i];
  } else {
    obs[0] = (float)cos(env->state[0]);
    obs[1] = (float)sin(env->state[0]);
    obs[2] = (float)env->state[1];
  }
}

ampx_status ampx_rl_env_create(const char *name, uint64_t seed, ampx_rl_env *out) {
  if (!name || !out) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "ampx_rl_env_create: %s is NULL",
                                    !name ? "name" : "out");
  int kind;
  if (strcmp(name, "CartPole-v1") == 0) kind = ENV_CARTPOLE;
  else if (strcmp(name, "Pendulum-v1") == 0) kind = ENV_PENDULUM;
  else return rl_fail(AMPX_ERR_INVALID_ARGUMENT,
                      "ampx_rl_env_create: unknown env \"%s\" (CartPole-v1, Pendulum-v1)", name);
  struct ampx_rl_env_s *env = calloc(1, sizeof *env);
  if (!env) return rl_fail(AMPX_ERR_OUT_OF_MEMORY, "ampx_rl_env_create: out of memory");
  env->tag = ENV_TAG;
  env->kind = kind;
  env->max_steps = kind == ENV_CARTPOLE ? 500 : 200;
  env->done = 1;
  rl_rng_seed(&env->rng, seed);
  *out = env;
  return AMPX_OK;
}

void ampx_rl_env_release(ampx_rl_env env) {
  if (!env || env->tag != ENV_TAG) return;
  env->tag = 0;
  free(env);
}

ampx_status ampx_rl_env_info(ampx_rl_env env, int32_t *obs_dim, int32_t *action_kind,
                             int32_t *action_dim, float *action_low, float *action_high) {
  ampx_status st = check_env(env, "ampx_rl_env_info");
  if (st) return st;
  if (obs_dim) *obs_dim = obs_dim_of(env->kind);
  if (action_kind) *action_kind = env->kind == ENV_CARTPOLE ? AMPX_RL_DISCRETE : AMPX_RL_CONTINUOUS;
  if (action_dim) *action_dim = env->kind == ENV_CARTPOLE ? 2 : 1;
  if (env->kind == ENV_PENDULUM) {
    if (action_low) action_low[0] = -2.0f;
    if (action_high) action_high[0] = 2.0f;
  }
  return AMPX_OK;
}

ampx_status ampx_rl_env_reset(ampx_rl_env env, float *obs, size_t obs_count) {
  ampx_status st = check_env(env, "ampx_rl_env_reset");
  if (st) return st;
  if (!obs) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "ampx_rl_env_reset: obs is NULL");
  if (obs_count != (size_t)obs_dim_of(env->kind))
    return rl_fail(AMPX_ERR_SHAPE, "ampx_rl_env_reset: obs_count %zu, the env's observation has %d",
                   obs_count, obs_dim_of(env->kind));
  if (env->kind == ENV_CARTPOLE) {
    for (int i = 0; i < 4; ++i) env->state[i] = -0.05 + 0.1 * rl_rng_uniform(&env->rng);
  } else {
    env->state[0] = PI * (2.0 * rl_rng_uniform(&env->rng) - 1.0);
    env->state[1] = 2.0 * rl_rng_uniform(&env->rng) - 1.0;
  }
  env->steps = 0;
  env->done = 0;
  write_obs(env, obs);
  return AMPX_OK;
}

static int cartpole_step(double *s, int action) {
  const double gravity = 9.8, masscart = 1.0, masspole = 0.1, length = 0.5, force_mag = 10.0,
               tau = 0.02;
  const double total_mass = masspole + masscart, polemass_length = masspole * length;
  const double force = action == 1 ? force_mag : -force_mag;
  const double costheta = cos(s[2]), sintheta = sin(s[2]);
  const double temp = (force + polemass_length * (s[3] * s[3]) * sintheta) / total_mass;
  const double thetaacc = (gravity * sintheta - costheta * temp) /
                          (length * (4.0 / 3.0 - masspole * (costheta * costheta) / total_mass));
  const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
  const double x = s[0] + tau * s[1];
  const double x_dot = s[1] + tau * xacc;
  const double theta = s[2] + tau * s[3];
  const double theta_dot = s[3] + tau * thetaacc;
  s[0] = x; s[1] = x_dot; s[2] = theta; s[3] = theta_dot;
  const double theta_threshold = 12 * 2 * PI / 360;
  return x < -2.4 || x > 2.4 || theta < -theta_threshold || theta > theta_threshold;
}

/* NumPy's float modulo: the result takes the divisor's sign. */
static double py_mod(double a, double b) {
  double m = fmod(a, b);
  if (m != 0.0) {
    if ((b < 0) != (m < 0)) m += b;
  } else {
    m = copysign(0.0, b);
  }
  return m;
}

static double pendulum_step(double *s, float action) {
  const double g = 10.0, m = 1.0, l = 1.0, dt = 0.05;
  const float u = action < -2.0f ? -2.0f : action > 2.0f ? 2.0f : action;
  const double th = s[0], thdot = s[1];
  const double an = py_mod(th + PI, 2 * PI) - PI;
  const float torque_cost = (float)0.001 * (u * u);
  const double costs = an * an + 0.1 * (thdot * thdot) + (double)torque_cost;
  const float torque_acc = (float)(3.0 / (m * l * l)) * u;
  double newthdot = thdot + (3 * g / (2 * l) * sin(th) + (double)torque_acc) * dt;
  newthdot = newthdot < -8.0 ? -8.0 : newthdot > 8.0 ? 8.0 : newthdot;
  s[0] = th + newthdot * dt;
  s[1] = newthdot;
  return -costs;
}

ampx_status ampx_rl_env_step(ampx_rl_env env, const float *action, size_t action_count, float *obs,
                             size_t obs_count, double *reward, int32_t *terminated,
                             int32_t *truncated) {
  static const char fn[] = "ampx_rl_env_step";
  ampx_status st = check_env(env, fn);
  if (st) return st;
  if (!action || !obs || !reward || !terminated || !truncated)
    return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: a pointer argument is NULL", fn);
  if (action_count != 1)
    return rl_fail(AMPX_ERR_SHAPE, "%s: action_count %zu, the env takes 1", fn, action_count);
  if (obs_count != (size_t)obs_dim_of(env->kind))
    return rl_fail(AMPX_ERR_SHAPE, "%s: obs_count %zu, the env's observation has %d", fn,
                   obs_count, obs_dim_of(env->kind));
  if (!isfinite(action[0]))
    return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: the action is not finite", fn);
  if (env->kind == ENV_CARTPOLE && action[0] != 0.0f && action[0] != 1.0f)
    return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: CartPole's action is 0 or 1, got %g", fn,
                   (double)action[0]);
  if (env->done)
    return rl_fail(AMPX_ERR_ORDER, "%s: the episode has ended; call ampx_rl_env_reset", fn);
  int term;
  if (env->kind == ENV_CARTPOLE) {
    term = cartpole_step(env->state, action[0] == 1.0f);
    *reward = 1.0;
  } else {
    term = 0;
    *reward = pendulum_step(env->state, action[0]);
  }
  env->steps += 1;
  *terminated = term;
  *truncated = env->steps >= env->max_steps;
  env->done = *terminated || *truncated;
  write_obs(env, obs);
  return AMPX_OK;
}

ampx_status ampx_rl_env_get_state(ampx_rl_env env, double *state, size_t count) {
  ampx_status st = check_env(env, "ampx_rl_env_get_state");
  if (st) return st;
  if (!state) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "ampx_rl_env_get_state: state is NULL");
  if (count != state_len_of(env->kind))
    return rl_fail(AMPX_ERR_SHAPE, "ampx_rl_env_get_state: count %zu, the state has %zu", count,
                   state_len_of(env->kind));
  memcpy(state, env->state, count * sizeof(double));
  return AMPX_OK;
}

ampx_status ampx_rl_env_set_state(ampx_rl_env env, const double *state, size_t count) {
  ampx_status st = check_env(env, "ampx_rl_env_set_state");
  if (st) return st;
  if (!state) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "ampx_rl_env_set_state: state is NULL");
  if (count != state_len_of(env->kind))
    return rl_fail(AMPX_ERR_SHAPE, "ampx_rl_env_set_state: count %zu, the state has %zu", count,
                   state_len_of(env->kind));
  memcpy(env->state, state, count * sizeof(double));
  env->steps = 0;
  env->done = 0;
  return AMPX_OK;
}
