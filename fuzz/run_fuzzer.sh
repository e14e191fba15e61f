#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time (the fuzz_* CTest entries):
#   run_fuzzer.sh FUZZER SEED_CORPUS WORK_DIR SECONDS [libFuzzer flags...]
# New inputs go to WORK_DIR/corpus (the seeds in the repo are only read) and a crash, leak
# or timeout leaves its input in WORK_DIR, named by libFuzzer (crash-..., timeout-...).
# Exit status: libFuzzer's (0: nothing found).
set -euo pipefail
fuzzer="$1" seeds="$2" work="$3" seconds="$4"
shift 4
mkdir -p "$work/corpus"
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/" "$@" "$work/corpus" "$seeds"
