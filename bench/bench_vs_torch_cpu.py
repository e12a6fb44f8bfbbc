#!/usr/bin/env python3
"""bench_vs_torch_cpu.py -- one MLP classifier training step, ampx vs PyTorch,
on the CPU, side by side in one run with the same thread count.

ampx runs as bench_mlp_cpu (the C program beside this file, built into
build/bench/); PyTorch runs in this process. Rounds alternate between the two
so that machine noise hits both alike; each figure is the median over rounds
of each side's median step time. The step is the same on both sides: DEPTH
linear layers (ReLU between, the last to 10 classes), cross-entropy (mean),
backward, AdamW, zero_grad. bf16 = autocast bfloat16 without a scaler;
fp16 = autocast float16 with a dynamic loss scaler (torch.amp.GradScaler).

    python3 bench/bench_vs_torch_cpu.py [--bench build/bench/bench_mlp_cpu]
        [--threads 2] [--rounds 3]

Use PyTorch from PyPI (MKL + oneDNN); Debian's python3-torch is built on a
reference BLAS and is not a fair yardstick.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

CLASSES = 10
CASES = [  # (name, width, depth, batch, timed steps per round)
    ("large", 1024, 4, 256, 10),
    ("small", 64, 4, 64, 300),
]


def torch_step_time(width, depth, batch, precision, steps):
    torch.manual_seed(0)
    layers = []
    for i in range(depth):
        layers.append(torch.nn.Linear(width, CLASSES if i == depth - 1 else width))
        if i != depth - 1:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    x = torch.rand(batch, width) * 2 - 1
    y = torch.arange(batch) % CLASSES
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    times = []
    for step in range(steps + 3):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if step >= 3:
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def ampx_step_time(bench, width, depth, batch, precision, threads, steps):
    out = subprocess.run([bench, str(width), str(depth), str(batch), precision, str(threads),
                          str(steps)], check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default=os.path.join(here, "..", "build", "bench", "bench_mlp_cpu"))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__} (MKL {torch.backends.mkl.is_available()}, "
          f"oneDNN {torch.backends.mkldnn.is_available()}), {args.threads} threads, "
          f"{args.rounds} rounds", flush=True)
    print(f"{'case':<28}{'ampx ms':>10}{'torch ms':>10}{'torch/ampx':>12}")
    for name, width, depth, batch, steps in CASES:
        for precision in args.precisions.split(","):
            ampx_ms, torch_ms = [], []
            for _ in range(args.rounds):
                ampx_ms.append(ampx_step_time(args.bench, width, depth, batch, precision,
                                              args.threads, steps))
                torch_ms.append(torch_step_time(width, depth, batch, precision, steps))
            a, t = statistics.median(ampx_ms), statistics.median(torch_ms)
            label = f"{name} {depth}x{width} b{batch} {precision}"
            print(f"{label:<28}{a:>10.3f}{t:>10.3f}{t / a:>12.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
