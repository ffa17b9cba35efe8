// Data plane ring benchmarks (docs/benchmarks.md "Data plane ring").
//
// (a) the physical floors: two processes ping-pong one 32-bit word each
//     through shared memory, both spinning / both blocking in futex_wait;
// (b) a sync call round trip through the ring (app process <-> "phosd"
//     process that completes every call), with the spin budget as the
//     argument in µs (20 = the default; 0 = sleep at once);
// (c) async post throughput (64-byte payloads) from 1 and 4 app threads
//     while a consumer process drains the ring.
// Every benchmark forks its peer process per run; peers exit when told to
// or after 2 s without progress (no unbounded spinning).
#include <benchmark/benchmark.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <vector>

#include "ring/channel.h"
#include "ring/ring.h"
#include "ring/waiter.h"

using namespace phos::ring;

namespace {

constexpr int64_t kPeerTimeoutNs = 2'000'000'000;

struct alignas(64) Line {
  std::atomic<uint32_t> v{0};
  char pad[60];
};
struct PingPong {
  Line ping;
  Line pong;
  Line stop;
};

PingPong* MapPingPong() {
  void* p = mmap(nullptr, sizeof(PingPong), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  return new (p) PingPong();
}

// Spins until w == want; false after kPeerTimeoutNs or on stop.
bool SpinUntil(std::atomic<uint32_t>& w, uint32_t want, std::atomic<uint32_t>* stop) {
  const int64_t t0 = MonotonicNs();
  for (uint32_t i = 0;; ++i) {
    if (w.load(std::memory_order_acquire) == want) return true;
    CpuRelax();
    if ((i & 1023) == 0) {
      if (stop && stop->load(std::memory_order_relaxed)) return false;
      if (MonotonicNs() - t0 > kPeerTimeoutNs) return false;
    }
  }
}

bool FutexUntil(std::atomic<uint32_t>& w, uint32_t want, std::atomic<uint32_t>* stop) {
  const int64_t t0 = MonotonicNs();
  for (;;) {
    const uint32_t cur = w.load(std::memory_order_acquire);
    if (cur == want) return true;
    if (stop && stop->load(std::memory_order_relaxed)) return false;
    if (MonotonicNs() - t0 > kPeerTimeoutNs) return false;
    FutexWait(&w, cur, 100'000'000);
  }
}

void Reap(pid_t pid) {
  int st;
  waitpid(pid, &st, 0);
}

void BM_FloorSpin(benchmark::State& state) {
  PingPong* pp = MapPingPong();
  pid_t child = fork();
  if (child == 0) {
    for (uint32_t i = 1;; ++i) {
      if (!SpinUntil(pp->ping.v, i, &pp->stop.v)) _exit(0);
      pp->pong.v.store(i, std::memory_order_release);
    }
  }
  uint32_t i = 0;
  for (auto _ : state) {
    ++i;
    pp->ping.v.store(i, std::memory_order_release);
    if (!SpinUntil(pp->pong.v, i, nullptr)) state.SkipWithError("peer did not answer");
  }
  pp->stop.v.store(1);
  Reap(child);
  munmap(pp, sizeof(PingPong));
}
BENCHMARK(BM_FloorSpin)->UseRealTime();

void BM_FloorFutex(benchmark::State& state) {
  PingPong* pp = MapPingPong();
  pid_t child = fork();
  if (child == 0) {
    for (uint32_t i = 1;; ++i) {
      if (!FutexUntil(pp->ping.v, i, &pp->stop.v)) _exit(0);
      pp->pong.v.store(i, std::memory_order_release);
      FutexWake(&pp->pong.v, 1);
    }
  }
  uint32_t i = 0;
  for (auto _ : state) {
    ++i;
    pp->ping.v.store(i, std::memory_order_release);
    FutexWake(&pp->ping.v, 1);
    if (!FutexUntil(pp->pong.v, i, nullptr)) state.SkipWithError("peer did not answer");
  }
  pp->stop.v.store(1);
  FutexWake(&pp->ping.v, 1);
  Reap(child);
  munmap(pp, sizeof(PingPong));
}
BENCHMARK(BM_FloorFutex)->UseRealTime();

// A "phosd" child: completes every call with an 8-byte result, drains
// async posts; exits when the ring is closed.
pid_t ForkServer(SharedRegion* region, uint64_t spin_ns) {
  pid_t child = fork();
  if (child == 0) {
    RingOptions o;
    o.wait.spin_ns = spin_ns;
    o.wait.check_period_ms = 100;
    pid_t parent = getppid();
    o.alive = [parent] { return kill(parent, 0) == 0; };
    RingServer server(region->base(), region->geometry(), o);
    for (;;) {
      Record r;
      if (!server.Next(&r).ok()) _exit(0);
      if (r.wants_reply()) {
        uint64_t v = r.header.call_seq;
        server.Complete(r.header.slot, r.header.call_seq, 0, std::as_bytes(std::span<const uint64_t>(&v, 1)));
      }
      server.Release();
    }
  }
  return child;
}

void BM_RingSyncCall(benchmark::State& state) {
  const uint64_t spin_ns = static_cast<uint64_t>(state.range(0)) * 1000;
  std::unique_ptr<SharedRegion> region;
  if (!SharedRegion::CreateAnonymous(RingConfig{}, 1, &region).ok()) std::abort();
  pid_t child = ForkServer(region.get(), spin_ns);
  RingOptions o;
  o.wait.spin_ns = spin_ns;
  RingClient client(region->base(), region->geometry(), o);
  std::vector<std::byte> payload(32, std::byte{1});
  Reply reply;
  for (auto _ : state) {
    if (!client.Call({}, payload, &reply).ok()) state.SkipWithError("call failed");
  }
  client.Close();
  Reap(child);
}
BENCHMARK(BM_RingSyncCall)->Arg(20)->Arg(0)->ArgName("spin_us")->UseRealTime();

std::unique_ptr<SharedRegion> g_region;
std::unique_ptr<RingClient> g_client;
pid_t g_child = -1;

void BM_RingAsyncPost(benchmark::State& state) {
  if (state.thread_index() == 0) {
    if (!SharedRegion::CreateAnonymous(RingConfig{}, 1, &g_region).ok()) std::abort();
    g_child = ForkServer(g_region.get(), 20'000);
    g_client = std::make_unique<RingClient>(g_region->base(), g_region->geometry(), RingOptions{});
  }
  std::vector<std::byte> payload(64, std::byte{2});
  CallHeader c;
  c.api_id = 1;
  for (auto _ : state) {
    if (!g_client->Post(c, payload).ok()) state.SkipWithError("post failed");
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    // Drain: one sync call completes after every earlier post.
    Reply r;
    (void)g_client->Call({}, {}, &r);
    g_client->Close();
    Reap(g_child);
    g_client.reset();
    g_region.reset();
  }
}
BENCHMARK(BM_RingAsyncPost)->Threads(1)->Threads(4)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
