"""phos.optimal_frequency against a numeric minimisation of the cost it optimises.

W(f) = N·F·T·(R + N/(2f)) + N·O·f·T GPU-hours (phos/frequency.py). The
minimiser below knows nothing of the closed form: a log-grid scan, then a
golden-section search in the best bracket.
"""
import math
import unittest

import phos


def wasted_gpu_hours(f, n, failures_per_gpu_hour, overhead_h, hours=1000.0, restart_gpu_hours=5.0):
    return (n * failures_per_gpu_hour * hours * (restart_gpu_hours + n / (2.0 * f)) +
            n * overhead_h * f * hours)


def numeric_argmin(cost, lo=1e-6, hi=1e8, steps=4000, iters=200):
    log_lo, log_hi = math.log(lo), math.log(hi)
    grid = [math.exp(log_lo + (log_hi - log_lo) * i / steps) for i in range(steps + 1)]
    best = min(range(len(grid)), key=lambda i: cost(grid[i]))
    a, b = grid[max(best - 1, 0)], grid[min(best + 1, steps)]
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(iters):
        if cost(c) < cost(d):
            b = d
        else:
            a = c
        c, d = b - g * (b - a), a + g * (b - a)
    return (a + b) / 2


class OptimalFrequencyTest(unittest.TestCase):
    CASES = [
        # (GPUs, failures per GPU-hour, checkpoint stall in seconds)
        (1, 1e-4, 1.0),
        (8, 1e-3, 0.05),      # soft copy-on-write: tens of milliseconds
        (1024, 1e-3, 10.0),
        (16384, 2e-4, 60.0),  # a big job, stop-the-world checkpoints
        (3, 0.5, 1e-3),
    ]

    def test_matches_numeric_minimum_of_the_cost(self):
        for n, fail, overhead_s in self.CASES:
            with self.subTest(n=n, fail=fail, overhead_s=overhead_s):
                got = phos.optimal_frequency(n, fail, overhead_s)
                want = numeric_argmin(lambda f: wasted_gpu_hours(f, n, fail, overhead_s / 3600.0))
                self.assertAlmostEqual(got / want, 1.0, delta=1e-5)

    def test_optimum_does_not_depend_on_job_length_or_restart_cost(self):
        n, fail, overhead_s = 64, 1e-3, 2.0
        for hours, restart in [(1.0, 0.0), (10.0, 100.0), (1e5, 3.0)]:
            with self.subTest(hours=hours, restart=restart):
                want = numeric_argmin(lambda f: wasted_gpu_hours(f, n, fail, overhead_s / 3600.0, hours, restart))
                self.assertAlmostEqual(phos.optimal_frequency(n, fail, overhead_s) / want, 1.0, delta=1e-5)

    def test_known_value_and_units(self):
        # sqrt(1024 * 1e-3 / (2 * 10/3600)) = 13.5764... checkpoints per hour.
        self.assertAlmostEqual(phos.optimal_frequency(1024, 1e-3, 10.0), math.sqrt(1024 * 1e-3 * 3600 / 20.0))
        self.assertAlmostEqual(phos.optimal_interval_s(1024, 1e-3, 10.0),
                               3600.0 / phos.optimal_frequency(1024, 1e-3, 10.0))

    def test_scaling(self):
        base = phos.optimal_frequency(100, 1e-3, 4.0)
        self.assertAlmostEqual(phos.optimal_frequency(400, 1e-3, 4.0), 2 * base)   # sqrt(N)
        self.assertAlmostEqual(phos.optimal_frequency(100, 4e-3, 4.0), 2 * base)   # sqrt(F)
        self.assertAlmostEqual(phos.optimal_frequency(100, 1e-3, 16.0), base / 2)  # 1/sqrt(O)

    def test_edge_values_stay_finite_and_positive(self):
        for args in [(1, 1e-12, 1e6), (1e6, 10.0, 1e-6), (1, 1, 1), (2.5, 1e-3, 0.001)]:
            with self.subTest(args=args):
                f = phos.optimal_frequency(*args)
                self.assertTrue(math.isfinite(f) and f > 0, f)

    def test_invalid_inputs_raise_value_error(self):
        good = [8, 1e-3, 1.0]
        bad_values = [0, -1, -1e-9, float("nan"), float("inf"), float("-inf"), None, "8", True, [8]]
        for position in range(3):
            for bad in bad_values:
                args = list(good)
                args[position] = bad
                with self.subTest(position=position, value=bad):
                    with self.assertRaises(ValueError):
                        phos.optimal_frequency(*args)
                    with self.assertRaises(ValueError):
                        phos.optimal_interval_s(*args)


if __name__ == "__main__":
    unittest.main()
