#!/usr/bin/env python3
"""Every cuBLAS function that takes a cublasHandle_t is libphos.so's.

libphos.so answers cublas_api.h and cublasLt.h (generated) and, by hand,
the handle-taking exports no header declares. A handle-taking function of
the real libcublas.so that libphos.so lacks is reached by whoever calls it
(cuSOLVER 13 calls cublasSetEnvironmentMode on its handle) with a libphos
handle, which the real library reads as its own struct: wrong answers or
heap corruption. So this fails, naming the function, when the toolkit's
libcublas.so exports a cublas* function libphos.so does not, unless it is
one of the kinds that never see such a handle:

  * the legacy API of cublas.h (cublasInit, cublasSgemm(char, ...)): no
    handle, the real library's own context;
  * cublasXt*: their own cublasXtHandle_t, made by the real cublasXtCreate;
  * cublasGetBackdoor / cublasSetBackdoor / cublasSetBackdoorEx: take no
    handle (the first two return a constant, the last is an empty function
    in 13.0: checked by disassembly).

Usage: cublas_exports_covered.py --phos libphos.so --cublas libcublas.so.13
       --legacy-header cublas.h
"""
import argparse
import re
import subprocess
import sys

NO_HANDLE = {"cublasGetBackdoor", "cublasSetBackdoor", "cublasSetBackdoorEx"}


def exported_functions(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("T", "W", "i"):
            names.add(parts[2].split("@")[0])
    return names


def legacy_functions(header):
    text = open(header, encoding="utf-8").read()
    return set(re.findall(r"CUBLASWINAPI\s+(cublas\w+)\s*\(", text))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phos", required=True, help="libphos.so")
    ap.add_argument("--cublas", required=True, help="the toolkit's libcublas.so.13")
    ap.add_argument("--legacy-header", required=True, help="the toolkit's cublas.h (legacy API)")
    args = ap.parse_args()

    phos = exported_functions(args.phos)
    real = {n for n in exported_functions(args.cublas) if n.startswith("cublas") and not n.startswith("cublasLt")}
    legacy = legacy_functions(args.legacy_header)
    if len(real) < 300 or len(legacy) < 100:
        print(f"FAIL: read {len(real)} cublas exports from {args.cublas} and {len(legacy)} legacy declarations "
              f"from {args.legacy_header}: not the files this test expects")
        return 1
    missing = sorted(n for n in real - phos if n not in legacy and not n.startswith("cublasXt") and n not in NO_HANDLE)
    answered = len(real & phos)
    print(f"{len(real)} cublas exports in {args.cublas}: {answered} answered by libphos.so, "
          f"{len(real) - answered - len(missing)} legacy/Xt/no-handle ones left to it")
    if missing:
        print("FAIL: libphos.so does not export these handle-taking functions of the real libcublas, so a caller "
              "would hand it a libphos handle:")
        for n in missing:
            print("  " + n)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
