"""Tests of ktune._fastlaunch (client/python/ktune/_fastlaunch.c) without a GPU: cuLaunchKernel
is played by a ctypes callback with the driver's signature, which records what C hands it;
and a kernel cache's entry launching through it (the stream as an int, the buffer pointers
written into its kernelParams first, a failed launch named). The real driver path runs on
the GPU host (tests/python_gpu, bench/torch_overhead.py)."""

import ctypes
import os
import struct
import subprocess
import sys
import threading
import unittest
import unittest.mock

import ktune
from ktune import _fastlaunch
from ktune._cache import CachedKernel
from ktune import _loaded
from ktune._loaded import launch_plan, programmatic_launches

from test_loaded_kernel import LAUNCH_FAILED, POINTERS, FakeDriver, aligned_artifact, artifact
from test_tensor_map import FakeTmaDriver, tma_artifact

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7),
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class Recorder:
    """A stand-in cuLaunchKernel: records each call (the first kernel argument read through
    the void** array, as the driver would) and returns `result`."""

    def __init__(self):
        self.calls = []
        self.first_f32 = []  # the first argument read as a float (an f32 scalar's value)
        self.result = 0
        self.fn = LAUNCH(self._call)  # kept alive as long as C may call it

    def _call(self, function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        first = ctypes.c_void_p.from_address(params).value
        self.calls.append((function, (gx, gy, gz), (bx, by, bz), smem, stream or 0,
                           ctypes.c_uint64.from_address(first).value, extra))
        self.first_f32.append(ctypes.c_float.from_address(first).value)
        return self.result

    def install(self):
        _fastlaunch.set_launch(ctypes.cast(self.fn, ctypes.c_void_p).value)


REPLACE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class Replacer:
    """A stand-in cuTensorMapReplaceAddress: records (map storage, address) and, as the driver
    changes the map's address field, writes the address into the map's first 8 bytes (which
    Recorder reads as the first kernel argument); returns `result`."""

    def __init__(self):
        self.calls = []
        self.result = 0
        self.fn = REPLACE(self._call)

    def _call(self, tensor_map, address):
        self.calls.append((tensor_map, address or 0))
        if self.result == 0:
            ctypes.c_uint64.from_address(tensor_map).value = address or 0
        return self.result

    def install(self):
        _fastlaunch.set_replace_address(ctypes.cast(self.fn, ctypes.c_void_p).value)


def runtime_error_in_fresh_interpreter(test, statements):
    """The RuntimeError message `statements` raise in a new Python (set_launch and
    set_replace_address are module state, so a test of their absence needs its own)."""
    code = ("import ctypes, struct\nfrom ktune import _fastlaunch\ntry:\n" +
            "".join(f"    {line}\n" for line in statements.split("\n")) +
            "except RuntimeError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    test.assertEqual(r.returncode, 0, r.stderr)
    return r.stdout


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
        self.assertIn("no cuLaunchKernel yet (call set_launch)",
                      runtime_error_in_fresh_interpreter(
                          self, "_fastlaunch.launch((1, 1, 1, 1, 1, 1, 1, 0), 0, 8)"))


LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: the id, padding, a 64-byte union of values."""
    _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_ubyte * 4), ("value", ctypes.c_ubyte * 64)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig, as cuda.h lays it out."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_bytes", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


class ExRecorder:
    """A stand-in cuLaunchKernelEx: records each call's function, geometry, stream, its
    attributes as (id, the value's first int) and the first kernel argument."""

    def __init__(self):
        self.calls = []
        self.fn = LAUNCH_EX(self._call)

    def _call(self, config, function, params, extra):
        c = LaunchConfig.from_address(config)
        attrs = [(c.attrs[i].id, struct.unpack_from("=i", bytes(c.attrs[i].value))[0])
                 for i in range(c.num_attrs)]
        first = ctypes.c_void_p.from_address(params).value
        self.calls.append((function, tuple(c.grid), tuple(c.block), c.shared_bytes,
                           c.stream or 0, attrs, ctypes.c_uint64.from_address(first).value))
        return 0

    def install(self):
        _fastlaunch.set_launch_ex(ctypes.cast(self.fn, ctypes.c_void_p).value)


class ProgrammaticLaunchTest(unittest.TestCase):
    """A plan whose flags ask for it goes through cuLaunchKernelEx with the
    programmatic-stream-serialization attribute (id 6, value 1); any other plain."""

    def setUp(self):
        self.rec = Recorder()
        self.rec.install()
        self.ex = ExRecorder()
        self.ex.install()

    def test_a_programmatic_plan_reaches_launch_kernel_ex_with_the_attribute(self):
        array, _ = params_with(0xABC)
        err = _fastlaunch.launch((0x7000, 2, 3, 4, 128, 2, 1, 49152, 1), 0x5000,
                                 ctypes.addressof(array))
        self.assertEqual(err, 0)
        self.assertEqual(self.ex.calls, [(0x7000, (2, 3, 4), (128, 2, 1), 49152, 0x5000,
                                          [(6, 1)], 0xABC)])
        self.assertEqual(self.rec.calls, [])

    def test_flags_zero_and_an_eight_field_plan_launch_plainly(self):
        array, _ = params_with(7)
        for plan in ((0x7000, 1, 1, 1, 32, 1, 1, 0, 0), (0x7000, 1, 1, 1, 32, 1, 1, 0)):
            self.assertEqual(_fastlaunch.launch(plan, 0, ctypes.addressof(array)), 0)
        self.assertEqual(len(self.rec.calls), 2)
        self.assertEqual(self.ex.calls, [])
        with self.assertRaises(OverflowError):
            _fastlaunch.launch((0x7000, 1, 1, 1, 32, 1, 1, 0, -1), 0, ctypes.addressof(array))

    def test_without_launch_kernel_ex_a_programmatic_plan_launches_plainly(self):
        # A fresh interpreter with neither entry point set: the plain one is what is missing.
        self.assertIn("no cuLaunchKernel yet (call set_launch)",
                      runtime_error_in_fresh_interpreter(
                          self, "_fastlaunch.launch((1, 1, 1, 1, 1, 1, 1, 0, 1), 0, 8)"))

    def test_a_cached_kernel_launches_its_marked_launch_programmatically(self):
        # The canned artifact marks its first launch programmatic, not its second; the
        # entry's launches write the call's pointers first either way (launch_with).
        a = artifact()
        e, rec = fast_entry(a)
        e._plans = [launch_plan(0x7000 + i, launch, True) for i, launch in enumerate(a.launches)]
        e.launch(POINTERS, 0x5000)
        launch = a.launches[0]
        self.assertEqual(self.ex.calls, [(0x7000, tuple(launch.grid), tuple(launch.block),
                                          launch.shared_bytes, 0x5000, [(6, 1)],
                                          POINTERS["x"])])
        self.assertEqual([c[0] for c in rec.calls], [0x7001])

    def test_plans_ask_for_it_only_where_the_artifact_and_the_caller_both_do(self):
        marked = ktune.KernelLaunch("k", (1, 1, 1), (32, 1, 1), 0, (0,), programmatic=True)
        plain = ktune.KernelLaunch("k", (1, 1, 1), (32, 1, 1), 0, (0,))
        self.assertEqual(launch_plan(0x7000, marked, True)[-1], 1)
        self.assertEqual(launch_plan(0x7000, marked, False)[-1], 0)
        self.assertEqual(launch_plan(0x7000, plain, True)[-1], 0)
        self.assertEqual(launch_plan(0x7000, marked)[:8], (0x7000, 1, 1, 1, 32, 1, 1, 0))

    def test_the_environment_and_the_launcher_decide(self):
        saved = list(_loaded._fast_ex)
        env = unittest.mock.patch.dict("os.environ", {"KTUNE_PROGRAMMATIC_LAUNCH": "1"})
        try:
            _loaded._fast_ex[:] = [True]
            with env:
                self.assertTrue(programmatic_launches(_fastlaunch.launch))
                self.assertFalse(programmatic_launches(None))  # launches through cuda-python
                _loaded._fast_ex[:] = [False]  # a driver before CUDA 12
                self.assertFalse(programmatic_launches(_fastlaunch.launch))
            _loaded._fast_ex[:] = [True]
            with unittest.mock.patch.dict("os.environ", {"KTUNE_PROGRAMMATIC_LAUNCH": "0"}):
                self.assertFalse(programmatic_launches(_fastlaunch.launch))
            # The caller's word (a KernelCache's or LoadedKernel's `programmatic`) first.
            with unittest.mock.patch.dict("os.environ", {"KTUNE_PROGRAMMATIC_LAUNCH": "0"}):
                self.assertTrue(programmatic_launches(_fastlaunch.launch, True))
            with env:
                self.assertFalse(programmatic_launches(_fastlaunch.launch, False))
            # Unset: off until measured on a GPU.
            with unittest.mock.patch.dict("os.environ"):
                os.environ.pop("KTUNE_PROGRAMMATIC_LAUNCH", None)
                self.assertEqual(programmatic_launches(_fastlaunch.launch),
                                 _loaded.PROGRAMMATIC_LAUNCH_DEFAULT)
                self.assertFalse(programmatic_launches(_fastlaunch.launch))
        finally:
            _loaded._fast_ex[:] = saved


def entry_layout(*slots):
    """launch_with's layout: (storage, kind, value index) per slot."""
    return b"".join(struct.pack("=QII", ctypes.addressof(v), kind, at) for v, kind, at in slots)


class LaunchWithTest(unittest.TestCase):
    def setUp(self):
        self.rec = Recorder()
        self.rec.install()
        self.u64, self.i32 = ctypes.c_uint64(0), ctypes.c_int32(0)
        self.i64, self.f32 = ctypes.c_int64(0), ctypes.c_float(0)
        self.array = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in
                                             (self.u64, self.i32, self.i64, self.f32)])
        self.layout = entry_layout((self.u64, 0, 3), (self.i32, 1, 0), (self.i64, 2, 1),
                                   (self.f32, 3, 2))
        self.plan = (0x7000, 1, 1, 1, 32, 1, 1, 0)

    def test_each_kind_is_written_before_the_launch(self):
        err = _fastlaunch.launch_with(self.plan, 0x5000, ctypes.addressof(self.array),
                                      self.layout, (-7, -(2 ** 40), 0.25, 0xDEADBEEF00))
        self.assertEqual(err, 0)
        self.assertEqual((self.u64.value, self.i32.value, self.i64.value, self.f32.value),
                         (0xDEADBEEF00, -7, -(2 ** 40), 0.25))
        self.assertEqual(self.rec.calls, [(0x7000, (1, 1, 1), (32, 1, 1), 0, 0x5000,
                                           0xDEADBEEF00, None)])

    def test_bad_layouts_and_values_are_refused_naming_the_value(self):
        p = ctypes.addressof(self.array)
        good = (1, 2, 0.5, 8)
        for layout, values, error, text in [
                (list(self.layout), good, TypeError, "layout must be bytes"),
                (self.layout[:15], good, TypeError, "16-byte entries"),
                (self.layout, list(good), TypeError, "values must be a tuple"),
                (self.layout, good[:3], IndexError, r"wants values\[3\]; 3 given"),
                (self.layout, (2 ** 31,) + good[1:], OverflowError, r"values\[0\].*i32"),
                (self.layout, good[:3] + ("8",), TypeError, r"values\[3\]"),
                (self.layout, good[:3] + (-8,), OverflowError, r"values\[3\]"),
                (self.layout, good[:2] + ("x",) + good[3:], TypeError, r"values\[2\]"),
                (entry_layout((self.u64, 9, 0)), good, ValueError, "kind 9"),
                (struct.pack("=QII", 0, 0, 0), good, ValueError, "address is 0")]:
            with self.subTest(text=text):
                with self.assertRaisesRegex(error, text):
                    _fastlaunch.launch_with(self.plan, 0, p, layout, values)
        with self.assertRaisesRegex(TypeError, "takes 5 arguments"):
            _fastlaunch.launch_with(self.plan, 0, p, self.layout)
        self.assertEqual(self.rec.calls, [])

    def test_a_u64_kind_with_an_alignment_refuses_a_value_off_it(self):
        p = ctypes.addressof(self.array)
        layout = entry_layout((self.u64, 0 | 16 << 8, 0))
        with self.assertRaisesRegex(ValueError, r"values\[0\] = 0x1008 is not 16-byte aligned"):
            _fastlaunch.launch_with(self.plan, 0, p, layout, (0x1008,))
        self.assertEqual(self.rec.calls, [])
        self.assertEqual(self.u64.value, 0)  # not written either
        self.assertEqual(_fastlaunch.launch_with(self.plan, 0, p, layout, (0x1010,)), 0)
        self.assertEqual(self.rec.calls[0][5], 0x1010)
        # Alignment 1 (or none) takes any address.
        _fastlaunch.launch_with(self.plan, 0, p, entry_layout((self.u64, 1 << 8, 0)), (0x1001,))
        self.assertEqual(self.rec.calls[1][5], 0x1001)


class LaunchWithTensorMapTest(unittest.TestCase):
    """Layout kind 4: the storage is an encoded tensor map, re-pointed at the value."""

    def setUp(self):
        self.rec, self.rep = Recorder(), Replacer()
        self.rec.install()
        self.rep.install()
        self.map = (ctypes.c_uint8 * 128)(*([0xAB] * 128))
        self.array = (ctypes.c_void_p * 1)(ctypes.addressof(self.map))
        self.layout = entry_layout((self.map, 4, 1))
        self.plan = (0x7000, 1, 1, 1, 32, 1, 1, 0)

    def test_the_map_covers_the_value_before_the_launch(self):
        err = _fastlaunch.launch_with(self.plan, 0, ctypes.addressof(self.array), self.layout,
                                      (0x999, 0x40000))
        self.assertEqual(err, 0)
        self.assertEqual(self.rep.calls, [(ctypes.addressof(self.map), 0x40000)])
        self.assertEqual(self.rec.calls[0][5], 0x40000)
        self.assertEqual(bytes(self.map)[8:], b"\xab" * 120)  # the rest as encoded

    def test_a_misaligned_address_or_a_refusal_is_named_and_nothing_launches(self):
        p = ctypes.addressof(self.array)
        with self.assertRaisesRegex(ValueError, r"values\[1\] = 0x40008 is not 16-byte "
                                    "aligned"):
            _fastlaunch.launch_with(self.plan, 0, p, self.layout, (0, 0x40008))
        self.assertEqual(self.rep.calls, [])
        self.rep.result = 1  # CUDA_ERROR_INVALID_VALUE
        with self.assertRaisesRegex(RuntimeError, r"cuTensorMapReplaceAddress for values\[1\] "
                                    "= 0x40000 failed: CUresult 1"):
            _fastlaunch.launch_with(self.plan, 0, p, self.layout, (0, 0x40000))
        with self.assertRaisesRegex(TypeError, r"values\[1\]"):
            _fastlaunch.launch_with(self.plan, 0, p, self.layout, (0, "x"))
        self.assertEqual(self.rec.calls, [])

    def test_without_a_replace_function_nothing_is_launched(self):
        # set_launch is given an address C never calls: the map is refused first.
        self.assertIn("no cuTensorMapReplaceAddress yet (call set_replace_address)",
                      runtime_error_in_fresh_interpreter(
                          self, "m = (ctypes.c_uint8 * 128)()\n"
                          "a = (ctypes.c_void_p * 1)(ctypes.addressof(m))\n"
                          "layout = struct.pack('=QII', ctypes.addressof(m), 4, 0)\n"
                          "_fastlaunch.set_launch(1)\n"
                          "_fastlaunch.launch_with((1, 1, 1, 1, 1, 1, 1, 0), 0, "
                          "ctypes.addressof(a), layout, (0x1000,))"))


class CachedTensorMapKernelFastPathTest(unittest.TestCase):
    """A tensor-map kernel's launcher through C (fast_maps): the maps encoded once, at the
    first call, then re-pointed at each call's buffers; any addresses, no set kept per
    address."""

    def entry(self):
        a = tma_artifact()
        self.cu = FakeTmaDriver()
        e = CachedKernel(a, ktune.LoadedKernel(a, driver=self.cu), None)
        self.assertFalse(e.fast_maps)  # a fake driver: not unless told
        self.rec, self.rep = Recorder(), Replacer()
        self.rec.install()
        self.rep.install()
        e.fast, e.fast_maps = _fastlaunch.launch, True
        e._plans = [launch_plan(0x7000 + i, launch) for i, launch in enumerate(a.launches)]
        return e

    def test_each_call_points_the_map_at_its_buffer(self):
        e = self.entry()
        run = e.launcher(("out", "x"))
        addresses = [0x10000 + 0x100 * i for i in range(3 * 32)]  # more sets than are bound
        for x in addresses:
            run(0x5000, 0x20000, x)
        self.assertEqual(len(self.cu.encodes), 1)  # at the first call, from its address
        self.assertEqual(self.cu.encodes[0][2], 0x10000)
        self.assertEqual([c[1] for c in self.rep.calls], addresses)
        self.assertEqual(len({c[0] for c in self.rep.calls}), 1)  # one map storage
        self.assertEqual(self.rep.calls[0][0] % 128, 0)
        self.assertEqual([c[5] for c in self.rec.calls], addresses)
        self.assertEqual({c[4] for c in self.rec.calls}, {0x5000})
        self.assertEqual(self.cu.launched, [])  # every launch went through C
        self.assertEqual(e._bound, {})

    def test_a_misaligned_buffer_is_named_and_the_next_call_works(self):
        e = self.entry()
        run = e.launcher(("x", "out"))
        run(0, 0x10000, 0x20000)
        with self.assertRaisesRegex(ValueError, r"tma_copy \(values for x, out\).*0x10008 is "
                                    "not 16-byte aligned"):
            run(0, 0x10008, 0x20000)
        run(0, 0x30000, 0x20000)
        self.assertEqual([c[5] for c in self.rec.calls], [0x10000, 0x30000])

    def test_scalars_stay_refused_and_without_fast_maps_the_sets_are_bound(self):
        e = self.entry()
        with self.assertRaisesRegex(ValueError, "got a value for 'rows'"):
            e.launcher(("x", "out", "rows"))
        e.fast_maps = False
        run = e.launcher(("x", "out"))
        run(0, 0x10000, 0x20000)
        run(0, 0x10000, 0x20000)
        self.assertEqual(self.rep.calls, [])
        self.assertEqual(len(e._bound), 1)
        self.assertEqual(len(self.cu.encodes), 1)
        self.assertEqual(len(self.cu.launched), 2)  # the BoundKernel's (the fake driver's)


def fast_entry(a):
    """(entry, recorder): a CachedKernel of artifact `a` over the fake driver whose launches
    go through C into a new Recorder, installed (bench/torch_hot_path_cpu.py installs a no-op
    launch after it)."""
    e = CachedKernel(a, ktune.LoadedKernel(a, driver=FakeDriver({"_Z14rmsnorm_kernelI",
                                                                 "_Z6second"})), None)
    assert e.fast is None, "a fake driver's entry takes the slow path unless told otherwise"
    e.fast = _fastlaunch.launch
    e._plans = [launch_plan(0x7000 + i, launch) for i, launch in enumerate(a.launches)]
    rec = Recorder()
    rec.install()
    return e, rec


class CachedKernelFastPathTest(unittest.TestCase):
    """An entry whose `fast` is set launches through it, from the plans made once."""

    def entry(self):
        a = artifact()
        e, self.rec = fast_entry(a)
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
        with self.assertRaisesRegex(RuntimeError, "CUDA_ERROR_LAUNCH_FAILED"):
            e.launcher(("x", "weight", "out"))(0, 1, 2, 3)

    def test_a_launcher_writes_its_values_through_c(self):
        e, a = self.entry()
        run = e.launcher(("out", "x", "weight", "eps"))
        self.assertIs(e.launcher(("out", "x", "weight", "eps")), run)  # made once
        run(0x5000, 0x3000, 0x1000, 0x2000, 0.5)
        run(0x6000, 0x3000, 0x1100, 0x2000, 0.25)
        self.assertEqual(len(self.rec.calls), 2 * len(a.launches))
        # Launch 0's first argument is x; launch 1's is eps (args [5, 2]).
        self.assertEqual([c[5] for c in self.rec.calls[::2]], [0x1000, 0x1100])
        self.assertEqual([c[4] for c in self.rec.calls[::2]], [0x5000, 0x6000])
        self.assertEqual(self.rec.first_f32[1::2], [0.5, 0.25])
        # Without eps among the names: the artifact's value, whatever another launcher set.
        e.launcher(("x", "weight", "out"))(0, 1, 2, 3)
        self.assertAlmostEqual(self.rec.first_f32[-1], 1e-6)
        self.assertEqual(self.rec.calls[-2][5], 1)

    def test_a_misaligned_buffer_is_named_before_any_launch_of_the_run(self):
        a = aligned_artifact()
        e, self.rec = fast_entry(a)
        run = e.launcher(("x", "weight", "out"))
        # out is the second launch's only: the first is not enqueued either.
        with self.assertRaisesRegex(ValueError, "buffer 'out' at 0x3002 is not 4-byte aligned"):
            run(0, 0x1000, 0x2000, 0x3002)
        with self.assertRaisesRegex(ValueError, "buffer 'x' at 0x1008 is not 16-byte aligned"):
            run(0, 0x1008, 0x2000, 0x3000)
        with self.assertRaisesRegex(ValueError, "buffer 'out' at 0x3001"):
            e.launch(dict(POINTERS, out=0x3001), 0)
        self.assertEqual(self.rec.calls, [])
        run(0, 0x1010, 0x2000, 0x3004)
        e.launch(POINTERS, 0)
        self.assertEqual(len(self.rec.calls), 2 * len(a.launches))
        self.assertEqual(self.rec.calls[0][5], 0x1010)

    def test_a_launcher_refuses_unknown_args_and_missing_buffers(self):
        e, _ = self.entry()
        with self.assertRaisesRegex(ValueError, "no arg 'bias'"):
            e.launcher(("x", "weight", "out", "bias"))
        with self.assertRaisesRegex(ValueError, "no value for buffer 'out'"):
            e.launcher(("x", "weight", "eps"))
        self.assertEqual(self.rec.calls, [])


class CachedKernelLauncherTest(unittest.TestCase):
    """Without the C launcher (a fake driver), launcher() writes the values with ctypes and
    launches through the driver: the same kernelParams."""

    def test_values_reach_the_driver(self):
        a = artifact()
        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"})
        e = CachedKernel(a, ktune.LoadedKernel(a, driver=cu), None)
        e.launcher(("x", "weight", "out", "eps"))("stream-7", 0x1000, 0x2000, 0x3000, 0.5)
        launches = [c for c in cu.calls if c[0] == "launch"]
        self.assertEqual([(c[1], c[5], c[6]) for c in launches], [
            ("fn:_Z14rmsnorm_kernelI", "stream-7", 0x1000),
            ("fn:_Z6second", "stream-7", ctypes.c_uint32.from_buffer(ctypes.c_float(0.5)).value)])

    def test_a_misaligned_buffer_is_named_before_any_launch(self):
        a = aligned_artifact()
        cu = FakeDriver({"_Z14rmsnorm_kernelI", "_Z6second"})
        run = CachedKernel(a, ktune.LoadedKernel(a, driver=cu), None).launcher(
            ("x", "weight", "out"))
        with self.assertRaisesRegex(ValueError, "buffer 'out' at 0x3002 is not 4-byte aligned"):
            run(0, 0x1000, 0x2000, 0x3002)
        self.assertEqual([c for c in cu.calls if c[0] == "launch"], [])
        run(0, 0x1000, 0x2000, 0x3004)
        self.assertEqual(len([c for c in cu.calls if c[0] == "launch"]), 2)


class FakeTensor:
    """What hot_call reads of a torch tensor, with the values a test sets."""

    def __init__(self, shape, dtype="bf16", device=0, address=0x10000, contiguous=True,
                 requires_grad=False):
        self.shape, self.dtype, self.requires_grad = tuple(shape), dtype, requires_grad
        self._device, self._address, self._contiguous = device, address, contiguous

    def get_device(self):
        return self._device

    def is_contiguous(self):
        return self._contiguous

    def data_ptr(self):
        return self._address

    def new_empty(self, shape, dtype=None):
        return FakeTensor(shape, dtype or self.dtype, self._device, 0x90000)

    def add_(self, other):
        self.added = getattr(self, "added", []) + [other]
        return self

    def to(self, dtype):
        return FakeTensor(self.shape, dtype, self._device, 0xA0000)


class FakeSubclass(FakeTensor):
    pass


class HotCallTest(unittest.TestCase):
    """hot_call (ktune.torch's hot path) against fake tensors: a plan replays its launches
    with this call's addresses and scalars only where every check holds; else None."""

    def setUp(self):
        e, self.rec = fast_entry(artifact())
        self.names = ("x", "weight", "out", "eps")
        self.run = e.launcher(self.names)
        self.grad, self.device, self.streams = [False], [0], {0: 0x5000, 1: 0x5000}
        self.errors = []
        _fastlaunch.hot_setup(FakeTensor, lambda: self.grad[0], lambda: self.device[0],
                              lambda d: self.streams[d],
                              lambda t: FakeTensor(t.shape, t.dtype, t.get_device(), 0x80000))
        self.generation, self.epoch = [3], [7]
        self.x, self.w = FakeTensor((8, 4096), address=0x10000), FakeTensor((4096,),
                                                                           address=0x20000)
        self.table = {self.signature(self.x, self.w, 0.5): self.plan()}

    def tearDown(self):
        _fastlaunch.hot_setup(None, None, None, None, None)

    @staticmethod
    def signature(*args):
        return (threading.get_ident(), 0, 0x5000) + tuple(
            (a.shape, a.dtype, a.get_device()) if type(a) is FakeTensor else a for a in args)

    def plan(self, out_kind=0, out_shape=None, sources=(0, 1, 1 << 8, 2 << 8 | 2),
             convert=None, add=None):
        def on_error(i, err):
            self.errors.append((i, err))
            raise RuntimeError(f"launch {i}: CUresult {err}")
        return (self.generation, 3, self.epoch, 7, tuple(self.run.steps_ref[0][1]), sources,
                (15, 15, 0), (0xC0000,), out_kind, 0, out_shape, on_error,
                self.run.steps_ref[0][0], convert, add)

    def test_a_repeated_call_launches_with_its_own_addresses_and_scalars(self):
        out = _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)
        self.assertIsInstance(out, FakeTensor)
        self.assertEqual((out.shape, out.data_ptr()), ((8, 4096), 0x80000))
        self.assertEqual(len(self.rec.calls), 2)  # both launches of the artifact
        self.assertEqual(self.rec.calls[0][:5], (0x7000, (4096, 1, 1), (256, 1, 1), 1024,
                                                 0x5000))
        self.assertEqual(self.rec.calls[0][5], 0x10000)  # launch 0's first arg: x
        self.assertEqual(self.rec.first_f32[1], 0.5)     # launch 1's first arg: eps
        x2 = FakeTensor((8, 4096), address=0x30000)
        _fastlaunch.hot_call(self.table, x2, self.w, 0.5)
        self.assertEqual(self.rec.calls[2][5], 0x30000)

    def test_anything_that_changed_takes_the_python_path(self):
        hot = _fastlaunch.hot_call
        t = self.table
        self.assertIsNone(hot({}, self.x, self.w, 0.5))
        self.assertIsNone(hot(t, FakeTensor((9, 4096)), self.w, 0.5))           # shape
        self.assertIsNone(hot(t, FakeTensor((8, 4096), "f16"), self.w, 0.5))    # dtype
        self.assertIsNone(hot(t, FakeTensor((8, 4096), device=1), self.w, 0.5))  # device
        self.assertIsNone(hot(t, self.x, self.w, 0.25))                         # a scalar
        self.assertIsNone(hot(t, FakeTensor((8, 4096), contiguous=False), self.w, 0.5))
        self.assertIsNone(hot(t, FakeSubclass((8, 4096)), self.w, 0.5))         # a subclass
        self.assertIsNone(hot(t, FakeTensor((8, 4096), address=0x10008), self.w, 0.5))
        self.assertIsNone(hot(t, self.x, self.w, [0.5]))                        # unhashable
        grad_x = FakeTensor((8, 4096), requires_grad=True)
        self.assertIsNotNone(hot(t, grad_x, self.w, 0.5))  # autograd off: nothing recorded
        self.grad[0] = True
        self.assertIsNone(hot(t, grad_x, self.w, 0.5))
        self.assertIsNotNone(hot(t, self.x, self.w, 0.5))
        self.device[0] = 1
        self.assertIsNone(hot(t, self.x, self.w, 0.5))  # another current device
        self.device[0] = 0
        self.streams[0] = 0x6000
        self.assertIsNone(hot(t, self.x, self.w, 0.5))  # another stream
        self.streams[0] = 0x5000
        self.generation[0] += 1
        self.assertIsNone(hot(t, self.x, self.w, 0.5))  # the kernel was replaced
        self.generation[0] -= 1
        self.epoch[0] += 1
        self.assertIsNone(hot(t, self.x, self.w, 0.5))  # a scratch buffer was replaced
        self.epoch[0] -= 1
        result = []
        thread = threading.Thread(target=lambda: result.append(hot(t, self.x, self.w, 0.5)))
        thread.start()
        thread.join()
        self.assertEqual(result, [None])  # another thread: its own launcher and plans
        self.assertEqual(len(self.rec.calls), 2 * 2)  # only the two hits launched

    def test_outputs_of_a_shape_with_a_dtype_or_none(self):
        self.table[self.signature(self.x, self.w, 0.5)] = self.plan(1, (8, 2048))
        out = _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)
        self.assertEqual((out.shape, out.dtype, out.data_ptr()), ((8, 2048), "bf16", 0x90000))
        self.table[self.signature(self.x, self.w, 0.5)] = self.plan(2, ((8, 16), {"dtype": "x"}))
        out = _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)
        self.assertEqual((out.shape, out.dtype), ((8, 16), "x"))
        self.table[self.signature(self.x, self.w, 0.5)] = self.plan(3)
        self.assertIs(_fastlaunch.hot_call(self.table, self.x, self.w, 0.5), True)
        # A constant as a value: launch 0's first arg (x's slot) from the plan's consts.
        self.table[self.signature(self.x, self.w, 0.5)] = self.plan(
            sources=(3 << 8, 1, 1 << 8, 2 << 8 | 2))
        _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)
        self.assertEqual(self.rec.calls[-2][5], 0xC0000)
        self.assertEqual(len(self.rec.calls), 4 * 2)

    def test_a_converted_arg_is_read_from_its_copy(self):
        # As rope's int64 positions: x's slot gets the address of x.to("i32"), made per call.
        self.table[self.signature(self.x, self.w, 0.5)] = self.plan(convert=((0, "i32"),))
        _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)
        self.assertEqual(self.rec.calls[0][5], 0xA0000)
        for bad in (((5, "i32"),), ((0, "i32"), (0, "i32")), "not a tuple"):
            self.table[self.signature(self.x, self.w, 0.5)] = self.plan(convert=bad)
            with self.assertRaises((ValueError, TypeError)):
                _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)
        self.assertEqual(len(self.rec.calls), 2)

    def test_an_arg_added_to_the_output_after_the_launches(self):
        # As linear's bias: out.add_(args[1]) once the kernel is enqueued.
        self.table[self.signature(self.x, self.w, 0.5)] = self.plan(add=1)
        out = _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)
        self.assertEqual(out.added, [self.w])
        self.table[self.signature(self.x, self.w, 0.5)] = self.plan(add=7)
        with self.assertRaisesRegex(ValueError, "an add names no arg"):
            _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)

    def test_a_failed_launch_is_raised_by_the_plan(self):
        self.rec.result = LAUNCH_FAILED
        with self.assertRaisesRegex(RuntimeError, f"launch 0: CUresult {LAUNCH_FAILED}"):
            _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)
        self.assertEqual(self.errors, [(0, LAUNCH_FAILED)])
        self.assertEqual(len(self.rec.calls), 1)  # the second launch was not tried

    def test_no_current_device_takes_the_python_path(self):
        def no_driver():
            raise RuntimeError("Found no NVIDIA driver on your system")
        _fastlaunch.hot_setup(FakeTensor, lambda: False, no_driver, lambda d: 0x5000,
                              lambda t: t)
        self.assertIsNone(_fastlaunch.hot_call(self.table, self.x, self.w, 0.5))
        self.assertEqual(self.rec.calls, [])

    def test_without_setup_or_with_a_bad_table_it_refuses(self):
        _fastlaunch.hot_setup(None, None, None, None, None)
        with self.assertRaisesRegex(TypeError, "table must be a dict"):
            _fastlaunch.hot_call([], self.x)
        self.table[self.signature(self.x, self.w, 0.5)] = ("not", "a", "plan")
        _fastlaunch.hot_setup(FakeTensor, lambda: False, lambda: 0, lambda d: 0x5000,
                              lambda t: t)
        with self.assertRaisesRegex(TypeError, "a plan must be a tuple of its fields"):
            _fastlaunch.hot_call(self.table, self.x, self.w, 0.5)
        self.assertEqual(self.rec.calls, [])


if __name__ == "__main__":
    unittest.main()
