#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (unit, e2e, reference, fuzz
# smoke), then the unit tests once more under a sanitizer (scripts/sanitize.sh). One
# sanitizer per run keeps CI on 2 cores under 30 minutes: ASan+UBSan when the commit hash
# ends in an even hex digit, TSan when odd, so consecutive commits alternate; MT_SANITIZE
# (address, thread or none) overrides. docs/testing.md has the details.
set -euo pipefail
cd "$(dirname "$0")/.."
san="${MT_SANITIZE:-}"
if [ -z "$san" ]; then
  rev="$(git rev-parse HEAD 2>/dev/null || date +%j)"  # no git: the day of the year
  san=thread
  (((16#${rev: -1}) % 2 == 0)) && san=address
fi
echo "test: sanitizer for this run: $san (MT_SANITIZE=address|thread|none to choose)"
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
[ "$san" = none ] || scripts/sanitize.sh "$san"
