"""Contexts: a device, its allocator, grad mode and scopes."""
from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Iterator, NamedTuple

from ._args import bool_arg, enum_arg, int_arg
from ._lib import lib
from ._raw import AMPX_MEMORY_STATS_INIT
from ._resource import Resource, read
from .errors import ArgumentTypeError
from .types import Device


class MemoryStats(NamedTuple):
    """``ampx_memory_stats``: bytes held by a context's tensors."""

    current_bytes: int
    peak_bytes: int
    allocation_count: int
    reserved_bytes: int


class _ContextState:
    """What the binding tracks per context; shared with the context's finalizer.

    ``scope_depth`` counts the scopes this binding opened and has not closed
    (op outputs are owned by the innermost open scope, so a Python tensor
    must add its own reference while one is open). ``segments`` holds the
    callables of :func:`ampx.checkpoint` until a backward pass has run them.
    ``grad_hook`` is the hook :func:`ampx.set_grad_ready_hook` installed (for
    its exception), or None.
    """

    __slots__ = ("scope_depth", "segments", "grad_hook")

    def __init__(self):
        self.scope_depth = 0
        self.segments: dict = {}
        self.grad_hook = None


def _release_context(handle: int, state: _ContextState) -> None:
    while state.scope_depth > 0:
        state.scope_depth -= 1
        lib.ampx_scope_pop(handle)
    lib.ampx_context_release(handle)


class Context(Resource):
    """A device (the CPU or one CUDA device), its allocator and its autograd state.

    Args:
        device: ``"cpu"`` or ``"cuda"`` (or a :class:`Device`).
        device_index: the CUDA device ordinal.
        num_threads: CPU worker threads; 0 = one per hardware thread.
        seed: seed of the context's random streams (dropout).
        cuda_stream: a ``cudaStream_t`` (as an int) for a CUDA context to adopt;
            it must outlive the context.

    Tensors, optimizers, scalers and autocast policies keep their context
    alive; :meth:`close` only drops this object's own reference. A context
    and everything made from it may be used by one thread at a time.
    """

    _kind = "context"

    def __init__(self, device="cpu", device_index: int = 0, *, num_threads: int = 0,
                 seed: int = 0, cuda_stream: int | None = None):
        options = lib.ampx_context_options_default()
        options.device_type = enum_arg(Device, device, "device")
        options.device_index = int_arg(device_index, "device_index")
        options.num_threads = int_arg(num_threads, "num_threads")
        options.seed = int_arg(seed, "seed", bits=64, unsigned=True)
        if cuda_stream is not None:
            options.cuda_stream = int_arg(cuda_stream, "cuda_stream", bits=64, unsigned=True)
        handle = read(lib.ampx_context_create, ctypes.c_void_p, ctypes.byref(options))
        self._state = _ContextState()
        super().__init__(handle, _release_context, self._state)

    def _describe(self) -> str:
        device, index = self.device
        return f"{device.name.lower()}:{index}"

    @property
    def device(self) -> tuple[Device, int]:
        """The device type and index (``ampx_context_device``)."""
        device_type, index = ctypes.c_int32(), ctypes.c_int32()
        lib.ampx_context_device(self.handle, ctypes.byref(device_type), ctypes.byref(index))
        return Device(device_type.value), index.value

    def synchronize(self) -> None:
        """Waits for all work enqueued on the device (a no-op on the CPU)."""
        lib.ampx_context_synchronize(self.handle)

    def memory_stats(self) -> MemoryStats:
        """Memory held by the context's tensors (``ampx_memory_stats_get``)."""
        stats = AMPX_MEMORY_STATS_INIT()
        lib.ampx_memory_stats_get(self.handle, ctypes.byref(stats))
        return MemoryStats(stats.current_bytes, stats.peak_bytes, stats.allocation_count,
                           stats.reserved_bytes)

    def reset_peak_memory(self) -> None:
        """Sets the peak to the current byte count (``ampx_memory_reset_peak``)."""
        lib.ampx_memory_reset_peak(self.handle)

    def set_tf32(self, allowed: bool) -> bool:
        """Lets f32 matrix products and convolutions run in TF32 on CUDA (as
        torch's allow_tf32 flags; the CPU has none); returns the former setting."""
        return bool(read(lib.ampx_context_set_tf32, ctypes.c_int32, self.handle,
                         bool_arg(allowed, "allowed")))

    @property
    def allow_tf32(self) -> bool:
        """Whether f32 products and convolutions may run in TF32."""
        previous = self.set_tf32(False)
        self.set_tf32(previous)
        return previous

    @allow_tf32.setter
    def allow_tf32(self, allowed: bool) -> None:
        self.set_tf32(allowed)

    def set_grad_enabled(self, enabled: bool) -> bool:
        """Turns recording of ops for backward on or off; returns the former setting."""
        return bool(read(lib.ampx_set_grad_enabled, ctypes.c_int32, self.handle,
                         bool_arg(enabled, "enabled")))

    @property
    def grad_enabled(self) -> bool:
        """Whether ops are recorded for backward on this context now."""
        previous = self.set_grad_enabled(True)
        self.set_grad_enabled(previous)
        return previous

    @contextlib.contextmanager
    def no_grad(self) -> Iterator["Context"]:
        """A ``with`` block in which nothing is recorded for backward."""
        previous = self.set_grad_enabled(False)
        try:
            yield self
        finally:
            self.set_grad_enabled(previous)

    @contextlib.contextmanager
    def scope(self) -> Iterator["Context"]:
        """A ``with`` block that owns the op outputs made in it (``ampx_scope_push/pop``).

        Python tensors keep their own reference, so a tensor still referenced
        after the block stays valid; what the scope releases at the end are
        the intermediates nothing in Python holds any more, with their tape
        records.
        """
        handle = self.handle
        lib.ampx_scope_push(handle)
        self._state.scope_depth += 1
        depth = self._state.scope_depth
        try:
            yield self
        finally:
            # close() pops every open scope itself; pop only what is still open.
            if not self.closed and self._state.scope_depth == depth:
                self._state.scope_depth -= 1
                lib.ampx_scope_pop(handle)


_default_context: Context | None = None
_default_lock = threading.Lock()


def context_arg(context, default=None) -> Context:
    """``context``, checked to be a :class:`Context`; None stands for
    ``default()`` where a default is given."""
    if context is None and default is not None:
        context = default()
    if not isinstance(context, Context):
        raise ArgumentTypeError(f"context must be an ampx.Context, not {type(context).__name__}")
    return context


def default_context() -> Context:
    """The CPU context used where a function is given no context (made on first use)."""
    global _default_context
    with _default_lock:
        if _default_context is None or _default_context.closed:
            _default_context = Context()
        return _default_context

