// Copy engines and the link throttle. Timing is checked as ratios to the
// modelled time with generous bounds (sleeps only ever run long, so lower
// bounds are tight and upper bounds loose); never a tight timed test.
#include <algorithm>
#include <chrono>
#include <thread>

#include "backend/sim/sim_copy_engines.h"

#include "sim_test_util.h"

namespace phos::backend::sim_test {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

SimOptions Link(double gbps, int engines) {
  SimOptions o;
  o.link_gbps = gbps;
  o.copy_engines = engines;
  return o;
}

TEST(SimCopyEngines, ThrottledCopiesRunAtTheModelledRate) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init(Link(1.0, 2)));
  const std::size_t n = 32 * kMiB;
  const double modelled_s = static_cast<double>(n) / 1e9;  // 33.5 ms
  DevicePtr a = 0;
  DevicePtr b = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &b));
  SIM_ASSERT_OK(f.ctx->MemsetAsync(a, 0, 1, n, kDefaultStream));  // fault the pages in first
  SIM_ASSERT_OK(f.ctx->MemsetAsync(b, 0, 1, n, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  // What moving the bytes costs this machine right now (an unthrottled D2D
  // copy): under a sanitizer or heavy load it can exceed the modelled time,
  // and the throttle cannot be faster than the copy itself.
  auto c0 = Clock::now();
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(b, a, n, CopyKind::kDeviceToDevice, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  const double copy_cost_s = Seconds(Clock::now() - c0);
  std::vector<std::uint8_t> host(n, 0x3c), back(n, 0);
  for (CopyKind kind : {CopyKind::kHostToDevice, CopyKind::kDeviceToHost}) {
    const bool h2d = kind == CopyKind::kHostToDevice;
    SCOPED_TRACE(h2d ? "H2D" : "D2H");
    const auto t0 = Clock::now();
    SIM_ASSERT_OK(f.ctx->MemcpyAsync(h2d ? a : H(back.data()), h2d ? H(host.data()) : a, n, kind,
                                     kDefaultStream));
    SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
    const double elapsed = Seconds(Clock::now() - t0);
    const double rate_ratio = (static_cast<double>(n) / elapsed) / 1e9;  // measured / modelled
    SCOPED_TRACE("elapsed " + std::to_string(elapsed * 1e3) + " ms, modelled " +
                 std::to_string(modelled_s * 1e3) + " ms, unthrottled copy " +
                 std::to_string(copy_cost_s * 1e3) + " ms");
    EXPECT_GE(elapsed, 0.9 * modelled_s);
    EXPECT_LE(rate_ratio, 1.1);
    // Not far below the modelled rate (unless copying alone is slower).
    EXPECT_GE(rate_ratio, 0.3 * std::min(1.0, modelled_s / copy_cost_s));
  }
  EXPECT_TRUE(back == host);
}

TEST(SimCopyEngines, TwoEnginesRunTwoCopiesInParallelWhileAThirdWaits) {
  // A slow link keeps the CPU work (memcpy) a small part of the modelled
  // time, so the check holds on a loaded machine too.
  SimFixture f;
  SIM_ASSERT_OK(f.Init(Link(0.1, 2)));
  const std::size_t n = 8 * kMiB;
  const double t_ms = static_cast<double>(n) / 0.1e9 * 1e3;  // 84 ms per copy
  std::vector<std::uint8_t> host(n, 1);
  DevicePtr bufs[3];
  StreamHandle streams[3];
  EventHandle start[3], end[3];
  for (int i = 0; i < 3; ++i) {
    SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &bufs[i]));
    SIM_ASSERT_OK(f.ctx->MemsetAsync(bufs[i], 0, 1, n, kDefaultStream));  // fault pages in
    SIM_ASSERT_OK(f.ctx->CreateStream(kStreamNonBlocking, 0, &streams[i]));
    SIM_ASSERT_OK(f.ctx->CreateEvent(0, &start[i]));
    SIM_ASSERT_OK(f.ctx->CreateEvent(0, &end[i]));
  }
  SIM_ASSERT_OK(f.ctx->Synchronize());
  const auto t0 = Clock::now();
  for (int i = 0; i < 3; ++i) {
    SIM_ASSERT_OK(f.ctx->RecordEvent(start[i], streams[i]));
    SIM_ASSERT_OK(f.ctx->MemcpyAsync(bufs[i], H(host.data()), n, CopyKind::kHostToDevice,
                                     streams[i]));
    SIM_ASSERT_OK(f.ctx->RecordEvent(end[i], streams[i]));
  }
  SIM_ASSERT_OK(f.ctx->Synchronize());
  const double total_ms = Seconds(Clock::now() - t0) * 1e3;
  std::vector<float> durations(3);
  for (int i = 0; i < 3; ++i) SIM_ASSERT_OK(f.ctx->ElapsedTime(start[i], end[i], &durations[i]));
  std::sort(durations.begin(), durations.end());
  SCOPED_TRACE("durations " + std::to_string(durations[0]) + " " + std::to_string(durations[1]) +
               " " + std::to_string(durations[2]) + " ms, modelled " + std::to_string(t_ms));
  // Two copies ran at once, each in about one modelled time...
  EXPECT_GE(durations[0], 0.9 * t_ms);
  EXPECT_LT(durations[1], 1.6 * t_ms) << "the first two copies did not run in parallel";
  // ...and the third waited for an engine, so it took about two.
  EXPECT_GE(durations[2], 1.8 * t_ms) << "a third copy ran without a free engine";
  EXPECT_GE(total_ms, 1.8 * t_ms);
  EXPECT_LT(total_ms, 10 * t_ms);
}

TEST(SimCopyEngines, PoolNeverRunsMoreCopiesThanEngines) {
  sim::SimCopyEngines engines(2, 0.1);
  const std::size_t n = 2 * kMiB;  // 21 ms each
  std::vector<std::vector<std::uint8_t>> src(4, std::vector<std::uint8_t>(n, 5));
  std::vector<std::vector<std::uint8_t>> dst(4, std::vector<std::uint8_t>(n, 0));
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { engines.Copy(dst[i].data(), src[i].data(), n); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(engines.peak_in_use(), 2);
  // Four copies on two engines: at least two modelled times.
  EXPECT_GE(Seconds(Clock::now() - t0), 0.9 * 2 * static_cast<double>(n) / 0.1e9);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(dst[i] == src[i]);
}

TEST(SimCopyEngines, OneEngineSerialisesCopies) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init(Link(1.0, 1)));
  const std::size_t n = 16 * kMiB;
  const double t_s = static_cast<double>(n) / 1e9;
  std::vector<std::uint8_t> host(n, 1);
  DevicePtr a = 0, b = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &b));
  StreamHandle s1 = 0, s2 = 0;
  SIM_ASSERT_OK(f.ctx->CreateStream(kStreamNonBlocking, 0, &s1));
  SIM_ASSERT_OK(f.ctx->CreateStream(kStreamNonBlocking, 0, &s2));
  const auto t0 = Clock::now();
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(host.data()), n, CopyKind::kHostToDevice, s1));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(b, H(host.data()), n, CopyKind::kHostToDevice, s2));
  SIM_ASSERT_OK(f.ctx->Synchronize());
  EXPECT_GE(Seconds(Clock::now() - t0), 0.9 * 2 * t_s);
  DeviceProperties p;
  SIM_ASSERT_OK(f.backend->GetDeviceProperties(0, &p));
  EXPECT_EQ(p.async_engine_count, 1);
}

TEST(SimCopyEngines, DeviceToDeviceCopiesAreNotThrottled) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init(Link(0.02, 2)));
  const std::size_t n = 64 * kMiB;
  const double modelled_s = static_cast<double>(n) / 0.02e9;  // 3.4 s if it were throttled
  DevicePtr a = 0, b = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &b));
  SIM_ASSERT_OK(f.ctx->MemsetAsync(b, 0, 1, n, kDefaultStream));  // fault the pages in
  SIM_ASSERT_OK(f.ctx->MemsetAsync(a, 0x11, 1, n, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  const auto t0 = Clock::now();
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(b, a, n, CopyKind::kDeviceToDevice, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  EXPECT_LT(Seconds(Clock::now() - t0), 0.5 * modelled_s);
  EXPECT_EQ(reinterpret_cast<const std::uint8_t*>(b)[n - 1], 0x11);
}

}  // namespace
}  // namespace phos::backend::sim_test
