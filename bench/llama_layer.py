#!/usr/bin/env python3
"""A Llama-3-8B-shaped decoder layer timed three ways: torch eager, torch.compile, ktune (#15).

The layer is examples/llama_decoder_layer.py's (written once over an Ops object). Steps:
decode at each --batches size (one new token per sequence over a KV cache of --kv-len),
captured once into a CUDA graph per mode and timed as graph replays, as servers run decode;
prefill at each --prefill length (one causal sequence), timed as eager calls (torch.compile's
compiled call for compile). Modes (--modes): eager (torch's ops), compile (torch.compile of
the same module, default mode, dynamic=False, compiled and warmed up before timing), ktune
(ktune.torch's ops).

Before timing, ktune's kernels are fetched for every key of every step in one
ktune.torch.prefetch (policy FALLBACK: answered at once, tuning started in the daemon), then
each key whose kernel is not tuned for exactly its shape is tuned now with Client.tune
(random search, --tune-budget candidates; 0: the daemon's default strategy) under one
deadline, --tune-timeout-s, and the cache installs the winners (KernelCache.refresh_now);
the kernel cache's background refresh is off, so nothing is swapped under a captured graph.
Each key's provenance when timed (exact, nearest, default) is in the JSON and under the table:
a key left untuned is timed with its FALLBACK kernel and said so.

Timing: bench/timing.py's Timer, as bench/peers.py: CUDA events around each call, the L2
flushed before each by a 256 MiB read, then a GPU sleep so no launch's CPU time is timed;
median of the reps. Checks: each mode's output against eager's on the same inputs (a fresh
copy per mode: ktune updates the residual, its input, in place), every element within
|out - eager| <= atol + rtol * |eager| (--atol, --rtol; the layer rounds every intermediate
to bf16, in a different order per mode), and the graph replay's output again the same way.
Breakdown (--breakdown MODES, default eager,ktune; none: skip): every op of the layer alone,
at the step's shapes, timed by the same Timer as eager calls (compile: each op compiled
alone, one compile per op and step, minutes in all, so not by default) — GPU time with a
cold L2 per op, so the ops' sum is not the step's time (the step keeps activations in L2
and, compiled, fuses across ops). Not torch.profiler kernel times.

Goals (printed ok/MISS): decode under CUDA graphs, ktune >= 1.15x torch.compile's speed at
batch 1 and >= 1.0x at every batch; prefill ktune >= 1.0x torch.compile; ktune's output
within tolerance of eager at every step.

    python3 bench/llama_layer.py --target unix:///path/ktuned.sock --out DIR
        [--batches 1,8,32] [--prefill 512,4096] [--modes eager,compile,ktune]
        [--kv-len 1024] [--tune-budget 32] [--tune-timeout-s 300] [--breakdown eager,ktune]
        [--dry-run [--templates DIR]]

--dry-run needs no torch, GPU or ktuned: it lists every key (op, template, dtype, shape) the
layer asks ktune for at each step and checks it against the shipped manifests (the template
exists and lists the dtype; the shape has exactly the template's dims, each within its
[min, max]). Output: DIR/llama_layer.md and DIR/llama_layer.json, rewritten after every step.
Exit status: 0 when every goal is met (dry run: every key fits), 1 otherwise, 2 for bad flags.
"""

import argparse
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
import llama_decoder_layer as llama  # noqa: E402
from manifest_text import template_dims  # noqa: E402
from timing import Timer, capture_graph  # noqa: E402

torch = llama.torch
MODES = llama.MODES
GOAL_DECODE_B1 = 1.15   # ktune over torch.compile, decode batch 1 under CUDA graphs
GOAL_DECODE = 1.0       # every decode batch
GOAL_PREFILL = 1.0


# ---- flags -------------------------------------------------------------------------------

def _positive_ints(flag):
    def parse(text):
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}")
        if not values or any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"expected positive integers, not {text!r}")
        return values
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="ktuned address (default: the client's)")
    p.add_argument("--token", default=None, help="bearer token, if ktuned wants one")
    p.add_argument("--out", default=".", help="folder for llama_layer.md and .json")
    p.add_argument("--batches", type=_positive_ints("--batches"), default=[1, 8, 32],
                   help="decode batch sizes (default 1,8,32)")
    p.add_argument("--prefill", type=_positive_ints("--prefill"), default=[512, 4096],
                   help="prefill lengths in tokens (default 512,4096)")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated, among {','.join(MODES)} (default all)")
    p.add_argument("--kv-len", type=int, default=1024, help="decode's KV cache length")
    p.add_argument("--tune-budget", type=int, default=32,
                   help="candidates per key for the tune (random search); 0: the daemon's "
                        "default strategy")
    p.add_argument("--tune-timeout-s", type=float, default=300.0,
                   help="deadline for tuning every key (the rest are timed untuned)")
    p.add_argument("--atol", type=float, default=3e-2)
    p.add_argument("--rtol", type=float, default=3e-2)
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=100.0)
    p.add_argument("--breakdown", default="eager,ktune",
                   help="modes whose ops are each timed alone (none: skip; default "
                        "eager,ktune)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true",
                   help="list and check the ktune keys; needs no torch, GPU or ktuned")
    p.add_argument("--templates", default=os.environ.get(
        "KTUNE_TEMPLATES", os.path.join(ROOT, "kernel_templates")),
                   help="kernel_templates folder for --dry-run's check")
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in MODES]
    if bad or not args.modes:
        p.error(f"--modes: {','.join(bad) or 'none'} not among {','.join(MODES)}")
    args.breakdown = [m.strip() for m in args.breakdown.split(",")
                      if m.strip() and m.strip() != "none"]
    bad = [m for m in args.breakdown if m not in MODES]
    if bad:
        p.error(f"--breakdown: {','.join(bad)} not among {','.join(MODES)} (or none)")
    if args.kv_len <= 0:
        p.error(f"--kv-len: must be positive, not {args.kv_len}")
    most = llama.LlamaConfig().max_positions  # rows of the RoPE table
    if args.kv_len >= most:
        p.error(f"--kv-len: {args.kv_len} leaves no RoPE position for the new token "
                f"(the table has {most})")
    if max(args.prefill) > most:
        p.error(f"--prefill: {max(args.prefill)} tokens is past the RoPE table's {most} "
                f"positions")
    if args.tune_budget < 0:
        p.error(f"--tune-budget: must be >= 0, not {args.tune_budget}")
    if args.tune_timeout_s < 0:
        p.error(f"--tune-timeout-s: must be >= 0, not {args.tune_timeout_s}")
    return args


def steps_of(args):
    return ([llama.Step("decode", b, args.kv_len) for b in args.batches] +
            [llama.Step("prefill", t) for t in args.prefill])


# ---- dry run -----------------------------------------------------------------------------

def check_key(templates_dir, template, dtype, shape):
    """What keeps the key from being asked as is: no manifest, a dtype the template lacks,
    a dim missing or extra, a value outside the dim's [min, max]. [] when it fits."""
    man = template_dims(templates_dir, template)
    if man is None:
        return [f"no manifest {template}/{template}.textproto in {templates_dir}"]
    dtypes, dims = man
    issues = []
    if dtype not in dtypes:
        issues.append(f"dtype {dtype} not among {','.join(dtypes)}")
    for d in dims:
        if d not in shape:
            issues.append(f"dim '{d}' missing")
    for d, v in shape.items():
        if d not in dims:
            issues.append(f"'{d}' is no dim of {template}")
        elif not dims[d][0] <= v <= dims[d][1]:
            issues.append(f"{d}={v} outside [{dims[d][0]}, {dims[d][1]}]")
    return issues


def dry_run(args):
    cfg = llama.LlamaConfig()
    print(f"modes {','.join(args.modes)}; templates {args.templates}")
    problems = 0
    for step in steps_of(args):
        how = "CUDA graph replay" if step.kind == "decode" else "eager"
        kv = f", kv_len {step.kv_len}" if step.kind == "decode" else ", causal"
        print(f"{step.name} (tokens {step.tokens}{kv}; timed as {how})")
        for op, template, dtype, shape in llama.ktune_keys(cfg, step.tokens):
            issues = check_key(args.templates, template, dtype, shape)
            dims = " ".join(f"{d}={v}" for d, v in shape.items())
            print(f"  {op:<13} {template:<12} {dtype}  {dims}"
                  f"{'  MISMATCH: ' + '; '.join(issues) if issues else ''}")
            problems += bool(issues)
    keys = llama.prefetch_keys(cfg, steps_of(args))
    print(f"{len(keys)} distinct keys to prefetch; "
          f"{'every key fits its manifest' if not problems else f'{problems} keys do not fit'}")
    return 1 if problems else 0


# ---- on the GPU --------------------------------------------------------------------------

def compare(out, ref, atol, rtol):
    err = (out.float() - ref.float()).abs()
    bad = int((~(err <= atol + rtol * ref.float().abs())).sum())
    return {"ok": bad == 0, "bad": bad, "numel": ref.numel(),
            "max_abs_err": float(torch.nan_to_num(err, nan=float("inf")).max())}


def tune_keys(args, keys, meta):
    """Prefetches every key (FALLBACK), tunes those not exact within --tune-timeout-s and
    installs the winners; meta["ktune_keys"] says each key's provenance afterwards."""
    import ktune
    import ktune.torch as kt
    from ktune._cache import cache_key, key_string
    # A deadline for every ask (the prefetch compiles FALLBACK's default configs): a hung
    # ktuned must not hang the bench.
    cache = kt.configure(target=args.target, token=args.token, refresh_s=0,
                         timeout_s=max(120.0, args.tune_timeout_s))
    errors = kt.prefetch(keys)
    gpu = torch.cuda.current_device()
    deadline = time.monotonic() + args.tune_timeout_s
    tune_errors = {}
    for (template, dtype, shape), error in zip(keys, errors):
        entry = cache.peek(cache_key(template, dtype, shape, gpu))
        if error is not None or entry is None or not entry.provisional:
            continue
        left = deadline - time.monotonic()
        if left <= 1:
            tune_errors[key_string(cache_key(template, dtype, shape, gpu))] = "past the deadline"
            continue
        try:
            cache.client.tune(template, dtype, shape, gpu=gpu,
                              strategy="random" if args.tune_budget else "",
                              budget=args.tune_budget, timeout_s=left)
        except ktune.Error as e:
            tune_errors[key_string(cache_key(template, dtype, shape, gpu))] = str(e)
    cache.refresh_now()
    out = {}
    for (template, dtype, shape), error in zip(keys, errors):
        name = key_string(cache_key(template, dtype, shape, gpu))
        entry = cache.peek(cache_key(template, dtype, shape, gpu))
        out[name] = {"provenance": entry.provenance if entry else None,
                     "error": str(error) if error else tune_errors.get(name)}
    meta["ktune_keys"] = out
    untuned = [k for k, v in out.items() if v["provenance"] != "exact"]
    meta["ktune_tuning"] = (f"{len(out) - len(untuned)} of {len(out)} keys tuned for their "
                            f"exact shape (random search, budget {args.tune_budget})"
                            if args.tune_budget else
                            f"{len(out) - len(untuned)} of {len(out)} keys tuned for their "
                            f"exact shape (the daemon's default strategy)")
    if untuned:
        meta["ktune_tuning"] += "; not tuned (timed with FALLBACK or torch): " + ", ".join(untuned)


def op_calls(cfg, layer, ops, step, inputs):
    """[(op name, fn)]: each op of the layer alone at the step's shapes, on tensors made once
    (ktune's in-place ops keep rewriting theirs; their times do not depend on the values)."""
    x, positions, kv = inputs["x"], inputs["positions"], inputs["kv_cache"]
    q_size, kv_size = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    with torch.no_grad():
        h = llama.TorchOps().rms_norm(x, layer.input_norm, cfg.eps)
        qkv = torch.nn.functional.linear(h, layer.qkv)
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q, k = q.contiguous(), k.contiguous()
        attn = layer.attention(q, k, v, kv)
        gu = torch.nn.functional.linear(h, layer.gate_up)
        a = llama.TorchOps().silu_and_mul(gu)
    residual = x.clone()
    return [
        ("input_norm", lambda: ops.rms_norm(x, layer.input_norm, cfg.eps)),
        ("qkv_proj", lambda: ops.linear(h, layer.qkv)),
        ("rope", lambda: ops.rope(positions, q, k, layer.cos_sin)),
        ("attention (SDPA)", lambda: layer.attention(q, k, v, kv)),
        ("o_proj", lambda: ops.linear(attn, layer.o)),
        ("post_norm", lambda: ops.add_rms_norm(attn, residual, layer.post_norm, cfg.eps)),
        ("gate_up_proj", lambda: ops.linear(h, layer.gate_up)),
        ("silu_and_mul", lambda: ops.silu_and_mul(gu)),
        ("down_proj", lambda: ops.linear(a, layer.down)),
        ("residual_add", lambda: residual + x),
    ]


def breakdown(cfg, weights, step, inputs, mode, timer):
    layer = llama.DecoderLayer(cfg, weights, llama.KtuneOps() if mode == "ktune"
                               else llama.TorchOps())
    out = {}
    for name, fn in op_calls(cfg, layer, layer.ops, step, llama.clone_inputs(inputs)):
        try:
            call = torch.compile(fn, dynamic=False) if mode == "compile" else fn
            with torch.no_grad():
                out[name] = timer(call)["us"]
        except Exception as e:  # one op failing leaves the others
            out[name] = f"{type(e).__name__}: {e}"[:200]
    return out


def run_step(cfg, weights, layers, step, args, timer):
    """{mode: {us, check, graph_check, ...}} for one step, and the breakdown."""
    inputs = llama.make_inputs(cfg, step, args.seed + 1)
    res = {}
    ref = None
    with torch.no_grad():
        if "eager" in layers:
            ref = layers["eager"](**llama.clone_inputs(inputs))
        for mode, layer in layers.items():
            r = res[mode] = {}
            try:
                got = layer(**llama.clone_inputs(inputs))
                if ref is not None:
                    r["check"] = compare(got, ref, args.atol, args.rtol)
                bound = llama.clone_inputs(inputs)
                if step.kind == "decode":
                    outs = []
                    graph = capture_graph(lambda: outs.append(layer(**bound)))
                    bound["x"].copy_(inputs["x"])  # ktune's steps added into it
                    graph.replay()
                    torch.cuda.synchronize()
                    if ref is not None:
                        r["graph_check"] = compare(outs[-1], ref, args.atol, args.rtol)
                    r["timed"] = "CUDA graph replay"
                    r.update(timer(graph.replay))
                    del graph, outs
                else:
                    r["timed"] = "eager call"
                    r.update(timer(lambda: layer(**bound)))
            except Exception as e:  # a failing mode is a cell; the others go on
                r["error"] = f"{type(e).__name__}: {e}"[:400]
                r["traceback"] = traceback.format_exc(limit=6)
            torch.cuda.synchronize()
    parts = {}
    for mode in args.breakdown:
        if mode in layers:
            parts[mode] = breakdown(cfg, weights, step, inputs, mode, timer)
    return res, parts


def goals_of(records, modes):
    """[(goal, "ok" | "MISS (...)" | "n/a (...)")]."""
    out = []

    def ratio(rec):
        k, c = rec["modes"].get("ktune", {}), rec["modes"].get("compile", {})
        if "us" not in k or "us" not in c:
            return None
        return c["us"] / k["us"]

    for rec in records if "ktune" in modes and "compile" in modes else ():
        name, kind = rec["step"], rec["kind"]
        want = (GOAL_DECODE_B1 if rec["tokens"] == 1 else GOAL_DECODE) if kind == "decode" \
            else GOAL_PREFILL
        r = ratio(rec)
        label = f"{name}: ktune >= {want:.2f}x torch.compile"
        out.append((label, "MISS (no time)" if r is None else
                    "ok" if r >= want else f"MISS ({r:.2f}x)"))
    for rec in records if "ktune" in modes and "eager" in modes else ():
        k = rec["modes"].get("ktune", {})
        checks = [k.get("check"), k.get("graph_check")] if rec["kind"] == "decode" \
            else [k.get("check")]
        ok = all(c is not None and c["ok"] for c in checks)
        worst = max((c["max_abs_err"] for c in checks if c), default=None)
        out.append((f"{rec['step']}: ktune within tolerance of eager",
                    "ok" if ok else f"MISS (max |err| {worst})" if worst is not None else
                    f"MISS ({k.get('error', 'not checked')[:80]})"))
    return out


def write_outputs(out_dir, meta, records, modes):
    os.makedirs(out_dir, exist_ok=True)
    goals = goals_of(records, modes)
    with open(os.path.join(out_dir, "llama_layer.json"), "w") as f:
        json.dump({"meta": meta, "steps": records, "goals": dict(goals)}, f, indent=1)
    lines = ["# Llama-3-8B decoder layer: torch eager, torch.compile, ktune", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items() if k != "ktune_keys"]
    lines += ["", "| step | timed as | " + " | ".join(f"{m} us" for m in modes) +
              " | ktune speed-up over compile | max abs err vs eager |",
              "|---|---|" + "---|" * len(modes) + "---|---|"]
    for rec in records:
        cells = []
        for m in modes:
            r = rec["modes"].get(m, {})
            cells.append(f"{r['us']:.1f}" if "us" in r else r.get("error", "-")[:60])
        k, c = rec["modes"].get("ktune", {}), rec["modes"].get("compile", {})
        speed = f"{c['us'] / k['us']:.2f}x" if "us" in k and "us" in c else "-"
        errs = ", ".join(f"{m} {rec['modes'][m]['check']['max_abs_err']:.3g}" for m in modes
                         if "check" in rec["modes"].get(m, {}) and m != "eager")
        timed = "graph replay" if rec["kind"] == "decode" else "eager call"
        lines.append(f"| {rec['step']} | {timed} | " + " | ".join(cells) +
                     f" | {speed} | {errs or '-'} |")
    if any(rec.get("breakdown") for rec in records):
        lines += ["", "Per op: each op alone, timed by the same Timer (not torch.profiler) as "
                  "eager calls (compile: each op compiled alone), L2 flushed before each; us, "
                  "median. Not additive to the step's time.", ""]
        for rec in records:
            parts = rec.get("breakdown") or {}
            if not parts:
                continue
            ms = [m for m in modes if m in parts]
            lines += [f"{rec['step']}:", "", "| op | " + " | ".join(ms) + " |",
                      "|---|" + "---|" * len(ms)]
            for op in next(iter(parts.values())):
                row = [parts[m].get(op) for m in ms]
                lines.append(f"| {op} | " + " | ".join(
                    f"{v:.1f}" if isinstance(v, float) else str(v)[:60] for v in row) + " |")
            lines.append("")
    lines += ["", "Goals:", ""] + ([f"- {g}: {v}" for g, v in goals] or
                                   ["- none evaluated (no step ran, or a mode is missing)"])
    with open(os.path.join(out_dir, "llama_layer.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return goals


def run_all(args, meta, records):
    if torch is None or not torch.cuda.is_available():
        raise RuntimeError("torch with CUDA is not importable (only --dry-run works without)")
    for attr in ("cache_size_limit", "recompile_limit"):  # one compile per shape, all kept
        if hasattr(torch._dynamo.config, attr):
            setattr(torch._dynamo.config, attr, 256)
    torch.empty(1, device="cuda")  # torch's primary context, current for cuda-python
    cfg = llama.LlamaConfig()
    steps = steps_of(args)
    meta["device"] = torch.cuda.get_device_name()
    meta["torch"] = torch.__version__
    if "ktune" in args.modes:
        # Whether ktune's kernels launch programmatically (each may start while the one
        # before it finishes; KTUNE_PROGRAMMATIC_LAUNCH, read as each kernel is loaded).
        from ktune import _loaded
        meta["ktune_programmatic_launch"] = _loaded.programmatic_launches(
            _loaded.fast_launcher(_loaded.cuda_driver()))
        tune_keys(args, llama.prefetch_keys(cfg, steps), meta)
    timer = Timer(args.warmup_ms, args.rep_ms)
    weights = llama.make_weights(cfg, args.seed)
    layers = {m: llama.make_layer(cfg, weights, m) for m in args.modes}
    for step in steps:
        t0 = time.monotonic()
        res, parts = run_step(cfg, weights, layers, step, args, timer)
        records.append({"step": step.name, "kind": step.kind, "tokens": step.tokens,
                        "kv_len": step.kv_len, "modes": res, "breakdown": parts,
                        "wall_s": round(time.monotonic() - t0, 1)})
        print(f"{step.name}: " + ", ".join(
            f"{m} {r['us']:.1f} us" if "us" in r else f"{m} {r.get('error')}"
            for m, r in res.items()), flush=True)
        write_outputs(args.out, meta, records, args.modes)


def main(argv):
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    start = time.monotonic()
    meta = {"command": "bench/llama_layer.py " + " ".join(argv),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "timer": f"CUDA events around each call, warmup {args.warmup_ms} ms, rep "
                     f"{args.rep_ms} ms, median; L2 flushed by a 256 MiB read and a 200 us "
                     "GPU sleep before each (bench/timing.py)",
            "decode": f"one token per sequence over a KV cache of {args.kv_len}; each mode "
                      "captured into one CUDA graph, replays timed",
            "prefill": "one causal sequence; eager calls (compile: the compiled module's)",
            "compile": "torch.compile(layer, dynamic=False), default mode",
            "tolerance": f"|out - eager| <= {args.atol} + {args.rtol} * |eager|",
            "breakdown": (f"each op alone by the same Timer, modes {','.join(args.breakdown)}"
                          if args.breakdown else "off")}
    records = []
    try:
        run_all(args, meta, records)
    except Exception as e:  # the files are written whatever happened
        meta["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    meta["wall_s"] = round(time.monotonic() - start, 1)
    goals = write_outputs(args.out, meta, records, args.modes)
    for g, v in goals:
        print(f"{v.split(' ')[0]:<4} {g}{v[len(v.split(' ')[0]):]}")
    ok = "error" not in meta and goals and all(v == "ok" for _, v in goals)
    print(f"wrote {os.path.join(args.out, 'llama_layer.md')} and llama_layer.json: "
          f"{'every goal met' if ok else 'goals missed or failures'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
