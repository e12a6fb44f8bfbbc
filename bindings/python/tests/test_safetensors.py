"""safetensors files against the format's reference library (PyPI safetensors):
its files load into ampx bit for bit, ampx's load in it bit for bit, for every
dtype; truncated, corrupted and malicious files are refused as CORRUPT and
change nothing."""
import json
import os
import pathlib
import struct
import tempfile
import unittest

import numpy as np
import torch

import ampx

try:
    import safetensors
    import safetensors.torch
except ImportError:  # CI installs it (bindings/python/deps.sh)
    safetensors = None

REASON = "the Python package safetensors is missing (bindings/python/deps.sh installs it)"

TORCH_OF = {ampx.F32: torch.float32, ampx.F16: torch.float16, ampx.BF16: torch.bfloat16,
            ampx.I32: torch.int32, ampx.I64: torch.int64}


def torch_bytes(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).numpy())


def ampx_bytes(t: ampx.Tensor) -> bytes:
    return t.numpy().tobytes()


def random_state(seed: int) -> dict:
    """A state dict of every dtype from random bits (NaN payloads, subnormals, infinities)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for i, (dtype, torch_dtype) in enumerate(TORCH_OF.items()):
        shape = [(2, 3), (7,), (), (0, 4), (1, 2, 2)][i]
        numel = 1
        for d in shape:
            numel *= d
        raw = torch.randint(0, 256, (numel * torch_dtype.itemsize,), dtype=torch.uint8, generator=g)
        state[f"layer{i}.{dtype}"] = raw.view(torch_dtype).reshape(shape)
    return state


def file_of(header: bytes, data: bytes) -> bytes:
    """A file as the format describes it: u64 little-endian header length, header, data."""
    return struct.pack("<Q", len(header)) + header + data


@unittest.skipUnless(safetensors is not None, REASON)
class SafetensorsInteropTest(unittest.TestCase):
    def setUp(self):
        self.ctx = ampx.Context()
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "model.safetensors")

    def tearDown(self):
        self.dir.cleanup()

    def test_a_torch_state_dict_loads_bit_for_bit(self):
        state = random_state(1)
        safetensors.torch.save_file(state, self.path, metadata={"format": "pt", "step": "7"})
        loaded = ampx.load_safetensors(self.path, context=self.ctx)
        self.assertEqual(sorted(loaded), sorted(state))
        for name, t in state.items():
            self.assertEqual(loaded[name].shape, tuple(t.shape), name)
            self.assertEqual(TORCH_OF[loaded[name].dtype], t.dtype, name)
            self.assertEqual(ampx_bytes(loaded[name]), torch_bytes(t), name)
            self.assertEqual(loaded[name].name, name)
        with ampx.SafetensorsFile(self.path, context=self.ctx) as f:
            self.assertEqual(f.metadata(), {"format": "pt", "step": "7"})
            self.assertEqual(sorted(f.keys()), sorted(state))
            self.assertEqual(len(f), len(state))
            self.assertIn("layer0.f32", f)
            self.assertNotIn("layer9", f)
        # Into existing tensors too, by name.
        targets = {name: ampx.zeros(tuple(t.shape), next(d for d, td in TORCH_OF.items()
                                                          if td == t.dtype), context=self.ctx)
                   for name, t in state.items()}
        ampx.load_safetensors_into(self.path, targets, context=self.ctx)
        for name, t in state.items():
            self.assertEqual(ampx_bytes(targets[name]), torch_bytes(t), name)

    def test_ampx_files_load_in_torch_bit_for_bit(self):
        state = random_state(2)
        tensors = {}
        for name, t in state.items():
            dtype = next(d for d, td in TORCH_OF.items() if td == t.dtype)
            bits = (t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16
                    else t.numpy())
            tensors[name] = ampx.tensor(bits, dtype, context=self.ctx)
            self.assertEqual(ampx_bytes(tensors[name]), torch_bytes(t))
        ampx.save_safetensors(self.path, tensors, metadata={"producer": "ampx", "ü": "✓"})
        back = safetensors.torch.load_file(self.path)
        self.assertEqual(sorted(back), sorted(state))
        for name, t in state.items():
            self.assertEqual(back[name].dtype, t.dtype, name)
            self.assertEqual(tuple(back[name].shape), tuple(t.shape), name)
            self.assertEqual(torch_bytes(back[name]), torch_bytes(t), name)
        with safetensors.safe_open(self.path, framework="pt") as f:
            self.assertEqual(f.metadata(), {"producer": "ampx", "ü": "✓"})

    def test_named_tensors_save_under_their_names(self):
        w = ampx.tensor([[1.0, -2.0]], context=self.ctx, name="fc.weight")
        b = ampx.tensor([0.5], "bf16", context=self.ctx, name="fc.bias")
        ampx.save_safetensors(self.path, [w, b])
        back = safetensors.torch.load_file(self.path)
        self.assertEqual(back["fc.weight"].tolist(), [[1.0, -2.0]])
        self.assertEqual(back["fc.bias"].dtype, torch.bfloat16)
        self.assertEqual(back["fc.bias"].tolist(), [0.5])
        with self.assertRaises(ampx.InvalidArgumentError):
            ampx.save_safetensors(self.path, [ampx.tensor([1.0], context=self.ctx)])

    def test_zero_copy_on_the_cpu(self):
        safetensors.torch.save_file({"w": torch.arange(256, dtype=torch.float32)}, self.path)
        before = self.ctx.memory_stats().current_bytes
        with ampx.SafetensorsFile(self.path, context=self.ctx) as f:
            mapped = f.load("w")
            copied = f.load("w", copy=True)
            entry = f.entries()[0]
        self.assertEqual(entry.dtype, ampx.F32)
        self.assertEqual(entry.nbytes, 1024)
        # Only the copy is new memory; the mapped tensor outlives the handle.
        self.assertEqual(self.ctx.memory_stats().current_bytes, before + 1024)
        self.assertEqual(mapped.numpy().tolist(), list(range(256)))
        self.assertEqual(copied.numpy().tolist(), list(range(256)))
        before_file = pathlib.Path(self.path).read_bytes()
        mapped.fill_(1.0)  # copy-on-write: the file stays as it was
        self.assertEqual(pathlib.Path(self.path).read_bytes(), before_file)

    def test_conversion_only_when_asked(self):
        safetensors.torch.save_file({"w": torch.tensor([1.5, -2.25, 1024.0])}, self.path)
        half = ampx.tensor([7.0, 7.0, 7.0], "f16", context=self.ctx)
        with self.assertRaises(ampx.DTypeError):
            ampx.load_safetensors_into(self.path, {"w": half}, context=self.ctx)
        self.assertEqual(half.numpy().tolist(), [7.0, 7.0, 7.0])
        ampx.load_safetensors_into(self.path, {"w": half}, convert=True, context=self.ctx)
        self.assertEqual(half.numpy().tolist(), [1.5, -2.25, 1024.0])


def _header(entries, metadata=None) -> bytes:
    body = dict(entries)
    if metadata is not None:
        body["__metadata__"] = metadata
    return json.dumps(body).encode()


@unittest.skipUnless(safetensors is not None, REASON)
class MaliciousFileTest(unittest.TestCase):
    """Damaged and crafted files: CORRUPT, and the target tensor unchanged."""

    def setUp(self):
        self.ctx = ampx.Context()
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "bad.safetensors")
        self.target = ampx.tensor([3.0, 4.0], context=self.ctx, name="a")

    def tearDown(self):
        self.dir.cleanup()

    def refuse(self, contents: bytes, reference_refuses: bool = True):
        with open(self.path, "wb") as f:
            f.write(contents)
        with self.assertRaises(ampx.CorruptError) as caught:
            ampx.load_safetensors_into(self.path, [self.target], context=self.ctx)
        self.assertIn(self.path, caught.exception.message)
        self.assertEqual(self.target.numpy().tolist(), [3.0, 4.0])
        with self.assertRaises(ampx.CorruptError):
            ampx.load_safetensors(self.path, context=self.ctx)
        if reference_refuses:  # the reference reader agrees the file is bad
            with self.assertRaises(Exception):
                safetensors.torch.load_file(self.path)
        return caught.exception.message

    def good_file(self) -> bytes:
        a = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
        return file_of(_header({"a": a}), struct.pack("<2f", 1.0, 2.0))

    def test_the_valid_file_loads(self):
        with open(self.path, "wb") as f:
            f.write(self.good_file())
        ampx.load_safetensors_into(self.path, [self.target], context=self.ctx)
        self.assertEqual(self.target.numpy().tolist(), [1.0, 2.0])

    def test_truncated_files(self):
        good = self.good_file()
        for cut in (0, 3, 8, 20, len(good) - 1):
            with self.subTest(cut=cut):
                self.refuse(good[:cut])

    def test_offsets_past_the_end(self):
        a = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
        self.assertIn("past the end", self.refuse(file_of(_header({"a": a}), bytes(8))))
        far = {"dtype": "F32", "shape": [2], "data_offsets": [2 ** 64 - 16, 2 ** 64 - 8]}
        self.assertIn("past the end", self.refuse(file_of(_header({"a": far}), bytes(8))))

    def test_overlapping_ranges(self):
        a = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
        b = {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}
        self.assertIn("overlap", self.refuse(file_of(_header({"a": a, "b": b}), bytes(8))))

    def test_huge_header_lengths(self):
        body = self.good_file()[8:]
        for length in (len(body) + 1, 100_000_001, 2 ** 63, 2 ** 64 - 1):
            with self.subTest(length=length):
                self.refuse(struct.pack("<Q", length) + body)

    def test_names_that_are_not_utf8(self):
        header = b'{"\xff\xfe":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
        self.assertIn("UTF-8", self.refuse(file_of(header, bytes(8))))

    def test_a_shape_unlike_its_byte_count(self):
        a = {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}
        self.refuse(file_of(_header({"a": a}), bytes(8)))

    def test_a_byte_count_that_overflows(self):
        a = {"dtype": "F32", "shape": [2 ** 32, 2 ** 32], "data_offsets": [0, 8]}
        self.assertIn("overflow", self.refuse(file_of(_header({"a": a}), bytes(8))))

    def test_duplicate_names(self):
        # The reference's JSON parser keeps the last duplicate; ampx refuses them.
        header = (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                  b'"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}')
        self.assertIn("twice", self.refuse(file_of(header, bytes(8)), reference_refuses=False))

    def test_metadata_that_is_not_strings(self):
        a = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
        self.refuse(file_of(_header({"a": a}, {"step": 7}), bytes(8)))

    def test_unknown_dtypes(self):
        a = {"dtype": "F17", "shape": [2], "data_offsets": [0, 8]}
        self.refuse(file_of(_header({"a": a}), bytes(8)))


if __name__ == "__main__":
    unittest.main()
