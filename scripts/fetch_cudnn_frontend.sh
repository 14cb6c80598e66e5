#!/usr/bin/env bash
# Fetches the headers of cuDNN's C++ frontend, pinned to one version, into the ignored folder
# .deps/cudnn_frontend/include, where CMake looks by default (DPL_CUDNN_FRONTEND_DIR). With them, a
# build with cuDNN runs bfloat16/float16 attention on cuDNN's fused flash-attention kernels
# (docs/ops.md, "Attention"); without them it runs on dpl's own kernels.
#
# The frontend is header-only; its headers come in PyPI's nvidia-cudnn-frontend wheel (under
# include/), which is downloaded with pip (no install) and unpacked here.
#
#   scripts/fetch_cudnn_frontend.sh           download the wheel with pip, unpack its headers
#   scripts/fetch_cudnn_frontend.sh WHEEL     unpack a wheel already at hand (a machine offline)
#
# Safe to run twice: headers of the pinned version already in place are kept. Without network,
# pip or python3 it says so and exits 0, so a caller's build goes on (attention then runs on dpl's
# own kernels). A machine that cannot download (the GPU machine) gets the folder carried over with
# the working tree.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 0
source scripts/wheel_headers.sh

package=nvidia-cudnn-frontend
version=1.32.0
inside=include
marker=cudnn_frontend.h
dest=.deps/cudnn_frontend
fallback="attention will run on dpl's own kernels (no cuDNN frontend)"
wheel="${1:-}"
fetch_wheel_headers
exit 0
