#!/usr/bin/env python3
"""Host time a ktune.torch op costs per call beyond a bare cuLaunchKernel, and the GPU time it
adds under a CUDA graph (issue #15's goals: <= 5 us of host time per call in eager mode; zero
added GPU time under graphs).

For each op (small shapes, so the host, not the GPU, sets the pace):
  bare      cuda-python's cuLaunchKernel of the op's loaded function with its parameters
            packed once: the least a Python caller pays through the driver's binding (for a
            tensor-map kernel, a BoundKernel's parameters, whose maps are encoded once);
  C launch  the same through ktune._fastlaunch (cuLaunchKernel called from C), where built;
  cache     the kernel cache's entry.launch(pointers, stream, scalars): the dict hit is
            outside, the per-call pointer and scalar updates inside; through ktune._fastlaunch
            where it is built;
  op        ktune.torch.<op>(...), eager: the argument checks, the output allocation, the key
            lookup and the launch (no dispatcher); a repeated call, so the hot path (C);
  python    the same with the hot path off: the op's Python path (plus two module attribute
            writes a call that turn the hot path off and on);
  dispatch  torch.ops.ktune.<op>(...): the same through torch's dispatcher (what a traced
            or compiled caller gets);
  torch     torch's own eager op, for reference.
Each is called --calls times in a row, all taking turns for five rounds; the median
batch's wall time per call is reported. overhead = op - bare.

Under CUDA graphs: --graph-ops calls of the op captured into one graph, and the same number
of bare launches of the same function into another; each replayed --replays times (CUDA
events). added = op graph / bare graph - 1: what the op puts on the GPU beyond its kernels
(an allocation in a graph is no node; a stray copy or memset would be one).

    python3 bench/torch_overhead.py --target unix:///path/ktuned.sock --out DIR
Writes DIR/torch_overhead.md and .json. Exit 0 when both goals are met, 1 otherwise.
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import ktune
import ktune.torch as kt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import Timer  # noqa: E402

GOAL_OVERHEAD_US = 5.0
GOAL_GRAPH_ADDED = 0.02  # the two graphs' replays agree within noise


def host_us_per_call(fns, calls, sleep_cycles, rounds=5):
    """{name: median over `rounds` batches of `calls` calls of fns[name]'s wall time per
    call, in us}. The GPU sleeps through each batch (sleep_cycles, queued first), so no call
    waits for the GPU: what is timed is the host's enqueueing alone. The functions take
    turns batch by batch, so a drift of the host's load (measured: 1.5x between instances of
    the GPU host, and within one) weighs on all of them alike, not on whichever ran last."""
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    batches = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            torch.cuda._sleep(sleep_cycles)
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            batches[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(b) for name, b in batches.items()}


def python_path(op):
    """op() with ktune.torch's hot path off."""
    def call():
        hot, kt._hot_call = kt._hot_call, None
        try:
            op()
        finally:
            kt._hot_call = hot
    return call


def graph_us(fn, count, replays):
    """Replay time of a graph holding `count` calls of fn, per call, in us."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as torch advises
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(count):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (replays * count))
    return statistics.median(times)


def bare_launcher(entry, pointers, scalars, stream=None, fast=False):
    """A call that enqueues the entry's launches with everything packed once, on `stream` (a
    CUstream) or, when None, on torch's current stream looked up per call (so a graph
    capture records them). fast: through ktune._fastlaunch (entry.fast) instead of
    cuda-python's binding, on `stream` (required then)."""
    cu = entry.kernel.driver
    current = (lambda: kt._stream(0, cu)) if stream is None else (lambda: stream)
    if any(a.scalar_type == "tensor_map" for a in entry.artifact.args):
        bound = entry.kernel.bind(pointers)
        keep = [bound]  # its parameter arrays must outlive the launches
        addresses = [params.address for params in bound._params]
    else:
        entry.launch(pointers, current(), scalars)  # fills the slots
        packed = entry._packed()
        if scalars:
            for params, _, slots in packed:
                for name, value in scalars.items():
                    if name in slots:
                        slots[name].value = value
        keep = [packed]
        addresses = [params.address for params, _, _ in packed]
    work = [(fn, tuple(launch.grid), tuple(launch.block), launch.shared_bytes, address)
            for address, fn, launch in zip(addresses, entry.kernel.functions,
                                           entry.artifact.launches)]
    launch_kernel = cu.cuLaunchKernel
    if fast:
        c_launch, handle = entry.fast, int(stream)
        plans = [(plan, address) for plan, (_, _, _, _, address) in zip(entry.kernel.plans, work)]

        def run_fast(keep=keep):
            for plan, address in plans:
                c_launch(plan, handle, address)
        return run_fast

    # `keep` as a default argument: the closures hold the parameter arrays alive.
    if stream is not None:
        def run(keep=keep):
            for fn, grid, block, smem, address in work:
                launch_kernel(fn, *grid, *block, smem, stream, address, 0)
        return run

    def run_current(keep=keep):
        s = current()
        for fn, grid, block, smem, address in work:
            launch_kernel(fn, *grid, *block, smem, s, address, 0)
    return run_current


def cases(hidden, inter, n, k):
    """(name, template, key dims, pointers, scalars, op call, dispatched call, torch call)
    per op."""
    dev = torch.device("cuda", 0)
    bf = torch.bfloat16
    x = torch.randn(1, hidden, dtype=bf, device=dev)
    w = torch.randn(hidden, dtype=bf, device=dev)
    res = torch.randn(1, hidden, dtype=bf, device=dev)
    out = torch.empty_like(x)
    gu = torch.randn(1, 2 * inter, dtype=bf, device=dev)
    act = torch.empty(1, inter, dtype=bf, device=dev)
    xg = torch.randn(1, k, dtype=bf, device=dev)
    wg = torch.randn(n, k, dtype=bf, device=dev) / k ** 0.5
    yg = torch.empty(1, n, dtype=bf, device=dev)
    yield ("rms_norm", "rmsnorm", bf, {"tokens": 1, "hidden": hidden},
           {"x": x.data_ptr(), "weight": w.data_ptr(), "out": out.data_ptr()}, {"eps": 1e-6},
           lambda: kt.rms_norm(x, w, 1e-6), lambda: torch.ops.ktune.rms_norm(x, w, 1e-6),
           lambda: F.rms_norm(x, (hidden,), w, 1e-6))
    yield ("fused_add_rms_norm", "add_rmsnorm", bf, {"tokens": 1, "hidden": hidden},
           {"x": x.data_ptr(), "residual": res.data_ptr(), "weight": w.data_ptr(),
            "out": out.data_ptr()}, {"eps": 1e-6},
           lambda: kt.fused_add_rms_norm(x, res, w, 1e-6),
           lambda: torch.ops.ktune.fused_add_rms_norm(x, res, w, 1e-6),
           lambda: F.rms_norm(res.add_(x), (hidden,), w, 1e-6))
    yield ("silu_and_mul", "silu_and_mul", bf, {"tokens": 1, "inter": inter},
           {"x": gu.data_ptr(), "out": act.data_ptr()}, None,
           lambda: kt.silu_and_mul(gu), lambda: torch.ops.ktune.silu_and_mul(gu),
           lambda: F.silu(gu[..., :inter]) * gu[..., inter:])
    # The gemm's scratch as the op passes it (sized by the artifact, per device and stream):
    # ZERO_ONCE counters must be a buffer only launches that leave it zeroed have used.
    one = torch.ones(1, dtype=torch.float32, device=dev)
    kt.linear(xg, wg)
    entry = kt.cache().peek(ktune.cache_key("gemm", "bf16", {"m": 1, "n": n, "k": k}, 0))
    stream = kt._stream_handle(0)
    counters = kt._scratch(entry, "counters", 0, stream, zeroed=True) if entry else one
    partial = kt._scratch(entry, "partial", 0, stream) if entry else one
    yield ("linear", "gemm", bf, {"m": 1, "n": n, "k": k},
           {"x": xg.data_ptr(), "w": wg.data_ptr(), "out": yg.data_ptr(),
            "scale_x": one.data_ptr(), "scale_w": one.data_ptr(),
            "partial": partial.data_ptr(), "counters": counters.data_ptr()}, None,
           lambda: kt.linear(xg, wg), lambda: torch.ops.ktune.linear(xg, wg),
           lambda: F.linear(xg, wg))
    # The same key with its input cycling through more tensors than a tensor-map kernel
    # keeps bound sets of addresses (ktune._cache._MAX_BOUND): what a server sees when the
    # activations move between calls. Every call's maps cover new addresses.
    xs = [torch.randn(1, k, dtype=bf, device=dev) for _ in range(2 * ktune._cache._MAX_BOUND)]
    ops, dispatched, peers = (itertools.cycle(xs) for _ in range(3))
    yield ("linear, x moving", "gemm", bf, {"m": 1, "n": n, "k": k},
           {"x": xg.data_ptr(), "w": wg.data_ptr(), "out": yg.data_ptr(),
            "scale_x": one.data_ptr(), "scale_w": one.data_ptr(),
            "partial": partial.data_ptr(), "counters": counters.data_ptr()}, None,
           lambda: kt.linear(next(ops), wg),
           lambda: torch.ops.ktune.linear(next(dispatched), wg),
           lambda: F.linear(next(peers), wg))


def measure(args):
    # Policy "tune" by default: each key is tuned on its first call, so ktuned is idle while
    # the host is timed (FALLBACK would tune in the background, on every core).
    kt.configure(target=args.target, policy=args.policy, refresh_s=0, timeout_s=args.timeout_s)
    sleep = Timer._cycles_for(args.calls * 100.0)  # 100 us a call: longer than any enqueue
    rows = []
    for name, template, dtype, shape, pointers, scalars, op, dispatched, peer in cases(
            args.hidden, args.inter, args.n, args.k):
        op()  # first call: asks ktuned (tuning the key) and loads the kernel
        torch.cuda.synchronize()
        entry = kt.cache().peek(ktune.cache_key(template, kt._DTYPES[dtype], shape, 0))
        if entry is None:
            rows.append({"op": name, "error": "no ktune kernel (the op fell back to torch)"})
            continue
        stream = kt._stream(0, entry.kernel.driver)
        bare = bare_launcher(entry, pointers, scalars, stream)
        # What ktune.torch hands the entry: the raw handle where it launches from C.
        cache_stream = kt._stream_handle(0) if entry.fast is not None else stream
        fns = {"bare": bare, "cache": lambda: entry.launch(pointers, cache_stream, scalars),
               "op": op, "python": python_path(op), "dispatch": dispatched, "torch": peer}
        if entry.fast is not None:
            fns["fast"] = bare_launcher(entry, pointers, scalars, stream, fast=True)
        host = host_us_per_call(fns, args.calls, sleep)
        row = {"op": name, "shape": shape, "provenance": entry.provenance,
               "launches": len(entry.artifact.launches), "fast": entry.fast is not None,
               "fast_us": host.get("fast")}
        row.update({f"{k}_us": host[k]
                    for k in ("bare", "cache", "op", "python", "dispatch", "torch")})
        row["hot_path"] = kt._hot_call is not None
        row["overhead_us"] = row["op_us"] - row["bare_us"]
        # A tensor-map kernel binds per set of buffer addresses: more sets than the op's
        # own would mean the timed calls re-encoded maps (a fresh output address per call).
        row["bound_sets"] = len(entry._bound)
        row["graph_bare_us"] = graph_us(bare_launcher(entry, pointers, scalars),
                                        args.graph_ops, args.replays)
        row["graph_op_us"] = graph_us(op, args.graph_ops, args.replays)
        row["graph_added"] = row["graph_op_us"] / row["graph_bare_us"] - 1
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def report(rows, out):
    lines = ["| op | shape | launches | bare | C launch | cache | op | op, Python path | "
             "dispatch | torch eager | op - bare | graph: bare / op per call | added |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    met = True
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['op']} | {r['error']} |")
            met = False
            continue
        ok = r["overhead_us"] <= GOAL_OVERHEAD_US and abs(r["graph_added"]) <= GOAL_GRAPH_ADDED
        met = met and ok
        shape = ",".join(f"{k}={v}" for k, v in r["shape"].items())
        lines.append(
            f"| {r['op']} | {shape} | {r['launches']} | {r['bare_us']:.2f} | "
            f"{'%.2f' % r['fast_us'] if r['fast_us'] is not None else 'not built'} | "
            f"{r['cache_us']:.2f} | {r['op_us']:.2f}{'' if r['hot_path'] else ' (no hot path)'} | "
            f"{r['python_us']:.2f} | {r['dispatch_us']:.2f} | "
            f"{r['torch_us']:.2f} | "
            f"{r['overhead_us']:.2f} {'ok' if r['overhead_us'] <= GOAL_OVERHEAD_US else 'MISS'} | "
            f"{r['graph_bare_us']:.2f} / {r['graph_op_us']:.2f} | "
            f"{100 * r['graph_added']:+.1f} % |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "torch_overhead.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "torch_overhead.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(text)
    return met


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default=None, help="ktuned address (default: the client's)")
    p.add_argument("--out", default=".")
    p.add_argument("--policy", default="tune", choices=("tune", "fallback", "cache_only"),
                   help="the first call's policy (tune: ktuned idle while timing)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="deadline of each ask")
    p.add_argument("--calls", type=int, default=500,
                   help="calls per timed batch (within the launch queue's depth)")
    p.add_argument("--graph-ops", type=int, default=100, help="op calls captured per graph")
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--inter", type=int, default=14336)
    p.add_argument("--n", type=int, default=4096, help="linear's output features")
    p.add_argument("--k", type=int, default=4096, help="linear's input features")
    args = p.parse_args(argv)
    for flag in ("calls", "graph_ops", "replays", "hidden", "inter", "n", "k"):
        if getattr(args, flag) <= 0:
            p.error(f"--{flag.replace('_', '-')} must be positive")
    os.makedirs(args.out, exist_ok=True)
    torch.zeros(1, device="cuda")  # torch's context current on this thread
    return 0 if report(measure(args), args.out) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
