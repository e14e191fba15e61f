#!/usr/bin/env bash
# The README's first command: install what is missing, build, and start the daemon ktuned
# on its embedded defaults (the shipped templates, the SQLite file under ~/.cache/ktune,
# a unix socket; compile-only where there is no GPU). Arguments go to ktuned, e.g.
#   deploy/start.sh --listen 127.0.0.1:50051 --token s3cret
# Ctrl-C (SIGINT) or SIGTERM stops it; the exit status is 0 then.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
bash deploy/build.sh
build="${KTUNE_BUILD_DIR:-build}"
listen="${KTUNE_DAEMON:-unix://${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/ktune/ktuned.sock}}"
if [ "$listen" = "unix://" ]; then listen="unix://${XDG_CACHE_HOME:-$HOME/.cache}/ktune/ktuned.sock"; fi
# The same rule as ktuned's default (server/base/paths.h), unless the arguments say.
for ((i = 1; i <= $#; i++)); do
  j=$((i + 1))
  case "${!i}" in
    --listen) listen="${!j:-$listen}" ;;
    --listen=*) listen="${!i#--listen=}" ;;
    --config) listen="$listen, unless ${!j:-the config file} sets listen" ;;
  esac
done
echo "start: ktuned listens on $listen; Ctrl-C stops it"
exec "$build/bin/ktuned" "$@"
