#!/usr/bin/env bash
# Configures and builds dpl (Release, CUDA where a CUDA compiler is found) into ./build.
# Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
cmake -S . -B "$DPL_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$DPL_BUILD_DIR" -j "$DPL_JOBS"
