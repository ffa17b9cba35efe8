"""A CuPy job checkpointed mid-run (tests/frameworks/checkpoint_under_phos.py;
the computation and the pause: checkpoint_job.py). An ElementwiseKernel and
a cuBLAS dot per step (CuPy's cublas handle is made before the checkpoint
and used after the restore: a handle is app state, docs/interposer.md
"cuBLAS and cuBLASLt"). Usage: cupy_checkpoint_job.py CTL_DIR"""
import os
import sys

import cupy as cp

from checkpoint_job import STEPS, initial_state, report, step_done

evolve = cp.ElementwiseKernel("float64 x, float64 left, float64 k, float64 norm", "float64 y",
                              "y = 0.5 * x + 0.25 * left + 0.001 * k / norm", "evolve")


def main():
    x0 = initial_state()
    x = cp.asarray(x0)
    print(f"cupy_checkpoint: pid {os.getpid()}", flush=True)
    for k in range(STEPS):
        norm = float(cp.sqrt(cp.dot(x, x))) + 1.0  # cublasDdot
        x = evolve(x, cp.roll(x, 1), float(k), norm)
        cp.cuda.Device().synchronize()
        step_done("cupy_checkpoint", k, sys.argv[1])
    return report("cupy_checkpoint", cp.asnumpy(x), x0)


if __name__ == "__main__":
    sys.exit(main())
