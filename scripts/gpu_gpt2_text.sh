#!/usr/bin/env bash
# One GPU round for GPT-2 trained on real text, dpl against PyTorch, on one GPU:
#   configure (CUDA on, sm_90) -> build train_gpt2 and text_to_token_shards -> byte-level token
#   shards of the machine's Python standard library, split by file (every 20th file validates) ->
#   dpl's train_gpt2 under mpiexec -n 1 -> benchmarks/gpt2_text_recipe.py (PyTorch) with the same
#   recipe on the same shards -> a short recorded-step run of train_gpt2 (--graph) -> a table of
#   both validation losses, their ratio (within 3% passes) and tokens/s, printed last.
#
# Usage:        scripts/gpu_gpt2_text.sh [extra CMake configure arguments, e.g. -DDNNL_ROOT=...]
# Environment:  OUT (logs; default ./gpu-gpt2-text-results), BUILD_DIR (default <repo>/build-gpu),
#               CUDA_ARCH (default 90), PYTHON (with torch; default python3), the recipe: LAYERS (6),
#               HEADS (6), EMBD (384), SEQ (512), BS (sequences per micro-batch, 16), TOTAL (tokens
#               per step, 16384: two micro-batches), STEPS (2000), LR (1e-3), WARMUP (100),
#               VAL_EVERY (250), VAL_STEPS (20), DTYPE (bfloat16); GRAPH_STEPS (steps of the
#               --graph run, 100; 0 skips it), RUN_TIMEOUT (seconds per training run, 300),
#               DEVICE (cuda; cpu builds without CUDA and runs everything on the host, with
#               GRAPH_STEPS=0 and a tiny recipe: a check of the script itself).
# cuDNN's frontend headers (.deps/cudnn_frontend, scripts/fetch_cudnn_frontend.sh) must be in the
# tree for attention to run on cuDNN's fused kernels.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-./gpu-gpt2-text-results}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="$(nproc 2>/dev/null || echo 8)"
PYTHON="${PYTHON:-python3}"
LAYERS="${LAYERS:-6}" HEADS="${HEADS:-6}" EMBD="${EMBD:-384}" SEQ="${SEQ:-512}" BS="${BS:-16}"
TOTAL="${TOTAL:-16384}" STEPS="${STEPS:-2000}" LR="${LR:-1e-3}" WARMUP="${WARMUP:-100}"
VAL_EVERY="${VAL_EVERY:-250}" VAL_STEPS="${VAL_STEPS:-20}" DTYPE="${DTYPE:-bfloat16}"
GRAPH_STEPS="${GRAPH_STEPS:-100}" RUN_TIMEOUT="${RUN_TIMEOUT:-300}" DEVICE="${DEVICE:-cuda}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

step() {  # step NAME COMMAND...: output to $OUT/NAME.log, a line saying how it went and how long
  local name="$1" t0=$SECONDS
  shift
  if "$@" >"$OUT/$name.log" 2>&1; then echo "ok      $name ($((SECONDS - t0)) s)"
  else echo "FAILED  $name (exit $?, $((SECONDS - t0)) s; $OUT/$name.log)"; fi
}
kv() { grep -o "$2=[^ ]*" "$1" 2>/dev/null | tail -n 1 | cut -d= -f2 || true; }

CUDA_FLAGS=(-DDPL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}")
[ "$DEVICE" = cuda ] || CUDA_FLAGS=(-DDPL_WITH_CUDA=OFF)
step configure cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${CUDA_FLAGS[@]}" "$@"
grep "attention on the GPU" "$OUT/configure.log" || true
step build cmake --build "$BUILD" -j "$JOBS" --target train_gpt2 text_to_token_shards -- -k 0

# The corpus: every .py file of the standard library, without the packages installed into it
# (torch's own sources would otherwise be most of it), named one by one on the command line.
STDLIB="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')"
mapfile -d '' FILES < <(find "$STDLIB" -name '*.py' -type f -not -path '*/site-packages/*' \
                          -not -path '*/dist-packages/*' -print0)
echo "corpus: ${#FILES[@]} files of $STDLIB"
SHARDS="$OUT/shards/pystdlib"
step shards "$BUILD/tools/text_to_token_shards" "${FILES[@]}" -o "$SHARDS"
grep -E "^(train|val):" "$OUT/shards.log" || true

# The recipe both sides run; flags and meanings are train_gpt2's (docs/transformers.md).
RECIPE=(-i "${SHARDS}_train_*.bin" -j "${SHARDS}_val_*.bin" --layers "$LAYERS" --heads "$HEADS" --embd "$EMBD"
        --block-size "$SEQ" -b "$BS" -t "$SEQ" --total-batch-tokens "$TOTAL" --steps "$STEPS" --lr "$LR"
        --warmup "$WARMUP" --val-every "$VAL_EVERY" --val-steps "$VAL_STEPS" --dtype "$DTYPE" --log-every 50
        --seed 0)
LAUNCH=()
command -v mpiexec >/dev/null && LAUNCH=(mpiexec -n 1 --bind-to none)
step dpl timeout "$RUN_TIMEOUT" "${LAUNCH[@]}" "$BUILD/examples/gpt2/train_gpt2" "${RECIPE[@]}" --device "$DEVICE" \
  --sample-tokens 300 -o "$OUT/dpl-result"
step pytorch timeout "$RUN_TIMEOUT" "$PYTHON" "$ROOT/benchmarks/gpt2_text_recipe.py" "${RECIPE[@]}" --device "$DEVICE"
if [ "$GRAPH_STEPS" -gt 0 ]; then
  # Recorded steps take one micro-batch.
  step dpl-graph timeout "$RUN_TIMEOUT" "${LAUNCH[@]}" "$BUILD/examples/gpt2/train_gpt2" "${RECIPE[@]}" --device "$DEVICE" \
    -b $((TOTAL / SEQ)) --steps "$GRAPH_STEPS" --val-every 0 --graph --sample-tokens 0 -o "$OUT/dpl-graph-result"
fi

# dpl: the last report row's validation/main/loss (its fourth column) and the run's tokens/s.
dpl_val() { grep -E '^[0-9]+ ' "$OUT/$1.log" 2>/dev/null | tail -n 1 | awk '{print $4}'; }
dpl_rate() { sed -n 's/^training: .* \([0-9.e+]*\) tokens\/s$/\1/p' "$OUT/$1.log" 2>/dev/null | tail -n 1; }
DPL_VAL="$(dpl_val dpl)" DPL_RATE="$(dpl_rate dpl)"
TORCH_VAL="$(kv "$OUT/pytorch.log" val_loss)" TORCH_RATE="$(kv "$OUT/pytorch.log" tokens_per_s)"
RATIO="$(awk -v a="$DPL_VAL" -v b="$TORCH_VAL" 'BEGIN{if (a != "" && b > 0) printf "%.4f", a / b}')"
VERDICT="$(awk -v r="$RATIO" 'BEGIN{if (r == "") print "no ratio"; else if (r >= 0.97 && r <= 1.03) print "within 3%"; else print "NOT within 3%"}')"

echo
grep -E "^(model|batch|train|validation):" "$OUT/dpl.log" 2>/dev/null || true
# The sample, between its two rules (cut to 12 lines).
awk '/^sample/ {on = 1} on {print; if ($0 == "-----" && ++rules == 2) exit}' "$OUT/dpl.log" 2>/dev/null | head -n 12
echo
echo "GPT-2 on the Python standard library (byte tokens): $LAYERS layers x $EMBD, $HEADS heads, T $SEQ,"
echo "$TOTAL tokens per step ($BS sequences per micro-batch), $STEPS steps, lr $LR, $DTYPE, one process on $DEVICE:"
echo "| run | validation loss | tokens/s |"
echo "|-----|----------------:|---------:|"
echo "| dpl train_gpt2 | ${DPL_VAL:-failed} | ${DPL_RATE:-failed} |"
echo "| PyTorch gpt2_text_recipe.py | ${TORCH_VAL:-failed} | ${TORCH_RATE:-failed} |"
if [ "$GRAPH_STEPS" -gt 0 ]; then
  echo "| dpl --graph, $GRAPH_STEPS steps | $(dpl_val dpl-graph) | $(dpl_rate dpl-graph) |"
fi
echo "validation loss dpl / PyTorch: ${RATIO:-none} ($VERDICT)"
