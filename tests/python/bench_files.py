"""Where the bench scripts are, and how the tests import one by path (bench/ is no package)."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATES = os.path.join(ROOT, "kernel_templates")


def bench_path(name):
    return os.path.join(ROOT, "bench", name)


def load_bench(name, module_name):
    """bench/NAME imported as `module_name` (its own folder is put on sys.path by the script)."""
    spec = importlib.util.spec_from_file_location(module_name, bench_path(name))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
