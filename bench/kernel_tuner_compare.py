#!/usr/bin/env python3
"""ktune's guided search beside Kernel Tuner 1.5 (bayes_opt, random_sample) on one key's space.

For one key (template, dtype, shape; default rmsnorm bf16 tokens=4096,hidden=8192) this script
  1. lists the key's valid candidates with `ktune templates --configs` (ktune's own search
     space, one JSON config a line);
  2. runs `ktune tune --strategy guided` on a fresh store and cubin cache, timing its wall
     clock around the process, and reads the winner and the distinct configs it measured from
     the store; that count is Kernel Tuner's budget unless --budget says otherwise;
  3. runs Kernel Tuner's tune_kernel over exactly that space, once per strategy: tune_params
     hold each param's values (named p_PARAM, so they cannot clash with the names in the
     C++ source), a knob that varies (min_blocks, maxrregcount) becomes a param k_KNOB, and
     the restriction accepts exactly the listed configs; strategy_options max_fevals is the
     budget. The kernel is compiled as ktune compiles it: the template's .cu, the name
     expression of its manifest (KT's nvcuda backend hands it to nvrtcAddNameExpression),
     -std=c++17 -minimal -default-device, the templates' include folder, --gpu-architecture
     of the knob, and
     the defines ktune passes (KTUNE_MAX_THREADS, KTUNE_MIN_BLOCKS, KTUNE_MAXRREG,
     KTUNE_LAUNCH_BOUNDS; server/templates/instance.cc), given through tune_kernel's
     `defines`, which then defines nothing else. Grid and block are the manifest's
     expressions evaluated per config (problem_size is a function of the config returning the
     grid, the grid divisors are empty). Inputs are filled as the manifest says;
  4. times every winner (ktune's and each strategy's) with one timer, side by side: Kernel
     Tuner itself on a one-point space per winner (the same compile path for all), --rounds
     rounds of --iterations runs each, the winners' order rotated each round; median;
  5. writes to --out: report.md (the table), report.json (the table's numbers, every common
     time, ktune's trial counts, Kernel Tuner's time split), kt_results.json (every Kernel
     Tuner evaluation), ktune.log (`ktune tune`'s output) and ktune.db (its store).

What the two searches pay for differs, and the report says it: ktune compiles on every core
and times each candidate after an L2 flush; Kernel Tuner compiles one candidate at a time
(NVRTC to PTX, then the driver's JIT; CUDA_CACHE_DISABLE=1 here, so no strategy inherits
another's JIT cache) and times 7 back-to-back runs without a flush. Where the template has a
host reference here (rmsnorm), Kernel Tuner checks every candidate against it (--no-verify
turns that off) with the manifest's tolerance, atol + rtol * |ref|; a mismatch is counted
and reported, never fatal (Kernel Tuner would end the whole search on one).

Templates whose candidates run more than one launch, switch kernels between candidates,
take tensor maps or fp8 buffers are refused with the reason: Kernel Tuner tunes one kernel
with plain arguments.

--dry-run needs no GPU: it lists the space, builds tune_params and the restriction, checks
that Kernel Tuner's Searchspace holds exactly the listed configs, prepares a sample of
configs through Kernel Tuner's own source and launch code, compares each with `ktune compile`
(kernel name, grid, block) and, where cuda-python is importable, compiles it with NVRTC as
the nvcuda backend would (the lowered name must be ktune's, the PTX's .maxntid/.minnctapersm
the config's).

Usage, from the repository root, with Kernel Tuner 1.5 importable (`pip install
kernel_tuner==1.5.0`, or on a host without internet bench/kernel_tuner_wheels.sh):
  bench/kernel_tuner_compare.py --ktune build/bin/ktune --out /tmp/ktcmp [--dry-run]
  [--template rmsnorm --dtype bf16 --shape tokens=4096,hidden=8192] [--budget N]
  [--strategies bayes_opt,random_sample] [--seed 1] [--rounds 5] [--iterations 32]
"""

import argparse
import ast
import gc
import json
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from manifest_text import DTYPE_BYTES, compile_expr, one, parse_textproto  # noqa: E402
from nvrtc_program import compile_program  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA_NAMES = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "i32": "int"}
# The knobs a Kernel Tuner param can carry: both reach the source through the defines. Fast
# math and the target are compiler options, the same for every candidate of one KT run.
PARAM_KNOBS = ("min_blocks", "maxrregcount")


# ---- the key's space, from ktune -------------------------------------------------------

def ktune_env(ktune):
    """The environment for the ktune program: the bundle's own shared libraries
    (deploy/bundle.sh puts them in lib/ beside bin/) ahead of the system's."""
    env = dict(os.environ)
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ktune))), "lib")
    if os.path.isdir(lib):
        env["LD_LIBRARY_PATH"] = lib + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    return env


def list_configs(args):
    """Every valid candidate of the key, as ktune lists them (dicts: params, knobs)."""
    cmd = [args.ktune, "templates", "--configs", args.template, "--dtype", args.dtype,
           "--shape", args.shape, "--arch", args.arch, "--templates", args.templates]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ktune_env(args.ktune))
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    configs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    if not configs:
        sys.exit(f"{args.template}: no valid candidate for {args.dtype} {args.shape}")
    return configs


def config_key(config):
    """A config's identity, the same whichever tool wrote it (ktune's JSON is sorted)."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def config_text(config):
    params = ",".join(f"{k}={v}" for k, v in sorted(config["params"].items()))
    knobs = config["knobs"]
    extra = [knobs["target"]]
    extra += [f"rreg{knobs['maxrregcount']}"] if knobs["maxrregcount"] else []
    extra += [f"minb{knobs['min_blocks']}"] if knobs["min_blocks"] > 1 else []
    extra += ["fast"] if knobs["fast_math"] else []
    return params + " " + " ".join(extra)


# ---- the key as Kernel Tuner sees it -----------------------------------------------------

def parse_shape(text):
    shape = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        shape[name.strip()] = int(value)
    return shape


class Problem:
    """One key of one template for Kernel Tuner: tune_params, the restriction, the kernel
    name, defines, grid and block per config, compiler options and the arguments."""

    def __init__(self, args, configs):
        self.template, self.dtype, self.shape = args.template, args.dtype, parse_shape(args.shape)
        self.templates = args.templates
        self.sm_count = args.sm_count
        self.sm = int(re.sub(r"\D", "", args.arch))  # KTUNE_SM: 90 for sm_90 and sm_90a
        path = os.path.join(self.templates, self.template, self.template + ".textproto")
        with open(path) as f:
            self.manifest = parse_textproto(f.read())
        with open(os.path.join(self.templates, self.template, self.template + ".cu")) as f:
            self.source = f.read()
        self.configs = configs
        self._cache = {}
        self._check_supported()
        self.launch = self._the_launch()
        self._name_params()

    def _check_supported(self):
        if self.dtype not in CUDA_NAMES or self.dtype == "i32":
            raise SystemExit(f"{self.template}: dtype {self.dtype}: only f32, f16 and bf16 here "
                             "(numpy has no fp8 for the inputs)")
        for arg in self.manifest.get("args", []):
            if "tensor_map" in arg:
                raise SystemExit(f"{self.template}: takes a tensor map ({one(arg, 'name')}); "
                                 "Kernel Tuner passes plain arguments only")
        for knob in ("fast_math", "target"):
            if len({c["knobs"][knob] for c in self.configs}) > 1:
                raise SystemExit(f"{self.template}: its candidates differ in {knob}, a compiler "
                                 "option: Kernel Tuner compiles every candidate of a run alike")

    def scope(self, config):
        """ktune's expression scope for `config` (instance.cc BaseScope), before
        KTUNE_MAX_THREADS."""
        knobs = config["knobs"]
        s = dict(self.shape)
        s.update(config["params"])
        s.update(dtype=self.dtype, KTUNE_MAXRREG=knobs["maxrregcount"],
                 KTUNE_MIN_BLOCKS=knobs["min_blocks"], KTUNE_FAST_MATH=int(knobs["fast_math"]),
                 KTUNE_SM=self.sm, KTUNE_ARCH_SPECIFIC=int(knobs["target"].endswith("a")),
                 KTUNE_SM_COUNT=self.sm_count, KTUNE_THREADS_PER_SM=2048,
                 KTUNE_REGS_PER_SM=65536)
        return s

    def _the_launch(self):
        """The manifest's one launch that every listed config runs, with its expressions
        compiled; refuses a template whose candidates run several or different ones."""
        launches = self.manifest.get("launches", [])
        whens = [compile_expr(one(l, "when", "") or "1") for l in launches]
        used = set()
        for config in self.configs:
            active = [i for i, w in enumerate(whens) if w(self.scope(config))]
            if len(active) != 1:
                raise SystemExit(f"{self.template}: {config_text(config)} runs {len(active)} "
                                 "launches; Kernel Tuner tunes one kernel")
            used.add(active[0])
        if len(used) != 1:
            raise SystemExit(f"{self.template}: the candidates switch between kernels "
                             f"{sorted(used)}; Kernel Tuner tunes one kernel per run")
        launch = launches[used.pop()]
        dims = {}
        for part in ("grid", "block"):
            d = one(launch, part, {})
            dims[part + "_text"] = [str(one(d, axis, "1")).strip() for axis in "xyz"]
            dims[part] = [compile_expr(text) for text in dims[part + "_text"]]
        return dict(kernel=one(launch, "kernel"), args=launch.get("args", []),
                    smem=compile_expr(one(launch, "shared_bytes", "") or "0"), **dims)

    def _name_params(self):
        """tune_params (params as p_NAME; knobs that vary as k_KNOB; a block dimension that
        is no bare param as k_block_X, derived) and the listed configs as rows of them."""
        params = sorted(self.configs[0]["params"])
        self.param_names = {f"p_{p}": p for p in params}
        self.knob_names = {f"k_{k}": k for k in PARAM_KNOBS
                           if len({c["knobs"][k] for c in self.configs}) > 1}
        self.block_names = []
        for axis, text in zip("xyz", self.launch["block_text"]):
            self.block_names.append(f"p_{text}" if text in params else f"k_block_{axis}")
        names = list(self.param_names) + list(self.knob_names)
        names += [n for n in self.block_names if n.startswith("k_block_")]
        self.names = names
        self.rows = {}
        for config in self.configs:
            self.rows[self.row(config)] = config
        self.tune_params = {n: sorted({r[i] for r in self.rows}) for i, n in enumerate(names)}

    def row(self, config):
        """`config` as a tuple of the tune_params' values, in self.names' order."""
        launch = self.bind(config)
        values = []
        for n in self.names:
            if n in self.param_names:
                values.append(config["params"][self.param_names[n]])
            elif n in self.knob_names:
                values.append(config["knobs"][self.knob_names[n]])
            else:
                values.append(launch["block"]["xyz".index(n[-1])])
        return tuple(values)

    def bind(self, config):
        """Grid, block, threads and dynamic shared bytes of `config`'s launch."""
        key = config_key(config)
        if key not in self._cache:
            s = self.scope(config)
            block = [f(s) for f in self.launch["block"]]
            s["KTUNE_MAX_THREADS"] = block[0] * block[1] * block[2]
            self._cache[key] = dict(block=block, grid=[f(s) for f in self.launch["grid"]],
                                    threads=s["KTUNE_MAX_THREADS"], smem=self.launch["smem"](s))
        return self._cache[key]

    def config_of(self, params):
        """The listed config a Kernel Tuner params dict stands for."""
        return self.rows[tuple(params[n] for n in self.names)]

    def kernel_name(self):
        """The manifest's name expression with {P} as p_P: Kernel Tuner replaces each tune
        param's name by its value (util.replace_param_occurrences, whole tokens only)."""
        name = self.launch["kernel"].replace("{dtype}", CUDA_NAMES[self.dtype])
        for p_name, p in self.param_names.items():
            name = name.replace("{" + p + "}", p_name)
        return name

    def defines(self):
        """The -D options of ktune's Instance::CompileOptions, as Kernel Tuner defines (it
        writes `#define NAME VALUE` lines above the source, then `#line 1`)."""
        def threads(p):
            return str(self.bind(self.config_of(p))["threads"])

        def knob(name):
            return lambda p: str(self.config_of(p)["knobs"][name])

        def launch_bounds(p):
            config = self.config_of(p)
            rreg = config["knobs"]["maxrregcount"]
            if rreg > 0:  # ptxas ignores --maxrregcount beside __launch_bounds__
                return f"__maxnreg__({rreg})"
            return f"__launch_bounds__({threads(p)}, {config['knobs']['min_blocks']})"
        return {"KTUNE_MAX_THREADS": threads, "KTUNE_MIN_BLOCKS": knob("min_blocks"),
                "KTUNE_MAXRREG": knob("maxrregcount"), "KTUNE_LAUNCH_BOUNDS": launch_bounds}

    def problem_size(self, p):
        """Kernel Tuner's problem_size: the grid itself (the grid divisors are empty)."""
        return tuple(self.bind(self.config_of(p))["grid"])

    def smem_size(self, p):
        return self.bind(self.config_of(p))["smem"]

    def compiler_options(self, cuda_include):
        """ktune's NVRTC options (nvrtc_compiler.cc) less -Xptxas=-v, which changes no code."""
        knobs = self.configs[0]["knobs"]
        opts = ["-std=c++17", "-minimal", "-default-device",
                f"--gpu-architecture={knobs['target']}",
                f"--include-path={os.path.join(self.templates, 'include')}"]
        if cuda_include:
            opts.append(f"--include-path={cuda_include}")
        if knobs["fast_math"]:
            opts.append("--use_fast_math")
        if "k_maxrregcount" not in self.knob_names and knobs["maxrregcount"] > 0:
            opts.append(f"--maxrregcount={knobs['maxrregcount']}")
        return opts

    def restriction(self):
        """Kernel Tuner's restriction: true for exactly the listed configs. A plain function
        of one dict argument and without a lambda in its body: Kernel Tuner parses the source
        of lambda restrictions (util.convert_constraint_lambdas) and calls a one-argument
        function with the whole config (searchspace.py's monolithic form)."""
        allowed, names = frozenset(self.rows), tuple(self.names)

        def accept(p):
            return tuple(p[n] for n in names) in allowed
        return accept


# ---- inputs, and the host references the KT runs check against ---------------------------

NP_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i32": np.int32}


def to_device_dtype(values, dtype):
    """float64 values as the buffer's element type (bf16 as uint16 bit patterns, rounded to
    nearest even: numpy has no bfloat16)."""
    if dtype not in NP_DTYPES:
        raise SystemExit(f"buffer dtype {dtype}: not supported here")
    if dtype == "bf16":
        u = values.astype(np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return values.astype(NP_DTYPES[dtype])


def to_float(array, dtype):
    if dtype == "bf16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(np.float32)


def make_arguments(problem, seed):
    """The launch's arguments in order, filled as the manifest says, and {arg name: (value,
    element type)} for the references."""
    rng = np.random.default_rng(seed)
    scope = problem.scope(problem.configs[0])
    by_name = {one(a, "name"): a for a in problem.manifest.get("args", [])}
    out, named = [], {}
    for name in problem.launch["args"]:
        arg = by_name[name]
        if "scalar" in arg:
            sc = one(arg, "scalar")
            kind = one(sc, "type")
            if kind == "f32":
                out.append(np.float32(one(sc, "number", 0.0)))
            else:
                value = compile_expr(str(one(sc, "expr")))(scope)
                out.append(np.int32(value) if kind == "i32" else np.int64(value))
            named[name] = (out[-1], kind)
            continue
        buf = one(arg, "buffer")
        overrides = {one(e, "key"): one(e, "value") for e in buf.get("dtype_for", [])}
        dtype = one(buf, "dtype")
        dtype = overrides.get(problem.dtype, problem.dtype if dtype == "dtype" else dtype)
        count = compile_expr(str(one(buf, "count")))(scope)
        out.append(fill(rng, one(buf, "fill", {}), one(buf, "role"), count, dtype))
        named[name] = (out[-1], dtype)
    return out, named


def fill(rng, spec, role, count, dtype):
    """One buffer's contents. An output without a fill is poisoned with all-ones bits (NaN
    for the float types), as ktune's worker does, so a kernel that writes nothing fails."""
    kind = one(spec, "kind", "")
    lo, hi = float(one(spec, "lo", 0.0)), float(one(spec, "hi", 0.0))
    if kind == "UNIFORM":
        return to_device_dtype(rng.uniform(lo, hi, count), dtype)
    if kind == "NORMAL":
        return to_device_dtype(rng.normal(lo, hi, count), dtype)
    if kind == "CONSTANT":
        return to_device_dtype(np.full(count, lo), dtype)
    if kind == "" and role in ("OUTPUT", "INOUT"):
        if dtype not in NP_DTYPES:
            raise SystemExit(f"buffer dtype {dtype}: not supported here")
        return np.full(count * DTYPE_BYTES[dtype], 0xFF, np.uint8).view(NP_DTYPES[dtype])
    return to_device_dtype(np.zeros(count), dtype)


def rmsnorm_reference(named):
    """rmsnorm's output in float64 from the inputs as stored (the manifest's formula)."""
    x = to_float(*named["x"]).astype(np.float64)
    w = to_float(*named["weight"]).astype(np.float64)
    tokens, hidden = int(named["tokens"][0]), int(named["hidden"][0])
    x = x.reshape(tokens, hidden)
    inv = 1.0 / np.sqrt((x * x).sum(axis=1) / hidden + float(named["eps"][0]))
    return {"out": (x * inv[:, None] * w[None, :]).astype(np.float32).reshape(-1)}


REFERENCES = {"rmsnorm": rmsnorm_reference}


class Checker:
    """Kernel Tuner's answer= and verify= for a template with a host reference. verify()
    keeps its verdict for the observer (kt_call) to put in the same candidate's result, and
    returns True: Kernel Tuner ends the whole search on a False, and a wrong candidate is a
    result to report, not a reason to stop."""

    def __init__(self, problem, arguments, named):
        tol = [t for t in problem.manifest.get("tolerances", [])
               if one(t, "dtype") == problem.dtype]
        self.atol = float(one(tol[0], "atol", 0.0)) if tol else 0.0
        self.rtol = float(one(tol[0], "rtol", 0.0)) if tol else 0.0
        if tol and one(tol[0], "atol_scale"):  # instance.cc BindTolerance: atol * sqrt(scale)
            scale = compile_expr(one(tol[0], "atol_scale"))(problem.scope(problem.configs[0]))
            self.atol *= scale ** 0.5
        refs = REFERENCES[problem.template](named)
        self.answer = [None] * len(arguments)
        self.dtypes = {}
        for i, name in enumerate(problem.launch["args"]):
            if name in refs:
                self.answer[i] = refs[name]
                self.dtypes[i] = named[name][1]
        self.pending = None

    def take(self):
        """The last candidate's verdict (None: not checked), once."""
        verdict, self.pending = self.pending, None
        return verdict

    def verify(self, answer, result_host, atol=None):
        ok = True
        for i, ref in enumerate(answer):
            if ref is None:
                continue
            got = to_float(result_host[i], self.dtypes[i])
            ok = ok and bool(np.all(np.abs(got - ref) <= self.atol + self.rtol * np.abs(ref)))
        self.pending = ok
        return True


# ---- ktune's search ----------------------------------------------------------------------

def run_ktune(args, out):
    """`ktune tune --strategy guided` on a fresh store and cubin cache (nothing to warm-start
    from, nothing compiled before), timed around the process. The store is copied to
    out/ktune.db (one file: every trial's config and time), the cubins are dropped."""
    with tempfile.TemporaryDirectory(prefix="ktcmp-") as work:
        db = os.path.join(work, "ktune.db")
        cmd = [args.ktune, "tune", args.template, "--dtype", args.dtype, "--shape", args.shape,
               "--strategy", "guided", "--db", db, "--cache-dir", os.path.join(work, "cubins"),
               "--quiet", "--seed", str(args.seed), "--top", "10", "--templates", args.templates]
        cmd += args.ktune_arg
        print("ktune:", " ".join(cmd), flush=True)
        start = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=ktune_env(args.ktune))
        wall = time.perf_counter() - start
        with open(os.path.join(out, "ktune.log"), "w") as f:
            f.write(f"$ {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
        if r.returncode != 0:
            sys.exit(f"ktune tune: exit {r.returncode}: {r.stderr.strip()}")
        stored = read_store(db, os.path.join(out, "ktune.db"))
    return dict(wall_s=wall, command=cmd, **parse_tune_output(r.stdout), **stored)


def parse_tune_output(text):
    """The headline lines of `ktune tune` (tune_command.cc PrintWinner)."""
    patterns = {"device": r"^tuned\s+.* on (.*)$", "own_time_us": r"^time\s+([\d.]+) us",
                "trials": r"^trials\s+(\d+) in", "seconds": r"^trials\s+\d+ in ([\d.]+) s",
                "strategy": r"^search\s+(\S+) over", "space": r"^search\s+\S+ over (\d+) cand",
                "stop": r"^search\s+.*; stopped: (.*)$"}
    out = {}
    for field, pattern in patterns.items():
        m = re.search(pattern, text, re.M)
        if not m:
            sys.exit(f"ktune tune: no '{field}' in its output:\n{text}")
        out[field] = m.group(1)
    for field, kind in (("own_time_us", float), ("trials", int), ("seconds", float),
                        ("space", int)):
        out[field] = kind(out[field])
    return out


def read_store(db, copy_to):
    """The winner's config and the distinct configs ktune measured, from its store; the store
    copied to `copy_to` as one file (SQLite's backup: no WAL beside it)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        if os.path.exists(copy_to):
            os.remove(copy_to)
        copy = sqlite3.connect(copy_to)
        conn.backup(copy)
        copy.close()
        rows = conn.execute("SELECT config, job_id, nvrtc_version FROM entries").fetchall()
        if len(rows) != 1:
            sys.exit(f"{db}: {len(rows)} entries, expected the one key tuned")
        config, job, nvrtc = rows[0]
        trials = conn.execute("SELECT config, outcome FROM trials WHERE job_id = ?",
                              (job,)).fetchall()
    finally:
        conn.close()
    measured = {config_key(json.loads(c)) for c, _ in trials}
    outcomes = {}
    for _, outcome in trials:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return dict(winner=json.loads(config), measured=len(measured), outcomes=outcomes,
                nvrtc_version=nvrtc)


# ---- Kernel Tuner's searches and the common timer ----------------------------------------

def cuda_include():
    """The toolkit headers ktune's NVRTC uses (nvrtc_compiler.cc FindCudaInclude)."""
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "include", "cuda_fp16.h")):
            return os.path.join(root, "include")
    return None


def kt_call(problem, kt_inputs, tune_params, strategy, options, iterations):
    """One tune_kernel over `tune_params` (restricted to the listed configs), checked by the
    host reference where there is one: each result's "ref_ok" is its verdict (None: not
    checked). Returns (results, env, wall seconds)."""
    import kernel_tuner
    from kernel_tuner.observers.observer import BenchmarkObserver
    arguments, checker = kt_inputs

    class Verdict(BenchmarkObserver):
        """Kernel Tuner verifies a candidate, then benchmarks it and merges its observers'
        get_results into that candidate's result: the verdict lands beside its time."""

        def get_results(self):
            return {"ref_ok": checker.take() if checker else None}
    smem = any(problem.bind(c)["smem"] for c in problem.configs)
    start = time.perf_counter()
    results, env = kernel_tuner.tune_kernel(
        problem.kernel_name(), problem.source, problem.problem_size, arguments, tune_params,
        grid_div_x=[], grid_div_y=[], grid_div_z=[], restrictions=problem.restriction(),
        answer=checker.answer if checker else None, verify=checker.verify if checker else None,
        lang="nvcuda", compiler_options=problem.compiler_options(cuda_include()),
        defines=problem.defines(), block_size_names=list(problem.block_names),
        smem_args={"size": problem.smem_size} if smem else None, iterations=iterations,
        strategy=strategy, strategy_options=options, observers=[Verdict()], quiet=True,
        verbose=False)
    wall = time.perf_counter() - start
    gc.collect()  # the backend frees its device buffers when collected
    # None: a config the runner skipped once the budget was spent.
    return [r for r in results if r], env, wall


def parse_strategies(text):
    """--strategies: "NAME[:OPTION=VALUE[:...]],..." -> {label: (name, strategy_options)},
    e.g. "bayes_opt:popsize=8" (values as Python literals, else strings)."""
    out = {}
    for label in (s.strip() for s in text.split(",")):
        if not label:
            continue
        name, *pairs = label.split(":")
        options = {}
        for pair in pairs:
            key, _, value = pair.partition("=")
            try:
                options[key] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                options[key] = value
        out[label] = (name, options)
    return out


def kt_search(problem, kt_inputs, strategy, budget, args):
    """One Kernel Tuner strategy (name, options) over the whole space, `budget` evaluations
    at most."""
    name, options = strategy
    random.seed(args.seed)  # the strategies draw from Python's and numpy's generators
    np.random.seed(args.seed)
    print(f"kernel_tuner {name} {options or ''}: budget {budget}", flush=True)
    try:
        results, env, wall = kt_call(problem, kt_inputs, problem.tune_params, name,
                                     dict(options, max_fevals=budget), args.kt_iterations)
    except Exception as e:  # noqa: BLE001 - one strategy's failure is a row of the report
        return dict(error=f"{type(e).__name__}: {e}")
    timed = [r for r in results if "__error__" not in r and isinstance(r.get("time"), float)]
    # A candidate the host reference rejects never wins, as in ktune.
    ok = [r for r in timed if r.get("ref_ok") is not False]
    best = min(ok, key=lambda r: r["time"]) if ok else None
    timings = {k: env.get(k) for k in ("total_compile_time", "total_verification_time",
                                       "total_benchmark_time", "total_strategy_time",
                                       "total_framework_time", "overhead_time")}
    return dict(wall_s=wall, measured=len(results), ok=len(ok),
                wrong=sum(r.get("ref_ok") is False for r in timed) if kt_inputs[1] else None,
                winner=problem.config_of(best) if best else None,
                own_time_us=best["time"] * 1000 if best else None, device=env.get("device_name"),
                timings_ms=timings, results=results)


def common_times(problem, kt_inputs, winners, args):
    """Each distinct winner timed by Kernel Tuner on a one-point space, --rounds rounds of
    --iterations runs, the order rotated each round so none always runs first. Returns
    {config key: {"times_us": [...], "median_us": .., "correct": bool or None}}."""
    distinct = list({config_key(c): c for c in winners if c}.values())
    out = {config_key(c): {"times_us": [], "verdicts": []} for c in distinct}
    for r in range(args.rounds):
        for c in distinct[r % len(distinct):] + distinct[:r % len(distinct)]:
            point = {n: [v] for n, v in zip(problem.names, problem.row(c))}
            results, _, _ = kt_call(problem, kt_inputs, point, "brute_force", None,
                                    args.iterations)
            entry = out[config_key(c)]
            entry["times_us"] += [t * 1000 for t in results[0].get("times", [])]
            entry["verdicts"].append(results[0].get("ref_ok"))
    for entry in out.values():
        verdicts = [v for v in entry.pop("verdicts") if v is not None]
        entry["correct"] = all(verdicts) if verdicts else None
        entry["median_us"] = statistics.median(entry["times_us"]) if entry["times_us"] else None
    return out


# ---- the report --------------------------------------------------------------------------

def rows_of(ktune, searches, timed):
    """One row per tuner: wall time, candidates measured, winner, its own time and the
    common timer's, and the ratio of the latter to ktune's winner's."""
    base = timed.get(config_key(ktune["winner"]), {}).get("median_us")
    rows = [dict(tuner="ktune guided", wall_s=ktune["wall_s"], measured=ktune["measured"],
                 winner=ktune["winner"], own_time_us=ktune["own_time_us"],
                 wrong=ktune["outcomes"].get("wrong_result", 0))]
    for strategy, s in searches.items():
        rows.append(dict(tuner=f"KT {strategy}", error=s.get("error"), wall_s=s.get("wall_s"),
                         measured=s.get("measured"), winner=s.get("winner"),
                         own_time_us=s.get("own_time_us"), wrong=s.get("wrong")))
    for row in rows:
        t = timed.get(config_key(row["winner"]), {}) if row["winner"] else {}
        row["common_us"] = t.get("median_us")
        row["correct"] = t.get("correct")
        row["vs_ktune"] = row["common_us"] / base if row["common_us"] and base else None
    return rows


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def markdown(args, ktune, rows, space, budget, searches):
    lines = [f"## ktune guided vs Kernel Tuner 1.5: {args.template} {args.dtype} {args.shape}",
             "",
             f"Device: {ktune['device']}. Space: {space} candidates (`ktune templates "
             f"--configs`; ktune searched {ktune['space']}). Kernel Tuner's budget: {budget} "
             f"evaluations (max_fevals; ktune measured {ktune['measured']} distinct configs, "
             f"{ktune['trials']} trials, stopped: {ktune['stop']}). Seed {args.seed}. "
             f"NVRTC: ktune's {ktune['nvrtc_version']}, Kernel Tuner's (cuda-python) "
             f"{nvrtc_version()}.",
             "",
             "| tuner | wall s | measured | wrong | winner | own time us | common us | vs ktune |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['tuner']} | failed: {r['error'][:200]} | | | | | | |")
            continue
        winner = config_text(r["winner"]) if r["winner"] else "-"
        if r["correct"] is False:
            winner += " (WRONG by the host reference)"
        lines.append(f"| {r['tuner']} | {fmt(r['wall_s'], '.1f')} | {fmt(r['measured'], 'd')} "
                     f"| {fmt(r['wrong'], 'd')} | {winner} | {fmt(r['own_time_us'], '.2f')} | "
                     f"{fmt(r['common_us'], '.2f')} | {fmt(r['vs_ktune'], '.3f')} |")
    lines += ["", "wall s: around the whole search (ktune: the `ktune tune` process, which "
              "compiles on every core; Kernel Tuner: the tune_kernel call, context and input "
              "upload included, one compile at a time). wrong: candidates measured that "
              "failed the check against a reference (ktune's own on the GPU; Kernel Tuner: "
              "this script's host reference, '-' where there is none). own time: "
              "each tuner's own measurement of its winner (ktune: L2 flushed, median; Kernel "
              f"Tuner: mean of {args.kt_iterations} back-to-back runs). common: Kernel Tuner "
              f"on a one-point space per winner, {args.rounds} rounds x {args.iterations} "
              "runs, median; vs ktune: common time over ktune's winner's (< 1: faster)."]
    for strategy, s in searches.items():
        if strategy.startswith("bayes_opt") and "popsize" not in strategy and budget <= 20:
            lines.append(f"KT {strategy}: a budget of {budget} is within its initial sample "
                         "(popsize, 20 by default): it never reaches the model-guided phase.")
        if s.get("timings_ms"):
            parts = ", ".join(f"{k.replace('total_', '')} {v / 1000:.1f} s"
                              for k, v in s["timings_ms"].items() if v is not None)
            lines.append(f"KT {strategy}: {parts}.")
    return "\n".join(lines) + "\n"


def write_report(args, ktune, searches, timed, space, budget):
    rows = rows_of(ktune, searches, timed)
    text = markdown(args, ktune, rows, space, budget, searches)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    doc = dict(key=dict(template=args.template, dtype=args.dtype, shape=args.shape),
               space=space, budget=budget, seed=args.seed, ktune=ktune, rows=rows,
               kernel_tuner={k: {f: v for f, v in s.items() if f != "results"}
                             for k, s in searches.items()},
               common_times=timed, nvrtc_here=nvrtc_version())
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    with open(os.path.join(args.out, "kt_results.json"), "w") as f:
        json.dump({k: s.get("results", []) for k, s in searches.items()}, f, default=str)
    print(text)


def nvrtc_version():
    """The NVRTC cuda-python loads (Kernel Tuner's compiler), for the report."""
    try:
        from cuda.bindings import nvrtc
        _, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}"
    except Exception:  # noqa: BLE001 - no cuda-python: said as such
        return None


# ---- the dry run: everything but the GPU -------------------------------------------------

def kt_prepare(problem, params):
    """What Kernel Tuner makes of `params`: (kernel name, source, block, grid), through
    its own code (core.KernelSource, util.setup_block_and_grid)."""
    from kernel_tuner import core, util
    names = list(problem.block_names)
    threads, grid = util.setup_block_and_grid(problem.problem_size, ([], [], []), params, names)
    source = core.KernelSource(problem.kernel_name(), problem.source, "nvcuda", problem.defines())
    name, text, _ = source.prepare_list_of_files(problem.kernel_name(), params, grid, threads,
                                                 names)
    return name, text, list(threads), list(grid)


def ktune_compile(args, config, cache):
    """`ktune compile` of `config`: {kernel, lowered, grid, block} as it prints them."""
    cmd = [args.ktune, "compile", args.template, "--dtype", args.dtype, "--shape", args.shape,
           "--arch", config["knobs"]["target"], "--cache-dir", cache,
           "--min-blocks", str(config["knobs"]["min_blocks"]),
           "--maxrregcount", str(config["knobs"]["maxrregcount"])]
    cmd += ["--fast-math"] if config["knobs"]["fast_math"] else []
    cmd += ["--templates", args.templates]
    for name, value in sorted(config["params"].items()):
        cmd += ["--param", f"{name}={value}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ktune_env(args.ktune))
    if r.returncode != 0:
        raise RuntimeError(f"ktune compile: exit {r.returncode}: {r.stderr.strip()}")
    m = re.search(r"^kernel\s+(.*)\n^lowered\s+(\S+)\n^grid\s+\[(\d+), (\d+), (\d+)\]\s+"
                  r"block \[(\d+), (\d+), (\d+)\]", r.stdout, re.M)
    if not m:
        raise RuntimeError(f"ktune compile: unexpected output:\n{r.stdout}")
    return dict(kernel=m.group(1).strip(), lowered=m.group(2),
                grid=[int(g) for g in m.group(3, 4, 5)], block=[int(b) for b in m.group(6, 7, 8)])


def nvrtc_compile(problem, name, text):
    """Compiles `text` as the nvcuda backend's compile() does, up to the PTX (the rest needs
    a GPU); returns (lowered name, PTX text). None without cuda-python."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return None
    from kernel_tuner.utils.nvcuda import find_cuda_home
    opts = list(problem.compiler_options(cuda_include()))
    if find_cuda_home():  # what the backend adds
        opts.append(f"-I{os.path.join(find_cuda_home(), 'include')}")
    _, prog = nvrtc.nvrtcCreateProgram(text.encode(), b"CUDAProgram", 0, [], [])
    try:
        nvrtc.nvrtcAddNameExpression(prog, name.encode())
        compile_program(nvrtc, prog, opts)
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        _, lowered = nvrtc.nvrtcGetLoweredName(prog, name.encode())
        return lowered.decode(), ptx.decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def check_space(problem, configs):
    """Kernel Tuner's Searchspace from tune_params and the restriction must be the list."""
    from kernel_tuner.searchspace import Searchspace
    # 1024: the max_threads tune_kernel passes for an H200 (cudaDevAttrMaxThreadsPerBlock).
    space = Searchspace(problem.tune_params, problem.restriction(), 1024)
    same = set(space.list) == set(problem.rows)
    print(f"space: {len(configs)} listed, {len(problem.rows)} distinct rows, "
          f"Kernel Tuner's Searchspace {space.size}: {'same set' if same else 'DIFFERENT'}")
    return same and space.size == len(configs) == len(problem.rows)


def check_config(args, problem, config, cache):
    """One config through Kernel Tuner's preparation, against `ktune compile` and NVRTC."""
    params = dict(zip(problem.names, problem.row(config)))
    name, text, block, grid = kt_prepare(problem, params)
    want = ktune_compile(args, config, cache)
    problems = []
    if re.sub(r"\s", "", name) != re.sub(r"\s", "", want["kernel"]):
        problems.append(f"kernel {name!r}, ktune {want['kernel']!r}")
    if (block, grid) != (want["block"], want["grid"]):
        problems.append(f"block {block} grid {grid}, ktune block {want['block']} "
                        f"grid {want['grid']}")
    built = nvrtc_compile(problem, name, text)
    if built:
        lowered, ptx = built
        if lowered != want["lowered"]:
            problems.append(f"lowered {lowered}, ktune {want['lowered']}")
        bounds = re.search(r"\.maxntid (\d+), 1, 1\s+\.minnctapersm (\d+)", ptx)
        knobs = config["knobs"]
        if knobs["maxrregcount"] == 0 and (not bounds or [int(b) for b in bounds.groups()] !=
                                           [block[0] * block[1] * block[2], knobs["min_blocks"]]):
            problems.append(f"launch bounds in the PTX: {bounds.groups() if bounds else None}")
    status = "ok" if not problems else "MISMATCH: " + "; ".join(problems)
    print(f"  {config_text(config)}: {name} block {block} grid {grid}"
          f"{' nvrtc ok' if built else ' (no cuda-python: not compiled)'} -> {status}")
    return not problems


def check_reference(problem, seed):
    """The arguments as the manifest fills them, and the host check on known answers: the
    reference's own output rounded to the buffer's type passes, the poisoned output fails."""
    arguments, named = make_arguments(problem, seed)
    print("arguments:", ", ".join(f"{n}={a.dtype}[{a.size}]" if isinstance(a, np.ndarray)
                                  else f"{n}={a!r}" for n, a in zip(problem.launch["args"],
                                                                    arguments)))
    if problem.template not in REFERENCES:
        print("reference: none here for", problem.template, "(Kernel Tuner will not check)")
        return True
    checker = Checker(problem, arguments, named)
    good = [None] * len(arguments)
    for i, ref in enumerate(checker.answer):
        if ref is not None:
            good[i] = to_device_dtype(ref.astype(np.float64), checker.dtypes[i])
    checker.verify(checker.answer, good)
    passes = checker.take()
    checker.verify(checker.answer, arguments)  # the outputs as uploaded: poisoned
    fails = checker.take() is False
    print(f"reference: rounded answer passes {passes}, poison fails {fails} "
          f"(atol {checker.atol}, rtol {checker.rtol})")
    return passes is True and fails


def check_strategies(text):
    """Each strategy of --strategies imports (bayes_opt needs scikit-learn and scipy)."""
    from kernel_tuner.interface import strategy_map
    ok = True
    for label, (name, options) in parse_strategies(text).items():
        try:
            strategy_map[name].tune  # noqa: B018 - the attribute imports the module
            print(f"strategy {label}: {name} {options or ''} imports")
        except (KeyError, ImportError) as e:
            print(f"strategy {label}: FAILED: {type(e).__name__}: {e}")
            ok = False
    return ok


def dry_run(args, problem, configs):
    print(f"{args.template} {args.dtype} {args.shape}: {len(configs)} candidates")
    print("tune_params:", json.dumps(problem.tune_params))
    print("kernel_name:", problem.kernel_name())
    print("block_size_names:", problem.block_names)
    print("compiler_options:", problem.compiler_options(cuda_include()))
    ok = check_space(problem, configs)
    ok = check_strategies(args.strategies) and ok
    step = max(1, len(configs) // max(1, args.check))
    sample = configs[::step][:args.check] if args.check > 0 else []
    sample += [configs[-1]] if args.check > 0 and configs[-1] not in sample else []
    print(f"{len(sample)} configs through Kernel Tuner's preparation, ktune compile and NVRTC:")
    with tempfile.TemporaryDirectory() as cache:
        ok = all([check_config(args, problem, c, cache) for c in sample]) and ok
    ok = check_reference(problem, args.seed) and ok
    print("dry run:", "ok" if ok else "FAILED")
    return 0 if ok else 1


# ---- main --------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--template", default="rmsnorm")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--shape", default="tokens=4096,hidden=8192")
    p.add_argument("--arch", default="sm_90", help="for `ktune templates --configs`")
    p.add_argument("--sm-count", type=int, default=132,
                   help="KTUNE_SM_COUNT in grid expressions (132: H200)")
    p.add_argument("--budget", type=int, default=0,
                   help="Kernel Tuner's max_fevals (0: the configs ktune measured)")
    p.add_argument("--strategies", default="bayes_opt,random_sample",
                   help="comma-separated Kernel Tuner strategies, each NAME[:OPT=VALUE...] "
                   "(e.g. bayes_opt:popsize=8); '' for none")
    p.add_argument("--ktune", default=os.path.join(REPO, "build", "bin", "ktune"))
    p.add_argument("--ktune-arg", action="append", default=[],
                   help="one more argument for `ktune tune` (repeatable), e.g. --worker=PATH")
    p.add_argument("--templates", default="",
                   help="templates folder, for ktune and this script alike (default: "
                   "$KTUNE_TEMPLATES, else the source tree's)")
    p.add_argument("--out", default="kernel_tuner_compare.out")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kt-iterations", type=int, default=7,
                   help="Kernel Tuner's runs per candidate while searching (its default 7)")
    p.add_argument("--rounds", type=int, default=5, help="common timer rounds (0: none)")
    p.add_argument("--iterations", type=int, default=32, help="common timer runs per round")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="Kernel Tuner runs without the host reference check")
    p.add_argument("--dry-run", action="store_true", help="no GPU: check the set-up only")
    p.add_argument("--check", type=int, default=8,
                   help="dry run: configs compared with ktune compile and NVRTC")
    return p.parse_args()


def main():
    args = parse_args()
    # One folder for both sides, named to ktune explicitly: its own default could be another
    # copy (<prefix>/share/ktune/kernel_templates).
    args.templates = os.path.abspath(args.templates or os.environ.get("KTUNE_TEMPLATES") or
                                     os.path.join(REPO, "kernel_templates"))
    # Before any CUDA call: every Kernel Tuner run JIT-compiles its PTX from scratch, as the
    # first one would, instead of finding the driver's cache warm from the one before.
    os.environ["CUDA_CACHE_DISABLE"] = "1"
    if not os.environ.get("CUDA_HOME") and cuda_include():
        os.environ["CUDA_HOME"] = os.path.dirname(cuda_include())  # Kernel Tuner's -I, NVRTC
    configs = list_configs(args)
    problem = Problem(args, configs)
    if args.dry_run:
        return dry_run(args, problem, configs)
    os.makedirs(args.out, exist_ok=True)
    ktune = run_ktune(args, args.out)
    budget = args.budget or ktune["measured"]
    arguments, named = make_arguments(problem, args.seed)
    # The reference is computed once, here: every Kernel Tuner run checks against it.
    checker = Checker(problem, arguments, named) if args.verify and \
        args.template in REFERENCES else None
    kt_inputs = (arguments, checker)
    strategies = parse_strategies(args.strategies)
    searches = {label: kt_search(problem, kt_inputs, strategy, budget, args)
                for label, strategy in strategies.items()}
    if config_key(ktune["winner"]) not in {config_key(c) for c in configs}:
        print("warning: ktune's winner is not in the listed space; timed anyway", flush=True)
        problem.rows[problem.row(ktune["winner"])] = ktune["winner"]
    winners = [ktune["winner"]] + [s.get("winner") for s in searches.values()]
    timed = common_times(problem, kt_inputs, winners, args) if args.rounds > 0 else {}
    write_report(args, ktune, searches, timed, len(configs), budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
