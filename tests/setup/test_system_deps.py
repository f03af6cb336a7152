"""scripts/system-deps.sh: each system piece is detected the way its user finds it, so a bare
machine installs what it lacks. Runs the shell functions against fake `ldconfig -p` listings."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "system-deps.sh"

# Debian 12's base image: libclang-cpp (clang's C++ library) but not libclang, which bindgen loads.
BASE_IMAGE_LISTING = """\
1234 libs found in cache `/etc/ld.so.cache'
\tlibclang-cpp.so.14 (libc6,x86-64) => /lib/x86_64-linux-gnu/libclang-cpp.so.14
\tlibLLVM-14.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libLLVM-14.so.1
\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6
"""
WITH_LIBCLANG_DEV = BASE_IMAGE_LISTING + (
    "\tlibclang-14.so.14 (libc6,x86-64) => /lib/x86_64-linux-gnu/libclang-14.so.14\n"
    "\tlibopenblas.so.0 (libc6,x86-64) => /lib/x86_64-linux-gnu/libopenblas.so.0\n"
)


def bash(snippet: str, env: dict | None = None) -> subprocess.CompletedProcess:
    script = f'source "{SCRIPT}"\n{snippet}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)


def fake_ldconfig(tmp_path: Path, listing: str) -> dict:
    listing_file = tmp_path / "listing.txt"
    listing_file.write_text(listing)
    tool = tmp_path / "ldconfig"
    tool.write_text(f'#!/bin/sh\ncat "{listing_file}"\n')
    tool.chmod(0o755)
    # Only the fake tree's resource folder counts, not this machine's LLVM.
    return {"PATH": "/usr/bin:/bin", "LDCONFIG": str(tool), "CLANG_RESOURCE_ROOTS": ""}


def test_old_detection_took_libclang_cpp_for_libclang():
    # What setup.sh used to run: it matched libclang-cpp, so a bare machine skipped libclang-dev.
    old = subprocess.run(["bash", "-c", "grep -q 'libclang.*\\.so'"], input=BASE_IMAGE_LISTING, text=True)
    assert old.returncode == 0
    new = subprocess.run(["bash", "-c", f'source "{SCRIPT}"; libclang_in_listing'], input=BASE_IMAGE_LISTING,
                         capture_output=True, text=True)
    assert new.returncode == 1 and new.stdout == ""


@pytest.mark.parametrize("name", ["libclang.so", "libclang.so.1", "libclang-14.so", "libclang-14.so.14",
                                  "libclang-14.0.6.so.1"])
def test_libclang_names_bindgen_loads(name):
    listing = f"\t{name} (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/{name}\n"
    found = subprocess.run(["bash", "-c", f'source "{SCRIPT}"; libclang_in_listing'], input=listing,
                           capture_output=True, text=True)
    assert found.returncode == 0
    assert found.stdout.strip() == f"/usr/lib/x86_64-linux-gnu/{name}"


@pytest.mark.parametrize("name", ["libclang-cpp.so.14", "libclang-cpp.so", "libclangBasic.so.14", "libclang_rt.asan.so"])
def test_lookalikes_are_not_libclang(name):
    listing = f"\t{name} (libc6,x86-64) => /usr/lib/{name}\n"
    found = subprocess.run(["bash", "-c", f'source "{SCRIPT}"; libclang_in_listing'], input=listing,
                           capture_output=True, text=True)
    assert found.returncode == 1


def make_llvm_tree(root: Path, library: str, headers: bool) -> Path:
    lib = root / "llvm" / "lib"
    lib.mkdir(parents=True)
    (lib / library).write_bytes(b"\x7fELF")
    (lib / "libclang-cpp.so.14").write_bytes(b"\x7fELF")
    if headers:
        include = lib / "clang" / "14.0.6" / "include"
        include.mkdir(parents=True)
        (include / "stddef.h").write_text("")
    return lib


def test_has_libclang_needs_clangs_builtin_headers(tmp_path):
    lib = make_llvm_tree(tmp_path / "with", "libclang-14.so.14", headers=True)
    env = fake_ldconfig(tmp_path, f"\tlibclang-14.so.14 (libc6,x86-64) => {lib}/libclang-14.so.14\n")
    assert bash("has_libclang", env).returncode == 0

    bare = make_llvm_tree(tmp_path / "without", "libclang-14.so.14", headers=False)
    env = fake_ldconfig(tmp_path, f"\tlibclang-14.so.14 (libc6,x86-64) => {bare}/libclang-14.so.14\n")
    assert bash("has_libclang", env).returncode == 1
    # ...unless the distribution keeps them with LLVM (Debian: /usr/lib/llvm-14/lib/clang).
    llvm = tmp_path / "usr-lib-llvm-14" / "lib" / "clang"
    (llvm / "14" / "include").mkdir(parents=True)
    (llvm / "14" / "include" / "stddef.h").write_text("")
    assert bash("has_libclang", {**env, "CLANG_RESOURCE_ROOTS": str(llvm)}).returncode == 0


def test_base_image_listing_is_missing_libclang_and_openblas(tmp_path):
    env = fake_ldconfig(tmp_path, BASE_IMAGE_LISTING)
    assert bash("has_libclang", env).returncode == 1
    assert bash("has_openblas", env).returncode == 1
    env = fake_ldconfig(tmp_path, WITH_LIBCLANG_DEV)
    assert bash("has_openblas", env).returncode == 0


def test_libclang_path_is_the_only_place_searched_when_set(tmp_path):
    lib = make_llvm_tree(tmp_path, "libclang.so.1", headers=True)
    env = fake_ldconfig(tmp_path, WITH_LIBCLANG_DEV)  # ignored while LIBCLANG_PATH is set
    assert bash("find_libclang", {**env, "LIBCLANG_PATH": str(lib)}).stdout.strip() == f"{lib}/libclang.so.1"
    assert bash("has_libclang", {**env, "LIBCLANG_PATH": str(lib / "libclang.so.1")}).returncode == 0
    assert bash("has_libclang", {**env, "LIBCLANG_PATH": str(lib / "libclang-cpp.so.14")}).returncode == 1
    assert bash("has_libclang", {**env, "LIBCLANG_PATH": str(tmp_path / "elsewhere")}).returncode == 1


def test_cannot_install_fails_with_one_line_per_missing_package(tmp_path):
    # apt-get that installs nothing: every piece still missing is named with its package.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for tool in ("apt-get", "sudo"):
        (fake_bin / tool).write_text("#!/bin/sh\nexit 1\n")
        (fake_bin / tool).chmod(0o755)
    env = {**fake_ldconfig(tmp_path, BASE_IMAGE_LISTING), "PATH": f"{fake_bin}:/usr/bin:/bin"}
    result = bash("has_valgrind() { false; }; has_npm() { true; }; has_cxx20() { true; }; system_packages", env)
    assert result.returncode == 1
    missing = [line for line in result.stderr.splitlines() if line.startswith("[setup] missing:")]
    assert len(missing) == 3
    for package in ("libclang-dev", "libopenblas0-pthread", "valgrind"):
        assert sum(f"install the package {package} " in line for line in missing) == 1


def test_present_pieces_install_nothing(tmp_path):
    env = fake_ldconfig(tmp_path, WITH_LIBCLANG_DEV)
    result = bash("has_libclang() { true; }; has_valgrind() { true; }; has_npm() { true; }; has_cxx20() { true; };"
                  " missing_system_packages; system_packages", env)
    assert result.returncode == 0 and result.stdout == ""


def test_this_machine_has_a_cxx20_compiler():
    assert bash("has_cxx20").returncode == 0
