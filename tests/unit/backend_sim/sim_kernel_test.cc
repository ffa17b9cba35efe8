// Kernels on the sim: nvcc-built fatbins run in the PTX interpreter, and
// what the sim cannot run is refused by name.
#include <sys/mman.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "backend_conformance/test_ptx.h"
#include "sim_test_util.h"

namespace phos::backend::sim_test {
namespace {

std::vector<std::uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename T>
void Put(std::vector<std::uint8_t>* block, std::size_t offset, T value) {
  if (block->size() < offset + sizeof(T)) block->resize(offset + sizeof(T));
  std::memcpy(block->data() + offset, &value, sizeof(T));
}

// vector_add(const float* a, const float* b, float* c, int n) from
// tests/apps/vector_add.cu, mangled as nvcc 13 does.
constexpr const char* kVectorAdd = "_Z10vector_addPKfS0_Pfi";

// Runs vector_add from `module` on `stream` and checks it against the CPU.
void RunVectorAdd(Context* ctx, ModuleHandle module, StreamHandle stream, std::uint32_t salt) {
  FunctionHandle fn = 0;
  SIM_ASSERT_OK(ctx->GetFunction(module, kVectorAdd, &fn));
  const int n = 5000;
  std::mt19937 rng(RunSeed() ^ salt);
  std::uniform_real_distribution<float> dist(-1000.f, 1000.f);
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = dist(rng);
    b[i] = dist(rng);
  }
  DevicePtr da = 0, db = 0, dc = 0;
  SIM_ASSERT_OK(ctx->Allocate(n * 4, 0, &da));
  SIM_ASSERT_OK(ctx->Allocate(n * 4, 0, &db));
  SIM_ASSERT_OK(ctx->Allocate(n * 4, 0, &dc));
  SIM_ASSERT_OK(ctx->MemcpyAsync(da, H(a.data()), n * 4, CopyKind::kHostToDevice, stream));
  SIM_ASSERT_OK(ctx->MemcpyAsync(db, H(b.data()), n * 4, CopyKind::kHostToDevice, stream));
  std::vector<std::uint8_t> params;
  Put<std::uint64_t>(&params, 0, da);
  Put<std::uint64_t>(&params, 8, db);
  Put<std::uint64_t>(&params, 16, dc);
  Put<std::int32_t>(&params, 24, n);
  SIM_ASSERT_OK(ctx->LaunchKernel(fn, Dim3{(n + 255) / 256, 1, 1}, Dim3{256, 1, 1}, 0, stream,
                                  params));
  SIM_ASSERT_OK(ctx->MemcpyAsync(H(c.data()), dc, n * 4, CopyKind::kDeviceToHost, stream));
  SIM_ASSERT_OK(ctx->SynchronizeStream(stream));
  for (int i = 0; i < n; ++i) ASSERT_EQ(c[i], a[i] + b[i]) << "element " << i;
  SIM_ASSERT_OK(ctx->Free(da));
  SIM_ASSERT_OK(ctx->Free(db));
  SIM_ASSERT_OK(ctx->Free(dc));
}

TEST(SimKernels, NvccFatbinRunsInTheInterpreter) {
  SIM_SEED_TRACE();
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  // nvcc 13's default: the PTX entry is zstd-compressed.
  for (const char* variant : {"vector_add.fatbin", "vector_add.compress_all.fatbin",
                              "vector_add.lz4.fatbin"}) {
    SCOPED_TRACE(variant);
    std::vector<std::uint8_t> image = ReadFile(std::string(PHOS_TEST_APPS_DIR) + "/" + variant);
    ASSERT_FALSE(image.empty()) << "missing fixture " << variant;
    ModuleHandle m = 0;
    SIM_ASSERT_OK(f.ctx->LoadModule(image.data(), image.size(), &m));
    RunVectorAdd(f.ctx.get(), m, kDefaultStream, 1);
    SIM_ASSERT_OK(f.ctx->UnloadModule(m));
  }
}

// SASS for sm_90 and no PTX: an H100's driver loads it, so the sim does
// too (a library's runtime that loads every fatbin at start must not stop
// at one) — its kernels are known by the cubin, described by it, and
// refused at launch with CUDA_ERROR_NO_BINARY_FOR_GPU and advice: the sim
// runs PTX only.
TEST(SimKernels, SassOnlyFatbinForTheModelledGpuLoadsButItsKernelsAreRefused) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  std::vector<std::uint8_t> image =
      ReadFile(std::string(PHOS_TEST_APPS_DIR) + "/vector_add.sass.fatbin");
  ASSERT_FALSE(image.empty());
  ModuleHandle m = 0;
  SIM_ASSERT_OK(f.ctx->LoadModule(image.data(), image.size(), &m));
  FunctionHandle fn = 0;
  EXPECT_EQ(f.ctx->GetFunction(m, "no_such_kernel", &fn).code(), Status::Code::kNotFound);
  SIM_ASSERT_OK(f.ctx->GetFunction(m, kVectorAdd, &fn));
  FunctionAttributes a;
  SIM_ASSERT_OK(f.ctx->GetFunctionAttributes(fn, &a));
  EXPECT_EQ(a.binary_version, 90);
  EXPECT_GT(a.num_regs, 0);
  std::vector<std::uint8_t> params(28, 0);
  Status s = f.ctx->LaunchKernel(fn, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, kDefaultStream, params);
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_EQ(s.api_error(), 209);  // CUDA_ERROR_NO_BINARY_FOR_GPU
  EXPECT_NE(s.message().find(kVectorAdd), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("PTX"), std::string::npos) << s.message();
  SIM_ASSERT_OK(f.ctx->UnloadModule(m));
}

// SASS for another GPU only (here the same fatbin with its cubin entry
// marked sm_80): an H100 cannot run it, NO_BINARY_FOR_GPU at load, as its
// driver answers; the CUDA runtime tolerates that for fatbins of other GPUs.
TEST(SimKernels, SassOnlyFatbinForAnotherGpuIsRefusedAtLoad) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  std::vector<std::uint8_t> image =
      ReadFile(std::string(PHOS_TEST_APPS_DIR) + "/vector_add.sass.fatbin");
  ASSERT_GE(image.size(), 16u + 0x20u);
  std::uint32_t arch = 0;
  std::memcpy(&arch, image.data() + 16 + 0x1c, 4);  // the first entry's sm_arch (fatbin_format.h)
  ASSERT_EQ(arch, 90u);
  arch = 80;
  std::memcpy(image.data() + 16 + 0x1c, &arch, 4);
  ModuleHandle m = 0;
  Status s = f.ctx->LoadModule(image.data(), image.size(), &m);
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_EQ(s.api_error(), 209);
  EXPECT_NE(s.message().find("sm_90"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("PTX"), std::string::npos) << s.message();
}

TEST(SimKernels, UnsupportedInstructionIsRefusedByNameAtLaunch) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  ModuleHandle m = 0;
  SIM_ASSERT_OK(f.ctx->LoadModule(testing::kFormattedSurfaceStorePtx, sizeof testing::kFormattedSurfaceStorePtx, &m));
  FunctionHandle fn = 0;
  SIM_ASSERT_OK(f.ctx->GetFunction(m, "surface_store", &fn));
  DevicePtr out = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(4, 0, &out));
  std::vector<std::uint8_t> params;
  Put<std::uint64_t>(&params, 0, out);
  Put<std::uint64_t>(&params, 8, 1);
  Status s = f.ctx->LaunchKernel(fn, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, kDefaultStream, params);
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.ToString();
  EXPECT_NE(s.message().find("sust.p"), std::string::npos) << s.message();
  SIM_ASSERT_OK(f.ctx->Synchronize());  // nothing ran, nothing sticky
}

TEST(SimKernels, IllegalAddressIsAStickyErrorOfTheStream) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  ModuleHandle m = 0;
  SIM_ASSERT_OK(f.ctx->LoadModule(testing::kSaxpyPtx, sizeof testing::kSaxpyPtx, &m));
  FunctionHandle fn = 0;
  SIM_ASSERT_OK(f.ctx->GetFunction(m, "saxpy", &fn));
  DevicePtr y = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(1024, 0, &y));
  std::vector<std::uint8_t> params;
  const std::uint64_t unmapped = y + (64ull << 20);  // inside the range, never allocated
  Put<std::uint64_t>(&params, 0, unmapped);
  Put<std::uint64_t>(&params, 8, y);
  Put<float>(&params, 16, 2.0f);
  Put<std::uint32_t>(&params, 20, 16);
  SIM_ASSERT_OK(f.ctx->LaunchKernel(fn, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, kDefaultStream, params));
  Status s = f.ctx->Synchronize();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("saxpy"), std::string::npos) << s.message();
}

// Mapped pinned memory: registered host memory mapped for kernels at
// another address (the app's address of the same pages) is read and
// written there; unmapped, that address is illegal again.
TEST(SimKernels, MappedHostMemoryIsReachedAtItsAppAddress) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  ModuleHandle m = 0;
  SIM_ASSERT_OK(f.ctx->LoadModule(testing::kSaxpyPtx, sizeof testing::kSaxpyPtx, &m));
  FunctionHandle fn = 0;
  SIM_ASSERT_OK(f.ctx->GetFunction(m, "saxpy", &fn));
  const std::size_t bytes = 64 * 1024;
  const int n = static_cast<int>(bytes / sizeof(float));
  std::vector<float> host(2 * n);  // phosd's mapping: x, then y
  for (int i = 0; i < 2 * n; ++i) host[i] = static_cast<float>(i % 1000);
  // The "app address": a reserved range nothing else uses.
  void* app = mmap(nullptr, 2 * bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(app, MAP_FAILED);
  const auto app_base = reinterpret_cast<std::uint64_t>(app);
  SIM_EXPECT_CODE(f.ctx->MapHostMemoryForKernels(host.data(), 2 * bytes, app_base), kInvalidArgument);  // not registered
  SIM_ASSERT_OK(f.ctx->RegisterHostMemory(host.data(), 2 * bytes));
  DevicePtr dev = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(4096, 0, &dev));
  SIM_EXPECT_CODE(f.ctx->MapHostMemoryForKernels(host.data(), 2 * bytes, dev), kAlreadyExists);  // device range
  SIM_ASSERT_OK(f.ctx->MapHostMemoryForKernels(host.data(), 2 * bytes, app_base));
  SIM_EXPECT_CODE(f.ctx->MapHostMemoryForKernels(host.data(), bytes, app_base + 4096), kAlreadyExists);
  std::vector<std::uint8_t> params;
  Put<std::uint64_t>(&params, 0, app_base);          // x
  Put<std::uint64_t>(&params, 8, app_base + bytes);  // y
  Put<float>(&params, 16, 3.0f);
  Put<std::uint32_t>(&params, 20, static_cast<std::uint32_t>(n));
  SIM_ASSERT_OK(f.ctx->LaunchKernel(fn, Dim3{static_cast<unsigned>((n + 255) / 256), 1, 1}, Dim3{256, 1, 1}, 0,
                                    kDefaultStream, params));
  SIM_ASSERT_OK(f.ctx->Synchronize());
  for (int i = 0; i < n; ++i) {
    const float x = static_cast<float>(i % 1000), y = static_cast<float>((n + i) % 1000);
    ASSERT_EQ(host[n + i], 3.0f * x + y) << i;
  }
  SIM_ASSERT_OK(f.ctx->UnmapHostMemoryForKernels(app_base));
  SIM_EXPECT_CODE(f.ctx->UnmapHostMemoryForKernels(app_base), kInvalidArgument);
  SIM_ASSERT_OK(f.ctx->LaunchKernel(fn, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, kDefaultStream, params));
  EXPECT_FALSE(f.ctx->Synchronize().ok());  // the app address is no longer reachable
  munmap(app, 2 * bytes);
}

TEST(SimKernels, ConcurrentLaunchesOnSeveralStreams) {
  SIM_SEED_TRACE();
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  std::vector<std::uint8_t> image =
      ReadFile(std::string(PHOS_TEST_APPS_DIR) + "/vector_add.fatbin");
  ASSERT_FALSE(image.empty());
  ModuleHandle m = 0;
  SIM_ASSERT_OK(f.ctx->LoadModule(image.data(), image.size(), &m));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      StreamHandle s = 0;
      ASSERT_TRUE(f.ctx->CreateStream(kStreamNonBlocking, 0, &s).ok());
      for (int i = 0; i < 3; ++i) RunVectorAdd(f.ctx.get(), m, s, 100 * t + i);
      ASSERT_TRUE(f.ctx->DestroyStream(s).ok());
    });
  }
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace phos::backend::sim_test
