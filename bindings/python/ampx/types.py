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

    @property
    def itemsize(self) -> int:
        """Size of one element in bytes (``ampx_dtype_size``)."""
        return lib.ampx_dtype_size(self)

    @property
    def is_floating_point(self) -> bool:
        """True for F32, F16 and BF16."""
        return self in (DType.F32, DType.F16, DType.BF16)

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


F32, F16, BF16, I32, I64 = DType.F32, DType.F16, DType.BF16, DType.I32, DType.I64
float32, float16, bfloat16, int32, int64 = F32, F16, BF16, I32, I64
