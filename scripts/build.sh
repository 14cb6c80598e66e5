#!/usr/bin/env bash
# Configures and builds dpl (Release, CUDA where a CUDA compiler is found) into ./build.
# Extra arguments go to CMake's configure step. DPL_TARGETS (space-separated target names)
# builds only those targets and what they need; unset, everything is built.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
# With the CUDA toolkit: cuDNN's frontend headers for fused attention and CUTLASS's for the 1x1
# convolutions with batch-norm statistics (both optional; neither fetch ever fails).
# DPL_FETCH_CUDNN_FRONTEND=0 / DPL_FETCH_CUTLASS=0 skip them (the main job, which uses neither).
if command -v nvcc >/dev/null 2>&1 || [ -n "${CUDACXX:-}" ]; then
  [ "${DPL_FETCH_CUDNN_FRONTEND:-1}" != 0 ] && bash scripts/fetch_cudnn_frontend.sh
  [ "${DPL_FETCH_CUTLASS:-1}" != 0 ] && bash scripts/fetch_cutlass.sh
fi
cmake -S . -B "$DPL_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${DPL_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$DPL_BUILD_DIR" -j "$DPL_JOBS" "${targets[@]}"
