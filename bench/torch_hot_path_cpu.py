"""Host time per call of a ktune.torch op on this machine's CPU, without a GPU: the op's
Python path against its hot path (ktune._fastlaunch.hot_call), both launching through
ktune._fastlaunch into a no-op cuLaunchKernel, CPU tensors standing in for CUDA ones (device
-1), the kernel cache holding a CachedKernel over tests/python's fake driver. It measures
what the hot path saves of ktune.torch's own host time; bench/torch_overhead.py measures the
op against a bare cuLaunchKernel on a GPU.

    PYTHONPATH=build/python python3 bench/torch_hot_path_cpu.py    # needs torch and gcc

The Python path here skips `_tensor`'s is_cuda test (CPU tensors) and looks the kernel up
without the cache's dict: a little less work than on a GPU host. It is today's Python path
(with the hot path's own bookkeeping); the code before the hot path ran in this harness with
its torch.py in place of today's."""

import ctypes
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import ktune.torch as kt  # noqa: E402
from ktune import _fastlaunch  # noqa: E402
from test_fastlaunch import fast_entry  # noqa: E402
from test_loaded_kernel import artifact  # noqa: E402


def noop_launch():
    """The address of a C function that returns 0 (CUDA_SUCCESS) for any arguments. The
    library's folder is removed once it is loaded: the mapping outlives the file."""
    with tempfile.TemporaryDirectory(prefix="ktune-hot-") as folder:
        source, library = os.path.join(folder, "noop.c"), os.path.join(folder, "libnoop.so")
        with open(source, "w") as f:
            f.write("int ktune_noop_launch(void) { return 0; }\n")
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
        noop = ctypes.CDLL(library)
    return ctypes.cast(noop.ktune_noop_launch, ctypes.c_void_p).value


def bench(f, n=100000):
    """Best of 7 rounds of n calls, microseconds per call."""
    for _ in range(1000):
        f()
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def main():
    entry, _ = fast_entry(artifact())
    _fastlaunch.set_launch(noop_launch())  # in place of the test's recording one

    class Cache:
        generation = [0]

        def peek(self, key):
            return entry

    def tensor_on_cpu(op, name, t, device=None, dtype=None, dim=None):
        if not isinstance(t, torch.Tensor) or (device is not None and t.get_device() != device):
            raise ValueError(name)
        if (t.dtype not in kt._DTYPES) if dtype is None else t.dtype != dtype:
            raise ValueError(name)
        if not t.is_contiguous() or (dim is not None and t.dim() != dim):
            raise ValueError(name)
        return t

    kt._cache = Cache()
    kt._entry = lambda op, key: entry
    kt._stream_handle = lambda device: 0
    kt._current_device = lambda: -1
    kt._one_gpu = True
    kt._tensor = tensor_on_cpu
    _fastlaunch.hot_setup(torch.Tensor, torch.is_grad_enabled, lambda: -1,
                          lambda device: 0, torch.empty_like)
    kt._hot_call = _fastlaunch.hot_call
    x = torch.rand(8, 4096, dtype=torch.bfloat16)
    w = torch.rand(4096, dtype=torch.bfloat16)
    kt.rms_norm(x, w, 1e-6)  # the Python path once: it records the plan
    table = kt._hot["rms_norm"]
    assert len(table) == 1, "no plan recorded"
    hot = _fastlaunch.hot_call
    print(f"torch {torch.__version__}, rms_norm 8 x 4096 bf16, us per call (best of 7 x 100k)")
    for round in range(3):
        kt._hot_call = None
        python = bench(lambda: kt.rms_norm(x, w, 1e-6))
        kt._hot_call = hot
        print(f"round {round}: Python path {python:.2f}, hot path "
              f"{bench(lambda: kt.rms_norm(x, w, 1e-6)):.2f} (hot_call alone "
              f"{bench(lambda: hot(table, x, w, 1e-6)):.2f}, a miss "
              f"{bench(lambda: hot({}, x, w, 1e-6)):.2f}), torch.empty_like "
              f"{bench(lambda: torch.empty_like(x)):.2f}")


if __name__ == "__main__":
    main()
