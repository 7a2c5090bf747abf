#!/usr/bin/env bash
# Builds unit tests under one sanitizer and runs them (docs/testing.md).
# Usage: scripts/sanitize.sh address|thread [ctest args].
#   address: ASan + UBSan (memory errors, leaks, undefined behaviour)
#   thread:  TSan (data races)
# Every layer's tests, in build-<sanitizer>/; with MT_SANITIZE_LAYERS="base io ..." only those
# layers' tests, with the SIMD kernels uninstrumented, in build-<sanitizer>-quick/ (CI's run).
set -euo pipefail
cd "$(dirname "$0")/.."
san="${1:?usage: scripts/sanitize.sh address|thread [ctest args]}"
shift
layers="${MT_SANITIZE_LAYERS:-}"
if [ -n "$layers" ]; then
  dir="build-$san-quick"
  simd=OFF
  targets=$(printf '%s_tests ' $layers)
  label="^unit\\.($(echo $layers | tr ' ' '|'))\$"
else
  dir="build-$san"
  simd=ON
  targets=unit_tests
  label=unit
fi
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMT_SANITIZE="$san" -DMT_SANITIZE_SIMD_KERNELS="$simd" -DMT_WERROR=ON
fi
echo "sanitize: $san, $dir, tests $targets"
# shellcheck disable=SC2086  # the targets are words
cmake --build "$dir" -j "$(nproc)" --target $targets
# halt_on_error: a report fails its test rather than scrolling past.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
ctest --test-dir "$dir" -L "$label" --output-on-failure -j "$(nproc)" "$@"
