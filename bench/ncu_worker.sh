#!/usr/bin/env bash
# ktune-worker under Nsight Compute, for profiling the candidates a tune runs:
#
#   KTUNE_WORKER=bench/ncu_worker.sh KTUNE_WORKER_ENV=NCU ktune tune TEMPLATE ... --quiet
#
# (with --templates from bench/pin_template.py, to profile one config). `ncu ... ktune tune`
# itself cannot do this: the tuner starts its worker with every descriptor above stderr
# closed and a scrubbed environment, and the worker then dies in its driver start-up under
# ncu's injection. Run as the worker, ncu is its parent instead. KTUNE_WORKER_ENV=NCU lets
# the NCU_* settings below through the scrub. ncu's own messages go to a log file: the
# worker's stdout is the tuner's protocol pipe.
#   NCU_KERNEL         kernel name regex (default: every kernel, the reference's included)
#   NCU_SKIP           matching launches to skip first (default 2: the check and a warm-up)
#   NCU_COUNT          launches to profile (default 1)
#   NCU_OUT            report prefix (default /tmp/ncu-worker): PREFIX.log, PREFIX-PID.ncu-rep
#   NCU_SECTIONS       space-separated sections (default below)
#   NCU_TARGET_WORKER  the real worker (default: bin/ktune-worker beside this folder, as in
#                      the GPU host's bundle; else ktune-worker on PATH)
#   NCU_BIN            ncu (default: ncu on PATH, else /usr/local/cuda/bin/ncu)
# Print a report: ncu --import PREFIX-PID.ncu-rep --page details (or --page source
# --print-source sass --csv for per-instruction stalls).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
worker="${NCU_TARGET_WORKER:-$here/../bin/ktune-worker}"
[ -x "$worker" ] || worker="$(command -v ktune-worker)"
ncu="${NCU_BIN:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"
out="${NCU_OUT:-/tmp/ncu-worker}"
sections="${NCU_SECTIONS:-SpeedOfLight WarpStateStats InstructionStats Occupancy \
MemoryWorkloadAnalysis LaunchStats SourceCounters SchedulerStats}"
section_args=()
for s in $sections; do section_args+=(--section "$s"); done
exec "$ncu" --log-file "$out.log" --export "$out-%p" --force-overwrite \
  -k "regex:${NCU_KERNEL:-.}" --launch-skip "${NCU_SKIP:-2}" --launch-count "${NCU_COUNT:-1}" \
  "${section_args[@]}" "$worker" "$@"
