"""DLPack capsules (the ``__dlpack__`` protocol) through ``ctypes.pythonapi``.

A producer hands out a ``PyCapsule`` named ``"dltensor"`` holding a
``DLManagedTensor *``; the consumer that takes ownership renames it to
``"used_dltensor"``. The capsule's destructor calls the DLPack deleter only
when nobody consumed it.
"""
from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_uint8,
                    c_uint16, c_uint64, c_void_p, py_object)

from ._resource import keep_forever
from .errors import ArgumentTypeError, InvalidArgumentError, NotSupportedError


# DLPack's own structs (dlpack.h, version 0.6+, which ampx.h only names by
# pointer): the capsule destructor below calls the deleter itself.
class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)),
                ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", CFUNCTYPE(None, POINTER(DLManagedTensor)))]

# The names must outlive every capsule that carries them: module constants.
DLTENSOR = b"dltensor"
USED_DLTENSOR = b"used_dltensor"
VERSIONED_DLTENSOR = b"dltensor_versioned"


def _capi(name: str, restype, *argtypes):
    # Own function objects, so that argtypes set elsewhere on ctypes.pythonapi
    # cannot interfere.
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_new = _capi("PyCapsule_New", py_object, c_void_p, c_char_p, c_void_p)
_capsule_is_valid = _capi("PyCapsule_IsValid", c_int, py_object, c_char_p)
_capsule_get_pointer = _capi("PyCapsule_GetPointer", c_void_p, py_object, c_char_p)
_capsule_set_name = _capi("PyCapsule_SetName", c_int, py_object, c_char_p)
# The destructor receives the dying capsule: pass it on as a bare pointer.
_dying_is_valid = _capi("PyCapsule_IsValid", c_int, c_void_p, c_char_p)
_dying_get_pointer = _capi("PyCapsule_GetPointer", c_void_p, c_void_p, c_char_p)


def _delete_managed(address: int) -> None:
    managed = ctypes.cast(address, POINTER(DLManagedTensor))
    if managed.contents.deleter:
        managed.contents.deleter(managed)


@keep_forever
@ctypes.CFUNCTYPE(None, c_void_p)
def _capsule_destructor(capsule):
    # Limitation: a consumer that drops the capsule while its own exception
    # is pending (NumPy does for a dtype it cannot import, e.g. bf16) makes
    # this callback fail before it runs -- Python code cannot run with an
    # exception set -- so that one export leaks and ctypes prints a warning.
    if _dying_is_valid(capsule, DLTENSOR):
        _delete_managed(_dying_get_pointer(capsule, DLTENSOR))


def capsule_from_managed(address: int):
    """Wraps a DLManagedTensor pointer (owned by the capsule from now on)."""
    try:
        return _capsule_new(address, DLTENSOR, ctypes.cast(_capsule_destructor, c_void_p))
    except BaseException:
        _delete_managed(address)
        raise


def managed_from_capsule(capsule) -> int:
    """The DLManagedTensor pointer of an unconsumed ``"dltensor"`` capsule."""
    if type(capsule).__name__ != "PyCapsule":
        raise ArgumentTypeError(f"expected an object with __dlpack__ or a DLPack capsule, not "
                                f"{type(capsule).__name__}")
    if _capsule_is_valid(capsule, DLTENSOR):
        return _capsule_get_pointer(capsule, DLTENSOR)
    if _capsule_is_valid(capsule, USED_DLTENSOR):
        raise InvalidArgumentError("this DLPack capsule was already consumed")
    if _capsule_is_valid(capsule, VERSIONED_DLTENSOR):
        raise NotSupportedError("versioned DLPack capsules (DLPack 1.x) are not supported; "
                                "ask the producer for an unversioned one")
    raise ArgumentTypeError("this capsule is not a DLPack tensor")


def mark_consumed(capsule) -> None:
    """Renames a capsule whose tensor a consumer now owns."""
    _capsule_set_name(capsule, USED_DLTENSOR)
