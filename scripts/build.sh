#!/usr/bin/env bash
# Configures and builds moetier into build/ (Release, clang, warnings are errors: MT_WERROR,
# the Vulkan backend: MT_VULKAN, whose packages scripts/setup.sh installs). Extra args go to
# cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMT_WERROR=ON -DMT_VULKAN=ON "$@"
elif ! grep -q '^MT_WERROR:BOOL=ON' build/CMakeCache.txt; then
  cmake -B build -DMT_WERROR=ON "$@"  # a build/ configured before MT_WERROR existed
elif ! grep -q '^MT_VULKAN:BOOL=ON' build/CMakeCache.txt; then
  cmake -B build -DMT_VULKAN=ON "$@"  # a build/ configured before MT_VULKAN existed
fi
cmake --build build -j "$(nproc)"
