"""bench/nvrtc_program.py against a fake cuda.bindings.nvrtc: options go in as bytes, a
failed compile reads the log and raises naming the error, a good one returns quietly."""

import unittest

from bench_files import load_bench

nvrtc_program = load_bench("nvrtc_program.py", "nvrtc_program_under_test")


class FakeNvrtc:
    class nvrtcResult:  # noqa: N801 - the binding's own name
        NVRTC_SUCCESS = "NVRTC_SUCCESS"
        NVRTC_ERROR_COMPILATION = "NVRTC_ERROR_COMPILATION"

    def __init__(self, result):
        self.result, self.options, self.log_read = result, None, False

    def nvrtcCompileProgram(self, prog, n, options):  # noqa: N802
        self.options = (prog, n, options)
        return (self.result,)

    def nvrtcGetProgramLogSize(self, prog):  # noqa: N802
        return None, 4

    def nvrtcGetProgramLog(self, prog, buf):  # noqa: N802
        # The binding writes into buf's bytes from C; a fake cannot, so it only says it ran.
        self.log_read = len(buf) == 4
        return (None,)


class CompileProgramTest(unittest.TestCase):
    def test_options_go_in_as_bytes(self):
        fake = FakeNvrtc(FakeNvrtc.nvrtcResult.NVRTC_SUCCESS)
        nvrtc_program.compile_program(fake, "prog", ["--gpu-architecture=sm_90", "-std=c++17"])
        self.assertFalse(fake.log_read)
        self.assertEqual(fake.options, ("prog", 2, [b"--gpu-architecture=sm_90", b"-std=c++17"]))

    def test_a_failed_compile_raises_with_the_error(self):
        fake = FakeNvrtc(FakeNvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION)
        with self.assertRaises(RuntimeError) as e:
            nvrtc_program.compile_program(fake, "prog", [])
        self.assertIn("NVRTC_ERROR_COMPILATION", str(e.exception))
        self.assertTrue(fake.log_read)


if __name__ == "__main__":
    unittest.main()
