#!/usr/bin/env bash
# The instrumented build that scripts/sanitize.sh and scripts/fuzz.sh share: clang with ASan,
# UBSan and libFuzzer's coverage (DPL_FUZZ), CUDA and benchmarks off, in build-sanitize (or
# $DPL_SANITIZE_BUILD_DIR). Arguments name the targets to build (default: all).
# Clang 16, not Debian 12's default clang 14: dpl's float16 needs _Float16, which clang has on
# x86-64 from version 15 on. DPL_CLANG picks another clang++.
set -euo pipefail
cd "$(dirname "$0")/.."
clang=${DPL_CLANG:-clang++-16}
packages=()
if [ "$clang" = clang++-16 ]; then packages=(clang-16 libclang-rt-16-dev libomp-16-dev); fi
bash scripts/install_deps.sh "${packages[@]}"
source scripts/env.sh
dir=${DPL_SANITIZE_BUILD_DIR:-build-sanitize}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$clang" \
  -DDPL_WITH_CUDA=OFF -DDPL_FUZZ=ON -DDPL_BUILD_BENCHMARKS=OFF >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$dir" -j "$DPL_JOBS" "${targets[@]}"
