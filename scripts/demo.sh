#!/usr/bin/env bash
# Installs dependencies, builds, then shows the newest capability on a synthesized model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
bin=build/bin/moetier
work=${MT_DEMO_DIR:-build/demo}
mkdir -p "$work"
echo "== moetier synth: a tiny qwen3moe model in the exact GGUF layout llama.cpp writes"
"$bin" synth --preset tiny --type q4_k_m --seed 1 -o "$work/tiny-q4_k_m.gguf"
echo
echo "== moetier inspect: where the bytes are (dense vs routed experts)"
"$bin" inspect "$work/tiny-q4_k_m.gguf"
