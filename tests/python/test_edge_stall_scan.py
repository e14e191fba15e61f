"""bench/edge_stall_scan.py's SASS check on disassembly text shaped as cuobjdump prints it
(CI has no cuobjdump), and its flags."""

import contextlib
import io
import os
import shutil
import tempfile
import unittest

from bench_files import load_bench

scan = load_bench("edge_stall_scan.py", "edge_stall_scan_under_test")


def sass(*lines):
    """cuobjdump -sass lines for these instruction texts, with addresses and encodings."""
    body = [f"        /*{16 * i:04x}*/                   {text} ;   /* 0x000000060c0c7981 */"
            for i, text in enumerate(lines)]
    return "\n".join(["\tcode for sm_90", "\t\tFunction : k", "\t.headerflags\t@\"EF_CUDA_SM90\""]
                     + body)


class EdgeStallScanTest(unittest.TestCase):
    def test_a_converted_edge_load_before_the_vector_loads_is_flagged(self):
        code = sass("@P0 LDG.E.U16 R10, desc[UR4][R10.64]",
                    "IMAD R15, R2, 0x80, R15",
                    "@P0 IMAD.U32 R2, R10, 0x10000, RZ",
                    "LDG.E.128.CONSTANT R8, desc[UR4][R8.64]",
                    "STG.E.U16 desc[UR4][R2.64], R2")
        found = scan.stalls(code)
        self.assertEqual(found, [("@P0 LDG.E.U16 R10, desc[UR4][R10.64]",
                                  "@P0 IMAD.U32 R2, R10, 0x10000, RZ")])

    def test_code_that_issues_its_vector_loads_first_passes(self):
        cases = {
            "a value read only after the first vector load": (
                "@P1 LDG.E.U16.CONSTANT R56, desc[UR6][R64.64]",
                "LDG.E.128 R28, desc[UR6][R54.64]",
                "IMAD.U32 R4, R56, 0x10000, RZ"),
            # R10 is the IMAD's destination, not a register it reads; the FADD then reads
            # the IMAD's R10, not the load's.
            "a register written again": (
                "LDG.E R10, desc[UR4][R10.64]",
                "IMAD.MOV.U32 R10, RZ, RZ, RZ",
                "FADD R3, R10, R10",
                "LDG.E.64 R12, desc[UR4][R12.64]"),
            # R1 is loaded; R10 and R12 are other registers.
            "register names matched whole": (
                "LDG.E.U16 R1, desc[UR4][R2.64]",
                "IADD3 R4, R10, R12, RZ",
                "LDG.E.128 R8, desc[UR4][R8.64]"),
            "a vector load is no edge load": (
                "LDG.E.128 R8, desc[UR4][R8.64]",
                "FADD R0, R8, R9"),
            "no vector load to hold back": (
                "LDG.E.U16 R8, desc[UR4][R8.64]",
                "IMAD.U32 R2, R8, 0x10000, RZ"),
        }
        for name, lines in cases.items():
            with self.subTest(name):
                self.assertEqual(scan.stalls(sass(*lines)), [])

    def test_a_store_of_the_loaded_value_is_a_read(self):
        code = sass("LDG.E.U16 R7, desc[UR4][R2.64]",
                    "STG.E.U16 desc[UR4][R4.64], R7",
                    "LDG.E.128 R8, desc[UR4][R8.64]")
        self.assertEqual(len(scan.stalls(code)), 1)

    def test_bad_flags_name_themselves(self):
        for argv, flag in ((["rmsnorm", "--dtype", "bf16", "--shape", "tokens=1,hidden=3",
                             "--ktune", "/nonexistent/ktune"], "--ktune:"),
                           (["rmsnorm", "--shape", "tokens=1,hidden=3"], "--dtype")):
            err = io.StringIO()
            with self.assertRaises(SystemExit) as e, contextlib.redirect_stderr(err):
                scan.main(argv)
            self.assertEqual(e.exception.code, 2)
            self.assertIn(flag, err.getvalue())

    def test_a_space_ktune_refuses_is_reported_not_raised(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "ktune")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\necho \"unknown template 'nosuch'\" >&2\nexit 2\n")
            os.chmod(fake, 0o755)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                rc = scan.main(["nosuch", "--dtype", "bf16", "--shape", "n=1", "--ktune", fake,
                                "--cuobjdump", shutil.which("true")])
        self.assertEqual(rc, 2)
        self.assertIn("unknown template 'nosuch'", err.getvalue())


if __name__ == "__main__":
    unittest.main()
