"""Finds row-template candidates whose machine code waits on an edge element's load before
it has issued the row's vector loads.

An odd-length row's edge elements (ktune/edges.cuh) are scalar loads. Where a kernel
converts one to float right after loading it, ptxas keeps the conversion there, and the
warp stalls for the load's DRAM latency before its first vector load: add_rmsnorm's odd
rows ran 12 % slower on the H200 that way (39.9 against 35.9 us at 4096 x 4097 bf16) while
nothing in the source looked wrong. This script compiles each candidate of a space with
`ktune compile`, disassembles it (cuobjdump -sass) and flags every scalar global load whose
destination register is read before the first 8- or 16-byte vector load.

    python3 bench/edge_stall_scan.py TEMPLATE --dtype D --shape S [--ktune build/bin/ktune]
        [--templates kernel_templates] [--cuobjdump cuobjdump] [--all]

Only EDGE > 0 candidates are compiled unless --all (an EDGE 0 row has no edge loads); one
knob set per param point (fast_math off, the smallest min_blocks). Exits 1 when any
candidate is flagged. Needs cuobjdump, which the CUDA toolkit ships with its full install
(and NVIDIA's nvidia-cuda-cuobjdump wheel, with nvidia-cuda-nvdisasm beside it on PATH).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

_ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")
_VECTOR_LOAD = re.compile(r"\bLDG\.E\.(64|128)\b")
# A global load into one 32-bit register (LDG.E, LDG.E.U16, LDG.E.U8, ... .CONSTANT).
_SCALAR_LOAD = re.compile(r"\bLDG\.E(\.(U8|S8|U16|S16|CONSTANT|EF|EL|LU|NA))*\s+(R\d+),")
_REGISTER = r"\b{}\b"


def instructions(sass):
    """The instruction text of each line of `cuobjdump -sass` output that holds one, in
    order (address comments, the encoding and the trailing ';' dropped)."""
    out = []
    for line in sass.splitlines():
        m = _ADDRESS.search(line)
        if not m or not line.lstrip().startswith("/*"):
            continue
        text = line[m.end():].split(";")[0].strip()
        if text:
            out.append(text)
    return out


def _operands(instruction):
    """(destination, sources) of an instruction as operand text: its first operand and the
    rest where it has several, else ("", all of it) (branches; stores, whose first operand is
    an address, are read in full either way by the caller)."""
    body = instruction.split(None, 1)
    if len(body) < 2:
        return "", ""
    if body[0].startswith("@"):  # a predicate guard: the opcode is the next word
        body = body[1].split(None, 1)
        if len(body) < 2:
            return "", ""
    opcode, operands = body
    if opcode.startswith("ST") or "," not in operands:
        return "", operands
    dest, rest = operands.split(",", 1)
    return dest.strip(), rest


def stalls(sass):
    """[(load, reader)] for each scalar load whose destination is read before the first
    vector load (instruction texts). Empty when the code has no vector load."""
    code = instructions(sass)
    first_vector = next((i for i, s in enumerate(code) if _VECTOR_LOAD.search(s)), None)
    if first_vector is None:
        return []
    found = []
    for i in range(first_vector):
        m = _SCALAR_LOAD.search(code[i])
        if not m:
            continue
        reg = re.compile(_REGISTER.format(m.group(3)))
        for j in range(i + 1, first_vector):
            dest, sources = _operands(code[j])
            if reg.search(sources):
                found.append((code[i], code[j]))
                break
            if reg.fullmatch(dest):  # overwritten: later reads are of something else
                break
    return found


def candidates(ktune, templates, template, dtype, shape, every_edge):
    """The param points of the space, one knob set each (fast_math off, the smallest
    min_blocks), EDGE > 0 only unless every_edge."""
    r = subprocess.run([ktune, "templates", "--templates", templates, "--configs", template,
                        "--dtype", dtype, "--shape", shape], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ktune templates --configs: {r.stderr.strip() or r.stdout.strip()}")
    points = {}
    for line in r.stdout.splitlines():
        if not line.startswith("{"):
            continue
        config = json.loads(line)
        params, knobs = config["params"], config["knobs"]
        if knobs.get("fast_math") or (not every_edge and params.get("EDGE", 0) == 0):
            continue
        key = json.dumps(params, sort_keys=True)
        if key not in points or knobs.get("min_blocks", 0) < points[key][1].get("min_blocks", 0):
            points[key] = (params, knobs)
    return list(points.values())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("template")
    p.add_argument("--dtype", required=True)
    p.add_argument("--shape", required=True)
    p.add_argument("--ktune", default=os.path.join("build", "bin", "ktune"))
    p.add_argument("--templates", default="kernel_templates")
    p.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    p.add_argument("--all", action="store_true", help="EDGE 0 candidates too")
    args = p.parse_args(argv)
    if not os.access(args.ktune, os.X_OK):
        p.error(f"--ktune: {args.ktune} is not an executable (build first, or pass its path)")
    if not shutil.which(args.cuobjdump):
        p.error(f"--cuobjdump: {args.cuobjdump} not found (install the CUDA toolkit's, or "
                "NVIDIA's nvidia-cuda-cuobjdump wheel)")

    try:
        points = candidates(args.ktune, args.templates, args.template, args.dtype, args.shape,
                            args.all)
    except RuntimeError as e:  # ktune refused the template, dtype or shape; it says which
        print(e, file=sys.stderr)
        return 2
    flagged = 0
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "candidate.cubin")
        for params, knobs in points:
            cmd = [args.ktune, "compile", args.template, "--templates", args.templates,
                   "--dtype", args.dtype, "--shape", args.shape, "--no-cache", "--out", cubin,
                   "--arch", knobs.get("target", "sm_90"),
                   "--min-blocks", str(knobs.get("min_blocks", 1)),
                   "--maxrregcount", str(knobs.get("maxrregcount", 0))]
            for name, value in sorted(params.items()):
                cmd += ["--param", f"{name}={value}"]
            label = ",".join(f"{k}={v}" for k, v in sorted(params.items()))
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"compile failed: {label}: {r.stderr.strip()[-300:]}")
                flagged += 1
                continue
            sass = subprocess.run([args.cuobjdump, "-sass", cubin], capture_output=True,
                                  text=True, check=True).stdout
            found = stalls(sass)
            if found:
                load, reader = found[0]
                print(f"{label}: '{reader}' reads '{load}' before the first vector load")
                flagged += 1
    print(f"{args.template} {args.dtype} {args.shape}: {len(points)} candidates, "
          f"{flagged} flagged")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
