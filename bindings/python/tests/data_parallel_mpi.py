"""ampx.DataParallel over several ranks; run under mpirun (run_tests.sh does):

    mpirun -np 2 python3 data_parallel_mpi.py

Each rank trains on its slice of every global batch, from its own random
parameters. After every step all ranks' parameters must be bitwise
identical (so rank 0's were broadcast), and close to one process training
on the whole batch without the wrapper. An inf written into one rank's
gradient after backward must make every rank skip that step and back off
alike. Prints one line per check on rank 0; exits 1 if any rank failed one.
"""
from __future__ import annotations

import sys
import traceback

import numpy as np
from mpi4py import MPI

import ampx
from common import BATCH, batch, network_params

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
failures: list[str] = []
passed = 0


def check(condition: bool, what: str) -> None:
    global passed
    if condition:
        passed += 1
    else:
        failures.append(what)
        print(f"rank {RANK}: FAILED: {what}", flush=True)


def same_on_every_rank(data: bytes) -> bool:
    return all(other == data for other in WORLD.allgather(data))


class Trainer:
    """A two-layer network with a scaler.

    mode "autocast": f32 parameters, f16 autocast, AdamW; "f16": f16
    parameters, SGD with momentum; "f32": f32 parameters, SGD, no autocast.
    With ``comm`` the gradients are reduced by a DataParallel and each step
    trains on this rank's slice of the batch.
    """

    def __init__(self, mode: str, seed: int, comm_of=None, **options):
        self.ctx = ampx.Context(num_threads=1)  # ranks share the cores
        self.dtype = "f16" if mode == "f16" else "f32"
        self.params = network_params(self.ctx, seed, self.dtype)
        if mode == "autocast":
            self.opt = ampx.AdamW(self.params, lr=1e-2)
        else:
            self.opt = ampx.SGD(self.params, lr=0.05, momentum=0.9)
        self.autocast = ampx.Autocast(self.ctx, "f16", enabled=mode == "autocast")
        self.scaler = ampx.Scaler(self.ctx, init_scale=1024.0, growth_interval=10)
        self.comm = self.dp = None
        if comm_of is not None:
            self.comm = ampx.Communicator.from_mpi(self.ctx, comm_of)
            self.dp = ampx.DataParallel(self.comm, self.opt, **options)

    def rows(self):
        """(first row, row count) of this trainer's part of a batch."""
        if self.dp is None:
            return 0, BATCH
        rows = BATCH // SIZE
        return RANK * rows, rows

    def backward(self, step: int, first: int, rows: int, reduction="mean"):
        x, y = batch(step)
        w1, b1, w2, b2 = self.params
        with self.ctx.scope():
            with self.autocast:
                bx = ampx.tensor(x[first:first + rows], self.dtype, context=self.ctx)
                by = ampx.tensor(y[first:first + rows], self.dtype, context=self.ctx)
                out = ampx.linear(ampx.linear(bx, w1, b1, "relu"), w2, b2)
                loss = ampx.mse_loss(out, by, reduction)
            loss.backward(self.scaler)

    def update(self):
        self.scaler.unscale_(self.opt)
        ampx.clip_grad_norm_(self.opt, 1.0)
        self.scaler.step(self.opt)
        self.scaler.update()

    def train_step(self, step: int):
        self.opt.zero_grad()
        self.backward(step, *self.rows())
        self.update()

    def param_bytes(self) -> bytes:
        return b"".join(p.numpy().tobytes() for p in self.params)

    def close(self):
        # Collective (pending reductions complete): every rank closes here.
        for resource in (self.dp, self.comm):
            if resource is not None:
                resource.close()


def relative_difference(a: Trainer, b: Trainer) -> float:
    diff = size = 0.0
    for p, q in zip(a.params, b.params):
        x, y = p.to("f32").numpy().astype(np.float64), q.to("f32").numpy().astype(np.float64)
        diff = max(diff, float(np.abs(x - y).max()))
        size = max(size, float(np.abs(y).max()))
    return diff / size


def against_one_process(mode: str, tolerance: float, **options) -> None:
    what = f"{mode}{' ' + str(options) if options else ''}"
    ranks = Trainer(mode, 7 + RANK, WORLD, **options)
    single = Trainer(mode, 7)  # rank 0's initial parameters, the whole batch
    check(same_on_every_rank(ranks.param_bytes()), f"{what}: rank 0's parameters broadcast")
    steps, identical = 30, True
    for step in range(steps):
        ranks.train_step(step)
        single.train_step(step)
        identical = identical and same_on_every_rank(ranks.param_bytes())
    check(identical, f"{what}: parameters bitwise identical on every rank after every step")
    check(ranks.scaler.get_scale() == single.scaler.get_scale(), f"{what}: the same scale")
    difference = relative_difference(ranks, single)
    check(difference < tolerance, f"{what}: {difference:.2e} from one process (< {tolerance})")
    stats = ranks.dp.stats()
    check((stats.rank, stats.world_size, stats.reductions) == (RANK, SIZE, steps),
          f"{what}: stats {stats}")
    if options.get("zero_stage"):
        total = sum(p.numel() for p in ranks.params)
        check(stats.shard_elements < total, f"{what}: this rank steps its part only: {stats}")
    if RANK == 0:
        print(f"{what}: {SIZE} ranks vs one process after {steps} steps: max relative "
              f"difference {difference:.2e}", flush=True)
    ranks.close()


def inf_on_one_rank() -> None:
    """The inf enters after backward's reduction, where only the last rank's
    unscale sees it: without the MAX-reduction of found-inf that rank would
    skip and the others step."""
    for mode in ("f16", "autocast"):
        t = Trainer(mode, 11 + RANK, WORLD)
        inject_at, taken, scales, identical = 4, [], [], True
        for step in range(10):
            t.opt.zero_grad()
            t.backward(step, *t.rows())
            if step == inject_at and RANK == SIZE - 1:
                grad = t.params[2].grad
                values = grad.numpy()
                values.flat[5] = np.inf
                grad.copy_(values)
            t.update()
            taken.append(t.opt.last_step_taken())
            scales.append(t.scaler.get_scale())
            identical = identical and same_on_every_rank(t.param_bytes())
        check(taken == [step != inject_at for step in range(10)],
              f"{mode}: every rank skipped step {inject_at} only: {taken}")
        check(scales[inject_at] == scales[inject_at - 1] * 0.5, f"{mode}: backed off: {scales}")
        check(same_on_every_rank(np.array(scales).tobytes()), f"{mode}: equal scales")
        check(identical, f"{mode}: parameters bitwise identical with a skipped step")
        t.close()


def accumulation() -> None:
    """Two micro-batches, the first under no_sync, vs the slice in one
    backward; summed losses, so the gradients add up."""
    accumulating, whole = Trainer("f32", 5, WORLD), Trainer("f32", 5, WORLD)
    first, rows = accumulating.rows()
    for step in range(5):
        accumulating.opt.zero_grad()
        with accumulating.dp.no_sync():
            accumulating.backward(step, first, rows // 2, "sum")
            launched = accumulating.dp.stats().buckets_launched
        accumulating.backward(step, first + rows // 2, rows - rows // 2, "sum")
        accumulating.update()
        whole.opt.zero_grad()
        whole.backward(step, first, rows, "sum")
        whole.update()
    check(launched == 0, "no_sync: nothing sent")
    check(accumulating.dp.stats().reductions == 5, "no_sync: one reduction per step")
    check(same_on_every_rank(accumulating.param_bytes()), "no_sync: bitwise identical")
    difference = relative_difference(accumulating, whole)
    check(difference < 1e-5, f"no_sync: {difference:.2e} from one backward over the slice")
    accumulating.close()
    whole.close()


def mismatched_parameters() -> None:
    """Ranks whose parameters differ all fail, none hangs, and the message
    names the first difference."""
    ctx = ampx.Context(num_threads=1)
    comm = ampx.Communicator.from_mpi(ctx, WORLD)
    last = SIZE - 1
    a = ampx.zeros((3, 4) if RANK == last else (4, 3), context=ctx, requires_grad=True)
    b = ampx.zeros((4,), context=ctx, requires_grad=True)
    try:
        ampx.DataParallel(comm, ampx.SGD([b, a]))
        message = None
    except ampx.InvalidArgumentError as exc:
        message = exc.message
    expected = f"parameter 1 is f32[3, 4] on rank {last} but f32[4, 3] on rank 0"
    check(message is not None and expected in message, f"mismatch reported: {message!r}")
    with ampx.DataParallel(comm, ampx.SGD([b])):  # the communicator still works
        pass
    comm.close()


def fp8_amax_over_ranks() -> None:
    """A recipe attached to the wrapper takes the MAX of the ranks' step
    amaxes (rank r quantizes a tensor of amax 2 (r + 1)), so every rank's
    scale is 448 / (2 SIZE) (delayed scaling, margin 0)."""
    ctx = ampx.Context(num_threads=1)
    comm = ampx.Communicator.from_mpi(ctx, WORLD)
    p = ampx.zeros((4,), context=ctx, requires_grad=True)
    with ampx.DataParallel(comm, ampx.SGD([p])) as dp, \
            ampx.Fp8Recipe(ctx, amax_history_len=2) as recipe:
        slot = recipe.add_tensor("forward", "x")
        dp.set_fp8_recipe(recipe)
        recipe.quantize(slot, ampx.tensor([0.5, -2.0 * (RANK + 1)], context=ctx))
        recipe.update()  # no unscale came before: the update reduces itself
        info = recipe.slot(slot)
        expected = np.float32(448.0) / np.float32(2 * SIZE)
        check(info.scale == expected, f"fp8: scale {info.scale} == 448 / (2 * {SIZE})")
        check(info.history == [0.0, 2.0 * SIZE], f"fp8: history {info.history}")
        check(same_on_every_rank(np.float32(info.scale).tobytes()), "fp8: equal scales")
        dp.set_fp8_recipe(None)
    comm.close()


def main() -> int:
    if BATCH % SIZE:
        if RANK == 0:
            print(f"data_parallel_mpi: {SIZE} ranks do not divide the batch of {BATCH} rows",
                  file=sys.stderr, flush=True)
        return 2
    against_one_process("f32", 1e-5)
    against_one_process("autocast", 1e-3, bucket_bytes=256, first_bucket_bytes=64)
    against_one_process("f16", 5e-3)
    against_one_process("f16", 5e-3, reduce_in_fp32=True, overlap=False)
    against_one_process("autocast", 1e-3, zero_stage=1)
    inf_on_one_rank()
    accumulation()
    mismatched_parameters()
    fp8_amax_over_ranks()
    failed = WORLD.allreduce(len(failures), op=MPI.SUM)
    total = WORLD.allreduce(passed + len(failures), op=MPI.SUM)
    if RANK == 0:
        print(f"data_parallel_mpi ({SIZE} ranks): {total - failed} passed, {failed} failed",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        status = main()
    except BaseException:  # noqa: B902
        # The other ranks would wait for this one in their next collective:
        # end the job instead, as mpirun does for a rank that dies.
        traceback.print_exc()
        print(f"rank {RANK}: an exception (above); ending the job", file=sys.stderr, flush=True)
        WORLD.Abort(1)
    sys.exit(status)
