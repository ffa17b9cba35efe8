"""CuPy's texture and surface objects (cupy.cuda.texture), as a user writes
them, checked against numpy on random data. Run unmodified under `phos run`
on the sim by tests/frameworks (docs/interposer.md "CUDA arrays, textures
and surfaces"); runs as is on a GPU too.

Prints one line per check and "cupy_textures: OK (<n> checks)" at the end;
any mismatch raises (non-zero exit)."""
import cupy as cp
import numpy as np
from cupy.cuda import runtime
from cupy.cuda import texture

rng = np.random.default_rng(20261127)
checked = []


def check(name, got, want, rtol=1e-5, atol=1e-5):
    got = cp.asnumpy(got) if isinstance(got, cp.ndarray) else np.asarray(got)
    if got.shape != np.shape(want) or not np.allclose(got, want, rtol=rtol, atol=atol):
        raise AssertionError(f"{name}: got {got!r}, want {want!r}")
    checked.append(name)
    print(f"cupy_textures: {name} matches numpy", flush=True)


SAMPLE = cp.RawKernel(r'''
extern "C" __global__ void sample(cudaTextureObject_t t, float* out, int w, int h, float shift) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + shift, y + shift);
}''', 'sample')

SURFACE = cp.RawKernel(r'''
extern "C" __global__ void twice(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) {
    float v = surf2Dread<float>(s, x * 4, y);
    surf2Dwrite(2.0f * v, s, x * 4, y);
  }
}''', 'twice')


def float_array(h, w, flags=0):
    fmt = texture.ChannelFormatDescriptor(32, 0, 0, 0, runtime.cudaChannelFormatKindFloat)
    return texture.CUDAarray(fmt, w, h, 0, flags)


def textures():
    h, w = 24, 40
    img = rng.standard_normal((h, w)).astype(np.float32)
    arr = float_array(h, w)
    arr.copy_from(img)
    back = np.empty_like(img)
    arr.copy_to(back)
    check("CUDAarray round trip (cudaMemcpy3D in and out)", back, img, rtol=0, atol=0)
    res = texture.ResourceDescriptor(runtime.cudaResourceTypeArray, cuArr=arr)
    out = cp.empty((h, w), dtype=cp.float32)
    grid, block = ((w + 31) // 32, h), (32,)
    # Point sampling at texel centres: the texels themselves.
    tex = texture.TextureObject(res, texture.TextureDescriptor(
        (runtime.cudaAddressModeClamp, runtime.cudaAddressModeClamp), runtime.cudaFilterModePoint,
        runtime.cudaReadModeElementType))
    SAMPLE(grid, block, (tex.ptr, out, np.int32(w), np.int32(h), np.float32(0.5)))
    check("tex2D point sampling at texel centres", out, img, rtol=0, atol=0)
    # Linear filtering half a texel off centre: the mean of 2x2 texels
    # (clamped at the edges); weights 0.5 are exact in 8-bit fixed point.
    tex_lin = texture.TextureObject(res, texture.TextureDescriptor(
        (runtime.cudaAddressModeClamp, runtime.cudaAddressModeClamp), runtime.cudaFilterModeLinear,
        runtime.cudaReadModeElementType))
    SAMPLE(grid, block, (tex_lin.ptr, out, np.int32(w), np.int32(h), np.float32(1.0)))
    padded = np.pad(img, ((0, 1), (0, 1)), mode="edge")
    want = (padded[:-1, :-1] + padded[1:, :-1] + padded[:-1, 1:] + padded[1:, 1:]) / 4
    check("tex2D linear filtering (2x2 means, clamp)", out, want)


def surfaces():
    h, w = 8, 50
    img = rng.standard_normal((h, w)).astype(np.float32)
    arr = float_array(h, w, runtime.cudaArraySurfaceLoadStore)
    arr.copy_from(img)
    surf = texture.SurfaceObject(texture.ResourceDescriptor(runtime.cudaResourceTypeArray, cuArr=arr))
    SURFACE(((w + 31) // 32, h), (32,), (surf.ptr, np.int32(w), np.int32(h)))
    back = np.empty_like(img)
    arr.copy_to(back)
    check("surf2Dread/surf2Dwrite doubling every element", back, 2 * img, rtol=0, atol=0)


textures()
surfaces()
print(f"cupy_textures: OK ({len(checked)} checks)")
