#!/usr/bin/env bash
# Installs the Debian 12 packages ktune builds and tests with, skipping apt entirely when
# all of them are present. The CUDA toolkit (NVRTC, headers) is not a Debian package here:
# it must already be in /usr/local/cuda (or $CUDA_HOME).
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config python3-grpcio python3-protobuf
  python3-dev  # Python's headers for ktune._fastlaunch (client/python/ktune/_fastlaunch.c)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libabsl-dev libsqlite3-dev sqlite3 libssl-dev openssl
  libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev
  libhiredis-dev  # the fleet tier's Redis protocol (server/fleet/redis_connection.cc)
  redis-server    # tests/fleet start their own on a free port
  chromium  # renders `ktune cache report` headless in tests/ktune/cache_report_test.cc
  clang libclang-rt-14-dev  # libFuzzer and the sanitizers for fuzz/ (the fuzz_* tests)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -e "$cuda/include/nvrtc.h" ] || ! ls "$cuda"/lib64/libnvrtc.so* >/dev/null 2>&1; then
  echo "install-deps: no CUDA toolkit with NVRTC at $cuda (set CUDA_HOME); ktune needs it" >&2
  exit 1
fi
