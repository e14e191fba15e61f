"""NVRTC through cuda-python for the benches that compile a kernel of their own
(bench/align_probe.py, bench/kernel_tuner_compare.py): one compile whose failure raises with
NVRTC's log."""


def compile_program(nvrtc, prog, options):
    """Compiles the NVRTC program `prog` with `options` (strings); raises RuntimeError with
    the start of NVRTC's log when it fails. `nvrtc` is cuda.bindings.nvrtc."""
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC: {err}: {log.decode(errors='replace')[:3000]}")
