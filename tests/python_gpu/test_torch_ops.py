"""ktune.torch's ops on a GPU against torch's own (label gpu): a ktuned built from this tree
is started on a temporary socket and store (FALLBACK: the default or a neighbour config,
compiled at once), each op's output compared with torch within the template's tolerance,
the op captured in a CUDA graph and replayed, the fake kernels traced by torch.compile, the
argument checks, and the fallback to torch with one warning when no ktuned listens.

Skips (saying why) without torch >= 2.4, CUDA, cuda-python or the built ktuned
($KTUNE_BUILD_DIR/bin/ktuned)."""

import os
import unittest
import warnings

import ktune
import ktuned_process

try:
    import torch
except ImportError:
    torch = None

MISSING = ktuned_process.missing()


@unittest.skipIf(MISSING, MISSING)
class TorchOpsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.kt, cls.daemon = ktuned_process.start_for_torch("ktune-torch-test-")
        kt, cls.target = cls.kt, cls.daemon.target
        cls.cache = kt.configure(cls.target, policy="fallback", refresh_s=None, timeout_s=300)

    @classmethod
    def tearDownClass(cls):
        cls.kt.cache().close()
        cls.daemon.stop("ktuned-torch-ops.log")

    def assertClose(self, got, ref, atol, rtol, what):
        err = (got.float() - ref.float()).abs()
        bad = ~(err <= atol + rtol * ref.float().abs())
        self.assertEqual(int(bad.sum()), 0,
                         f"{what}: {int(bad.sum())} elements outside, max error {float(err.max())}")

    def test_rms_norm(self):
        for dtype, rtol in ((torch.float32, 1e-5), (torch.bfloat16, 1.6e-2)):
            x = torch.rand(8, 4096, device="cuda", dtype=dtype) * 2 - 1
            w = torch.rand(4096, device="cuda", dtype=dtype) + 0.5
            out = torch.ops.ktune.rms_norm(x, w, 1e-6)
            ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
                   * w.float())
            self.assertClose(out, ref, 1e-5, rtol, f"rms_norm {dtype}")
            name = {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
            k = self.kt.cache().get("rmsnorm", name, {"tokens": 8, "hidden": 4096}, 0)
            self.assertIn(k.provenance, ("default", "nearest", "exact"))

    def test_fused_add_rms_norm_updates_the_residual(self):
        x = torch.rand(16, 2048, device="cuda", dtype=torch.bfloat16) - 0.5
        r = torch.rand(16, 2048, device="cuda", dtype=torch.bfloat16) - 0.5
        w = torch.rand(2048, device="cuda", dtype=torch.bfloat16) + 0.5
        new_r = (x.float() + r.float())
        out = torch.ops.ktune.fused_add_rms_norm(x, r, w, 1e-6)
        self.assertClose(r, new_r, 1e-2, 1.6e-2, "residual")
        ref = r.float() * torch.rsqrt(r.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
        self.assertClose(out, ref, 1e-5, 1.6e-2, "fused_add_rms_norm")

    def test_layer_norm_with_and_without_bias(self):
        x = torch.rand(4, 1024, device="cuda", dtype=torch.float16) * 2 - 1
        w = torch.rand(1024, device="cuda", dtype=torch.float16) + 0.5
        b = torch.rand(1024, device="cuda", dtype=torch.float16) - 0.5
        for bias in (b, None):
            out = torch.ops.ktune.layer_norm(x, w, bias, 1e-5)
            ref = torch.nn.functional.layer_norm(x.float(), (1024,), w.float(),
                                                 None if bias is None else bias.float(), 1e-5)
            self.assertClose(out, ref, 1e-3, 2e-3, f"layer_norm bias={bias is not None}")

    def test_softmax(self):
        x = (torch.rand(32, 8192, device="cuda") * 16 - 8).to(torch.bfloat16)
        self.assertClose(torch.ops.ktune.softmax(x), torch.softmax(x.float(), -1), 1e-6, 1.6e-2,
                         "softmax")

    def test_silu_and_mul(self):
        x = torch.rand(8, 2 * 14336, device="cuda", dtype=torch.bfloat16) * 8 - 4
        ref = torch.nn.functional.silu(x[:, :14336].float()) * x[:, 14336:].float()
        self.assertClose(torch.ops.ktune.silu_and_mul(x), ref, 1e-2, 1.6e-2, "silu_and_mul")

    def test_rotary_embedding_in_place(self):
        tokens, heads, kv_heads, head_dim = 8, 32, 8, 128
        pos = torch.randint(0, 4096, (tokens,), device="cuda")
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device="cuda").float() / head_dim))
        angles = torch.arange(4096, device="cuda").float()[:, None] * inv[None, :]
        cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1).contiguous()
        q = torch.rand(tokens, heads * head_dim, device="cuda", dtype=torch.bfloat16) - 0.5
        k = torch.rand(tokens, kv_heads * head_dim, device="cuda", dtype=torch.bfloat16) - 0.5
        q_ref, k_ref = q.clone(), k.clone()
        self.kt._rope_torch(pos, q_ref, k_ref, head_dim, cos_sin, False)
        torch.ops.ktune.rotary_embedding(pos, q, k, head_dim, cos_sin, False)
        self.assertClose(q, q_ref, 1e-2, 1.6e-2, "q")
        self.assertClose(k, k_ref, 1e-2, 1.6e-2, "k")

    def test_rotary_embedding_of_views_into_fused_qkv_rows(self):
        # q and k as a QKV projection's output split by columns: rotated where they lie
        # (template rope_qkv; one token's views are contiguous: rope), v untouched, the same
        # numbers as contiguous q and k give.
        heads, kv_heads, head_dim = 32, 8, 128
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device="cuda").float() / head_dim))
        angles = torch.arange(4096, device="cuda").float()[:, None] * inv[None, :]
        cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1).contiguous()
        for tokens in (1, 8):
            pos = torch.randint(0, 4096, (tokens,), device="cuda", dtype=torch.int32)
            qkv = torch.rand(tokens, (heads + 2 * kv_heads) * head_dim, device="cuda",
                             dtype=torch.bfloat16) - 0.5
            q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
            q_ref, k_ref, v_ref = q.clone(), k.clone(), v.clone()
            self.kt._rope_torch(pos, q_ref, k_ref, head_dim, cos_sin, False)
            self.kt.rotary_embedding(pos, q, k, head_dim, cos_sin, False)  # as a layer calls it
            self.assertClose(q, q_ref, 1e-2, 1.6e-2, f"q of fused rows, {tokens} tokens")
            self.assertClose(k, k_ref, 1e-2, 1.6e-2, f"k of fused rows, {tokens} tokens")
            self.assertTrue(torch.equal(v, v_ref), "v is left as it was")
            key = {"tokens": tokens, "heads": heads, "kv_heads": kv_heads,
                   "head_dim": head_dim, "interleaved": 0}
            template = "rope_qkv" if tokens > 1 else "rope"
            self.assertIn(self.kt.cache().get(template, "bf16", key, 0).provenance,
                          ("default", "nearest", "exact"))

    def test_linear(self):
        x = torch.rand(16, 4096, device="cuda", dtype=torch.bfloat16) - 0.5
        w = torch.rand(1024, 4096, device="cuda", dtype=torch.bfloat16) - 0.5
        b = torch.rand(1024, device="cuda", dtype=torch.bfloat16)
        ref = x.float() @ w.float().T + b.float()
        self.assertClose(torch.ops.ktune.linear(x, w, b), ref, 0.5, 2e-2, "linear")
        # float32 on tf32 tensor cores split three ways: float-level error (~2e-5 here), not
        # plain tf32's (~3e-3, over the bar).
        x, w, b = x.float(), w.float(), b.float()
        ref = (x.double() @ w.double().T + b.double()).float()
        self.assertClose(torch.ops.ktune.linear(x, w, b), ref, 1e-3, 1e-4, "f32 linear")
        # float32 at 1-8 rows goes to the gemv template (CUDA cores); at 9 back to gemm.
        for rows in (1, 5, 8, 9):
            xs = x[:rows].contiguous()
            ref = (xs.double() @ w.double().T + b.double()).float()
            self.assertClose(torch.ops.ktune.linear(xs, w, b), ref, 1e-3, 1e-4,
                             f"f32 linear, {rows} rows")

    def test_inputs_off_16_byte_boundaries_fall_back_to_torch(self):
        """A contiguous view at an odd element offset is a valid tensor the templates' vector
        loads cannot take: each op computes it with torch (right values, in-place updates
        included) and warns once per op, not per call."""
        def shifted(t):  # t's values in a contiguous view 2 bytes off torch's alignment
            buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
            v = buf[1:].view(t.shape)
            v.copy_(t)
            self.assertTrue(v.is_contiguous() and v.data_ptr() % 16)
            return v

        bf = torch.bfloat16
        x = torch.rand(4, 1024, device="cuda", dtype=bf) - 0.5
        w = torch.rand(1024, device="cuda", dtype=bf) + 0.5
        r = torch.rand(4, 1024, device="cuda", dtype=bf) - 0.5
        lw = torch.rand(256, 1024, device="cuda", dtype=bf) - 0.5
        F = torch.nn.functional
        kt = self.kt
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                self.assertClose(kt.rms_norm(shifted(x), w, 1e-6),
                                 F.rms_norm(x.float(), (1024,), w.float(), 1e-6), 1e-5, 1.6e-2,
                                 "rms_norm, x shifted")
                self.assertClose(torch.ops.ktune.rms_norm(x, shifted(w), 1e-6),
                                 F.rms_norm(x.float(), (1024,), w.float(), 1e-6), 1e-5, 1.6e-2,
                                 "rms_norm op, weight shifted")
                rs = shifted(r)
                out = kt.fused_add_rms_norm(x, rs, w, 1e-6)
                self.assertClose(rs, x.float() + r.float(), 1e-2, 1.6e-2, "residual, shifted")
                self.assertClose(out, F.rms_norm(rs.float(), (1024,), w.float(), 1e-6), 1e-5,
                                 1.6e-2, "fused_add_rms_norm, residual shifted")
                self.assertClose(kt.layer_norm(x, w, shifted(w), 1e-5),
                                 F.layer_norm(x.float(), (1024,), w.float(), w.float(), 1e-5),
                                 1e-2, 1.6e-2, "layer_norm, bias shifted")
                self.assertClose(kt.softmax(shifted(x)), torch.softmax(x.float(), -1), 1e-6,
                                 1.6e-2, "softmax, x shifted")
                self.assertClose(kt.silu_and_mul(shifted(x)),
                                 F.silu(x[:, :512].float()) * x[:, 512:].float(), 1e-2, 1.6e-2,
                                 "silu_and_mul, x shifted")
                self.assertClose(kt.linear(x, shifted(lw)), x.float() @ lw.float().T, 0.5, 2e-2,
                                 "linear, weight shifted")
                xf, lwf = x.float(), lw.float()
                self.assertClose(kt.linear(shifted(xf[:3].contiguous()), lwf),
                                 (xf[:3].double() @ lwf.double().T).float(), 1e-3, 1e-4,
                                 "f32 linear (gemv rows), x shifted")
                pos = torch.arange(4, device="cuda")
                half = torch.arange(64, device="cuda").float()[None, :] * 1e-3
                cos_sin = torch.cat(((pos[:, None] * half).cos(), (pos[:, None] * half).sin()),
                                    -1).contiguous()
                q, k = x[:, :512].contiguous(), x[:, 512:].contiguous()
                q_ref, k_ref = q.clone(), k.clone()
                kt._rope_torch(pos, q_ref, k_ref, 128, cos_sin, False)
                qs = shifted(q)
                kt.rotary_embedding(pos, qs, k, 128, cos_sin, False)
                self.assertClose(qs, q_ref, 1e-2, 1.6e-2, "rope q, shifted")
                self.assertClose(k, k_ref, 1e-2, 1.6e-2, "rope k")
        said = sorted(str(c.message).split(":")[0] for c in caught
                      if "not 16-byte aligned" in str(c.message))
        self.assertEqual(said, ["ktune.fused_add_rms_norm", "ktune.layer_norm", "ktune.linear",
                                "ktune.rms_norm", "ktune.rotary_embedding", "ktune.silu_and_mul",
                                "ktune.softmax"])

    def test_fp8_linear(self):
        """fp8 e4m3 and e5m2 inputs with per-tensor scales, bf16 out: the gemm template's fp8
        keys (sm_89 and later), at decode and odd sizes, against float math; the torch
        fallback (misaligned x) agrees; bad arguments are named."""
        if torch.cuda.get_device_capability() < (8, 9) or not hasattr(torch, "float8_e4m3fn"):
            self.skipTest("fp8 needs sm_89 or later and torch's float8 types")
        kt = self.kt
        sx = torch.tensor([1.5], device="cuda")
        sw = torch.tensor([0.75], device="cuda")
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            for m, n, k in ((1, 1024, 4096), (16, 1024, 4096), (77, 1000, 1024)):
                x = (torch.rand(m, k, device="cuda") * 2 - 1).to(dtype)
                w = (torch.rand(n, k, device="cuda") * 2 - 1).to(dtype)
                b = torch.rand(n, device="cuda", dtype=torch.bfloat16)
                ref = (x.double() @ w.double().T * (1.5 * 0.75)).float()
                # The manifest's fp8 tolerance: atol 1.2e-3 * sqrt(k), rtol 1.6e-2.
                atol = 1.2e-3 * k ** 0.5
                what = f"fp8_linear {dtype} m={m} n={n} k={k}"
                out = kt.fp8_linear(x, w, sx, sw)
                self.assertEqual((out.dtype, tuple(out.shape)), (torch.bfloat16, (m, n)))
                self.assertClose(out, ref, atol, 1.6e-2, what)
                self.assertClose(torch.ops.ktune.fp8_linear(x, w, sx, sw, b), ref + b.float(),
                                 atol, 1.6e-2, what + " + bias (op)")
                x3 = x.reshape(1, m, k)
                self.assertEqual(tuple(kt.fp8_linear(x3, w, sx, sw).shape), (1, m, n))
        x = (torch.rand(16, 1024, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
        w = (torch.rand(512, 1024, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
        buf = torch.empty(16 * 1024 + 1, device="cuda", dtype=torch.float8_e4m3fn)
        shifted = buf[1:].view(16, 1024)
        shifted.copy_(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.assertClose(kt.fp8_linear(shifted, w, sx, sw),
                             (x.double() @ w.double().T * 1.125).float(), 1.2e-3 * 32, 1.6e-2,
                             "fp8_linear fallback (x shifted)")
        for call, message in [
                (lambda: kt.fp8_linear(x.to(torch.bfloat16), w, sx, sw), "x is torch.bfloat16"),
                (lambda: kt.fp8_linear(x, w.to(torch.float8_e5m2), sx, sw), "weight is"),
                (lambda: kt.fp8_linear(x, w, torch.ones(2, device="cuda"), sw),
                 "scale_x has 2 elements"),
                (lambda: kt.fp8_linear(x, w, sx, sw.double()), "scale_w is torch.float64"),
                (lambda: kt.fp8_linear(x, w[:, :512].contiguous(), sx, sw),
                 "x's last dim is 1024")]:
            with self.assertRaises((ValueError, TypeError)) as e:
                call()
            self.assertIn(message, str(e.exception))

    def test_a_repeated_call_takes_the_hot_path_and_agrees(self):
        """The first call of a signature takes the Python path and records a plan; the next
        with new tensors of the same shapes launches from C (no Python path: nothing is
        recorded again) and computes the same as torch. In-place results included."""
        kt = self.kt
        if kt._hot_call is None:
            self.skipTest("no C hot path (KTUNE_FASTLAUNCH=0, KTUNE_TORCH_HOT=0 or no "
                          "extension)")
        F = torch.nn.functional
        bf = torch.bfloat16

        def rand(*shape, dtype=bf, lo=-1.0, hi=1.0):
            return (torch.rand(*shape, device="cuda") * (hi - lo) + lo).to(dtype)

        w = rand(2048, lo=0.5, hi=1.5)
        b = rand(2048, lo=-0.5, hi=0.5)
        lw = rand(512, 2048, lo=-0.5, hi=0.5)
        lb = rand(512)
        pos = torch.arange(8, device="cuda", dtype=torch.int32)
        half = torch.arange(32, device="cuda").float()[None, :] * 1e-2
        cos_sin = torch.cat(((pos[:, None] * half).cos(), (pos[:, None] * half).sin()),
                            -1).contiguous()

        def rope(q, k):
            q, k = q.clone(), k.clone()
            kt._rope_torch(pos, q, k, 64, cos_sin, False)
            return q, k

        def fused(x, r):
            r2 = r.float() + x.float()
            return F.rms_norm(r2, (2048,), w.float(), 1e-6), r2

        cases = [
            ("rms_norm", lambda x: kt.rms_norm(x, w, 1e-6),
             lambda x: F.rms_norm(x.float(), (2048,), w.float(), 1e-6), 1e-5),
            ("layer_norm", lambda x: kt.layer_norm(x, w, b, 1e-5),
             lambda x: F.layer_norm(x.float(), (2048,), w.float(), b.float(), 1e-5), 1e-2),
            ("layer_norm", lambda x: kt.layer_norm(x, w, None, 1e-5),
             lambda x: F.layer_norm(x.float(), (2048,), w.float(), None, 1e-5), 1e-2),
            ("softmax", kt.softmax, lambda x: torch.softmax(x.float(), -1), 1e-6),
            ("silu_and_mul", kt.silu_and_mul,
             lambda x: F.silu(x[:, :1024].float()) * x[:, 1024:].float(), 1e-2),
            ("linear", lambda x: kt.linear(x, lw), lambda x: x.float() @ lw.float().T, 0.5),
            ("linear", lambda x: kt.linear(x, lw, lb),
             lambda x: x.float() @ lw.float().T + lb.float(), 0.5),
        ]
        recorded = []
        remember = kt._remember

        def counting(op, *args, **kwargs):
            recorded.append(op)
            return remember(op, *args, **kwargs)

        kt._remember = counting
        try:
            for op, call, ref, atol in cases:
                recorded.clear()
                call(rand(8, 2048))
                self.assertEqual(recorded, [op], f"{op}: the first call records its plan")
                x = rand(8, 2048)
                self.assertClose(call(x), ref(x), atol, 1.6e-2, f"{op}, the hot path")
                self.assertEqual(recorded, [op], f"{op}: the second call took the hot path")
            # In place: fused_add_rms_norm's residual, rope's q and k.
            recorded.clear()
            kt.fused_add_rms_norm(rand(8, 2048), rand(8, 2048), w, 1e-6)
            x, r = rand(8, 2048), rand(8, 2048)
            want, new_r = fused(x, r)
            out = kt.fused_add_rms_norm(x, r, w, 1e-6)
            self.assertClose(r, new_r, 1e-2, 1.6e-2, "residual, the hot path")
            self.assertClose(out, want, 1e-5, 1.6e-2, "fused_add_rms_norm, the hot path")
            q, k = rand(8, 4 * 64), rand(8, 2 * 64)
            kt.rotary_embedding(pos, q, k, 64, cos_sin, False)
            q, k = rand(8, 4 * 64), rand(8, 2 * 64)
            q_ref, k_ref = rope(q, k)
            self.assertIsNone(kt.rotary_embedding(pos, q, k, 64, cos_sin, False))
            self.assertClose(q, q_ref, 1e-2, 1.6e-2, "rope q, the hot path")
            self.assertClose(k, k_ref, 1e-2, 1.6e-2, "rope k, the hot path")
            # int64 positions (vLLM's): the plan converts them per call.
            pos64 = pos.long()
            kt.rotary_embedding(pos64, rand(8, 4 * 64), rand(8, 2 * 64), 64, cos_sin, False)
            q, k = rand(8, 4 * 64), rand(8, 2 * 64)
            q_ref, k_ref = rope(q, k)
            kt.rotary_embedding(pos64, q, k, 64, cos_sin, False)
            self.assertClose(q, q_ref, 1e-2, 1.6e-2, "rope q, int64 positions, the hot path")
            self.assertClose(k, k_ref, 1e-2, 1.6e-2, "rope k, int64 positions, the hot path")
            self.assertEqual(recorded, ["fused_add_rms_norm", "rotary_embedding",
                                        "rotary_embedding"])
            # Another stream: its own plan (scratch buffers are per stream), then hot there.
            recorded.clear()
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                kt.softmax(rand(8, 2048))
                x = rand(8, 2048)
                self.assertClose(kt.softmax(x), torch.softmax(x.float(), -1), 1e-6, 1.6e-2,
                                 "softmax on another stream")
            torch.cuda.synchronize()
            self.assertEqual(recorded, ["softmax"])
        finally:
            kt._remember = remember

    def test_prefetch_loads_every_key_in_one_call(self):
        out = self.kt.prefetch([("rmsnorm", torch.bfloat16, {"tokens": 3, "hidden": 1024}),
                                ("no_such_template", torch.bfloat16, {"n": 1})])
        self.assertIsNone(out[0])
        self.assertIsInstance(out[1], ktune.NotFoundError)
        self.assertIsNotNone(self.kt.cache().peek(ktune.cache_key(
            "rmsnorm", "bf16", {"tokens": 3, "hidden": 1024}, torch.cuda.current_device())))

    def test_cuda_graph_capture_and_replay(self):
        x = torch.rand(8, 4096, device="cuda", dtype=torch.bfloat16) - 0.5
        w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
        torch.ops.ktune.rms_norm(x, w, 1e-6)  # loaded before the capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.ops.ktune.rms_norm(x, w, 1e-6)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = torch.ops.ktune.rms_norm(x, w, 1e-6)
        x.copy_(torch.rand_like(x) - 0.5)
        graph.replay()
        torch.cuda.synchronize()
        ref = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
        self.assertClose(out, ref, 1e-5, 1.6e-2, "replayed rms_norm")

    def test_a_chain_launched_programmatically_reads_each_result_whole(self):
        """Each op's kernel may start while the one before it runs (programmatic launch, on
        sm_90 and later): a chain whose every op reads the last one's output, enqueued with no
        synchronisation and again replayed from a CUDA graph, checked op by op against torch
        on the chain's own intermediates. A kernel that read before waiting would see its
        input half written."""
        kt = self.kt
        kt.configure(self.target, policy="fallback", refresh_s=None, timeout_s=300,
                     programmatic=True)  # kernels loaded anew, their plans so
        try:
            self.check_programmatic_chain(kt)
        finally:
            kt.configure(self.target, policy="fallback", refresh_s=None, timeout_s=300)

    def check_programmatic_chain(self, kt):
        tokens, hidden, inter = 4, 4096, 2048
        w_norm = torch.rand(hidden, device="cuda", dtype=torch.bfloat16) + 0.5
        w_up = (torch.rand(2 * inter, hidden, device="cuda", dtype=torch.bfloat16) - 0.5) / 16
        w_down = (torch.rand(hidden, inter, device="cuda", dtype=torch.bfloat16) - 0.5) / 16
        x0 = torch.rand(tokens, hidden, device="cuda", dtype=torch.bfloat16) - 0.5

        def chain(x, rounds=6):
            outs = []
            for _ in range(rounds):
                h = torch.ops.ktune.rms_norm(x, w_norm, 1e-6)
                up = torch.ops.ktune.linear(h, w_up, None)
                act = torch.ops.ktune.silu_and_mul(up)
                x = torch.ops.ktune.linear(act, w_down, None)
                outs.append((h, up, act, x))
            return outs

        def check(x, outs, what):
            for i, (h, up, act, y) in enumerate(outs):
                xf = x.float()
                ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w_norm.float()
                self.assertClose(h, ref, 1e-5, 1.6e-2, f"{what}: round {i} rms_norm")
                self.assertClose(up, h.float() @ w_up.float().T, 0.05, 2e-2,
                                 f"{what}: round {i} up")
                ref = torch.nn.functional.silu(up[:, :inter].float()) * up[:, inter:].float()
                self.assertClose(act, ref, 1e-2, 1.6e-2, f"{what}: round {i} silu_and_mul")
                self.assertClose(y, act.float() @ w_down.float().T, 0.05, 2e-2,
                                 f"{what}: round {i} down")
                x = y

        chain(x0, rounds=1)  # every kernel loaded before the check and the capture
        torch.cuda.synchronize()
        if torch.cuda.get_device_capability()[0] >= 9:
            k = kt.cache().get("rmsnorm", "bf16", {"tokens": tokens, "hidden": hidden}, 0)
            self.assertTrue(all(l.programmatic for l in k.artifact.launches),
                            "ktuned marks rmsnorm's launches programmatic on sm_90+")
            if ktune._loaded.programmatic_launches(k.fast, True):
                self.assertTrue(all(p[-1] == 1 for p in k._plans),
                                "the plans launch through cuLaunchKernelEx")
        check(x0, chain(x0), "eager")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            chain(x0)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        x_in = x0.clone()
        with torch.cuda.graph(graph):
            outs = chain(x_in)
        x_in.copy_(torch.rand_like(x_in) - 0.5)
        graph.replay()
        torch.cuda.synchronize()
        check(x_in, outs, "replayed")

    def test_a_captured_scratch_buffer_outlives_its_replacement(self):
        # linear's split-K partials are sized by the key (growing with m and n up to a cap):
        # a larger key on the same stream replaces the buffer a graph captured, and the
        # graph's replays still write to it. The old buffer must not go to the next tensor torch allocates.
        import ktune.torch as kt_torch
        stream = torch.cuda.Stream()
        dev = torch.cuda.current_device()
        x = torch.rand(16, 4096, device="cuda", dtype=torch.bfloat16) - 0.5
        w = torch.rand(512, 4096, device="cuda", dtype=torch.bfloat16) - 0.5
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            torch.ops.ktune.linear(x, w, None)  # loaded, its scratch allocated on `stream`
        key = (dev, stream.cuda_stream, "partial")
        # Only its address and size are kept here: a reference would keep it allocated.
        captured = kt_torch._scratches[key]
        captured_ptr, numel = captured.data_ptr(), captured.numel()
        del captured
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = torch.ops.ktune.linear(x, w, None)
        with torch.cuda.stream(stream):
            big_w = torch.rand(4096, 4096, device="cuda", dtype=torch.bfloat16) - 0.5
            torch.ops.ktune.linear(x, big_w, None)
            self.assertNotEqual(kt_torch._scratches[key].data_ptr(), captured_ptr,
                                "the buffer was not grown")
            same_size = torch.full((numel,), 7.0, device="cuda", dtype=torch.float32)
        self.assertNotEqual(same_size.data_ptr(), captured_ptr,
                            "the captured scratch buffer was handed to a new tensor")
        stream.synchronize()
        x.copy_(torch.rand_like(x) - 0.5)
        graph.replay()
        torch.cuda.synchronize()
        self.assertTrue(bool((same_size == 7.0).all()), "a replay wrote into a new tensor")
        self.assertClose(out, x.float() @ w.float().T, 0.5, 2e-2, "replayed linear")

    def test_torch_compile_traces_through_the_fake_kernels(self):
        x = torch.rand(8, 4096, device="cuda", dtype=torch.bfloat16) - 0.5
        w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5

        def f(x, w):
            return torch.ops.ktune.silu_and_mul(torch.cat((x, x), -1)) + \
                torch.ops.ktune.rms_norm(x, w, 1e-6)
        got = torch.compile(f, fullgraph=True)(x, w)
        self.assertClose(got, f(x, w), 1e-2, 1.6e-2, "compiled")

    def test_the_direct_path_is_the_custom_ops_and_fills_the_same_cache_keys(self):
        # kt.<op> in eager mode runs its kernel without the dispatcher; it must answer as
        # torch.ops.ktune.<op> does and find the kernels under ktune.cache_key's keys.
        kt, dev = self.kt, torch.cuda.current_device()
        x = torch.rand(5, 1536, device="cuda", dtype=torch.bfloat16) - 0.5
        w = torch.rand(1536, device="cuda", dtype=torch.bfloat16) + 0.5
        r1 = torch.rand_like(x)
        r2 = r1.clone()
        pos = torch.arange(5, device="cuda", dtype=torch.int32)
        cos_sin = torch.rand(16, 64, device="cuda")
        q1 = torch.rand(5, 4 * 64, device="cuda", dtype=torch.bfloat16)
        k1 = torch.rand(5, 2 * 64, device="cuda", dtype=torch.bfloat16)
        q2, k2 = q1.clone(), k1.clone()
        wl = torch.rand(256, 1536, device="cuda", dtype=torch.bfloat16) - 0.5
        pairs = [
            (kt.rms_norm(x, w, 1e-6), torch.ops.ktune.rms_norm(x, w, 1e-6),
             ("rmsnorm", {"tokens": 5, "hidden": 1536})),
            (kt.fused_add_rms_norm(x, r1, w, 1e-6),
             torch.ops.ktune.fused_add_rms_norm(x, r2, w, 1e-6),
             ("add_rmsnorm", {"tokens": 5, "hidden": 1536})),
            (r1, r2, None),
            (kt.layer_norm(x, w, w, 1e-5), torch.ops.ktune.layer_norm(x, w, w, 1e-5),
             ("layernorm", {"tokens": 5, "hidden": 1536, "with_bias": 1})),
            (kt.softmax(x), torch.ops.ktune.softmax(x),
             ("softmax", {"rows": 5, "cols": 1536, "out_bytes": 2})),
            (kt.silu_and_mul(x), torch.ops.ktune.silu_and_mul(x),
             ("silu_and_mul", {"tokens": 5, "inter": 768})),
            (kt.linear(x, wl), torch.ops.ktune.linear(x, wl, None),
             ("gemm", {"m": 5, "n": 256, "k": 1536})),
        ]
        kt.rotary_embedding(pos, q1, k1, 64, cos_sin, False)
        torch.ops.ktune.rotary_embedding(pos, q2, k2, 64, cos_sin, False)
        pairs += [(q1, q2, ("rope", {"tokens": 5, "heads": 4, "kv_heads": 2, "head_dim": 64,
                                     "interleaved": 0})), (k1, k2, None)]
        for direct, dispatched, key in pairs:
            if key is not None and key[0] == "gemm":  # split-K may sum in another order
                self.assertClose(direct, dispatched, 1e-2, 1e-2, "linear")
            else:
                self.assertTrue(torch.equal(direct, dispatched), key)
            if key is not None:
                self.assertIsNotNone(kt.cache().peek(ktune.cache_key(key[0], "bf16", key[1],
                                                                     dev)), key)

    def test_torch_compile_traces_the_module_functions(self):
        x = torch.rand(8, 4096, device="cuda", dtype=torch.bfloat16) - 0.5
        w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5

        def f(x, w):
            return self.kt.silu_and_mul(torch.cat((x, x), -1)) + self.kt.rms_norm(x, w, 1e-6)
        got = torch.compile(f, fullgraph=True)(x, w)
        self.assertClose(got, f(x, w), 1e-2, 1.6e-2, "compiled")

    def test_bad_arguments_are_named(self):
        x = torch.rand(8, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(4096, device="cuda", dtype=torch.bfloat16)
        cases = [
            (lambda: torch.ops.ktune.rms_norm(x, w.float(), 1e-6), "weight is torch.float32"),
            (lambda: torch.ops.ktune.rms_norm(x.t(), w, 1e-6), "x must be contiguous"),
            (lambda: torch.ops.ktune.rms_norm(x.cpu(), w, 1e-6), "x is on cpu"),
            (lambda: torch.ops.ktune.rms_norm(x, w[:100], 1e-6), "weight has 100"),
            (lambda: torch.ops.ktune.silu_and_mul(x[:, :7].contiguous()), "x's last dim is 7"),
            (lambda: torch.ops.ktune.linear(x.double(), w.double()[None], None),
             "x is torch.float64"),
            (lambda: self.kt.rms_norm(x, w.float(), 1e-6), "weight is torch.float32"),
            (lambda: self.kt.layer_norm(x, w, w[:8], 1e-5), "bias is (8,)"),
        ]
        for call, message in cases:
            with self.assertRaises((ValueError, TypeError, RuntimeError)) as e:
                call()
            self.assertIn(message, str(e.exception))

    def test_without_ktuned_ops_fall_back_to_torch_with_one_warning(self):
        kt = self.kt
        kt.configure("unix://" + os.path.join(self.daemon.dir, "nobody.sock"), refresh_s=None)
        try:
            x = torch.rand(8, 4096, device="cuda", dtype=torch.bfloat16)
            w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(3):
                    out = torch.ops.ktune.rms_norm(x, w, 1e-6)
                torch.ops.ktune.softmax(x)
            self.assertEqual(len([c for c in caught if "fall back" in str(c.message)]), 1)
            self.assertClose(out, torch.nn.functional.rms_norm(x, (4096,), w, 1e-6), 1e-5,
                             1.6e-2, "fallback")
        finally:
            kt.configure(self.target, policy="fallback", refresh_s=None, timeout_s=300)


if __name__ == "__main__":
    unittest.main()
