#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (unit, e2e, reference, fuzz
# smoke), then the unit tests of some layers once more under a sanitizer (scripts/sanitize.sh,
# docs/testing.md). MT_SANITIZE picks it:
#   auto (default, CI): TSan over the threaded layers or ASan+UBSan over the parsers and
#         stores, alternating with the commit count, so both fit CI's 30 minutes on 2 cores;
#   thread | address: every unit test under that sanitizer (about an hour on 2 cores);
#   none: no sanitized run.
set -euo pipefail
cd "$(dirname "$0")/.."
san="${MT_SANITIZE:-auto}"
if [ "$san" = auto ]; then
  if (( $(git rev-list --count HEAD 2>/dev/null || echo 0) % 2 == 0 )); then
    san=thread
    export MT_SANITIZE_LAYERS="${MT_SANITIZE_LAYERS:-base io experts}"
  else
    san=address
    export MT_SANITIZE_LAYERS="${MT_SANITIZE_LAYERS:-base io quant gguf experts}"
  fi
fi
echo "test: sanitizer for this run: $san ${MT_SANITIZE_LAYERS:+(layers: $MT_SANITIZE_LAYERS)}"
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
[ "$san" = none ] || scripts/sanitize.sh "$san"
