"""CartPole-v1 and Pendulum-v1 of libampx_rl against Gymnasium's own, step
by step: from the same states (Gymnasium's reset state copied into the C env
after every reset), 1,000 random actions each; observations must be the same
float32 bits, rewards the same doubles, and the terminated/truncated flags
(the time limit included, gym.make's TimeLimit) equal.

Usage: env_gym_check.py path/to/libampx_rl.so   (exit 77: no gymnasium)"""
import ctypes
import sys

try:
    import gymnasium as gym
    import numpy as np
except ImportError:
    print("gymnasium or numpy missing: skipped")
    sys.exit(77)

lib = ctypes.CDLL(sys.argv[1])
c_float_p = ctypes.POINTER(ctypes.c_float)
lib.ampx_rl_env_create.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p)]
lib.ampx_rl_env_release.argtypes = [ctypes.c_void_p]
lib.ampx_rl_env_set_state.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double), ctypes.c_size_t]
lib.ampx_rl_env_step.argtypes = [ctypes.c_void_p, c_float_p, ctypes.c_size_t, c_float_p, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_int32),
                                 ctypes.POINTER(ctypes.c_int32)]
lib.ampx_last_error.restype = ctypes.c_char_p


def check(status):
    if status != 0:
        raise RuntimeError(lib.ampx_last_error().decode())


def run(name, obs_dim, state_of, random_action, steps=1000):
    env = gym.make(name)
    handle = ctypes.c_void_p()
    check(lib.ampx_rl_env_create(name.encode(), 0, ctypes.byref(handle)))
    rng = np.random.default_rng(1234)
    obs_c = (ctypes.c_float * obs_dim)()
    reward_c, term_c, trunc_c = ctypes.c_double(), ctypes.c_int32(), ctypes.c_int32()
    episodes = 0
    worst = 0.0

    def reset():
        env.reset(seed=int(rng.integers(1 << 31)))
        state = np.asarray(state_of(env.unwrapped), dtype=np.float64)
        check(lib.ampx_rl_env_set_state(handle, state.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                        state.size))

    reset()
    for step in range(steps):
        action_py, action_c = random_action(rng)
        obs_g, reward_g, term_g, trunc_g, _ = env.step(action_py)
        a = (ctypes.c_float * 1)(action_c)
        check(lib.ampx_rl_env_step(handle, a, 1, obs_c, obs_dim, ctypes.byref(reward_c),
                                   ctypes.byref(term_c), ctypes.byref(trunc_c)))
        obs_mine = np.frombuffer(obs_c, dtype=np.float32)
        if obs_mine.tobytes() != np.asarray(obs_g, dtype=np.float32).tobytes():
            raise AssertionError(f"{name} step {step}: obs {obs_mine} vs gymnasium {obs_g}")
        worst = max(worst, abs(reward_c.value - float(reward_g)))
        if reward_c.value != float(reward_g):
            raise AssertionError(f"{name} step {step}: reward {reward_c.value!r} vs {float(reward_g)!r}")
        if bool(term_c.value) != bool(term_g) or bool(trunc_c.value) != bool(trunc_g):
            raise AssertionError(f"{name} step {step}: flags {term_c.value, trunc_c.value} vs {term_g, trunc_g}")
        if term_g or trunc_g:
            episodes += 1
            reset()
    lib.ampx_rl_env_release(handle)
    print(f"{name}: {steps} steps, {episodes} episodes ended, observations and rewards bit-identical")


run("CartPole-v1", 4, lambda u: u.state,
    lambda rng: (lambda a: (a, float(a)))(int(rng.integers(2))))
run("Pendulum-v1", 3, lambda u: u.state,
    lambda rng: (lambda a: (np.array([a], dtype=np.float32), a))(np.float32(rng.uniform(-2.5, 2.5))))
