/* ampx_rl.h -- on-policy reinforcement learning (PPO) over the ampx C API.
 *
 * libampx_rl is a layer beside the core: it is written against ampx.h only
 * and links libampx. It follows ampx.h's conventions: every fallible call
 * returns an ampx_status and, on failure, sets the calling thread's
 * ampx_last_error() (through ampx_set_error) to a message naming the
 * function and the argument; options are versioned structs whose first
 * field is struct_size, with an _INIT macro and a _default() function;
 * handles are typed and opaque; releasing NULL is a no-op; a failed call
 * changes nothing.
 *
 * PPO as CleanRL's ppo.py and Stable-Baselines3's PPO define it. The caller
 * owns its environments and steps them itself:
 *
 *   ampx_ppo_act(agent, obs, ...)            -> actions for every env
 *   (the caller steps its envs with them)
 *   ampx_ppo_reward(agent, rewards, terminated, truncated, final_obs, ...)
 *
 * After n_steps such pairs the rollout is full; the next ampx_ppo_act
 * (whose observations are the bootstrap values' input, as SB3's
 * last_values) first trains -- GAE(lambda), n_epochs of shuffled minibatches
 * of the clipped surrogate -- and then acts with the new policy. A
 * truncated episode (a time limit) bootstraps from the value of its final
 * observation, as SB3 does: reward += gamma * V(final_obs).
 *
 * Threads: an agent is used by one thread at a time; separate agents are
 * independent (each owns its ampx context). Determinism: for the same
 * options (seed and num_threads included) and the same calls, an agent's
 * actions, parameters and statistics are the same bits on every run.
 *
 * The policy's ONNX export is not part of this header yet (it will use
 * ampx's exporter once that exists).
 */
#ifndef AMPX_RL_H
#define AMPX_RL_H

#include <ampx/ampx.h>

/* AMPX_RL_API marks libampx_rl's own exports (AMPX_API is libampx's: on
 * Windows the two DLLs import and export separately). */
#if defined(_WIN32)
#  if defined(AMPX_RL_BUILDING_LIBRARY)
#    define AMPX_RL_API __declspec(dllexport)
#  else
#    define AMPX_RL_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define AMPX_RL_API __attribute__((visibility("default")))
#else
#  define AMPX_RL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define AMPX_RL_VERSION_MAJOR 0
#define AMPX_RL_VERSION_MINOR 1
#define AMPX_RL_VERSION_PATCH 0

/** The most hidden layers an MLP of ampx_ppo_options may have. */
#define AMPX_RL_MAX_LAYERS 8

/** Kinds of action space. The numbers are pinned. */
typedef enum ampx_rl_action_kind {
  AMPX_RL_DISCRETE = 1,   /**< one integer in [0, action_dim) per env
                               (categorical over logits) */
  AMPX_RL_CONTINUOUS = 2, /**< action_dim floats per env (diagonal Gaussian,
                               state-independent log std) */
  AMPX_RL_ACTION_KIND_MAX_ENUM = 0x7fffffff
} ampx_rl_action_kind;

/** Hidden-layer activations. The numbers are pinned. */
typedef enum ampx_rl_activation {
  AMPX_RL_TANH = 1,
  AMPX_RL_RELU = 2,
  AMPX_RL_ACTIVATION_MAX_ENUM = 0x7fffffff
} ampx_rl_activation;

/** Precision of the networks' forward and backward. The numbers are pinned. */
typedef enum ampx_rl_precision {
  AMPX_RL_FP32 = 1, /**< no autocast, no scaler */
  AMPX_RL_BF16 = 2, /**< bf16 autocast (fp32 parameters), no scaler */
  AMPX_RL_FP16 = 3, /**< fp16 autocast with ampx's dynamic loss scaler */
  AMPX_RL_PRECISION_MAX_ENUM = 0x7fffffff
} ampx_rl_precision;

/** PPO options. Defaults are SB3's PPO defaults where SB3 has one. */
typedef struct ampx_ppo_options {
  size_t struct_size;      /**< sizeof(ampx_ppo_options) */
  int32_t obs_dim;         /**< observation length; required (> 0) */
  int32_t action_kind;     /**< ampx_rl_action_kind; default DISCRETE */
  int32_t action_dim;      /**< discrete: number of actions (2..256);
                                continuous: action length (1..256); required */
  int32_t num_envs;        /**< environments stepped together; default 1 */
  int32_t n_steps;         /**< steps per env and rollout; default 2048 */
  int32_t batch_size;      /**< minibatch size; default 64; at most
                                n_steps * num_envs */
  int32_t n_epochs;        /**< default 10 */
  double gamma;            /**< default 0.99; in [0, 1] */
  double gae_lambda;       /**< default 0.95; in [0, 1] */
  double learning_rate;    /**< Adam's lr (eps 1e-5); default 3e-4 */
  double clip_range;       /**< default 0.2; > 0 */
  double clip_range_vf;    /**< value clipping range (SB3's: the new value
                                kept within it of the rollout's); 0
                                (default): none */
  int32_t anneal_lr;       /**< 1: the learning rate falls linearly to 0
                                over total_timesteps (RL Zoo's lin_ schedule:
                                lr * (1 - timesteps / total_timesteps), the
                                progress taken at the start of each update,
                                as SB3); default 0 */
  int32_t anneal_clip_range; /**< 1: clip_range falls so too (clip_range_vf
                                  stays constant, as SB3 makes a number);
                                  default 0 */
  int32_t normalize_advantage; /**< default 1 (per minibatch, std ddof 1
                                    plus 1e-8 as SB3) */
  int64_t total_timesteps; /**< env steps of the whole run (all envs),
                                for the annealing; > 0 when annealing */
  double ent_coef;         /**< default 0 */
  double vf_coef;          /**< default 0.5 */
  double max_grad_norm;    /**< global-norm clipping; default 0.5; 0: none */
  int32_t n_layers;        /**< hidden layers (0..AMPX_RL_MAX_LAYERS);
                                default 2 */
  int32_t layer_sizes[AMPX_RL_MAX_LAYERS]; /**< default 64, 64 */
  int32_t activation;      /**< ampx_rl_activation; default TANH */
  int32_t shared_network;  /**< 1: policy and value heads on one trunk;
                                default 0 (separate, as SB3's MlpPolicy) */
  double log_std_init;     /**< continuous only; default 0 */
  const float *action_low; /**< continuous: action_dim lower bounds the
                                actions are clipped to for the env (the
                                trained log-probability is the unclipped
                                sample's); borrowed, copied at create; NULL:
                                no clipping */
  const float *action_high; /**< as action_low; both or neither */
  int32_t normalize_obs;   /**< running mean/var of observations (SB3's
                                VecNormalize); default 0 */
  int32_t normalize_reward; /**< rewards divided by the running std of the
                                 discounted return (VecNormalize); default 0 */
  double clip_obs;         /**< default 10 */
  double clip_reward;      /**< default 10 */
  int32_t precision;       /**< ampx_rl_precision; default FP32 */
  int32_t num_threads;     /**< the agent's ampx context's CPU threads;
                                default 1 */
  uint64_t seed;           /**< initialization, sampling and shuffling;
                                default 0 */
} ampx_ppo_options;

#define AMPX_PPO_OPTIONS_INIT                                                          \
  { sizeof(ampx_ppo_options), 0, AMPX_RL_DISCRETE, 0, 1, 2048, 64, 10, 0.99, 0.95,    \
    3e-4, 0.2, 0.0, 0, 0, 1, 0, 0.0, 0.5, 0.5, 2, {64, 64, 0, 0, 0, 0, 0, 0},          \
    AMPX_RL_TANH, 0, 0.0, NULL, NULL, 0, 0, 10.0, 10.0, AMPX_RL_FP32, 1, 0 }

/** The default options (as AMPX_PPO_OPTIONS_INIT). Thread-safe. */
AMPX_RL_API ampx_ppo_options ampx_ppo_options_default(void);

/** A PPO agent: its networks, Adam, the scaler (fp16), the rollout buffer,
 *  normalization statistics and random stream. */
typedef struct ampx_ppo_s *ampx_ppo;

/** Creates an agent (its own CPU ampx context with options->num_threads
 *  threads). `options` is borrowed for the call. Networks are initialized
 *  orthogonally (gain sqrt(2) hidden, 0.01 policy head, 1 value head; zero
 *  biases), log std to log_std_init.
 *  Errors: INVALID_ARGUMENT (NULL options/out, struct_size smaller than
 *  the first release's, a value out of range -- named in the message);
 *  OUT_OF_MEMORY; errors of ampx_context_create. Thread-safe. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_ppo_create(const ampx_ppo_options *options,
                                                    ampx_ppo *out);

/** Releases an agent and everything it owns. NULL is a no-op; a released
 *  handle passed to any other function is STALE_HANDLE (while its memory
 *  has not been reused). */
AMPX_RL_API void ampx_ppo_release(ampx_ppo agent);

/** Acts for every env: obs holds num_envs * obs_dim floats (row per env),
 *  actions receives num_envs * action_dim floats (continuous, clipped to
 *  the bounds) or num_envs integers stored as floats (discrete). When the
 *  rollout is full, trains first (see the top of this file). Must be
 *  followed by ampx_ppo_reward before the next act.
 *  Errors: INVALID_ARGUMENT (NULL pointers); SHAPE (obs_count or
 *  action_count not the sizes above); INVALID_ARGUMENT (a non-finite
 *  observation); ORDER (act twice without reward); STALE_HANDLE; errors of
 *  the ampx calls of an update (then the agent is unchanged only when the
 *  failure came before the first optimizer step). Buffers borrowed. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_ppo_act(ampx_ppo agent, const float *obs, size_t obs_count,
                                                 float *actions, size_t action_count);

/** Records the outcome of the last act: rewards[num_envs], terminated and
 *  truncated[num_envs] (0 or 1; an env whose episode ended is expected to
 *  be reset by the caller, its next observation the reset one).
 *  final_obs (num_envs * obs_dim floats; rows read only where truncated
 *  and not terminated) is the last observation of a truncated episode;
 *  NULL is allowed when no env is truncated.
 *  Errors: INVALID_ARGUMENT (NULL rewards/flags, a non-finite reward or
 *  used final observation, a flag not 0/1, final_obs NULL where needed);
 *  SHAPE (counts); ORDER (no act before); STALE_HANDLE. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_ppo_reward(ampx_ppo agent, const float *rewards,
                                                    const int32_t *terminated,
                                                    const int32_t *truncated,
                                                    const float *final_obs, size_t num_envs);

/** Act-only (inference): actions for `rows` observations (any count),
 *  nothing recorded, statistics and the training stream untouched.
 *  deterministic 1: argmax / the mean; 0: sampled from a stream of its
 *  own. Output layout as ampx_ppo_act (rows * action_dim or rows).
 *  Errors: INVALID_ARGUMENT, SHAPE, STALE_HANDLE as ampx_ppo_act. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_ppo_predict(ampx_ppo agent, const float *obs, size_t rows,
                                                     int32_t deterministic, float *actions,
                                                     size_t action_count);

/** Statistics, for logs and HUDs. */
typedef struct ampx_ppo_stats {
  size_t struct_size;       /**< sizeof(ampx_ppo_stats) */
  int64_t timesteps;        /**< env steps recorded (all envs) */
  int64_t updates;          /**< rollouts trained on */
  int64_t episodes;         /**< episodes finished */
  double mean_return;       /**< mean undiscounted (raw) return of the last
                                 100 episodes; NaN before the first */
  double mean_length;       /**< their mean length; NaN before the first */
  double policy_loss;       /**< last update's means over its minibatches */
  double value_loss;
  double entropy_loss;      /**< minus the mean entropy */
  double approx_kl;         /**< mean of (ratio - 1) - log ratio */
  double clip_fraction;
  double learning_rate;     /**< used by the last update */
  double clip_range;        /**< used by the last update */
  double loss_scale;        /**< the scaler's scale; 1 without one */
  int64_t skipped_steps;    /**< optimizer steps the scaler skipped */
} ampx_ppo_stats;

#define AMPX_PPO_STATS_INIT \
  { sizeof(ampx_ppo_stats), 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0 }

/** Fills *stats (its struct_size says how much; fields beyond it are not
 *  written). Errors: INVALID_ARGUMENT (NULL, struct_size too small);
 *  STALE_HANDLE. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_ppo_get_stats(ampx_ppo agent, ampx_ppo_stats *stats);

/** Saves everything needed to resume bit for bit -- parameters, Adam's
 *  state, the scaler, the rollout buffer so far, normalization statistics,
 *  episode statistics, the random stream -- as an ampx checkpoint file
 *  (atomic replace, checksums). Allowed between a reward and the next act
 *  (not between act and reward: ORDER).
 *  Errors: INVALID_ARGUMENT (NULL path), ORDER, STALE_HANDLE, and those of
 *  ampx_checkpoint_file_save. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_ppo_save(ampx_ppo agent, const char *path);

/** Restores a file written by ampx_ppo_save into an agent created with the
 *  same network shapes and dimensions (other hyperparameters are the
 *  live agent's). The file is validated before anything changes; on error
 *  the agent is unchanged. Allowed where ampx_ppo_save is.
 *  Errors: INVALID_ARGUMENT, SHAPE, DTYPE (other network shapes or
 *  dimensions: the message names the tensor), CORRUPT, IO, ORDER,
 *  STALE_HANDLE (those of ampx_checkpoint_file_load). */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_ppo_load(ampx_ppo agent, const char *path);

/* ------------------------------------------------------------------------ */
/* Reference environments (Gymnasium's dynamics)                            */
/* ------------------------------------------------------------------------ */

/** A reference environment: "CartPole-v1" (Gymnasium 1.x, time limit 500)
 *  or "Pendulum-v1" (g = 10, time limit 200). */
typedef struct ampx_rl_env_s *ampx_rl_env;

/** Creates an env by name and resets it with `seed` (the initial state is
 *  drawn from ampx_rl's own generator, not NumPy's, so it differs from
 *  Gymnasium's for the same seed). Errors: INVALID_ARGUMENT (NULL, unknown
 *  name); OUT_OF_MEMORY. Thread-safe. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_rl_env_create(const char *name, uint64_t seed,
                                                       ampx_rl_env *out);

/** Releases an env. NULL is a no-op. */
AMPX_RL_API void ampx_rl_env_release(ampx_rl_env env);

/** Describes an env: observation length, ampx_rl_action_kind, action_dim
 *  (as ampx_ppo_options), bounds (continuous; may be NULL) with action_dim
 *  entries. Any out pointer may be NULL. Errors: STALE_HANDLE. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_rl_env_info(ampx_rl_env env, int32_t *obs_dim,
                                                     int32_t *action_kind, int32_t *action_dim,
                                                     float *action_low, float *action_high);

/** Starts a new episode, writing its first observation (obs_dim floats).
 *  Errors: INVALID_ARGUMENT (NULL), SHAPE (obs_count), STALE_HANDLE. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_rl_env_reset(ampx_rl_env env, float *obs, size_t obs_count);

/** One step with `action` (discrete: one float holding the index;
 *  continuous: action_dim floats). Writes the next observation, the reward
 *  (double, as Gymnasium computes it), and the flags; truncated is set at
 *  the time limit. The caller resets after either flag.
 *  Errors: INVALID_ARGUMENT (NULL, an action out of range or non-finite),
 *  SHAPE, ORDER (a step after the episode ended, without reset),
 *  STALE_HANDLE. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_rl_env_step(ampx_rl_env env, const float *action,
                                                     size_t action_count, float *obs,
                                                     size_t obs_count, double *reward,
                                                     int32_t *terminated, int32_t *truncated);

/** The env's state in double precision: CartPole (x, x_dot, theta,
 *  theta_dot), Pendulum (theta, theta_dot); `count` must be that length.
 *  set_state also restarts the episode's step count (for checks against
 *  Gymnasium from the same states). Errors: INVALID_ARGUMENT, SHAPE,
 *  STALE_HANDLE. */
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_rl_env_get_state(ampx_rl_env env, double *state,
                                                          size_t count);
AMPX_NODISCARD AMPX_RL_API ampx_status ampx_rl_env_set_state(ampx_rl_env env, const double *state,
                                                          size_t count);

#ifdef __cplusplus
}
#endif

#endif /* AMPX_RL_H */
