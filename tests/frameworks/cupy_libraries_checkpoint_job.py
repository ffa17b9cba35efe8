"""A CuPy job that uses CUDA's own libraries across a checkpoint
(tests/frameworks/checkpoint_under_phos.py; the pause: checkpoint_job.py).
cuSOLVER, cuSPARSE and cuRAND each link their own CUDA runtime, which keeps
per-context state in the driver's context-local storage and loads its
fatbins lazily, at the first use of one of their kernels
(docs/interposer.md "Modules and launches"). Before the checkpoint the job
makes each library's handle and uses some of its routines; after the
whole-process restore it uses the same handles again and routines it never
called before, whose kernels the libraries' runtimes load only then, into
the restored session. Every result is compared with numpy.
Usage: cupy_libraries_checkpoint_job.py CTL_DIR"""
import os
import sys

import cupy as cp
import cupyx.scipy.sparse as sp
import numpy as np

from checkpoint_job import PAUSE, step_done

rng = np.random.default_rng(11)
failures = []


def check(name, got, want, tol=1e-9):
    got = cp.asnumpy(got)
    if not np.allclose(got, want, rtol=tol, atol=tol):
        failures.append(name)
        print(f"cupy_libraries_checkpoint: MISMATCH in {name}", flush=True)
    else:
        print(f"cupy_libraries_checkpoint: {name} matches numpy", flush=True)


def main():
    print(f"cupy_libraries_checkpoint: pid {os.getpid()}", flush=True)
    a = rng.standard_normal((12, 12))
    spd = a @ a.T + 12 * np.eye(12)
    b = rng.standard_normal(12)
    dense = rng.standard_normal((40, 30)) * (rng.random((40, 30)) < 0.2)
    v = rng.standard_normal(30)
    # Before: cuSOLVER Cholesky and solve, cuSPARSE SpMV, cuRAND uniform draws.
    check("cholesky (cuSOLVER potrf)", cp.linalg.cholesky(cp.asarray(spd)), np.linalg.cholesky(spd))
    check("solve (cuSOLVER getrf/getrs)", cp.linalg.solve(cp.asarray(spd), cp.asarray(b)), np.linalg.solve(spd, b))
    csr = sp.csr_matrix(cp.asarray(dense))
    check("SpMV (cuSPARSE)", csr @ cp.asarray(v), dense @ v)
    gen = cp.random.RandomState(seed=5)  # cuRAND's host API
    u = gen.uniform(size=100000)
    ok = 0.49 < float(u.mean()) < 0.51 and float(u.min()) >= 0.0 and float(u.max()) < 1.0
    check("uniform draws (cuRAND)", np.float64(ok), 1.0)
    step_done("cupy_libraries_checkpoint", PAUSE, sys.argv[1])
    # After the restore: the same handles, routines not called before.
    check("eigh (cuSOLVER syevd)", cp.linalg.eigvalsh(cp.asarray(spd)), np.linalg.eigvalsh(spd))
    tall = rng.standard_normal((12, 7))
    check("svd of a tall matrix (cuSOLVER gesvd)", cp.linalg.svd(cp.asarray(tall), compute_uv=False),
          np.linalg.svd(tall, compute_uv=False))
    check("SpMV again (cuSPARSE)", csr @ cp.asarray(v), dense @ v)
    check("SpGEMM (cuSPARSE)", (csr @ csr.T).toarray(), dense @ dense.T)
    n = gen.standard_normal(size=100000)
    ok = abs(float(n.mean())) < 0.02 and 0.98 < float(n.std()) < 1.02
    check("normal draws (cuRAND)", np.float64(ok), 1.0)
    if failures:
        print(f"cupy_libraries_checkpoint: FAILED {failures}", flush=True)
        return 1
    print("cupy_libraries_checkpoint: OK (9 checks)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
