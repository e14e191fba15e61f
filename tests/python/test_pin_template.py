"""bench/pin_template.py: a templates folder copied with one template's params and knobs
pinned, checked through the built ktune (`ktune templates --configs`, no GPU) where
$KTUNE_BUILD_DIR has it, and its errors naming the bad pin."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from bench_files import TEMPLATES, bench_path, load_bench

pin_mod = load_bench("pin_template.py", "pin_template_under_test")
KTUNE = os.path.join(os.environ.get("KTUNE_BUILD_DIR", ""), "bin", "ktune")
LAYERNORM_PINS = [("BLOCK", 128), ("CACHE", 4), ("EDGE", 1), ("PREFETCH_W", 2), ("VEC", 8),
                  ("REUSE_W", 8), ("ROWS_PER_WARP", 0), ("PER_SHIFT", 1)]


class PinTemplateTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ktune-pin-")
        self.dst = os.path.join(self.tmp, "pinned")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def read(self, template, folder=None):
        with open(os.path.join(folder or self.dst, template, f"{template}.textproto")) as f:
            return f.read()

    def test_pins_params_and_knobs_and_leaves_the_source_alone(self):
        before = self.read("layernorm", TEMPLATES)
        pin_mod.pin(TEMPLATES, self.dst, "layernorm", LAYERNORM_PINS, [("min_blocks", 2)])
        text = self.read("layernorm")
        self.assertIn("values: [128]\n  default: 128", text)
        self.assertIn("min_blocks: [2]", text)
        self.assertNotIn("default_alternatives", text)
        self.assertIn("default_alternatives", before)  # else the drop tests nothing
        self.assertEqual(self.read("layernorm", TEMPLATES), before)
        # The other templates and the shared headers come along unchanged.
        self.assertTrue(os.path.exists(os.path.join(self.dst, "include", "ktune", "row.cuh")))
        self.assertEqual(self.read("rmsnorm"), self.read("rmsnorm", TEMPLATES))

    @unittest.skipUnless(os.access(KTUNE, os.X_OK), "no built ktune ($KTUNE_BUILD_DIR/bin)")
    def test_ktune_enumerates_only_the_pinned_config(self):
        pin_mod.pin(TEMPLATES, self.dst, "layernorm", LAYERNORM_PINS, [("min_blocks", 1)])
        r = subprocess.run([KTUNE, "templates", "--templates", self.dst, "--configs",
                            "layernorm", "--dtype", "bf16", "--shape",
                            "tokens=4096,hidden=4097,with_bias=1"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        configs = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        self.assertEqual(len(configs), 1, r.stdout)
        self.assertEqual(configs[0]["params"], dict(LAYERNORM_PINS))
        self.assertEqual(configs[0]["knobs"]["min_blocks"], 1)

    def test_bad_pins_are_named_and_write_nothing(self):
        cases = [(["VEC=3"], "param VEC: 3 is not one of its values"),
                 (["NOPE=1"], "param NOPE: the template has no such param"),
                 (["VEC"], "param 'VEC': expected NAME=INTEGER"),
                 (["--knob", "allow_fast_math=1"], "knob allow_fast_math: only"),
                 (["--knob", "min_blocks=x"], "knob 'min_blocks=x': expected NAME=INTEGER")]
        for args, want in cases:
            r = subprocess.run([sys.executable, bench_path("pin_template.py"), TEMPLATES,
                                self.dst, "layernorm", *args],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(want, r.stderr, args)
            self.assertFalse(os.path.exists(self.dst), args)
        r = subprocess.run([sys.executable, bench_path("pin_template.py"), TEMPLATES, self.dst,
                            "no_such_template", "VEC=1"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("template no_such_template: no manifest", r.stderr)


if __name__ == "__main__":
    unittest.main()
