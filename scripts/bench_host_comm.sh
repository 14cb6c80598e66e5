#!/usr/bin/env bash
# Host-memory allreduce of every MPI communicator on this one machine, in the layouts of
# docs/performance.md ("Host allreduce on one machine"): 2 ranks, 4 ranks, and 4 ranks as two
# virtual nodes of 2 (DPL_RANKS_PER_NODE=2). Within each mpiexec the communicators alternate
# (naive, flat, hierarchical, two_dimensional, again, in a different order each time), so a
# machine that gets busier or quieter during the run weighs on all of them alike. Prints the
# median time per allreduce of each, and the ratios of hierarchical and two_dimensional to the
# fastest communicator and to the faster single-level one (naive or flat). Each sample is the mean
# of up to ITERS allreduces, fewer where they would take longer than TIME_LIMIT seconds (the slow
# single-level paths at 100 MB), so the fast paths get many iterations per sample.
#   scripts/bench_host_comm.sh      (ROUNDS=4 REPEATS=3 ITERS=40 TIME_LIMIT=1 SIZES=7184128,102228128)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
B="$DPL_BUILD_DIR"
dpl_bench_setup bench_allreduce bench-host-comm
ROUNDS=${ROUNDS:-4}
REPEATS=${REPEATS:-3}
ITERS=${ITERS:-40}
TIME_LIMIT=${TIME_LIMIT:-1}
SIZES=${SIZES:-7184128,102228128}
COMMS=(naive flat hierarchical two_dimensional)
# Open MPI needs --oversubscribe for 4 ranks on 2 cores; --bind-to none lets a waiting rank's
# core serve another (Open MPI binds each rank to one core when -n <= 2).
MPI_FLAGS=(--bind-to none)
if mpiexec --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then MPI_FLAGS+=(--oversubscribe); fi

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
rm -f "$OUT"/*.log "$OUT/all.txt.tmp"
# layout name, ranks, DPL_RANKS_PER_NODE ("" = the machine is one node)
LAYOUTS=("1 node, 2 ranks|2|" "1 node, 4 ranks|4|" "2 virtual nodes x 2 ranks|4|2")
# Orders of the four communicators in which each one follows every other one once (a Williams
# square), taken in turn: a communicator that always ran right after the same one (a slow one,
# say) could inherit its effects on the caches and the scheduler.
ORDERS=("0 1 3 2" "1 2 0 3" "2 3 1 0" "3 0 2 1")
for round in $(seq 1 "$ROUNDS"); do
  list=()
  for r in $(seq 1 "$REPEATS"); do
    for i in ${ORDERS[$(((round * REPEATS + r) % ${#ORDERS[@]}))]}; do list+=("${COMMS[$i]}"); done
  done
  comm_list=$(IFS=,; echo "${list[*]}")
  for layout in "${LAYOUTS[@]}"; do
    IFS='|' read -r name np rpn <<<"$layout"
    log="$OUT/$(echo "$name" | tr -c 'a-z0-9\n' '_')-round$round.log"
    env ${rpn:+DPL_RANKS_PER_NODE=$rpn} DPL_OUTPUT=plain mpiexec -n "$np" "${MPI_FLAGS[@]}" \
      ${rpn:+-x DPL_RANKS_PER_NODE} "$B/benchmarks/bench_allreduce" -b 8 -e 8 --sizes "$SIZES" -c 1 \
      -n "$ITERS" -w 2 --time-limit "$TIME_LIMIT" --comm "$comm_list" >"$log" 2>&1 ||
      { echo "bench_host_comm.sh: mpiexec failed, see $log" >&2; tail -n 20 "$log" >&2; exit 1; }
    sed "s/^summary /summary layout=$(echo "$name" | tr ' ,' '_;') /" "$log" | grep '^summary' >>"$OUT/all.txt.tmp"
  done
done
mv "$OUT/all.txt.tmp" "$OUT/all.txt"
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg) at end; logs in $OUT"

python3 - "$OUT/all.txt" "${COMMS[@]}" <<'EOF'
import collections, statistics, sys
path, comms = sys.argv[1], sys.argv[2:]
samples = collections.defaultdict(list)   # (layout, bytes, comm) -> times in us
wrong = collections.defaultdict(int)
layouts, sizes = [], []
for line in open(path):
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    if int(kv["bytes"]) <= 8:   # the -b/-e row only pads the sweep
        continue
    layout = kv["layout"].replace("_", " ").replace(";", ",")
    key = (layout, int(kv["bytes"]), kv["comm"])
    samples[key].append(float(kv["time_us"]))
    wrong[key] += int(kv["wrong"])
    if layout not in layouts: layouts.append(layout)
    if int(kv["bytes"]) not in sizes: sizes.append(int(kv["bytes"]))
print()
print("median time per allreduce in ms (samples per cell), float32 sum, host buffers")
head = (f"{'layout':<27} {'bytes':>10} " + " ".join(f"{c:>17}" for c in comms) +
        "   hier/best  2d/best  hier/1-level  2d/1-level  hier/naive")
print(head)
print("-" * len(head))
for layout in layouts:
    for size in sorted(sizes):
        med = {c: statistics.median(samples[(layout, size, c)]) / 1000 for c in comms if samples[(layout, size, c)]}
        cells = " ".join(f"{med[c]:>11.2f} ({len(samples[(layout, size, c)]):>2})" if c in med else f"{'-':>17}"
                         for c in comms)
        best = min(med.values())
        single = min(med["naive"], med["flat"])   # the fastest single-level path
        bad = sum(wrong[(layout, size, c)] for c in comms)
        print(f"{layout:<27} {size:>10} {cells}   {med['hierarchical'] / best:>8.2f}x {med['two_dimensional'] / best:>7.2f}x"
              f" {med['hierarchical'] / single:>12.2f}x {med['two_dimensional'] / single:>10.2f}x"
              f" {med['hierarchical'] / med['naive']:>10.2f}x" + (f"   #wrong {bad}" if bad else ""))
EOF
