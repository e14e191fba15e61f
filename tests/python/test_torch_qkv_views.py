"""ktune.torch's rotary_embedding on q and k that are views of one fused qkv tensor, on the
CPU (no GPU, no ktuned): which layouts count as fused rows (template rope_qkv, no copies),
and the torch fallback rotating such views in place, v left alone, as it rotates contiguous
q and k. The kernels themselves run on the GPU host (tests/python_gpu, kernels_gpu_test).

Skips without torch."""

import unittest

try:
    import torch
    import ktune.torch as kt
except ImportError:  # CI's Python has no torch
    torch = None


@unittest.skipIf(torch is None, "needs torch")
class QkvViewsTest(unittest.TestCase):
    HEADS, KV_HEADS, HEAD_DIM = 4, 2, 8
    ROW = (HEADS + 2 * KV_HEADS) * HEAD_DIM

    def split(self, qkv):
        return qkv.split([self.HEADS * self.HEAD_DIM, self.KV_HEADS * self.HEAD_DIM,
                          self.KV_HEADS * self.HEAD_DIM], dim=-1)

    def test_views_of_fused_rows_are_found(self):
        for tokens in (2, 3, 16):
            q, k, _ = self.split(torch.zeros(tokens, self.ROW, dtype=torch.bfloat16))
            self.assertEqual(kt._qkv_row(q, k, tokens, self.HEAD_DIM), self.ROW)
            # Per head, as a server may view them.
            q3 = q.view(tokens, self.HEADS, self.HEAD_DIM)
            k3 = k.view(tokens, self.KV_HEADS, self.HEAD_DIM)
            self.assertEqual(kt._qkv_row(q3, k3, tokens, self.HEAD_DIM), self.ROW)

    def test_other_layouts_are_not(self):
        tokens = 3
        q, k, v = self.split(torch.zeros(tokens, self.ROW, dtype=torch.bfloat16))
        self.assertIsNone(kt._qkv_row(q.contiguous(), k.contiguous(), tokens, self.HEAD_DIM))
        self.assertIsNone(kt._qkv_row(q, v, tokens, self.HEAD_DIM))  # v is not where k is
        self.assertIsNone(kt._qkv_row(k, q, tokens, self.HEAD_DIM))
        wide = torch.zeros(tokens, self.ROW + 8, dtype=torch.bfloat16)  # no room for v alone
        self.assertIsNone(kt._qkv_row(wide[:, :32], wide[:, 32:48], tokens, self.HEAD_DIM))
        self.assertIsNone(kt._qkv_row(q, k, tokens + 1, self.HEAD_DIM))  # tokens disagree
        self.assertIsNone(kt._qkv_row(q, k, tokens, 6))  # heads not whole
        self.assertIsNone(kt._qkv_row(q[:, ::2], k[:, ::2], tokens, 4))  # rows not contiguous
        self.assertIsNone(kt._qkv_row(q[:0], k[:0], 0, self.HEAD_DIM))  # no tokens
        # One token's views are contiguous: rope serves them.
        q1, k1, _ = self.split(torch.zeros(1, self.ROW, dtype=torch.bfloat16))
        self.assertTrue(q1.is_contiguous() and k1.is_contiguous())
        self.assertIsNone(kt._qkv_row(q1, k1, 1, self.HEAD_DIM))

    def test_the_fallback_rotates_views_in_place_and_leaves_v(self):
        tokens, d = 5, self.HEAD_DIM
        gen = torch.Generator().manual_seed(0)
        qkv = torch.rand(tokens, self.ROW, generator=gen) - 0.5
        cos_sin = torch.rand(64, d, generator=gen)
        positions = torch.tensor([0, 3, 7, 63, 1])
        q_ref, k_ref, v_ref = (t.contiguous() for t in self.split(qkv.clone()))
        kt._rope_torch(positions, q_ref, k_ref, d, cos_sin, False)
        q, k, v = self.split(qkv)
        kt._rope_torch(positions, q, k, d, cos_sin, False)
        self.assertTrue(torch.equal(q, q_ref))
        self.assertTrue(torch.equal(k, k_ref))
        self.assertTrue(torch.equal(v, v_ref))


if __name__ == "__main__":
    unittest.main()
