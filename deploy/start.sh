#!/usr/bin/env bash
# The README's first command: install what is missing, build, and start ktune on its
# embedded defaults (the shipped templates). Until the daemon lands this lists the
# templates and their search spaces.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
exec "${KTUNE_BUILD_DIR:-build}/bin/ktune" templates "$@"
