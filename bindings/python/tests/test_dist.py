"""Data-parallel training (ampx.dist) in one process: errors, ownership, and a
DataParallel over an MPI world of one rank, which must train exactly as the
optimizer alone. The runs over several ranks are in data_parallel_mpi.py
(under mpirun, from run_tests.sh). Tests that need MPI skip without mpi4py
or libampx_mpi.so (fail instead with AMPX_REQUIRE_BINDINGS=1)."""
import ctypes
import gc
import math
import os
import unittest

import numpy as np

import ampx
from ampx._lib import cdll
from ampx._raw import AMPX_NCCL_UNIQUE_ID_BYTES as NCCL_UNIQUE_ID_BYTES
from ampx._raw import ampx_data_parallel_options as DataParallelOptions
from common import OUT, batch, network_params, run_python


def _mpi_missing():
    """Why MPI cannot be used here, or None."""
    try:
        import mpi4py  # noqa: F401  (MPI itself is initialised by mpi4py.MPI, later)
    except ImportError:
        return "mpi4py is not installed (bindings/python/deps.sh installs it)"
    plugin = os.environ.get("AMPX_MPI_PLUGIN") or os.path.join(
        os.path.dirname(os.path.abspath(cdll._name)), "libampx_mpi.so")
    if not os.path.exists(plugin):
        return f"{plugin} does not exist (libampx was built without MPI)"
    return None


def _require_mpi(test: unittest.TestCase):
    reason = _mpi_missing()
    if reason is None:
        from mpi4py import MPI
        return MPI
    if os.environ.get("AMPX_REQUIRE_BINDINGS") == "1":
        test.fail(f"{reason}, and AMPX_REQUIRE_BINDINGS=1")
    test.skipTest(reason)


class WithoutMpiTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context(num_threads=1)

    def test_import_ampx_does_not_import_mpi4py(self):
        script = "import sys, ampx; print('mpi4py' in sys.modules)"
        self.assertEqual(run_python(self, script).stdout.strip(), "False")

    def test_from_mpi_without_mpi4py_is_not_supported(self):
        script = ("import sys; sys.modules['mpi4py'] = None\n"
                  "import ampx\n"
                  "try:\n"
                  "    ampx.Communicator.from_mpi(ampx.Context())\n"
                  "except ampx.NotSupportedError as exc:\n"
                  "    print(isinstance(exc.__cause__, ImportError))\n")
        self.assertEqual(run_python(self, script).stdout.strip(), "True")

    def test_nccl_on_a_cpu_context_is_not_supported(self):
        with self.assertRaises(ampx.NotSupportedError) as caught:
            ampx.Communicator.init_nccl(self.ctx, bytes(NCCL_UNIQUE_ID_BYTES), 1, 0)
        self.assertIsInstance(caught.exception, NotImplementedError)
        self.assertIn("ampx_comm_init_nccl", caught.exception.message)
        with self.assertRaises(ampx.NotSupportedError) as caught:
            ampx.Communicator.from_nccl(self.ctx, 0x1000)
        self.assertIn("ampx_comm_from_nccl", caught.exception.message)

    def test_nccl_argument_errors(self):
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            ampx.Communicator.init_nccl(self.ctx, b"short", 1, 0)
        self.assertIn("128", caught.exception.message)
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.Communicator.init_nccl(self.ctx, 128, 1, 0)  # not bytes(128)
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.Communicator.init_nccl("cpu", bytes(128), 1, 0)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Communicator.init_nccl(self.ctx, bytes(128), 2 ** 31, 0)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Communicator.from_nccl(self.ctx, 0)  # NULL
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Communicator.from_nccl(self.ctx, -1)

    def test_nccl_unique_id(self):
        try:
            unique_id = ampx.nccl_unique_id()
        except ampx.NotSupportedError as exc:  # no NCCL here: the message says what is missing
            self.assertIn("ampx_nccl_unique_id", exc.message)
        else:
            self.assertIsInstance(unique_id, bytes)
            self.assertEqual(len(unique_id), NCCL_UNIQUE_ID_BYTES)

    def test_data_parallel_argument_types(self):
        w = ampx.zeros((2,), context=self.ctx, requires_grad=True)
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.DataParallel(object(), ampx.SGD([w]))
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.DataParallel(None, ampx.SGD([w]))

    def test_options_struct_matches_the_library_defaults(self):
        options = ampx.dist._default_options()
        self.assertEqual(options.struct_size, ctypes.sizeof(DataParallelOptions))
        self.assertEqual((options.bucket_bytes, options.first_bucket_bytes), (25 << 20, 1 << 20))
        self.assertEqual((options.average, options.reduce_in_fp32, options.overlap,
                          options.zero_stage), (1, 0, 1, 0))


class Model:
    """Parameters, an AdamW, a scaler and an f16 autocast policy on one context."""

    def __init__(self, seed: int, dtype="f32"):
        self.ctx = ampx.Context(num_threads=1)
        self.params = network_params(self.ctx, seed, dtype)
        self.opt = ampx.AdamW(self.params, lr=1e-2)
        self.scaler = ampx.Scaler(self.ctx, init_scale=1024.0, growth_interval=3)
        self.autocast = ampx.Autocast(self.ctx, "f16")
        self.dtype = dtype

    def backward(self, step: int):
        x, y = batch(step)
        w1, b1, w2, b2 = self.params
        with self.ctx.scope():
            with self.autocast:
                bx = ampx.tensor(x, self.dtype, context=self.ctx)
                h = ampx.linear(bx, w1, b1, "relu")
                loss = ampx.mse_loss(ampx.linear(h, w2, b2),
                                     ampx.tensor(y, self.dtype, context=self.ctx))
            loss.backward(self.scaler)

    def update(self):
        self.scaler.unscale_(self.opt)
        ampx.clip_grad_norm_(self.opt, 1.0)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad()

    def param_bytes(self) -> bytes:
        return b"".join(p.numpy().tobytes() for p in self.params)


class OneRankTest(unittest.TestCase):
    """MPI.COMM_WORLD of this process alone (MPI's singleton start, no mpirun)."""

    def setUp(self):
        self.MPI = _require_mpi(self)

    def test_communicator(self):
        ctx = ampx.Context(num_threads=1)
        with ampx.Communicator.from_mpi(ctx, self.MPI.COMM_WORLD) as comm:
            self.assertEqual((comm.rank, comm.size), (0, 1))
            self.assertIs(comm.context, ctx)
            self.assertEqual(repr(comm), "Communicator(rank=0, size=1)")
            comm.set_timeout(30)
            comm.set_timeout(0.5)
        self.assertTrue(comm.closed)
        self.assertEqual(repr(comm), "Communicator(<closed>)")
        with self.assertRaises(ampx.StaleHandleError):
            comm.rank
        self_comm = ampx.Communicator.from_mpi(ctx, self.MPI.COMM_SELF)  # any intracommunicator
        self.assertEqual(self_comm.size, 1)
        default = ampx.Communicator.from_mpi(ctx)  # COMM_WORLD
        self.assertEqual(default.size, self.MPI.COMM_WORLD.Get_size())

    def test_communicator_errors(self):
        ctx = ampx.Context(num_threads=1)
        comm = ampx.Communicator.from_mpi(ctx, self.MPI.COMM_WORLD)
        for bad in (0.0, -1.0, math.inf, math.nan):
            with self.assertRaises(ampx.InvalidArgumentError) as caught:
                comm.set_timeout(bad)
            self.assertIn("ampx_comm_set_timeout", caught.exception.message)
        with self.assertRaises(ampx.ArgumentTypeError):
            comm.set_timeout("10")
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            ampx.Communicator.from_mpi(ctx, self.MPI.COMM_NULL)
        self.assertIn("MPI_COMM_NULL", caught.exception.message)
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.Communicator.from_mpi(ctx, "COMM_WORLD")
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.Communicator.from_mpi(None, self.MPI.COMM_WORLD)
        ctx.close()
        with self.assertRaises(ampx.StaleHandleError):
            ampx.Communicator.from_mpi(ctx, self.MPI.COMM_WORLD)
        self.assertEqual(comm.size, 1)  # keeps the C context alive

    def test_one_rank_trains_exactly_as_the_optimizer_alone(self):
        for dtype in ("f32", "f16"):
            with self.subTest(dtype=dtype):
                alone, wrapped = Model(7, dtype), Model(7, dtype)
                comm = ampx.Communicator.from_mpi(wrapped.ctx, self.MPI.COMM_WORLD)
                dp = ampx.DataParallel(comm, wrapped.opt, bucket_bytes=256,
                                       first_bucket_bytes=64)
                self.assertIs(dp.comm, comm)
                self.assertIs(dp.optimizer, wrapped.opt)
                inject_at, steps = 3, 8
                for step in range(steps):
                    for model in (alone, wrapped):
                        model.backward(step)
                        if step == inject_at:  # after the reduction: only unscale sees it
                            grad = model.params[2].grad
                            values = grad.numpy()
                            values.flat[5] = np.inf
                            grad.copy_(values)
                        model.update()
                    self.assertEqual(wrapped.param_bytes(), alone.param_bytes(), f"step {step}")
                    self.assertEqual(wrapped.opt.last_step_taken(), step != inject_at)
                    self.assertEqual(wrapped.scaler.get_scale(), alone.scaler.get_scale())
                stats = dp.stats()
                self.assertEqual((stats.rank, stats.world_size), (0, 1))
                self.assertEqual(stats.reductions, steps)
                self.assertGreater(stats.bucket_count, 1)
                self.assertGreater(stats.bucket_bytes, 0)
                self.assertEqual(stats.last_launched_early, stats.bucket_count)
                self.assertEqual(stats.buckets_launched, 0)
                self.assertEqual(stats.shard_elements, sum(p.numel() for p in wrapped.params))
                self.assertIn("world_size=1", repr(dp))
                dp.close()
                self.assertEqual(repr(dp), "DataParallel(<closed>)")
                # The gradients stay attached and the optimizer works alone again.
                wrapped.backward(steps)
                wrapped.update()

    def test_no_sync_accumulates_and_restores(self):
        model = Model(5)
        comm = ampx.Communicator.from_mpi(model.ctx, self.MPI.COMM_WORLD)
        dp = ampx.DataParallel(comm, model.opt, overlap=False, reduce_in_fp32=True)
        self.assertTrue(dp.sync)
        with dp.no_sync() as same:
            self.assertIs(same, dp)
            self.assertFalse(dp.sync)
            model.backward(0)
            self.assertEqual(dp.stats().buckets_launched, 0)
            with self.assertRaises(ampx.OrderError) as caught:
                model.scaler.unscale_(model.opt)  # each rank would step on its own gradients
            self.assertIn("synchronization is off", caught.exception.message)
            with self.assertRaises(ampx.OrderError):
                dp.reduce()
            with dp.no_sync():
                self.assertFalse(dp.sync)
            self.assertFalse(dp.sync)  # the inner block restored what it found
        self.assertTrue(dp.sync)
        model.backward(1)
        dp.reduce()  # reduced by backward already: nothing to do
        self.assertEqual(dp.stats().reductions, 1)
        self.assertEqual(dp.stats().last_launched_early, 0)  # overlap=False
        model.update()
        with self.assertRaises(KeyError):
            with dp.no_sync():
                raise KeyError("from the block")
        self.assertTrue(dp.sync)
        dp.set_sync(False)
        with dp.no_sync():
            pass
        self.assertFalse(dp.sync)
        dp.set_sync(True)
        with dp.no_sync():
            dp.close()  # the end of the block has nothing to restore
        with self.assertRaises(ampx.StaleHandleError):
            dp.set_sync(True)

    def test_options_reach_the_library(self):
        sizes = {}
        for reduce_in_fp32 in (False, True):
            model = Model(1, "f16")
            comm = ampx.Communicator.from_mpi(model.ctx, self.MPI.COMM_WORLD)
            with ampx.DataParallel(comm, model.opt, reduce_in_fp32=reduce_in_fp32) as dp:
                sizes[reduce_in_fp32] = dp.stats().bucket_bytes
            self.assertTrue(dp.closed)
        self.assertGreater(sizes[True], sizes[False])  # plus the fp32 reduction buffers
        model = Model(1)
        comm = ampx.Communicator.from_mpi(model.ctx, self.MPI.COMM_WORLD)
        with ampx.DataParallel(comm, model.opt, bucket_bytes=64, first_bucket_bytes=64) as dp:
            self.assertEqual(dp.stats().bucket_count, len(model.params))

    def test_data_parallel_errors(self):
        model = Model(3)
        comm = ampx.Communicator.from_mpi(model.ctx, self.MPI.COMM_WORLD)
        for options, words in (({"bucket_bytes": 0}, "bucket_bytes"),
                               ({"first_bucket_bytes": 0}, "first_bucket_bytes"),
                               ({"zero_stage": 2}, "zero_stage")):
            with self.assertRaises(ampx.InvalidArgumentError) as caught:
                ampx.DataParallel(comm, model.opt, **options)
            self.assertIn(words, caught.exception.message)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.DataParallel(comm, model.opt, bucket_bytes=-1)
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.DataParallel(comm, model.opt, average="yes")
        other = ampx.Context(num_threads=1)
        with self.assertRaises(ampx.DeviceError):
            ampx.DataParallel(ampx.Communicator.from_mpi(other), model.opt)
        dp = ampx.DataParallel(comm, model.opt)
        with self.assertRaises(ampx.InvalidArgumentError) as caught:
            ampx.DataParallel(comm, model.opt)
        self.assertIn("already", caught.exception.message)
        # The wrapper fixes the param groups and owns the gradients.
        with self.assertRaises(ampx.OrderError):
            model.opt.add_param_group([ampx.zeros((2,), context=model.ctx, requires_grad=True)])
        model.params[3].grad = ampx.zeros((OUT,), context=model.ctx)
        with self.assertRaises(ampx.OrderError) as caught:
            model.backward(0)
        self.assertIn("bucket view", caught.exception.message)
        dp.close()
        dp.close()  # idempotent
        with self.assertRaises(ampx.StaleHandleError):
            dp.reduce()
        with self.assertRaises(ampx.StaleHandleError):
            dp.stats()

    def test_wrapper_keeps_what_it_wraps(self):
        model = Model(9)
        comm = ampx.Communicator.from_mpi(model.ctx, self.MPI.COMM_WORLD)
        dp = ampx.DataParallel(comm, model.opt)
        opt, scaler = model.opt, model.scaler
        # Every Python reference but the wrapper's goes: C and Python both keep them.
        comm.close()
        del comm, model.opt
        gc.collect()
        model.backward(0)
        scaler.step(opt)
        scaler.update()
        self.assertEqual(dp.stats().reductions, 1)
        self.assertEqual(dp.comm.closed, True)  # closed by the program, alive in C
        for order in ((0, 1, 2, 3), (3, 2, 1, 0), (1, 3, 0, 2)):
            model = Model(11)
            comm = ampx.Communicator.from_mpi(model.ctx, self.MPI.COMM_WORLD)
            dp = ampx.DataParallel(comm, model.opt)
            model.backward(0)
            objects = [model.ctx, comm, dp, model.opt]
            for index in order:
                objects[index].close()
            del objects, comm, dp, model
            gc.collect()

    def test_interpreter_exit_with_live_objects(self):
        # Released by the finalizers at exit, before or after mpi4py's MPI_Finalize.
        script = (
            "import numpy as np, ampx\n"
            "from mpi4py import MPI\n"
            "ctx = ampx.Context(num_threads=1)\n"
            "w = ampx.tensor(np.ones((2, 2), np.float32), context=ctx, requires_grad=True)\n"
            "opt = ampx.SGD([w], lr=0.1)\n"
            "comm = ampx.Communicator.from_mpi(ctx, MPI.COMM_WORLD)\n"
            "dp = ampx.DataParallel(comm, opt)\n"
            "ampx.linear(w, w).sum().backward()\n"
            "print('done')\n")
        self.assertEqual(run_python(self, script).stdout.strip(), "done")


if __name__ == "__main__":
    unittest.main()
