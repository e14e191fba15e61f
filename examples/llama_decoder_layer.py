#!/usr/bin/env python3
"""A Llama-3-8B-shaped decoder layer, written once in torch and run three ways (issue #15).

DecoderLayer is an nn.Module whose norms, fused residual add + norm, RoPE, SiLU-and-mul and
linear projections go through an `ops` object, so one module runs
    eager    TorchOps(): torch's own ops (F.rms_norm, F.linear, ...), eager;
    compile  torch.compile of the same module with TorchOps();
    ktune    KtuneOps(): torch.ops.ktune.* (ktune.torch: tuned kernels from ktuned).
Attention is torch's scaled_dot_product_attention in every mode.

One step, for T tokens (x: [T, hidden] bf16):
    h = rms_norm(x)                        -> qkv = h @ w_qkv^T (one fused weight)
    q, k = rope(q, k)                      -> attention (SDPA; decode: each of T sequences'
                                              one new token attends to its KV cache of
                                              kv_len past tokens and itself; prefill: one
                                              sequence of T tokens, causal)
    o = attn @ w_o^T                       -> h, residual = fused add(o, x) + rms_norm
    gu = h @ w_gate_up^T (one fused weight) -> a = silu(gu[:, :inter]) * gu[:, inter:]
    out = residual + a @ w_down^T

KtuneOps follows ktune.torch's in-place contracts, as vLLM's layers do: fused_add_rms_norm
adds o into the residual, which is the layer's input x, in place (x holds x + o after a
ktune step), and rotary_embedding rotates q and k in place. TorchOps returns new tensors.

`ktune_keys(cfg, tokens)` lists the kernels a step asks ktune for; it and LlamaConfig import
without torch (bench/llama_layer.py --dry-run uses them).

    python3 examples/llama_decoder_layer.py [--target unix:///run/ktune/ktuned.sock]
runs one decode step (batch 8, KV length 1024) and one prefill (512 tokens) each way on the
GPU and prints each mode's max abs difference from eager.
"""

import argparse
import dataclasses
import sys

try:
    import torch
    import torch.nn.functional as F
    _Module = torch.nn.Module
except ImportError:  # the key plan (ktune_keys) works without torch
    torch = F = None
    _Module = object

MODES = ("eager", "compile", "ktune")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    inter: int = 14336
    rope_theta: float = 500000.0
    eps: float = 1e-5
    max_positions: int = 8192   # rows of the RoPE table: past the longest step here
    dtype: str = "bf16"

    @property
    def qkv_out(self):
        return (self.heads + 2 * self.kv_heads) * self.head_dim


@dataclasses.dataclass(frozen=True)
class Step:
    """One forward: kind "decode" (`tokens` sequences, one new token each, over a KV cache of
    kv_len) or "prefill" (one sequence of `tokens`, causal, no cache)."""
    kind: str
    tokens: int
    kv_len: int = 0

    @property
    def name(self):
        return f"decode b={self.tokens}" if self.kind == "decode" else f"prefill {self.tokens}"


def ktune_keys(cfg, tokens):
    """The (op, template, dtype, shape) a step of `tokens` tokens asks ktune for, in order:
    the same for decode and prefill (attention is torch's)."""
    t, d = tokens, cfg.dtype
    return [
        ("input_norm", "rmsnorm", d, {"tokens": t, "hidden": cfg.hidden}),
        ("qkv_proj", "gemm", d, {"m": t, "n": cfg.qkv_out, "k": cfg.hidden}),
        # q and k rotated where the QKV projection wrote them (views of its output's rows;
        # one token's views are contiguous, and rope takes them as they are).
        ("rope", "rope_qkv" if t > 1 else "rope", d,
         {"tokens": t, "heads": cfg.heads, "kv_heads": cfg.kv_heads, "head_dim": cfg.head_dim,
          "interleaved": 0}),
        ("o_proj", "gemm", d, {"m": t, "n": cfg.hidden, "k": cfg.heads * cfg.head_dim}),
        ("post_norm", "add_rmsnorm", d, {"tokens": t, "hidden": cfg.hidden}),
        ("gate_up_proj", "gemm", d, {"m": t, "n": 2 * cfg.inter, "k": cfg.hidden}),
        ("silu_and_mul", "silu_and_mul", d, {"tokens": t, "inter": cfg.inter}),
        ("down_proj", "gemm", d, {"m": t, "n": cfg.hidden, "k": cfg.inter}),
    ]


# ---- the ops a layer calls ----------------------------------------------------------------

class TorchOps:
    """torch's own ops (eager, and what torch.compile compiles)."""
    name = "torch"

    def rms_norm(self, x, weight, eps):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    def add_rms_norm(self, x, residual, weight, eps):
        """(rms_norm(residual + x), residual + x)."""
        residual = residual + x
        return F.rms_norm(residual, (x.shape[-1],), weight, eps), residual

    def rope(self, positions, q, k, cos_sin):
        """(q, k) rotated (neox pairing, fp32 math, as ktune's kernel): cos_sin[p] holds
        head_dim / 2 cosines then head_dim / 2 sines."""
        head_dim = cos_sin.shape[1]
        half = head_dim // 2
        angles = cos_sin.index_select(0, positions)
        cos, sin = angles[:, None, :half], angles[:, None, half:]

        def rotate(t):
            v = t.view(positions.numel(), -1, head_dim).float()
            a, b = v[..., :half], v[..., half:]
            return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1).to(
                t.dtype).view(t.shape)
        return rotate(q), rotate(k)

    def silu_and_mul(self, x):
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    def linear(self, x, weight):
        return F.linear(x, weight)


class KtuneOps:
    """ktune.torch's ops: in eager mode each runs its kernel without torch's dispatcher,
    under torch.compile it is the custom op torch.ops.ktune.* (importing ktune.torch
    registers them). In place where they are: add_rms_norm updates `residual`, rope rotates
    q and k."""
    name = "ktune"

    def __init__(self):
        import ktune.torch
        self.kt = ktune.torch

    def rms_norm(self, x, weight, eps):
        return self.kt.rms_norm(x, weight, eps)

    def add_rms_norm(self, x, residual, weight, eps):
        return self.kt.fused_add_rms_norm(x, residual, weight, eps), residual

    def rope(self, positions, q, k, cos_sin):
        self.kt.rotary_embedding(positions, q, k, cos_sin.shape[1], cos_sin, False)
        return q, k

    def silu_and_mul(self, x):
        return self.kt.silu_and_mul(x)

    def linear(self, x, weight):
        return self.kt.linear(x, weight, None)


# ---- the layer ----------------------------------------------------------------------------

def make_weights(cfg, seed=0, device="cuda"):
    """Random bf16 weights from `seed`: projections N(0, 1 / in_features) (activations stay
    O(1)), norm weights 1 + N(0, 0.1^2) (never all ones, so a dropped weight shows); and the
    fp32 RoPE table [max_positions, head_dim] (cosines, then sines)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    dtype = torch.bfloat16

    def proj(out_features, in_features):
        w = torch.randn(out_features, in_features, generator=gen, device=device)
        return w.mul_(in_features ** -0.5).to(dtype)

    def norm():
        return torch.randn(cfg.hidden, generator=gen, device=device).mul_(0.1).add_(1).to(dtype)

    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, half, device=device,
                                                      dtype=torch.float64) / half))
    angles = torch.arange(cfg.max_positions, device=device, dtype=torch.float64)[:, None] * inv_freq
    return {"input_norm": norm(), "qkv": proj(cfg.qkv_out, cfg.hidden),
            "o": proj(cfg.hidden, cfg.heads * cfg.head_dim), "post_norm": norm(),
            "gate_up": proj(2 * cfg.inter, cfg.hidden), "down": proj(cfg.hidden, cfg.inter),
            "cos_sin": torch.cat((angles.cos(), angles.sin()), dim=1).float()}


class DecoderLayer(_Module):
    """One decoder layer over `weights` (make_weights; shared, not copied) calling `ops`.

    forward(x [T, hidden], positions [T] int32, kv_cache) -> [T, hidden]. kv_cache None:
    prefill (one causal sequence of T tokens). Else (k_cache, v_cache), each [T, kv_heads,
    kv_len + 1, head_dim]: decode, T sequences whose new token is written at index kv_len
    (the last) and attends to all kv_len + 1 entries."""

    def __init__(self, cfg, weights, ops):
        super().__init__()
        self.cfg, self.ops = cfg, ops
        for name, t in weights.items():
            self.register_buffer(name, t, persistent=False)

    def attention(self, q, k, v, kv_cache):
        cfg = self.cfg
        t, hd = q.shape[0], cfg.head_dim
        if kv_cache is None:
            q = q.view(1, t, cfg.heads, hd).transpose(1, 2)
            k = k.view(1, t, cfg.kv_heads, hd).transpose(1, 2)
            v = v.view(1, t, cfg.kv_heads, hd).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k_cache, v_cache = kv_cache
            k_cache[:, :, -1] = k.view(t, cfg.kv_heads, hd)
            v_cache[:, :, -1] = v.view(t, cfg.kv_heads, hd)
            q = q.view(t, 1, cfg.heads, hd).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)
        return o.transpose(1, 2).reshape(t, cfg.heads * hd)

    def forward(self, x, positions, kv_cache=None):
        cfg, ops = self.cfg, self.ops
        q_size, kv_size = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        h = ops.rms_norm(x, self.input_norm, cfg.eps)
        qkv = ops.linear(h, self.qkv)
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        # q and k stay views of qkv's rows: ktune rotates them there in place (template
        # rope_qkv), torch's rope reads them there and writes new tensors.
        q, k = ops.rope(positions, q, k, self.cos_sin)
        o = ops.linear(self.attention(q, k, v, kv_cache), self.o)
        h, residual = ops.add_rms_norm(o, x, self.post_norm, cfg.eps)
        a = ops.silu_and_mul(ops.linear(h, self.gate_up))
        return residual + ops.linear(a, self.down)


def make_inputs(cfg, step, seed=1, device="cuda"):
    """{x, positions, kv_cache} for `step`: x ~ N(0, 1) bf16; decode: positions all kv_len and
    a random KV cache (its last slot is the step's to write), prefill: positions 0..T-1."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    t = step.tokens
    x = torch.randn(t, cfg.hidden, generator=gen, device=device).to(torch.bfloat16)
    if step.kind == "prefill":
        return {"x": x, "positions": torch.arange(t, device=device, dtype=torch.int32),
                "kv_cache": None}
    shape = (t, cfg.kv_heads, step.kv_len + 1, cfg.head_dim)
    cache = tuple(torch.randn(shape, generator=gen, device=device).to(torch.bfloat16)
                  for _ in range(2))
    return {"x": x, "positions": torch.full((t,), step.kv_len, device=device, dtype=torch.int32),
            "kv_cache": cache}


def clone_inputs(inputs):
    """A copy a mode may write into (ktune's residual, every mode's KV cache slot)."""
    kv = inputs["kv_cache"]
    return {"x": inputs["x"].clone(), "positions": inputs["positions"],
            "kv_cache": None if kv is None else tuple(c.clone() for c in kv)}


def make_layer(cfg, weights, mode):
    """A callable (x, positions, kv_cache) -> out running the layer in `mode` (MODES)."""
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    layer = DecoderLayer(cfg, weights, KtuneOps() if mode == "ktune" else TorchOps())
    return torch.compile(layer, dynamic=False) if mode == "compile" else layer


def prefetch_keys(cfg, steps):
    """Every distinct ktune key of `steps`, for ktune.torch.prefetch."""
    seen = {}
    for step in steps:
        for _, template, dtype, shape in ktune_keys(cfg, step.tokens):
            seen.setdefault((template, dtype, tuple(sorted(shape.items()))), shape)
    return [(template, dtype, shape) for (template, dtype, _), shape in seen.items()]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default=None, help="ktuned address (default: the client's)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if torch is None or not torch.cuda.is_available():
        print("needs torch with a CUDA GPU", file=sys.stderr)
        return 1
    import ktune.torch as kt
    cfg = LlamaConfig()
    steps = [Step("decode", 8, 1024), Step("prefill", 512)]
    kt.configure(target=args.target)
    errors = [e for e in kt.prefetch(prefetch_keys(cfg, steps)) if e is not None]
    if errors:
        print(f"{len(errors)} keys fall back to torch: {errors[0]}")
    weights = make_weights(cfg, args.seed)
    layers = {mode: make_layer(cfg, weights, mode) for mode in MODES}
    with torch.no_grad():
        for step in steps:
            inputs = make_inputs(cfg, step, args.seed + 1)
            outs = {mode: layers[mode](**clone_inputs(inputs)) for mode in MODES}
            torch.cuda.synchronize()
            diffs = ", ".join(f"{mode} {(outs[mode].float() - outs['eager'].float()).abs().max():.4g}"
                              for mode in MODES[1:])
            print(f"{step.name}: max |out - eager|: {diffs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
