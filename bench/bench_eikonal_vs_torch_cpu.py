#!/usr/bin/env python3
"""bench_eikonal_vs_torch_cpu.py -- one eikonal training step of a neural
SDF (second-order autograd: the input gradient taken with create_graph and
trained), ampx vs PyTorch, on the CPU, side by side in one run with the same
thread count.

ampx runs as bench_eikonal_cpu (the C program beside this file, built into
build/bench/); PyTorch runs in a child process of this script, so each side
has a process of its own to measure. Rounds alternate between the two so
that machine noise hits both alike; each time is the median over rounds of
each side's median step time. The step on both sides:

    f = mlp(p)                          # 2 -> W -> W -> W -> 1, GELU
    g, = torch.autograd.grad(f.sum(), p, create_graph=True)
    loss = (f ** 2).mean() + ((g.norm(dim=1) - 1) ** 2).mean()
    loss.backward(); opt.step(); opt.zero_grad()     # Adam

bf16 = autocast bfloat16 around the forward and the loss, no scaler; fp16
= autocast float16 with a dynamic loss scaler (torch.amp.GradScaler), the
gradient-penalty recipe of torch's AMP examples (the scaled f.sum() is
differentiated, the input gradient multiplied by 1 / scale).

Memory: "ampx peak" is the most bytes ampx's allocator held during the
timed steps; "RSS growth" is, for each side's process, its resident set's
high-water mark after the steps minus its size before the first step (the
same measure on both sides; it includes the allocators' caches and, for
PyTorch, its lazy initialisation). create_graph keeps the forward's tape
alive through the second backward on both sides.

    python3 bench/bench_eikonal_vs_torch_cpu.py [--bench build/bench/bench_eikonal_cpu]
        [--threads 2] [--rounds 3] [--width 64] [--points 1024]

Use PyTorch from PyPI (MKL + oneDNN). Timings need a quiet machine.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def status_bytes(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def torch_child(width, points, precision, threads, steps):
    """Times the step in PyTorch in this (child) process; prints like the C side."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(2 if i == 0 else width, 1 if i == 3 else width) for i in range(4)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    p = (torch.rand(points, 2) * 2 - 1).requires_grad_()

    def forward(x):
        for i, layer in enumerate(layers):
            x = layer(x)
            if i != 3:
                x = F.gelu(x)
        return x

    times = []
    rss_before = status_bytes("VmRSS:")
    for step in range(steps + 3):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            f = forward(p)
        if scaler:
            g, = torch.autograd.grad(scaler.scale(f.float().sum()), p, create_graph=True)
            g = g * (1.0 / scaler.get_scale())
        else:
            g, = torch.autograd.grad(f.float().sum(), p, create_graph=True)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = (f.float() ** 2).mean() + ((g.norm(dim=1) - 1) ** 2).mean()
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= 3:
            times.append(time.perf_counter() - start)
    rss_peak = status_bytes("VmHWM:")
    print(f"rss_growth_bytes {max(0, rss_peak - rss_before)}")
    print(f"ms_per_step {1e3 * statistics.median(times):.4f}")


def parse(out):
    values = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        values[key] = float(value)
    return values


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default=os.path.join(here, "..", "build", "bench",
                                                        "bench_eikonal_cpu"))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--points", type=int, default=1024)
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    parser.add_argument("--torch-child", metavar="PRECISION", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_child:
        torch_child(args.width, args.points, args.torch_child, args.threads, args.steps)
        return 0
    import torch
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds, "
          f"MLP 2-{args.width}-{args.width}-{args.width}-1 GELU, {args.points} points", flush=True)
    print(f"{'precision':<10}{'ampx ms':>10}{'torch ms':>10}{'torch/ampx':>12}"
          f"{'ampx peak MiB':>15}{'ampx RSS+ MiB':>15}{'torch RSS+ MiB':>16}")
    for precision in args.precisions.split(","):
        ampx_runs, torch_runs = [], []
        for _ in range(args.rounds):
            out = subprocess.run([args.bench, str(args.width), str(args.points), precision,
                                  str(args.threads), str(args.steps)],
                                 check=True, capture_output=True, text=True).stdout
            ampx_runs.append(parse(out))
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-child",
                                  precision, "--threads", str(args.threads), "--steps",
                                  str(args.steps), "--width", str(args.width), "--points",
                                  str(args.points)],
                                 check=True, capture_output=True, text=True).stdout
            torch_runs.append(parse(out))
        a = statistics.median(r["ms_per_step"] for r in ampx_runs)
        t = statistics.median(r["ms_per_step"] for r in torch_runs)
        mib = 1.0 / (1 << 20)
        peak = max(r["peak_bytes"] for r in ampx_runs) * mib
        a_rss = statistics.median(r["rss_growth_bytes"] for r in ampx_runs) * mib
        t_rss = statistics.median(r["rss_growth_bytes"] for r in torch_runs) * mib
        print(f"{precision:<10}{a:>10.3f}{t:>10.3f}{t / a:>12.2f}{peak:>15.2f}{a_rss:>15.2f}"
              f"{t_rss:>16.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
