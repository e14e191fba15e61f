"""bench/align_probe.py without a GPU: its kernels compile for sm_90 (nvcc from the CUDA
toolkit, as NVRTC compiles them on the GPU host) with every name the script looks up, and bad
flags stop it before torch is imported."""

import contextlib
import io
import os
import shutil
import subprocess
import tempfile
import unittest

from bench_files import load_bench

probe = load_bench("align_probe.py", "align_probe_under_test")
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


class AlignProbeTest(unittest.TestCase):
    @unittest.skipUnless(os.path.exists(NVCC), "no nvcc")
    def test_kernels_compile_for_sm90_with_the_names_looked_up(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "align_probe.cu")
            with open(src, "w") as f:
                f.write(probe.SOURCE)
            cubin = os.path.join(tmp, "align_probe.cubin")
            r = subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", "-cubin", "-o", cubin, src],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(cubin, "rb") as f:
                data = f.read()
        for name in probe.KERNELS:  # extern "C": the symbol is the name itself
            self.assertIn(name.encode() + b"\0", data, name)

    def test_bad_flags_name_themselves(self):
        for argv, flag in ((["--rows", "0"], "--rows:"), (["--row-bytes", "8"], "--row-bytes:"),
                           (["--row-bytes", "8x"], "--row-bytes:"),
                           (["--flat-mb", "-1"], "--flat-mb:"), (["--block", "48"], "--block:")):
            err = io.StringIO()
            with self.assertRaises(SystemExit) as e, contextlib.redirect_stderr(err):
                probe.main(argv)
            self.assertEqual(e.exception.code, 2, argv)
            self.assertIn(flag, err.getvalue(), argv)


if __name__ == "__main__":
    unittest.main()
