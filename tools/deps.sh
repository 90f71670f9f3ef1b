#!/usr/bin/env bash
# Installs the Debian packages handoff needs, only those missing (apt-get update once).
# Usage: tools/deps.sh [extra packages...]. Sourced or run; needs root when anything is missing.
set -euo pipefail
packages=(cmake g++ clang clang-format clang-tidy libclang-rt-14-dev make spin valgrind pkg-config libconcurrentqueue-dev libgtest-dev libbenchmark-dev libboost-dev libcaf-dev libtbb-dev libhiredis-dev libssl-dev openssl redis-server prometheus-cpp-dev curl python3 gnuplot-nox "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "handoff: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
