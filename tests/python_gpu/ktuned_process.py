"""A ktuned built from this tree, started for a test on a temporary socket and store.

start() -> Daemon (target, dir, process); Daemon.stop(log_name) terminates it, keeps its
log under $KTUNE_TEST_LOG_DIR as log_name when that is set (the GPU host's run.sh sets it)
and removes the folder. REQUIRES: available() (the built ktuned at $KTUNE_BUILD_DIR/bin);
missing() says what else a ktune.torch test lacks here."""

import os
import shutil
import subprocess
import tempfile
import time

BUILD = os.environ.get("KTUNE_BUILD_DIR", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KTUNED = os.path.join(BUILD, "bin", "ktuned")
# The source tree's templates, or the GPU-host bundle's (deploy/gpu-host/run.sh sets it).
TEMPLATES = os.environ.get("KTUNE_TEMPLATES", os.path.join(ROOT, "kernel_templates"))


def available():
    return os.path.exists(KTUNED)


def missing():
    """Why a ktune.torch test against this ktuned cannot run here ("" when it can): torch
    >= 2.4 with CUDA, cuda-python, the built ktuned."""
    try:
        import torch
    except ImportError:
        return "needs torch >= 2.4 with CUDA"
    if not (torch.cuda.is_available() and hasattr(torch.library, "custom_op")):
        return "needs torch >= 2.4 with CUDA"
    if not available():
        return f"needs the built ktuned at {KTUNED}"
    try:
        import ktune
        ktune.cuda_driver()
    except ImportError:
        return "needs cuda-python"
    return ""


class Daemon:
    def __init__(self, prefix):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.target = "unix://" + os.path.join(self.dir, "ktuned.sock")
        self.process = subprocess.Popen(
            [KTUNED, "--listen", self.target, "--db", os.path.join(self.dir, "ktune.db"),
             "--templates", TEMPLATES,
             "--worker", os.path.join(BUILD, "bin", "ktune-worker")],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "ktuned.log"), "w"))
        deadline = time.monotonic() + 60
        while not os.path.exists(self.target[len("unix://"):]):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("ktuned did not start; see " + self.dir + "/ktuned.log")
            time.sleep(0.1)

    def stop(self, log_name):
        self.process.terminate()
        self.process.wait(30)
        keep = os.environ.get("KTUNE_TEST_LOG_DIR")
        if keep:
            shutil.copy(os.path.join(self.dir, "ktuned.log"), os.path.join(keep, log_name))
        shutil.rmtree(self.dir, ignore_errors=True)


def start(prefix="ktune-test-"):
    return Daemon(prefix)


def start_for_torch(prefix="ktune-test-"):
    """(the ktune.torch module, a started Daemon) with torch's primary context current on
    this thread (the ops load kernels into it). REQUIRES: not missing()."""
    import torch
    import ktune.torch as kt
    daemon = start(prefix)
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    return kt, daemon
