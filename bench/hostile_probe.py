#!/usr/bin/env python3
"""Hostile probe of ktuned and ktune (issue #17, "Hardening").

Starts its own ktuned processes on unix sockets and stores in a temporary folder (the GPU
played by fake_ktune_worker, or none: compile-only), throws six classes of hostile input at
them and at the ktune CLI, checks every answer, prints a summary table and exits 0 only when
every class has 0 silent accepts, 0 unclear errors, 0 crashes and 0 wedges (1 otherwise, 2
when the programs are missing).

  1. rpc       bad RPC input on every method of ktune.v1.Ktune (ids, dtypes, shapes, policies,
               GPUs, strategies, budgets, limits, tokens, oversize and unparseable bytes):
               each must be a non-OK status with a message naming the field (an error of
               one GetKernels key: its KernelResult), within a 10 s deadline; calls whose
               1-50 ms deadline passes mid-work end by it; afterwards the daemon is alive
               and answers a good request.
  2. flags     ktuned and ktune started with bad flag values: non-zero exit (not a signal)
               naming the flag within 10 s; the flags the README documents as accepted must
               start (ktuned: "serving on").
  3. imports   mutated `ktune cache export` files for `ktune cache import`: refused (exit
               non-zero, naming the field, entries[i] for an entry's), the store unchanged
               (sha256 of its files and `ktune cache ls --json`). A control import of the
               unmutated file must succeed, or the class proves nothing.
  4. manifests ~300 copies of the shipped templates with one manifest mutated (line deleted
               or doubled, a number made 0/-1/inf/nan/huge, a field renamed, garbage): no
               signal, no hang (20 s); a template that does not load is reported with
               FILE:LINE and the others are still listed (`ktune templates`; every 10th
               variant also through a compile-only ktuned's ListTemplates).
  5. kills     SIGKILL of `ktune cache import` and of a ktuned serving a tune (fake worker)
               at random times: afterwards PRAGMA integrity_check is 'ok' and `ktune cache
               ls` opens the store.
  6. floods    64 concurrent clients of GetKernel FALLBACK on distinct shapes against a
               compile-only ktuned: each answer OK, or RESOURCE_EXHAUSTED/UNAVAILABLE with a
               message (bounded queues), none past the deadline; then SIGTERM during the
               flood must end the daemon well within systemd's 30 s stop timeout. The same
               for 48 Tune calls past --queue 8; and idle connections (2000: still answered;
               600 under a hard limit of 256 files: answered, or exit 3 for a restart).

Run (from the repository root, after a build; stdlib + grpc + the generated client only):

  PYTHONPATH=build/python nice -n 10 python3 bench/hostile_probe.py
  python3 bench/hostile_probe.py --bin build/bin --only rpc,flags --seed 7 --keep

Options: --bin (ktuned, ktune, fake_ktune_worker; default build/bin), --templates (default
kernel_templates), --seed, --only CLASSES, --manifests N, --kills N, --flood-s S, --keep
(leave the temporary folder). Findings are printed above the table, one line each.
"""

import argparse
import base64
import copy
import hashlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import grpc

from ktune.v1 import ktune_pb2 as pb
from ktune.v1 import ktune_pb2_grpc as pb_grpc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEADLINE_S = 10.0
VERBOSE = False
C = grpc.StatusCode
# Codes a refused request may carry; UNKNOWN and INTERNAL tell the caller nothing.
REFUSAL_CODES = {C.INVALID_ARGUMENT, C.NOT_FOUND, C.OUT_OF_RANGE, C.RESOURCE_EXHAUSTED,
                 C.FAILED_PRECONDITION, C.UNAUTHENTICATED, C.PERMISSION_DENIED}
SERVICE = "/ktune.v1.Ktune/"
FAKE_ENV = {"KTUNE_WORKER_ENV": "FAKE_WORKER_", "FAKE_WORKER_ANY_OK": "1"}


class Tally:
    """One class's counts, and a line per finding."""

    def __init__(self, name):
        self.name = name
        self.cases = self.refused = self.silent = self.unclear = self.crashes = self.wedges = 0
        self.notes = []
        self.findings = []

    def finding(self, kind, case, detail):
        setattr(self, kind, getattr(self, kind) + 1)
        self.findings.append(f"[{self.name}] {kind}: {case}: {detail}"[:400])

    def failed(self):
        return self.silent + self.unclear + self.crashes + self.wedges


class Env:
    """Paths and the run's scratch folder."""

    def __init__(self, args):
        self.bin = os.path.abspath(args.bin)
        self.ktuned = os.path.join(self.bin, "ktuned")
        self.ktune = os.path.join(self.bin, "ktune")
        self.fake_worker = os.path.join(self.bin, "fake_ktune_worker")
        self.templates = os.path.abspath(args.templates)
        # Short: a unix socket path must fit in 108 bytes.
        self.root = tempfile.mkdtemp(prefix="kprobe-")
        self.rng = random.Random(args.seed)
        self.args = args
        self.daemons = []  # every Daemon started, stopped at the end whatever happens
        self._n = 0

    def fresh_dir(self, name):
        self._n += 1
        d = os.path.join(self.root, f"{self._n:04d}-{name}")
        os.makedirs(d)
        return d

    def env(self, extra=None):
        e = dict(os.environ)
        e.update(FAKE_ENV)
        e.update(extra or {})
        return e


def run(cmd, timeout=20.0, env=None, cwd=None):
    """(returncode or None on timeout, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), \
            time.monotonic() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out.decode(errors="replace"), err.decode(errors="replace"), \
            time.monotonic() - t0


class Daemon:
    """One ktuned on a unix socket in its own folder; the fake worker unless compile_only."""

    def __init__(self, env, name, compile_only=False, extra=(), db=None, templates=None,
                 worker_env=None, preexec=None):
        self.dir = env.fresh_dir(name)
        self.sock = os.path.join(self.dir, "k.sock")
        self.target = "unix://" + self.sock
        self.db = db or os.path.join(self.dir, "ktune.db")
        worker = os.path.join(self.dir, "no-such-worker") if compile_only else env.fake_worker
        self.cmd = [env.ktuned, "--listen", self.target, "--db", self.db, "--templates",
                    templates or env.templates, "--worker", worker] + list(extra)
        self.err_path = os.path.join(self.dir, "stderr")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=self._err,
                                     env=env.env(worker_env), start_new_session=True,
                                     preexec_fn=preexec)
        self.channel = None
        env.daemons.append(self)

    def stderr(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_serving(self, timeout=30.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.proc.poll() is None:
            if "serving on " in self.stderr():
                return True
            time.sleep(0.02)
        return False

    def stub(self):
        if self.channel is None:
            self.channel = grpc.insecure_channel(self.target)
        return pb_grpc.KtuneStub(self.channel)

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=30.0):
        """Seconds to exit after `sig`, or None if it had to be killed."""
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.proc.poll() is not None:
            self._err.close()
            return 0.0
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
            took = time.monotonic() - t0
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            took = None
        self._err.close()
        return took


def good_request():
    return pb.GetKernelRequest(template_id="elementwise", dtype="f32", shape={"n": 4096},
                               policy=pb.FALLBACK)


# ---------------------------------------------------------------------------------------
# 1. Bad RPC input


def rpc_cases(gpus):
    """(name, method, request, keyword the message must contain (regex), kind).

    kind: "unary" (GetKernel & co.), "stream" (Tune), "key" (one GetKernels key: the
    KernelResult must carry the error), "raw"/"raw_stream" (bytes on the method's path)."""
    cases = []
    ids = ["", "nope", "x" * 300, "x" * 100_000, "../elementwise", "../../../etc/passwd",
           "elementwise/../rmsnorm", "element\x00wise", "elementwise\n", "\x01\x02\x7f",
           "ELEMENTWISE", " elementwise", "elementwise ", "include", ".", "..", "%s%n%x",
           "élémentwise", "/elementwise"]
    for tid in ids:
        shown = repr(tid[:20])
        cases.append((f"GetKernel template_id={shown}", "GetKernel",
                      pb.GetKernelRequest(template_id=tid, dtype="f32", shape={"n": 4096},
                                          policy=pb.FALLBACK), "template", "unary"))
        cases.append((f"Tune template_id={shown}", "Tune",
                      pb.TuneRequest(template_id=tid, dtype="f32", shape={"n": 4096}),
                      "template", "stream"))
        cases.append((f"GetKernels[0] template_id={shown}", "GetKernels",
                      pb.GetKernelRequest(template_id=tid, dtype="f32", shape={"n": 4096},
                                          policy=pb.FALLBACK), "template", "key"))
    for dt in ["", "f64", "F32", "f32 ", "i32", "fp16", "f8e4m3", "x" * 1000, "\x00"]:
        cases.append((f"GetKernel dtype={dt[:12]!r}", "GetKernel",
                      pb.GetKernelRequest(template_id="elementwise", dtype=dt,
                                          shape={"n": 4096}, policy=pb.FALLBACK), "dtype",
                      "unary"))
        cases.append((f"Tune dtype={dt[:12]!r}", "Tune",
                      pb.TuneRequest(template_id="elementwise", dtype=dt, shape={"n": 4096}),
                      "dtype", "stream"))
    shapes = [("elementwise", {}), ("rmsnorm", {"tokens": 16}), ("elementwise", {"n": 4096, "m": 1}),
              ("elementwise", {"n": -1}), ("elementwise", {"n": 0}),
              ("elementwise", {"n": 2**31}), ("elementwise", {"n": 2**62}),
              ("elementwise", {"n": -2**63}), ("elementwise", {"": 5, "n": 4096}),
              ("elementwise", {"../n": 4096}), ("rmsnorm", {"tokens": 2**20, "hidden": 2**20}),
              ("gemm", {"m": 65536, "n": 65536, "k": 65536}), ("rmsnorm", {"Tokens": 16, "hidden": 4096})]
    for tid, shape in shapes:
        shown = ",".join(f"{k}={v}" for k, v in shape.items()) or "{}"
        dt = "f16" if tid == "gemm" else "f32"
        cases.append((f"GetKernel {tid} shape {shown}", "GetKernel",
                      pb.GetKernelRequest(template_id=tid, dtype=dt, shape=shape,
                                          policy=pb.FALLBACK), "shape", "unary"))
        cases.append((f"Tune {tid} shape {shown}", "Tune",
                      pb.TuneRequest(template_id=tid, dtype=dt, shape=shape), "shape", "stream"))
        cases.append((f"GetKernels[0] {tid} shape {shown}", "GetKernels",
                      pb.GetKernelRequest(template_id=tid, dtype=dt, shape=shape,
                                          policy=pb.FALLBACK), "shape", "key"))
    for policy in [9, -1, 2**31 - 1]:
        req = good_request()
        req.policy = policy
        cases.append((f"GetKernel policy={policy}", "GetKernel", req, "policy", "unary"))
        cases.append((f"GetKernels[0] policy={policy}", "GetKernels", req, "policy", "key"))
    for gpu in [-1, gpus, 2**31 - 1]:  # `gpus`: the daemon's count, one past the last ordinal
        req = good_request()
        req.gpu = gpu
        cases.append((f"GetKernel gpu={gpu}", "GetKernel", req, "gpu", "unary"))
        cases.append((f"Tune gpu={gpu}", "Tune",
                      pb.TuneRequest(template_id="elementwise", dtype="f32", shape={"n": 4096},
                                     gpu=gpu), "gpu", "stream"))
    nan, inf = float("nan"), float("inf")
    for field, value in [("strategy", "bogus"), ("strategy", "GUIDED"), ("strategy", " guided"),
                         ("strategy", "exhaustive\x00"), ("budget", -1), ("budget", -2**63),
                         ("time_s", -1.0), ("time_s", nan), ("time_s", -inf),
                         ("min_gain", -1.0), ("min_gain", nan),
                         ("roofline_stop", -1.0), ("roofline_stop", nan), ("roofline_stop", inf)]:
        req = pb.TuneRequest(template_id="elementwise", dtype="f32", shape={"n": 4096},
                             force=True)
        setattr(req, field, value)
        # The message may name the field in words ("min gain: must be in [0, 1)").
        keyword = field.replace("_", "[_ ]").replace("time[_ ]s", "time")
        cases.append((f"Tune {field}={value!r}", "Tune", req, keyword, "stream"))
    many = {f"d{i}": i for i in range(20_000)}
    many["n"] = 4096
    cases.append(("GetKernel elementwise shape with 20000 extra dims", "GetKernel",
                  pb.GetKernelRequest(template_id="elementwise", dtype="f32", shape=many,
                                      policy=pb.FALLBACK), "shape", "unary"))
    # Whole-call limits of GetKernels (MAX_KERNELS_PER_CALL in the proto).
    limit = pb.MAX_KERNELS_PER_CALL
    bad_keys = [pb.GetKernelRequest(template_id="elementwise", dtype="f32", shape={"n": -i},
                                    policy=pb.FALLBACK) for i in range(limit)]
    cases.append((f"GetKernels {limit} bad keys", "GetKernels",
                  pb.GetKernelsRequest(requests=bad_keys), "shape", "keys"))
    for n in [0, limit + 1, 10_000]:
        cases.append((f"GetKernels {n} keys", "GetKernels",
                      pb.GetKernelsRequest(requests=[good_request()] * n), "requests", "unary"))
    # Oversize (the daemon under test runs with --max-message-bytes 4 MiB).
    big = "x" * (6 << 20)
    cases.append(("GetKernel 6 MiB template_id", "GetKernel",
                  pb.GetKernelRequest(template_id=big, dtype="f32"), "", "unary"))
    cases.append(("ListEntries 6 MiB filter", "ListEntries",
                  pb.ListEntriesRequest(template_id=big), "", "unary"))
    cases.append(("Tune 6 MiB strategy", "Tune",
                  pb.TuneRequest(template_id="elementwise", strategy=big), "", "stream"))
    # Bytes that do not parse as any request (checked below), on every method's path.
    garbage = [b"\x0f", b"\xff" * 20, b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05ab",
               b"\x1a\x03\x0a\x01", b"\x08"]
    rng = random.Random(17)
    while len(garbage) < 8:
        g = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        if not parses(g):
            garbage.append(g)
    garbage = [g for g in garbage if not parses(g)]
    for method in ["GetKernel", "GetKernels", "Tune", "ListTemplates", "ListEntries", "GetDevices"]:
        for g in garbage:
            cases.append((f"{method} raw {g[:8].hex()}", method, g, "parse",
                          "raw_stream" if method == "Tune" else "raw"))
    return cases


def parses(data):
    """Whether `data` parses as any of the service's request types."""
    warnings.simplefilter("ignore", RuntimeWarning)  # the pure-Python parser's complaints
    for t in [pb.GetKernelRequest, pb.GetKernelsRequest, pb.TuneRequest, pb.ListTemplatesRequest,
              pb.ListEntriesRequest, pb.GetDevicesRequest]:
        try:
            t.FromString(data)
            return True
        except Exception:  # DecodeError, or RuntimeWarning-type errors of the pure backend
            pass
    return False


def call(daemon, method, request, kind, metadata=None):
    """(code, details, response) of one call with the probe's deadline."""
    ch = daemon.channel or grpc.insecure_channel(daemon.target)
    daemon.channel = ch
    stub = pb_grpc.KtuneStub(ch)
    try:
        if kind == "raw":
            f = ch.unary_unary(SERVICE + method, request_serializer=None,
                               response_deserializer=None)
            return C.OK, "", f(request, timeout=DEADLINE_S, metadata=metadata)
        if kind == "raw_stream":
            f = ch.unary_stream(SERVICE + method, request_serializer=None,
                                response_deserializer=None)
            it = f(request, timeout=DEADLINE_S, metadata=metadata)
            first = next(iter(it))
            it.cancel()
            return C.OK, "", first
        if kind == "stream":
            it = stub.Tune(request, timeout=DEADLINE_S, metadata=metadata)
            first = next(iter(it), None)
            it.cancel()
            return C.OK, "", first
        if kind == "key":
            resp = stub.GetKernels(pb.GetKernelsRequest(requests=[request]), timeout=DEADLINE_S,
                                   metadata=metadata)
            r = resp.results[0]
            return grpc.StatusCode.OK if r.code == 0 else code_of(r.code), r.message, resp
        if kind == "keys":  # every key bad: the first OK or unnamed answer is the call's
            resp = stub.GetKernels(request, timeout=DEADLINE_S, metadata=metadata)
            if len(resp.results) != len(request.requests):
                return C.OK, "", resp
            for i, r in enumerate(resp.results):
                if r.code == 0 or f"requests[{i}]" not in r.message:
                    return code_of(r.code), r.message, resp
            return code_of(resp.results[-1].code), resp.results[-1].message, resp
        return C.OK, "", getattr(stub, method)(request, timeout=DEADLINE_S, metadata=metadata)
    except grpc.RpcError as e:
        return e.code(), e.details() or "", None


def code_of(number):
    for c in grpc.StatusCode:
        if c.value[0] == number:
            return c
    return C.UNKNOWN


def judge_refusal(tally, name, code, details, keyword, daemon):
    """Counts one answer to a bad request."""
    tally.cases += 1
    if VERBOSE:
        print(f"  {name[:70]!s:72} {code.name}: {details[:150]!r}", file=sys.stderr)
    if not daemon.alive():
        tally.finding("crashes", name, f"ktuned died: {daemon.stderr()[-300:]}")
    elif code == C.OK:
        tally.finding("silent", name, "answered OK")
    elif code in (C.DEADLINE_EXCEEDED, C.CANCELLED):
        tally.finding("wedges", name, f"no answer within {DEADLINE_S} s")
    elif code not in REFUSAL_CODES or not details.strip():
        tally.finding("unclear", name, f"{code.name}: {details!r}")
    elif keyword and not re.search(keyword, details, re.I):
        tally.finding("unclear", name, f"{code.name}: message does not name '{keyword}': {details!r}")
    else:
        tally.refused += 1


def abandoned_calls(d, t, n=24):
    """Calls whose deadline (1 ms to 50 ms) passes while the daemon works on them: TUNE and
    FALLBACK GetKernel, Tune. Each must end by its deadline (DEADLINE_EXCEEDED, or OK if it
    was quick), not hang; the work they started must not wedge the daemon."""
    stub = d.stub()
    for i in range(n):
        deadline = [0.001, 0.01, 0.05][i % 3]
        shape = {"n": 7000 + i}
        kind = ["tune-policy", "fallback", "stream"][i % 3]
        t0 = time.monotonic()
        try:
            if kind == "stream":
                for _ in stub.Tune(pb.TuneRequest(template_id="elementwise", dtype="f32",
                                                  shape=shape, budget=3), timeout=deadline):
                    pass
            else:
                policy = pb.TUNE if kind == "tune-policy" else pb.FALLBACK
                stub.GetKernel(pb.GetKernelRequest(template_id="elementwise", dtype="f32",
                                                   shape=shape, policy=policy), timeout=deadline)
            code = C.OK
        except grpc.RpcError as e:
            code = e.code()
        took = time.monotonic() - t0
        t.cases += 1
        if code in (C.OK, C.DEADLINE_EXCEEDED) and took < deadline + 2.0:
            t.refused += 1
        else:
            t.finding("wedges", f"{kind} with a {deadline * 1000:.0f} ms deadline",
                      f"{code.name} after {took:.2f} s")


def probe_rpc(env):
    t = Tally("rpc")
    d = Daemon(env, "rpc", extra=["--max-message-bytes", str(4 << 20)])
    if not d.wait_serving():
        t.finding("crashes", "start", d.stderr()[-300:])
        return t
    codes = {}
    gpus = len(d.stub().GetDevices(pb.GetDevicesRequest(), timeout=DEADLINE_S).devices)
    for name, method, request, keyword, kind in rpc_cases(gpus):
        if not d.alive():
            d.stop()
            d = Daemon(env, "rpc-restart", extra=["--max-message-bytes", str(4 << 20)])
            d.wait_serving()
        code, details, _ = call(d, method, request, kind)
        if kind == "key" and code != C.OK and not re.search(r"requests\[0\]", details):
            keyword = r"requests\[0\]"  # a key's error must name its index
        judge_refusal(t, name, code, details, keyword, d)
        codes[code.name] = codes.get(code.name, 0) + 1
    # Bearer tokens, on a daemon that wants one.
    g = Daemon(env, "rpc-token", extra=["--token", "s3cret"])
    if g.wait_serving():
        for name, md in [("no token", None), ("wrong token", [("authorization", "Bearer nope")]),
                         ("empty bearer", [("authorization", "Bearer ")]),
                         ("basic scheme", [("authorization", "Basic s3cret")]),
                         ("token prefix", [("authorization", "Bearer s3cre")]),
                         ("token + suffix", [("authorization", "Bearer s3cret2")]),
                         ("64 KiB token", [("authorization", "Bearer " + "s" * 65536)])]:
            code, details, _ = call(g, "GetKernel", good_request(), "unary", metadata=md)
            judge_refusal(t, f"GetKernel {name}", code, details, "", g)
            codes[code.name] = codes.get(code.name, 0) + 1
        # The right token (scheme case-insensitive) on a new connection is still served (a
        # local subchannel pool: not the connection the oversize metadata had closed).
        ch = grpc.insecure_channel(g.target, options=[("grpc.use_local_subchannel_pool", 1)])
        try:
            pb_grpc.KtuneStub(ch).GetKernel(good_request(), timeout=DEADLINE_S, wait_for_ready=True,
                                            metadata=[("authorization", "bearer s3cret")])
        except grpc.RpcError as e:
            t.finding("wedges", "GetKernel with the right token", f"{e.code().name}: {e.details()}")
        ch.close()
    g.stop()
    abandoned_calls(d, t)
    # Still alive and useful.
    code, details, _ = call(d, "GetKernel", good_request(), "unary")
    if not d.alive() or code != C.OK:
        t.finding("crashes" if not d.alive() else "wedges", "good request after the class",
                  f"{code.name}: {details}")
    d.stop()
    t.notes.append(" ".join(f"{k}:{v}" for k, v in sorted(codes.items())))
    return t


# ---------------------------------------------------------------------------------------
# 2. Flags


def flag_cases(env, work, daemon):
    """(name, command, what the message must name (the flag, or the bad value where that is
    clearer) or None if the run must be accepted). `daemon`: a ktuned for `ktune get`."""
    empty = os.path.join(work, "empty-templates")
    os.makedirs(empty, exist_ok=True)
    afile = os.path.join(work, "a-file")
    open(afile, "w").close()
    conf = os.path.join(work, "bad.conf")
    with open(conf, "w") as f:
        f.write("no-such-key = 1\n")
    sock = "unix://" + os.path.join(work, "f.sock")
    base = ["--db", os.path.join(work, "f.db"), "--templates", env.templates, "--worker",
            os.path.join(work, "no-such-worker")]
    d = [  # ktuned: (extra args, flag named); --listen defaults to `sock` unless given.
        (["--listen", ""], "--listen"), (["--listen", "garbage"], "--listen"),
        (["--listen", "unix://"], "--listen"), (["--listen", "unix:///proc/k/k.sock"], "/proc/k"),
        (["--listen", "127.0.0.1:99999"], "--listen"), (["--listen", "[::1]:70000"], "--listen"),
        (["--listen", "127.0.0.1:abc"], "--listen"), (["--listen", "garbage", "--insecure"], "--listen"),
        (["--listen", "0.0.0.0:0"], "--insecure"),
        (["--listen", "unix-abstract:kprobe"], "--insecure"), (["--listen", "http://x:1"], "--listen"),
        (["--max-message-bytes", "0"], "--max-message-bytes"),
        (["--max-message-bytes", "-1"], "--max-message-bytes"),
        (["--max-message-bytes", "1024"], "--max-message-bytes"),
        (["--max-message-bytes", "abc"], "--max-message-bytes"),
        (["--max-message-bytes", "99999999999999"], "--max-message-bytes"),
        (["--templates", ""], "--templates"), (["--templates", "/no/such/dir"], "--templates"),
        (["--templates", empty], "--templates"), (["--templates", afile], "--templates"),
        (["--db", ""], "--db"), (["--db", "/proc/no/x.db"], "--db"), (["--db", work], "--db"),
        (["--token", ""], "--token"), (["--queue", "0"], "--queue"), (["--queue", "x"], "--queue"),
        (["--fallback-queue", "0"], "--fallback-queue"), (["--pch", "sometimes"], "--pch"),
        (["--artifact-cache-mb", "-1"], "--artifact-cache-mb"),
        (["--listener-probe-ms", "-1"], "--listener-probe-ms"), (["--bogus-flag"], "--bogus-flag"),
        (["--config", "/no/such.conf"], "/no/such.conf"), (["--config", conf], "no-such-key"),
        (["--tls-cert", afile, "--tls-key", afile], "--tls"),
        (["--listen", "127.0.0.1:0", "--tls-cert", "/no/c.pem", "--tls-key", "/no/k.pem"], "--tls-cert"),
        (["--remote", "http://x"], "--remote"), (["--remote", "redis://"], "--remote"),
        (["--remote-lease-ms", "0"], "--remote-lease-ms"),
        (["--remote-timeout-ms", "-5"], "--remote-timeout-ms"),
        (["--remote", "redis://127.0.0.1:1", "--remote-password-file", "/no/pw"], "--remote-password-file"),
        # Accepted (README: loopback TCP needs neither TLS nor a token; 0 turns these off).
        (["--listen", "127.0.0.1:0"], None), (["--token", "s3cret"], None),
        (["--artifact-cache-mb", "0"], None), (["--listener-probe-ms", "0"], None),
        (["--reflection"], None), (["--pch", "off"], None),
    ]
    cases = []
    for extra, flag in d:
        args = base + ([] if "--listen" in extra else ["--listen", sock]) + extra
        cases.append(("ktuned " + " ".join(extra), [env.ktuned] + args, flag))
    tune = [env.ktune, "tune", "elementwise", "--db", os.path.join(work, "t.db"), "--worker",
            env.fake_worker, "--budget", "2", "--threads", "1", "--quiet"]
    k = [
        (["templates", "--bogus"], "--bogus"), (["tune", "--dtype", "f32"], "template"),
        (["--dtype", "f64", "--shape", "n=64"], "dtype"),
        (["--dtype", "f32", "--shape", "n=abc"], "shape"),
        (["--dtype", "f32", "--shape", "n=-1"], "n"), (["--dtype", "f32", "--shape", ""], "shape"),
        (["--dtype", "f32", "--shape", "n=64,m=2"], "m"),
        (["--dtype", "f32", "--shape", "n=64", "--budget", "-1"], "budget"),
        (["--dtype", "f32", "--shape", "n=64", "--strategy", "bogus"], "strategy"),
        (["--dtype", "f32", "--shape", "n=64", "--time", "-1"], "time"),
        (["--dtype", "f32", "--shape", "n=64", "--min-gain", "nan"], "min-gain"),
        (["--dtype", "f32", "--shape", "n=64", "--roofline-stop", "-1"], "roofline"),
        (["--dtype", "f32", "--shape", "n=64", "--gpu", "-1"], "gpu"),
        (["--dtype", "f32", "--shape", "n=64", "--threads", "-1"], "threads"),
        (["--dtype", "f32", "--shape", "n=64", "--templates", "/no/such"], "templates"),
        (["--dtype", "f32", "--shape", "n=64", "--min-sample-us", "-1"], "min-sample"),
        (["--dtype", "f32", "--shape", "n=64", "--top", "-1"], "top"),
    ]
    for extra, flag in k:
        if extra[0] in ("templates", "tune"):
            cases.append(("ktune " + " ".join(extra), [env.ktune] + extra, flag))
        else:
            cases.append(("ktune tune " + " ".join(extra), tune + extra, flag))
    # FALLBACK: the same call with good flags answers (a default compile), so exit 0 = accepted.
    get = [env.ktune, "get", "elementwise", "--dtype", "f32", "--shape", "n=64", "--daemon",
           daemon, "--policy", "fallback"]
    for extra, flag in [(["--policy", "bogus"], "policy"), (["--timeout", "-1"], "timeout"),
                        (["--timeout", "nan"], "timeout"), (["--shape", "n=64,n=65"], "n"),
                        (["--gpu", "-1"], "gpu")]:
        cases.append(("ktune get " + " ".join(extra), get + extra, flag))
    for extra, flag in [(["templates", "--arch", "sm_1"], "arch"),
                        (["templates", "--shape", "n="], "shape"),
                        (["templates", "--dtype", "f64"], "dtype"),
                        (["cache", "import", "/no/such.json", "--db", os.path.join(work, "i.db")], "/no/such.json"),
                        (["cache", "import", afile, "--db", os.path.join(work, "i.db"),
                          "--on-conflict", "bogus"], "on-conflict"),
                        (["cache", "ls", "--db", "/proc/no/x.db"], "/proc/no/x.db"),
                        (["cache", "prune", "--db", os.path.join(work, "i.db"), "--bogus"], "--bogus")]:
        cases.append(("ktune " + " ".join(extra), [env.ktune] + extra, flag))
    return cases


def judge_exit(t, name, rc, out, err, keyword, limit_s, changed=False):
    """Counts one run of a program given bad input: exit status `rc` (None: killed after
    `limit_s`), its output; `changed`: whether it changed the store although refusing."""
    if VERBOSE:
        last = err.strip().splitlines()[-1] if err.strip() else ""
        print(f"  {name[:60]!s:62} exit {rc}: {last[:170]!r}", file=sys.stderr)
    if rc is None:
        t.finding("wedges", name, f"no exit within {limit_s} s")
    elif rc < 0:
        t.finding("crashes", name, f"signal {-rc}: {err[-200:]}")
    elif rc == 0:
        t.finding("silent", name, f"exit 0: {(out + err).strip()[-200:]!r}")
    elif not err.strip() or (keyword and not re.search(keyword, err, re.I)):
        t.finding("unclear", name, f"exit {rc}, message does not name {keyword!r}: "
                                   f"{err.strip()[-200:]!r}")
    elif changed:
        t.finding("silent", name, f"refused (exit {rc}) but the store changed")
    else:
        t.refused += 1


def probe_flags(env):
    t = Tally("flags")
    work = env.fresh_dir("flags")
    accepted = []
    d = Daemon(env, "flags-get", compile_only=True)
    d.wait_serving()
    for name, cmd, flag in flag_cases(env, work, d.target):
        t.cases += 1
        if os.path.basename(cmd[0]) == "ktuned":
            err_path = os.path.join(work, "ktuned.err")
            with open(err_path, "wb") as ef:
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=ef, env=env.env(),
                                     start_new_session=True)
                end, rc = time.monotonic() + 10, None
                while time.monotonic() < end:
                    rc = p.poll()
                    with open(err_path, "rb") as f:
                        err = f.read().decode(errors="replace")
                    if rc is not None or "serving on " in err:
                        break
                    time.sleep(0.05)
                serving = rc is None and "serving on " in err
                if rc is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(30)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
                        t.finding("wedges", name, "did not exit within 30 s of SIGTERM")
                        continue
                with open(err_path, "rb") as f:
                    err = f.read().decode(errors="replace")
            if flag is None:
                if serving:
                    t.refused += 1
                    accepted.append(name)
                else:
                    t.finding("unclear", name, f"documented as accepted, but exit {rc}: {err[-200:]}")
                continue
            if serving:
                t.finding("silent", name, "started serving")
            else:
                judge_exit(t, name, rc, "", err, re.escape(flag), 10)
            continue
        rc, out, err, _ = run(cmd, timeout=20, env=env.env())
        judge_exit(t, name, rc, out, err, re.escape(flag), 20)
    d.stop()
    t.notes.append(f"{len(accepted)} documented-accepted flags started")
    return t


# ---------------------------------------------------------------------------------------
# 3. Imports


def tune_keys(env, db, shapes, template="elementwise", extra_env=None):
    """Tunes `shapes` (n values) of `template` f32 into `db` with the fake worker."""
    for n in shapes:
        rc, out, err, _ = run([env.ktune, "tune", template, "--dtype", "f32", "--shape", f"n={n}",
                               "--db", db, "--worker", env.fake_worker, "--budget", "3",
                               "--threads", "1", "--quiet", "--cache-dir",
                               os.path.join(os.path.dirname(db), "cubins")],
                              timeout=120, env=env.env(extra_env))
        if rc != 0:
            raise RuntimeError(f"tune n={n} failed ({rc}): {err[-500:]}")


def store_fingerprint(env, db):
    """sha256 of the store's files and its `ktune cache ls --json`."""
    h = hashlib.sha256()
    for suffix in ["", "-wal"]:
        if os.path.exists(db + suffix):
            with open(db + suffix, "rb") as f:
                h.update(f.read())
    rc, out, err, _ = run([env.ktune, "cache", "ls", "--json", "--db", db], timeout=30)
    return h.hexdigest(), out if rc == 0 else f"ls failed {rc}: {err}"


def import_mutants(base):
    """(name, mutate(doc) -> doc or bytes, keyword) for the export `base`."""
    e0 = "entries\\[0\\]"

    def entry(fn):
        def m(doc):
            fn(doc["entries"][0])
            return doc
        return m

    def setpath(path, value):
        def fn(e):
            node = e
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = value
        return entry(fn)

    cubin = base64.b64decode(base["entries"][0]["cubin_base64"])

    def with_cubin(data, sha=None):
        def fn(e):
            e["cubin_base64"] = base64.b64encode(data).decode()
            e["cubin_sha256"] = sha or hashlib.sha256(data).hexdigest()
        return entry(fn)

    def dup(doc):
        doc["entries"].append(copy.deepcopy(doc["entries"][0]))
        return doc

    def drop(key):
        def fn(e):
            del e[key]
        return entry(fn)

    def text(fn):
        return lambda doc: fn(json.dumps(doc)).encode()

    m = [
        ("time_ns -1", setpath(["metrics", "time_ns"], -1.0), e0),
        ("time_ns 0", setpath(["metrics", "time_ns"], 0.0), e0),
        ("time_ns NaN", setpath(["metrics", "time_ns"], float("nan")), ""),
        ("time_ns Infinity", setpath(["metrics", "time_ns"], float("inf")), ""),
        ("time_ns a string", setpath(["metrics", "time_ns"], "fast"), e0),
        ("spread_ns -1", setpath(["metrics", "spread_ns"], -1.0), e0),
        ("default_time_ns -5", setpath(["default_time_ns"], -5.0), e0),
        ("trial time_ns -1", entry(lambda e: e["trials"][0]["metrics"].update(time_ns=-1.0)), e0),
        ("occupancy 7", setpath(["metrics", "occupancy"], 7.0), e0),
        ("registers -1", setpath(["metrics", "registers"], -1), e0),
        ("cubin not ELF", with_cubin(b"hello, not an ELF file" * 10), e0),
        ("cubin truncated", with_cubin(cubin[: len(cubin) // 2]), e0),
        ("cubin truncated, old sha", with_cubin(cubin[: len(cubin) // 2],
                                                hashlib.sha256(cubin).hexdigest()), e0),
        ("cubin empty", with_cubin(b""), e0),
        ("cubin_sha256 mismatch", setpath(["cubin_sha256"], "0" * 64), e0),
        ("cubin_sha256 not hex", setpath(["cubin_sha256"], "zz"), e0),
        ("cubin_base64 invalid", setpath(["cubin_base64"], "!!!not base64!!!"), e0),
        ("template unknown", setpath(["key", "template_id"], "nope"), e0),
        ("template ../", setpath(["key", "template_id"], "../elementwise"), e0),
        ("template empty", setpath(["key", "template_id"], ""), e0),
        ("template rmsnorm (foreign)", setpath(["key", "template_id"], "rmsnorm"), e0),
        ("dtype f64", setpath(["key", "dtype"], "f64"), e0),
        ("dtype empty", setpath(["key", "dtype"], ""), e0),
        ("dtype f16 (cubin of f32)", setpath(["key", "dtype"], "f16"), e0),
        ("shape n=-1", setpath(["key", "shape"], "n=-1"), e0),
        ("shape n=0", setpath(["key", "shape"], "n=0"), e0),
        ("shape n=abc", setpath(["key", "shape"], "n=abc"), e0),
        ("shape m=4096", setpath(["key", "shape"], "m=4096"), e0),
        ("shape extra dim", setpath(["key", "shape"], "n=4096,m=1"), e0),
        ("shape empty", setpath(["key", "shape"], ""), e0),
        ("shape n=2^70", setpath(["key", "shape"], "n=1180591620717411303424"), e0),
        ("launch kernel missing", entry(lambda e: e["launches"][0].update(lowered_name="_Z7missingv")), e0),
        ("launches empty", setpath(["launches"], []), e0),
        ("launch grid 0", entry(lambda e: e["launches"][0].update(grid=[0, 1, 1])), e0),
        ("launch block 4096", entry(lambda e: e["launches"][0].update(block=[4096, 1, 1])), e0),
        ("launch block 32 (cubin of 64)", entry(lambda e: e["launches"][0].update(block=[32, 1, 1])), e0),
        ("launch grid 1x1x1", entry(lambda e: e["launches"][0].update(grid=[1, 1, 1])), e0),
        ("launch shared 1 MiB", entry(lambda e: e["launches"][0].update(shared_bytes=1 << 20)), e0),
        ("launch args x<->out", entry(lambda e: e["launches"][0].update(
            args=["out", "y", "x", "alpha", "beta", "n"])), e0),
        ("launch doubled", entry(lambda e: e["launches"].append(e["launches"][0])), e0),
        ("launch arg unknown", entry(lambda e: e["launches"][0].update(args=["nope"])), e0),
        ("params foreign", entry(lambda e: e["config"]["params"].update(FOREIGN=1)), e0),
        ("params BLOCK=63", entry(lambda e: e["config"]["params"].update(BLOCK=63)), e0),
        ("params BLOCK=128 (cubin of 64)", entry(lambda e: e["config"]["params"].update(BLOCK=128)), e0),
        ("params VEC missing", entry(lambda e: e["config"]["params"].pop("VEC")), e0),
        ("knobs target sm_00", entry(lambda e: e["config"]["knobs"].update(target="sm_00")), e0),
        ("knobs target unknown", entry(lambda e: e["config"]["knobs"].update(target="gfx90a")), e0),
        ("knobs maxrregcount -1", entry(lambda e: e["config"]["knobs"].update(maxrregcount=-1)), e0),
        ("knobs min_blocks -1", entry(lambda e: e["config"]["knobs"].update(min_blocks=-1)), e0),
        ("device model unknown", setpath(["key", "device_model"], "Other GPU|sm_90|1sm|1bit|1MHz|1GiB"), ""),
        ("device copy_gbps -1", lambda doc: (doc["devices"][0].update(copy_gbps=-1.0), doc)[1], "devices"),
        ("trials_ok -1", setpath(["trials_ok"], -1), e0),
        ("trials_total -1", setpath(["trials_total"], -1), e0),
        ("trials_ok > trials_total", setpath(["trials_ok"], 99), e0),
        ("job done -1", entry(lambda e: e["job"].update(done=-1)), e0),
        ("trial outcome bogus", entry(lambda e: e["trials"][0].update(outcome="bogus")), e0),
        ("nvrtc_version 99.9", setpath(["nvrtc_version"], "99.9"), "nvrtc"),
        ("entry duplicated", dup, "entries\\[1\\]|twice"),
        ("entry key missing", drop("key"), e0),
        ("format other", lambda doc: (doc.update(format="other"), doc)[1], "format"),
        ("version 99", lambda doc: (doc.update(version=99), doc)[1], "version"),
        ("JSON truncated", text(lambda s: s[: len(s) // 2]), ""),
        ("not JSON", lambda doc: b"\x00\x01garbage", ""),
    ]
    return m


def probe_imports(env):
    t = Tally("imports")
    work = env.fresh_dir("imports")
    src_db, target_db = os.path.join(work, "src.db"), os.path.join(work, "target.db")
    tune_keys(env, src_db, [4096])
    tune_keys(env, target_db, [8192])
    export = os.path.join(work, "export.json")
    rc, _, err, _ = run([env.ktune, "cache", "export", "--db", src_db, export])
    if rc != 0:
        t.finding("unclear", "export", err)
        return t
    with open(export) as f:
        base = json.load(f)
    pristine = os.path.join(work, "pristine.db")
    shutil.copyfile(target_db, pristine)

    def do_import(path):
        return run([env.ktune, "cache", "import", "--db", target_db, "--templates", env.templates,
                    path], timeout=30)

    # Control: the unmutated file imports (into a copy), else every refusal below proves nothing.
    rc, out, err, _ = do_import(export)
    if rc != 0:
        t.finding("unclear", "control import", f"the unmutated export is refused: {err[-300:]}")
    else:
        t.notes.append("the unmutated export imports")
    shutil.copyfile(pristine, target_db)
    before = store_fingerprint(env, target_db)
    for name, mutate, keyword in import_mutants(base):
        t.cases += 1
        doc = mutate(copy.deepcopy(base))
        path = os.path.join(work, "mutant.json")
        with open(path, "wb") as f:
            f.write(doc if isinstance(doc, bytes) else json.dumps(doc, indent=1).encode())
        rc, out, err, _ = do_import(path)
        after = store_fingerprint(env, target_db)
        judge_exit(t, name, rc, out, err, keyword, 30, changed=after != before)
        if after != before:
            shutil.copyfile(pristine, target_db)
            for suffix in ["-wal", "-shm"]:
                if os.path.exists(target_db + suffix):
                    os.remove(target_db + suffix)
    probe_foreign_source_hash(env, t, base, work, do_import, target_db)
    return t


def probe_foreign_source_hash(env, t, base, work, do_import, target_db):
    """An entry whose source hash is not the template's is an entry of another version of the
    template (an export from an older ktune): it imports, and it must be stale (served only
    until the key is tuned again), never fresh."""
    t.cases += 1
    doc = copy.deepcopy(base)
    doc["entries"][0]["source_hash"] = "zz"
    path = os.path.join(work, "foreign-source.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    rc, out, err, _ = do_import(path)
    if rc != 0:
        t.finding("unclear", "source_hash zz", f"refused (exit {rc}): {err[-200:]}")
        return
    rc, out, err, _ = run([env.ktune, "cache", "ls", "--json", "--db", target_db], timeout=30)
    key = doc["entries"][0]["key"]
    rows = [r for r in json.loads(out or "[]") if r.get("shape") == key["shape"]
            and r.get("dtype") == key["dtype"]] if rc == 0 else []
    if not rows or not all(r.get("stale") for r in rows):
        t.finding("silent", "source_hash zz", f"imported but not stale: {rows!r:.200}")
    else:
        t.refused += 1  # handled as designed: imported as stale


# ---------------------------------------------------------------------------------------
# 4. Mutated manifests

NUMBERS = ["0", "-1", "inf", "nan", "-inf", "1e999", "99999999999999999999",
           "-9223372036854775808", "2147483648", "0.5"]
LOCATION = r":(\d+|\s[a-z_.\[\]0-9]+:)"
FIELDS = ["name", "min", "max", "values", "default", "dtype", "count", "role", "kind", "x",
          "y", "z", "expr", "kernel", "rtol", "atol", "example", "description", "constraints"]


def mutate_manifest(text, rng):
    """One random mutation of a manifest's text: (description, new text)."""
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    op = rng.choice(["delete", "duplicate", "number", "number", "number", "field", "truncate",
                     "garbage"])
    if op in ("number", "field"):
        pattern, choices = ((r"(?<![\w.])-?\d+(\.\d+)?(e-?\d+)?(?![\w.])", NUMBERS)
                            if op == "number" else (r"\b([a-z_]+)(?=\s*[:{])", FIELDS))
        spots = [(j, m) for j, line in enumerate(lines) if not line.lstrip().startswith("#")
                 for m in re.finditer(pattern, line)]
        if spots:
            j, m = rng.choice(spots)
            new = rng.choice(choices)
            lines[j] = lines[j][: m.start()] + new + lines[j][m.end():]
            return f"line {j + 1}: {op} {m.group(0)} -> {new}", "\n".join(lines)
        op = "delete"
    if op == "delete":
        del lines[i]
        return f"line {i + 1} deleted", "\n".join(lines)
    if op == "duplicate":
        lines.insert(i, lines[i])
        return f"line {i + 1} duplicated", "\n".join(lines)
    if op == "truncate":
        return f"truncated after line {i}", "\n".join(lines[:i])
    junk = rng.choice(["{", "}", "\x00\xff", "dims {", "params { name: \"BLOCK\" }", "]", ": :"])
    lines.insert(i, junk)
    return f"line {i + 1}: inserted {junk!r}", "\n".join(lines)


# Mutations that must make the template refused (a template that loads with one of them
# is a silent accept): (template, text, replacement).
TARGETED = [
    ("elementwise", 'tolerances { dtype: "f32" atol: 1e-6 rtol: 1e-6 }',
     'tolerances { dtype: "f32" atol: 1e-6 rtol: 1e20 }'),  # verification off, as with inf
    ("elementwise", 'tolerances { dtype: "f32" atol: 1e-6 rtol: 1e-6 }',
     'tolerances { dtype: "f32" atol: 1e20 rtol: 1e-6 }'),
    ("elementwise", 'tolerances { dtype: "f32" atol: 1e-6 rtol: 1e-6 }',
     'tolerances { dtype: "f32" atol: 1e-6 rtol: inf }'),
    ("elementwise", 'tolerances { dtype: "f32" atol: 1e-6 rtol: 1e-6 }',
     'tolerances { dtype: "f32" atol: 1e-6 rtol: -1 }'),
    ("elementwise", "  min: 1\n", "  min: -5\n"),
    ("elementwise", "  default: 256", "  default: 100"),
    ("elementwise", "  example: 1048576", "  example: -1"),
    ("elementwise", "fill { kind: UNIFORM lo: -1 hi: 1 }", "fill { kind: UNIFORM lo: 1 hi: -1 }"),
    ("elementwise", "fill { kind: UNIFORM lo: -1 hi: 1 }", "fill { kind: UNIFORM lo: nan hi: 1 }"),
    ("rmsnorm", 'dtypes: ["f32", "f16", "bf16"]', 'dtypes: ["f32", "f64"]'),
    ("rmsnorm", 'name: "rmsnorm"', 'name: "../rmsnorm"'),
]


def probe_manifests(env):
    t = Tally("manifests")
    work = env.fresh_dir("manifests")
    shipped = sorted(d for d in os.listdir(env.templates)
                     if os.path.isfile(os.path.join(env.templates, d, d + ".textproto")))
    listed, via_daemon = 0, 0
    folder = os.path.join(work, "templates")
    shutil.copytree(env.templates, folder)
    for k in range(len(TARGETED) + env.args.manifests):
        targeted = k < len(TARGETED)
        victim = TARGETED[k][0] if targeted else env.rng.choice(shipped)
        path = os.path.join(folder, victim, victim + ".textproto")
        with open(os.path.join(env.templates, victim, victim + ".textproto")) as f:
            original = f.read()
        if targeted:
            what, text = f"{TARGETED[k][1]!r} -> {TARGETED[k][2]!r}", original.replace(*TARGETED[k][1:], 1)
            assert text != original, what
        else:
            what, text = mutate_manifest(original, env.rng)
        with open(path, "w", errors="surrogateescape") as f:
            f.write(text)
        name = f"#{k} {victim}: {what}"
        t.cases += 1
        rc, out, err, _ = run([env.ktune, "templates", "--templates", folder], timeout=20)
        shown = {line.split()[0] for line in out.splitlines()[1:] if line.strip()}
        others = set(shipped) - {victim}
        # FILE:LINE, or FILE: FIELD: for a field that is missing (it has no line).
        loc = re.search(re.escape(path) + LOCATION, err)
        if rc is None:
            t.finding("wedges", name, "ktune templates: no exit within 20 s")
        elif rc < 0:
            t.finding("crashes", name, f"ktune templates: signal {-rc}: {err[-200:]}")
        elif not others <= shown:
            t.finding("unclear", name, f"other templates not listed (exit {rc}): {sorted(others - shown)}")
        elif victim not in shown and not loc:
            t.finding("unclear", name, f"{victim} dropped without FILE:LINE: {err.strip()[-200:]!r}")
        elif targeted and victim in shown:
            t.finding("silent", name, f"{victim} still loads")
        else:
            t.refused += 1
            listed += victim in shown
            if VERBOSE and victim in shown:
                print(f"  still loads: {name}", file=sys.stderr)
        if k % 10 == 0:
            via_daemon += 1
            d = Daemon(env, "manifest", compile_only=True, templates=folder)
            if not d.wait_serving(20):
                t.finding("crashes" if d.proc.poll() not in (None, 0, 1, 2) else "unclear",
                          name + " (ktuned)", f"did not serve: {d.stderr()[-200:]}")
            else:
                try:
                    r = d.stub().ListTemplates(pb.ListTemplatesRequest(), timeout=DEADLINE_S)
                    names = {x.name for x in r.templates}
                    if not others <= names:
                        t.finding("unclear", name + " (ktuned)", f"missing {sorted(others - names)}")
                    elif victim not in names and not any(re.search(LOCATION, e) for e in r.errors):
                        t.finding("unclear", name + " (ktuned)", f"errors lack FILE:LINE: {list(r.errors)}")
                except grpc.RpcError as e:
                    t.finding("wedges", name + " (ktuned)", f"ListTemplates: {e.code().name}")
            if d.stop() is None:
                t.finding("wedges", name + " (ktuned)", "no exit within 30 s of SIGTERM")
        with open(path, "w") as f:
            f.write(original)
    t.notes.append(f"{listed} variants still loaded (harmless or valid); {via_daemon} also via ktuned")
    return t


# ---------------------------------------------------------------------------------------
# 5. Kills


def integrity(env, db):
    """'' when the store is sound and opens with `ktune cache ls`, else why not."""
    try:
        con = sqlite3.connect(db, timeout=10)
        result = con.execute("PRAGMA integrity_check").fetchall()
        con.close()
    except sqlite3.Error as e:
        return f"sqlite3: {e}"
    if result != [("ok",)]:
        return f"integrity_check: {result[:3]}"
    rc, out, err, _ = run([env.ktune, "cache", "ls", "--db", db], timeout=30)
    return "" if rc == 0 else f"ktune cache ls exit {rc}: {err[-200:]}"


def probe_kills(env):
    t = Tally("kills")
    work = env.fresh_dir("kills")
    src = os.path.join(work, "src.db")
    tune_keys(env, src, [1 << s for s in range(10, 22)])
    export = os.path.join(work, "export.json")
    run([env.ktune, "cache", "export", "--db", src, export])
    db = os.path.join(work, "kill.db")
    half = env.args.kills // 2
    mid_import = mid_tune = 0  # kills that landed before the work was done
    # `ktune cache import --on-conflict replace` (writes every time), killed at random.
    _, _, _, took = run([env.ktune, "cache", "import", "--db", db, "--on-conflict", "replace", export])
    for k in range(half):
        t.cases += 1
        p = subprocess.Popen([env.ktune, "cache", "import", "--db", db, "--on-conflict", "replace",
                              export], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(env.rng.uniform(0, took * 1.2))
        p.kill()
        mid_import += p.wait() == -signal.SIGKILL
        why = integrity(env, db)
        if why:
            t.finding("crashes", f"import killed #{k}", why)
        else:
            t.refused += 1
    # A ktuned tuning for `ktune tune --spec --daemon` (slow fake measurements), killed at random.
    spec = os.path.join(work, "spec.textproto")
    with open(spec, "w") as f:
        f.write('model: "probe"\nentries {\n  template: "elementwise"\n  dtypes: ["f32", "f16"]\n'
                '  dims { name: "n" values: [3000, 5000, 7000, 9000] }\n}\n')
    db2 = os.path.join(work, "daemon.db")
    for k in range(env.args.kills - half):
        t.cases += 1
        d = Daemon(env, "kill", db=db2, worker_env={"FAKE_WORKER_MEASURE_MS": "20"})
        if not d.wait_serving():
            t.finding("crashes", f"ktuned #{k} restart", d.stderr()[-300:])
            d.stop(signal.SIGKILL)
            continue
        client = subprocess.Popen([env.ktune, "tune", "--spec", spec, "--daemon", d.target,
                                   "--force", "--budget", "6", "--quiet"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(env.rng.uniform(0.05, 2.0))
        mid_tune += client.poll() is None
        d.stop(signal.SIGKILL)
        try:
            client.wait(20)
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()
            t.finding("wedges", f"ktune tune --daemon #{k}", "client still waiting 20 s after ktuned died")
        why = integrity(env, db2)
        if why:
            t.finding("crashes", f"ktuned killed #{k}", why)
        else:
            t.refused += 1
    t.notes.append(f"{half} import kills ({mid_import} mid-import, one takes {took:.2f} s), "
                   f"{env.args.kills - half} ktuned kills ({mid_tune} mid-tune); "
                   "refused-clear = store intact")
    return t


# ---------------------------------------------------------------------------------------
# 6. Floods


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def probe_floods(env):
    t = Tally("floods")
    d = Daemon(env, "flood", compile_only=True, extra=["--fallback-queue", "16"])
    if not d.wait_serving():
        t.finding("crashes", "start", d.stderr()[-300:])
        return t
    counts, samples, lock = {}, {}, threading.Lock()
    rss0 = rss_kib(d.proc.pid)
    worst = [0.0]
    stop_at = time.monotonic() + env.args.flood_s
    templates = [("elementwise", "f32", lambda i: {"n": 1000 + i}),
                 ("rmsnorm", "f16", lambda i: {"tokens": 1 + i, "hidden": 4096}),
                 ("softmax", "f32", lambda i: {"rows": 1 + i, "cols": 1024, "out_bytes": 4}),
                 ("silu_and_mul", "bf16", lambda i: {"tokens": 1 + i, "inter": 1024})]
    sigterm_sent = threading.Event()

    def client(c):
        ch = grpc.insecure_channel(d.target)
        stub = pb_grpc.KtuneStub(ch)
        i = 0
        while time.monotonic() < stop_at:
            tid, dt, shape = templates[(c + i) % len(templates)]
            req = pb.GetKernelRequest(template_id=tid, dtype=dt, shape=shape(c * 100_000 + i),
                                      policy=pb.FALLBACK)
            t0 = time.monotonic()
            try:
                stub.GetKernel(req, timeout=DEADLINE_S)
                code, details = C.OK, "x"
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
            took = time.monotonic() - t0
            with lock:
                worst[0] = max(worst[0], took)
                key = code.name if details.strip() else code.name + "(no message)"
                if code != C.OK and sigterm_sent.is_set():
                    key += "(after SIGTERM)"
                counts[key] = counts.get(key, 0) + 1
                samples.setdefault(key, details[:120])
            i += 1
            if code != C.OK and sigterm_sent.is_set():
                break
        ch.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(64)]
    for th in threads:
        th.start()
    time.sleep(max(0.0, stop_at - time.monotonic() - 1.0))
    rss = rss_kib(d.proc.pid)
    # SIGTERM with the flood still running: the daemon must drop waiting compiles and exit.
    sigterm_sent.set()
    took = d.stop(signal.SIGTERM, timeout=30)
    for th in threads:
        th.join(DEADLINE_S + 5)
    for key, n in counts.items():
        t.cases += n
        # After SIGTERM the daemon may cancel the calls in flight, or refuse new ones.
        if key in ("OK", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "UNAVAILABLE(after SIGTERM)",
                   "CANCELLED(after SIGTERM)", "RESOURCE_EXHAUSTED(after SIGTERM)"):
            t.refused += n
        elif key.startswith("DEADLINE_EXCEEDED"):
            t.wedges += n
            t.findings.append(f"[floods] wedges: {n} calls past the {DEADLINE_S} s deadline")
        else:
            t.unclear += n
            t.findings.append(f"[floods] unclear: {n} x {key}: {samples[key]!r}")
    if took is None:
        t.finding("wedges", "SIGTERM", "ktuned still running 30 s after SIGTERM (killed)")
    elif d.proc.returncode not in (0,):
        t.notes.append(f"exit status {d.proc.returncode}")
    t.notes.append(" ".join(f"{k}:{v}" for k, v in sorted(counts.items())) +
                   f"; slowest answer {worst[0]:.2f} s; RSS {rss0 // 1024}->{rss // 1024} MiB; "
                   f"exit {took if took is None else round(took, 2)} s after SIGTERM")
    flood_tunes(env, t)
    flood_idle_connections(env, t)
    return t


def flood_tunes(env, t, n=48):
    """n concurrent Tune calls of distinct keys against a fake-worker ktuned with --queue 8:
    the extra ones refused (RESOURCE_EXHAUSTED), none wedged; SIGTERM with tunes running."""
    d = Daemon(env, "flood-tune", extra=["--queue", "8"], worker_env={"FAKE_WORKER_MEASURE_MS": "50"})
    if not d.wait_serving():
        t.finding("crashes", "tune flood start", d.stderr()[-300:])
        return
    answers, lock = {}, threading.Lock()

    def tune(i):
        stub = pb_grpc.KtuneStub(grpc.insecure_channel(d.target))
        req = pb.TuneRequest(template_id="elementwise", dtype="f32", shape={"n": 5000 + i},
                             budget=4)
        try:
            for _ in stub.Tune(req, timeout=3.0):
                pass
            key = "OK"
        except grpc.RpcError as e:
            # Our own 3 s deadline ends the tunes still queued: that is the probe leaving.
            key = e.code().name + ("" if e.details() else "(no message)")
        with lock:
            answers[key] = answers.get(key, 0) + 1

    threads = [threading.Thread(target=tune, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    time.sleep(1.5)
    took = d.stop(signal.SIGTERM, timeout=30)
    for th in threads:
        th.join(10)
    for key, k in answers.items():
        t.cases += k
        if key in ("OK", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "UNAVAILABLE", "CANCELLED",
                   "ABORTED"):
            t.refused += k
        else:
            t.unclear += k
            t.findings.append(f"[floods] unclear: {k} Tune calls answered {key}")
    if "RESOURCE_EXHAUSTED" not in answers:
        t.finding("wedges", "tune flood", f"no RESOURCE_EXHAUSTED past --queue 8: {answers}")
    if took is None:
        t.finding("wedges", "tune flood SIGTERM", "ktuned still running 30 s after SIGTERM")
    t.notes.append("Tune x%d --queue 8: %s; exit %s s after SIGTERM" % (
        n, " ".join(f"{k}:{v}" for k, v in sorted(answers.items())),
        None if took is None else round(took, 2)))


def flood_idle_connections(env, t):
    """Idle connections (connected, never a byte sent). Under the inherited open files limit
    ktuned must answer a good request while 2000 are held. Under a hard limit of 256, gRPC
    1.51's listener stops accepting for good after one EMFILE (README, Security): ktuned must
    then answer anyway or exit 3 ("the listener takes no connections") for its unit to
    restart it, not stay up unreachable."""
    import resource
    import socket

    def limit_256():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    for n, preexec in [(2000, None), (600, limit_256)]:
        label = f"{n} idle connections" + (", hard limit 256 files" if preexec else "")
        d = Daemon(env, "flood-idle", compile_only=True, preexec=preexec,
                   extra=["--listener-probe-ms", "1000"])
        if not d.wait_serving():
            t.finding("crashes", label, d.stderr()[-300:])
            continue
        idle = []
        for _ in range(n):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(d.sock)
            except OSError:
                pass
            idle.append(c)
        t.cases += 1
        t0 = time.monotonic()
        ch = grpc.insecure_channel(d.target)  # a new connection, retried for 20 s
        answered, code = False, None
        while not answered and d.alive() and time.monotonic() - t0 < 20:
            try:
                pb_grpc.KtuneStub(ch).GetKernel(good_request(), timeout=1, wait_for_ready=True)
                answered = True
            except grpc.RpcError as e:
                code = e.code().name
        took = time.monotonic() - t0
        if answered:
            t.refused += 1
            t.notes.append(f"{label}: answered in {took:.1f} s")
        elif d.proc.poll() == 3 and "the listener takes no connections" in d.stderr():
            t.refused += 1
            t.notes.append(f"{label}: no answer ({code}); ktuned exited 3 after {took:.1f} s "
                           "for its unit to restart it")
        else:
            t.finding("wedges", label, f"no answer in 20 s ({code}) and ktuned "
                      f"{'still up' if d.alive() else f'exited {d.proc.poll()}'}")
        ch.close()
        for c in idle:
            c.close()
        d.stop()


# ---------------------------------------------------------------------------------------

CLASSES = {"rpc": probe_rpc, "flags": probe_flags, "imports": probe_imports,
           "manifests": probe_manifests, "kills": probe_kills, "floods": probe_floods}


def print_table(tallies, seconds):
    head = ["class", "cases", "refused-clear", "silent", "unclear", "crashes", "wedges", "notes"]
    rows = [[x.name, x.cases, x.refused, x.silent, x.unclear, x.crashes, x.wedges,
             "; ".join(x.notes)] for x in tallies]
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head) - 1)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  notes")
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    total = sum(x.failed() for x in tallies)
    print(f"{sum(x.cases for x in tallies)} cases in {seconds:.0f} s: "
          f"{'PASS' if total == 0 else f'FAIL ({total} findings)'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--templates", default=os.path.join(REPO, "kernel_templates"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default=",".join(CLASSES))
    ap.add_argument("--manifests", type=int, default=300)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--flood-s", type=float, default=6.0)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--verbose", action="store_true",
                    help="print every case of rpc, flags and imports with its answer")
    args = ap.parse_args()
    global VERBOSE
    VERBOSE = args.verbose
    for program in ["ktuned", "ktune", "fake_ktune_worker"]:
        if not os.access(os.path.join(args.bin, program), os.X_OK):
            print(f"hostile_probe: no {program} in {args.bin}; build first or give --bin",
                  file=sys.stderr)
            return 2
    env = Env(args)
    t0 = time.monotonic()
    tallies = []
    try:
        for name in args.only.split(","):
            c0 = time.monotonic()
            tally = CLASSES[name](env)
            print(f"{name}: {tally.cases} cases, {tally.failed()} findings, "
                  f"{time.monotonic() - c0:.0f} s", file=sys.stderr, flush=True)
            tallies.append(tally)
    finally:
        for d in env.daemons:
            if d.alive():
                d.stop(signal.SIGKILL)
        if not args.keep:
            shutil.rmtree(env.root, ignore_errors=True)
        else:
            print(f"kept {env.root}", file=sys.stderr)
    for x in tallies:
        for line in x.findings:
            print(line)
    print_table(tallies, time.monotonic() - t0)
    return 0 if all(x.failed() == 0 for x in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
