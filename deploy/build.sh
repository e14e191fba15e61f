#!/usr/bin/env bash
# Configures and builds ktune into ${KTUNE_BUILD_DIR:-build}; programs land in build/bin/.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${KTUNE_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${KTUNE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
# A clean build takes about 19 minutes on two cores (most of it the test sources);
# more jobs than cores only thrash memory. RelWithDebInfo keeps line tables only (-g1, set
# in CMakeLists.txt); KTUNE_BUILD_TYPE=Debug gives full debug information.
cmake --build "$build" -j "$(nproc)"
