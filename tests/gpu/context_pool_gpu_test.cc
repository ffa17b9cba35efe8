// The context pool on a real GPU: pooled cuda contexts carry a cuBLAS handle,
// work, and a take from a full pool is much faster than a creation. SKIPS
// with "skipped: no GPU" where CreateCudaBackend returns Unavailable.
#include <dlfcn.h>

#include <chrono>
#include <memory>

#include <gtest/gtest.h>

#include "backend/backend_factory.h"
#include "backend/context_pool.h"
#include "backend/cuda/cuda_cublas.h"

namespace phos::backend {
namespace {

using namespace std::chrono_literals;

TEST(ContextPoolGpuTest, PooledContextsHaveACublasHandleAndWork) {
  std::unique_ptr<Backend> backend;
  Status s = CreateCudaBackend(CudaOptions{}, &backend);
  if (s.code() == Status::Code::kUnavailable) GTEST_SKIP() << "skipped: no GPU (" << s.message() << ")";
  ASSERT_TRUE(s.ok()) << s.ToString();
  ContextPoolOptions o;
  o.contexts_per_device = 2;
  ContextPool pool(backend.get(), o);
  ASSERT_TRUE(pool.WaitUntilFull(120s));

  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Context> ctx;
  ASSERT_TRUE(pool.Take(0, &ctx).ok());
  const auto take = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(pool.stats().hits, 1u);
  ContextPoolStats st = pool.stats();
  ASSERT_FALSE(st.recent_creation_times.empty());
  EXPECT_LT(take, st.recent_creation_times.back()) << "a hit should be faster than a creation";

  const bool have_cublas = dlopen(cuda::DefaultCublasLibrary().c_str(), RTLD_NOW | RTLD_LOCAL) != nullptr;
  if (have_cublas) {
    EXPECT_NE(ctx->library_handle(Library::kCublas), nullptr);
  } else {
    EXPECT_EQ(ctx->library_handle(Library::kCublas), nullptr);
  }
  DevicePtr p = 0;
  ASSERT_TRUE(ctx->Allocate(1 << 20, 0, &p).ok());
  ASSERT_TRUE(ctx->MemsetAsync(p, 0x5a, 1, 1 << 20, kDefaultStream).ok());
  unsigned char back[16] = {};
  ASSERT_TRUE(ctx->MemcpyAsync(reinterpret_cast<std::uint64_t>(back), p, sizeof back, CopyKind::kDeviceToHost,
                               kDefaultStream).ok());
  ASSERT_TRUE(ctx->Synchronize().ok());
  for (unsigned char b : back) EXPECT_EQ(b, 0x5a);
  ASSERT_TRUE(ctx->Free(p).ok());
  ctx.reset();  // destroys the cuBLAS handle, then the context
  pool.Shutdown();
}

}  // namespace
}  // namespace phos::backend
