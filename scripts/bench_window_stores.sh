#!/usr/bin/env bash
# The host allreduce of hierarchical on one machine with each kind of stores into the node's
# shared window (DPL_WINDOW_STORES: cached, streaming, and measured, the default, which times both
# and uses the faster). One mpiexec per kind and round, the kinds alternating in a rotating order,
# so that a machine whose state drifts over minutes (a virtual machine whose CPUs the host moves)
# weighs on all of them alike. Prints the median time per allreduce of each kind per round, and
# over all rounds with the ratio to cached (the stores before the choice existed).
#   scripts/bench_window_stores.sh   (NP=2 ROUNDS=6 REPEATS=3 ITERS=20 SIZES=7184128,102228128)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
B="$DPL_BUILD_DIR"
dpl_bench_setup bench_allreduce bench-window-stores
NP=${NP:-2}
ROUNDS=${ROUNDS:-6}
REPEATS=${REPEATS:-3}
ITERS=${ITERS:-20}
SIZES=${SIZES:-7184128,102228128}
KINDS=(cached measured streaming)
MPI_FLAGS=(--bind-to none)
if mpiexec --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then MPI_FLAGS+=(--oversubscribe); fi
comms=$(printf 'hierarchical,%.0s' $(seq 1 "$REPEATS")); comms=${comms%,}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $NP ranks, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
rm -f "$OUT"/*.log "$OUT/all.txt.tmp"
for round in $(seq 1 "$ROUNDS"); do
  for j in 0 1 2; do
    kind=${KINDS[$(((round + j) % 3))]}
    log="$OUT/$kind-round$round.log"
    DPL_WINDOW_STORES=$kind DPL_OUTPUT=plain mpiexec -n "$NP" "${MPI_FLAGS[@]}" -x DPL_WINDOW_STORES \
      "$B/benchmarks/bench_allreduce" -b 8 -e 8 --sizes "$SIZES" -c 1 -n "$ITERS" -w 2 --time-limit 1 \
      --comm "$comms" >"$log" 2>&1 ||
      { echo "bench_window_stores.sh: mpiexec failed, see $log" >&2; tail -n 20 "$log" >&2; exit 1; }
    sed "s/^summary /summary kind=$kind round=$round /" "$log" | grep '^summary' >>"$OUT/all.txt.tmp"
  done
done
mv "$OUT/all.txt.tmp" "$OUT/all.txt"
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg) at end; logs in $OUT"

python3 - "$OUT/all.txt" "${KINDS[@]}" <<'EOF'
import collections, statistics, sys
path, kinds = sys.argv[1], sys.argv[2:]
samples = collections.defaultdict(list)   # (round or "all", bytes, kind) -> times in ms
wrong = 0
for line in open(path):
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    if int(kv["bytes"]) <= 8:   # the -b/-e row only pads the sweep
        continue
    wrong += int(kv["wrong"])
    for r in (int(kv["round"]), "all"):
        samples[(r, int(kv["bytes"]), kv["kind"])].append(float(kv["time_us"]) / 1000)
rounds = sorted({k[0] for k in samples if k[0] != "all"})
sizes = sorted({k[1] for k in samples})
print()
print("median ms per allreduce of hierarchical, by DPL_WINDOW_STORES" + (f"   #wrong {wrong}" if wrong else ""))
head = f"{'round':>5} {'bytes':>10} " + " ".join(f"{k:>10}" for k in kinds) + "   " + \
       " ".join(f"{k + '/cached':>17}" for k in kinds if k != "cached")
print(head)
print("-" * len(head))
for r in rounds + ["all"]:
    for size in sizes:
        med = {k: statistics.median(samples[(r, size, k)]) for k in kinds if samples[(r, size, k)]}
        print(f"{r:>5} {size:>10} " + " ".join(f"{med[k]:>10.2f}" for k in kinds) + "   " +
              " ".join(f"{med[k] / med['cached']:>16.2f}x" for k in kinds if k != "cached"))
EOF
