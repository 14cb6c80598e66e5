#!/usr/bin/env bash
# The op and optimizer measurements of docs/performance.md on a GPU machine, in one round:
#   configure (CUDA on) -> build the GPU tests and the two benchmarks -> the GPU tests and
#   docs/own-models.md's program on the GPU -> bench_ops
#   beside torch_ops_peer.py in each of PEER_MODES, bench_optimizer_step (AdamW, one group and two)
#   beside torch_optimizer_peer.py (fused and foreach), alternating dpl and PyTorch -> the tables,
#   printed last.
#
# Usage:        scripts/gpu_ops.sh [extra CMake configure arguments, e.g. -DDNNL_ROOT=...]
# Environment:  OUT (logs; default ./gpu-ops-results), BUILD_DIR (default <repo>/build-gpu),
#               CUDA_ARCH (default 90), DTYPE (bench_ops's dtype, default bfloat16),
#               TESTS (0 skips the GPU tests), REPS (rounds of each benchmark, default 2),
#               PEER_MODES (torch_ops_peer.py's modes, default "eager compile reduce-overhead"; the
#               table takes PyTorch's best), OPS_FILTER (only the ops whose name holds it).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-./gpu-ops-results}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
DTYPE="${DTYPE:-bfloat16}"
REPS="${REPS:-2}"
PEER_MODES="${PEER_MODES:-eager compile reduce-overhead}"
OPS_FILTER="${OPS_FILTER:-}"
filter_args=()
[ -n "$OPS_FILTER" ] && filter_args=(--filter "$OPS_FILTER")
JOBS="$(nproc 2>/dev/null || echo 8)"

step() {  # step NAME COMMAND...: output to $OUT/NAME.log, a line saying how it went
  local name="$1"
  shift
  if "$@" >"$OUT/$name.log" 2>&1; then echo "ok      $name"; else echo "FAILED  $name (exit $?; $OUT/$name.log)"; fi
}

step configure cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPL_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" "$@"
step build cmake --build "$BUILD" -j "$JOBS" --target dpl_cuda_tests bench_ops bench_optimizer_step -- -k 0
if [ "${TESTS:-1}" != 0 ]; then
  step gpu-tests "$BUILD/tests/cuda/dpl_cuda_tests"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/gpu-tests.log" | sort | uniq -c | head -40
  # docs/own-models.md's program (an autoencoder and a classifier of one's own) on the GPU.
  step build-own-models cmake --build "$BUILD" -j "$JOBS" --target own_models_example
  step own-models-cuda mpiexec --allow-run-as-root -n 1 "$BUILD/examples/own_models_example" cuda
  cat "$OUT/own-models-cuda.log"
fi
for r in $(seq 1 "$REPS"); do
  step "ops-dpl-$r" "$BUILD/benchmarks/bench_ops" --device cuda --dtype "$DTYPE" "${filter_args[@]}"
  for mode in $PEER_MODES; do
    step "ops-torch-$mode-$r" python3 "$ROOT/benchmarks/torch_ops_peer.py" --device cuda --dtype "$DTYPE" --mode "$mode" \
      "${filter_args[@]}"
  done
  step "adamw-dpl-$r" "$BUILD/benchmarks/bench_optimizer_step" --device cuda --optimizer adamw -a resnet50
  step "adamw-torch-$r" python3 "$ROOT/benchmarks/torch_optimizer_peer.py" --arch resnet50
  step "adamw-groups-dpl-$r" "$BUILD/benchmarks/bench_optimizer_step" --device cuda --optimizer adamw -a resnet50 \
    --groups no-decay-1d
  step "adamw-groups-torch-$r" python3 "$ROOT/benchmarks/torch_optimizer_peer.py" --arch resnet50 --groups no-decay-1d
done
[ "$REPS" -gt 0 ] || exit 0
echo
echo "ops, round $REPS (dpl / PyTorch's best of: $PEER_MODES; $DTYPE):"
peer_logs=()
for mode in $PEER_MODES; do peer_logs+=("$OUT/ops-torch-$mode-$REPS.log"); done
python3 "$ROOT/benchmarks/ops_table.py" "$OUT/ops-dpl-$REPS.log" "${peer_logs[@]}"
echo
echo "AdamW step over ResNet-50's parameters (one group, and no decay on the 1-D parameters):"
grep -h "what=optimizer_step" "$OUT"/adamw-*.log
