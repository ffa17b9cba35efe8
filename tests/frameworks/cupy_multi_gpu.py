"""CuPy on two GPUs in one process, as users write it (docs/interposer.md
"Several GPUs in one process"): arrays, elementwise kernels, reductions,
RawKernels and cuBLAS on each `cupy.cuda.Device`, arrays copied from one
GPU to the other, a stream of one GPU waiting for an event of the other,
and each GPU's memory pool. Needs two GPUs (`phos daemon --sim-gpus 2`);
runs as is on a machine with two GPUs too.

Every result is compared with numpy (fixed seed). Prints one line per check
and "cupy_multi_gpu: OK (<n> checks)" at the end; any mismatch raises."""
import cupy as cp
import numpy as np

from checks import Checks

checks = Checks("cupy_multi_gpu")
rng = np.random.default_rng(20261129)

SAXPY = cp.RawKernel(r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
""", "saxpy")


def close(name, got, want, rtol=1e-6, atol=1e-6):
    checks.close(name, cp.asnumpy(got) if isinstance(got, cp.ndarray) else got, want, rtol, atol)


def main():
    count = cp.cuda.runtime.getDeviceCount()
    checks.ok("GPUs seen", count >= 2, f"{count}")
    x = rng.standard_normal(4096).astype(np.float32)
    y = rng.standard_normal(4096).astype(np.float32)
    m = rng.standard_normal((64, 48)).astype(np.float32)
    n = rng.standard_normal((48, 32)).astype(np.float32)

    with cp.cuda.Device(0):
        x0 = cp.asarray(x)
        y0 = cp.asarray(y)
        close("GPU 0: elementwise", cp.sin(x0) * 2 + y0, np.sin(x) * 2 + y)
        close("GPU 0: reduction", cp.sum(x0 * y0), np.sum(x.astype(np.float64) * y), rtol=1e-4)
        checks.ok("GPU 0: array's device", x0.device.id == 0, f"{x0.device.id}")

    with cp.cuda.Device(1):
        checks.ok("current device inside Device(1)", cp.cuda.runtime.getDevice() == 1, f"{cp.cuda.runtime.getDevice()}")
        x1 = cp.asarray(x)
        y1 = cp.asarray(y)
        SAXPY((16,), (256,), (np.float32(3.0), x1, y1, np.int32(4096)))
        close("GPU 1: RawKernel saxpy", y1, 3.0 * x + y)
        close("GPU 1: cuBLAS matmul", cp.asarray(m) @ cp.asarray(n), m @ n, rtol=1e-4, atol=1e-4)
        checks.ok("GPU 1: array's device", x1.device.id == 1, f"{x1.device.id}")
        # An array of GPU 0 copied to GPU 1 (a peer copy).
        from0 = cp.empty_like(x1)
        from0.data.copy_from_device(x0.data, x0.nbytes)
        close("GPU 0 -> GPU 1 copy", from0, x)
        # GPU 1's stream records an event after a kernel ...
        s1 = cp.cuda.Stream(non_blocking=True)
        with s1:
            z1 = x1 * 4
        done = s1.record()

    with cp.cuda.Device(0):
        # ... which a stream of GPU 0 waits for before copying the result.
        s0 = cp.cuda.Stream(non_blocking=True)
        s0.wait_event(done)
        back = cp.empty_like(x0)
        with s0:
            back.data.copy_from_device_async(z1.data, z1.nbytes, stream=s0)
        s0.synchronize()
        close("GPU 1 -> GPU 0 copy after a cross-GPU event wait", back, x * 4)
        close("GPU 0 unchanged", x0, x)

    # Each GPU has its own memory pool; freeing returns memory on each.
    for d in (0, 1):
        with cp.cuda.Device(d):
            pool = cp.get_default_memory_pool()
            checks.ok(f"GPU {d}: pool holds memory", pool.used_bytes() > 0, f"{pool.used_bytes()} bytes")
    del x0, y0, x1, y1, from0, z1, back
    for d in (0, 1):
        with cp.cuda.Device(d):
            cp.get_default_memory_pool().free_all_blocks()
            cp.cuda.Device(d).synchronize()
    checks.done()


if __name__ == "__main__":
    main()
