// The context pool (daemon/backend/context_pool.h) on the sim backend, and
// on a fake backend whose context creation can be held, slowed or made to
// fail, to pin down hits and misses, refill, backoff and shutdown.
#include "backend/context_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend_factory.h"

namespace phos::backend {
namespace {

using namespace std::chrono_literals;

#define POOL_ASSERT_OK(expr)                                   \
  do {                                                         \
    ::phos::Status _s = (expr);                                \
    ASSERT_TRUE(_s.ok()) << #expr << " -> " << _s.ToString();  \
  } while (0)

// ---- a fake backend ------------------------------------------------------------

std::atomic<int> g_live_fake_contexts{0};

// A context that only knows its device; every GPU call is NotSupported.
class FakeContext final : public Context {
 public:
  explicit FakeContext(int device) : device_(device) { ++g_live_fake_contexts; }
  ~FakeContext() override { --g_live_fake_contexts; }
  int device() const override { return device_; }
  Status Allocate(std::size_t, DevicePtr, DevicePtr*) override { return No(); }
  Status Free(DevicePtr) override { return No(); }
  Status GetMemoryInfo(std::uint64_t*, std::uint64_t*) override { return No(); }
  Status RegisterHostMemory(void*, std::size_t) override { return No(); }
  Status UnregisterHostMemory(void*) override { return No(); }
  Status CreateStream(unsigned, int, StreamHandle*) override { return No(); }
  Status DestroyStream(StreamHandle) override { return No(); }
  Status SynchronizeStream(StreamHandle) override { return No(); }
  Status QueryStream(StreamHandle) override { return No(); }
  Status MemcpyAsync(std::uint64_t, std::uint64_t, std::size_t, CopyKind, StreamHandle) override { return No(); }
  Status MemsetAsync(DevicePtr, std::uint32_t, std::size_t, std::size_t, StreamHandle) override { return No(); }
  Status CreateEvent(unsigned, EventHandle*) override { return No(); }
  Status DestroyEvent(EventHandle) override { return No(); }
  Status RecordEvent(EventHandle, StreamHandle) override { return No(); }
  Status StreamWaitEvent(StreamHandle, EventHandle) override { return No(); }
  Status QueryEvent(EventHandle) override { return No(); }
  Status SynchronizeEvent(EventHandle) override { return No(); }
  Status ElapsedTime(EventHandle, EventHandle, float*) override { return No(); }
  Status Synchronize() override { return No(); }
  Status LoadModule(const void*, std::size_t, ModuleHandle*) override { return No(); }
  Status UnloadModule(ModuleHandle) override { return No(); }
  Status GetFunction(ModuleHandle, const std::string&, FunctionHandle*) override { return No(); }
  Status GetGlobal(ModuleHandle, const std::string&, DevicePtr*, std::size_t*) override { return No(); }
  Status LaunchKernel(FunctionHandle, Dim3, Dim3, unsigned, StreamHandle,
                      const std::vector<std::uint8_t>&) override {
    return No();
  }
  Status GetFunctionAttributes(FunctionHandle, FunctionAttributes*) override { return No(); }
  Status SetFunctionAttribute(FunctionHandle, FunctionAttribute, int) override { return No(); }

 private:
  static Status No() { return Status::NotSupported("fake context"); }
  const int device_;
};

// CreateContext can be made to fail, and can be held (a "gate") for every
// thread except one exempt thread (the test's own, so its on-demand
// creations go through while the refill thread is held).
class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(int devices = 1) : devices_(devices) {}
  std::string name() const override { return "fake"; }
  std::string detail() const override { return "test fake"; }
  int device_count() const override { return devices_; }
  Status GetDeviceProperties(int, DeviceProperties*) const override { return Status::NotSupported("fake"); }
  Status GetDeviceAttribute(int, int, std::int64_t*) const override { return Status::NotSupported("fake"); }
  Status GetMemoryInfo(int, std::uint64_t*, std::uint64_t*) const override { return Status::NotSupported("fake"); }

  Status CreateContext(int device, std::unique_ptr<Context>* out) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++calls_;
    call_times_.push_back(std::chrono::steady_clock::now());
    if (std::this_thread::get_id() != exempt_) {
      ++held_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return gate_open_; });
      --held_;
    }
    if (device < 0 || device >= devices_) return Status::InvalidArgument("fake: no GPU " + std::to_string(device));
    if (failing_) return Status::OutOfMemory("fake: no memory for a context");
    out->reset(new FakeContext(device));
    return Status::Ok();
  }

  void SetGate(bool open) {
    std::lock_guard<std::mutex> lock(mu_);
    gate_open_ = open;
    cv_.notify_all();
  }
  void SetFailing(bool failing) {
    std::lock_guard<std::mutex> lock(mu_);
    failing_ = failing;
  }
  void ExemptThisThread() {
    std::lock_guard<std::mutex> lock(mu_);
    exempt_ = std::this_thread::get_id();
  }
  /// Waits until `n` creations are held at the gate.
  bool WaitHeld(int n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return held_ >= n; });
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<std::chrono::steady_clock::time_point> call_times() {
    std::lock_guard<std::mutex> lock(mu_);
    return call_times_;
  }

 private:
  const int devices_;
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool gate_open_ = true;
  bool failing_ = false;
  int held_ = 0;
  int calls_ = 0;
  std::vector<std::chrono::steady_clock::time_point> call_times_;
  std::thread::id exempt_;
};

ContextPoolOptions Pool(int n) {
  ContextPoolOptions o;
  o.contexts_per_device = n;
  return o;
}

std::unique_ptr<Backend> Sim(int devices = 1) {
  SimOptions options;
  options.device_count = devices;
  std::unique_ptr<Backend> b;
  Status s = CreateSimBackend(options, &b);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return b;
}

// ---- the sim backend -------------------------------------------------------------

TEST(ContextPoolTest, FillsEveryDeviceToNInTheBackground) {
  auto backend = Sim(2);
  ContextPool pool(backend.get(), Pool(3));
  ASSERT_TRUE(pool.WaitUntilFull(10s));
  ContextPoolStats s = pool.stats();
  EXPECT_EQ(s.ready, 6u);
  EXPECT_EQ(s.ready_per_device, (std::vector<std::uint64_t>{3, 3}));
  EXPECT_EQ(s.created, 6u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.recent_creation_times.size(), 6u);
  // It stops at N: no further creations while nobody takes.
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(pool.stats().created, 6u);
}

TEST(ContextPoolTest, TakeIsAHitAndTheRefillReplacesIt) {
  auto backend = Sim(2);
  ContextPool pool(backend.get(), Pool(2));
  ASSERT_TRUE(pool.WaitUntilFull(10s));
  std::unique_ptr<Context> ctx;
  POOL_ASSERT_OK(pool.Take(1, &ctx));
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->device(), 1);
  EXPECT_EQ(pool.stats().hits, 1u);
  EXPECT_EQ(pool.stats().misses, 0u);
  ASSERT_TRUE(pool.WaitUntilFull(10s));
  ContextPoolStats s = pool.stats();
  EXPECT_EQ(s.ready_per_device, (std::vector<std::uint64_t>{2, 2}));
  EXPECT_EQ(s.created, 5u);
}

TEST(ContextPoolTest, PooledContextsWork) {
  auto backend = Sim();
  ContextPool pool(backend.get(), Pool(1));
  ASSERT_TRUE(pool.WaitUntilFull(10s));
  std::unique_ptr<Context> ctx;
  POOL_ASSERT_OK(pool.Take(0, &ctx));
  EXPECT_EQ(ctx->library_handle(Library::kCublas), nullptr);  // sim: no vendor libraries
  constexpr std::size_t kBytes = 1 << 20;
  std::vector<std::uint8_t> in(kBytes), out(kBytes, 0);
  for (std::size_t i = 0; i < kBytes; ++i) in[i] = static_cast<std::uint8_t>(i * 7 + 3);
  DevicePtr p = 0;
  POOL_ASSERT_OK(ctx->Allocate(kBytes, 0, &p));
  POOL_ASSERT_OK(ctx->MemcpyAsync(p, reinterpret_cast<std::uint64_t>(in.data()), kBytes,
                                  CopyKind::kHostToDevice, kDefaultStream));
  POOL_ASSERT_OK(ctx->MemcpyAsync(reinterpret_cast<std::uint64_t>(out.data()), p, kBytes,
                                  CopyKind::kDeviceToHost, kDefaultStream));
  POOL_ASSERT_OK(ctx->Synchronize());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), kBytes), 0);
  POOL_ASSERT_OK(ctx->Free(p));
}

TEST(ContextPoolTest, ManyThreadsTakingAtOnceGetDistinctWorkingContexts) {
  auto backend = Sim();
  ContextPool pool(backend.get(), Pool(4));
  ASSERT_TRUE(pool.WaitUntilFull(10s));
  constexpr int kThreads = 8, kEach = 5;
  std::vector<std::vector<std::unique_ptr<Context>>> got(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        std::unique_ptr<Context> c;
        if (!pool.Take(0, &c).ok() || c == nullptr) {
          ++failures;
          continue;
        }
        DevicePtr p = 0;
        if (!c->Allocate(4096, 0, &p).ok() || !c->MemsetAsync(p, 0xab, 1, 4096, kDefaultStream).ok() ||
            !c->Synchronize().ok() || !c->Free(p).ok()) {
          ++failures;
        }
        got[t].push_back(std::move(c));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<Context*> distinct;
  for (auto& v : got) {
    for (auto& c : v) distinct.insert(c.get());
  }
  EXPECT_EQ(distinct.size(), static_cast<std::size_t>(kThreads * kEach));
  ContextPoolStats s = pool.stats();
  EXPECT_EQ(s.hits + s.misses, static_cast<std::uint64_t>(kThreads * kEach));
  EXPECT_GE(s.hits, 4u);  // at least the ones ready before anyone took
  got.clear();
  pool.Shutdown();
  EXPECT_EQ(pool.stats().ready, 0u);
}

TEST(ContextPoolTest, PoolZeroCreatesOnDemand) {
  FakeBackend backend;
  ContextPool pool(&backend, Pool(0));
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(backend.calls(), 0);  // nothing ahead of time
  std::unique_ptr<Context> ctx;
  POOL_ASSERT_OK(pool.Take(0, &ctx));
  ASSERT_NE(ctx, nullptr);
  ContextPoolStats s = pool.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.created, 1u);
  EXPECT_EQ(s.ready, 0u);
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(backend.calls(), 1);  // and no refill afterwards
}

// ---- the fake backend -------------------------------------------------------------

TEST(ContextPoolTest, EmptyPoolMissCreatesOnTheCallingThread) {
  FakeBackend backend;
  backend.ExemptThisThread();
  backend.SetGate(false);  // the refill thread is held inside CreateContext
  {
    ContextPool pool(&backend, Pool(2));
    ASSERT_TRUE(backend.WaitHeld(1, 5s));
    std::unique_ptr<Context> ctx;
    POOL_ASSERT_OK(pool.Take(0, &ctx));  // not held: this thread is exempt
    ASSERT_NE(ctx, nullptr);
    ContextPoolStats s = pool.stats();
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.hits, 0u);
    EXPECT_EQ(s.ready, 0u);
    // Let the refill go: the pool fills, the next Take is a hit.
    backend.SetGate(true);
    ASSERT_TRUE(pool.WaitUntilFull(5s));
    std::unique_ptr<Context> second;
    POOL_ASSERT_OK(pool.Take(0, &second));
    EXPECT_EQ(pool.stats().hits, 1u);
    EXPECT_EQ(pool.stats().misses, 1u);
  }
  EXPECT_EQ(g_live_fake_contexts.load(), 0);
}

TEST(ContextPoolTest, ShutdownWaitsForARefillInProgressAndDestroysEverything) {
  FakeBackend backend;
  backend.SetGate(false);
  ContextPool pool(&backend, Pool(1));
  ASSERT_TRUE(backend.WaitHeld(1, 5s));
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    pool.Shutdown();
    done = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(done.load());  // it waits for the creation in progress
  backend.SetGate(true);
  stopper.join();
  EXPECT_TRUE(done.load());
  EXPECT_EQ(g_live_fake_contexts.load(), 0);  // the late context was destroyed
  EXPECT_EQ(pool.stats().ready, 0u);
  EXPECT_EQ(backend.calls(), 1);  // and no refill after the stop
  pool.Shutdown();                // idempotent
}

TEST(ContextPoolTest, ShutdownDestroysPooledContexts) {
  FakeBackend backend(2);
  {
    ContextPool pool(&backend, Pool(3));
    ASSERT_TRUE(pool.WaitUntilFull(5s));
    EXPECT_EQ(g_live_fake_contexts.load(), 6);
    pool.Shutdown();
    EXPECT_EQ(g_live_fake_contexts.load(), 0);
    // After Shutdown a Take still works, on demand.
    std::unique_ptr<Context> ctx;
    POOL_ASSERT_OK(pool.Take(1, &ctx));
    EXPECT_EQ(pool.stats().misses, 1u);
  }
  EXPECT_EQ(g_live_fake_contexts.load(), 0);
}

TEST(ContextPoolTest, FailingRefillBacksOffThenRecovers) {
  FakeBackend backend;
  backend.SetFailing(true);
  ContextPoolOptions o = Pool(1);
  o.retry_initial = 20ms;
  o.retry_max = 80ms;
  ContextPool pool(&backend, o);
  std::this_thread::sleep_for(400ms);
  // 20+40+80+80+80... ms apart: about 6 tries in 400 ms. A spinning refill
  // would make thousands.
  const int tries = backend.calls();
  EXPECT_GE(tries, 3);
  EXPECT_LE(tries, 10);
  auto times = backend.call_times();
  for (std::size_t i = 1; i < times.size(); ++i) {
    EXPECT_GE(times[i] - times[i - 1], 15ms) << "try " << i << " came too soon";
  }
  EXPECT_EQ(pool.stats().create_failures, static_cast<std::uint64_t>(tries));
  EXPECT_EQ(pool.stats().ready, 0u);

  // A Take meanwhile reports the backend's error (a miss).
  std::unique_ptr<Context> ctx;
  Status s = pool.Take(0, &ctx);
  EXPECT_EQ(s.code(), Status::Code::kOutOfMemory) << s.ToString();
  EXPECT_NE(s.message().find("fake: no memory"), std::string::npos) << s.message();
  EXPECT_EQ(pool.stats().misses, 1u);

  backend.SetFailing(false);
  ASSERT_TRUE(pool.WaitUntilFull(5s));
  EXPECT_EQ(pool.stats().ready, 1u);
}

TEST(ContextPoolTest, BadDeviceIsTheBackendsError) {
  FakeBackend backend;
  ContextPool pool(&backend, Pool(1));
  std::unique_ptr<Context> ctx;
  Status s = pool.Take(3, &ctx);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(ctx, nullptr);
}

TEST(ContextPoolTest, CountersNameEveryStatistic) {
  FakeBackend backend;
  ContextPool pool(&backend, Pool(2));
  ASSERT_TRUE(pool.WaitUntilFull(5s));
  std::unique_ptr<Context> ctx;
  POOL_ASSERT_OK(pool.Take(0, &ctx));
  std::map<std::string, std::uint64_t> c;
  pool.ExportCounters(&c);
  EXPECT_EQ(c["context_pool.size"], 2u);
  EXPECT_EQ(c["context_pool.hits"], 1u);
  EXPECT_EQ(c["context_pool.misses"], 0u);
  EXPECT_GE(c["context_pool.created"], 2u);
  EXPECT_EQ(c["context_pool.create_failures"], 0u);
  EXPECT_TRUE(c.count("context_pool.ready"));
  EXPECT_TRUE(c.count("context_pool.create_us_last"));
  EXPECT_TRUE(c.count("context_pool.create_us_max"));
}

}  // namespace
}  // namespace phos::backend
