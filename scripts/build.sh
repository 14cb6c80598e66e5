#!/usr/bin/env bash
# Configures and builds dpl (Release, CUDA where a CUDA compiler is found) into ./build.
# Extra arguments go to CMake's configure step. DPL_TARGETS (space-separated target names)
# builds only those targets and what they need; unset, everything is built.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
# With the CUDA toolkit: cuDNN's frontend headers for fused attention (optional; never fails).
# DPL_FETCH_CUDNN_FRONTEND=0 skips it (the main job, which runs no attention).
if [ "${DPL_FETCH_CUDNN_FRONTEND:-1}" != 0 ] && { command -v nvcc >/dev/null 2>&1 || [ -n "${CUDACXX:-}" ]; }; then
  bash scripts/fetch_cudnn_frontend.sh
fi
cmake -S . -B "$DPL_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${DPL_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$DPL_BUILD_DIR" -j "$DPL_JOBS" "${targets[@]}"
