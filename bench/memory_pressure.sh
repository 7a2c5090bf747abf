#!/usr/bin/env bash
# Decode speed of a model bigger than memory: mmap and stream modes side by side, each in a
# cgroup memory limit of 50 % and 25 % of the model file, against the bound measured in the
# same run. Needs root (it creates the cgroups and drops the page cache).
#
#   bench/memory_pressure.sh MODEL [-n TOKENS] [-l "50 25"] [-t THREADS] [-R ROUNDS] [--no-mmap]
#                            [--pack PACK.gguf] [--profile routing.json]
#                            [--llama path/to/llama-batched-bench] [-- extra moetier flags]
#
# Configurations: mmap; stream without prefetch; stream with next-layer prefetch (the
# default); with --profile, stream with that placement profile; with --pack, stream on the
# expert-major pack of the same model. For each configuration and limit it prints decode
# tok/s, the expert hit rate, bytes read per token, the achieved read GiB/s, and the bound
# per token: the larger of
#   the disk's time for the bytes read per token   and   the in-RAM decode time per token,
# with the ratio of the achieved speed to that bound, and each configuration's speed
# relative to the first stream one (no prefetch) at the same limit. The disk's time ("disk
# GB/s" is the rate it comes to):
#   - stream rows: the run's own expert reads (moetier bench --read-trace) replayed right
#     after it, alone, in their order, 16 in flight as the stream tier's queue
#     (io_bench --replay): the same bytes on the same device and host cache, with nothing
#     else to do;
#   - mmap rows: the faster of sequential dd and random 1-4 MiB io_uring O_DIRECT reads
#     (io_bench), both measured before the row.
# Before the rows, the in-RAM decode runs a second time with io_bench reading the file
# beside it: the bound takes reads to cost compute nothing, and that line says how far this
# host is from it. The last column, disk busy, is the share of the decode wall time during
# which the stream tier had reads in flight. After each limit's rows, issue 6's
# comparisons: prefetch against none, the pack against the tensor-major file, placement's
# hit rate against the same run without it, each with its rows' shares of their bounds;
# then the expert cache the limit left (from the plan of the prefetch row's run). A replay
# warms the host's cache for the next row's run, so every other pass over the rows runs
# them bottom to top.
# -R ROUNDS runs each limit's stream rows that many times (mmap once: it is 50-100x
# slower, so the VM's noise does not matter there), alternating the order, and the
# comparisons quote the median of the rounds' ratios with each round's; one row prints per
# round. --no-mmap leaves the mmap row out (minutes per limit on a large model).
# --llama BIN: at each limit, llama.cpp's decode of the same file in the same cgroup after a
# page cache drop (BIN is a llama-batched-bench: -npp 8 -ntg TOKENS -npl 1, --no-repack so
# that the weights stay in the file mapping), and each stream round's prefetch row against it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
moetier=${MOETIER:-$here/../build/bin/moetier}
model=${1:?usage: memory_pressure.sh MODEL [-n TOKENS] [-l "50 25"] [-t THREADS]}
shift
n_gen=32
limits="50 25"
threads=$(nproc)
rounds=1
with_mmap=1
extra=()
pack=""
profile=""
llama=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pack) pack=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    -n) n_gen=$2; shift 2 ;;
    -l) limits=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -R) rounds=$2; shift 2 ;;
    --no-mmap) with_mmap=0; shift ;;
    --llama) llama=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "memory_pressure.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "memory_pressure.sh: -R needs a positive round count, not '$rounds'" >&2; exit 2; }
[ -x "$moetier" ] || { echo "memory_pressure.sh: $moetier not built (run scripts/build.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "memory_pressure.sh: needs root to create cgroups and drop caches; run it with sudo" >&2; exit 1; }
model_bytes=$(stat -L -c %s "$model")
work=$(mktemp -d)
trap 'rm -rf "$work"; cleanup_cgroup' EXIT

# cgroup v2 (unified) or v1 (memory controller)
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  cg=/sys/fs/cgroup/moetier-bench
  mkdir -p "$cg"
  set_limit() { echo "$1" > "$cg/memory.max"; echo 0 > "$cg/memory.swap.max" 2>/dev/null || true; }
  cg_procs=$cg/cgroup.procs
  peak() { cat "$cg/memory.peak" 2>/dev/null || echo 0; }
elif [ -d /sys/fs/cgroup/memory ]; then
  cg=/sys/fs/cgroup/memory/moetier-bench
  mkdir -p "$cg"
  set_limit() {
    # memsw (memory + swap) must stay >= memory: lift it, set memory, then pin it.
    echo -1 > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true
    echo "$1" > "$cg/memory.limit_in_bytes"
    echo "$1" > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true
    echo 0 > "$cg/memory.max_usage_in_bytes" 2>/dev/null || true
  }
  cg_procs=$cg/cgroup.procs
  peak() { cat "$cg/memory.max_usage_in_bytes"; }
else
  echo "memory_pressure.sh: no cgroup memory controller found" >&2; exit 1
fi
cleanup_cgroup() { rmdir "$cg" 2>/dev/null || true; }
drop_caches() { sync; echo 1 > /proc/sys/vm/drop_caches; }

# In the cgroup: a shell moves itself in, then execs moetier.
run_limited() { bash -c 'echo $$ > "$0"; exec "$@"' "$cg_procs" "$@"; }

# median X...: the median of the numbers given (two decimals).
median() {
  printf '%s\n' "$@" | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# summary_line PCT: issue 6's three comparisons at one limit, each row with its share of the
# bound: prefetch against none, the pack against the tensor-major file (both with
# prefetch), and placement's hit rate against the same run without it. With rounds, the
# median of the rounds' ratios (each round's after it) and the median shares.
summary_line() {
  local p="stream, prefetch" n="stream, no prefetch" k="pack, stream, prefetch"
  local l="stream, prefetch, placement"
  compare() {  # compare WHAT A B VALUES: "WHAT <ratio>x" of A's VALUES (tps_of/hit_of) over B's
    local what=$1 a=$2 b=$3 ratios=() bound_a=() bound_b=() r
    local -n values=$4
    for r in $(seq "$rounds"); do
      if [ -z "${values[$a#$r]:-}" ] || [ -z "${values[$b#$r]:-}" ]; then continue; fi
      ratios+=("$(awk -v x="${values[$a#$r]}" -v y="${values[$b#$r]}" 'BEGIN { printf "%.2f", (y > 0 ? x / y : 0) }')")
      bound_a+=("${of_bound[$a#$r]}"); bound_b+=("${of_bound[$b#$r]}")
    done
    [ ${#ratios[@]} -gt 0 ] || return 0
    local shares
    shares="$(printf %.0f "$(median "${bound_a[@]}")") % / $(printf %.0f "$(median "${bound_b[@]}")") % of their bounds"
    if [ ${#ratios[@]} = 1 ]; then
      echo "at $pct %: $what ${ratios[0]}x ($shares)"
    else
      echo "at $pct %: $what $(median "${ratios[@]}")x, the median of ${#ratios[@]} rounds (${ratios[*]/%/x}; medians: $shares)"
    fi
  }
  local pct=$1
  compare "prefetch / no prefetch:" "$p" "$n" tps_of
  compare "pack / the tensor-major file:" "$k" "$p" tps_of
  compare "placement's hit rate / without it:" "$l" "$p" hit_of
}

echo "model: $model ($((model_bytes / 1048576)) MiB), threads $threads, $n_gen tokens"

# 1. Sequential O_DIRECT read bandwidth of this file's device, now.
drop_caches
seq_bytes=$(( model_bytes < 4294967296 ? model_bytes : 4294967296 ))
seq_s=$( { /usr/bin/time -f %e dd if="$model" of=/dev/null bs=4M iflag=direct count=$((seq_bytes / 4194304)) status=none; } 2>&1 )
seq_gbs=$(awk -v b="$seq_bytes" -v s="$seq_s" 'BEGIN { printf "%.3f", b / s / 1e9 }')
echo "sequential O_DIRECT read (dd, 4 MiB): $seq_gbs GB/s"
# ... and what stream mode's own access pattern can get: random 1-4 MiB O_DIRECT reads
# through io_uring at queue depth 8 (io_bench, built beside moetier). A shared disk's speed
# drifts over minutes, so this is measured again just before every configuration, and each
# row's bound uses the faster of the two.
io_bench=${IO_BENCH:-$(dirname "$moetier")/io_bench}
random_gbs() {
  [ -x "$io_bench" ] || { echo 0; return; }
  drop_caches
  "$io_bench" "$model" --engine io_uring --depth 8 --seconds 3 --min-mib 1 --max-mib 4 \
    --direct on | sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p' | tail -1
}

# 2. In-RAM decode time per token (no limit): resident if the experts fit in RAM, else
#    mmap over a page cache warmed by reading the file once. Eight repetitions, and the
#    fastest is the bound: on this VM decode speeds up over the first ~20 s after a cold
#    load (qwen3 resident, rep by rep: 9.5, 13.9, 15.5, 16.2, 17.3, 17.8, 16.1, 18.0 tok/s;
#    docs/journal/tiering.md).
ram_reps=8
ram_storage=resident
ram_t0=$(date +%s.%N)
if ! "$moetier" bench -m "$model" -p 0 -n "$n_gen" -r "$ram_reps" -t "$threads" \
    --moe-storage resident --json "${extra[@]}" > "$work/ram.json" 2> "$work/err.txt"; then
  ram_storage=mmap
  cat "$model" > /dev/null
  ram_t0=$(date +%s.%N)
  "$moetier" bench -m "$model" -p 0 -n "$n_gen" -r "$ram_reps" -t "$threads" \
    --moe-storage mmap --json "${extra[@]}" > "$work/ram.json"
fi
ram_s=$(awk -v a="$ram_t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%d", b - a + 1 }')
fastest() {
  /usr/bin/python3 -c 'import json,sys; print(max(json.load(open(sys.argv[1]))[0]["tps"]))' "$1"
}
ram_tps=$(fastest "$work/ram.json")
echo "in RAM: $(printf %.2f "$ram_tps") tok/s (the fastest of $ram_reps repetitions)"
# 2b. The same decode with the disk reading beside it (io_bench's random 1-4 MiB O_DIRECT
#     reads of the model file, depth 8, for the whole run). The bound takes the stream
#     tier's reads to cost its compute nothing; on a VM whose host does the guest's I/O on
#     the vCPUs' time they do not (docs/journal/tiering.md, 2026-12-02 (late afternoon)).
if [ -x "$io_bench" ]; then
  "$io_bench" "$model" --engine io_uring --depth 8 --seconds $((ram_s * 2)) --min-mib 1 \
    --max-mib 4 --direct on > "$work/beside.txt" 2>&1 &
  beside_pid=$!
  "$moetier" bench -m "$model" -p 0 -n "$n_gen" -r "$ram_reps" -t "$threads" \
    --moe-storage "$ram_storage" --json "${extra[@]}" > "$work/ram_beside.json"
  wait "$beside_pid"
  beside_gbs=$(sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p' "$work/beside.txt" | tail -1)
  beside_tps=$(fastest "$work/ram_beside.json")
  beside_ratio=$(awk -v x="$beside_tps" -v y="$ram_tps" 'BEGIN { printf "%.2f", x / y }')
  echo "in RAM with the disk reading $beside_gbs GB/s beside it:" \
       "$(printf %.2f "$beside_tps") tok/s (${beside_ratio}x; the bound takes reads to cost" \
       "compute nothing)"
fi
echo
# label|model|flags
configs=()
[ "$with_mmap" = 1 ] && configs+=("mmap|$model|--moe-storage mmap")
configs+=("stream, no prefetch|$model|--moe-storage stream --prefetch off"
          "stream, prefetch|$model|--moe-storage stream --prefetch next-layer")
[ -n "$profile" ] && configs+=("stream, prefetch, placement|$model|--moe-storage stream --placement $profile")
[ -n "$pack" ] && configs+=("pack, stream, prefetch|$pack|--moe-storage stream --prefetch next-layer")

printf "| %-28s | %7s | %8s | %8s | %8s | %12s | %9s | %9s | %11s | %7s | %10s | %9s |\n" configuration limit tok/s "vs no-pf" "hit %" "read/token" "read GiB/s" "disk GB/s" "bound tok/s" ratio "peak MiB" "disk busy"
printf "| %-28s | %7s | %8s | %8s | %8s | %12s | %9s | %9s | %11s | %7s | %10s | %9s |\n" ---- ------: -------: -------: -------: -----------: --------: --------: ----------: ------: ---------: --------:

n_cfg=${#configs[@]}
pass=0  # passes over the rows so far, across limits: every other one runs bottom to top
for pct in $limits; do
  limit=$(( model_bytes * pct / 100 ))
  reversed_rounds=()
  for round in $(seq "$rounds"); do
    # Each replay warms the host cache for the row after it (docs/journal/tiering.md, 2026-12-02
    # (later)), so every other pass runs its rows in reverse order; they print in one order.
    order=$(seq 0 $((n_cfg - 1)))
    [ $((pass % 2)) = 1 ] && { order=$(seq $((n_cfg - 1)) -1 0); reversed_rounds+=("$round"); }
    pass=$((pass + 1))
    for i in $order; do
      IFS='|' read -r label file flags <<< "${configs[$i]}"
      run=$i.$round
      [ "$label" = mmap ] && [ "$round" -gt 1 ] && continue
      trace=()
      if [ "$label" = mmap ]; then
        disk_gbs=$(awk -v a="$seq_gbs" -v b="$(random_gbs)" 'BEGIN { print (b > a ? b : a) }')
      else
        trace=(--read-trace "$work/trace.txt")
      fi
      set_limit "$limit"
      drop_caches
      rm -f "$work/failed.$run"
      # shellcheck disable=SC2086
      if ! run_limited "$moetier" bench -m "$file" -p 0 -n "$n_gen" -r 1 -t "$threads" \
          $flags --json --stats-json "$work/stats.$run.json" "${trace[@]}" "${extra[@]}" \
          > "$work/out.$run.json" 2> "$work/err.txt"; then
        tail -1 "$work/err.txt" > "$work/failed.$run"
        continue
      fi
      peak > "$work/peak.$run"
      if [ ${#trace[@]} -gt 0 ]; then
        # The replay reads exactly the run's bytes: its rate is the disk's for this row.
        disk_gbs=$("$io_bench" --replay "$work/trace.txt" --depth 16 |
                   sed -n 's/.* \([0-9.]*\) GB\/s .*/\1/p')
        [ -n "$disk_gbs" ] || disk_gbs=$seq_gbs
      fi
      echo "$disk_gbs" > "$work/disk.$run"
    done
  done
  # shellcheck disable=SC2034  # hit_of is read through compare's nameref
  declare -A tps_of=() hit_of=() of_bound=()  # by "configuration label#round", at this limit
  for round in $(seq "$rounds"); do
    base_tps=""
    cell="$pct%"
    [ "$rounds" -gt 1 ] && cell="$pct% #$round"
    for i in $(seq 0 $((n_cfg - 1))); do
      IFS='|' read -r label file flags <<< "${configs[$i]}"
      run=$i.$round
      [ "$label" = mmap ] && [ "$round" -gt 1 ] && continue
      if [ -f "$work/failed.$run" ]; then
        printf "| %-28s | %7s | failed: %s\n" "$label" "$cell" "$(cat "$work/failed.$run")"
        continue
      fi
      line=$(/usr/bin/python3 - "$work/out.$run.json" "$work/stats.$run.json" "$label" "$cell" "$(cat "$work/disk.$run")" "$ram_tps" "$(cat "$work/peak.$run")" "$base_tps" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))[0]
st = json.load(open(sys.argv[2]))
label, pct, disk_gbs, ram_tps, peak = sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
base = float(sys.argv[8]) if sys.argv[8] else None
tps = out["avg_ts"]
tokens = st["tokens"] or 1
read_per_token = st["total"]["bytes_physical"] / tokens
hit = 100 * st["hit_rate"]
gib_s = st["read_gib_per_s"]
if label == "mmap":
    # Page faults are invisible to the tier: take what the process read from storage.
    read_per_token = out["storage_read_bytes"] / max(out["tokens_decoded"], 1)
    hit_txt, gib_txt, busy_txt = "n/a", "n/a", "n/a"
else:
    hit_txt, gib_txt = f"{hit:.1f}", f"{gib_s:.2f}"
    busy_txt = f"{100 * st['read_busy_s'] / st['wall_s']:.0f}%" if st["wall_s"] > 0 else "-"
read_txt = f"{read_per_token / 2**20:.1f} MiB"
bound_s = max(read_per_token / (disk_gbs * 1e9), 1 / ram_tps)
bound_tps = 1 / bound_s
vs = f"{tps / base:.2f}x" if base else "-"
print(f"{tps}\t{hit:.1f}\t{100 * tps / bound_tps:.0f}\t| {label:<28} | {pct:>7} | {tps:8.2f} | {vs:>8} | {hit_txt:>8} | {read_txt:>12} | {gib_txt:>9} | {disk_gbs:9.2f} | {bound_tps:11.2f} | {100 * tps / bound_tps:6.0f}% | {peak / 2**20:10.0f} | {busy_txt:>9} |")
PY
)
      IFS=$'\t' read -r "tps_of[$label#$round]" "hit_of[$label#$round]" \
        "of_bound[$label#$round]" row <<< "$line"
      echo "$row"
      if [ "$label" = "stream, no prefetch" ]; then base_tps=${tps_of[$label#$round]}; fi
    done
  done
  summary_line "$pct"
  if [ -n "$llama" ]; then
    set_limit "$limit"
    drop_caches
    llama_tps=$(run_limited "$llama" -m "$model" -npp 8 -ntg "$n_gen" -npl 1 -t "$threads" \
                  --no-repack -c 512 2> /dev/null |
                awk -F'|' '$2 ~ /^ *8 *$/ { gsub(/ /, "", $9); print $9 }')
    if [ -n "$llama_tps" ]; then
      ratios=()
      for round in $(seq "$rounds"); do
        t=${tps_of["stream, prefetch#$round"]:-}
        [ -n "$t" ] && ratios+=("$(awk -v x="$t" -v y="$llama_tps" 'BEGIN { printf "%.2f", x / y }')x")
      done
      echo "at $pct %: llama.cpp mmap (llama-batched-bench --no-repack, peak $(( $(peak) / 1048576 )) MiB):" \
           "$llama_tps tok/s; stream, prefetch against it: ${ratios[*]}"
    else
      echo "at $pct %: llama.cpp ($llama) gave no decode line"
    fi
  fi
  # What the limit left the expert cache (the budget also holds the dense weights, the KV
  # cache and a reserve), from the tensor-major stream row's plan in the first round.
  for i in $(seq 0 $((n_cfg - 1))); do
    IFS='|' read -r label file flags <<< "${configs[$i]}"
    [ "$label" = "stream, prefetch" ] && [ ! -f "$work/failed.$i.1" ] || continue
    /usr/bin/python3 - "$work/stats.$i.1.json" "$pct" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
p = s["plan"]
mib = lambda b: f"{b / 2**20:.0f} MiB" if b >= 10 * 2**20 else f"{b / 2**20:.1f} MiB"
print(f"at {sys.argv[2]} %: expert cache {mib(p['expert_cache'])}, {s['cache_slots']} experts, "
      f"{100 * p['expert_cache'] / p['experts_total']:.0f} % of the experts' bytes (budget "
      f"{mib(p['budget'])}: dense {mib(p['dense'])}, KV {mib(p['kv_cache'])}, "
      f"reserve {mib(p['reserve'])})")
PY
  done
  if [ ${#reversed_rounds[@]} -gt 0 ]; then
    if [ "$rounds" = 1 ]; then echo "at $pct %: the rows ran bottom to top"
    else echo "at $pct %: rounds that ran their rows bottom to top: ${reversed_rounds[*]}"; fi
  fi
done
