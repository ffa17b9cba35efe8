#!/usr/bin/env python3
"""Kernel time of numba-cuda and CuPy programs under `phos run` on the sim:
the interpreter's lockstep warps (phosd's default) against its per-thread
scheduler (`phos daemon --sim-interp-thread-at-a-time`), same build, same
run, alternating (docs/benchmarks.md "Lockstep warps: numba and CuPy").

  tests/bench/framework_kernel_bench.py --phos build/cli/phos \\
      --lib build/interposer/client/libphos.so [--python /opt/phos/frameworks-venv/bin/python] \\
      [--n 1048576] [--launches 5] [--rounds 2]

Each workload process compiles its kernels, runs each once (JIT and first
use), then times --launches launches, each followed by a synchronize, and
checks the result against numpy. Prints per kernel the median seconds per
launch with each scheduler (best round) and the ratio.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frameworks"))
from sim_daemon import SimDaemon  # noqa: E402

WORKLOAD = r'''
import json, sys, time
import numpy as np
which, n, launches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(7)
xs = rng.random(n, dtype=np.float32) + 0.5
ys = rng.random(n, dtype=np.float32) - 0.5
out = {}

def timed(name, run, sync, check):
    run(); sync()
    t = []
    for _ in range(launches):
        s = time.perf_counter(); run(); sync(); t.append(time.perf_counter() - s)
    check()
    out[name] = t

if which == "numba":
    from numba import cuda
    @cuda.jit
    def add(x, y, o):
        i = cuda.grid(1)
        if i < o.size:
            o[i] = x[i] + y[i]
    @cuda.jit
    def poly(x, o):
        i = cuda.grid(1)
        if i < o.size:
            v = x[i]
            acc = 0.0
            for k in range(16):
                acc = acc * v + (k + 1)
            o[i] = acc
    dx, dy, do = cuda.to_device(xs), cuda.to_device(ys), cuda.device_array(n, np.float32)
    grid = ((n + 255) // 256, 256)
    timed("numba add (1 M floats)", lambda: add[grid](dx, dy, do), cuda.synchronize,
          lambda: np.testing.assert_allclose(do.copy_to_host(), xs + ys, rtol=1e-6))
    def poly_ref():
        acc = np.zeros(n, np.float32)
        for k in range(16):
            acc = acc * xs + np.float32(k + 1)
        return acc
    timed("numba poly (16 fma per element)", lambda: poly[grid](dx, do), cuda.synchronize,
          lambda: np.testing.assert_allclose(do.copy_to_host(), poly_ref(), rtol=1e-4))
else:
    import cupy as cp
    dx, dy = cp.asarray(xs), cp.asarray(ys)
    axpy = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = 2.0f * x + y", "bench_axpy")
    res = {}
    sync = cp.cuda.Device().synchronize
    def run_axpy():
        res["axpy"] = axpy(dx, dy)
    timed("cupy ElementwiseKernel axpy (1 M floats)", run_axpy, sync,
          lambda: np.testing.assert_allclose(cp.asnumpy(res["axpy"]), 2 * xs + ys, rtol=1e-6))
    def run_sum():
        res["sum"] = cp.sum(dx)
    timed("cupy sum (reduction, 1 M floats)", run_sum, sync,
          lambda: np.testing.assert_allclose(float(res["sum"]), float(xs.astype(np.float64).sum()), rtol=1e-4))
print("BENCH " + json.dumps(out), flush=True)
'''


def run_workload(a, tmp, which, extra):
    script = os.path.join(tmp, "workload.py")
    with open(script, "w") as f:
        f.write(WORKLOAD)
    with SimDaemon(a.phos, tempfile.mkdtemp(dir=tmp), extra) as d:
        if not d.ready:
            sys.exit("phosd did not come up:\n" + d.log())
        cmd = [a.phos, "--socket", d.socket, "run", "--lib", a.lib, "--", a.python, script, which, str(a.n),
               str(a.launches)]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3600)
        for line in r.stdout.splitlines():
            if line.startswith("BENCH "):
                return json.loads(line[len("BENCH "):])
        sys.exit(f"{which} workload failed (exit {r.returncode}):\n{r.stdout}\n--- phosd ---\n{d.log()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phos", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--python", default="/opt/phos/frameworks-venv/bin/python")
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    schedulers = {"lockstep": [], "thread": ["--sim-interp-thread-at-a-time"]}
    best = {}  # (kernel, scheduler) -> best median
    with tempfile.TemporaryDirectory(prefix="phos_fwbench_") as tmp:
        for rnd in range(a.rounds):
            for which in ("numba", "cupy"):
                for sched, extra in schedulers.items():
                    got = run_workload(a, tmp, which, extra)
                    for kernel, times in got.items():
                        m = statistics.median(times)
                        key = (kernel, sched)
                        best[key] = min(best.get(key, m), m)
                        print(f"round {rnd + 1} {sched:8s} {kernel}: median {m * 1000:.1f} ms", flush=True)
    print("\n| kernel | per-thread scheduler | lockstep warps | speed-up |\n|---|---|---|---|")
    for kernel in sorted({k for k, _ in best}):
        t, l = best[(kernel, "thread")], best[(kernel, "lockstep")]
        print(f"| {kernel} | {t * 1000:.0f} ms | {l * 1000:.0f} ms | {t / l:.1f}x |")


if __name__ == "__main__":
    main()
