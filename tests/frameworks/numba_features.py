"""numba-cuda beyond plain kernels, as users write it: warp intrinsics,
local and constant arrays, float16, complex math, record arrays, strided
views, dynamic shared memory, the ufunc and reduction front ends, streams
with events and pinned or mapped host memory, the on-disk kernel cache,
device functions in CUDA C and in PTX linked into kernels (`link=`),
`numba.cuda.random`.
Run unmodified under `phos run` by tests/frameworks; runs as is on a GPU.

Every result is compared with numpy (fixed seed). Managed memory
(`cuda.managed_array`) is not offered by phos: under phos it is checked to
be refused with the driver's CUDA_ERROR_NOT_SUPPORTED (named once, the
process goes on); on a GPU, to compute.
Prints one line per check and "numba_features: OK (<n> checks)"."""
import cmath
import math
import os
import sys
import tempfile

import numpy as np

# The kernel cache goes to a fresh directory (cache=True below), not the
# source tree.
os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="numba_cache_"))

from numba import cuda, float64, guvectorize, vectorize  # noqa: E402
from numba.cuda import fp16  # noqa: E402
from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float64  # noqa: E402

from checks import Checks  # noqa: E402

checks = Checks("numba_features")
rng = np.random.default_rng(20261129)


def close(name, got, want, rtol=1e-7, atol=1e-9):
    checks.close(name, got, want, rtol, atol)


@cuda.jit
def warp_sum(x, out):
    i = cuda.grid(1)
    v = x[i]
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        off //= 2
    if cuda.laneid == 0:
        out[i // 32] = v


@cuda.jit
def warp_ballot(x, out):
    i = cuda.grid(1)
    b = cuda.ballot_sync(0xFFFFFFFF, x[i] > 0)
    if cuda.laneid == 0:
        out[i // 32] = cuda.popc(b)


WEIGHTS = np.arange(8, dtype=np.float64)


@cuda.jit
def local_and_const(x, out):
    c = cuda.const.array_like(WEIGHTS)
    loc = cuda.local.array(8, float64)
    i = cuda.grid(1)
    for j in range(8):
        loc[j] = c[j] * x[i]
    s = 0.0
    for j in range(8):
        s += loc[j]
    out[i] = s


@cuda.jit
def half_fma(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = fp16.hfma(a[i], b[i], a[i])


@cuda.jit
def complex_math(z, out):
    i = cuda.grid(1)
    if i < z.size:
        out[i] = cmath.exp(z[i]) * abs(z[i])


@cuda.jit
def scale_records(rec):
    i = cuda.grid(1)
    if i < rec.size:
        rec[i].a = rec[i].a * rec[i].b


@cuda.jit
def negate_2d(x):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        x[i, j] = -x[i, j]


@cuda.jit
def reverse_dynamic_shared(x, out):
    sm = cuda.shared.array(0, dtype=np.float32)
    t = cuda.threadIdx.x
    sm[t] = x[t]
    cuda.syncthreads()
    out[t] = sm[cuda.blockDim.x - 1 - t]


@cuda.jit
def bit_ops(x, out):
    i = cuda.grid(1)
    out[i] = cuda.popc(x[i]) * 1000 + cuda.clz(x[i]) * 10 + (cuda.brev(x[i]) & 1)


@cuda.jit
def first_claim(slot):
    cuda.atomic.compare_and_swap(slot, 0, cuda.grid(1) + 1)


@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


@cuda.jit
def uniform_draws(states, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = xoroshiro128p_uniform_float64(states, i)


@cuda.jit(cache=True)
def cached_iota(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = i * 3


@vectorize(["float64(float64, float64)"], target="cuda")
def hypot_ufunc(a, b):
    return math.hypot(a, b)


@guvectorize(["void(float64[:], float64[:])"], "(n)->()", target="cuda")
def row_sum(a, out):
    t = 0.0
    for v in a:
        t += v
    out[0] = t


# Device functions in CUDA C, linked into numba kernels (`link=`): numba's
# ABI returns the result through the first pointer.
DEVICE_CU = r"""
extern "C" __device__ int cube_plus(double* ret, double x) {
  *ret = x * x * x + 1.0;
  return 0;
}
"""
cube_plus = cuda.declare_device("cube_plus", float64(float64))


def device_ptx(source):
    """`source` compiled to PTX with NVRTC (-rdc: its functions stay
    callable from other modules)."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"device.cu", 0, [], [])
    opts = [b"-arch=compute_90", b"-rdc=true"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    err, size = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    return ptx.rstrip(b"\0")


def linked_kernel(path):
    @cuda.jit(link=[path])
    def apply_cube_plus(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = cube_plus(x[i])

    return apply_cube_plus


def main():
    workdir = tempfile.mkdtemp(prefix="numba_link_")
    cu_path, ptx_path = os.path.join(workdir, "device.cu"), os.path.join(workdir, "device.ptx")
    with open(cu_path, "w") as f:
        f.write(DEVICE_CU)
    with open(ptx_path, "wb") as f:
        f.write(device_ptx(DEVICE_CU))
    xs = np.linspace(-2, 2, 64)
    for what, path in (("CUDA C source", cu_path), ("PTX", ptx_path)):
        ys = cuda.device_array(64)
        linked_kernel(path)[1, 64](cuda.to_device(xs), ys)
        close(f"a device function linked from {what} (link=)", ys.copy_to_host(), xs**3 + 1, 1e-12, 1e-12)

    x = rng.standard_normal(256).astype(np.float32)
    sums = cuda.device_array(8, dtype=np.float32)
    warp_sum[8, 32](cuda.to_device(x), sums)
    close("warp shuffle reduction (shfl_down_sync)", sums.copy_to_host(), x.reshape(8, 32).sum(axis=1), 1e-5, 1e-5)

    counts = cuda.device_array(4, dtype=np.int32)
    warp_ballot[1, 128](cuda.to_device(x[:128]), counts)
    close("ballot_sync + popc", counts.copy_to_host(), (x[:128].reshape(4, 32) > 0).sum(axis=1), 0, 0)

    v = rng.standard_normal(64)
    lc = cuda.device_array(64)
    local_and_const[2, 32](cuda.to_device(v), lc)
    close("local array + constant array", lc.copy_to_host(), v * WEIGHTS.sum())

    a16 = rng.standard_normal(64).astype(np.float16)
    b16 = rng.standard_normal(64).astype(np.float16)
    h = cuda.device_array(64, dtype=np.float16)
    half_fma[1, 64](cuda.to_device(a16), cuda.to_device(b16), h)
    close("float16 fma (fp16.hfma)", h.copy_to_host().astype(np.float32),
          a16.astype(np.float32) * b16.astype(np.float32) + a16.astype(np.float32), 2e-2, 2e-2)

    z = rng.standard_normal(64) + 1j * rng.standard_normal(64)
    zo = cuda.device_array(64, dtype=np.complex128)
    complex_math[1, 64](cuda.to_device(z), zo)
    close("complex math (cmath.exp, abs)", zo.copy_to_host(), np.exp(z) * np.abs(z), 1e-12, 1e-12)

    rec = np.zeros(32, dtype=np.dtype([("a", np.float64), ("b", np.int32)]))
    rec["a"] = np.arange(32)
    rec["b"] = 3
    drec = cuda.to_device(rec)
    scale_records[1, 32](drec)
    close("record (struct) arrays", drec.copy_to_host()["a"], np.arange(32) * 3.0, 0, 0)

    m = rng.standard_normal((64, 64))
    dm = cuda.to_device(m)
    negate_2d[(4, 4), (16, 16)](dm[::2, 1::3])
    want = m.copy()
    want[::2, 1::3] *= -1
    close("strided 2D view of a device array", dm.copy_to_host(), want, 0, 0)

    r = np.arange(128, dtype=np.float32)
    ro = cuda.device_array(128, dtype=np.float32)
    reverse_dynamic_shared[1, 128, 0, 128 * 4](cuda.to_device(r), ro)
    close("dynamic shared memory", ro.copy_to_host(), r[::-1], 0, 0)

    bits = rng.integers(1, 2**31 - 1, 64).astype(np.uint32)
    bo = cuda.device_array(64, dtype=np.int64)
    bit_ops[1, 64](cuda.to_device(bits), bo)
    want_bits = [bin(int(b)).count("1") * 1000 + (32 - int(b).bit_length()) * 10 + ((int(b) >> 31) & 1) for b in bits]
    close("popc / clz / brev", bo.copy_to_host(), want_bits, 0, 0)

    slot = cuda.to_device(np.zeros(1, dtype=np.int32))
    first_claim[1, 64](slot)
    claimed = int(slot.copy_to_host()[0])
    checks.ok("atomic compare_and_swap", 1 <= claimed <= 64, f"slot claimed by thread {claimed - 1}")

    p, q = rng.standard_normal(1000), rng.standard_normal(1000)
    close("@vectorize(target='cuda')", hypot_ufunc(p, q), np.hypot(p, q))
    g = rng.standard_normal((50, 20))
    close("@guvectorize(target='cuda')", row_sum(g), g.sum(axis=1))
    big = rng.standard_normal(100000)
    close("cuda.reduce", cuda.reduce(lambda s, t: s + t)(big), big.sum(), 1e-9, 1e-9)

    s = cuda.stream()
    pinned = cuda.pinned_array(1 << 16, dtype=np.float32)
    pinned[:] = 1.5
    dp = cuda.to_device(pinned, stream=s)
    e0, e1 = cuda.event(), cuda.event()
    e0.record(s)
    add_one[(pinned.size + 255) // 256, 256, s](dp)
    e1.record(s)
    back = cuda.pinned_array_like(pinned)
    dp.copy_to_host(back, stream=s)
    s.synchronize()
    ms = cuda.event_elapsed_time(e0, e1)
    close("stream, events, pinned async copies", back, np.full(pinned.size, 2.5), 0, 0)
    checks.ok("event elapsed time", ms >= 0, f"{ms:.3f} ms")

    mapped = cuda.mapped_array(256, dtype=np.float64)
    mapped[:] = np.arange(256)
    add_one[1, 256](mapped)
    cuda.synchronize()
    close("mapped (zero-copy) host array", mapped, np.arange(256) + 1.0, 0, 0)

    try:
        managed = cuda.managed_array(16, dtype=np.float64)
    except Exception as e:  # numba's CudaAPIError carries the driver's code
        managed, refused = None, str(e)
    if managed is None:  # phos
        checks.ok("managed memory refused by name", "CUDA_ERROR_NOT_SUPPORTED" in refused, refused.splitlines()[0])
    else:  # a GPU
        managed[:] = 1
        add_one[1, 32](managed)
        cuda.synchronize()
        close("managed memory", managed, np.full(16, 2.0), 0, 0)

    states = create_xoroshiro128p_states(4096, seed=42)
    draws = cuda.device_array(4096)
    uniform_draws[16, 256](states, draws)
    d = draws.copy_to_host()
    checks.ok("cuda.random (xoroshiro128p uniform draws)", 0.48 < d.mean() < 0.52 and d.min() >= 0 and d.max() < 1,
              f"mean {d.mean():.4f} of 4096 draws in [0, 1)")

    iota = cuda.device_array(10)
    cached_iota[1, 32](iota)
    close("@cuda.jit(cache=True)", iota.copy_to_host(), np.arange(10) * 3.0, 0, 0)

    free, total = cuda.current_context().get_memory_info()
    checks.ok("memory info", 0 < free <= total, f"{free} of {total} bytes free")
    checks.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
