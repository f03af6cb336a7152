#!/usr/bin/env bash
# Installs everything the build and the tests need, from the package registries only, into
# ignored folders of the checkout. Idempotent: each step checks what is already there and verified.
#
#   .venv/            Python: ORT, ONNX, MLX (mlx-cpu on Linux, mlx on macOS), numpy, pytest;
#                     CUDA's NVRTC and headers on x86-64 Linux (compiling the CUDA kernels in tests)
#   .deps/ort/        ORT's C headers, API 29 (npm com.github.asus4.onnxruntime@0.4.9), sha256-checked
#   .deps/mlx-c/      mlx-c 0.7.0 sources (crates.io mlx-sys 0.7.0, through cargo), sha256-checked
#   system            libclang, OpenBLAS, valgrind, npm, g++ (Linux) through apt-get when missing
#                     (scripts/system-deps.sh checks each the way its user finds it)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS="$ROOT/.deps"
MLX_VERSION=0.32.4
ORT_NPM_PACKAGE=com.github.asus4.onnxruntime@0.4.9
ORT_HEADERS_DIR='package/Plugins/iOS~/onnxruntime.xcframework/ios-arm64/onnxruntime.framework/Headers'
MLX_SYS_SHA256=da965f83ce211b80f9b681d9bbd6fa625fe6bb2e659ba7bc55dd95eea8d3b028
mkdir -p "$DEPS"

log() { printf '[setup] %s\n' "$*"; }

# --- system packages (Linux): libclang, OpenBLAS, valgrind, npm, a C++20 compiler ----------------
# shellcheck source=system-deps.sh
source "$ROOT/scripts/system-deps.sh"

# --- Python virtualenv ------------------------------------------------------------------------
python_env() {
  local mlx_pkg stamp want
  # `mlx` is MLX's Python package (mlx.core, for the direct-MLX benchmark ceiling); on Linux
  # its backend library comes from `mlx-cpu`, whose libmlx.so and headers the build links.
  if [ "$(uname -s)" = Darwin ]; then mlx_pkg="mlx==$MLX_VERSION"; else mlx_pkg="mlx-cpu==$MLX_VERSION mlx==$MLX_VERSION"; fi
  # CUDA's NVRTC and headers (no GPU needed), with which the kernels' tests compile every CUDA
  # source they emulate (kernels/src/custom/cubin): MLX's CUDA wheels use these packages.
  if [ "$(uname -sm)" = "Linux x86_64" ]; then mlx_pkg="$mlx_pkg nvidia-cuda-nvrtc==13.5.37 nvidia-cuda-runtime==13.5.37"; fi
  want="$(cat "$ROOT/scripts/requirements.txt") $mlx_pkg"
  stamp="$ROOT/.venv/.setup-stamp"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  log "python virtualenv .venv ($mlx_pkg)"
  [ -x "$ROOT/.venv/bin/python" ] || python3 -m venv "$ROOT/.venv"
  "$ROOT/.venv/bin/python" -m pip install -q --disable-pip-version-check \
    -r "$ROOT/scripts/requirements.txt" $mlx_pkg
  printf '%s' "$want" > "$stamp"
}

# --- ORT C headers ----------------------------------------------------------------------------
ort_headers() {
  local dest="$DEPS/ort" tmp
  if (cd "$dest" 2>/dev/null && sha256sum --quiet -c "$ROOT/scripts/ort-headers.sha256" 2>/dev/null); then
    return 0
  fi
  log "ORT C headers from npm $ORT_NPM_PACKAGE (~150 MB download, 3 headers kept)"
  tmp=$(mktemp -d)
  # npm verifies the tarball against the registry's sha512 integrity field.
  (cd "$tmp" && npm pack --silent "$ORT_NPM_PACKAGE" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" "$ORT_HEADERS_DIR/onnxruntime_c_api.h" \
    "$ORT_HEADERS_DIR/onnxruntime_ep_c_api.h" "$ORT_HEADERS_DIR/onnxruntime_error_code.h" package/LICENSE
  rm -rf "$dest" && mkdir -p "$dest"
  mv "$tmp/$ORT_HEADERS_DIR"/*.h "$dest/" && mv "$tmp/package/LICENSE" "$dest/LICENSE"
  rm -rf "$tmp"
  (cd "$dest" && sha256sum --quiet -c "$ROOT/scripts/ort-headers.sha256")
}

# --- mlx-c sources ----------------------------------------------------------------------------
mlx_c_sources() {
  local dest="$DEPS/mlx-c" crate tmp
  [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$MLX_SYS_SHA256" ] && return 0
  log "mlx-c 0.7.0 sources from crates.io mlx-sys 0.7.0"
  # cargo fetch downloads into CARGO_HOME's registry cache and checks Cargo.lock's checksum.
  cargo fetch --locked --quiet --manifest-path "$ROOT/scripts/mlx-c-source/Cargo.toml"
  crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/mlx-sys-0.7.0.crate | head -n 1)
  echo "$MLX_SYS_SHA256  $crate" | sha256sum --quiet -c
  tmp=$(mktemp -d)
  tar -xzf "$crate" -C "$tmp" mlx-sys-0.7.0/src/mlx-c
  rm -rf "$dest" && mv "$tmp/mlx-sys-0.7.0/src/mlx-c" "$dest" && rm -rf "$tmp"
  echo "$MLX_SYS_SHA256" > "$dest/.sha256"
}

system_packages
python_env
ort_headers
mlx_c_sources
log "ready"
