#!/usr/bin/env bash
# moetier pack as a user runs it: the pack gives the same text as the original in every
# storage mode, inspect shows the same memory plan, --verify finds a flipped byte, and bad
# input is a one-line error that leaves no output file behind.
source "$(dirname "$0")/common.bash"

model="$WORK/olmoe.gguf"
pack="$WORK/olmoe.pack.gguf"
"$MOETIER" synth --preset olmoe-tiny --type q4_k_m -q -o "$model" > /dev/null || { fail "synth"; finish; }

"$MOETIER" pack "$model" -o "$pack" > "$WORK/out" 2> "$WORK/err" &&
  grep -q "^wrote $pack (1 file" "$WORK/out" && grep -q "4 layers x 16 experts" "$WORK/out" &&
  pass "pack writes the pack" || fail "pack: $(cat "$WORK/out" "$WORK/err")"
# Not a terminal: no progress line on stderr.
[ ! -s "$WORK/err" ] && pass "no progress off a terminal" || fail "stderr: $(cat "$WORK/err")"
ls "$WORK" | grep -q tmp && fail "temporary file left: $(ls "$WORK")" || pass "no temporary file left"

run_text() {  # FILE MODE [flags...]
  local file=$1 mode=$2; shift 2
  "$MOETIER" run -m "$file" -p "The pack must agree" -n 12 --temp 0 --ignore-eos \
    --moe-storage "$mode" "$@" 2> "$WORK/run.err"
}
ref=$(run_text "$model" resident)
[ -n "$ref" ] || fail "no text from the original"
# mmap reads the pack's panels in place only where the kernels read panels of every K-quant
# (AVX-512; AVX2 keeps Q6_K in rows): elsewhere it is refused, as checked below for avx2.
modes="resident stream"
MOETIER_ISA=avx512 "$MOETIER" run -m "$model" -p x -n 1 > /dev/null 2>&1 && modes="resident mmap stream"
for mode in $modes; do
  out=$(run_text "$pack" "$mode" --expert-cache 30%)
  [ "$out" = "$ref" ] && pass "$mode: same text from the pack" || fail "$mode: different text: $(cat "$WORK/run.err")"
done

# The pack stores K-quants as 16-row panels (the AVX-512 kernels' form). Kernels that read
# some of them as rows (MOETIER_ISA=avx2: Q6_K) get those back as rows in resident and stream
# mode; mmap mode cannot turn them in place and says what to do, and a --rows pack serves it.
"$MOETIER" inspect "$pack" > "$WORK/out" 2>&1 && grep -q 'moetier.expert_weights .*"panels16"' "$WORK/out" &&
  pass "the pack stores panels" || fail "no moetier.expert_weights = panels16"
if MOETIER_ISA=avx2 "$MOETIER" run -m "$model" -p x -n 1 > /dev/null 2>&1; then
  ref_avx2=$(MOETIER_ISA=avx2 run_text "$model" resident)
  for mode in resident stream; do
    out=$(MOETIER_ISA=avx2 run_text "$pack" "$mode" --expert-cache 30%)
    [ "$out" = "$ref_avx2" ] && pass "avx2 $mode: its Q6_K panels become rows, same text" ||
      fail "avx2 $mode: different text: $(cat "$WORK/run.err")"
  done
  MOETIER_ISA=avx2 run_text "$pack" mmap > "$WORK/out"
  rc=$?
  last=$(tail -1 "$WORK/run.err")
  [ "$rc" -eq 2 ] && [ ! -s "$WORK/out" ] &&
    [[ "$last" == *"stores expert weights as 16-row panels, which the avx2 kernels cannot read in place"*"--rows" ]] &&
    pass "avx2 mmap: refused -> $last" || fail "avx2 mmap: exit $rc: $(cat "$WORK/run.err")"
  "$MOETIER" pack --rows -q "$model" -o "$WORK/rows.pack.gguf" > "$WORK/out" 2>&1 &&
    grep -q "K-quants as GGUF rows" "$WORK/out" || fail "pack --rows: $(cat "$WORK/out")"
  out=$(MOETIER_ISA=avx2 run_text "$WORK/rows.pack.gguf" mmap)
  [ "$out" = "$ref_avx2" ] && pass "avx2 mmap: a --rows pack, same text" ||
    fail "avx2 mmap of the rows pack: $(cat "$WORK/run.err")"
else
  echo "skip: avx2 (not supported here)"
fi

# Stream mode reads each expert of a pack with one request.
run_text "$pack" stream --expert-cache 30% --prefetch off --stats-json "$WORK/s.json" > /dev/null
$PY - "$WORK/s.json" <<'PY' && pass "stream: one read per expert" || fail "stream: reads per expert"
import json, sys
t = json.load(open(sys.argv[1]))["total"]
assert t["misses"] > 0 and t["reads"] == t["misses"], t
PY

# inspect shows the same dense/expert memory plan.
"$MOETIER" inspect --json "$model" > "$WORK/a.json" && "$MOETIER" inspect --json "$pack" > "$WORK/b.json" ||
  fail "inspect"
$PY - "$WORK/a.json" "$WORK/b.json" <<'PY' && pass "inspect: same memory plan" || fail "inspect: plans differ"
import json, sys
a, b = (json.load(open(p))["memory_plan"] for p in sys.argv[1:3])
assert a == b, (a, b)
PY
"$MOETIER" inspect "$pack" > "$WORK/out" 2>&1 && grep -q "moetier.expert_layout" "$WORK/out" &&
  pass "inspect lists the pack's layout key" || fail "inspect text: $(head -5 "$WORK/out")"

# A split pack loads the same.
"$MOETIER" pack "$model" -o "$WORK/split.gguf" --split-max-size 1M > "$WORK/out" 2>&1 &&
  grep -q "files" "$WORK/out" || fail "split pack: $(cat "$WORK/out")"
first=$(ls "$WORK"/split-00001-of-*.gguf 2> /dev/null | head -1)
if [ -n "$first" ]; then
  out=$(run_text "$first" stream --expert-cache 30%)
  [ "$out" = "$ref" ] && pass "split pack: same text" || fail "split pack: different text: $(cat "$WORK/run.err")"
  "$MOETIER" pack --verify "$first" > "$WORK/out" 2>&1 && grep -q "^ok: " "$WORK/out" &&
    pass "split pack verifies" || fail "split verify: $(cat "$WORK/out")"
else
  fail "no split shards: $(ls "$WORK")"
fi

# --verify: a good pack, then one byte flipped inside layer 2's expert 5.
"$MOETIER" pack --verify "$pack" > "$WORK/out" 2> "$WORK/err" &&
  grep -q "^ok: .*64 expert records" "$WORK/out" && pass "verify: good pack" ||
  fail "verify good: $(cat "$WORK/out" "$WORK/err")"
offset=$("$MOETIER" inspect --json "$pack" | $PY -c '
import json, sys
t = {t["name"]: t for t in json.load(sys.stdin)["tensors"]}
print(t["blk.2.ffn_up.5.weight"]["offset"] + 100)')
cp "$pack" "$WORK/bad.pack.gguf"
printf '\xff' | dd of="$WORK/bad.pack.gguf" bs=1 seek="$offset" conv=notrunc status=none
expect_error 1 "verify: corrupt pack" -- "$MOETIER" pack --verify "$WORK/bad.pack.gguf"
grep -q "^layer 2 expert 5: checksum mismatch: .*bad.pack.gguf offset" "$WORK/out" &&
  [ "$(wc -l < "$WORK/out")" -eq 1 ] && pass "verify names layer 2 expert 5" ||
  fail "verify report: $(cat "$WORK/out")"
# The engine refuses the corrupt expert: stream at the read, resident at load.
# (run prints its memory plan on stderr first: the error is the last line, and no text.)
"$MOETIER" run -m "$WORK/bad.pack.gguf" -p "The pack must agree" -n 12 --temp 0 --ignore-eos \
  --moe-storage stream --expert-cache 100% --prefetch off > "$WORK/out" 2> "$WORK/err"
rc=$?
last=$(tail -1 "$WORK/err")
if [ "$rc" -eq 1 ] && [ ! -s "$WORK/out" ] &&
   [[ "$last" == "moetier: error: $WORK/bad.pack.gguf: layer 2 expert 5: the record at offset "*" fails its checksum"* ]] &&
   [ "$(grep -c 'moetier: error' "$WORK/err")" -eq 1 ]; then
  pass "stream: corrupt record -> $last"
else
  fail "stream: corrupt record: exit $rc, out $(head -c 200 "$WORK/out"), err $(cat "$WORK/err")"
fi
expect_error 1 "resident: corrupt record" -- "$MOETIER" run -m "$WORK/bad.pack.gguf" -p "Hi" \
  -n 2 --moe-storage resident
grep -q "layer 2 expert 5: the record at offset .* fails its checksum" "$WORK/err" &&
  pass "resident names layer 2 expert 5" || fail "resident error: $(cat "$WORK/err")"

# Errors: one line, and no output file.
# A dense model: the olmoe file without its expert_count key (renamed, same length).
$PY - "$model" "$WORK/dense.gguf" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
assert data.count(b"olmoe.expert_count") == 1
open(sys.argv[2], "wb").write(data.replace(b"olmoe.expert_count", b"olmoe.expert_xount"))
PY
expect_error 1 "pack of a non-MoE model" -- "$MOETIER" pack "$WORK/dense.gguf" -o "$WORK/o1.gguf"
expect_error 1 "pack of a missing file" -- "$MOETIER" pack "$WORK/nope.gguf" -o "$WORK/o2.gguf"
before=$(md5sum < "$model")
expect_error 1 "pack over its own input" -- "$MOETIER" pack "$model" -o "$model"
ln -s "$model" "$WORK/alias.gguf"
expect_error 1 "pack over its input by another name" -- \
  "$MOETIER" pack "$model" -o "$WORK/alias.gguf"
[ "$(md5sum < "$model")" = "$before" ] && [ ! -e "$model.tmp" ] &&
  pass "the input is unchanged, no temporary left" || fail "the input changed"
expect_error 1 "pack into a missing directory" -- "$MOETIER" pack "$model" -o "$WORK/no/dir/o3.gguf"
mkdir -p "$WORK/ro" && chmod 555 "$WORK/ro"
if [ "$(id -u)" -ne 0 ]; then
  expect_error 1 "pack into a read-only directory" -- "$MOETIER" pack "$model" -o "$WORK/ro/o4.gguf"
fi
leftovers=$(ls "$WORK" "$WORK/ro" | grep -E '^o[0-9]' || true)
[ -z "$leftovers" ] && pass "no partial output" || fail "partial output: $leftovers"
chmod 755 "$WORK/ro"
expect_error 2 "pack without -o" -- "$MOETIER" pack "$model"
expect_error 2 "verify with an output" -- "$MOETIER" pack --verify "$pack" -o "$WORK/x.gguf"
expect_error 1 "verify of a non-pack" -- "$MOETIER" pack --verify "$model"
expect_error 2 "bad split size" -- "$MOETIER" pack "$model" -o "$WORK/x.gguf" --split-max-size lots

finish
