"""Calls the library's self-test entry points through ctypes, loaded RTLD_LOCAL as ORT loads it.

Usage: python selftest.py LIBRARY M K N RUNS  -> prints the BLAS description and the median ms.
Run as a script so that LD_DEBUG can watch a fresh process.
"""

import ctypes
import os
import sys


def main() -> int:
    path, m, k, n, runs = sys.argv[1], *map(int, sys.argv[2:6])
    lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    lib.OrtMlxEp_BlasDescription.restype = ctypes.c_char_p
    lib.OrtMlxEp_BenchMatmul.argtypes = [ctypes.c_int64] * 3 + [
        ctypes.c_int32,
        ctypes.POINTER(ctypes.c_double),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    median = ctypes.c_double()
    error = ctypes.create_string_buffer(1024)
    if lib.OrtMlxEp_BenchMatmul(m, k, n, runs, ctypes.byref(median), error, len(error)) != 0:
        print("error:", error.value.decode(), file=sys.stderr)
        return 1
    print(lib.OrtMlxEp_BlasDescription().decode())
    print(f"{median.value:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
