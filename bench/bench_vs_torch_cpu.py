#!/usr/bin/env python3
"""bench_vs_torch_cpu.py -- one MLP classifier training step and one CNN
training step, ampx vs PyTorch, on the CPU, side by side in one run with the
same thread count.

ampx runs as bench_mlp_cpu (the C program beside this file, built into
build/bench/); PyTorch runs in this process. Rounds alternate between the two
so that machine noise hits both alike; each figure is the median over rounds
of each side's median step time. The step is the same on both sides: DEPTH
linear layers (ReLU between, the last to 10 classes), cross-entropy (mean),
backward, AdamW, zero_grad. bf16 = autocast bfloat16 without a scaler;
fp16 = autocast float16 with a dynamic loss scaler (torch.amp.GradScaler).

The CNN is examples/cnn_batchnorm.c's network (conv 3x3 + batch norm + ReLU
stem, max pool, two residual blocks, a stride-2 conv, global average pool,
linear) at width 16 on [64, 3, 32, 32] images; ampx runs it through its
Python binding in a child process (one ctypes call per op, a few
microseconds each against milliseconds of convolution).

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

# The ampx CNN runs in a child process of this script (--ampx-cnn), without
# PyTorch: PyTorch's OpenMP runtime, loaded first, would also run the
# threads of ampx's oneDNN, with PyTorch's spinning wait policy against
# ampx's own threads.
if "--ampx-cnn" not in sys.argv:
    import torch
    import torch.nn.functional as F

CLASSES = 10
CASES = [  # (name, width, depth, batch, timed steps per round)
    ("large", 1024, 4, 256, 10),
    ("small", 64, 4, 64, 300),
]


def torch_time_steps(model, x, y, precision, steps, warmup):
    """The median time of a training step of model on (x, y), in ms: AdamW,
    autocast in the lower precision, a GradScaler for fp16."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    times = []
    for step in range(steps + warmup):
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
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def torch_step_time(width, depth, batch, precision, steps):
    torch.manual_seed(0)
    layers = []
    for i in range(depth):
        layers.append(torch.nn.Linear(width, CLASSES if i == depth - 1 else width))
        if i != depth - 1:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    x = torch.rand(batch, width) * 2 - 1
    y = torch.arange(batch) % CLASSES
    return torch_time_steps(model, x, y, precision, steps, 3)


def torch_cnn(width):
    torch.manual_seed(0)

    def conv_bn(cin, cout, stride=1):
        return [torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(cout)]

    class Block(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a = torch.nn.Sequential(*conv_bn(c, c), torch.nn.ReLU(), *conv_bn(c, c))

        def forward(self, x):
            return F.relu(x + self.a(x))

    return torch.nn.Sequential(*conv_bn(3, width), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               Block(width), *conv_bn(width, 2 * width, 2), torch.nn.ReLU(),
                               Block(2 * width), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(2 * width, 4))


def torch_cnn_step_time(width, batch, precision, steps):
    model = torch_cnn(width)
    x = torch.rand(batch, 3, 32, 32)
    y = torch.arange(batch) % 4
    return torch_time_steps(model, x, y, precision, steps, 2)


def ampx_cnn_step_time(width, batch, precision, threads, steps):
    import numpy as np

    import ampx
    ctx = ampx.Context(num_threads=threads)
    rng = np.random.default_rng(0)
    params, norms = [], []

    def param(*shape, scale=None, fill=None):
        values = (np.full(shape, fill, np.float32) if fill is not None
                  else (rng.standard_normal(shape) * scale).astype(np.float32))
        t = ampx.tensor(values, context=ctx, requires_grad=True)
        params.append(t)
        return t

    def conv_bn_params(cin, cout):
        w = param(cout, cin, 3, 3, scale=(2.0 / (9 * cin)) ** 0.5)
        bn = (param(cout, fill=1.0), param(cout, fill=0.0),
              ampx.tensor(np.zeros(cout, np.float32), context=ctx),
              ampx.tensor(np.ones(cout, np.float32), context=ctx))
        norms.append(bn)
        return w, bn

    c = width
    layers = [conv_bn_params(3, c), conv_bn_params(c, c), conv_bn_params(c, c),
              conv_bn_params(c, 2 * c), conv_bn_params(2 * c, 2 * c), conv_bn_params(2 * c, 2 * c)]
    head, head_bias = param(4, 2 * c, scale=(1.0 / (2 * c)) ** 0.5), param(4, fill=0.0)

    def conv_bn(i, x, stride=1, relu=True):
        w, (g, b, rm, rv) = layers[i]
        y = ampx.batch_norm(ampx.conv2d(x, w, None, stride, 1), g, b, rm, rv, training=True)
        return ampx.relu(y) if relu else y

    def block(i, x):
        return ampx.relu(ampx.add(x, conv_bn(i + 1, conv_bn(i, x), relu=False)))

    def forward(x):
        x = block(1, ampx.max_pool2d(conv_bn(0, x), 2))
        x = block(4, conv_bn(3, x, 2))
        features = ampx.reshape(ampx.global_avg_pool2d(x), (batch, 2 * c))
        return ampx.linear(features, head, head_bias)

    opt = ampx.AdamW(params, lr=1e-3)
    scaler = ampx.Scaler(ctx) if precision == "fp16" else None
    policy = ampx.Autocast(ctx, {"fp16": "f16", "bf16": "bf16"}[precision]) if precision != "fp32" else None
    x = ampx.tensor(rng.uniform(0, 1, (batch, 3, 32, 32)).astype(np.float32), context=ctx)
    y = ampx.tensor((np.arange(batch) % 4).astype(np.int64), context=ctx)
    times = []
    for step in range(steps + 2):
        start = time.perf_counter()
        with ctx.scope():
            opt.zero_grad()
            if policy:
                with policy:
                    loss = ampx.cross_entropy(forward(x), y)
            else:
                loss = ampx.cross_entropy(forward(x), y)
            loss.backward(scaler)
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            loss.item()
        if step >= 2:
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def ampx_cnn_child_time(width, batch, precision, threads, steps):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--ampx-cnn", precision,
                          "--threads", str(threads), "--cnn-steps", str(steps)],
                         check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


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
    parser.add_argument("--cnn-steps", type=int, default=10)
    parser.add_argument("--ampx-cnn", metavar="PRECISION",
                        help="(the child) time ampx's CNN step alone and print it")
    args = parser.parse_args()
    cnn_width, cnn_batch = 16, 64
    if args.ampx_cnn:
        print(ampx_cnn_step_time(cnn_width, cnn_batch, args.ampx_cnn, args.threads,
                                 args.cnn_steps))
        return 0
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
    steps = args.cnn_steps
    for precision in args.precisions.split(","):
        ampx_ms, torch_ms = [], []
        for _ in range(args.rounds):
            ampx_ms.append(ampx_cnn_child_time(cnn_width, cnn_batch, precision, args.threads,
                                               steps))
            torch_ms.append(torch_cnn_step_time(cnn_width, cnn_batch, precision, steps))
        a, t = statistics.median(ampx_ms), statistics.median(torch_ms)
        label = f"cnn w{cnn_width} b{cnn_batch} {precision}"
        print(f"{label:<28}{a:>10.3f}{t:>10.3f}{t / a:>12.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
