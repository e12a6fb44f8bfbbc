"""The enums of ampx.h: element types, devices, op classes and friends."""
from __future__ import annotations

import enum

from . import _raw
from ._lib import lib


class DType(enum.IntEnum):
    """``ampx_dtype``: element types (``str(DType.BF16) == "bf16"``)."""

    F32 = _raw.AMPX_F32
    F16 = _raw.AMPX_F16
    BF16 = _raw.AMPX_BF16
    I32 = _raw.AMPX_I32
    I64 = _raw.AMPX_I64
    F8E4M3 = _raw.AMPX_F8E4M3
    F8E5M2 = _raw.AMPX_F8E5M2

    @property
    def itemsize(self) -> int:
        """Size of one element in bytes (``ampx_dtype_size``)."""
        return lib.ampx_dtype_size(self)

    @property
    def is_floating_point(self) -> bool:
        """True for F32, F16, BF16 and the FP8 types (as torch's float8 types)."""
        return self in (DType.F32, DType.F16, DType.BF16, DType.F8E4M3, DType.F8E5M2)

    @property
    def is_fp8(self) -> bool:
        """True for F8E4M3 and F8E5M2 (storage and FP8 products only)."""
        return self in (DType.F8E4M3, DType.F8E5M2)

    def __str__(self) -> str:
        return lib.ampx_dtype_name(self).decode()


class Device(enum.IntEnum):
    """``ampx_device_type``."""

    CPU = _raw.AMPX_DEVICE_CPU
    CUDA = _raw.AMPX_DEVICE_CUDA


class Activation(enum.IntEnum):
    """``ampx_activation``: the activation fused into :func:`ampx.linear`."""

    NONE = _raw.AMPX_ACTIVATION_NONE
    RELU = _raw.AMPX_ACTIVATION_RELU
    GELU = _raw.AMPX_ACTIVATION_GELU


class Reduction(enum.IntEnum):
    """``ampx_reduction`` of the losses."""

    MEAN = _raw.AMPX_REDUCTION_MEAN
    SUM = _raw.AMPX_REDUCTION_SUM
    NONE = _raw.AMPX_REDUCTION_NONE


class OpClass(enum.IntEnum):
    """``ampx_op_class``: how an op chooses its precision under autocast."""

    LOWER_PRECISION = _raw.AMPX_OP_LOWER_PRECISION
    FP32 = _raw.AMPX_OP_FP32
    PROMOTE = _raw.AMPX_OP_PROMOTE
    KEEP = _raw.AMPX_OP_KEEP


class StateKind(enum.IntEnum):
    """``ampx_optimizer_state``: per-parameter optimizer state tensors."""

    MASTER = _raw.AMPX_STATE_MASTER
    MOMENTUM = _raw.AMPX_STATE_MOMENTUM
    EXP_AVG_SQ = _raw.AMPX_STATE_EXP_AVG_SQ
    MAX_EXP_AVG_SQ = _raw.AMPX_STATE_MAX_EXP_AVG_SQ


class LRDecay(enum.IntEnum):
    """``ampx_lr_decay``: what follows a learning-rate schedule's warm-up."""

    CONSTANT = _raw.AMPX_LR_CONSTANT
    LINEAR = _raw.AMPX_LR_LINEAR
    COSINE = _raw.AMPX_LR_COSINE
    STEP = _raw.AMPX_LR_STEP


class Fp8Overflow(enum.IntEnum):
    """``ampx_fp8_overflow``: what a cast into FP8 does beyond the format's max."""

    SATURATE = _raw.AMPX_FP8_SATURATE
    NO_SATURATE = _raw.AMPX_FP8_NO_SATURATE


class Fp8Scaling(enum.IntEnum):
    """``ampx_fp8_scaling``: delayed (amax history) or current (own amax)."""

    DELAYED = _raw.AMPX_FP8_DELAYED
    CURRENT = _raw.AMPX_FP8_CURRENT


class Fp8Format(enum.IntEnum):
    """``ampx_fp8_format``: HYBRID (E4M3 forward, E5M2 gradients) or E4M3."""

    HYBRID = _raw.AMPX_FP8_HYBRID
    E4M3 = _raw.AMPX_FP8_E4M3


class AmaxAlgo(enum.IntEnum):
    """``ampx_fp8_amax_algo``: which amax a delayed update scales by."""

    MAX = _raw.AMPX_FP8_AMAX_MAX
    MOST_RECENT = _raw.AMPX_FP8_AMAX_MOST_RECENT


class Fp8Role(enum.IntEnum):
    """``ampx_fp8_role``: what a recipe slot holds (decides its format)."""

    FORWARD = _raw.AMPX_FP8_FORWARD
    BACKWARD = _raw.AMPX_FP8_BACKWARD


F32, F16, BF16, I32, I64 = DType.F32, DType.F16, DType.BF16, DType.I32, DType.I64
F8E4M3, F8E5M2 = DType.F8E4M3, DType.F8E5M2
float32, float16, bfloat16, int32, int64 = F32, F16, BF16, I32, I64
float8_e4m3fn, float8_e5m2 = F8E4M3, F8E5M2
