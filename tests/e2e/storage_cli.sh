#!/usr/bin/env bash
# Storage modes from the command line: same text in every mode, the memory plan and the
# statistics, and one-line errors for bad storage flags.
source "$(dirname "$0")/common.bash"

model="$WORK/olmoe.gguf"
"$MOETIER" synth --preset olmoe-tiny --type q4_k_m -q -o "$model" > /dev/null || { fail "synth"; finish; }

ref=""
for mode in resident mmap stream; do
  for io in uring pread; do
    out=$("$MOETIER" run -m "$model" -p "The tiers must agree" -n 12 --temp 0 --ignore-eos \
          --moe-storage "$mode" --io "$io" --expert-cache 10% --stats-json "$WORK/s.json" 2> "$WORK/err")
    [ -z "$ref" ] && ref=$out
    [ "$out" = "$ref" ] && pass "$mode/$io: same text" || fail "$mode/$io: different text"
    grep -q "memory plan: budget" "$WORK/err" && grep -q "in $mode mode" "$WORK/err" &&
      pass "$mode/$io: plan printed" || fail "$mode/$io: plan: $(head -2 "$WORK/err")"
    /usr/bin/python3 - "$WORK/s.json" "$mode" <<'PY' && pass "$mode/$io: stats json" || fail "$mode/$io: stats json"
import json, sys
s = json.load(open(sys.argv[1]))
t = s["total"]
assert s["tier"] == sys.argv[2]
assert t["requests"] > 0 and t["requests"] == t["hits"] + t["misses"]
if sys.argv[2] == "stream":
    assert t["misses"] > 0 and t["bytes_physical"] >= t["bytes_payload"] > 0
    assert len(s["layers"]) == 4 and sum(l["requests"] for l in s["layers"]) == t["requests"]
PY
  done
done

"$MOETIER" run -m "$model" -p "Hi" -n 4 --temp 0 --moe-storage stream --stats > /dev/null 2> "$WORK/err"
grep -q "experts (stream):.*hits" "$WORK/err" && grep -q "layer  0:" "$WORK/err" &&
  pass "--stats prints totals and layers" || fail "--stats: $(cat "$WORK/err")"

expect_error 2 "bad mode" -- "$MOETIER" run -m "$model" -p "Hi" --moe-storage disk
expect_error 2 "bad io" -- "$MOETIER" run -m "$model" -p "Hi" --io aio
expect_error 2 "bad direct" -- "$MOETIER" run -m "$model" -p "Hi" --direct maybe
expect_error 2 "bad cache size" -- "$MOETIER" run -m "$model" -p "Hi" --expert-cache lots
expect_error 2 "bad cache percent" -- "$MOETIER" run -m "$model" -p "Hi" --expert-cache 150%
expect_error 2 "cache too small" -- "$MOETIER" run -m "$model" -p "Hi" --moe-storage stream --expert-cache 64K
grep -q "raise --expert-cache" "$WORK/err" && pass "says what to change" || fail "no advice"
expect_error 1 "budget too small for the dense part" -- "$MOETIER" run -m "$model" -p "Hi" --mem-budget 1M
grep -q "exceed the memory budget" "$WORK/err" && pass "names the numbers" || fail "budget message"
expect_error 1 "resident does not fit" -- "$MOETIER" run -m "$model" -p "Hi" --moe-storage resident --mem-budget 48M
grep -q "resident needs" "$WORK/err" && pass "suggests stream or mmap" || fail "resident message: $(cat "$WORK/err")"
finish
