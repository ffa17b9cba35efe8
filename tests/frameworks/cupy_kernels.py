"""CuPy, as a user writes it, each result checked against numpy on random
data. Run unmodified under `phos run` on the sim by tests/frameworks
(docs/compatibility.md); runs as is on a GPU too.

Prints one line per check and "cupy_kernels: OK (<n> checks ...)" at the
end; any mismatch raises (non-zero exit)."""
import sys

import cupy as cp
import numpy as np

rng = np.random.default_rng(20261126)
checked = []


def check(name, got, want, rtol=1e-5, atol=1e-6):
    got = cp.asnumpy(got) if isinstance(got, cp.ndarray) else got
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        bad = np.argmax(~np.isclose(got, want, rtol=rtol, atol=atol))
        raise AssertionError(f"{name}: element {bad}: got {np.ravel(got)[bad]!r}, want {np.ravel(want)[bad]!r}")
    checked.append(name)
    print(f"cupy_kernels: {name} matches numpy", flush=True)


def main():
    n = 3000
    x = rng.standard_normal(n)
    y = rng.standard_normal(n).astype(np.float32)
    dx, dy = cp.asarray(x), cp.asarray(y)

    check("elementwise arithmetic (float64)", dx * 2.5 - dx / 3 + 1, x * 2.5 - x / 3 + 1)
    check("elementwise math (float32)", cp.sin(dy) * cp.exp(dy * 0.5) + cp.sqrt(cp.abs(dy)),
          np.sin(y) * np.exp(y * np.float32(0.5)) + np.sqrt(np.abs(y)), rtol=1e-5, atol=1e-5)
    check("mixed types and broadcasting", (dx.reshape(60, 50) + cp.arange(50)) * dy.reshape(60, 50)[:, :1],
          (x.reshape(60, 50) + np.arange(50)) * y.reshape(60, 50)[:, :1], rtol=1e-6)

    check("sum", dx.sum(), x.sum(), rtol=1e-10)
    check("mean, std along an axis", cp.stack([dx.reshape(30, 100).mean(axis=0), dx.reshape(30, 100).std(axis=0)]),
          np.stack([x.reshape(30, 100).mean(axis=0), x.reshape(30, 100).std(axis=0)]), rtol=1e-10)
    check("max, argmin", cp.array([float(dx.max()), float(dx.argmin())]), np.array([x.max(), float(x.argmin())]))
    check("cumsum", cp.cumsum(dy), np.cumsum(y), rtol=1e-4, atol=1e-4)

    ints = rng.integers(-1000, 1000, size=n).astype(np.int32)
    di = cp.asarray(ints)
    check("integer ops", (di * 7) % 13 + (di >> 2), (ints * 7) % 13 + (ints >> 2), rtol=0, atol=0)
    check("boolean mask", dx[dx > 0.5], x[x > 0.5], rtol=0, atol=0)

    axpb = cp.ElementwiseKernel("float64 x, float64 a, float64 b", "float64 z", "z = a * x * x + b", "axpb")
    check("ElementwiseKernel", axpb(dx, 3.0, -1.0), 3.0 * x * x - 1.0, rtol=1e-12)

    sumsq = cp.ReductionKernel("float64 x", "float64 y", "x * x", "a + b", "y = a", "0", "sumsq")
    check("ReductionKernel", sumsq(dx), (x * x).sum(), rtol=1e-10)

    raw = cp.RawKernel(r'''
extern "C" __global__ void scale_shift(const float* x, float* out, float a, int n) {
  __shared__ float tile[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = a * tile[threadIdx.x] + tile[(threadIdx.x + 1) % blockDim.x];
}
''', "scale_shift")
    out = cp.empty_like(dy)
    raw(((n + 127) // 128,), (128,), (dy, out, np.float32(1.5), np.int32(n)))
    tiles = np.pad(y, (0, (-n) % 128)).reshape(-1, 128)
    want = (np.float32(1.5) * tiles + np.roll(tiles, -1, axis=1)).ravel()[:n]
    check("RawKernel (shared memory)", out, want, rtol=1e-6)

    mod = cp.RawModule(code=r'''
extern "C" {
__device__ int hits;
__global__ void count_positive(const double* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] > 0) atomicAdd(&hits, 1);
}
__global__ void negate(double* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = -x[i];
}
}
''')
    hits = cp.ndarray((1,), cp.int32, mod.get_global("hits"))
    hits[...] = 0
    mod.get_function("count_positive")(((n + 255) // 256,), (256,), (dx, np.int32(n)))
    neg = dx.copy()
    mod.get_function("negate")(((n + 255) // 256,), (256,), (neg, np.int32(n)))
    check("RawModule (atomics, a __device__ global, two kernels)",
          hits, np.array([(x > 0).sum()]), rtol=0, atol=0)
    check("RawModule second kernel", neg, -x, rtol=0, atol=0)

    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"cupy_kernels: OK ({len(checked)} checks on {name})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
