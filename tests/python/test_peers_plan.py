"""bench/peers.py plans without a GPU or torch (--dry-run): every op finds its template's
manifest and binds the buffers the manifest declares at every shape it would time, so a
manifest change that would break the GPU-host bench fails here first; a shape filter that
keeps nothing, a malformed one or a negative launch gap, is refused (exit 2).

The gemm op's plan (shapes, labels, dtypes, its flags), its goals on made-up timings, its
tables, and the dry run's dtype / scratch-fill / tensor-map checks run without torch too;
where torch is importable, the op's math on tiny CPU tensors and KtuneRunner's binding
(tensor maps skipped, ZERO_ONCE scratch zeroed once, the stream read at each launch) are
checked with a fake kernel."""

import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import types
import unittest
import unittest.mock

from bench_files import TEMPLATES, bench_path, load_bench

PEERS = bench_path("peers.py")


def load_peers():
    return load_bench("peers.py", "peers_under_test")


peers_mod = load_peers()
HAVE_TORCH = peers_mod.torch is not None


def peers(*args):
    return subprocess.run([sys.executable, PEERS, "--dry-run", "--templates", TEMPLATES, *args],
                          capture_output=True, text=True, timeout=60)


def assert_plan(test, args, present, absent=()):
    """The dry run with `args` succeeds, listing every key label of `present` and none of
    `absent`; returns its result."""
    r = peers(*args)
    test.assertEqual(r.returncode, 0, r.stdout + r.stderr)
    for label in present:
        test.assertIn(f" {label} ", r.stdout)
    for label in absent:
        test.assertNotIn(f" {label} ", r.stdout)
    return r


class PeersPlanTest(unittest.TestCase):
    def test_every_op_binds_its_manifest(self):
        r = peers()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for op in ("gemv", "rmsnorm", "add_rmsnorm", "layernorm", "softmax", "silu_and_mul",
                   "rope", "elementwise", "gemm"):
            self.assertIn(f"{op} (template {op}, manifest found", r.stdout)
        self.assertIn("16384x128256", r.stdout)

    def test_help_exits_0_and_states_the_odd_goal(self):
        # argparse %-formats help text: an unescaped percent sign crashed --help.
        r = subprocess.run([sys.executable, PEERS, "--help"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--sizes", r.stdout)
        self.assertIn("90% of the aligned GB/s", r.stdout)

    def test_only_keeps_the_matching_shapes(self):
        assert_plan(self, ("--ops", "softmax", "--rows", "16384", "--only", "cols=128256"),
                    ["16384x128256"], ["16384x32000"])
        # A dim an op lacks leaves its shapes alone.
        assert_plan(self, ("--ops", "softmax,rmsnorm", "--rows", "16", "--only",
                           "hidden=8192,cols=32000"),
                    ["16x32000", "16x8192"], ["16x128256", "16x4096"])

    def test_only_that_keeps_nothing_is_refused(self):
        r = peers("--ops", "softmax", "--only", "cols=12")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--only cols=12 keeps no shape of softmax", r.stderr)
        r = peers("--only", "cols")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--only: expected DIM=VALUE", r.stderr)

    def test_negative_launch_gap_is_refused(self):
        r = peers("--launch-gap-us", "-5")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--launch-gap-us: must be >= 0, got -5", r.stderr)


class SoftmaxToleranceTest(unittest.TestCase):
    """softmax's check in f16: its probabilities fall into f16's subnormals, whose rounding
    no atol of 1e-12 admits (every peer failed it on the H200, torch's own included)."""

    @staticmethod
    def _f16(x):
        return struct.unpack("<e", struct.pack("<e", x))[0]

    def _within(self, atol, rtol):
        # x in (-8, 8) over 32000 columns: probabilities from ~1e-4 down to ~1e-11.
        probs = [math.exp(-e) / 40000 for e in (0, 4, 8, 12, 16)]
        return all(abs(self._f16(q) - q) <= atol + rtol * q for q in probs)

    def test_f16_admits_f16_rounding_and_the_others_keep_their_atol(self):
        op = peers_mod.OPS["softmax"]
        s = {"rows": 1, "cols": 32000, "out_bytes": 2}
        self.assertTrue(self._within(*op.tolerance(s, "f16")))
        self.assertFalse(self._within(*op.tolerance(s, "bf16")))  # what f16 had before
        self.assertEqual(op.tolerance(s, "bf16"), (1e-12, 1.6e-2))
        self.assertEqual(op.tolerance(s, "f32"), (1e-12, 1.6e-2))


class OddSizesTest(unittest.TestCase):
    """--sizes: odd row lengths beside the aligned ones, f32 included, and the odd goal."""

    def test_both_lists_each_aligned_length_with_its_odd_neighbours(self):
        r = assert_plan(self, ("--ops", "softmax,rmsnorm,silu_and_mul,elementwise", "--rows",
                               "4096", "--sizes", "both", "--dtype", "f32"),
                        ["4096x32000", "4096x32001", "4096x32002", "4096x4097", "4096x8194",
                         "4096x14337", "n=4096*8192+1"])
        # softmax in f32 writes f32: out_bytes follows the dtype
        self.assertIn("'cols': 32001, 'out_bytes': 4", r.stdout)

    def test_odd_leaves_out_the_aligned_lengths(self):
        assert_plan(self, ("--ops", "layernorm", "--rows", "16", "--sizes", "odd"),
                    ["16x4097", "16x4098"], ["16x4096"])

    def test_odd_goal_against_the_aligned_neighbour(self):
        p = peers_mod
        op = p.OPS["softmax"]

        def rec(cols, us):
            r = p.new_record(op, {"rows": 4096, "cols": cols, "out_bytes": 2}, "bf16")
            r["ktune"] = {"us": us, "check": {"ok": True}}
            p.finish_record(r, op, 4000.0)
            return r

        aligned, odd, even, slow = rec(32000, 100.0), rec(32001, 101.0), rec(32002, 100.0), \
            rec(128257, 50.0)
        slow_base = rec(128256, 40.0)
        p.odd_size_goals([aligned, odd, even, slow, slow_base])
        self.assertEqual(odd["goals"]["odd"], "ok")
        self.assertAlmostEqual(odd["odd_vs_aligned"], (32001 / 101.0) / (32000 / 100.0))
        self.assertEqual(even["goals"]["odd"], "ok")
        self.assertEqual(slow["goals"]["odd"], "MISS (0.80x of cols=128256)")
        self.assertNotIn("odd", aligned["goals"])
        # Without its aligned neighbour an odd key has no odd goal.
        lone = rec(4097, 10.0)
        p.odd_size_goals([lone])
        self.assertNotIn("odd", lone["goals"])


def gemm_lines(stdout):
    """The dry run's key lines of gemm: [(label, shape text)]."""
    return re.findall(r"^\s+(\S+ m=\d+ \w+)\s+shape (\{[^}]*\})", stdout, re.M)


class GemmPlanTest(unittest.TestCase):
    def test_dry_run_checks_every_gemm_key_against_the_manifest(self):
        r = peers("--ops", "gemm")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("gemm (template gemm, manifest found; peers cublas)", r.stdout)
        self.assertNotIn("MISMATCH", r.stdout)
        keys = gemm_lines(r.stdout)
        self.assertEqual(len(keys), 5 * 11 * 2)  # five projections, 11 m, bf16 and fp8
        labels = [k[0] for k in keys]
        for label in ("qkv m=1 bf16", "o m=128 bf16", "gate_up m=4096 bf16",
                      "down m=16384 f8e4m3", "lm_head m=256 f8e4m3"):
            self.assertIn(label, labels)
        self.assertIn("{'m': 16, 'n': 4096, 'k': 14336}", r.stdout)  # down
        self.assertIn("{'m': 1, 'n': 128256, 'k': 4096}", r.stdout)  # lm_head
        # bf16 first, then fp8; decode keys (m <= 256) are graph replays.
        self.assertTrue(labels[0].endswith("bf16") and labels[-1].endswith("f8e4m3"))
        self.assertRegex(r.stdout, r"qkv m=256 bf16 .*  graph\n")
        self.assertRegex(r.stdout, r"qkv m=512 bf16 .*\d\n")
        # fp8 moves one byte per input element and writes bf16.
        self.assertRegex(r.stdout, r"o m=1 f8e4m3\s+shape \{'m': 1, 'n': 4096, 'k': 4096\}  "
                                   r"bytes 16789504 ")

    def test_gemm_flags_cut_the_set(self):
        r = peers("--ops", "gemm", "--gemm-m", "1,16", "--gemm-proj", "o,qkv",
                  "--gemm-dtypes", "f8e4m3", "--no-graph-decode")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual([k[0] for k in gemm_lines(r.stdout)],
                         ["o m=1 f8e4m3", "o m=16 f8e4m3", "qkv m=1 f8e4m3", "qkv m=16 f8e4m3"])
        self.assertNotIn("graph", r.stdout)
        r = peers("--ops", "gemm", "--quick")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        labels = [k[0] for k in gemm_lines(r.stdout)]
        self.assertEqual(len(labels), 2 * 4 * 2)
        self.assertEqual(labels[:4], ["qkv m=1 bf16", "qkv m=16 bf16", "qkv m=128 bf16",
                                      "qkv m=4096 bf16"])
        r = peers("--ops", "gemm", "--only", "m=16", "--gemm-proj", "down")
        self.assertEqual([k[0] for k in gemm_lines(r.stdout)], ["down m=16 bf16",
                                                                "down m=16 f8e4m3"])

    def test_bad_gemm_flags_are_refused(self):
        for flags, err in ((("--gemm-proj", "qkv,mlp"), "--gemm-proj: unknown projection 'mlp'"),
                           (("--gemm-dtypes", "bf16,f4"), "--gemm-dtypes: unknown dtype 'f4'"),
                           (("--gemm-m", "1,x"), "--gemm-m: expected comma-separated integers"),
                           (("--gemm-m", "0"), "--gemm-m: m must be >= 1")):
            r = peers("--ops", "gemm", *flags)
            self.assertEqual(r.returncode, 2, flags)
            self.assertIn(err, r.stderr)

    def test_dry_run_sees_a_manifest_the_runner_could_not_serve(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        os.makedirs(os.path.join(tmp, "gemm"))
        with open(os.path.join(TEMPLATES, "gemm", "gemm.textproto")) as f:
            text = f.read()
        for old, new in (('key: "f8e4m3" value: "bf16"', 'key: "f8e4m3" value: "f16"'),
                         ("fill { kind: ZERO_ONCE }", "fill { kind: RANDOM }"),
                         ('buffer: "w"', 'buffer: "w2"')):
            self.assertIn(old, text)
            text = text.replace(old, new)
        with open(os.path.join(tmp, "gemm", "gemm.textproto"), "w") as f:
            f.write(text)
        r = subprocess.run([sys.executable, PEERS, "--dry-run", "--templates", tmp, "--ops", "gemm",
                            "--gemm-m", "16", "--gemm-proj", "o"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("'out': manifest dtype f16, bench bf16", r.stdout)
        self.assertIn("scratch 'counters': fill 'random' is not one KtuneRunner knows", r.stdout)
        self.assertIn("tensor map 'tm_w' is over 'w2', which the bench does not bind", r.stdout)

    def test_manifest_parse(self):
        bufs, tmaps, cost = peers_mod._manifest(TEMPLATES, "gemm")
        self.assertEqual(tmaps, {"tm_x": "x", "tm_w": "w", "tm_out": "out"})
        self.assertEqual(bufs["out"].resolved_dtype("f8e4m3"), "bf16")
        self.assertEqual(bufs["out"].resolved_dtype("bf16"), "bf16")
        self.assertEqual(bufs["scale_x"].resolved_dtype("f8e4m3"), "f32")
        self.assertEqual(bufs["counters"].role, "scratch")
        self.assertIn(bufs["counters"].fill, peers_mod.SCRATCH_FILLS)
        s = {"m": 77, "n": 6144, "k": 4096}
        for dtype in ("bf16", "f16", "f8e4m3", "f8e5m2"):
            e = peers_mod.DTYPE_BYTES[dtype]
            self.assertEqual(peers_mod.eval_expr(cost, s, e), peers_mod.OPS["gemm"].nbytes(s, e))


class GemmOpTest(unittest.TestCase):
    def setUp(self):
        self.p = peers_mod
        self.op = self.p.OPS["gemm"]

    def test_shapes_and_labels(self):
        op = self.op
        shapes = op.shapes(self.p.GEMM_M)
        self.assertEqual(len(shapes), 55)
        self.assertEqual(shapes[0], {"m": 1, "n": 6144, "k": 4096})
        self.assertEqual({(s["n"], s["k"]) for s in shapes},
                         {(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
                          (128256, 4096)})
        self.assertEqual(op.label({"m": 16, "n": 6144, "k": 4096}), "qkv m=16")
        self.assertEqual(op.label({"m": 3, "n": 100, "k": 64}), "100x64 m=3")
        self.assertTrue(op.is_decode({"m": 256, "n": 1, "k": 1}))
        self.assertFalse(op.is_decode({"m": 512, "n": 1, "k": 1}))
        self.assertFalse(op.is_prefill({"m": 16384, "n": 4096, "k": 4096}))
        self.assertEqual(op.flops({"m": 2, "n": 3, "k": 5}), 60)

    def test_tolerance_is_the_manifests(self):
        s = {"m": 16, "n": 4096, "k": 4096}
        self.assertEqual(self.op.tolerance(s, "bf16"), (1e-4 * 64, 1.6e-2))
        self.assertEqual(self.op.tolerance(s, "f8e4m3"), (1.2e-3 * 64, 1.6e-2))
        self.assertEqual(self.p.OPS["rmsnorm"].tolerance(s, "bf16"), (1e-5, 1.6e-2))

    def test_goals(self):
        cases = [  # (dtype, proj, m, ktune us, cublas us, wanted goal)
            ("bf16", "qkv", 16, 10.0, 13.0, "ok"),
            ("bf16", "qkv", 16, 10.0, 12.0, "MISS (1.20x < 1.25x vs cublas)"),
            ("bf16", "o", 128, 10.0, 12.5, "ok"),
            ("bf16", "gate_up", 16, 10.0, 10.0, "ok"),          # 1.0x off qkv and o
            ("bf16", "qkv", 256, 10.0, 10.5, "ok"),             # 1.0x above m 128
            ("bf16", "lm_head", 1024, 10.0, 9.0, "MISS (+11.1% vs cublas)"),
            ("bf16", "down", 4096, 100.0, 97.5, "ok"),          # 0.97x
            ("bf16", "down", 16384, 100.0, 96.0, "MISS (0.96x < 0.97x vs cublas)"),
            ("f8e4m3", "qkv", 16, 10.0, 9.9, "MISS (+1.0% vs cublas)"),  # 1.0x at m <= 256
            ("f8e4m3", "qkv", 256, 10.0, 10.0, "ok"),
            ("f8e4m3", "o", 512, 100.0, 95.5, "ok"),            # 0.95x above
            ("f8e4m3", "o", 4096, 100.0, 94.0, "MISS (0.94x < 0.95x vs cublas)"),
        ]
        for dtype, proj, m, kt, cb, want in cases:
            n, k = self.p.GEMM_PROJS[proj]
            rec = self.p.new_record(self.op, {"m": m, "n": n, "k": k}, dtype)
            rec["ktune"] = {"us": kt, "check": {"ok": True}}
            rec["peers"] = {"cublas": {"us": cb, "check": {"ok": True}}}
            self.p.finish_record(rec, self.op, 4000.0)
            self.assertEqual(rec["goals"], {"peer": want}, (dtype, proj, m))
            self.assertAlmostEqual(rec["speedup"], cb / kt)
            self.assertAlmostEqual(rec["ktune"]["tflops"], 2 * m * n * k / (kt * 1e-6) / 1e12)
            self.assertNotIn("ceil", rec["goals"])

    def test_goal_without_a_correct_cublas_fails(self):
        rec = self.p.new_record(self.op, {"m": 16, "n": 4096, "k": 4096}, "bf16")
        rec["ktune"] = {"us": 10.0, "check": {"ok": True}}
        rec["peers"] = {"cublas": {"us": 5.0, "check": {"ok": False}}}
        self.p.finish_record(rec, self.op, 4000.0)
        self.assertEqual(rec["goals"], {"peer": "FAIL (no correct peer time for the 1.25x goal)"})
        # Ops other than gemm keep their rule: no correct peer, no peer goal.
        rms = self.p.OPS["rmsnorm"]
        rec = self.p.new_record(rms, {"tokens": 16, "hidden": 4096}, "bf16")
        rec["ktune"] = {"us": 10.0, "check": {"ok": True}}
        self.p.finish_record(rec, rms, 4000.0)
        self.assertEqual(rec["goals"], {})

    def test_tables_per_dtype_with_tflops(self):
        p, op = self.p, self.op
        records = []
        for dtype in ("bf16", "f8e4m3"):
            rec = p.new_record(op, {"m": 4096, "n": 4096, "k": 4096}, dtype)
            rec["ktune"] = {"us": 200.0, "check": {"ok": True}}
            rec["peers"] = {"cublas": {"us": 190.0, "check": {"ok": True}}}
            rec["timed"] = "eager call"
            p.finish_record(rec, op, 4000.0)
            records.append(rec)
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        p.write_outputs(tmp, {"dtype": "bf16", "peers": list(p.ALL_PEERS)}, records, [op])
        with open(os.path.join(tmp, "peers.md")) as f:
            text = f.read()
        self.assertIn("## gemm (bf16)", text)
        self.assertIn("## gemm (f8e4m3)", text)
        self.assertIn("cublas = cuBLAS (torch._scaled_mm", text)
        self.assertIn("| shape | ktune us | TFLOP/s | GB/s | % ceil | cublas us | cublas TFLOP/s |",
                      text)
        self.assertIn("| o m=4096 | 200.00 | 687 |", text)  # 2 * 4096^3 / 200 us
        self.assertIn("peer MISS (0.95x < 0.97x vs cublas)", text)
        self.assertIn("peer ok", text)  # fp8: 0.95x
        with open(os.path.join(tmp, "peers.json")) as f:
            data = json.load(f)
        self.assertEqual([r["dtype"] for r in data["results"]], ["bf16", "f8e4m3"])

    def test_dtype_maps(self):
        self.assertEqual(self.p.DTYPE_BYTES["f8e4m3"], 1)
        self.assertEqual(self.p.DTYPE_BYTES["f8e5m2"], 1)
        self.assertTrue(self.p.is_fp8("f8e5m2"))
        self.assertFalse(self.p.is_fp8("bf16"))
        self.assertEqual(self.op.out_dtype("f8e4m3"), "bf16")
        self.assertEqual(self.op.out_dtype("f16"), "f16")
        if not HAVE_TORCH:
            self.skipTest("torch not importable here")
        torch = self.p.torch
        self.assertIs(self.p.torch_dtype("f8e4m3"), torch.float8_e4m3fn)
        self.assertIs(self.p.torch_dtype("f8e5m2"), torch.float8_e5m2)
        self.assertTrue(self.p.is_fp8(torch.float8_e4m3fn))
        self.assertFalse(self.p.is_fp8(torch.bfloat16))


@unittest.skipUnless(HAVE_TORCH, "torch not importable here")
class GemmOnCpuTest(unittest.TestCase):
    """The op's math and KtuneRunner's binding with torch on the CPU."""

    def setUp(self):
        self.p = load_peers()  # its own module: DEVICE is patched
        self.p.DEVICE = "cpu"
        self.op = self.p.OPS["gemm"]
        self.torch = self.p.torch

    def inputs(self, s, dtype):
        gen = self.torch.Generator(device="cpu")
        gen.manual_seed(1)
        return self.op.make_inputs(s, self.p.torch_dtype(dtype), gen)

    def test_bf16_eager_is_the_reference(self):
        s = {"m": 3, "n": 40, "k": 64}
        inp = self.inputs(s, "bf16")
        self.assertEqual(inp["x"].shape, (3, 64))
        self.assertEqual(inp["w"].dtype, self.torch.bfloat16)
        self.assertEqual(inp["scale_x"].tolist(), [1.0])  # bf16: a pure F.linear peer
        ref = self.op.reference(inp, {})
        got = self.op.eager(inp, {})
        self.assertEqual(got["out"].dtype, self.torch.bfloat16)
        check = self.p.compare(got, ref, *self.op.tolerance(s, "bf16"))
        self.assertTrue(check["ok"], check)
        # A kernel that ignored the scales fails the check.
        inp["scale_w"].fill_(1.5)
        self.assertFalse(self.p.compare(got, self.op.reference(inp, {}),
                                        *self.op.tolerance(s, "bf16"))["ok"])

    def test_fp8_inputs_and_reference(self):
        s = {"m": 16, "n": 32, "k": 64}
        inp = self.inputs(s, "f8e4m3")
        self.assertEqual(inp["x"].dtype, self.torch.float8_e4m3fn)
        sx, sw = inp["scale_x"].item(), inp["scale_w"].item()
        self.assertTrue(0.5 <= sx < 2 and 0.5 <= sw < 2 and sx != 1.0)
        ref = self.op.reference(inp, {})["out"]
        want = (inp["x"].float() @ inp["w"].float().t()) * sx * sw
        self.assertTrue(self.torch.allclose(ref, want, rtol=1e-6, atol=1e-5))
        try:
            got = self.op.eager(inp, {})
        except (RuntimeError, NotImplementedError) as e:  # _scaled_mm is CUDA-only in places
            self.skipTest(f"torch._scaled_mm on the CPU: {e}")
        self.assertEqual(got["out"].dtype, self.torch.bfloat16)
        check = self.p.compare(got, {"out": ref}, *self.op.tolerance(s, "f8e4m3"))
        self.assertTrue(check["ok"], check)

    def test_runner_skips_tensor_maps_and_zeroes_zero_once_scratch_once(self):
        p, torch = self.p, self.torch
        s = {"m": 2, "n": 8, "k": 16}
        inp = self.inputs(s, "bf16")
        A = types.SimpleNamespace

        def buf(name, dtype, count, role, fill=""):
            return A(name=name, is_buffer=True, dtype=dtype, count=count, role=role,
                     scratch_fill=fill, scalar_type="")
        args = [A(name="tm_x", is_buffer=False, tensor_map=A(buffer="x"), scalar_type=""),
                A(name="tm_w", is_buffer=False, scalar_type="tensor_map"),
                buf("x", "bf16", 32, "input"), buf("w", "bf16", 128, "input"),
                buf("out", "bf16", 16, "output"),
                buf("scale_x", "f32", 1, "input"), buf("scale_w", "f32", 1, "input"),
                buf("partial", "f32", 64, "scratch"),
                buf("counters", "i32", 4096, "scratch", "zero_once"),
                buf("flags", "i32", 8, "scratch", "zero"),
                A(name="m", is_buffer=False, scalar_type="i32", int_value=2)]
        launches = []

        class Bound:
            def launch(self, stream):
                launches.append(stream)

        class Kernel:
            artifact = A(args=args)
            driver = A(CUstream=lambda h: ("CUstream", h))

            def bind(self, pointers):
                self.pointers = pointers
                return Bound()
        kernel = Kernel()
        runner = p.KtuneRunner(kernel, inp)
        self.assertEqual(set(kernel.pointers), {"x", "w", "out", "scale_x", "scale_w",
                                                "partial", "counters", "flags"})
        self.assertEqual(kernel.pointers["x"], inp["x"].data_ptr())
        counters = next(t for t in runner.keep if t.data_ptr() == kernel.pointers["counters"])
        flags = next(t for t in runner.keep if t.data_ptr() == kernel.pointers["flags"])
        self.assertEqual(int(counters.abs().sum()), 0)
        self.assertEqual([t.data_ptr() for t in runner.zeroed], [flags.data_ptr()])
        partial = next(t for t in runner.keep if t.data_ptr() == kernel.pointers["partial"])
        self.assertTrue(bool(partial.isnan().all()))
        # Each run zeroes the ZERO scratch only, and launches on the stream current then.
        counters.fill_(7)
        flags.fill_(7)
        current = [A(cuda_stream=11)]
        with unittest.mock.patch.object(torch.cuda, "current_stream", lambda: current[0]):
            runner.run()
            current[0] = A(cuda_stream=22)  # e.g. inside a graph capture
            runner.run()
        self.assertEqual(launches, [("CUstream", 11), ("CUstream", 22)])
        self.assertEqual(int(flags.abs().sum()), 0)
        self.assertEqual(int(counters.sum()), 7 * 4096)
        self.assertEqual(set(runner.outputs()), {"out"})


if __name__ == "__main__":
    unittest.main()
