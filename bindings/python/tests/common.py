"""Helpers the tests share (imported as ``common``: the tests folder is on
sys.path, also for data_parallel_mpi.py under mpirun)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

import ampx

# The two-layer network of the data-parallel tests: its sizes, and the
# batch of each step, made from the step number.
IN, HIDDEN, OUT, BATCH = 8, 16, 4, 32


def batch(step: int):
    rng = np.random.default_rng(1000 + step)
    x = rng.uniform(-1, 1, (BATCH, IN)).astype(np.float32)
    y = np.sin(x[:, :OUT] + 2 * x[:, 4:4 + OUT]).astype(np.float32)
    return x, y


def network_params(ctx, seed: int, dtype) -> list:
    """[w1, b1, w2, b2] of the network in ``dtype`` on ``ctx``, uniform in
    +-0.35 (first layer) and +-0.25 (second), drawn from ``seed``."""
    rng = np.random.default_rng(seed)

    def param(shape, bound):
        return ampx.tensor(rng.uniform(-bound, bound, shape).astype(np.float32), dtype,
                           context=ctx, requires_grad=True)

    return [param((HIDDEN, IN), 0.35), param((HIDDEN,), 0.35),
            param((OUT, HIDDEN), 0.25), param((OUT,), 0.25)]


def compare_with_torch(test, ampx_fn, torch_fn, *arrays, tolerance: float):
    """``ampx_fn`` and ``torch_fn`` on the same inputs (numpy arrays; None
    passes None): equal shapes, values within ``tolerance`` (absolute), and
    the gradients of sum(y * r), r random, within it too."""
    import torch  # here: data_parallel_mpi.py, on every rank, needs no torch

    rng = np.random.default_rng(len(arrays))
    a_in = [ampx.tensor(x, requires_grad=True) if x is not None else None for x in arrays]
    t_in = [torch.tensor(x, requires_grad=True) if x is not None else None for x in arrays]
    want = torch_fn(*t_in)
    r = rng.uniform(-1, 1, tuple(want.shape)).astype(np.float32)
    (want * torch.tensor(r)).sum().backward()
    have = ampx_fn(*a_in)
    test.assertEqual(tuple(have.shape), tuple(want.shape))
    ampx.backward(ampx.sum(ampx.mul(have, ampx.tensor(r))))
    np.testing.assert_allclose(have.numpy(), want.detach().numpy(), atol=tolerance, rtol=0)
    for a, t in zip(a_in, t_in):
        if a is not None:
            np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=tolerance, rtol=0)


def run_python(test, script: str) -> subprocess.CompletedProcess:
    """Runs ``script`` in a new interpreter and asserts that it exits 0."""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    test.assertEqual(result.returncode, 0, result.stderr)
    return result
