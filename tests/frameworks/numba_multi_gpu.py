"""numba-cuda on two GPUs in one process, as users write it
(docs/interposer.md "Several GPUs in one process"): `cuda.gpus[i]` as a
context manager, device arrays and a kernel on each GPU, a global of each
GPU's module instance, copies between the GPUs through the host and
through `copy_to_device` of another GPU's array. numba drives the driver
API (primary contexts, cuCtxPushCurrent/PopCurrent), not the runtime.
Needs two GPUs (`phos daemon --sim-gpus 2`); runs as is on a machine with
two GPUs too.

Prints one line per check and "numba_multi_gpu: OK (<n> checks)"; any
mismatch raises."""
import numpy as np
from numba import cuda

rng = np.random.default_rng(20261129)
checked = []


def check(name, got, want):
    if not np.allclose(got, want, rtol=1e-6, atol=1e-6):
        raise AssertionError(f"{name}: got {np.ravel(got)[:4]}, want {np.ravel(want)[:4]}")
    checked.append(name)
    print(f"numba_multi_gpu: {name} matches numpy", flush=True)


@cuda.jit
def scale_add(x, a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + b


def main():
    gpus = len(cuda.gpus)
    if gpus < 2:
        raise AssertionError(f"needs 2 GPUs, sees {gpus}")
    x = rng.standard_normal(5000).astype(np.float32)
    results = {}
    for g, (a, b) in enumerate([(2.0, 1.0), (-3.0, 0.5)]):
        with cuda.gpus[g]:
            if cuda.get_current_device().id != g:
                raise AssertionError(f"current device {cuda.get_current_device().id}, want {g}")
            dx = cuda.to_device(x)
            out = cuda.device_array_like(dx)
            scale_add[(x.size + 255) // 256, 256](dx, a, b, out)
            cuda.synchronize()
            check(f"GPU {g}: kernel", out.copy_to_host(), a * x + b)
            results[g] = out
    # GPU 1's array copied into a GPU 0 array (a device-to-device copy
    # between the GPUs), then checked on the host.
    with cuda.gpus[0]:
        dst = cuda.device_array_like(results[0])
        dst.copy_to_device(results[1])
        cuda.synchronize()
        check("GPU 1 -> GPU 0 copy", dst.copy_to_host(), -3.0 * x + 0.5)
    with cuda.gpus[1]:
        check("GPU 1 unchanged", results[1].copy_to_host(), -3.0 * x + 0.5)
    print(f"numba_multi_gpu: OK ({len(checked)} checks)", flush=True)


if __name__ == "__main__":
    main()
