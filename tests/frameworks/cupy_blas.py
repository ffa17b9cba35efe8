"""CuPy's linear algebra, as a user writes it, checked against numpy on
random data: `@`, `dot`, batched `matmul`, `linalg.norm`, `vdot`, `inner` —
CuPy calls cuBLAS for them (gemm, GemmEx, strided batched, gemv, dot, nrm2,
geam), which phos runs in phosd (docs/interposer.md "cuBLAS"; OpenBLAS on
the sim). Run unmodified under `phos run` by tests/frameworks; runs as is
on a GPU too.

Prints one line per check and "cupy_blas: OK (<n> checks)" at the end; any
mismatch raises (non-zero exit)."""
import sys

import cupy as cp
import numpy as np

rng = np.random.default_rng(20261127)
checked = []


def check(name, got, want, rtol, atol):
    got = cp.asnumpy(got) if isinstance(got, cp.ndarray) else np.asarray(got)
    if got.shape != np.shape(want):
        raise AssertionError(f"{name}: shape {got.shape}, want {np.shape(want)}")
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        bad = np.argmax(~np.isclose(got, want, rtol=rtol, atol=atol))
        raise AssertionError(f"{name}: element {bad}: got {np.ravel(got)[bad]!r}, want {np.ravel(want)[bad]!r}")
    checked.append(name)
    print(f"cupy_blas: {name} matches numpy", flush=True)


def rand(*shape, dtype=np.float64):
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def main():
    tol = {np.float32: (1e-4, 1e-4), np.float64: (1e-10, 1e-10), np.complex64: (1e-4, 1e-4),
           np.complex128: (1e-10, 1e-10)}
    for dtype, (rtol, atol) in tol.items():
        a, b = rand(48, 33, dtype=dtype), rand(33, 20, dtype=dtype)
        check(f"{np.dtype(dtype).name} a @ b", cp.asarray(a) @ cp.asarray(b), a @ b, rtol, atol)
        # Transposed operands (no copy: CuPy passes op T / lda).
        check(f"{np.dtype(dtype).name} a.T @ a", cp.asarray(a).T @ cp.asarray(a), a.T @ a, rtol, atol)
    # float16: GemmEx with half inputs (float accumulation).
    h1, h2 = rand(32, 64, dtype=np.float16), rand(64, 16, dtype=np.float16)
    want = (h1.astype(np.float32) @ h2.astype(np.float32)).astype(np.float16)
    check("float16 a @ b", cp.asarray(h1) @ cp.asarray(h2), want, 1e-2, 1e-2)
    # Batched matmul: strided batched gemm.
    x, y = rand(5, 12, 7, dtype=np.float32), rand(5, 7, 9, dtype=np.float32)
    check("float32 batched matmul", cp.matmul(cp.asarray(x), cp.asarray(y)), np.matmul(x, y), 1e-4, 1e-4)
    # Matrix-vector and vector-vector products.
    m, v = rand(40, 25), rand(25)
    check("float64 matrix @ vector", cp.asarray(m) @ cp.asarray(v), m @ v, 1e-10, 1e-10)
    u, w = rand(1000), rand(1000)
    check("float64 dot of vectors", cp.dot(cp.asarray(u), cp.asarray(w)), np.dot(u, w), 1e-10, 1e-10)
    cu, cw = rand(300, dtype=np.complex64), rand(300, dtype=np.complex64)
    check("complex64 vdot", cp.vdot(cp.asarray(cu), cp.asarray(cw)), np.vdot(cu, cw), 1e-4, 1e-4)
    check("float64 inner", cp.inner(cp.asarray(m), cp.asarray(m)), np.inner(m, m), 1e-10, 1e-10)
    check("float64 linalg.norm (vector)", cp.linalg.norm(cp.asarray(u)), np.linalg.norm(u), 1e-10, 1e-10)
    check("float32 linalg.norm (matrix, fro)", cp.linalg.norm(cp.asarray(x[0])), np.linalg.norm(x[0]), 1e-5, 1e-5)
    cp.cuda.Device().synchronize()
    print(f"cupy_blas: OK ({len(checked)} checks)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
