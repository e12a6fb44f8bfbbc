"""Mixed precision: autocast policies and the dynamic loss scaler."""
from __future__ import annotations

import ctypes
from typing import NamedTuple

from ._args import bool_arg, enum_arg, float_arg, int_arg, str_arg
from ._lib import lib
from ._raw import (AMPX_FP8_DEFAULT_MIN_GEMM_SIZE, AMPX_FP8_STATS_INIT,
                   AMPX_SCALER_COUNTERS_INIT, ampx_scaler_state)
from ._resource import Resource, read
from .context import Context, context_arg
from .errors import ArgumentTypeError, InvalidArgumentError, OrderError
from .optim import Optimizer
from .tensor import Tensor, handle_of
from .types import DType, OpClass


class Autocast(Resource):
    """An autocast policy (``torch.autocast``); ``with policy:`` makes ops follow it.

    Args:
        context: the context whose ops the policy governs.
        dtype: ``"f16"`` (default) or ``"bf16"``: the dtype of "lower
            precision" ops (matmul, linear).
        enabled: a disabled policy changes nothing.
        cache: cache casts of F32 leaves that require grad for the life of
            the outermost region.

    A policy can be entered many times, and regions nest; the ``with``
    blocks of different policies must nest properly.
    """

    _kind = "autocast policy"

    def __init__(self, context: Context, dtype="f16", *, enabled: bool = True,
                 cache: bool = True):
        context = context_arg(context)
        options = lib.ampx_autocast_options_default()
        options.dtype = enum_arg(DType, dtype, "dtype")
        options.enabled = bool_arg(enabled, "enabled")
        options.cache = bool_arg(cache, "cache")
        super().__init__(read(lib.ampx_autocast_create, ctypes.c_void_p, context.handle,
                              ctypes.byref(options)), lib.ampx_autocast_release)
        self._context = context
        self._depth = 0

    def __enter__(self) -> "Autocast":
        lib.ampx_autocast_enter(self.handle)
        self._depth += 1
        return self

    def __exit__(self, *exc_info) -> None:
        lib.ampx_autocast_exit(self.handle)
        self._depth -= 1

    def close(self) -> None:
        """Releases the policy; not allowed inside its ``with`` block."""
        if self._depth:
            raise OrderError("an autocast policy cannot be closed inside its with block")
        super().close()

    @property
    def context(self) -> Context:
        """The policy's context."""
        return self._context

    def set_op_class(self, op: str, op_class) -> None:
        """Overrides the precision class of the op named ``op`` (e.g. "softmax")."""
        lib.ampx_autocast_set_op_class(self.handle, str_arg(op, "op"),
                                       enum_arg(OpClass, op_class, "op_class"))

    def op_class(self, op: str) -> OpClass:
        """The class the op named ``op`` gets under this policy."""
        return OpClass(read(lib.ampx_autocast_op_class, ctypes.c_int32, self.handle,
                            str_arg(op, "op")))

    def cache_stats(self) -> tuple[int, int]:
        """(hits, misses) of the cast cache since the policy was created."""
        hits, misses = ctypes.c_int64(), ctypes.c_int64()
        lib.ampx_autocast_cache_stats(self.handle, ctypes.byref(hits), ctypes.byref(misses))
        return hits.value, misses.value

    def set_fp8(self, recipe, min_gemm_size: int = AMPX_FP8_DEFAULT_MIN_GEMM_SIZE) -> None:
        """Makes this an FP8 policy with ``recipe`` (an :class:`ampx.Fp8Recipe`;
        the policy keeps a reference), or a plain one again with None.

        Linear and matmul with m * n * k >= ``min_gemm_size`` then run in
        FP8 (E4M3 forward, the recipe's format for gradients); smaller ones
        stay in the policy's dtype. Raises :class:`ampx.NotSupportedError`
        on a device without FP8 products (the policy stays as it was).
        """
        from .fp8 import recipe_handle
        lib.ampx_autocast_set_fp8(self.handle, recipe_handle(recipe),
                                  int_arg(min_gemm_size, "min_gemm_size", bits=64))
        self._fp8_recipe = recipe

    @property
    def fp8_recipe(self):
        """The recipe given to :meth:`set_fp8` (None for a plain policy)."""
        return getattr(self, "_fp8_recipe", None)

    def fp8_stats(self):
        """An :class:`ampx.Fp8Stats`: products run in FP8, fallbacks to the
        policy's dtype and the last fallback's reason."""
        from .fp8 import Fp8Stats
        stats = AMPX_FP8_STATS_INIT()
        lib.ampx_autocast_fp8_stats(self.handle, ctypes.byref(stats))
        return Fp8Stats(stats.fp8_products, stats.fallbacks,
                        "" if stats.last_fallback is None else stats.last_fallback.decode())


class ScalerCounters(NamedTuple):
    """``ampx_scaler_counters``."""

    updates: int
    skipped: int
    backoffs: int
    growths: int


_STATE_FIELDS = ("scale", "growth_factor", "backoff_factor", "growth_interval",
                 "growth_tracker", "hysteresis", "hysteresis_left", "min_scale", "max_scale",
                 "consecutive_hysteresis", "clamp_to_max_scale")


def _optimizer_handle(optimizer) -> int:
    if not isinstance(optimizer, Optimizer):
        raise ArgumentTypeError(f"optimizer must be an ampx optimizer, not "
                                f"{type(optimizer).__name__}")
    return optimizer.handle


class Scaler(Resource):
    """A dynamic loss scaler (``torch.amp.GradScaler``).

    Args (``None`` keeps the library default shown):
        context: the context of the losses and gradients.
        init_scale: 65536.
        growth_factor: 2.0.
        backoff_factor: 0.5.
        growth_interval: 2000.
        enabled: True; a disabled scaler is a pass-through (scale 1).
        hysteresis: 1 (back off at every overflow, as torch); N: at the Nth
            overflow since the allowance was last restored, and at every
            further one; the allowance is restored when a growth interval
            completes (Megatron-LM, DeepSpeed), so the N need not be
            consecutive.
        min_scale, max_scale: 0 (no bound). A growth above max_scale is not
            taken (the scale stays a power-of-two multiple).
        consecutive_hysteresis: False; True: every clean update restores the
            allowance (only N consecutive overflows back off).
        clamp_to_max_scale: False; True: a growth above max_scale sets the
            scale to max_scale.

    The loop is ``backward(loss, scaler)`` (or ``scaler.scale(loss)``),
    ``unscale_(opt)`` (optional, before clipping), ``step(opt)``,
    ``update()``; out-of-order calls raise :class:`ampx.OrderError`.
    """

    _kind = "scaler"

    def __init__(self, context: Context, *, init_scale: float | None = None,
                 growth_factor: float | None = None, backoff_factor: float | None = None,
                 growth_interval: int | None = None, enabled: bool = True,
                 hysteresis: int | None = None, min_scale: float | None = None,
                 max_scale: float | None = None, consecutive_hysteresis: bool = False,
                 clamp_to_max_scale: bool = False):
        context = context_arg(context)
        options = lib.ampx_scaler_options_default()
        for field, value in (("init_scale", init_scale), ("growth_factor", growth_factor),
                             ("backoff_factor", backoff_factor), ("min_scale", min_scale),
                             ("max_scale", max_scale)):
            if value is not None:
                setattr(options, field, float_arg(value, field))
        if growth_interval is not None:
            options.growth_interval = int_arg(growth_interval, "growth_interval")
        if hysteresis is not None:
            options.hysteresis = int_arg(hysteresis, "hysteresis")
        options.enabled = bool_arg(enabled, "enabled")
        options.consecutive_hysteresis = bool_arg(consecutive_hysteresis,
                                                  "consecutive_hysteresis")
        options.clamp_to_max_scale = bool_arg(clamp_to_max_scale, "clamp_to_max_scale")
        super().__init__(read(lib.ampx_scaler_create, ctypes.c_void_p, context.handle,
                              ctypes.byref(options)), lib.ampx_scaler_release)
        self._context = context

    @property
    def context(self) -> Context:
        """The scaler's context."""
        return self._context

    def attach(self, optimizer: Optimizer) -> None:
        """Ties ``optimizer`` to this scaler before its first use."""
        lib.ampx_scaler_attach(self.handle, _optimizer_handle(optimizer))

    def scale(self, loss: Tensor) -> Tensor:
        """A new F32 tensor holding ``loss * scale``; recorded when ``loss``
        requires grad, so :func:`ampx.grad` can differentiate it."""
        return Tensor(read(lib.ampx_scaler_scale_loss, ctypes.c_void_p, self.handle,
                           handle_of(loss, "loss")), self._context)

    def unscale_tensor(self, x: Tensor) -> Tensor:
        """``x * (1 / scale)`` with the current scale, taken on the device (no
        host read), as a new tensor of x's shape and dtype owned like an op
        output (``ampx_scaler_unscale_tensor``).

        Recorded: its gradient is the incoming one times the same 1/scale, so
        gradients of :meth:`scale`'s output taken with
        ``ampx.grad(..., create_graph=True)`` can be unscaled and
        differentiated -- torch's gradient-penalty recipe, where the program
        multiplies by ``1 / scaler.get_scale()``. A disabled scaler gives a
        copy of x.
        """
        handle = handle_of(x, "x")
        return Tensor._from_op(read(lib.ampx_scaler_unscale_tensor, ctypes.c_void_p,
                                    self.handle, handle), self._context)

    def scale_tensor(self) -> Tensor:
        """The one-element F32 device tensor holding the current scale (read-only)."""
        return Tensor(read(lib.ampx_scaler_scale_tensor, ctypes.c_void_p, self.handle),
                      self._context)

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled). Synchronizes."""
        return read(lib.ampx_scaler_get_scale, ctypes.c_double, self.handle)

    def unscale_(self, optimizer: Optimizer) -> None:
        """Divides ``optimizer``'s gradients by the scale (needed before clipping)."""
        lib.ampx_scaler_unscale(self.handle, _optimizer_handle(optimizer))

    def step(self, optimizer: Optimizer) -> None:
        """Unscales if needed, then steps unless a gradient is inf/NaN."""
        lib.ampx_scaler_step(self.handle, _optimizer_handle(optimizer))

    def update(self, new_scale: float | None = None) -> None:
        """Ends the iteration: backs off or grows the scale, or sets ``new_scale``."""
        if new_scale is None:
            lib.ampx_scaler_update(self.handle)
        else:
            lib.ampx_scaler_update_to(self.handle, float_arg(new_scale, "new_scale"))

    def found_inf(self, optimizer: Optimizer) -> bool:
        """Whether this iteration's unscale of ``optimizer`` found an inf/NaN."""
        return bool(read(lib.ampx_scaler_found_inf, ctypes.c_int32, self.handle,
                         _optimizer_handle(optimizer)))

    def counters(self) -> ScalerCounters:
        """Update, skip, backoff and growth counts. Synchronizes."""
        out = AMPX_SCALER_COUNTERS_INIT()
        lib.ampx_scaler_get_counters(self.handle, ctypes.byref(out))
        return ScalerCounters(out.updates, out.skipped, out.backoffs, out.growths)

    def state_dict(self) -> dict:
        """The persistent state (torch's ``state_dict`` keys plus ampx's extras)."""
        out = ampx_scaler_state(struct_size=ctypes.sizeof(ampx_scaler_state),
                                counters=AMPX_SCALER_COUNTERS_INIT())
        lib.ampx_scaler_get_state(self.handle, ctypes.byref(out))
        state = {field: getattr(out, field) for field in _STATE_FIELDS}
        state["counters"] = ScalerCounters(out.counters.updates, out.counters.skipped,
                                           out.counters.backoffs, out.counters.growths)._asdict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores a :meth:`state_dict` (only between iterations)."""
        if not isinstance(state, dict):
            raise ArgumentTypeError(f"state must be a dict, not {type(state).__name__}")
        out = ampx_scaler_state(struct_size=ctypes.sizeof(ampx_scaler_state),
                                counters=AMPX_SCALER_COUNTERS_INIT())
        lib.ampx_scaler_get_state(self.handle, ctypes.byref(out))
        unknown = set(state) - set(_STATE_FIELDS) - {"counters"}
        if unknown:
            raise InvalidArgumentError(f"unknown scaler state keys: {sorted(unknown)}")
        for field in _STATE_FIELDS:
            if field in state:
                value = state[field]
                is_int = field in ("growth_interval", "growth_tracker", "hysteresis",
                                   "hysteresis_left", "consecutive_hysteresis",
                                   "clamp_to_max_scale")
                setattr(out, field, int_arg(value, field) if is_int else float_arg(value, field))
        for field, value in state.get("counters", {}).items():
            if field not in ScalerCounters._fields:
                raise InvalidArgumentError(f"unknown scaler counter {field!r}")
            setattr(out.counters, field, int_arg(value, f"counters.{field}", bits=64))
        lib.ampx_scaler_set_state(self.handle, ctypes.byref(out))
