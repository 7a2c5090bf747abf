#!/usr/bin/env bash
# Stream-mode decode under a small expert cache with each way of hiding the disk: prefetch
# off/on, and the eviction policies (LRU, LFU with aging, placement-aware) with and without
# a placement profile. Rounds alternate the configurations so that machine noise hits them
# alike; the table gives medians and, per configuration, the median of its per-round ratio
# to the first one (prefetch off, LRU).
#
#   bench/tiering_policies.sh MODEL [-c CACHE] [-n TOKENS] [-r ROUNDS] [-t THREADS]
#
# The profile comes from other prompts than the measured one, as in real use. Expert reads
# use O_DIRECT (--direct on) so the page cache does not hide the disk; needs root only to
# drop the page cache between runs (skipped otherwise).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
moetier=${MOETIER:-$here/../build/bin/moetier}
model=${1:?usage: tiering_policies.sh MODEL [-c CACHE] [-n TOKENS] [-r ROUNDS] [-t THREADS]}
shift
cache=25%
n_gen=64
rounds=3
threads=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    -c) cache=$2; shift 2 ;;
    -n) n_gen=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    *) echo "tiering_policies.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$moetier" ] || { echo "tiering_policies.sh: $moetier not built (run scripts/build.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat > "$work/profile_prompts.txt" <<'EOF'
The history of the printing press begins in the fifteenth century.
Explain how a hash table handles collisions.
Write a short poem about the sea at night.
What are the main causes of inflation in an economy?
Describe the water cycle for a ten year old.
EOF
prompt="Summarize the differences between a process and a thread in an operating system."

"$moetier" profile -m "$model" -f "$work/profile_prompts.txt" -n 32 -t "$threads" \
  -o "$work/profile.json" 2> /dev/null

names=("prefetch off, lru" "next-layer, lru" "next-layer, lfu" "next-layer, lru + placement"
       "next-layer, placement policy")
flags=("--prefetch off --eviction lru" "--prefetch next-layer --eviction lru"
       "--prefetch next-layer --eviction lfu"
       "--prefetch next-layer --eviction lru --placement $work/profile.json"
       "--prefetch next-layer --eviction placement --placement $work/profile.json")

drop_caches() { [ "$(id -u)" = 0 ] && sync && echo 1 > /proc/sys/vm/drop_caches || true; }

for r in $(seq 1 "$rounds"); do
  for i in "${!names[@]}"; do
    drop_caches
    # shellcheck disable=SC2086
    "$moetier" run -m "$model" -p "$prompt" -n "$n_gen" --temp 0 --ignore-eos -t "$threads" \
      --moe-storage stream --expert-cache "$cache" --direct on ${flags[$i]} \
      --stats-json "$work/s_${r}_${i}.json" > /dev/null 2> "$work/e_${r}_${i}.txt"
  done
done

/usr/bin/python3 - "$work" "$rounds" "${names[@]}" <<'PY'
import json, re, statistics, sys
work, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def one(r, i):
    err = open(f"{work}/e_{r}_{i}.txt").read()
    m = re.search(r"generation (\d+) tokens in ([\d.]+) s", err)
    s = json.load(open(f"{work}/s_{r}_{i}.json"))
    t = s["total"]
    return {"tps": int(m.group(1)) / float(m.group(2)), "hit": s["hit_rate"],
            "mib_tok": t["bytes_physical"] / s["tokens"] / 2**20,
            "wasted": t["prefetch_wasted_bytes"] / max(1, t["prefetch_bytes"]),
            "stall": t["demand_stall_s"]}
runs = [[one(r, i) for i in range(len(names))] for r in range(1, rounds + 1)]
print(f"{'configuration':32} {'decode tok/s':>12} {'vs first':>9} {'hit rate':>9} "
      f"{'MiB read/tok':>13} {'prefetch wasted':>16}")
for i, name in enumerate(names):
    med = lambda k: statistics.median(run[i][k] for run in runs)
    ratio = statistics.median(run[i]["tps"] / run[0]["tps"] for run in runs)
    print(f"{name:32} {med('tps'):12.2f} {ratio:8.2f}x {100 * med('hit'):8.1f}% "
          f"{med('mib_tok'):13.1f} {100 * med('wasted'):15.1f}%")
PY
