#!/usr/bin/env bash
# One build-test-measure round of dpl on a GPU machine:
#   configure (CUDA on, sm_90) -> build with all cores -> ctest labels unit, cuda (and dist when
#   present) -> MNIST-MLP step benchmark (dpl on cuda and cpu, then the PyTorch peer) -> a short
#   table, printed last.
#
# Usage, from anywhere:   scripts/gpu_check.sh
# Environment:
#   OUT          folder for logs and results (default ./gpu-results)
#   BUILD_DIR    build folder (default <repo>/build-gpu)
#   CUDA_ARCH    CMAKE_CUDA_ARCHITECTURES (default 90)
#   BENCH_ITERS  timed iterations of the GPU benchmark (default 2000)
#   BENCH_REPS   repetitions of each GPU benchmark; the median is reported (default 3)
#   CTEST_LABELS test labels to run (default "unit cuda dist"; a label without tests is noted)
#   DATA         folder of the Fashion-MNIST files: when set, train_mnist runs on every GPU of the
#                machine under mpiexec (-g) and its final validation accuracy enters the table
#   MNIST_EPOCHS epochs of that run (default 20)
#   CTEST_TIMEOUT seconds one test may take (default 180)
# A failing step does not stop the round: the table says which steps failed, and the exit
# status is non-zero when any did.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
ARCH="${CUDA_ARCH:-90}"
ITERS="${BENCH_ITERS:-2000}"
REPS="${BENCH_REPS:-3}"
LABELS="${CTEST_LABELS:-unit cuda dist}"
JOBS="$(nproc 2>/dev/null || echo 8)"

# MPI runs as root on the GPU machine; NVLink multicast stays off.
if [ "$(id -u)" = "0" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"

declare -a FAILED=()
declare -A RESULT=()

# run_step NAME COMMAND...: runs the command with its output in $OUT/NAME.log; records the
# outcome and never stops the script.
run_step() {
  local name="$1"
  shift
  local log="$OUT/$name.log"
  echo "== $name: $*"
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    RESULT[$name]="ok"
  else
    RESULT[$name]="FAILED (exit $rc)"
    FAILED+=("$name")
    echo "   failed with exit $rc; last lines of $log:"
    tail -n 25 "$log" | sed 's/^/   | /'
  fi
  return 0
}

# Value of key=... in the first matching line of a file, or empty.
kv() { grep -o "$2=[^ ]*" "$1" 2>/dev/null | head -n 1 | cut -d= -f2 || true; }

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }

{
  echo "date: $(date -Is)"
  echo "host: $(hostname)"
  git -C "$ROOT" rev-parse HEAD 2>/dev/null | sed 's/^/commit: /' || true
  git -C "$ROOT" status --short 2>/dev/null | head -n 50 | sed 's/^/changed: /' || true
  nvidia-smi 2>&1 || true
  nvcc --version 2>&1 || true
  cmake --version 2>&1 | head -n 1 || true
} >"$OUT/machine.txt" 2>&1

# --- configure and build ------------------------------------------------------------------
run_step configure cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDPL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH"
# -k 0: a target that fails to build does not keep the others from being built and tested.
run_step build cmake --build "$BUILD" -j "$JOBS" -- -k 0

# --- MPI on this machine ----------------------------------------------------------------
# Some virtual machines hang Open MPI's default transports; fall back to shared memory only
# (ob1 + vader) when a two-rank probe does not finish.
MPI_MODE="default"
probe_mpi() {
  timeout 90 mpiexec -n 2 --oversubscribe "$BUILD/tests/dist/dpl_dist_tests" --gtest_filter='Topology*' \
    >"$OUT/mpi-probe-$1.log" 2>&1
}
if [ -x "$BUILD/tests/dist/dpl_dist_tests" ]; then
  if ! probe_mpi default; then
    export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
    MPI_MODE="ob1+vader"
    probe_mpi fallback || MPI_MODE="broken (see mpi-probe-*.log)"
  fi
fi

# --- MNIST on every GPU under mpiexec -------------------------------------------------------
MNIST_ACC=""
NGPU="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
if [ -n "${DATA:-}" ] && [ -x "$BUILD/examples/mnist/train_mnist" ] && [ "${NGPU:-0}" -ge 1 ]; then
  run_step "mnist-gpu-np$NGPU" timeout 400 mpiexec -n "$NGPU" --bind-to none -x NCCL_NVLS_ENABLE \
    "$BUILD/examples/mnist/train_mnist" -g -e "${MNIST_EPOCHS:-20}" --data "$DATA" -o "$OUT/mnist-np$NGPU"
  MNIST_ACC="$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[-1]['validation/main/accuracy'])" \
    "$OUT/mnist-np$NGPU/log" 2>/dev/null || true)"
fi

# --- tests --------------------------------------------------------------------------------
declare -A TESTS=()
for label in $LABELS; do
  count=""
  if [ -d "$BUILD" ]; then
    count="$(ctest --test-dir "$BUILD" -N -L "^${label}\$" 2>/dev/null | sed -n 's/.*Total Tests: *\([0-9]*\).*/\1/p' || true)"
  fi
  if [ -z "$count" ] || [ "$count" = "0" ]; then
    TESTS[$label]="none registered"
    continue
  fi
  if [ "$label" = "dist" ] && [ "${MPI_MODE#broken}" != "$MPI_MODE" ]; then
    TESTS[$label]="not run: MPI does not start on this machine"
    continue
  fi
  run_step "ctest-$label" ctest --test-dir "$BUILD" -L "^${label}\$" --output-on-failure -j 1 \
    --timeout "${CTEST_TIMEOUT:-180}" --output-junit "$OUT/ctest-$label.xml"
  log="$OUT/ctest-$label.log"
  # ctest ends with "100% tests passed out of N" or "P% tests passed, F tests failed out of N".
  total="$(grep -o 'tests passed.*out of [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || true)"
  nfail="$(grep -o '[0-9]* tests failed out of' "$log" | tail -n 1 | grep -o '^[0-9]*' || true)"
  nskip="$(grep -c '(Skipped)' "$log" || true)"
  if [ -n "$total" ]; then
    TESTS[$label]="$((total - ${nfail:-0} - ${nskip:-0})) passed, ${nfail:-0} failed, ${nskip:-0} skipped"
  else
    TESTS[$label]="no summary (see ctest-$label.log)"
  fi
done

# --- benchmarks ---------------------------------------------------------------------------
BENCH="$BUILD/benchmarks/bench_mlp_step"
PEER=""
for p in "$ROOT/../shared/bench/torch_peer.py" "$ROOT/shared/bench/torch_peer.py"; do
  if [ -f "$p" ]; then PEER="$p"; break; fi
done

dpl_cuda=() peer_cuda=()
for rep in $(seq 1 "$REPS"); do
  # Alternate dpl and the peer so that both see the same machine state.
  if [ -x "$BENCH" ]; then
    run_step "bench-mlp-dpl-cuda-$rep" "$BENCH" --device cuda --batch 100 --units 1000 --iters "$ITERS" --warmup 100
    v="$(kv "$OUT/bench-mlp-dpl-cuda-$rep.log" iters_per_s)"
    [ -n "$v" ] && dpl_cuda+=("$v")
  fi
  if [ -n "$PEER" ]; then
    run_step "bench-mlp-peer-$rep" python3 "$PEER" mlp --bs 100
    v="$(kv "$OUT/bench-mlp-peer-$rep.log" iters_per_s)"
    [ -n "$v" ] && peer_cuda+=("$v")
  fi
done
if [ -x "$BENCH" ]; then
  run_step bench-mlp-dpl-cpu "$BENCH" --device cpu --batch 100 --units 1000 --iters 20 --warmup 3
else
  RESULT[bench]="FAILED (bench_mlp_step was not built)"
  FAILED+=("bench")
fi

DPL_IPS="$(printf '%s\n' "${dpl_cuda[@]:-}" | grep . | median || true)"
PEER_IPS="$(printf '%s\n' "${peer_cuda[@]:-}" | grep . | median || true)"
CPU_IPS="$(kv "$OUT/bench-mlp-dpl-cpu.log" iters_per_s)"
RATIO=""
if [ -n "$DPL_IPS" ] && [ -n "$PEER_IPS" ]; then
  RATIO="$(awk -v a="$DPL_IPS" -v b="$PEER_IPS" 'BEGIN { if (b > 0) printf "%.2f", a / b }')"
fi
{
  echo "dpl_cuda_iters_per_s=${DPL_IPS:-} runs=${dpl_cuda[*]:-}"
  echo "peer_cuda_iters_per_s=${PEER_IPS:-} runs=${peer_cuda[*]:-}"
  echo "dpl_cpu_iters_per_s=${CPU_IPS:-}"
  echo "ratio_dpl_over_peer=${RATIO:-}"
} >"$OUT/summary.txt"

# --- the table ----------------------------------------------------------------------------
echo
echo "================================ dpl GPU check ================================"
printf '%-22s %s\n' "configure" "${RESULT[configure]:-not run}"
printf '%-22s %s\n' "build" "${RESULT[build]:-not run}"
for label in $LABELS; do
  printf '%-22s %s\n' "tests $label" "${TESTS[$label]:-not run}"
done
printf '%-22s %s\n' "mpi transports" "$MPI_MODE"
printf '%-22s %s\n' "mnist -g on $NGPU GPUs" "${MNIST_ACC:-n/a}${MNIST_ACC:+ final validation accuracy (${MNIST_EPOCHS:-20} epochs)}"
printf '%-22s %s\n' "MLP step dpl cuda" "${DPL_IPS:-n/a} iters/s (median of ${#dpl_cuda[@]}; bs 100, Adam, fp32)"
if [ -n "$PEER" ]; then
  printf '%-22s %s\n' "MLP step torch peer" "${PEER_IPS:-n/a} iters/s (median of ${#peer_cuda[@]})"
else
  printf '%-22s %s\n' "MLP step torch peer" "n/a (torch_peer.py not found)"
fi
printf '%-22s %s\n' "ratio dpl / peer" "${RATIO:-n/a}${RATIO:+x (target >= 3x)}"
printf '%-22s %s\n' "MLP step dpl cpu" "${CPU_IPS:-n/a} iters/s"
if [ "${#FAILED[@]}" -eq 0 ]; then
  printf '%-22s %s\n' "failed steps" "none"
else
  printf '%-22s %s\n' "failed steps" "${FAILED[*]}"
fi
echo "logs and results:      $OUT"
echo "==============================================================================="
[ "${#FAILED[@]}" -eq 0 ]
