"""More of CuPy, as users write it, beyond tests/frameworks/cupy_kernels.py:
sorting and searching (CUB and Thrust inside CuPy), index arithmetic,
histograms, einsum, complex and small integer types, `cupy.fuse`, a
`RawModule` of C++ templates (NVRTC name expressions), a cooperative
`RawKernel` (grid-wide sync), `cupyx.scipy`'s
ndimage, special and signal modules, CUB-accelerated reductions, the legacy
random API, batched and symmetric linear algebra, DLPack. Run unmodified
under `phos run` by tests/frameworks; runs as is on a GPU too.

Every result is compared with numpy (fixed seed). Prints one line per check
and "cupy_features: OK (<n> checks)" at the end; any mismatch raises."""
import math
import sys

import cupy as cp
import numpy as np

from checks import Checks

checks = Checks("cupy_features")
rng = np.random.default_rng(20261129)


def close(name, got, want, rtol=1e-9, atol=1e-12):
    checks.close(name, cp.asnumpy(got) if isinstance(got, cp.ndarray) else got, want, rtol, atol)


COOPERATIVE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void shift_after_grid_sync(int* x, int* out, int n) {
  cg::grid_group g = cg::this_grid();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  x[i] += i;
  g.sync();
  out[i] = x[(i + blockDim.x) % n];
}
"""

TEMPLATES = r"""
template <typename T>
__global__ void scale(T* x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
"""


def main():
    ints = rng.integers(0, 50, 2000)
    d = cp.asarray(ints)
    close("sort (int64)", cp.sort(d), np.sort(ints))
    close("unique", cp.unique(d), np.unique(ints))
    y = rng.standard_normal(1000)
    close("argsort (float64)", cp.argsort(cp.asarray(y)), np.argsort(y, kind="stable"))
    close("searchsorted", cp.searchsorted(cp.sort(d), cp.asarray([3, 17, 49])), np.searchsorted(np.sort(ints), [3, 17, 49]))
    close("nonzero", cp.nonzero(cp.asarray(y) > 0.5)[0], np.nonzero(y > 0.5)[0])
    close("where (3 arguments)", cp.where(cp.asarray(y) > 0, cp.asarray(y), 0.0), np.where(y > 0, y, 0.0))

    close("histogram (20 bins)", cp.histogram(cp.asarray(y), bins=20)[0], np.histogram(y, bins=20)[0])
    close("bincount", cp.bincount(cp.asarray(ints % 30)), np.bincount(ints % 30))
    acc = cp.zeros(10)
    cp.add.at(acc, cp.asarray([1, 1, 3, 9, 9, 9]), 1.0)
    close("add.at (scatter add)", acc, np.bincount([1, 1, 3, 9, 9, 9], minlength=10).astype(float))
    close("take", cp.take(cp.arange(20), cp.asarray([0, 5, 19])), [0, 5, 19])

    a = rng.standard_normal((4, 5, 6))
    b = rng.standard_normal((4, 6, 3))
    close("einsum (batched matmul)", cp.einsum("bij,bjk->bik", cp.asarray(a), cp.asarray(b)),
          np.einsum("bij,bjk->bik", a, b))
    close("tensordot", cp.tensordot(cp.asarray(a), cp.asarray(b), axes=([0, 2], [0, 1])),
          np.tensordot(a, b, axes=([0, 2], [0, 1])))

    z = rng.standard_normal(100) + 1j * rng.standard_normal(100)
    dz = cp.asarray(z)
    close("complex128 abs and angle", cp.abs(dz * dz.conj() + 1j) + cp.angle(dz), np.abs(z * z.conj() + 1j) + np.angle(z))
    i8 = rng.integers(-100, 100, 100).astype(np.int8)
    close("int8 floor division", cp.asarray(i8) // 3, i8 // 3)

    @cp.fuse()
    def fused(p, q):
        return cp.sin(p) * q + 2

    p, q = rng.standard_normal(100), rng.standard_normal(100)
    close("cupy.fuse", fused(cp.asarray(p), cp.asarray(q)), np.sin(p) * q + 2)

    mod = cp.RawModule(code=TEMPLATES, options=("-std=c++14",), name_expressions=("scale<float>", "scale<double>"))
    v = cp.arange(100, dtype=cp.float64)
    mod.get_function("scale<double>")((1,), (128,), (v, cp.float64(3), cp.int32(100)))
    w = cp.arange(100, dtype=cp.float32)
    mod.get_function("scale<float>")((1,), (128,), (w, cp.float32(0.5), cp.int32(100)))
    close("RawModule templates (name expressions)", v + w, np.arange(100) * 3.5)

    coop = cp.RawKernel(COOPERATIVE, "shift_after_grid_sync", enable_cooperative_groups=True)
    gx, gout = cp.zeros(4 * 64, dtype=cp.int32), cp.zeros(4 * 64, dtype=cp.int32)
    coop((4,), (64,), (gx, gout, cp.int32(4 * 64)))
    close("cooperative RawKernel (this_grid().sync())", gout, np.roll(np.arange(4 * 64), -64))

    import cupyx.scipy.ndimage as ndimage
    import cupyx.scipy.signal as signal
    import cupyx.scipy.special as special

    img = rng.standard_normal((32, 32))
    k = rng.standard_normal((3, 3))
    pad = np.pad(img, 1, mode="symmetric")  # ndimage's 'reflect' is numpy's 'symmetric'
    want = sum(k[2 - i, 2 - j] * pad[i:i + 32, j:j + 32] for i in range(3) for j in range(3))
    close("ndimage.convolve", ndimage.convolve(cp.asarray(img), cp.asarray(k)), want, 1e-9, 1e-9)
    blobs = np.zeros((8, 8), np.int32)
    blobs[0:2, 0:2] = 1
    blobs[5:7, 5:8] = 1
    blobs[0, 7] = 1
    checks.ok("ndimage.label", int(ndimage.label(cp.asarray(blobs))[1]) == 3, "3 components")
    x = rng.uniform(0.1, 5, 100)
    close("special.erf and gamma", special.erf(cp.asarray(x)) + special.gamma(cp.asarray(x)),
          [math.erf(t) + math.gamma(t) for t in x])
    s1, s2 = rng.standard_normal(200), rng.standard_normal(15)
    close("signal.convolve (direct)", signal.convolve(cp.asarray(s1), cp.asarray(s2), method="direct"), np.convolve(s1, s2))
    filt, prev = np.zeros_like(s1), 0.0
    for i, t in enumerate(s1):
        prev = t + 0.5 * prev
        filt[i] = prev
    close("signal.lfilter (one pole)", signal.lfilter(cp.asarray([1.0]), cp.asarray([1.0, -0.5]), cp.asarray(s1)), filt)

    from cupy._core import _accelerator

    routines, reductions = _accelerator.get_routine_accelerators(), _accelerator.get_reduction_accelerators()
    _accelerator.set_routine_accelerators(["cub"])
    _accelerator.set_reduction_accelerators(["cub"])
    try:
        big = rng.standard_normal(100000)
        dbig = cp.asarray(big)
        close("CUB sum and max", cp.stack([dbig.sum(), dbig.max()]), [big.sum(), big.max()], 1e-9, 1e-9)
        close("CUB cumsum", cp.cumsum(dbig), np.cumsum(big), 1e-9, 1e-8)
    finally:
        _accelerator.set_routine_accelerators(routines)
        _accelerator.set_reduction_accelerators(reductions)

    cp.random.seed(3)
    perm = cp.asnumpy(cp.random.permutation(100))
    checks.ok("random.permutation", sorted(perm.tolist()) == list(range(100)), "a permutation of 0..99")
    normal = cp.random.standard_normal(100000, dtype=cp.float32)
    checks.ok("random.standard_normal (float32)", abs(float(normal.mean())) < 0.02 and 0.98 < float(normal.std()) < 1.02,
              f"mean {float(normal.mean()):.4f}, std {float(normal.std()):.4f}")

    m = rng.standard_normal((3, 5, 5)) + 5 * np.eye(5)
    rhs = rng.standard_normal((3, 5, 1))
    close("linalg.solve (batched)", cp.linalg.solve(cp.asarray(m), cp.asarray(rhs)), np.linalg.solve(m, rhs), 1e-9, 1e-9)
    sym = m[0] + m[0].T
    close("linalg.eigvalsh", cp.linalg.eigvalsh(cp.asarray(sym)), np.linalg.eigvalsh(sym), 1e-9, 1e-9)
    close("linalg.matrix_power", cp.linalg.matrix_power(cp.asarray(m[0]), 3), np.linalg.matrix_power(m[0], 3), 1e-9, 1e-9)
    xp = np.linspace(0, 1, 20)
    qs = rng.uniform(0, 1, 30)
    close("interp", cp.interp(cp.asarray(qs), cp.asarray(xp), cp.asarray(np.sin(xp))), np.interp(qs, xp, np.sin(xp)))
    close("DLPack round trip", cp.from_dlpack(cp.arange(10)), np.arange(10))
    checks.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
