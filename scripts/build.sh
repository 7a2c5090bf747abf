#!/usr/bin/env bash
# Configures and builds moetier into build/ (Release, clang, warnings are errors: MT_WERROR,
# the Vulkan backend: MT_VULKAN, whose packages scripts/setup.sh installs). Extra args go to
# cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMT_WERROR=ON \
    -DMT_VULKAN=ON "$@"
else
  # A build/ configured before an option existed (or by hand without it) gets it turned on.
  missing=()
  for option in MT_WERROR MT_VULKAN; do
    grep -q "^$option:BOOL=ON" build/CMakeCache.txt || missing+=("-D$option=ON")
  done
  [ ${#missing[@]} -eq 0 ] && [ $# -eq 0 ] || cmake -B build "${missing[@]}" "$@"
fi
cmake --build build -j "$(nproc)"
