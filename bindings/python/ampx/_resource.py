"""The base class of every Python object that owns a C handle, and the
lifetime rule of the callbacks handed to C."""
from __future__ import annotations

import ctypes
import weakref

from .errors import StaleHandleError


class Resource:
    """Owns one reference to an ampx object.

    The reference is dropped by :meth:`close`, or when the Python object is
    garbage collected (or at interpreter exit), whichever comes first; ampx
    allows its objects to be released in any order. A closed object raises
    :class:`ampx.StaleHandleError` when used. ``with obj:`` closes it at the
    end of the block.
    """

    _kind = "object"

    def __init__(self, handle: int, release, *release_args):
        self._handle = handle
        self._finalizer = weakref.finalize(self, release, handle, *release_args)

    @property
    def handle(self) -> int:
        """The C handle, as an integer (for passing to other C code; borrowed)."""
        if not self._finalizer.alive:
            raise StaleHandleError(f"this {self._kind} was closed")
        return self._handle

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Drops this object's reference now. Further calls do nothing."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(<closed>)" if self.closed else f"{name}({self._describe()})"

    def _describe(self) -> str:
        """What ``repr`` shows of an open object, between the parentheses."""
        return ""


def read(function, ctype, *args):
    """The value that ``function``, an ampx function writing one ``ctype``
    through its last parameter (a getter, or a constructor writing a new
    handle as a ``c_void_p``), gives for ``args``."""
    out = ctype()
    function(*args, ctypes.byref(out))
    return out.value


def keep_forever(callback):
    """Makes a ctypes callback immortal and returns it.

    C code may call it at any time, late in interpreter shutdown included
    (e.g. a DLPack consumer releasing a tensor), after module globals are
    gone: one deliberate reference that is never dropped.
    """
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(callback))
    return callback
