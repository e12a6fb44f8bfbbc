"""FP8 training (ampx.h section 18; EXPERIMENTAL): scaling recipes after
Transformer Engine, quantization with a recipe's scales, and what the
precision doctor sees of a tensor in FP8.

A :class:`Fp8Recipe` keeps, per "slot" (a tensor it scales), a scale, its
inverse, the step's amax and an amax history, all in device memory. Give it
to an autocast policy (``Autocast.set_fp8``) and linear/matmul run in FP8;
call :meth:`Fp8Recipe.update` once per step after backward. Engines with
their own GEMMs use :meth:`Fp8Recipe.add_tensor`, :meth:`Fp8Recipe.quantize`
and :meth:`Fp8Recipe.scale_tensor` directly.
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple

from . import _raw
from ._args import bool_arg, enum_arg, int_arg, str_arg
from ._lib import lib
from .errors import ArgumentTypeError
from ._resource import Resource, read
from .context import Context, context_arg
from .tensor import Tensor, empty, handle_of
from .types import AmaxAlgo, DType, Fp8Format, Fp8Role, Fp8Scaling


#: The default of ``Autocast.set_fp8``'s ``min_gemm_size``: 2^33 (FP8 loses
#: to bf16 on small products).
FP8_DEFAULT_MIN_GEMM_SIZE = _raw.AMPX_FP8_DEFAULT_MIN_GEMM_SIZE


class Fp8SlotInfo(NamedTuple):
    """A recipe slot (``ampx_fp8_slot_info``) and its amax history, oldest first."""

    name: str
    role: Fp8Role
    dtype: DType
    scale: float
    scale_inv: float
    amax: float
    history_len: int
    history: list


class Fp8TensorReport(NamedTuple):
    """``ampx_fp8_tensor_report``: of a tensor's non-zero finite elements, the
    fractions a slot's scale would flush to zero or saturate, per format."""

    count: int
    flushed_e4m3: float
    saturated_e4m3: float
    flushed_e5m2: float
    saturated_e5m2: float
    scale: float
    dtype: DType


class Fp8Stats(NamedTuple):
    """``ampx_fp8_stats``: an autocast policy's FP8 products and fallbacks."""

    fp8_products: int
    fallbacks: int
    last_fallback: str


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8", "replace")


class Fp8Recipe(Resource):
    """An FP8 scaling recipe (``ampx_fp8_recipe``; TE's ``DelayedScaling`` or
    ``Float8CurrentScaling``).

    Args (``None`` keeps the library default shown):
        context: the context whose device holds the recipe's state.
        scaling: ``"delayed"`` (default) or ``"current"``.
        format: ``"hybrid"`` (default: E4M3 forward, E5M2 gradients) or ``"e4m3"``.
        amax_history_len: 1024; at least 1.
        amax_compute_algo: ``"max"`` (default) or ``"most_recent"``.
        margin: 0; 0 .. 127: scale = fp8_max / amax / 2^margin.
        power_of_two_scales: False; current scaling rounds scales down to
            powers of two.

    Bad options raise :class:`ampx.InvalidArgumentError` naming the option.
    ``with Fp8Recipe(...) as recipe:`` releases it at the end of the block
    (autocast policies and data-parallel wrappers using it keep their own
    reference).
    """

    _kind = "FP8 recipe"

    def __init__(self, context: Context, *, scaling="delayed", format="hybrid",
                 amax_history_len: int | None = None, amax_compute_algo=None,
                 margin: int | None = None, power_of_two_scales: bool = False):
        context = context_arg(context)
        options = lib.ampx_fp8_recipe_options_default()
        options.scaling = enum_arg(Fp8Scaling, scaling, "scaling")
        options.format = enum_arg(Fp8Format, format, "format")
        if amax_history_len is not None:
            options.amax_history_len = int_arg(amax_history_len, "amax_history_len")
        if amax_compute_algo is not None:
            options.amax_compute_algo = enum_arg(AmaxAlgo, amax_compute_algo,
                                                 "amax_compute_algo")
        if margin is not None:
            options.margin = int_arg(margin, "margin")
        options.power_of_two_scales = bool_arg(power_of_two_scales, "power_of_two_scales")
        super().__init__(read(lib.ampx_fp8_recipe_create, ctypes.c_void_p, context.handle,
                              ctypes.byref(options)), lib.ampx_fp8_recipe_release)
        self._context = context
        self._history_len = options.amax_history_len

    def _describe(self) -> str:
        return f"slots={len(self)}, amax_history_len={self._history_len}"

    @property
    def context(self) -> Context:
        """The recipe's context."""
        return self._context

    @property
    def amax_history_len(self) -> int:
        """The length of every slot's amax history."""
        return self._history_len

    def add_tensor(self, role="forward", name: str | None = None) -> int:
        """Adds a slot (scale 1, amax 0, empty history) and returns its index.

        ``role`` is ``"forward"`` (activations, weights) or ``"backward"``
        (gradients: E5M2 under HYBRID); ``name`` is unique in the recipe.
        """
        slot = ctypes.c_int64()
        lib.ampx_fp8_recipe_add_tensor(self.handle, enum_arg(Fp8Role, role, "role"),
                                       None if name is None else str_arg(name, "name"),
                                       ctypes.byref(slot))
        return slot.value

    def __len__(self) -> int:
        """The number of slots (autocast's included)."""
        return read(lib.ampx_fp8_recipe_slot_count, ctypes.c_int64, self.handle)

    @property
    def slot_count(self) -> int:
        """The number of slots (``len(recipe)``)."""
        return len(self)

    def slot(self, slot: int, *, history: bool = True) -> Fp8SlotInfo:
        """Slot ``slot``'s state, with its amax history (oldest first, never
        filled entries 0) unless ``history=False``. Synchronizes."""
        index = int_arg(slot, "slot", bits=64)
        info = _raw.AMPX_FP8_SLOT_INFO_INIT()
        values, capacity = None, 0
        if history:
            values = (ctypes.c_float * self._history_len)()
            capacity = self._history_len
        lib.ampx_fp8_recipe_slot_get(self.handle, index, ctypes.byref(info), values, capacity)
        return Fp8SlotInfo(_text(info.name), Fp8Role(info.role), DType(info.dtype), info.scale,
                           info.scale_inv, info.amax, info.history_len,
                           list(values) if history else [])

    def slots(self) -> list[Fp8SlotInfo]:
        """Every slot, as :meth:`slot` reads it."""
        return [self.slot(i) for i in range(len(self))]

    def quantize(self, slot: int, src: Tensor, out: Tensor | None = None, *,
                 transposed: bool | Tensor = False):
        """Quantizes ``src`` (F32, F16 or BF16) with slot ``slot``'s scale,
        saturating, and folds its amax into the slot's step amax.

        Returns the FP8 tensor (``out``, or a new one of the slot's format
        and src's shape). ``transposed=True`` (or a tensor to write) also
        gives src read as [rows, cols] written [cols, rows] (the TN layout
        FP8 GEMMs need): then a pair ``(out, out_transposed)`` is returned.
        Allocating the outputs reads the slot's format (synchronizes).
        """
        src_handle = handle_of(src, "src")
        want_t = transposed is not False
        if not isinstance(transposed, (bool, Tensor)):
            raise ArgumentTypeError("transposed must be a bool or an ampx.Tensor")
        dtype = None
        if out is None or transposed is True:
            dtype = self.slot(slot, history=False).dtype
        if out is None:
            out = empty(src.shape, dtype, context=self._context)
        out_t = None
        if transposed is True:
            shape = src.shape
            cols = shape[-1] if shape else 1
            out_t = empty((cols, src.numel() // cols if cols else 0), dtype,
                          context=self._context)
        elif isinstance(transposed, Tensor):
            out_t = transposed
        lib.ampx_fp8_quantize(self.handle, int_arg(slot, "slot", bits=64), src_handle,
                              handle_of(out, "out"),
                              None if out_t is None else handle_of(out_t, "transposed"))
        return (out, out_t) if want_t else out

    def update(self) -> None:
        """Ends the step for every slot: amaxes join the histories, (delayed
        scaling) scales are recomputed. Once per step, after backward."""
        lib.ampx_fp8_recipe_update(self.handle)

    def scale_tensor(self, slot: int, *, inverse: bool = False) -> Tensor:
        """Slot ``slot``'s scale (or inverse scale) as a one-element F32 view
        of the recipe's device memory: it follows every update."""
        return Tensor(read(lib.ampx_fp8_recipe_scale_tensor, ctypes.c_void_p, self.handle,
                           int_arg(slot, "slot", bits=64), int(bool_arg(inverse, "inverse"))),
                      self._context)

    def inspect(self, slot: int, tensor: Tensor) -> Fp8TensorReport:
        """What FP8 at slot ``slot``'s current scale would do to ``tensor``
        (the precision doctor's ``ampx_doctor_fp8_inspect``). Synchronizes."""
        report = _raw.AMPX_FP8_TENSOR_REPORT_INIT()
        lib.ampx_doctor_fp8_inspect(self.handle, int_arg(slot, "slot", bits=64),
                                    handle_of(tensor, "tensor"), ctypes.byref(report))
        return Fp8TensorReport(report.count, report.flushed_e4m3, report.saturated_e4m3,
                               report.flushed_e5m2, report.saturated_e5m2, report.scale,
                               DType(report.dtype))

    def summary(self) -> str:
        """A table of the slots: name, format, scale, step amax, history max
        and filled length (``ampx_doctor_fp8_summary``). Synchronizes."""
        return _text(read(lib.ampx_doctor_fp8_summary, ctypes.c_char_p, self.handle))


def recipe_handle(recipe, what: str = "recipe", optional: bool = True):
    """The C handle of an :class:`Fp8Recipe` argument (None for None when optional)."""
    if recipe is None and optional:
        return None
    if not isinstance(recipe, Fp8Recipe):
        raise ArgumentTypeError(f"{what} must be an ampx.Fp8Recipe, not {type(recipe).__name__}")
    return recipe.handle
