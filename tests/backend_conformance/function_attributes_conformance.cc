// Conformance: function attributes and the dynamic shared memory limit
// (backend.h GetFunctionAttributes / SetFunctionAttribute), on every
// backend. Only what CUDA guarantees is checked, so the same expectations
// hold on the sim and on a GPU.
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend_conformance.h"
#include "test_ptx.h"

namespace phos::backend::testing {
namespace {

#define FA_ASSERT_OK(expr)                                    \
  do {                                                        \
    ::phos::Status _s = (expr);                               \
    ASSERT_TRUE(_s.ok()) << #expr << " -> " << _s.ToString(); \
  } while (0)

TEST_P(BackendConformanceTest, FunctionAttributesArePlausibleAndSettable) {
  ModuleHandle module = 0;
  FA_ASSERT_OK(ctx_->LoadModule(kSaxpyPtx, sizeof kSaxpyPtx, &module));
  FunctionHandle saxpy = 0;
  FA_ASSERT_OK(ctx_->GetFunction(module, "saxpy", &saxpy));
  DeviceProperties props;
  FA_ASSERT_OK(backend_->GetDeviceProperties(0, &props));

  FunctionAttributes a;
  FA_ASSERT_OK(ctx_->GetFunctionAttributes(saxpy, &a));
  EXPECT_GT(a.max_threads_per_block, 0);
  EXPECT_LE(a.max_threads_per_block, props.max_threads_per_block);
  EXPECT_GT(a.num_regs, 0);
  EXPECT_LE(a.num_regs, 255);
  EXPECT_EQ(a.shared_size_bytes, 0u);  // saxpy declares no shared memory
  EXPECT_EQ(a.ptx_version, 90);        // `.target sm_90`
  EXPECT_GE(a.binary_version, 90);     // what it runs as: at least sm_90
  EXPECT_EQ(a.max_dynamic_shared_size_bytes, 48 * 1024);

  // Raising the dynamic shared memory limit sticks; beyond the opt-in
  // maximum is refused.
  const int raised = static_cast<int>(props.shared_memory_per_block_optin);
  FA_ASSERT_OK(ctx_->SetFunctionAttribute(saxpy, FunctionAttribute::kMaxDynamicSharedSizeBytes, raised));
  FA_ASSERT_OK(ctx_->GetFunctionAttributes(saxpy, &a));
  EXPECT_EQ(a.max_dynamic_shared_size_bytes, raised);
  EXPECT_FALSE(ctx_->SetFunctionAttribute(saxpy, FunctionAttribute::kMaxDynamicSharedSizeBytes, raised + 1).ok());
  FA_ASSERT_OK(ctx_->SetFunctionAttribute(saxpy, FunctionAttribute::kPreferredSharedMemoryCarveout, 50));
  FA_ASSERT_OK(ctx_->GetFunctionAttributes(saxpy, &a));
  EXPECT_EQ(a.preferred_shared_memory_carveout, 50);
  EXPECT_FALSE(ctx_->GetFunctionAttributes(saxpy + 0x5151, &a).ok());
  FA_ASSERT_OK(ctx_->UnloadModule(module));
}

TEST_P(BackendConformanceTest, DynamicSharedMemoryAboveTheLimitIsRefused) {
  ModuleHandle module = 0;
  FA_ASSERT_OK(ctx_->LoadModule(kSaxpyPtx, sizeof kSaxpyPtx, &module));
  FunctionHandle saxpy = 0;
  FA_ASSERT_OK(ctx_->GetFunction(module, "saxpy", &saxpy));
  DevicePtr d = 0;
  FA_ASSERT_OK(ctx_->Allocate(4096, 0, &d));
  std::vector<std::uint8_t> params(24);
  std::memcpy(params.data(), &d, 8);
  std::memcpy(params.data() + 8, &d, 8);
  const float a = 1.f;
  const std::uint32_t n = 0;  // touches nothing
  std::memcpy(params.data() + 16, &a, 4);
  std::memcpy(params.data() + 20, &n, 4);
  EXPECT_FALSE(ctx_->LaunchKernel(saxpy, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 48 * 1024 + 16, kDefaultStream, params).ok());
  FA_ASSERT_OK(ctx_->Synchronize());
  FA_ASSERT_OK(ctx_->SetFunctionAttribute(saxpy, FunctionAttribute::kMaxDynamicSharedSizeBytes, 64 * 1024));
  FA_ASSERT_OK(ctx_->LaunchKernel(saxpy, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 64 * 1024, kDefaultStream, params));
  FA_ASSERT_OK(ctx_->Synchronize());
  FA_ASSERT_OK(ctx_->Free(d));
  FA_ASSERT_OK(ctx_->UnloadModule(module));
}

}  // namespace
}  // namespace phos::backend::testing
