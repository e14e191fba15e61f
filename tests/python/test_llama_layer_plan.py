"""bench/llama_layer.py without a GPU or torch: --dry-run lists the keys the Llama-3-8B layer
(examples/llama_decoder_layer.py) asks ktune for at every step and checks each against the
shipped manifests, so a manifest change that would break the GPU-host bench fails here
first; bad flags exit 2 naming the flag; the goals and tables come out of made-up records
(synthetic times, no measurement)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from bench_files import TEMPLATES, bench_path, load_bench

BENCH = bench_path("llama_layer.py")
bench = load_bench("llama_layer.py", "llama_layer_under_test")


def dry_run(*args, templates=TEMPLATES):
    return subprocess.run([sys.executable, BENCH, "--dry-run", "--templates", templates, *args],
                          capture_output=True, text=True, timeout=60)


def step_lines(stdout, step):
    """The key lines listed under `step` ("decode b=1", "prefill 512")."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(step + " ("))
    out = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        out.append(" ".join(line.split()))
    return out


class DryRunTest(unittest.TestCase):
    def test_every_key_fits_its_manifest(self):
        r = dry_run()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("MISMATCH", r.stdout)
        # 8 keys a step, 5 steps, all distinct.
        self.assertIn("40 distinct keys to prefetch; every key fits its manifest", r.stdout)

    def test_decode_batch_1_keys(self):
        r = dry_run("--batches", "1", "--prefill", "512")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("decode b=1 (tokens 1, kv_len 1024; timed as CUDA graph replay)", r.stdout)
        self.assertEqual(step_lines(r.stdout, "decode b=1"), [
            "input_norm rmsnorm bf16 tokens=1 hidden=4096",
            "qkv_proj gemm bf16 m=1 n=6144 k=4096",
            "rope rope bf16 tokens=1 heads=32 kv_heads=8 head_dim=128 interleaved=0",
            "o_proj gemm bf16 m=1 n=4096 k=4096",
            "post_norm add_rmsnorm bf16 tokens=1 hidden=4096",
            "gate_up_proj gemm bf16 m=1 n=28672 k=4096",
            "silu_and_mul silu_and_mul bf16 tokens=1 inter=14336",
            "down_proj gemm bf16 m=1 n=4096 k=14336",
        ])

    def test_batch_32_and_prefill_keys(self):
        r = dry_run()
        self.assertIn("qkv_proj gemm bf16 m=32 n=6144 k=4096", step_lines(r.stdout, "decode b=32"))
        self.assertIn("prefill 4096 (tokens 4096, causal; timed as eager)", r.stdout)
        p512 = step_lines(r.stdout, "prefill 512")
        self.assertIn("input_norm rmsnorm bf16 tokens=512 hidden=4096", p512)
        self.assertIn("down_proj gemm bf16 m=512 n=4096 k=14336", p512)
        self.assertIn("rope rope_qkv bf16 tokens=4096 heads=32 kv_heads=8 head_dim=128 "
                      "interleaved=0", step_lines(r.stdout, "prefill 4096"))

    def test_flags_pick_the_steps(self):
        r = dry_run("--batches", "4", "--prefill", "128", "--kv-len", "2048")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("decode b=4 (tokens 4, kv_len 2048;", r.stdout)
        self.assertNotIn("decode b=1 ", r.stdout)
        self.assertIn("prefill 128 ", r.stdout)
        self.assertIn("16 distinct keys", r.stdout)

    def test_a_key_outside_the_manifest_is_a_mismatch(self):
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(TEMPLATES, os.path.join(tmp, "t"))
            path = os.path.join(tmp, "t", "rmsnorm", "rmsnorm.textproto")
            with open(path) as f:
                text = f.read()
            text, n = re.subn(r'(name: "hidden"[^}]*max: )65536', r"\g<1>2048", text)
            self.assertEqual(n, 1)
            with open(path, "w") as f:
                f.write(text)
            shutil.rmtree(os.path.join(tmp, "t", "silu_and_mul"))
            r = dry_run("--batches", "1", "--prefill", "512", templates=os.path.join(tmp, "t"))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("input_norm rmsnorm bf16 tokens=1 hidden=4096 MISMATCH: hidden=4096 "
                      "outside [1, 2048]", step_lines(r.stdout, "decode b=1"))
        self.assertIn("no manifest silu_and_mul/silu_and_mul.textproto", r.stdout)
        self.assertIn("4 keys do not fit", r.stdout)

    def test_check_key_names_missing_and_extra_dims(self):
        issues = bench.check_key(TEMPLATES, "gemm", "i32", {"m": 0, "n": 8, "rows": 3})
        self.assertIn("dtype i32 not among f16,bf16,f8e4m3,f8e5m2,f32", issues)
        self.assertIn("dim 'k' missing", issues)
        self.assertIn("'rows' is no dim of gemm", issues)
        self.assertIn("m=0 outside [1, 1048576]", issues)


class FlagsTest(unittest.TestCase):
    def assert_refused(self, args, flag, words):
        r = dry_run(*args)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(flag, r.stderr)
        self.assertIn(words, r.stderr)

    def test_bad_flags_exit_2_naming_the_flag(self):
        self.assert_refused(("--batches", "0"), "--batches", "positive")
        self.assert_refused(("--batches", "1,x"), "--batches", "integers")
        self.assert_refused(("--prefill", "-512"), "--prefill", "")
        self.assert_refused(("--modes", "eager,fast"), "--modes", "fast not among")
        self.assert_refused(("--kv-len", "0"), "--kv-len", "positive")
        self.assert_refused(("--kv-len", "8192"), "--kv-len", "no RoPE position")
        self.assert_refused(("--prefill", "512,9000"), "--prefill", "past the RoPE table")
        self.assert_refused(("--tune-budget", "-1"), "--tune-budget", ">= 0")
        self.assert_refused(("--tune-timeout-s", "-5"), "--tune-timeout-s", ">= 0")
        self.assert_refused(("--breakdown", "eager,slow"), "--breakdown", "slow not among")
        self.assert_refused(("--frobnicate",), "--frobnicate", "unrecognized")


def record(step, kind, tokens, times, checks_ok=True):
    """A made-up step record: times {mode: us} (synthetic)."""
    check = {"ok": checks_ok, "bad": 0 if checks_ok else 3, "numel": 4096 * tokens,
             "max_abs_err": 0.01 if checks_ok else 0.5}
    modes = {m: {"us": us, "check": dict(check)} for m, us in times.items()}
    if kind == "decode":
        for r in modes.values():
            r["graph_check"] = dict(check)
    return {"step": step, "kind": kind, "tokens": tokens, "kv_len": 1024 if kind == "decode"
            else 0, "modes": modes, "breakdown": {}}


class GoalsTest(unittest.TestCase):
    MODES = ["eager", "compile", "ktune"]

    def test_goals_on_synthetic_times(self):
        records = [record("decode b=1", "decode", 1, {"eager": 30.0, "compile": 23.0,
                                                      "ktune": 20.0}),  # 1.15x: ok
                   record("decode b=8", "decode", 8, {"eager": 30.0, "compile": 20.0,
                                                      "ktune": 21.0}),  # 0.95x: MISS
                   record("prefill 512", "prefill", 512, {"eager": 30.0, "compile": 20.0,
                                                          "ktune": 20.0}, checks_ok=False)]
        goals = dict(bench.goals_of(records, self.MODES))
        self.assertEqual(goals["decode b=1: ktune >= 1.15x torch.compile"], "ok")
        self.assertEqual(goals["decode b=8: ktune >= 1.00x torch.compile"], "MISS (0.95x)")
        self.assertEqual(goals["prefill 512: ktune >= 1.00x torch.compile"], "ok")
        self.assertEqual(goals["decode b=8: ktune within tolerance of eager"], "ok")
        self.assertEqual(goals["prefill 512: ktune within tolerance of eager"],
                         "MISS (max |err| 0.5)")

    def test_a_failed_mode_misses_and_goals_need_both_modes(self):
        rec = record("decode b=1", "decode", 1, {"eager": 30.0, "compile": 23.0})
        rec["modes"]["ktune"] = {"error": "RuntimeError: boom"}
        goals = dict(bench.goals_of([rec], self.MODES))
        self.assertEqual(goals["decode b=1: ktune >= 1.15x torch.compile"], "MISS (no time)")
        self.assertEqual(goals["decode b=1: ktune within tolerance of eager"],
                         "MISS (RuntimeError: boom)")
        self.assertEqual(bench.goals_of([rec], ["eager", "compile"]), [])

    def test_outputs_written(self):
        records = [record("decode b=1", "decode", 1, {"eager": 30.0, "compile": 23.0,
                                                      "ktune": 20.0})]
        records[0]["breakdown"] = {"eager": {"input_norm": 3.0, "rope": "RuntimeError: x"},
                                   "ktune": {"input_norm": 2.0, "rope": 1.5}}
        with tempfile.TemporaryDirectory() as tmp:
            bench.write_outputs(tmp, {"device": "made up"}, records, self.MODES)
            with open(os.path.join(tmp, "llama_layer.md")) as f:
                md = f.read()
            with open(os.path.join(tmp, "llama_layer.json")) as f:
                js = json.load(f)
        self.assertIn("| decode b=1 | graph replay | 30.0 | 23.0 | 20.0 | 1.15x |", md)
        self.assertIn("| input_norm | 3.0 | 2.0 |", md)
        self.assertIn("| rope | RuntimeError: x | 1.5 |", md)
        self.assertIn("- decode b=1: ktune >= 1.15x torch.compile: ok", md)
        self.assertEqual(js["steps"][0]["modes"]["ktune"]["us"], 20.0)
        self.assertEqual(js["goals"]["decode b=1: ktune >= 1.15x torch.compile"], "ok")


if __name__ == "__main__":
    unittest.main()
