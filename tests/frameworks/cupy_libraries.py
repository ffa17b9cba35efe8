"""CuPy's calls into CUDA's own libraries beyond cuBLAS, as a user writes
them: random numbers from cuRAND's host API (`cupy.random.seed`, `rand`,
`standard_normal`, `randint`) and dense solvers from cuSOLVER
(`cupy.linalg.solve`, `inv`, `cholesky`, `qr`, `eigh`, `svd`, `det`, and
`svd`, `pinv`, `lstsq` of a non-square matrix). The
libraries' kernels run in phosd (from their PTX on the sim); their
statically linked CUDA runtime sets itself up through libphos.so
(docs/compatibility.md "CuPy on the sim"). Run unmodified under `phos run`
by tests/frameworks; runs as is on a GPU too.

cuRAND's numbers cannot be recomputed on the CPU, so they are checked for
what every correct generator gives: the range, and the moments of 200 000
draws within a few standard errors (the seed is fixed, so a run is
deterministic, never flaky); the same seed twice gives the same numbers,
another seed others. The solvers are checked against numpy.

Prints one line per check and "cupy_libraries: OK (<n> checks)" at the end;
any failure raises (non-zero exit). cuFFT (`cupy.fft`) is not here: it
stops with CUFFT_INTERNAL_ERROR on the sim (docs/compatibility.md)."""
import cupy as cp
import numpy as np

from checks import Checks

checks = Checks("cupy_libraries")


def random_checks():
    n = 200_000
    cp.random.seed(2026)
    u = cp.random.rand(n, dtype=cp.float32)
    lo, hi, mean, var = float(u.min()), float(u.max()), float(u.mean()), float(u.var())
    # Uniform [0, 1): mean 1/2 (standard error ~0.00065), variance 1/12.
    checks.ok("rand", 0.0 <= lo and hi < 1.0 and abs(mean - 0.5) < 0.004 and abs(var - 1 / 12) < 0.002,
       f"min {lo:.6f} max {hi:.6f} mean {mean:.5f} var {var:.5f}")
    z = cp.random.standard_normal(n)
    zm, zs = float(z.mean()), float(z.std())
    checks.ok("standard_normal", abs(zm) < 0.012 and abs(zs - 1.0) < 0.01, f"mean {zm:.5f} std {zs:.5f}")
    k = cp.asnumpy(cp.random.randint(0, 10, size=n))
    counts = np.bincount(k, minlength=10)
    checks.ok("randint", k.min() == 0 and k.max() == 9 and counts.min() > 0.09 * n and counts.max() < 0.11 * n,
       f"counts {counts.tolist()}")
    cp.random.seed(7)
    a = cp.asnumpy(cp.random.rand(1000))
    cp.random.seed(7)
    b = cp.asnumpy(cp.random.rand(1000))
    cp.random.seed(8)
    c = cp.asnumpy(cp.random.rand(1000))
    checks.ok("seeding", np.array_equal(a, b) and not np.array_equal(a, c), "seed 7 twice: the same; seed 8: others")


def solver_checks():
    rs = np.random.RandomState(20261129)
    a = rs.standard_normal((8, 8)) + 8 * np.eye(8)
    b = rs.standard_normal(8)
    spd = a @ a.T
    tall = rs.standard_normal((12, 7))
    cases = [
        ("solve", lambda: cp.linalg.solve(cp.asarray(a), cp.asarray(b)), np.linalg.solve(a, b)),
        ("inv", lambda: cp.linalg.inv(cp.asarray(a)), np.linalg.inv(a)),
        ("cholesky", lambda: cp.linalg.cholesky(cp.asarray(spd)), np.linalg.cholesky(spd)),
        # R of QR is unique up to the signs of its rows.
        ("qr", lambda: cp.abs(cp.linalg.qr(cp.asarray(a))[1]), np.abs(np.linalg.qr(a)[1])),
        ("eigh", lambda: cp.linalg.eigh(cp.asarray(spd))[0], np.linalg.eigh(spd)[0]),
        ("svd", lambda: cp.linalg.svd(cp.asarray(a), compute_uv=False), np.linalg.svd(a, compute_uv=False)),
        ("det", lambda: cp.linalg.det(cp.asarray(a)), np.linalg.det(a)),
        # Non-square: cuSOLVER's gesvd transposes with cublasDgeam and a
        # null beta (phos refused that until 29 Nov 2026).
        ("svd 12x7", lambda: cp.linalg.svd(cp.asarray(tall), full_matrices=False)[1],
         np.linalg.svd(tall, compute_uv=False)),
        ("pinv 12x7", lambda: cp.linalg.pinv(cp.asarray(tall)), np.linalg.pinv(tall)),
        ("lstsq 12x7", lambda: cp.linalg.lstsq(cp.asarray(tall), cp.asarray(tall[:, 0] + 1), rcond=None)[0],
         np.linalg.lstsq(tall, tall[:, 0] + 1, rcond=None)[0]),
    ]
    for name, run, want in cases:
        checks.close(name, cp.asnumpy(run()), want, 1e-8, 1e-10)


def main():
    random_checks()
    solver_checks()
    checks.done()


if __name__ == "__main__":
    main()
