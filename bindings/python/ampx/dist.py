"""Data-parallel training (EXPERIMENTAL): communicators and gradient all-reduce.

One process per device; every process runs the same loop on its own part of
each batch. A :class:`Communicator` is made from the host's MPI (CPU
contexts; ``Communicator.from_mpi`` with an mpi4py communicator) or NCCL
(CUDA contexts; ``Communicator.init_nccl`` with the id rank 0 made by
:func:`nccl_unique_id`). A :class:`DataParallel` wraps an optimizer so that
``backward`` all-reduces the gradients while it runs; the scaler's found-inf
is reduced too, so every rank skips the same steps and the parameters stay
bitwise identical on every rank. mpi4py is imported by ``from_mpi`` only.

Collective calls -- making a communicator or a :class:`DataParallel`, every
call that completes a reduction (``backward``, ``unscale_``, ``step``,
clipping, :meth:`DataParallel.reduce`) and :meth:`DataParallel.close` --
must be made by every rank, in the same order.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Iterator, NamedTuple

from ._args import bool_arg, float_arg, int_arg
from ._lib import lib
from ._raw import (AMPX_DATA_PARALLEL_STATS_INIT, AMPX_NCCL_UNIQUE_ID_BYTES,
                   ampx_data_parallel_options)
from ._resource import Resource, read
from .context import Context, context_arg
from .errors import ArgumentTypeError, NotSupportedError
from .optim import Optimizer


def _id_bytes(unique_id) -> bytes:
    # memoryview, not bytes(): bytes(128) would be a zero id, not a type error.
    try:
        return bytes(memoryview(unique_id))
    except TypeError:
        raise ArgumentTypeError(f"unique_id must be bytes-like, not "
                                f"{type(unique_id).__name__}") from None


def nccl_unique_id() -> bytes:
    """A new NCCL unique id (``ampx_nccl_unique_id``), made on rank 0.

    Send its bytes to every other rank by any means (an MPI broadcast, a
    file, a socket), then call :meth:`Communicator.init_nccl` on every rank.
    Raises :class:`ampx.NotSupportedError` where NCCL cannot be loaded.
    """
    buffer = ctypes.create_string_buffer(AMPX_NCCL_UNIQUE_ID_BYTES)
    lib.ampx_nccl_unique_id(buffer, AMPX_NCCL_UNIQUE_ID_BYTES)
    return buffer.raw


class Communicator(Resource):
    """A group of ranks bound to one context (``ampx_comm``).

    Made by :meth:`from_mpi` (CPU contexts), :meth:`init_nccl` or
    :meth:`from_nccl` (CUDA contexts). It keeps its context alive; a
    :class:`DataParallel` keeps the communicator alive.
    """

    _kind = "communicator"

    def __init__(self, handle: int, context: Context):
        """Adopts one reference to ``handle`` (internal: use the class methods)."""
        super().__init__(handle, lib.ampx_comm_release)
        self._context = context

    @classmethod
    def from_mpi(cls, context: Context, comm=None) -> "Communicator":
        """A communicator over the ranks of an mpi4py communicator (default
        ``MPI.COMM_WORLD``), for a CPU context. Collective over ``comm``.

        ampx duplicates ``comm``, so its messages never mix with the
        program's and ``comm`` may be freed afterwards. mpi4py must be built
        against the MPI that ampx's plugin, ``libampx_mpi.so``, was built
        against. Raises :class:`ampx.NotSupportedError` for a CUDA context
        (use NCCL), without mpi4py, or where the plugin or libmpi cannot be
        loaded.
        """
        context = context_arg(context)
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise NotSupportedError(f"Communicator.from_mpi needs mpi4py ({exc})") from exc
        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Comm):
            raise ArgumentTypeError(f"comm must be an mpi4py communicator (MPI.Comm), not "
                                    f"{type(comm).__name__}")
        # The address of the MPI_Comm handle inside `comm`, which ampx reads
        # during the call only (ampx_comm_from_mpi takes an MPI_Comm *).
        return cls(read(lib.ampx_comm_from_mpi, ctypes.c_void_p, context.handle,
                        MPI._addressof(comm)), context)

    @classmethod
    def init_nccl(cls, context: Context, unique_id, world_size: int,
                  rank: int) -> "Communicator":
        """A new NCCL communicator of ``world_size`` ranks, this process being
        ``rank``, for a CUDA context, from the :func:`nccl_unique_id` bytes
        rank 0 made. Blocks until every rank has called it. ampx owns the
        NCCL communicator and destroys it with this object.
        """
        context = context_arg(context)
        data = _id_bytes(unique_id)
        return cls(read(lib.ampx_comm_init_nccl, ctypes.c_void_p, context.handle, data, len(data),
                        int_arg(world_size, "world_size"), int_arg(rank, "rank")), context)

    @classmethod
    def from_nccl(cls, context: Context, nccl_comm: int) -> "Communicator":
        """A communicator over the program's own ``ncclComm_t`` (its address as
        an int, e.g. ``cupy.cuda.nccl.NcclCommunicator.comm``), on the CUDA
        context's device. The program keeps owning it and destroys it after
        closing this object -- unless ampx aborted it after a timeout
        (:meth:`set_timeout`), which frees it.
        """
        context = context_arg(context)
        address = int_arg(nccl_comm, "nccl_comm", bits=64, unsigned=True)
        return cls(read(lib.ampx_comm_from_nccl, ctypes.c_void_p, context.handle, address), context)

    def _describe(self) -> str:
        return f"rank={self.rank}, size={self.size}"

    @property
    def context(self) -> Context:
        """The communicator's context."""
        return self._context

    def _rank_and_size(self) -> tuple[int, int]:
        rank, size = ctypes.c_int32(), ctypes.c_int32()
        lib.ampx_comm_rank(self.handle, ctypes.byref(rank), ctypes.byref(size))
        return rank.value, size.value

    @property
    def rank(self) -> int:
        """This process's rank, in [0, size)."""
        return self._rank_and_size()[0]

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self._rank_and_size()[1]

    def set_timeout(self, seconds: float) -> None:
        """The longest a host wait on this communicator's NCCL collectives may
        take before ampx aborts it and raises :class:`ampx.DeviceError`
        (default 600 s; finite and > 0). MPI waits cannot be interrupted:
        there the launcher ends a job whose rank died.
        """
        lib.ampx_comm_set_timeout(self.handle, float_arg(seconds, "seconds"))


class DataParallelStats(NamedTuple):
    """``ampx_data_parallel_stats`` (:meth:`DataParallel.stats`)."""

    rank: int
    world_size: int
    bucket_count: int
    bucket_bytes: int           # gradient buckets and fp32 reduction buffers
    buckets_launched: int       # of the iteration under way, so far
    last_launched_early: int    # of the last reduction: buckets sent during backward
    reductions: int             # reductions completed
    optimizer_state_bytes: int  # this rank's fp32 masters and moments
    shard_elements: int         # parameter elements this rank's optimizer updates


def _default_options() -> ampx_data_parallel_options:
    return lib.ampx_data_parallel_options_default()


class DataParallel(Resource):
    """An optimizer whose gradients are reduced over a communicator's ranks
    (``ampx_data_parallel``; torch's ``DistributedDataParallel``).

    Collective: every rank wraps an optimizer with the same parameters (in
    order, with equal dtypes and shapes; a mismatch fails on every rank).
    Rank 0's parameters, fp32 masters and moments are then broadcast, and
    each parameter's ``grad`` becomes a view of a flat bucket: keep those
    gradients attached (``optimizer.zero_grad()`` zeroes them in place;
    assigning ``param.grad`` makes the next backward raise
    :class:`ampx.OrderError`), and add no param groups.

    The loop is unchanged: ``backward`` reduces the buckets while it runs
    and has reduced every gradient when it returns; ``scaler.unscale_``
    reduces the found-inf flag, so every rank skips the same steps.

    Args (``None`` keeps the library default shown):
        comm: a :class:`Communicator` of the optimizer's context.
        optimizer: the :class:`ampx.Optimizer` to wrap.
        bucket_bytes: gradient bytes per bucket: 25 MiB.
        first_bucket_bytes: the first bucket of each dtype, reduced first: 1 MiB.
        average: True: gradients are averaged over the ranks; False: summed.
        reduce_in_fp32: True: F16/BF16 gradients are reduced in fp32.
        overlap: True: buckets are reduced while backward runs; False: all
            after it.
        zero_stage: 0: every rank keeps the whole optimizer state; 1
            (ZeRO-1): each rank keeps and steps its part only (see ampx.h).

    Close it (or use ``with``) at the same point on every rank: closing
    completes pending reductions, a collective.
    """

    _kind = "data-parallel wrapper"

    def __init__(self, comm: Communicator, optimizer: Optimizer, *,
                 bucket_bytes: int | None = None, first_bucket_bytes: int | None = None,
                 average: bool = True, reduce_in_fp32: bool = False, overlap: bool = True,
                 zero_stage: int = 0):
        if not isinstance(comm, Communicator):
            raise ArgumentTypeError(f"comm must be an ampx.dist.Communicator, not "
                                    f"{type(comm).__name__}")
        if not isinstance(optimizer, Optimizer):
            raise ArgumentTypeError(f"optimizer must be an ampx optimizer, not "
                                    f"{type(optimizer).__name__}")
        options = _default_options()
        if bucket_bytes is not None:
            options.bucket_bytes = int_arg(bucket_bytes, "bucket_bytes", bits=64, unsigned=True)
        if first_bucket_bytes is not None:
            options.first_bucket_bytes = int_arg(first_bucket_bytes, "first_bucket_bytes",
                                                 bits=64, unsigned=True)
        options.average = bool_arg(average, "average")
        options.reduce_in_fp32 = bool_arg(reduce_in_fp32, "reduce_in_fp32")
        options.overlap = bool_arg(overlap, "overlap")
        options.zero_stage = int_arg(zero_stage, "zero_stage")
        super().__init__(read(lib.ampx_data_parallel_create, ctypes.c_void_p, comm.handle,
                              optimizer.handle, ctypes.byref(options)),
                         lib.ampx_data_parallel_release)
        # ampx retains both in C; these keep the Python objects (and through
        # the optimizer, its parameter Tensors) for the properties below.
        self._comm = comm
        self._optimizer = optimizer
        self._sync = True

    def _describe(self) -> str:
        stats = self.stats()
        return f"rank={stats.rank}, world_size={stats.world_size}, buckets={stats.bucket_count}"

    @property
    def comm(self) -> Communicator:
        """The communicator the gradients are reduced over."""
        return self._comm

    @property
    def optimizer(self) -> Optimizer:
        """The wrapped optimizer."""
        return self._optimizer

    @property
    def sync(self) -> bool:
        """Whether backward passes reduce the gradients (see :meth:`set_sync`)."""
        return self._sync

    def set_sync(self, sync: bool) -> None:
        """Gradient accumulation: with ``sync`` False backward passes only
        accumulate, and nothing is communicated; turn it back on before the
        last micro-batch's backward, which reduces the sum. Unscaling,
        clipping or stepping while it is off raises :class:`ampx.OrderError`.
        """
        flag = bool_arg(sync, "sync")
        lib.ampx_data_parallel_set_sync(self.handle, flag)
        self._sync = bool(flag)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator["DataParallel"]:
        """A ``with`` block whose backward passes only accumulate (torch DDP's
        ``no_sync``); the setting it found is restored at its end, so the
        next backward, outside the block, reduces the accumulated sum."""
        previous = self._sync
        self.set_sync(False)
        try:
            yield self
        finally:
            if not self.closed:
                self.set_sync(previous)

    def set_fp8_recipe(self, recipe) -> None:
        """MAX-reduces ``recipe``'s step amaxes over the ranks before its
        updates, so every rank's FP8 scales stay bitwise equal (None
        detaches). Every rank attaches a recipe with the same slots."""
        from .fp8 import recipe_handle
        lib.ampx_data_parallel_set_fp8_recipe(self.handle, recipe_handle(recipe))
        self._fp8_recipe = recipe

    def reduce(self) -> None:
        """Completes the reduction now (for engines with their own backward
        pass that report gradients with :func:`ampx.grad_ready`); nothing to
        do when backward has reduced them already. Collective."""
        lib.ampx_data_parallel_reduce(self.handle)

    def stats(self) -> DataParallelStats:
        """Ranks, buckets and reduction counts (no sync)."""
        out = AMPX_DATA_PARALLEL_STATS_INIT()
        lib.ampx_data_parallel_get_stats(self.handle, ctypes.byref(out))
        return DataParallelStats(*(getattr(out, field) for field in DataParallelStats._fields))
