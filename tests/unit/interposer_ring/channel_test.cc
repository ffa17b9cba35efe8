// The SEQPACKET setup channel across real processes: fork a child that acts
// as the app (or as phosd), pass the memfd, run sync calls, check
// SO_PEERCRED and liveness in both directions.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "ring/channel.h"
#include "ring/ring.h"

namespace phos::ring {
namespace {

std::string SocketName() {
  static std::atomic<int> n{0};
  return "@phos-ring-test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

RingOptions Options(std::function<bool()> alive) {
  RingOptions o;
  o.wait.spin_ns = 20'000;
  o.wait.check_period_ms = 20;
  o.alive = std::move(alive);
  return o;
}

int WaitChild(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

// Child = app: 1000 sync calls with random payloads; the parent (phosd)
// answers each with the payload reversed and xor-ed.
TEST(ChannelTest, ForkedAppThousandSyncCalls) {
  const std::string name = SocketName();
  std::unique_ptr<ChannelListener> listener;
  ASSERT_TRUE(ChannelListener::Listen(name, &listener).ok());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    listener.reset();
    Hello hello;
    hello.pid = getpid();
    hello.cmdline = std::string("app\0--flag", 10);
    std::unique_ptr<ChannelClient> ch;
    std::unique_ptr<SharedRegion> region;
    Status s = ChannelClient::Connect(name, hello, 5000, &ch, &region);
    if (!s.ok()) _exit(10);
    if (ch->session_id() != 42) _exit(11);
    RingClient client(region->base(), region->geometry(), Options([&] { return ch->PeerAlive(); }));
    std::mt19937 rng(getpid());
    for (int i = 0; i < 1000; ++i) {
      std::vector<std::byte> p(rng() % (kSlotResultBytes + 1));
      for (auto& b : p) b = std::byte(rng());
      Reply r;
      CallHeader c;
      c.api_id = static_cast<uint32_t>(i);
      if (!client.Call(c, p, &r).ok()) _exit(12);
      if (r.status != i || r.bytes != p.size()) _exit(13);
      for (size_t k = 0; k < p.size(); ++k) {
        if (r.data[k] != (p[p.size() - 1 - k] ^ std::byte{0x3C})) _exit(14);
      }
    }
    client.Close();
    _exit(0);
  }
  std::unique_ptr<ChannelConnection> conn;
  Status s = listener->Accept(5000, &conn);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(conn->peer_pid(), child);
  EXPECT_EQ(conn->hello().pid, child);
  EXPECT_EQ(conn->hello().cmdline, std::string("app\0--flag", 10));
  std::unique_ptr<SharedRegion> region;
  RingConfig cfg;
  cfg.ring_bytes = 64 << 10;
  cfg.chunk_count = 2;
  ASSERT_TRUE(conn->Establish(cfg, 42, &region).ok());
  RingServer server(region->base(), region->geometry(), Options([&] { return conn->PeerAlive(); }));
  int calls = 0;
  for (;;) {
    Record r;
    s = server.Next(&r);
    if (s.code() == Status::Code::kUnavailable) break;
    ASSERT_TRUE(s.ok()) << s.ToString();
    auto in = RingServer::CopyPayload(r);
    std::vector<std::byte> out(in.rbegin(), in.rend());
    for (auto& b : out) b ^= std::byte{0x3C};
    ASSERT_TRUE(server.Complete(r.header.slot, r.header.call_seq, static_cast<int32_t>(r.header.api_id), out).ok());
    server.Release();
    ++calls;
  }
  EXPECT_EQ(calls, 1000);
  EXPECT_EQ(WaitChild(child), 0);
}

TEST(ChannelTest, PeerCredPidMismatchRejected) {
  const std::string name = SocketName();
  std::unique_ptr<ChannelListener> listener;
  ASSERT_TRUE(ChannelListener::Listen(name, &listener).ok());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    listener.reset();
    Hello hello;
    hello.pid = getpid() + 1;  // lie about the pid
    std::unique_ptr<ChannelClient> ch;
    std::unique_ptr<SharedRegion> region;
    Status s = ChannelClient::Connect(name, hello, 5000, &ch, &region);
    if (s.ok()) _exit(20);
    if (s.code() != Status::Code::kInvalidArgument) _exit(21);
    if (s.message().find("SO_PEERCRED") == std::string::npos && s.message().find("peer is pid") == std::string::npos) _exit(22);
    _exit(0);
  }
  std::unique_ptr<ChannelConnection> conn;
  Status s = listener->Accept(5000, &conn);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(conn, nullptr);
  EXPECT_EQ(WaitChild(child), 0);
}

TEST(ChannelTest, BadHelloRejected) {
  const std::string name = SocketName();
  std::unique_ptr<ChannelListener> listener;
  ASSERT_TRUE(ChannelListener::Listen(name, &listener).ok());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Hello hello;
    hello.pid = getpid();
    hello.protocol_version = 99;
    std::unique_ptr<ChannelClient> ch;
    std::unique_ptr<SharedRegion> region;
    Status s = ChannelClient::Connect(name, hello, 5000, &ch, &region);
    _exit(s.code() == Status::Code::kFailedPrecondition ? 0 : 30);
  }
  std::unique_ptr<ChannelConnection> conn;
  EXPECT_EQ(listener->Accept(5000, &conn).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(WaitChild(child), 0);
}

// The app is SIGKILLed while phosd waits for its next record: phosd's wait
// ends promptly (the socket reports POLLHUP).
TEST(ChannelTest, KilledAppNoticedPromptly) {
  const std::string name = SocketName();
  std::unique_ptr<ChannelListener> listener;
  ASSERT_TRUE(ChannelListener::Listen(name, &listener).ok());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Hello hello;
    hello.pid = getpid();
    std::unique_ptr<ChannelClient> ch;
    std::unique_ptr<SharedRegion> region;
    if (!ChannelClient::Connect(name, hello, 5000, &ch, &region).ok()) _exit(40);
    for (;;) pause();
  }
  std::unique_ptr<ChannelConnection> conn;
  ASSERT_TRUE(listener->Accept(5000, &conn).ok());
  std::unique_ptr<SharedRegion> region;
  ASSERT_TRUE(conn->Establish(RingConfig{}, 1, &region).ok());
  EXPECT_TRUE(conn->PeerAlive());
  RingServer server(region->base(), region->geometry(), Options([&] { return conn->PeerAlive(); }));
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(child, SIGKILL);
  });
  const int64_t t0 = MonotonicNs();
  Record r;
  Status s = server.Next(&r);
  const int64_t dt = MonotonicNs() - t0;
  killer.join();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_LT(dt, 1'500'000'000);  // death at 100 ms, noticed within a 20 ms period (+ slack)
  EXPECT_FALSE(conn->PeerAlive());
  pollfd p{conn->fd(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 1);
  EXPECT_TRUE(p.revents & POLLHUP);
  EXPECT_EQ(WaitChild(child), 128 + SIGKILL);
}

// phosd (a forked child) takes a sync call and dies without answering: the
// app's pending call returns Unavailable within a bounded time.
TEST(ChannelTest, DaemonDeathFailsPendingSyncCall) {
  const std::string name = SocketName();
  std::unique_ptr<ChannelListener> listener;
  ASSERT_TRUE(ChannelListener::Listen(name, &listener).ok());
  pid_t daemon = fork();
  ASSERT_GE(daemon, 0);
  if (daemon == 0) {
    std::unique_ptr<ChannelConnection> conn;
    if (!listener->Accept(5000, &conn).ok()) _exit(50);
    std::unique_ptr<SharedRegion> region;
    if (!conn->Establish(RingConfig{}, 3, &region).ok()) _exit(51);
    RingServer server(region->base(), region->geometry(), Options([&] { return conn->PeerAlive(); }));
    Record r;
    if (!server.Next(&r).ok()) _exit(52);
    raise(SIGKILL);  // die mid-call, without closing anything
    _exit(53);
  }
  listener.reset();
  Hello hello;
  hello.pid = getpid();
  std::unique_ptr<ChannelClient> ch;
  std::unique_ptr<SharedRegion> region;
  Status s = ChannelClient::Connect(name, hello, 5000, &ch, &region);
  ASSERT_TRUE(s.ok()) << s.ToString();
  RingClient client(region->base(), region->geometry(), Options([&] { return ch->PeerAlive(); }));
  Reply reply;
  const int64_t t0 = MonotonicNs();
  s = client.Call({}, {}, &reply);
  const int64_t dt = MonotonicNs() - t0;
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_LT(dt, 2'000'000'000);
  EXPECT_FALSE(ch->PeerAlive());
  EXPECT_EQ(WaitChild(daemon), 128 + SIGKILL);
}

TEST(ChannelTest, MemfdIsSealedAgainstShrinking) {
  std::unique_ptr<SharedRegion> region;
  ASSERT_TRUE(SharedRegion::Create(RingConfig{}, 1, &region).ok());
  EXPECT_NE(ftruncate(region->fd(), 4096), 0);
  EXPECT_EQ(errno, EPERM);
}

}  // namespace
}  // namespace phos::ring
