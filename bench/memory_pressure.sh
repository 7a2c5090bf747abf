#!/usr/bin/env bash
# Decode speed of a model bigger than memory: mmap and stream modes side by side, each in a
# cgroup memory limit of 50 % and 25 % of the model file, against the bound measured in the
# same run. Needs root (it creates the cgroups and drops the page cache).
#
#   bench/memory_pressure.sh MODEL [-n TOKENS] [-l "50 25"] [-t THREADS]
#                            [--pack PACK.gguf] [--profile routing.json] [-- extra moetier flags]
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
# The last column, disk busy, is the share of the decode wall time during which the stream
# tier had reads in flight. After each limit's rows, issue 6's comparisons: prefetch against
# none, the pack against the tensor-major file, placement's hit rate against the same run
# without it, each with its rows' shares of their bounds; then the expert cache the limit
# left (from the plan of the prefetch row's run). A replay warms the host's cache for
# the next row's run, so the second limit (and every other one after it) runs its rows
# bottom to top; compare a row across limits to see that order effect.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
moetier=${MOETIER:-$here/../build/bin/moetier}
model=${1:?usage: memory_pressure.sh MODEL [-n TOKENS] [-l "50 25"] [-t THREADS]}
shift
n_gen=32
limits="50 25"
threads=$(nproc)
extra=()
pack=""
profile=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pack) pack=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    -n) n_gen=$2; shift 2 ;;
    -l) limits=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "memory_pressure.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
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

# summary_line PCT: issue 6's three comparisons at one limit, each row with its share of the
# bound: prefetch against none, the pack against the tensor-major file (both with
# prefetch), and placement's hit rate against the same run without it.
summary_line() {
  local p="stream, prefetch" n="stream, no prefetch" k="pack, stream, prefetch"
  local l="stream, prefetch, placement" parts=()
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
  if [ -n "${tps_of[$p]:-}" ] && [ -n "${tps_of[$n]:-}" ]; then
    parts+=("prefetch $(ratio "${tps_of[$p]}" "${tps_of[$n]}")x no prefetch (${of_bound[$p]} % / ${of_bound[$n]} % of their bounds)")
  fi
  if [ -n "${tps_of[$k]:-}" ] && [ -n "${tps_of[$p]:-}" ]; then
    parts+=("pack $(ratio "${tps_of[$k]}" "${tps_of[$p]}")x the tensor-major file (${of_bound[$k]} % / ${of_bound[$p]} %)")
  fi
  if [ -n "${hit_of[$l]:-}" ] && [ -n "${hit_of[$p]:-}" ]; then
    parts+=("placement hit rate $(ratio "${hit_of[$l]}" "${hit_of[$p]}")x without it (${hit_of[$l]} % / ${hit_of[$p]} %; ${of_bound[$l]} % of its bound)")
  fi
  local part
  for part in "${parts[@]}"; do echo "at $1 %: $part"; done
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
#    mmap over a page cache warmed by reading the file once.
if ! "$moetier" bench -m "$model" -p 0 -n "$n_gen" -r 1 -t "$threads" --moe-storage resident \
    --json "${extra[@]}" > "$work/ram.json" 2> "$work/err.txt"; then
  cat "$model" > /dev/null
  "$moetier" bench -m "$model" -p 0 -n "$n_gen" -r 1 -t "$threads" --moe-storage mmap --json \
    "${extra[@]}" > "$work/ram.json"
fi
ram_tps=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["avg_ts"])' "$work/ram.json")
echo "in RAM: $(printf %.2f "$ram_tps") tok/s"
echo
# label|model|flags
configs=("mmap|$model|--moe-storage mmap"
         "stream, no prefetch|$model|--moe-storage stream --prefetch off"
         "stream, prefetch|$model|--moe-storage stream --prefetch next-layer")
[ -n "$profile" ] && configs+=("stream, prefetch, placement|$model|--moe-storage stream --placement $profile")
[ -n "$pack" ] && configs+=("pack, stream, prefetch|$pack|--moe-storage stream --prefetch next-layer")

printf "| %-28s | %5s | %8s | %8s | %8s | %12s | %9s | %9s | %11s | %7s | %10s | %9s |\n" configuration limit tok/s "vs no-pf" "hit %" "read/token" "read GiB/s" "disk GB/s" "bound tok/s" ratio "peak MiB" "disk busy"
printf "| %-28s | %5s | %8s | %8s | %8s | %12s | %9s | %9s | %11s | %7s | %10s | %9s |\n" ---- ----: -------: -------: -------: -----------: --------: --------: ----------: ------: ---------: --------:

n_cfg=${#configs[@]}
limit_index=0
for pct in $limits; do
  limit=$(( model_bytes * pct / 100 ))
  # Each replay warms the host cache for the row after it (docs/tiering.md, 2026-12-02
  # (later)), so every other limit runs its rows in reverse order; they print in one order.
  order=$(seq 0 $((n_cfg - 1)))
  reversed=$((limit_index % 2))
  [ "$reversed" = 1 ] && order=$(seq $((n_cfg - 1)) -1 0)
  limit_index=$((limit_index + 1))
  for i in $order; do
    IFS='|' read -r label file flags <<< "${configs[$i]}"
    trace=()
    if [ "$label" = mmap ]; then
      disk_gbs=$(awk -v a="$seq_gbs" -v b="$(random_gbs)" 'BEGIN { print (b > a ? b : a) }')
    else
      trace=(--read-trace "$work/trace.txt")
    fi
    set_limit "$limit"
    drop_caches
    rm -f "$work/failed.$i"
    # shellcheck disable=SC2086
    if ! run_limited "$moetier" bench -m "$file" -p 0 -n "$n_gen" -r 1 -t "$threads" \
        $flags --json --stats-json "$work/stats.$i.json" "${trace[@]}" "${extra[@]}" \
        > "$work/out.$i.json" 2> "$work/err.txt"; then
      tail -1 "$work/err.txt" > "$work/failed.$i"
      continue
    fi
    peak > "$work/peak.$i"
    if [ ${#trace[@]} -gt 0 ]; then
      # The replay reads exactly the run's bytes: its rate is the disk's for this row.
      disk_gbs=$("$io_bench" --replay "$work/trace.txt" --depth 16 |
                 sed -n 's/.* \([0-9.]*\) GB\/s .*/\1/p')
      [ -n "$disk_gbs" ] || disk_gbs=$seq_gbs
    fi
    echo "$disk_gbs" > "$work/disk.$i"
  done
  base_tps=""
  declare -A tps_of=() hit_of=() of_bound=()  # by configuration label, at this limit
  for i in $(seq 0 $((n_cfg - 1))); do
    IFS='|' read -r label file flags <<< "${configs[$i]}"
    if [ -f "$work/failed.$i" ]; then
      printf "| %-28s | %4s%% | failed: %s\n" "$label" "$pct" "$(cat "$work/failed.$i")"
      continue
    fi
    line=$(/usr/bin/python3 - "$work/out.$i.json" "$work/stats.$i.json" "$label" "$pct" "$(cat "$work/disk.$i")" "$ram_tps" "$(cat "$work/peak.$i")" "$base_tps" <<'PY'
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
print(f"{tps}\t{hit:.1f}\t{100 * tps / bound_tps:.0f}\t| {label:<28} | {pct:>4}% | {tps:8.2f} | {vs:>8} | {hit_txt:>8} | {read_txt:>12} | {gib_txt:>9} | {disk_gbs:9.2f} | {bound_tps:11.2f} | {100 * tps / bound_tps:6.0f}% | {peak / 2**20:10.0f} | {busy_txt:>9} |")
PY
)
    IFS=$'\t' read -r "tps_of[$label]" "hit_of[$label]" "of_bound[$label]" row <<< "$line"
    echo "$row"
    if [ "$label" = "stream, no prefetch" ]; then base_tps=${tps_of[$label]}; fi
  done
  summary_line "$pct"
  # What the limit left the expert cache (the budget also holds the dense weights, the KV
  # cache and a reserve), from the tensor-major stream row's plan.
  for i in $(seq 0 $((n_cfg - 1))); do
    IFS='|' read -r label file flags <<< "${configs[$i]}"
    [ "$label" = "stream, prefetch" ] && [ ! -f "$work/failed.$i" ] || continue
    /usr/bin/python3 - "$work/stats.$i.json" "$pct" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["plan"]
mib = lambda b: f"{b / 2**20:.0f} MiB" if b >= 10 * 2**20 else f"{b / 2**20:.1f} MiB"
print(f"at {sys.argv[2]} %: expert cache {mib(p['expert_cache'])}, "
      f"{100 * p['expert_cache'] / p['experts_total']:.0f} % of the experts (budget "
      f"{mib(p['budget'])}: dense {mib(p['dense'])}, KV {mib(p['kv_cache'])}, "
      f"reserve {mib(p['reserve'])})")
PY
  done
  if [ "$reversed" = 1 ]; then echo "at $pct %: the rows ran bottom to top"; fi
done
