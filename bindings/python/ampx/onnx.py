"""ONNX export (EXPERIMENTAL, ampx.h section 19): a recorded forward pass
written as an ONNX model for ONNX Runtime, Unity's Inference Engine and the
other runtimes engines ship.

:func:`export` takes torch.onnx.export's argument names where they fit
(``input_names``, ``output_names``, ``dynamic_axes``, ``opset_version``).
Run the forward to export with grad mode on and the inputs requiring grad
(``requires_grad=True``), so every op that reads them is recorded; export
before backward. Parameters and buffers become initializers by themselves.

Example::

    x = ampx.tensor(batch, requires_grad=True)
    with ctx.scope():
        y = ampx.linear(ampx.relu(ampx.linear(x, w1, b1)), w2, b2)
        ampx.onnx.export([x], [y], "mlp.onnx", input_names=["obs"],
                         output_names=["action"], dynamic_axes={"obs": {0: "batch"}})
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

from ._lib import lib
from .errors import ArgumentTypeError, InvalidArgumentError
from .tensor import Tensor, handle_array, tensor

#: ``ampx_onnx_weight_type``
WEIGHT_TYPES = {"f32": 1, "float32": 1, "f16": 2, "float16": 2}
#: ``ampx_onnx_external_data``
EXTERNAL_DATA = {"never": 1, "beyond_2gib": 2, "always": 3}


def _strings(names, what: str):
    encoded = []
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{what}[{i}] must be a str, not {type(name).__name__}")
        if "\0" in name:
            raise InvalidArgumentError(f"{what}[{i}] {name!r} holds a NUL character")
        encoded.append(name.encode("utf-8"))
    return (ctypes.c_char_p * max(len(encoded), 1))(*encoded), len(encoded)


def _named(tensors, names, what: str):
    """Tensors and their names: a mapping's keys, else ``names``, else
    each tensor's own name, else what0, what1, ..."""
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    if isinstance(tensors, Mapping):
        if names is not None:
            raise InvalidArgumentError(f"{what} is a mapping; its keys are the names, so pass no "
                                       f"{what[:-1]}_names")
        names = list(tensors.keys())
        tensors = list(tensors.values())
    tensors, handles = handle_array(tensors, what)
    if names is None:
        names = [t.name or f"{what[:-1]}{i}" for i, t in enumerate(tensors)]
    names = list(names)
    if len(names) != len(tensors):
        raise InvalidArgumentError(f"{len(tensors)} {what} but {len(names)} names")
    return tensors, handles, names


def _batch_dim(dynamic_axes, names):
    """The one symbolic dim-0 name ``dynamic_axes`` gives (ampx names dim 0
    of every input and output alike)."""
    if not dynamic_axes:
        return None
    if not isinstance(dynamic_axes, Mapping):
        raise ArgumentTypeError("dynamic_axes must be a mapping of names to axes")
    chosen = set()
    for name, axes in dynamic_axes.items():
        if name not in names:
            raise InvalidArgumentError(f"dynamic_axes names {name!r}, which is no input or output")
        if isinstance(axes, Mapping):
            items = dict(axes)
        else:
            items = {int(a): "batch" for a in axes}
        if set(items) != {0}:
            raise InvalidArgumentError(f"dynamic_axes[{name!r}] is {axes!r}: ampx exports dim 0 "
                                       "(the batch) as the only dynamic axis")
        chosen.add(items[0])
    if len(chosen) != 1:
        raise InvalidArgumentError(f"dynamic_axes names dim 0 {sorted(chosen)}: one name for all")
    return chosen.pop()


def export(inputs, outputs, f, *, input_names=None, output_names=None, dynamic_axes=None,
           opset_version: int | None = None, ir_version: int | None = None,
           weight_type: str = "f32", constant_outputs=None, external_data: str | None = None,
           context=None) -> None:
    """Writes the recorded computation of ``outputs`` from ``inputs`` to the
    file ``f`` as an ONNX model (``ampx_onnx_export``).

    ``inputs`` and ``outputs``: sequences of tensors (named by
    ``input_names``/``output_names``, else by their own names) or
    ``{name: Tensor}`` mappings. An output that is one of the inputs passes
    it through. ``dynamic_axes``: as torch's, but only dim 0, with one name
    (it applies to every input and output). ``opset_version``: 9 to 23
    (default 17). ``weight_type``: ``"f32"`` or ``"f16"`` (FLOAT16
    initializers, each followed by a Cast). ``constant_outputs``: a
    ``{name: Tensor or number or array}`` mapping of extra outputs holding
    those values (ML-Agents' ``version_number``). ``external_data``:
    ``"never"``, ``"beyond_2gib"`` (default) or ``"always"``. The file is
    replaced atomically; on an error none is left.
    """
    if not isinstance(f, (str, bytes, os.PathLike)):
        raise ArgumentTypeError(f"f must be a path (str or os.PathLike), not {type(f).__name__}")
    inputs, in_handles, input_names = _named(inputs, input_names, "inputs")
    outputs, out_handles, output_names = _named(outputs, output_names, "outputs")
    in_names, n_in = _strings(input_names, "input_names")
    out_names, n_out = _strings(output_names, "output_names")
    options = lib.ampx_onnx_options_default()
    if opset_version is not None:
        options.opset = opset_version
    if ir_version is not None:
        options.ir_version = ir_version
    batch = _batch_dim(dynamic_axes, set(input_names) | set(output_names))
    if batch is not None:
        batch_bytes = batch.encode("utf-8")
        options.batch_dim = batch_bytes
    if weight_type not in WEIGHT_TYPES:
        raise InvalidArgumentError(f"weight_type is {weight_type!r}; 'f32' or 'f16'")
    options.weight_type = WEIGHT_TYPES[weight_type]
    if external_data is not None:
        if external_data not in EXTERNAL_DATA:
            raise InvalidArgumentError(f"external_data is {external_data!r}; one of "
                                       f"{sorted(EXTERNAL_DATA)}")
        options.external_data = EXTERNAL_DATA[external_data]
    keep = []
    if constant_outputs:
        if not isinstance(constant_outputs, Mapping):
            raise ArgumentTypeError("constant_outputs must be a mapping of names to values")
        context = context if context is not None else (outputs[0].context if outputs else None)
        values = [v if isinstance(v, Tensor) else tensor(v, "f32", context=context)
                  for v in constant_outputs.values()]
        keep, c_handles = handle_array(values, "constant_outputs")
        c_names, n_c = _strings(list(constant_outputs.keys()), "constant_outputs key")
        options.constant_outputs = ctypes.cast(c_handles, type(options.constant_outputs))
        options.constant_output_names = ctypes.cast(c_names, type(options.constant_output_names))
        options.constant_output_count = n_c
    lib.ampx_onnx_export(os.fsencode(f), in_handles, in_names, n_in, out_handles, out_names,
                         n_out, ctypes.byref(options))
    del keep
