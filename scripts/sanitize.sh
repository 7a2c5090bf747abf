#!/usr/bin/env bash
# Builds the unit tests under one sanitizer into build-<sanitizer>/ and runs them
# (`ctest -L unit`). Usage: scripts/sanitize.sh address|thread [ctest args].
#   address: ASan + UBSan (memory errors, leaks, undefined behaviour)
#   thread:  TSan (data races)
set -euo pipefail
cd "$(dirname "$0")/.."
san="${1:?usage: scripts/sanitize.sh address|thread [ctest args]}"
shift
dir="build-$san"
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMT_SANITIZE="$san" -DMT_WERROR=ON
fi
cmake --build "$dir" -j "$(nproc)" --target unit_tests
# halt_on_error: a report fails its test rather than scrolling past.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
ctest --test-dir "$dir" -L unit --output-on-failure -j "$(nproc)" "$@"
