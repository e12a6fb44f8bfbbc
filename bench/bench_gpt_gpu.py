#!/usr/bin/env python3
"""bench_gpt_gpu.py -- a GPT training step on a GPU, ampx vs PyTorch AMP, side
by side in one process on the same stream.

  python3 bench/bench_gpt_gpu.py [path/to/libampx.so] [--layers 12]
      [--width 768] [--heads 12] [--context 1024] [--batch 8]
      [--vocab 50304] [--steps 5] [--rounds 3]
  python3 bench/bench_gpt_gpu.py [path/to/libampx.so] --smoke

--smoke checks, on the CPU and at a tiny size, that the two models are the
same function (the loss of one fp32 forward pass agrees to 1e-5) and times
nothing: the comparison below is only meaningful if that holds.

The model is examples/transformer.c's at GPT-2 124M's size: token embedding
plus learned positions, pre-norm blocks (layer norm with a scale, causal
attention over three bias-free projections, an output projection; layer
norm, a 4x GELU MLP with biases), a final layer norm and an untied head over a GPT-2-sized
vocabulary (50304, as llm.c pads it); cross-entropy (mean) over random
tokens, AdamW with fp32 parameters; the step is zero_grad, forward,
backward, optimizer step:

  fp16  autocast float16 + dynamic loss scaling (torch.amp.GradScaler)
  bf16  autocast bfloat16, no scaler

torch's attention is F.scaled_dot_product_attention (its flash backend
under autocast), its optimizer AdamW(fused=True). Per precision and
library: tokens per second (median of ROUNDS rounds of STEPS steps timed
with CUDA events, rounds alternating between the libraries), the peak of
tensor memory over a step, the model FLOP utilisation against the H200's
dense 16-bit peak (6 N + 12 L T d FLOPs per token, as llm.c counts them),
and ampx's tokens/s over torch's. The anchor: llm.c trains GPT-2 124M at
about 460K tokens/s on one H100 (~50% MFU). Prints "SKIPPED" and exits 0
without torch or a GPU.
"""
import argparse
import contextlib
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

from gpu_common import AmpxTraining, TorchTraining, skip_without_cuda, timed  # noqa: E402
import torch  # noqa: E402  (gpu_common exits without it)
import torch.nn.functional as F  # noqa: E402

skip_without_cuda(smoke=True)


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("library", nargs="?", default=os.path.join(HERE, "..", "build", "libampx.so"))
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--peak-tflops", type=float, default=989.0,
                   help="dense fp16/bf16 tensor-core peak of the GPU (H100/H200 SXM: 989)")
    p.add_argument("--smoke", action="store_true",
                   help="compare one fp32 forward of both models on the CPU at a tiny size")
    a = p.parse_args()
    if a.smoke:
        a.layers, a.width, a.heads, a.context, a.batch, a.vocab = 2, 32, 4, 16, 3, 50
    return a


args = parse()
os.environ["AMPX_LIBRARY"] = os.path.abspath(args.library)
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
import ampx  # noqa: E402  (after AMPX_LIBRARY is set)

MiB = 1024.0 * 1024.0


def initial_weights(seed=0):
    """(name, tensor) in one order for both libraries; std as examples/transformer.c."""
    g = torch.Generator().manual_seed(seed)
    d, L, V, T = args.width, args.layers, args.vocab, args.context
    branch = 0.02 / (2 * L) ** 0.5

    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    w = [("embedding", normal(V, d)), ("positions", normal(T, d)),
         ("final_norm", torch.ones(d)), ("head", normal(V, d))]
    for layer in range(L):
        w += [(f"{layer}.norm1", torch.ones(d)), (f"{layer}.wq", normal(d, d)),
              (f"{layer}.wk", normal(d, d)), (f"{layer}.wv", normal(d, d)),
              (f"{layer}.wo", normal(d, d, std=branch)), (f"{layer}.norm2", torch.ones(d)),
              (f"{layer}.w1", normal(4 * d, d)), (f"{layer}.b1", torch.zeros(4 * d)),
              (f"{layer}.w2", normal(d, 4 * d, std=branch)), (f"{layer}.b2", torch.zeros(d))]
    return w


def forward(lib, p, tokens, batch):
    """One model for both libraries: `lib` supplies the ops."""
    T, d, H = args.context, args.width, args.heads
    x = lib.add(lib.embedding(p["embedding"], tokens), lib.positions(p["positions"], batch))
    for layer in range(args.layers):
        def w(name):
            return p[f"{layer}.{name}"]

        n = lib.norm(x, w("norm1"))
        q, k, v = (lib.heads(lib.linear(n, w(name)), batch, T, H, d // H)
                   for name in ("wq", "wk", "wv"))
        a = lib.merge(lib.attention(q, k, v), batch, T, d)
        x = lib.add(x, lib.linear(a, w("wo")))
        n = lib.norm(x, w("norm2"))
        x = lib.add(x, lib.linear(lib.linear(n, w("w1"), w("b1"), gelu=True), w("w2"), w("b2")))
    return lib.flat(lib.linear(lib.norm(x, p["final_norm"]), p["head"]), batch * T)


class TorchOps:
    add = staticmethod(torch.add)
    embedding = staticmethod(lambda table, idx: F.embedding(idx, table))

    @staticmethod
    def positions(table, batch):
        return table  # [T, d], broadcast over the batch

    @staticmethod
    def norm(x, weight):
        return F.layer_norm(x, (x.shape[-1],), weight, None, 1e-5)

    @staticmethod
    def flat(x, rows):
        return x.reshape(rows, -1)

    @staticmethod
    def linear(x, weight, bias=None, gelu=False):
        y = F.linear(x, weight, bias)
        return F.gelu(y) if gelu else y

    @staticmethod
    def heads(x, batch, T, H, hd):
        return x.view(batch, T, H, hd).transpose(1, 2)

    @staticmethod
    def merge(x, batch, T, d):
        return x.transpose(1, 2).reshape(batch, T, d)

    @staticmethod
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class AmpxOps:
    add = staticmethod(ampx.add)
    embedding = staticmethod(ampx.embedding)

    index = {}

    @staticmethod
    def positions(table, batch):
        # ampx broadcasts only row vectors: the [T, d] table is looked up by
        # a [batch, T] index of positions instead (the same values).
        key = (id(table.context), batch)
        if key not in AmpxOps.index:
            rows = torch.arange(args.context).repeat(batch, 1).numpy()
            AmpxOps.index[key] = ampx.tensor(rows, context=table.context)
        return ampx.embedding(table, AmpxOps.index[key])

    @staticmethod
    def norm(x, weight):
        return ampx.layer_norm(x, weight, None, 1e-5)

    @staticmethod
    def flat(x, rows):
        return ampx.reshape(x, (rows, -1))

    @staticmethod
    def linear(x, weight, bias=None, gelu=False):
        return ampx.linear(x, weight, bias, "gelu" if gelu else "none")

    @staticmethod
    def heads(x, batch, T, H, hd):
        return ampx.transpose(ampx.reshape(x, (batch, T, H, hd)), 1, 2)

    @staticmethod
    def merge(x, batch, T, d):
        return ampx.reshape(ampx.transpose(x, 1, 2), (batch, T, d))

    @staticmethod
    def attention(q, k, v):
        return ampx.scaled_dot_product_attention(q, k, v, is_causal=True)


class TorchRun(TorchTraining):
    def __init__(self, precision, weights, tokens, targets):
        self.p = {name: t.cuda().requires_grad_() for name, t in weights}
        self.tokens, self.targets = tokens, targets
        super().__init__(precision, self.p.values(), lr=1e-4)

    def loss(self):
        return F.cross_entropy(forward(TorchOps, self.p, self.tokens, args.batch), self.targets)


class AmpxRun(AmpxTraining):
    def __init__(self, precision, weights, tokens, targets, stream):
        ctx = ampx.Context("cuda", cuda_stream=stream)
        self.p = {name: ampx.tensor(t.numpy(), context=ctx, requires_grad=True)
                  for name, t in weights}
        self.tokens = ampx.tensor(tokens.cpu().numpy(), context=ctx)
        self.targets = ampx.tensor(targets.cpu().numpy(), context=ctx)
        super().__init__(ampx, ctx, precision, self.p.values(), lr=1e-4)

    def loss(self):
        return ampx.cross_entropy(forward(AmpxOps, self.p, self.tokens, args.batch),
                                  self.targets)


def smoke():
    """One fp32 forward of both models on the CPU from the same weights."""
    weights = initial_weights()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, args.vocab, (args.batch, args.context), generator=g)
    targets = torch.randint(0, args.vocab, (args.batch * args.context,), generator=g)
    p = {name: t for name, t in weights}
    want = F.cross_entropy(forward(TorchOps, p, tokens, args.batch), targets).item()
    ctx = ampx.Context("cpu")
    q = {name: ampx.tensor(t.numpy(), context=ctx) for name, t in weights}
    logits = forward(AmpxOps, q, ampx.tensor(tokens.numpy(), context=ctx), args.batch)
    have = ampx.cross_entropy(logits, ampx.tensor(targets.numpy(), context=ctx)).item()
    ok = abs(have - want) <= 1e-5 * abs(want)
    print(f"smoke: one fp32 forward, loss ampx {have:.7f} torch {want:.7f}: "
          f"{'same model' if ok else 'DIFFERENT'}")
    return 0 if ok else 1


def main():
    d, L, T, V = args.width, args.layers, args.context, args.vocab
    params = V * d * 2 + T * d + L * (12 * d * d + 7 * d) + d
    flops_per_token = 6 * params + 12 * L * T * d
    tokens_per_step = args.batch * T
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; "
          f"ampx {ampx.library_version()}")
    print(f"GPT {L} layers x {d}, {args.heads} heads, T {T}, batch {args.batch}, vocab {V} "
          f"({params / 1e6:.1f}M parameters); {args.rounds} alternating rounds of "
          f"{args.steps} steps\n")
    stream = torch.cuda.current_stream().cuda_stream
    weights = initial_weights()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, V, (args.batch, T), generator=g).cuda()
    targets = torch.randint(0, V, (args.batch * T,), generator=g).cuda()

    print(f"{'precision':<10}{'library':<8}{'tokens/s':>12}{'MFU':>8}{'peak MiB':>11}"
          f"{'ampx/torch':>12}")
    for precision in ("fp16", "bf16"):
        runs = {"ampx": AmpxRun(precision, weights, tokens, targets, stream),
                "torch": TorchRun(precision, weights, tokens, targets)}
        peaks, times = {}, {name: [] for name in runs}
        for name, run in runs.items():
            for _ in range(2):
                run.step()
            torch.cuda.synchronize()
            run.reset_peak()
            run.step()
            torch.cuda.synchronize()
            peaks[name] = run.peak_bytes()
        for _ in range(args.rounds):
            for name, run in runs.items():
                times[name].append(timed(run, args.steps))
        rate = {name: tokens_per_step / statistics.median(times[name]) for name in runs}
        for name in runs:
            mfu = rate[name] * flops_per_token / (args.peak_tflops * 1e12)
            ratio = f"{rate['ampx'] / rate['torch']:.2f}x" if name == "ampx" else ""
            print(f"{precision:<10}{name:<8}{rate[name]:>12.0f}{100 * mfu:>7.1f}%"
                  f"{peaks[name] / MiB:>11.0f}{ratio:>12}")
        del runs
        torch.cuda.empty_cache()
    print("\nanchor: llm.c GPT-2 124M, about 460K tokens/s on one H100 (~50% MFU)")


if args.smoke:
    sys.exit(smoke())
with contextlib.suppress(KeyboardInterrupt):
    main()
