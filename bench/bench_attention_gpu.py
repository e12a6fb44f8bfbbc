#!/usr/bin/env python3
"""bench_attention_gpu.py -- fused attention, forward + backward, ampx vs
torch.nn.functional.scaled_dot_product_attention (its flash backend), side
by side in one process on one stream. ampx runs its tensor-core kernels
(the default) and, up to T = 2048, its fp32 tiles too (a second context made
with AMPX_CUDA_ATTENTION=tiled): the column that says which to keep.

  python3 bench/bench_attention_gpu.py [path/to/libampx.so] [--rounds 5]

For T in 1024, 2048, 4096, 8192, head_dim D in 64 and 128, fp16 and bf16,
causal: batch 16384 / T and 2048 / D heads (16K tokens of a 2048-wide
model, as FlashAttention's benchmarks size them). Both sides read the very
same q, k, v (ampx wraps torch's memory through DLPack) and backpropagate
sum(out * r). A round times `iters` forward+backward passes of one library
with CUDA events, rounds alternate between the libraries, and the table
shows the median of each in TFLOP/s -- counting 4 B H T^2 D for the
forward, 2.5 times that for the backward, halved for causal masking (the
convention of FlashAttention's papers) -- and ampx / torch. The elementwise
product and sum around attention are the same on both sides and included.
The outputs and gradients are compared too (max abs difference). Prints
"SKIPPED" and exits 0 without torch or a GPU.
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    print("SKIPPED: torch is not installed")
    sys.exit(0)
if not torch.cuda.is_available():
    print("SKIPPED: no CUDA device")
    sys.exit(0)

parser = argparse.ArgumentParser()
parser.add_argument("library", nargs="?", default=os.path.join(HERE, "..", "build", "libampx.so"))
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--tokens", type=int, default=16384)
parser.add_argument("--width", type=int, default=2048)
args = parser.parse_args()
os.environ["AMPX_LIBRARY"] = os.path.abspath(args.library)
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
import ampx  # noqa: E402  (after AMPX_LIBRARY is set)

stream = torch.cuda.Stream()
torch.cuda.set_stream(stream)
ctx = ampx.Context("cuda", torch.cuda.current_device(), cuda_stream=stream.cuda_stream)
# The environment is read when a context is made.
os.environ["AMPX_CUDA_ATTENTION"] = "tiled"
tiled_ctx = ampx.Context("cuda", torch.cuda.current_device(), cuda_stream=stream.cuda_stream)
del os.environ["AMPX_CUDA_ATTENTION"]
TILED_UP_TO = 2048


def torch_step(q, k, v, r):
    q.grad = k.grad = v.grad = None
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    (out * r).sum().backward()
    return out


def ampx_step(q, k, v, r, context):
    with context.scope():
        for t in (q, k, v):
            t.grad = None
        out = ampx.scaled_dot_product_attention(q, k, v, is_causal=True)
        ampx.backward(ampx.sum(ampx.mul(out, r)))


def timed(fn, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def compare(tq, tk, tv, tr, aq, ak, av, ar):
    """Max abs differences of out, dq, dk, dv between the two libraries."""
    out_t = torch_step(tq, tk, tv, tr)
    with ctx.scope():
        for t in (aq, ak, av):
            t.grad = None
        out_a = ampx.scaled_dot_product_attention(aq, ak, av, is_causal=True)
        ampx.backward(ampx.sum(ampx.mul(out_a, ar)))
        got = [torch.from_dlpack(out_a)] + [torch.from_dlpack(t.grad) for t in (aq, ak, av)]
        want = [out_t, tq.grad, tk.grad, tv.grad]
        return max((g.float() - w.float()).abs().max().item() for g, w in zip(got, want))


def main():
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; ampx {ampx.library_version()}")
    print(f"causal attention, {args.tokens} tokens per batch, width {args.width}; median of "
          f"{args.rounds} alternating rounds\n")
    print(f"{'dtype':<6}{'T':>6}{'D':>5}{'B':>4}{'H':>4}{'ampx TFLOP/s':>14}{'tiled':>8}"
          f"{'torch TFLOP/s':>15}{'ampx/torch':>12}{'max |diff|':>12}")
    for dtype in (torch.float16, torch.bfloat16):
        for D in (64, 128):
            for T in (1024, 2048, 4096, 8192):
                B, H = max(1, args.tokens // T), args.width // D
                g = torch.Generator(device="cuda").manual_seed(T + D)
                tq, tk, tv, tr = (torch.randn(B, H, T, D, device="cuda", dtype=dtype, generator=g)
                                  for _ in range(4))
                for t in (tq, tk, tv):
                    t.requires_grad_()
                aq, ak, av, ar = (ampx.from_dlpack(t.detach(), context=ctx) for t in (tq, tk, tv, tr))
                sq, sk, sv, sr = (ampx.from_dlpack(t.detach(), context=tiled_ctx)
                                  for t in (tq, tk, tv, tr))
                for t in (aq, ak, av, sq, sk, sv):
                    t.requires_grad = True
                diff = compare(tq, tk, tv, tr, aq, ak, av, ar)
                flops = 4 * B * H * T * T * D * 3.5 / 2
                iters = max(1, int(2e12 // flops))
                steps = {"ampx": lambda: ampx_step(aq, ak, av, ar, ctx),
                         "torch": lambda: torch_step(tq, tk, tv, tr)}
                if T <= TILED_UP_TO:
                    steps["tiled"] = lambda: ampx_step(sq, sk, sv, sr, tiled_ctx)
                times = {name: [] for name in steps}
                for fn in steps.values():
                    fn()
                for _ in range(args.rounds):
                    for name, fn in steps.items():
                        times[name].append(timed(fn, iters))
                rate = {name: flops / statistics.median(t) / 1e12 for name, t in times.items()}
                name = "fp16" if dtype == torch.float16 else "bf16"
                tiled = f"{rate['tiled']:.1f}" if "tiled" in rate else "-"
                print(f"{name:<6}{T:>6}{D:>5}{B:>4}{H:>4}{rate['ampx']:>14.1f}{tiled:>8}"
                      f"{rate['torch']:>15.1f}{rate['ampx'] / rate['torch']:>11.2f}x{diff:>12.2e}",
                      flush=True)
                del aq, ak, av, ar, sq, sk, sv, sr
                torch.cuda.empty_cache()
    print("\ntarget: ampx within 10% of torch's flash backend (ampx/torch >= 0.90)")


main()
