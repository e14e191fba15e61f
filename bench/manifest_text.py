"""What the benches read from the template manifests (kernel_templates/NAME/NAME.textproto)
without protobuf: the bench machines' Python lacks the generated manifest module, so this
reads the text format by hand (top-level blocks as text, or a whole message as dicts), and
evaluates the manifests' expressions with ktune's semantics (compile_expr).
"""

import ast
import os
import re

DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "f8e4m3": 1, "f8e5m2": 1}


def block_spans(text, keyword):
    """Where every `keyword { ... }` that opens a line of a text-format file lies: (start,
    body start, end), end one past its closing brace (comments and quoted strings skipped
    when matching braces), so a caller may read the body or cut the block out."""
    spans = []
    for m in re.finditer(r'(?m)^[ \t]*' + keyword + r'\s*\{', text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            c = text[i]
            if c == '"':  # to the closing quote, past escaped ones
                i += 1
                while text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif c == "#":  # to the end of the line
                i = text.find("\n", i)
                i = len(text) - 1 if i < 0 else i
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            i += 1
        spans.append((m.start(), m.end(), i))
    return spans


def blocks(text, keyword):
    """The bodies of every top-level `keyword { ... }` of a text-format file, their comment
    lines removed."""
    return [re.sub(r'(?m)^\s*#.*$', "", text[body:end - 1])
            for _, body, end in block_spans(text, keyword)]


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


_PROTO_TOKEN = re.compile(r'\s+|#[^\n]*|"(?:[^"\\\n]|\\.)*"|[{}\[\]:,<>;]|[^\s{}\[\]:,<>;"#]+')


def parse_textproto(text):
    """A text-format message as {field: [values]} (every field a list; messages as dicts,
    strings unquoted, numbers as int or float, enums and bools as their names): the nested
    args and launches whole, where blocks() gives the top-level bodies as text."""
    toks = [t for t in _PROTO_TOKEN.findall(text) if t.strip() and not t.startswith("#")]
    msg, pos = _parse_message(toks, 0, None)
    if pos != len(toks):
        raise ValueError(f"textproto: unexpected {toks[pos]!r}")
    return msg


def _parse_message(toks, pos, close):
    msg = {}
    while pos < len(toks) and toks[pos] != close:
        name = toks[pos]
        pos += 1
        if toks[pos] == ":":
            pos += 1
        if toks[pos] == "[":
            pos += 1
            while toks[pos] != "]":
                value, pos = _parse_value(toks, pos)
                msg.setdefault(name, []).append(value)
                pos += 1 if toks[pos] == "," else 0
            pos += 1
        else:
            value, pos = _parse_value(toks, pos)
            msg.setdefault(name, []).append(value)
        pos += 1 if pos < len(toks) and toks[pos] in (",", ";") else 0
    if close is not None and pos == len(toks):
        raise ValueError(f"textproto: missing {close!r}")
    return msg, pos + (close is not None)


def _parse_value(toks, pos):
    t = toks[pos]
    if t in ("{", "<"):
        return _parse_message(toks, pos + 1, "}" if t == "{" else ">")
    if t.startswith('"'):
        return ast.literal_eval(t), pos + 1
    for kind in (int, float):
        try:
            return kind(t), pos + 1
        except ValueError:
            pass
    return t, pos + 1


def one(msg, field, default=None):
    """The first value of `field` in a parsed message, or `default`."""
    values = msg.get(field)
    return values[0] if values else default


_EXPR_TOKEN = re.compile(r"\s*(\d+|[A-Za-z_]\w*|&&|\|\||==|!=|<=|>=|[-+*/%()<>?:!,])")


def compile_expr(text):
    """A manifest expression (proto/ktune/v1/manifest.proto) as a function of a scope
    {name: int, "dtype": DTYPE name or its size in bytes}, with ktune's int64 semantics:
    truncating / and %, 0/1 comparisons, and && || ?: short-circuiting (so that
    `b != 0 && a % b == 0` never divides by zero, as in ktune)."""
    toks, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _EXPR_TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"expression '{text}': bad character at {pos}")
        toks.append(m.group(1))
        pos = m.end()
    parser = _ExprParser(text, toks)
    fn = parser.ternary()
    if parser.pos != len(toks):
        raise ValueError(f"expression '{text}': trailing {toks[parser.pos]!r}")
    return fn


def _cdiv(a, b):
    if b == 0:
        raise ZeroDivisionError("division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_BINARY = [("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%")]
_OPS = {"==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
        "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
        ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
        "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": _cdiv, "%": lambda a, b: a - b * _cdiv(a, b)}
_FUNCS = {"min": min, "max": max, "ceil_div": lambda a, b: _cdiv(a + b - 1, b) if b > 0 else
          _cdiv(1, 0)}


def _size_of(dtype):
    return dtype if isinstance(dtype, int) else DTYPE_BYTES[dtype]


class _ExprParser:
    """Recursive descent over C's precedence levels; builds closures."""

    def __init__(self, text, toks):
        self.text, self.toks, self.pos = text, toks, 0

    def peek(self):
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self, want=None):
        t = self.peek()
        if t is None or (want is not None and t != want):
            raise ValueError(f"expression '{self.text}': expected {want or 'more'}, got {t!r}")
        self.pos += 1
        return t

    def ternary(self):
        c = self.level(0)
        if self.peek() != "?":
            return c
        self.take()
        a = self.ternary()
        self.take(":")
        b = self.ternary()
        return lambda s: a(s) if c(s) else b(s)

    def level(self, i):
        if i == len(_BINARY):
            return self.unary()
        left = self.level(i + 1)
        while self.peek() in _BINARY[i]:
            op, right = self.take(), self.level(i + 1)
            if op == "||":
                left = (lambda l, r: lambda s: int(bool(l(s)) or bool(r(s))))(left, right)
            elif op == "&&":
                left = (lambda l, r: lambda s: int(bool(l(s)) and bool(r(s))))(left, right)
            else:
                left = (lambda f, l, r: lambda s: f(l(s), r(s)))(_OPS[op], left, right)
        return left

    def unary(self):
        t = self.take()
        if t in ("-", "!", "+"):
            inner = self.unary()
            return {"-": lambda s: -inner(s), "!": lambda s: int(not inner(s)),
                    "+": inner}[t]
        if t == "(":
            inner = self.ternary()
            self.take(")")
            return inner
        if t.isdigit():
            return lambda s, v=int(t): v
        if self.peek() != "(":
            return lambda s, name=t: s[name]
        self.take("(")
        if t == "sizeof":
            arg = self.take()
            self.take(")")
            return lambda s: _size_of(s["dtype"] if arg == "dtype" else arg)
        args = [self.ternary()]
        while self.peek() == ",":
            self.take()
            args.append(self.ternary())
        self.take(")")
        fn = _FUNCS[t]
        return lambda s: fn(*(a(s) for a in args))
