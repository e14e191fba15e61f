"""Tests of ktune._fastlaunch (client/python/ktune/_fastlaunch.c) without a GPU: cuLaunchKernel
is played by a ctypes callback with the driver's signature, which records what C hands it;
and a kernel cache's entry launching through it (the stream as an int, the buffer pointers
written into its kernelParams first, a failed launch named). The real driver path runs on
the GPU host (tests/python_gpu, bench/torch_overhead.py)."""

import ctypes
import subprocess
import sys
import unittest

import ktune
from ktune import _fastlaunch
from ktune._cache import CachedKernel
from ktune._loaded import launch_plan

from test_loaded_kernel import LAUNCH_FAILED, POINTERS, FakeDriver, artifact

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7),
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class Recorder:
    """A stand-in cuLaunchKernel: records each call (the first kernel argument read through
    the void** array, as the driver would) and returns `result`."""

    def __init__(self):
        self.calls = []
        self.result = 0
        self.fn = LAUNCH(self._call)  # kept alive as long as C may call it

    def _call(self, function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        first = ctypes.c_void_p.from_address(params).value
        self.calls.append((function, (gx, gy, gz), (bx, by, bz), smem, stream or 0,
                           ctypes.c_uint64.from_address(first).value, extra))
        return self.result

    def install(self):
        _fastlaunch.set_launch(ctypes.cast(self.fn, ctypes.c_void_p).value)


def params_with(first_value):
    """A kernelParams array of one u64 argument: (array, the value's storage)."""
    value = ctypes.c_uint64(first_value)
    array = (ctypes.c_void_p * 1)(ctypes.addressof(value))
    return array, value


class FastLaunchTest(unittest.TestCase):
    def setUp(self):
        self.rec = Recorder()
        self.rec.install()

    def test_every_value_reaches_the_driver(self):
        array, _ = params_with(0xABC)
        plan = (0x7000, 2, 3, 4, 128, 2, 1, 49152)
        err = _fastlaunch.launch(plan, 0x5000, ctypes.addressof(array))
        self.assertEqual(err, 0)
        self.assertEqual(self.rec.calls,
                         [(0x7000, (2, 3, 4), (128, 2, 1), 49152, 0x5000, 0xABC, None)])

    def test_stream_zero_is_the_default_stream_and_the_result_comes_back(self):
        array, _ = params_with(1)
        self.rec.result = LAUNCH_FAILED
        err = _fastlaunch.launch((0x7000, 1, 1, 1, 32, 1, 1, 0), 0, ctypes.addressof(array))
        self.assertEqual(err, LAUNCH_FAILED)
        self.assertEqual(self.rec.calls[0][4], 0)

    def test_bad_arguments_are_refused_naming_what_is_wrong(self):
        array, _ = params_with(1)
        p = ctypes.addressof(array)
        ok = (0x7000, 1, 1, 1, 32, 1, 1, 0)
        with self.assertRaisesRegex(TypeError, "plan must be a tuple"):
            _fastlaunch.launch(list(ok), 0, p)
        with self.assertRaisesRegex(TypeError, "plan must be a tuple"):
            _fastlaunch.launch(ok[:7], 0, p)
        with self.assertRaisesRegex(OverflowError, r"plan\[4\] = 8589934592"):
            _fastlaunch.launch(ok[:4] + (2 ** 33,) + ok[5:], 0, p)
        with self.assertRaises(OverflowError):
            _fastlaunch.launch(ok[:1] + (-1,) + ok[2:], 0, p)
        with self.assertRaisesRegex(ValueError, "plan's function is 0"):
            _fastlaunch.launch((0,) + ok[1:], 0, p)
        with self.assertRaisesRegex(ValueError, "params is 0"):
            _fastlaunch.launch(ok, 0, 0)
        with self.assertRaisesRegex(TypeError, "takes 3 arguments"):
            _fastlaunch.launch(ok, 0)
        with self.assertRaises(TypeError):
            _fastlaunch.launch(ok, "stream", p)
        with self.assertRaisesRegex(ValueError, "the address is 0"):
            _fastlaunch.set_launch(0)
        self.assertEqual(self.rec.calls, [])

    def test_without_a_driver_function_nothing_is_called(self):
        # A fresh interpreter: set_launch is module state.
        code = ("from ktune import _fastlaunch\n"
                "try:\n"
                "    _fastlaunch.launch((1, 1, 1, 1, 1, 1, 1, 0), 0, 8)\n"
                "except RuntimeError as e:\n"
                "    print(e)\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("no cuLaunchKernel yet (call set_launch)", r.stdout)


class CachedKernelFastPathTest(unittest.TestCase):
    """An entry whose `fast` is set launches through it, from the plans made once."""

    def entry(self):
        a = artifact()
        e = CachedKernel(a, ktune.LoadedKernel(a, driver=FakeDriver({"_Z14rmsnorm_kernelI",
                                                                     "_Z6second"})), None)
        self.assertIsNone(e.fast)  # a fake driver: the slow path unless told otherwise
        self.rec = Recorder()
        self.rec.install()
        e.fast = _fastlaunch.launch
        e._plans = [launch_plan(0x7000 + i, launch) for i, launch in enumerate(a.launches)]
        return e, a

    def test_pointers_go_into_the_params_and_the_stream_may_be_an_object(self):
        e, a = self.entry()

        class Stream:
            def __int__(self):
                return 0x5000

        e.launch(POINTERS, Stream(), {"eps": 1e-5})
        e.launch(POINTERS, 0x6000)
        self.assertEqual(len(self.rec.calls), 2 * len(a.launches))
        first = self.rec.calls[0]
        launch = a.launches[0]
        self.assertEqual(first[:5], (0x7000, tuple(launch.grid), tuple(launch.block),
                                     launch.shared_bytes, 0x5000))
        # The first kernel argument of the canned rmsnorm launch is buffer x.
        self.assertEqual(first[5], POINTERS["x"])
        self.assertEqual(self.rec.calls[len(a.launches)][4], 0x6000)

    def test_a_failed_launch_is_named(self):
        e, a = self.entry()
        self.rec.result = LAUNCH_FAILED
        with self.assertRaisesRegex(RuntimeError, "cuLaunchKernel\\(_Z14rmsnorm_kernelI.*"
                                    "CUDA_ERROR_LAUNCH_FAILED"):
            e.launch(POINTERS, 0)


if __name__ == "__main__":
    unittest.main()
