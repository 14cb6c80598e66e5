#!/usr/bin/env bash
# Fetches CUTLASS's headers (cutlass/ and cute/), pinned to one version, into the ignored folder
# .deps/cutlass/include, where CMake looks by default (DPL_CUTLASS_DIR). With them, a build for
# sm_90 runs ResNet's 1×1 convolutions with their batch-norm statistics in the product's epilogue
# (docs/cuda.md, "CUTLASS"); without them those convolutions run on cuDNN with a separate
# statistics pass.
#
# CUTLASS is header-only; PyPI's nvidia-cutlass wheel carries its headers under
# cutlass_library/source/include/, which is downloaded with pip (no install) and unpacked here.
#
#   scripts/fetch_cutlass.sh           download the wheel with pip, unpack its headers
#   scripts/fetch_cutlass.sh WHEEL     unpack a wheel already at hand (a machine offline)
#
# Safe to run twice; never fails its caller (see scripts/wheel_headers.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 0
source scripts/wheel_headers.sh

package=nvidia-cutlass
version=4.2.0.0
inside=cutlass_library/source/include
marker=cutlass/cutlass.h
dest=.deps/cutlass
fallback="1×1 convolutions will run on cuDNN with a separate statistics pass (no CUTLASS)"
wheel="${1:-}"
fetch_wheel_headers
exit 0
