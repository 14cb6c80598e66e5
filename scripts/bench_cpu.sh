#!/usr/bin/env bash
# CPU throughput of the MNIST example against the machine's matrix-product ceiling and against
# the PyTorch CPU peer, all in one run on this machine. Prints a table last.
#   scripts/bench_cpu.sh            (builds first; EPOCHS=1 by default; PEER=0 skips the peer)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/build.sh >/dev/null
B="$DPL_BUILD_DIR"
OUT=${OUT:-$B/bench-cpu}
mkdir -p "$OUT"
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
EPOCHS=${EPOCHS:-1}
export DPL_OUTPUT=plain

kv() { grep -o "$2=[^ ]*" "$1" | head -n 1 | cut -d= -f2; }

"$B/benchmarks/bench_gemm_ceiling" --device cpu | tee "$OUT/gemm.log"
"$B/benchmarks/bench_mlp_step" --device cpu --iters 100 --warmup 10 | tee "$OUT/step.log"
for np in 1 2; do
  mpiexec -n "$np" --bind-to none -x DPL_OUTPUT "$B/examples/mnist/train_mnist" -e "$EPOCHS" --data "$DATA" \
    -o "$OUT/mnist-np$np" >"$OUT/mnist-np$np.log" 2>&1
  grep '^training:' "$OUT/mnist-np$np.log"
done
peer=""
PEER_SCRIPT=""
for p in ../shared/bench/torch_cpu_mnist.py shared/bench/torch_cpu_mnist.py; do
  [ -f "$p" ] && PEER_SCRIPT="$p" && break
done
if [ "${PEER:-1}" = "1" ] && [ -n "$PEER_SCRIPT" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 "$PEER_SCRIPT" "$EPOCHS" 2 | tee "$OUT/peer.log"
  peer=$(grep -o 'iters/s [0-9.]*' "$OUT/peer.log" | tail -n 1 | cut -d' ' -f2)
fi

ceiling=$(kv "$OUT/gemm.log" max_iters_per_s)
step=$(kv "$OUT/step.log" iters_per_s)
np1=$(grep -o '[0-9.]* iters/s per process' "$OUT/mnist-np1.log" | cut -d' ' -f1)
np2=$(grep -o '[0-9.]* iters/s per process' "$OUT/mnist-np2.log" | cut -d' ' -f1)
acc1=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[-1]['validation/main/accuracy'])" "$OUT/mnist-np1/log")
echo
echo "=============== dpl CPU throughput (MLP 784-1000-1000-10, Adam, batch 100) ==============="
printf '%-44s %10s\n' "matrix products alone (ceiling), steps/s" "$ceiling"
printf '%-44s %10s  (%s of ceiling)\n' "synthetic training step, iters/s" "$step" \
  "$(awk -v a="$step" -v b="$ceiling" 'BEGIN{printf "%.0f%%", 100*a/b}')"
printf '%-44s %10s  (%s of ceiling)\n' "train_mnist 1 process, iters/s" "$np1" \
  "$(awk -v a="$np1" -v b="$ceiling" 'BEGIN{printf "%.0f%%", 100*a/b}')"
printf '%-44s %10s  (per process; %s total)\n' "train_mnist 2 processes, iters/s" "$np2" \
  "$(awk -v a="$np2" 'BEGIN{printf "%.1f", 2*a}')"
if [ -n "$peer" ]; then
  printf '%-44s %10s  (dpl 1 process = %sx)\n' "PyTorch CPU peer, iters/s" "$peer" \
    "$(awk -v a="$np1" -v b="$peer" 'BEGIN{printf "%.1f", a/b}')"
fi
printf '%-44s %10s\n' "validation accuracy after $EPOCHS epoch(s), 1 process" "$acc1"
echo "threads per process: $(grep -o '[0-9]* threads per process' "$OUT/mnist-np1.log")"
