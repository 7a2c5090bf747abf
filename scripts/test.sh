#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (unit, e2e, reference, fuzz
# smoke). With MT_SANITIZE=address (ASan+UBSan) or thread (TSan) it then runs the unit tests
# once more under that sanitizer (scripts/sanitize.sh). CI does not yet: on 2 cores a
# sanitized build of the unit tests plus their run takes far longer than the 30 minutes CI
# may (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
san="${MT_SANITIZE:-none}"
echo "test: sanitizer for this run: $san (MT_SANITIZE=address|thread|none to choose)"
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
[ "$san" = none ] || scripts/sanitize.sh "$san"
