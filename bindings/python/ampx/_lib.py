"""Loading libampx and declaring its C functions for ctypes.

The declarations themselves (every function's restype and argtypes, every
struct, callback type and constant of ampx.h) are generated from the header
into :mod:`ampx._raw`; this module loads the library, has ``_raw.declare``
set them, and makes the functions that return an ``ampx_status`` raise
:class:`ampx.Error` on their own. Everything else in the package calls the
functions through :data:`lib`. A library that lacks a function of the
header fails the import, naming it.

The library is found, in this order:

1. at the path in the environment variable ``AMPX_LIBRARY`` (an override:
   when it does not load, importing fails and nothing else is tried);
2. inside this package (``libampx.so.0``, else ``libampx.so``, next to this
   file), where ``pip install bindings/python`` puts the one it builds: when
   that file exists but does not load, importing fails too, rather than
   quietly picking up another libampx;
3. by ``ctypes.util.find_library("ampx")`` and under the usual file names
   (``libampx.so``, ``libampx.so.0``, ``libampx.dylib``, ``ampx.dll``) on the
   loader's search path (a package used from the source tree).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

from . import _raw
from .errors import Status, error_for

#: The ABI major version this package is written for.
ABI_MAJOR = _raw.AMPX_VERSION_MAJOR


def _load() -> ctypes.CDLL:
    path = os.environ.get("AMPX_LIBRARY")
    if path:
        try:
            return ctypes.CDLL(path)
        except OSError as exc:
            raise ImportError(f"ampx: cannot load AMPX_LIBRARY={path!r}: {exc}") from exc
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libampx.so.0", "libampx.so"):
        bundled = os.path.join(here, name)
        if os.path.exists(bundled):
            try:
                return ctypes.CDLL(bundled)
            except OSError as exc:
                raise ImportError(f"ampx: cannot load the package's own library {bundled!r}: "
                                  f"{exc} (reinstall the package, or set AMPX_LIBRARY to "
                                  f"another libampx.so)") from exc
    candidates = [ctypes.util.find_library("ampx"), "libampx.so", "libampx.so.0",
                  "libampx.dylib", "ampx.dll"]
    for name in candidates:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise ImportError("ampx: libampx was not found; install the package with "
                      "`pip install bindings/python` (which builds it in), set AMPX_LIBRARY "
                      "to the full path of libampx.so, or put it on the loader's search path")


# ---- functions ------------------------------------------------------------------------

# ampx_last_status returns an earlier call's status, not the outcome of its
# own call: it must not raise. (ampx_set_error, which returns the status it
# is given, would need the same exception; the package does not call it.)
_STATUS_VALUES = frozenset({"ampx_last_status"})


def _check_status(result, func, args):
    """ctypes errcheck of every ampx_status function: raises on non-OK."""
    if result != Status.OK:
        raise error_for(result, lib.ampx_last_error().decode("utf-8", "replace"))
    return result


def _declare(library: ctypes.CDLL) -> ctypes.CDLL:
    try:
        _raw.declare(library)
    except AttributeError as exc:
        raise ImportError(f"ampx: {exc}") from None
    for name in _raw.RETURNS_STATUS - _STATUS_VALUES:
        getattr(library, name).errcheck = _check_status
    return library


cdll = _load()
#: The C functions, named as in ampx.h; those returning a status raise
#: :class:`ampx.Error` instead.
lib = _declare(cdll)

if lib.ampx_version() // 10000 != ABI_MAJOR:
    raise ImportError(f"ampx: the loaded libampx is version "
                      f"{lib.ampx_version_string().decode()}, but this binding needs ABI "
                      f"{ABI_MAJOR}.x")
