#!/usr/bin/env bash
# Times every GPU kernel of a program's profiled region with Nsight Compute and prints a table of
# the kernels by total time, largest first.
#
# Usage:  scripts/gpu_kernel_profile.sh OUT_DIR PROGRAM [ARGS...]
# The program brackets the work to look at with dpl::cuda::profiler_start/stop (bench_gpt2 and
# bench_resnet do with --profile-steps N); the profiler starts with its capture off, so set-up and
# warm-up are not in the table. Kernels run one at a time under the profiler, so the table gives
# each kernel's own duration, not the overlap between them; the clocks are left as they are.
# With METRICS=sol (the default) each kernel's bytes to and from device memory and its share of the
# peak DRAM and SM rates are collected too, and the table gives each kernel's floor (its time at its
# busiest unit's peak) and lists the largest gaps to it (scripts/kernel_table.py). Those metrics
# replay every kernel a few times (ncu saves and restores its memory), so the run takes longer; should
# ncu refuse them, the run is repeated with the time alone. METRICS=time collects the time alone.
# Environment: NCU (the ncu binary; default the one on PATH or under /opt/nvidia/nsight-compute),
#              TOP (rows in the table, default 40), METRICS (sol or time).
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OUT_DIR PROGRAM [ARGS...]" >&2
  exit 2
fi
OUT="$1"
shift
mkdir -p "$OUT"
NCU="${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -n 1)}"
if [ -z "$NCU" ] || [ ! -x "$NCU" ]; then
  echo "$0: Nsight Compute (ncu) not found; set NCU" >&2
  exit 2
fi
TIME_METRIC=gpu__time_duration.sum
SOL_METRICS=$TIME_METRIC,dram__bytes.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
case "${METRICS:-sol}" in
  sol) metrics=$SOL_METRICS ;;
  time) metrics=$TIME_METRIC ;;
  *) echo "$0: METRICS must be sol or time, got '${METRICS}'" >&2; exit 2 ;;
esac
profile() {
  "$NCU" --profile-from-start off --clock-control none --metrics "$1" \
    --kernel-name-base function -f -o "$OUT/kernels" "${@:2}" >"$OUT/program.log" 2>&1
}
profile "$metrics" "$@"
rc=$?
if [ $rc -ne 0 ] && [ "$metrics" != "$TIME_METRIC" ]; then
  echo "$0: ncu failed with the speed-of-light metrics (exit $rc; $OUT/program-sol.log); again with the time alone" >&2
  mv "$OUT/program.log" "$OUT/program-sol.log"
  profile "$TIME_METRIC" "$@"
  rc=$?
fi
if [ $rc -ne 0 ]; then
  echo "$0: the profiled program failed (exit $rc); see $OUT/program.log" >&2
  tail -n 20 "$OUT/program.log" >&2
  exit $rc
fi
"$NCU" --import "$OUT/kernels.ncu-rep" --csv --page raw --print-units base >"$OUT/kernels.csv" 2>"$OUT/import.log" || {
  echo "$0: could not read the report back; see $OUT/import.log" >&2
  exit 1
}
python3 "$(dirname "${BASH_SOURCE[0]}")/kernel_table.py" "$OUT/kernels.csv" --top "${TOP:-40}" | tee "$OUT/kernels.txt"
