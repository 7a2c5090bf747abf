#!/usr/bin/env bash
# moetier run: chat, stop strings, seeds, and one-line errors for bad input.
source "$(dirname "$0")/common.bash"

model="$WORK/olmoe.gguf"
"$MOETIER" synth --preset olmoe-tiny --type q8_0 -q -o "$model" > /dev/null || { fail "synth"; finish; }

# Seeded sampling reproduces; another seed differs.
a=$("$MOETIER" run -m "$model" -p "Once upon a time" -n 16 --seed 5 --ignore-eos 2> /dev/null)
b=$("$MOETIER" run -m "$model" -p "Once upon a time" -n 16 --seed 5 --ignore-eos 2> /dev/null)
c=$("$MOETIER" run -m "$model" -p "Once upon a time" -n 16 --seed 6 --ignore-eos 2> /dev/null)
[ "$a" = "$b" ] && pass "same seed, same text" || fail "same seed gave different text"
[ "$a" != "$c" ] && pass "other seed, other text" || fail "seed has no effect"

# A q8_0 KV cache: --kv-type q8_0 and llama.cpp's -ctk q8_0 -ctv q8_0 are the same run, the
# same text with 1 and 2 threads; the memory plan line shows the smaller cache.
q1=$("$MOETIER" run -m "$model" -p "Once upon a time" -n 16 --temp 0 --ignore-eos --kv-type q8_0 \
     -c 256 -t 1 2> "$WORK/q8err")
q2=$("$MOETIER" run -m "$model" -p "Once upon a time" -n 16 --temp 0 --ignore-eos -ctk q8_0 \
     -ctv q8_0 -c 256 -t 2 2> /dev/null)
[ -n "$q1" ] && [ "$q1" = "$q2" ] && pass "q8_0 KV cache: same text by either flag, any threads" ||
  fail "q8_0 KV cache: '$q1' vs '$q2' ($(head -c 300 "$WORK/q8err"))"
"$MOETIER" run -m "$model" -p "Hi" -n 1 -c 256 2>&1 >/dev/null | grep -o "KV cache [0-9.]* [KMG]iB" > "$WORK/f16kv"
grep -o "KV cache [0-9.]* [KMG]iB" "$WORK/q8err" > "$WORK/q8kv"
# olmoe-tiny: 4 layers x 256 positions x (256 + 256) elements: 1 MiB at f16, 17/32 of it at q8_0.
[ "$(cat "$WORK/f16kv")" = "KV cache 1.0 MiB" ] && [ "$(cat "$WORK/q8kv")" = "KV cache 544.0 KiB" ] &&
  pass "q8_0 KV cache takes 17/32 of f16's memory" ||
  fail "KV cache sizes: f16 '$(cat "$WORK/f16kv")', q8_0 '$(cat "$WORK/q8kv")'"

# K and V apart, as llama.cpp: -ctk q8_0 alone is K q8_0 with V f16 (512 KiB of V, 272 KiB
# of K), the same run as --kv-type q8_0 -ctv f16, with 1 and 2 threads.
m1=$("$MOETIER" run -m "$model" -p "Once upon a time" -n 16 --temp 0 --ignore-eos -ctk q8_0 \
     -c 256 -t 1 2> "$WORK/mixerr")
m2=$("$MOETIER" run -m "$model" -p "Once upon a time" -n 16 --temp 0 --ignore-eos --kv-type q8_0 \
     -ctv f16 -c 256 -t 2 2> /dev/null)
[ -n "$m1" ] && [ "$m1" = "$m2" ] && grep -q "KV cache 784.0 KiB" "$WORK/mixerr" &&
  pass "-ctk q8_0 alone: K q8_0, V f16" ||
  fail "-ctk q8_0 alone: '$m1' vs '$m2' ($(grep -o "KV cache [0-9.]* [KMG]iB" "$WORK/mixerr"))"

# The closing line on stderr reports both speeds.
"$MOETIER" run -m "$model" -p "Hello" -n 4 --temp 0 --ignore-eos > /dev/null 2> "$WORK/err"
grep -Eq '^moetier: prompt [0-9]+ tokens in .* tok/s\), generation 4 tokens in .* tok/s\)$' "$WORK/err" &&
  pass "speed line" || fail "speed line: $(cat "$WORK/err")"

# -n bounds the generation; --no-display-prompt hides the prompt.
out=$("$MOETIER" run -m "$model" -p "PROMPTTEXT" -n 3 --temp 0 --ignore-eos --no-display-prompt 2> /dev/null)
case "$out" in *PROMPTTEXT*) fail "prompt displayed" ;; *) pass "prompt hidden" ;; esac

# A stop string ends the output before it: stop at the first character the greedy run emits.
full=$("$MOETIER" run -m "$model" -p "Hello" -n 8 --temp 0 --ignore-eos --no-display-prompt 2> /dev/null)
stop=${full:2:1}
if [ -n "$stop" ]; then
  cut=$("$MOETIER" run -m "$model" -p "Hello" -n 8 --temp 0 --ignore-eos --no-display-prompt -r "$stop" 2> /dev/null)
  [ "$cut" = "${full%%"$stop"*}" ] && pass "stop string cuts the text" || fail "stop: '$cut' vs '$full'"
fi

# --logit-bias (llama.cpp's TOKEN_ID+BIAS): a large bias makes greedy pick that token; -inf
# bans the token greedy would pick.
id=$("$MOETIER" tokenize -m "$model" -p "K" --ids --no-bos 2> /dev/null | tr -d '[] ')
out=$("$MOETIER" run -m "$model" -p "Hello" -n 1 --temp 0 --ignore-eos --no-display-prompt \
  -l "${id}+100" 2> /dev/null)
[ "$out" = "K" ] && pass "logit bias picks the token" || fail "logit bias: '$out' (id $id)"
first=$("$MOETIER" run -m "$model" -p "Hello" -n 1 --temp 0 --ignore-eos --no-display-prompt \
  2> /dev/null)
fid=$("$MOETIER" tokenize -m "$model" -p "$first" --ids --no-bos 2> /dev/null | tr -d '[] ')
if [[ "$fid" =~ ^[0-9]+$ ]]; then  # the text of the first token is that one token again
  out=$("$MOETIER" run -m "$model" -p "Hello" -n 1 --temp 0 --ignore-eos --no-display-prompt \
    -l "${fid}-inf" 2> /dev/null)
  [ "$out" != "$first" ] && pass "-inf bans the token" || fail "ban: '$out' vs '$first'"
else
  fail "the first greedy token '$first' does not tokenize back to one id ($fid)"
fi

# Constrained output: a JSON schema gives a document it accepts, properties in the declared
# order; a GBNF grammar ends the output where it ends, even with --ignore-eos.
schema='{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
  "age": {"type": "integer"}}, "required": ["name", "age"]}'
for seed in 1 2; do
  out=$("$MOETIER" run -m "$model" -p "A person:" -n 300 --seed $seed --no-display-prompt \
    -j "$schema" 2> /dev/null)
  echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert list(d) == ["name", "age"], d
assert isinstance(d["name"], str) and len(d["name"]) <= 8, d
assert isinstance(d["age"], int) and not isinstance(d["age"], bool), d' &&
    pass "--json-schema output validates (seed $seed)" || fail "--json-schema: '$out'"
done
out=$("$MOETIER" run -m "$model" -p "Is it?" -n 50 --seed 3 --ignore-eos --no-display-prompt \
  --grammar 'root ::= ("yes" | "no") "."' 2> /dev/null)
[[ "$out" == "yes." || "$out" == "no." ]] && pass "--grammar output ends with the grammar" ||
  fail "--grammar: '$out'"
printf 'root ::= digit{3}  # three digits\ndigit ::= [0-9]\n' > "$WORK/three.gbnf"
out=$("$MOETIER" run -m "$model" -p "Hi" -n 50 --temp 0 --no-display-prompt \
  --grammar-file "$WORK/three.gbnf" 2> /dev/null)
[[ "$out" =~ ^[0-9]{3}$ ]] && pass "--grammar-file" || fail "--grammar-file: '$out'"

# --chat announces the template it used.
"$MOETIER" run -m "$model" -p "Hi" --chat -n 2 --temp 0 > /dev/null 2> "$WORK/err"
grep -q "chat template tulu" "$WORK/err" && pass "chat template announced" || fail "chat: $(cat "$WORK/err")"
expect_error 2 "bad --chat-template-kwargs" -- "$MOETIER" run -m "$model" -p "Hi" --chat -n 1 \
  --chat-template-kwargs '{"enable_thinking": "no"}'
expect_error 2 "--chat-template-kwargs not an object" -- "$MOETIER" run -m "$model" -p "Hi" \
  --chat -n 1 --chat-template-kwargs '[true]'


# Bad input: one line, non-zero exit, no crash.
expect_error 2 "empty prompt" -- "$MOETIER" run -m "$model" -p ""
grep -q "prompt is empty" "$WORK/err" && pass "says the prompt is empty" || fail "empty prompt message"
expect_error 2 "no prompt" -- "$MOETIER" run -m "$model"
expect_error 2 "context longer than the model's" -- "$MOETIER" run -m "$model" -p "Hi" -c 100000
expect_error 1 "missing model" -- "$MOETIER" run -m "$WORK/none.gguf" -p "Hi"
echo "plain text" > "$WORK/text.gguf"
expect_error 1 "not a GGUF file" -- "$MOETIER" run -m "$WORK/text.gguf" -p "Hi"
expect_error 1 "missing prompt file" -- "$MOETIER" run -m "$model" -f "$WORK/none.txt"
expect_error 2 "bad kv type" -- "$MOETIER" run -m "$model" -p "Hi" --kv-type q8
expect_error 2 "bad -ctk type" -- "$MOETIER" run -m "$model" -p "Hi" -ctk q8
expect_error 2 "bad -ctv type" -- "$MOETIER" run -m "$model" -p "Hi" -ctv Q8_0
expect_error 2 "NaN temperature" -- "$MOETIER" run -m "$model" -p "Hi" --temp nan
expect_error 2 "infinite top-p" -- "$MOETIER" run -m "$model" -p "Hi" --top-p inf
expect_error 2 "zero repeat penalty" -- "$MOETIER" run -m "$model" -p "Hi" --repeat-penalty 0
expect_error 2 "zero batch size" -- "$MOETIER" run -m "$model" -p "Hi" -b 0
expect_error 2 "repeat-last-n below -1" -- "$MOETIER" run -m "$model" -p "Hi" --repeat-last-n -2
expect_error 2 "logit bias without a sign" -- "$MOETIER" run -m "$model" -p "Hi" -l 5
expect_error 2 "logit bias +inf" -- "$MOETIER" run -m "$model" -p "Hi" -l 5+inf
expect_error 2 "logit bias id outside the vocabulary" -- \
  "$MOETIER" run -m "$model" -p "Hi" -l 99999999+1
# More threads than CPUs: the spinning workers would crawl (a 30x slower prompt at 3 on 2).
cpus=$(nproc)
expect_error 2 "more threads than CPUs" -- "$MOETIER" run -m "$model" -p "Hi" -t $((cpus + 1))
expect_error 2 "more threads than CPUs (bench)" -- "$MOETIER" bench -m "$model" -t $((cpus + 1))
expect_error 2 "grammar with an undefined rule" -- \
  "$MOETIER" run -m "$model" -p "Hi" --grammar 'root ::= "a" item'
grep -q "line 1, column 14: rule 'item' is not defined" "$WORK/err" &&
  pass "names the rule and where" || fail "undefined rule message: $(cat "$WORK/err")"
expect_error 2 "schema keyword that cannot be honoured" -- \
  "$MOETIER" run -m "$model" -p "Hi" -j '{"type": "string", "pattern": "a+"}'
expect_error 2 "schema that is not JSON" -- "$MOETIER" run -m "$model" -p "Hi" -j '{"type"'
expect_error 2 "two constraints" -- "$MOETIER" run -m "$model" -p "Hi" --grammar 'root ::= "a"' -j '{}'
expect_error 1 "missing grammar file" -- "$MOETIER" run -m "$model" -p "Hi" --grammar-file "$WORK/none"
head -c 3000000 "$model" > "$WORK/trunc.gguf"
expect_error 1 "truncated model" -- "$MOETIER" run -m "$WORK/trunc.gguf" -p "Hi"

# A NaN weight (a GGUF carries no checksums): one line naming where, never sampled text.
offset=$("$MOETIER" inspect "$model" | awk '$1 == "output_norm.weight" {print $NF}')
$PY - "$model" "$WORK/nan.gguf" "$offset" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<f", data, int(sys.argv[3]) + 8, float("nan"))
open(sys.argv[2], "wb").write(data)
PY
"$MOETIER" run -m "$WORK/nan.gguf" -p "Hi" -n 4 --no-display-prompt > "$WORK/out" 2> "$WORK/err"
rc=$?
last=$(tail -1 "$WORK/err")
[ $rc -eq 1 ] && [[ "$last" == "moetier: error: "*"NaN or infinite logit at position"* ]] &&
  [ ! -s "$WORK/out" ] && pass "a NaN weight: exit 1, an error naming the position, no text" ||
  fail "NaN weight: exit $rc: $(cat "$WORK/err" "$WORK/out")"

# A model whose architecture moetier does not know: patch the architecture string.
$PY - "$model" "$WORK/arch.gguf" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
i = data.find(b"olmoe")            # general.architecture's value comes first
data[i:i + 5] = b"gpt2x"
open(sys.argv[2], "wb").write(data)
PY
expect_error 1 "unknown architecture" -- "$MOETIER" run -m "$WORK/arch.gguf" -p "Hi"
grep -q "supported: qwen3moe, olmoe, llama, qwen2moe" "$WORK/err" && pass "names the supported ones" ||
  fail "supported list missing: $(cat "$WORK/err")"
finish
