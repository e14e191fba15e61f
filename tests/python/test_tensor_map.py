"""Tests of tensor-map arguments in the Python client without a GPU: the artifact's description
(ktune.TensorMap), the checks a launcher makes before encoding (ktune.check_tensor_map),
kernelParams with the encoded 128 bytes (pack_kernel_params), and ktune.LoadedKernel over a
fake cuda-python driver whose cuTensorMapEncodeTiled records its arguments. The real encode
runs on the GPU host."""

import ctypes
import hashlib
import types
import unittest

import ktune
from ktune._cache import _MAX_BOUND, CachedKernel
from ktune._types import artifact_from_proto
from ktune.v1 import ktune_pb2, manifest_pb2

CUBIN = b"\x7fELF tma"


def tma_artifact(box=(64, 8), swizzle=0, buffer_arg=0, dims=(128, 64)):
    a = ktune_pb2.KernelArtifact(cubin=CUBIN, cubin_sha256=hashlib.sha256(CUBIN).hexdigest(),
                                 template_id="tma_copy", dtype="bf16")
    a.launches.add(lowered_name="_Z8tma_copy", grid=[2, 8, 1], block=[128, 1, 1],
                   args=[1, 2, 3])
    a.args.add(name="x", is_buffer=True, dtype="bf16", count=128 * 64,
               role=manifest_pb2.Buffer.INPUT)
    m = a.args.add(name="x_map", scalar_type="tensor_map")
    m.tensor_map.CopyFrom(manifest_pb2.BoundTensorMap(
        buffer="x", buffer_arg=buffer_arg, dtype="bf16", dims=list(dims), strides=[256],
        box=list(box), element_strides=[1, 1], swizzle=swizzle,
        l2_promotion=manifest_pb2.TensorMap.L2_PROMOTION_128B))
    a.args.add(name="out", is_buffer=True, dtype="bf16", count=128 * 64,
               role=manifest_pb2.Buffer.OUTPUT)
    a.args.add(name="rows", scalar_type="i32", int_value=64)
    return artifact_from_proto(a)


POINTERS = {"x": 0x10000, "out": 0x20000}


class FakeEncoded:
    """What cuda-python's cuTensorMapEncodeTiled returns: a CUtensorMap with getPtr()."""

    def __init__(self, fill):
        self._buf = (ctypes.c_uint8 * 128)(*([fill] * 128))

    def getPtr(self):
        return ctypes.addressof(self._buf)


class FakeUint:
    """cuda-python's cuuint32_t / cuuint64_t: an integer type of the binding's own."""

    def __init__(self, v):
        self.v = int(v)

    def __int__(self):
        return self.v


class FakeUint32(FakeUint):
    pass


class FakeUint64(FakeUint):
    pass


class FakeTmaDriver:
    CUtensorMapDataType = int
    CUtensorMapInterleave = int
    CUtensorMapSwizzle = int
    CUtensorMapL2promotion = int
    CUtensorMapFloatOOBfill = int
    cuuint32_t = FakeUint32
    cuuint64_t = FakeUint64

    def __init__(self):
        self.encodes = []
        self.launched = []

    def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box, estrides, *enums):
        # As the real binding (cuda-bindings 13.x): the sizes must be its own types, a plain
        # int is a TypeError.
        for name, values, kind in (("globalDim", dims, FakeUint64),
                                   ("globalStrides", strides, FakeUint64),
                                   ("boxDim", box, FakeUint32),
                                   ("elementStrides", estrides, FakeUint32)):
            if not all(isinstance(v, kind) for v in values):
                raise TypeError(f"Argument '{name}' is not instance of type {kind.__name__}")
        if not isinstance(rank, (int, FakeUint32)):
            raise TypeError("Cannot convert to cuuint32_t")
        self.encodes.append((dtype, int(rank), address, [int(v) for v in dims],
                             [int(v) for v in strides], [int(v) for v in box],
                             [int(v) for v in estrides], *enums))
        return (0, FakeEncoded(0xAB))

    def cuModuleLoadData(self, address):
        return (0, "module")

    def cuModuleGetFunction(self, module, name):
        return (0, "fn")

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        first = ctypes.c_void_p.from_address(params).value  # the map's address
        self.launched.append((first, ctypes.string_at(first, 128)))
        return (0,)

    def cuModuleUnload(self, module):
        return (0,)

    def cuGetErrorName(self, err):
        return (0, b"?")


class NoTmaDriver(FakeTmaDriver):
    cuTensorMapEncodeTiled = None

    def __getattribute__(self, name):
        if name == "cuTensorMapEncodeTiled":
            raise AttributeError(name)
        return object.__getattribute__(self, name)


class TensorMapArtifactTest(unittest.TestCase):
    def test_the_artifact_describes_the_map(self):
        a = tma_artifact()
        arg = a.args[1]
        self.assertFalse(arg.is_buffer)
        self.assertEqual(arg.scalar_type, "tensor_map")
        t = arg.tensor_map
        self.assertIsInstance(t, ktune.TensorMap)
        self.assertEqual((t.buffer, t.buffer_arg, t.dtype), ("x", 0, "bf16"))
        self.assertEqual(t.dims, (128, 64))
        self.assertEqual(t.strides, (256,))
        self.assertEqual(t.box, (64, 8))
        self.assertEqual(t.element_strides, (1, 1))
        self.assertEqual(t.l2_promotion, 2)
        self.assertIsNone(a.args[0].tensor_map)

    def test_checks_name_the_field(self):
        ktune.check_tensor_map(tma_artifact(), 1)
        with self.assertRaisesRegex(ValueError, r"box\[1\]: 512 is outside 1..256"):
            ktune.check_tensor_map(tma_artifact(box=(64, 512)), 1)
        with self.assertRaisesRegex(ValueError, r"box\[0\]: 8 bytes is not a multiple of 16"):
            ktune.check_tensor_map(tma_artifact(box=(4, 8)), 1)
        with self.assertRaisesRegex(ValueError, r"128 bytes exceed the 64-byte swizzle span"):
            ktune.check_tensor_map(tma_artifact(swizzle=2), 1)
        ktune.check_tensor_map(tma_artifact(swizzle=3), 1)
        with self.assertRaisesRegex(ValueError, r"buffer_arg: 3 is not a buffer arg"):
            ktune.check_tensor_map(tma_artifact(buffer_arg=3), 1)
        with self.assertRaisesRegex(ValueError, r"dims: the map reaches .* into buffer 'x'"):
            ktune.check_tensor_map(tma_artifact(dims=(128, 65)), 1)


class PackTensorMapTest(unittest.TestCase):
    def test_without_an_encoder_a_tensor_map_is_refused(self):
        with self.assertRaisesRegex(ValueError, "'x_map' is a tensor map"):
            ktune.pack_kernel_params(tma_artifact(), 0, POINTERS)

    def test_the_encoded_map_is_passed_by_value_aligned(self):
        seen = []

        def encode(tensor_map, address):
            seen.append((tensor_map.buffer, address))
            return bytes(range(128))

        params = ktune.pack_kernel_params(tma_artifact(), 0, POINTERS, encode)
        self.assertEqual(seen, [("x", 0x10000)])
        self.assertEqual(len(params), 3)
        self.assertEqual(params.value(0), bytes(range(128)))
        self.assertEqual(params.address_of(0) % 128, 0)
        self.assertEqual(params.value(1), 0x20000)  # out
        self.assertEqual(params.value(2), 64)       # rows

    def test_pointer_checks(self):
        encode = lambda t, p: bytes(128)  # noqa: E731
        with self.assertRaisesRegex(KeyError, "buffer 'x'"):
            ktune.pack_kernel_params(tma_artifact(), 0, {"out": 0x20000}, encode)
        with self.assertRaisesRegex(ValueError, "not 16-byte aligned"):
            ktune.pack_kernel_params(tma_artifact(), 0, {"x": 0x10004, "out": 0x20000}, encode)


class LoadedKernelTensorMapTest(unittest.TestCase):
    def test_encodes_with_cuda_python_and_launches_the_bytes(self):
        cu = FakeTmaDriver()
        kernel = ktune.LoadedKernel(tma_artifact(), driver=cu)
        kernel(POINTERS, 0)
        self.assertEqual(len(cu.encodes), 1)
        dtype, rank, address, dims, strides, box, estrides, inter, swz, l2, oob = cu.encodes[0]
        self.assertEqual(dtype, 9)  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
        self.assertEqual(rank, 2)
        self.assertEqual(address, 0x10000)
        self.assertEqual((dims, strides, box, estrides), ([128, 64], [256], [64, 8], [1, 1]))
        self.assertEqual((inter, swz, l2, oob), (0, 0, 2, 0))
        self.assertEqual(len(cu.launched), 1)
        address, data = cu.launched[0]
        self.assertEqual(address % 128, 0)
        self.assertEqual(data, b"\xab" * 128)

    def test_a_binding_without_the_encoder_is_refused_at_load(self):
        with self.assertRaisesRegex(RuntimeError, "no cuTensorMapEncodeTiled"):
            ktune.LoadedKernel(tma_artifact(), driver=NoTmaDriver())

    def test_a_bad_map_or_an_unknown_type_is_refused_at_load(self):
        with self.assertRaisesRegex(ValueError, r"box\[1\]"):
            ktune.LoadedKernel(tma_artifact(box=(64, 512)), driver=FakeTmaDriver())
        a = tma_artifact()
        old = a.args[1]
        a.args[1] = type(old)(name=old.name, is_buffer=False, scalar_type="tensor_map_v2")
        with self.assertRaisesRegex(ValueError, "unknown scalar type 'tensor_map_v2'"):
            ktune.LoadedKernel(a, driver=FakeTmaDriver())


class CachedTensorMapKernelTest(unittest.TestCase):
    """A kernel cache's entry of a tensor-map kernel encodes the maps once per set of buffer
    addresses, and keeps the last _MAX_BOUND sets."""

    def entry(self, cu):
        a = tma_artifact()
        return CachedKernel(a, ktune.LoadedKernel(a, driver=cu), context=None)

    def test_the_same_addresses_reuse_the_encoded_maps(self):
        cu = FakeTmaDriver()
        e = self.entry(cu)
        for _ in range(3):
            e.launch(POINTERS, 0)
        self.assertEqual(len(cu.encodes), 1)
        e.launch({"x": 0x30000, "out": 0x20000}, 0)
        self.assertEqual([enc[2] for enc in cu.encodes], [0x10000, 0x30000])
        self.assertEqual(len(cu.launched), 4)

    def test_the_oldest_address_set_is_dropped(self):
        cu = FakeTmaDriver()
        e = self.entry(cu)
        for i in range(_MAX_BOUND + 1):
            e.launch({"x": 0x10000 * (i + 1), "out": 0x8000}, 0)
        e.launch({"x": 0x10000 * (_MAX_BOUND + 1), "out": 0x8000}, 0)  # newest: kept
        self.assertEqual(len(cu.encodes), _MAX_BOUND + 1)
        e.launch({"x": 0x10000, "out": 0x8000}, 0)  # oldest: encoded again
        self.assertEqual(len(cu.encodes), _MAX_BOUND + 2)

    def test_a_missing_buffer_is_named(self):
        with self.assertRaisesRegex(KeyError, "no device pointer for buffer 'out'"):
            self.entry(FakeTmaDriver()).launch({"x": 0x10000}, 0)

    def test_a_launcher_binds_per_address_set_in_its_own_order(self):
        cu = FakeTmaDriver()
        e = self.entry(cu)
        run = e.launcher(("out", "x"))  # values in this order, not the artifact's
        for _ in range(3):
            run(0, 0x20000, 0x10000)
        e.launch(POINTERS, 0)  # the same addresses: the same bound maps
        self.assertEqual([enc[2] for enc in cu.encodes], [0x10000])
        run(0, 0x20000, 0x30000)
        self.assertEqual([enc[2] for enc in cu.encodes], [0x10000, 0x30000])
        self.assertEqual(len(cu.launched), 5)
        with self.assertRaisesRegex(ValueError, "scalars are the artifact's.*'rows'"):
            e.launcher(("x", "out", "rows"))


if __name__ == "__main__":
    unittest.main()
