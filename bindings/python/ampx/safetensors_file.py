"""safetensors files (EXPERIMENTAL, ampx.h section 16): the format PyTorch,
Hugging Face and JAX exchange weights in.

:func:`save_safetensors` writes named tensors (a ``{name: Tensor}`` mapping,
like a state dict, or named tensors) with string metadata, replacing the
file atomically. :class:`SafetensorsFile` opens a file -- its whole header
validated first -- to list its tensors and metadata and to load them: as
new tensors (on the CPU without a copy, on the file's memory mapping, when
the data is aligned) or into existing ones. :func:`load_safetensors` and
:func:`load_safetensors_into` do both in one call.

Example::

    ampx.save_safetensors("model.safetensors", {"w": w, "b": b}, metadata={"format": "pt"})
    state = ampx.load_safetensors("model.safetensors")   # {"w": Tensor, "b": Tensor}
    ampx.load_safetensors_into("model.safetensors", {"w": w, "b": b})
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from typing import NamedTuple

from ._lib import lib
from ._raw import AMPX_SAFETENSORS_ENTRY_INIT
from ._resource import Resource, read
from .errors import ArgumentTypeError, InvalidArgumentError
from .context import context_arg, default_context
from .tensor import Tensor, handle_array
from .types import DType

#: ``AMPX_SAFETENSORS_CONVERT`` and ``AMPX_SAFETENSORS_COPY``.
CONVERT = 1
COPY = 2


class SafetensorsEntry(NamedTuple):
    """One tensor of a file (``ampx_safetensors_entry``)."""

    name: str
    dtype: DType | None  #: None for a format dtype ampx lacks (see dtype_name)
    dtype_name: str      #: as the file spells it, e.g. "BF16"
    shape: tuple[int, ...]
    offset: int          #: of its first byte, from the start of the file
    nbytes: int


def _path_arg(path) -> bytes:
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise ArgumentTypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    return os.fsencode(path)


def _utf8(text, what: str) -> bytes:
    if not isinstance(text, str):
        raise ArgumentTypeError(f"{what} must be a str, not {type(text).__name__}")
    if "\0" in text:
        raise InvalidArgumentError(f"{what} {text!r} holds a NUL character, which C strings cannot")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} {text!r} is not valid UTF-8: {exc}") from None


def _string_array(strings, what: str):
    encoded = [_utf8(s, f"{what}[{i}]") for i, s in enumerate(strings)]
    return (ctypes.c_char_p * max(len(encoded), 1))(*encoded)


def _named(tensors, what: str):
    """Tensors and their names: a mapping's keys, or else each tensor's own name."""
    if isinstance(tensors, Mapping):
        names = list(tensors.keys())
        tensors, handles = handle_array(list(tensors.values()), what)
        return tensors, handles, _string_array(names, f"{what} key")
    tensors, handles = handle_array(tensors, what)
    return tensors, handles, None


def save_safetensors(path, tensors, metadata: Mapping[str, str] | None = None) -> None:
    """Writes ``tensors`` to ``path`` as a safetensors file (``ampx_safetensors_save``).

    ``tensors`` is a ``{name: Tensor}`` mapping or a sequence of tensors
    named with :attr:`Tensor.name`; ``metadata`` maps strings to strings.
    The file is replaced atomically; readers such as
    ``safetensors.torch.load_file`` read it.
    """
    tensors, handles, names = _named(tensors, "tensors")
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, Mapping):
        raise ArgumentTypeError(f"metadata must be a mapping of str to str, not "
                                f"{type(metadata).__name__}")
    keys = _string_array(list(metadata.keys()), "metadata key")
    values = _string_array(list(metadata.values()), "metadata value")
    lib.ampx_safetensors_save(_path_arg(path), handles, names, len(tensors), keys, values,
                              len(metadata))


class SafetensorsFile(Resource):
    """An opened, validated safetensors file (``ampx_safetensors_open``).

    Opening maps the file and checks its whole header (a file that breaks
    the format raises :class:`ampx.CorruptError`). Use it as a context
    manager, or call :meth:`close`; tensors loaded without a copy keep the
    mapping alive by themselves.
    """

    _kind = "safetensors file"

    def __init__(self, path, *, context=None):
        context = context_arg(context, default_context)
        super().__init__(read(lib.ampx_safetensors_open, ctypes.c_void_p, context.handle,
                              _path_arg(path)), lib.ampx_safetensors_release)
        self._context = context

    def __len__(self) -> int:
        return read(lib.ampx_safetensors_count, ctypes.c_size_t, self.handle)

    def __contains__(self, name) -> bool:
        if not isinstance(name, str) or "\0" in name:
            return False
        index = ctypes.c_size_t()
        try:
            lib.ampx_safetensors_find(self.handle, name.encode("utf-8", "surrogatepass"),
                                      ctypes.byref(index))
        except InvalidArgumentError:
            return False
        return True

    def entries(self) -> list[SafetensorsEntry]:
        """Every tensor, in the order of its data in the file."""
        out = []
        for i in range(len(self)):
            e = AMPX_SAFETENSORS_ENTRY_INIT()
            lib.ampx_safetensors_entry_get(self.handle, i, ctypes.byref(e))
            out.append(SafetensorsEntry(e.name.decode(), DType(e.dtype) if e.dtype else None,
                                        e.dtype_name.decode(), tuple(e.shape[:e.ndim]),
                                        e.offset, e.nbytes))
        return out

    def keys(self) -> list[str]:
        """The tensors' names, in the order of their data."""
        return [e.name for e in self.entries()]

    def metadata(self) -> dict[str, str]:
        """The file's ``__metadata__`` ({} when it has none)."""
        count = ctypes.c_size_t()
        lib.ampx_safetensors_metadata_count(self.handle, ctypes.byref(count))
        out = {}
        for i in range(count.value):
            key, value = ctypes.c_char_p(), ctypes.c_char_p()
            lib.ampx_safetensors_metadata_get(self.handle, i, ctypes.byref(key),
                                              ctypes.byref(value))
            out[key.value.decode()] = value.value.decode()
        return out

    def load(self, name: str, *, copy: bool = False) -> Tensor:
        """The tensor ``name`` as a new tensor of the file's context.

        On the CPU it lies on the file's mapping (no copy) when its data is
        aligned, unless ``copy``; writing to it never changes the file.
        """
        out = ctypes.c_void_p()
        lib.ampx_safetensors_load_tensor(self.handle, _utf8(name, "name"), COPY if copy else 0,
                                         ctypes.byref(out))
        return Tensor(out.value, self._context)

    def load_into(self, tensors, *, convert: bool = False) -> None:
        """Copies the file's tensors into existing ones (``ampx_safetensors_load_into``).

        ``tensors`` is a ``{name: Tensor}`` mapping or a sequence of named
        tensors. Shapes must match, and dtypes too unless ``convert``. All
        are checked before any is written.
        """
        tensors, handles, names = _named(tensors, "tensors")
        lib.ampx_safetensors_load_into(self.handle, names, handles, len(tensors),
                                       CONVERT if convert else 0)


def load_safetensors(path, *, context=None, copy: bool = False) -> dict[str, Tensor]:
    """Every tensor of a file as new tensors, by name (see :meth:`SafetensorsFile.load`)."""
    with SafetensorsFile(path, context=context) as f:
        return {e.name: f.load(e.name, copy=copy) for e in f.entries()}


def load_safetensors_into(path, tensors, *, convert: bool = False, context=None) -> None:
    """Loads a file into existing tensors (see :meth:`SafetensorsFile.load_into`)."""
    with SafetensorsFile(path, context=context) as f:
        f.load_into(tensors, convert=convert)
