"""How often to checkpoint: the optimum of the PhoenixOS appendix.

Setting (all times in hours):
    N   GPUs of the job; a failure of any of them stops all of them,
    F   failures per GPU-hour, so the job fails N·F times per hour,
    O   the time every GPU loses to one checkpoint (the stall),
    f   checkpoints per hour (the unknown), one every 1/f hours,
    T   the job's length; R the GPU-hours a failure costs whatever f is
        (restart, reloading the image).

A failure comes on average half an interval, 1/(2f) hours, after the last
checkpoint; the N GPUs redo that work: N/(2f) GPU-hours. Over T hours the
job fails N·F·T times and takes f·T checkpoints of N·O GPU-hours each, so
the GPU-hours wasted are

    W(f) = N·F·T·(R + N/(2f)) + N·O·f·T.

W is convex in f > 0 (W'' = N²·F·T/f³ > 0), and

    W'(f) = -N²·F·T/(2f²) + N·O·T = 0   <=>   f² = N·F/(2·O),

so the optimum is f* = sqrt(N·F / (2·O)) checkpoints per hour, independent of
T and R. Faster checkpoints (smaller O, what soft copy-on-write buys) and
bigger jobs (larger N) both call for more frequent checkpoints.
"""
import math
import numbers

SECONDS_PER_HOUR = 3600.0


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError("%s must be a positive number (got %r)" % (name, value))
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError("%s must be a positive, finite number (got %r)" % (name, value))
    return v


def optimal_frequency(n_gpus, failures_per_gpu_hour, overhead_s):
    """Checkpoints per hour that waste the fewest GPU-hours: sqrt(N·F / (2·O)).

    Derivation (the PhoenixOS appendix; times in hours): with N GPUs failing
    F times per GPU-hour each, a checkpoint stalling every GPU for O hours
    and f checkpoints per hour, a job of T hours wastes

        W(f) = N·F·T·(R + N/(2f)) + N·O·f·T   GPU-hours:

    N·F·T failures, each losing half an interval (1/(2f) h) on all N GPUs
    plus a fixed R; and f·T checkpoints of N·O GPU-hours each. W is convex;
    W'(f) = 0 gives f* = sqrt(N·F / (2·O)).

    Args:
        n_gpus: N, GPUs in the job (> 0; a failure of one stops all).
        failures_per_gpu_hour: F, failures per GPU per hour (> 0), e.g.
            1/MTBF of one GPU in hours.
        overhead_s: O, seconds one checkpoint stalls the job (> 0): the
            stall_us of a checkpoint's result / 1e6.

    Returns:
        f*, checkpoints per hour (float). The interval is 3600 / f* seconds
        (optimal_interval_s).

    Raises:
        ValueError: an argument is not a positive, finite number.

    >>> round(optimal_frequency(1024, 1e-3, 10.0), 2)   # 10 s stall
    13.58
    """
    n = _positive("n_gpus", n_gpus)
    f = _positive("failures_per_gpu_hour", failures_per_gpu_hour)
    o_hours = _positive("overhead_s", overhead_s) / SECONDS_PER_HOUR
    return math.sqrt(n * f / (2.0 * o_hours))


def optimal_interval_s(n_gpus, failures_per_gpu_hour, overhead_s):
    """Seconds between checkpoints at the optimum: 3600 / optimal_frequency(...)."""
    return SECONDS_PER_HOUR / optimal_frequency(n_gpus, failures_per_gpu_hour, overhead_s)
