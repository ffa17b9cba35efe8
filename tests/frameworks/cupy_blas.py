"""CuPy's linear algebra, as a user writes it, checked against numpy on
random data: `@`, `dot`, batched `matmul`, `linalg.norm`, `vdot`, `inner`,
and CuPy's own cuBLAS wrappers (`cupy.cublas`: gemv, ger, gerc, geam,
dgmm, syrk, sbmv, iamax, iamin, asum, dotc, batched_gesv) —
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
    cublas_module(rng)
    cp.cuda.Device().synchronize()
    print(f"cupy_blas: OK ({len(checked)} checks)", flush=True)


def cublas_module(rng):
    """CuPy's thin cuBLAS wrappers (cupy.cublas), each its routine."""
    from cupy import cublas
    a, x, y = rand(30, 20), rand(20), rand(30)
    gy = cp.asarray(y)
    cublas.gemv("N", 2.0, cp.asarray(a), cp.asarray(x), -1.0, gy)  # y updated in place
    check("cublas.gemv (dgemv)", gy, 2.0 * a @ x - y, 1e-10, 1e-10)
    ga = cp.asarray(a)
    cublas.ger(0.5, cp.asarray(y), cp.asarray(x), ga)  # a updated in place
    check("cublas.ger (dger)", ga, a + 0.5 * np.outer(y, x), 1e-10, 1e-10)
    c1, c2 = rand(12, dtype=np.complex128), rand(9, dtype=np.complex128)
    gc = cp.zeros((12, 9), np.complex128)
    cublas.gerc(1.0, cp.asarray(c1), cp.asarray(c2), gc)
    check("cublas.gerc (zgerc)", gc, np.outer(c1, c2.conj()), 1e-10, 1e-10)
    b = rand(30, 20)
    check("cublas.geam (dgeam)", cublas.geam("N", "N", 2.0, cp.asarray(a), -1.0, cp.asarray(b)), 2.0 * a - b, 1e-10,
          1e-10)
    d = rand(20)
    check("cublas.dgmm (ddgmm, right)", cublas.dgmm("R", cp.asarray(a), cp.asarray(d)), a * d[None, :], 1e-10, 1e-10)
    s = rand(25, 10, dtype=np.float32)
    got = cp.asnumpy(cublas.syrk("N", cp.asarray(s), alpha=1.0, lower=True))
    check("cublas.syrk (ssyrk, lower)", np.tril(got), np.tril(s @ s.T), 1e-4, 1e-4)
    # sbmv: y = A x for a symmetric band matrix CuPy stores as (k+1) x n.
    n, k = 8, 2
    band = rand(k + 1, n)
    full = np.zeros((n, n))
    for j in range(n):
        for i in range(max(0, j - k), j + 1):
            full[i, j] = full[j, i] = band[k + i - j, j]
    v = rand(n)
    check("cublas.sbmv (dsbmv)", cublas.sbmv(k, 1.0, cp.asarray(band), cp.asarray(v), 0.0,
                                            cp.asarray(np.zeros(n))), full @ v, 1e-10, 1e-10)
    z = rand(50, dtype=np.complex64)
    check("cublas.iamax (icamax)", cublas.iamax(cp.asarray(z)), np.argmax(np.abs(z.real) + np.abs(z.imag)) + 1, 0, 0)
    check("cublas.iamin (icamin)", cublas.iamin(cp.asarray(z)), np.argmin(np.abs(z.real) + np.abs(z.imag)) + 1, 0, 0)
    check("cublas.asum (scasum)", cublas.asum(cp.asarray(z)), np.sum(np.abs(z.real) + np.abs(z.imag)), 1e-4, 1e-4)
    check("cublas.dotc (cdotc)", cublas.dotc(cp.asarray(z), cp.asarray(z[::-1].copy())), np.vdot(z, z[::-1]), 1e-4, 1e-4)
    # batched_gesv: cublas?getrfBatched + cublas?getrsBatched.
    m = rand(6, 4, 4) + 4 * np.eye(4)
    rhs = rand(6, 4, 3)
    check("cublas.batched_gesv (dgetrf/dgetrsBatched)", cublas.batched_gesv(cp.asarray(m), cp.asarray(rhs)),
          np.linalg.solve(m, rhs), 1e-10, 1e-10)


if __name__ == "__main__":
    sys.exit(main())
