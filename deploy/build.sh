#!/usr/bin/env bash
# Configures and builds ktune into ${KTUNE_BUILD_DIR:-build}; programs land in build/bin/.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${KTUNE_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${KTUNE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
# Two cores build this in a few minutes; more jobs than cores only thrash memory.
cmake --build "$build" -j "$(nproc)"
