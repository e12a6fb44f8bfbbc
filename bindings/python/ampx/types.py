"""The enums of ampx.h: element types, devices, op classes and friends."""
from __future__ import annotations

import enum

from ._lib import lib


class DType(enum.IntEnum):
    """``ampx_dtype``: element types (``str(DType.BF16) == "bf16"``)."""

    F32 = 1
    F16 = 2
    BF16 = 3
    I32 = 4
    I64 = 5

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

    CPU = 1
    CUDA = 2


class Activation(enum.IntEnum):
    """``ampx_activation``: the activation fused into :func:`ampx.linear`."""

    NONE = 0
    RELU = 1
    GELU = 2


class Reduction(enum.IntEnum):
    """``ampx_reduction`` of the losses."""

    MEAN = 1
    SUM = 2
    NONE = 3


class OpClass(enum.IntEnum):
    """``ampx_op_class``: how an op chooses its precision under autocast."""

    LOWER_PRECISION = 1
    FP32 = 2
    PROMOTE = 3
    KEEP = 4


class StateKind(enum.IntEnum):
    """``ampx_optimizer_state``: per-parameter optimizer state tensors."""

    MASTER = 1
    MOMENTUM = 2
    EXP_AVG_SQ = 3
    MAX_EXP_AVG_SQ = 4


class LRDecay(enum.IntEnum):
    """``ampx_lr_decay``: what follows a learning-rate schedule's warm-up."""

    CONSTANT = 0
    LINEAR = 1
    COSINE = 2
    STEP = 3


F32, F16, BF16, I32, I64 = DType.F32, DType.F16, DType.BF16, DType.I32, DType.I64
float32, float16, bfloat16, int32, int64 = F32, F16, BF16, I32, I64
