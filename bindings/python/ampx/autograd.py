"""Backward passes, higher-order gradients (``grad``), grad mode and gradient
checkpointing."""
from __future__ import annotations

import ctypes
import itertools
import weakref
from typing import Callable

from ._args import bool_arg, int_arg
from ._lib import lib
from ._raw import (AMPX_SEGMENT_INIT, ampx_grad_ready_fn, ampx_segment_fn,
                   ampx_segment_release_fn, ampx_set_grad_ready_hook_release_fn)
from ._resource import keep_forever
from .context import Context, context_arg, default_context
from . import amp
from .errors import ArgumentTypeError, Error, InvalidArgumentError, Status
from .tensor import Tensor, handle_array, handle_of


def _retain_arg(retain_graph) -> int:
    """torch's ``retain_graph``: None (the value of create_graph) as -1, else 0 or 1."""
    return -1 if retain_graph is None else bool_arg(retain_graph, "retain_graph")


def backward(loss: Tensor, scaler=None, retain_graph: bool | None = None,
             create_graph: bool = False) -> None:
    """Backpropagates from ``loss``, a one-element tensor made by a recorded op.

    Gradients accumulate into every leaf that requires one (see
    ``Tensor.grad``). With a :class:`ampx.Scaler` the seed is its scale, so
    the gradients come out scaled, ready for ``scaler.unscale_``/``step``.

    ``retain_graph`` and ``create_graph`` are torch's (``ampx_backward_ex``):
    ``retain_graph=True`` keeps the tape for another backward over the same
    graph (default: the value of ``create_graph``); without it a second
    backward through the freed records raises :class:`ampx.OrderError`.
    ``create_graph=True`` computes the gradients with recorded ops, so each
    leaf's ``grad`` becomes a new tensor that can be differentiated again.
    The grad-ready hook and data-parallel reduction run only in a backward
    that does not retain the graph. An exception raised by a
    :func:`checkpoint` segment while it is run again, or by the grad-ready
    hook (:func:`set_grad_ready_hook`), is re-raised here.
    """
    if scaler is not None and not isinstance(scaler, amp.Scaler):
        raise ArgumentTypeError(f"scaler must be an ampx.Scaler, not {type(scaler).__name__}")
    handle = handle_of(loss, "loss")
    create = bool_arg(create_graph, "create_graph")
    retain = _retain_arg(retain_graph)
    state = loss.context._state
    segments = state.segments
    scaler_handle = None if scaler is None else scaler.handle
    try:
        if retain == -1 and not create:
            lib.ampx_backward(handle, scaler_handle)
        else:
            options = lib.ampx_backward_options_default()
            options.retain_graph, options.create_graph = retain, create
            lib.ampx_backward_ex(handle, scaler_handle, ctypes.byref(options))
    except Error as exc:
        failed = next((s for s in segments.values() if s.error is not None), None)
        if failed is None and state.grad_hook is not None and state.grad_hook.error is not None:
            failed = state.grad_hook
        if failed is not None:
            raise failed.take_error() from exc
        raise
    # The tape, with every checkpointed segment recorded on it, is gone --
    # unless it was retained, or create_graph freed only the records it ran
    # (a checkpointed segment among them fails such a backward).
    if retain != 1 and not create:
        segments.clear()


def _tensors(value, what: str, allow_none: bool = False) -> list:
    """A tensor or a sequence of tensors (and Nones where allowed) as a list."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (str, bytes)):
        raise ArgumentTypeError(f"{what} must be a tensor or a sequence of tensors, not "
                                f"{type(value).__name__}")
    try:
        items = list(value)
    except TypeError:
        raise ArgumentTypeError(f"{what} must be a tensor or a sequence of tensors, not "
                                f"{type(value).__name__}") from None
    for i, item in enumerate(items):
        if not (isinstance(item, Tensor) or (allow_none and item is None)):
            kind = "an ampx.Tensor or None" if allow_none else "an ampx.Tensor"
            raise ArgumentTypeError(f"{what}[{i}] must be {kind}, not {type(item).__name__}")
    return items


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs``, as
    ``torch.autograd.grad`` (``ampx_grad``).

    ``outputs`` and ``inputs`` are tensors or sequences of tensors; inputs
    may be leaves that require grad or tensors recorded ops made (then the
    gradient flowing into that tensor). ``grad_outputs`` gives the vector
    of each output's vector-Jacobian product: None, or one tensor (or None)
    per output, of that output's shape and dtype; None stands for ones and
    is allowed only for one-element outputs (a non-scalar output without one
    raises :class:`ampx.ShapeError`).

    Returns a tuple with one new tensor per input, of its shape and dtype
    (held as op outputs are), or None for an input that no output reaches
    when ``allow_unused`` (without it, such an input raises
    :class:`ampx.InvalidArgumentError` naming it).
    ``create_graph=True`` records the computation of the gradients, so they
    can be differentiated again (to any order); ``retain_graph`` (default:
    ``create_graph``) keeps the records this call ran for another backward.
    Nothing accumulates into ``Tensor.grad``, and no grad-ready hook or
    data-parallel reduction runs. A failed call changes nothing.
    """
    outs = _tensors(outputs, "outputs")
    ins = _tensors(inputs, "inputs")
    _, out_handles = handle_array(outs, "outputs")
    _, in_handles = handle_array(ins, "inputs")
    seed_handles = None
    if grad_outputs is not None:
        seeds = _tensors(grad_outputs, "grad_outputs", allow_none=True)
        if len(seeds) != len(outs):
            raise InvalidArgumentError(f"grad_outputs has {len(seeds)} entries for "
                                       f"{len(outs)} outputs; give one (or None) per output")
        seed_handles = (ctypes.c_void_p * max(len(seeds), 1))(
            *[handle_of(t, f"grad_outputs[{i}]", optional=True) for i, t in enumerate(seeds)])
    options = lib.ampx_grad_options_default()
    options.create_graph = bool_arg(create_graph, "create_graph")
    options.retain_graph = _retain_arg(retain_graph)
    options.allow_unused = bool_arg(allow_unused, "allow_unused")
    results = (ctypes.c_void_p * max(len(ins), 1))()
    lib.ampx_grad(out_handles, len(outs), seed_handles, in_handles, len(ins),
                  ctypes.byref(options), results)
    context = outs[0].context
    return tuple(Tensor._from_op(results[i], context) if results[i] else None
                 for i in range(len(ins)))


def no_grad(context: Context | None = None):
    """``with ampx.no_grad(ctx):`` records nothing (``Context.no_grad``)."""
    return (default_context() if context is None else context).no_grad()


class _Segment:
    """A Python callable run by ampx_checkpoint_segment, now and again in backward."""

    def __init__(self, fn: Callable, context: Context, output_count: int):
        self.fn = fn
        self.context = context
        self.output_count = output_count
        self.error: BaseException | None = None
        self.outputs: tuple = ()

    def take_error(self) -> BaseException:
        error, self.error = self.error, None
        return error

    def run(self, inputs, input_count: int, outputs) -> int:
        state = self.context._state
        args = [Tensor._borrowed(inputs[i], self.context) for i in range(input_count)]
        # ampx opens a scope around the segment: its op outputs belong to it.
        state.scope_depth += 1
        try:
            result = self.fn(*args)
        finally:
            state.scope_depth -= 1
        results = (result,) if isinstance(result, Tensor) else result
        if not isinstance(results, (tuple, list)) or len(results) != self.output_count:
            raise InvalidArgumentError(
                f"the checkpointed function must return {self.output_count} tensor(s) "
                f"(num_outputs), not {result!r}")
        handles = [handle_of(t, f"output {i} of the checkpointed function")
                   for i, t in enumerate(results)]
        # Tensors the segment made outside ops have no other owner: keep them
        # until ampx has taken its references.
        self.outputs = tuple(results)
        for i, h in enumerate(handles):
            outputs[i] = h
        return Status.OK


_live_segments: "weakref.WeakValueDictionary[int, _Segment]" = weakref.WeakValueDictionary()
_segment_tokens = itertools.count(1)
# The strong references ampx holds through a segment's user_data: each is
# dropped by _release_segment, which ampx calls exactly once, when its
# record of the segment is gone (ampx_checkpoint_segment in ampx.h).
_held_segments: dict = {}


@keep_forever
@ampx_segment_release_fn
def _release_segment(user_data):
    _held_segments.pop(user_data, None)


@keep_forever
@ampx_segment_fn
def _run_segment(user_data, inputs, input_count, outputs, output_count):
    segment = _live_segments.get(user_data)
    if segment is None:
        return Status.INTERNAL
    try:
        return segment.run(inputs, input_count, outputs)
    except BaseException as exc:  # noqa: B902  (nothing may unwind into C)
        segment.error = exc
        return exc.status if isinstance(exc, Error) else Status.INVALID_ARGUMENT


def checkpoint(fn: Callable, *inputs: Tensor, num_outputs: int = 1,
               context: Context | None = None):
    """Gradient checkpointing (``torch.utils.checkpoint``) of ``fn(*inputs)``.

    ``fn`` computes ``num_outputs`` tensors from the input tensors with ampx
    ops; it runs now without keeping its intermediates, and again when
    backward reaches it, so it must be deterministic. Parameters it uses
    (e.g. through a closure) receive their gradients as usual. Returns one
    Tensor, or a tuple when ``num_outputs > 1``. ``context`` is needed only
    when there are no inputs. An exception raised by ``fn`` propagates (from
    here, or from the backward call that ran it again).
    """
    if not callable(fn):
        raise ArgumentTypeError(f"fn must be callable, not {type(fn).__name__}")
    count = int_arg(num_outputs, "num_outputs", minimum=1)
    tensors, handles = handle_array(inputs, "inputs")
    if context is None and not tensors:
        raise InvalidArgumentError("checkpoint without inputs needs context=")
    context = context_arg(context, lambda: tensors[0].context)
    segment = _Segment(fn, context, count)
    token = next(_segment_tokens)
    _live_segments[token] = segment
    context._state.segments[token] = segment
    _held_segments[token] = segment
    spec = AMPX_SEGMENT_INIT()
    spec.fn, spec.user_data, spec.release = _run_segment, token, _release_segment
    outputs = (ctypes.c_void_p * count)()
    try:
        lib.ampx_checkpoint_segment(context.handle, ctypes.byref(spec), handles, len(tensors),
                                    outputs, count)
    except Error as exc:
        context._state.segments.pop(token, None)
        if segment.error is not None:
            raise segment.take_error() from exc
        raise
    finally:
        segment.outputs = ()
    if not context.grad_enabled:
        context._state.segments.pop(token, None)  # nothing recorded it
    results = tuple(Tensor._from_op(outputs[i], context) for i in range(count))
    return results[0] if count == 1 else results


class _GradReadyHook:
    """A Python callable installed by set_grad_ready_hook."""

    def __init__(self, fn: Callable, context: Context):
        self.fn = fn
        # Weak: the registry below holds this object until ampx releases it,
        # which happens when the Context goes -- a strong reference would
        # keep the Context alive forever.
        self.context = weakref.ref(context)
        self.error: BaseException | None = None

    def take_error(self) -> BaseException:
        error, self.error = self.error, None
        return error


# Hooks ampx holds, by token, until it calls _release_hook with the token.
_live_hooks: dict = {}
_hook_tokens = itertools.count(1)


@keep_forever
@ampx_grad_ready_fn
def _run_hook(user_data, param):
    hook = _live_hooks.get(user_data)
    context = hook.context() if hook is not None else None
    if context is None:
        return Status.INTERNAL
    try:
        hook.fn(Tensor._borrowed(param, context))
        return Status.OK
    except BaseException as exc:  # noqa: B902  (nothing may unwind into C)
        hook.error = exc
        return exc.status if isinstance(exc, Error) else Status.INVALID_ARGUMENT


@keep_forever
@ampx_set_grad_ready_hook_release_fn
def _release_hook(user_data):
    _live_hooks.pop(user_data, None)


def set_grad_ready_hook(fn: Callable | None, context: Context | None = None) -> None:
    """Calls ``fn(param)`` during each backward pass as soon as ``param.grad``
    is final for that pass (``ampx_set_grad_ready_hook``); None removes it.

    Every leaf that received a gradient is reported once per backward, in
    the order backward finishes them (parameters of a checkpointed segment
    after its recompute), so communication can overlap the rest of the pass.
    ``fn`` may read and copy tensors and run ops (they are not recorded);
    it must not call backward or grad_ready. An exception it raises stops
    the backward pass and is re-raised by :func:`backward` (or
    :func:`grad_ready`). Replaces the context's previous hook.
    """
    if fn is not None and not callable(fn):
        raise ArgumentTypeError(f"fn must be callable or None, not {type(fn).__name__}")
    context = context_arg(context, default_context)
    if fn is None:
        lib.ampx_set_grad_ready_hook(context.handle, ampx_grad_ready_fn(), None,
                                     ampx_set_grad_ready_hook_release_fn())
        context._state.grad_hook = None
        return
    handle = context.handle  # raises for a closed Context before ampx owns anything
    hook = _GradReadyHook(fn, context)
    token = next(_hook_tokens)
    _live_hooks[token] = hook
    # ampx owns the token from here: it calls _release_hook exactly once,
    # also when this call fails.
    lib.ampx_set_grad_ready_hook(handle, _run_hook, token, _release_hook)
    context._state.grad_hook = hook


def grad_ready(param: Tensor) -> None:
    """Tells the grad-ready hook that ``param.grad`` is final for this step
    (``ampx_grad_ready``), for programs that compute gradients themselves."""
    handle = handle_of(param, "param")
    hook = param.context._state.grad_hook
    try:
        lib.ampx_grad_ready(handle)
    except Error as exc:
        if hook is not None and hook.error is not None:
            raise hook.take_error() from exc
        raise
