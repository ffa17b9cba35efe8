// Conformance: modules, kernels and module variables, on every backend
// (the sim runs them in the PTX interpreter, cuda on the GPU).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend_conformance.h"
#include "test_ptx.h"

namespace phos::backend::testing {
namespace {

#define KT_ASSERT_OK(expr)                                    \
  do {                                                        \
    ::phos::Status _s = (expr);                               \
    ASSERT_TRUE(_s.ok()) << #expr << " -> " << _s.ToString(); \
  } while (0)

template <typename T>
void Put(std::vector<std::uint8_t>* block, std::size_t offset, T value) {
  if (block->size() < offset + sizeof(T)) block->resize(offset + sizeof(T));
  std::memcpy(block->data() + offset, &value, sizeof(T));
}

std::uint64_t H(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

TEST_P(BackendConformanceTest, SaxpyKernelMatchesCpu) {
  ModuleHandle module = 0;
  KT_ASSERT_OK(ctx_->LoadModule(kSaxpyPtx, sizeof kSaxpyPtx, &module));
  FunctionHandle saxpy = 0;
  KT_ASSERT_OK(ctx_->GetFunction(module, "saxpy", &saxpy));

  const std::uint32_t n = 3001;  // not a multiple of the block size
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-100.f, 100.f);
  std::vector<float> x(n), y(n), out(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    x[i] = dist(rng);
    y[i] = dist(rng);
  }
  const float a = dist(rng);
  DevicePtr dx = 0, dy = 0;
  KT_ASSERT_OK(ctx_->Allocate(n * sizeof(float), 0, &dx));
  KT_ASSERT_OK(ctx_->Allocate(n * sizeof(float), 0, &dy));
  KT_ASSERT_OK(ctx_->MemcpyAsync(dx, H(x.data()), n * sizeof(float), CopyKind::kHostToDevice,
                                 kDefaultStream));
  KT_ASSERT_OK(ctx_->MemcpyAsync(dy, H(y.data()), n * sizeof(float), CopyKind::kHostToDevice,
                                 kDefaultStream));
  std::vector<std::uint8_t> params;
  Put<std::uint64_t>(&params, 0, dx);
  Put<std::uint64_t>(&params, 8, dy);
  Put<float>(&params, 16, a);
  Put<std::uint32_t>(&params, 20, n);
  KT_ASSERT_OK(ctx_->LaunchKernel(saxpy, Dim3{(n + 127) / 128, 1, 1}, Dim3{128, 1, 1}, 0,
                                  kDefaultStream, params));
  KT_ASSERT_OK(ctx_->MemcpyAsync(H(out.data()), dy, n * sizeof(float), CopyKind::kDeviceToHost,
                                 kDefaultStream));
  KT_ASSERT_OK(ctx_->Synchronize());
  for (std::uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], std::fma(a, x[i], y[i])) << "element " << i;
  }
  KT_ASSERT_OK(ctx_->Free(dx));
  KT_ASSERT_OK(ctx_->Free(dy));
  KT_ASSERT_OK(ctx_->UnloadModule(module));
}

TEST_P(BackendConformanceTest, ModuleVariableIsDeviceMemory) {
  ModuleHandle module = 0;
  KT_ASSERT_OK(ctx_->LoadModule(kSaxpyPtx, sizeof kSaxpyPtx, &module));
  DevicePtr counter = 0;
  std::size_t bytes = 0;
  KT_ASSERT_OK(ctx_->GetGlobal(module, "phos_counter", &counter, &bytes));
  EXPECT_EQ(bytes, 4u);
  std::uint32_t value = 0;
  KT_ASSERT_OK(ctx_->MemcpyAsync(H(&value), counter, 4, CopyKind::kDeviceToHost, kDefaultStream));
  KT_ASSERT_OK(ctx_->Synchronize());
  EXPECT_EQ(value, 7u);  // its initialiser

  FunctionHandle bump = 0;
  KT_ASSERT_OK(ctx_->GetFunction(module, "bump", &bump));
  std::mt19937 rng(std::random_device{}());
  const std::uint32_t start = 1000 + rng() % 100000;
  KT_ASSERT_OK(ctx_->MemcpyAsync(counter, H(&start), 4, CopyKind::kHostToDevice, kDefaultStream));
  for (int i = 0; i < 3; ++i) {
    KT_ASSERT_OK(ctx_->LaunchKernel(bump, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, kDefaultStream, {}));
  }
  KT_ASSERT_OK(ctx_->MemcpyAsync(H(&value), counter, 4, CopyKind::kDeviceToHost, kDefaultStream));
  KT_ASSERT_OK(ctx_->Synchronize());
  EXPECT_EQ(value, start + 3);
}

TEST_P(BackendConformanceTest, UnknownKernelAndBadHandlesAreErrors) {
  ModuleHandle module = 0;
  KT_ASSERT_OK(ctx_->LoadModule(kSaxpyPtx, sizeof kSaxpyPtx, &module));
  FunctionHandle f = 0;
  EXPECT_FALSE(ctx_->GetFunction(module, "no_such_kernel", &f).ok());
  DevicePtr p = 0;
  std::size_t bytes = 0;
  EXPECT_FALSE(ctx_->GetGlobal(module, "no_such_variable", &p, &bytes).ok());
  KT_ASSERT_OK(ctx_->UnloadModule(module));
  EXPECT_EQ(ctx_->GetFunction(module, "saxpy", &f).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ctx_->LaunchKernel(0xdeadbeef, Dim3{}, Dim3{}, 0, kDefaultStream, {}).code(),
            Status::Code::kInvalidArgument);
  const char garbage[] = "this is not a module";
  EXPECT_FALSE(ctx_->LoadModule(garbage, sizeof garbage, &module).ok());
}

}  // namespace
}  // namespace phos::backend::testing
