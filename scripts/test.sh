#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (unit, e2e, reference, fuzz smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
