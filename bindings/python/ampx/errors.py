"""Status codes and the exceptions that carry them.

Every ampx call that returns a status other than ``AMPX_OK`` raises an
:class:`Error` whose ``status`` is that code and whose ``message`` is
``ampx_last_error()``. Each status has its own subclass, which also derives
from the closest built-in exception where one fits (so a shape mismatch can
be caught as ``ampx.ShapeError``, ``ampx.Error`` or ``ValueError``). Checks
the binding makes itself (a closed object, an argument of the wrong Python
type) raise the same classes.
"""
from __future__ import annotations

import enum

from . import _raw


class Status(enum.IntEnum):
    """``ampx_status``: the pinned status codes of ampx.h."""

    OK = _raw.AMPX_OK
    INVALID_ARGUMENT = _raw.AMPX_ERR_INVALID_ARGUMENT
    SHAPE = _raw.AMPX_ERR_SHAPE
    DTYPE = _raw.AMPX_ERR_DTYPE
    DEVICE = _raw.AMPX_ERR_DEVICE
    OUT_OF_MEMORY = _raw.AMPX_ERR_OUT_OF_MEMORY
    NO_DEVICE = _raw.AMPX_ERR_NO_DEVICE
    NOT_SUPPORTED = _raw.AMPX_ERR_NOT_SUPPORTED
    ORDER = _raw.AMPX_ERR_ORDER
    STALE_HANDLE = _raw.AMPX_ERR_STALE_HANDLE
    IO = _raw.AMPX_ERR_IO
    CORRUPT = _raw.AMPX_ERR_CORRUPT
    INTERNAL = _raw.AMPX_ERR_INTERNAL


class Error(Exception):
    """An ampx call failed.

    Attributes:
        status: the :class:`Status` (a plain ``int`` for a code this binding
            does not know).
        message: what went wrong, as ``ampx_last_error()`` worded it (or as
            the binding's own check worded it).
    """

    status: int = Status.INTERNAL

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            try:
                self.status = Status(status)
            except ValueError:
                self.status = status
        self.message = message

    def __str__(self) -> str:
        if isinstance(self.status, Status):
            return f"AMPX_ERR_{self.status.name}: {self.message}"
        return f"status {self.status}: {self.message}"


class InvalidArgumentError(Error, ValueError):
    """AMPX_ERR_INVALID_ARGUMENT: a NULL pointer, a value out of range."""
    status = Status.INVALID_ARGUMENT


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong Python type (raised by the binding itself)."""


class ShapeError(Error, ValueError):
    """AMPX_ERR_SHAPE: shapes, element or byte counts disagree."""
    status = Status.SHAPE


class DTypeError(Error, TypeError):
    """AMPX_ERR_DTYPE: a data type not allowed here."""
    status = Status.DTYPE


class DeviceError(Error):
    """AMPX_ERR_DEVICE: objects of different contexts mixed, or a device failure."""
    status = Status.DEVICE


class OutOfMemoryError(Error, MemoryError):
    """AMPX_ERR_OUT_OF_MEMORY: an allocation failed; nothing was changed."""
    status = Status.OUT_OF_MEMORY


class NoDeviceError(Error):
    """AMPX_ERR_NO_DEVICE: the device does not exist or has no backend."""
    status = Status.NO_DEVICE


class NotSupportedError(Error, NotImplementedError):
    """AMPX_ERR_NOT_SUPPORTED: valid, but not implemented for this case."""
    status = Status.NOT_SUPPORTED


class OrderError(Error):
    """AMPX_ERR_ORDER: calls made in an order that is not allowed."""
    status = Status.ORDER


class StaleHandleError(Error):
    """AMPX_ERR_STALE_HANDLE: an object that was already released (closed)."""
    status = Status.STALE_HANDLE


class FileError(Error, OSError):
    """AMPX_ERR_IO: a file could not be read or written."""
    status = Status.IO


class CorruptError(Error):
    """AMPX_ERR_CORRUPT: data that fails validation."""
    status = Status.CORRUPT


class InternalError(Error):
    """AMPX_ERR_INTERNAL: a bug in ampx."""
    status = Status.INTERNAL


_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, ShapeError, DTypeError, DeviceError, OutOfMemoryError, NoDeviceError,
    NotSupportedError, OrderError, StaleHandleError, FileError, CorruptError, InternalError)}


def error_for(status: int, message: str) -> Error:
    """The exception for a failed call's status and message."""
    return _BY_STATUS.get(status, Error)(message, status)
