// The MPSC request ring, completion slots, staging and the waiter, in one
// process (threads stand in for app threads and the phosd session thread).
// Label `concurrency`: re-run under ThreadSanitizer.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "ring/channel.h"
#include "ring/ring.h"
#include "ring/waiter.h"

namespace phos::ring {
namespace {

uint64_t Fnv(std::span<const std::byte> b) {
  uint64_t h = 1469598103934665603ull;
  for (auto x : b) h = (h ^ static_cast<uint8_t>(x)) * 1099511628211ull;
  return h;
}

std::unique_ptr<SharedRegion> MakeRegion(uint64_t ring_bytes, uint32_t slots = 64, uint32_t chunks = 4,
                                         uint32_t chunk_bytes = 64 << 10) {
  RingConfig c;
  c.ring_bytes = ring_bytes;
  c.slot_count = slots;
  c.chunk_count = chunks;
  c.chunk_bytes = chunk_bytes;
  std::unique_ptr<SharedRegion> r;
  Status s = SharedRegion::Create(c, 7, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return r;
}

RingOptions FastOptions() {
  RingOptions o;
  o.wait.spin_ns = 5'000;
  o.wait.check_period_ms = 20;
  return o;
}

TEST(RingLayoutTest, AttachValidatesGeometry) {
  auto region = MakeRegion(8192);
  RingGeometry g;
  ASSERT_TRUE(AttachRegion(region->base(), region->size(), &g).ok());
  EXPECT_EQ(g.ring_bytes, 8192u);
  EXPECT_EQ(g.session_id, 7u);
  EXPECT_EQ(g.ring_offset % kPage, 0u);
  EXPECT_EQ(g.staging_offset % kPage, 0u);
  EXPECT_FALSE(AttachRegion(region->base(), region->size() - 4096, &g).ok());
  auto* h = static_cast<RegionHeader*>(region->base());
  h->ring_bytes = 12345;
  EXPECT_EQ(AttachRegion(region->base(), region->size(), &g).code(), Status::Code::kCorruption);
  h->ring_bytes = 8192;
  h->version = 99;
  EXPECT_EQ(AttachRegion(region->base(), region->size(), &g).code(), Status::Code::kFailedPrecondition);
}

// 4 producers x 10k records of random sizes and contents; the consumer sees
// every producer's records in order with intact checksums. The ring is small
// so it wraps hundreds of times and producers hit backpressure.
TEST(RingTest, MpscFourProducersInOrderWithChecksums) {
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 10000;
  auto region = MakeRegion(16384);
  RingClient client(region->base(), region->geometry(), FastOptions());
  RingServer server(region->base(), region->geometry(), FastOptions());
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      std::mt19937_64 rng(1000 + p);
      std::vector<std::byte> payload;
      for (int i = 0; i < kPerProducer; ++i) {
        const size_t n = 16 + rng() % 700;
        payload.resize(n);
        for (size_t k = 16; k < n; ++k) payload[k] = std::byte(rng());
        const uint32_t seq = static_cast<uint32_t>(i);
        const uint32_t id = static_cast<uint32_t>(p);
        std::memcpy(payload.data(), &id, 4);
        std::memcpy(payload.data() + 4, &seq, 4);
        const uint64_t sum = Fnv(std::span<const std::byte>(payload).subspan(16));
        std::memcpy(payload.data() + 8, &sum, 8);
        CallHeader call;
        call.api_id = id;
        ASSERT_TRUE(client.Post(call, payload).ok());
      }
    });
  }
  std::vector<uint32_t> next(kProducers, 0);
  int total = 0;
  while (total < kProducers * kPerProducer) {
    Record r;
    Status s = server.Next(&r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_GE(r.payload.size(), 16u);
    auto copy = RingServer::CopyPayload(r);
    uint32_t id, seq;
    uint64_t sum;
    std::memcpy(&id, copy.data(), 4);
    std::memcpy(&seq, copy.data() + 4, 4);
    std::memcpy(&sum, copy.data() + 8, 8);
    ASSERT_LT(id, static_cast<uint32_t>(kProducers));
    ASSERT_EQ(r.header.api_id, id);
    ASSERT_EQ(seq, next[id]) << "producer " << id << " out of order";
    ASSERT_EQ(sum, Fnv(std::span<const std::byte>(copy).subspan(16))) << "checksum";
    ++next[id];
    ++total;
    server.Release();
  }
  for (auto& t : producers) t.join();
  Record r;
  EXPECT_EQ(server.TryNext(&r).code(), Status::Code::kNotReady);
}

TEST(RingTest, WraparoundWithPadFrames) {
  auto region = MakeRegion(4096);
  RingClient client(region->base(), region->geometry(), FastOptions());
  RingServer server(region->base(), region->geometry(), FastOptions());
  std::mt19937 rng(3);
  uint64_t posted = 0;
  for (int lap = 0; lap < 2000; ++lap) {
    // Post 1-3 records of sizes that do not divide the ring evenly.
    const int k = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < k; ++i) {
      std::vector<std::byte> p(100 + rng() % 800, std::byte(posted & 0xFF));
      CallHeader c;
      c.api_id = static_cast<uint32_t>(posted++);
      ASSERT_TRUE(client.Post(c, p).ok());
    }
    for (int i = 0; i < k; ++i) {
      Record r;
      ASSERT_TRUE(server.TryNext(&r).ok());
      EXPECT_FALSE(r.is_pad());
      EXPECT_EQ(r.header.api_id, static_cast<uint32_t>(posted - k + i));
      for (auto b : r.payload) ASSERT_EQ(b, std::byte((posted - k + i) & 0xFF));
      server.Release();
    }
  }
  auto* h = static_cast<RegionHeader*>(region->base());
  EXPECT_GT(h->head.load(), 100u * 4096u);  // wrapped many times
}

// Interrupt() wakes a consumer asleep in Next() (check_period is long, so
// only the doorbell wake-up can end the wait in time), Next reports it as
// NotReady("interrupted") exactly once, a ready record wins over a pending
// interrupt, and records posted afterwards still arrive in order.
TEST(RingTest, InterruptWakesSleepingConsumer) {
  auto region = MakeRegion(8192);
  RingOptions slow = FastOptions();
  slow.wait.check_period_ms = 5000;
  RingClient client(region->base(), region->geometry(), slow);
  RingServer server(region->base(), region->geometry(), slow);
  for (int round = 0; round < 50; ++round) {
    std::atomic<bool> returned{false};
    Status got;
    std::thread consumer([&] {
      Record r;
      got = server.Next(&r);
      returned.store(true);
    });
    // Let the consumer reach its futex sleep on most rounds (and race it on
    // the others: the handshake must not lose the wake-up either way).
    if (round % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto t0 = std::chrono::steady_clock::now();
    server.Interrupt();
    consumer.join();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    EXPECT_TRUE(returned.load());
    EXPECT_EQ(got.code(), Status::Code::kNotReady) << got.ToString();
    EXPECT_EQ(got.message(), "interrupted");
    EXPECT_FALSE(server.interrupt_pending());
  }
  // A record that is ready is returned first; the interrupt stays pending
  // and ends the next wait at once.
  std::vector<std::byte> p(64, std::byte{7});
  CallHeader c;
  c.api_id = 42;
  ASSERT_TRUE(client.Post(c, p).ok());
  server.Interrupt();
  Record r;
  ASSERT_TRUE(server.Next(&r).ok());
  EXPECT_EQ(r.header.api_id, 42u);
  server.Release();
  EXPECT_TRUE(server.interrupt_pending());
  EXPECT_EQ(server.Next(&r).code(), Status::Code::kNotReady);
  // Interrupts from several threads while a producer posts: every record
  // still arrives, in order.
  std::atomic<bool> stop{false};
  std::thread interrupter([&] {
    while (!stop.load()) {
      server.Interrupt();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::thread producer([&] {
    for (uint32_t i = 0; i < 2000; ++i) {
      CallHeader h;
      h.api_id = i;
      ASSERT_TRUE(client.Post(h, p).ok());
    }
  });
  uint32_t next = 0;
  while (next < 2000) {
    Status s = server.Next(&r);
    if (s.code() == Status::Code::kNotReady) continue;
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(r.header.api_id, next);
    ++next;
    server.Release();
  }
  producer.join();
  stop.store(true);
  interrupter.join();
}

TEST(RingTest, TooLargePayloadRejected) {
  auto region = MakeRegion(4096);
  RingClient client(region->base(), region->geometry(), FastOptions());
  std::vector<std::byte> p(client.max_payload_bytes() + 1);
  EXPECT_EQ(client.Post({}, p).code(), Status::Code::kInvalidArgument);
  p.resize(client.max_payload_bytes());
  EXPECT_TRUE(client.Post({}, p).ok());
}

// A full ring blocks producers (never drops); they resume as space frees.
TEST(RingTest, FullRingBackpressure) {
  auto region = MakeRegion(4096);
  RingClient client(region->base(), region->geometry(), FastOptions());
  RingServer server(region->base(), region->geometry(), FastOptions());
  std::atomic<int> posted{0};
  std::thread producer([&] {
    std::vector<std::byte> p(900);  // frame 960: 4 fit in 4096
    for (int i = 0; i < 50; ++i) {
      CallHeader c;
      c.api_id = static_cast<uint32_t>(i);
      ASSERT_TRUE(client.Post(c, p).ok());
      posted.fetch_add(1);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_LE(posted.load(), 4);  // blocked on a full ring
  EXPECT_GE(posted.load(), 1);
  for (int i = 0; i < 50; ++i) {
    Record r;
    Status s = server.Next(&r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(r.header.api_id, static_cast<uint32_t>(i));
    server.Release();
  }
  producer.join();
  EXPECT_EQ(posted.load(), 50);
}

// Sync calls from 4 threads; a server thread echoes a transform of the
// payload through the completion slots.
TEST(RingTest, SyncCallRoundTrip) {
  auto region = MakeRegion(16384, 8);
  RingClient client(region->base(), region->geometry(), FastOptions());
  RingServer server(region->base(), region->geometry(), FastOptions());
  std::atomic<bool> stop{false};
  std::thread daemon([&] {
    while (!stop.load()) {
      Record r;
      Status s = server.Next(&r);
      if (s.code() == Status::Code::kUnavailable) return;
      ASSERT_TRUE(s.ok()) << s.ToString();
      auto in = RingServer::CopyPayload(r);
      std::vector<std::byte> out(in.rbegin(), in.rend());
      for (auto& b : out) b ^= std::byte{0xA5};
      if (r.wants_reply()) {
        ASSERT_TRUE(server.Complete(r.header.slot, r.header.call_seq, static_cast<int32_t>(in.size()), out).ok());
      }
      server.Release();
    }
  });
  std::vector<std::thread> apps;
  for (int t = 0; t < 4; ++t) {
    apps.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 1000; ++i) {
        std::vector<std::byte> p(rng() % (kSlotResultBytes + 1));
        for (auto& b : p) b = std::byte(rng());
        Reply reply;
        CallHeader c;
        c.api_id = 9;
        ASSERT_TRUE(client.Call(c, p, &reply).ok());
        ASSERT_EQ(reply.status, static_cast<int32_t>(p.size()));
        ASSERT_EQ(reply.bytes, p.size());
        for (size_t k = 0; k < p.size(); ++k) {
          ASSERT_EQ(reply.data[k], p[p.size() - 1 - k] ^ std::byte{0xA5});
        }
        if (i % 10 == 0) {
          ASSERT_TRUE(client.Post(c, p).ok());  // async calls interleaved
        }
      }
    });
  }
  for (auto& t : apps) t.join();
  client.Close();
  daemon.join();
}

// Bulk bytes through the staging arena: 3 MiB + 5 bytes in 64 KiB chunks,
// 4 chunks in flight, reassembled by the server.
TEST(RingTest, StagingBulkPipelined) {
  auto region = MakeRegion(16384, 8, 4, 64 << 10);
  RingClient client(region->base(), region->geometry(), FastOptions());
  RingServer server(region->base(), region->geometry(), FastOptions());
  std::vector<std::byte> data((3 << 20) + 5);
  std::mt19937 rng(11);
  for (auto& b : data) b = std::byte(rng());
  std::vector<std::byte> got(data.size());
  std::thread daemon([&] {
    for (;;) {
      Record r;
      ASSERT_TRUE(server.Next(&r).ok());
      ASSERT_TRUE(r.has_staging);
      ASSERT_EQ(r.payload.size(), sizeof(StagingRef) + 4);
      auto bytes = server.StagingBytes(r.staging);
      ASSERT_LE(r.staging.offset + bytes.size(), got.size());
      std::memcpy(got.data() + r.staging.offset, bytes.data(), bytes.size());
      server.FreeChunk(r.staging.chunk);
      const bool last = r.header.flags & kFlagLastPiece;
      server.Release();
      if (last) return;
    }
  });
  const char meta[4] = {'m', 'e', 't', 'a'};
  ASSERT_TRUE(client.PostBulk({}, std::as_bytes(std::span<const char>(meta, 4)), data).ok());
  daemon.join();
  EXPECT_TRUE(got == data);
}

TEST(RingTest, GarbageCommitWordIsCorruptionAndSticky) {
  auto region = MakeRegion(4096);
  RingServer server(region->base(), region->geometry(), FastOptions());
  auto* ring = static_cast<std::byte*>(region->base()) + region->geometry().ring_offset;
  uint64_t bad = 0xDEADBEEF;
  std::memcpy(ring, &bad, 8);
  Record r;
  EXPECT_EQ(server.TryNext(&r).code(), Status::Code::kCorruption);
  EXPECT_EQ(server.Next(&r).code(), Status::Code::kCorruption);
  // A committed but malformed frame is corruption too.
  auto region2 = MakeRegion(4096);
  RingServer server2(region2->base(), region2->geometry(), FastOptions());
  auto* ring2 = static_cast<std::byte*>(region2->base()) + region2->geometry().ring_offset;
  FrameHeader h{};
  h.commit = 1;
  h.frame_bytes = 8192;  // larger than the ring
  h.kind = 1;
  std::memcpy(ring2, &h, sizeof(h));
  EXPECT_EQ(server2.TryNext(&r).code(), Status::Code::kCorruption);
}

TEST(RingTest, ServerCloseFailsPendingCall) {
  auto region = MakeRegion(4096);
  RingClient client(region->base(), region->geometry(), FastOptions());
  RingServer server(region->base(), region->geometry(), FastOptions());
  std::thread daemon([&] {
    Record r;
    ASSERT_TRUE(server.Next(&r).ok());  // take the call, never answer it
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server.Close();
  });
  Reply reply;
  const int64_t t0 = MonotonicNs();
  Status s = client.Call({}, {}, &reply);
  const int64_t dt = MonotonicNs() - t0;
  daemon.join();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_LT(dt, 2'000'000'000);
  EXPECT_EQ(client.Post({}, {}).code(), Status::Code::kUnavailable);
}

TEST(RingTest, DeadPeerFailsPendingCallViaAliveCheck) {
  auto region = MakeRegion(4096);
  std::atomic<bool> alive{true};
  RingOptions o = FastOptions();
  o.alive = [&] { return alive.load(); };
  RingClient client(region->base(), region->geometry(), o);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    alive.store(false);  // the daemon "died" without setting closed
  });
  Reply reply;
  const int64_t t0 = MonotonicNs();
  Status s = client.Call({}, {}, &reply);
  const int64_t dt = MonotonicNs() - t0;
  killer.join();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_LT(dt, 1'000'000'000);  // one check period (20 ms) after the death, plus slack
}

// ---------------------------------------------------------------- waiter

int64_t ThreadCpuNs() {
  rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return (int64_t{ru.ru_utime.tv_sec} + ru.ru_stime.tv_sec) * 1'000'000'000 +
         (int64_t{ru.ru_utime.tv_usec} + ru.ru_stime.tv_usec) * 1000;
}

// An idle waiter sleeps: over 300 ms of waiting it uses far less than
// 20 ms of CPU (spinning would use ~300 ms).
TEST(WaiterTest, IdleWaiterBurnsNoCpu) {
  EventWord ev;
  std::atomic<uint32_t> closed{0};
  int64_t cpu = 0;
  Status s;
  std::thread t([&] {
    const int64_t c0 = ThreadCpuNs();
    WaitPolicy p;  // default spin (20 µs), 100 ms periods
    p.deadline_ns = MonotonicNs() + 300'000'000;
    s = WaitFor(&ev, [] { return false; }, &closed, {}, p);
    cpu = ThreadCpuNs() - c0;
  });
  t.join();
  EXPECT_EQ(s.code(), Status::Code::kNotReady);
  EXPECT_LT(cpu, 20'000'000) << "waiter used " << cpu / 1000 << " µs of CPU";
}

TEST(WaiterTest, NotifyWakesSleeper) {
  EventWord ev;
  std::atomic<uint32_t> flag{0};
  int64_t woke_after = 0;
  std::thread t([&] {
    WaitPolicy p;
    p.spin_ns = 0;
    p.check_period_ms = 10'000;  // only a Notify can end this wait quickly
    const int64_t t0 = MonotonicNs();
    ASSERT_TRUE(WaitFor(&ev, [&] { return flag.load(std::memory_order_acquire) != 0; }, nullptr, {}, p).ok());
    woke_after = MonotonicNs() - t0;
  });
  // Wait until it sleeps, then wake it.
  while (ev.sleepers.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  flag.store(1, std::memory_order_release);
  Notify(&ev);
  t.join();
  EXPECT_LT(woke_after, 5'000'000'000);
  EXPECT_EQ(ev.sleepers.load(), 0u);
}

TEST(WaiterTest, NotifyWithoutSleepersMakesNoChange) {
  EventWord ev;
  Notify(&ev);
  EXPECT_EQ(ev.epoch.load(), 0u);  // no sleeper: no bump, no syscall
}

TEST(WaiterTest, ClosedWordEndsWait) {
  EventWord ev;
  std::atomic<uint32_t> closed{0};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    closed.store(1);
    Notify(&ev);
  });
  WaitPolicy p;
  p.check_period_ms = 10'000;
  EXPECT_EQ(WaitFor(&ev, [] { return false; }, &closed, {}, p).code(), Status::Code::kUnavailable);
  t.join();
}

}  // namespace
}  // namespace phos::ring
