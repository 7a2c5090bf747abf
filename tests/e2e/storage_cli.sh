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
      { [ "$mode" != stream ] || grep -q "in stream mode (cache .*, 8 experts)" "$WORK/err"; } &&
      pass "$mode/$io: plan printed" || fail "$mode/$io: plan: $(head -2 "$WORK/err")"
    $PY - "$WORK/s.json" "$mode" <<'PY' && pass "$mode/$io: stats json" || fail "$mode/$io: stats json"
import json, sys
s = json.load(open(sys.argv[1]))
t = s["total"]
assert s["tier"] == sys.argv[2]
# 10 % of olmoe-tiny's 64 experts: at least 4 (a layer's top-k) of each of its 2 slot sizes
assert s["cache_slots"] == (8 if sys.argv[2] == "stream" else 0), s["cache_slots"]
assert t["requests"] > 0 and t["requests"] == t["hits"] + t["misses"]
if sys.argv[2] == "stream":
    assert t["misses"] > 0 and t["bytes_physical"] >= t["bytes_payload"] > 0
    assert len(s["layers"]) == 4 and sum(l["requests"] for l in s["layers"]) == t["requests"]
PY
  done
done

"$MOETIER" run -m "$model" -p "Hi" -n 4 --temp 0 --moe-storage stream --stats > /dev/null 2> "$WORK/err"
grep -q "experts (stream):.*hits" "$WORK/err" && grep -q "layer  0:" "$WORK/err" &&
  grep -q "expert cache: 64 slots, 100.0% of the model's 64 experts" "$WORK/err" &&
  pass "--stats prints totals and layers" || fail "--stats: $(cat "$WORK/err")"

# bench reports the statistics of its first decode test, batched or not: 2 tokens x 3
# sequences -> 6 tokens decoded.
"$MOETIER" bench -m "$model" -p 0 -n 2 -r 1 --seqs 3 --moe-storage stream --expert-cache 30% \
  --stats > /dev/null 2> "$WORK/err"
$PY - "$WORK/err" <<'PY' && pass "bench --seqs 3 --stats" || fail "bench --seqs 3 --stats: $(cat "$WORK/err")"
import re, sys
err = open(sys.argv[1]).read()
requests = int(re.search(r"experts \(stream\): (\d+) requests", err).group(1))
per_token = float(re.search(r"per token: .* read, ([0-9.]+) expert requests", err).group(1))
assert requests > 0 and abs(per_token - requests / 6) < 0.05, (requests, per_token)
PY

# bench --read-trace writes the timed decode's expert reads, the very reads the statistics
# count, and io_bench --replay reads them again.
"$MOETIER" bench -m "$model" -p 0 -n 2 -r 1 --moe-storage stream --expert-cache 30% \
  --stats-json "$WORK/s.json" --read-trace "$WORK/trace.txt" > /dev/null 2> "$WORK/err"
$PY - "$WORK/s.json" "$WORK/trace.txt" "$model" <<'PY' && pass "bench --read-trace" || fail "bench --read-trace: $(cat "$WORK/err")"
import json, sys
t = json.load(open(sys.argv[1]))["total"]
lines = open(sys.argv[2]).read().splitlines()
assert lines[0] == "moetier-read-trace 1" and lines[1] == "file 0 " + sys.argv[3], lines[:2]
reads = [tuple(map(int, l.split()[1:])) for l in lines[2:]]
assert len(reads) == t["reads"] > 0, (len(reads), t["reads"])
assert sum(r[2] for r in reads) == t["bytes_physical"]
PY
io_bench=$(dirname "$MOETIER")/io_bench
"$io_bench" --replay "$WORK/trace.txt" --depth 4 > "$WORK/out" 2>&1 &&
  grep -q "replay .* $(grep -c '^read' "$WORK/trace.txt") reads" "$WORK/out" &&
  pass "io_bench --replay" || fail "io_bench --replay: $(cat "$WORK/out")"
"$io_bench" --replay "$WORK/trace.txt" --depth 4 --busy 1 > "$WORK/out" 2>&1 &&
  grep -q "replay .*, 1 busy threads  $(grep -c '^read' "$WORK/trace.txt") reads" "$WORK/out" &&
  pass "io_bench --replay --busy" || fail "io_bench --replay --busy: $(cat "$WORK/out")"
expect_error 2 "--read-trace without stream" -- "$MOETIER" bench -m "$model" -p 0 -n 2 -r 1 \
  --moe-storage resident --read-trace "$WORK/t2.txt"
[ ! -e "$WORK/t2.txt" ] && pass "no trace file after the error" || fail "a trace file was written"

# Prefetch, eviction policies and placement change where bytes come from, never the text.
printf 'The tiers must agree\nRouting statistics of a second prompt\n' > "$WORK/prompts.txt"
"$MOETIER" profile -m "$model" -f "$WORK/prompts.txt" -n 4 -o "$WORK/profile.json" > "$WORK/out" 2> "$WORK/err" &&
  grep -q "wrote .*profile.json" "$WORK/out" && pass "profile writes statistics" ||
  fail "profile: $(cat "$WORK/out" "$WORK/err")"
$PY - "$WORK/profile.json" <<'PY' && pass "profile json" || fail "profile json"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["arch"] == "olmoe" and s["n_layer"] == 4 and s["tokens"] > 0
assert len(s["counts"]) == 4 and all(len(l) == s["n_expert"] for l in s["counts"])
# every token of every layer picked n_expert_used experts
assert len({sum(l) for l in s["counts"]}) == 1 and sum(s["counts"][0]) % s["tokens"] == 0
PY
for args in "--prefetch off" "--prefetch next-layer --stats" "--prefetch-depth 3" "--eviction lfu" \
            "--eviction placement --placement $WORK/profile.json" \
            "--placement $WORK/profile.json --placement-share 0.25"; do
  out=$("$MOETIER" run -m "$model" -p "The tiers must agree" -n 12 --temp 0 --ignore-eos \
        --moe-storage stream --expert-cache 30% $args 2> "$WORK/err")
  [ "$out" = "$ref" ] && pass "stream $args: same text" || fail "stream $args: different text"
done
"$MOETIER" run -m "$model" -p "The tiers must agree" -n 12 --temp 0 --moe-storage stream \
  --expert-cache 30% --stats > /dev/null 2> "$WORK/err"
grep -q "prefetch (depth 1): recall@k" "$WORK/err" && pass "--stats reports prefetch" ||
  fail "prefetch stats: $(cat "$WORK/err")"
rm -f "$WORK/live.json"
for i in 1 2; do
  "$MOETIER" run -m "$model" -p "Hi" -n 4 --temp 0 --moe-storage stream \
    --routing-stats "$WORK/live.json" > /dev/null 2> "$WORK/err" || fail "routing stats run $i"
done
$PY -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["tokens"] >= 8' \
  "$WORK/live.json" && pass "--routing-stats accumulates over restarts" || fail "routing stats file"

expect_error 2 "bad prefetch" -- "$MOETIER" run -m "$model" -p "Hi" --prefetch always
expect_error 2 "bad prefetch depth" -- "$MOETIER" run -m "$model" -p "Hi" --prefetch-depth 0
expect_error 2 "bad eviction" -- "$MOETIER" run -m "$model" -p "Hi" --eviction mru
expect_error 2 "bad placement share" -- "$MOETIER" run -m "$model" -p "Hi" --placement-share 2
expect_error 2 "placement policy without a profile" -- "$MOETIER" run -m "$model" -p "Hi" \
  --moe-storage stream --eviction placement
expect_error 1 "missing placement file" -- "$MOETIER" run -m "$model" -p "Hi" \
  --moe-storage stream --placement "$WORK/nope.json"
echo '{"arch":"olmoe"}' > "$WORK/bad.json"
expect_error 1 "broken placement file" -- "$MOETIER" run -m "$model" -p "Hi" \
  --moe-storage stream --placement "$WORK/bad.json"
expect_error 1 "profile without prompts" -- "$MOETIER" profile -m "$model" -f "$WORK/nope.txt" \
  -o "$WORK/p.json"

expect_error 2 "bad mode" -- "$MOETIER" run -m "$model" -p "Hi" --moe-storage disk
expect_error 2 "bad io" -- "$MOETIER" run -m "$model" -p "Hi" --io aio
expect_error 2 "bad direct" -- "$MOETIER" run -m "$model" -p "Hi" --direct maybe
expect_error 2 "bad cache size" -- "$MOETIER" run -m "$model" -p "Hi" --expert-cache lots
expect_error 2 "bad cache percent" -- "$MOETIER" run -m "$model" -p "Hi" --expert-cache 150%
expect_error 2 "cache too small" -- "$MOETIER" run -m "$model" -p "Hi" --moe-storage stream --expert-cache 64K
grep -q "raise --expert-cache" "$WORK/err" && pass "says what to change" || fail "no advice"
expect_error 1 "budget too small for the dense part" -- "$MOETIER" run -m "$model" -p "Hi" --mem-budget 1M
grep -q "exceed the memory budget" "$WORK/err" && pass "names the numbers" || fail "budget message"
# -t 2: the scratch grows with the threads, and the dense part must fit in 56M on any machine.
expect_error 1 "resident does not fit" -- "$MOETIER" run -m "$model" -p "Hi" --moe-storage resident --mem-budget 56M -t 2
grep -q "resident needs" "$WORK/err" && pass "suggests stream or mmap" || fail "resident message: $(cat "$WORK/err")"
finish
