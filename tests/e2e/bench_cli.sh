#!/usr/bin/env bash
# `moetier bench`: llama-bench's table and names, the JSON fields, tests at a depth (-d) and
# one-line errors for bad flags.
source "$(dirname "$0")/common.bash"

model="$WORK/olmoe.gguf"
"$MOETIER" synth --preset olmoe-tiny --type q4_k_m -q -o "$model" > /dev/null || { fail "synth"; finish; }

# -d: the cache holds 40 positions before each test, so the context must hold 40 more
# (a fill past it fails with "the context is full"); names get llama-bench's " @ d40".
"$MOETIER" bench -m "$model" -p 8 -n 4 -d 40 -r 1 --seqs 1,2 > "$WORK/out" 2> "$WORK/err" &&
  grep -qE '^\| .* \|\s+pp8 @ d40 \|\s+[0-9.]+ ± [0-9.]+ \|$' "$WORK/out" &&
  grep -qE '^\| .* \|\s+tg4 @ d40 \|' "$WORK/out" && grep -qE '^\| .* \|\s+tg4-b2 @ d40 \|' "$WORK/out" &&
  grep -qE '^roofline: tg4 @ d40 reads .+ of weights and .+ of KV cache \(f16\) per token' "$WORK/out" &&
  pass "bench -d: table rows" || fail "bench -d: $(cat "$WORK/out" "$WORK/err")"

"$MOETIER" bench -m "$model" -p 8 -n 4 -d 40 -r 2 --json > "$WORK/j.json" 2> "$WORK/err" &&
  $PY - "$WORK/j.json" <<'PY' && pass "bench -d --json" || fail "bench -d --json: $(cat "$WORK/err")"
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["test"] for r in rows] == ["pp8 @ d40", "tg4 @ d40"], rows
assert all(r["n_depth"] == 40 and len(r["tps"]) == 2 and r["avg_ts"] > 0 for r in rows)
assert all(r["kv_bytes_per_position"] > 0 for r in rows)
assert all(r["type_k"] == r["type_v"] == "f16" for r in rows)
PY

# A q8_0 cache (-ctk/-ctv as llama-bench): its bytes per position are 17/32 of f16's.
"$MOETIER" bench -m "$model" -p 0 -n 2 -r 1 --json > "$WORK/f16.json" 2> "$WORK/err" &&
  "$MOETIER" bench -m "$model" -p 0 -n 2 -r 1 --json -ctk q8_0 -ctv q8_0 > "$WORK/q8.json" \
    2> "$WORK/err" &&
  $PY - "$WORK/f16.json" "$WORK/q8.json" <<'PY' && pass "bench -ctk q8_0 -ctv q8_0" ||
import json, sys
f16, q8 = (json.load(open(p))[0] for p in sys.argv[1:])
assert q8["type_k"] == q8["type_v"] == "q8_0", q8
assert q8["kv_bytes_per_position"] * 32 == f16["kv_bytes_per_position"] * 17, (f16, q8)
PY
  fail "bench q8_0 KV: $(cat "$WORK/err")"

# -ctk alone (llama-bench's): K q8_0, V f16, and the bytes per position between the two.
"$MOETIER" bench -m "$model" -p 0 -n 2 -r 1 --json -ctk q8_0 > "$WORK/mixed.json" \
    2> "$WORK/err" &&
  $PY - "$WORK/f16.json" "$WORK/mixed.json" <<'PY' && pass "bench -ctk q8_0 alone" ||
import json, sys
f16, mixed = (json.load(open(p))[0] for p in sys.argv[1:])
assert mixed["type_k"] == "q8_0" and mixed["type_v"] == "f16", mixed
assert mixed["kv_bytes_per_position"] * 64 == f16["kv_bytes_per_position"] * (17 + 32), mixed
PY
  fail "bench -ctk q8_0 alone: $(cat "$WORK/err")"

# Without -d the names are llama-bench's plain ones.
"$MOETIER" bench -m "$model" -p 8 -n 4 -r 1 > "$WORK/out" 2> "$WORK/err" &&
  grep -qE '\|\s+pp8 \|' "$WORK/out" && grep -qE '\|\s+tg4 \|' "$WORK/out" && ! grep -q " @ d" "$WORK/out" &&
  pass "bench: plain names" || fail "bench: $(cat "$WORK/out" "$WORK/err")"

expect_error 2 "negative depth" -- "$MOETIER" bench -m "$model" -d -1
expect_error 2 "bad --seqs" -- "$MOETIER" bench -m "$model" --seqs 1,x
expect_error 2 "depth past the model's context" -- "$MOETIER" bench -m "$model" -d 100000000

finish
