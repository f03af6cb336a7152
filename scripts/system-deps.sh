#!/usr/bin/env bash
# The system pieces the build and the tests need on Linux, each checked the way its user finds
# it, and installed through apt-get when missing. Sourced by setup.sh; run alone it checks and
# installs (`bash scripts/system-deps.sh`) or only reports (`bash scripts/system-deps.sh --check`).
#
#   piece            who needs it                              Debian package
#   libclang         bindgen (kernels/, ep/ build scripts)     libclang-dev
#   OpenBLAS         mlx-cpu's libmlx.so (BLAS/LAPACK)          libopenblas0-pthread
#   valgrind         the leak suite (tests/stress)              valgrind
#   npm              fetching ORT's C headers (setup.sh)        npm
#   C++20 compiler   mlx-c and MLX's headers (cc crate)         g++
#
# Each check is a function that succeeds when the piece is usable; the functions that parse a
# listing read it on stdin so that tests can feed them fake `ldconfig -p` output.

# bindgen loads libclang at run time through clang-sys, which accepts these file names and skips
# libclang-cpp (a different library that merely shares the prefix; Debian's base image ships it).
LIBCLANG_NAME_RE='^libclang(-[0-9][0-9.]*)?\.so(\.[0-9]+)*$'

# Prints the path of the first libclang bindgen would load from an `ldconfig -p` listing on stdin.
libclang_in_listing() {
  local name path
  while IFS= read -r line; do
    case "$line" in *' => '*) ;; *) continue ;; esac
    name=${line%% (*}
    name=${name//[[:space:]]/}
    path=${line##* => }
    if [[ $name =~ $LIBCLANG_NAME_RE ]]; then
      printf '%s\n' "$path"
      return 0
    fi
  done
  return 1
}

# Prints the libclang bindgen would load: LIBCLANG_PATH (a file or a folder) when set, as
# clang-sys searches only there then; otherwise the dynamic linker's cache.
find_libclang() {
  local candidate
  if [ -n "${LIBCLANG_PATH:-}" ]; then
    if [ -f "$LIBCLANG_PATH" ]; then
      [[ $(basename "$LIBCLANG_PATH") =~ $LIBCLANG_NAME_RE ]] && printf '%s\n' "$LIBCLANG_PATH" && return 0
      return 1
    fi
    for candidate in "$LIBCLANG_PATH"/libclang*.so*; do
      [ -f "$candidate" ] || continue
      [[ $(basename "$candidate") =~ $LIBCLANG_NAME_RE ]] && printf '%s\n' "$candidate" && return 0
    done
    return 1
  fi
  "${LDCONFIG:-ldconfig}" -p 2>/dev/null | libclang_in_listing
}

# libclang parses mlx-c's headers, which include <stddef.h> and <stdbool.h>: those come from
# clang's own resource folder (Debian: libclang-common-<v>-dev), not libc. It sits beside the
# library, or where the distribution keeps LLVM (Debian: /usr/lib/llvm-<v>/lib/clang).
CLANG_RESOURCE_ROOTS=${CLANG_RESOURCE_ROOTS-/usr/lib/llvm-*/lib/clang /usr/lib/clang /usr/local/lib/clang}

clang_builtin_headers_for() {
  local root roots
  roots="$(dirname "$1")/clang $(dirname "$(readlink -f "$1")")/clang $CLANG_RESOURCE_ROOTS"
  for root in $roots; do
    compgen -G "$root/*/include/stddef.h" >/dev/null && return 0
  done
  return 1
}

has_libclang() {
  local lib
  lib=$(find_libclang) || return 1
  clang_builtin_headers_for "$lib"
}

# mlx-cpu's libmlx.so has libopenblas.so.0 as a DT_NEEDED entry.
openblas_in_listing() { grep -q '^[[:space:]]*libopenblas\.so\.0 '; }
has_openblas() { "${LDCONFIG:-ldconfig}" -p 2>/dev/null | openblas_in_listing; }

has_valgrind() { command -v valgrind >/dev/null; }
has_npm() { command -v npm >/dev/null; }

# The cc crate compiles mlx-c with $CXX (default c++); MLX's headers need C++20.
has_cxx20() {
  local dir rc
  dir=$(mktemp -d)
  printf '#include <span>\n#include <concepts>\nint main() { int a[2] = {1, 2}; return std::span<int>(a).size() == 2 ? 0 : 1; }\n' > "$dir/probe.cpp"
  "${CXX:-c++}" -std=c++20 -o "$dir/probe" "$dir/probe.cpp" >/dev/null 2>&1 && "$dir/probe"
  rc=$?
  rm -rf "$dir"
  return $rc
}

# One row per piece: check function, Debian package, why it is needed.
SYSTEM_PIECES=(
  "has_libclang|libclang-dev|libclang for bindgen (or set LIBCLANG_PATH to a folder holding libclang.so)"
  "has_openblas|libopenblas0-pthread|OpenBLAS for mlx-cpu's libmlx.so"
  "has_valgrind|valgrind|valgrind for the leak suite"
  "has_npm|npm|npm to fetch ORT's C headers"
  "has_cxx20|g++|a C++20 compiler for mlx-c (or set CXX)"
)

# Prints the Debian packages whose piece is missing, one per line.
missing_system_packages() {
  local row check package
  for row in "${SYSTEM_PIECES[@]}"; do
    IFS='|' read -r check package _ <<<"$row"
    "$check" || printf '%s\n' "$package"
  done
}

_system_as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Installs what is missing, then checks again: each piece still missing fails with one line
# naming its package.
system_packages() {
  [ "$(uname -s)" = Linux ] || return 0
  local missing row check package why failed=0
  mapfile -t missing < <(missing_system_packages)
  [ ${#missing[@]} = 0 ] && return 0
  if command -v apt-get >/dev/null; then
    printf '[setup] apt-get install %s\n' "${missing[*]}"
    _system_as_root apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive _system_as_root apt-get install -y -qq "${missing[@]}" >/dev/null || true
  fi
  for row in "${SYSTEM_PIECES[@]}"; do
    IFS='|' read -r check package why <<<"$row"
    if ! "$check"; then
      printf '[setup] missing: %s — install the package %s (apt-get install %s)\n' "$why" "$package" "$package" >&2
      failed=1
    fi
  done
  return $failed
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  if [ "${1:-}" = --check ]; then
    missing=$(missing_system_packages)
    [ -z "$missing" ] && echo "all system pieces present" && exit 0
    printf 'missing packages: %s\n' "$(echo $missing)"
    exit 1
  fi
  system_packages
fi
