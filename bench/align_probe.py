"""What alignment costs a streaming kernel on this GPU, apart from any template's own code:
16-byte vector copies whose warps start on 128-byte lines or off them.

Every row template with an odd row length (EDGE 1) measured ~10 % below its aligned twin on
the H200 even where the edge code is a rounding error (softmax over 32002 f32 columns, 125 KB
rows): its body vectors start at the row's first 16-byte boundary, so each warp's 512 bytes
straddle five 128-byte lines instead of four, and two blocks write the sector where one row
ends and the next begins. This script separates those effects with copies that have no other
code:

  flat    one grid-stride copy of N bytes, source and destination each offset by 0, 16 or
          64 bytes from a 128-byte line (the offsets are per buffer, so a misaligned load and
          a misaligned store are timed apart);
  rows    ROWS rows of B bytes each (a block per row, as the row templates run): each copies
          its row's whole 16-byte vectors (the body; the few edge bytes are left alone), with
          the vectors dealt to threads from the body's start ("plain", the templates' way
          today) or from the 128-byte line below it ("line": slots before the body idle, so
          every warp access is line-aligned).

Times by bench/timing.py's Timer (CUDA events, L2 flushed by a read, GPU asleep before each
call); GB/s counts the bytes read and written once. Needs torch with CUDA and cuda-python.

    python3 bench/align_probe.py [--rows 4096] [--row-bytes 8192,8194,8196,128000,128008]
                                 [--flat-mb 512] [--json FILE]
"""

import argparse
import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the benches' shared modules
import timing  # noqa: E402
from nvrtc_program import compile_program  # noqa: E402

SOURCE = r"""
typedef unsigned long long u64;

extern "C" __global__ void flat_copy(const uint4* __restrict__ x, uint4* __restrict__ out,
                                     long long n) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    out[i] = x[i];
  }
}

// Row blockIdx.x of row_bytes bytes: its whole 16-byte vectors, thread t taking slots
// t, t + blockDim.x, ..., four loads in flight before their stores (as the row templates
// keep several); slot j is vector j - shift, shift = 0 (plain) or the body's vectors past
// the 128-byte line below it (line).
template <int LINE>
__device__ void RowCopy(const char* __restrict__ x, char* __restrict__ out, long long row_bytes) {
  constexpr int kU = 4;
  const long long start = (long long)blockIdx.x * row_bytes;
  const long long body = (start + 15) & ~15LL;
  const long long nvec = (start + row_bytes - body) / 16;
  if (nvec == 0) return;
  const int shift = LINE ? (int)((body & 127) >> 4) : 0;
  const uint4* __restrict__ src = reinterpret_cast<const uint4*>(x + body);
  uint4* __restrict__ dst = reinterpret_cast<uint4*>(out + body);
  for (long long j0 = threadIdx.x; j0 < nvec + shift; j0 += kU * blockDim.x) {
    uint4 v[kU];
    // Loads of slots outside the body read its nearest vector instead (never stored), so
    // all four issue before the first store waits on one.
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const long long i = j0 + u * blockDim.x - shift;
      v[u] = src[i < 0 ? 0 : i < nvec ? i : nvec - 1];
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const long long i = j0 + u * blockDim.x - shift;
      if (i >= 0 && i < nvec) dst[i] = v[u];
    }
  }
}

extern "C" __global__ void row_copy_plain(const char* __restrict__ x, char* __restrict__ out,
                                          long long row_bytes) {
  RowCopy<0>(x, out, row_bytes);
}

extern "C" __global__ void row_copy_line(const char* __restrict__ x, char* __restrict__ out,
                                         long long row_bytes) {
  RowCopy<1>(x, out, row_bytes);
}
"""

KERNELS = ("flat_copy", "row_copy_plain", "row_copy_line")


def compile_module(arch):
    """The kernels as a loaded module: {name: CUfunction}."""
    from cuda.bindings import driver, nvrtc
    _, prog = nvrtc.nvrtcCreateProgram(SOURCE.encode(), b"align_probe.cu", 0, [], [])
    try:
        compile_program(nvrtc, prog, [f"--gpu-architecture={arch}", "-std=c++17"])
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    err, module = driver.cuModuleLoadData(cubin)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuModuleLoadData: {err}")
    out = {}
    for name in KERNELS:
        err, f = driver.cuModuleGetFunction(module, name.encode())
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuModuleGetFunction {name}: {err}")
        out[name] = f
    return out


def launcher(torch, f, grid, block, x_ptr, out_ptr, count):
    """A no-argument call that enqueues f(x_ptr, out_ptr, count) on torch's current stream."""
    from cuda.bindings import driver
    params = ((x_ptr, out_ptr, count), (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong))

    def run():
        stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
        (err,) = driver.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, params, 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernel: {err}")
    return run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--row-bytes", default="8192,8194,8196,128000,128008")
    p.add_argument("--flat-mb", type=int, default=512)
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    try:
        row_bytes = [int(b) for b in args.row_bytes.split(",") if b]
    except ValueError:
        p.error(f"--row-bytes: comma-separated integers, not {args.row_bytes!r}")
    if args.rows < 1:
        p.error(f"--rows: at least 1, not {args.rows}")
    if args.flat_mb < 1:
        p.error(f"--flat-mb: at least 1, not {args.flat_mb}")
    if not row_bytes or min(row_bytes) < 16:
        p.error(f"--row-bytes: each at least 16 (one vector), not {args.row_bytes!r}")
    if args.block < 32 or args.block > 1024 or args.block % 32:
        p.error(f"--block: a multiple of 32 from 32 to 1024, not {args.block}")

    import torch
    # torch creates the device's primary context at its first allocation, not at init; the
    # driver calls below load into whatever context is current, so one must exist first.
    torch.zeros(1, device="cuda")
    dev = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(dev)
    funcs = compile_module(f"sm_{major}{minor}")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    timer = timing.Timer(10.0, 50.0)
    results = []

    def record(kind, label, bytes_moved, run):
        t = timer(run)
        gbs = bytes_moved / (t["us"] * 1e3)
        results.append({"kind": kind, "case": label, "us": t["us"], "GB/s": gbs})
        print(f"{kind:5} {label:34} {t['us']:10.2f} us {gbs:8.0f} GB/s", flush=True)

    # A slack of 128 bytes each side so every offset stays inside the allocation.
    flat = args.flat_mb << 20
    src = torch.empty(flat + 256, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty(flat + 256, dtype=torch.uint8, device="cuda")
    base_x, base_o = src.data_ptr(), dst.data_ptr()
    assert base_x % 256 == 0 and base_o % 256 == 0, "torch's allocations are 256-byte aligned"
    for xo, oo in ((0, 0), (16, 0), (0, 16), (16, 16), (64, 64)):
        n = flat // 16
        run = launcher(torch, funcs["flat_copy"], sms * 8, args.block, base_x + xo, base_o + oo,
                       n)
        record("flat", f"x +{xo} B, out +{oo} B", 2 * 16 * n, run)

    for b in row_bytes:
        total = args.rows * b
        x = (torch.arange(total + 256, dtype=torch.int32, device="cuda") % 251).to(torch.uint8)
        o = torch.zeros(total + 256, dtype=torch.uint8, device="cuda")
        for name in ("row_copy_plain", "row_copy_line"):
            run = launcher(torch, funcs[name], args.rows, args.block, x.data_ptr(), o.data_ptr(),
                           b)
            record("rows", f"{args.rows} x {b} B, {name[9:]}", 2 * total, run)
        # The copy must be right, or its time says nothing: the body of a few rows, checked.
        for r in sorted({0, 1, args.rows // 2, args.rows - 1}):
            start = r * b
            body = (start + 15) // 16 * 16
            end = body + (start + b - body) // 16 * 16
            if not torch.equal(o[body:end], x[body:end]):
                print(f"rows of {b} B: row {r}'s body was not copied", file=sys.stderr)
                return 1
        del x, o

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
