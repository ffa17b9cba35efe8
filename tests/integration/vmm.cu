// The driver's virtual-memory API as an allocator that manages its own
// address space uses it (PyTorch's expandable segments: reserve a large
// range, map 2 MiB allocations into it as the pool grows, unmap them as it
// shrinks), with its entry points taken through the runtime
// (cudaGetDriverEntryPointByVersion), as PyTorch takes them. Checked against
// CPU references on random data:
//   * granularity, reserve (with and without an address hint), create,
//     map back to back, set/get access, properties, retain/release;
//   * copies and memsets crossing mapping boundaries, a kernel whose
//     array spans three mappings, D2D to and from cudaMalloc memory;
//   * growing the range by one more mapping and a kernel over all of it;
//   * one cuMemUnmap over several mappings, then a fresh mapping;
//   * errors: cudaFree of a mapping, unmapping part of a mapping, mapping
//     outside a reserved range or over a mapping, freeing a range that
//     still has mappings, and what phos refuses by name (one allocation
//     at two addresses, a handle mapped again after cuMemUnmap, a non-zero
//     offset, host memory).
// Prints "vmm: OK".
#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#define PHOS_PROGRAM_NAME "vmm"
#include "program_checks.h"

#define CU(call)                                                                 \
  do {                                                                           \
    CUresult cu_r_ = (call);                                                     \
    if (cu_r_ != CUDA_SUCCESS) PHOS_CHECK_FAIL(2, "%s failed: CUresult %d", #call, (int)cu_r_); \
  } while (0)
#define CU_ERR(call, want)                                                       \
  do {                                                                           \
    CUresult cu_r_ = (call);                                                     \
    if (cu_r_ != (want)) PHOS_CHECK_FAIL(1, "%s gave CUresult %d, want %s", #call, (int)cu_r_, #want); \
  } while (0)

__global__ void Saxpy(float a, const float* x, float* y, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

struct Driver {
  decltype(&cuMemGetAllocationGranularity) granularity;
  decltype(&cuMemAddressReserve) reserve;
  decltype(&cuMemAddressFree) address_free;
  decltype(&cuMemCreate) create;
  decltype(&cuMemRelease) release;
  decltype(&cuMemMap) map;
  decltype(&cuMemUnmap) unmap;
  decltype(&cuMemSetAccess) set_access;
  decltype(&cuMemGetAccess) get_access;
  decltype(&cuMemGetAllocationPropertiesFromHandle) properties;
  decltype(&cuMemRetainAllocationHandle) retain;
  decltype(&cuMemGetAddressRange_v2) address_range;
  decltype(&cuDeviceGetAttribute) attribute;
};

template <typename F>
static bool Entry(const char* name, F* out) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || p == nullptr) {
    std::printf("vmm: no driver entry point %s\n", name);
    return false;
  }
  *out = reinterpret_cast<F>(p);
  return true;
}

static bool Load(Driver* d) {
  return Entry("cuMemGetAllocationGranularity", &d->granularity) && Entry("cuMemAddressReserve", &d->reserve) &&
         Entry("cuMemAddressFree", &d->address_free) && Entry("cuMemCreate", &d->create) &&
         Entry("cuMemRelease", &d->release) && Entry("cuMemMap", &d->map) && Entry("cuMemUnmap", &d->unmap) &&
         Entry("cuMemSetAccess", &d->set_access) && Entry("cuMemGetAccess", &d->get_access) &&
         Entry("cuMemGetAllocationPropertiesFromHandle", &d->properties) &&
         Entry("cuMemRetainAllocationHandle", &d->retain) && Entry("cuMemGetAddressRange", &d->address_range) &&
         Entry("cuDeviceGetAttribute", &d->attribute);
}

// The kernel's y = a * x + y compiles to one fused multiply-add.
static float Axpy(float a, float x, float y) { return std::fma(a, x, y); }

static std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

static int Run() {
  CHECK(cudaFree(nullptr));
  Driver d{};
  if (!Load(&d)) return 2;
  int vmm_supported = 0;
  CU(d.attribute(&vmm_supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  EXPECT(vmm_supported == 1);

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  CU(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT(g >= (64u << 10) && (g & (g - 1)) == 0);
  size_t rec = 0;
  CU(d.granularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  EXPECT(rec % g == 0);

  // A range of 16 granules; a second one at a hinted address (the first
  // range's end, free or not: the hint may be ignored, never an error).
  CUdeviceptr base = 0, other = 0;
  CU(d.reserve(&base, 16 * g, 0, 0, 0));
  EXPECT(base != 0 && base % g == 0);
  CU(d.reserve(&other, 2 * g, 0, base + 16 * g, 0));
  EXPECT(other != 0 && (other + 2 * g <= base || other >= base + 16 * g));

  // Three mappings back to back; the middle handle released at once (the
  // mapping keeps its memory), the others kept.
  CUmemGenericAllocationHandle h[4] = {};
  for (int i = 0; i < 3; ++i) {
    CU(d.create(&h[i], g, &prop, 0));
    CU(d.map(base + i * g, g, 0, h[i], 0));
  }
  CU(d.release(h[1]));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(d.set_access(base, 3 * g, &access, 1));
  unsigned long long flags = 0;
  CU(d.get_access(&flags, &access.location, base + g + 100));
  EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUmemAllocationProp back{};
  CU(d.properties(&back, h[0]));
  EXPECT(back.type == CU_MEM_ALLOCATION_TYPE_PINNED && back.location.id == 0);
  CUmemGenericAllocationHandle again = 0;
  CU(d.retain(&again, reinterpret_cast<void*>(base + 2 * g + 12345)));
  EXPECT(again == h[2]);
  CU(d.release(again));
  CUdeviceptr range_base = 0;
  size_t range_size = 0;
  CU(d.address_range(&range_base, &range_size, base + g + 5));
  EXPECT(range_base == base + g && range_size == g);
  cudaPointerAttributes pa{};
  CHECK(cudaPointerGetAttributes(&pa, reinterpret_cast<void*>(base + 2 * g + 8)));
  EXPECT(pa.type == cudaMemoryTypeDevice);
  std::printf("vmm: reserve, create, map, access, retain OK\n");

  // x and y span the three mappings (each starts in the first one).
  const size_t n = (2 * g + g / 2) / sizeof(float) / 2;
  float* x = reinterpret_cast<float*>(base + g / 4);
  float* y = x + n;  // starts in the second mapping, ends in the third
  EXPECT(reinterpret_cast<CUdeviceptr>(y + n) <= base + 3 * g);
  const std::vector<float> hx = Random(n, 1), hy = Random(n, 2);
  CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(y, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  Saxpy<<<static_cast<unsigned>((n + 255) / 256), 256>>>(2.5f, x, y, n);
  CHECK(cudaGetLastError());
  std::vector<float> got(n);
  CHECK(cudaMemcpy(got.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) EXPECT(got[i] == Axpy(2.5f, hx[i], hy[i]));
  // D2D to plain cudaMalloc memory and back across a boundary; a memset too.
  float* plain = nullptr;
  CHECK(cudaMalloc(&plain, n * sizeof(float)));
  CHECK(cudaMemcpy(plain, y, n * sizeof(float), cudaMemcpyDeviceToDevice));
  CHECK(cudaMemset(x, 0, n * sizeof(float)));
  CHECK(cudaMemcpy(x, plain, n * sizeof(float), cudaMemcpyDefault));
  CHECK(cudaMemcpy(got.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) EXPECT(got[i] == Axpy(2.5f, hx[i], hy[i]));
  CHECK(cudaFree(plain));
  std::printf("vmm: copies and a kernel across three mappings OK\n");

  // Errors phos gives as CUDA does.
  EXPECT_ERR(cudaFree(reinterpret_cast<void*>(base)), cudaErrorInvalidValue);
  CU_ERR(d.unmap(base + g, g / 2), CUDA_ERROR_INVALID_VALUE);        // part of a mapping
  CU_ERR(d.unmap(base + g / 2, g), CUDA_ERROR_INVALID_VALUE);        // starts inside one
  CU(d.create(&h[3], g, &prop, 0));
  CU_ERR(d.map(base + g, g, 0, h[3], 0), CUDA_ERROR_INVALID_VALUE);   // over a mapping
  void* plain_range = nullptr;
  CHECK(cudaMalloc(&plain_range, 4 * g));
  const CUdeviceptr outside = (reinterpret_cast<CUdeviceptr>(plain_range) + g - 1) / g * g;
  CU_ERR(d.map(outside, g, 0, h[3], 0), CUDA_ERROR_INVALID_VALUE);    // not in a reserved range
  CHECK(cudaFree(plain_range));
  CU_ERR(d.address_free(base, 16 * g), CUDA_ERROR_INVALID_VALUE);     // still has mappings
  CU_ERR(d.create(&h[3], g + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE); // not a granule multiple
  // Refused by name (CUDA would do them; phos cannot carry them).
  CU_ERR(d.map(base + 8 * g, g, 0, h[0], 0), CUDA_ERROR_NOT_SUPPORTED);  // h[0] at two addresses
  CU_ERR(d.map(base + 8 * g, g, g / 2, h[3], 0), CUDA_ERROR_NOT_SUPPORTED);  // offset
  CUmemAllocationProp host = prop;
  host.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemGenericAllocationHandle hh = 0;
  CU_ERR(d.create(&hh, g, &host, 0), CUDA_ERROR_NOT_SUPPORTED);
  std::printf("vmm: errors OK\n");

  // Grow: one more mapping right after the three; a kernel over all four.
  CU(d.map(base + 3 * g, g, 0, h[3], 0));
  CU(d.set_access(base + 3 * g, g, &access, 1));
  const size_t m = 4 * g / sizeof(float) / 2;
  float* a = reinterpret_cast<float*>(base);
  float* b = a + m;
  const std::vector<float> ha = Random(m, 3), hb = Random(m, 4);
  CHECK(cudaMemcpy(a, ha.data(), m * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, hb.data(), m * sizeof(float), cudaMemcpyHostToDevice));
  Saxpy<<<static_cast<unsigned>((m + 255) / 256), 256>>>(-0.5f, a, b, m);
  std::vector<float> gotb(m);
  CHECK(cudaMemcpy(gotb.data(), b, m * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < m; ++i) EXPECT(gotb[i] == Axpy(-0.5f, ha[i], hb[i]));
  std::printf("vmm: grown to four mappings OK\n");

  // Shrink: one cuMemUnmap over all four; h[1] was released, so its memory
  // is gone; the others are still handles, but their contents went with
  // the mapping: mapping one again is refused by name.
  CHECK(cudaDeviceSynchronize());
  CU(d.unmap(base, 4 * g));
  CU_ERR(d.get_access(&flags, &access.location, base), CUDA_ERROR_INVALID_VALUE);
  CU_ERR(d.map(base, g, 0, h[0], 0), CUDA_ERROR_NOT_SUPPORTED);
  for (int i : {0, 2, 3}) CU(d.release(h[i]));
  CU_ERR(d.release(h[0]), CUDA_ERROR_INVALID_VALUE);  // released already
  CUmemGenericAllocationHandle fresh = 0;
  CU(d.create(&fresh, 2 * g, &prop, 0));
  CU(d.map(base + 5 * g, 2 * g, 0, fresh, 0));
  CU(d.set_access(base + 5 * g, 2 * g, &access, 1));
  CHECK(cudaMemset(reinterpret_cast<void*>(base + 5 * g), 0x5a, 2 * g));
  std::vector<unsigned char> bytes(2 * g);
  CHECK(cudaMemcpy(bytes.data(), reinterpret_cast<void*>(base + 5 * g), 2 * g, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < bytes.size(); i += 4099) EXPECT(bytes[i] == 0x5a);
  EXPECT(bytes.back() == 0x5a);
  CU(d.unmap(base + 5 * g, 2 * g));
  CU(d.release(fresh));
  CU(d.address_free(base, 16 * g));
  CU(d.address_free(other, 2 * g));
  CU_ERR(d.address_free(base, 16 * g), CUDA_ERROR_INVALID_VALUE);  // freed already
  std::printf("vmm: unmap, remap, free OK\n");
  return 0;
}

int main() {
  const int rc = Run();
  if (rc == 0) std::printf("vmm: OK\n");
  return rc;
}
