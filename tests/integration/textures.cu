// CUDA arrays, texture objects and surface objects under phos
// (docs/interposer.md "CUDA arrays, textures and surfaces"), checked
// against CPU references on random data (seed printed; PHOS_TEST_SEED
// replays): 2D float textures with linear filtering, normalized
// coordinates and each address mode; 8-bit RGBA read as normalized floats
// with a border; tex1Dfetch of linear memory; pitched 2D memory; a 3D
// array and a layered 2D array (cudaMemcpy3D in and out); texture gather;
// surfaces written and read by kernels (trap/zero boundary modes); the
// descriptor getters; and the errors CUDA gives for misuse.
#define PHOS_PROGRAM_NAME "textures"
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "program_checks.h"

namespace {

__global__ void Sample2D(cudaTextureObject_t t, const float2* at, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float>(t, at[i].x, at[i].y);
}
__global__ void Sample2DRgba(cudaTextureObject_t t, const float2* at, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float4>(t, at[i].x, at[i].y);
}
__global__ void Fetch1D(cudaTextureObject_t t, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<int>(t, i - 3);  // 3 below the start, some past the end
}
__global__ void Sample3D(cudaTextureObject_t t, const float4* at, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex3D<float>(t, at[i].x, at[i].y, at[i].z);
}
__global__ void SampleLayered(cudaTextureObject_t t, const float4* at, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2DLayered<float>(t, at[i].x, at[i].y, static_cast<int>(at[i].z));
}
// Cube maps: direction (x, y, z) per sample; the layered form takes a cube
// index in `w`.
__global__ void SampleCube(cudaTextureObject_t t, const float4* at, float* out, int n, int layered) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = layered ? texCubemapLayered<float>(t, at[i].x, at[i].y, at[i].z, static_cast<int>(at[i].w))
                   : texCubemap<float>(t, at[i].x, at[i].y, at[i].z);
}
// Surfaces of a cube map: texel (x, y) of face f doubled in place (the
// faces are layers).
__global__ void SurfaceCubeDouble(cudaSurfaceObject_t s, int w) {
  int x = threadIdx.x, y = blockIdx.x % w, f = blockIdx.x / w;
  float v = surfCubemapread<float>(s, x * 4, y, f);
  surfCubemapwrite(v * 2.0f, s, x * 4, y, f);
}

// A mip chain sampled at an explicit level of detail (tex.level).
__global__ void SampleLod(cudaTextureObject_t t, const float4* at, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2DLod<float>(t, at[i].x, at[i].y, at[i].z);
}

__global__ void Gather(cudaTextureObject_t t, const float2* at, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2Dgather<float4>(t, at[i].x, at[i].y, 0);
}
__global__ void SurfaceScale(cudaSurfaceObject_t s, int w, int h, float k) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) {
    float v = surf2Dread<float>(s, x * 4, y);
    surf2Dwrite(v * k + static_cast<float>(x + y), s, x * 4, y);
  }
}
__global__ void SurfaceZeroBorder(cudaSurfaceObject_t s, int w, float* out) {
  // One past the end of each row with cudaBoundaryModeZero reads 0.
  out[threadIdx.x] = surf2Dread<float>(s, (w + static_cast<int>(threadIdx.x)) * 4, 0, cudaBoundaryModeZero);
}

// ---- CPU references (CUDA Programming Guide, "Texture Fetching")

int AddressIndex(int i, int n, cudaTextureAddressMode m, bool normalized, bool* border) {
  *border = false;
  if (i >= 0 && i < n) return i;
  if (!normalized && (m == cudaAddressModeWrap || m == cudaAddressModeMirror)) m = cudaAddressModeClamp;
  switch (m) {
    case cudaAddressModeWrap: return ((i % n) + n) % n;
    case cudaAddressModeMirror: {
      int r = ((i % (2 * n)) + 2 * n) % (2 * n);
      return r < n ? r : 2 * n - 1 - r;
    }
    case cudaAddressModeBorder: *border = true; return 0;
    default: return i < 0 ? 0 : n - 1;
  }
}

float RefSample2D(const std::vector<float>& img, int w, int h, float x, float y, cudaTextureAddressMode m,
                  bool linear, bool normalized) {
  if (normalized) {
    x *= static_cast<float>(w);
    y *= static_cast<float>(h);
  }
  auto texel = [&](int i, int j) {
    bool bi, bj;
    i = AddressIndex(i, w, m, normalized, &bi);
    j = AddressIndex(j, h, m, normalized, &bj);
    return (bi || bj) ? 0.0f : img[static_cast<size_t>(j) * w + i];
  };
  if (!linear) return texel(static_cast<int>(std::floor(x)), static_cast<int>(std::floor(y)));
  const float xb = x - 0.5f, yb = y - 0.5f;
  const float fx = std::floor(xb), fy = std::floor(yb);
  // 9-bit fixed point weights with 8 fractional bits, as the hardware.
  const float a = std::round((xb - fx) * 256.0f) / 256.0f, b = std::round((yb - fy) * 256.0f) / 256.0f;
  const int i = static_cast<int>(fx), j = static_cast<int>(fy);
  return (1 - a) * (1 - b) * texel(i, j) + a * (1 - b) * texel(i + 1, j) + (1 - a) * b * texel(i, j + 1) +
         a * b * texel(i + 1, j + 1);
}

bool Near(float a, float b) { return std::fabs(a - b) <= 1e-4f * (1.0f + std::fabs(b)); }

template <typename T>
T* DeviceCopy(const std::vector<T>& v) {
  T* d = nullptr;
  if (cudaMalloc(&d, v.size() * sizeof(T)) != cudaSuccess) return nullptr;
  if (cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;
  return d;
}

unsigned Seed() {
  const char* s = std::getenv("PHOS_TEST_SEED");
  return s != nullptr ? static_cast<unsigned>(std::strtoul(s, nullptr, 10)) : std::random_device{}();
}

int Test2DFloat(std::mt19937& rng) {
  const int w = 37, h = 23, n = 200;
  std::uniform_real_distribution<float> val(-10.0f, 10.0f), coord(-0.4f, 1.4f);
  std::vector<float> img(static_cast<size_t>(w) * h);
  for (float& v : img) v = val(rng);
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
  EXPECT(fmt.x == 32 && fmt.y == 0 && fmt.f == cudaChannelFormatKindFloat);
  cudaArray_t arr = nullptr;
  CHECK(cudaMallocArray(&arr, &fmt, w, h));
  CHECK(cudaMemcpy2DToArray(arr, 0, 0, img.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  cudaChannelFormatDesc got{};
  cudaExtent ext{};
  unsigned flags = 99;
  CHECK(cudaArrayGetInfo(&got, &ext, &flags, arr));
  EXPECT(got.x == 32 && ext.width == static_cast<size_t>(w) && ext.height == static_cast<size_t>(h) &&
         ext.depth == 0 && flags == 0);
  // Round trip through the array.
  std::vector<float> back(img.size());
  CHECK(cudaMemcpy2DFromArray(back.data(), w * sizeof(float), arr, 0, 0, w * sizeof(float), h,
                              cudaMemcpyDeviceToHost));
  EXPECT(back == img);

  std::vector<float2> at(n);
  for (auto& p : at) p = make_float2(coord(rng), coord(rng));
  float2* d_at = DeviceCopy(at);
  float* d_out = nullptr;
  CHECK(cudaMalloc(&d_out, n * sizeof(float)));
  EXPECT(d_at != nullptr);
  const cudaTextureAddressMode modes[] = {cudaAddressModeWrap, cudaAddressModeClamp, cudaAddressModeMirror,
                                          cudaAddressModeBorder};
  for (cudaTextureAddressMode m : modes) {
    for (int linear = 0; linear < 2; ++linear) {
      for (int normalized = 0; normalized < 2; ++normalized) {
        cudaResourceDesc res{};
        res.resType = cudaResourceTypeArray;
        res.res.array.array = arr;
        cudaTextureDesc td{};
        td.addressMode[0] = td.addressMode[1] = m;
        td.filterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
        td.readMode = cudaReadModeElementType;
        td.normalizedCoords = normalized;
        cudaTextureObject_t t = 0;
        CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
        EXPECT(t != 0);
        // Unnormalized coordinates: scale the [0,1) ones to texels.
        std::vector<float2> pts = at;
        if (!normalized) {
          for (auto& p : pts) p = make_float2(p.x * w, p.y * h);
          CHECK(cudaMemcpy(d_at, pts.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
        } else {
          CHECK(cudaMemcpy(d_at, at.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
        }
        Sample2D<<<(n + 63) / 64, 64>>>(t, d_at, d_out, n);
        CHECK(cudaGetLastError());
        std::vector<float> out(n);
        CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) {
          const float want = RefSample2D(img, w, h, pts[i].x, pts[i].y, m, linear, normalized);
          if (!Near(out[i], want)) {
            PHOS_CHECK_FAIL(1, "2D float mode %d linear %d normalized %d at (%g, %g): got %g, want %g",
                            static_cast<int>(m), linear, normalized, pts[i].x, pts[i].y, out[i], want);
          }
        }
        cudaTextureDesc back_td{};
        CHECK(cudaGetTextureObjectTextureDesc(&back_td, t));
        EXPECT(back_td.addressMode[0] == m && back_td.filterMode == td.filterMode &&
               back_td.normalizedCoords == normalized);
        cudaResourceDesc back_res{};
        CHECK(cudaGetTextureObjectResourceDesc(&back_res, t));
        EXPECT(back_res.resType == cudaResourceTypeArray && back_res.res.array.array == arr);
        CHECK(cudaDestroyTextureObject(t));
      }
    }
  }
  // Texture gather: the four texels of the bilinear footprint, channel 0.
  {
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = arr;
    cudaTextureDesc td{};
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t t = 0;
    CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
    std::vector<float2> pts(n);
    for (int i = 0; i < n; ++i) pts[i] = make_float2(at[i].x * w, at[i].y * h);
    CHECK(cudaMemcpy(d_at, pts.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
    float4* d_g = nullptr;
    CHECK(cudaMalloc(&d_g, n * sizeof(float4)));
    Gather<<<(n + 63) / 64, 64>>>(t, d_at, d_g, n);
    std::vector<float4> g(n);
    CHECK(cudaMemcpy(g.data(), d_g, n * sizeof(float4), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      const int i0 = static_cast<int>(std::floor(pts[i].x - 0.5f)), j0 = static_cast<int>(std::floor(pts[i].y - 0.5f));
      auto T = [&](int a, int b) {
        bool border;
        a = AddressIndex(a, w, cudaAddressModeClamp, false, &border);
        b = AddressIndex(b, h, cudaAddressModeClamp, false, &border);
        return img[static_cast<size_t>(b) * w + a];
      };
      EXPECT(g[i].x == T(i0, j0 + 1) && g[i].y == T(i0 + 1, j0 + 1) && g[i].z == T(i0 + 1, j0) && g[i].w == T(i0, j0));
    }
    CHECK(cudaFree(d_g));
    CHECK(cudaDestroyTextureObject(t));
  }
  CHECK(cudaFree(d_at));
  CHECK(cudaFree(d_out));
  CHECK(cudaFreeArray(arr));
  std::printf("textures: 2D float (4 address modes x point/linear x normalized or not), gather: OK\n");
  return 0;
}

int TestRgba8(std::mt19937& rng) {
  const int w = 16, h = 9, n = 120;
  std::vector<uchar4> img(static_cast<size_t>(w) * h);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& p : img) p = make_uchar4(byte(rng), byte(rng), byte(rng), byte(rng));
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<uchar4>();
  cudaArray_t arr = nullptr;
  CHECK(cudaMallocArray(&arr, &fmt, w, h));
  // The deprecated 1D-style copy, running on across rows.
  CHECK(cudaMemcpyToArray(arr, 0, 0, img.data(), img.size() * sizeof(uchar4), cudaMemcpyHostToDevice));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = arr;
  cudaTextureDesc td{};
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeBorder;
  td.borderColor[0] = 0.25f;
  td.borderColor[3] = 0.5f;
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeNormalizedFloat;
  cudaTextureObject_t t = 0;
  CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
  std::uniform_real_distribution<float> cx(-2.0f, w + 2.0f), cy(-2.0f, h + 2.0f);
  std::vector<float2> at(n);
  for (auto& p : at) p = make_float2(cx(rng), cy(rng));
  float2* d_at = DeviceCopy(at);
  float4* d_out = nullptr;
  CHECK(cudaMalloc(&d_out, n * sizeof(float4)));
  Sample2DRgba<<<(n + 63) / 64, 64>>>(t, d_at, d_out, n);
  std::vector<float4> out(n);
  CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(float4), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    const int x = static_cast<int>(std::floor(at[i].x)), y = static_cast<int>(std::floor(at[i].y));
    float4 want;
    if (x < 0 || x >= w || y < 0 || y >= h) {
      want = make_float4(0.25f, 0.0f, 0.0f, 0.5f);
    } else {
      const uchar4 p = img[static_cast<size_t>(y) * w + x];
      want = make_float4(p.x / 255.0f, p.y / 255.0f, p.z / 255.0f, p.w / 255.0f);
    }
    if (!Near(out[i].x, want.x) || !Near(out[i].y, want.y) || !Near(out[i].z, want.z) || !Near(out[i].w, want.w)) {
      PHOS_CHECK_FAIL(1, "rgba8 at (%g, %g): got (%g %g %g %g), want (%g %g %g %g)", at[i].x, at[i].y, out[i].x,
                      out[i].y, out[i].z, out[i].w, want.x, want.y, want.z, want.w);
    }
  }
  // Read back with the deprecated call too.
  std::vector<uchar4> back(img.size());
  CHECK(cudaMemcpyFromArray(back.data(), arr, 0, 0, back.size() * sizeof(uchar4), cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(back.data(), img.data(), img.size() * sizeof(uchar4)) == 0);
  CHECK(cudaDestroyTextureObject(t));
  CHECK(cudaFree(d_at));
  CHECK(cudaFree(d_out));
  CHECK(cudaFreeArray(arr));
  std::printf("textures: 8-bit RGBA read as normalized floats, border colour: OK\n");
  return 0;
}

int TestLinearAndPitched(std::mt19937& rng) {
  const int n = 100;
  std::vector<int> v(n);
  std::uniform_int_distribution<int> iv(-1000000, 1000000);
  for (int& x : v) x = iv(rng);
  int* d_v = DeviceCopy(v);
  EXPECT(d_v != nullptr);
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeLinear;
  res.res.linear.devPtr = d_v;
  res.res.linear.desc = cudaCreateChannelDesc<int>();
  res.res.linear.sizeInBytes = n * sizeof(int);
  cudaTextureDesc td{};
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t t = 0;
  CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
  int* d_out = nullptr;
  const int m = n + 6;
  CHECK(cudaMalloc(&d_out, m * sizeof(int)));
  Fetch1D<<<(m + 63) / 64, 64>>>(t, d_out, m);
  std::vector<int> out(m);
  CHECK(cudaMemcpy(out.data(), d_out, m * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < m; ++i) {
    const int k = i - 3;
    EXPECT(out[i] == ((k >= 0 && k < n) ? v[k] : 0));
  }
  CHECK(cudaDestroyTextureObject(t));
  // Pitched 2D memory (cudaMallocPitch) sampled as a 2D texture.
  const int w = 21, h = 13;
  std::vector<float> img(static_cast<size_t>(w) * h);
  std::uniform_real_distribution<float> val(0.0f, 1.0f);
  for (float& x : img) x = val(rng);
  float* d_img = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&d_img), &pitch, w * sizeof(float), h));
  CHECK(cudaMemcpy2D(d_img, pitch, img.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  cudaResourceDesc pres{};
  pres.resType = cudaResourceTypePitch2D;
  pres.res.pitch2D.devPtr = d_img;
  pres.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  pres.res.pitch2D.width = w;
  pres.res.pitch2D.height = h;
  pres.res.pitch2D.pitchInBytes = pitch;
  cudaTextureDesc ptd{};
  ptd.addressMode[0] = ptd.addressMode[1] = cudaAddressModeClamp;
  ptd.filterMode = cudaFilterModeLinear;
  ptd.readMode = cudaReadModeElementType;
  CHECK(cudaCreateTextureObject(&t, &pres, &ptd, nullptr));
  std::vector<float2> at(64);
  std::uniform_real_distribution<float> c(-1.0f, 23.0f);
  for (auto& p : at) p = make_float2(c(rng), c(rng) * h / 23.0f);
  float2* d_at = DeviceCopy(at);
  float* d_s = nullptr;
  CHECK(cudaMalloc(&d_s, at.size() * sizeof(float)));
  Sample2D<<<1, 64>>>(t, d_at, d_s, static_cast<int>(at.size()));
  std::vector<float> s(at.size());
  CHECK(cudaMemcpy(s.data(), d_s, s.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < at.size(); ++i) {
    const float want = RefSample2D(img, w, h, at[i].x, at[i].y, cudaAddressModeClamp, true, false);
    if (!Near(s[i], want)) PHOS_CHECK_FAIL(1, "pitch2D at (%g, %g): got %g want %g", at[i].x, at[i].y, s[i], want);
  }
  CHECK(cudaDestroyTextureObject(t));
  CHECK(cudaFree(d_at));
  CHECK(cudaFree(d_s));
  CHECK(cudaFree(d_img));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_v));
  std::printf("textures: tex1Dfetch of linear memory, pitched 2D memory: OK\n");
  return 0;
}

int Test3DAndLayered(std::mt19937& rng) {
  const int w = 9, h = 7, d = 5, n = 150;
  std::vector<float> vol(static_cast<size_t>(w) * h * d);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  for (float& x : vol) x = val(rng);
  for (int layered = 0; layered < 2; ++layered) {
    cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
    cudaArray_t arr = nullptr;
    CHECK(cudaMalloc3DArray(&arr, &fmt, make_cudaExtent(w, h, d), layered ? cudaArrayLayered : 0));
    cudaMemcpy3DParms in{};
    in.srcPtr = make_cudaPitchedPtr(vol.data(), w * sizeof(float), w, h);
    in.dstArray = arr;
    in.extent = make_cudaExtent(w, h, d);
    in.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&in));
    std::vector<float> back(vol.size());
    cudaMemcpy3DParms out{};
    out.srcArray = arr;
    out.dstPtr = make_cudaPitchedPtr(back.data(), w * sizeof(float), w, h);
    out.extent = make_cudaExtent(w, h, d);
    out.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&out));
    EXPECT(back == vol);
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = arr;
    cudaTextureDesc td{};
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t t = 0;
    CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
    std::vector<float4> at(n);
    std::uniform_real_distribution<float> cx(-1.0f, w + 1.0f), cy(-1.0f, h + 1.0f);
    std::uniform_int_distribution<int> cz(0, d - 1);
    for (auto& p : at) p = make_float4(cx(rng), cy(rng), layered ? static_cast<float>(cz(rng)) : cz(rng) + 0.5f, 0);
    float4* d_at = DeviceCopy(at);
    float* d_out = nullptr;
    CHECK(cudaMalloc(&d_out, n * sizeof(float)));
    if (layered) SampleLayered<<<(n + 63) / 64, 64>>>(t, d_at, d_out, n);
    else Sample3D<<<(n + 63) / 64, 64>>>(t, d_at, d_out, n);
    std::vector<float> o(n);
    CHECK(cudaMemcpy(o.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      auto cl = [](int v, int hi) { return v < 0 ? 0 : v >= hi ? hi - 1 : v; };
      const int x = cl(static_cast<int>(std::floor(at[i].x)), w), y = cl(static_cast<int>(std::floor(at[i].y)), h);
      const int z = static_cast<int>(std::floor(at[i].z));
      const float want = vol[(static_cast<size_t>(z) * h + y) * w + x];
      if (o[i] != want) PHOS_CHECK_FAIL(1, "%s at %d: got %g want %g", layered ? "layered" : "3D", i, o[i], want);
    }
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(d_at));
    CHECK(cudaFree(d_out));
    CHECK(cudaFreeArray(arr));
  }
  std::printf("textures: 3D array and layered 2D array (cudaMemcpy3D in and out): OK\n");
  return 0;
}

int TestSurfaces(std::mt19937& rng) {
  const int w = 33, h = 6;
  std::vector<float> img(static_cast<size_t>(w) * h);
  std::uniform_real_distribution<float> val(-5.0f, 5.0f);
  for (float& x : img) x = val(rng);
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
  cudaArray_t plain = nullptr, arr = nullptr;
  CHECK(cudaMallocArray(&plain, &fmt, w, h));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = plain;
  cudaSurfaceObject_t s = 0;
  // CUDA: a surface needs an array made with cudaArraySurfaceLoadStore.
  EXPECT_ERR(cudaCreateSurfaceObject(&s, &res), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(cudaMallocArray(&arr, &fmt, w, h, cudaArraySurfaceLoadStore));
  CHECK(cudaMemcpy2DToArray(arr, 0, 0, img.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  res.res.array.array = arr;
  CHECK(cudaCreateSurfaceObject(&s, &res));
  const float k = 1.5f;
  SurfaceScale<<<dim3((w + 31) / 32, h), 32>>>(s, w, h, k);
  CHECK(cudaGetLastError());
  float* d_z = nullptr;
  CHECK(cudaMalloc(&d_z, 4 * sizeof(float)));
  SurfaceZeroBorder<<<1, 4>>>(s, w, d_z);
  std::vector<float> out(img.size());
  CHECK(cudaMemcpy2DFromArray(out.data(), w * sizeof(float), arr, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToHost));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      // nvcc contracts the kernel's v * k + (x + y) into one fma.
      const float want = std::fma(img[static_cast<size_t>(y) * w + x], k, static_cast<float>(x + y));
      if (out[static_cast<size_t>(y) * w + x] != want) {
        PHOS_CHECK_FAIL(1, "surface (%d, %d): got %g want %g", x, y, out[static_cast<size_t>(y) * w + x], want);
      }
    }
  }
  float z[4];
  CHECK(cudaMemcpy(z, d_z, sizeof(z), cudaMemcpyDeviceToHost));
  EXPECT(z[0] == 0 && z[1] == 0 && z[2] == 0 && z[3] == 0);
  cudaResourceDesc back{};
  CHECK(cudaGetSurfaceObjectResourceDesc(&back, s));
  EXPECT(back.resType == cudaResourceTypeArray && back.res.array.array == arr);
  CHECK(cudaDestroySurfaceObject(s));
  // Array to array.
  CHECK(cudaMemcpy2DArrayToArray(plain, 0, 0, arr, 0, 0, w * sizeof(float), h));
  std::vector<float> copy(img.size());
  CHECK(cudaMemcpy2DFromArray(copy.data(), w * sizeof(float), plain, 0, 0, w * sizeof(float), h,
                              cudaMemcpyDeviceToHost));
  EXPECT(copy == out);
  CHECK(cudaFree(d_z));
  CHECK(cudaFreeArray(arr));
  CHECK(cudaFreeArray(plain));
  // A freed array is no longer one.
  cudaExtent e{};
  EXPECT_ERR(cudaArrayGetInfo(nullptr, &e, nullptr, arr), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  std::printf("textures: surfaces read and written by kernels, boundary mode zero, array to array: OK\n");
  return 0;
}

}  // namespace

// The CUDA programming guide's cube-map table (OpenGL's convention): the
// face of the major axis and (s/|m| + 1)/2, (t/|m| + 1)/2 on it.
void CubeRef(float x, float y, float z, int w, int* face, int* u, int* v) {
  const float ax = std::fabs(x), ay = std::fabs(y), az = std::fabs(z);
  float m = 0, s = 0, t = 0;
  if (ax >= ay && ax >= az) {
    *face = x >= 0 ? 0 : 1, m = ax, s = x >= 0 ? -z : z, t = -y;
  } else if (ay >= az) {
    *face = y >= 0 ? 2 : 3, m = ay, s = x, t = y >= 0 ? z : -z;
  } else {
    *face = z >= 0 ? 4 : 5, m = az, s = z >= 0 ? x : -x, t = -y;
  }
  auto texel = [w](float c) {
    const int i = static_cast<int>(std::floor((c + 1.0f) * 0.5f * static_cast<float>(w)));
    return i < 0 ? 0 : i >= w ? w - 1 : i;
  };
  *u = texel(s / m);
  *v = texel(t / m);
}

// Cube maps (cudaArrayCubemap, and layered cube maps): random directions
// sampled with point filtering against the table above, faces filled
// through cudaMemcpy3D, a surface of one doubled in place; linear filtering
// of a cube map is refused (the hardware filters across faces; the sim
// does not model it).
int TestCubemaps(std::mt19937& rng) {
  const int w = 8, n = 400;
  std::uniform_real_distribution<float> val(-50.0f, 50.0f), dir(-1.0f, 1.0f);
  for (int layered = 0; layered < 2; ++layered) {
    const int cubes = layered ? 3 : 1, faces = 6 * cubes;
    std::vector<float> texels(static_cast<size_t>(w) * w * faces);
    for (float& v : texels) v = val(rng);
    cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
    cudaArray_t arr = nullptr;
    const unsigned flags = cudaArrayCubemap | cudaArraySurfaceLoadStore | (layered ? cudaArrayLayered : 0);
    CHECK(cudaMalloc3DArray(&arr, &fmt, make_cudaExtent(w, w, faces), flags));
    cudaMemcpy3DParms in{};
    in.srcPtr = make_cudaPitchedPtr(texels.data(), w * sizeof(float), w, w);
    in.dstArray = arr;
    in.extent = make_cudaExtent(w, w, faces);
    in.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&in));
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = arr;
    cudaTextureDesc td{};
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeWrap;  // cube maps clamp at edges
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 1;
    cudaTextureObject_t t = 0;
    CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
    std::vector<float4> at(n);
    std::uniform_int_distribution<int> pick(0, cubes - 1);
    for (auto& p : at) p = make_float4(dir(rng), dir(rng), dir(rng), static_cast<float>(pick(rng)));
    at[0] = make_float4(1, 0, 0, 0);  // the face centres
    at[1] = make_float4(0, -2, 0, 0);
    at[2] = make_float4(0, 0, -0.5f, 0);
    float4* d_at = DeviceCopy(at);
    float* d_out = nullptr;
    CHECK(cudaMalloc(&d_out, n * sizeof(float)));
    SampleCube<<<(n + 63) / 64, 64>>>(t, d_at, d_out, n, layered);
    std::vector<float> o(n);
    CHECK(cudaMemcpy(o.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      int face = 0, u = 0, v = 0;
      CubeRef(at[i].x, at[i].y, at[i].z, w, &face, &u, &v);
      const int cube = layered ? static_cast<int>(at[i].w) : 0;
      const float want = texels[(static_cast<size_t>(cube * 6 + face) * w + v) * w + u];
      if (o[i] != want) {
        PHOS_CHECK_FAIL(1, "cube map%s sample %d (%g, %g, %g): got %g want %g (face %d texel %d,%d)",
                        layered ? " (layered)" : "", i, at[i].x, at[i].y, at[i].z, o[i], want, face, u, v);
      }
    }
    // A surface of the same array: every texel of every face doubled.
    cudaSurfaceObject_t sf = 0;
    CHECK(cudaCreateSurfaceObject(&sf, &res));
    SurfaceCubeDouble<<<w * faces, w>>>(sf, w);
    std::vector<float> back(texels.size());
    cudaMemcpy3DParms out{};
    out.srcArray = arr;
    out.dstPtr = make_cudaPitchedPtr(back.data(), w * sizeof(float), w, w);
    out.extent = make_cudaExtent(w, w, faces);
    out.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&out));
    for (size_t i = 0; i < texels.size(); ++i) EXPECT(back[i] == texels[i] * 2.0f);
    // Linear filtering of a cube map: refused.
    td.filterMode = cudaFilterModeLinear;
    cudaTextureObject_t linear = 0;
    EXPECT_ERR(cudaCreateTextureObject(&linear, &res, &td, nullptr), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CHECK(cudaDestroySurfaceObject(sf));
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(d_at));
    CHECK(cudaFree(d_out));
    CHECK(cudaFreeArray(arr));
  }
  // Faces must be square, 6 of them (6 per cube when layered).
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
  cudaArray_t bad = nullptr;
  EXPECT_ERR(cudaMalloc3DArray(&bad, &fmt, make_cudaExtent(8, 4, 6), cudaArrayCubemap), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMalloc3DArray(&bad, &fmt, make_cudaExtent(8, 8, 12), cudaArrayCubemap), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  std::printf("textures: cube maps and layered cube maps (sampled by direction, surfaces): OK\n");
  return 0;
}

// Mipmapped arrays: a 2D chain (16x8 down to 1x1), each level filled
// through its level array; a texture of the chain sampled at random levels
// of detail (tex2DLod) with nearest-level and linear-between-levels
// filtering, against a CPU reference of the same rules (normalized
// coordinates, point sampling in a level, clamping at the edges and to the
// level clamps, 8-bit blend weights); a level array's own texture; the
// refusals (freeing a level, a level bias, unnormalized coordinates).
int TestMipmaps(std::mt19937& rng) {
  const int w = 16, h = 8, levels = 5, n = 300;
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
  cudaMipmappedArray_t chain = nullptr;
  CHECK(cudaMallocMipmappedArray(&chain, &fmt, make_cudaExtent(w, h, 0), 9, 0));  // 9: clamped to 5
  std::uniform_real_distribution<float> val(-10.0f, 10.0f);
  std::vector<std::vector<float>> lv(levels);
  for (int k = 0; k < levels; ++k) {
    const int lw = std::max(1, w >> k), lh = std::max(1, h >> k);
    lv[k].resize(static_cast<size_t>(lw) * lh);
    for (float& v : lv[k]) v = val(rng);
    cudaArray_t level = nullptr;
    CHECK(cudaGetMipmappedArrayLevel(&level, chain, k));
    CHECK(cudaMemcpy2DToArray(level, 0, 0, lv[k].data(), lw * sizeof(float), lw * sizeof(float), lh,
                              cudaMemcpyHostToDevice));
    cudaExtent e{};
    CHECK(cudaArrayGetInfo(nullptr, &e, nullptr, level));
    EXPECT(e.width == static_cast<size_t>(lw) && e.height == static_cast<size_t>(lh));
  }
  cudaArray_t none = nullptr;
  EXPECT_ERR(cudaGetMipmappedArrayLevel(&none, chain, levels), cudaErrorInvalidValue);
  cudaArray_t level2 = nullptr;
  CHECK(cudaGetMipmappedArrayLevel(&level2, chain, 2));
  EXPECT_ERR(cudaFreeArray(level2), cudaErrorInvalidValue);  // freed with its chain
  (void)cudaGetLastError();
  // Level 2 read back whole.
  std::vector<float> back(lv[2].size());
  CHECK(cudaMemcpy2DFromArray(back.data(), (w >> 2) * sizeof(float), level2, 0, 0, (w >> 2) * sizeof(float), h >> 2,
                              cudaMemcpyDeviceToHost));
  EXPECT(back == lv[2]);

  std::vector<float4> at(n);
  std::uniform_real_distribution<float> uv(-0.2f, 1.2f), lod(-1.0f, 5.5f);
  for (auto& p : at) p = make_float4(uv(rng), uv(rng), lod(rng), 0);
  float4* d_at = DeviceCopy(at);
  float* d_out = nullptr;
  CHECK(cudaMalloc(&d_out, n * sizeof(float)));
  std::vector<float> o(n);
  auto texel = [&](int k, float u, float v) {
    const int lw = std::max(1, w >> k), lh = std::max(1, h >> k);
    auto cl = [](int i, int hi) { return i < 0 ? 0 : i >= hi ? hi - 1 : i; };
    const int x = cl(static_cast<int>(std::floor(u * lw)), lw), y = cl(static_cast<int>(std::floor(v * lh)), lh);
    return lv[k][static_cast<size_t>(y) * lw + x];
  };
  for (int linear = 0; linear < 2; ++linear) {
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeMipmappedArray;
    res.res.mipmap.mipmap = chain;
    cudaTextureDesc td{};
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.mipmapFilterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 1;
    td.minMipmapLevelClamp = 0;
    td.maxMipmapLevelClamp = linear ? 3 : 4;
    cudaTextureObject_t t = 0;
    CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
    SampleLod<<<(n + 63) / 64, 64>>>(t, d_at, d_out, n);
    CHECK(cudaMemcpy(o.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      const float l = std::min(std::max(at[i].z, 0.0f), td.maxMipmapLevelClamp);
      float want = 0;
      if (!linear) {
        want = texel(static_cast<int>(std::floor(l + 0.5f)), at[i].x, at[i].y);
      } else {
        const int k0 = static_cast<int>(std::floor(l)), k1 = std::min(k0 + 1, 3);
        const float f = std::round((l - k0) * 256.0f) / 256.0f;
        want = texel(k0, at[i].x, at[i].y) * (1.0f - f) + texel(k1, at[i].x, at[i].y) * f;
      }
      if (std::fabs(o[i] - want) > 1e-4f * (1.0f + std::fabs(want))) {
        PHOS_CHECK_FAIL(1, "mip chain (%s) sample %d (%g, %g, lod %g): got %g want %g",
                        linear ? "linear" : "nearest", i, at[i].x, at[i].y, at[i].z, o[i], want);
      }
    }
    CHECK(cudaDestroyTextureObject(t));
    if (!linear) {
      // Refused: a level bias, and unnormalized coordinates on a chain.
      td.mipmapLevelBias = 0.5f;
      EXPECT_ERR(cudaCreateTextureObject(&t, &res, &td, nullptr), cudaErrorNotSupported);
      td.mipmapLevelBias = 0;
      td.normalizedCoords = 0;
      EXPECT_ERR(cudaCreateTextureObject(&t, &res, &td, nullptr), cudaErrorInvalidValue);
      (void)cudaGetLastError();
    }
  }
  // A texture of one level, as a plain array.
  {
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = level2;
    cudaTextureDesc td{};
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 1;
    cudaTextureObject_t t = 0;
    CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
    for (auto& p : at) p.z = 0;
    CHECK(cudaMemcpy(d_at, at.data(), n * sizeof(float4), cudaMemcpyHostToDevice));
    SampleLod<<<(n + 63) / 64, 64>>>(t, d_at, d_out, n);
    CHECK(cudaMemcpy(o.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) EXPECT(o[i] == texel(2, at[i].x, at[i].y));
    CHECK(cudaDestroyTextureObject(t));
  }
  CHECK(cudaFree(d_at));
  CHECK(cudaFree(d_out));
  CHECK(cudaFreeMipmappedArray(chain));
  EXPECT_ERR(cudaFreeMipmappedArray(chain), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  std::printf("textures: mipmapped arrays (levels, tex2DLod nearest and linear between levels): OK\n");
  return 0;
}

int main() {
  const unsigned seed = Seed();
  std::printf("textures: seed %u (PHOS_TEST_SEED=%u replays)\n", seed, seed);
  std::mt19937 rng(seed);
  if (int rc = Test2DFloat(rng)) return rc;
  if (int rc = TestRgba8(rng)) return rc;
  if (int rc = TestLinearAndPitched(rng)) return rc;
  if (int rc = Test3DAndLayered(rng)) return rc;
  if (int rc = TestSurfaces(rng)) return rc;
  if (int rc = TestCubemaps(rng)) return rc;
  if (int rc = TestMipmaps(rng)) return rc;
  std::printf("textures: OK\n");
  return 0;
}
