// The data channel (daemon/peer/data_channel.h, data_channel_server.h):
//   - frames and raw runs read back exactly over a socket pair (a reread
//     chunk reusing its buffer), and malformed ones are refused by name;
//   - the listener admits a connection only with a live ticket, once, and
//     tells the handler the ticket's purpose;
//   - good and bad connections at once (threads), each answered or closed;
//   - Shutdown while a handler waits for bytes ends it and returns.
// Label `concurrency`: re-run under ThreadSanitizer.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "peer/data_channel.h"
#include "peer/data_channel_server.h"

namespace phos::peer {
namespace {

using namespace std::chrono_literals;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{};
  tv.tv_sec = 30;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string Hello(const std::string& ticket) {
  return std::string(kDataChannelMagic, sizeof kDataChannelMagic) + ticket;
}

v1::ImageChunk DataHeader(const std::string& path, std::uint64_t raw) {
  v1::ImageChunk c;
  c.mutable_data()->set_path(path);
  c.mutable_data()->set_raw_bytes(raw);
  return c;
}

TEST(DataChannelFraming, FramesAndRawRunsReadBackExactly) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  v1::ImageChunk begin;
  begin.mutable_begin()->set_name("img");
  const std::string bytes(100000, 'z');
  std::thread writer([&] {
    EXPECT_TRUE(WriteFrame(sv[0], begin).ok());
    EXPECT_TRUE(WriteFrame(sv[0], DataHeader("gpu.img", bytes.size())).ok());
    EXPECT_TRUE(WriteAll(sv[0], bytes.data(), bytes.size()).ok());
    close(sv[0]);
  });
  const ReadExactFn read = SocketReader(sv[1]);
  v1::ImageChunk c;
  ASSERT_TRUE(ReadImageChunk(read, &c).ok());
  EXPECT_EQ(c.begin().name(), "img");
  ASSERT_TRUE(ReadImageChunk(read, &c).ok());
  EXPECT_EQ(c.data().path(), "gpu.img");
  EXPECT_EQ(c.data().raw_bytes(), 0u) << "raw bytes must be folded into data";
  EXPECT_EQ(c.data().data(), bytes);
  EXPECT_EQ(ReadImageChunk(read, &c).code(), Status::Code::kNotFound);  // a clean end
  writer.join();
  close(sv[1]);
}

// One chunk object read again and again (as the receiver does) keeps its
// bytes buffer: the next run of the same size or smaller is read straight
// over the previous one, with no pass writing zeros first — and each chunk
// still holds exactly its own bytes, whatever the previous one held.
TEST(DataChannelFraming, ARereadChunkReusesItsBuffer) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const std::string first(200000, 'a'), second(200000, 'b'), shorter(1000, 'c'), third(200000, 'd');
  std::thread writer([&] {
    for (const std::string* b : {&first, &second}) {
      EXPECT_TRUE(WriteFrame(sv[0], DataHeader("gpu.img", b->size())).ok());
      EXPECT_TRUE(WriteAll(sv[0], b->data(), b->size()).ok());
    }
    v1::ImageChunk end;
    end.mutable_file_end()->set_path("gpu.img");
    EXPECT_TRUE(WriteFrame(sv[0], end).ok());
    for (const std::string* b : {&shorter, &third}) {
      EXPECT_TRUE(WriteFrame(sv[0], DataHeader("x", b->size())).ok());
      EXPECT_TRUE(WriteAll(sv[0], b->data(), b->size()).ok());
    }
    close(sv[0]);
  });
  // What the destination held when each 200000-byte run was about to be read.
  std::vector<char> found_before;
  const ReadExactFn socket = SocketReader(sv[1]);
  const ReadExactFn read = [&](void* p, std::size_t n) {
    if (n == first.size()) found_before.push_back(static_cast<const char*>(p)[n - 1]);
    return socket(p, n);
  };
  v1::ImageChunk c;
  ASSERT_TRUE(ReadImageChunk(read, &c).ok());
  EXPECT_EQ(c.data().data(), first);
  const char* buffer = c.data().data().data();
  ASSERT_TRUE(ReadImageChunk(read, &c).ok());
  EXPECT_EQ(c.data().data(), second);
  EXPECT_EQ(c.data().data().data(), buffer) << "the second run went into a new buffer";
  ASSERT_EQ(found_before.size(), 2u);
  EXPECT_EQ(found_before[1], 'a') << "the buffer was overwritten (zero-filled?) before the second run was read";
  ASSERT_TRUE(ReadImageChunk(read, &c).ok());
  EXPECT_EQ(c.file_end().path(), "gpu.img");
  ASSERT_TRUE(ReadImageChunk(read, &c).ok());
  EXPECT_EQ(c.data().data(), shorter);
  ASSERT_TRUE(ReadImageChunk(read, &c).ok());
  EXPECT_EQ(c.data().data(), third);
  EXPECT_EQ(ReadImageChunk(read, &c).code(), Status::Code::kNotFound);
  writer.join();
  close(sv[1]);
}

TEST(DataChannelFraming, MalformedFramesAreRefusedByName) {
  auto feed = [](const std::string& wire, Status* out) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ASSERT_TRUE(WriteAll(sv[0], wire.data(), wire.size()).ok());
    close(sv[0]);
    v1::ImageChunk c;
    *out = ReadImageChunk(SocketReader(sv[1]), &c);
    close(sv[1]);
  };
  Status s;
  feed(std::string(8, '\0'), &s);  // a zero length
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  feed(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8), &s);  // far over the limit
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  feed(std::string("\x10\0\0\0\0\0\0\0abc", 11), &s);  // ends inside the frame
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
  std::string raw_too_big;
  {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ASSERT_TRUE(WriteFrame(sv[0], DataHeader("f", kMaxRawBytes + 1)).ok());
    close(sv[0]);
    v1::ImageChunk c;
    s = ReadImageChunk(SocketReader(sv[1]), &c);
    close(sv[1]);
  }
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
}

// A handler that reads frames until the end and answers with their count.
void CountingHandler(int fd, int purpose, std::atomic<int>* served, std::atomic<int>* last_purpose) {
  const ReadExactFn read = SocketReader(fd);
  v1::ImageChunk c;
  int n = 0;
  while (ReadImageChunk(read, &c).ok()) ++n;
  // Recorded before the reply: the test reads them once the reply came.
  last_purpose->store(purpose);
  served->fetch_add(1);
  v1::DataChannelReply r;
  r.set_code(0);
  r.set_message(std::to_string(n));
  (void)WriteFrame(fd, r);
}

TEST(DataChannelServer, ATicketAdmitsOneConnectionWithItsPurpose) {
  std::atomic<int> served{0}, purpose{-1};
  DataChannelServer server;
  ASSERT_TRUE(server
                  .Start("127.0.0.1", [&](int fd, const std::string&, int p) { CountingHandler(fd, p, &served, &purpose); })
                  .ok());
  ASSERT_GT(server.port(), 0);
  std::string ticket;
  ASSERT_TRUE(server.IssueTicket(v1::DATA_CHANNEL_PRECOPY, &ticket).ok());
  ASSERT_EQ(ticket.size(), kTicketBytes);
  for (int round = 0; round < 2; ++round) {
    const int fd = Connect(server.port());
    ASSERT_GE(fd, 0);
    const std::string hello = Hello(ticket);
    ASSERT_TRUE(WriteAll(fd, hello.data(), hello.size()).ok());
    v1::ImageChunk begin;
    begin.mutable_begin()->set_name("x");
    (void)WriteFrame(fd, begin);
    shutdown(fd, SHUT_WR);
    v1::DataChannelReply r;
    const Status got = ReadFrame(SocketReader(fd), &r);
    if (round == 0) {
      ASSERT_TRUE(got.ok()) << got.ToString();
      EXPECT_EQ(r.message(), "1");
      EXPECT_EQ(purpose.load(), v1::DATA_CHANNEL_PRECOPY);
    } else {
      EXPECT_FALSE(got.ok()) << "a ticket was accepted twice";
    }
    close(fd);
  }
  server.Shutdown();
  EXPECT_EQ(served.load(), 1);
}

TEST(DataChannelServer, GoodAndBadConnectionsAtOnce) {
  std::atomic<int> served{0}, purpose{-1};
  DataChannelServer server;
  ASSERT_TRUE(server
                  .Start("127.0.0.1", [&](int fd, const std::string&, int p) { CountingHandler(fd, p, &served, &purpose); })
                  .ok());
  constexpr int kEach = 6;
  std::atomic<int> answered{0}, closed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2 * kEach; ++t) {
    threads.emplace_back([&, t] {
      const bool good = t % 2 == 0;
      std::string ticket(kTicketBytes, 'b');
      if (good) {
        ASSERT_TRUE(server.IssueTicket(v1::DATA_CHANNEL_IMAGE, &ticket).ok());
      }
      const int fd = Connect(server.port());
      ASSERT_GE(fd, 0);
      const std::string hello = Hello(ticket);
      ASSERT_TRUE(WriteAll(fd, hello.data(), hello.size()).ok());
      for (int k = 0; k <= t; ++k) (void)WriteFrame(fd, DataHeader("f", 0));
      shutdown(fd, SHUT_WR);
      v1::DataChannelReply r;
      if (ReadFrame(SocketReader(fd), &r).ok()) {
        EXPECT_TRUE(good);
        EXPECT_EQ(r.message(), std::to_string(t + 1));
        answered.fetch_add(1);
      } else {
        EXPECT_FALSE(good);
        closed.fetch_add(1);
      }
      close(fd);
    });
  }
  for (auto& th : threads) th.join();
  server.Shutdown();
  EXPECT_EQ(answered.load(), kEach);
  EXPECT_EQ(closed.load(), kEach);
  EXPECT_EQ(served.load(), kEach);
}

TEST(DataChannelServer, ShutdownEndsAHandlerWaitingForBytes) {
  std::atomic<bool> entered{false}, ended{false};
  DataChannelServer server;
  ASSERT_TRUE(server
                  .Start("127.0.0.1",
                         [&](int fd, const std::string&, int) {
                           entered.store(true);
                           v1::ImageChunk c;
                           while (ReadImageChunk(SocketReader(fd), &c).ok()) {
                           }
                           ended.store(true);
                         })
                  .ok());
  std::string ticket;
  ASSERT_TRUE(server.IssueTicket(v1::DATA_CHANNEL_IMAGE, &ticket).ok());
  const int fd = Connect(server.port());
  ASSERT_GE(fd, 0);
  const std::string hello = Hello(ticket);
  ASSERT_TRUE(WriteAll(fd, hello.data(), hello.size()).ok());
  // The handler now waits for a frame that never comes (the source idles).
  for (int i = 0; i < 3000 && !entered.load(); ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(entered.load());
  server.Shutdown();  // returns only once the handler's thread is done
  EXPECT_TRUE(ended.load());
  std::string t2;
  EXPECT_EQ(server.IssueTicket(v1::DATA_CHANNEL_IMAGE, &t2).code(), Status::Code::kUnavailable);
  close(fd);
}

}  // namespace
}  // namespace phos::peer
