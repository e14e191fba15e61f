#!/usr/bin/env bash
# Runs on the GPU host from the unpacked bundle (deploy/bundle.sh): every GPU test, then the
# benchmarks, writing logs and the store under $OUT (default ./out), and a short table last.
#   run.sh [STAGE...]   stages: tests rmsnorm elementwise repeat compile daemon spec torch
#                       (default: all)
#                       and, not in the default: gemm (tunes GEMM keys, repeatability, NVRTC
#                       time; $GEMM_KEYS), decode (gemm at a decode step's rows in every
#                       dtype, and gemv f32, beside cuBLAS; $DECODE_DEADLINE_S,
#                       $DECODE_GPU_TEST=0 skips its GPU check), peers (fills
#                       a 10-minute call; flags in $PEERS_ARGS),
#                       llama (bench/llama_layer.py: the Llama-3-8B layer eager / torch.compile /
#                       ktune; flags in $LLAMA_ARGS), overhead (bench/torch_overhead.py: a
#                       ktune.torch op's host time per call beyond a bare cuLaunchKernel),
#                       programmatic (the llama layer twice on one ktuned: every kernel
#                       launched plainly, KTUNE_PROGRAMMATIC_LAUNCH=0, then programmatically;
#                       flags in $LLAMA_ARGS)
# $PACK, when set, is a folder that receives two files, rewritten every 10 s and at the end:
# summary.txt and logs.tar.gz ($OUT's logs, tables and stores; the cubin cache and sockets
# left out). For a transport that brings back only a few files, or a call cut off at its
# limit: OUT=/tmp/run PACK=<the folder that comes back> run.sh decode
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export KTUNE_TEMPLATES="$here/share/ktune/kernel_templates"
export KTUNE_SOURCE_DIR="$here"  # where tests find their test data
export XDG_CACHE_HOME="$out/cache"
export KTUNE_WORKER="$here/bin/ktune-worker"
stages="${*:-tests rmsnorm elementwise repeat compile daemon spec torch}"
want() { [[ " $stages " == *" $1 "* ]]; }
summary="$out/summary.txt"
: > "$summary"

# start_ktuned SOCK DB LOG: a ktuned on unix://$out/SOCK with the store $out/DB, logging to
# $out/LOG, in the background; sets sock (its path) and daemon (its pid) and waits up to
# 10 s for the socket. Stop it with: kill -TERM "$daemon"; wait "$daemon".
start_ktuned() {
  sock="$out/$1"
  "$here/bin/ktuned" --listen "unix://$sock" --db "$out/$2" --worker "$here/bin/ktune-worker" \
    > "$out/$3" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
}
# run_bench NAME DIR LABEL FLAGS...: bench/NAME.py (peers, llama_layer) against the ktuned
# start_ktuned started, its files in DIR; "LABEL: exit N" and its table DIR/NAME.md (or its
# log's tail) into the summary.
run_bench() {
  local name="$1" dir="$2" label="$3"
  shift 3
  mkdir -p "$dir"
  PYTHONPATH="$here/python" python3 "$here/bench/$name.py" --target "unix://$sock" \
    --out "$dir" "$@" > "$dir/$name.log" 2>&1
  echo "$label: exit $? (0: every goal met)" >> "$summary"
  if [ -s "$dir/$name.md" ]; then cat "$dir/$name.md" >> "$summary"
  else tail -n 20 "$dir/$name.log" >> "$summary"; fi
}
# publish: $out's summary and logs into $PACK, each written aside and renamed, so a reader (or
# a cut-off call) finds the last whole copy.
publish() {
  [ -n "${PACK:-}" ] || return 0
  mkdir -p "$PACK"
  cp "$summary" "$PACK/.summary.txt" && mv "$PACK/.summary.txt" "$PACK/summary.txt"
  tar -czf "$PACK/.logs.tar.gz" -C "$out" --exclude=./cache --exclude='*.sock' \
    --exclude='*.lock' --exclude='*logs.tar.gz' . 2> /dev/null  # PACK may be OUT itself
  mv "$PACK/.logs.tar.gz" "$PACK/logs.tar.gz"
}
if [ -n "${PACK:-}" ]; then
  (while sleep 10; do publish; done) &
  publisher=$!
  trap 'kill "$publisher" 2> /dev/null; publish' EXIT
  trap 'exit 143' TERM INT  # so that a call cut off at its limit still publishes at exit
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader >> "$summary" 2>&1

# gtest LABEL LOG PROGRAM ARGS...: a GoogleTest program of the bundle, its output in $out/LOG;
# "LABEL: exit N, " and its PASSED / FAILED / SKIPPED lines into the summary.
gtest() {
  local label="$1" log="$out/$2" program="$here/bin/$3"
  shift 3
  "$program" --gtest_brief=1 "$@" > "$log" 2>&1
  echo "$label: exit $?, $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | tr '\n' ' ')" >> "$summary"
}

if want tests; then
  for t in $(cat "$here/gpu_tests.txt"); do gtest "test $t" "$t.log" "$t"; done
fi

tune() {  # tune LABEL ARGS...: one tune, its headline lines into the summary
  local label="$1"; shift
  "$here/bin/ktune" tune "$@" --db "$out/ktune.db" --quiet --top 5 > "$out/tune-$label.log" 2>&1
  local rc=$?
  echo "tune $label: exit $rc | $(grep -E '^(winner|time|trials) ' "$out/tune-$label.log" | tr -s ' ' | tr '\n' '|')" >> "$summary"
}

if want rmsnorm; then
  for rows in 1 16 256 4096 16384; do
    tune "rmsnorm-bf16-$rows" rmsnorm --dtype bf16 --shape "tokens=$rows,hidden=8192"
  done
fi
if want elementwise; then
  for rows in 1 16 256 4096 16384; do
    tune "elementwise-bf16-$rows" elementwise --dtype bf16 --shape "n=$((rows * 8192))"
  done
fi
if want repeat; then
  # Repeatability: the same tune five times from scratch (fresh store, warm cubin cache).
  for i in 1 2 3 4 5; do
    "$here/bin/ktune" tune rmsnorm --dtype bf16 --shape tokens=4096,hidden=8192 \
      --db "$out/repeat-$i.db" --quiet --top 1 > "$out/repeat-$i.log" 2>&1
    echo "repeat $i: $(grep -E '^(winner|time|trials) ' "$out/repeat-$i.log" | tr -s ' ' | tr '\n' '|')" >> "$summary"
  done
fi
if want compile; then
  "$here/bin/compile_bench" --template rmsnorm --dtype bf16 --shape tokens=4096,hidden=8192 \
    > "$out/compile_bench.txt" 2>&1
  tail -n 12 "$out/compile_bench.txt" >> "$summary"
fi
if want gemm; then
  # GEMM keys tuned in full (every valid candidate, --strategy exhaustive: $out/ktune.db is
  # then a store bench/search_replay can replay the guided search over), bf16 and fp8;
  # $GEMM_KEYS replaces the default list ("dtype:m:n:k ..."). Then one key tuned five times
  # from scratch with the default (guided) search, for its repeatability, and NVRTC's time
  # per candidate at 1 thread and all cores.
  for key in ${GEMM_KEYS:-bf16:16:6144:4096 bf16:128:4096:4096 bf16:4096:4096:4096 f8e4m3:16:6144:4096}; do
    IFS=: read -r dt m n k <<< "$key"
    tune "gemm-$dt-$m-$n-$k" gemm --dtype "$dt" --shape "m=$m,n=$n,k=$k" --strategy exhaustive
  done
  for i in 1 2 3 4 5; do
    "$here/bin/ktune" tune gemm --dtype bf16 --shape m=16,n=4096,k=4096 \
      --db "$out/gemm-repeat-$i.db" --quiet --top 1 > "$out/gemm-repeat-$i.log" 2>&1
    echo "gemm repeat $i: $(grep -E '^(winner|time|trials) ' "$out/gemm-repeat-$i.log" | tr -s ' ' | tr '\n' '|')" >> "$summary"
  done
  for shape in m=16,n=4096,k=4096 m=4096,n=4096,k=4096; do
    "$here/bin/compile_bench" --template gemm --dtype bf16 --shape "$shape" --arch sm_90a --limit 48 \
      > "$out/compile_bench_gemm_${shape//[=,]/_}.txt" 2>&1
    tail -n 12 "$out/compile_bench_gemm_${shape//[=,]/_}.txt" >> "$summary"
  done
fi
if want daemon; then
  # ktuned on this GPU, then the C++ client (a GPU test) and the Python client (the torch
  # example) each get a kernel it tunes, launch it and check its output.
  start_ktuned ktuned.sock daemon.db ktuned.log
  KTUNE_DAEMON="unix://$sock" "$here/bin/client_gpu_test" --gtest_filter='DaemonGpuTest.*' \
    > "$out/daemon_cpp.log" 2>&1
  echo "daemon C++ client: exit $? | $(grep -E 'ktuned tuned|PASSED|FAILED|SKIPPED' "$out/daemon_cpp.log" | tr '\n' '|')" >> "$summary"
  "$here/bin/ktune" get rmsnorm --dtype bf16 --shape tokens=4096,hidden=8192 --policy tune \
    --daemon "unix://$sock" --timeout 600 > "$out/daemon_get.log" 2>&1
  echo "ktune get: exit $? | $(grep -iE 'provenance|time' "$out/daemon_get.log" | tr -s ' ' | tr '\n' '|')" >> "$summary"
  PYTHONPATH="$here/python" python3 "$here/python/examples/rmsnorm_torch.py" 4096 8192 \
    --target "unix://$sock" > "$out/daemon_python.log" 2>&1
  echo "daemon Python client: exit $? | $(tail -n 4 "$out/daemon_python.log" | tr '\n' '|')" >> "$summary"
  kill -TERM "$daemon"; wait "$daemon"
  echo "ktuned: exit $? after SIGTERM" >> "$summary"
fi
if want spec; then
  # `ktune tune --spec` for real on this GPU (a few keys of three templates), run twice: the
  # second run must find every key fresh. Then `ktune cache` on what it stored.
  cat > "$out/smoke-spec.textproto" <<'SPEC'
model: "gpu-host-smoke"
entries { template: "rmsnorm" dtypes: ["bf16"] dims { name: "tokens" values: [1, 4096] } dims { name: "hidden" values: [4096] } }
entries { template: "silu_and_mul" dtypes: ["bf16"] dims { name: "tokens" values: [16] } dims { name: "inter" values: [14336] } }
entries { template: "gemv" dtypes: ["bf16"] dims { name: "n" values: [4096] } dims { name: "k" values: [4096] } dims { name: "batch" values: [1] } }
SPEC
  "$here/bin/ktune" tune --spec "$out/smoke-spec.textproto" --db "$out/spec.db" --budget 24 \
    > "$out/spec-1.log" 2>&1
  echo "spec tune: exit $?" >> "$summary"; tail -n 8 "$out/spec-1.log" >> "$summary"
  "$here/bin/ktune" tune --spec "$out/smoke-spec.textproto" --db "$out/spec.db" --budget 24 \
    > "$out/spec-2.log" 2>&1
  echo "spec tune again: exit $? | $(grep -ciE 'fresh|skip' "$out/spec-2.log") lines say fresh/skipped" >> "$summary"
  "$here/bin/ktune" cache ls --db "$out/spec.db" > "$out/cache-ls.txt" 2>&1
  "$here/bin/ktune" cache stats --db "$out/spec.db" > "$out/cache-stats.txt" 2>&1
  "$here/bin/ktune" cache show 1 --db "$out/spec.db" > "$out/cache-show.txt" 2>&1
  "$here/bin/ktune" cache report --db "$out/spec.db" --out "$out/report" > "$out/cache-report.log" 2>&1
  echo "cache ls/stats/show/report: exit $?" >> "$summary"; cat "$out/cache-ls.txt" >> "$summary"
fi
if want torch; then
  # ktune.torch's ops against torch's own, through a ktuned the test starts (FALLBACK).
  KTUNE_BUILD_DIR="$here" KTUNE_TEST_LOG_DIR="$out" PYTHONPATH="$here/python" python3 -m unittest discover \
    -s "$here/tests/python_gpu" -v > "$out/torch_ops.log" 2>&1
  echo "torch ops: exit $? | $(tail -n 3 "$out/torch_ops.log" | tr '\n' '|')" >> "$summary"
fi
if want overhead; then
  # bench/torch_overhead.py through a ktuned of its own (FALLBACK kernels: the overhead is
  # the op's, whichever config it launches).
  start_ktuned ktuned-overhead.sock overhead.db ktuned-overhead.log
  PYTHONPATH="$here/python" python3 "$here/bench/torch_overhead.py" --target "unix://$sock" \
    --out "$out" > "$out/torch_overhead.log" 2>&1
  rc=$?
  kill -TERM "$daemon"; wait "$daemon"
  echo "torch overhead: exit $rc (0: both goals met)" >> "$summary"
  if [ -s "$out/torch_overhead.md" ]; then cat "$out/torch_overhead.md" >> "$summary"; else tail -n 20 "$out/torch_overhead.log" >> "$summary"; fi
fi
if want peers; then
  # bench/peers.py: ktuned tunes each op and shape, then the winner and its peers (torch
  # eager, torch.compile, Triton, cuBLAS) are timed by one timer and checked against torch.
  # $PEERS_ARGS replaces the defaults, e.g. PEERS_ARGS="--quick --ops gemv,rmsnorm". The
  # full set (60 keys) outlasts one 10-minute call: --deadline-s stops starting keys (the
  # rest are listed as skipped); split it over calls with --ops.
  start_ktuned ktuned-peers.sock peers.db ktuned-peers.log
  # shellcheck disable=SC2086  # PEERS_ARGS is a list of flags
  run_bench peers "$out" peers ${PEERS_ARGS:---budget 32 --deadline-s 480}
  kill -TERM "$daemon"; wait "$daemon"
  echo "ktuned (peers): exit $? after SIGTERM" >> "$summary"
fi
if want decode; then
  # The gemm template at a decode step's rows in every dtype: its GPU check (each path's
  # variants, the few-rows path's among them), then bench/peers.py tuning each key
  # exhaustively beside cuBLAS (f32 at 1, 16 and 32 rows, bf16 and fp8 e4m3 at 1 and 8, on
  # qkv and o), and gemv f32 at its shapes: ktune.torch's linear takes gemv for f32 rows
  # 1-8, which these figures confirm or overturn. Every candidate is measured (--budget 0:
  # with peers.py's default of 32, exhaustive stops at the first 32 of its order, all of them
  # Hopper points). $DECODE_DEADLINE_S (default 120) stops starting keys in each of the three
  # runs; one ktuned serves them all.
  # DECODE_GPU_TEST=0 skips the check (195 s on the H100), leaving a 10-minute call to the
  # tuning runs.
  if [ "${DECODE_GPU_TEST:-1}" != 0 ]; then
    gtest "decode: kernels_gpu_test gemm" decode-gpu-test.log kernels_gpu_test \
      --gtest_filter='*gemm*'
  fi
  start_ktuned ktuned-decode.sock decode.db ktuned-decode.log
  for run in "f32|--ops gemm --gemm-dtypes f32 --gemm-proj qkv,o --gemm-m 1,16,32" \
             "lowp|--ops gemm --gemm-dtypes bf16,f8e4m3 --gemm-proj qkv,o --gemm-m 1,8" \
             "gemv|--ops gemv --dtype f32"; do
    name="${run%%|*}"
    # shellcheck disable=SC2086  # the run's flags are a list
    run_bench peers "$out/decode-$name" "decode $name" ${run#*|} --strategy exhaustive \
      --budget 0 --deadline-s "${DECODE_DEADLINE_S:-120}"
  done
  kill -TERM "$daemon"; wait "$daemon"
  echo "ktuned (decode): exit $? after SIGTERM" >> "$summary"
fi
if want programmatic; then
  # Programmatic launches on and off, side by side: bench/llama_layer.py twice through one
  # ktuned, so the second run finds the first's tuned kernels; torch.compile is timed in
  # both, the ratio's denominator measured beside each. Decode is what it is for: one prefill
  # length by default.
  start_ktuned ktuned-programmatic.sock programmatic.db ktuned-programmatic.log
  for run in plain programmatic; do
    # shellcheck disable=SC2086  # LLAMA_ARGS is a list of flags
    KTUNE_PROGRAMMATIC_LAUNCH=$([ "$run" = plain ] && echo 0 || echo 1) \
      run_bench llama_layer "$out/llama-$run" "llama layer, launches $run" \
      ${LLAMA_ARGS:---tune-budget 0 --tune-timeout-s 200 --breakdown none --prefill 512}
  done
  kill -TERM "$daemon"; wait "$daemon"
  echo "ktuned (programmatic): exit $? after SIGTERM" >> "$summary"
fi
if want llama; then
  # bench/llama_layer.py: the decoder layer three ways, through a ktuned of its own; the
  # bench tunes the layer's keys first (--tune-budget, --tune-timeout-s in $LLAMA_ARGS).
  start_ktuned ktuned-llama.sock llama.db ktuned-llama.log
  # shellcheck disable=SC2086  # LLAMA_ARGS is a list of flags
  run_bench llama_layer "$out" "llama layer" ${LLAMA_ARGS:---tune-budget 16 --tune-timeout-s 180}
  kill -TERM "$daemon"; wait "$daemon"
  echo "ktuned (llama): exit $? after SIGTERM" >> "$summary"
fi
cat "$summary"
