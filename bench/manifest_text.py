"""What the benches read from the template manifests (kernel_templates/NAME/NAME.textproto)
without protobuf: the bench machines' Python lacks the generated manifest module, and the
benches need only a few fields, so this is a small reader of the text format, by hand.
"""

import os
import re


def blocks(text, keyword):
    """The bodies of every top-level `keyword { ... }` of a text-format file (comments and
    quoted strings skipped when matching braces)."""
    text = re.sub(r'(?m)^\s*#.*$', "", text)
    out = []
    for m in re.finditer(r'(?m)^\s*' + keyword + r'\s*\{', text):
        depth, i, start = 1, m.end(), m.end()
        while depth and i < len(text):
            c = text[i]
            if c == '"':  # to the closing quote, past escaped ones
                i += 1
                while text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            i += 1
        out.append(text[start:i - 1])
    return out


def manifest_path(templates_dir, name):
    return os.path.join(templates_dir, name, f"{name}.textproto")


def template_dims(templates_dir, name):
    """(dtypes, {dim name: (min, max)}) of template `name`, or None when it has no manifest.
    Unset min is 0; max 0 or unset means int32's range (manifest.proto's Dim)."""
    path = manifest_path(templates_dir, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    body = re.sub(r'(?m)^\s*#.*$', "", text)
    dtypes = re.search(r'(?m)^dtypes:\s*\[([^\]]*)\]', body)
    dims = {}
    for block in blocks(text, "dims"):
        name_ = re.search(r'\bname:\s*"(\w+)"', block)
        lo = re.search(r'\bmin:\s*(-?\d+)', block)
        hi = re.search(r'\bmax:\s*(-?\d+)', block)
        if name_:
            dims[name_.group(1)] = (int(lo.group(1)) if lo else 0,
                                    int(hi.group(1)) if hi and int(hi.group(1)) else 2**31 - 1)
    return re.findall(r'"(\w+)"', dtypes.group(1)) if dtypes else [], dims
