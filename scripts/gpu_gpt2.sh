#!/usr/bin/env bash
# One GPU round for GPT-2 training steps, on one GPU:
#   configure (CUDA on, sm_90) -> build bench_gpt2 and the GPU tests -> the GPT-2 and attention GPU
#   tests -> bench_gpt2 (ordinary steps, and recorded steps with --graph) beside the PyTorch peer
#   (`torch_peer.py gpt2`) eager, compiled, and compiled with CUDA graphs, alternated REPS times ->
#   a table of the medians, with dpl / the fastest peer setting, printed last.
#
# Usage:        scripts/gpu_gpt2.sh [extra CMake configure arguments, e.g. -DDNNL_ROOT=...]
# Environment:  OUT (logs; default ./gpu-gpt2-results), BUILD_DIR (default <repo>/build-gpu),
#               CUDA_ARCH (default 90), REPS (default 1), BS (sequences per step, default 16),
#               SEQ (default 1024), PEER_SCRIPT (torch_peer.py when it is not in shared/bench
#               beside or inside the repository), PEER_MODES (default "eager compile graphs"),
#               TESTS (a --gtest_filter; default the GPT-2 and attention tests; "none" skips them),
#               DPL_FLAGS (extra bench_gpt2 flags, e.g. --checkpoint-blocks: a second variant of the
#               dpl runs with them, alternated with the plain ones, rows "dpl flags-plain/-graph").
# cuDNN's frontend headers (.deps/cudnn_frontend, scripts/fetch_cudnn_frontend.sh) must be in the
# tree for attention to run on cuDNN's fused kernels.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-./gpu-gpt2-results}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
REPS="${REPS:-1}"
BS="${BS:-16}"
SEQ="${SEQ:-1024}"
JOBS="$(nproc 2>/dev/null || echo 8)"
PEER="${PEER_SCRIPT:-}"
if [ -z "$PEER" ]; then
  for p in "$ROOT/../shared/bench/torch_peer.py" "$ROOT/shared/bench/torch_peer.py"; do
    if [ -f "$p" ]; then PEER="$p"; break; fi
  done
fi

step() {  # step NAME COMMAND...: output to $OUT/NAME.log, a line saying how it went
  local name="$1"
  shift
  if "$@" >"$OUT/$name.log" 2>&1; then echo "ok      $name"; else echo "FAILED  $name (exit $?; $OUT/$name.log)"; fi
}
kv() { grep -o "$2=[^ ]*" "$1" 2>/dev/null | head -n 1 | cut -d= -f2 || true; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }

step configure cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPL_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" "$@"
grep "attention on the GPU" "$OUT/configure.log" || true
step build cmake --build "$BUILD" -j "$JOBS" --target bench_gpt2 dpl_cuda_tests -- -k 0
TESTS="${TESTS:-GPT2*:Attention*}"
if [ "$TESTS" != none ]; then
  step gpu-tests "$BUILD/tests/cuda/dpl_cuda_tests" --gtest_filter="$TESTS"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/gpu-tests.log" | head -20
fi

declare -A RUNS=()
add() { [ -n "$2" ] && RUNS[$1]="${RUNS[$1]:-} $2"; return 0; }
med() { printf '%s\n' ${RUNS[$1]:-} | grep . | median; }
peer_flags() {
  case "$1" in
    eager) echo "" ;;
    compile) echo "--compile" ;;
    graphs) echo "--compile --mode reduce-overhead" ;;
  esac
}
MODES="${PEER_MODES:-eager compile graphs}"
VARIANTS="plain graph"
[ -n "${DPL_FLAGS:-}" ] && VARIANTS="$VARIANTS flags-plain flags-graph"
for r in $(seq 1 "$REPS"); do
  for mode in $VARIANTS; do
    flags=""
    case "$mode" in *graph) flags="--graph" ;; esac
    case "$mode" in flags-*) flags="$flags $DPL_FLAGS" ;; esac
    step "dpl-$mode-$r" "$BUILD/benchmarks/bench_gpt2" --device cuda --bs "$BS" --seq "$SEQ" $flags
    add "dpl-$mode" "$(kv "$OUT/dpl-$mode-$r.log" tokens_per_s)"
    add "dpl-$mode-mem" "$(kv "$OUT/dpl-$mode-$r.log" peak_mem_bytes)"
  done
  if [ -n "$PEER" ]; then
    for mode in $MODES; do
      # shellcheck disable=SC2046
      step "peer-$mode-$r" python3 "$PEER" gpt2 --bs "$BS" --seq "$SEQ" $(peer_flags "$mode")
      add "peer-$mode" "$(kv "$OUT/peer-$mode-$r.log" tokens_per_s)"
      add "peer-$mode-mem" "$(kv "$OUT/peer-$mode-$r.log" peak_mem_gb)"
    done
  fi
done

best=""
best_mode=""
for mode in $MODES; do
  v="$(med "peer-$mode")"
  if [ -n "$v" ] && { [ -z "$best" ] || awk -v a="$v" -v b="$best" 'BEGIN{exit !(a > b)}'; }; then
    best="$v"
    best_mode="$mode"
  fi
done
echo
echo "GPT-2 124M training step, batch $BS x $SEQ, bfloat16 (medians of $REPS; tokens/s, peak memory):"
echo "| run | tokens/s | peak memory | ratio to the fastest peer setting ($best_mode) |"
echo "|-----|---------:|------------:|------:|"
for mode in $VARIANTS; do
  v="$(med "dpl-$mode")"
  m="$(med "dpl-$mode-mem")"
  ratio="$(awk -v a="$v" -v b="$best" 'BEGIN{if (a != "" && b > 0) printf "%.3f", a / b}')"
  echo "| dpl $mode | ${v:-failed} | $(awk -v m="$m" 'BEGIN{if (m != "") printf "%.1f GB", m / 1e9}') | $ratio |"
done
for mode in $MODES; do
  v="$(med "peer-$mode")"
  m="$(med "peer-$mode-mem")"
  echo "| PyTorch $mode | ${v:-failed} | ${m:+$m GB} | |"
done
