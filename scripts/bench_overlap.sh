#!/usr/bin/env bash
# The allreduce overlapped with backward against the allreduce after backward, on the CPU:
# train_mnist for one epoch under mpiexec -n RANKS, each host communicator with and without
# --overlap, alternating (off, on, on, off, ...) so a machine that gets busier or quieter weighs
# on both alike. Prints, per communicator, the medians over ROUNDS of the exposed allreduce (the
# "allreduce" phase: what the step waited for), the whole allreduce without overlap, their ratio,
# the buckets' total time, compute and the iterations per second; and whether the parameters and
# optimizer state after the epoch are bit-identical with and without overlap (the checksums of
# each run's checkpoint).
#   scripts/bench_overlap.sh      (ROUNDS=3 RANKS=2 COMMS="naive flat hierarchical two_dimensional" EXTRA="")
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
dpl_bench_setup train_mnist bench-overlap
ROUNDS=${ROUNDS:-3}
RANKS=${RANKS:-2}
COMMS=${COMMS:-naive flat hierarchical two_dimensional}
MPI_FLAGS=(--bind-to none)
if mpiexec --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then MPI_FLAGS+=(--oversubscribe); fi
export DPL_OUTPUT=plain

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
for round in $(seq 1 "$ROUNDS"); do
  for comm in $COMMS; do
    order="off on"
    if [ $((round % 2)) -eq 0 ]; then order="on off"; fi
    for mode in $order; do
      flags=()
      if [ "$mode" = on ]; then flags+=(--overlap); fi
      run="$OUT/$comm-$mode-$round"
      rm -rf "$run"
      # shellcheck disable=SC2086
      mpiexec -n "$RANKS" "${MPI_FLAGS[@]}" "$DPL_BUILD_DIR/examples/mnist/train_mnist" -e 1 -o "$run" \
        --communicator "$comm" --snapshot-every 1 "${flags[@]}" ${EXTRA:-} >"$run.log" 2>&1
    done
  done
done

python3 - "$OUT" "$ROUNDS" $COMMS <<'EOF'
import glob, json, os, statistics, struct, sys

out, rounds, comms = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def phases(run):
    with open(os.path.join(run, "phase_summary.json")) as f:
        s = json.load(f)
    by_name = {p["name"]: p for p in s["phases"]}
    its = s.get("training_iterations", 0)
    secs = s.get("training_seconds", 0)
    return {k: by_name[k]["mean_s"] * 1e3 for k in by_name}, (its / secs if secs else float("nan"))

def checksums(run):
    (path,) = glob.glob(os.path.join(run, "snapshot_iter_*.safetensors"))
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    sums = json.loads(header["__metadata__"]["checksums"])
    return {k: v for k, v in sums.items() if k.startswith(("model/", "optimizer/"))}

print(f"{'communicator':<16}{'allreduce off ms':>17}{'exposed on ms':>15}{'exposed/off':>12}"
      f"{'buckets total ms':>18}{'compute off/on ms':>19}{'it/s off/on':>14}  identical")
for comm in comms:
    rows = {m: [phases(os.path.join(out, f"{comm}-{m}-{r}")) for r in range(1, rounds + 1)] for m in ("off", "on")}
    med = lambda m, k: statistics.median(p[k] for p, _ in rows[m])
    ips = lambda m: statistics.median(i for _, i in rows[m])
    same = all(checksums(os.path.join(out, f"{comm}-off-{r}")) == checksums(os.path.join(out, f"{comm}-on-{r}"))
               for r in range(1, rounds + 1))
    off, on = med("off", "allreduce"), med("on", "allreduce")
    print(f"{comm:<16}{off:>17.3f}{on:>15.3f}{on / off:>12.2f}{med('on', 'allreduce/total'):>18.3f}"
          f"{med('off', 'compute'):>9.2f}/{med('on', 'compute'):<9.2f}{ips('off'):>6.1f}/{ips('on'):<7.1f}  {'yes' if same else 'NO'}")
EOF
