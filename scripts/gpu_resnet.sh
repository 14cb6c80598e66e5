#!/usr/bin/env bash
# One GPU round for ResNet training and recorded (CUDA graph) steps, on one GPU:
#   configure (CUDA on, sm_90) -> build the GPU tests and the step benchmarks -> the GPU tests ->
#   MNIST-MLP step: dpl, dpl with --graph and the PyTorch peer, alternated -> ResNet-50 step,
#   batch 128, channels-last, per precision: dpl, dpl with --graph and the peer, alternated ->
#   a short table, printed last.
#
# Usage, from anywhere:   scripts/gpu_resnet.sh
# Environment:
#   OUT          folder for logs and results (default ./gpu-results)
#   BUILD_DIR    build folder (default <repo>/build-gpu)
#   CUDA_ARCH    CMAKE_CUDA_ARCHITECTURES (default 90)
#   REPS         rounds of each alternation; the median is reported (default 2)
#   MLP_REPS     rounds of the MLP alternation (default REPS; 0 skips the MLP)
#   PRECISIONS   ResNet precisions, of bf16, fp16 and fp32 (default "bf16 fp32"; " " skips ResNet).
#                The peer has no float16 setting: fp16 is rated against the peer's bf16 figures,
#                so list bf16 too
#   ARCH         the ResNet (default resnet50), BATCH its batch (default 128)
#   TESTS        a --gtest_filter for the GPU tests ("" runs them all; "none" skips them)
#   PEER_MODES   the peer's settings for ResNet, of eager (--fused --tf32), compile (--compile
#                --fused --tf32) and graphs (--compile --mode reduce-overhead --fused --tf32, CUDA
#                graphs); every ratio is also given against the fastest of them (default: all three)
#   PEER_REPS    runs of the peer in each setting; the median is reported (default 1)
#   BASELINE     a second source tree (an earlier commit, e.g. from `git archive`): it is built
#                beside this one and its steps alternate with this tree's, so a change is measured
#                against what it changed in the same call
#   DPL_FLAGS    extra flags of this tree's ResNet runs, a second variant alternated with the plain
#                one (e.g. "--fused-statistics off"): the table adds its rows ("dpl-flags") and its
#                ratio to this tree without them
#   PEER_SCRIPT  the PyTorch peer (torch_peer.py) when it is not in shared/bench beside or inside
#                the repository
#   CONVERGE     a folder of the Fashion-MNIST IDX files (Debian's dataset-fashion-mnist): after the
#                timed steps, the convergence recipe of docs/performance.md ("ResNet-18 on
#                Fashion-MNIST JPEGs"): the images as 64-pixel JPEGs, train_imagenet with resnet18 in
#                bfloat16, channels-last, recorded steps, 10 epochs (CONVERGE_EPOCHS); the table gives
#                each epoch's validation accuracy
#   PROFILE      1: after the timed steps, every kernel of one step of this tree's ResNet in the
#                first precision under Nsight Compute (scripts/gpu_kernel_profile.sh), the TOP
#                (default 25) largest in the table and the whole list in OUT/kernels
# A failing step does not stop the round; the table names failed steps and the exit status is
# non-zero when any failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
REPS="${REPS:-2}"
PRECISIONS="${PRECISIONS:-bf16 fp32}"
ARCH="${ARCH:-resnet50}"
BATCH="${BATCH:-128}"
JOBS="$(nproc 2>/dev/null || echo 8)"
# MPI (the convergence run) runs as root on the GPU machine.
if [ "$(id -u)" = "0" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

declare -a FAILED=()
declare -A RESULT=()
run_step() {
  local name="$1"
  shift
  echo "== $name: $*"
  local rc=0
  "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  # Each run's rate as soon as it ends: a round cut short by a time limit still shows its figures.
  local rate
  rate="$(grep -o -E '(img_per_s|iters_per_s)=[^ ]*' "$OUT/$name.log" 2>/dev/null | head -n 1 || true)"
  [ -n "$rate" ] && echo "   $rate"
  if [ "$rc" -eq 0 ]; then RESULT[$name]="ok"; else
    RESULT[$name]="FAILED (exit $rc)"
    FAILED+=("$name")
    tail -n 20 "$OUT/$name.log" | sed 's/^/   | /'
  fi
  return 0
}
kv() { grep -o "$2=[^ ]*" "$1" 2>/dev/null | head -n 1 | cut -d= -f2 || true; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b }' || true; }

PEER="${PEER_SCRIPT:-}"
if [ -z "$PEER" ]; then
  for p in "$ROOT/../shared/bench/torch_peer.py" "$ROOT/shared/bench/torch_peer.py"; do
    if [ -f "$p" ]; then PEER="$p"; break; fi
  done
fi

{
  echo "date: $(date -Is)"
  git -C "$ROOT" rev-parse HEAD 2>/dev/null | sed 's/^/commit: /' || true
  git -C "$ROOT" status --short 2>/dev/null | head -n 50 | sed 's/^/changed: /' || true
  nvidia-smi 2>&1 || true
} >"$OUT/machine.txt" 2>&1

configure_and_build() {  # configure_and_build SUFFIX SOURCE BUILD TARGETS...
  local suffix="$1" src="$2" dir="$3"
  shift 3
  run_step "configure$suffix" cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDPL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}"
  run_step "build$suffix" cmake --build "$dir" -j "$JOBS" --target "$@" -- -k 0
}
BASE_BUILD="$BUILD-baseline"
if [ -n "${BASELINE:-}" ]; then
  # Built at the same time as this tree: the two share the cores, and the longer one sets the pace.
  configure_and_build -baseline "$BASELINE" "$BASE_BUILD" bench_mlp_step bench_resnet &
  base_pid=$!
fi
# Only what the round runs: the GPU tests take longest to build.
declare -a TARGETS=(bench_mlp_step bench_resnet)
[ "${TESTS:-}" != "none" ] && TARGETS+=(dpl_cuda_tests)
[ -n "${CONVERGE:-}" ] && TARGETS+=(idx_to_jpeg train_imagenet)
configure_and_build "" "$ROOT" "$BUILD" "${TARGETS[@]}"
if [ -n "${BASELINE:-}" ]; then
  wait "$base_pid" || true
  # The subshell's records are lost with it: read the outcome from its logs' presence instead.
  [ -x "$BASE_BUILD/benchmarks/bench_resnet" ] && RESULT[build-baseline]="ok" || {
    RESULT[build-baseline]="FAILED"
    FAILED+=("build-baseline")
  }
fi

TEST_SUMMARY="not run"
if [ "${TESTS:-}" != "none" ] && [ -x "$BUILD/tests/cuda/dpl_cuda_tests" ]; then
  run_step cuda-tests timeout 300 "$BUILD/tests/cuda/dpl_cuda_tests" ${TESTS:+--gtest_filter="$TESTS"} \
    --gtest_output="xml:$OUT/cuda-tests.xml"
  TEST_SUMMARY="$(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' "$OUT/cuda-tests.log" | grep -v '\] [A-Za-z_0-9]*\.' | tr '\n' ' ' || true)"
fi

# The builds measured: this tree ("") and, with BASELINE, the earlier one ("-baseline").
# DPL_FLAGS adds a variant of this tree ("-flags"): the same build, its ResNet runs with the flags.
declare -a BUILDS=("")
[ -n "${BASELINE:-}" ] && [ -x "$BASE_BUILD/benchmarks/bench_resnet" ] && BUILDS+=("-baseline")
build_dir() { if [ "$1" = "-baseline" ]; then echo "$BASE_BUILD"; else echo "$BUILD"; fi; }
declare -a RN_BUILDS=("${BUILDS[@]}")
[ -n "${DPL_FLAGS:-}" ] && RN_BUILDS+=("-flags")
flags_of() { if [ "$1" = "-flags" ]; then echo "$DPL_FLAGS"; fi; }
declare -A RUNS=()   # key -> space-separated figures of each run
add_run() { [ -n "$2" ] && RUNS[$1]="${RUNS[$1]:-} $2"; return 0; }
med() { printf '%s\n' ${RUNS[$1]:-} | grep . | median || true; }

# --- MNIST MLP: ordinary steps, recorded steps, the peer ------------------------------------
for rep in $(seq 1 "${MLP_REPS:-$REPS}"); do
  for b in "${BUILDS[@]}"; do
    MLP="$(build_dir "$b")/benchmarks/bench_mlp_step"
    [ -x "$MLP" ] || continue
    for mode in plain graph graph-off; do
      flags=""
      [ "$mode" = "graph" ] && flags="--graph"
      # Without the non-finite check, as the peer runs: nothing is read back between steps.
      [ "$mode" = "graph-off" ] && flags="--graph --non-finite off"
      run_step "mlp$b-$mode-$rep" "$MLP" --device cuda --batch 100 --units 1000 --iters 2000 --warmup 100 $flags
      add_run "mlp$b-$mode" "$(kv "$OUT/mlp$b-$mode-$rep.log" iters_per_s)"
    done
  done
  if [ -n "$PEER" ]; then
    run_step "mlp-peer-$rep" python3 "$PEER" mlp --bs 100
    add_run mlp-peer "$(kv "$OUT/mlp-peer-$rep.log" iters_per_s)"
  fi
done

# --- ResNet: ordinary steps, recorded steps, the peer in its settings -------------------------
dtype_of() { case "$1" in bf16) echo bfloat16 ;; fp16) echo float16 ;; *) echo float32 ;; esac; }
RN_MODES="${PEER_MODES:-eager compile graphs}"
peer_flags() {
  case "$1" in
    eager) echo "--fused --tf32" ;;
    compile) echo "--compile --fused --tf32" ;;
    graphs) echo "--compile --mode reduce-overhead --fused --tf32" ;;
  esac
}
declare -A RN_MEM=() RN_HELD=()
for prec in $PRECISIONS; do
  dtype="$(dtype_of "$prec")"
  for rep in $(seq 1 "$REPS"); do
    for b in "${RN_BUILDS[@]}"; do
      RN="$(build_dir "$b")/benchmarks/bench_resnet"
      [ -x "$RN" ] || continue
      for mode in plain graph; do
        flag=""; [ "$mode" = "graph" ] && flag="--graph"
        name="resnet$b-$prec-$mode-$rep"
        # shellcheck disable=SC2046
        run_step "$name" env DPL_CUDA_TF32=1 "$RN" --device cuda -a "$ARCH" -b "$BATCH" \
          --dtype "$dtype" --layout nhwc --iters 60 --warmup 10 $flag $(flags_of "$b")
        add_run "rn$b-$prec-$mode" "$(kv "$OUT/$name.log" img_per_s)"
        RN_MEM[$b-$prec-$mode]="$(kv "$OUT/$name.log" peak_mem_bytes)"
        RN_HELD[$b-$prec-$mode]="$(kv "$OUT/$name.log" held_mem_bytes)"
      done
    done
  done
  # The peer PEER_REPS times per setting (default once: each compiled setting spends about a
  # minute compiling first).
  if [ -n "$PEER" ] && [ "$prec" != "fp16" ]; then
    for rep in $(seq 1 "${PEER_REPS:-1}"); do
      for pm in $RN_MODES; do
        name="resnet-$prec-peer-$pm-$rep"
        # shellcheck disable=SC2046
        run_step "$name" python3 "$PEER" resnet --bs "$BATCH" --prec "$prec" --cl $(peer_flags "$pm")
        add_run "rn-$prec-peer-$pm" "$(kv "$OUT/$name.log" img_per_s)"
        RN_MEM[peer-$prec-$pm]="$(grep -o 'peak[^ ]*=[^ ]*' "$OUT/$name.log" | head -n 1 || true)"
      done
    done
  fi
done

KERNELS="not run"
first_prec="$(echo $PRECISIONS | cut -d' ' -f1)"
if [ "${PROFILE:-0}" = 1 ] && [ -n "$first_prec" ] && [ -x "$BUILD/benchmarks/bench_resnet" ]; then
  dtype="$(dtype_of "$first_prec")"
  run_step kernel-profile env DPL_CUDA_TF32=1 TOP="${TOP:-25}" "$ROOT/scripts/gpu_kernel_profile.sh" "$OUT/kernels" \
    "$BUILD/benchmarks/bench_resnet" --device cuda -a "$ARCH" -b "$BATCH" --dtype "$dtype" --layout nhwc --iters 3 \
    --warmup 5 --profile-steps 1
  KERNELS="$(grep -m1 'launches' "$OUT/kernels/kernels.txt" 2>/dev/null || echo "${RESULT[kernel-profile]}"), table in $OUT/kernels/kernels.txt"
fi

CONVERGENCE="not run"
if [ -n "${CONVERGE:-}" ] && [ -x "$BUILD/examples/imagenet/train_imagenet" ]; then
  images="$BUILD/fashion-mnist-64"  # kept beside the build, not among the results
  [ -f "$images/val.txt" ] || run_step converge-images "$BUILD/tools/idx_to_jpeg" --data "$CONVERGE" -o "$images" --size 64
  rm -rf "$OUT/converge"
  run_step converge mpiexec -n 1 --bind-to none "$BUILD/examples/imagenet/train_imagenet" "$images/train.txt" \
    "$images/val.txt" --root "$images" -a resnet18 -g -B 128 -E "${CONVERGE_EPOCHS:-10}" --crop-size 64 -j 14 \
    --dtype bf16 --layout nhwc --crop-scale 0.6 --schedule cosine --graph -o "$OUT/converge"
  # The log holds one entry per epoch: the validation accuracy of each, and the run's time.
  CONVERGENCE="$(python3 -c '
import json, sys
log = json.load(open(sys.argv[1]))
acc = [e.get("validation/main/accuracy") for e in log]
print("validation accuracy by epoch: " + " ".join("%.4f" % a for a in acc if a is not None)
      + ", %.1f s" % log[-1].get("elapsed_time", float("nan")))
' "$OUT/converge/log" 2>/dev/null || echo "${RESULT[converge]:-failed}")"
fi

echo
echo "============================ dpl ResNet / graph round ============================"
printf '%-26s %s\n' "build" "${RESULT[build]:-not run}${BASELINE:+, baseline ${RESULT[build-baseline]:-not run}}"
printf '%-26s %s\n' "GPU tests" "$TEST_SUMMARY"
# Rows only for what the round was asked to run: no MLP rows with MLP_REPS=0, no peer rows without
# a peer.
per_peer() { [ -n "$2" ] && [ -n "$3" ] && echo ", /$1 $(ratio "$3" "$2")x"; return 0; }
if [ "${MLP_REPS:-$REPS}" != 0 ]; then
  P_MLP="$(med mlp-peer)"
  for b in "${BUILDS[@]}"; do
    for mode in plain graph graph-off; do
      v="$(med "mlp$b-$mode")"
      printf '%-26s %s\n' "MLP dpl$b $mode" "${v:-n/a} iters/s$(per_peer peer "$P_MLP" "$v") (runs${RUNS[mlp$b-$mode]:-})"
    done
  done
  [ -n "$PEER" ] && printf '%-26s %s\n' "MLP peer" "${P_MLP:-n/a} iters/s (runs${RUNS[mlp-peer]:-})"
fi
for prec in $PRECISIONS; do
  best=""
  peer_prec="$prec"; [ "$prec" = "fp16" ] && peer_prec=bf16
  [ -n "$PEER" ] && for pm in $RN_MODES; do
    # The peer's best is its fastest run in any setting, not a median: the ratios are against the
    # strongest figure it reached.
    v="$(printf '%s\n' ${RUNS[rn-$peer_prec-peer-$pm]:-} | grep . | sort -g | tail -n 1 || true)"
    printf '%-26s %s\n' "$ARCH $peer_prec peer $pm" "${v:-n/a} img/s (fastest; runs${RUNS[rn-$peer_prec-peer-$pm]:-}) ${RN_MEM[peer-$peer_prec-$pm]:-}"
    [ -n "$v" ] && best="$(printf '%s\n' "$best" "$v" | grep . | sort -g | tail -n 1)"
  done
  for b in "${RN_BUILDS[@]}"; do
    for mode in plain graph; do
      v="$(med "rn$b-$prec-$mode")"
      printf '%-26s %s\n' "$ARCH $prec dpl$b $mode" "${v:-n/a} img/s$(per_peer "best peer" "$best" "$v"), peak ${RN_MEM[$b-$prec-$mode]:-n/a} held ${RN_HELD[$b-$prec-$mode]:-n/a} (runs${RUNS[rn$b-$prec-$mode]:-})"
    done
  done
  if [ "${#BUILDS[@]}" -gt 1 ]; then
    for mode in plain graph; do
      printf '%-26s %s\n' "  $prec $mode this/baseline" "$(ratio "$(med "rn-$prec-$mode")" "$(med "rn-baseline-$prec-$mode")")x"
    done
  fi
  if [ -n "${DPL_FLAGS:-}" ]; then
    for mode in plain graph; do
      printf '%-26s %s\n' "  $prec $mode flags/this" "$(ratio "$(med "rn-flags-$prec-$mode")" "$(med "rn-$prec-$mode")")x ($DPL_FLAGS)"
    done
  fi
done
printf '%-26s %s\n' "kernel profile" "$KERNELS"
[ -n "${CONVERGE:-}" ] && printf '%-26s %s\n' "resnet18 Fashion-MNIST" "$CONVERGENCE"
printf '%-26s %s\n' "failed steps" "${FAILED[*]:-none}"
echo "=================================================================================="
[ "${#FAILED[@]}" -eq 0 ]
