"""A numba-cuda job checkpointed mid-run (tests/frameworks/checkpoint_under_phos.py).

Evolves a state vector on the GPU for STEPS steps with two kernels (one
with a shared-memory reduction). After step PAUSE it says "waiting at
step PAUSE" and waits for CTL/resume to exist: the driver checkpoints it
there, kills it, creates the file and restores the image, so the steps
after PAUSE run in the restored process. At the end the job recomputes
every step with numpy and prints "numba_checkpoint: OK" when the GPU's
result matches. Usage: numba_checkpoint_job.py CTL_DIR"""
import os
import sys
import time

import numpy as np
from numba import cuda

STEPS, PAUSE, N = 24, 10, 2048


@cuda.jit
def evolve(x, out, k, norm):
    i = cuda.grid(1)
    if i < x.size:
        left = x[i - 1] if i > 0 else x[x.size - 1]
        out[i] = 0.5 * x[i] + 0.25 * left + 0.001 * k / norm[0]


@cuda.jit
def sum_squares(x, out):
    tile = cuda.shared.array(256, dtype=np.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    tile[t] = x[i] * x[i] if i < x.size else 0.0
    cuda.syncthreads()
    s = 128
    while s > 0:
        if t < s:
            tile[t] += tile[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, tile[0])


def host_reference(x0):
    x = x0.copy()
    for k in range(STEPS):
        norm = np.sqrt((x * x).sum()) + 1.0
        x = 0.5 * x + 0.25 * np.roll(x, 1) + 0.001 * k / norm
    return x


def main():
    ctl = sys.argv[1]
    x0 = np.random.default_rng(7).standard_normal(N)
    x = cuda.to_device(x0)
    y = cuda.device_array(N)  # evolve writes here; then the two swap
    acc = cuda.device_array(1)
    norm = cuda.device_array(1)
    print(f"numba_checkpoint: pid {os.getpid()}", flush=True)
    for k in range(STEPS):
        acc.copy_to_device(np.zeros(1))
        sum_squares[N // 256, 256](x, acc)
        norm.copy_to_device(np.sqrt(acc.copy_to_host()) + 1.0)
        evolve[N // 256, 256](x, y, np.float64(k), norm)
        x, y = y, x
        cuda.synchronize()
        print(f"numba_checkpoint: step {k}", flush=True)
        if k == PAUSE:
            print(f"numba_checkpoint: waiting at step {k}", flush=True)
            while not os.path.exists(os.path.join(ctl, "resume")):
                time.sleep(0.02)
            print("numba_checkpoint: resumed", flush=True)
    got = x.copy_to_host()
    want = host_reference(x0)
    if not np.allclose(got, want, rtol=1e-12, atol=1e-12):
        bad = int(np.argmax(~np.isclose(got, want, rtol=1e-12, atol=1e-12)))
        print(f"numba_checkpoint: MISMATCH at {bad}: {got[bad]!r} != {want[bad]!r}", flush=True)
        return 1
    print(f"numba_checkpoint: OK ({STEPS} steps, sum {got.sum():.12f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
