"""What the framework checkpoint jobs share (numba_checkpoint_job.py,
cupy_checkpoint_job.py; driven by checkpoint_under_phos.py): the problem
size, the step at which a job waits to be checkpointed, the numpy
reference of the whole run, and the end-of-run check.

The computation: a state vector evolved for STEPS steps,
x <- 0.5 x + 0.25 roll(x, 1) + 0.001 k / (|x| + 1)."""
import os
import time

import numpy as np

STEPS, PAUSE, N = 24, 10, 2048


def initial_state():
    return np.random.default_rng(7).standard_normal(N)


def host_reference(x0):
    x = x0.copy()
    for k in range(STEPS):
        norm = np.sqrt((x * x).sum()) + 1.0
        x = 0.5 * x + 0.25 * np.roll(x, 1) + 0.001 * k / norm
    return x


def step_done(label, k, ctl):
    """Says step k is done; after step PAUSE, waits until CTL/resume exists
    (the driver checkpoints the job there and restores it)."""
    print(f"{label}: step {k}", flush=True)
    if k == PAUSE:
        print(f"{label}: waiting at step {k}", flush=True)
        while not os.path.exists(os.path.join(ctl, "resume")):
            time.sleep(0.02)
        print(f"{label}: resumed", flush=True)


def report(label, got, x0):
    """Prints "<label>: OK ..." when `got` is numpy's result; returns the exit status."""
    want = host_reference(x0)
    if not np.allclose(got, want, rtol=1e-12, atol=1e-12):
        bad = int(np.argmax(~np.isclose(got, want, rtol=1e-12, atol=1e-12)))
        print(f"{label}: MISMATCH at {bad}: {got[bad]!r} != {want[bad]!r}", flush=True)
        return 1
    print(f"{label}: OK ({STEPS} steps, sum {got.sum():.12f})", flush=True)
    return 0
