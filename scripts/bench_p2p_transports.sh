#!/usr/bin/env bash
# Point-to-point bandwidth and latency between two ranks of this one machine over Open MPI's
# shared-memory transport and over TCP through the loopback interface (docs/performance.md,
# "Point-to-point transports on one host"). The transports alternate, ROUNDS times each, and the
# table gives the median of each size.
#   scripts/bench_p2p_transports.sh           (ROUNDS=3 MAX_BYTES=64M)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
dpl_bench_setup bench_p2p bench-p2p-transports
ROUNDS=${ROUNDS:-3}
MAX_BYTES=${MAX_BYTES:-64M}
max=$(numfmt --from=iec "$MAX_BYTES")

if ! mpiexec --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then
  echo "bench_p2p_transports.sh: needs Open MPI (the transports are chosen with --mca btl)" >&2
  exit 1
fi
# The shared-memory BTL is "vader" in Open MPI 3.x-4.x and "sm" from 5.0 on.
if ompi_info 2>/dev/null | grep -q "MCA btl: vader"; then SM=vader; else SM=sm; fi
# ob1 is the PML that runs over BTLs (UCX would ignore the choice); TCP is told to use the loopback
# interface, which Open MPI otherwise excludes.
COMMON=(-n 2 --bind-to none --mca pml ob1)
declare -A FLAGS=(
  ["shared memory ($SM)"]="--mca btl self,$SM"
  ["TCP loopback"]="--mca btl self,tcp --mca btl_tcp_if_include lo"
)
ORDER=("shared memory ($SM)" "TCP loopback")

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(mpiexec --version 2>&1 | head -n 1), load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
rm -f "$OUT"/*.log
for round in $(seq 1 "$ROUNDS"); do
  for t in "${ORDER[@]}"; do
    log="$OUT/$(echo "$t" | tr -c 'a-zA-Z0-9\n' '_')-round$round.log"
    # shellcheck disable=SC2086  # the flags are words
    mpiexec "${COMMON[@]}" ${FLAGS[$t]} "$DPL_BUILD_DIR/benchmarks/bench_p2p" --max-bytes "$max" >"$log" 2>&1 ||
      { echo "bench_p2p_transports.sh: mpiexec failed for $t, see $log" >&2; tail -n 20 "$log" >&2; exit 1; }
  done
done
echo "# load average $(cut -d' ' -f1-3 /proc/loadavg) at end; logs in $OUT"

python3 - "$OUT" "${ORDER[@]}" <<'EOF'
import collections, glob, os, re, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
# (transport, "Bandwidth"|"Latency", bytes) -> values from every round
vals = collections.defaultdict(list)
for name in names:
    stem = re.sub(r"[^a-zA-Z0-9]", "_", name)
    for path in glob.glob(os.path.join(out, stem + "-round*.log")):
        section = None
        for line in open(path):
            if line.startswith("# OSU MPI"):
                section = "Bandwidth" if "Bandwidth" in line else "Latency"
            elif line.startswith("# ") and "device" in line:
                section = None   # only the host-memory sections compare transports
            elif section and re.match(r"^\d+\s", line):
                size, v = line.split()[:2]
                vals[(name, section, int(size))].append(float(v))
sizes = sorted({k[2] for k in vals})
shown = [s for s in sizes if s in (1, 8, 64, 1024, 4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20)]
a, b = names
print()
print(f"median of the rounds; bandwidth: OSU osu_bw method (window of non-blocking sends), latency: half a ping-pong")
print(f"{'size (B)':>10} | {a + ' MB/s':>24} {b + ' MB/s':>20} {'ratio':>6} | {a + ' us':>22} {b + ' us':>18} {'ratio':>6}")
for s in shown:
    bw = [statistics.median(vals[(n, 'Bandwidth', s)]) for n in names]
    lat = [statistics.median(vals[(n, 'Latency', s)]) for n in names]
    print(f"{s:>10} | {bw[0]:>24.1f} {bw[1]:>20.1f} {bw[0] / bw[1]:>5.1f}x | {lat[0]:>22.2f} {lat[1]:>18.2f} {lat[1] / lat[0]:>5.1f}x")
EOF
