#!/usr/bin/env bash
# NVRTC's time per candidate for the gemm template's Hopper kernel as shipped (ktune's own
# PTX wrappers, kernel_templates/include/ktune) and written with CUTLASS's CuTe
# (cute_gemm.cu), the same tile configs, ktune's compile options (nvrtc_time.py). No GPU.
#   bench/cute_compile/run.sh [CUTLASS_INCLUDE_DIR]
# Without an argument, fetches CUTLASS's headers from PyPI (the nvidia-cutlass wheel, which
# carries them) into a temporary folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
cuda="${CUDA_HOME:-/usr/local/cuda}"
cutlass="${1:-}"
if [ -z "$cutlass" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --no-deps -q -d "$tmp" "nvidia-cutlass==${CUTLASS_VERSION:-4.2.0.0}"
  python3 -m zipfile -e "$tmp"/nvidia_cutlass-*.whl "$tmp/w"
  cutlass="$tmp/w/cutlass_library/source/include"
fi
repeat="${REPEAT:-3}"
bounds=(--define KTUNE_MAX_THREADS=384 --define KTUNE_MIN_BLOCKS=1
        --define "KTUNE_LAUNCH_BOUNDS=__launch_bounds__(384,1)")
for bn in 128 256; do
  echo "== ktune's wrappers, BM 128, BN $bn, 4 stages"
  python3 "$here/nvrtc_time.py" "$root/kernel_templates/gemm/gemm.cu" --cuda "$cuda" \
    --include "$root/kernel_templates/include" "${bounds[@]}" --repeat "$repeat" \
    --name-expr "gemm_wgmma_kernel<__nv_bfloat16, 128, $bn, 4, 1, 8, 0, 1, 0, 0>"
  echo "== CuTe, BM 128, BN $bn, 4 stages"
  python3 "$here/nvrtc_time.py" "$here/cute_gemm.cu" --cuda "$cuda" --include "$here" \
    --include "$cutlass" --include "$cuda/include/cccl" --option=-default-device \
    --repeat "$repeat" --name-expr "cute_gemm_kernel<cutlass::bfloat16_t, 128, $bn, 4>"
done
