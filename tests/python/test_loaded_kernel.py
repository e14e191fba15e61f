"""Tests of ktune.LoadedKernel (client/python/ktune/_loaded.py) against a fake of cuda-python's
driver module: what it loads, which functions it asks for, the shared-memory opt-in, the
launches with their params, the errors it names, and the unload. The real driver path runs
on the GPU host (bench/peers.py and examples/rmsnorm_torch.py use it)."""

import ctypes
import types
import unittest

import ktune
from ktune._types import artifact_from_proto

from test_client import CUBIN, canned_artifact

NOT_FOUND = 500  # CUDA_ERROR_NOT_FOUND
LAUNCH_FAILED = 719  # CUDA_ERROR_LAUNCH_FAILED
DYN_SMEM_ATTR = "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"


class FakeDriver:
    """cuda-python's driver functions as the loader calls them: results are (err, value...)
    tuples; `calls` records each call; `fail` maps a function name to the error it returns."""

    CUfunction_attribute = types.SimpleNamespace(**{DYN_SMEM_ATTR: DYN_SMEM_ATTR})

    def __init__(self, functions, fail=None):
        self.functions = set(functions)
        self.fail = fail or {}
        self.calls = []
        self.loaded = None

    def _result(self, name, *value):
        err = self.fail.get(name, 0)
        return (err,) if err else (0,) + value

    def cuModuleLoadData(self, address):
        self.loaded = ctypes.string_at(address, len(CUBIN))
        self.calls.append(("load",))
        return self._result("cuModuleLoadData", "module-1")

    def cuModuleGetFunction(self, module, name):
        self.calls.append(("get", module, name.decode()))
        if name.decode() not in self.functions:
            return (NOT_FOUND,)
        return (0, "fn:" + name.decode())

    def cuFuncSetAttribute(self, fn, attr, value):
        self.calls.append(("attr", fn, attr, value))
        return self._result("cuFuncSetAttribute")

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        # The first parameter through the void** array: the kernel's first argument.
        first = ctypes.c_void_p.from_address(params).value
        self.calls.append(("launch", fn, (gx, gy, gz), (bx, by, bz), smem, stream,
                           ctypes.c_uint64.from_address(first).value))
        return self._result("cuLaunchKernel")

    def cuModuleUnload(self, module):
        self.calls.append(("unload", module))
        return (0,)

    def cuGetErrorName(self, err):
        return (0, {NOT_FOUND: b"CUDA_ERROR_NOT_FOUND",
                    LAUNCH_FAILED: b"CUDA_ERROR_LAUNCH_FAILED"}.get(err, b"?"))


def artifact(shared_bytes=1024):
    m = canned_artifact()
    m.launches[0].shared_bytes = shared_bytes
    return artifact_from_proto(m)


POINTERS = {"x": 0x1000, "weight": 0x2000, "out": 0x3000}


def aligned_artifact():
    """The canned artifact with alignments as a daemon sends them (x and weight 16 bytes, out
    4), and `out` taken by the second launch only: a refused address must stop the first
    launch too."""
    m = canned_artifact()
    m.args[0].alignment = 16
    m.args[1].alignment = 16
    m.args[2].alignment = 4
    del m.launches[0].args[:]
    m.launches[0].args.extend([0, 1, 3, 4, 5])
    return artifact_from_proto(m)


class LoadedKernelTest(unittest.TestCase):
    def test_loads_the_cubin_and_one_function_per_launch(self):
        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"})
        kernel = ktune.LoadedKernel(artifact(), driver=cu)
        self.assertEqual(cu.loaded, CUBIN)
        self.assertEqual(kernel.functions, ["fn:_Z14rmsnorm_kernelI", "fn:_Z6second"])
        # 1 KiB of dynamic shared memory needs no opt-in.
        self.assertNotIn("attr", [c[0] for c in cu.calls])

    def test_opts_into_dynamic_shared_memory_above_48k(self):
        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"})
        ktune.LoadedKernel(artifact(shared_bytes=100000), driver=cu)
        self.assertIn(("attr", "fn:_Z14rmsnorm_kernelI", DYN_SMEM_ATTR, 100000), cu.calls)

    def test_launches_every_launch_in_order_with_its_params(self):
        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"})
        with ktune.LoadedKernel(artifact(), driver=cu) as kernel:
            kernel(POINTERS, "stream-7")
            bound = kernel.bind(POINTERS)
            bound.launch("stream-8")
        launches = [c for c in cu.calls if c[0] == "launch"]
        self.assertEqual(launches, [
            # launch 0's first arg is x; launch 1's (args [5, 2]) is eps, an f32: its bits.
            ("launch", "fn:_Z14rmsnorm_kernelI", (4096, 1, 1), (256, 1, 1), 1024, "stream-7",
             0x1000),
            ("launch", "fn:_Z6second", (1, 2, 3), (32, 4, 1), 0, "stream-7",
             ctypes.c_uint32.from_buffer(ctypes.c_float(1e-6)).value),
            ("launch", "fn:_Z14rmsnorm_kernelI", (4096, 1, 1), (256, 1, 1), 1024, "stream-8",
             0x1000),
            ("launch", "fn:_Z6second", (1, 2, 3), (32, 4, 1), 0, "stream-8",
             ctypes.c_uint32.from_buffer(ctypes.c_float(1e-6)).value),
        ])
        self.assertEqual(cu.calls[-1], ("unload", "module-1"))

    def test_a_missing_buffer_is_named_before_any_launch(self):
        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"})
        kernel = ktune.LoadedKernel(artifact(), driver=cu)
        with self.assertRaisesRegex(KeyError, "'weight'"):
            kernel({"x": 1, "out": 2}, 0)
        self.assertNotIn("launch", [c[0] for c in cu.calls])

    def test_errors_name_the_call_and_the_cuda_error(self):
        cu = FakeDriver({"_Z14rmsnorm_kernelI"})  # the second launch's function is missing
        with self.assertRaisesRegex(RuntimeError,
                                    r"cuModuleGetFunction\(_Z6second\).*NOT_FOUND"):
            ktune.LoadedKernel(artifact(), driver=cu)
        self.assertEqual(cu.calls[-1], ("unload", "module-1"))  # nothing left loaded

        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"},
                        fail={"cuLaunchKernel": LAUNCH_FAILED})
        kernel = ktune.LoadedKernel(artifact(), driver=cu)
        with self.assertRaisesRegex(RuntimeError,
                                    r"cuLaunchKernel\(_Z14rmsnorm_kernelI\).*LAUNCH_FAILED"):
            kernel(POINTERS, 0)

    def test_a_buffer_off_its_alignment_is_named_and_nothing_launches(self):
        a = aligned_artifact()
        self.assertEqual([arg.alignment for arg in a.args], [16, 16, 4, 0, 0, 0])
        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"})
        kernel = ktune.LoadedKernel(a, driver=cu)
        for pointers, text in [
                (dict(POINTERS, x=0x1002), "buffer 'x' at 0x1002 is not 16-byte aligned"),
                (dict(POINTERS, weight=0x2008), "buffer 'weight' at 0x2008 is not 16-byte"),
                (dict(POINTERS, out=0x3006), "buffer 'out' at 0x3006 is not 4-byte aligned")]:
            with self.subTest(text=text):
                with self.assertRaisesRegex(ValueError, text):
                    kernel(pointers, 0)
                with self.assertRaisesRegex(ValueError, text):
                    kernel.bind(pointers)
        self.assertNotIn("launch", [c[0] for c in cu.calls])
        kernel(dict(POINTERS, out=0x3004), 0)  # within out's 4 bytes
        self.assertEqual(len([c for c in cu.calls if c[0] == "launch"]), 2)
        # An artifact of a daemon that predates alignments (0) is not checked.
        ktune.LoadedKernel(artifact(), driver=cu)(dict(POINTERS, x=0x1001), 0)

    def test_an_alignment_that_is_not_a_power_of_two_is_refused_at_load(self):
        m = canned_artifact()
        m.args[1].alignment = 12
        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"})
        with self.assertRaisesRegex(ValueError, "arg 'weight': alignment 12 is not a power"):
            ktune.LoadedKernel(artifact_from_proto(m), driver=cu)
        self.assertEqual(cu.calls, [])  # refused before the driver is asked anything

    def test_close_unloads_once(self):
        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"})
        kernel = ktune.LoadedKernel(artifact(), driver=cu)
        kernel.close()
        kernel.close()
        self.assertEqual([c for c in cu.calls if c[0] == "unload"], [("unload", "module-1")])


if __name__ == "__main__":
    unittest.main()
