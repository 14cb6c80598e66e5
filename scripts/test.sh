#!/usr/bin/env bash
# The test command: installs dependencies, builds everything (CUDA code too where the toolkit
# is present), runs the whole ctest suite (unit, distributed under mpiexec, GPU tests skip
# without a GPU), then installs dpl and builds and runs a program outside the tree against it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/env.sh
bash scripts/build.sh
ctest --test-dir "$DPL_BUILD_DIR" --output-on-failure -j "$DPL_JOBS"

prefix="$PWD/$DPL_BUILD_DIR/_install"
cmake --install "$DPL_BUILD_DIR" --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B "$DPL_BUILD_DIR/_consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$DPL_BUILD_DIR/_consumer"
"$DPL_BUILD_DIR/_consumer/consumer"
echo "installed-package consumer: passed"
