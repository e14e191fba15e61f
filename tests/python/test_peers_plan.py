"""bench/peers.py plans without a GPU or torch (--dry-run): every op finds its template's
manifest and binds the buffers the manifest declares at every shape it would time, so a
manifest change that would break the GPU-host bench fails here first; a shape filter that
keeps nothing, a malformed one or a negative launch gap, is refused (exit 2)."""

import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(ROOT, "bench", "peers.py")
TEMPLATES = os.path.join(ROOT, "kernel_templates")


def peers(*args):
    return subprocess.run([sys.executable, PEERS, "--dry-run", "--templates", TEMPLATES, *args],
                          capture_output=True, text=True, timeout=60)


class PeersPlanTest(unittest.TestCase):
    def test_every_op_binds_its_manifest(self):
        r = peers()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for op in ("gemv", "rmsnorm", "add_rmsnorm", "layernorm", "softmax", "silu_and_mul",
                   "rope", "elementwise"):
            self.assertIn(f"{op} (template {op}, manifest found", r.stdout)
        self.assertIn("16384x128256", r.stdout)

    def test_only_keeps_the_matching_shapes(self):
        r = peers("--ops", "softmax", "--rows", "16384", "--only", "cols=128256")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("16384x128256", r.stdout)
        self.assertNotIn("16384x32000", r.stdout)

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


if __name__ == "__main__":
    unittest.main()
