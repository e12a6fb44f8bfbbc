"""Checks and conversions of Python arguments before they reach ctypes.

ctypes silently truncates integers that do not fit a C type and accepts
many things for a pointer; these helpers turn each Python argument into a
C value or raise an :mod:`ampx.errors` exception naming the argument.
"""
from __future__ import annotations

import enum
import math
import operator
from typing import Iterable

from . import _raw
from .errors import ArgumentTypeError, InvalidArgumentError, ShapeError
from .types import DType

_DTYPE_ALIASES = {
    "f32": DType.F32, "float32": DType.F32, "float": DType.F32,
    "f16": DType.F16, "float16": DType.F16, "half": DType.F16,
    "bf16": DType.BF16, "bfloat16": DType.BF16,
    "i32": DType.I32, "int32": DType.I32,
    "i64": DType.I64, "int64": DType.I64,
    "f8e4m3": DType.F8E4M3, "float8_e4m3fn": DType.F8E4M3, "e4m3": DType.F8E4M3,
    "f8e5m2": DType.F8E5M2, "float8_e5m2": DType.F8E5M2, "e5m2": DType.F8E5M2,
}

MAX_DIMS = _raw.AMPX_MAX_DIMS


def enum_arg(cls: type[enum.IntEnum], value, what: str) -> enum.IntEnum:
    """A member of ``cls`` given as the member, its name (any case) or its value."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.lower()
        if cls is DType and key in _DTYPE_ALIASES:
            return _DTYPE_ALIASES[key]
        for member in cls:
            if member.name.lower() == key:
                return member
        raise InvalidArgumentError(f"{what} is {value!r}; expected one of "
                                   f"{', '.join(m.name.lower() for m in cls)}")
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return cls(value)
        except ValueError:
            raise InvalidArgumentError(f"{what} is {value}, which is not a {cls.__name__}") from None
    raise ArgumentTypeError(f"{what} must be a {cls.__name__} or its name, not "
                            f"{type(value).__name__}")


def int_arg(value, what: str, bits: int = 32, minimum: int | None = None,
            unsigned: bool = False) -> int:
    """An integer that fits the C integer type of ``bits`` bits."""
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{what} must be an integer, not bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise ArgumentTypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    low, high = (0, 2 ** bits - 1) if unsigned else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    if minimum is not None:
        low = max(low, minimum)
    if not low <= number <= high:
        raise InvalidArgumentError(f"{what} is {number}; it must be in [{low}, {high}]")
    return number


def float_arg(value, what: str, finite: bool = False) -> float:
    """A real number (a Python or NumPy number)."""
    if isinstance(value, bool) or isinstance(value, (str, bytes)):
        raise ArgumentTypeError(f"{what} must be a number, not {type(value).__name__}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"{what} must be a number, not {type(value).__name__}") from None
    if finite and not math.isfinite(number):
        raise InvalidArgumentError(f"{what} is {number}; it must be finite")
    return number


def bool_arg(value, what: str) -> int:
    """A flag, as the int32 0 or 1 the C functions take."""
    if isinstance(value, (str, bytes)) or value is None:
        raise ArgumentTypeError(f"{what} must be a bool, not {type(value).__name__}")
    return 1 if value else 0


def shape_arg(shape, what: str = "shape") -> tuple[int, ...]:
    """A shape given as an int or an iterable of ints, at most MAX_DIMS long."""
    if isinstance(shape, (str, bytes)):
        raise ArgumentTypeError(f"{what} must be a sequence of integers, not {type(shape).__name__}")
    try:
        dims: Iterable = (operator.index(shape),)
    except TypeError:
        try:
            dims = tuple(shape)
        except TypeError:
            raise ArgumentTypeError(f"{what} must be an integer or a sequence of integers, not "
                                    f"{type(shape).__name__}") from None
    dims = tuple(int_arg(d, f"{what}[{i}]", bits=64) for i, d in enumerate(dims))
    if len(dims) > MAX_DIMS:
        raise ShapeError(f"{what} has {len(dims)} dimensions; ampx allows at most {MAX_DIMS}")
    return dims


def str_arg(value, what: str) -> bytes:
    """A string for a ``const char *`` (UTF-8, without NUL characters)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise InvalidArgumentError(f"{what} contains a NUL character")
    return value.encode("utf-8")
