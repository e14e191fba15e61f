"""Tests of the ktune Python client (client/python) against an in-process fake Ktune
servicer on a unix socket. Needs the generated ktune.v1 modules on PYTHONPATH (CTest points
it at BUILD/python, which the `ktune_python` target fills)."""

import concurrent.futures
import ctypes
import hashlib
import os
import shutil
import tempfile
import threading
import time
import unittest

import grpc

import ktune
from ktune.v1 import ktune_pb2, ktune_pb2_grpc, manifest_pb2, worker_pb2

CUBIN = b"\x7fELF fake cubin \x00\x01\x02" * 10


def canned_artifact(cubin=CUBIN, sha=None):
    a = ktune_pb2.KernelArtifact(
        cubin=cubin,
        cubin_sha256=hashlib.sha256(cubin).hexdigest() if sha is None else sha,
        provenance=ktune_pb2.NEAREST, device_model="NVIDIA H200 sm_90 132SM",
        template_id="rmsnorm", dtype="bf16", template_source_hash="abc123",
        nvrtc_version="13.0.48", stale=True, entry_id=42, created_unix_ms=1764400000123)
    a.launches.add(lowered_name="_Z14rmsnorm_kernelI", grid=[4096, 1, 1], block=[256, 1, 1],
                   shared_bytes=1024, args=[0, 1, 2, 3, 4, 5], programmatic=True)
    a.launches.add(lowered_name="_Z6second", grid=[1, 2, 3], block=[32, 4, 1], args=[5, 2])
    a.args.add(name="x", is_buffer=True, dtype="bf16", count=4096 * 8192,
               role=manifest_pb2.Buffer.INPUT)
    a.args.add(name="weight", is_buffer=True, dtype="bf16", count=8192,
               role=manifest_pb2.Buffer.INPUT)
    a.args.add(name="out", is_buffer=True, dtype="bf16", count=4096 * 8192,
               role=manifest_pb2.Buffer.OUTPUT)
    a.args.add(name="tokens", scalar_type="i32", int_value=4096)
    a.args.add(name="hidden", scalar_type="i64", int_value=8192)
    a.args.add(name="eps", scalar_type="f32", number=1e-6)
    a.params["BLOCK"] = 256
    a.params["VEC"] = 8
    a.knobs.CopyFrom(ktune_pb2.Knobs(maxrregcount=64, min_blocks=2, fast_math=True,
                                     target="sm_90a"))
    a.metrics.CopyFrom(ktune_pb2.KernelMetrics(
        time_ns=12345.5, spread_ns=100.25, registers=40, spill_bytes=8, occupancy=0.75,
        gbps=3900.5, gflops=11.5, ceiling_fraction=0.92))
    a.shape["tokens"] = 2048
    a.shape["hidden"] = 8192
    return a


class FakeKtune(ktune_pb2_grpc.KtuneServicer):
    """Answers from `self.behaviour` (set per test) and records requests and metadata."""

    def __init__(self):
        self.requests = []
        self.metadata = []
        self.artifact = canned_artifact()
        self.error = None       # (grpc.StatusCode, message) to abort with
        self.delay_s = 0.0
        self.progress_events = 0

    def _record(self, request, context):
        self.requests.append(request)
        self.metadata.append(tuple(context.invocation_metadata()))
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.error:
            context.abort(*self.error)

    def GetKernel(self, request, context):
        self._record(request, context)
        return ktune_pb2.GetKernelResponse(artifact=self.artifact, tuning_job_id=7)

    def Tune(self, request, context):
        self._record(request, context)
        for i in range(self.progress_events):
            p = ktune_pb2.TuneProgress(job_id=7, done=i + 1, total=self.progress_events,
                                       elapsed_s=0.5 * (i + 1), eta_s=1.0,
                                       best_time_ns=1000.0 - i, last_outcome="ok")
            p.best_params["BLOCK"] = 128 * (i + 1)
            yield ktune_pb2.TuneEvent(progress=p)
        yield ktune_pb2.TuneEvent(artifact=self.artifact)

    def ListTemplates(self, request, context):
        self._record(request, context)
        r = ktune_pb2.ListTemplatesResponse(errors=["bad/bad.textproto:3: name: invalid"])
        t = r.templates.add(name="rmsnorm", description="RMSNorm", dtypes=["f32", "bf16"],
                            source_hash="abc123")
        t.dims.add(name="tokens", min=1, max=2147483647, example=16)
        t.params.add(name="BLOCK", description="threads", values=[32, 64], default=64)
        return r

    def GetDevices(self, request, context):
        self._record(request, context)
        r = ktune_pb2.GetDevicesResponse(compile_only=False)
        r.devices.add(info=worker_pb2.DeviceInfo(ordinal=0, name="NVIDIA H200", cc_major=9,
                                                 sm_count=132, uuid="GPU-1",
                                                 driver_version="13.0"),
                      model_key="NVIDIA H200 sm_90 132SM", copy_gbps=4250.0, healthy=True)
        return r

    def ListEntries(self, request, context):
        self._record(request, context)
        r = ktune_pb2.ListEntriesResponse()
        e = r.entries.add(entry_id=3, template_id="rmsnorm", dtype="bf16", cubin_bytes=99)
        e.shape["tokens"] = 16
        return r


def serve(servicer, workers=4):
    """(server, folder, target): `servicer` served on a unix socket in a fresh temp folder."""
    folder = tempfile.mkdtemp(prefix="ktune-pytest-")
    target = "unix://" + os.path.join(folder, "ktuned.sock")
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=workers))
    ktune_pb2_grpc.add_KtuneServicer_to_server(servicer, server)
    if server.add_insecure_port(target) == 0:
        raise RuntimeError("cannot listen on " + target)
    server.start()
    return server, folder, target


class FakeDaemonTest(unittest.TestCase):
    """A fake servicer (`servicer`, a class) served for the test class; each test starts with
    it reset and a fresh ktune.Client in self.client."""

    servicer = None
    workers = 4

    @classmethod
    def setUpClass(cls):
        cls.fake = cls.servicer()
        cls.server, cls.dir, cls.target = serve(cls.fake, cls.workers)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop(None).wait()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        self.fake.__init__()
        self.client = ktune.Client(self.target, timeout_s=10)

    def tearDown(self):
        self.client.close()


class ClientTest(FakeDaemonTest):
    servicer = FakeKtune

    def check_canned(self, art):
        self.assertEqual(art.cubin, CUBIN)
        self.assertEqual(art.cubin_sha256, hashlib.sha256(CUBIN).hexdigest())
        self.assertEqual(art.launches, [
            ktune.KernelLaunch("_Z14rmsnorm_kernelI", (4096, 1, 1), (256, 1, 1), 1024,
                               (0, 1, 2, 3, 4, 5), programmatic=True),
            ktune.KernelLaunch("_Z6second", (1, 2, 3), (32, 4, 1), 0, (5, 2))])
        self.assertEqual([a.name for a in art.args],
                         ["x", "weight", "out", "tokens", "hidden", "eps"])
        self.assertEqual(art.args[0], ktune.KernelArg(
            name="x", is_buffer=True, dtype="bf16", count=4096 * 8192, role="input"))
        self.assertEqual(art.arg("out").role, "output")
        self.assertIsNone(art.arg("out").value)
        self.assertEqual(art.arg("tokens").value, 4096)
        self.assertEqual(art.arg("hidden").scalar_type, "i64")
        self.assertEqual(art.arg("hidden").value, 8192)
        self.assertAlmostEqual(art.arg("eps").value, 1e-6)
        self.assertEqual(art.params, {"BLOCK": 256, "VEC": 8})
        self.assertEqual(art.knobs, ktune.Knobs(64, 2, True, "sm_90a"))
        self.assertEqual(art.metrics, ktune.KernelMetrics(
            12345.5, 100.25, 40, 8, 0.75, 3900.5, 11.5, 0.92))
        self.assertEqual(art.provenance, "nearest")
        self.assertEqual(art.key, ktune.KernelKey(
            "NVIDIA H200 sm_90 132SM", "rmsnorm", "bf16", {"tokens": 2048, "hidden": 8192},
            "abc123", "13.0.48"))
        self.assertTrue(art.stale)
        self.assertEqual(art.entry_id, 42)
        self.assertEqual(art.created_unix_ms, 1764400000123)

    def test_get_kernel_round_trips_every_field(self):
        art = self.client.get_kernel("rmsnorm", "bf16", {"tokens": 4096, "hidden": 8192},
                                     policy="fallback", gpu=1)
        self.check_canned(art)
        self.assertEqual(art.tuning_job_id, 7)
        req = self.fake.requests[-1]
        self.assertEqual(req.template_id, "rmsnorm")
        self.assertEqual(req.dtype, "bf16")
        self.assertEqual(dict(req.shape), {"tokens": 4096, "hidden": 8192})
        self.assertEqual(req.policy, ktune_pb2.FALLBACK)
        self.assertEqual(req.gpu, 1)

    def test_policies_map_to_the_proto_enum(self):
        for name, value in [("cache_only", ktune_pb2.CACHE_ONLY), ("tune", ktune_pb2.TUNE)]:
            self.client.get_kernel("rmsnorm", "f32", {"tokens": 1}, policy=name)
            self.assertEqual(self.fake.requests[-1].policy, value)
        with self.assertRaisesRegex(ktune.InvalidArgumentError, "policy: 'sometimes'"):
            self.client.get_kernel("rmsnorm", "f32", {"tokens": 1}, policy="sometimes")

    def test_sha_mismatch_is_data_loss(self):
        self.fake.artifact = canned_artifact(sha="00" * 32)
        with self.assertRaises(ktune.DataLossError) as cm:
            self.client.get_kernel("rmsnorm", "bf16", {"tokens": 1, "hidden": 8})
        self.assertIsInstance(cm.exception, ktune.Error)
        self.assertEqual(cm.exception.code, grpc.StatusCode.DATA_LOSS)
        self.assertIn("refusing a corrupted cubin", cm.exception.message)
        # A flipped byte of the cubin under the right sha.
        self.fake.artifact = canned_artifact(cubin=CUBIN[:-1] + b"\x03",
                                             sha=hashlib.sha256(CUBIN).hexdigest())
        with self.assertRaises(ktune.DataLossError):
            self.client.get_kernel("rmsnorm", "bf16", {"tokens": 1, "hidden": 8})

    def test_uppercase_sha_is_accepted(self):
        self.fake.artifact = canned_artifact(sha=hashlib.sha256(CUBIN).hexdigest().upper())
        self.assertEqual(self.client.get_kernel("rmsnorm", "bf16", {}).cubin, CUBIN)

    def test_not_found_keeps_code_and_message(self):
        msg = "no entry for rmsnorm bf16 {tokens: 3, hidden: 8} (policy CACHE_ONLY)"
        self.fake.error = (grpc.StatusCode.NOT_FOUND, msg)
        with self.assertRaises(ktune.NotFoundError) as cm:
            self.client.get_kernel("rmsnorm", "bf16", {"tokens": 3, "hidden": 8})
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(cm.exception.message, msg)
        self.assertIn(msg, str(cm.exception))

    def test_invalid_argument_keeps_code_and_message(self):
        msg = "shape: missing dim 'hidden'"
        self.fake.error = (grpc.StatusCode.INVALID_ARGUMENT, msg)
        with self.assertRaises(ktune.InvalidArgumentError) as cm:
            self.client.get_kernel("rmsnorm", "bf16", {"tokens": 3})
        self.assertEqual(cm.exception.message, msg)
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)

    def test_other_codes_map_to_their_classes(self):
        for code, cls in [(grpc.StatusCode.FAILED_PRECONDITION, ktune.FailedPreconditionError),
                          (grpc.StatusCode.RESOURCE_EXHAUSTED, ktune.ResourceExhaustedError),
                          (grpc.StatusCode.UNAUTHENTICATED, ktune.UnauthenticatedError),
                          (grpc.StatusCode.INTERNAL, ktune.InternalError)]:
            self.fake.error = (code, "why: " + code.name)
            with self.assertRaises(cls) as cm:
                self.client.list_templates()
            self.assertEqual(cm.exception.message, "why: " + code.name)

    def test_token_arrives_as_bearer_metadata(self):
        with ktune.Client(self.target, token="s3cret", timeout_s=10) as client:
            client.get_kernel("rmsnorm", "bf16", {"tokens": 1})
            client.list_templates()
        for md in self.fake.metadata:
            self.assertIn(("authorization", "Bearer s3cret"), md)
        self.client.get_devices()
        self.assertNotIn("authorization", [k for k, _ in self.fake.metadata[-1]])

    def test_deadline_is_deadline_exceeded_error(self):
        self.fake.delay_s = 1.0
        with self.assertRaises(ktune.DeadlineExceededError) as cm:
            self.client.get_kernel("rmsnorm", "bf16", {"tokens": 1}, timeout_s=0.1)
        self.assertEqual(cm.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        with ktune.Client(self.target, timeout_s=0.1) as client:
            with self.assertRaises(ktune.DeadlineExceededError):
                client.tune("rmsnorm", "bf16", {"tokens": 1})

    def test_tune_reports_progress_then_returns_the_artifact(self):
        self.fake.progress_events = 3
        seen = []
        art = self.client.tune("rmsnorm", "bf16", {"tokens": 4096, "hidden": 8192}, gpu=0,
                               strategy="random", budget=50, force=True,
                               on_progress=seen.append)
        self.check_canned(art)
        self.assertEqual([p.done for p in seen], [1, 2, 3])
        self.assertEqual(seen[-1], ktune.TuneProgress(
            job_id=7, done=3, total=3, elapsed_s=1.5, eta_s=1.0, best_params={"BLOCK": 384},
            best_time_ns=998.0, last_outcome="ok"))
        req = self.fake.requests[-1]
        self.assertEqual((req.strategy, req.budget, req.force), ("random", 50, True))

    def test_tune_error_mid_stream(self):
        self.fake.error = (grpc.StatusCode.FAILED_PRECONDITION, "no usable GPU: no driver")
        with self.assertRaisesRegex(ktune.FailedPreconditionError, "no usable GPU"):
            self.client.tune("rmsnorm", "bf16", {"tokens": 1}, on_progress=print)

    def test_tune_with_a_corrupt_artifact_is_data_loss(self):
        self.fake.artifact = canned_artifact(sha="ab" * 32)
        with self.assertRaises(ktune.DataLossError):
            self.client.tune("rmsnorm", "bf16", {"tokens": 1})

    def test_list_templates(self):
        listing = self.client.list_templates()
        self.assertEqual(len(listing), 1)
        t = list(listing)[0]
        self.assertEqual((t.name, t.dtypes, t.source_hash), ("rmsnorm", ["f32", "bf16"],
                                                             "abc123"))
        self.assertEqual(t.dims, [ktune.TemplateDim("tokens", 1, 2147483647, 16)])
        self.assertEqual(t.params, [ktune.TemplateParam("BLOCK", "threads", [32, 64], 64)])
        self.assertEqual(listing.errors, ["bad/bad.textproto:3: name: invalid"])

    def test_get_devices(self):
        devices = self.client.get_devices()
        self.assertFalse(devices.compile_only)
        d = list(devices)[0]
        self.assertEqual((d.info.name, d.info.cc_major, d.info.sm_count, d.info.uuid),
                         ("NVIDIA H200", 9, 132, "GPU-1"))
        self.assertEqual((d.model_key, d.copy_gbps, d.healthy, d.status),
                         ("NVIDIA H200 sm_90 132SM", 4250.0, True, ""))

    def test_list_entries(self):
        entries = self.client.list_entries(template="rmsnorm", stale_only=True)
        self.assertEqual([(e.entry_id, e.shape, e.cubin_bytes) for e in entries],
                         [(3, {"tokens": 16}, 99)])
        req = self.fake.requests[-1]
        self.assertEqual((req.template_id, req.stale_only), ("rmsnorm", True))

    def test_bad_shape_is_rejected_before_sending(self):
        with self.assertRaisesRegex(ktune.InvalidArgumentError, "dim 'tokens'"):
            self.client.get_kernel("rmsnorm", "bf16", {"tokens": 1.5})
        self.assertEqual(self.fake.requests, [])

    def test_no_daemon_is_unavailable(self):
        with ktune.Client("unix://" + os.path.join(self.dir, "nobody.sock"),
                          timeout_s=5) as client:
            with self.assertRaises(ktune.UnavailableError):
                client.list_templates()

    def test_pack_kernel_params(self):
        art = self.client.get_kernel("rmsnorm", "bf16", {"tokens": 1})
        packed = ktune.pack_kernel_params(art, 0, {"x": 0x1000, "weight": 0x2000,
                                                   "out": 0x3000})
        self.assertEqual(len(packed), 6)
        self.assertEqual([packed.value(i) for i in range(5)],
                         [0x1000, 0x2000, 0x3000, 4096, 8192])
        self.assertAlmostEqual(packed.value(5), 1e-6, places=12)
        # The void* array points at the values: read parameter 3 (i32) through it.
        slots = (ctypes.c_void_p * 6).from_address(packed.address)
        self.assertEqual(ctypes.c_int32.from_address(slots[3]).value, 4096)
        with self.assertRaisesRegex(KeyError, "'out'"):
            ktune.pack_kernel_params(art, art.launches[1], {})


class ConcurrencyTest(unittest.TestCase):
    def test_one_client_shared_by_threads(self):
        fake = FakeKtune()
        tmp = tempfile.mkdtemp(prefix="ktune-pytest-")
        target = "unix://" + os.path.join(tmp, "s.sock")
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        ktune_pb2_grpc.add_KtuneServicer_to_server(fake, server)
        server.add_insecure_port(target)
        server.start()
        try:
            with ktune.Client(target, timeout_s=10) as client:
                errors = []

                def work():
                    try:
                        for _ in range(10):
                            client.get_kernel("rmsnorm", "bf16", {"tokens": 1})
                    except Exception as e:  # noqa: BLE001 - reported below
                        errors.append(e)
                threads = [threading.Thread(target=work) for _ in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                self.assertEqual(errors, [])
                self.assertEqual(len(fake.requests), 40)
        finally:
            server.stop(None).wait()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
