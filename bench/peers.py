#!/usr/bin/env python3
"""ktune's tuned kernels beside their peers, timed by one timer in one process (issue #6).

For each op and shape this script
  1. asks a running ktuned, through the Python client (client/python), to tune the op's
     template at that shape (Client.tune: `--budget N` candidates drawn at random, or with
     --budget 0 the service's guided search, or --strategy exhaustive) and takes the
     winner's artifact: cubin, launches, args;
  2. loads the cubin with cuda-python (sha256 checked again here), binds torch tensors to the
     artifact's buffers by the manifest's arg names (OUTPUT buffers allocated here and
     poisoned with NaN before the checked run; SCRATCH buffers allocated here, zeroed before
     *every* run when their fill is ZERO, inside the timed region since a caller pays for
     that too, zeroed once at allocation when it is ZERO_ONCE (the kernels leave it zeroed
     after every complete run: gemm's split-K counters), else poisoned once; args that are
     not buffers, scalars and tensor maps over a buffer, the client's LoadedKernel binds),
     and launches all its launches in order on torch's current stream, read at each launch;
  3. times the winner and its peers with the same timer (Timer, bench/timing.py: do_bench's method,
     CUDA events around each call with the L2 flushed before every rep, fixed warm-up and rep
     windows, median; the flush reads 256 MiB by default, --flush zero writes it as do_bench
     does), the peers being torch eager,
     torch.compile (default mode, dynamic=False, compiled once per shape and warmed up
     before timing), a Triton kernel autotuned over BLOCK x num_warps written below (rmsnorm,
     add_rmsnorm, layernorm, softmax), and cuBLAS through torch (gemv and 16-bit gemm:
     F.linear; fp8 gemm: torch._scaled_mm with per-tensor scales, bf16 out, its default
     accumulation, use_fast_accum off);
  4. checks every output (ktune's and every peer's) against torch in fp32 on the same inputs:
     |got - ref| <= atol + rtol * |ref| for every element (NaN fails), with one tolerance per
     op for all (the manifest's bf16 one, atol widened where a peer legitimately rounds an
     intermediate to bf16: layernorm, rope, elementwise; each op says why; gemm's per dtype
     and k, the manifest's: bf16 atol 1e-4 * sqrt(k), fp8 1.2e-3 * sqrt(k), rtol 1.6e-2); a
     mismatch is shown as FAIL in the table and never counts as a time;
  5. reports per shape: time (us, median), GB/s over the bytes the op must move (the
     template cost model's formula, written here per op and cross-checked against the
     artifact's own metrics), the fraction of the copy ceiling (a 1 GiB device-to-device
     copy timed by the same timer, bytes = 2 * size; ktune's stored ceiling from GetDevices
     is printed beside it), the best peer and ktune's speed-up over it, and the goals:
       ceil  at prefill shapes (rows >= 4096) ktune reaches >= 95 % of the copy ceiling;
       peer  at every shape ktune's time <= the best correct peer's;
       12us  gemv N=4096 K=4096 batch 1 under 12 us.
     gemm reports TFLOP/s (2 m n k / time) beside GB/s, has no ceil goal, and its peer goal
     is a ratio to cuBLAS, per key (issue 13; no correct cuBLAS time fails it):
       bf16  >= 1.25x at m <= 128 on qkv and o; >= 1.0x at every other m <= 1024; >= 0.97x
             above (the issue's m >= 4096);
       fp8   >= 1.0x torch._scaled_mm at m <= 256, >= 0.95x above.

The gemm op: out [m, n] = scale_x * scale_w * x [m, k] w [n, k]^T at Llama-3-8B's five
projections (n x k: qkv 6144x4096, o 4096x4096, gate_up 28672x4096, down 4096x14336,
lm_head 128256x4096) and m in 1, 8, 16, ..., 1024, 4096, 16384, labelled "qkv m=16", in bf16
and fp8 e4m3 (one table each; --gemm-dtypes); --quick: qkv and o at m 1, 16, 128, 4096;
--gemm-m and --gemm-proj cut the set (--rows does not apply). x and w are uniform in
[-1, 1); the scales are 1-element f32 buffers, 1.0 for bf16 (so the peer is F.linear alone)
and uniform [0.5, 2) for fp8. It tunes the template `gemm` (the Hopper wgmma + TMA path on
sm_90a, whose tensor maps over x, w and out the client builds); each key's space is ~100-700
candidates: --budget 0 (guided, ~20 % of them) takes 10-40 s a key on the H200.

What is timed how. Every call (ktune's launches, a peer's torch call) is timed by Timer: L2
flush, GPU sleep, start event, the call, end event. Decode keys (gemm m <= 256) are timed as
a server runs them, as CUDA-graph replays (--graph-decode, on by default; --no-graph-decode
times the eager calls): after the checked eager run, ktune's launches (the runner reads
torch's current stream at each launch, so they land on the capturing stream) and the peer's
call are each warmed up on a side stream and captured once into a torch.cuda.CUDAGraph; the
replay's output is checked again (inputs restored, outputs poisoned) and Timer times
graph.replay() with the flush and the gap outside the graph. Other keys time the eager
call.

Where it runs: the GPU host (torch, triton, cuda-python, grpcio), with ktuned running there
(deploy/gpu-host/run.sh, stage `peers`, starts one and runs this with PYTHONPATH=<bundle>/
python). `--dry-run` needs none of those: it lists the keys and, given the templates folder,
checks every op's tensor names, element counts and byte formula against the manifests (and,
where the op states them, as gemm does, the buffers' dtypes with the manifest's dtype_for;
the scratch fills the runner knows; that each tensor map is over a buffer the bench binds).

    python3 bench/peers.py --target unix:///path/ktuned.sock --out DIR [--ops gemv,rmsnorm]
        [--quick] [--rows 1,16,256,4096,16384] [--budget 32] [--peers eager,compile,triton,cublas]
        [--gemm-m 1,16,128] [--gemm-proj qkv,o] [--gemm-dtypes bf16,f8e4m3]
        [--no-graph-decode] [--warmup-ms 10 --rep-ms 50] [--deadline-s 480]
        [--dry-run [--templates DIR]]

Output: DIR/peers.md (a header with the device, versions and ceilings, then one table per
op, per dtype for gemm, with its notes: failures, ktune's params and its own timer's
result) and DIR/peers.json (every number), both rewritten after every key, so a run cut
short still leaves them.
Robustness: a missing template, a failed tune, a launch error or a mismatch is a cell in the
table, and the other ops and peers go on. Exit status: 0 when every goal passed, 1 when a
goal was missed or something failed, 2 for bad flags.

Time: each key costs its tune (seconds with a warm cubin cache), a torch.compile (seconds),
a Triton autotune (first N: one compile per config) and ~0.1-0.3 s per timing, so the full
set (60 keys besides gemm) takes longer than one 10-minute device call: split it with --ops,
or use --quick (16 keys), and --deadline-s to stop starting keys in time. gemm alone is 110
keys (55 shapes x 2 dtypes), each tune ~100-250 candidates (each an NVRTC compile on a cold
cubin cache, then a measurement): run it on its own, cut with --gemm-m, --gemm-proj,
--gemm-dtypes and --budget.

Timer notes. The events go around each call after its L2 flush and then a GPU sleep of
--launch-gap-us (200 by default), so the CPU cost of launching (several kernels for torch
eager, guards for torch.compile, Triton's launcher) is paid while the GPU is still busy and
the events see GPU time only. Without the gap (--launch-gap-us 0, as do_bench) a launch path
slower than the flush's ~65 us is timed too: torch.compile read 47-65 us and Triton 3.8-18
us, run to run, for the same 16x4096 rmsnorm. The header gives the timer's floor (the time
of the smallest launch), which every time includes.
do_bench's own flush (zeroing 256 MiB) leaves the L2 dirty, and a kernel that streams a
large operand then also pays for writing those lines back; the read flush leaves it clean,
as a preceding read-mostly kernel would (Timer's docstring; run both with --flush to see
the difference). ktune's own timer (the tuned time in the notes) times back-to-back runs
with a read flush and does not include zeroing scratch; the numbers here are the ones to
compare.
"""

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import time
import traceback

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --dry-run works without torch
    torch = None
    F = None

try:
    import triton
    import triton.language as tl
except ImportError:  # --dry-run works without triton; the kernels below stay plain functions
    triton = None

    class tl:  # noqa: N801 - stands in for triton.language so the annotations below evaluate
        constexpr = int

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the benches' shared modules
from manifest_text import blocks as _blocks  # noqa: E402
from manifest_text import DTYPE_BYTES  # noqa: E402
from manifest_text import compile_expr as _compile_expr  # noqa: E402
from timing import Timer, capture_graph  # noqa: E402

PREFILL_ROWS = 4096           # rows at or above this are "prefill" for the ceiling goal
CEIL_GOAL = 0.95              # fraction of the copy ceiling at prefill shapes
GEMV_GOAL_US = 12.0           # gemv N=4096 K=4096 batch 1
DEFAULT_ROWS = (1, 16, 256, 4096, 16384)
QUICK_ROWS = (1, 4096)
# --sizes odd|both: each row length (hidden, cols, inter, n) plus these. +1 is odd and +2 even
# but no multiple of 4, so every row after the first starts mid-vector for every dtype (the
# templates' edge paths).
ODD_OFFSETS = (1, 2)
ODD_GOAL = 0.90               # an odd length's GB/s over its aligned neighbour's (same rows)
# gemm: Llama-3-8B's projections (n x k, nn.Linear's out x in features) at these m.
GEMM_PROJS = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
              "down": (4096, 14336), "lm_head": (128256, 4096)}
GEMM_M = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)
QUICK_GEMM_M = (1, 16, 128, 4096)
QUICK_GEMM_PROJS = ("qkv", "o")
GEMM_DTYPES = ("bf16", "f8e4m3")              # --gemm-dtypes' default
GEMM_ALL_DTYPES = ("bf16", "f16", "f8e4m3", "f8e5m2", "f32")  # the manifest's
GRAPH_DECODE_M = 256          # gemm keys with m <= this are decode steps: CUDA-graph replays
DEVICE = "cuda"               # where the tensors live (a CPU test of the op math sets "cpu")
ALL_PEERS = ("eager", "compile", "triton", "cublas")
PEER_TITLES = {"eager": "torch eager", "compile": "torch.compile", "triton": "Triton autotuned",
               "cublas": "cuBLAS (F.linear)"}


def torch_dtype(name):
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
            "i32": torch.int32, "i64": torch.int64, "f8e4m3": torch.float8_e4m3fn,
            "f8e5m2": torch.float8_e5m2}[name]


def uniform(gen, shape, lo, hi, dtype):
    """Uniform [lo, hi) data of `dtype` on the GPU, from `gen` (never zeros: a kernel that
    does nothing must fail the check)."""
    t = torch.rand(shape, generator=gen, device=DEVICE, dtype=torch.float32)
    return t.mul_(hi - lo).add_(lo).to(dtype)


# ---- Ops ---------------------------------------------------------------------------------
#
# An op knows its template's shape dims, the tensors it binds by the manifest's arg names
# (`buffers`: inputs and in-place buffers with their fill; `outputs`), its fp32 reference,
# its torch eager form (also what torch.compile compiles), optional Triton and cuBLAS peers,
# and the bytes it must move. Scalars the math needs (eps, alpha, ...) come from the
# artifact when there is one, else from `scalars` (the manifests' values).

class Op:
    name = ""
    template = ""
    scalars = {}
    row_dim = None  # the dim that is a row's length: --sizes varies it
    atol, rtol = 1e-5, 1.6e-2  # the manifests' bf16 tolerance: about two bf16 ulps
    peers = ("eager", "compile")

    def shapes(self, rows):
        raise NotImplementedError

    def plan(self, args):
        """The shapes to run when the op picks them from its own flags (gemm); None: the
        rows (--rows, --quick) pick them through shapes() and quick_shapes()."""
        return None

    def key_dtypes(self, args):
        """The dtypes the op runs at: --dtype's unless the op has its own (gemm)."""
        return [args.dtype]

    def shape_for(self, s, dtype):
        """The shape at this dtype (softmax's out_bytes is the dtype's size)."""
        return s

    def tolerance(self, s, dtype):
        """(atol, rtol) of the check at this shape and dtype."""
        return self.atol, self.rtol

    def flops(self, s):
        """Floating-point operations of one run (TFLOP/s are reported where not None)."""
        return None

    # Without a correct peer time the `peer` goal is not set, or (True) fails.
    peer_goal_required = False

    def peer_goal(self, s, dtype):
        """The speed-up over the best correct peer the `peer` goal asks for at this key."""
        return 1.0

    def is_decode(self, s):
        """A decode step, timed as a CUDA-graph replay under --graph-decode (gemm m <= 256)."""
        return False

    def peer_title(self, peer, dtype):
        return PEER_TITLES[peer]

    def buffer_dtypes(self, s, dtype):
        """{tensor name: ktune dtype} for the dry run's check against the manifest; None:
        not checked (the runner checks every bound tensor's dtype on the GPU anyway)."""
        return None

    def label(self, s):
        return "x".join(str(v) for v in s.values())

    def rows(self, s):
        return s["tokens"]

    def variant(self, s):
        """The shape less its row count: --quick keeps the first variant's shapes."""
        return {k: v for k, v in s.items() if k not in ("tokens", "rows")}

    def is_prefill(self, s):
        return self.rows(s) >= PREFILL_ROWS

    def is_goal_shape(self, s):
        """The shape of the op's own time goal (gemv's 12 us), if it has one."""
        return False

    def quick_shapes(self, rows):
        """--quick's shapes where the first variant's are not the right ones; None: those."""
        return None

    def buffers(self, s):
        """{name: (torch shape, role "in"|"inout", (lo, hi) fill or None)} the op reads."""
        raise NotImplementedError

    def outputs(self, s):
        """{name: torch shape} the op writes (besides "inout" buffers)."""
        raise NotImplementedError

    def make_inputs(self, s, dtype, gen):
        """The `buffers`, uniform in their fill range (ops with other data override this)."""
        return {name: uniform(gen, shape, lo, hi, dtype)
                for name, (shape, _, (lo, hi)) in self.buffers(s).items()}

    def nbytes(self, s, esize):
        raise NotImplementedError

    def reference(self, inp, sc):
        """fp32 {output or inout name: tensor} from the inputs as given."""
        raise NotImplementedError

    def eager(self, inp, sc):
        raise NotImplementedError


def rms_norm(x, w, eps):
    """torch's rms_norm (2.4+), else the form it has (fp32 math, one rounding, times w)."""
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * w


def rms_reference(x, weight, eps):
    """rmsnorm in fp32 of a float tensor."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()


class RowNorm(Op):
    """What the norms share: [tokens, hidden] rows at hidden 4096 and 8192 (plus the dims in
    `extra_dims`), one output `out`, a Triton peer."""
    extra_dims = {}
    row_dim = "hidden"
    peers = ("eager", "compile", "triton")

    def shapes(self, rows):
        return [{"tokens": r, "hidden": h, **self.extra_dims} for h in (4096, 8192) for r in rows]

    def outputs(self, s):
        return {"out": (s["tokens"], s["hidden"])}


class RmsNorm(RowNorm):
    name = template = "rmsnorm"
    scalars = {"eps": 1e-6}

    def buffers(self, s):
        t, h = s["tokens"], s["hidden"]
        return {"x": ((t, h), "in", (-1, 1)), "weight": ((h,), "in", (0.5, 1.5))}

    def nbytes(self, s, e):
        return (2 * s["tokens"] * s["hidden"] + s["hidden"]) * e

    def reference(self, inp, sc):
        return {"out": rms_reference(inp["x"].float(), inp["weight"], sc["eps"])}

    def eager(self, inp, sc):
        return {"out": rms_norm(inp["x"], inp["weight"], sc["eps"])}

    def triton(self, inp, sc):
        return {"out": triton_rmsnorm(inp["x"], inp["weight"], sc["eps"])}


class AddRmsNorm(RowNorm):
    """residual += x (rounded to the dtype, in place); out = rmsnorm(residual) * weight."""
    name = template = "add_rmsnorm"
    scalars = {"eps": 1e-6}

    def buffers(self, s):
        t, h = s["tokens"], s["hidden"]
        return {"x": ((t, h), "in", (-1, 1)), "residual": ((t, h), "inout", (-1, 1)),
                "weight": ((h,), "in", (0.5, 1.5))}

    def nbytes(self, s, e):
        return (4 * s["tokens"] * s["hidden"] + s["hidden"]) * e

    def reference(self, inp, sc):
        r = (inp["x"].float() + inp["residual"].float()).to(inp["x"].dtype).float()
        return {"residual": r, "out": rms_reference(r, inp["weight"], sc["eps"])}

    def eager(self, inp, sc):
        r = inp["x"] + inp["residual"]
        return {"residual": r, "out": rms_norm(r, inp["weight"], sc["eps"])}

    def triton(self, inp, sc):
        out, r = triton_rmsnorm(inp["x"], inp["weight"], sc["eps"], residual=inp["residual"])
        return {"residual": r, "out": out}


class LayerNorm(RowNorm):
    """With bias (the manifest's dim with_bias = 1), eps 1e-5 as torch's default."""
    name = template = "layernorm"
    scalars = {"eps": 1e-5}
    # The bias can cancel y * w to ~0: a peer that rounds y * w to bf16 before adding b is
    # then off by up to ~2^-9 * |y * w| (|y * w| up to ~5 here) where ktune rounds once.
    atol = 1e-2
    extra_dims = {"with_bias": 1}

    def label(self, s):
        return f"{s['tokens']}x{s['hidden']}"

    def buffers(self, s):
        t, h = s["tokens"], s["hidden"]
        return {"x": ((t, h), "in", (-1, 1.5)), "weight": ((h,), "in", (0.5, 1.5)),
                "bias": ((h,), "in", (-0.5, 0.5))}

    def nbytes(self, s, e):
        return (2 * s["tokens"] * s["hidden"] + 2 * s["hidden"]) * e

    def reference(self, inp, sc):
        x = inp["x"].float()
        mean = x.mean(dim=-1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
        y = (x - mean) * torch.rsqrt(var + sc["eps"])
        return {"out": y * inp["weight"].float() + inp["bias"].float()}

    def eager(self, inp, sc):
        x = inp["x"]
        return {"out": F.layer_norm(x, (x.shape[-1],), inp["weight"], inp["bias"], sc["eps"])}

    def triton(self, inp, sc):
        return {"out": triton_layernorm(inp["x"], inp["weight"], inp["bias"], sc["eps"])}


class SiluAndMul(Op):
    name = template = "silu_and_mul"
    peers = ("eager", "compile")
    row_dim = "inter"

    def shapes(self, rows):
        return [{"tokens": r, "inter": 14336} for r in rows]

    def buffers(self, s):
        return {"x": ((s["tokens"], 2 * s["inter"]), "in", (-4, 4))}

    def outputs(self, s):
        return {"out": (s["tokens"], s["inter"])}

    def nbytes(self, s, e):
        return 3 * s["tokens"] * s["inter"] * e

    def reference(self, inp, sc):
        x = inp["x"].float()
        i = x.shape[-1] // 2
        g = x[:, :i]
        return {"out": g / (1 + torch.exp(-g)) * x[:, i:]}

    def eager(self, inp, sc):
        x = inp["x"]
        i = x.shape[-1] // 2
        return {"out": F.silu(x[:, :i]) * x[:, i:]}


class Gemv(Op):
    """y [batch, n] = x [batch, k] W^T, W [n, k] row-major: the decode-time projection. Its
    torch eager form is cuBLAS (F.linear), so the peers are cuBLAS and torch.compile."""
    name = template = "gemv"
    # The manifest's bf16 tolerance: float summation-order differences (split-K, cuBLAS's
    # own order) are absolute, ~sqrt(k) * 2^-24 * |partial sums|, where y cancels to ~0.
    atol = 2e-3
    peers = ("cublas", "compile")
    goal_shape = {"n": 4096, "k": 4096, "batch": 1}

    def shapes(self, rows):
        return [{"n": n, "k": k, "batch": b} for n, k, b in (
            (4096, 4096, 1), (14336, 4096, 1), (4096, 14336, 1), (128256, 4096, 1),
            (4096, 4096, 8))]

    def quick_shapes(self, rows):
        return [self.goal_shape, {"n": 128256, "k": 4096, "batch": 1}]

    def is_goal_shape(self, s):
        return all(s.get(k) == v for k, v in self.goal_shape.items())

    def label(self, s):
        return f"{s['n']}x{s['k']} b{s['batch']}"

    def is_prefill(self, s):
        return False

    def buffers(self, s):
        return {"w": ((s["n"], s["k"]), "in", (-1, 1)), "x": ((s["batch"], s["k"]), "in", (-1, 1))}

    def outputs(self, s):
        return {"y": (s["batch"], s["n"])}

    def nbytes(self, s, e):
        return (s["n"] * s["k"] + s["batch"] * s["k"] + s["batch"] * s["n"]) * e

    def reference(self, inp, sc):
        return {"y": inp["x"].float() @ inp["w"].float().t()}

    def eager(self, inp, sc):
        return {"y": F.linear(inp["x"], inp["w"])}

    cublas = eager  # F.linear on a batch of vectors is cuBLAS; torch adds nothing around it


def is_fp8(dtype):
    """A ktune dtype name ("f8e4m3", "f8e5m2") or a torch dtype of one byte."""
    return dtype in ("f8e4m3", "f8e5m2") if isinstance(dtype, str) else dtype.itemsize == 1


class Gemm(Op):
    """out [m, n] = scale_x * scale_w * x [m, k] w [n, k]^T (nn.Linear's layout), the
    template `gemm`, at Llama-3-8B's five projections (GEMM_PROJS) and m from 1 to 16384,
    in bf16 and in fp8 e4m3 (bf16 out) by default (--gemm-dtypes; its own flags --gemm-m and
    --gemm-proj pick the keys, --rows does not). scale_x and scale_w are 1-element f32
    buffers: 1.0 for 16-bit inputs, so that the peer is one cuBLAS call (F.linear has no
    scale; the check against the scaled reference would catch one that is not 1), and
    uniform [0.5, 2) for fp8, which torch._scaled_mm takes as its per-tensor scales. The
    only peer is cuBLAS through torch (torch.compile of one GEMM is that same call)."""
    name = template = "gemm"
    peers = ("cublas",)
    peer_goal_required = True
    # The manifest's tolerances: atol * sqrt(k) (float summation order on sums that cancel
    # to ~0 grows like sqrt(k); fp8's tensor cores keep fewer bits within a K slot), rtol
    # about two ulps of the output type (f32: float summation order, as 3xTF32 keeps
    # float-level products).
    ATOL_PER_SQRT_K = {"f16": 1e-4, "bf16": 1e-4, "f8e4m3": 1.2e-3, "f8e5m2": 1.2e-3,
                       "f32": 1e-5}
    RTOL = {"f16": 2e-3, "bf16": 1.6e-2, "f8e4m3": 1.6e-2, "f8e5m2": 1.6e-2, "f32": 1e-5}

    def shapes(self, rows):
        return [{"m": m, "n": n, "k": k} for n, k in GEMM_PROJS.values() for m in rows]

    def plan(self, args):
        ms = args.gemm_m or (QUICK_GEMM_M if args.quick else GEMM_M)
        projs = args.gemm_proj or (QUICK_GEMM_PROJS if args.quick else tuple(GEMM_PROJS))
        return [{"m": m, "n": GEMM_PROJS[p][0], "k": GEMM_PROJS[p][1]} for p in projs
                for m in ms]

    def key_dtypes(self, args):
        return list(args.gemm_dtypes)

    @staticmethod
    def proj(s):
        for name, (n, k) in GEMM_PROJS.items():
            if (s["n"], s["k"]) == (n, k):
                return name
        return f"{s['n']}x{s['k']}"

    def label(self, s):
        return f"{self.proj(s)} m={s['m']}"

    def rows(self, s):
        return s["m"]

    def variant(self, s):
        return {"n": s["n"], "k": s["k"]}

    def is_prefill(self, s):
        return False  # compute-bound at large m: no copy-ceiling goal, TFLOP/s instead

    def is_decode(self, s):
        return s["m"] <= GRAPH_DECODE_M

    @staticmethod
    def out_dtype(dtype):
        return "bf16" if is_fp8(dtype) else dtype

    def buffers(self, s):
        m, n, k = s["m"], s["n"], s["k"]
        return {"x": ((m, k), "in", (-1, 1)), "w": ((n, k), "in", (-1, 1)),
                "scale_x": ((1,), "in", (0.5, 2)), "scale_w": ((1,), "in", (0.5, 2))}

    def outputs(self, s):
        return {"out": (s["m"], s["n"])}

    def buffer_dtypes(self, s, dtype):
        return {"x": dtype, "w": dtype, "scale_x": "f32", "scale_w": "f32",
                "out": self.out_dtype(dtype)}

    def make_inputs(self, s, dtype, gen):
        m, n, k = s["m"], s["n"], s["k"]
        inp = {"x": uniform(gen, (m, k), -1, 1, dtype), "w": uniform(gen, (n, k), -1, 1, dtype)}
        for name in ("scale_x", "scale_w"):
            inp[name] = (uniform(gen, (1,), 0.5, 2, torch.float32) if is_fp8(dtype) else
                         torch.ones(1, dtype=torch.float32, device=DEVICE))
        return inp

    def nbytes(self, s, e):
        m, n, k = s["m"], s["n"], s["k"]
        return (m + n) * k * e + m * n * (2 if e == 1 else e)

    def flops(self, s):
        return 2 * s["m"] * s["n"] * s["k"]

    def tolerance(self, s, dtype):
        return self.ATOL_PER_SQRT_K[dtype] * math.sqrt(s["k"]), self.RTOL[dtype]

    def peer_goal(self, s, dtype):
        """Issue 13's goals against cuBLAS: bf16 >= 1.25x at m <= 128 on qkv and o, >= 1.0x
        at every m <= 1024, >= 0.97x above (the issue says m >= 4096; m between 1024 and 4096
        is none of its keys); fp8 >= 1.0x _scaled_mm at m <= 256, >= 0.95x above. f32 is
        none of the issue's: level with cuBLAS's fp32 GEMM everywhere."""
        m = s["m"]
        if dtype == "f32":
            return 1.0
        if is_fp8(dtype):
            return 1.0 if m <= 256 else 0.95
        if m <= 128 and self.proj(s) in ("qkv", "o"):
            return 1.25
        return 1.0 if m <= 1024 else 0.97

    def peer_title(self, peer, dtype):
        if peer == "cublas":
            return ("cuBLAS (torch._scaled_mm, per-tensor scales)" if is_fp8(dtype) else
                    "cuBLAS (F.linear)")
        return PEER_TITLES[peer]

    def reference(self, inp, sc):
        out = inp["x"].float() @ inp["w"].float().t()
        return {"out": out.mul_(inp["scale_x"] * inp["scale_w"])}  # in place: 8 GB at lm_head

    def eager(self, inp, sc):
        x, w = inp["x"], inp["w"]
        if is_fp8(x.dtype):
            # w.t() of the row-major [n, k] w is the column-major [k, n] operand _scaled_mm
            # wants; no copy. Older torch (< 2.5) returns (out, amax).
            out = torch._scaled_mm(x, w.t(), scale_a=inp["scale_x"], scale_b=inp["scale_w"],
                                   out_dtype=torch.bfloat16)
            return {"out": out[0] if isinstance(out, tuple) else out}
        return {"out": F.linear(x, w)}  # scales 1.0 (make_inputs): one cuBLAS call

    cublas = eager


class Softmax(Op):
    """Over the last dim, output in the input's dtype (the manifest's dim out_bytes = its
    size; `out_f32` is then a 1-element buffer the kernels never touch, not compared)."""
    name = template = "softmax"
    atol = 1e-12  # the manifest's bf16 atol: probabilities are tiny, never near 0 by cancelling
    peers = ("eager", "compile", "triton")
    row_dim = "cols"

    def shapes(self, rows):
        return [{"rows": r, "cols": c, "out_bytes": 2} for c in (32000, 128256) for r in rows]

    def shape_for(self, s, dtype):
        return {**s, "out_bytes": DTYPE_BYTES[dtype]}

    def label(self, s):
        return f"{s['rows']}x{s['cols']}"

    def rows(self, s):
        return s["rows"]

    def buffers(self, s):
        return {"x": ((s["rows"], s["cols"]), "in", (-8, 8))}

    def outputs(self, s):
        return {"out": (s["rows"], s["cols"]), "out_f32": (1,)}

    def nbytes(self, s, e):
        return s["rows"] * s["cols"] * (e + s["out_bytes"])

    def tolerance(self, s, dtype):
        # f16 is the one dtype whose range ends above the probabilities: under 2^-14 ~ 6.1e-5
        # its values are subnormal, spaced 2^-24 ~ 6e-8 apart, so any correct rounding is up
        # to 3e-8 off however small the probability (torch's own f16 softmax fails 1e-12).
        # The manifest's f16 atol, 1e-7, covers it.
        return (1e-7 if dtype == "f16" else self.atol), self.rtol

    def reference(self, inp, sc):
        return {"out": torch.softmax(inp["x"].float(), dim=-1)}

    def eager(self, inp, sc):
        return {"out": torch.softmax(inp["x"], dim=-1)}

    def triton(self, inp, sc):
        return {"out": triton_softmax(inp["x"])}


class Rope(Op):
    """Llama-3-8B: q 32 heads, k 8 heads, head_dim 128, neox pairing (the manifest's interleaved = 0),
    in place; cos_sin is a real f32 cache (theta 500000, 4096 positions), positions random."""
    name = template = "rope"
    # The eager peer rotates in bf16 as vLLM's forward_native does (cos and sin cast to the
    # dtype): x1 * c - x2 * s then has four roundings of terms <= 1 before the last, up to
    # ~4 * 2^-9 = 7.8e-3 off where it cancels (7.9e-3 seen on a CPU test).
    atol = 1.6e-2
    peers = ("eager", "compile")
    max_pos = 4096

    def shapes(self, rows):
        return [{"tokens": r, "heads": 32, "kv_heads": 8, "head_dim": 128, "interleaved": 0}
                for r in rows]

    def label(self, s):
        return f"{s['tokens']}x({s['heads']}+{s['kv_heads']})x{s['head_dim']}"

    def buffers(self, s):
        t, d = s["tokens"], s["head_dim"]
        return {"q": ((t, s["heads"], d), "inout", None),
                "k": ((t, s["kv_heads"], d), "inout", None),
                "cos_sin": ((self.max_pos, d), "in", None), "positions": ((t,), "in", None)}

    def make_inputs(self, s, dtype, gen):
        t, d = s["tokens"], s["head_dim"]
        inv_freq = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=DEVICE,
                                                      dtype=torch.float64) / d))
        angles = torch.arange(self.max_pos, device=DEVICE, dtype=torch.float64)[:, None] * inv_freq
        cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1).float().contiguous()
        positions = torch.randint(0, self.max_pos, (t,), generator=gen, device=DEVICE,
                                  dtype=torch.int32)
        return {"q": uniform(gen, (t, s["heads"], d), -1, 1, dtype),
                "k": uniform(gen, (t, s["kv_heads"], d), -1, 1, dtype),
                "cos_sin": cos_sin, "positions": positions}

    def outputs(self, s):
        return {}

    def nbytes(self, s, e):
        t, d = s["tokens"], s["head_dim"]
        return 2 * t * (s["heads"] + s["kv_heads"]) * d * e + 4 * t + min(t, self.max_pos) * d * 4

    @staticmethod
    def _cos_sin(inp, dtype):
        cs = inp["cos_sin"][inp["positions"].long()]  # [tokens, head_dim]
        cos, sin = cs.chunk(2, dim=-1)
        return cos.unsqueeze(1).to(dtype), sin.unsqueeze(1).to(dtype)

    @staticmethod
    def _rotate(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def reference(self, inp, sc):
        cos, sin = self._cos_sin(inp, torch.float32)
        return {"q": self._rotate(inp["q"].float(), cos, sin),
                "k": self._rotate(inp["k"].float(), cos, sin)}

    def eager(self, inp, sc):
        cos, sin = self._cos_sin(inp, inp["q"].dtype)
        return {"q": self._rotate(inp["q"], cos, sin), "k": self._rotate(inp["k"], cos, sin)}


class Elementwise(Op):
    """axpby over n = rows * 8192 elements (the rows as for the norms)."""
    name = template = "elementwise"
    scalars = {"alpha": 1.25, "beta": -0.75}
    # alpha * x + beta * y cancels: torch eager rounds alpha * x to bf16 first, off by up to
    # 2^-9 * 1.25 (+ the same for the sum) where ktune and torch.compile round once.
    atol = 1e-2
    peers = ("eager", "compile")
    row_dim = "n"

    def shapes(self, rows):
        return [{"n": r * 8192} for r in rows]

    def label(self, s):
        extra = s["n"] % 8192
        return f"n={s['n'] // 8192}*8192" + (f"+{extra}" if extra else "")

    def rows(self, s):
        return s["n"] // 8192

    def variant(self, s):
        return {}

    def buffers(self, s):
        return {"x": ((s["n"],), "in", (-1, 1)), "y": ((s["n"],), "in", (-1, 1))}

    def outputs(self, s):
        return {"out": (s["n"],)}

    def nbytes(self, s, e):
        return 3 * s["n"] * e

    def reference(self, inp, sc):
        return {"out": sc["alpha"] * inp["x"].float() + sc["beta"] * inp["y"].float()}

    def eager(self, inp, sc):
        return {"out": torch.add(inp["x"] * sc["alpha"], inp["y"], alpha=sc["beta"])}


OPS = {op.name: op for op in (Gemv(), RmsNorm(), AddRmsNorm(), LayerNorm(), Softmax(), SiluAndMul(),
                              Rope(), Elementwise(), Gemm())}
DEFAULT_ORDER = ("gemv", "rmsnorm", "add_rmsnorm", "layernorm", "softmax", "silu_and_mul",
                 "rope", "elementwise", "gemm")


# ---- Triton peers ------------------------------------------------------------------------
#
# One program per row; BLOCK elements per step. BLOCK >= N keeps the row in registers (one
# read of x); a smaller BLOCK loops twice over the row (the second pass mostly hits L2).
# Autotuned over BLOCK x num_warps per (N, rows), pruned to BLOCK <= next_pow2(N) and to
# 4..64 elements per thread (the configs are few: Triton compiles each per N, and the whole
# run has minutes).

def _row_configs(blocks, warps):
    if triton is None:
        return []
    return [triton.Config({"BLOCK": b}, num_warps=w) for b in blocks for w in warps]


def _prune_row_configs(configs, named_args, **kwargs):
    n = named_args.get("N", kwargs.get("N"))
    top = 1 << max(0, int(n) - 1).bit_length()
    kept = [c for c in configs
            if c.kwargs["BLOCK"] <= max(top, 1024)
            and 4 <= c.kwargs["BLOCK"] // (32 * c.num_warps) <= 64]
    return kept or configs[:1]


def _autotune(configs, key):
    """triton.autotune with short benchmarking windows (the default 25 + 100 ms per config
    would dominate the run); newer Triton takes a do_bench callable, older warmup/rep."""
    if triton is None:
        return lambda fn: fn
    import inspect
    extra = {}
    params = inspect.signature(triton.autotune).parameters
    if "do_bench" in params:
        extra["do_bench"] = lambda fn, quantiles=None: triton.testing.do_bench(
            fn, warmup=5, rep=20, quantiles=quantiles)
    elif "warmup" in params:
        extra.update(warmup=5, rep=20)
    return triton.autotune(configs=configs, key=key,
                           prune_configs_by={"early_config_prune": _prune_row_configs}, **extra)


def _jit(fn):
    # M (rows) is only an autotuning key: not specialized, so M = 1 compiles nothing new.
    return triton.jit(do_not_specialize=["M"])(fn) if triton is not None else fn


@_jit
def _rmsnorm_rows(x_ptr, res_ptr, res_out_ptr, w_ptr, out_ptr, M, N: tl.constexpr, eps,
                  HAS_RES: tl.constexpr, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * N
    if BLOCK >= N:
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            r = x + tl.load(res_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            r = r.to(res_out_ptr.dtype.element_ty)
            tl.store(res_out_ptr + base + cols, r, mask=mask)
            x = r.to(tl.float32)
        inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + base + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            if HAS_RES:
                r = x + tl.load(res_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
                r = r.to(res_out_ptr.dtype.element_ty)
                tl.store(res_out_ptr + base + cols, r, mask=mask)
                x = r.to(tl.float32)
            acc += x * x
        inv = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
        if HAS_RES:
            tl.debug_barrier()  # the second pass reads what other threads stored
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            if HAS_RES:
                x = tl.load(res_out_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            else:
                x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + base + cols, (x * inv * w).to(out_ptr.dtype.element_ty),
                     mask=mask)


@_jit
def _layernorm_rows(x_ptr, w_ptr, b_ptr, out_ptr, M, N: tl.constexpr, eps,
                    BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * N
    if BLOCK >= N:
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        xc = tl.where(mask, x - mean, 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=0) / N + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + base + cols, (xc * rstd * w + b).to(out_ptr.dtype.element_ty),
                 mask=mask)
    else:
        # Shifted sums (by the row's first element) keep E[x^2] - mean^2 from cancelling
        # when |mean| >> std; the data here has |mean| ~ std, so this is belt and braces.
        shift = tl.load(x_ptr + base).to(tl.float32)
        s1 = tl.zeros([BLOCK], dtype=tl.float32)
        s2 = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - shift, 0.0)
            s1 += d
            s2 += d * d
        m1 = tl.sum(s1, axis=0) / N
        var = tl.maximum(tl.sum(s2, axis=0) / N - m1 * m1, 0.0)
        mean = shift + m1
        rstd = tl.rsqrt(var + eps)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + base + cols,
                     ((x - mean) * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


@_jit
def _softmax_rows(x_ptr, out_ptr, M, N: tl.constexpr, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * N
    if BLOCK >= N:
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + base + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + base + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty),
                 mask=mask)
    else:
        # Online softmax per lane (running max and rescaled sum), merged at the end; the
        # finite initial max keeps exp(m_old - m_new) from being exp(-inf + inf).
        m = tl.full([BLOCK], -3.0e38, dtype=tl.float32)
        s = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + base + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
            m = m_new
        row_max = tl.max(m, axis=0)
        inv = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            x = tl.load(x_ptr + base + cols, mask=mask, other=-float("inf")).to(tl.float32)
            tl.store(out_ptr + base + cols, (tl.exp(x - row_max) * inv).to(
                out_ptr.dtype.element_ty), mask=mask)


_NORM_CONFIGS = _row_configs((1024, 2048, 4096, 8192), (4, 8, 16))
_SOFTMAX_CONFIGS = _row_configs((2048, 8192, 32768), (4, 8, 16, 32))
# Separate autotuners (separate caches) over one JIT function where a constexpr flag differs.
_rmsnorm_plain = _autotune(_NORM_CONFIGS, ["N", "M"])(_rmsnorm_rows)
_rmsnorm_add = _autotune(_NORM_CONFIGS, ["N", "M"])(_rmsnorm_rows)
_layernorm = _autotune(_NORM_CONFIGS, ["N", "M"])(_layernorm_rows)
_softmax = _autotune(_SOFTMAX_CONFIGS, ["N", "M"])(_softmax_rows)


def triton_rmsnorm(x, w, eps, residual=None):
    m, n = x.shape
    out = torch.empty_like(x)
    if residual is None:
        _rmsnorm_plain[(m,)](x, x, x, w, out, m, n, eps, HAS_RES=False)
        return out
    r = torch.empty_like(x)  # not in place: the autotuner runs the kernel many times
    _rmsnorm_add[(m,)](x, residual, r, w, out, m, n, eps, HAS_RES=True)
    return out, r


def triton_layernorm(x, w, b, eps):
    m, n = x.shape
    out = torch.empty_like(x)
    _layernorm[(m,)](x, w, b, out, m, n, eps)
    return out


def triton_softmax(x):
    m, n = x.shape
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _softmax[(m,)](x, out, m, n)
    return out


# ---- ktune's artifact on torch tensors, through cuda-python ------------------------------

class KtuneRunner:
    """ktune's kernel bound to tensors: inputs and inout buffers by name from `inputs`,
    outputs and scratch allocated here. Args that are not buffers (scalars, and tensor maps
    over a buffer, which the client's LoadedKernel builds from the buffers' pointers at bind
    time) are the client's to bind."""

    def __init__(self, kernel, inputs):
        art = kernel.artifact
        self.kernel = kernel
        self.outputs_ = {}
        self.fresh_outputs = []
        self.zeroed = []
        self.keep = []
        pointers = {}
        for a in art.args:
            if (not a.is_buffer or getattr(a, "scalar_type", "") == "tensor_map"
                    or (getattr(a, "tensor_map", None) is not None and not a.role)):
                continue  # scalars and tensor maps: the client binds them
            dtype = torch_dtype(a.dtype)
            if a.role in ("input", "inout"):
                t = inputs.get(a.name)
                if t is None:
                    raise RuntimeError(
                        f"artifact buffer '{a.name}' ({a.role}) has no tensor here; the bench "
                        f"binds {sorted(inputs)}: update the op in bench/peers.py")
                if t.dtype != dtype or t.numel() != a.count or not t.is_contiguous():
                    raise RuntimeError(
                        f"artifact buffer '{a.name}' wants {a.count} {a.dtype} elements, the "
                        f"bench has {tuple(t.shape)} {t.dtype}")
                if a.role == "inout":
                    self.outputs_[a.name] = t
            elif a.role == "output":
                t = torch.empty(a.count, dtype=dtype, device=DEVICE)
                self.outputs_[a.name] = t
                self.fresh_outputs.append(t)
            elif a.role == "scratch":
                # ktune.proto: SCRATCH with a ZERO fill must be zeroed before each run;
                # ZERO_ONCE once, at allocation (the kernels leave it zeroed after every
                # complete run: gemm's split-K counters); any other scratch is the kernels'
                # own, so it starts poisoned here (ktune-worker zeroes an unspecified fill
                # too, which would hide a kernel relying on it).
                if a.scratch_fill == "zero":
                    t = torch.zeros(a.count, dtype=dtype, device=DEVICE)
                    self.zeroed.append(t)
                elif a.scratch_fill == "zero_once":
                    t = torch.zeros(a.count, dtype=dtype, device=DEVICE)
                elif a.scratch_fill == "":
                    t = torch.empty(a.count, dtype=dtype, device=DEVICE)
                    if t.is_floating_point():
                        t.fill_(float("nan"))
                else:
                    raise RuntimeError(f"scratch '{a.name}': fill '{a.scratch_fill}' is not one "
                                       "the bench knows how to do")
            else:
                raise RuntimeError(f"artifact buffer '{a.name}': unknown role '{a.role}'")
            pointers[a.name] = t.data_ptr()
            self.keep.append(t)  # every bound tensor lives as long as the runner
        # Packed once: the pointers and scalars do not change between runs.
        self.bound = kernel.bind(pointers)
        self._stream_handle = None
        self.stream = None

    def _current_stream(self):
        """torch's current stream, read at every launch: a CUDA-graph capture (and its
        warm-up) runs on a side stream."""
        handle = torch.cuda.current_stream().cuda_stream
        if handle != self._stream_handle:
            self._stream_handle = handle
            self.stream = self.kernel.driver.CUstream(handle)
        return self.stream

    def poison(self):
        for t in self.fresh_outputs:
            if t.is_floating_point():
                t.fill_(float("nan"))

    def run(self):
        for t in self.zeroed:
            t.zero_()
        self.bound.launch(self._current_stream())

    def outputs(self):
        return self.outputs_


class FnRunner:
    """A functional peer: run() calls fn(inputs) and keeps what it returned."""

    def __init__(self, fn, inputs):
        self.fn, self.inputs, self.result = fn, inputs, None

    def poison(self):
        pass

    def run(self):
        self.result = self.fn(self.inputs)

    def outputs(self):
        return self.result


# ---- Checking and timing -----------------------------------------------------------------

def compare(got, ref, atol, rtol):
    """{ok, bad, numel, max_abs_err, detail}: every element of every reference output must be
    within atol + rtol * |ref| (NaN fails). Chunked so the fp32 temporaries stay small."""
    bad, numel, max_err, detail = 0, 0, 0.0, []
    for name, r in ref.items():
        if got is None or name not in got:
            return {"ok": False, "bad": -1, "numel": 0, "max_abs_err": None,
                    "detail": f"no output '{name}'"}
        g, r = got[name].reshape(-1), r.reshape(-1)
        if g.numel() != r.numel():
            return {"ok": False, "bad": -1, "numel": 0, "max_abs_err": None,
                    "detail": f"'{name}' has {g.numel()} elements, the reference {r.numel()}"}
        n_bad = 0
        chunk = 1 << 26
        for i in range(0, r.numel(), chunk):
            gg, rr = g[i:i + chunk].float(), r[i:i + chunk]
            err = (gg - rr).abs()
            n_bad += int((~(err <= atol + rtol * rr.abs())).sum())
            max_err = max(max_err, float(torch.nan_to_num(err, nan=math.inf).max()))
        bad += n_bad
        numel += r.numel()
        if n_bad:
            detail.append(f"'{name}': {n_bad} of {r.numel()} outside")
    return {"ok": bad == 0, "bad": bad, "numel": numel, "max_abs_err": max_err,
            "detail": "; ".join(detail)}


def timer_floor(timer):
    """The timer's time for the smallest launch there is (one kernel on a 1-element tensor):
    what every time in the table includes besides its own work."""
    one = torch.zeros(1, dtype=torch.float32, device=DEVICE)
    return timer(lambda: one.add_(1))["us"]


def copy_ceiling(timer):
    """GB/s of a 1 GiB device-to-device copy (bytes = 2 * size), by the same timer."""
    n = 1 << 30
    buffers = [torch.empty(n, dtype=torch.uint8, device=DEVICE).fill_(1),
               torch.empty(n, dtype=torch.uint8, device=DEVICE)]
    t = timer(lambda: buffers[1].copy_(buffers[0]))
    buffers.clear()
    torch.cuda.empty_cache()
    return 2 * n / (t["us"] * 1e-6) / 1e9


# ---- One key -----------------------------------------------------------------------------

def make_inputs(op, s, dtype, seed):
    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(seed)
    return op.make_inputs(s, dtype, gen)


def measure(name, make_runner, pristine, ref, tol, timer, graph=False):
    """Binds a copy of the inputs, runs once (compiles, autotunes), restores the inputs,
    poisons the outputs, runs once more and checks, then times. With `graph` the run is
    captured into a CUDA graph, whose replay is checked the same way (inputs restored,
    outputs poisoned) and timed instead of the eager call. A dict for the JSON."""
    res = {"impl": name}
    t0 = time.monotonic()
    bound = {k: v.clone() for k, v in pristine.items()}
    runner = g = None
    atol, rtol = tol
    try:
        runner = make_runner(bound)
        runner.run()
        torch.cuda.synchronize()
        for k, v in bound.items():
            v.copy_(pristine[k])
        runner.poison()
        runner.run()
        torch.cuda.synchronize()
        res["check"] = compare(runner.outputs(), ref, atol, rtol)
        call = runner.run
        if graph:
            g = capture_graph(runner.run)
            for k, v in bound.items():
                v.copy_(pristine[k])
            runner.poison()
            inputs = {v.data_ptr() for v in bound.values()}
            for t in (runner.outputs() or {}).values():  # a peer's, from the graph's pool
                if t.is_floating_point() and t.data_ptr() not in inputs:
                    t.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            replayed = compare(runner.outputs(), ref, atol, rtol)
            if res["check"]["ok"] and not replayed["ok"]:
                replayed["detail"] = "graph replay: " + replayed["detail"]
                res["check"] = replayed
            call = g.replay
        res["timed"] = "graph replay" if graph else "eager call"
        res.update(timer(call))
    except Exception as e:  # a failing peer is a cell in the table, the rest go on
        res["error"] = f"{type(e).__name__}: {e}".strip()[:400]
        res["traceback"] = traceback.format_exc(limit=4)
    finally:
        del runner, bound, g
        torch.cuda.synchronize()
        res["wall_s"] = round(time.monotonic() - t0, 2)  # compile + autotune + check + timing
    return res


def get_artifact(client, op, s, dtype, args):
    """Tunes the key (or, with --policy cache_only, only looks it up)."""
    if args.policy == "cache_only":
        return client.get_kernel(op.template, dtype, s, policy="cache_only",
                                 timeout_s=args.tune_timeout_s)
    strategy = args.strategy or ("random" if args.budget > 0 else "guided")
    return client.tune(op.template, dtype, s, strategy=strategy, budget=args.budget,
                       timeout_s=args.tune_timeout_s)


def new_record(op, s, dtype):
    atol, rtol = op.tolerance(s, dtype)
    return {"op": op.name, "template": op.template, "dtype": dtype, "shape": s,
            "label": op.label(s), "prefill": op.is_prefill(s),
            "bytes": op.nbytes(s, DTYPE_BYTES[dtype]), "flops": op.flops(s),
            "atol": atol, "rtol": rtol, "ktune": {}, "peers": {}}


def run_key(client, op, s, dtype, args, timer, ceiling_gbps):
    rec = new_record(op, s, dtype)
    tol = (rec["atol"], rec["rtol"])
    graph = bool(args.graph_decode and op.is_decode(s))
    rec["timed"] = "CUDA-graph replay" if graph else "eager call"
    sc = dict(op.scalars)
    art = kernel = None
    t0 = time.monotonic()
    try:
        art = get_artifact(client, op, s, dtype, args)
        rec["ktune"].update(
            tune_s=round(time.monotonic() - t0, 2), provenance=art.provenance,
            params=art.params, knobs=dataclasses.asdict(art.knobs), launches=len(art.launches),
            scratch=[a.name for a in art.args if a.is_buffer and a.role == "scratch"],
            tuned_us=art.metrics.time_ns / 1e3, tuned_ceiling_fraction=art.metrics.ceiling_fraction)
        if art.metrics.gbps > 0 and art.metrics.time_ns > 0:
            model = art.metrics.gbps * art.metrics.time_ns  # GB/s * ns = bytes
            rec["ktune"]["manifest_bytes"] = round(model)
            if abs(model - rec["bytes"]) > 0.01 * rec["bytes"]:
                rec["ktune"]["bytes_note"] = (f"the manifest's cost model says {model:.0f} bytes, "
                                              f"the bench {rec['bytes']}")
        for a in art.args:
            if not a.is_buffer and a.name in sc and getattr(a, "scalar_type", "") != "tensor_map":
                sc[a.name] = a.value
    except Exception as e:
        rec["ktune"]["error"] = f"tune: {type(e).__name__}: {e}"[:400]
    rec["scalars"] = sc

    pristine = make_inputs(op, s, torch_dtype(dtype), seed=1234)
    ref = op.reference(pristine, sc)
    if art is not None:
        try:
            import ktune
            kernel = ktune.LoadedKernel(art)
            rec["ktune"].update(measure("ktune", lambda b: KtuneRunner(kernel, b), pristine, ref,
                                        tol, timer, graph))
        except Exception as e:
            rec["ktune"]["error"] = f"load: {type(e).__name__}: {e}"[:400]
        finally:
            if kernel is not None:
                kernel.close()

    for peer in op.peers:
        if peer not in args.peers:
            continue
        try:
            fn = peer_fn(op, peer, sc)
        except Exception as e:
            rec["peers"][peer] = {"impl": peer, "error": f"{type(e).__name__}: {e}"[:400]}
            continue
        rec["peers"][peer] = measure(peer, lambda b, fn=fn: FnRunner(fn, b), pristine, ref, tol,
                                     timer, graph)
    del pristine, ref
    torch.cuda.empty_cache()
    finish_record(rec, op, ceiling_gbps)
    return rec


def peer_fn(op, peer, sc):
    if peer == "eager":
        return lambda inp: op.eager(inp, sc)
    if peer == "compile":
        torch._dynamo.reset()  # one compile per shape, not a dynamic-shape kernel

        def fn(inp):
            return op.eager(inp, sc)
        return torch.compile(fn, dynamic=False)
    if peer == "triton":
        return lambda inp: op.triton(inp, sc)
    if peer == "cublas":
        return lambda inp: op.cublas(inp, sc)
    raise ValueError(peer)


def ok_time(r):
    return r.get("us") if r and "error" not in r and r.get("check", {}).get("ok") else None


def finish_record(rec, op, ceiling_gbps):
    """GB/s (TFLOP/s where the op counts flops), fractions, best peer, speed-up and the
    goals."""
    for r in [rec["ktune"], *rec["peers"].values()]:
        if r.get("us"):
            r["gbps"] = rec["bytes"] / (r["us"] * 1e-6) / 1e9
            r["ceiling_fraction"] = r["gbps"] / ceiling_gbps if ceiling_gbps else None
            if rec.get("flops"):
                r["tflops"] = rec["flops"] / (r["us"] * 1e-6) / 1e12
    times = {k: ok_time(v) for k, v in rec["peers"].items()}
    times = {k: v for k, v in times.items() if v is not None}
    best = min(times, key=times.get) if times else None
    rec["best_peer"] = best
    kt = ok_time(rec["ktune"])
    goals = {}
    if kt is None:  # the reason is in the notes under the table
        k = rec["ktune"]
        why = ("tune error" if k.get("error", "").startswith("tune") else "error" if "error" in k
               else "mismatch" if k.get("check") else "no result")
        goals["ktune"] = f"FAIL ({why})"
    else:
        need = op.peer_goal(rec["shape"], rec.get("dtype"))
        if best:
            rec["speedup"] = times[best] / kt
            if need == 1.0:
                goals["peer"] = "ok" if kt <= times[best] else \
                    f"MISS ({kt / times[best] - 1:+.1%} vs {best})"
            else:
                goals["peer"] = "ok" if rec["speedup"] >= need else \
                    f"MISS ({rec['speedup']:.2f}x < {need:g}x vs {best})"
            if op.peer_goal_required:
                rec["peer_goal"] = need
        elif op.peer_goal_required:  # gemm: its goals are ratios to cuBLAS, which must run
            goals["peer"] = f"FAIL (no correct peer time for the {need:g}x goal)"
        if rec["prefill"] and ceiling_gbps:
            f = rec["ktune"]["ceiling_fraction"]
            goals["ceil"] = "ok" if f >= CEIL_GOAL else f"MISS ({(f - CEIL_GOAL) * 100:+.1f} pp)"
        if op.is_goal_shape(rec["shape"]):
            goals["12us"] = "ok" if kt < GEMV_GOAL_US else f"MISS ({kt - GEMV_GOAL_US:+.2f} us)"
    rec["goals"] = goals


# ---- Output ------------------------------------------------------------------------------

def cell(r):
    if not r:
        return ""
    if "error" in r:
        return "ERROR"
    if not r.get("check", {}).get("ok"):
        return "FAIL mismatch"
    return f"{r['us']:.2f}"


def md(text, limit=400):
    """One line of a markdown table or list: no newlines, no bare '|'."""
    text = " ".join(str(text).split())
    text = text if len(text) <= limit else text[:limit] + "..."
    return text.replace("|", "\\|")


def write_outputs(out_dir, meta, records, ops):
    os.makedirs(out_dir, exist_ok=True)
    odd_size_goals(records)
    with open(os.path.join(out_dir, "peers.json"), "w") as f:
        json.dump({"meta": meta, "results": records}, f, indent=1, default=str)
    lines = [f"# ktune vs peers ({meta.get('dtype')}, {meta.get('device', '?')})", ""]
    for k in ("error", "versions", "timer", "timer_floor", "copy_ceiling", "tuning",
              "graph_decode", "cublas_bf16_reduced_precision_reduction", "wall_s"):
        if k in meta:
            lines.append(f"- {k}: {md(meta[k])}")
    lines += ["", "Times in us (median); GB/s and % ceil are ktune's, over the bytes the op must "
              "move and the copy ceiling above. Peers: " +
              "; ".join(f"{p} = {PEER_TITLES[p]}" for p in meta["peers"]) +
              ". speed-up = best correct peer's time / ktune's. Goals: ceil = ktune >= "
              f"{CEIL_GOAL:.0%} of the copy ceiling at prefill shapes (rows >= {PREFILL_ROWS}); "
              "peer = ktune no slower than the best peer; 12us = gemv 4096x4096 batch 1 under "
              f"{GEMV_GOAL_US:g} us; odd = at a row length no multiple of 8 (--sizes both), "
              f"ktune's GB/s >= {ODD_GOAL:.0%} of its GB/s at the aligned length beside it. "
              "FAIL mismatch: outside atol + rtol * |ref| against torch in "
              "fp32 (details in the notes)." +
              (f" gemm: TFLOP/s = 2 m n k / time; its peer goal is a ratio to cuBLAS "
               f"(speed-up >= the key's: bf16 1.25x at m <= 128 on qkv and o, 1.0x at m <= "
               f"1024, 0.97x above; fp8 1.0x at m <= 256, 0.95x above); decode keys (m <= "
               f"{GRAPH_DECODE_M}) are timed as CUDA-graph replays unless --no-graph-decode."
               if any(op.name == "gemm" for op in ops) else ""), ""]
    for op in ops:
        dtypes = list(dict.fromkeys(r.get("dtype", meta.get("dtype")) for r in records
                                    if r["op"] == op.name))
        for dtype in dtypes:
            lines += op_table(op, dtype, meta, [r for r in records if r["op"] == op.name and
                                               r.get("dtype", meta.get("dtype")) == dtype],
                              several=len(dtypes) > 1 or dtype != meta.get("dtype"))
    goals = [v for r in records for v in r.get("goals", {}).values()]
    lines.append(f"Goals: {sum(g == 'ok' for g in goals)} ok, "
                 f"{sum(g != 'ok' for g in goals)} missed or failed, over {len(records)} keys.")
    with open(os.path.join(out_dir, "peers.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def op_table(op, dtype, meta, recs, several):
    """The markdown lines of one op's table at one dtype, and its notes."""
    peers = [p for p in op.peers if p in meta["peers"]]
    flops = any(r.get("flops") for r in recs)
    lines = [f"## {op.name}" + (f" ({dtype})" if several else ""), ""]
    titles = [f"{p} = {op.peer_title(p, dtype)}" for p in peers
              if op.peer_title(p, dtype) != PEER_TITLES[p]]
    if titles:
        lines += ["Peers here: " + "; ".join(titles) + ".", ""]
    lines += ["| shape | ktune us | " + ("TFLOP/s | " if flops else "") + "GB/s | % ceil | " +
              " | ".join(f"{p} us" + (f" | {p} TFLOP/s" if flops else "") for p in peers) +
              " | best peer | speed-up | goals |",
              "|" + "---|" * (7 + len(peers) * (2 if flops else 1) + (1 if flops else 0))]
    notes = []
    for r in recs:
        k = r["ktune"]
        gb = f"{k['gbps']:.0f}" if ok_time(k) else ""
        frac = f"{k['ceiling_fraction'] * 100:.1f}" if ok_time(k) and k.get(
            "ceiling_fraction") else ""
        sp = f"{r['speedup']:.2f}x" if r.get("speedup") else ""
        goals = md(", ".join(f"{g} {v}" for g, v in r.get("goals", {}).items()))
        peer_cells = []
        for p in peers:
            peer_cells.append(cell(r["peers"].get(p)))
            if flops:
                peer_cells.append(tflops_cell(r["peers"].get(p)))
        lines.append(f"| {r['label']} | {cell(k)} | " +
                     (f"{tflops_cell(k)} | " if flops else "") + f"{gb} | {frac} | " +
                     " | ".join(peer_cells) +
                     f" | {r.get('best_peer') or ''} | {sp} | {goals} |")
        label = r["label"]
        if k.get("params") is not None:
            notes.append((label, f"ktune params {k['params']} knobs {k.get('knobs')}, "
                                 f"{k.get('launches')} launch(es), tuned in {k.get('tune_s')} "
                                 f"s, ktune's timer {k.get('tuned_us', 0):.2f} us "
                                 f"({(k.get('tuned_ceiling_fraction') or 0) * 100:.1f} % of "
                                 "its ceiling)" +
                          (f", scratch {k['scratch']}" if k.get("scratch") else "")))
        for name, x in [("ktune", k), *r["peers"].items()]:
            if "error" in x:
                notes.append((label, f"{name}: {x['error']}"))
            elif x.get("check") and not x["check"]["ok"]:
                c = x["check"]
                notes.append((label, f"{name} mismatch: {c['detail']} (max abs err "
                                     f"{c['max_abs_err']}, atol {r.get('atol', op.atol):.3g}, "
                                     f"rtol {r.get('rtol', op.rtol):.3g})"))
        if k.get("bytes_note"):
            notes.append((label, k["bytes_note"]))
        if r.get("timed") == "CUDA-graph replay":
            notes.append((label, "timed as CUDA-graph replays (ktune and peers)"))
        if r.get("skipped"):
            notes.append((label, f"skipped: {r['skipped']}"))
    lines.append("")
    # One line per distinct note, naming every shape it is about.
    grouped = {}
    for label, text in notes:
        grouped.setdefault(text, []).append(label)
    lines += [f"- {md(', '.join(labels), 200)}: {md(text)}" for text, labels in grouped.items()]
    lines.append("")
    return lines


def tflops_cell(r):
    if not ok_time(r) or not r.get("tflops"):
        return ""
    return f"{r['tflops']:.0f}" if r["tflops"] >= 100 else f"{r['tflops']:.1f}"


# ---- Dry run: keys, and the ops checked against the manifests ---------------------------

@dataclasses.dataclass
class ManifestBuffer:
    role: str                  # "input", "output", "inout", "scratch"
    count: str                 # the element count's expression
    dtype: str = "dtype"       # "dtype" (the key's) or a fixed one ("f32", ...)
    dtype_for: dict = dataclasses.field(default_factory=dict)  # key dtype -> buffer dtype
    fill: str = ""             # the fill's kind, lower case ("zero", "uniform", ...)

    def resolved_dtype(self, key_dtype):
        d = self.dtype_for.get(key_dtype, self.dtype)
        return key_dtype if d == "dtype" else d


def _manifest(templates_dir, name):
    """(buffers {name: ManifestBuffer}, tensor maps {name: buffer name}, cost bytes expr)
    from NAME.textproto, or None."""
    path = os.path.join(templates_dir, name, f"{name}.textproto")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    bufs, tmaps = {}, {}
    for body in _blocks(text, "args"):
        arg = re.match(r'\s*name:\s*"(\w+)"\s*(\w+)\s*\{', body)
        if not arg:
            continue
        if arg.group(2) == "buffer":
            count = re.search(r'\bcount:\s*"([^"]*)"', body)
            role = re.search(r'\brole:\s*(\w+)', body)
            dtype = re.search(r'\bdtype:\s*"(\w+)"', body)
            fill = re.search(r'\bfill\s*\{[^}]*?\bkind:\s*(\w+)', body)
            bufs[arg.group(1)] = ManifestBuffer(
                role=role.group(1).lower() if role else "", count=count.group(1) if count else "",
                dtype=dtype.group(1) if dtype else "dtype",
                dtype_for=dict(re.findall(
                    r'dtype_for\s*\{\s*key:\s*"(\w+)"\s*value:\s*"(\w+)"\s*\}', body)),
                fill=fill.group(1).lower() if fill else "")
        elif arg.group(2) == "tensor_map":
            buf = re.search(r'\bbuffer:\s*"(\w+)"', body)
            tmaps[arg.group(1)] = buf.group(1) if buf else ""
    cost = re.search(r'cost\s*\{[^}]*?bytes:\s*"([^"]*)"', text)
    return bufs, tmaps, cost.group(1) if cost else None


def eval_expr(text, scope, esize):
    """Evaluates a manifest expression over `scope` (dims and params), sizeof(dtype) being
    `esize`, as ktune does (manifest_text.compile_expr), for the dry run's cross-check."""
    return _compile_expr(text)({**scope, "dtype": esize})


SCRATCH_FILLS = ("", "zero", "zero_once")  # the scratch fills KtuneRunner knows


def dry_run(ops, args):
    templates = args.templates
    problems = 0
    for op in ops:
        man = _manifest(templates, op.template) if templates else None
        state = "manifest found" if man else "no manifest" if templates else "not checked"
        print(f"{op.name} (template {op.template}, {state}; peers "
              f"{', '.join(p for p in op.peers if p in args.peers)})")
        several = op.key_dtypes(args) != [args.dtype]
        for dtype, s in selected_keys(op, args):
            e = DTYPE_BYTES[dtype]
            label = op.label(s) + (f" {dtype}" if several else "")
            line = (f"  {label:>22}  shape {s}  bytes {op.nbytes(s, e)}"
                    f"{'  prefill' if op.is_prefill(s) else ''}"
                    f"{'  graph' if args.graph_decode and op.is_decode(s) else ''}")
            issues = []
            if man:
                issues = check_against_manifest(op, s, dtype, man)
            print(line + ("" if not issues else "\n    MISMATCH: " + "; ".join(issues)))
            problems += bool(issues)
    missing = [o for o in args.ops if o not in OPS]
    if missing:
        print(f"not written yet in the bench: {', '.join(missing)}")
    return 1 if problems else 0


def check_against_manifest(op, s, dtype, man):
    """What differs between the op's tensors at one key and the manifest's buffers: names,
    roles, element counts, dtypes (where the op states them), scratch fills the runner
    knows, tensor maps over bound buffers, and the byte formula."""
    bufs, tmaps, cost = man
    e = DTYPE_BYTES[dtype]
    issues = []
    mine = {n: (math.prod(sh), "input" if r == "in" else r)
            for n, (sh, r, _) in op.buffers(s).items()}
    mine.update({n: (math.prod(sh), "output") for n, sh in op.outputs(s).items()})
    dtypes = op.buffer_dtypes(s, dtype) or {}
    for n, b in bufs.items():
        if b.role == "scratch":
            if b.fill not in SCRATCH_FILLS:
                issues.append(f"scratch '{n}': fill '{b.fill}' is not one KtuneRunner knows")
            continue
        want = eval_expr(b.count, s, e)
        if n not in mine:
            issues.append(f"manifest {b.role} '{n}' is not bound by the bench")
            continue
        if mine[n] != (want, b.role):
            issues.append(f"'{n}': manifest {want} {b.role}, bench {mine[n]}")
        if n in dtypes and dtypes[n] != b.resolved_dtype(dtype):
            issues.append(f"'{n}': manifest dtype {b.resolved_dtype(dtype)}, bench {dtypes[n]}")
    for n in mine:
        if n not in bufs:
            issues.append(f"bench tensor '{n}' is not a manifest buffer")
    for n, buf in tmaps.items():  # built by the client from the buffer's pointer
        if buf not in mine:
            issues.append(f"tensor map '{n}' is over '{buf}', which the bench does not bind")
    if cost:
        want = eval_expr(cost, s, e)
        if want != op.nbytes(s, e):
            issues.append(f"bytes: manifest {want}, bench {op.nbytes(s, e)}")
    return issues


# ---- Main --------------------------------------------------------------------------------

def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="ktuned address (default: the client's)")
    p.add_argument("--token", default=None, help="bearer token, if ktuned wants one")
    p.add_argument("--out", default=".", help="folder for peers.md and peers.json")
    p.add_argument("--ops", default=",".join(DEFAULT_ORDER),
                   help=f"comma-separated, run in this order (default {','.join(DEFAULT_ORDER)})")
    p.add_argument("--rows", default=None,
                   help=f"rows (tokens; gemv: batch is separate; gemm: --gemm-m) to run, "
                        f"default {','.join(map(str, DEFAULT_ROWS))}")
    p.add_argument("--gemm-m", default=None,
                   help=f"gemm: m values, default {','.join(map(str, GEMM_M))} (--quick: "
                        f"{','.join(map(str, QUICK_GEMM_M))})")
    p.add_argument("--gemm-proj", default=None,
                   help=f"gemm: Llama-3-8B projections, of {','.join(GEMM_PROJS)} (default all; "
                        f"--quick: {','.join(QUICK_GEMM_PROJS)})")
    p.add_argument("--gemm-dtypes", default=",".join(GEMM_DTYPES),
                   help=f"gemm: dtypes, of {','.join(GEMM_ALL_DTYPES)} (default "
                        f"{','.join(GEMM_DTYPES)}; fp8 writes bf16)")
    p.add_argument("--graph-decode", action=argparse.BooleanOptionalAction, default=True,
                   help=f"time decode keys (gemm m <= {GRAPH_DECODE_M}) as CUDA-graph replays, "
                        "ktune's launches and the peer's call each captured once (default on)")
    p.add_argument("--only", default=None,
                   help="keep only the shapes with these dims, e.g. cols=128256 or batch=8 "
                        "(an op without the dim keeps its shapes)")
    p.add_argument("--quick", action="store_true",
                   help=f"rows {','.join(map(str, QUICK_ROWS))} and the first shape variant only")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    # argparse %-formats help strings: the goal's percent sign goes in doubled.
    p.add_argument("--sizes", default="aligned", choices=["aligned", "odd", "both"],
                   help="row lengths: as listed (multiples of 8), each plus "
                        f"{' and '.join(map(str, ODD_OFFSETS))} (odd), or both side by side "
                        f"(adds the goal odd: >= {ODD_GOAL:.0%}% of the aligned GB/s)")
    p.add_argument("--peers", default=",".join(ALL_PEERS), help="which peers to time")
    p.add_argument("--budget", type=int, default=32,
                   help="candidates measured per key, drawn at random (0: the guided search's "
                        "own budget)")
    p.add_argument("--strategy", default="", choices=["", "guided", "random", "exhaustive"],
                   help="the search strategy (default: random with --budget N > 0, else guided)")
    p.add_argument("--policy", default="tune", choices=["tune", "cache_only"],
                   help="cache_only: measure what the store holds, tune nothing")
    p.add_argument("--tune-timeout-s", type=float, default=300.0)
    p.add_argument("--warmup-ms", type=float, default=10.0, help="do_bench warm-up window")
    p.add_argument("--rep-ms", type=float, default=50.0, help="do_bench measuring window")
    p.add_argument("--flush", choices=["read", "zero"], default="read",
                   help="L2 flush before each timed call: read a 256 MiB buffer (clean L2, as "
                        "ktune's timer) or zero it (do_bench's: dirty L2); see Timer")
    p.add_argument("--launch-gap-us", type=float, default=200.0,
                   help="GPU sleep after each flush, so that no launch path's CPU time is "
                        "timed (0: none, as do_bench); see Timer")
    p.add_argument("--deadline-s", type=float, default=0.0,
                   help="start no key after this many seconds (0: none); the rest are listed "
                        "as skipped")
    p.add_argument("--cublas-fp32-reduction", action="store_true",
                   help="torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = "
                        "False (default: torch's, True), should cuBLAS's split-K in bf16 fail "
                        "the gemv check")
    p.add_argument("--dry-run", action="store_true",
                   help="list the keys (and check the ops against --templates); no GPU")
    p.add_argument("--templates", default=os.environ.get(
        "KTUNE_TEMPLATES", os.path.join(here, "..", "kernel_templates")),
        help="templates folder for --dry-run's checks")
    return check_args(p, p.parse_args(argv))


def check_args(p, args):
    """The list flags split and every flag's value checked; p.error (exit 2, naming the flag)
    on a bad one."""
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    args.peers = [x.strip() for x in args.peers.split(",") if x.strip()]
    for x in args.peers:
        if x not in ALL_PEERS:
            p.error(f"--peers: unknown peer '{x}' (known: {', '.join(ALL_PEERS)})")
    for o in args.ops:
        if o not in DEFAULT_ORDER:
            p.error(f"--ops: unknown op '{o}' (known: {', '.join(DEFAULT_ORDER)})")
    try:
        args.rows = tuple(int(r) for r in args.rows.split(",")) if args.rows else (
            QUICK_ROWS if args.quick else DEFAULT_ROWS)
    except ValueError:
        p.error(f"--rows: expected comma-separated integers, got '{args.rows}'")
    try:
        args.gemm_m = tuple(int(m) for m in args.gemm_m.split(",")) if args.gemm_m else None
    except ValueError:
        p.error(f"--gemm-m: expected comma-separated integers, got '{args.gemm_m}'")
    if args.gemm_m and min(args.gemm_m) < 1:
        p.error(f"--gemm-m: m must be >= 1, got '{','.join(map(str, args.gemm_m))}'")
    args.gemm_proj = tuple(x.strip() for x in args.gemm_proj.split(",") if x.strip()) \
        if args.gemm_proj else None
    for x in args.gemm_proj or ():
        if x not in GEMM_PROJS:
            p.error(f"--gemm-proj: unknown projection '{x}' (known: {', '.join(GEMM_PROJS)})")
    args.gemm_dtypes = tuple(x.strip() for x in args.gemm_dtypes.split(",") if x.strip())
    for x in args.gemm_dtypes:
        if x not in GEMM_ALL_DTYPES:
            p.error(f"--gemm-dtypes: unknown dtype '{x}' (known: {', '.join(GEMM_ALL_DTYPES)})")
    if not args.gemm_dtypes:
        p.error("--gemm-dtypes: none given")
    try:
        args.only = dict((k.strip(), int(v)) for k, v in
                         (kv.split("=") for kv in args.only.split(","))) if args.only else {}
    except ValueError:
        p.error(f"--only: expected DIM=VALUE[,DIM=VALUE], got '{args.only}'")
    if args.launch_gap_us < 0:
        p.error(f"--launch-gap-us: must be >= 0, got {args.launch_gap_us}")
    return args


def selected_shapes(op, args):
    shapes = op.plan(args)
    if shapes is None and args.quick:
        shapes = op.quick_shapes(args.rows)
    if shapes is None:
        shapes = op.shapes(args.rows)
        if args.quick:  # the first variant (hidden 4096, vocab 32000, ...) at the quick rows
            shapes = [s for s in shapes if op.variant(s) == op.variant(shapes[0])]
    # A dim the op does not have filters none of its shapes (--only hidden=4096,cols=32000
    # cuts the norms and softmax at once).
    shapes = [s for s in shapes if all(s.get(k, v) == v for k, v in args.only.items())]
    return with_sizes(op, shapes, args.sizes)


def with_sizes(op, shapes, sizes):
    """--sizes: each shape as it is (aligned), its row length plus each of ODD_OFFSETS (odd),
    or both, each aligned shape followed by its odd neighbours."""
    if op.row_dim is None or sizes == "aligned":
        return shapes
    out = []
    for s in shapes:
        if sizes == "both":
            out.append(s)
        out += [{**s, op.row_dim: s[op.row_dim] + k} for k in ODD_OFFSETS]
    return out


def selected_keys(op, args):
    """[(dtype, shape)] in run order: each of the op's dtypes in turn, its shapes within."""
    shapes = selected_shapes(op, args)
    return [(d, op.shape_for(s, d)) for d in op.key_dtypes(args) for s in shapes]


def odd_size_goals(records):
    """The `odd` goal of every odd-length record whose aligned neighbour (its row length less
    one of ODD_OFFSETS, a multiple of 8; the same dtype and other dims) also ran: ktune's GB/s
    there >= ODD_GOAL of the neighbour's. Sets rec["odd_vs_aligned"] and the goal."""
    by_key = {(r["op"], r.get("dtype"), json.dumps(r["shape"], sort_keys=True)): r
              for r in records}
    for r in records:
        op = OPS.get(r["op"])
        dim = op.row_dim if op else None
        if dim is None or r["shape"][dim] % 8 == 0:
            continue
        for k in ODD_OFFSETS:
            length = r["shape"][dim] - k
            base = by_key.get((r["op"], r.get("dtype"),
                               json.dumps({**r["shape"], dim: length}, sort_keys=True)))
            if length % 8 or base is None:
                continue
            if ok_time(r["ktune"]) and ok_time(base["ktune"]):
                ratio = r["ktune"]["gbps"] / base["ktune"]["gbps"]
                r["odd_vs_aligned"] = ratio
                r.setdefault("goals", {})["odd"] = \
                    "ok" if ratio >= ODD_GOAL else f"MISS ({ratio:.2f}x of {dim}={length})"
            break


def versions():
    import importlib.metadata as md
    out = []
    for pkg in ("torch", "triton", "cuda-python", "cuda-bindings", "grpcio"):
        try:
            out.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            pass
    if torch is not None:
        out.append(f"torch's CUDA {torch.version.cuda}")
    return ", ".join(out)


def run_all(args, ops, meta, records, start):
    """Everything that needs the GPU; fills meta and records as it goes (main writes them)."""
    missing = [m for m, mod in (("torch", torch), ("triton", triton)) if mod is None]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not importable (only --dry-run works "
                           "without them)")
    import ktune
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 references are fp32
    if args.cublas_fp32_reduction:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.cuda.init()
    torch.empty(1, device=DEVICE)  # makes torch's primary context current for cuda-python
    driver = ktune.cuda_driver()
    ktune.cuda_check(driver, driver.cuInit(0), "cuInit")
    for attr in ("cache_size_limit", "recompile_limit"):  # one compile per shape, all kept
        if hasattr(torch._dynamo.config, attr):
            setattr(torch._dynamo.config, attr, 256)
    meta["device"] = torch.cuda.get_device_name()
    try:
        meta["cublas_bf16_reduced_precision_reduction"] = \
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    except Exception:  # older torch: no such setting
        pass
    timer = Timer(args.warmup_ms, args.rep_ms, args.flush, args.launch_gap_us, DEVICE)
    ceiling = copy_ceiling(timer)
    meta["timer_floor_us"] = timer_floor(timer)
    meta["timer_floor"] = (f"{meta['timer_floor_us']:.2f} us for one kernel on a 1-element "
                           "tensor: every time below includes this")
    meta["copy_ceiling_gbps"] = ceiling
    meta["copy_ceiling"] = f"{ceiling:.0f} GB/s measured here (1 GiB copy, 2 x bytes)"
    with ktune.Client(args.target, token=args.token) as client:
        for op in ops:
            for dtype, s in selected_keys(op, args):
                if args.deadline_s and time.monotonic() - start > args.deadline_s:
                    rec = new_record(op, s, dtype)
                    rec.update(goals={"ktune": "FAIL (skipped: deadline)"},
                               skipped=f"past --deadline-s {args.deadline_s}")
                    records.append(rec)
                    continue
                t0 = time.monotonic()
                try:
                    rec = run_key(client, op, s, dtype, args, timer, ceiling)
                except Exception as e:  # e.g. out of memory making the inputs
                    rec = new_record(op, s, dtype)
                    rec.update(ktune={"error": f"{type(e).__name__}: {e}"},
                               goals={"ktune": f"FAIL ({type(e).__name__})"})
                    torch.cuda.empty_cache()
                rec["wall_s"] = round(time.monotonic() - t0, 2)
                records.append(rec)
                walls = ", ".join(f"{k} {v.get('wall_s')} s" for k, v in
                                  [("ktune", rec["ktune"]), *rec["peers"].items()])
                print(f"{op.name} {dtype} {op.label(s)}: ktune {cell(rec['ktune']) or '-'}, "
                      f"best peer "
                      f"{rec.get('best_peer')}, goals {rec.get('goals')} ({rec['wall_s']} s: tune "
                      f"{rec['ktune'].get('tune_s')} s, {walls})", flush=True)
                if "stored_copy_gbps" not in meta:  # known once a tune measured it
                    try:
                        stored = [d.copy_gbps for d in client.get_devices(timeout_s=10)]
                        if any(stored):
                            meta["stored_copy_gbps"] = stored
                            meta["copy_ceiling"] += f"; ktune's stored ceiling {stored} GB/s"
                    except Exception as e:
                        meta["copy_ceiling"] += f"; GetDevices failed: {e}"
                        meta["stored_copy_gbps"] = None
                write_outputs(args.out, meta, records, ops)


def main(argv):
    args = parse_args(argv)
    ops = [OPS[o] for o in args.ops]
    if args.only and not any(selected_shapes(op, args) for op in ops):
        print(f"peers.py: error: --only {','.join(f'{k}={v}' for k, v in args.only.items())} "
              f"keeps no shape of {','.join(args.ops)} at rows {','.join(map(str, args.rows))}",
              file=sys.stderr)
        return 2
    if args.dry_run:
        return dry_run(ops, args)
    start = time.monotonic()
    meta = {"dtype": args.dtype, "versions": versions(), "peers": args.peers,
            "timer": f"CUDA events around each call as triton.testing.do_bench, warmup "
                     f"{args.warmup_ms} ms, rep {args.rep_ms} ms, median, L2 flushed before "
                     f"every rep by a {args.flush} of 256 MiB, then a GPU sleep of "
                     f"{args.launch_gap_us:g} us so that no launch's CPU time is timed",
            "tuning": ("cache_only (nothing tuned)" if args.policy == "cache_only" else
                       f"{args.strategy or ('random' if args.budget else 'guided')}, budget "
                       f"{args.budget or 'the strategy default'} per key")}
    if any(op.is_decode(s) for op in ops for s in selected_shapes(op, args)):
        meta["graph_decode"] = (
            f"decode keys (gemm m <= {GRAPH_DECODE_M}) timed as CUDA-graph replays: ktune's "
            "launches and the peer's call each captured once, the flush and gap outside the "
            "graph" if args.graph_decode else "off: decode keys timed as eager calls")
    if "gemm" in args.ops:
        meta["gemm_dtypes"] = list(args.gemm_dtypes)
    records = []
    try:
        run_all(args, ops, meta, records, start)
    except Exception as e:  # the files are written whatever happened
        meta["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    meta["wall_s"] = round(time.monotonic() - start, 1)
    write_outputs(args.out, meta, records, ops)
    goals = [v for r in records for v in r.get("goals", {}).values()]
    ok = "error" not in meta and goals and all(g == "ok" for g in goals)
    print(f"wrote {os.path.join(args.out, 'peers.md')} and peers.json "
          f"({meta['wall_s']} s): {'every goal met' if ok else 'goals missed or failures'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
