#!/usr/bin/env bash
# Unpacks the C++ headers that a PyPI wheel carries into an ignored folder under .deps, pinned to
# one version. Sourced by the fetch_*.sh scripts, which set the variables below and call
# fetch_wheel_headers; it never fails the caller: without network, pip or python3 it says what the
# build will do instead (`fallback`) and returns 0.
#
#   package   the wheel's name on PyPI               version   the pinned version
#   inside    the folder in the wheel holding the headers (it becomes $dest/include)
#   marker    a header that must be there, relative to $inside
#   dest      the destination, .deps/<name>           fallback  what the build does without them
#   wheel     (optional) a wheel already at hand, unpacked instead of downloading one

say() { echo "$(basename "$0" .sh): $*"; }

fetch_wheel_headers() {
  local stamp="$dest/VERSION"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$version" && -f "$dest/include/$marker" ]]; then
    say "$package $version already in $dest/include"
    return 0
  fi
  if ! command -v python3 >/dev/null 2>&1; then
    say "python3 not found; $fallback"
    return 0
  fi
  local tmp
  tmp=$(mktemp -d) || return 0
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  if [[ -z "${wheel:-}" ]]; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
      say "pip not found (python3 -m pip); $fallback"
      return 0
    fi
    if ! python3 -m pip download --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 "$package==$version" -d "$tmp/wheel" >"$tmp/pip.log" 2>&1; then
      say "could not download $package==$version (no network?); $fallback"
      tail -n 3 "$tmp/pip.log" | sed 's/^/  pip: /'
      return 0
    fi
    wheel=$(find "$tmp/wheel" -name "${package//-/_}-$version-*.whl" | head -n 1)
  fi
  if [[ -z "$wheel" || ! -f "$wheel" ]]; then
    say "no wheel of $package $version found${wheel:+ at $wheel}; $fallback"
    return 0
  fi
  # Unpack only the headers into a fresh folder, then swap it in, so that an interrupted run never
  # leaves a half-written copy behind.
  if ! python3 - "$wheel" "$tmp/unpacked" "$inside" "$marker" 2>"$tmp/unpack.log" <<'PY'
import os
import sys
import zipfile

wheel, out, inside, marker = sys.argv[1], sys.argv[2], sys.argv[3].rstrip("/") + "/", sys.argv[4]
with zipfile.ZipFile(wheel) as z:
    members = [n for n in z.namelist() if n.startswith(inside) and not n.endswith("/")]
    if inside + marker not in members:
        sys.exit(f"the wheel has no {inside}{marker}")
    for n in members:
        target = os.path.join(out, "include", n[len(inside):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(n) as src, open(target, "wb") as dst:
            dst.write(src.read())
PY
  then
    say "could not unpack $wheel ($(tail -n 1 "$tmp/unpack.log")); $fallback"
    return 0
  fi
  mkdir -p "$dest" || return 0
  rm -rf "$dest/include.old"
  [[ -d "$dest/include" ]] && mv "$dest/include" "$dest/include.old"
  if mv "$tmp/unpacked/include" "$dest/include"; then
    rm -rf "$dest/include.old"
    echo "$version" >"$stamp"
    say "$package $version headers in $dest/include"
  else
    [[ -d "$dest/include.old" ]] && mv "$dest/include.old" "$dest/include"
    say "could not move the headers into $dest/include"
  fi
  return 0
}
