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

version=1.32.0
dest=.deps/cudnn_frontend
stamp="$dest/VERSION"

say() { echo "fetch_cudnn_frontend: $*"; }

if [[ -f "$stamp" && "$(cat "$stamp")" == "$version" && -f "$dest/include/cudnn_frontend.h" ]]; then
  say "cuDNN frontend $version already in $dest/include"
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  say "python3 not found; attention will run on dpl's own kernels (no cuDNN frontend)"
  exit 0
fi

tmp=$(mktemp -d) || exit 0
trap 'rm -rf "$tmp"' EXIT

wheel="${1:-}"
if [[ -z "$wheel" ]]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    say "pip not found (python3 -m pip); attention will run on dpl's own kernels (no cuDNN frontend)"
    exit 0
  fi
  if ! python3 -m pip download --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$version" -d "$tmp/wheel" >"$tmp/pip.log" 2>&1; then
    say "could not download nvidia-cudnn-frontend==$version (no network?); attention will run on dpl's own kernels"
    tail -n 3 "$tmp/pip.log" | sed 's/^/  pip: /'
    exit 0
  fi
  wheel=$(find "$tmp/wheel" -name "nvidia_cudnn_frontend-$version-*.whl" | head -n 1)
fi
if [[ -z "$wheel" || ! -f "$wheel" ]]; then
  say "no wheel of nvidia-cudnn-frontend $version found${wheel:+ at $wheel}; attention will run on dpl's own kernels"
  exit 0
fi

# Unpack only include/ into a fresh folder, then swap it in, so that an interrupted run never
# leaves a half-written copy behind.
if ! python3 - "$wheel" "$tmp/unpacked" 2>"$tmp/unpack.log" <<'EOF'
import sys
import zipfile

wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    members = [n for n in z.namelist() if n.startswith("include/")]
    if "include/cudnn_frontend.h" not in members:
        sys.exit("the wheel has no include/cudnn_frontend.h")
    for n in members:
        z.extract(n, out)
EOF
then
  say "could not unpack $wheel ($(tail -n 1 "$tmp/unpack.log")); attention will run on dpl's own kernels"
  exit 0
fi

mkdir -p "$dest" || exit 0
rm -rf "$dest/include.old"
[[ -d "$dest/include" ]] && mv "$dest/include" "$dest/include.old"
if mv "$tmp/unpacked/include" "$dest/include"; then
  rm -rf "$dest/include.old"
  echo "$version" >"$stamp"
  say "cuDNN frontend $version headers in $dest/include"
else
  [[ -d "$dest/include.old" ]] && mv "$dest/include.old" "$dest/include"
  say "could not move the headers into $dest/include"
fi
exit 0
