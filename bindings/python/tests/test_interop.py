"""(4) NumPy and DLPack round trips, with memory shared where promised."""
import gc
import unittest

import numpy as np
import torch
import torch.utils.dlpack

import ampx


class NumpyTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def test_copy_round_trips_every_dtype(self):
        for dtype, values in ((np.float32, [[1.5, -2.0], [3.25, 0.0]]), (np.float16, [1.0, 65504]),
                              (np.int32, [1, -7, 2 ** 31 - 1]), (np.int64, [2 ** 40, -1])):
            array = np.asarray(values, dtype=dtype)
            t = ampx.tensor(array, context=self.ctx)
            self.assertEqual(t.shape, array.shape)
            back = t.numpy()
            self.assertEqual(back.dtype, array.dtype)
            np.testing.assert_array_equal(back, array)
            self.assertNotEqual(back.ctypes.data, t.data_ptr)  # numpy() copies

    def test_inferred_and_converted_dtypes(self):
        self.assertEqual(ampx.tensor([1.0, 2.0], context=self.ctx).dtype, ampx.F32)
        self.assertEqual(ampx.tensor([1, 2], context=self.ctx).dtype, ampx.I64)
        self.assertEqual(ampx.tensor(3.0, context=self.ctx).shape, ())
        t = ampx.tensor([0.1, 1 / 3], "f16", context=self.ctx)
        np.testing.assert_array_equal(t.numpy(), np.array([0.1, 1 / 3], np.float16))

    def test_bf16_travels_as_uint16_bits(self):
        t = ampx.tensor([1.0, -2.5, 1 + 2 ** -9], "bf16", context=self.ctx)  # rounds to even
        bits = t.numpy()
        self.assertEqual(bits.dtype, np.uint16)
        np.testing.assert_array_equal(bits, [0x3F80, 0xC020, 0x3F80])
        again = ampx.tensor(bits, "bf16", context=self.ctx)
        np.testing.assert_array_equal(again.to("f32").numpy(), [1.0, -2.5, 1.0])
        self.assertEqual(ampx.tensor(bits[1:2], "bf16", context=self.ctx).item(), -2.5)
        again.copy_([3.0, 4.0, 5.0])  # floats into bf16: rounded by ampx
        np.testing.assert_array_equal(again.to("f32").numpy(), [3.0, 4.0, 5.0])

    def test_from_numpy_shares_memory(self):
        array = np.arange(6, dtype=np.float32).reshape(2, 3)
        t = ampx.Tensor.from_numpy(array, context=self.ctx)
        self.assertEqual(t.data_ptr, array.ctypes.data)
        t.fill_(7.0)
        np.testing.assert_array_equal(array, np.full((2, 3), 7.0, np.float32))
        array[1, 2] = -1.0
        self.assertEqual(t.numpy()[1, 2], -1.0)
        # The tensor keeps the array alive.
        del array
        gc.collect()
        self.assertEqual(t.numpy()[1, 2], -1.0)
        bits = np.zeros(4, np.uint16)
        self.assertEqual(ampx.Tensor.from_numpy(bits, dtype="bf16", context=self.ctx).dtype,
                         ampx.BF16)

    def test_from_numpy_refuses_what_it_cannot_share(self):
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Tensor.from_numpy(np.zeros((4, 4), np.float32)[:, ::2], context=self.ctx)
        readonly = np.zeros(3, np.float32)
        readonly.flags.writeable = False
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.Tensor.from_numpy(readonly, context=self.ctx)
        with self.assertRaises(ampx.DTypeError):
            ampx.Tensor.from_numpy(np.zeros(3, np.float64), context=self.ctx)
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.Tensor.from_numpy([1.0], context=self.ctx)

    def test_array_protocol_and_operators_with_numbers(self):
        t = ampx.tensor([1.0, 2.0], context=self.ctx)
        np.testing.assert_array_equal(np.asarray(t), [1.0, 2.0])
        np.testing.assert_array_equal((2 * t + 1).numpy(), [3.0, 5.0])
        np.testing.assert_array_equal((1 - t).numpy(), [0.0, -1.0])
        np.testing.assert_array_equal((np.float32(3) * t).numpy(), [3.0, 6.0])
        np.testing.assert_array_equal((-t).numpy(), [-1.0, -2.0])


class DLPackTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()

    def test_numpy_view_of_ampx_tensor(self):
        t = ampx.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), context=self.ctx)
        self.assertEqual(t.__dlpack_device__(), (1, 0))
        view = np.from_dlpack(t)
        self.assertEqual(view.ctypes.data, t.data_ptr)
        t.fill_(2.0)  # NumPy marks unversioned DLPack imports read-only; write from ampx
        np.testing.assert_array_equal(view, np.full((2, 3), 2.0, np.float32))
        del t
        gc.collect()
        np.testing.assert_array_equal(view, np.full((2, 3), 2.0, np.float32))  # kept alive

    def test_ampx_view_of_numpy_array(self):
        for dtype in (np.float32, np.float16, np.int32, np.int64):
            array = np.arange(5, dtype=dtype)
            t = ampx.from_dlpack(array, context=self.ctx)
            self.assertEqual(t.data_ptr, array.ctypes.data)
            np.testing.assert_array_equal(t.numpy(), array)

    def test_torch_round_trips_share_memory(self):
        t = ampx.tensor(np.arange(4, dtype=np.float32), context=self.ctx)
        for to_torch in (torch.from_dlpack,
                         lambda x: torch.utils.dlpack.from_dlpack(x.__dlpack__())):
            view = to_torch(t)
            self.assertEqual(view.data_ptr(), t.data_ptr)
            view[0] = 42.0
            self.assertEqual(t.numpy()[0], 42.0)

        source = torch.linspace(0, 1, 6).reshape(2, 3)
        for capsule_or_tensor in (source, torch.utils.dlpack.to_dlpack(source)):
            imported = ampx.from_dlpack(capsule_or_tensor, context=self.ctx)
            self.assertEqual(imported.data_ptr, source.data_ptr())
            self.assertEqual(imported.shape, (2, 3))
            imported.fill_(0.5)
            self.assertTrue(bool((source == 0.5).all()))

        # torch -> ampx -> torch: the same memory all the way.
        again = torch.from_dlpack(ampx.from_dlpack(source, context=self.ctx))
        self.assertEqual(again.data_ptr(), source.data_ptr())

    def test_bf16_and_half_with_torch(self):
        for dtype in (torch.bfloat16, torch.float16):
            source = torch.tensor([1.5, -2.25, 3.0], dtype=dtype)
            t = ampx.from_dlpack(source, context=self.ctx)
            self.assertEqual(t.dtype, ampx.BF16 if dtype == torch.bfloat16 else ampx.F16)
            np.testing.assert_array_equal(t.to("f32").numpy(), [1.5, -2.25, 3.0])
            self.assertTrue(torch.equal(torch.from_dlpack(t), source))

    def test_imported_memory_outlives_the_producer(self):
        source = torch.arange(3, dtype=torch.int64)
        t = ampx.from_dlpack(source, context=self.ctx)
        del source
        gc.collect()
        np.testing.assert_array_equal(t.numpy(), [0, 1, 2])

    def test_capsules(self):
        t = ampx.zeros((3,), context=self.ctx)
        unused = t.__dlpack__()
        del unused  # an unconsumed capsule releases its reference
        gc.collect()
        capsule = t.__dlpack__()
        ampx.from_dlpack(capsule, context=self.ctx)
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.from_dlpack(capsule, context=self.ctx)  # consumed already
        copy = torch.from_dlpack(t.__dlpack__(copy=True))
        self.assertNotEqual(copy.data_ptr(), t.data_ptr)
        with self.assertRaises(BufferError):
            t.__dlpack__(dl_device=(2, 0))
        with self.assertRaises(ampx.ArgumentTypeError):
            ampx.from_dlpack(object(), context=self.ctx)

    def test_non_contiguous_producer_is_refused(self):
        with self.assertRaises(ampx.NotSupportedError):
            ampx.from_dlpack(torch.zeros(4, 4).t(), context=self.ctx)


if __name__ == "__main__":
    unittest.main()
