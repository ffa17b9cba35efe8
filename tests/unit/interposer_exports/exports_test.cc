// The generated CUDA export layer: ids, names, weak stubs, the name table and
// the strong-overrides-weak mechanism (docs/interposer.md, "Generated exports").
//
// Signature exactness: the generated stub sources include cuda.h and
// cuda_runtime_api.h (in the configuration the generator parsed them in) and
// define each function with the spelled header types, so a stub whose
// signature differed from the header's prototype would be a conflicting
// declaration of an extern "C" function and fail to compile. The
// static_asserts below pin a few of those header prototypes, and the tests
// call the stubs through pointers of exactly those types.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "interposer/export/unsupported.h"
#include "phos_api_ids.h"

namespace phos::interposer {
namespace {

static_assert(std::is_same_v<decltype(&cudaMalloc), cudaError_t (*)(void**, size_t)>);
static_assert(std::is_same_v<decltype(&cudaMemcpyAsync),
                             cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t)>);
static_assert(std::is_same_v<decltype(&cudaLaunchKernel),
                             cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t)>);
static_assert(std::is_same_v<decltype(&cudaGetErrorString), const char* (*)(cudaError_t)>);
static_assert(std::is_same_v<decltype(&cuMemAlloc_v2), CUresult (*)(CUdeviceptr*, size_t)>);
static_assert(std::is_same_v<decltype(&cuLaunchKernel),
                             CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                          unsigned, unsigned, CUstream, void**, void**)>);
static_assert(std::is_same_v<decltype(&cuGetProcAddress_v2),
                             CUresult (*)(const char*, void**, int, cuuint64_t,
                                          CUdriverProcAddressQueryResult*)>);

constexpr int kNotSupported = 801;
static_assert(cudaErrorNotSupported == kNotSupported);
static_assert(CUDA_ERROR_NOT_SUPPORTED == kNotSupported);

const char* const kKnownRuntime[] = {
    "cudaMalloc",        "cudaFree",          "cudaMemcpy",          "cudaMemcpyAsync",
    "cudaLaunchKernel",  "cudaGetDeviceCount", "cudaGetErrorString", "cudaStreamSynchronize",
    "cudaGraphLaunch",   "cudaGetDriverEntryPoint", "cudaProfilerStart",
    // per-thread default stream variants
    "cudaMemcpy_ptds",   "cudaMemcpyAsync_ptsz", "cudaLaunchKernel_ptsz", "cudaStreamSynchronize_ptsz",
};
const char* const kKnownDriver[] = {
    "cuInit",           "cuMemAlloc_v2",      "cuMemFree_v2",         "cuLaunchKernel",
    "cuGetProcAddress_v2", "cuGraphLaunch",   "cuModuleLoadData",     "cuCtxCreate_v4",
    "cuMemcpyHtoD_v2",  "cuStreamSynchronize", "cuProfilerStart",
    // per-thread default stream variants
    "cuMemcpyHtoD_v2_ptds", "cuLaunchKernel_ptsz", "cuGraphLaunch_ptsz",
    // legacy unversioned names (parsed with __CUDA_API_VERSION_INTERNAL)
    "cuMemAlloc",       "cuCtxCreate",        "cuGetProcAddress",     "cuMemcpyHtoD",
};

TEST(GeneratedIds, KnownFunctionsFromBothHeaders) {
  std::printf("exported: %zu functions, %zu driver (cuda.h, cudaProfiler.h), %zu runtime "
              "(cuda_runtime_api.h, cuda_profiler_api.h), %zu cuBLAS, %zu cuBLASLt, %zu NCCL\n",
              kApiCount, kApiDriverCount, kApiRuntimeCount, kApiCublasCount, kApiCublasLtCount, kApiNcclCount);
  EXPECT_EQ(static_cast<size_t>(ApiId::kCount), kApiCount);
  EXPECT_EQ(kApiDriverCount + kApiRuntimeCount + kApiCublasCount + kApiCublasLtCount + kApiNcclCount, kApiCount);
  EXPECT_GT(kApiNcclCount, 40u);  // every ncclX and its pncclX alias
  for (const char* name : {"ncclAllReduce", "pncclAllReduce", "ncclCommInitRank", "ncclGroupEnd"}) {
    ApiId id = ApiIdFromName(name);
    ASSERT_NE(id, ApiId::kCount) << name;
    EXPECT_EQ(ApiLibraryOf(id), ApiLibrary::kNccl) << name;
  }
  EXPECT_GT(kApiCublasCount, 300u);
  EXPECT_GT(kApiCublasLtCount, 30u);
  EXPECT_GT(kApiDriverCount, 300u);
  EXPECT_LT(kApiDriverCount, 3000u);
  EXPECT_GT(kApiRuntimeCount, 200u);
  EXPECT_LT(kApiRuntimeCount, 3000u);
  for (const char* name : kKnownRuntime) {
    ApiId id = ApiIdFromName(name);
    ASSERT_NE(id, ApiId::kCount) << name;
    EXPECT_STREQ(ApiName(id), name);
    EXPECT_FALSE(ApiIsDriver(id)) << name;
  }
  for (const char* name : kKnownDriver) {
    ApiId id = ApiIdFromName(name);
    ASSERT_NE(id, ApiId::kCount) << name;
    EXPECT_STREQ(ApiName(id), name);
    EXPECT_TRUE(ApiIsDriver(id)) << name;
  }
  for (const char* name : {"cublasCreate_v2", "cublasSgemm_v2", "cublasGemmStridedBatchedEx", "cublasSgemm_v2_64"}) {
    ApiId id = ApiIdFromName(name);
    ASSERT_NE(id, ApiId::kCount) << name;
    EXPECT_EQ(ApiLibraryOf(id), ApiLibrary::kCublas) << name;
    EXPECT_FALSE(ApiIsDriver(id)) << name;
  }
  for (const char* name : {"cublasLtCreate", "cublasLtMatmul", "cublasLtMatmulDescCreate"}) {
    ApiId id = ApiIdFromName(name);
    ASSERT_NE(id, ApiId::kCount) << name;
    EXPECT_EQ(ApiLibraryOf(id), ApiLibrary::kCublasLt) << name;
  }
  // The legacy cuBLAS API (cublas.h) is not exported: its cublasSgemm has
  // another signature than the v2 one apps link as cublasSgemm_v2.
  EXPECT_EQ(ApiIdFromName("cublasSgemm"), ApiId::kCount);
  // Inline helpers and C++ overloads are not exported.
  EXPECT_EQ(ApiIdFromName("cuGetProcAddress_v2_ptsz"), ApiId::kCount);
  EXPECT_EQ(ApiIdFromName("cudaNotAFunction"), ApiId::kCount);
  EXPECT_EQ(ApiIdFromName(nullptr), ApiId::kCount);
  EXPECT_STREQ(ApiName(ApiId::kCount), "?");
}

// Ids are numbered library by library (CUDA, cuBLAS, cuBLASLt: a library
// added later never renumbers the ones before it), each library's names
// sorted.
TEST(GeneratedIds, IdsAreIndicesOfTheSortedNamesOfEachLibrary) {
  EXPECT_EQ(ApiId::k_cudaMalloc, ApiIdFromName("cudaMalloc"));
  EXPECT_EQ(ApiId::k_cuMemAlloc_v2, ApiIdFromName("cuMemAlloc_v2"));
  EXPECT_EQ(static_cast<size_t>(ApiIdFromName("cublasAsumEx")), kApiDriverCount + kApiRuntimeCount);
  for (size_t i = 0; i < kApiCount; ++i) {
    auto id = static_cast<ApiId>(i);
    EXPECT_EQ(ApiIdFromName(ApiName(id)), id);
    auto next = static_cast<ApiId>(i + 1);
    if (i + 1 < kApiCount && ApiLibraryOf(next) == ApiLibraryOf(id)) {
      EXPECT_LT(std::strcmp(ApiName(id), ApiName(next)), 0);
    }
    if (i + 1 < kApiCount) {
      EXPECT_LE(static_cast<int>(ApiLibraryOf(id)), static_cast<int>(ApiLibraryOf(next)));
    }
  }
}

TEST(FindExport, KnownNamesAndVersions) {
  EXPECT_EQ(FindExport("cudaMalloc"), reinterpret_cast<const void*>(&cudaMalloc));
  EXPECT_EQ(FindExport("cuMemAlloc_v2"), reinterpret_cast<const void*>(&cuMemAlloc_v2));
  EXPECT_NE(FindExport("cuGetProcAddress_v2"), nullptr);
  EXPECT_NE(FindExport("cuMemAlloc"), nullptr);  // legacy
  EXPECT_NE(FindExport("cuMemAlloc"), FindExport("cuMemAlloc_v2"));
  EXPECT_EQ(FindExport("cuNotAFunction"), nullptr);
  EXPECT_EQ(FindExport(nullptr), nullptr);
  for (size_t i = 0; i < kApiCount; ++i)
    EXPECT_NE(FindExport(ApiName(static_cast<ApiId>(i))), nullptr) << ApiName(static_cast<ApiId>(i));

  // Versioned lookup prefers _v3, then _v2, then the plain name.
  EXPECT_EQ(FindExportVersioned("cuMemAlloc", 13000), FindExport("cuMemAlloc_v2"));
  EXPECT_EQ(FindExportVersioned("cuTexRefSetAddress2D", 13000), FindExport("cuTexRefSetAddress2D_v3"));
  EXPECT_EQ(FindExportVersioned("cuStreamGetCaptureInfo", 13000),
            FindExport("cuStreamGetCaptureInfo_v3"));
  EXPECT_EQ(FindExportVersioned("cuLaunchKernel", 13000), FindExport("cuLaunchKernel"));
  EXPECT_EQ(FindExportVersioned("cuGetProcAddress", 13000), FindExport("cuGetProcAddress_v2"));
  EXPECT_EQ(FindExportVersioned("cuNotAFunction", 13000), nullptr);
  EXPECT_EQ(FindExportVersioned(nullptr, 13000), nullptr);
}

class DlLib {
 public:
  explicit DlLib(const char* path) : h_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {}
  ~DlLib() {
    if (h_ != nullptr) dlclose(h_);
  }
  DlLib(const DlLib&) = delete;
  DlLib& operator=(const DlLib&) = delete;
  bool ok() const { return h_ != nullptr; }
  template <typename F>
  F Get(const char* name) const {
    return reinterpret_cast<F>(dlsym(h_, name));
  }

 private:
  void* h_;
};

using CountFn = uint64_t (*)(const char*);
using FindFn = const void* (*)(const char*);
using FindVersionedFn = const void* (*)(const char*, int);

size_t Occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

TEST(Stubs, ReturnNotSupportedAndLogOncePerName) {
  DlLib lib(PHOS_STUB_TEST_SO);
  ASSERT_TRUE(lib.ok()) << dlerror();
  auto count = lib.Get<CountFn>("phos_test_unsupported_count");
  ASSERT_NE(count, nullptr);

  auto malloc_fn = lib.Get<decltype(&cudaMalloc)>("cudaMalloc");
  auto memcpy_async = lib.Get<decltype(&cudaMemcpyAsync)>("cudaMemcpyAsync_ptsz");
  auto cu_alloc = lib.Get<decltype(&cuMemAlloc_v2)>("cuMemAlloc_v2");
  auto cu_launch = lib.Get<decltype(&cuLaunchKernel)>("cuLaunchKernel");
  auto err_string = lib.Get<decltype(&cudaGetErrorString)>("cudaGetErrorString");
  ASSERT_NE(malloc_fn, nullptr);
  ASSERT_NE(memcpy_async, nullptr);
  ASSERT_NE(cu_alloc, nullptr);
  ASSERT_NE(cu_launch, nullptr);
  ASSERT_NE(err_string, nullptr);

  testing::internal::CaptureStderr();
  void* p = nullptr;
  CUdeviceptr d = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(malloc_fn(&p, 64), kNotSupported);
    EXPECT_EQ(memcpy_async(nullptr, nullptr, 0, cudaMemcpyHostToDevice, nullptr), kNotSupported);
    EXPECT_EQ(cu_alloc(&d, 64), kNotSupported);
    EXPECT_EQ(cu_launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), kNotSupported);
  }
  const char* s = err_string(cudaErrorNotSupported);
  std::string err = testing::internal::GetCapturedStderr();

  EXPECT_NE(s, nullptr);  // non-error return types get a documented default
  EXPECT_EQ(Occurrences(err, "phos: cudaMalloc is not supported by phos yet\n"), 1u) << err;
  EXPECT_EQ(Occurrences(err, "phos: cudaMemcpyAsync_ptsz is not supported by phos yet\n"), 1u) << err;
  EXPECT_EQ(Occurrences(err, "phos: cuMemAlloc_v2 is not supported by phos yet\n"), 1u) << err;
  EXPECT_EQ(Occurrences(err, "phos: cuLaunchKernel is not supported by phos yet\n"), 1u) << err;
  EXPECT_EQ(Occurrences(err, "phos: cudaGetErrorString is not supported by phos yet\n"), 1u) << err;
  EXPECT_EQ(Occurrences(err, "phos: "), 5u) << err;
  EXPECT_EQ(count("cudaMalloc"), 3u);
  EXPECT_EQ(count("cudaMemcpyAsync_ptsz"), 3u);
  EXPECT_EQ(count("cuMemAlloc_v2"), 3u);
  EXPECT_EQ(count("cuLaunchKernel"), 3u);
  EXPECT_EQ(count("cudaGetErrorString"), 1u);
  EXPECT_EQ(count("cudaFree"), 0u);
}

TEST(Stubs, LegacyAndPerThreadNamesAreExported) {
  DlLib lib(PHOS_STUB_TEST_SO);
  ASSERT_TRUE(lib.ok()) << dlerror();
  auto find = lib.Get<FindFn>("phos_test_find_export");
  ASSERT_NE(find, nullptr);
  // Every generated name is a dynamic symbol of the library, and the table
  // points at that very symbol.
  for (size_t i = 0; i < kApiCount; ++i) {
    const char* name = ApiName(static_cast<ApiId>(i));
    void* sym = lib.Get<void*>(name);
    ASSERT_NE(sym, nullptr) << name;
    EXPECT_EQ(find(name), sym) << name;
  }
  // Legacy cuMemAlloc: 32-bit size and device pointer (CUdeviceptr_v1).
  using LegacyAlloc = CUresult (*)(unsigned int*, unsigned int);
  auto legacy = lib.Get<LegacyAlloc>("cuMemAlloc");
  ASSERT_NE(legacy, nullptr);
  unsigned int d = 0;
  testing::internal::CaptureStderr();
  EXPECT_EQ(legacy(&d, 16), kNotSupported);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("phos: cuMemAlloc is not supported by phos yet"), std::string::npos) << err;
}

TEST(Stubs, LogOnceUnderConcurrency) {
  DlLib lib(PHOS_STUB_TEST_SO);
  ASSERT_TRUE(lib.ok()) << dlerror();
  auto count = lib.Get<CountFn>("phos_test_unsupported_count");
  auto sync = lib.Get<decltype(&cudaDeviceSynchronize)>("cudaDeviceSynchronize");
  ASSERT_NE(count, nullptr);
  ASSERT_NE(sync, nullptr);
  testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([sync] {
      for (int i = 0; i < 100; ++i) (void)sync();
    });
  for (auto& t : threads) t.join();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Occurrences(err, "phos: cudaDeviceSynchronize is not supported by phos yet\n"), 1u) << err;
  EXPECT_EQ(count("cudaDeviceSynchronize"), 800u);
}

TEST(Stubs, StrongDefinitionOverridesWeakStub) {
  DlLib stubs(PHOS_STUB_TEST_SO);
  DlLib over(PHOS_OVERRIDE_TEST_SO);
  ASSERT_TRUE(stubs.ok()) << dlerror();
  ASSERT_TRUE(over.ok()) << dlerror();

  // The plain stub library: the weak stub.
  auto stub_count_fn = stubs.Get<decltype(&cudaGetDeviceCount)>("cudaGetDeviceCount");
  ASSERT_NE(stub_count_fn, nullptr);
  int n = -1;
  testing::internal::CaptureStderr();
  EXPECT_EQ(stub_count_fn(&n), kNotSupported);
  (void)testing::internal::GetCapturedStderr();
  EXPECT_EQ(n, -1);

  // Linked with a strong cudaGetDeviceCount: the hand-written one wins, both
  // for dlsym and for the table cuGetProcAddress will serve.
  auto real = over.Get<decltype(&cudaGetDeviceCount)>("cudaGetDeviceCount");
  auto find = over.Get<FindFn>("phos_test_find_export");
  auto find_versioned = over.Get<FindVersionedFn>("phos_test_find_export_versioned");
  auto count = over.Get<CountFn>("phos_test_unsupported_count");
  ASSERT_NE(real, nullptr);
  ASSERT_NE(find, nullptr);
  ASSERT_NE(find_versioned, nullptr);
  ASSERT_NE(count, nullptr);
  EXPECT_NE(reinterpret_cast<void*>(real), reinterpret_cast<void*>(stub_count_fn));
  n = -1;
  EXPECT_EQ(real(&n), cudaSuccess);
  EXPECT_EQ(n, 42);
  EXPECT_EQ(find("cudaGetDeviceCount"), reinterpret_cast<const void*>(real));
  EXPECT_EQ(find_versioned("cudaGetDeviceCount", 13000), reinterpret_cast<const void*>(real));
  EXPECT_EQ(count("cudaGetDeviceCount"), 0u);
  // The rest of that library is still the stubs.
  auto other = over.Get<decltype(&cudaMalloc)>("cudaMalloc");
  ASSERT_NE(other, nullptr);
  void* p = nullptr;
  testing::internal::CaptureStderr();
  EXPECT_EQ(other(&p, 1), kNotSupported);
  (void)testing::internal::GetCapturedStderr();
}

}  // namespace
}  // namespace phos::interposer
