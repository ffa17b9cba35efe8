"""CuPy's sparse matrices (cupyx.scipy.sparse), as a user writes them: their
conversions, products and solvers go through cuSPARSE, another of CUDA's own
libraries with its own statically linked CUDA runtime. Run unmodified under
`phos run` by tests/frameworks; runs as is on a GPU too.

What it takes on the sim (docs/compatibility.md "CuPy on the sim"):
libphos.so answers cuModuleGetLoadingMode as CUDA_MODULE_LOADING says
(LAZY when unset), so cuSPARSE's runtime loads a fatbin when one of its
kernels is first used instead of all 168 at start, 20 of which hold SASS for
other GPUs only; and the interpreter runs `griddepcontrol` (programmatic
dependent launch, in CUB's kernels inside cuSPARSE).

Every result is compared with numpy's dense computation on the same random
data (fixed seed: deterministic). Prints one line per check and
"cupy_sparse: OK (<n> checks)" at the end; any failure raises."""
import cupy as cp
import cupyx.scipy.sparse as sp
import cupyx.scipy.sparse.linalg as spla
import numpy as np

from checks import Checks

checks = Checks("cupy_sparse")


def close(name, got, want, rtol=1e-10, atol=1e-12):
    checks.close(name, cp.asnumpy(got.toarray() if sp.issparse(got) else got), want, rtol, atol)


def random_sparse(rs, rows, cols, density):
    a = rs.standard_normal((rows, cols))
    a[rs.random_sample((rows, cols)) > density] = 0.0
    return a


def main():
    rs = np.random.RandomState(20261129)
    a = random_sparse(rs, 60, 45, 0.15)
    b = random_sparse(rs, 45, 30, 0.2)
    c = random_sparse(rs, 60, 45, 0.1)
    x = rs.standard_normal(45)
    dense = rs.standard_normal((45, 7))

    A = sp.csr_matrix(cp.asarray(a))  # cusparse denseToSparse
    checks.ok("from dense", A.nnz == np.count_nonzero(a), f"nnz {A.nnz} of {a.size}")
    close("to dense", A, a)
    close("spmv (csr @ vector)", A @ cp.asarray(x), a @ x)
    close("spmv float32", A.astype(cp.float32) @ cp.asarray(x, dtype=cp.float32),
          (a.astype(np.float32) @ x.astype(np.float32)), rtol=1e-4, atol=1e-5)
    close("spmm (csr @ dense)", A @ cp.asarray(dense), a @ dense)
    B = sp.csr_matrix(cp.asarray(b))
    close("spgemm (csr @ csr)", A @ B, a @ b)
    C = sp.csr_matrix(cp.asarray(c))
    close("geam (csr + csr)", A + 2.5 * C, a + 2.5 * c)
    close("transpose (csr -> csc)", A.T.tocsr(), a.T)
    coo = A.tocoo()
    rows, cols = cp.asnumpy(coo.row), cp.asnumpy(coo.col)
    checks.ok("to coo", np.array_equal(a[rows, cols], cp.asnumpy(coo.data)) and coo.nnz == A.nnz, f"nnz {coo.nnz}")
    # COO with duplicate entries: csr conversion sums them.
    r = np.array([0, 1, 1, 3, 0, 1]); cc = np.array([2, 0, 0, 3, 2, 1]); v = np.arange(1.0, 7.0)
    want = np.zeros((4, 4)); np.add.at(want, (r, cc), v)
    close("coo duplicates -> csr", sp.coo_matrix((cp.asarray(v), (cp.asarray(r), cp.asarray(cc))), shape=(4, 4)).tocsr(),
          want)
    close("sum over rows", A.sum(axis=1).ravel(), a.sum(axis=1))

    # Conjugate gradients on a sparse symmetric positive definite system.
    n = 80
    m = random_sparse(rs, n, n, 0.05)
    spd = m @ m.T + n * np.eye(n)
    rhs = rs.standard_normal(n)
    sol, info = spla.cg(sp.csr_matrix(cp.asarray(spd)), cp.asarray(rhs), rtol=1e-12, maxiter=500)
    want = np.linalg.solve(spd, rhs)
    err = float(np.max(np.abs(cp.asnumpy(sol) - want)))
    checks.ok("cg solve", info == 0 and err < 1e-8, f"info {info}, max |error| {err:.2e}")
    checks.done()


if __name__ == "__main__":
    main()
