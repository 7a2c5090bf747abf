#!/usr/bin/env bash
# moetier synth + inspect as a user runs them: files, split sets, exact byte accounting,
# and one-line errors for bad input.
source "$(dirname "$0")/common.bash"

# A model for each architecture loads back and inspect's figures are exact.
for preset in tiny mixtral-tiny olmoe-tiny qwen2moe-tiny; do
  out="$WORK/$preset.gguf"
  if ! "$MOETIER" synth --preset "$preset" --type q4_k_m --seed 3 -q -o "$out" > "$WORK/synth.txt"; then
    fail "synth $preset"; continue
  fi
  "$MOETIER" inspect --json "$out" > "$WORK/$preset.json" || { fail "inspect $preset"; continue; }
  if $PY - "$WORK/$preset.json" "$out" <<'PYEOF'
import json, os, sys
j = json.load(open(sys.argv[1]))
plan = j["memory_plan"]
tensors = j["tensors"]
experts = [t for t in tensors if "_exps." in t["name"]]
assert experts, "no expert tensors"
assert plan["expert_bytes"] == sum(t["bytes"] for t in experts), "expert bytes"
assert plan["dense_bytes"] == sum(t["bytes"] for t in tensors if t not in experts), "dense bytes"
assert plan["total_bytes"] == sum(t["bytes"] for t in tensors)
hp = j["hparams"]
k, L = hp["n_expert_used"], hp["n_layer"]
per_expert = [sum(t["bytes"] // t["shape"][2] for t in experts if t["name"].startswith(f"blk.{l}."))
              for l in range(L)]
assert [l["bytes_per_expert"] for l in plan["layers"]] == per_expert
assert plan["expert_bytes_per_token"] == k * sum(per_expert)
embd = next(t for t in tensors if t["name"] == "token_embd.weight")
dense_tok = sum(t["bytes"] for t in tensors if t not in experts and t is not embd) + embd["bytes"] // embd["shape"][1]
assert plan["dense_bytes_per_token"] == dense_tok, (plan["dense_bytes_per_token"], dense_tok)
# offsets are inside the file and aligned
size = os.path.getsize(sys.argv[2])
for t in tensors:
    assert t["offset"] % 32 == 0 and t["offset"] + t["bytes"] <= size, t["name"]
PYEOF
  then pass "inspect figures exact for $preset"; else fail "inspect figures for $preset"; fi
done

# Same seed, same bytes; another seed, other bytes.
"$MOETIER" synth --preset mixtral-tiny --type q8_0 --seed 3 -q -o "$WORK/a.gguf" > /dev/null
"$MOETIER" synth --preset mixtral-tiny --type q8_0 --seed 3 -q -t 1 -o "$WORK/b.gguf" > /dev/null
"$MOETIER" synth --preset mixtral-tiny --type q8_0 --seed 4 -q -o "$WORK/c.gguf" > /dev/null
cmp -s "$WORK/a.gguf" "$WORK/b.gguf" && pass "synth is deterministic across thread counts" || fail "synth not deterministic"
cmp -s "$WORK/a.gguf" "$WORK/c.gguf" && fail "seed has no effect" || pass "seed changes the weights"

# Every file type synthesizes and reads back.
for type in f32 f16 bf16 q8_0 q4_0 q4_k_m q6_k mxfp4; do
  if "$MOETIER" synth --preset olmoe-tiny --type "$type" -q -o "$WORK/t-$type.gguf" > /dev/null &&
     "$MOETIER" inspect "$WORK/t-$type.gguf" > /dev/null; then pass "type $type"; else fail "type $type"; fi
done

# Split sets: open from the first shard; a missing shard is a clear error.
"$MOETIER" synth --preset tiny --type q8_0 -q --split-max-size 40M -o "$WORK/split.gguf" > /dev/null
shards=$(ls "$WORK"/split-0000*-of-0000*.gguf 2>/dev/null | wc -l)
[ "$shards" -ge 2 ] && pass "split into $shards shards" || fail "split produced $shards shards"
[ ! -e "$WORK/split.gguf" ] && pass "no unsplit file" || fail "unsplit file left behind"
first=$(ls "$WORK"/split-00001-of-*.gguf | head -1)
n1=$("$MOETIER" inspect --json "$first" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["tensors"]))')
"$MOETIER" synth --preset tiny --type q8_0 -q -o "$WORK/whole.gguf" > /dev/null
n2=$("$MOETIER" inspect --json "$WORK/whole.gguf" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["tensors"]))')
[ "$n1" = "$n2" ] && pass "split set has all $n1 tensors" || fail "split set has $n1 tensors, whole file $n2"
last=$(ls "$WORK"/split-0000*-of-*.gguf | tail -1)
mv "$last" "$WORK/moved.gguf"
expect_error 1 "missing shard" -- "$MOETIER" inspect "$first"
mv "$WORK/moved.gguf" "$last"

# A NextN/MTP block (glm4moe-tiny has one, as GLM-4.5's files do): written after the trunk,
# counted as unused, never run: the text is the same in every tier and from a pack, whose
# records hold only the trunk's experts.
glm="$WORK/glm.gguf"
"$MOETIER" synth --preset glm4moe-tiny --type q4_k_m -q -o "$glm" > /dev/null || fail "synth glm4moe"
"$MOETIER" inspect "$glm" > "$WORK/out" 2>&1 &&
  grep -q 'glm4moe.block_count  *5$' "$WORK/out" && grep -q 'nextn_predict_layers  *1$' "$WORK/out" &&
  grep -q '^  blk.4.nextn.eh_proj.weight' "$WORK/out" && grep -q '^  unused .*NextN' "$WORK/out" &&
  ! grep -q '^ *4 .*16 ' "$WORK/out" &&
  pass "glm4moe: the NextN block is written and counted as unused" ||
  fail "glm4moe NextN: $(grep -E 'block_count|nextn|unused' "$WORK/out")"
"$MOETIER" pack "$glm" -o "$WORK/glm.pack.gguf" > "$WORK/out" 2>&1 &&
  grep -q "4 layers x 16 experts" "$WORK/out" && pass "glm4moe: the pack holds the trunk's experts" ||
  fail "glm4moe pack: $(cat "$WORK/out")"
glm_text() { "$MOETIER" run -m "$1" -p "The tiers must agree" -n 8 --temp 0 --ignore-eos \
  --moe-storage "$2" --expert-cache 25% 2> /dev/null; }
ref=$(glm_text "$glm" resident)
same=1
for mode in mmap stream; do [ "$(glm_text "$glm" $mode)" = "$ref" ] || same=0; done
for mode in resident stream; do [ "$(glm_text "$WORK/glm.pack.gguf" $mode)" = "$ref" ] || same=0; done
[ -n "$ref" ] && [ "$same" = 1 ] && pass "glm4moe: the same text in every tier and from its pack" ||
  fail "glm4moe: texts differ across tiers"

# Broken files: one line, exit 1, never a crash.
good="$WORK/tiny.gguf"
head -c 100000 "$good" > "$WORK/trunc.gguf"
expect_error 1 "truncated file" -- "$MOETIER" inspect "$WORK/trunc.gguf"
head -c 20 "$good" > "$WORK/trunc-header.gguf"
expect_error 1 "truncated header" -- "$MOETIER" inspect "$WORK/trunc-header.gguf"
cp "$good" "$WORK/magic.gguf"; printf 'XXXX' | dd of="$WORK/magic.gguf" conv=notrunc 2> /dev/null
expect_error 1 "corrupted magic" -- "$MOETIER" inspect "$WORK/magic.gguf"
cp "$good" "$WORK/count.gguf"; printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$WORK/count.gguf" bs=1 seek=8 conv=notrunc 2> /dev/null
expect_error 1 "oversized tensor count" -- "$MOETIER" inspect "$WORK/count.gguf"
echo "not a model" > "$WORK/text.gguf"
expect_error 1 "not GGUF" -- "$MOETIER" inspect "$WORK/text.gguf"
expect_error 1 "missing file" -- "$MOETIER" inspect "$WORK/nope.gguf"
expect_error 1 "a directory" -- "$MOETIER" inspect "$WORK"

# Bad arguments: usage errors exit 2, nothing written.
expect_error 2 "unknown preset" -- "$MOETIER" synth --preset nope -o "$WORK/x.gguf"
expect_error 2 "unknown type" -- "$MOETIER" synth --preset tiny --type q3_k -o "$WORK/x.gguf"
expect_error 2 "missing -o" -- "$MOETIER" synth --preset tiny
expect_error 2 "bad skew" -- "$MOETIER" synth --preset tiny --router-skew 9 -o "$WORK/x.gguf"
expect_error 2 "bad split size" -- "$MOETIER" synth --preset tiny --split-max-size 12Q -o "$WORK/x.gguf"
expect_error 2 "unknown command" -- "$MOETIER" frobnicate
[ ! -e "$WORK/x.gguf" ] && pass "no output for rejected arguments" || fail "output written for rejected arguments"
expect_error 1 "unwritable output" -- "$MOETIER" synth --preset mixtral-tiny -q -o /proc/nope/x.gguf
ls "$WORK"/*.tmp > /dev/null 2>&1 && fail "temporary file left behind" || pass "no temporary files left"

finish
