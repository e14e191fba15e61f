#!/usr/bin/env bash
# The README's second command (and .ci/run): install what is missing, build, run the tests.
# Tests labelled `gpu` skip themselves where no GPU driver is present. Tests labelled `slow`
# (every param point of every shipped template through NVRTC, 2 to 6 minutes of two cores;
# a covering sample of them runs in every suite) run only with KTUNE_SLOW_TESTS=1, or on
# their own with `ctest -L slow` in the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
cd "${KTUNE_BUILD_DIR:-build}"
skip=(-LE slow)
if [ "${KTUNE_SLOW_TESTS:-0}" = 1 ]; then skip=(); fi
ctest --output-on-failure -j "$(nproc)" --timeout 600 "${skip[@]}"
