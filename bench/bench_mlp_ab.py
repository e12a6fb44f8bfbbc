#!/usr/bin/env python3
"""bench_mlp_ab.py -- two builds of ampx side by side on bench_mlp_cpu's
training step (the cases of bench_vs_torch_cpu.py), to show that a change
costs no speed.

    python3 bench/bench_mlp_ab.py BASE_BENCH NEW_BENCH [--threads 2] [--rounds 9]

BASE_BENCH and NEW_BENCH are bench_mlp_cpu programs built from the two
commits (each linked to its own libampx). Rounds alternate A B A B ..., so
that machine noise hits both alike; each round gives one ratio new/base
per case, and the table shows the median ratio with the spread of the
rounds' ratios. Ratios, not absolute times, are what to quote on a shared
machine.
"""
import argparse
import statistics
import subprocess

CASES = [  # (name, width, depth, batch, timed steps per run), as bench_vs_torch_cpu.py
    ("large", 1024, 4, 256, 10),
    ("small", 64, 4, 64, 300),
]
PRECISIONS = ["fp32", "bf16", "fp16"]


def step_ms(bench, width, depth, batch, precision, threads, steps):
    out = subprocess.run([bench, str(width), str(depth), str(batch), precision, str(threads),
                          str(steps)], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("ms_per_step"):
            return float(line.split()[1])
    raise RuntimeError(f"{bench} printed no ms_per_step: {out!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    print(f"{'case':<8}{'precision':<10}{'base ms':>9}{'new ms':>9}{'new/base':>10}  (min..max)")
    for name, width, depth, batch, steps in CASES:
        for precision in PRECISIONS:
            base, new, ratios = [], [], []
            for _ in range(args.rounds):
                b = step_ms(args.base, width, depth, batch, precision, args.threads, steps)
                n = step_ms(args.new, width, depth, batch, precision, args.threads, steps)
                base.append(b)
                new.append(n)
                ratios.append(n / b)
            print(f"{name:<8}{precision:<10}{statistics.median(base):>9.3f}"
                  f"{statistics.median(new):>9.3f}{statistics.median(ratios):>10.3f}"
                  f"  ({min(ratios):.3f}..{max(ratios):.3f})")


if __name__ == "__main__":
    main()
