#!/usr/bin/env bash
# The README's first command: install what is missing, build, and start the daemon ktuned
# on its embedded defaults (the shipped templates, the SQLite file under ~/.cache/ktune,
# a unix socket; compile-only where there is no GPU). ktuned prints where it listens.
# Arguments go to ktuned, e.g.
#   deploy/start.sh --listen 127.0.0.1:50051 --token s3cret
# Ctrl-C (SIGINT) or SIGTERM stops it; the exit status is 0 then.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
exec "${KTUNE_BUILD_DIR:-build}/bin/ktuned" "$@"
