"""examples/llama_decoder_layer.py on a GPU (label gpu): the Llama-3-8B-shaped layer with
ktune.torch's ops against the same layer on torch's ops, through a ktuned built from this
tree (FALLBACK: default or neighbour configs), at one small decode step (batch 2 over a KV
cache of 64) and one prefill (16 tokens): every key of the step is served by ktune (no
fallback to torch), the output is within tolerance of eager, ktune updated the residual in
place, and the step captured in a CUDA graph replays to the same output; the same with
ktune's kernels launched programmatically.

Skips (saying why) without torch >= 2.4, CUDA, cuda-python or the built ktuned."""

import os
import sys
import unittest

import ktuned_process

try:
    import torch
except ImportError:
    torch = None

MISSING = ktuned_process.missing()

sys.path.insert(0, os.path.join(ktuned_process.ROOT, "examples"))
sys.path.insert(0, os.path.join(ktuned_process.ROOT, "bench"))
import llama_decoder_layer as llama  # noqa: E402

ATOL = RTOL = 3e-2  # bench/llama_layer.py's defaults: the layer rounds every step to bf16


@unittest.skipIf(MISSING, MISSING)
class LlamaLayerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.kt, cls.daemon = ktuned_process.start_for_torch("ktune-llama-test-")
        kt = cls.kt
        kt.configure(cls.daemon.target, policy="fallback", refresh_s=None, timeout_s=600)
        cls.cfg = llama.LlamaConfig()
        cls.steps = [llama.Step("decode", 2, 64), llama.Step("prefill", 16)]
        cls.errors = kt.prefetch(llama.prefetch_keys(cls.cfg, cls.steps))
        cls.weights = llama.make_weights(cls.cfg, seed=0)

    @classmethod
    def tearDownClass(cls):
        cls.kt.cache().close()
        cls.daemon.stop("ktuned-llama-layer.log")

    def assertClose(self, got, ref, what):
        err = (got.float() - ref.float()).abs()
        bad = ~(err <= ATOL + RTOL * ref.float().abs())
        self.assertEqual(int(bad.sum()), 0,
                         f"{what}: {int(bad.sum())} elements outside, max error {float(err.max())}")

    def test_every_key_is_served_by_ktune(self):
        keys = llama.prefetch_keys(self.cfg, self.steps)
        self.assertEqual(len(keys), 16)
        for key, error in zip(keys, self.errors):
            self.assertIsNone(error, f"{key}: {error}")

    def test_ktune_layer_matches_eager_and_replays_in_a_graph(self):
        self.check_layer("ktune")

    def test_launched_programmatically_it_matches_eager_too(self):
        # Each kernel may start while the one before it finishes: a layer's chain of ktune
        # kernels (norm, projection, rope; projection, fused norm, projection, silu_and_mul,
        # projection) eager and replayed, every kernel waiting for its inputs itself.
        kt = self.kt
        kt.configure(self.daemon.target, policy="fallback", refresh_s=None, timeout_s=600,
                     programmatic=True)
        try:
            kt.prefetch(llama.prefetch_keys(self.cfg, self.steps))
            self.check_layer("ktune, programmatic")
        finally:
            kt.configure(self.daemon.target, policy="fallback", refresh_s=None, timeout_s=600)

    def check_layer(self, what):
        eager = llama.make_layer(self.cfg, self.weights, "eager")
        kt_layer = llama.make_layer(self.cfg, self.weights, "ktune")
        for step in self.steps:
            with self.subTest(step=step.name), torch.no_grad():
                inputs = llama.make_inputs(self.cfg, step, seed=1)
                ref = eager(**llama.clone_inputs(inputs))
                bound = llama.clone_inputs(inputs)
                got = kt_layer(**bound)
                self.assertClose(got, ref, f"{step.name} {what}")
                # fused_add_rms_norm added the attention output into x, the residual.
                self.assertGreater(float((bound["x"].float() - inputs["x"].float()).abs().max()),
                                   0.0)
                if step.kind != "decode":
                    continue
                from timing import capture_graph
                outs = []
                bound = llama.clone_inputs(inputs)
                graph = capture_graph(lambda: outs.append(kt_layer(**bound)))
                bound["x"].copy_(inputs["x"])
                outs[-1].fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                self.assertClose(outs[-1], ref, f"{step.name} {what} graph replay")


if __name__ == "__main__":
    unittest.main()
