#!/usr/bin/env bash
# Configures and builds dpl (Release, CUDA where a CUDA compiler is found) into ./build.
# Extra arguments go to CMake's configure step. DPL_TARGETS (space-separated target names)
# builds only those targets and what they need; unset, everything is built.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
cmake -S . -B "$DPL_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${DPL_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$DPL_BUILD_DIR" -j "$DPL_JOBS" "${targets[@]}"
