#!/usr/bin/env bash
# Tunes one tuning spec twice from a cold store and cubin cache, once exhaustively and once
# with another strategy (guided by default), then compares the two (search_compare.py): how
# good each key's winner is under one timer, how much of each space was measured, and the wall
# time of each run.
#
#   bench/search_compare.sh SPEC OUT_DIR [STRATEGY]
#
# KTUNE (default: build/bin/ktune), THREADS (compile threads per run, default 16), and
# PARALLEL=1 to run the two searches at once on GPUs 0 and 1 (each with THREADS threads)
# instead of one after the other on GPU 0. EXTRA holds more `ktune tune` flags for both runs:
# EXTRA="--skip gemm" with specs/llama-3-8b.textproto gives issue #14's 120 memory-bound keys.
set -uo pipefail
spec="$1"; out="$2"; strategy="${3:-guided}"
ktune="${KTUNE:-build/bin/ktune}"
threads="${THREADS:-16}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"

run() {  # NAME STRATEGY GPU
  local start end
  rm -rf "$out/$1.db"* "$out/$1-cache"
  start=$(date +%s.%N)
  "$ktune" tune --spec "$spec" --strategy "$2" --gpu "$3" --threads "$threads" --quiet --json \
    --db "$out/$1.db" --cache-dir "$out/$1-cache" ${EXTRA:-} > "$out/$1.json" 2> "$out/$1.err"
  local rc=$?
  end=$(date +%s.%N)
  echo "$1: $2 on GPU $3, exit $rc, $(python3 -c "print(f'{$end - $start:.1f}')") s wall" \
    | tee -a "$out/wall.txt"
}

: > "$out/wall.txt"
if [ "${PARALLEL:-0}" = 1 ]; then
  run exhaustive exhaustive 0 & run "$strategy" "$strategy" 1 & wait
else
  run exhaustive exhaustive 0
  run "$strategy" "$strategy" 0
fi
python3 "$here/search_compare.py" "$out/exhaustive.db" "$out/$strategy.db" \
  --json "$out/compare.json" | tee "$out/compare.txt"
