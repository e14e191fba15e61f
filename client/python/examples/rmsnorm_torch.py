#!/usr/bin/env python3
"""Gets a tuned rmsnorm (bf16) from a running ktuned, launches it with cuda-python on torch
tensors in torch's current context and stream, and checks it against torch.

    python3 rmsnorm_torch.py TOKENS HIDDEN [--target unix:///...] [--policy tune|fallback|cache_only]

Prints the artifact's provenance and params, the max error against
x * rsqrt(mean(x^2) + eps) * w (fp32 accumulation), and the kernel's and torch's times.
Exits 1 if an element is outside the template's bf16 tolerance (atol + rtol * |ref|, from
kernel_templates/rmsnorm/rmsnorm.textproto).
"""

import argparse
import sys

import torch

import ktune

# rmsnorm.textproto: tolerances { dtype: "bf16" atol: 1e-5 rtol: 1.6e-2 }
ATOL, RTOL = 1e-5, 1.6e-2


def reference(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * w.float())


def time_ms(fn, repeats=50):
    """Median time of fn() in ms with CUDA events on torch's current stream (after warm-up)."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tokens", type=int)
    parser.add_argument("hidden", type=int)
    parser.add_argument("--target", default=None, help="ktuned address; default: as ktune's CLI")
    parser.add_argument("--token", default=None, help="bearer token, if ktuned wants one")
    parser.add_argument("--policy", default="tune", choices=["tune", "fallback", "cache_only"])
    parser.add_argument("--timeout-s", type=float, default=900.0)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    device = torch.device("cuda", torch.cuda.current_device())
    x = (torch.rand(args.tokens, args.hidden, device=device) * 2 - 1).to(torch.bfloat16)
    w = (torch.rand(args.hidden, device=device) + 0.5).to(torch.bfloat16)
    out = torch.full_like(x, float("nan"))  # poisoned: a kernel that writes nothing fails

    with ktune.Client(args.target, token=args.token, timeout_s=args.timeout_s) as client:
        art = client.get_kernel("rmsnorm", "bf16",
                                {"tokens": args.tokens, "hidden": args.hidden},
                                policy=args.policy)
    print(f"artifact: {art.provenance}{' (stale)' if art.stale else ''} params={art.params} "
          f"knobs={art.knobs} tuned time={art.metrics.time_ns / 1e3:.2f} us "
          f"({art.metrics.gbps:.0f} GB/s), {len(art.cubin)} byte cubin")
    eps = art.arg("eps").value

    torch.cuda.init()
    # The cubin goes into torch's primary context, current on this thread since x exists.
    kernel = ktune.LoadedKernel(art)
    stream = kernel.driver.CUstream(torch.cuda.current_stream().cuda_stream)
    pointers = {"x": x.data_ptr(), "weight": w.data_ptr(), "out": out.data_ptr()}
    try:
        kernel(pointers, stream)
        torch.cuda.synchronize()
        want = reference(x, w, eps)
        got = out.float()
        err = (got - want).abs()
        bad = ~(err <= ATOL + RTOL * want.abs())  # NaN counts as bad
        print(f"max abs error {err.max().item():.3e}, {int(bad.sum())} of {got.numel()} "
              f"outside atol {ATOL} + rtol {RTOL} * |ref|")
        ktune_ms = time_ms(lambda: kernel(pointers, stream))
        torch_ms = time_ms(lambda: reference(x, w, eps).to(torch.bfloat16))
        nbytes = (2 * x.numel() + w.numel()) * x.element_size()
        print(f"ktune {ktune_ms * 1e3:.1f} us ({nbytes / ktune_ms / 1e6:.0f} GB/s), "
              f"torch fp32 reference (eager) {torch_ms * 1e3:.1f} us ({nbytes / torch_ms / 1e6:.0f} GB/s) "
              f"(median, L2 not flushed)")
        return 1 if bool(bad.any()) else 0
    finally:
        kernel.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
