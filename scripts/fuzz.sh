#!/usr/bin/env bash
# Fuzzes dpl's input readers with libFuzzer: scripts/fuzz.sh [seconds per harness, default 600]
# [harness ...] (default: every tests/fuzz/*_fuzz.cpp). Builds the harnesses with clang, ASan and
# UBSan (CUDA off) into build-sanitize, the build scripts/sanitize.sh uses too
# (scripts/sanitized_build.sh), runs each from its seeds in tests/fuzz/seeds for the given time
# and prints, per harness, the executions, their rate, the coverage libFuzzer reached (cov:
# edges, ft: features) and the crashes. New corpus inputs, logs and any crashing input (crash-*,
# leak-*, timeout-*, oom-*) stay in the run folder it names; the seeds in the repository are only
# read. Exits non-zero when anything crashed.
# DPL_FUZZ_PARALLEL=2 runs two harnesses at a time (one core each).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift $(($# > 0 ? 1 : 0))
source scripts/env.sh
dir=${DPL_SANITIZE_BUILD_DIR:-build-sanitize}

harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.cpp; do
    f=${f##*/}
    harnesses+=("${f%_fuzz.cpp}")
  done
fi

bash scripts/sanitized_build.sh "${harnesses[@]/#/fuzz_}"

run="$PWD/$dir/fuzz-runs/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run"
echo "run folder: $run"
# One thread per harness: the readers are single-threaded, and OpenMP's pool would only add noise.
export DPL_NUM_THREADS=1 OMP_NUM_THREADS=1
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

fuzz_one() {
  local h=$1
  mkdir -p "$run/corpus/$h" "$run/crashes/$h"
  local start=$SECONDS
  # New inputs go to the first folder (the run's); the repository's seeds are read only.
  "$dir/tests/fuzz/fuzz_$h" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$run/crashes/$h/" "$run/corpus/$h" "tests/fuzz/seeds/$h" >"$run/$h.log" 2>&1 || true
  # How long it ran: a harness stops at its first crash, before its time is up.
  echo $((SECONDS - start)) >"$run/$h.seconds"
}

parallel=${DPL_FUZZ_PARALLEL:-1}
for h in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  echo "fuzzing $h for $seconds s"
  fuzz_one "$h" &
done
wait

status=0
printf '\n%-12s %8s %12s %8s %8s %8s %8s\n' harness seconds executions exec/s cov ft crashes
for h in "${harnesses[@]}"; do
  log="$run/$h.log"
  # libFuzzer's final statistics, or after a crash (which ends the run without them) its last
  # status line ("#N ... cov: C ft: F ... exec/s: R ...").
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\).*/\1/p' <<<"$last")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  [ -n "$rate" ] || rate=$(sed -n 's/.* exec\/s: \([0-9]*\).*/\1/p' <<<"$last")
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  ran=$(cat "$run/$h.seconds")
  crashes=$(find "$run/crashes/$h" -type f | wc -l)
  [ "$crashes" -eq 0 ] || status=1
  printf '%-12s %8s %12s %8s %8s %8s %8s\n' "$h" "$ran" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$crashes"
done
[ "$status" -eq 0 ] || echo "crashing inputs are in $run/crashes; add each to tests/fuzz/seeds/<harness>/ with its fix"
exit "$status"
