#!/usr/bin/env bash
# moetier serve driven by the official openai npm client (serve_openai.mjs): chat, streaming,
# completions, the error cases, 32 concurrent requests == each alone, disconnects, a full
# queue; then SIGTERM drains a running request and the server exits 0.
source "$(dirname "$0")/common.bash"
SRC=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source tree}
if ! command -v node > /dev/null || [ ! -d "$SRC/tools/oracle/node_modules/openai" ]; then
  echo "skip: node or the openai package is missing (run scripts/setup.sh)"
  exit 0
fi

model="$WORK/olmoe-chat.gguf"
"$MOETIER" synth --preset olmoe-tiny --type q4_k_m -q -o "$model" > /dev/null || { fail "synth"; finish; }

CTX=512
start_server "$WORK/serve.log" "$model" --parallel 4 --ctx $CTX --max-queue 32 \
  --moe-storage stream --expert-cache 50% --routing-stats "$WORK/routing.json"
grep -q "127.0.0.1" <<< "$BASE" && pass "binds to loopback by default ($BASE)" || fail "address $BASE"
# CI ran this at 141 s on a machine without AVX-512 next to other e2e tests (13 s alone here).
timeout 300 node "$(dirname "$0")/serve_openai.mjs" "$BASE" olmoe-chat $CTX
[ $? -eq 0 ] && pass "openai client checks" || fail "openai client checks (see above)"

# Bodies as curl sends them: `-d` labels JSON form-encoded, which httplib's own buffering caps
# at 8 KiB; the server reads bodies itself, up to its 32 MiB limit, whatever the label.
printf '{"model": "olmoe-chat", "max_tokens": 2, %20000s"prompt": "Hello"}' "" > "$WORK/padded.json"
code=$(curl -s -o "$WORK/padded.out" -w '%{http_code}' "$BASE/completions" -d @"$WORK/padded.json")
[ "$code" = 200 ] && grep -q '"completion_tokens":2' "$WORK/padded.out" &&
  pass "a 20 KB form-encoded JSON body is served" ||
  fail "20 KB body: $code $(head -c 300 "$WORK/padded.out")"
head -c $((33 << 20)) /dev/zero | tr '\0' ' ' > "$WORK/huge.json"
code=$(curl -s -o "$WORK/huge.out" -w '%{http_code}' "$BASE/completions" \
  -H 'Content-Type: application/json' --data-binary @"$WORK/huge.json")
[ "$code" = 413 ] && grep -q '"message":"the request body is over the server.s limit of 32 MiB"' \
  "$WORK/huge.out" && pass "a 33 MiB body: 413 naming the limit" ||
  fail "33 MiB body: $code $(head -c 300 "$WORK/huge.out")"
code=$(curl -s -o "$WORK/multipart.out" -w '%{http_code}' "$BASE/completions" -F 'prompt=Hi')
[ "$code" = 400 ] && grep -q 'must be JSON, not multipart' "$WORK/multipart.out" &&
  pass "multipart body: 400" || fail "multipart body: $code $(head -c 300 "$WORK/multipart.out")"

# SIGTERM while a request runs: the request completes (drain), the server exits 0 and saves
# its routing statistics.
curl -s -o "$WORK/drained.json" -w '%{http_code}' "$BASE/completions" \
  -d '{"model": "olmoe-chat", "prompt": "Drain me", "max_tokens": 40, "temperature": 0, "ignore_eos": true}' \
  > "$WORK/drained.code" &
CURL=$!
for _ in $(seq 1 50); do
  curl -s "${BASE%/v1}/metrics" | grep -q '^moetier_slots_busy 1' && break
  sleep 0.05
done
kill -TERM "$PID"
wait "$CURL"
timeout 30 tail --pid="$PID" -f /dev/null
wait "$PID"; rc=$?
[ "$rc" -eq 0 ] && pass "SIGTERM: exit 0" || fail "SIGTERM: exit $rc: $(tail -3 "$WORK/serve.log")"
[ "$(cat "$WORK/drained.code")" = 200 ] && grep -q '"completion_tokens":40' "$WORK/drained.json" &&
  pass "SIGTERM drains the running request" ||
  fail "drain: $(cat "$WORK/drained.code") $(head -c 300 "$WORK/drained.json")"
grep -q "draining" "$WORK/serve.log" && pass "SIGTERM logged" || fail "no drain line"
[ -s "$WORK/routing.json" ] && pass "--routing-stats saved on exit" || fail "no routing stats"

# deepseek2 (MLA's latent cache, R1's chat template): a chat answer opens in <think>, so its
# text is reasoning_content; 6 requests at once get, token for token, what each gets alone.
ds="$WORK/deepseek3.gguf"
"$MOETIER" synth --preset deepseek3-tiny --type q4_k_m -q -o "$ds" > /dev/null || fail "synth ds"
start_server "$WORK/serve-ds.log" "$ds" --parallel 4 --ctx 256 --moe-storage stream \
  --expert-cache 30%
body='{"model": "deepseek3", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
       "temperature": 0}'
curl -s "$BASE/chat/completions" -d "$body" > "$WORK/ds-chat.json"
grep -q '"reasoning_content":"[^"]' "$WORK/ds-chat.json" &&
  pass "deepseek2: R1's <think> answer comes back as reasoning_content" ||
  fail "deepseek2 chat: $(head -c 300 "$WORK/ds-chat.json")"
ask() {  # ask N: a completion of prompt N, its text only
  curl -s "$BASE/completions" -d "{\"model\": \"deepseek3\", \"prompt\": \"Prompt number $1 is\",
    \"max_tokens\": 12, \"temperature\": 0, \"ignore_eos\": true}" |
    sed -n 's/.*"text":"\([^"]*\)".*/\1/p'
}
for i in 1 2 3 4 5 6; do ask "$i" > "$WORK/alone.$i"; done
asks=()
for i in 1 2 3 4 5 6; do ask "$i" > "$WORK/together.$i" & asks+=($!); done
wait "${asks[@]}"  # (a bare wait would wait for the server too)
same=0
for i in 1 2 3 4 5 6; do
  [ -s "$WORK/alone.$i" ] && cmp -s "$WORK/alone.$i" "$WORK/together.$i" && same=$((same + 1))
done
[ "$same" = 6 ] && pass "deepseek2: 6 concurrent requests == each alone" ||
  fail "deepseek2: $same of 6 concurrent answers equal to the lone ones"
kill -TERM "$PID"; wait "$PID"

# gpt-oss (harmony chat format, sliding-window layers): with -b 32 and 1024 positions the
# sliding layers keep rings of 160 cells, which prompts of ~200 tokens wrap; 4 such requests at
# once get, token for token, what each gets alone; a chat request renders harmony and answers.
go="$WORK/gpt-oss.gguf"
"$MOETIER" synth --preset gpt-oss-tiny --type mxfp4 -q -o "$go" > /dev/null || fail "synth gpt-oss"
start_server "$WORK/serve-go.log" "$go" --parallel 4 --ctx 1024 -b 32
long="$(head -c 700 /usr/share/common-licenses/GPL-3 | tr -d '\n"\\')"
body='{"model": "gpt-oss", "messages": [{"role": "system", "content": "Be brief."},
       {"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0}'
curl -s "$BASE/chat/completions" -d "$body" > "$WORK/go-chat.json"
grep -q '"finish_reason":"length"' "$WORK/go-chat.json" && grep -q '"prompt_tokens":[1-9]' \
  "$WORK/go-chat.json" && pass "gpt-oss: a harmony chat request is answered" ||
  fail "gpt-oss chat: $(head -c 300 "$WORK/go-chat.json")"
ask_go() {  # ask_go N: a completion of a long prompt N, its text only
  curl -s "$BASE/completions" -d "{\"model\": \"gpt-oss\", \"prompt\": \"$long $1\",
    \"max_tokens\": 10, \"temperature\": 0, \"ignore_eos\": true}" |
    sed -n 's/.*"text":"\([^"]*\)".*/\1/p'
}
for i in 1 2 3 4; do ask_go "$i" > "$WORK/go-alone.$i"; done
asks=()
for i in 1 2 3 4; do ask_go "$i" > "$WORK/go-together.$i" & asks+=($!); done
wait "${asks[@]}"
same=0
for i in 1 2 3 4; do
  [ -s "$WORK/go-alone.$i" ] && cmp -s "$WORK/go-alone.$i" "$WORK/go-together.$i" && same=$((same + 1))
done
[ "$same" = 4 ] && pass "gpt-oss: 4 concurrent long requests == each alone" ||
  fail "gpt-oss: $same of 4 concurrent answers equal to the lone ones"
kill -TERM "$PID"; wait "$PID"

# qwen3next (recurrent DeltaNet states per slot): 32 requests at once on 4 slots get, token
# for token, what each gets alone. Their prompts share prefixes and repeat, so slots go on
# from a saved state (the live one or the checkpoint before a prompt's last token) or from 0.
# Four prompts on four slots: asked one by one, each from the 5th finds its own checkpoint
# (the least recently freed slot holds it), so the cached count cannot be 0 by chance.
qn="$WORK/qwen3next.gguf"
"$MOETIER" synth --preset qwen3next-tiny --type q4_k_m -q -o "$qn" > /dev/null || fail "synth qn"
start_server "$WORK/serve-qn.log" "$qn" --parallel 4 --ctx 512 -b 16 --max-queue 64
grep -q "recurrent states" "$WORK/serve-qn.log" && pass "qwen3next: the plan line shows the states" ||
  fail "qwen3next plan: $(grep -m1 'memory plan' "$WORK/serve-qn.log")"
body='{"model": "qwen3next", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
       "temperature": 0}'
curl -s "$BASE/chat/completions" -d "$body" > "$WORK/qn-chat.json"
grep -q '"finish_reason":"length"' "$WORK/qn-chat.json" &&
  pass "qwen3next: a chat request is answered" ||
  fail "qwen3next chat: $(head -c 300 "$WORK/qn-chat.json")"
ask_qn() {  # ask_qn N: a completion of prompt N % 4 (4 distinct prompts, each 8 times), its text
  local prompt="Request number $(($1 % 4)) says $(printf 'la %.0s' $(seq 0 $(($1 % 4))))"
  curl -s "$BASE/completions" -d "{\"model\": \"qwen3next\", \"prompt\": \"$prompt\",
    \"max_tokens\": $((6 + $1 % 7)), \"temperature\": 0, \"ignore_eos\": true}" |
    sed -n 's/.*"text":"\([^"]*\)".*/\1/p'
}
for i in $(seq 1 32); do ask_qn "$i" > "$WORK/qn-alone.$i"; done
asks=()
for i in $(seq 1 32); do ask_qn "$i" > "$WORK/qn-together.$i" & asks+=($!); done
wait "${asks[@]}"
same=0
for i in $(seq 1 32); do
  [ -s "$WORK/qn-alone.$i" ] && cmp -s "$WORK/qn-alone.$i" "$WORK/qn-together.$i" && same=$((same + 1))
done
[ "$same" = 32 ] && pass "qwen3next: 32 concurrent requests == each alone" ||
  fail "qwen3next: $same of 32 concurrent answers equal to the lone ones"
cached=$(curl -s "${BASE%/v1}/metrics" | sed -n 's/^moetier_prompt_tokens_cached_total \([0-9.e+]*\).*/\1/p')
[ -n "$cached" ] && [ "$cached" != 0 ] && pass "qwen3next: slots went on from saved states ($cached prompt tokens)" ||
  fail "qwen3next: no prompt token came from a saved state ('$cached')"
kill -TERM "$PID"; wait "$PID"

# Start-up errors are one line.
expect_error 2 "bad --parallel" -- "$MOETIER" serve -m "$model" --parallel 0
expect_error 1 "missing model" -- "$MOETIER" serve -m "$WORK/nope.gguf"
expect_error 2 "bad --chat-template-kwargs" -- "$MOETIER" serve -m "$model" \
  --chat-template-kwargs '{"enable_thinking": 1'

"$MOETIER" serve -m "$model" --port 0 --host 203.0.113.7 > /dev/null 2> "$WORK/err"
[ $? -ne 0 ] && grep -q "^moetier: error: cannot listen on 203.0.113.7" "$WORK/err" &&
  pass "unbindable address" || fail "unbindable address: $(cat "$WORK/err")"
finish
