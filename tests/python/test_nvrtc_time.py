"""bench/cute_compile/nvrtc_time.py times NVRTC with ktune's options (no GPU, the toolkit's
libnvrtc): a kernel compiles to a cubin and its compiles are timed; a source that does not
compile exits 1 with NVRTC's log naming the error; a bad --repeat is refused (exit 2)."""

import os
import subprocess
import sys
import tempfile
import unittest

from bench_files import bench_path

TOOL = bench_path(os.path.join("cute_compile", "nvrtc_time.py"))
CUDA = os.environ.get("CUDA_HOME", "/usr/local/cuda")
HAVE_NVRTC = os.path.exists(os.path.join(CUDA, "lib64", "libnvrtc.so"))


def run(source, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".cu", delete=False) as f:
        f.write(source)
    try:
        return subprocess.run([sys.executable, TOOL, f.name, "--cuda", CUDA, *args],
                              capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(f.name)


KERNEL = """
template <int N>
__global__ void scale(float* p, float s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) p[i] *= s;
}
"""


@unittest.skipUnless(HAVE_NVRTC, f"no libnvrtc under {CUDA}")
class NvrtcTimeTest(unittest.TestCase):
    def test_a_kernel_is_compiled_and_timed(self):
        r = run(KERNEL, "--name-expr", "scale<256>", "--arch", "sm_90", "--repeat", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("compile 1: ", r.stdout)
        self.assertIn("compile 2: ", r.stdout)
        self.assertIn("median ", r.stdout)
        self.assertIn("registers", r.stdout)

    def test_a_source_that_does_not_compile_exits_1_with_the_log(self):
        r = run(KERNEL.replace("p[i] *= s;", "p[i] *= undeclared;"), "--name-expr",
                "scale<256>", "--arch", "sm_90")
        self.assertEqual(r.returncode, 1)
        self.assertIn("undeclared", r.stderr)
        self.assertIn("does not compile", r.stderr)

    def test_repeat_below_one_is_refused(self):
        r = run(KERNEL, "--name-expr", "scale<256>", "--repeat", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--repeat", r.stderr)


if __name__ == "__main__":
    unittest.main()
