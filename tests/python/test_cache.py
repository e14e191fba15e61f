"""Tests of ktune.Client.get_kernels and ktune.KernelCache (client/python/ktune/_cache.py)
against an in-process fake Ktune servicer on a unix socket and a fake cuda-python driver: one
ask per key, hits from memory, launches with their params packed once, prefetch in one
GetKernels call, the FALLBACK kernel replaced by the tuned one in the background, a missing
daemon. No torch, no GPU."""

import ctypes
import hashlib
import os
import threading
import time
import unittest

import grpc

import ktune
from ktune.v1 import ktune_pb2, ktune_pb2_grpc, manifest_pb2

from test_client import FakeDaemonTest
from test_loaded_kernel import FakeDriver


def artifact(kernel, provenance, n):
    """One launch of `kernel` over buffers x, out and scalars n (i32) and eps (f32)."""
    cubin = ("cubin of " + kernel).encode()
    a = ktune_pb2.KernelArtifact(cubin=cubin, cubin_sha256=hashlib.sha256(cubin).hexdigest(),
                                 provenance=provenance, template_id="tiny", dtype="f32")
    a.launches.add(lowered_name=kernel, grid=[(n + 127) // 128, 1, 1], block=[128, 1, 1],
                   args=[0, 1, 2, 3])
    for name, role in (("x", manifest_pb2.Buffer.INPUT), ("out", manifest_pb2.Buffer.OUTPUT)):
        a.args.add(name=name, is_buffer=True, dtype="f32", count=n, role=role)
    a.args.add(name="n", scalar_type="i32", int_value=n)
    a.args.add(name="eps", scalar_type="f32", number=1e-6)
    a.shape["n"] = n
    return a


class FakeKtune(ktune_pb2_grpc.KtuneServicer):
    """GetKernel answers a DEFAULT kernel ("k_default") for any n but 13 (INVALID_ARGUMENT);
    GetKernels answers CACHE_ONLY keys with the tuned kernel ("k_tuned") once `tuned` is set
    (NOT_FOUND before), other policies as GetKernel; `retry_once` makes the key with that n
    come back retry=True the first time. Counts the calls."""

    def __init__(self):
        self.asks = 0
        self.batches = []
        self.tuned = False
        self.default_won = False
        self.retry_once = None
        self.unimplemented = False
        self.lock = threading.Lock()

    def _answer(self, r):
        n = r.shape["n"]
        if n == 13:
            return grpc.StatusCode.INVALID_ARGUMENT, "shape: dim 'n' = 13 is unlucky", None
        if r.policy == ktune_pb2.CACHE_ONLY:
            if not self.tuned:
                return grpc.StatusCode.NOT_FOUND, f"no entry for tiny f32 n={n}", None
            kernel = "k_default" if self.default_won else "k_tuned"  # same cubin, or not
            return grpc.StatusCode.OK, "", artifact(kernel, ktune_pb2.EXACT, n)
        return grpc.StatusCode.OK, "", artifact("k_default", ktune_pb2.DEFAULT, n)

    def GetKernel(self, request, context):
        with self.lock:
            self.asks += 1
        code, message, a = self._answer(request)
        if a is None:
            context.abort(code, message)
        return ktune_pb2.GetKernelResponse(artifact=a, tuning_job_id=5)

    def GetKernels(self, request, context):
        if self.unimplemented:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no GetKernels here")
        with self.lock:
            self.batches.append([(r.shape["n"], r.policy) for r in request.requests])
        out = ktune_pb2.GetKernelsResponse()
        for i, r in enumerate(request.requests):
            result = out.results.add()
            if self.retry_once is not None and r.shape["n"] == self.retry_once:
                self.retry_once = None
                result.code = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
                result.message = f"requests[{i}]: did not fit"
                result.retry = True
                continue
            code, message, a = self._answer(r)
            if a is None:
                sep = "." if code == grpc.StatusCode.INVALID_ARGUMENT else ": "
                result.code = code.value[0]
                result.message = f"requests[{i}]{sep}{message}"
            else:
                result.response.artifact.CopyFrom(a)
        return out


class CacheDriver(FakeDriver):
    """The loader's fake driver plus contexts (one per thread, none until pushed) and
    launches that record their kernel, grid, stream and every parameter's value."""

    CONTEXT = 0xC0

    def __init__(self):
        super().__init__(functions={"k_default", "k_tuned"})
        self.local = threading.local()
        self.launches = []
        self.lock = threading.Lock()

    def current(self):
        return getattr(self.local, "context", None)

    def cuCtxGetCurrent(self):
        return (0, self.current() or 0)

    def cuCtxPushCurrent(self, context):
        self.local.context = context
        return (0,)

    def cuCtxPopCurrent(self):
        context, self.local.context = self.current(), None
        return (0, context)

    def cuModuleLoadData(self, address):
        with self.lock:
            self.calls.append(("load",))
        return (0, "module")

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        array = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        x = ctypes.c_uint64.from_address(array[0]).value
        out = ctypes.c_uint64.from_address(array[1]).value
        n = ctypes.c_int32.from_address(array[2]).value
        eps = ctypes.c_float.from_address(array[3]).value
        with self.lock:
            self.launches.append((fn, gx, stream, x, out, n, round(eps, 9), self.current()))
        return (0,)


class CacheTest(FakeDaemonTest):
    servicer = FakeKtune
    workers = 8

    def setUp(self):
        super().setUp()
        self.driver = CacheDriver()
        self.driver.cuCtxPushCurrent(CacheDriver.CONTEXT)
        self.caches = []

    def tearDown(self):
        for c in self.caches:
            c.close()
        super().tearDown()

    def cache(self, **kwargs):
        kwargs.setdefault("refresh_s", None)
        c = ktune.KernelCache(self.client, driver=self.driver, **kwargs)
        self.caches.append(c)
        return c

    # ---- Client.get_kernels ----

    def test_get_kernels_answers_each_key_in_order(self):
        keys = [("tiny", "f32", {"n": n}) for n in (1, 13, 2)]
        results = self.client.get_kernels(keys, policy="fallback")
        self.assertEqual(results[0].provenance, "default")
        self.assertIsInstance(results[1], ktune.InvalidArgumentError)
        self.assertIn("requests[1].shape: dim 'n' = 13", results[1].message)
        self.assertEqual(results[2].launches[0].grid, (1, 1, 1))
        self.assertEqual(self.fake.batches, [[(1, ktune_pb2.FALLBACK), (13, ktune_pb2.FALLBACK),
                                              (2, ktune_pb2.FALLBACK)]])

    def test_get_kernels_splits_and_asks_again_for_what_did_not_fit(self):
        self.fake.retry_once = 105
        keys = [("tiny", "f32", {"n": n}, 0) for n in range(100, 400)]
        results = self.client.get_kernels(keys, policy="fallback")
        self.assertEqual([len(b) for b in self.fake.batches], [256, 45])
        self.assertEqual(self.fake.batches[1][0][0], 105)  # the left-over key first
        self.assertTrue(all(isinstance(r, ktune.KernelArtifact) for r in results))
        self.assertEqual([r.args[0].count for r in results], list(range(100, 400)))

    def test_get_kernels_of_a_daemon_without_it_asks_key_by_key(self):
        self.fake.unimplemented = True
        results = self.client.get_kernels([("tiny", "f32", {"n": 1}), ("tiny", "f32", {"n": 13})],
                                          policy="fallback")
        self.assertEqual(self.fake.asks, 2)
        self.assertEqual(results[0].provenance, "default")
        self.assertIn("requests[1]: shape: dim 'n' = 13", results[1].message)

    def test_get_kernels_refuses_a_malformed_key(self):
        with self.assertRaises(ktune.InvalidArgumentError) as e:
            self.client.get_kernels([("tiny", "f32")])
        self.assertIn("keys[0]", str(e.exception))

    # ---- KernelCache ----

    def test_first_get_asks_fallback_later_gets_are_hits(self):
        cache = self.cache()
        k = cache.get("tiny", "f32", {"n": 1000})
        self.assertEqual(k.provenance, "default")
        self.assertTrue(k.provisional)
        self.assertEqual(k.context, CacheDriver.CONTEXT)
        for _ in range(100):
            self.assertIs(cache.get("tiny", "f32", {"n": 1000}), k)
        self.assertIs(cache.peek(ktune.cache_key("tiny", "f32", {"n": 1000})), k)
        self.assertIsNone(cache.peek(ktune.cache_key("tiny", "f32", {"n": 5})))  # not asked
        self.assertEqual(self.fake.asks, 1)
        self.assertEqual(self.driver.calls.count(("load",)), 1)
        k.launch({"x": 0x1000, "out": 0x2000}, "stream-1")
        k.launch({"x": 0x3000, "out": 0x4000}, "stream-2", scalars={"eps": 1e-5})
        k.launch({"x": 0x5000, "out": 0x6000}, "stream-1")
        fn = "fn:k_default"
        self.assertEqual(self.driver.launches, [
            (fn, 8, "stream-1", 0x1000, 0x2000, 1000, 1e-6, CacheDriver.CONTEXT),
            (fn, 8, "stream-2", 0x3000, 0x4000, 1000, 1e-5, CacheDriver.CONTEXT),
            (fn, 8, "stream-1", 0x5000, 0x6000, 1000, 1e-6, CacheDriver.CONTEXT)])
        with self.assertRaises(KeyError) as e:
            k.launch({"x": 0x1000}, 0)
        self.assertIn("'out'", str(e.exception))

    def test_many_threads_asking_one_new_key_ask_once(self):
        cache = self.cache()
        got = []

        def ask():
            self.driver.cuCtxPushCurrent(CacheDriver.CONTEXT)
            got.append(cache.get("tiny", "f32", {"n": 4096}))
        threads = [threading.Thread(target=ask) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(got), 16)
        self.assertTrue(all(k is got[0] for k in got))
        self.assertEqual(self.fake.asks, 1)

    def test_the_tuned_kernel_replaces_the_fallback_in_the_background(self):
        cache = self.cache(refresh_s=0.01)
        first = cache.get("tiny", "f32", {"n": 1000})
        cache.get("tiny", "f32", {"n": 2000})
        self.fake.tuned = True
        deadline = time.monotonic() + 10
        while cache.get("tiny", "f32", {"n": 1000}).provenance != "exact":
            self.assertLess(time.monotonic(), deadline, "the tuned kernel never came")
            time.sleep(0.01)
        now = cache.get("tiny", "f32", {"n": 1000})
        self.assertFalse(now.provisional)
        self.assertEqual(now.context, CacheDriver.CONTEXT)  # loaded with the first's context
        now.launch({"x": 1, "out": 2}, 0)
        first.launch({"x": 1, "out": 2}, 0)  # the old kernel still works for who holds it
        self.assertEqual([l[0] for l in self.driver.launches], ["fn:k_tuned", "fn:k_default"])
        self.assertEqual(self.fake.asks, 2)  # only the two first gets
        polls = [b for b in self.fake.batches if b]
        self.assertTrue(all(p == ktune_pb2.CACHE_ONLY for b in polls for _, p in b))

    def test_refresh_now_replaces_only_what_ktuned_has_tuned(self):
        cache = self.cache()
        cache.get("tiny", "f32", {"n": 1000})
        self.assertEqual(cache.refresh_now(), 0)
        self.assertEqual(cache.get("tiny", "f32", {"n": 1000}).provenance, "default")
        self.fake.tuned = True
        self.assertEqual(cache.refresh_now(), 1)
        self.assertEqual(cache.get("tiny", "f32", {"n": 1000}).provenance, "exact")
        self.assertEqual(cache.refresh_now(), 0)

    def test_a_default_config_that_wins_is_settled_without_a_reload(self):
        cache = self.cache()
        first = cache.get("tiny", "f32", {"n": 1000})
        self.fake.tuned = self.fake.default_won = True
        self.assertEqual(cache.refresh_now(), 1)
        now = cache.get("tiny", "f32", {"n": 1000})
        self.assertEqual(now.provenance, "exact")
        self.assertIs(now.kernel, first.kernel)  # the same module and functions
        self.assertEqual(self.driver.calls.count(("load",)), 1)
        self.assertEqual(cache.refresh_now(), 0)

    def test_prefetch_asks_every_missing_key_in_one_call(self):
        cache = self.cache()
        cache.get("tiny", "f32", {"n": 1000})
        keys = [("tiny", "f32", {"n": n}) for n in (1000, 2000, 13, 3000, 2000)]
        out = cache.prefetch(keys)
        self.assertIsNone(out[0])
        self.assertIsNone(out[1])
        self.assertIsInstance(out[2], ktune.InvalidArgumentError)
        self.assertIn("tiny f32 n=13 gpu 0: shape: dim 'n' = 13", out[2].message)
        self.assertEqual(out[3:], [None, None])
        self.assertEqual(self.fake.batches, [[(2000, ktune_pb2.FALLBACK), (13, ktune_pb2.FALLBACK),
                                              (3000, ktune_pb2.FALLBACK)]])
        self.assertEqual(self.fake.asks, 1)
        cache.get("tiny", "f32", {"n": 3000})
        with self.assertRaises(ktune.InvalidArgumentError):
            cache.get("tiny", "f32", {"n": 13})  # remembered, not asked again
        self.assertEqual(self.fake.asks, 1)
        self.assertEqual(len(self.fake.batches), 1)

    def test_a_missing_daemon_gives_a_clear_error_and_is_not_asked_on_every_call(self):
        target = "unix://" + os.path.join(self.dir, "nobody.sock")
        with ktune.Client(target, timeout_s=5) as client:
            cache = ktune.KernelCache(client, driver=self.driver, refresh_s=0.005)
            self.caches.append(cache)
            with self.assertRaises(ktune.UnavailableError) as e:
                cache.get("tiny", "f32", {"n": 1000})
            self.assertIn("tiny f32 n=1000 gpu 0", str(e.exception))
            start = time.monotonic()
            for _ in range(1000):
                with self.assertRaises(ktune.UnavailableError):
                    cache.get("tiny", "f32", {"n": 1000})
            self.assertLess(time.monotonic() - start, 1.0)
            out = cache.prefetch([("tiny", "f32", {"n": 1}), ("tiny", "f32", {"n": 2})])
            self.assertIsInstance(out[0], ktune.UnavailableError)
            self.assertIn("tiny f32 n=1 gpu 0", out[0].message)
            self.assertIsInstance(out[1], ktune.UnavailableError)
            time.sleep(0.02)  # background periods pass harmlessly
            cache.close()

    def test_a_failed_ask_is_retried_after_retry_after(self):
        cache = self.cache(retry_after_s=0.05)
        for _ in range(2):
            with self.assertRaises(ktune.InvalidArgumentError):
                cache.get("tiny", "f32", {"n": 13})
        self.assertEqual(self.fake.asks, 1)
        time.sleep(0.06)
        with self.assertRaises(ktune.InvalidArgumentError):
            cache.get("tiny", "f32", {"n": 13})
        self.assertEqual(self.fake.asks, 2)

    def test_no_current_context_is_failed_precondition(self):
        cache = self.cache()
        self.driver.cuCtxPopCurrent()
        with self.assertRaises(ktune.FailedPreconditionError) as e:
            cache.get("tiny", "f32", {"n": 1000})
        self.assertIn("no current CUDA context", str(e.exception))

    def test_a_loader_that_breaks_fails_the_key_and_leaves_no_waiter_behind(self):
        def broken(artifact, driver):
            raise TypeError("Cannot convert int to cuuint32_t")
        cache = self.cache(loader=broken)
        for _ in range(2):  # the second get answers from memory, it does not wait
            with self.assertRaises(ktune.FailedPreconditionError) as e:
                cache.get("tiny", "f32", {"n": 1000})
            self.assertIn("tiny f32 n=1000 gpu 0: TypeError: Cannot convert", str(e.exception))
        out = cache.prefetch([("tiny", "f32", {"n": 2000})])
        self.assertIsInstance(out[0], ktune.FailedPreconditionError)
        self.assertEqual(self.fake.asks, 1)

    def test_bad_policy_is_refused(self):
        with self.assertRaises(ktune.InvalidArgumentError):
            ktune.KernelCache(self.client, policy="sometimes", refresh_s=None)


if __name__ == "__main__":
    unittest.main()
