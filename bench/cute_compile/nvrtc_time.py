"""Times NVRTC compiling one CUDA source to a cubin, as ktune's compiler does (the same
fixed options: -std=c++17 -minimal -Xptxas=-v, an include path per folder, the target),
through libnvrtc directly (ctypes), so a source that ktune's templates folder cannot hold
(it needs headers from elsewhere, e.g. CUTLASS's) is timed with ktune's flags.

    python3 nvrtc_time.py SOURCE --name-expr 'kernel<...>' [--include DIR]... [--arch sm_90a]
        [--define NAME=VALUE]... [--option OPT]... [--repeat N] [--no-minimal]
        [--pch-heap-mb N]

Prints each compile's wall time, the median, the cubin size and ptxas' register lines; exits
1 with NVRTC's log when the source does not compile. Needs only the CUDA toolkit's NVRTC
(no GPU)."""

import argparse
import ctypes
import statistics
import sys
import time


def load_nvrtc(path):
    lib = ctypes.CDLL(path)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def check(lib, result, call):
    if result != 0:
        raise RuntimeError(f"{call}: {lib.nvrtcGetErrorString(result).decode()}")


def compile_once(lib, source, name, options, name_exprs):
    prog = ctypes.c_void_p()
    check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source, name.encode(), 0, None, None),
          "nvrtcCreateProgram")
    try:
        for e in name_exprs:
            check(lib, lib.nvrtcAddNameExpression(prog, e.encode()), "nvrtcAddNameExpression")
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        start = time.perf_counter()
        result = lib.nvrtcCompileProgram(prog, len(options), opts)
        seconds = time.perf_counter() - start
        size = ctypes.c_size_t()
        check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(size.value)
        check(lib, lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        cubin = 0
        if result == 0:
            n = ctypes.c_size_t()
            check(lib, lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "nvrtcGetCUBINSize")
            cubin = n.value
        return result, seconds, log.value.decode(errors="replace"), cubin
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source")
    p.add_argument("--name-expr", action="append", default=[], required=True)
    p.add_argument("--include", action="append", default=[])
    p.add_argument("--define", action="append", default=[])
    p.add_argument("--option", action="append", default=[],
                   help="another NVRTC option, e.g. -default-device (CUTLASS needs it)")
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-minimal", action="store_true")
    p.add_argument("--pch-heap-mb", type=int, default=0,
                   help="nvrtcSetPCHHeapSize before compiling (with --option=--pch: CuTe's "
                        "headers need ~300 MB, above NVRTC's default heap)")
    p.add_argument("--cuda", default="/usr/local/cuda")
    p.add_argument("--nvrtc", default=None, help="libnvrtc path (default: CUDA's lib64)")
    a = p.parse_args(argv)
    if a.repeat < 1:
        p.error(f"--repeat: at least 1, not {a.repeat}")
    lib = load_nvrtc(a.nvrtc or f"{a.cuda}/lib64/libnvrtc.so")
    if a.pch_heap_mb:
        check(lib, lib.nvrtcSetPCHHeapSize(ctypes.c_size_t(a.pch_heap_mb << 20)),
              "nvrtcSetPCHHeapSize")
    with open(a.source, "rb") as f:
        source = f.read()
    options = ["-std=c++17", "-Xptxas=-v", f"--gpu-architecture={a.arch}"]
    if not a.no_minimal:
        options.append("-minimal")
    options += [f"--include-path={d}" for d in a.include] + [f"--include-path={a.cuda}/include"]
    options += [f"-D{d}" for d in a.define] + a.option
    times = []
    for i in range(a.repeat):
        result, seconds, log, cubin = compile_once(lib, source, a.source, options, a.name_expr)
        for line in log.splitlines():
            if "precompiled header" in line or "PCH" in line:
                print("  " + line.strip())
        if result != 0:
            print(log, file=sys.stderr)
            print(f"{a.source}: does not compile", file=sys.stderr)
            return 1
        times.append(seconds)
        print(f"compile {i + 1}: {seconds * 1e3:.0f} ms, cubin {cubin} bytes")
    for line in log.splitlines():
        if "registers" in line or "spill" in line or "C75" in line:
            print("  " + line.strip())
    print(f"median {statistics.median(times) * 1e3:.0f} ms over {len(times)} compiles")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
