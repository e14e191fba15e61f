#!/usr/bin/env python3
"""Copies a templates folder with one template's params (and knobs) pinned to single values,
so that `ktune tune --templates DST` tunes exactly those candidates: a config to profile
(bench/ncu_worker.sh profiles what the worker runs), to time again, or a design variant to
set beside the shipped space with everything else held.

    pin_template.py SRC DST TEMPLATE NAME=VALUE... [--knob min_blocks=2] [--knob maxrregcount=0]

Each NAME must be a param of TEMPLATE and VALUE one of its values; the param's values become
[VALUE] and its default VALUE. The manifest's default_alternatives are dropped (they name
values the pins may have removed). Constraints stay: a pin that breaks one leaves no
candidate, which ktune reports. DST is replaced; SRC is not changed.
"""

import argparse
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from manifest_text import block_spans, manifest_path  # noqa: E402

# The knobs a manifest lists as `NAME: [v, ...]` in its knobs block.
PINNABLE_KNOBS = ("min_blocks", "maxrregcount")


def _pair(text, what):
    name, sep, value = text.partition("=")
    if not sep or not name or not re.fullmatch(r"-?\d+", value):
        raise ValueError(f"{what} '{text}': expected NAME=INTEGER")
    return name, int(value)


def pin_param(text, name, value):
    """The manifest text with param `name` pinned to `value`."""
    for _, start, end in block_spans(text, "params"):
        body = text[start:end]
        if not re.search(r'^\s*name:\s*"%s"' % re.escape(name), body, re.M):
            continue
        values = re.search(r'^(\s*values:\s*)\[([^\]]*)\]', body, re.M)
        allowed = [int(v) for v in values.group(2).replace(",", " ").split()]
        if value not in allowed:
            raise ValueError(f"param {name}: {value} is not one of its values {allowed}")
        body = body[:values.start(2)] + str(value) + body[values.end(2):]
        body = re.sub(r'(?m)^(\s*default:\s*)-?\d+', lambda d: d.group(1) + str(value), body)
        return text[:start] + body + text[end:]
    raise ValueError(f"param {name}: the template has no such param")


def pin_knob(text, name, value):
    """The manifest text with knob list `name` (in the knobs block) set to [value]."""
    if name not in PINNABLE_KNOBS:
        raise ValueError(f"knob {name}: only {', '.join(PINNABLE_KNOBS)} can be pinned")
    out, n = re.subn(r'(?m)^(\s*%s:\s*)\[[^\]]*\]' % name, lambda k: f"{k.group(1)}[{value}]",
                     text)
    if n != 1:
        raise ValueError(f"knob {name}: not listed once in the manifest's knobs")
    return out


def drop_default_alternatives(text):
    """The text without its default_alternatives blocks (and the line ends after them)."""
    for start, _, end in reversed(block_spans(text, "default_alternatives")):
        text = text[:start] + text[end:].lstrip(" ").removeprefix("\n")
    return text


def pin(src, dst, template, params, knobs=()):
    """Writes DST (a copy of SRC) with TEMPLATE's params and knobs pinned; returns its path."""
    path = manifest_path(src, template)
    if not os.path.exists(path):
        raise ValueError(f"template {template}: no manifest at {path}")
    with open(path) as f:
        text = f.read()
    for name, value in params:
        text = pin_param(text, name, value)
    for name, value in knobs:
        text = pin_knob(text, name, value)
    text = drop_default_alternatives(text)
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ValueError("DST must not be SRC")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    out = manifest_path(dst, template)
    with open(out, "w") as f:
        f.write(text)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", help="templates folder to copy (e.g. kernel_templates)")
    p.add_argument("dst", help="folder to write (replaced)")
    p.add_argument("template", help="the template whose params are pinned")
    p.add_argument("params", nargs="*", help="NAME=VALUE pins")
    p.add_argument("--knob", action="append", default=[],
                   help=f"knob pin NAME=VALUE, NAME one of {', '.join(PINNABLE_KNOBS)}")
    args = p.parse_args(argv)
    try:
        params = [_pair(t, "param") for t in args.params]
        knobs = [_pair(t, "knob") for t in args.knob]
        print(pin(args.src, args.dst, args.template, params, knobs))
    except ValueError as e:
        print(f"pin_template: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
