"""Training checkpoint files (ampx.h section 12): tensors, optimizer and scaler state."""
from __future__ import annotations

import os

from ._lib import lib
from .amp import Scaler
from .errors import ArgumentTypeError
from .fp8 import recipe_handle
from .optim import Optimizer
from .tensor import handle_array


def _arguments(path, tensors, optimizer, scaler):
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise ArgumentTypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    if optimizer is not None and not isinstance(optimizer, Optimizer):
        raise ArgumentTypeError(f"optimizer must be an ampx optimizer, not "
                                f"{type(optimizer).__name__}")
    if scaler is not None and not isinstance(scaler, Scaler):
        raise ArgumentTypeError(f"scaler must be an ampx.Scaler, not {type(scaler).__name__}")
    tensors, handles = handle_array(tensors, "tensors")
    return (os.fsencode(path), handles, len(tensors),
            None if optimizer is None else optimizer.handle,
            None if scaler is None else scaler.handle)


def save_checkpoint_file(path, tensors, optimizer: Optimizer | None = None,
                         scaler: Scaler | None = None, *, fp8_recipe=None) -> None:
    """Writes ``tensors`` (named), the optimizer's and the scaler's state to ``path``.

    With ``fp8_recipe`` (an :class:`ampx.Fp8Recipe`) the file also holds the
    recipe's options and, per slot, its scales and amax history. The file
    is replaced atomically. Only allowed between iterations.
    """
    arguments = _arguments(path, tensors, optimizer, scaler)
    if fp8_recipe is None:
        lib.ampx_checkpoint_file_save(*arguments)
    else:
        lib.ampx_checkpoint_file_save_fp8(*arguments, recipe_handle(fp8_recipe, "fp8_recipe"))


def load_checkpoint_file(path, tensors, optimizer: Optimizer | None = None,
                         scaler: Scaler | None = None, *, fp8_recipe=None) -> None:
    """Restores a file written by :func:`save_checkpoint_file` into live objects.

    ``tensors`` must be the same list (names, dtypes, shapes); everything
    is validated before anything changes. With ``fp8_recipe`` (created with
    the saved options) the saved slots' state is restored, matched by name.
    """
    arguments = _arguments(path, tensors, optimizer, scaler)
    if fp8_recipe is None:
        lib.ampx_checkpoint_file_load(*arguments)
    else:
        lib.ampx_checkpoint_file_load_fp8(*arguments, recipe_handle(fp8_recipe, "fp8_recipe"))
