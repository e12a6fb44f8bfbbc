#!/usr/bin/env python3
"""bench_vs_torch_gpu.py -- ampx and PyTorch side by side on one GPU, in one
process, on the same stream and the same memory.

  python3 bench/bench_vs_torch_gpu.py [path/to/libampx.so] [parameters]

Rows:
  AdamW step     ampx (bf16 params + fp32 masters, bf16 grads) vs
                 torch.optim.AdamW(fused=True) on fp32 params and grads (the
                 usual torch AMP setup: fp32 weights, autocast activations) and
                 on bf16 params without masters.
  unscale        ampx_scaler_unscale vs torch's
                 _amp_foreach_non_finite_check_and_unscale_ over 1000 tensors
                 of mixed sizes (f32 grads, in place).

ampx adopts torch's current stream and wraps torch's tensors (no copies), so
both libraries touch the very same bytes. Prints a table; exits 0 with
"SKIPPED" when torch or a GPU is missing.
"""
import ctypes
import os
import sys

try:
    import torch
except ImportError:
    print("SKIPPED: torch is not installed")
    sys.exit(0)
if not torch.cuda.is_available():
    print("SKIPPED: no CUDA device")
    sys.exit(0)

HERE = os.path.dirname(os.path.abspath(__file__))
lib_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "build", "libampx.so")
total_params = int(float(sys.argv[2])) if len(sys.argv) > 2 else int(1e9)
ampx = ctypes.CDLL(lib_path)

F32, F16, BF16 = 1, 2, 3
CUDA = 2


class ContextOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("device_type", ctypes.c_int32),
                ("device_index", ctypes.c_int32), ("num_threads", ctypes.c_int32),
                ("seed", ctypes.c_uint64), ("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p),
                ("user_data", ctypes.c_void_p), ("cuda_stream", ctypes.c_void_p)]


class AdamOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("lr", ctypes.c_double),
                ("beta1", ctypes.c_double), ("beta2", ctypes.c_double), ("eps", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("amsgrad", ctypes.c_int32),
                ("maximize", ctypes.c_int32), ("decoupled_weight_decay", ctypes.c_int32)]


ampx.ampx_last_error.restype = ctypes.c_char_p
ampx.ampx_adamw_options_default.restype = AdamOptions


def check(status):
    if status != 0:
        raise RuntimeError(ampx.ampx_last_error().decode())


# A stream of our own for both libraries: torch's default stream is the
# legacy NULL stream, and a NULL cuda_stream would make ampx create its own.
stream = torch.cuda.Stream()
torch.cuda.set_stream(stream)
options = ContextOptions(ctypes.sizeof(ContextOptions), CUDA, torch.cuda.current_device(), 0, 0,
                         None, None, None, ctypes.c_void_p(stream.cuda_stream))
ctx = ctypes.c_void_p()
check(ampx.ampx_context_create(ctypes.byref(options), ctypes.byref(ctx)))

DTYPES = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}


def wrap(t):
    """An ampx tensor over torch tensor t's memory (no copy, no deleter)."""
    shape = (ctypes.c_int64 * t.dim())(*t.shape)
    out = ctypes.c_void_p()
    check(ampx.ampx_tensor_wrap(ctx, DTYPES[t.dtype], t.dim(), shape, ctypes.c_void_p(t.data_ptr()),
                                ctypes.c_size_t(t.numel() * t.element_size()), None, None,
                                ctypes.byref(out)))
    return out


def time_ms(fn, iters):
    fn()  # warm-up (and first-step state creation)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def split(total, pieces):
    base = total // pieces
    return [base + (1 if i < total % pieces else 0) for i in range(pieces)]


rows = []
props = torch.cuda.get_device_properties(0)
print(f"{props.name}, torch {torch.__version__}, {total_params:.3g} parameters")

# ---- copy bandwidth (the reference) ----------------------------------------
buf = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
dst = torch.empty_like(buf)
copy_ms = time_ms(lambda: dst.copy_(buf), 20)
copy_gbs = 2 * buf.numel() * 4 / copy_ms / 1e6
del buf, dst
rows.append(("device copy 1 GiB (reference)", copy_ms, copy_gbs, 1.0, ""))

# ---- AdamW -------------------------------------------------------------------
sizes = split(total_params, 100)
torch.manual_seed(0)


def torch_adamw(dtype):
    params = [torch.randn(n, device="cuda", dtype=dtype) for n in sizes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    ms = time_ms(opt.step, 10)
    del opt, params
    torch.cuda.empty_cache()
    return ms


def ampx_adamw():
    params = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for n in sizes]
    grads = [torch.randn_like(p) * 1e-3 for p in params]
    handles = [wrap(p) for p in params]
    for h, g in zip(handles, grads):
        gh = wrap(g)
        check(ampx.ampx_tensor_set_grad(h, gh))
        ampx.ampx_tensor_release(gh)
    arr = (ctypes.c_void_p * len(handles))(*[h.value for h in handles])
    opts = ampx.ampx_adamw_options_default()
    opts.lr = 1e-4
    opt = ctypes.c_void_p()
    check(ampx.ampx_optimizer_create_adam(ctx, arr, len(handles), ctypes.byref(opts), ctypes.byref(opt)))
    ms = time_ms(lambda: check(ampx.ampx_optimizer_step(opt)), 10)
    ampx.ampx_optimizer_release(opt)
    for h in handles:
        ampx.ampx_tensor_release(h)
    check(ampx.ampx_context_synchronize(ctx))
    del params, grads
    torch.cuda.empty_cache()
    return ms


# Bytes each step must move per parameter: read+write master/param, m, v;
# read grad (+ write the 16-bit param for ampx).
ampx_ms = ampx_adamw()
ampx_bytes = total_params * (2 + 2 + 8 + 8 + 8)
rows.append(("ampx AdamW, bf16 params + fp32 masters", ampx_ms, ampx_bytes / ampx_ms / 1e6,
             ampx_bytes / ampx_ms / 1e6 / copy_gbs, ""))
t32_ms = torch_adamw(torch.float32)
t32_bytes = total_params * (8 + 4 + 8 + 8)
rows.append(("torch AdamW fused, fp32 params", t32_ms, t32_bytes / t32_ms / 1e6,
             t32_bytes / t32_ms / 1e6 / copy_gbs, f"torch/ampx time {t32_ms / ampx_ms:.2f}"))
t16_ms = torch_adamw(torch.bfloat16)
t16_bytes = total_params * (4 + 2 + 8 + 8)
rows.append(("torch AdamW fused, bf16 params (no masters)", t16_ms, t16_bytes / t16_ms / 1e6,
             t16_bytes / t16_ms / 1e6 / copy_gbs, f"torch/ampx time {t16_ms / ampx_ms:.2f} (fewer bytes: no masters)"))

# ---- unscale + inf check over 1000 tensors ---------------------------------------
gen = torch.Generator().manual_seed(1)
counts = [int(x) for x in torch.randint(1 << 10, 1 << 20, (1000,), generator=gen)]
grads = [torch.randn(n, device="cuda") for n in counts]
elements = sum(counts)
inv = torch.full((), 1.0 / 65536, device="cuda")
found = torch.zeros((), device="cuda")
torch_ms = time_ms(lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv), 20)

params = [torch.zeros(n, device="cuda") for n in counts]
handles = [wrap(p) for p in params]
for h, g in zip(handles, grads):
    gh = wrap(g)
    check(ampx.ampx_tensor_set_grad(h, gh))
    ampx.ampx_tensor_release(gh)
arr = (ctypes.c_void_p * len(handles))(*[h.value for h in handles])
sgd = ctypes.c_void_p()
check(ampx.ampx_optimizer_create_sgd(ctx, arr, len(handles), None, ctypes.byref(sgd)))
scaler = ctypes.c_void_p()
check(ampx.ampx_scaler_create(ctx, None, ctypes.byref(scaler)))


def ampx_unscale():
    check(ampx.ampx_scaler_unscale(scaler, sgd))
    # Back to READY without touching the scale: update_to keeps 65536.
    check(ampx.ampx_scaler_update_to(scaler, ctypes.c_double(65536.0)))


ampx_un_ms = time_ms(ampx_unscale, 20)
un_bytes = elements * 8
rows.append(("ampx unscale+check, 1000 f32 tensors", ampx_un_ms, un_bytes / ampx_un_ms / 1e6,
             un_bytes / ampx_un_ms / 1e6 / copy_gbs, "(includes a 1-thread scaler update)"))
rows.append(("torch unscale+check, same tensors", torch_ms, un_bytes / torch_ms / 1e6,
             un_bytes / torch_ms / 1e6 / copy_gbs, f"torch/ampx time {torch_ms / ampx_un_ms:.2f}"))

print()
print(f"{'operation':46} {'ms':>9} {'GB/s':>9} {'of copy':>8}  note")
for name, ms, gbs, frac, note in rows:
    print(f"{name:46} {ms:9.3f} {gbs:9.1f} {frac * 100:7.1f}%  {note}")
