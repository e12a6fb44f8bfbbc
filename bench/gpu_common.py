"""gpu_common.py -- what the GPU benchmarks (bench_mlp_gpu.py, bench_gpt_gpu.py,
bench_cnn_gpu.py) share: one training step of a model in ampx and in
PyTorch AMP, each library's memory figures, and the timing of a run's steps
on the CUDA stream. A benchmark subclasses AmpxTraining and TorchTraining
with its model's loss(). Importing it without PyTorch prints SKIPPED and
exits, as skip_without_cuda() does without a GPU."""
import contextlib
import sys

try:
    import torch
except ImportError:
    print("SKIPPED: torch is not installed")
    sys.exit(0)


def skip_without_cuda(smoke=False):
    """Prints SKIPPED and exits when there is no CUDA device, unless `smoke`
    (the benchmark's --smoke check runs on the CPU) and --smoke was given."""
    if not torch.cuda.is_available() and not (smoke and "--smoke" in sys.argv):
        print("SKIPPED: no CUDA device")
        sys.exit(0)


def torch_dtype(precision):
    """The autocast dtype of "fp16" / "bf16"; None for "fp32"."""
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)


class TorchTraining:
    """AdamW (fused) and GradScaler (on for fp16) over `params`; step() runs
    loss() under autocast for `precision` and updates."""

    def __init__(self, precision, params, lr):
        self.precision = precision
        self.opt = torch.optim.AdamW(params, lr=lr, fused=True)
        self.scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")

    def step(self):
        self.opt.zero_grad(set_to_none=False)
        dtype = torch_dtype(self.precision)
        with torch.autocast("cuda", dtype=dtype or torch.float16, enabled=dtype is not None):
            loss = self.loss()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()

    def reset_peak(self):
        torch.cuda.reset_peak_memory_stats()

    def held_bytes(self):
        return torch.cuda.memory_allocated()

    def peak_bytes(self):
        return torch.cuda.max_memory_allocated()


class AmpxTraining:
    """The same in ampx on context `ctx`: AdamW, a Scaler (on for fp16), and
    autocast for fp16 / bf16."""

    def __init__(self, ampx, ctx, precision, params, lr):
        self.ctx = ctx
        self.opt = ampx.AdamW(list(params), lr=lr)
        self.scaler = ampx.Scaler(ctx, enabled=precision == "fp16")
        self.autocast = (ampx.Autocast(ctx, "f16" if precision == "fp16" else "bf16")
                         if precision != "fp32" else contextlib.nullcontext())

    def step(self):
        self.opt.zero_grad()
        with self.ctx.scope():
            with self.autocast:
                loss = self.loss()
            loss.backward(self.scaler)
            self.scaler.step(self.opt)
            self.scaler.update()

    def reset_peak(self):
        self.ctx.reset_peak_memory()

    def held_bytes(self):
        return self.ctx.memory_stats().current_bytes

    def peak_bytes(self):
        return self.ctx.memory_stats().peak_bytes


def timed(run, steps):
    """Seconds per step of `steps` calls of run.step(), timed by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        run.step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / steps
