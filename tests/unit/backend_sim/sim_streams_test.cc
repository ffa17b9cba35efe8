// Sim streams and events: legacy default-stream semantics, event
// generations, and many threads driving many streams at once (these run
// under ThreadSanitizer too).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "sim_test_util.h"

namespace phos::backend::sim_test {
namespace {

// A throttled link makes H2D copies slow enough to observe ordering.
SimOptions SlowLink(double gbps) {
  SimOptions o;
  o.link_gbps = gbps;
  return o;
}

TEST(SimLegacyDefaultStream, DefaultStreamWaitsForPriorWorkOnBlockingStreams) {
  SIM_SEED_TRACE();
  SimFixture f;
  SIM_ASSERT_OK(f.Init(SlowLink(0.5)));
  const std::size_t n = 16 * kMiB;  // ~34 ms on the link
  DevicePtr a = 0, b = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &b));
  auto src = RandomBytes(n, 1);
  std::vector<std::uint8_t> dst(n, 0);
  StreamHandle s = 0;
  SIM_ASSERT_OK(f.ctx->CreateStream(0, 0, &s));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(src.data()), n, CopyKind::kHostToDevice, s));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(b, a, n, CopyKind::kDeviceToDevice, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(H(dst.data()), b, n, CopyKind::kDeviceToHost, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  EXPECT_TRUE(dst == src);
}

TEST(SimLegacyDefaultStream, BlockingStreamsWaitForPriorWorkOnTheDefaultStream) {
  SIM_SEED_TRACE();
  SimFixture f;
  SIM_ASSERT_OK(f.Init(SlowLink(0.5)));
  const std::size_t n = 16 * kMiB;
  DevicePtr a = 0, b = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &b));
  auto src = RandomBytes(n, 2);
  std::vector<std::uint8_t> dst(n, 0);
  StreamHandle s = 0;
  SIM_ASSERT_OK(f.ctx->CreateStream(0, 0, &s));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(src.data()), n, CopyKind::kHostToDevice, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(b, a, n, CopyKind::kDeviceToDevice, s));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(H(dst.data()), b, n, CopyKind::kDeviceToHost, s));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(s));
  EXPECT_TRUE(dst == src);
}

TEST(SimLegacyDefaultStream, SynchronizingTheDefaultStreamWaitsForBlockingStreams) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init(SlowLink(0.5)));
  const std::size_t n = 16 * kMiB;
  DevicePtr a = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  std::vector<std::uint8_t> src(n, 7);
  StreamHandle s = 0;
  SIM_ASSERT_OK(f.ctx->CreateStream(0, 0, &s));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(src.data()), n, CopyKind::kHostToDevice, s));
  SIM_EXPECT_CODE(f.ctx->QueryStream(kDefaultStream), kNotReady);
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  SIM_ASSERT_OK(f.ctx->QueryStream(s));
}

TEST(SimLegacyDefaultStream, NonBlockingStreamsDoNotSynchroniseWithIt) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init(SlowLink(0.25)));
  const std::size_t n = 16 * kMiB;  // ~67 ms on the link
  DevicePtr a = 0, c = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  SIM_ASSERT_OK(f.ctx->Allocate(kMiB, 0, &c));
  std::vector<std::uint8_t> src(n, 7);
  StreamHandle nb = 0;
  SIM_ASSERT_OK(f.ctx->CreateStream(kStreamNonBlocking, 0, &nb));
  // The default stream does not wait for the non-blocking one...
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(src.data()), n, CopyKind::kHostToDevice, nb));
  SIM_ASSERT_OK(f.ctx->MemsetAsync(c, 1, 1, kMiB, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(kDefaultStream));
  SIM_EXPECT_CODE(f.ctx->QueryStream(nb), kNotReady);
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(nb));
  // ...nor the non-blocking one for the default stream.
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(src.data()), n, CopyKind::kHostToDevice, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->MemsetAsync(c, 2, 1, kMiB, nb));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(nb));
  SIM_EXPECT_CODE(f.ctx->QueryStream(kDefaultStream), kNotReady);
  SIM_ASSERT_OK(f.ctx->Synchronize());
}

TEST(SimEvents, StreamWaitEventWaitsForTheRecordCurrentAtTheCall) {
  SIM_SEED_TRACE();
  SimFixture f;
  SIM_ASSERT_OK(f.Init(SlowLink(0.25)));
  const std::size_t n = 8 * kMiB;  // ~34 ms
  DevicePtr x = 0, y = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &x));
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &y));
  auto src = RandomBytes(n, 3);
  std::vector<std::uint8_t> dst(n, 0);
  StreamHandle a = 0, b = 0, c = 0;
  SIM_ASSERT_OK(f.ctx->CreateStream(kStreamNonBlocking, 0, &a));
  SIM_ASSERT_OK(f.ctx->CreateStream(kStreamNonBlocking, 0, &b));
  SIM_ASSERT_OK(f.ctx->CreateStream(kStreamNonBlocking, 0, &c));
  EventHandle e = 0;
  SIM_ASSERT_OK(f.ctx->CreateEvent(0, &e));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(x, H(src.data()), n, CopyKind::kHostToDevice, a));
  SIM_ASSERT_OK(f.ctx->RecordEvent(e, a));
  SIM_ASSERT_OK(f.ctx->StreamWaitEvent(b, e));
  SIM_ASSERT_OK(f.ctx->RecordEvent(e, c));  // re-recorded on an idle stream: completes at once
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(c));
  SIM_ASSERT_OK(f.ctx->QueryEvent(e));      // the event's state is its latest record
  SIM_EXPECT_CODE(f.ctx->QueryStream(a), kNotReady);
  // b still waits for the first record, so it sees all of x.
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(y, x, n, CopyKind::kDeviceToDevice, b));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(H(dst.data()), y, n, CopyKind::kDeviceToHost, b));
  SIM_ASSERT_OK(f.ctx->SynchronizeStream(b));
  EXPECT_TRUE(dst == src);
  SIM_ASSERT_OK(f.ctx->Synchronize());
}

TEST(SimEvents, ElapsedTimeMeasuresTheWorkBetweenTheRecords) {
  SimFixture f;
  SIM_ASSERT_OK(f.Init(SlowLink(1.0)));
  const std::size_t n = 16 * kMiB;
  const double modelled_ms = static_cast<double>(n) / 1e9 * 1e3;  // 16.8 ms
  DevicePtr a = 0;
  SIM_ASSERT_OK(f.ctx->Allocate(n, 0, &a));
  std::vector<std::uint8_t> src(n, 7);
  EventHandle start = 0, end = 0;
  SIM_ASSERT_OK(f.ctx->CreateEvent(0, &start));
  SIM_ASSERT_OK(f.ctx->CreateEvent(0, &end));
  SIM_ASSERT_OK(f.ctx->RecordEvent(start, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->MemcpyAsync(a, H(src.data()), n, CopyKind::kHostToDevice, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->RecordEvent(end, kDefaultStream));
  SIM_ASSERT_OK(f.ctx->SynchronizeEvent(end));
  float ms = 0;
  SIM_ASSERT_OK(f.ctx->ElapsedTime(start, end, &ms));
  EXPECT_GE(ms, 0.9 * modelled_ms);
  EXPECT_LT(ms, 100 * modelled_ms);
  SIM_ASSERT_OK(f.ctx->ElapsedTime(end, start, &ms));
  EXPECT_LE(ms, 0.0f);
}

// Several threads, each driving several streams of one context with random
// data, events between its streams, and allocations coming and going.
TEST(SimConcurrency, ManyThreadsDriveManyStreamsAtOnce) {
  SIM_SEED_TRACE();
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  constexpr int kThreads = 4;
  constexpr int kStreams = 3;
  constexpr int kRounds = 8;
  const std::size_t n = 256 * 1024 + 13;
  std::atomic<int> failures{0};
  auto worker = [&](int t) {
    auto fail = [&](const char* what, const Status& s) {
      ADD_FAILURE() << "thread " << t << ": " << what << ": " << s.ToString();
      failures++;
    };
    Context* ctx = f.ctx.get();
    StreamHandle streams[kStreams];
    DevicePtr in[kStreams], out[kStreams];
    EventHandle events[kStreams];
    for (int i = 0; i < kStreams; ++i) {
      Status s = ctx->CreateStream(i == 0 ? 0 : kStreamNonBlocking, 0, &streams[i]);
      if (s.ok()) s = ctx->Allocate(n, 0, &in[i]);
      if (s.ok()) s = ctx->Allocate(n, 0, &out[i]);
      if (s.ok()) s = ctx->CreateEvent(kEventDisableTiming, &events[i]);
      if (!s.ok()) return fail("setup", s);
    }
    for (int r = 0; r < kRounds; ++r) {
      std::vector<std::vector<std::uint8_t>> src, dst;
      for (int i = 0; i < kStreams; ++i) {
        src.push_back(RandomBytes(n, static_cast<std::uint32_t>(1000 * t + 10 * r + i)));
        dst.emplace_back(n, 0);
      }
      for (int i = 0; i < kStreams; ++i) {
        // Stream i uploads its data, then stream i+1 (after an event) moves
        // it to out[i] and downloads it.
        const int j = (i + 1) % kStreams;
        Status s = ctx->MemcpyAsync(in[i], H(src[i].data()), n, CopyKind::kHostToDevice,
                                    streams[i]);
        if (s.ok()) s = ctx->RecordEvent(events[i], streams[i]);
        if (s.ok()) s = ctx->StreamWaitEvent(streams[j], events[i]);
        if (s.ok()) s = ctx->MemcpyAsync(out[i], in[i], n, CopyKind::kDeviceToDevice, streams[j]);
        if (s.ok()) {
          s = ctx->MemcpyAsync(H(dst[i].data()), out[i], n, CopyKind::kDeviceToHost, streams[j]);
        }
        if (!s.ok()) return fail("enqueue", s);
        std::uint64_t free_bytes = 0, total = 0;
        if (!(s = ctx->GetMemoryInfo(&free_bytes, &total)).ok()) return fail("meminfo", s);
        Status q = ctx->QueryStream(streams[j]);
        if (!q.ok() && q.code() != Status::Code::kNotReady) return fail("query", q);
      }
      // A short-lived allocation and stream while the others run.
      DevicePtr tmp = 0;
      StreamHandle extra = 0;
      Status s = ctx->Allocate(64 * 1024, 0, &tmp);
      if (s.ok()) s = ctx->CreateStream(0, 0, &extra);
      if (s.ok()) s = ctx->MemsetAsync(tmp, 0x42, 4, 16 * 1024, extra);
      if (s.ok()) s = ctx->SynchronizeStream(extra);
      if (s.ok()) s = ctx->DestroyStream(extra);
      if (s.ok()) s = ctx->Free(tmp);
      if (!s.ok()) return fail("temporary", s);
      for (int i = 0; i < kStreams; ++i) {
        if (!(s = ctx->SynchronizeStream(streams[i])).ok()) return fail("sync", s);
      }
      for (int i = 0; i < kStreams; ++i) {
        if (dst[i] != src[i]) {
          ADD_FAILURE() << "thread " << t << " round " << r << " stream " << i << ": data differs";
          failures++;
          return;
        }
      }
    }
    for (int i = 0; i < kStreams; ++i) {
      Status s = ctx->DestroyStream(streams[i]);
      if (s.ok()) s = ctx->DestroyEvent(events[i]);
      if (s.ok()) s = ctx->Free(in[i]);
      if (s.ok()) s = ctx->Free(out[i]);
      if (!s.ok()) return fail("teardown", s);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  // Meanwhile the default stream and a second context are busy too.
  std::unique_ptr<Context> other;
  SIM_ASSERT_OK(f.backend->CreateContext(0, &other));
  DevicePtr d = 0;
  SIM_ASSERT_OK(other->Allocate(n, 0, &d));
  for (int r = 0; r < kRounds; ++r) {
    SIM_ASSERT_OK(other->MemsetAsync(d, static_cast<std::uint32_t>(r), 1, n, kDefaultStream));
    SIM_ASSERT_OK(f.ctx->Synchronize());
  }
  SIM_ASSERT_OK(other->Synchronize());
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  SIM_ASSERT_OK(f.ctx->Synchronize());
  std::uint64_t free_bytes = 0, total = 0;
  SIM_ASSERT_OK(f.ctx->GetMemoryInfo(&free_bytes, &total));
  EXPECT_EQ(free_bytes + 2 * kMiB, total);  // only `other`'s buffer is left
}

TEST(SimConcurrency, DestroyingABusyContextLetsItsWorkFinish) {
  SIM_SEED_TRACE();
  SimFixture f;
  SIM_ASSERT_OK(f.Init());
  const std::size_t n = 4 * kMiB;
  auto src = RandomBytes(n, 5);
  std::vector<std::vector<std::uint8_t>> dst(6, std::vector<std::uint8_t>(n, 0));
  {
    std::unique_ptr<Context> ctx;
    SIM_ASSERT_OK(f.backend->CreateContext(0, &ctx));
    DevicePtr a = 0;
    SIM_ASSERT_OK(ctx->Allocate(n, 0, &a));
    SIM_ASSERT_OK(ctx->MemcpyAsync(a, H(src.data()), n, CopyKind::kHostToDevice, kDefaultStream));
    for (int i = 0; i < 6; ++i) {
      StreamHandle s = 0;
      SIM_ASSERT_OK(ctx->CreateStream(i % 2 ? kStreamNonBlocking : 0, 0, &s));
      EventHandle e = 0;
      SIM_ASSERT_OK(ctx->CreateEvent(0, &e));
      SIM_ASSERT_OK(ctx->RecordEvent(e, kDefaultStream));
      SIM_ASSERT_OK(ctx->StreamWaitEvent(s, e));
      SIM_ASSERT_OK(ctx->MemcpyAsync(H(dst[i].data()), a, n, CopyKind::kDeviceToHost, s));
      if (i == 5) SIM_ASSERT_OK(ctx->DestroyStream(s));
    }
  }  // destroyed with all of that queued
  for (const auto& d : dst) EXPECT_TRUE(d == src);
  std::uint64_t free_bytes = 0, total = 0;
  SIM_ASSERT_OK(f.backend->GetMemoryInfo(0, &free_bytes, &total));
  EXPECT_EQ(free_bytes, total);
}

}  // namespace
}  // namespace phos::backend::sim_test
