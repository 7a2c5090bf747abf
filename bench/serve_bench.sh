#!/usr/bin/env bash
# Throughput and latency of `moetier serve` under 1, 8 and 32 concurrent clients, in resident
# mode and in stream mode with the expert cache limited to a share of the experts. Not a
# test: it measures and prints ratios from one run.
#
#   bench/serve_bench.sh MODEL [-c "1 8 32"] [-n TOKENS] [-r REQUESTS_PER_CLIENT]
#                              [-l "25"] [-t THREADS] [--ctx N] [--llama-server PATH]
#                              [-- extra serve flags]
#
# --llama-server PATH: the same clients against llama.cpp's llama-server on the same file
# (--parallel and a context of ctx per slot, the same threads), and the ratio of the two.
# Both then get a logit_bias that bans tokens which are not UTF-8 on their own
# (bench/valid_utf8_bias.py): a random-weight model's text is otherwise not UTF-8, which
# llama-server refuses.
#
# For each mode it starts one server with --parallel = the largest client count, and for each
# client count runs bench/serve_bench.mjs: every client sends R greedy requests of N tokens
# (ignore_eos) back to back. Columns: aggregate generated tok/s over the wall time (every
# prompt's prefill included), its ratio to the first client count's figure of the same mode,
# p50/p99 of request latency and of time to the first token, the p50 time per output token
# after the first (TPOT, ms), "dec x": clients / TPOT against the first count's, the
# scaling of the decode pace as clients see it, and "step t/s": generated tokens per second
# of the server's decode-only steps (GET /metrics before and after; steps that also carry
# prompt tokens left out), the decode throughput without prefill. With root, the page cache
# is dropped before each stream run so that expert reads come from the device.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
moetier=${MOETIER:-$here/../build/bin/moetier}
model=${1:?usage: serve_bench.sh MODEL [-c "1 8 32"] [-n TOKENS] [-r REQUESTS] [-l "25"]}
shift
client_counts="1 8 32"
n_tokens=64
per_client=2
limits="25"
threads=$(nproc)
ctx=256
llama_server=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -c) client_counts=$2; shift 2 ;;
    -n) n_tokens=$2; shift 2 ;;
    -r) per_client=$2; shift 2 ;;
    -l) limits=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --llama-server) llama_server=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "serve_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$moetier" ] || { echo "serve_bench.sh: $moetier not built" >&2; exit 1; }
command -v node > /dev/null || { echo "serve_bench.sh: node is needed" >&2; exit 1; }
max_clients=$(tr ' ' '\n' <<< "$client_counts" | sort -n | tail -1)
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2> /dev/null; rm -rf "$work"' EXIT

start_server() {  # start_server FLAGS...: sets pid and base
  "$moetier" serve -m "$model" --port 0 -t "$threads" --parallel "$max_clients" --ctx "$ctx" \
    --max-queue "$max_clients" -a bench "$@" "${extra[@]}" 2> "$work/serve.log" &
  pid=$!
  base=""
  for _ in $(seq 1 600); do
    base=$(sed -n 's|.*serving .* on \(http://[0-9.:]*/v1\).*|\1|p' "$work/serve.log")
    [ -n "$base" ] && return 0
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.2
  done
  echo "serve_bench.sh: the server did not start: $(cat "$work/serve.log")" >&2
  exit 1
}

stop_server() {
  kill -TERM "$pid"
  wait "$pid" || true
  pid=""
}

body_extra=""
if [ -n "$llama_server" ]; then
  [ -x "$llama_server" ] || { echo "serve_bench.sh: $llama_server is not executable" >&2; exit 1; }
  body_extra="$work/bias.json"
  /usr/bin/python3 "$here/valid_utf8_bias.py" "$model" "$body_extra"
fi

echo "model: $model, threads $threads, $n_tokens tokens x $per_client requests per client," \
     "ctx $ctx per slot, --parallel $max_clients"
row="| %-12s | %7s | %8s | %8s | %6s | %9s | %9s | %9s | %9s | %8s | %6s | %8s | %6s |\n"
# shellcheck disable=SC2059
printf "$row" mode clients requests tok/s "x 1" "p50 s" "p99 s" "ttft p50" "ttft p99" \
  "tpot ms" "dec x" "step t/s" errors
# shellcheck disable=SC2059
printf "$row" ------------ ------: -------: -------: -----: --------: --------: --------: \
  --------: -------: -----: -------: -----:

# The decode-only steps' counters from /metrics: "SECONDS GENERATED" (0 0 without them).
decode_steps() {
  curl -s "${base%/v1}/metrics" | awk '
    /^moetier_step_seconds_total\{kind="decode"\}/ { s = $2 }
    /^moetier_step_generated_tokens_total\{kind="decode"\}/ { g = $2 }
    END { print (s == "" ? 0 : s), (g == "" ? 0 : g) }'
}

start_llama_server() {  # sets pid and base
  local port
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$llama_server" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" -np "$max_clients" \
    -c $((ctx * max_clients)) > "$work/llama.log" 2>&1 &
  pid=$!
  base="http://127.0.0.1:$port/v1"
  for _ in $(seq 1 600); do
    curl -s "http://127.0.0.1:$port/health" | grep -q '"ok"' && return 0
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.2
  done
  echo "serve_bench.sh: llama-server did not start: $(tail -5 "$work/llama.log")" >&2
  exit 1
}

declare -A rates  # "label clients" -> tok/s
run_mode() {  # run_mode LABEL SERVE_FLAGS... (LABEL llama-server: llama.cpp's server)
  local label=$1; shift
  if [[ "$label" == stream* ]] && [ "$(id -u)" = 0 ]; then
    sync; echo 1 > /proc/sys/vm/drop_caches
  fi
  if [ "$label" = llama-server ]; then start_llama_server; else start_server "$@"; fi
  # One short request first, so that start-up work is not measured.
  node "$here/serve_bench.mjs" "$base" bench 1 1 2 $body_extra > /dev/null
  local single="" single_pace=""
  for c in $client_counts; do
    local before after
    before=$(decode_steps)
    node "$here/serve_bench.mjs" "$base" bench "$c" "$per_client" "$n_tokens" $body_extra \
      > "$work/r.json"
    after=$(decode_steps)
    rates["$label $c"]=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tok_s"])' "$work/r.json")
    /usr/bin/python3 - "$work/r.json" "$label" "${single:-0}" "${single_pace:-0}" $before \
      $after <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
label, single, single_pace = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
s0, g0, s1, g1 = map(float, sys.argv[5:9])
step = f"{(g1 - g0) / (s1 - s0):8.2f}" if s1 > s0 else f"{'-':>8}"
ratio = r["tok_s"] / single if single > 0 else 1.0
tpot = r.get("tpot_p50")
pace = r["clients"] / tpot if tpot else 0.0  # decoded tokens a second, all clients together
dec = f"{pace / single_pace if single_pace > 0 else 1.0:5.2f}x" if pace > 0 else f"{'-':>6}"
f = lambda x: f"{x:9.3f}" if x is not None else f"{'-':>9}"
ms = f"{1000 * tpot:8.1f}" if tpot else f"{'-':>8}"
print(f"| {label:<12} | {r['clients']:7d} | {r['requests']:8d} | {r['tok_s']:8.2f} | {ratio:5.2f}x |"
      f" {f(r['latency_p50'])} | {f(r['latency_p99'])} | {f(r['ttft_p50'])} | {f(r['ttft_p99'])} |"
      f" {ms} | {dec} | {step} | {r['errors']:6d} |")
if r["errors"]:
    print(f"  first error: {r['first_error']}")
PY
    [ -z "$single" ] && single=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tok_s"])' "$work/r.json")
    [ -z "$single_pace" ] && single_pace=$(/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
t = r.get("tpot_p50")
print(r["clients"] / t if t else 0)' "$work/r.json")
  done
  stop_server
}

run_mode resident --moe-storage resident
if [ -n "$llama_server" ]; then
  run_mode llama-server
  for c in $client_counts; do
    /usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[2:]); print(f"moetier / llama-server at {sys.argv[1]} clients: {a / b:.2f}x" if b > 0 else "llama-server: no tokens")' \
      "$c" "${rates[resident $c]}" "${rates[llama-server $c]}"
  done
fi
for pct in $limits; do
  run_mode "stream $pct%" --moe-storage stream --expert-cache "$pct%"
done
