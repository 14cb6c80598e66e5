#!/usr/bin/env bash
# Times every GPU kernel of a program's profiled region with Nsight Compute and prints a table of
# the kernels by total time, largest first.
#
# Usage:  scripts/gpu_kernel_profile.sh OUT_DIR PROGRAM [ARGS...]
# The program brackets the work to look at with dpl::cuda::profiler_start/stop (bench_gpt2 and
# bench_resnet do with --profile-steps N); the profiler starts with its capture off, so set-up and
# warm-up are not in the table. Kernels run one at a time under the profiler, so the table gives
# each kernel's own duration, not the overlap between them; the clocks are left as they are.
# Environment: NCU (the ncu binary; default the one on PATH or under /opt/nvidia/nsight-compute),
#              TOP (rows in the table, default 40).
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
"$NCU" --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
  --kernel-name-base function -f -o "$OUT/kernels" "$@" >"$OUT/program.log" 2>&1
rc=$?
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
