"""Optimizers (SGD, Adam, AdamW with fp32 masters), clipping and diagnostics."""
from __future__ import annotations

import ctypes
import dataclasses
from typing import Iterable, NamedTuple

from ._args import bool_arg, enum_arg, float_arg, int_arg
from ._lib import lib
from ._raw import ampx_adam_options, ampx_lr_schedule, ampx_nonfinite_grad, ampx_sgd_options
from ._resource import Resource, read
from .context import Context, context_arg
from .errors import ArgumentTypeError, InvalidArgumentError
from .tensor import Tensor, handle_array, handle_of
from .types import LRDecay, StateKind

_GROUP_KEYS = {"params", "lr", "weight_decay"}


def _param_groups(params) -> list[tuple[list, float | None, float | None]]:
    """Tensors, or dicts ``{"params": [...], "lr": ..., "weight_decay": ...}``."""
    if isinstance(params, (Tensor, dict)):
        raise ArgumentTypeError("params must be a sequence of tensors or of param-group dicts")
    try:
        items = list(params)
    except TypeError:
        raise ArgumentTypeError(f"params must be a sequence, not {type(params).__name__}") from None
    if not any(isinstance(item, dict) for item in items):
        return [(items, None, None)]
    groups = []
    for i, group in enumerate(items):
        if not isinstance(group, dict):
            raise ArgumentTypeError(f"params[{i}]: mix of tensors and param-group dicts")
        unknown = set(group) - _GROUP_KEYS
        if unknown or "params" not in group:
            raise InvalidArgumentError(f"params[{i}]: a param group has the keys 'params' "
                                       f"(required), 'lr' and 'weight_decay'; got {sorted(group)}")
        groups.append((group["params"], group.get("lr"), group.get("weight_decay")))
    return groups


class NonfiniteGrad(NamedTuple):
    """A parameter whose gradient holds NaN or inf (:func:`find_nonfinite_grads`)."""

    param: Tensor
    name: str
    nan_count: int
    inf_count: int


@dataclasses.dataclass(frozen=True)
class LRSchedule:
    """A param group's learning-rate schedule, run on the device (ampx.h section 17).

    A linear warm-up over ``warmup_steps`` steps from ``warmup_start_factor``
    times the group's rate, then ``decay``: ``"constant"``; ``"linear"`` to
    ``end_factor`` times the rate at ``total_steps``; ``"cosine"`` to
    ``min_lr`` at ``total_steps`` (periodic after it, as torch's
    CosineAnnealingLR); ``"step"``: times ``gamma`` every ``step_size``
    steps. ``total_steps`` counts the warm-up. With k the optimizer's taken
    steps, the rate is what torch.optim.lr_scheduler's LinearLR (warm-up),
    then LinearLR, CosineAnnealingLR or StepLR joined by SequentialLR give
    after k calls of ``scheduler.step()``. Fields the decay does not use are
    ignored.
    """

    decay: LRDecay | str = LRDecay.CONSTANT
    warmup_steps: int = 0
    warmup_start_factor: float = 0.0
    total_steps: int = 0
    end_factor: float = 0.0
    min_lr: float = 0.0
    step_size: int = 1
    gamma: float = 0.1

    def __post_init__(self):
        object.__setattr__(self, "decay", enum_arg(LRDecay, self.decay, "decay"))

    def _struct(self) -> ampx_lr_schedule:
        s: ampx_lr_schedule = lib.ampx_lr_schedule_default()
        s.decay = self.decay
        s.warmup_steps = int_arg(self.warmup_steps, "warmup_steps", bits=64)
        s.warmup_start_factor = float_arg(self.warmup_start_factor, "warmup_start_factor")
        s.total_steps = int_arg(self.total_steps, "total_steps", bits=64)
        s.end_factor = float_arg(self.end_factor, "end_factor")
        s.min_lr = float_arg(self.min_lr, "min_lr")
        s.step_size = int_arg(self.step_size, "step_size", bits=64)
        s.gamma = float_arg(self.gamma, "gamma")
        return s

    @classmethod
    def _from_struct(cls, s: ampx_lr_schedule) -> "LRSchedule":
        return cls(decay=LRDecay(s.decay), warmup_steps=s.warmup_steps,
                   warmup_start_factor=s.warmup_start_factor, total_steps=s.total_steps,
                   end_factor=s.end_factor, min_lr=s.min_lr, step_size=s.step_size,
                   gamma=s.gamma)

    def value(self, base_lr: float, step: int) -> float:
        """The rate (double) for a group of rate ``base_lr`` after ``step`` taken steps."""
        s = self._struct()
        return read(lib.ampx_lr_schedule_value, ctypes.c_double, ctypes.byref(s),
                    float_arg(base_lr, "base_lr"), int_arg(step, "step", bits=64))


class Optimizer(Resource):
    """The base of :class:`SGD`, :class:`Adam` and :class:`AdamW`.

    Parameters are F32, F16 or BF16 tensors (F16/BF16 ones get fp32 master
    weights), in param groups with their own learning rate and weight decay.
    Gradients are the tensors attached to the parameters (``Tensor.grad``);
    a parameter without one is left alone in a step.
    """

    _kind = "optimizer"

    def __init__(self, create, options, params, context: Context | None):
        groups = _param_groups(params)
        first, lr, weight_decay = groups[0]
        tensors, handles = handle_array(first, "params")
        if context is None and not tensors:
            raise InvalidArgumentError("an optimizer without parameters needs context=")
        context = context_arg(context, lambda: tensors[0].context)
        if lr is not None:
            options.lr = float_arg(lr, "lr")
        if weight_decay is not None:
            options.weight_decay = float_arg(weight_decay, "weight_decay")
        super().__init__(read(create, ctypes.c_void_p, context.handle, handles, len(tensors),
                              ctypes.byref(options)), lib.ampx_optimizer_release)
        self._context = context
        self._params = tensors
        self._defaults = (options.lr, options.weight_decay)
        for group, lr, weight_decay in groups[1:]:
            self.add_param_group(group, lr=lr, weight_decay=weight_decay)

    @property
    def context(self) -> Context:
        """The optimizer's context."""
        return self._context

    @property
    def params(self) -> tuple[Tensor, ...]:
        """Every parameter, in group order."""
        return tuple(self._params)

    def add_param_group(self, params: Iterable[Tensor], lr: float | None = None,
                        weight_decay: float | None = None) -> int:
        """Adds a group (lr and weight decay default to the constructor's); returns its index."""
        tensors, handles = handle_array(params, "params")
        default_lr, default_weight_decay = self._defaults
        index = ctypes.c_int32()
        lib.ampx_optimizer_add_group(
            self.handle, handles, len(tensors),
            float_arg(default_lr if lr is None else lr, "lr"),
            float_arg(default_weight_decay if weight_decay is None else weight_decay,
                      "weight_decay"),
            ctypes.byref(index))
        self._params.extend(tensors)
        return index.value

    @property
    def num_groups(self) -> int:
        """The number of param groups."""
        return read(lib.ampx_optimizer_group_count, ctypes.c_int32, self.handle)

    def get_lr(self, group: int = 0) -> float:
        """A group's learning rate as last set."""
        return read(lib.ampx_optimizer_get_lr, ctypes.c_double, self.handle,
                    int_arg(group, "group"))

    def set_lr(self, lr: float, group: int | None = None) -> None:
        """Sets the learning rate of one group, or of every group (``group=None``)."""
        lr = float_arg(lr, "lr")
        groups = range(self.num_groups) if group is None else (int_arg(group, "group"),)
        for index in groups:
            lib.ampx_optimizer_set_lr(self.handle, index, lr)

    def set_lr_schedule(self, schedule: LRSchedule | None, group: int | None = None) -> None:
        """Gives one group (or every group, ``group=None``) a schedule from the next step on.

        The group's learning rate (``set_lr``) is the schedule's base. The rate
        of each step is computed on the device from :attr:`step_count`, so a
        step captured in a CUDA graph replays with its own rate; skipped steps
        do not advance it. ``None``: the group's constant rate again.
        """
        if schedule is not None and not isinstance(schedule, LRSchedule):
            raise ArgumentTypeError(f"schedule must be an LRSchedule or None, not "
                                    f"{type(schedule).__name__}")
        s = None if schedule is None else ctypes.byref(schedule._struct())
        groups = range(self.num_groups) if group is None else (int_arg(group, "group"),)
        for index in groups:
            lib.ampx_optimizer_set_lr_schedule(self.handle, index, s)

    def get_lr_schedule(self, group: int = 0) -> LRSchedule:
        """A group's schedule (unused fields read back as their defaults)."""
        out: ampx_lr_schedule = lib.ampx_lr_schedule_default()
        lib.ampx_optimizer_get_lr_schedule(self.handle, int_arg(group, "group"),
                                           ctypes.byref(out))
        return LRSchedule._from_struct(out)

    @property
    def step_count(self) -> int:
        """Steps taken (skipped ones not counted): the schedules' position. Synchronizes."""
        return read(lib.ampx_optimizer_step_count, ctypes.c_int64, self.handle)

    def step(self) -> None:
        """One step with the gradients as they are (with a scaler use ``Scaler.step``)."""
        lib.ampx_optimizer_step(self.handle)

    def zero_grad(self) -> None:
        """Zeroes every attached gradient (they stay attached)."""
        lib.ampx_optimizer_zero_grad(self.handle)

    def last_step_taken(self) -> bool:
        """Whether the most recent step was taken (False: skipped for inf/NaN)."""
        return bool(read(lib.ampx_optimizer_last_step_taken, ctypes.c_int32, self.handle))

    def state_tensor(self, param: Tensor, kind) -> Tensor:
        """One F32 state tensor of ``param`` (writable: it is the optimizer's state).

        ``kind``: ``"master"``, ``"momentum"`` (SGD's buffer, Adam's exp_avg),
        ``"exp_avg_sq"`` or ``"max_exp_avg_sq"`` (a :class:`StateKind`).
        """
        return Tensor(read(lib.ampx_optimizer_state_tensor, ctypes.c_void_p, self.handle,
                           handle_of(param, "param"), enum_arg(StateKind, kind, "kind")),
                      self._context)

    def param_steps(self, param: Tensor) -> int:
        """The number of steps ``param`` has taken (skipped ones not counted)."""
        return read(lib.ampx_optimizer_param_steps, ctypes.c_int64, self.handle,
                    handle_of(param, "param"))

    def state_dict(self) -> bytes:
        """The serialised state (hyperparameters, groups, steps, masters, moments)."""
        size = ctypes.c_size_t()
        lib.ampx_optimizer_state_size(self.handle, ctypes.byref(size))
        buffer = ctypes.create_string_buffer(size.value)
        lib.ampx_optimizer_save_state(self.handle, buffer, size.value)
        return buffer.raw

    def load_state_dict(self, state) -> None:
        """Restores :meth:`state_dict` output (validated first: nothing changes on error)."""
        try:
            data = bytes(state)
        except TypeError:
            raise ArgumentTypeError(f"state must be bytes-like, not {type(state).__name__}") \
                from None
        buffer = ctypes.create_string_buffer(data, len(data))
        lib.ampx_optimizer_load_state(self.handle, buffer, len(data))


class SGD(Optimizer):
    """SGD with momentum, dampening, weight decay, Nesterov, maximize (torch.optim.SGD).

    ``params``: tensors, or param-group dicts ``{"params", "lr", "weight_decay"}``.
    Library defaults: lr 1e-3, momentum 0, dampening 0, weight_decay 0.
    """

    def __init__(self, params, lr: float | None = None, momentum: float | None = None,
                 dampening: float | None = None, weight_decay: float | None = None,
                 nesterov: bool = False, maximize: bool = False, *,
                 context: Context | None = None):
        options: ampx_sgd_options = lib.ampx_sgd_options_default()
        for field, value in (("lr", lr), ("momentum", momentum), ("dampening", dampening),
                             ("weight_decay", weight_decay)):
            if value is not None:
                setattr(options, field, float_arg(value, field))
        options.nesterov = bool_arg(nesterov, "nesterov")
        options.maximize = bool_arg(maximize, "maximize")
        super().__init__(lib.ampx_optimizer_create_sgd, options, params, context)


class Adam(Optimizer):
    """Adam (torch.optim.Adam): L2 weight decay added to the gradient.

    Library defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.
    """

    _default_options = staticmethod(lib.ampx_adam_options_default)

    def __init__(self, params, lr: float | None = None,
                 betas: tuple[float, float] | None = None, eps: float | None = None,
                 weight_decay: float | None = None, amsgrad: bool = False,
                 maximize: bool = False, *, context: Context | None = None):
        options: ampx_adam_options = self._default_options()
        for field, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if value is not None:
                setattr(options, field, float_arg(value, field))
        if betas is not None:
            try:
                beta1, beta2 = betas
            except (TypeError, ValueError):
                raise ArgumentTypeError("betas must be a pair of numbers") from None
            options.beta1 = float_arg(beta1, "betas[0]")
            options.beta2 = float_arg(beta2, "betas[1]")
        options.amsgrad = bool_arg(amsgrad, "amsgrad")
        options.maximize = bool_arg(maximize, "maximize")
        super().__init__(lib.ampx_optimizer_create_adam, options, params, context)


class AdamW(Adam):
    """AdamW (torch.optim.AdamW): decoupled weight decay, default 1e-2."""

    _default_options = staticmethod(lib.ampx_adamw_options_default)


def clip_grad_norm_(optimizer: Optimizer, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scales the optimizer's gradients so their total norm is at most ``max_norm``.

    ``norm_type`` is 2 or ``math.inf``. Returns the total norm (a
    one-element F32 tensor, computed on the device). Raises
    :class:`ampx.OrderError` while the gradients are still loss-scaled.
    """
    if not isinstance(optimizer, Optimizer):
        raise ArgumentTypeError(f"optimizer must be an ampx optimizer, not "
                                f"{type(optimizer).__name__}")
    total = ctypes.c_void_p()
    lib.ampx_clip_grad_norm(optimizer.handle, float_arg(max_norm, "max_norm"),
                            float_arg(norm_type, "norm_type"),
                            bool_arg(error_if_nonfinite, "error_if_nonfinite"),
                            ctypes.byref(total))
    return Tensor(total.value, optimizer.context)


def clip_grad_value_(optimizer: Optimizer, clip_value: float) -> None:
    """Clamps every gradient element to [-clip_value, clip_value]."""
    if not isinstance(optimizer, Optimizer):
        raise ArgumentTypeError(f"optimizer must be an ampx optimizer, not "
                                f"{type(optimizer).__name__}")
    lib.ampx_clip_grad_value(optimizer.handle, float_arg(clip_value, "clip_value"))


def find_nonfinite_grads(optimizer: Optimizer) -> list[NonfiniteGrad]:
    """The parameters whose gradients (as the next step would use them) hold NaN/inf."""
    if not isinstance(optimizer, Optimizer):
        raise ArgumentTypeError(f"optimizer must be an ampx optimizer, not "
                                f"{type(optimizer).__name__}")
    found = ctypes.c_size_t()
    lib.ampx_find_nonfinite_grads(optimizer.handle, None, 0, ctypes.byref(found))
    if found.value == 0:
        return []
    entries = (ampx_nonfinite_grad * found.value)()
    lib.ampx_find_nonfinite_grads(optimizer.handle, entries, found.value, ctypes.byref(found))
    # The caller's own Tensor objects where they are still open.
    by_handle = {p._handle: p for p in optimizer.params if not p.closed}
    return [NonfiniteGrad(by_handle.get(e.param) or Tensor._borrowed(e.param, optimizer.context),
                          (e.name or b"").decode("utf-8", "replace"), e.nan_count, e.inf_count)
            for e in entries[:min(found.value, len(entries))]]
