// The pinned host memory protocol end to end against a SessionServer on the
// sim backend (docs/interposer.md "Pinned host memory and copies"): a fake
// app hands a sealed memfd over the channel, then copies from and to it by
// app address; phosd refuses calls without or unlike their record, host
// ranges outside the segment, and unsealed memfds, and stays usable.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "backend/backend_factory.h"
#include "fake_app.h"
#include "ring/waiter.h"
#include "session/session_server.h"

namespace phos::session {
namespace {

using testing::FakeApp;
using wire::WireStatus;
namespace op = wire::op;

constexpr uint64_t kSeg = 2 << 20;

struct Segment {
  int fd = -1;
  std::byte* base = nullptr;
  explicit Segment(bool seal = true) {
    fd = memfd_create("test-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_EQ(ftruncate(fd, kSeg), 0);
    if (seal) {
      EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    }
    base = static_cast<std::byte*>(mmap(nullptr, kSeg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  }
  ~Segment() {
    munmap(base, kSeg);
    close(fd);
  }
  uint64_t app() const { return reinterpret_cast<uint64_t>(base); }
};

class HostSegmentProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-hostseg-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(backend::CreateSimBackend(backend::SimOptions{}, &backend_).ok());
    server_ = std::make_unique<SessionServer>(backend_.get(), SessionServerOptions{}, SessionCallbacks{});
    path_ = dir_ + "/phosd.sock.data";
    ASSERT_TRUE(server_->Start(path_).ok());
    ASSERT_TRUE(FakeApp::Connect(path_, &app_).ok());
  }
  void TearDown() override {
    app_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  WireStatus Share(const Segment& s, uint64_t id, bool send_record = true, uint64_t call_bytes = kSeg) {
    if (send_record) {
      EXPECT_TRUE(app_->channel()->SendHostSegment({id, kSeg, s.app()}, s.fd).ok());
    }
    return app_->Send(op::kHostSegmentRegister, wire::HostSegmentRequest{id, call_bytes, s.app()});
  }
  wire::HostCopyStatsReply Stats() {
    ring::Reply r;
    EXPECT_EQ(app_->Empty(op::kHostCopyStats, 0, &r), WireStatus::kSuccess);
    wire::HostCopyStatsReply v{};
    EXPECT_EQ(r.bytes, sizeof(v));
    std::memcpy(&v, r.data.data(), sizeof(v));
    return v;
  }

  std::string dir_, path_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<SessionServer> server_;
  std::unique_ptr<FakeApp> app_;
};

// A pageable D2H lands in a reply chunk of the staging arena: phosd
// registers the arena with the context at the first such copy, so the
// device writes it by DMA (pageable D2H ran at 0.21x native on an H200
// without it, docs/benchmarks.md); inline replies need no arena.
TEST_F(HostSegmentProtocolTest, TheStagingArenaIsPinnedAtTheFirstChunkedReadBack) {
  uint64_t dev = 0;
  ASSERT_EQ(app_->Malloc(1 << 20, &dev), WireStatus::kSuccess);
  std::vector<std::byte> small(64);
  ASSERT_EQ(app_->D2H(small.data(), dev, small.size()), WireStatus::kSuccess) << app_->message();
  EXPECT_EQ(Stats().staging_pinned_bytes, 0u);
  std::vector<std::byte> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 13 + 5);
  ASSERT_EQ(app_->H2D(dev, data.data(), data.size()), WireStatus::kSuccess) << app_->message();
  std::vector<std::byte> back(data.size());
  ASSERT_EQ(app_->D2H(back.data(), dev, back.size()), WireStatus::kSuccess) << app_->message();
  EXPECT_TRUE(back == data);
  const uint64_t arena = Stats().staging_pinned_bytes;
  EXPECT_GT(arena, 0u);
  EXPECT_EQ(arena % 4096, 0u);
  // Once per context: a second read-back neither fails nor pins again.
  ASSERT_EQ(app_->D2H(back.data(), dev, back.size()), WireStatus::kSuccess) << app_->message();
  EXPECT_TRUE(back == data);
  EXPECT_EQ(Stats().staging_pinned_bytes, arena);
}

TEST_F(HostSegmentProtocolTest, PinnedCopiesGoStraightThroughTheSharedMapping) {
  Segment seg;
  ASSERT_EQ(Share(seg, 7), WireStatus::kSuccess) << app_->message();
  uint64_t dev = 0;
  ASSERT_EQ(app_->Malloc(1 << 20, &dev), WireStatus::kSuccess);
  constexpr uint64_t kN = 512 << 10;
  auto* src = seg.base + 4096;
  for (uint64_t i = 0; i < kN; ++i) src[i] = static_cast<std::byte>(i * 7 + 3);
  // Posted H2D from pinned memory, then a called D2H into another part of it.
  wire::MemcpyRequest up{dev, seg.app() + 4096, kN, static_cast<uint32_t>(wire::CopyDir::kPinnedToDevice),
                         wire::kNoChunk};
  ASSERT_EQ(app_->Send(op::kMemcpyAsync, up, /*call=*/false), WireStatus::kSuccess);
  wire::MemcpyRequest down{seg.app() + (1 << 20), dev, kN, static_cast<uint32_t>(wire::CopyDir::kDeviceToPinned),
                           wire::kNoChunk};
  ASSERT_EQ(app_->Send(op::kMemcpy, down), WireStatus::kSuccess) << app_->message();
  EXPECT_EQ(std::memcmp(src, seg.base + (1 << 20), kN), 0);
  const auto st = Stats();
  EXPECT_EQ(st.pinned_copies, 2u);
  EXPECT_EQ(st.pinned_bytes, 2 * kN);
  EXPECT_EQ(st.staged_copies, 0u);
  EXPECT_EQ(st.segments, 1u);
  EXPECT_EQ(st.segment_bytes, kSeg);

  // A 2D pinned copy: one record, rows at their pitches.
  wire::Memcpy2DRequest rows{seg.app(), dev, 100, 64, 50, 8, 0, 0,
                             static_cast<uint32_t>(wire::CopyDir::kDeviceToPinned), wire::kNoChunk};
  ASSERT_EQ(app_->Send(op::kMemcpy2D, rows), WireStatus::kSuccess) << app_->message();
  std::vector<std::byte> devcopy(1 << 20);
  ASSERT_EQ(app_->D2H(devcopy.data(), dev, 1 << 20), WireStatus::kSuccess);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(std::memcmp(seg.base + r * 100, devcopy.data() + r * 64, 50), 0) << "row " << r;
  }
  EXPECT_EQ(Stats().pinned_copies, 3u);
}

TEST_F(HostSegmentProtocolTest, RefusesRangesOutsideTheSegment) {
  Segment seg;
  ASSERT_EQ(Share(seg, 1), WireStatus::kSuccess);
  uint64_t dev = 0;
  ASSERT_EQ(app_->Malloc(1 << 20, &dev), WireStatus::kSuccess);
  auto copy = [&](uint64_t host, uint64_t bytes) {
    wire::MemcpyRequest r{dev, host, bytes, static_cast<uint32_t>(wire::CopyDir::kPinnedToDevice), wire::kNoChunk};
    return app_->Send(op::kMemcpy, r);
  };
  EXPECT_EQ(copy(seg.app() + kSeg - 10, 11), WireStatus::kInvalidValue) << "straddles the end";
  EXPECT_EQ(copy(seg.app() - 4096, 16), WireStatus::kInvalidValue) << "before the segment";
  EXPECT_EQ(copy(seg.app() + 8, UINT64_MAX - 4), WireStatus::kInvalidValue) << "overflow";
  std::vector<std::byte> mine(64);
  EXPECT_EQ(copy(reinterpret_cast<uint64_t>(mine.data()), 64), WireStatus::kInvalidValue) << "private memory";
  EXPECT_EQ(copy(seg.app(), kSeg), WireStatus::kInvalidValue) << "device range too small";
  wire::Memcpy2DRequest rows{dev, seg.app(), 64, 4096, 64, 600, 0, 0,
                             static_cast<uint32_t>(wire::CopyDir::kPinnedToDevice), wire::kNoChunk};
  EXPECT_EQ(app_->Send(op::kMemcpy2D, rows), WireStatus::kInvalidValue) << "2D span past the segment";
  EXPECT_EQ(copy(seg.app(), 64), WireStatus::kSuccess) << "still usable";
  EXPECT_EQ(Stats().pinned_copies, 1u);
}

TEST_F(HostSegmentProtocolTest, RefusesCallsWithoutOrUnlikeTheirRecord) {
  Segment seg;
  EXPECT_EQ(Share(seg, 1, /*send_record=*/false), WireStatus::kInvalidValue) << "no record queued";
  EXPECT_EQ(Share(seg, 2, true, /*call_bytes=*/kSeg / 2), WireStatus::kInvalidValue) << "record differs";
  Segment unsealed(/*seal=*/false);
  EXPECT_EQ(Share(unsealed, 3), WireStatus::kInvalidValue);
  EXPECT_NE(app_->message().find("sealed"), std::string::npos) << app_->message();
  EXPECT_EQ(Stats().segments, 0u);
  EXPECT_EQ(Share(seg, 4), WireStatus::kSuccess) << "a proper hand-over still works: " << app_->message();
  EXPECT_EQ(Stats().segments, 1u);
}

// Host functions in stream order (kLaunchHostFunc): the stream stops at the
// gate until the app answers; phosd marks the word reached and rings the
// doorbell first.
TEST_F(HostSegmentProtocolTest, HostFunctionGateHoldsTheStreamUntilTheAppAnswers) {
  Segment seg;
  ASSERT_EQ(Share(seg, 1), WireStatus::kSuccess) << app_->message();
  auto* doorbell = reinterpret_cast<std::atomic<uint32_t>*>(seg.base);
  auto* word = reinterpret_cast<std::atomic<uint32_t>*>(seg.base + 4);
  ASSERT_EQ(app_->StreamCreate(7), WireStatus::kSuccess);
  uint64_t dev = 0;
  ASSERT_EQ(app_->Malloc(4096, &dev), WireStatus::kSuccess);
  word->store(wire::kHostFuncArmed);
  const wire::HostFuncRequest gate{seg.app() + 4, seg.app()};
  ASSERT_EQ(app_->Send(op::kLaunchHostFunc, gate, /*call=*/true, /*stream=*/7), WireStatus::kSuccess)
      << app_->message();
  // Work after the function waits for it.
  ASSERT_EQ(app_->Memset(dev, 0x77, 1, 4096, 7, /*sync=*/false), WireStatus::kSuccess);
  // phosd reaches the gate: it marks the word reached, then rings the
  // doorbell (the app's thread wakes on the doorbell and then reads the
  // words, so that order is the protocol). Wait as the app does — on the
  // doorbell — and the word must already say reached.
  for (uint32_t rung = doorbell->load(); rung == 0; rung = doorbell->load()) {
    (void)ring::FutexWait(doorbell, rung, 10'000'000);
  }
  EXPECT_EQ(word->load(), wire::kHostFuncReached);
  EXPECT_EQ(app_->StreamQuery(7), WireStatus::kNotReady);  // held at the gate
  word->store(wire::kHostFuncDone);
  ring::FutexWake(word, 1);
  ASSERT_EQ(app_->StreamSync(7), WireStatus::kSuccess);
  std::vector<uint8_t> back(4096);
  ASSERT_EQ(app_->D2H(back.data(), dev, back.size(), 7), WireStatus::kSuccess);
  for (uint8_t b : back) ASSERT_EQ(b, 0x77);
}

TEST_F(HostSegmentProtocolTest, HostFunctionGateRefusesWordsOutsideSharedMemory) {
  Segment seg;
  ASSERT_EQ(Share(seg, 1), WireStatus::kSuccess) << app_->message();
  ASSERT_EQ(app_->StreamCreate(7), WireStatus::kSuccess);
  uint32_t mine = 0;
  const auto priv = reinterpret_cast<uint64_t>(&mine);
  EXPECT_EQ(app_->Send(op::kLaunchHostFunc, wire::HostFuncRequest{priv, seg.app()}, true, 7),
            WireStatus::kInvalidValue);
  EXPECT_EQ(app_->Send(op::kLaunchHostFunc, wire::HostFuncRequest{seg.app() + 2, seg.app()}, true, 7),
            WireStatus::kInvalidValue) << "misaligned";
  EXPECT_EQ(app_->Send(op::kLaunchHostFunc, wire::HostFuncRequest{seg.app() + kSeg - 2, seg.app()}, true, 7),
            WireStatus::kInvalidValue) << "straddles the end";
  EXPECT_EQ(app_->Send(op::kLaunchHostFunc, wire::HostFuncRequest{seg.app() + 4, seg.app()}, true, 99),
            WireStatus::kInvalidResourceHandle) << "unknown stream";
  EXPECT_EQ(app_->StreamSync(7), WireStatus::kSuccess) << "nothing was queued";
}

// An app that dies while phosd waits at one of its gates: the session still
// ends (the gate is cancelled), and the device memory comes back.
TEST_F(HostSegmentProtocolTest, AGateWhoseAppIsGoneDoesNotHoldTheTeardown) {
  Segment seg;
  ASSERT_EQ(Share(seg, 1), WireStatus::kSuccess) << app_->message();
  auto* word = reinterpret_cast<std::atomic<uint32_t>*>(seg.base + 4);
  ASSERT_EQ(app_->StreamCreate(7), WireStatus::kSuccess);
  uint64_t dev = 0;
  ASSERT_EQ(app_->Malloc(1 << 20, &dev), WireStatus::kSuccess);
  ASSERT_EQ(app_->Send(op::kLaunchHostFunc, wire::HostFuncRequest{seg.app() + 4, seg.app()}, true, 7),
            WireStatus::kSuccess);
  ASSERT_EQ(app_->Memset(dev, 1, 1, 1 << 20, 7, /*sync=*/false), WireStatus::kSuccess);
  while (word->load() != wire::kHostFuncReached) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  app_.reset();  // never answers
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server_->session_count() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server_->session_count(), 0u);
}

}  // namespace
}  // namespace phos::session
