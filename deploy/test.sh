#!/usr/bin/env bash
# The README's second command (and .ci/run): install what is missing, build, run every
# test. Tests labelled `gpu` skip themselves where no GPU driver is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
cd "${KTUNE_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 600
