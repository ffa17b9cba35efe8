"""CuPy's CUDA graphs and its stream-ordered memory pool, as a user writes
them, checked against numpy on random data. Run unmodified under `phos run`
on the sim by tests/frameworks (docs/interposer.md "CUDA graphs",
"Stream-ordered allocation", graph memory nodes); runs as is on a GPU too.

Prints one line per check and "cupy_graphs_pools: OK (<n> checks ...)" at
the end; any mismatch raises (non-zero exit)."""
import sys

import cupy as cp
import numpy as np

rng = np.random.default_rng(20261127)
checked = []


def check(name, got, want, rtol=1e-6, atol=1e-6):
    got = cp.asnumpy(got) if isinstance(got, cp.ndarray) else np.asarray(got)
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        bad = np.argmax(~np.isclose(got, want, rtol=rtol, atol=atol))
        raise AssertionError(f"{name}: element {bad}: got {np.ravel(got)[bad]!r}, want {np.ravel(want)[bad]!r}")
    checked.append(name)
    print(f"cupy_graphs_pools: {name} matches numpy", flush=True)


def graphs():
    n = 2000
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.asarray(rng.standard_normal(n))
        y = cp.empty_like(x)
        z = cp.empty_like(x)
        s.synchronize()
        # Capture: the kernels are recorded, not run.
        s.begin_capture()
        cp.multiply(x, 3.0, out=y)
        cp.add(y, 1.0, out=y)
        cp.sin(y, out=z)
        cp.multiply(z, y, out=z)
        if not s.is_capturing():
            raise AssertionError("the stream does not say it is capturing")
        g = s.end_capture()
        # Replays read x as it is at each launch.
        for launch in range(3):
            xs = rng.standard_normal(n)
            x.set(xs, stream=s)
            g.launch(stream=s)
            s.synchronize()
            want_y = xs * 3.0 + 1.0
            check(f"graph replay {launch + 1} (4 kernels)", z, np.sin(want_y) * want_y, rtol=1e-12, atol=1e-12)
    # A graph launched on another stream than the one it was captured on.
    other = cp.cuda.Stream(non_blocking=True)
    xs = rng.standard_normal(n)
    x.set(xs)
    cp.cuda.Device().synchronize()
    g.launch(stream=other)
    other.synchronize()
    want_y = xs * 3.0 + 1.0
    check("graph launched on another stream", z, np.sin(want_y) * want_y, rtol=1e-12, atol=1e-12)


def async_pool():
    if not cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMemoryPoolsSupported, 0):
        raise AssertionError("the device says it has no memory pools")
    pool = cp.cuda.MemoryAsyncPool()
    previous = cp.cuda.get_allocator()
    cp.cuda.set_allocator(pool.malloc)
    try:
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            a = rng.standard_normal((64, 50))
            b = rng.standard_normal((64, 50))
            da, db = cp.asarray(a), cp.asarray(b)
            total = cp.zeros(50)
            for i in range(20):  # temporaries allocated and freed in stream order
                total += (da * (i + 1) - db).sum(axis=0)
            want = sum((a * (i + 1) - b).sum(axis=0) for i in range(20))
            check("MemoryAsyncPool: 20 rounds of temporaries", total, want, rtol=1e-10, atol=1e-9)
            used = pool.used_bytes()
            if used <= 0:
                raise AssertionError(f"the pool says it holds {used} bytes with arrays alive")
            del da, db, total
            s.synchronize()
            pool.free_all_blocks(stream=s)
            checked.append("MemoryAsyncPool accounting")
            print(f"cupy_graphs_pools: MemoryAsyncPool held {used} bytes while arrays lived", flush=True)
    finally:
        cp.cuda.set_allocator(previous)


def captured_temporaries():
    """Temporaries allocated inside a capture from the stream-ordered pool:
    CUDA (and phos) make graph memory nodes of them."""
    pool = cp.cuda.MemoryAsyncPool()
    previous = cp.cuda.get_allocator()
    cp.cuda.set_allocator(pool.malloc)
    try:
        n = 1500
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            x = cp.asarray(rng.standard_normal(n))
            out = cp.empty_like(x)
            s.synchronize()
            s.begin_capture()
            t = cp.exp(x) * 2.0  # two temporaries from the pool, inside the graph
            cp.add(t, x, out=out)
            del t
            g = s.end_capture()
            for launch in range(3):
                xs = rng.standard_normal(n)
                x.set(xs, stream=s)
                g.launch(stream=s)
                s.synchronize()
                check(f"graph with memory nodes, replay {launch + 1}", out, np.exp(xs) * 2.0 + xs,
                      rtol=1e-12, atol=1e-12)
    finally:
        cp.cuda.set_allocator(previous)


def main():
    graphs()
    async_pool()
    captured_temporaries()
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"cupy_graphs_pools: OK ({len(checked)} checks on {name})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
