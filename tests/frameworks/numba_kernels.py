"""numba-cuda kernels, as a user writes them, each checked against numpy on
random data. Run unmodified under `phos run` on the sim by
tests/frameworks (docs/compatibility.md); runs as is on a GPU too.

Prints one line per kernel and "numba_kernels: OK (<n> kernels)" at the end;
any mismatch raises (non-zero exit)."""
import math
import sys

import numpy as np
from numba import cuda

rng = np.random.default_rng(20261126)
checked = []


def check(name, got, want, rtol=1e-5, atol=1e-6):
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        bad = np.argmax(~np.isclose(got, want, rtol=rtol, atol=atol))
        raise AssertionError(f"{name}: element {bad}: got {np.ravel(got)[bad]!r}, want {np.ravel(want)[bad]!r}")
    checked.append(name)
    print(f"numba_kernels: {name} matches numpy", flush=True)


@cuda.jit
def shout(x):
    i = cuda.grid(1)
    if i < 3:
        print("numba_kernels device print", i, x[i])


@cuda.jit
def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit(device=True)
def smooth(v):
    return v * v / (1 + abs(v))


@cuda.jit
def apply_smooth(x, out):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):  # grid-stride loop
        out[i] = smooth(x[i])


@cuda.jit
def block_sums(x, out):
    tile = cuda.shared.array(128, dtype=np.float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    tile[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    step = 64
    while step > 0:
        if t < step:
            tile[t] += tile[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        cuda.atomic.add(out, 0, tile[0])


@cuda.jit
def histogram(values, bins, maxima):
    i = cuda.grid(1)
    if i < values.size:
        v = values[i]
        cuda.atomic.add(bins, v % bins.size, 1)
        cuda.atomic.max(maxima, v % maxima.size, v)


@cuda.jit
def transcendental(x, out32, out64):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out64[i] = math.sin(v) * math.exp(-v) + math.sqrt(abs(v)) + math.log1p(abs(v)) + math.tanh(v) + math.pow(abs(v), 1.5)
        f = np.float32(v)
        out32[i] = math.cos(f) + math.exp(f * np.float32(0.5)) + math.atan2(f, np.float32(1.5))


@cuda.jit
def transpose(a, out):
    tile = cuda.shared.array((16, 17), dtype=np.float32)  # +1 column: no bank conflicts
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    if y < a.shape[0] and x < a.shape[1]:
        tile[ty, tx] = a[y, x]
    cuda.syncthreads()
    ox = cuda.blockIdx.y * 16 + tx
    oy = cuda.blockIdx.x * 16 + ty
    if oy < a.shape[1] and ox < a.shape[0]:
        out[oy, ox] = tile[tx, ty]


@cuda.jit
def grid_sync_shift(x, out):
    # A cooperative kernel: numba links it with CUDA's device runtime
    # (libcudadevrt, SASS only) and launches it cooperatively; on the sim
    # the interpreter supplies the runtime's cudaCG* functions.
    g = cuda.cg.this_grid()
    i = cuda.grid(1)
    x[i] += i
    g.sync()
    out[i] = x[(i + cuda.blockDim.x) % x.size]


def main():
    n = 3000
    x = rng.standard_normal(n)
    y = rng.standard_normal(n)
    dx, dy = cuda.to_device(x), cuda.to_device(y)

    out = cuda.device_array(n)
    axpy[(n + 127) // 128, 128](2.5, dx, dy, out)
    check("axpy (float64)", out.copy_to_host(), 2.5 * x + y)

    x32 = x.astype(np.float32)
    out32 = cuda.device_array(n, dtype=np.float32)
    axpy[(n + 127) // 128, 128](np.float32(-0.5), cuda.to_device(x32), cuda.to_device(y.astype(np.float32)), out32)
    check("axpy (float32)", out32.copy_to_host(), np.float32(-0.5) * x32 + y.astype(np.float32))

    sm = cuda.device_array(n)
    apply_smooth[4, 64](dx, sm)  # fewer threads than elements
    check("device function, grid-stride loop", sm.copy_to_host(), x * x / (1 + np.abs(x)))

    total = cuda.to_device(np.zeros(1))
    block_sums[(n + 127) // 128, 128](dx, total)
    check("shared-memory reduction + atomic add", total.copy_to_host()[0], x.sum(), rtol=1e-9, atol=1e-9)

    values = rng.integers(0, 1 << 20, size=n, dtype=np.int32)
    bins = cuda.to_device(np.zeros(16, dtype=np.int32))
    maxima = cuda.to_device(np.zeros(7, dtype=np.int32))
    histogram[(n + 127) // 128, 128](cuda.to_device(values), bins, maxima)
    check("atomic histogram", bins.copy_to_host(), np.bincount(values % 16, minlength=16))
    want_max = np.array([values[values % 7 == k].max() for k in range(7)], dtype=np.int32)
    check("atomic max", maxima.copy_to_host(), want_max)

    o32 = cuda.device_array(n, dtype=np.float32)
    o64 = cuda.device_array(n)
    transcendental[(n + 127) // 128, 128](dx, o32, o64)
    want64 = np.sin(x) * np.exp(-x) + np.sqrt(np.abs(x)) + np.log1p(np.abs(x)) + np.tanh(x) + np.abs(x) ** 1.5
    check("math (float64: sin exp sqrt log1p tanh pow)", o64.copy_to_host(), want64, rtol=1e-12, atol=1e-12)
    f = x.astype(np.float32)
    want32 = np.cos(f) + np.exp(f * np.float32(0.5)) + np.arctan2(f, np.float32(1.5))
    check("math (float32: cos exp atan2)", o32.copy_to_host(), want32, rtol=1e-5, atol=1e-5)

    a = rng.standard_normal((37, 53)).astype(np.float32)
    t = cuda.device_array((53, 37), dtype=np.float32)
    transpose[((53 + 15) // 16, (37 + 15) // 16), (16, 16)](cuda.to_device(a), t)
    check("2D grid, 2D shared tile (transpose)", t.copy_to_host(), a.T, rtol=0, atol=0)

    init = rng.integers(0, 1000, size=6 * 64).astype(np.int64)
    gx, gout = cuda.to_device(init), cuda.device_array(init.size, dtype=np.int64)
    grid_sync_shift[6, 64](gx, gout)
    shifted = init + np.arange(init.size)
    check("cooperative grid sync (this_grid().sync())", gout.copy_to_host(), np.roll(shifted, -64), rtol=0, atol=0)

    # print() in a kernel is device printf (vprintf): its lines reach this
    # process's stdout at the synchronization (run_under_phos.py --expect).
    shout[1, 4](cuda.to_device(np.array([0.5, 1.5, 2.5, 3.5])))
    cuda.synchronize()

    print(f"numba_kernels: OK ({len(checked)} checks on {cuda.get_current_device().name.decode() if isinstance(cuda.get_current_device().name, bytes) else cuda.get_current_device().name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
