"""The precision doctor (EXPERIMENTAL, ampx.h section 15): gradient statistics,
loss-scale history and findings of one optimizer.

A :class:`Doctor` watches an optimizer (and the scaler attached to it, if
any). Every ``interval``-th step (steps 1, 1 + interval, ...) it takes, on
the device and during the unscale's own pass over the gradients, an
exponent histogram of each parameter's true (unscaled) gradient, its
largest magnitude, and which elements are zero, subnormal or infinite in
fp16 at the current scale and without loss scaling; for 16-bit parameters,
the updates they did not take. Every step with a scaler is recorded in a
history ring. Nothing is read back until one of the read methods
(:meth:`Doctor.examine`, :meth:`~Doctor.params`, :meth:`~Doctor.history`,
:meth:`~Doctor.findings`, :meth:`~Doctor.summary`,
:meth:`~Doctor.write_report`) is called, which synchronizes and diagnoses
the history into findings. With ``interval=0`` the doctor costs nothing.

Example::

    doctor = ampx.Doctor(opt, interval=100)
    for batch in batches:
        ...
        scaler.step(opt)
        scaler.update()
    print(doctor.summary())
    for finding in doctor.findings():
        print(finding.code, finding.cause, finding.message)
    doctor.write_report("precision.html")

Histogram bins (:data:`BINS` of them, see :func:`binade_bin`): bin
:data:`BIN_ZERO` counts exact zeros, :data:`BIN_TINY` values below 2^-64,
``binade_bin(e)`` the values with 2^e <= |u| < 2^(e+1) for e in [-64, 15],
:data:`BIN_HUGE` 2^16 <= |u| < inf, :data:`BIN_NONFINITE` inf and NaN.
"""
from __future__ import annotations

import ctypes
import os
from typing import NamedTuple

from ._args import int_arg
from . import _raw
from ._lib import lib
from ._resource import Resource, read
from .errors import ArgumentTypeError, InvalidArgumentError
from .optim import Optimizer
from .types import DType

#: The number of histogram bins (``AMPX_DOCTOR_BINS``).
BINS = _raw.AMPX_DOCTOR_BINS
#: ``AMPX_DOCTOR_BIN_ZERO``: u == 0.
BIN_ZERO = _raw.AMPX_DOCTOR_BIN_ZERO
#: ``AMPX_DOCTOR_BIN_TINY``: 0 < |u| < 2^-64.
BIN_TINY = _raw.AMPX_DOCTOR_BIN_TINY
#: ``AMPX_DOCTOR_BIN_HUGE``: 2^16 <= |u| < inf (always infinite in fp16).
BIN_HUGE = _raw.AMPX_DOCTOR_BIN_HUGE
#: ``AMPX_DOCTOR_BIN_NONFINITE``: inf and NaN.
BIN_NONFINITE = _raw.AMPX_DOCTOR_BIN_NONFINITE
#: The binades with a bin of their own: 2^MIN_BINADE .. 2^MAX_BINADE.
MIN_BINADE, MAX_BINADE = -64, 15


def binade_bin(exponent: int) -> int:
    """The histogram bin of 2^e <= |u| < 2^(e+1) (``AMPX_DOCTOR_BIN_BINADE(e)``),
    for e in [-64, 15]. fp16's subnormals are the binades -24..-15, its
    normals -14..15."""
    e = int_arg(exponent, "exponent")
    if not MIN_BINADE <= e <= MAX_BINADE:
        raise InvalidArgumentError(f"exponent is {e}; binades with a bin of their own are "
                                   f"[{MIN_BINADE}, {MAX_BINADE}] (see BIN_TINY, BIN_HUGE)")
    return _raw.AMPX_DOCTOR_BIN_BINADE(e)


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", "replace")


def _dtype(value: int):
    try:
        return DType(value)
    except ValueError:
        return value


def _fraction_or_none(value: float) -> float | None:
    return None if value < 0 else value


class DoctorOverview(NamedTuple):
    """``ampx_doctor_overview`` (:meth:`Doctor.examine`)."""

    steps: int            # optimizer steps seen
    sample_step: int      # the latest sampled step (0: none yet)
    sample_scale: float   # the loss scale of that step (1 without a scaler)
    param_count: int      # parameters with statistics (Doctor.params)
    history_count: int    # entries in the history (at most `history`)
    finding_count: int    # findings (Doctor.findings)
    missed_steps: int     # steps not observed for lack of memory


class DoctorParamStats(NamedTuple):
    """``ampx_doctor_param_stats``: one parameter's statistics of the latest
    sampled step (:meth:`Doctor.params`).

    For a gradient element x as stored (scaled by the loss scale S) and its
    true value u = x / S: ``histogram`` counts |u| per bin (:data:`BINS`
    ints, see :func:`binade_bin`); the ``fp16_*`` fractions are of all the
    parameter's elements, "unscaled" ones of u and "scaled" ones of x, where
    zero means u rounds to 0 in fp16 (|u| <= 2^-25, exact zeros included),
    subnormal 0 < |fp16(u)| < 2^-14 and overflow infinite.
    """

    index: int                  # the parameter's index in the optimizer
    name: str                   # its name ("" if unnamed)
    param_dtype: DType
    grad_dtype: DType           # as stored (F32 also when it had no gradient)
    elements: int               # elements sampled (0: no gradient on that step)
    histogram: tuple            # of |u|, BINS ints
    amax: float                 # max |u| over finite elements
    amax_scaled: float          # max |x| over finite elements
    grad_norm: float            # L2 norm of u over finite elements
    fp16_zero_unscaled: float
    fp16_subnormal_unscaled: float
    fp16_zero_scaled: float
    fp16_subnormal_scaled: float
    fp16_overflow_scaled: float
    headroom: int               # doublings of the scale left (negative: overflowing)
    headroom_unbounded: bool    # every element is zero (headroom is 0 then)
    # 16-bit parameters: the fraction of elements whose fp32 master changed
    # while the parameter kept its value; None for fp32 parameters.
    lost_update_fraction: float | None
    # The same as it would be without a master; None for fp32 parameters.
    lost_without_master_fraction: float | None


class DoctorSample(NamedTuple):
    """``ampx_doctor_sample``: one step of the history (:meth:`Doctor.history`)."""

    step: int
    scale: float                 # the scale the step's gradients carried
    found_inf: bool              # a gradient was not finite (skipped under a scaler)
    sampled: bool                # statistics were taken on this step
    grad_norm: float             # sampled steps: L2 norm of the finite true gradients
    first_overflow_param: int | None  # lowest parameter index with a non-finite gradient
    overflow_params: int         # parameters with a non-finite gradient
    fp16_lost_scaled: float      # sampled: fraction zero or subnormal in fp16 at the scale
    fp16_lost_unscaled: float    # ... without loss scaling


class DoctorFinding(NamedTuple):
    """``ampx_doctor_finding`` (:meth:`Doctor.findings`).

    ``code`` is ``"scale_oscillation"``, ``"scale_at_minimum"``,
    ``"scale_too_low"`` or ``"gradients_vanished"``; ``cause`` is ``"learning_rate"``, ``"unstable_op"``,
    ``"outlier_batches"``, ``"no_loss_scaling"`` or None (no likely cause).
    """

    code: str
    cause: str | None
    param: int | None            # the parameter named (unstable op)
    param_name: str | None       # its name (None without a parameter, "" if unnamed)
    first_step: int              # the steps that show it
    last_step: int
    message: str                 # one or two English sentences with the evidence


def finding_code_name(code: int) -> str | None:
    """The name of an ``ampx_doctor_finding_code`` value (None if unknown)."""
    name = lib.ampx_doctor_finding_code_name(int_arg(code, "code"))
    return None if name is None else name.decode()


def cause_name(cause: int) -> str | None:
    """The name of an ``ampx_doctor_cause`` value ("" for none; None if unknown)."""
    name = lib.ampx_doctor_cause_name(int_arg(cause, "cause"))
    return None if name is None else name.decode()


class Doctor(Resource):
    """A precision doctor watching ``optimizer`` (``ampx_doctor``).

    Args (``None`` keeps the library default shown):
        optimizer: the :class:`ampx.Optimizer` to watch; its context is the
            doctor's. An optimizer has at most one doctor at a time.
        interval: sample every interval-th step (0: off): 100.
        history: steps kept in the history ring (the latest): 4096, at most
            16777216 (56 bytes each, device memory).

    Statistics buffers are made as steps need them; when memory runs out
    that step goes unobserved (``examine().missed_steps``) and training goes
    on. Use from the optimizer's thread. Closing (or the end of a ``with``
    block) detaches the doctor from the optimizer.
    """

    _kind = "precision doctor"

    def __init__(self, optimizer: Optimizer, interval: int | None = None,
                 history: int | None = None):
        if not isinstance(optimizer, Optimizer):
            raise ArgumentTypeError(f"optimizer must be an ampx optimizer, not "
                                    f"{type(optimizer).__name__}")
        options = lib.ampx_doctor_options_default()
        # Range checks (interval >= 0, history in range) are the library's.
        if interval is not None:
            options.interval = int_arg(interval, "interval")
        if history is not None:
            options.history = int_arg(history, "history")
        context = optimizer.context
        super().__init__(read(lib.ampx_doctor_create, ctypes.c_void_p, context.handle,
                              optimizer.handle, ctypes.byref(options)), lib.ampx_doctor_release)
        # ampx retains the optimizer in C; this keeps the Python object for
        # the properties below.
        self._optimizer = optimizer
        self._context = context
        self._interval = options.interval
        self._history = options.history

    def _describe(self) -> str:
        return f"interval={self._interval}, history={self._history}"

    @property
    def optimizer(self) -> Optimizer:
        """The optimizer watched."""
        return self._optimizer

    @property
    def context(self):
        """The doctor's context (the optimizer's)."""
        return self._context

    @property
    def history_capacity(self) -> int:
        """The number of steps the history ring keeps."""
        return self._history

    @property
    def interval(self) -> int:
        """The sampling interval (0: off); setting it applies from the next step."""
        _ = self.handle  # raises StaleHandleError on a closed doctor
        return self._interval

    @interval.setter
    def interval(self, value: int) -> None:
        value = int_arg(value, "interval")
        lib.ampx_doctor_set_interval(self.handle, value)
        self._interval = value

    def set_interval(self, interval: int) -> None:
        """Changes the sampling interval from the next step (0: off)."""
        self.interval = interval

    def examine(self) -> DoctorOverview:
        """Reads the doctor's device state (synchronizes, when steps were taken
        since the last read), diagnoses it and returns the overview."""
        out = _raw.AMPX_DOCTOR_OVERVIEW_INIT()
        lib.ampx_doctor_examine(self.handle, ctypes.byref(out))
        return DoctorOverview(*(getattr(out, field) for field in DoctorOverview._fields))

    def _param_stats(self, index: int) -> DoctorParamStats:
        s = _raw.ampx_doctor_param_stats(struct_size=ctypes.sizeof(_raw.ampx_doctor_param_stats))
        lib.ampx_doctor_get_param_stats(self.handle, index, ctypes.byref(s))
        return DoctorParamStats(
            index=s.index, name=_text(s.name), param_dtype=_dtype(s.param_dtype),
            grad_dtype=_dtype(s.grad_dtype), elements=s.elements,
            histogram=tuple(s.histogram), amax=s.amax, amax_scaled=s.amax_scaled,
            grad_norm=s.grad_norm, fp16_zero_unscaled=s.fp16_zero_unscaled,
            fp16_subnormal_unscaled=s.fp16_subnormal_unscaled,
            fp16_zero_scaled=s.fp16_zero_scaled,
            fp16_subnormal_scaled=s.fp16_subnormal_scaled,
            fp16_overflow_scaled=s.fp16_overflow_scaled, headroom=s.headroom,
            headroom_unbounded=bool(s.headroom_unbounded),
            lost_update_fraction=_fraction_or_none(s.lost_update_fraction),
            lost_without_master_fraction=_fraction_or_none(s.lost_without_master_fraction))

    def param_stats(self, index: int) -> DoctorParamStats:
        """Parameter ``index``'s statistics of the latest sampled step.

        Raises :class:`ampx.OrderError` before any step was sampled and
        :class:`ampx.InvalidArgumentError` for an index outside
        ``[0, examine().param_count)``.
        """
        return self._param_stats(int_arg(index, "index"))

    def params(self) -> list[DoctorParamStats]:
        """Every parameter's statistics of the latest sampled step, in the
        optimizer's order ([] before any step was sampled)."""
        overview = self.examine()
        if overview.sample_step == 0:
            return []
        return [self._param_stats(i) for i in range(overview.param_count)]

    def history(self) -> list[DoctorSample]:
        """The recorded steps, oldest first: every step with an enabled scaler,
        else only the sampled ones; at most ``history_capacity`` of the latest."""
        count = ctypes.c_int32()
        lib.ampx_doctor_get_history(self.handle, None, 0, ctypes.byref(count))
        if count.value == 0:
            return []
        entries = (_raw.ampx_doctor_sample * count.value)()
        lib.ampx_doctor_get_history(self.handle, entries, count.value, ctypes.byref(count))
        return [DoctorSample(step=e.step, scale=e.scale, found_inf=bool(e.found_inf),
                             sampled=bool(e.sampled), grad_norm=e.grad_norm,
                             first_overflow_param=(None if e.first_overflow_param < 0
                                                   else e.first_overflow_param),
                             overflow_params=e.overflow_params,
                             fp16_lost_scaled=e.fp16_lost_scaled,
                             fp16_lost_unscaled=e.fp16_lost_unscaled)
                for e in entries[:min(count.value, len(entries))]]

    def findings(self) -> list[DoctorFinding]:
        """The diagnosed findings, most important first."""
        overview = self.examine()
        found = []
        for index in range(overview.finding_count):
            f = _raw.ampx_doctor_finding(struct_size=ctypes.sizeof(_raw.ampx_doctor_finding))
            lib.ampx_doctor_get_finding(self.handle, index, ctypes.byref(f))
            code = finding_code_name(f.code)
            cause = cause_name(f.cause)
            found.append(DoctorFinding(
                code=str(f.code) if code is None else code,
                cause=(str(f.cause) if cause is None else cause) or None,
                param=None if f.param < 0 else f.param,
                param_name=None if f.param < 0 else _text(f.param_name),
                first_step=f.first_step, last_step=f.last_step, message=_text(f.message)))
        return found

    def summary(self) -> str:
        """A one-line summary for logs: steps, the latest sample's fp16 losses
        and headroom, overflows, the findings' codes."""
        return _text(read(lib.ampx_doctor_summary, ctypes.c_char_p, self.handle))

    def write_report(self, path) -> None:
        """Writes the report -- one self-contained HTML file (inline CSS and
        SVG, no script): findings, scale history, and per parameter its
        histogram over fp16's range and figures -- to ``path`` (a str, bytes
        or os.PathLike; replaced if it exists). Raises :class:`ampx.FileError`
        when the file cannot be written (a partial file is removed).
        """
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise ArgumentTypeError(f"path must be a str or os.PathLike, not "
                                    f"{type(path).__name__}")
        encoded = os.fsencode(path)
        if b"\0" in encoded:
            raise InvalidArgumentError("path contains a NUL character")
        lib.ampx_doctor_write_report(self.handle, encoded)
