#!/usr/bin/env bash
# Installs dependencies, builds, then shows the newest capability on a synthesized model:
# generation with a deepseek2 model in DeepSeek-V3's layout (tiny size, DeepSeek's real
# tokenizer) in the low-bit mix of the widely used DeepSeek-R1 "Q2_K_XL" release (routed
# experts Q2_K, a few Q3_K, the rest Q4_K-Q6_K): multi-head latent attention with its
# compressed KV cache, two dense layers, sigmoid routing over expert groups, its routed
# experts streamed from the file into a cache a quarter of their size, and output held to a
# JSON schema. Where a Vulkan device is (lavapipe counts), MLA attention, the output head, the
# shared experts, the dense layers' FFN and the hottest experts run on it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
bin=build/bin/moetier
work=${MT_DEMO_DIR:-build/demo}
mkdir -p "$work"
model="$work/deepseek3-tiny-ud-q2_k_xl.gguf"

echo "== moetier synth: a tiny DeepSeek-V3-layout model (deepseek2), exactly as llama.cpp lays it"
echo "   out, in the dynamic Q2_K_XL mix (routed experts 2-bit Q2_K, some ffn_down Q3_K)"
"$bin" synth --preset deepseek3-tiny --type ud-q2_k_xl --seed 1 --router-skew 1 -o "$model"

echo
echo "== moetier inspect: the layers' parts, the weight types, and where the bytes are (dense vs"
echo "   routed experts)"
"$bin" inspect "$model" | grep -E '^  (layers? |router|rope)|^weights:'
"$bin" inspect "$model" | sed -n '/^memory plan:/,$p' | grep -v '^  \+[0-9]' 

echo
echo "== moetier run: greedy generation (random weights, so the text is noise); the KV cache"
echo "   holds one compressed latent row per position and layer (see the memory plan line)"
"$bin" run -m "$model" -p "The quick brown fox" -n 24 --temp 0

echo
echo "== moetier profile: which experts the router picks, for placement"
printf 'The history of printing\nHow do hash tables work?\nA poem about the sea\n' > "$work/prompts.txt"
"$bin" profile -m "$model" -f "$work/prompts.txt" -n 16 -o "$work/routing.json" 2> /dev/null

echo
echo "== moetier run, stream mode: experts stream from the file into a cache of 25 % of them,"
echo "   with next-layer prefetch and the profile's hottest experts pinned; same text as above"
"$bin" run -m "$model" -p "The quick brown fox" -n 24 --temp 0 --moe-storage stream \
  --expert-cache 25% --placement "$work/routing.json" --stats

if "$bin" devices | grep -q '^  vulkan:0'; then
  echo
  echo "== moetier run with a GPU tier: MLA attention with its latent cache, the output head, the"
  echo "   shared experts, the dense layers' FFN and the profile's hottest experts (a quarter of"
  echo "   them) live in the memory of vulkan:0 (moetier devices; lavapipe runs Vulkan on the CPU);"
  echo "   the device runs its experts while the CPU runs the rest, streamed as above (the device"
  echo "   sums in an order of its own: the text is the same until a near-tie)"
  "$bin" run -m "$model" -p "The quick brown fox" -n 24 --temp 0 --moe-storage stream \
    --expert-cache 25% --placement "$work/routing.json" --gpu-expert-cache 25% --stats 2>&1 |
    grep -aEv '^moetier:   layer'
fi

echo
echo "== moetier run --chat: sampled, with the model's chat template (DeepSeek-R1's: the answer"
echo "   opens in <think>)"
"$bin" run -m "$model" -p "Tell me about experts." --chat -n 24 --seed 42 --no-display-prompt

echo
echo "== moetier run -j: structured output under a JSON schema (random weights: the values and"
echo "   the spacing are noise, the shape is the schema's: always valid JSON,"
echo "   properties in the schema's order; the same works in serve's response_format and tools)"
"$bin" run -m "$model" -p "A person:" -n 200 --seed 7 --no-display-prompt --moe-storage stream \
  --expert-cache 25% -j '{"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 16}, "age": {"type": "integer"},
    "languages": {"type": "array", "items": {"enum": ["en", "fr", "zh"]}, "maxItems": 3}},
    "required": ["name", "age", "languages"]}'

echo
echo "== moetier run -cnv: a conversation (two turns from stdin), experts streamed into a 25 %"
echo "   cache, keys and values in a q8_0 KV cache (17/32 of f16's memory); the second turn"
echo "   evaluates only what the first did not (see 'kept' below)"
printf 'Hello!\nTell me about experts.\n' |
  "$bin" run -m "$model" -cnv -n 16 --temp 0 --moe-storage stream --expert-cache 25% \
    --kv-type q8_0 2>&1 | grep -av "memory plan"  # -a: random text may hold bytes grep calls binary
