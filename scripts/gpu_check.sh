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
#   PEER_SCRIPT  the PyTorch peer (torch_peer.py) when it is not in shared/bench beside or inside
#                the repository (a copy carried to the GPU machine, say)
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
PEER="${PEER_SCRIPT:-}"
if [ -z "$PEER" ]; then
  for p in "$ROOT/../shared/bench/torch_peer.py" "$ROOT/shared/bench/torch_peer.py"; do
    if [ -f "$p" ]; then PEER="$p"; break; fi
  done
fi

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

# --- communicators on GPU: allreduce bandwidth (nccl-tests format), p2p (OSU format), MNIST ------
# Whole-node sweep with raw NCCL as the ceiling; then two virtual nodes (DPL_RANKS_PER_NODE=1), where
# the inter-node step of hierarchical/two_dimensional/flat is the pipelined staged MPI and "naive"
# is the plain host-staged MPI_Allreduce (whole buffer to the host, MPI_Allreduce, back).
ARB="$BUILD/benchmarks/bench_allreduce"
P2P="$BUILD/benchmarks/bench_p2p"
AR_NP="${NGPU:-0}"
if [ "$AR_NP" -gt 8 ]; then AR_NP=8; fi
if [ -x "$ARB" ] && [ "$AR_NP" -ge 2 ]; then
  run_step allreduce-node timeout 150 mpiexec -n "$AR_NP" --bind-to none -x NCCL_NVLS_ENABLE \
    "$ARB" -b 8 -e "${ALLREDUCE_MAX_BYTES:-1G}" -f 4 --sizes 102228128 -n 20 -w 5 -c 1 --raw --time-limit 1.5
  run_step allreduce-2nodes timeout 120 mpiexec -n "$AR_NP" --bind-to none -x NCCL_NVLS_ENABLE \
    -x DPL_RANKS_PER_NODE=1 "$ARB" -b 1M -e 64M -f 8 --sizes 102228128 -n 10 -w 2 -c 1 --time-limit 1.5 \
    --comm naive,flat,hierarchical,two_dimensional,pure_nccl
fi
if [ -x "$P2P" ] && [ "$AR_NP" -ge 1 ]; then
  run_step p2p timeout 90 mpiexec -n 2 --bind-to none -x NCCL_NVLS_ENABLE "$P2P"
fi
declare -A MNIST_COMM=()
if [ -n "${DATA:-}" ] && [ -x "$BUILD/examples/mnist/train_mnist" ] && [ "${NGPU:-0}" -ge 2 ]; then
  # Short runs (2 epochs): they show each communicator trains, not the final accuracy.
  for c in naive hierarchical two_dimensional flat pure_nccl single_node; do
    run_step "mnist-comm-$c" timeout 90 mpiexec -n 2 --bind-to none -x NCCL_NVLS_ENABLE \
      "$BUILD/examples/mnist/train_mnist" -g -e "${MNIST_COMM_EPOCHS:-2}" --communicator "$c" --data "$DATA" \
      -o "$OUT/mnist-comm-$c"
    MNIST_COMM[$c]="$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[-1]['validation/main/accuracy'])" \
      "$OUT/mnist-comm-$c/log" 2>/dev/null || echo n/a)"
  done
fi
# summary comm=NAME bytes=B ... lines of bench_allreduce
ar_field() { grep "^summary comm=$2 bytes=$3 " "$OUT/$1.log" 2>/dev/null | grep -o "$4=[^ ]*" | cut -d= -f2 | head -n 1 || true; }
L=102228128
BUS_RAW="$(ar_field allreduce-node raw_nccl $L busbw)"
BUS_PURE="$(ar_field allreduce-node pure_nccl $L busbw)"
BUS_HIER="$(ar_field allreduce-node hierarchical $L busbw)"
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b }' || true; }
R_PURE="$(ratio "$BUS_PURE" "$BUS_RAW")"
R_HIER="$(ratio "$BUS_HIER" "$BUS_RAW")"
T_NAIVE2="$(ar_field allreduce-2nodes naive $L time_us)"
T_HIER2="$(ar_field allreduce-2nodes hierarchical $L time_us)"
T_FLAT2="$(ar_field allreduce-2nodes flat $L time_us)"
SPEEDUP2="$(ratio "$T_NAIVE2" "$T_HIER2")"

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
  echo "allreduce_102MB_busbw_raw_nccl=${BUS_RAW:-}"
  echo "allreduce_102MB_busbw_pure_nccl=${BUS_PURE:-} ratio=${R_PURE:-}"
  echo "allreduce_102MB_busbw_hierarchical=${BUS_HIER:-} ratio=${R_HIER:-}"
  echo "allreduce_102MB_2nodes_time_us_naive=${T_NAIVE2:-} hierarchical=${T_HIER2:-} flat=${T_FLAT2:-} speedup=${SPEEDUP2:-}"
  for c in "${!MNIST_COMM[@]}"; do echo "mnist_comm_${c}_accuracy=${MNIST_COMM[$c]}"; done
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
printf '%-22s %s\n' "allreduce 102MB raw" "${BUS_RAW:-n/a}${BUS_RAW:+ GB/s busbw (raw ncclAllReduce, $AR_NP GPUs)}"
printf '%-22s %s\n' "  pure_nccl" "${BUS_PURE:-n/a}${BUS_PURE:+ GB/s busbw, ${R_PURE:-?}x raw (target >= 0.97)}"
printf '%-22s %s\n' "  hierarchical" "${BUS_HIER:-n/a}${BUS_HIER:+ GB/s busbw, ${R_HIER:-?}x raw (target >= 0.97)}"
printf '%-22s %s\n' "2 virtual nodes 102MB" "naive (host-staged MPI_Allreduce) ${T_NAIVE2:-n/a} us; hierarchical (pipelined staged) ${T_HIER2:-n/a} us; flat ${T_FLAT2:-n/a} us"
printf '%-22s %s\n' "  staged speedup" "${SPEEDUP2:-n/a}${SPEEDUP2:+x naive / hierarchical (target >= 2x)}"
for c in naive hierarchical two_dimensional flat pure_nccl single_node; do
  if [ -n "${MNIST_COMM[$c]:-}" ]; then
    printf '%-22s %s\n' "mnist -e ${MNIST_COMM_EPOCHS:-2} $c" "${MNIST_COMM[$c]} validation accuracy (2 ranks)"
  fi
done
if [ "${#FAILED[@]}" -eq 0 ]; then
  printf '%-22s %s\n' "failed steps" "none"
else
  printf '%-22s %s\n' "failed steps" "${FAILED[*]}"
fi
echo "logs and results:      $OUT"
echo "==============================================================================="
[ "${#FAILED[@]}" -eq 0 ]
