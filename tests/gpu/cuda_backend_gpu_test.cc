// The cuda backend on a real GPU: the backend conformance suite, plus checks
// only a real driver can answer (fixed-address VMM allocations, pinned host
// memory, PTX modules). Every test SKIPS — never passes — with a message
// starting "skipped: no GPU" where CreateCudaBackend returns Unavailable.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend_conformance.h"
#include "test_ptx.h"

namespace phos::backend {
namespace {

using testing::BackendConformanceTest;
using testing::BackendParam;
using testing::kSaxpyPtx;

Status MakeCuda(std::unique_ptr<Backend>* out) { return CreateCudaBackend(CudaOptions{}, out); }

INSTANTIATE_TEST_SUITE_P(Cuda, BackendConformanceTest,
                         ::testing::Values(BackendParam{"cuda", &MakeCuda}),
                         [](const ::testing::TestParamInfo<BackendParam>& info) {
                           return std::string(info.param.name);
                         });

#define ASSERT_OK(expr)                                 \
  do {                                                  \
    ::phos::Status _s = (expr);                         \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)

// The saxpy/bump module is kSaxpyPtx in tests/backend_conformance/test_ptx.h.

template <typename T>
void Put(std::vector<std::uint8_t>* block, std::size_t offset, T value) {
  if (block->size() < offset + sizeof(T)) block->resize(offset + sizeof(T));
  std::memcpy(block->data() + offset, &value, sizeof(T));
}

std::uint64_t Host(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = CreateCudaBackend(CudaOptions{}, &backend_);
    if (s.code() == Status::Code::kUnavailable) {
      GTEST_SKIP() << "skipped: no GPU (" << s.message() << ")";
    }
    ASSERT_OK(s);
    ASSERT_GE(backend_->device_count(), 1);
    ASSERT_OK(backend_->CreateContext(0, &ctx_));
  }
  void TearDown() override {
    ctx_.reset();
    backend_.reset();
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Context> ctx_;
};

TEST_F(CudaGpuTest, BackendDescribesTheDevice) {
  EXPECT_EQ(backend_->name(), "cuda");
  EXPECT_EQ(backend_->detail().rfind("CUDA driver ", 0), 0u) << backend_->detail();
  DeviceProperties p;
  ASSERT_OK(backend_->GetDeviceProperties(0, &p));
  EXPECT_EQ(p.ordinal, 0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_EQ(p.uuid.rfind("GPU-", 0), 0u) << p.uuid;
  EXPECT_EQ(p.uuid.size(), 40u) << p.uuid;
  EXPECT_GT(p.total_memory, 0u);
  EXPECT_GE(p.compute_capability_major, 7);
  EXPECT_GT(p.multiprocessor_count, 0);
  EXPECT_EQ(p.warp_size, 32);
  EXPECT_GE(p.max_threads_per_block, 1024);
  EXPECT_GT(p.max_block_dim[0], 0);
  EXPECT_GT(p.max_grid_dim[0], 0);
  EXPECT_GT(p.shared_memory_per_block, 0u);
  EXPECT_GE(p.shared_memory_per_block_optin, p.shared_memory_per_block);
  EXPECT_GT(p.l2_cache_bytes, 0);
  EXPECT_EQ(p.unified_addressing, 1);
  EXPECT_EQ(backend_->GetDeviceProperties(backend_->device_count(), &p).code(),
            Status::Code::kInvalidArgument);

  std::uint64_t free_b = 0, total_b = 0;
  ASSERT_OK(backend_->GetMemoryInfo(0, &free_b, &total_b));
  EXPECT_GT(total_b, 0u);
  EXPECT_LE(free_b, total_b);
  ASSERT_OK(ctx_->GetMemoryInfo(&free_b, &total_b));
  EXPECT_LE(free_b, total_b);
}

TEST_F(CudaGpuTest, AllocateAtChosenAddressReturnsExactlyIt) {
  constexpr std::size_t kBytes = 6u << 20;  // not a multiple of 4 MiB: rounding is the backend's
  DevicePtr first = 0;
  ASSERT_OK(ctx_->Allocate(kBytes, 0, &first));
  ASSERT_NE(first, 0u);
  ASSERT_OK(ctx_->Free(first));

  // Re-map at the same address (what a restore does).
  DevicePtr again = 0;
  ASSERT_OK(ctx_->Allocate(kBytes, first, &again));
  EXPECT_EQ(again, first);

  // The data path works at that address.
  std::vector<std::uint32_t> in(kBytes / 4), out(kBytes / 4, 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint32_t>(i * 2654435761u);
  ASSERT_OK(ctx_->MemcpyAsync(again, Host(in.data()), kBytes, CopyKind::kHostToDevice, kDefaultStream));
  ASSERT_OK(ctx_->MemcpyAsync(Host(out.data()), again, kBytes, CopyKind::kDeviceToHost, kDefaultStream));
  ASSERT_OK(ctx_->SynchronizeStream(kDefaultStream));
  EXPECT_EQ(in, out);

  // The same range again is taken: AlreadyExists, in this context and in another.
  DevicePtr clash = 0;
  EXPECT_EQ(ctx_->Allocate(kBytes, first, &clash).code(), Status::Code::kAlreadyExists);
  std::unique_ptr<Context> other;
  ASSERT_OK(backend_->CreateContext(0, &other));
  Status s = other->Allocate(kBytes, first, &clash);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();

  // Free and map once more at the same address, from the other context.
  ASSERT_OK(ctx_->Free(first));
  DevicePtr third = 0;
  ASSERT_OK(other->Allocate(kBytes, first, &third));
  EXPECT_EQ(third, first);
  ASSERT_OK(other->Free(third));

  // Misaligned and out-of-range requests are the caller's mistake.
  EXPECT_EQ(ctx_->Allocate(kBytes, first + 4096, &clash).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ctx_->Allocate(kBytes, 1ull << 60, &clash).code(), Status::Code::kInvalidArgument);
  // Freeing twice / a pointer that is not an allocation start.
  EXPECT_EQ(ctx_->Free(first).code(), Status::Code::kInvalidArgument);
}

TEST_F(CudaGpuTest, HostRegisterThenAsyncCopy) {
  constexpr std::size_t kBytes = 8u << 20;
  void* src = std::aligned_alloc(4096, kBytes);
  void* dst = std::aligned_alloc(4096, kBytes);
  ASSERT_NE(src, nullptr);
  ASSERT_NE(dst, nullptr);
  std::memset(dst, 0, kBytes);
  auto* s8 = static_cast<std::uint8_t*>(src);
  for (std::size_t i = 0; i < kBytes; ++i) s8[i] = static_cast<std::uint8_t>(i * 31 + 7);
  ASSERT_OK(ctx_->RegisterHostMemory(src, kBytes));
  ASSERT_OK(ctx_->RegisterHostMemory(dst, kBytes));

  StreamHandle stream = 0;
  ASSERT_OK(ctx_->CreateStream(kStreamNonBlocking, 0, &stream));
  EventHandle done = 0;
  ASSERT_OK(ctx_->CreateEvent(0, &done));
  DevicePtr a = 0, b = 0;
  ASSERT_OK(ctx_->Allocate(kBytes, 0, &a));
  ASSERT_OK(ctx_->Allocate(kBytes, 0, &b));
  ASSERT_OK(ctx_->MemcpyAsync(a, Host(src), kBytes, CopyKind::kHostToDevice, stream));
  ASSERT_OK(ctx_->MemcpyAsync(b, a, kBytes, CopyKind::kDeviceToDevice, stream));
  ASSERT_OK(ctx_->MemcpyAsync(Host(dst), b, kBytes, CopyKind::kDeviceToHost, stream));
  ASSERT_OK(ctx_->RecordEvent(done, stream));
  ASSERT_OK(ctx_->SynchronizeEvent(done));
  EXPECT_TRUE(ctx_->QueryEvent(done).ok());
  EXPECT_TRUE(ctx_->QueryStream(stream).ok());
  EXPECT_EQ(std::memcmp(src, dst, kBytes), 0);

  // Memset D32 over a pinned round trip.
  ASSERT_OK(ctx_->MemsetAsync(a, 0xdeadbeef, 4, kBytes / 4, stream));
  ASSERT_OK(ctx_->MemcpyAsync(Host(dst), a, kBytes, CopyKind::kDeviceToHost, stream));
  ASSERT_OK(ctx_->SynchronizeStream(stream));
  const auto* d32 = static_cast<const std::uint32_t*>(dst);
  EXPECT_EQ(d32[0], 0xdeadbeefu);
  EXPECT_EQ(d32[kBytes / 4 - 1], 0xdeadbeefu);

  ASSERT_OK(ctx_->Free(a));
  ASSERT_OK(ctx_->Free(b));
  ASSERT_OK(ctx_->DestroyEvent(done));
  ASSERT_OK(ctx_->DestroyStream(stream));
  EXPECT_EQ(ctx_->QueryStream(stream).code(), Status::Code::kInvalidArgument);
  ASSERT_OK(ctx_->UnregisterHostMemory(src));
  ASSERT_OK(ctx_->UnregisterHostMemory(dst));
  std::free(src);
  std::free(dst);
}

TEST_F(CudaGpuTest, PtxModuleLaunchAndGlobal) {
  ModuleHandle module = 0;
  // Without the trailing NUL: the backend must terminate the text itself.
  ASSERT_OK(ctx_->LoadModule(kSaxpyPtx, sizeof kSaxpyPtx - 1, &module));
  FunctionHandle saxpy = 0, bump = 0;
  ASSERT_OK(ctx_->GetFunction(module, "saxpy", &saxpy));
  ASSERT_OK(ctx_->GetFunction(module, "bump", &bump));
  FunctionHandle missing = 0;
  EXPECT_EQ(ctx_->GetFunction(module, "no_such_kernel", &missing).code(), Status::Code::kNotFound);

  constexpr std::uint32_t kN = 100000;
  std::vector<float> x(kN), y(kN), out(kN);
  for (std::uint32_t i = 0; i < kN; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.0f;
  }
  DevicePtr dx = 0, dy = 0;
  ASSERT_OK(ctx_->Allocate(kN * sizeof(float), 0, &dx));
  ASSERT_OK(ctx_->Allocate(kN * sizeof(float), 0, &dy));
  ASSERT_OK(ctx_->MemcpyAsync(dx, Host(x.data()), kN * sizeof(float), CopyKind::kHostToDevice, kDefaultStream));
  ASSERT_OK(ctx_->MemcpyAsync(dy, Host(y.data()), kN * sizeof(float), CopyKind::kHostToDevice, kDefaultStream));

  // The argument block as the kernel's parameter table lays it out.
  std::vector<std::uint8_t> params;
  Put<std::uint64_t>(&params, 0, dx);
  Put<std::uint64_t>(&params, 8, dy);
  Put<float>(&params, 16, 2.0f);
  Put<std::uint32_t>(&params, 20, kN);
  ASSERT_EQ(params.size(), 24u);

  EventHandle start = 0, end = 0;
  ASSERT_OK(ctx_->CreateEvent(0, &start));
  ASSERT_OK(ctx_->CreateEvent(0, &end));
  ASSERT_OK(ctx_->RecordEvent(start, kDefaultStream));
  ASSERT_OK(ctx_->LaunchKernel(saxpy, Dim3{(kN + 255) / 256, 1, 1}, Dim3{256, 1, 1}, 0, kDefaultStream, params));
  ASSERT_OK(ctx_->RecordEvent(end, kDefaultStream));
  ASSERT_OK(ctx_->MemcpyAsync(Host(out.data()), dy, kN * sizeof(float), CopyKind::kDeviceToHost, kDefaultStream));
  ASSERT_OK(ctx_->Synchronize());
  for (std::uint32_t i = 0; i < kN; ++i) {
    ASSERT_EQ(out[i], 2.0f * static_cast<float>(i) + 1.0f) << "at " << i;
  }
  float ms = -1;
  ASSERT_OK(ctx_->ElapsedTime(start, end, &ms));
  EXPECT_GE(ms, 0.0f);

  // GetGlobal: address and size of phos_counter, initialised to 7; bump() adds one.
  DevicePtr counter = 0;
  std::size_t counter_bytes = 0;
  ASSERT_OK(ctx_->GetGlobal(module, "phos_counter", &counter, &counter_bytes));
  EXPECT_NE(counter, 0u);
  EXPECT_EQ(counter_bytes, 4u);
  std::uint32_t value = 0;
  ASSERT_OK(ctx_->MemcpyAsync(Host(&value), counter, 4, CopyKind::kDeviceToHost, kDefaultStream));
  ASSERT_OK(ctx_->Synchronize());
  EXPECT_EQ(value, 7u);
  ASSERT_OK(ctx_->LaunchKernel(bump, Dim3{}, Dim3{}, 0, kDefaultStream, {}));
  ASSERT_OK(ctx_->MemcpyAsync(Host(&value), counter, 4, CopyKind::kDeviceToHost, kDefaultStream));
  ASSERT_OK(ctx_->Synchronize());
  EXPECT_EQ(value, 8u);
  EXPECT_EQ(ctx_->GetGlobal(module, "no_such_global", &counter, &counter_bytes).code(),
            Status::Code::kNotFound);

  // Unloading invalidates the module's function handles.
  ASSERT_OK(ctx_->UnloadModule(module));
  EXPECT_EQ(ctx_->LaunchKernel(bump, Dim3{}, Dim3{}, 0, kDefaultStream, {}).code(),
            Status::Code::kInvalidArgument);
  ASSERT_OK(ctx_->Free(dx));
  ASSERT_OK(ctx_->Free(dy));
}

// A kernel that spins until a flag in device memory turns non-zero (it never
// does here): a dead app's kernel that would never end.
constexpr char kSpinPtx[] = R"PTX(
.version 8.0
.target sm_90
.address_size 64

.visible .entry spin(.param .u64 flag)
{
  .reg .pred %p<2>;
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [flag];
  cvta.to.global.u64 %rd2, %rd1;
SPIN:
  ld.volatile.global.u32 %r1, [%rd2];
  setp.eq.s32 %p1, %r1, 0;
  @%p1 bra SPIN;
  ret;
}
)PTX";

// Context::Abandon on the driver: nothing waits for the spinning kernel, and
// destroying the context ends it (docs/backends.md "Abandoned contexts").
TEST_F(CudaGpuTest, AnAbandonedContextIsDestroyedWhileItsKernelSpins) {
  ModuleHandle module = 0;
  ASSERT_OK(ctx_->LoadModule(kSpinPtx, sizeof kSpinPtx, &module));
  FunctionHandle spin = 0;
  ASSERT_OK(ctx_->GetFunction(module, "spin", &spin));
  DevicePtr flag = 0;
  ASSERT_OK(ctx_->Allocate(4, 0, &flag));
  ASSERT_OK(ctx_->MemsetAsync(flag, 0, 4, 1, kDefaultStream));
  std::vector<std::uint8_t> params;
  Put<std::uint64_t>(&params, 0, flag);
  ASSERT_OK(ctx_->LaunchKernel(spin, Dim3{}, Dim3{}, 0, kDefaultStream, params));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(ctx_->QueryStream(kDefaultStream).code(), Status::Code::kNotReady) << "the kernel should still spin";

  ctx_->Abandon();
  EXPECT_EQ(ctx_->Synchronize().code(), Status::Code::kUnavailable);
  EXPECT_EQ(ctx_->LaunchKernel(spin, Dim3{}, Dim3{}, 0, kDefaultStream, params).code(),
            Status::Code::kUnavailable);
  ASSERT_OK(ctx_->Free(flag));            // left to the destructor: no wait
  ASSERT_OK(ctx_->UnloadModule(module));  // likewise

  // The destructor on its own thread: if the driver waits for the kernel,
  // the test fails instead of hanging (the thread and the backend are then
  // leaked on purpose; the process's exit ends the kernel).
  auto destroyed = std::make_shared<std::promise<void>>();
  std::future<void> done = destroyed->get_future();
  std::thread([ctx = std::move(ctx_), destroyed]() mutable {
    ctx.reset();
    destroyed->set_value();
  }).detach();
  if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    backend_.release();
    FAIL() << "destroying an abandoned context waited 30 s for its spinning kernel";
  }
  // The device still serves a new context.
  std::unique_ptr<Context> fresh;
  ASSERT_OK(backend_->CreateContext(0, &fresh));
  DevicePtr p = 0;
  ASSERT_OK(fresh->Allocate(1 << 20, 0, &p));
  ASSERT_OK(fresh->MemsetAsync(p, 0, 4, 1, kDefaultStream));
  ASSERT_OK(fresh->Synchronize());
  ASSERT_OK(fresh->Free(p));
}

TEST_F(CudaGpuTest, HandlesOfAnotherContextAreRejected) {
  std::unique_ptr<Context> other;
  ASSERT_OK(backend_->CreateContext(0, &other));
  StreamHandle stream = 0;
  ASSERT_OK(other->CreateStream(0, 0, &stream));
  EXPECT_EQ(ctx_->SynchronizeStream(stream).code(), Status::Code::kInvalidArgument);
  EventHandle event = 0;
  ASSERT_OK(other->CreateEvent(kEventDisableTiming, &event));
  EXPECT_EQ(ctx_->QueryEvent(event).code(), Status::Code::kInvalidArgument);
  float ms = 0;
  EXPECT_EQ(other->ElapsedTime(event, event, &ms).code(), Status::Code::kInvalidArgument);
  ASSERT_OK(other->DestroyStream(stream));
  ASSERT_OK(other->DestroyEvent(event));
}

TEST_F(CudaGpuTest, BadPtxIsInvalidArgument) {
  const char bad[] = ".version 8.0\n.target sm_90\nthis is not ptx\n";
  ModuleHandle module = 0;
  Status s = ctx_->LoadModule(bad, sizeof bad, &module);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace phos::backend
