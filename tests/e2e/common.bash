# Helpers for e2e tests. Source it; $1 of the test is the moetier binary.
set -uo pipefail
MOETIER=${1:?usage: test.sh path/to/moetier}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/moetier-e2e.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PY=${MT_PYTHON:-/usr/bin/python3}  # a python3 with numpy (Debian: python3-numpy)
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# expect_error CODE DESCRIPTION -- command...: the command must exit with CODE and print
# exactly one line on stderr that starts with "moetier: " (no crash, no stack trace).
expect_error() {
  local want=$1 what=$2; shift 3
  "$@" > "$WORK/out" 2> "$WORK/err"
  local rc=$?
  local lines; lines=$(wc -l < "$WORK/err")
  if [ "$rc" -ne "$want" ]; then fail "$what: exit $rc, want $want: $(head -c 300 "$WORK/err")"; return; fi
  if [ "$lines" -ne 1 ]; then fail "$what: $lines stderr lines: $(head -c 300 "$WORK/err")"; return; fi
  if ! grep -q '^moetier: ' "$WORK/err"; then fail "$what: stderr not 'moetier: ...': $(cat "$WORK/err")"; return; fi
  pass "$what -> $(cat "$WORK/err")"
}

# start_server LOG MODEL ARGS...: starts `moetier serve` on a free loopback port, its stderr
# in LOG; sets PID and BASE (http://127.0.0.1:PORT/v1). Fails the script if it does not start.
start_server() {
  local log=$1 model=$2; shift 2
  "$MOETIER" serve -m "$model" --port 0 -t 2 "$@" 2> "$log" &
  PID=$!
  BASE=""
  for _ in $(seq 1 100); do
    BASE=$(sed -n 's|.*serving .* on \(http://[0-9.:]*/v1\).*|\1|p' "$log")
    [ -n "$BASE" ] && break
    kill -0 "$PID" 2> /dev/null || break
    sleep 0.1
  done
  [ -n "$BASE" ] || { fail "server did not start: $(cat "$log")"; finish; }
}

finish() {
  if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
  echo "all passed"
}
