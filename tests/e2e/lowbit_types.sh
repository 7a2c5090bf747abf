#!/usr/bin/env bash
# The low-bit file types end to end on olmoe-tiny: each gives the same text in every storage
# mode and from its pack, inspect names its types, and the server answers on both dynamic
# mixes as `run` does.
source "$(dirname "$0")/common.bash"

run_text() {  # FILE MODE [flags...]
  local file=$1 mode=$2; shift 2
  "$MOETIER" run -m "$file" -p "Every type, every tier" -n 10 --temp 0 --ignore-eos \
    --moe-storage "$mode" "$@" 2> "$WORK/run.err"
}
# mmap reads a pack's panels in place only where the kernels read panels (AVX-512: an
# AVX2 CPU refuses it, as pack_cli.sh checks).
pack_modes="resident stream"

# file type -> the routed experts' type inspect must list
declare -A expert_type=(
  [q2_k]=q2_K [q3_k_s]=q3_K [q3_k_m]=q3_K [q3_k_l]=q3_K [iq4_xs]=iq4_xs [iq4_nl]=iq4_nl
  [iq3_xxs]=iq3_xxs [iq3_s]=iq3_s [iq2_xxs]=iq2_xxs [iq2_xs]=iq2_xs [iq2_s]=iq2_xs
  [iq1_s]=iq1_s [iq1_m]=iq1_m [ud-iq1_s]=iq1_s [ud-q2_k_xl]=q2_K)
for type in q2_k q3_k_s q3_k_m q3_k_l iq4_xs iq4_nl iq3_xxs iq3_s iq2_xxs iq2_xs iq2_s iq1_s \
  iq1_m ud-iq1_s ud-q2_k_xl; do
  model="$WORK/$type.gguf"
  pack="$WORK/$type.pack.gguf"
  "$MOETIER" synth --preset olmoe-tiny --type "$type" -q -o "$model" > /dev/null ||
    { fail "$type: synth"; continue; }
  "$MOETIER" inspect "$model" > "$WORK/inspect" 2>&1 &&
    grep -q "^weights: .* ${expert_type[$type]} " "$WORK/inspect" &&
    grep -q "blk.0.ffn_up_exps.weight  *${expert_type[$type]} " "$WORK/inspect" &&
    pass "$type: inspect names ${expert_type[$type]}" ||
    fail "$type: inspect: $(grep -E '^weights|ffn_up_exps' "$WORK/inspect" | head -2)"
  ref=$(run_text "$model" resident)
  [ -n "$ref" ] || { fail "$type: no text: $(cat "$WORK/run.err")"; continue; }
  [ "$type" = q2_k ] && MOETIER_ISA=avx512 "$MOETIER" run -m "$model" -p x -n 1 > /dev/null 2>&1 &&
    pack_modes="resident mmap stream"
  same=1
  for mode in mmap stream; do
    out=$(run_text "$model" "$mode" --expert-cache 30%)
    [ "$out" = "$ref" ] || { same=0; fail "$type: $mode: different text: $(tail -1 "$WORK/run.err")"; }
  done
  "$MOETIER" pack "$model" -o "$pack" > /dev/null 2> "$WORK/pack.err" ||
    { fail "$type: pack: $(cat "$WORK/pack.err")"; continue; }
  "$MOETIER" pack --verify "$pack" > /dev/null 2>&1 || { same=0; fail "$type: pack --verify"; }
  for mode in $pack_modes; do
    out=$(run_text "$pack" "$mode" --expert-cache 30%)
    [ "$out" = "$ref" ] || { same=0; fail "$type: pack, $mode: different text: $(tail -1 "$WORK/run.err")"; }
  done
  [ "$same" = 1 ] && pass "$type: the same text resident, mmap, stream and from its pack ($pack_modes)"
done

# The server on the dynamic mixes: ten tokens, the same in stream mode as in resident mode.
ask() {  # ask MODEL: the completion's text and its token count
  curl -s "$BASE/completions" -d "{\"model\": \"$1\", \"prompt\": \"Every type, every tier\",
    \"max_tokens\": 10, \"temperature\": 0, \"ignore_eos\": true}" |
    $PY -c 'import json, sys; r = json.load(sys.stdin)
print(repr(r["choices"][0]["text"]), r["usage"]["completion_tokens"])'
}
for type in ud-iq1_s ud-q2_k_xl; do
  [ -f "$WORK/$type.gguf" ] || continue
  answers=()
  for mode in resident stream; do
    start_server "$WORK/serve.log" "$WORK/$type.gguf" --moe-storage "$mode" --expert-cache 30%
    answers+=("$(ask "$type")")
    kill -TERM "$PID"; wait "$PID"
  done
  [[ "${answers[0]}" == *" 10" ]] && [ "${answers[0]}" = "${answers[1]}" ] &&
    pass "$type: the server answers, the same resident and streamed" ||
    fail "$type: server: resident ${answers[0]}, stream ${answers[1]}"
done
finish
