#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer and UndefinedBehaviorSanitizer: builds dpl, its tests
# and the fuzzing harnesses with clang (CUDA off; scripts/sanitized_build.sh) into build-sanitize,
# then runs the whole ctest suite there, the distributed tests under mpiexec included. Any
# sanitizer report fails its test: undefined behaviour aborts (-fno-sanitize-recover), and so
# does ASan. scripts/fuzz.sh shares
# this build, so running both compiles dpl once. Extra arguments go to ctest (-R, -L, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/sanitized_build.sh
source scripts/env.sh
dir=${DPL_SANITIZE_BUILD_DIR:-build-sanitize}

export ASAN_OPTIONS="abort_on_error=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# First the tests of one process (unit tests, the fuzzing replays), with LeakSanitizer.
ctest --test-dir "$dir" --output-on-failure -j "$DPL_JOBS" -L "unit|fuzz" "$@"
# Then the programs under mpiexec (distributed tests, examples) with ASan and UBSan but without
# leak checking: Open MPI unloads its components in MPI_Finalize, so the allocations they keep
# until exit are reported from unknown modules, which no suppression can name.
ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" ctest --test-dir "$dir" --output-on-failure -j "$DPL_JOBS" -LE "unit|fuzz" "$@"
echo "sanitizer suite (ASan + UBSan): passed"
