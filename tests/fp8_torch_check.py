#!/usr/bin/env python3
"""FP8 conversions of libampx against PyTorch's, bit for bit.

Usage: fp8_torch_check.py LIBAMPX

Loads the library with plain ctypes (no binding), makes a context on the
device AMPX_TEST_DEVICE names (cpu by default; cuda when one is present),
and checks that
  - every one of the 256 codes of float8_e4m3fn and float8_e5m2 decodes to
    the f32 and f16 bits torch decodes it to (NaNs included), and to the
    same bf16 (a NaN to a NaN: torch's CPU bf16 makes every NaN 0x7fc0,
    ampx's bf16 conversions keep a NaN's sign and payload);
  - a million random floats plus the formats' boundaries, as f32, f16 and
    bf16, encode to torch's bytes with ampx_tensor_cast (torch's rules:
    E4M3 saturates, E5M2 overflows to inf).
Exits 77 (skipped) without torch or a float8-capable torch.
"""
import ctypes
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - environment dependent
    print(f"skipped: {e}")
    sys.exit(77)
if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "float8_e5m2"):
    print("skipped: this torch has no float8 types")
    sys.exit(77)

AMPX_F32, AMPX_F16, AMPX_BF16, AMPX_F8E4M3, AMPX_F8E5M2 = 1, 2, 3, 6, 7
AMPX_DEVICE_CPU, AMPX_DEVICE_CUDA = 1, 2


class ContextOptions(ctypes.Structure):
    class Allocator(ctypes.Structure):
        _fields_ = [("struct_size", ctypes.c_size_t), ("alloc", ctypes.c_void_p),
                    ("free", ctypes.c_void_p), ("user_data", ctypes.c_void_p)]

    _fields_ = [("struct_size", ctypes.c_size_t), ("device_type", ctypes.c_int32),
                ("device_index", ctypes.c_int32), ("num_threads", ctypes.c_int32),
                ("seed", ctypes.c_uint64), ("allocator", Allocator),
                ("cuda_stream", ctypes.c_void_p)]


lib = ctypes.CDLL(sys.argv[1])
lib.ampx_last_error.restype = ctypes.c_char_p
for name in ("ampx_context_create", "ampx_tensor_from_host", "ampx_tensor_cast",
             "ampx_tensor_to_host"):
    getattr(lib, name).restype = ctypes.c_int32
lib.ampx_cuda_device_count.restype = ctypes.c_int32


def check(status, what):
    if status != 0:
        raise RuntimeError(f"{what} failed ({status}): {lib.ampx_last_error().decode()}")


device = os.environ.get("AMPX_TEST_DEVICE", "cpu")
options = ContextOptions()
options.struct_size = ctypes.sizeof(ContextOptions)
options.device_type = AMPX_DEVICE_CPU
if device == "cuda":
    if lib.ampx_cuda_device_count() == 0:
        print("skipped: no CUDA device")
        sys.exit(77)
    options.device_type = AMPX_DEVICE_CUDA
options.allocator.struct_size = ctypes.sizeof(ContextOptions.Allocator)
ctx = ctypes.c_void_p()
check(lib.ampx_context_create(ctypes.byref(options), ctypes.byref(ctx)), "ampx_context_create")

ELEMENT = {AMPX_F32: np.uint32, AMPX_F16: np.uint16, AMPX_BF16: np.uint16,
           AMPX_F8E4M3: np.uint8, AMPX_F8E5M2: np.uint8}


def ampx_cast(raw, src_type, dst_type):
    """The bits ampx_tensor_cast gives for `raw` (a numpy array of src_type's bits)."""
    raw = np.ascontiguousarray(raw)
    shape = (ctypes.c_int64 * 1)(raw.size)
    src, dst = ctypes.c_void_p(), ctypes.c_void_p()
    check(lib.ampx_tensor_from_host(ctx, src_type, 1, shape, raw.ctypes.data_as(ctypes.c_void_p),
                                    ctypes.c_size_t(raw.nbytes), ctypes.byref(src)),
          "ampx_tensor_from_host")
    check(lib.ampx_tensor_cast(src, dst_type, ctypes.byref(dst)), "ampx_tensor_cast")
    out = np.empty(raw.size, dtype=ELEMENT[dst_type])
    check(lib.ampx_tensor_to_host(dst, out.ctypes.data_as(ctypes.c_void_p),
                                  ctypes.c_size_t(out.nbytes)), "ampx_tensor_to_host")
    lib.ampx_tensor_release(src)
    lib.ampx_tensor_release(dst)
    return out


def compare_nan_as_nan(label, got, expected, exponent_mask, mantissa_mask):
    """compare() for 16-bit results, but a NaN of torch's only needs a NaN:
    ampx's bf16 keeps a NaN's sign and payload (math/convert.h, as the GPU's
    conversions do), torch's CPU bf16 makes every NaN 0x7fc0."""
    def nan(x):
        return ((x & exponent_mask) == exponent_mask) & ((x & mantissa_mask) != 0)
    both_nan = nan(got) & nan(expected)
    compare(label, np.where(both_nan, expected, got), expected)


def bits(t, dtype):
    return t.contiguous().view(dtype).numpy()


failures = 0


def compare(label, got, expected):
    global failures
    wrong = np.nonzero(got != expected)[0]
    if wrong.size:
        failures += 1
        i = wrong[0]
        print(f"FAIL {label}: {wrong.size} of {got.size} differ; first at {i}: "
              f"ampx {int(got[i]):#x}, torch {int(expected[i]):#x}")
    else:
        print(f"ok   {label}: {got.size} equal")


FORMATS = [(torch.float8_e4m3fn, AMPX_F8E4M3, "e4m3fn", 448.0),
           (torch.float8_e5m2, AMPX_F8E5M2, "e5m2", 57344.0)]

codes = np.arange(256, dtype=np.uint8)
for torch_type, ampx_type, name, _ in FORMATS:
    decoded = torch.from_numpy(codes.copy()).view(torch_type)
    compare(f"{name}: 256 codes to f32", ampx_cast(codes, ampx_type, AMPX_F32),
            bits(decoded.float(), torch.int32).astype(np.uint32))
    compare_nan_as_nan(f"{name}: 256 codes to bf16 (NaN as NaN)",
                       ampx_cast(codes, ampx_type, AMPX_BF16),
                       bits(decoded.to(torch.bfloat16), torch.int16).astype(np.uint16),
                       np.uint16(0x7f80), np.uint16(0x007f))
    compare(f"{name}: 256 codes to f16", ampx_cast(codes, ampx_type, AMPX_F16),
            bits(decoded.to(torch.float16), torch.int16).astype(np.uint16))

rng = np.random.default_rng(2024)
random_bits = rng.integers(0, 2**32, size=1 << 19, dtype=np.uint64).astype(np.uint32)
in_range = ((rng.integers(0, 2**32, size=1 << 19, dtype=np.uint64).astype(np.uint32)
             & np.uint32(0x807FFFFF))
            | ((np.uint32(127 - 24) + rng.integers(0, 43, size=1 << 19).astype(np.uint32))
               << np.uint32(23)))
boundaries = []
for torch_type, _, _, top in FORMATS:
    values = torch.arange(256, dtype=torch.uint8).view(torch_type).float().numpy()
    finite = np.sort(np.abs(values[np.isfinite(values)]))
    mids = (finite[:-1] + finite[1:]) / 2
    edge = np.concatenate([finite, mids, [top * 1.0625, top * 1.125, top * 2, np.inf, np.nan]])
    edge = edge.astype(np.float32)
    boundaries += [edge, np.nextafter(edge, np.float32(np.inf)),
                   np.nextafter(edge, np.float32(0))]
edge = np.concatenate(boundaries)
edge = np.concatenate([edge, -edge])
inputs = np.concatenate([random_bits, in_range, edge.view(np.uint32)])

as_f32 = torch.from_numpy(inputs.view(np.float32).copy())
for source, ampx_source, name in ((as_f32, AMPX_F32, "f32"),
                                  (as_f32.to(torch.bfloat16), AMPX_BF16, "bf16"),
                                  (as_f32.to(torch.float16), AMPX_F16, "f16")):
    raw = bits(source, torch.int32 if ampx_source == AMPX_F32 else torch.int16)
    for torch_type, ampx_type, fp8_name, _ in FORMATS:
        compare(f"{name} -> {fp8_name}: {source.numel()} values",
                ampx_cast(raw, ampx_source, ampx_type),
                bits(source.to(torch_type), torch.uint8))

lib.ampx_context_release(ctx)
print(f"torch {torch.__version__}, device {device}: {'FAILED' if failures else 'passed'}")
sys.exit(1 if failures else 0)
