#!/usr/bin/env python3
"""PPO race: ampx_rl (C, bench/rl_driver.c) against Stable-Baselines3's PPO
(torch on the CPU), same hyperparameters, same thread count.

CartPole-v1, RL Baselines3 Zoo's tuned hyperparameters (8 envs, n_steps 32,
batch 256, gamma 0.98, GAE lambda 0.8, 20 epochs, entropy 0, lr 1e-3 and
clip 0.2 annealed linearly to 0, 64-64 tanh, 100,000 steps), 5 seeds: wall
time of the whole run, env steps and seconds until the mean return of the
last 100 episodes reaches 475, final mean return.
Pendulum-v1, the Zoo's hyperparameters without gSDE and with batch 256
(4 envs, n_steps 1024, batch 256, gamma 0.9, lambda 0.95, 10 epochs, lr 1e-3,
clip 0.2, no annealing, 64-64 tanh, log std 0), 200,000 steps, 3 seeds: wall
time and the final mean return.

Medians; each row ends with SB3 wall / ampx_rl wall.
Usage: bench_rl_vs_sb3.py [--driver build/bench/ampx_rl_bench_driver]
       [--threads 1] [--cartpole-seeds 5] [--pendulum-seeds 3]"""
import argparse
import os
import platform
import statistics
import subprocess
import time


def run_ampx(driver, env, seed, threads):
    out = subprocess.run([driver, env, str(seed), str(threads)], check=True, capture_output=True,
                         text=True).stdout
    fields = dict(kv.split("=") for kv in out.split())
    return {"wall": float(fields["wall_s"]), "solved_at": int(fields["solved_at"]),
            "solve_s": float(fields["solve_s"]), "final": float(fields["final_return"])}


def run_sb3(env_name, seed, threads):
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(threads)

    class Solved(BaseCallback):
        def __init__(self):
            super().__init__()
            self.at, self.seconds, self.start = -1, -1.0, time.perf_counter()

        def _on_step(self):
            buf = self.model.ep_info_buffer
            if self.at < 0 and len(buf) >= 100 and np.mean([e["r"] for e in buf]) >= 475:
                self.at, self.seconds = self.num_timesteps, time.perf_counter() - self.start
            return True

    if env_name == "CartPole-v1":
        env = make_vec_env(env_name, n_envs=8, seed=seed)
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gamma=0.98, gae_lambda=0.8,
                    n_epochs=20, ent_coef=0.0, learning_rate=lambda p: p * 1e-3,
                    clip_range=lambda p: p * 0.2, seed=seed, device="cpu")
        total = 100_000
    else:
        env = make_vec_env(env_name, n_envs=4, seed=seed)
        model = PPO("MlpPolicy", env, n_steps=1024, batch_size=256, gamma=0.9, gae_lambda=0.95,
                    n_epochs=10, ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, seed=seed,
                    device="cpu")
        total = 200_000
    callback = Solved()
    start = time.perf_counter()
    model.learn(total, callback=callback)
    wall = time.perf_counter() - start
    final = float(np.mean([e["r"] for e in model.ep_info_buffer]))
    return {"wall": wall, "solved_at": callback.at, "solve_s": callback.seconds, "final": final}


def median(runs, key, solved_only=False):
    values = [r[key] for r in runs if not solved_only or r["solved_at"] >= 0]
    return statistics.median(values) if values else float("nan")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--driver", default="build/bench/ampx_rl_bench_driver")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cartpole-seeds", type=int, default=5)
    parser.add_argument("--pendulum-seeds", type=int, default=3)
    args = parser.parse_args()
    import stable_baselines3
    import torch

    rows = []
    for env, seeds in (("CartPole-v1", args.cartpole_seeds), ("Pendulum-v1", args.pendulum_seeds)):
        results = {"ampx_rl": [], "SB3": []}
        for seed in range(seeds):
            results["ampx_rl"].append(run_ampx(args.driver, env, seed, args.threads))
            results["SB3"].append(run_sb3(env, seed, args.threads))
            for lib in results:
                r = results[lib][-1]
                print(f"  {env} seed {seed} {lib}: wall {r['wall']:.2f} s, solved at {r['solved_at']} "
                      f"({r['solve_s']:.2f} s), final return {r['final']:.1f}", flush=True)
        rows.append((env, seeds, results))

    print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"threads {args.threads}; stable-baselines3 {stable_baselines3.__version__}, "
          f"torch {torch.__version__}; medians")
    print(f"{'env':12} {'seeds':>5} {'library':8} {'wall (s)':>9} {'solved':>6} {'steps to 475':>12} "
          f"{'s to 475':>8} {'final return':>12} {'SB3/ampx_rl wall':>17}")
    for env, seeds, results in rows:
        ratio = median(results["SB3"], "wall") / median(results["ampx_rl"], "wall")
        for lib in ("ampx_rl", "SB3"):
            runs = results[lib]
            solved = sum(r["solved_at"] >= 0 for r in runs)
            cartpole = env == "CartPole-v1"
            steps = f"{median(runs, 'solved_at', True):.0f}" if cartpole else "-"
            secs = f"{median(runs, 'solve_s', True):.2f}" if cartpole else "-"
            print(f"{env:12} {seeds:>5} {lib:8} {median(runs, 'wall'):9.2f} "
                  f"{(str(solved) + '/' + str(seeds)) if cartpole else '-':>6} {steps:>12} {secs:>8} "
                  f"{median(runs, 'final'):12.1f} {(f'{ratio:.2f}' if lib == 'SB3' else ''):>17}")


if __name__ == "__main__":
    main()
