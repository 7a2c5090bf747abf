#!/usr/bin/env bash
# The chat page (GET /) and API keys: serve_chat_page.mjs drives headless chromium with
# puppeteer-core and checks the 401s with the openai npm client, against two servers: olmoe-tiny
# from the stream tier with keys (--api-key and --api-key-file), deepseek3-tiny (R1's thinking)
# resident without. Then the key flags' start-up errors and the warning for a non-loopback
# address without a key. Chromium and the npm packages come from scripts/setup.sh; without
# them this test fails rather than passing unchecked.
source "$(dirname "$0")/common.bash"
SRC=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source tree}
CHROMIUM=${MT_CHROMIUM:-$(command -v chromium || command -v chromium-browser)}
if [ -z "$CHROMIUM" ] || [ ! -x "$CHROMIUM" ]; then
  fail "chromium is not installed (scripts/setup.sh installs Debian's chromium; MT_CHROMIUM may name another)"
  finish
fi
if ! command -v node > /dev/null || [ ! -d "$SRC/tools/oracle/node_modules/puppeteer-core" ] ||
  [ ! -d "$SRC/tools/oracle/node_modules/openai" ]; then
  fail "node, or the npm packages puppeteer-core and openai, are missing (run scripts/setup.sh)"
  finish
fi

model="$WORK/olmoe-chat.gguf"
"$MOETIER" synth --preset olmoe-tiny --type q4_k_m -q -o "$model" > /dev/null || { fail "synth"; finish; }
ds="$WORK/deepseek3.gguf"
"$MOETIER" synth --preset deepseek3-tiny --type q4_k_m -q -o "$ds" > /dev/null || { fail "synth ds"; finish; }

printf '# keys for the chat page test\n\nsk-page-one\n   sk-page-two  \n' > "$WORK/keys"
start_server "$WORK/serve.log" "$model" --parallel 2 --ctx 512 --moe-storage stream \
  --expert-cache 30% --api-key sk-cli-key --api-key-file "$WORK/keys"
KEYED=${BASE%/v1}
KEYED_PID=$PID
grep -q "^moetier: chat page at $KEYED/ " "$WORK/serve.log" && pass "the start-up line names the page" ||
  fail "no page line: $(cat "$WORK/serve.log")"
! grep -q "warning" "$WORK/serve.log" && pass "loopback with keys: no warning" ||
  fail "warning on loopback: $(cat "$WORK/serve.log")"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer sk-cli-key' "$KEYED/v1/models")
[ "$code" = 200 ] && pass "a key from --api-key works" || fail "--api-key's key: $code"

start_server "$WORK/serve-ds.log" "$ds" --parallel 1 --ctx 256 --moe-storage resident
THINKING=${BASE%/v1}

mkdir -p "$WORK/shots"
timeout 300 node "$(dirname "$0")/serve_chat_page.mjs" "$CHROMIUM" "$WORK/shots" "$KEYED" \
  olmoe-chat sk-page-two "$THINKING"
[ $? -eq 0 ] && pass "chat page checks" || fail "chat page checks (see above)"
# The screenshots outlive the test's own directory (one folder, overwritten by each run).
SHOTS=${MT_SCREENSHOT_DIR:-${TMPDIR:-/tmp}/moetier-chat-page}
for shot in "$WORK"/shots/*.png; do
  [ -f "$shot" ] && mkdir -p "$SHOTS" && cp "$shot" "$SHOTS/" && echo "screenshot kept: $SHOTS/${shot##*/}"
done
kill -TERM "$KEYED_PID" "$PID"
wait "$KEYED_PID" "$PID"

# Key flags: start-up errors are one line; a non-loopback address without a key warns.
expect_error 1 "missing --api-key-file" -- "$MOETIER" serve -m "$model" --api-key-file "$WORK/nope"
printf '# nothing but comments\n\n' > "$WORK/empty-keys"
expect_error 2 "--api-key-file without keys" -- "$MOETIER" serve -m "$model" \
  --api-key-file "$WORK/empty-keys"
printf 'sk-ok\nsk bad\n' > "$WORK/bad-keys"
expect_error 2 "--api-key-file with a bad line" -- "$MOETIER" serve -m "$model" \
  --api-key-file "$WORK/bad-keys"
grep -q ":2: an API key must be" "$WORK/err" && pass "the bad line is named" || fail "$(cat "$WORK/err")"
expect_error 2 "an empty --api-key" -- "$MOETIER" serve -m "$model" --api-key ""

start_server "$WORK/serve-any.log" "$model" --host 0.0.0.0
grep -q "^moetier: warning: listening on 0.0.0.0 without an API key" "$WORK/serve-any.log" &&
  pass "0.0.0.0 without a key: a warning" || fail "no warning: $(cat "$WORK/serve-any.log")"
kill -TERM "$PID"; wait "$PID"
finish
