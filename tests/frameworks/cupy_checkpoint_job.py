"""A CuPy job checkpointed mid-run (tests/frameworks/checkpoint_under_phos.py).

Evolves a state vector on the GPU for STEPS steps with an ElementwiseKernel
and a reduction. After step PAUSE it says "waiting at step PAUSE" and waits
for CTL/resume to exist: the driver checkpoints it there, kills it, creates
the file and restores the image, so the steps after PAUSE run in the
restored process. At the end the job recomputes every step with numpy and
prints "cupy_checkpoint: OK" when the GPU's result matches.
Usage: cupy_checkpoint_job.py CTL_DIR"""
import os
import sys
import time

import cupy as cp
import numpy as np

STEPS, PAUSE, N = 24, 10, 2048

evolve = cp.ElementwiseKernel("float64 x, float64 left, float64 k, float64 norm", "float64 y",
                              "y = 0.5 * x + 0.25 * left + 0.001 * k / norm", "evolve")


def host_reference(x0):
    x = x0.copy()
    for k in range(STEPS):
        norm = np.sqrt((x * x).sum()) + 1.0
        x = 0.5 * x + 0.25 * np.roll(x, 1) + 0.001 * k / norm
    return x


def main():
    ctl = sys.argv[1]
    x0 = np.random.default_rng(7).standard_normal(N)
    x = cp.asarray(x0)
    print(f"cupy_checkpoint: pid {os.getpid()}", flush=True)
    for k in range(STEPS):
        norm = float(cp.sqrt((x * x).sum())) + 1.0
        x = evolve(x, cp.roll(x, 1), float(k), norm)
        cp.cuda.Device().synchronize()
        print(f"cupy_checkpoint: step {k}", flush=True)
        if k == PAUSE:
            print(f"cupy_checkpoint: waiting at step {k}", flush=True)
            while not os.path.exists(os.path.join(ctl, "resume")):
                time.sleep(0.02)
            print("cupy_checkpoint: resumed", flush=True)
    got = cp.asnumpy(x)
    want = host_reference(x0)
    if not np.allclose(got, want, rtol=1e-12, atol=1e-12):
        bad = int(np.argmax(~np.isclose(got, want, rtol=1e-12, atol=1e-12)))
        print(f"cupy_checkpoint: MISMATCH at {bad}: {got[bad]!r} != {want[bad]!r}", flush=True)
        return 1
    print(f"cupy_checkpoint: OK ({STEPS} steps, sum {got.sum():.12f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
