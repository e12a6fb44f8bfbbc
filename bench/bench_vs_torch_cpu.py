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
microseconds each against milliseconds of convolution), which finds
bindings/python and build/libampx.so beside this file by itself
(AMPX_LIBRARY, when set, names another library).

After the CNN's rounds, each precision's step is broken down by op on both
sides, from one more run of each: torch's with torch.profiler (each
event's own CPU time, filed under the innermost op that names a group),
ampx's with AMPX_PROFILE (the wall time of each backend primitive, summed
per kind; see src/core/profile.h), and for both the time outside them
(Python, autograd, the ops' bookkeeping), per step. Profiling slows both a
little; the timed rounds run without it. --no-breakdown leaves it out.

    python3 bench/bench_vs_torch_cpu.py [--bench build/bench/bench_mlp_cpu]
        [--library build/libampx.so] [--threads 2] [--rounds 3]
        [--precisions fp32,bf16,fp16] [--cases mlp,cnn] [--no-breakdown]

Use PyTorch from PyPI (MKL + oneDNN); Debian's python3-torch is built on a
reference BLAS and is not a fair yardstick.
"""
import argparse
import contextlib
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
    # torch.profiler's tracing library logs a GPU probe's failure and each
    # start and stop: noise between the tables.
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    import torch
    import torch.nn.functional as F

CLASSES = 10
CASES = [  # (name, width, depth, batch, timed steps per round)
    ("large", 1024, 4, 256, 10),
    ("small", 64, 4, 64, 300),
]


def torch_time_steps(model, x, y, precision, steps, warmup, around=None):
    """The median time of a training step of model on (x, y), in ms (the
    mean with `around`, a context manager such as a profiler entered after
    the warm-up steps): AdamW, autocast in the lower precision, a GradScaler
    for fp16."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    times = []
    with contextlib.ExitStack() as stack:
        for step in range(steps + warmup):
            if step == warmup and around is not None:
                stack.enter_context(around)
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
    return 1e3 * (statistics.mean(times) if around is not None else statistics.median(times))


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


def torch_cnn_setup(width, batch):
    model = torch_cnn(width)
    x = torch.rand(batch, 3, 32, 32)
    y = torch.arange(batch) % 4
    return model, x, y


def torch_cnn_step_time(width, batch, precision, steps):
    model, x, y = torch_cnn_setup(width, batch)
    return torch_time_steps(model, x, y, precision, steps, 2)


# torch's op groups for the breakdown: (group, pattern). An event's own CPU
# time goes to the group of the innermost event, itself first, whose name
# matches a pattern (re.search), so that aten::empty inside a convolution
# counts as memory and the _foreach ops inside AdamW.step as optimizer.
TORCH_GROUPS = [
    ("casts and copies", r"^aten::(to|_to_copy|copy_|clone|contiguous)$|ToCopyBackward"),
    ("memory", r"^aten::(empty|empty_like|empty_strided|zeros|zeros_like|resize_|zero_|fill_)$"),
    ("conv forward", r"^aten::(conv2d|convolution|_convolution|mkldnn_convolution)$"),
    ("conv backward", r"convolution_backward|ConvolutionBackward"),
    ("batch norm forward", r"^aten::(batch_norm|_batch_norm_impl_index|native_batch_norm|"
                           r"_native_batch_norm_legit\w*)$"),
    ("batch norm backward", r"batch_norm_backward|BatchNormBackward"),
    ("pooling", r"pool|^aten::mean$|MeanBackward"),
    ("relu", r"relu|threshold_backward|ReluBackward"),
    ("add", r"^aten::add_?$|AddBackward"),
    ("head: linear, loss", r"addmm|^aten::(linear|mm|t|flatten|view|reshape)$|cross_entropy|"
                           r"log_softmax|nll_loss|Addmm|LogSoftmax|NllLoss|TBackward|"
                           r"ViewBackward|ReshapeAliasBackward|UnsafeViewBackward"),
    ("optimizer", r"Optimizer\.|_foreach|adam"),
    ("scaler", r"_amp_|unscale|scaler"),
]

# ampx's primitive kinds (the table AMPX_PROFILE writes) in the same groups:
# (group, pattern on the kind, re.match).
AMPX_GROUPS = [
    ("casts and copies", r"convert|copy"),
    ("memory", r"tensor memory|fill"),
    ("conv forward", r"conv2d_forward"),
    ("conv backward", r"conv2d_backward"),
    ("batch norm forward", r"batch_norm_stats|batch_norm "),
    ("batch norm backward", r"batch_norm_backward"),
    ("pooling", r"pool2d|reduce_dims"),
    ("relu", r"unary(_backward)? relu"),
    ("add", r"binary add|add_into"),
    ("head: linear, loss", r"gemm|cross_entropy|softmax|sum_rows|sum_all"),
    ("optimizer", r"adam_step|sgd_step|lr_schedule|increment_steps|multi_tensor_norm"),
    ("scaler", r"multi_tensor_scale|scaler_update|multi_tensor_count_nonfinite"),
]
OTHER, OUTSIDE = "other primitives / ops", "outside them: Python, autograd, ops"


def group_of(name, groups, match):
    for group, pattern in groups:
        if match(pattern, name):
            return group
    return None


def torch_cnn_breakdown(width, batch, precision, steps):
    """torch's CNN step by op group: ({group: ms per step}, ms per step)."""
    import re
    from torch.profiler import ProfilerActivity, profile
    model, x, y = torch_cnn_setup(width, batch)
    prof = profile(activities=[ProfilerActivity.CPU])
    step_ms = torch_time_steps(model, x, y, precision, steps, 3, around=prof)
    groups = {}
    for event in prof.events():
        group, e = None, event
        while e is not None and group is None:
            group, e = group_of(e.name, TORCH_GROUPS, re.search), e.cpu_parent
        group = group or OTHER
        groups[group] = groups.get(group, 0.0) + event.self_cpu_time_total / 1e3 / steps
    groups[OUTSIDE] = step_ms - sum(groups.values())
    return groups, step_ms


def read_ampx_profile(path):
    """The last table AMPX_PROFILE wrote to `path`: [(kind, ms, calls)]."""
    tables, rows = [], None
    with open(path) as f:
        for line in f:
            if not line.startswith("ampx profile: "):
                if line.startswith("ampx profile ("):
                    rows = []
                continue
            fields = line[len("ampx profile: "):].split(None, 2)
            if fields[0] == "end":
                tables.append(rows)
            elif rows is not None and fields[0] != "ms":
                rows.append((fields[2].strip(), float(fields[0]), int(fields[1])))
    if not tables:
        raise RuntimeError(f"no AMPX_PROFILE table in {path}: is the library older than the "
                           "benchmark?")
    return tables[-1]


def ampx_cnn_breakdown(width, batch, precision, threads, steps, library):
    """ampx's CNN step by op group: ({group: ms per step}, ms per step,
    [(detail, ms per step)]) from a child run with AMPX_PROFILE."""
    import re
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "profile.txt")
        step_ms = ampx_cnn_child_time(width, batch, precision, threads, steps, library,
                                      profile=path)
        rows = read_ampx_profile(path)
    groups, details = {}, []
    for kind, ms, _ in rows:
        if " > " in kind:
            details.append((kind, ms / steps))
            continue
        group = group_of(kind, AMPX_GROUPS, re.match) or OTHER
        groups[group] = groups.get(group, 0.0) + ms / steps
    groups[OUTSIDE] = step_ms - sum(groups.values())
    return groups, step_ms, details


def print_breakdown(label, ampx, torch_side):
    a_groups, a_step, details = ampx
    t_groups, t_step = torch_side
    print(f"\n{label}: ms per step by op group (profiled runs; each side's profiler adds "
          "a little)")
    print(f"  {'group':<40}{'ampx':>9}{'torch':>9}{'torch-ampx':>12}")
    order = [g for g, _ in TORCH_GROUPS] + [OTHER, OUTSIDE]
    for group in sorted(order, key=lambda g: -max(a_groups.get(g, 0.0), t_groups.get(g, 0.0))):
        a, t = a_groups.get(group, 0.0), t_groups.get(group, 0.0)
        if abs(a) < 0.005 and abs(t) < 0.005:
            continue
        print(f"  {group:<40}{a:>9.3f}{t:>9.3f}{t - a:>12.3f}")
        if group.startswith("conv"):
            for kind, ms in details:
                if kind.startswith("conv2d_" + group.split()[1]) and kind.count(" > ") == 1:
                    print(f"    ampx {kind:<45}{ms:>9.3f}")
    print(f"  {'step':<40}{a_step:>9.3f}{t_step:>9.3f}{t_step - a_step:>12.3f}")


def ampx_cnn_run(width, batch, precision, threads, steps, warmup):
    """Step times (s) of ampx's CNN in a context of its own, released when
    the function returns (AMPX_PROFILE writes its table then)."""
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
    for step in range(steps + warmup):
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
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return times


def ampx_cnn_child(width, batch, precision, threads, steps):
    """The child's work: warm-up in one context, then the timed steps in a
    fresh one (so that an AMPX_PROFILE table covers them alone), and their
    median and mean times in ms, printed."""
    import gc
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "bindings", "python"))
    ampx_cnn_run(width, batch, precision, threads, 0, 2)
    gc.collect()
    times = ampx_cnn_run(width, batch, precision, threads, steps, 0)
    gc.collect()
    print(1e3 * statistics.median(times), 1e3 * statistics.mean(times))


def ampx_cnn_child_time(width, batch, precision, threads, steps, library, profile=None):
    """The median (or, with `profile`, the mean) step time in ms of ampx's
    CNN, run in a child process: `library` is the libampx it loads unless
    AMPX_LIBRARY names one; `profile`, a file for AMPX_PROFILE's table."""
    env = dict(os.environ)
    env.setdefault("AMPX_LIBRARY", library)
    env.pop("AMPX_PROFILE", None)
    if profile:
        env["AMPX_PROFILE"] = profile
    if not os.path.exists(env["AMPX_LIBRARY"]):
        sys.exit(f"{env['AMPX_LIBRARY']} does not exist: build ampx first (tools/build.sh), or "
                 "name the library with --library or AMPX_LIBRARY")
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--ampx-cnn", precision,
                            "--threads", str(threads), "--cnn-steps", str(steps)],
                           capture_output=True, text=True, env=env)
    if child.returncode != 0:
        sys.exit(f"the ampx CNN child failed ({child.returncode}):\n{child.stderr}")
    median, mean = (float(v) for v in child.stdout.split()[-2:])
    return mean if profile else median


def ampx_step_time(bench, width, depth, batch, precision, threads, steps):
    out = subprocess.run([bench, str(width), str(depth), str(batch), precision, str(threads),
                          str(steps)], check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default=os.path.join(here, "..", "build", "bench", "bench_mlp_cpu"))
    parser.add_argument("--library", default=os.path.join(here, "..", "build", "libampx.so"),
                        help="the libampx the CNN's child loads (AMPX_LIBRARY, when set, wins)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    parser.add_argument("--cases", default="mlp,cnn", help="mlp, cnn or both")
    parser.add_argument("--cnn-steps", type=int, default=10)
    parser.add_argument("--breakdown-steps", type=int, default=20)
    parser.add_argument("--no-breakdown", action="store_true",
                        help="leave out the CNN's per-op breakdown")
    parser.add_argument("--ampx-cnn", metavar="PRECISION",
                        help="(the child) time ampx's CNN step alone and print it")
    args = parser.parse_args()
    cnn_width, cnn_batch = 16, 64
    if args.ampx_cnn:
        ampx_cnn_child(cnn_width, cnn_batch, args.ampx_cnn, args.threads, args.cnn_steps)
        return 0
    library = os.path.abspath(args.library)
    torch.set_num_threads(args.threads)
    cases = args.cases.split(",")
    precisions = args.precisions.split(",")
    print(f"torch {torch.__version__} (MKL {torch.backends.mkl.is_available()}, "
          f"oneDNN {torch.backends.mkldnn.is_available()}), {args.threads} threads, "
          f"{args.rounds} rounds; {cpu_model()}; load average {os.getloadavg()[0]:.1f}",
          flush=True)
    print(f"{'case':<28}{'ampx ms':>10}{'torch ms':>10}{'torch/ampx':>12}")
    for name, width, depth, batch, steps in CASES if "mlp" in cases else []:
        for precision in precisions:
            ampx_ms, torch_ms = [], []
            for _ in range(args.rounds):
                ampx_ms.append(ampx_step_time(args.bench, width, depth, batch, precision,
                                              args.threads, steps))
                torch_ms.append(torch_step_time(width, depth, batch, precision, steps))
            a, t = statistics.median(ampx_ms), statistics.median(torch_ms)
            label = f"{name} {depth}x{width} b{batch} {precision}"
            print(f"{label:<28}{a:>10.3f}{t:>10.3f}{t / a:>12.2f}", flush=True)
    if "cnn" not in cases:
        return 0
    steps = args.cnn_steps
    for precision in precisions:
        ampx_ms, torch_ms = [], []
        for _ in range(args.rounds):
            ampx_ms.append(ampx_cnn_child_time(cnn_width, cnn_batch, precision, args.threads,
                                               steps, library))
            torch_ms.append(torch_cnn_step_time(cnn_width, cnn_batch, precision, steps))
        a, t = statistics.median(ampx_ms), statistics.median(torch_ms)
        label = f"cnn w{cnn_width} b{cnn_batch} {precision}"
        print(f"{label:<28}{a:>10.3f}{t:>10.3f}{t / a:>12.2f}", flush=True)
    if args.no_breakdown:
        return 0
    for precision in precisions:
        ampx_side = ampx_cnn_breakdown(cnn_width, cnn_batch, precision, args.threads,
                                       args.breakdown_steps, library)
        torch_side = torch_cnn_breakdown(cnn_width, cnn_batch, precision, args.breakdown_steps)
        print_breakdown(f"cnn w{cnn_width} b{cnn_batch} {precision}", ampx_side, torch_side)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return 0


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU model unknown"


if __name__ == "__main__":
    sys.exit(main())
