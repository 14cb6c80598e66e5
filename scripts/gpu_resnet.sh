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
#   PRECISIONS   ResNet precisions, of bf16 and fp32 (default "bf16 fp32")
#   ARCH         the ResNet (default resnet50), BATCH its batch (default 128)
#   TESTS        a --gtest_filter for the GPU tests ("" runs them all; "none" skips them)
#   PEER_COMPILE 1: also run the peer with --compile (torch.compile) and compare against the
#                faster of its two figures (default 0)
#   PEER_SCRIPT  the PyTorch peer (torch_peer.py) when it is not in shared/bench beside or inside
#                the repository
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

declare -a FAILED=()
declare -A RESULT=()
run_step() {
  local name="$1"
  shift
  echo "== $name: $*"
  local rc=0
  "$@" >"$OUT/$name.log" 2>&1 || rc=$?
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

run_step configure cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDPL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}"
run_step build cmake --build "$BUILD" -j "$JOBS" --target dpl_cuda_tests bench_mlp_step bench_resnet -- -k 0

TEST_SUMMARY="not run"
if [ "${TESTS:-}" != "none" ] && [ -x "$BUILD/tests/cuda/dpl_cuda_tests" ]; then
  run_step cuda-tests timeout 300 "$BUILD/tests/cuda/dpl_cuda_tests" ${TESTS:+--gtest_filter="$TESTS"} \
    --gtest_output="xml:$OUT/cuda-tests.xml"
  TEST_SUMMARY="$(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' "$OUT/cuda-tests.log" | grep -v '\] .*\.' | tr '\n' ' ')"
fi

# --- MNIST MLP: ordinary steps, recorded steps, the peer ------------------------------------
MLP="$BUILD/benchmarks/bench_mlp_step"
declare -a mlp_plain=() mlp_graph=() mlp_graph_off=() mlp_peer=()
for rep in $(seq 1 "$REPS"); do
  if [ -x "$MLP" ]; then
    run_step "mlp-dpl-$rep" "$MLP" --device cuda --batch 100 --units 1000 --iters 2000 --warmup 100
    v="$(kv "$OUT/mlp-dpl-$rep.log" iters_per_s)"; [ -n "$v" ] && mlp_plain+=("$v")
    run_step "mlp-dpl-graph-$rep" "$MLP" --device cuda --batch 100 --units 1000 --iters 2000 --warmup 100 --graph
    v="$(kv "$OUT/mlp-dpl-graph-$rep.log" iters_per_s)"; [ -n "$v" ] && mlp_graph+=("$v")
    # Without the non-finite check, as the peer runs: nothing is read back between steps.
    run_step "mlp-dpl-graph-off-$rep" "$MLP" --device cuda --batch 100 --units 1000 --iters 2000 --warmup 100 \
      --graph --non-finite off
    v="$(kv "$OUT/mlp-dpl-graph-off-$rep.log" iters_per_s)"; [ -n "$v" ] && mlp_graph_off+=("$v")
  fi
  if [ -n "$PEER" ]; then
    run_step "mlp-peer-$rep" python3 "$PEER" mlp --bs 100
    v="$(kv "$OUT/mlp-peer-$rep.log" iters_per_s)"; [ -n "$v" ] && mlp_peer+=("$v")
  fi
done
M_PLAIN="$(printf '%s\n' "${mlp_plain[@]:-}" | grep . | median || true)"
M_GRAPH="$(printf '%s\n' "${mlp_graph[@]:-}" | grep . | median || true)"
M_GRAPH_OFF="$(printf '%s\n' "${mlp_graph_off[@]:-}" | grep . | median || true)"
M_PEER="$(printf '%s\n' "${mlp_peer[@]:-}" | grep . | median || true)"

# --- ResNet: ordinary steps, recorded steps, the peer ----------------------------------------
RN="$BUILD/benchmarks/bench_resnet"
declare -A RN_IPS=() RN_MEM=() RN_HELD=()
for prec in $PRECISIONS; do
  dtype=float32; [ "$prec" = "bf16" ] && dtype=bfloat16
  declare -a plain=() graph=() peer=() peerc=()
  for rep in $(seq 1 "$REPS"); do
    if [ -x "$RN" ]; then
      for mode in plain graph; do
        flag=""; [ "$mode" = "graph" ] && flag="--graph"
        run_step "resnet-$prec-$mode-$rep" env DPL_CUDA_TF32=1 "$RN" --device cuda -a "$ARCH" -b "$BATCH" \
          --dtype "$dtype" --layout nhwc --iters 60 --warmup 10 $flag
        v="$(kv "$OUT/resnet-$prec-$mode-$rep.log" img_per_s)"
        if [ -n "$v" ]; then
          if [ "$mode" = "plain" ]; then plain+=("$v"); else graph+=("$v"); fi
          RN_MEM[$prec-$mode]="$(kv "$OUT/resnet-$prec-$mode-$rep.log" peak_mem_bytes)"
          RN_HELD[$prec-$mode]="$(kv "$OUT/resnet-$prec-$mode-$rep.log" held_mem_bytes)"
        fi
      done
    fi
    if [ -n "$PEER" ]; then
      run_step "resnet-$prec-peer-$rep" python3 "$PEER" resnet --bs "$BATCH" --prec "$prec" --cl
      v="$(kv "$OUT/resnet-$prec-peer-$rep.log" img_per_s)"; [ -n "$v" ] && peer+=("$v")
      RN_MEM[$prec-peer]="$(grep -o 'peak[^ ]*=[^ ]*' "$OUT/resnet-$prec-peer-$rep.log" | head -n 1 || true)"
      if [ "${PEER_COMPILE:-0}" = "1" ]; then
        run_step "resnet-$prec-peerc-$rep" python3 "$PEER" resnet --bs "$BATCH" --prec "$prec" --cl --compile
        v="$(kv "$OUT/resnet-$prec-peerc-$rep.log" img_per_s)"; [ -n "$v" ] && peerc+=("$v")
        RN_MEM[$prec-peerc]="$(grep -o 'peak[^ ]*=[^ ]*' "$OUT/resnet-$prec-peerc-$rep.log" | head -n 1 || true)"
      fi
    fi
  done
  RN_IPS[$prec-plain]="$(printf '%s\n' "${plain[@]:-}" | grep . | median || true)"
  RN_IPS[$prec-graph]="$(printf '%s\n' "${graph[@]:-}" | grep . | median || true)"
  RN_IPS[$prec-peer]="$(printf '%s\n' "${peer[@]:-}" | grep . | median || true)"
  RN_IPS[$prec-peerc]="$(printf '%s\n' "${peerc[@]:-}" | grep . | median || true)"
  # The best PyTorch figure: the faster of eager and compiled.
  RN_IPS[$prec-best]="$(printf '%s\n' "${RN_IPS[$prec-peer]}" "${RN_IPS[$prec-peerc]}" | grep . | sort -g | tail -n 1 || true)"
  RN_IPS[$prec-runs]="plain ${plain[*]:-} | graph ${graph[*]:-} | peer ${peer[*]:-} | peer --compile ${peerc[*]:-}"
  unset plain graph peer peerc
done

echo
echo "============================ dpl ResNet / graph round ============================"
printf '%-24s %s\n' "build" "${RESULT[build]:-not run}"
printf '%-24s %s\n' "GPU tests" "$TEST_SUMMARY"
printf '%-24s %s\n' "MLP dpl" "${M_PLAIN:-n/a} iters/s (runs ${mlp_plain[*]:-})"
printf '%-24s %s\n' "MLP dpl --graph" "${M_GRAPH:-n/a} iters/s (runs ${mlp_graph[*]:-})"
printf '%-24s %s\n' "MLP dpl --graph, off" "${M_GRAPH_OFF:-n/a} iters/s, non-finite check off (runs ${mlp_graph_off[*]:-})"
printf '%-24s %s\n' "MLP peer" "${M_PEER:-n/a} iters/s (runs ${mlp_peer[*]:-})"
printf '%-24s %s\n' "MLP ratios" "dpl/peer $(ratio "$M_PLAIN" "$M_PEER")x, graph/peer $(ratio "$M_GRAPH" "$M_PEER")x, graph off/peer $(ratio "$M_GRAPH_OFF" "$M_PEER")x"
for prec in $PRECISIONS; do
  printf '%-24s %s\n' "$ARCH $prec b$BATCH" "plain ${RN_IPS[$prec-plain]:-n/a}, graph ${RN_IPS[$prec-graph]:-n/a}, peer ${RN_IPS[$prec-peer]:-n/a}, peer --compile ${RN_IPS[$prec-peerc]:-n/a} img/s"
  printf '%-24s %s\n' "  ratios" "plain/peer $(ratio "${RN_IPS[$prec-plain]:-}" "${RN_IPS[$prec-peer]:-}")x, graph/peer $(ratio "${RN_IPS[$prec-graph]:-}" "${RN_IPS[$prec-peer]:-}")x; against the best peer: plain $(ratio "${RN_IPS[$prec-plain]:-}" "${RN_IPS[$prec-best]:-}")x, graph $(ratio "${RN_IPS[$prec-graph]:-}" "${RN_IPS[$prec-best]:-}")x"
  printf '%-24s %s\n' "  memory" "peak plain ${RN_MEM[$prec-plain]:-n/a} (held ${RN_HELD[$prec-plain]:-n/a}), graph ${RN_MEM[$prec-graph]:-n/a} (held ${RN_HELD[$prec-graph]:-n/a}); peer ${RN_MEM[$prec-peer]:-n/a}; peer --compile ${RN_MEM[$prec-peerc]:-n/a}"
  printf '%-24s %s\n' "  runs" "${RN_IPS[$prec-runs]:-}"
done
printf '%-24s %s\n' "failed steps" "${FAILED[*]:-none}"
echo "=================================================================================="
[ "${#FAILED[@]}" -eq 0 ]
