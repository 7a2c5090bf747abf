#!/usr/bin/env bash
# moetier perplexity: llama.cpp's output lines, batch/thread invariance, the KL-divergence
# base file (size from its format, self-consistency of the KLD mode), and one-line errors.
# With MT_LLAMA_PERPLEXITY=path/to/llama-perplexity, also cross-reads base files with it:
# each tool must decode the other's file to the same PPL(base) it decodes itself.
source "$(dirname "$0")/common.bash"

"$MOETIER" synth --preset mixtral-tiny --type f32 --seed 1 -q -o "$WORK/m.gguf" > /dev/null ||
  { fail "synth"; finish; }
for i in $(seq 12); do
  echo "Chapter $i. The river ran past the old mill, and the miller counted $((i * 7)) sacks of"
  echo "grain before the rain came. Children played near the bridge; a dog barked at the carts."
done > "$WORK/text.txt"

ppl() { "$MOETIER" perplexity -m "$WORK/m.gguf" -f "$WORK/text.txt" -c 64 "$@"; }

ppl -t 2 > "$WORK/a.out" 2> "$WORK/a.err" || { fail "perplexity: $(cat "$WORK/a.err")"; finish; }
grep -Eq '^\[1\][0-9]+\.[0-9]{4},(\[[0-9]+\][0-9]+\.[0-9]{4},)+$' "$WORK/a.out" &&
  pass "running values line" || fail "running values line: $(head -c 300 "$WORK/a.out")"
grep -Eq '^Final estimate: PPL = [0-9]+\.[0-9]{4} \+/- [0-9]+\.[0-9]{5}$' "$WORK/a.out" &&
  pass "final estimate line" || fail "final estimate line: $(cat "$WORK/a.out")"
n_chunk=$(head -1 "$WORK/a.out" | grep -o '\[[0-9]*\]' | wc -l)

ppl -t 1 -b 16 > "$WORK/b.out" 2> /dev/null
cmp -s "$WORK/a.out" "$WORK/b.out" && pass "same output with -t 1 -b 16" ||
  fail "-t 1 -b 16 differs: $(cat "$WORK/b.out")"
ppl --chunks 2 > "$WORK/c.out" 2> /dev/null
[ "$(head -1 "$WORK/c.out")" = "$(head -1 "$WORK/a.out" | cut -d, -f1-2)," ] &&
  pass "--chunks 2 gives the first two running values" || fail "--chunks 2: $(cat "$WORK/c.out")"

# Base file: header 20 bytes, n_chunk * 64 int32 tokens, then n_chunk * 31 scored positions
# (64 - 1 - 32) of 2 * 32000 / 2 + 4 = 32004 uint16.
ppl --kl-divergence-base "$WORK/base.kld" > "$WORK/w.out" 2> "$WORK/w.err" ||
  fail "writing the base file: $(cat "$WORK/w.err")"
want=$((20 + n_chunk * 64 * 4 + n_chunk * 31 * 32004 * 2))
size=$(stat -c %s "$WORK/base.kld")
[ "$size" = "$want" ] && pass "base file size $size" || fail "base file is $size bytes, want $want"
head -c 8 "$WORK/base.kld" | grep -q '^_logits_$' && pass "base file magic" || fail "magic"

"$MOETIER" perplexity -m "$WORK/m.gguf" -c 64 --kl-divergence-base "$WORK/base.kld" \
  --kl-divergence > "$WORK/k.out" 2> "$WORK/k.err" || fail "kl-divergence: $(cat "$WORK/k.err")"
grep -q '^chunk             PPL               ln(PPL(Q)/PPL(base))' "$WORK/k.out" &&
  pass "KLD table header" || fail "KLD table header: $(head -3 "$WORK/k.out")"
grep -q '^Same top p: 100.000 ± 0.000 %$' "$WORK/k.out" && pass "same top 100% against itself" ||
  fail "same top: $(grep 'Same top' "$WORK/k.out")"
kld=$(sed -n 's/^Mean    KLD: *\(-\?[0-9.]*\) .*/\1/p' "$WORK/k.out")
$PY -c "import sys; sys.exit(0 if abs(float('$kld')) < 1e-4 else 1)" 2> /dev/null &&
  pass "mean KLD against itself $kld" || fail "mean KLD '$kld'"
ppl_w=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$WORK/w.out")
ppl_q=$(sed -n 's/^Mean PPL(Q) *: *\([0-9.]*\) .*/\1/p' "$WORK/k.out")
$PY -c "import sys; sys.exit(0 if '%.4f' % float('$ppl_q') == '$ppl_w' else 1)" 2> /dev/null &&
  pass "PPL(Q) $ppl_q = the writing run's $ppl_w" || fail "PPL(Q) '$ppl_q' vs '$ppl_w'"

if [ -x "${MT_LLAMA_PERPLEXITY:-}" ]; then
  "$MT_LLAMA_PERPLEXITY" -m "$WORK/m.gguf" -f "$WORK/text.txt" -c 64 \
    --kl-divergence-base "$WORK/llama.kld" > /dev/null 2>&1 || fail "llama-perplexity base"
  base_ppl() {  # tool file
    if [ "$1" = moetier ]; then
      "$MOETIER" perplexity -m "$WORK/m.gguf" -c 64 --kl-divergence-base "$2" --kl-divergence
    else
      "$MT_LLAMA_PERPLEXITY" -m "$WORK/m.gguf" -c 64 --kl-divergence-base "$2" --kl-divergence
    fi 2> /dev/null | sed -n 's/^Mean PPL(base) *: *\([0-9.]*\) .*/\1/p'
  }
  for file in base.kld llama.kld; do
    a=$(base_ppl moetier "$WORK/$file"); b=$(base_ppl llama "$WORK/$file")
    [ -n "$a" ] && [ "$a" = "$b" ] && pass "$file: both tools decode PPL(base) $a" ||
      fail "$file: PPL(base) moetier '$a', llama.cpp '$b'"
  done
fi

# Errors: one line on stderr.
head -c 200 "$WORK/text.txt" > "$WORK/short.txt"
expect_error 2 "text too short" -- "$MOETIER" perplexity -m "$WORK/m.gguf" -f "$WORK/short.txt" -c 64
grep -q 'you need at least 128 tokens' "$WORK/err" || fail "short text message: $(cat "$WORK/err")"
expect_error 1 "missing text" -- "$MOETIER" perplexity -m "$WORK/m.gguf" -f "$WORK/nope.txt"
expect_error 2 "no -f" -- "$MOETIER" perplexity -m "$WORK/m.gguf"
expect_error 2 "--kl-divergence without a base" -- \
  "$MOETIER" perplexity -m "$WORK/m.gguf" --kl-divergence
head -c 100000 "$WORK/base.kld" > "$WORK/trunc.kld"
expect_error 1 "truncated base file" -- "$MOETIER" perplexity -m "$WORK/m.gguf" -c 64 \
  --kl-divergence-base "$WORK/trunc.kld" --kl-divergence
expect_error 2 "base file computed with a larger n_ctx" -- "$MOETIER" perplexity \
  -m "$WORK/m.gguf" -c 32 --kl-divergence-base "$WORK/base.kld" --kl-divergence
$PY - "$WORK/base.kld" "$WORK/vocab.kld" <<'EOF'
import struct, sys
data = bytearray(open(sys.argv[1], 'rb').read())
data[12:16] = struct.pack('<i', 31999)  # n_vocab 31999: records keep their 32004 words
open(sys.argv[2], 'wb').write(data)
EOF
expect_error 2 "base file with another n_vocab" -- "$MOETIER" perplexity -m "$WORK/m.gguf" \
  -c 64 --kl-divergence-base "$WORK/vocab.kld" --kl-divergence
grep -q 'inconsistent vocabulary' "$WORK/err" || fail "n_vocab message: $(cat "$WORK/err")"
expect_error 1 "unwritable base file" -- "$MOETIER" perplexity -m "$WORK/m.gguf" \
  -f "$WORK/text.txt" -c 64 --kl-divergence-base "$WORK/no/such/dir/x.kld"
finish
