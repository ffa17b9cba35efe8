// LazyPageConnections (daemon/peer/lazy_page_connections.h): the
// destination's parked lazy-pages connections. Pipes stand in for sockets:
// a closed write end shows as EOF on its read end.
#include "peer/lazy_page_connections.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace phos::peer {
namespace {

// True once every writer of `read_fd`'s pipe is closed (read gives EOF).
bool WriterClosed(int read_fd) {
  char c;
  return read(read_fd, &c, 1) == 0;
}

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    r = p[0];
    w = p[1];
  }
  ~Pipe() { close(r); }
};

TEST(LazyPageConnectionsTest, TakeReturnsWhatWasParkedOnce) {
  LazyPageConnections c;
  Pipe p;
  ASSERT_TRUE(c.Park("img", p.w).ok());
  EXPECT_EQ(c.Take("other"), -1);
  const int fd = c.Take("img");
  EXPECT_EQ(fd, p.w);
  EXPECT_EQ(c.Take("img"), -1) << "taken twice";
  close(fd);
  EXPECT_TRUE(WriterClosed(p.r));
}

TEST(LazyPageConnectionsTest, ASecondConnectionForTheSameImageIsRefusedAndClosed) {
  LazyPageConnections c;
  Pipe first, second;
  ASSERT_TRUE(c.Park("img", first.w).ok());
  const Status s = c.Park("img", second.w);
  EXPECT_EQ(s.code(), Status::Code::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(WriterClosed(second.r)) << "the refused connection was not closed";
  const int fd = c.Take("img");
  EXPECT_EQ(fd, first.w) << "the refusal replaced the first connection";
  close(fd);
}

TEST(LazyPageConnectionsTest, AtMostMaxParked) {
  LazyPageConnections c;
  std::vector<Pipe> pipes(LazyPageConnections::kMaxParked + 1);
  for (std::size_t i = 0; i < LazyPageConnections::kMaxParked; ++i) {
    ASSERT_TRUE(c.Park("img" + std::to_string(i), pipes[i].w).ok());
  }
  const Status s = c.Park("one-too-many", pipes.back().w);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_TRUE(WriterClosed(pipes.back().r));
}

// A connection whose source closed its end (a migration that failed
// before its restore) is dropped at the next Park, so dead connections do
// not fill the kMaxParked slots for kTtl.
TEST(LazyPageConnectionsTest, ConnectionsClosedByTheirSourceAreDropped) {
  LazyPageConnections c;
  int gone[2], live[2], next[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gone), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, live), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, next), 0);
  ASSERT_TRUE(c.Park("gone", gone[0]).ok());
  ASSERT_TRUE(c.Park("live", live[0]).ok());
  close(gone[1]);  // that source went away
  ASSERT_TRUE(c.Park("next", next[0]).ok());
  EXPECT_EQ(c.Take("gone"), -1) << "a connection closed by its source is still parked";
  const int l = c.Take("live");
  EXPECT_EQ(l, live[0]) << "a live connection was dropped";
  close(l);
  close(live[1]);
  const int n = c.Take("next");
  EXPECT_EQ(n, next[0]);
  close(n);
  close(next[1]);
}

TEST(LazyPageConnectionsTest, DestructionClosesWhatIsStillParked) {
  Pipe p;
  {
    LazyPageConnections c;
    ASSERT_TRUE(c.Park("img", p.w).ok());
  }
  EXPECT_TRUE(WriterClosed(p.r));
}

// Parks and takes from several threads, each its own names: every
// connection is taken exactly once (run under ThreadSanitizer too).
TEST(LazyPageConnectionsTest, ConcurrentParkAndTake) {
  LazyPageConnections c;
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::thread> threads;
  std::vector<int> taken(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&c, &taken, t] {
      for (int i = 0; i < kEach; ++i) {
        const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        const std::string name = "t" + std::to_string(t) + "-" + std::to_string(i);
        if (!c.Park(name, fd).ok()) continue;
        const int got = c.Take(name);
        if (got >= 0) {
          ++taken[t];
          close(got);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(taken[t], kEach) << "thread " << t;
}

}  // namespace
}  // namespace phos::peer
