"""A numba-cuda job checkpointed mid-run (tests/frameworks/checkpoint_under_phos.py;
the computation and the pause: checkpoint_job.py). Two kernels per step, one
with a shared-memory reduction and an atomic. Usage: numba_checkpoint_job.py CTL_DIR"""
import os
import sys

import numpy as np
from numba import cuda

from checkpoint_job import N, STEPS, initial_state, report, step_done


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


def main():
    x0 = initial_state()
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
        step_done("numba_checkpoint", k, sys.argv[1])
    return report("numba_checkpoint", x.copy_to_host(), x0)


if __name__ == "__main__":
    sys.exit(main())
