"""The GPU timer the benches share (bench/peers.py, bench/llama_layer.py): Timer times one call
the way triton.testing.do_bench does, with a choice of L2 flush and a GPU sleep before each
call so that only GPU time is timed; capture_graph records a call into a CUDA graph.

Imports without torch (a --dry-run needs neither); using either needs torch with CUDA.
Not thread-safe: one timer per thread.
"""

try:
    import torch
except ImportError:  # the benches' --dry-run imports this without torch
    torch = None


class Timer:
    """One timer for ktune and every peer: like triton.testing.do_bench (CUDA events around
    each call, the L2 flushed before each, fixed warm-up and measuring windows; median, 20th
    and 80th percentile in us), with a choice of flush.

    After the flush the GPU sleeps for gap_us (torch.cuda._sleep, cycles calibrated once), so
    the host has queued the start event, the call and the end event before the GPU reaches
    them: the time is the GPU's, whatever the launch path costs on the CPU.

    flush "read" (default) sums a 256 MiB buffer: it leaves the L2 full of clean lines, as
    ktune's own timer does. flush "zero" writes it (do_bench's torch.zero_): it leaves up to
    the whole L2 dirty, so the timed call also pays for writing back lines it evicts, tens of
    MB for a kernel that streams a large operand (a 32 MiB gemv weight evicts ~32 MB of dirty
    zeros); that write-back is the flush's cost, not the kernel's, and it favours kernels that
    touch less memory rather than faster ones. Both are kept so a table can say which."""

    def __init__(self, warmup_ms, rep_ms, flush="read", gap_us=200.0, device="cuda"):
        if flush not in ("read", "zero"):
            raise ValueError(f"flush: read or zero, not {flush!r}")
        if gap_us < 0:
            raise ValueError(f"gap_us: must be >= 0, not {gap_us}")
        self.warmup_ms, self.rep_ms, self.flush = warmup_ms, rep_ms, flush
        self._buf = torch.empty(64 << 20, dtype=torch.float32, device=device).fill_(1)
        self._sum = torch.empty((), dtype=torch.float32, device=device)
        self._gap_cycles = self._cycles_for(gap_us) if gap_us > 0 else 0

    @staticmethod
    def _cycles_for(us):
        """GPU sleep cycles that last about `us` at the clock a busy GPU runs at."""
        cycles = 1_000_000
        torch.cuda._sleep(cycles)  # ramps the clocks up first
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        per_us = cycles / max(start.elapsed_time(end) * 1e3, 1e-3)
        return int(us * per_us)

    def _flush(self):
        if self.flush == "zero":
            self._buf.zero_()
        else:
            torch.sum(self._buf, dim=0, out=self._sum)
        if self._gap_cycles:
            torch.cuda._sleep(self._gap_cycles)

    def __call__(self, fn):
        fn()
        torch.cuda.synchronize()
        # Estimate one call (with its flush) to size the windows, as do_bench does.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            self._flush()
            fn()
        end.record()
        torch.cuda.synchronize()
        each_ms = max(start.elapsed_time(end) / 5, 1e-3)
        n_warmup = max(1, int(self.warmup_ms / each_ms))
        n_rep = max(10, int(self.rep_ms / each_ms))
        for _ in range(n_warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
        for i in range(n_rep):
            self._flush()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        t = torch.tensor([s.elapsed_time(e) for s, e in zip(starts, ends)], dtype=torch.float64)
        q = torch.quantile(t, torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64)).tolist()
        return {"us": q[0] * 1e3, "p20_us": q[1] * 1e3, "p80_us": q[2] * 1e3}


def capture_graph(run):
    """run() captured once into a torch.cuda.CUDAGraph: warmed up on a side stream first,
    as torch asks (lazy initialisation, cuBLAS workspaces), then captured on that same stream
    (torch.cuda.graph makes it the current stream, which ktune's launches read), so state a
    caller keeps per stream (ktune.torch's gemm counters) is made by the warm-up, not inside
    the capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        run()
    torch.cuda.synchronize()
    return graph
