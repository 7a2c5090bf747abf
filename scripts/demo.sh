#!/usr/bin/env bash
# Installs dependencies, builds, then shows the newest capability on a synthesized model:
# generation with a qwen3moe model in Qwen3-30B-A3B's layout (tiny size, real tokenizer).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
bin=build/bin/moetier
work=${MT_DEMO_DIR:-build/demo}
mkdir -p "$work"
model="$work/tiny-q4_k_m.gguf"

echo "== moetier synth: a tiny qwen3moe model, exactly as llama.cpp lays it out"
"$bin" synth --preset tiny --type q4_k_m --seed 1 --router-skew 1 -o "$model"

echo
echo "== moetier inspect: where the bytes are (dense vs routed experts)"
"$bin" inspect "$model" | sed -n '/^memory plan:/,$p' | grep -v '^  \+[0-9]' 

echo
echo "== moetier run: greedy generation (random weights, so the text is noise)"
"$bin" run -m "$model" -p "The quick brown fox" -n 24 --temp 0

echo
echo "== moetier run --chat: sampled, with the model's chat template"
"$bin" run -m "$model" -p "Tell me about experts." --chat -n 24 --seed 42 --no-display-prompt
