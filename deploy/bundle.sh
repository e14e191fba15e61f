#!/usr/bin/env bash
# Packs what the GPU test host needs into .bundle/ (ignored by git), so one `device` call
# can run every GPU test and benchmark: stripped programs, the GPU test programs (those
# CTest labels `gpu`), the templates and test data, the shared libraries the host lacks
# (its own libc, libstdc++, CUDA driver and NVRTC are used), and deploy/gpu-host/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${KTUNE_BUILD_DIR:-build}"
out=.bundle
KTUNE_BUILD_DIR="$build" bash deploy/build.sh

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/share/ktune" "$out/tests"
# gemm_probe: the gemm kernels' development harness (bench/gemm_probe), timed beside cuBLAS.
programs=(ktune ktuned ktune-worker ktune-warm compile_bench search_retime gemm_probe)
# The GPU tests that are programs of the build (python_torch_gpu_test runs python3: run.sh's
# torch stage runs it from tests/python_gpu).
gpu_tests=$(cd "$build" && ctest -N -L gpu --show-only=json-v1 |
  python3 -c 'import json,sys,os; print("\n".join(sorted({os.path.basename(t["command"][0]) for t in json.load(sys.stdin)["tests"] if os.path.dirname(t["command"][0]) == os.path.abspath("bin")})))')
for p in "${programs[@]}" $gpu_tests; do
  strip -o "$out/bin/$p" "$build/bin/$p"
done
cp -r kernel_templates "$out/share/ktune/"
mkdir -p "$out/tests/gpu"
cp -r tests/templates "$out/tests/"
cp -r tests/gpu/testdata "$out/tests/gpu/"
cp deploy/gpu-host/run.sh "$out/run.sh"
mkdir -p "$out/bench"
cp bench/peers.py bench/llama_layer.py bench/torch_overhead.py bench/timing.py bench/manifest_text.py \
  "$out/bench/"  # run.sh's peers, llama and overhead stages
cp bench/pin_template.py bench/ncu_worker.sh "$out/bench/"  # profiling one config by hand
cp bench/align_probe.py bench/nvrtc_program.py "$out/bench/"  # what alignment alone costs a streaming copy
mkdir -p "$out/examples"
cp examples/llama_decoder_layer.py "$out/examples/"  # bench/llama_layer.py's layer
# The Python client as generated in the build (no grpc_tools on the host), its example and tests.
cp -r "$build/python" "$out/python"
cp -r client/python/examples "$out/python/examples"
cp -r tests/python "$out/tests/python"
cp -r tests/python_gpu "$out/tests/python_gpu"
echo "$gpu_tests" > "$out/gpu_tests.txt"

# Shared libraries from Debian's gRPC/protobuf/abseil/SQLite/OpenSSL stack that the host
# (Ubuntu 24.04, CUDA 13.0) does not have. System and CUDA libraries (the driver, NVRTC, and
# gemm_probe's cuBLAS and runtime, hundreds of MB) stay the host's.
for p in "$out"/bin/*; do ldd "$p"; done | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libnvrtc[^/]*|libcuda|libcudart|libcublas|libcublasLt)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
du -sh "$out"
