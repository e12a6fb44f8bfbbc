/* PPO over the public ampx API (CleanRL's ppo.py, SB3's PPO).
 *
 * The networks run on ampx ops (linear, tanh, autocast, the scaler, Adam,
 * clipping, checkpoint files). ampx has no gather, clamp or minimum op, so
 * the PPO loss itself is formed on the host in double from the heads'
 * outputs, with its exact derivatives (torch's tie rules for min and
 * clamp); the backward then runs through ampx from the surrogate
 * sum(logits * dL/dlogits) + sum(values * dL/dvalues) (+ the log std's
 * term), whose parameter gradients are those of the PPO loss. */
#include "gae.h"
#include "running_stats.h"
#include "rl_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PPO_TAG 0x50504f41u /* "PPOA" */
#define STATE_VERSION 1u
#define EP_HISTORY 100
/* Actions (or action dimensions) per env: bounds the host-side scratch. */
#define MAX_ACTIONS 256

/* The first release's struct sizes: a larger one may come from a newer
 * header (its tail is ignored), a smaller one is refused. */
#define OPTIONS_MIN_SIZE sizeof(ampx_ppo_options)
#define STATS_MIN_SIZE sizeof(ampx_ppo_stats)


typedef struct mlp {
  int32_t n_layers;
  ampx_tensor w[AMPX_RL_MAX_LAYERS], b[AMPX_RL_MAX_LAYERS];
} mlp;

enum { PHASE_ACT = 0, PHASE_REWARD = 1 };

struct ampx_ppo_s {
  uint32_t tag;
  ampx_ppo_options o;
  float *low, *high;
  int32_t out_dim; /* policy head width: logits or means */
  ampx_context ctx;
  ampx_autocast autocast; /* NULL in fp32 */
  ampx_scaler scaler;     /* fp16 only */
  ampx_optimizer opt;
  mlp pi_trunk, vf_trunk; /* vf_trunk unused when shared */
  ampx_tensor pi_w, pi_b, vf_w, vf_b, log_std;
  ampx_tensor params[2 * 2 * AMPX_RL_MAX_LAYERS + 5];
  size_t n_params;

  /* the rollout, [n_steps][num_envs] */
  size_t rows; /* n_steps * num_envs */
  float *obs, *actions, *logp, *values, *rewards, *adv, *ret;
  uint8_t *episode_starts, *last_dones;
  float *pending_final; /* raw final observations of truncated episodes */
  uint8_t *pending;
  int32_t pos, phase;

  running_stats obs_rms, ret_rms;
  double *disc_return; /* VecNormalize's discounted returns, per env */
  double *ep_return;   /* raw episode return and length so far, per env */
  int64_t *ep_length;
  double hist_return[EP_HISTORY], hist_length[EP_HISTORY];
  int64_t hist_count;

  rl_rng rng, predict_rng;
  ampx_ppo_stats stats;
  int64_t skipped;

  /* scratch */
  float *xbuf, *head, *vbuf, *gbuf, *gvbuf;
  int32_t *perm;
};

/* ---------------------------------------------------------------- helpers */

#define TRY(expr)                  \
  do {                             \
    ampx_status try_st_ = (expr);  \
    if (try_st_ != AMPX_OK) return try_st_; \
  } while (0)

static ampx_status check_agent(ampx_ppo a, const char *fn) {
  if (!a) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: agent is NULL", fn);
  if (a->tag != PPO_TAG)
    return rl_fail(AMPX_ERR_STALE_HANDLE, "%s: agent was released or is not an ampx_ppo", fn);
  return AMPX_OK;
}

static int all_finite(const float *x, size_t n, size_t *where) {
  for (size_t i = 0; i < n; ++i)
    if (!isfinite(x[i])) {
      *where = i;
      return 0;
    }
  return 1;
}

ampx_ppo_options ampx_ppo_options_default(void) {
  ampx_ppo_options o = AMPX_PPO_OPTIONS_INIT;
  return o;
}

static ampx_status validate(const ampx_ppo_options *o) {
  static const char fn[] = "ampx_ppo_create";
#define BAD(...) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, __VA_ARGS__)
  if (o->struct_size < OPTIONS_MIN_SIZE)
    BAD("%s: options->struct_size %zu is smaller than sizeof(ampx_ppo_options) %zu", fn,
        o->struct_size, OPTIONS_MIN_SIZE);
  if (o->obs_dim <= 0) BAD("%s: obs_dim %d must be > 0", fn, o->obs_dim);
  if (o->action_kind != AMPX_RL_DISCRETE && o->action_kind != AMPX_RL_CONTINUOUS)
    BAD("%s: action_kind %d is neither AMPX_RL_DISCRETE nor AMPX_RL_CONTINUOUS", fn,
        o->action_kind);
  if (o->action_dim < (o->action_kind == AMPX_RL_DISCRETE ? 2 : 1) || o->action_dim > MAX_ACTIONS)
    BAD("%s: action_dim %d is not in [%d, %d] for the action kind", fn, o->action_dim,
        o->action_kind == AMPX_RL_DISCRETE ? 2 : 1, MAX_ACTIONS);
  if (o->num_envs <= 0 || o->n_steps <= 0)
    BAD("%s: num_envs %d and n_steps %d must be > 0", fn, o->num_envs, o->n_steps);
  if ((int64_t)o->num_envs * o->n_steps > (1 << 24))
    BAD("%s: n_steps * num_envs is above 2^24", fn);
  if (o->batch_size <= 0 || (int64_t)o->batch_size > (int64_t)o->num_envs * o->n_steps)
    BAD("%s: batch_size %d must be in [1, n_steps * num_envs = %lld]", fn, o->batch_size,
        (long long)o->num_envs * o->n_steps);
  if (o->n_epochs <= 0) BAD("%s: n_epochs %d must be > 0", fn, o->n_epochs);
  if (!(o->gamma >= 0 && o->gamma <= 1)) BAD("%s: gamma %g is not in [0, 1]", fn, o->gamma);
  if (!(o->gae_lambda >= 0 && o->gae_lambda <= 1))
    BAD("%s: gae_lambda %g is not in [0, 1]", fn, o->gae_lambda);
  if (!(o->learning_rate >= 0 && isfinite(o->learning_rate)))
    BAD("%s: learning_rate %g must be finite and >= 0", fn, o->learning_rate);
  if (!(o->clip_range > 0 && isfinite(o->clip_range)))
    BAD("%s: clip_range %g must be finite and > 0", fn, o->clip_range);
  if (!(o->clip_range_vf >= 0 && isfinite(o->clip_range_vf)))
    BAD("%s: clip_range_vf %g must be finite and >= 0 (0: none)", fn, o->clip_range_vf);
  if ((o->anneal_lr != 0 && o->anneal_lr != 1) ||
      (o->anneal_clip_range != 0 && o->anneal_clip_range != 1))
    BAD("%s: anneal_lr %d and anneal_clip_range %d are 0 or 1", fn, o->anneal_lr,
        o->anneal_clip_range);
  if ((o->anneal_lr || o->anneal_clip_range) && o->total_timesteps <= 0)
    BAD("%s: annealing needs total_timesteps > 0 (got %lld)", fn, (long long)o->total_timesteps);
  if (!(isfinite(o->ent_coef) && isfinite(o->vf_coef) && o->vf_coef >= 0))
    BAD("%s: ent_coef %g and vf_coef %g must be finite (vf_coef >= 0)", fn, o->ent_coef,
        o->vf_coef);
  if (!(o->max_grad_norm >= 0 && isfinite(o->max_grad_norm)))
    BAD("%s: max_grad_norm %g must be finite and >= 0", fn, o->max_grad_norm);
  if (o->n_layers < 0 || o->n_layers > AMPX_RL_MAX_LAYERS)
    BAD("%s: n_layers %d is not in [0, %d]", fn, o->n_layers, AMPX_RL_MAX_LAYERS);
  for (int i = 0; i < o->n_layers; ++i)
    if (o->layer_sizes[i] <= 0 || o->layer_sizes[i] > 65536)
      BAD("%s: layer_sizes[%d] = %d is not in [1, 65536]", fn, i, o->layer_sizes[i]);
  if (o->activation != AMPX_RL_TANH && o->activation != AMPX_RL_RELU)
    BAD("%s: activation %d is neither AMPX_RL_TANH nor AMPX_RL_RELU", fn, o->activation);
  if (o->shared_network != 0 && o->shared_network != 1)
    BAD("%s: shared_network %d is not 0 or 1", fn, o->shared_network);
  if (!isfinite(o->log_std_init)) BAD("%s: log_std_init is not finite", fn);
  if ((o->action_low == NULL) != (o->action_high == NULL))
    BAD("%s: give both action_low and action_high, or neither", fn);
  if (o->action_low) {
    if (o->action_kind != AMPX_RL_CONTINUOUS) BAD("%s: action bounds need continuous actions", fn);
    for (int i = 0; i < o->action_dim; ++i)
      if (!(o->action_low[i] <= o->action_high[i]))
        BAD("%s: action_low[%d] = %g is not <= action_high[%d] = %g", fn, i,
            (double)o->action_low[i], i, (double)o->action_high[i]);
  }
  if ((o->normalize_obs != 0 && o->normalize_obs != 1) ||
      (o->normalize_reward != 0 && o->normalize_reward != 1) ||
      (o->normalize_advantage != 0 && o->normalize_advantage != 1))
    BAD("%s: normalize_obs, normalize_reward and normalize_advantage are 0 or 1", fn);
  if (!(o->clip_obs > 0) || !(o->clip_reward > 0))
    BAD("%s: clip_obs %g and clip_reward %g must be > 0", fn, o->clip_obs, o->clip_reward);
  if (o->precision != AMPX_RL_FP32 && o->precision != AMPX_RL_BF16 &&
      o->precision != AMPX_RL_FP16)
    BAD("%s: precision %d is not AMPX_RL_FP32, _BF16 or _FP16", fn, o->precision);
  if (o->num_threads < 0) BAD("%s: num_threads %d must be >= 0", fn, o->num_threads);
#undef BAD
  return AMPX_OK;
}

/* torch.nn.init.orthogonal_: Q of the QR of a Gaussian matrix (Gram-Schmidt
 * on the taller orientation, whose R has a positive diagonal: the sign fix
 * torch applies), times gain. */
static void orthogonal(rl_rng *rng, int32_t rows, int32_t cols, double gain, float *out) {
  const int transpose = rows < cols;
  const int32_t m = transpose ? cols : rows, n = transpose ? rows : cols;
  double *q = malloc(sizeof(double) * (size_t)m * n); /* column-major m x n */
  if (!q) return;
  for (size_t i = 0; i < (size_t)m * n; ++i) q[i] = rl_rng_normal(rng);
  for (int32_t j = 0; j < n; ++j) {
    double *cj = q + (size_t)j * m;
    for (int32_t k = 0; k < j; ++k) {
      const double *ck = q + (size_t)k * m;
      double dot = 0;
      for (int32_t i = 0; i < m; ++i) dot += ck[i] * cj[i];
      for (int32_t i = 0; i < m; ++i) cj[i] -= dot * ck[i];
    }
    double norm = 0;
    for (int32_t i = 0; i < m; ++i) norm += cj[i] * cj[i];
    norm = sqrt(norm);
    for (int32_t i = 0; i < m; ++i) cj[i] = norm > 0 ? cj[i] / norm : 0;
  }
  for (int32_t r = 0; r < rows; ++r)
    for (int32_t c = 0; c < cols; ++c) {
      /* element (r, c) of the m x n matrix, or of its transpose */
      const double v = transpose ? q[(size_t)r * m + c] : q[(size_t)c * m + r];
      out[(size_t)r * cols + c] = (float)(gain * v);
    }
  free(q);
}

static ampx_status make_param(ampx_ppo a, const char *name, int32_t rows, int32_t cols,
                              double gain, double fill, ampx_tensor *out) {
  const int64_t shape[2] = {rows, cols};
  const int32_t ndim = cols > 0 ? 2 : 1;
  const size_t n = (size_t)rows * (cols > 0 ? cols : 1);
  float *host = malloc(n * sizeof(float));
  if (!host) return rl_fail(AMPX_ERR_OUT_OF_MEMORY, "ampx_ppo_create: out of memory");
  if (cols > 0) orthogonal(&a->rng, rows, cols, gain, host);
  else
    for (size_t i = 0; i < n; ++i) host[i] = (float)fill;
  ampx_status st = ampx_tensor_from_host(a->ctx, AMPX_F32, ndim, shape, host, n * sizeof(float), out);
  free(host);
  if (st) return st;
  a->params[a->n_params++] = *out;
  TRY(ampx_tensor_set_name(*out, name));
  return ampx_tensor_set_requires_grad(*out, 1);
}

static ampx_status make_trunk(ampx_ppo a, const char *prefix, mlp *net) {
  char name[64];
  int32_t in = a->o.obs_dim;
  net->n_layers = a->o.n_layers;
  for (int i = 0; i < net->n_layers; ++i) {
    const int32_t out = a->o.layer_sizes[i];
    snprintf(name, sizeof name, "%s.%d.weight", prefix, i);
    TRY(make_param(a, name, out, in, sqrt(2.0), 0, &net->w[i]));
    snprintf(name, sizeof name, "%s.%d.bias", prefix, i);
    TRY(make_param(a, name, out, 0, 0, 0.0, &net->b[i]));
    in = out;
  }
  return AMPX_OK;
}

static int32_t trunk_width(const ampx_ppo a) {
  return a->o.n_layers ? a->o.layer_sizes[a->o.n_layers - 1] : a->o.obs_dim;
}

static void free_agent(struct ampx_ppo_s *a) {
  for (size_t i = 0; i < a->n_params; ++i) ampx_tensor_release(a->params[i]);
  ampx_optimizer_release(a->opt);
  ampx_scaler_release(a->scaler);
  ampx_autocast_release(a->autocast);
  ampx_context_release(a->ctx);
  void *bufs[] = {a->low, a->high, a->obs, a->actions, a->logp, a->values, a->rewards, a->adv,
                  a->ret, a->episode_starts, a->last_dones, a->pending_final, a->pending,
                  a->obs_rms.mean, a->obs_rms.var, a->disc_return, a->ep_return, a->ep_length,
                  a->xbuf, a->head, a->vbuf, a->gbuf, a->gvbuf, a->perm, a->ret_rms.mean,
                  a->ret_rms.var};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) free(bufs[i]);
  a->tag = 0;
  free(a);
}

ampx_status ampx_ppo_create(const ampx_ppo_options *options, ampx_ppo *out) {
  static const char fn[] = "ampx_ppo_create";
  if (!options || !out)
    return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !options ? "options" : "out");
  TRY(validate(options));
  struct ampx_ppo_s *a = calloc(1, sizeof *a);
  if (!a) return rl_fail(AMPX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  a->o = *options;
  a->o.struct_size = sizeof(ampx_ppo_options);
  const ampx_ppo_options *o = &a->o;
  const size_t N = (size_t)o->num_envs, D = (size_t)o->obs_dim;
  const size_t A = o->action_kind == AMPX_RL_DISCRETE ? 1 : (size_t)o->action_dim;
  a->out_dim = o->action_dim;
  a->rows = (size_t)o->n_steps * N;
  const size_t rows = a->rows, W = (size_t)o->action_dim;
  const size_t mb = (size_t)o->batch_size > N ? (size_t)o->batch_size : N;
  int ok = 1;
#define ALLOC(field, count) ok = ok && ((a->field = calloc((count), sizeof *a->field)) != NULL)
  ALLOC(obs, rows * D); ALLOC(actions, rows * A); ALLOC(logp, rows); ALLOC(values, rows);
  ALLOC(rewards, rows); ALLOC(adv, rows); ALLOC(ret, rows); ALLOC(episode_starts, rows);
  ALLOC(last_dones, N); ALLOC(pending_final, N * D); ALLOC(pending, N);
  ALLOC(obs_rms.mean, D); ALLOC(obs_rms.var, D); ALLOC(ret_rms.mean, 1); ALLOC(ret_rms.var, 1);
  ALLOC(disc_return, N); ALLOC(ep_return, N); ALLOC(ep_length, N);
  ALLOC(xbuf, mb * D); ALLOC(head, mb * W); ALLOC(vbuf, mb); ALLOC(gbuf, mb * W);
  ALLOC(gvbuf, mb); ALLOC(perm, rows);
#undef ALLOC
  if (o->action_low) {
    a->low = malloc(W * sizeof(float));
    a->high = malloc(W * sizeof(float));
    ok = ok && a->low && a->high;
    if (ok) {
      memcpy(a->low, o->action_low, W * sizeof(float));
      memcpy(a->high, o->action_high, W * sizeof(float));
    }
  }
  a->o.action_low = a->o.action_high = NULL; /* borrowed: never read again */
  if (!ok) {
    free_agent(a);
    return rl_fail(AMPX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  for (size_t i = 0; i < D; ++i) a->obs_rms.var[i] = 1.0;
  a->obs_rms.count = 1e-4;
  a->ret_rms.var[0] = 1.0;
  a->ret_rms.count = 1e-4;
  for (size_t e = 0; e < N; ++e) a->last_dones[e] = 1; /* SB3: the first obs starts episodes */
  rl_rng_seed(&a->rng, o->seed);
  rl_rng_seed(&a->predict_rng, o->seed ^ 0x5deece66dull);

  ampx_context_options co = AMPX_CONTEXT_OPTIONS_INIT;
  co.num_threads = o->num_threads;
  co.seed = o->seed;
  ampx_status st = ampx_context_create(&co, &a->ctx);
  if (!st && o->precision != AMPX_RL_FP32) {
    ampx_autocast_options ao = AMPX_AUTOCAST_OPTIONS_INIT;
    ao.dtype = o->precision == AMPX_RL_BF16 ? AMPX_BF16 : AMPX_F16;
    st = ampx_autocast_create(a->ctx, &ao, &a->autocast);
  }
  if (!st) st = make_trunk(a, o->shared_network ? "trunk" : "pi", &a->pi_trunk);
  if (!st && !o->shared_network) st = make_trunk(a, "vf", &a->vf_trunk);
  if (!st) st = make_param(a, "pi.head.weight", a->out_dim, trunk_width(a), 0.01, 0, &a->pi_w);
  if (!st) st = make_param(a, "pi.head.bias", a->out_dim, 0, 0, 0.0, &a->pi_b);
  if (!st) st = make_param(a, "vf.head.weight", 1, trunk_width(a), 1.0, 0, &a->vf_w);
  if (!st) st = make_param(a, "vf.head.bias", 1, 0, 0, 0.0, &a->vf_b);
  if (!st && o->action_kind == AMPX_RL_CONTINUOUS)
    st = make_param(a, "pi.log_std", a->out_dim, 0, 0, o->log_std_init, &a->log_std);
  if (!st) {
    ampx_adam_options ad = AMPX_ADAM_OPTIONS_INIT;
    ad.lr = o->learning_rate;
    ad.eps = 1e-5;
    st = ampx_optimizer_create_adam(a->ctx, a->params, a->n_params, &ad, &a->opt);
  }
  if (!st && o->precision == AMPX_RL_FP16) {
    st = ampx_scaler_create(a->ctx, NULL, &a->scaler);
    if (!st) st = ampx_scaler_attach(a->scaler, a->opt);
  }
  if (st) {
    free_agent(a);
    return st;
  }
  a->tag = PPO_TAG;
  a->stats.struct_size = sizeof(ampx_ppo_stats);
  a->stats.mean_return = a->stats.mean_length = NAN;
  a->stats.learning_rate = o->learning_rate;
  a->stats.clip_range = o->clip_range;
  a->stats.loss_scale = 1.0;
  *out = a;
  return AMPX_OK;
}

void ampx_ppo_release(ampx_ppo agent) {
  if (!agent || agent->tag != PPO_TAG) return;
  free_agent(agent);
}

/* ---------------------------------------------------------------- forward */

static ampx_status trunk_forward(ampx_ppo a, const mlp *net, ampx_tensor x, ampx_tensor *out) {
  for (int i = 0; i < net->n_layers; ++i) {
    if (a->o.activation == AMPX_RL_RELU) {
      TRY(ampx_linear(x, net->w[i], net->b[i], AMPX_ACTIVATION_RELU, &x));
    } else {
      TRY(ampx_linear(x, net->w[i], net->b[i], AMPX_ACTIVATION_NONE, &x));
      TRY(ampx_tanh(x, &x));
    }
  }
  *out = x;
  return AMPX_OK;
}

/* Runs both heads on rows x obs_dim host observations; inside a scope
 * (and autocast) the caller opened. */
static ampx_status heads_forward(ampx_ppo a, const float *obs, size_t rows, ampx_tensor *x_out,
                                 ampx_tensor *head, ampx_tensor *value) {
  const int64_t shape[2] = {(int64_t)rows, a->o.obs_dim};
  ampx_tensor x;
  TRY(ampx_tensor_from_host(a->ctx, AMPX_F32, 2, shape, obs, rows * a->o.obs_dim * sizeof(float),
                            &x));
  *x_out = x;
  ampx_tensor hp, hv;
  TRY(trunk_forward(a, &a->pi_trunk, x, &hp));
  if (a->o.shared_network) hv = hp;
  else TRY(trunk_forward(a, &a->vf_trunk, x, &hv));
  TRY(ampx_linear(hp, a->pi_w, a->pi_b, AMPX_ACTIVATION_NONE, head));
  return ampx_linear(hv, a->vf_w, a->vf_b, AMPX_ACTIVATION_NONE, value);
}

static ampx_status read_f32(ampx_tensor t, float *dst, size_t count) {
  ampx_dtype dt;
  TRY(ampx_tensor_dtype(t, &dt));
  if (dt == AMPX_F32) return ampx_tensor_to_host(t, dst, count * sizeof(float));
  ampx_tensor c;
  TRY(ampx_tensor_cast(t, AMPX_F32, &c));
  ampx_status st = ampx_tensor_to_host(c, dst, count * sizeof(float));
  ampx_tensor_release(c);
  return st;
}

static ampx_status enter(ampx_ppo a) {
  TRY(ampx_scope_push(a->ctx));
  if (a->autocast) {
    ampx_status st = ampx_autocast_enter(a->autocast);
    if (st) {
      ampx_status ignored = ampx_scope_pop(a->ctx);
      (void)ignored;
      return st;
    }
  }
  return AMPX_OK;
}

static ampx_status leave(ampx_ppo a, ampx_status st) {
  if (a->autocast) {
    ampx_status s2 = ampx_autocast_exit(a->autocast);
    if (!st) st = s2;
  }
  ampx_status s3 = ampx_scope_pop(a->ctx);
  return st ? st : s3;
}

/* Heads and values for host observations without recording (act, predict,
 * bootstrap values). head may be NULL. */
static ampx_status infer(ampx_ppo a, const float *obs, size_t rows, float *head, float *value) {
  int32_t prev = 1;
  TRY(ampx_set_grad_enabled(a->ctx, 0, &prev));
  ampx_status st = enter(a);
  if (!st) {
    ampx_tensor x = NULL, h, v;
    st = heads_forward(a, obs, rows, &x, &h, &v);
    if (!st && head) st = read_f32(h, head, rows * a->out_dim);
    if (!st) st = read_f32(v, value, rows);
    ampx_tensor_release(x);
    st = leave(a, st);
  }
  ampx_status s2 = ampx_set_grad_enabled(a->ctx, prev, NULL);
  return st ? st : s2;
}

/* ---------------------------------------------------------- distributions */

static double log_softmax_row(const float *z, int32_t n, double *logp) {
  double mx = z[0];
  for (int32_t j = 1; j < n; ++j) mx = z[j] > mx ? z[j] : mx;
  double s = 0;
  for (int32_t j = 0; j < n; ++j) s += exp(z[j] - mx);
  const double lse = mx + log(s);
  double entropy = 0;
  for (int32_t j = 0; j < n; ++j) {
    logp[j] = z[j] - lse;
    entropy -= exp(logp[j]) * logp[j];
  }
  return entropy;
}

#define LOG_SQRT_2PI 0.91893853320467274178

/* Samples (or takes the mode of) one row's action into act (unclipped) and
 * returns its log-probability. */
static double sample_row(ampx_ppo a, rl_rng *rng, const float *head, const float *log_std,
                         int deterministic, float *act) {
  const int32_t n = a->out_dim;
  if (a->o.action_kind == AMPX_RL_DISCRETE) {
    double lp[MAX_ACTIONS];
    log_softmax_row(head, n, lp);
    int32_t k = 0;
    if (deterministic) {
      for (int32_t j = 1; j < n; ++j) k = head[j] > head[k] ? j : k;
    } else {
      const double u = rl_rng_uniform(rng);
      double c = 0;
      for (k = 0; k < n - 1; ++k) {
        c += exp(lp[k]);
        if (u < c) break;
      }
    }
    act[0] = (float)k;
    return lp[k];
  }
  double lp = 0;
  for (int32_t j = 0; j < n; ++j) {
    const double s = log_std[j], sd = exp(s);
    const double eps = deterministic ? 0.0 : rl_rng_normal(rng);
    act[j] = (float)(head[j] + sd * eps);
    const double d = ((double)act[j] - head[j]) / sd;
    lp += -0.5 * d * d - s - LOG_SQRT_2PI;
  }
  return lp;
}

static void clip_for_env(ampx_ppo a, const float *act, float *out) {
  for (int32_t j = 0; j < a->out_dim; ++j) {
    float v = act[j];
    if (a->low) v = v < a->low[j] ? a->low[j] : v > a->high[j] ? a->high[j] : v;
    out[j] = v;
  }
}

/* ------------------------------------------------------ running statistics */

static void normalize_obs(ampx_ppo a, const float *in, float *out, size_t rows) {
  const size_t D = (size_t)a->o.obs_dim;
  if (!a->o.normalize_obs) {
    memcpy(out, in, rows * D * sizeof(float));
    return;
  }
  const double c = a->o.clip_obs;
  for (size_t r = 0; r < rows; ++r)
    for (size_t d = 0; d < D; ++d) {
      double v = (in[r * D + d] - a->obs_rms.mean[d]) / sqrt(a->obs_rms.var[d] + 1e-8);
      out[r * D + d] = (float)(v < -c ? -c : v > c ? c : v);
    }
}

/* ------------------------------------------------------------------ train */

static double progress_remaining(const ampx_ppo a) {
  const double p = 1.0 - (double)a->stats.timesteps / (double)a->o.total_timesteps;
  return p > 0 ? p : 0;
}

/* One minibatch: forward with recording, the PPO loss and its derivatives
 * on the host, backward through the surrogate, unscale, clip, step. */
static ampx_status minibatch(ampx_ppo a, const int32_t *idx, size_t B, double clip, double clip_vf,
                             double sums[6]) {
  const ampx_ppo_options *o = &a->o;
  const size_t D = (size_t)o->obs_dim, W = (size_t)a->out_dim;
  const size_t A = o->action_kind == AMPX_RL_DISCRETE ? 1 : W;
  for (size_t i = 0; i < B; ++i) memcpy(a->xbuf + i * D, a->obs + (size_t)idx[i] * D, D * sizeof(float));

  /* the minibatch's advantages, normalized as SB3 (std with ddof 1) */
  double mean = 0, var = 0;
  for (size_t i = 0; i < B; ++i) mean += a->adv[idx[i]];
  mean /= (double)B;
  for (size_t i = 0; i < B; ++i) var += (a->adv[idx[i]] - mean) * (a->adv[idx[i]] - mean);
  const int norm = o->normalize_advantage && B > 1;
  const double sd = norm ? sqrt(var / (double)(B - 1)) : 1.0;

  float log_std[MAX_ACTIONS];
  double g_logstd[MAX_ACTIONS];
  const int continuous = o->action_kind == AMPX_RL_CONTINUOUS;

  ampx_status st = ampx_optimizer_zero_grad(a->opt);
  if (st) return st;
  st = enter(a);
  if (st) return st;
  ampx_tensor x = NULL, head, value, g_head = NULL, g_value = NULL, g_ls = NULL;
  st = heads_forward(a, a->xbuf, B, &x, &head, &value);
  if (!st) st = read_f32(head, a->head, B * W);
  if (!st) st = read_f32(value, a->vbuf, B);
  if (!st && continuous) st = ampx_tensor_to_host(a->log_std, log_std, W * sizeof(float));
  if (st) {
    ampx_tensor_release(x);
    return leave(a, st);
  }
  double pg = 0, vl = 0, ent = 0, kl = 0, clipped = 0;
  for (size_t j = 0; j < W; ++j) g_logstd[j] = 0;
  double lp[MAX_ACTIONS];
  for (size_t i = 0; i < B; ++i) {
    const size_t k = (size_t)idx[i];
    const float *z = a->head + i * W;
    float *gz = a->gbuf + i * W;
    double new_logp, entropy;
    if (!continuous) {
      entropy = log_softmax_row(z, (int32_t)W, lp);
      new_logp = lp[(size_t)a->actions[k]];
    } else {
      new_logp = 0;
      entropy = 0;
      for (size_t j = 0; j < W; ++j) {
        const double s = log_std[j], d = (a->actions[k * A + j] - (double)z[j]) / exp(s);
        new_logp += -0.5 * d * d - s - LOG_SQRT_2PI;
        entropy += 0.5 + LOG_SQRT_2PI + s;
      }
    }
    const double adv = norm ? (a->adv[k] - mean) / (sd + 1e-8) : a->adv[k];
    const double log_ratio = new_logp - a->logp[k];
    const double r = exp(log_ratio);
    const double rc = r < 1 - clip ? 1 - clip : r > 1 + clip ? 1 + clip : r;
    const double u1 = r * adv, u2 = rc * adv;
    pg += -(u1 < u2 ? u1 : u2);
    kl += (r - 1) - log_ratio;
    clipped += fabs(r - 1) > clip;
    ent += -entropy;
    /* min's gradient goes to the smaller operand (half to each on a tie);
     * clamp's passes inside [1 - clip, 1 + clip], bounds included */
    const int inside = r >= 1 - clip && r <= 1 + clip;
    const double w = u1 < u2 ? 1.0 : u1 > u2 ? (inside ? 1.0 : 0.0) : (inside ? 1.0 : 0.5);
    const double g_logp = -(adv * r * w) / (double)B;
    if (!continuous) {
      const size_t act = (size_t)a->actions[k];
      for (size_t j = 0; j < W; ++j) {
        const double p = exp(lp[j]);
        const double g = g_logp * ((j == act) - p) + o->ent_coef / (double)B * p * (lp[j] + entropy);
        gz[j] = (float)g;
      }
    } else {
      for (size_t j = 0; j < W; ++j) {
        const double s = log_std[j], var_j = exp(2 * s);
        const double diff = a->actions[k * A + j] - (double)z[j];
        gz[j] = (float)(g_logp * diff / var_j);
        g_logstd[j] += g_logp * (diff * diff / var_j - 1.0);
      }
    }
    /* value loss: mse(returns, v_pred), v_pred optionally clipped around the old value */
    const double v = a->vbuf[i], v_old = a->values[k];
    double vp = v, dvp = 1.0;
    if (clip_vf > 0) {
      const double dv = v - v_old;
      vp = v_old + (dv < -clip_vf ? -clip_vf : dv > clip_vf ? clip_vf : dv);
      dvp = dv >= -clip_vf && dv <= clip_vf;
    }
    vl += (a->ret[k] - vp) * (a->ret[k] - vp);
    a->gvbuf[i] = (float)(o->vf_coef * 2.0 * (vp - a->ret[k]) / (double)B * dvp);
  }
  for (size_t j = 0; j < W && continuous; ++j) g_logstd[j] += -o->ent_coef;
  sums[0] += pg / (double)B;
  sums[1] += vl / (double)B;
  sums[2] += ent / (double)B;
  sums[3] += kl / (double)B;
  sums[4] += clipped / (double)B;
  sums[5] += 1;

  const int64_t hs[2] = {(int64_t)B, (int64_t)W}, vs[2] = {(int64_t)B, 1};
  ampx_tensor loss = NULL, t1, t2;
  st = ampx_tensor_from_host(a->ctx, AMPX_F32, 2, hs, a->gbuf, B * W * sizeof(float), &g_head);
  if (!st) st = ampx_tensor_from_host(a->ctx, AMPX_F32, 2, vs, a->gvbuf, B * sizeof(float), &g_value);
  if (!st) st = ampx_mul(head, g_head, &t1);
  if (!st) st = ampx_sum(t1, &t1);
  if (!st) st = ampx_mul(value, g_value, &t2);
  if (!st) st = ampx_sum(t2, &t2);
  if (!st) st = ampx_add(t1, t2, &loss);
  if (!st && continuous) {
    float gl[MAX_ACTIONS];
    for (size_t j = 0; j < W; ++j) gl[j] = (float)g_logstd[j];
    const int64_t ls = (int64_t)W;
    st = ampx_tensor_from_host(a->ctx, AMPX_F32, 1, &ls, gl, W * sizeof(float), &g_ls);
    if (!st) st = ampx_mul(a->log_std, g_ls, &t1);
    if (!st) st = ampx_sum(t1, &t1);
    if (!st) st = ampx_add(loss, t1, &loss);
  }
  if (!st) st = ampx_backward(loss, a->scaler);
  ampx_tensor_release(x);
  ampx_tensor_release(g_head);
  ampx_tensor_release(g_value);
  ampx_tensor_release(g_ls);
  st = leave(a, st);
  if (st) return st;

  if (a->scaler) TRY(ampx_scaler_unscale(a->scaler, a->opt));
  if (o->max_grad_norm > 0) TRY(ampx_clip_grad_norm(a->opt, o->max_grad_norm, 2.0, 0, NULL));
  if (a->scaler) {
    TRY(ampx_scaler_step(a->scaler, a->opt));
    int32_t taken = 1;
    TRY(ampx_optimizer_last_step_taken(a->opt, &taken));
    a->skipped += !taken;
    TRY(ampx_scaler_update(a->scaler));
  } else {
    TRY(ampx_optimizer_step(a->opt));
  }
  return AMPX_OK;
}

static ampx_status train(ampx_ppo a, const float *last_values) {
  const ampx_ppo_options *o = &a->o;
  const size_t N = (size_t)o->num_envs;
  rl_compute_gae((size_t)o->n_steps, N, o->gamma, o->gae_lambda, a->rewards, a->values,
                 a->episode_starts, a->last_dones, last_values, a->adv, a->ret);
  const double progress = o->anneal_lr || o->anneal_clip_range ? progress_remaining(a) : 1.0;
  const double lr = o->learning_rate * (o->anneal_lr ? progress : 1.0);
  const double clip = o->clip_range * (o->anneal_clip_range ? progress : 1.0);
  const double clip_vf = o->clip_range_vf;
  TRY(ampx_optimizer_set_lr(a->opt, 0, lr));
  double sums[6] = {0, 0, 0, 0, 0, 0};
  for (int32_t epoch = 0; epoch < o->n_epochs; ++epoch) {
    for (size_t i = 0; i < a->rows; ++i) a->perm[i] = (int32_t)i;
    for (size_t i = a->rows; i-- > 1;) { /* Fisher-Yates */
      const size_t j = (size_t)rl_rng_below(&a->rng, i + 1);
      const int32_t t = a->perm[i];
      a->perm[i] = a->perm[j];
      a->perm[j] = t;
    }
    for (size_t start = 0; start < a->rows; start += (size_t)o->batch_size) {
      const size_t B = a->rows - start < (size_t)o->batch_size ? a->rows - start : (size_t)o->batch_size;
      TRY(minibatch(a, a->perm + start, B, clip, clip_vf, sums));
    }
  }
  a->stats.updates += 1;
  a->stats.policy_loss = sums[0] / sums[5];
  a->stats.value_loss = sums[1] / sums[5];
  a->stats.entropy_loss = sums[2] / sums[5];
  a->stats.approx_kl = sums[3] / sums[5];
  a->stats.clip_fraction = sums[4] / sums[5];
  a->stats.learning_rate = lr;
  a->stats.clip_range = clip;
  if (a->scaler) TRY(ampx_scaler_get_scale(a->scaler, &a->stats.loss_scale));
  a->stats.skipped_steps = a->skipped;
  return AMPX_OK;
}

/* --------------------------------------------------------------- act, reward */

ampx_status ampx_ppo_act(ampx_ppo a, const float *obs, size_t obs_count, float *actions,
                         size_t action_count) {
  static const char fn[] = "ampx_ppo_act";
  TRY(check_agent(a, fn));
  const ampx_ppo_options *o = &a->o;
  const size_t N = (size_t)o->num_envs, D = (size_t)o->obs_dim, W = (size_t)a->out_dim;
  const size_t A = o->action_kind == AMPX_RL_DISCRETE ? 1 : W;
  if (!obs || !actions) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !obs ? "obs" : "actions");
  if (obs_count != N * D)
    return rl_fail(AMPX_ERR_SHAPE, "%s: obs_count %zu, expected num_envs %zu x obs_dim %zu = %zu",
                   fn, obs_count, N, D, N * D);
  if (action_count != N * A)
    return rl_fail(AMPX_ERR_SHAPE, "%s: action_count %zu, expected %zu", fn, action_count, N * A);
  size_t where;
  if (!all_finite(obs, obs_count, &where))
    return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: obs[%zu] (env %zu) is not finite", fn, where,
                   where / D);
  if (a->phase != PHASE_ACT)
    return rl_fail(AMPX_ERR_ORDER, "%s: the previous actions have no rewards yet; call ampx_ppo_reward first", fn);

  float *norm = malloc(sizeof(float) * (N * D + N * W + N + N * D + N));
  if (!norm) return rl_fail(AMPX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  float *head = norm + N * D, *val = head + N * W, *fin = val + N, *fin_val = fin + N * D;
  /* the update below is what SB3's VecNormalize does at each step: it
   * comes before the final observations of the step that ended are
   * normalized, so those wait here */
  const double saved_count = a->obs_rms.count;
  double *saved_mean = NULL;
  if (o->normalize_obs) {
    saved_mean = malloc(sizeof(double) * 2 * D);
    if (!saved_mean) {
      free(norm);
      return rl_fail(AMPX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    memcpy(saved_mean, a->obs_rms.mean, D * sizeof(double));
    memcpy(saved_mean + D, a->obs_rms.var, D * sizeof(double));
    rl_rms_update(&a->obs_rms, obs, N, D);
  }
  normalize_obs(a, obs, norm, N);
  ampx_status st = AMPX_OK;
  size_t n_pending = 0;
  for (size_t e = 0; e < N; ++e) n_pending += a->pending[e];
  if (n_pending) {
    normalize_obs(a, a->pending_final, fin, N);
    st = infer(a, fin, N, NULL, fin_val);
  }
  int trained = 0;
  if (!st && a->pos == o->n_steps) {
    if (n_pending) {
      rl_bootstrap_truncated(N, o->gamma, a->pending, fin_val,
                             a->rewards + (size_t)(o->n_steps - 1) * N);
      memset(a->pending, 0, N);
      n_pending = 0;
    }
    st = infer(a, norm, N, NULL, val);
    if (!st) st = train(a, val);
    if (!st) a->pos = 0;
    trained = 1;
  }
  if (!st) st = infer(a, norm, N, head, val);
  if (st) {
    if (!trained && o->normalize_obs) { /* nothing changed yet: undo */
      memcpy(a->obs_rms.mean, saved_mean, D * sizeof(double));
      memcpy(a->obs_rms.var, saved_mean + D, D * sizeof(double));
      a->obs_rms.count = saved_count;
    }
    free(saved_mean);
    free(norm);
    return st;
  }
  free(saved_mean);
  if (n_pending) { /* bootstrap of the previous step, now its values are known */
    rl_bootstrap_truncated(N, o->gamma, a->pending, fin_val, a->rewards + (size_t)(a->pos - 1) * N);
    memset(a->pending, 0, N);
  }
  float log_std[MAX_ACTIONS];
  if (o->action_kind == AMPX_RL_CONTINUOUS) {
    st = ampx_tensor_to_host(a->log_std, log_std, W * sizeof(float));
    if (st) {
      free(norm);
      return st;
    }
  }
  const size_t base = (size_t)a->pos * N;
  memcpy(a->obs + base * D, norm, N * D * sizeof(float));
  for (size_t e = 0; e < N; ++e) {
    float *act = a->actions + (base + e) * A;
    a->logp[base + e] = (float)sample_row(a, &a->rng, head + e * W, log_std, 0, act);
    a->values[base + e] = val[e];
    a->episode_starts[base + e] = a->last_dones[e];
    if (o->action_kind == AMPX_RL_DISCRETE) actions[e] = act[0];
    else clip_for_env(a, act, actions + e * W);
  }
  free(norm);
  a->phase = PHASE_REWARD;
  return AMPX_OK;
}

ampx_status ampx_ppo_reward(ampx_ppo a, const float *rewards, const int32_t *terminated,
                            const int32_t *truncated, const float *final_obs, size_t num_envs) {
  static const char fn[] = "ampx_ppo_reward";
  TRY(check_agent(a, fn));
  const ampx_ppo_options *o = &a->o;
  const size_t N = (size_t)o->num_envs, D = (size_t)o->obs_dim;
  if (!rewards || !terminated || !truncated)
    return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: rewards, terminated and truncated must not be NULL", fn);
  if (num_envs != N)
    return rl_fail(AMPX_ERR_SHAPE, "%s: num_envs %zu, the agent has %zu", fn, num_envs, N);
  if (a->phase != PHASE_REWARD)
    return rl_fail(AMPX_ERR_ORDER, "%s: no actions to reward; call ampx_ppo_act first", fn);
  for (size_t e = 0; e < N; ++e) {
    if (!isfinite(rewards[e]))
      return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: rewards[%zu] is not finite", fn, e);
    if ((terminated[e] != 0 && terminated[e] != 1) || (truncated[e] != 0 && truncated[e] != 1))
      return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: terminated[%zu] / truncated[%zu] must be 0 or 1", fn, e, e);
    if (truncated[e] && !terminated[e]) {
      size_t where;
      if (!final_obs)
        return rl_fail(AMPX_ERR_INVALID_ARGUMENT,
                       "%s: env %zu was truncated but final_obs is NULL (its value is bootstrapped)", fn, e);
      if (!all_finite(final_obs + e * D, D, &where))
        return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: final_obs[%zu] (env %zu) is not finite", fn,
                       e * D + where, e);
    }
  }
  const size_t base = (size_t)a->pos * N;
  if (o->normalize_reward) {
    float *disc = a->gvbuf; /* N <= batch scratch (sized max(batch, N)) */
    for (size_t e = 0; e < N; ++e) {
      a->disc_return[e] = a->disc_return[e] * o->gamma + rewards[e];
      disc[e] = (float)a->disc_return[e];
    }
    rl_rms_update(&a->ret_rms, disc, N, 1);
  }
  for (size_t e = 0; e < N; ++e) {
    const int done = terminated[e] || truncated[e];
    double r = rewards[e];
    if (o->normalize_reward) {
      r /= sqrt(a->ret_rms.var[0] + 1e-8);
      r = r < -o->clip_reward ? -o->clip_reward : r > o->clip_reward ? o->clip_reward : r;
      if (done) a->disc_return[e] = 0;
    }
    a->rewards[base + e] = (float)r;
    a->last_dones[e] = (uint8_t)done;
    a->ep_return[e] += rewards[e];
    a->ep_length[e] += 1;
    if (truncated[e] && !terminated[e]) {
      memcpy(a->pending_final + e * D, final_obs + e * D, D * sizeof(float));
      a->pending[e] = 1;
    }
    if (done) {
      const size_t slot = (size_t)(a->hist_count % EP_HISTORY);
      a->hist_return[slot] = a->ep_return[e];
      a->hist_length[slot] = (double)a->ep_length[e];
      a->hist_count += 1;
      a->ep_return[e] = 0;
      a->ep_length[e] = 0;
    }
  }
  const size_t n = a->hist_count < EP_HISTORY ? (size_t)a->hist_count : EP_HISTORY;
  if (n) {
    double sr = 0, sl = 0;
    for (size_t i = 0; i < n; ++i) {
      sr += a->hist_return[i];
      sl += a->hist_length[i];
    }
    a->stats.mean_return = sr / (double)n;
    a->stats.mean_length = sl / (double)n;
  }
  a->stats.episodes = a->hist_count;
  a->stats.timesteps += (int64_t)N;
  a->pos += 1;
  a->phase = PHASE_ACT;
  return AMPX_OK;
}

ampx_status ampx_ppo_predict(ampx_ppo a, const float *obs, size_t rows, int32_t deterministic,
                             float *actions, size_t action_count) {
  static const char fn[] = "ampx_ppo_predict";
  TRY(check_agent(a, fn));
  const size_t D = (size_t)a->o.obs_dim, W = (size_t)a->out_dim;
  const size_t A = a->o.action_kind == AMPX_RL_DISCRETE ? 1 : W;
  if (!obs || !actions) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !obs ? "obs" : "actions");
  if (rows == 0 || action_count != rows * A)
    return rl_fail(AMPX_ERR_SHAPE, "%s: rows %zu and action_count %zu (expected rows x %zu, rows > 0)",
                   fn, rows, action_count, A);
  size_t where;
  if (!all_finite(obs, rows * D, &where))
    return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: obs[%zu] (row %zu) is not finite", fn, where, where / D);
  float *buf = malloc(sizeof(float) * (rows * D + rows * W + rows + W));
  if (!buf) return rl_fail(AMPX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  float *head = buf + rows * D, *val = head + rows * W, *act = val + rows;
  normalize_obs(a, obs, buf, rows);
  ampx_status st = infer(a, buf, rows, head, val);
  float log_std[MAX_ACTIONS];
  if (!st && a->o.action_kind == AMPX_RL_CONTINUOUS)
    st = ampx_tensor_to_host(a->log_std, log_std, W * sizeof(float));
  if (!st) {
    rl_rng rng = a->predict_rng;
    for (size_t r = 0; r < rows; ++r) {
      sample_row(a, &rng, head + r * W, log_std, deterministic != 0, act);
      if (a->o.action_kind == AMPX_RL_DISCRETE) actions[r] = act[0];
      else clip_for_env(a, act, actions + r * W);
    }
    a->predict_rng = rng;
  }
  free(buf);
  return st;
}

ampx_status ampx_ppo_get_stats(ampx_ppo a, ampx_ppo_stats *stats) {
  static const char fn[] = "ampx_ppo_get_stats";
  TRY(check_agent(a, fn));
  if (!stats) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: stats is NULL", fn);
  if (stats->struct_size < STATS_MIN_SIZE)
    return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: stats->struct_size %zu is smaller than %zu", fn,
                   stats->struct_size, STATS_MIN_SIZE);
  const size_t size = stats->struct_size;
  ampx_ppo_stats s = a->stats;
  if (a->scaler) TRY(ampx_scaler_get_scale(a->scaler, &s.loss_scale));
  s.skipped_steps = a->skipped;
  s.struct_size = size;
  memcpy(stats, &s, sizeof s);
  return AMPX_OK;
}

/* ------------------------------------------------------------ save / load */

/* The agent's host state travels as one I64 tensor of the checkpoint file,
 * "ampx_rl.ppo_state", written and read by the same walk over the fields:
 * its length follows from the agent's dimensions, so a file of another
 * agent's sizes is refused by the checkpoint loader itself (SHAPE). */
typedef struct state_io {
  unsigned char *buf;
  size_t at;
  int reading;
} state_io;

static void xfer(state_io *io, void *p, size_t n) {
  if (io->buf) {
    if (io->reading) memcpy(p, io->buf + io->at, n);
    else memcpy(io->buf + io->at, p, n);
  }
  io->at += n;
}

static void walk_state(ampx_ppo a, state_io *io) {
  const size_t N = (size_t)a->o.num_envs, D = (size_t)a->o.obs_dim;
  const size_t A = a->o.action_kind == AMPX_RL_DISCRETE ? 1 : (size_t)a->out_dim;
  const size_t rows = a->rows;
  uint32_t version = STATE_VERSION;
  xfer(io, &version, sizeof version);
  xfer(io, &a->pos, sizeof a->pos);
  xfer(io, a->rng.s, sizeof a->rng.s);
  xfer(io, a->predict_rng.s, sizeof a->predict_rng.s);
  xfer(io, &a->stats, sizeof a->stats);
  xfer(io, &a->skipped, sizeof a->skipped);
  xfer(io, &a->hist_count, sizeof a->hist_count);
  xfer(io, a->hist_return, sizeof a->hist_return);
  xfer(io, a->hist_length, sizeof a->hist_length);
  xfer(io, a->obs_rms.mean, D * sizeof(double));
  xfer(io, a->obs_rms.var, D * sizeof(double));
  xfer(io, &a->obs_rms.count, sizeof(double));
  xfer(io, a->ret_rms.mean, sizeof(double));
  xfer(io, a->ret_rms.var, sizeof(double));
  xfer(io, &a->ret_rms.count, sizeof(double));
  xfer(io, a->disc_return, N * sizeof(double));
  xfer(io, a->ep_return, N * sizeof(double));
  xfer(io, a->ep_length, N * sizeof(int64_t));
  xfer(io, a->last_dones, N);
  xfer(io, a->pending, N);
  xfer(io, a->pending_final, N * D * sizeof(float));
  xfer(io, a->obs, rows * D * sizeof(float));
  xfer(io, a->actions, rows * A * sizeof(float));
  xfer(io, a->logp, rows * sizeof(float));
  xfer(io, a->values, rows * sizeof(float));
  xfer(io, a->rewards, rows * sizeof(float));
  xfer(io, a->episode_starts, rows);
}

static size_t state_words(ampx_ppo a) {
  state_io io = {NULL, 0, 0};
  walk_state(a, &io);
  return (io.at + 7) / 8;
}

static ampx_status save_load(ampx_ppo a, const char *path, int loading, const char *fn) {
  TRY(check_agent(a, fn));
  if (!path) return rl_fail(AMPX_ERR_INVALID_ARGUMENT, "%s: path is NULL", fn);
  if (a->phase != PHASE_ACT)
    return rl_fail(AMPX_ERR_ORDER, "%s: between act and reward; call ampx_ppo_reward first", fn);
  const size_t words = state_words(a);
  unsigned char *blob = calloc(words, 8);
  if (!blob) return rl_fail(AMPX_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  state_io io = {blob, 0, 0};
  if (!loading) walk_state(a, &io);
  const int64_t shape = (int64_t)words;
  ampx_tensor state = NULL;
  ampx_status st = ampx_tensor_from_host(a->ctx, AMPX_I64, 1, &shape, blob, words * 8, &state);
  if (!st) st = ampx_tensor_set_name(state, "ampx_rl.ppo_state");
  ampx_tensor list[sizeof a->params / sizeof a->params[0] + 1];
  memcpy(list, a->params, a->n_params * sizeof(ampx_tensor));
  list[a->n_params] = state;
  if (!st) {
    st = loading ? ampx_checkpoint_file_load(path, list, a->n_params + 1, a->opt, a->scaler)
                 : ampx_checkpoint_file_save(path, list, a->n_params + 1, a->opt, a->scaler);
  }
  if (!st && loading) {
    st = ampx_tensor_to_host(state, blob, words * 8);
    uint32_t version;
    memcpy(&version, blob, sizeof version);
    if (!st && version != STATE_VERSION)
      st = rl_fail(AMPX_ERR_CORRUPT, "%s: agent state version %u, this library reads %u", fn,
                   version, STATE_VERSION);
    if (!st) {
      const size_t struct_size = a->stats.struct_size;
      io.reading = 1;
      walk_state(a, &io);
      a->stats.struct_size = struct_size;
    }
  }
  ampx_tensor_release(state);
  free(blob);
  return st;
}

ampx_status ampx_ppo_save(ampx_ppo agent, const char *path) {
  return save_load(agent, path, 0, "ampx_ppo_save");
}

ampx_status ampx_ppo_load(ampx_ppo agent, const char *path) {
  return save_load(agent, path, 1, "ampx_ppo_load");
}
