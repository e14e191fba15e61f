#!/usr/bin/env bash
# Kernel Tuner 1.5.0 for bench/kernel_tuner_compare.py on a GPU host without internet
# (CPython 3.12, x86-64 Linux, numpy, scipy, scikit-learn and cuda-bindings already there):
#   bench/kernel_tuner_wheels.sh fetch DIR            on a machine that reaches PyPI
#   bench/kernel_tuner_wheels.sh install DIR TARGET   on the host; then PYTHONPATH=TARGET
#
# The wheels are what `import kernel_tuner` needs beyond what the host has: kernel_tuner,
# python-constraint2 (its search space), xmltodict and packaging (kernel_tuner.file_utils,
# imported by kernel_tuner.interface), jsonschema with attrs, jsonschema-specifications,
# referencing and rpds-py, and typing-extensions. Left out: pandas and pymoo, declared by
# kernel_tuner but imported only inside functions the comparison never calls; hence
# --no-deps, or pip would refuse kernel_tuner's requirements.
set -euo pipefail
python="${PYTHON:-python3}"
case "${1:-}" in
  fetch)
    dir="${2:?fetch DIR}"
    "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --abi cp312 --platform manylinux2014_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$dir" \
      kernel_tuner==1.5.0 python-constraint2 xmltodict jsonschema attrs \
      jsonschema-specifications referencing rpds-py packaging typing_extensions
    ;;
  install)
    dir="${2:?install DIR TARGET}"
    target="${3:?install DIR TARGET}"
    rm -rf "$target"
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --find-links "$dir" --target "$target" "$dir"/*.whl
    PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$python" - <<'PY'
import kernel_tuner
from kernel_tuner.interface import strategy_map
from kernel_tuner.backends import nvcuda
strategy_map["bayes_opt"].tune, strategy_map["random_sample"].tune  # both import
print(f"kernel_tuner {kernel_tuner.__version__}: bayes_opt, random_sample import;",
      "cuda-python", "found" if nvcuda.driver else "NOT found (the nvcuda backend needs it)")
PY
    ;;
  *)
    echo "usage: $0 fetch DIR | install DIR TARGET" >&2
    exit 2
    ;;
esac
