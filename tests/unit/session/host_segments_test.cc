// phosd's table of an app's shared pinned host segments
// (daemon/session/host_segments.h): the checks on what an untrusted app
// hands over, address translation bounds, and re-registration with a new
// context (cudaDeviceReset).
#include "session/host_segments.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "backend/backend_factory.h"

namespace phos::session {
namespace {

constexpr uint64_t kBytes = 1 << 20;

// A memfd as libphos.so makes it (sealed unless told otherwise) and the
// "app's" mapping of it.
struct AppSegment {
  int fd = -1;
  std::byte* base = nullptr;
  uint64_t bytes = 0;
  AppSegment(uint64_t n, bool seal) : bytes(n) {
    fd = memfd_create("test-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(n)), 0);
    if (seal) {
      EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    }
    base = static_cast<std::byte*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  }
  ~AppSegment() {
    munmap(base, bytes);
    if (fd >= 0) close(fd);
  }
  int Dup() const { return fcntl(fd, F_DUPFD_CLOEXEC, 0); }
  uint64_t app() const { return reinterpret_cast<uint64_t>(base); }
};

class HostSegmentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(backend::CreateSimBackend(backend::SimOptions{}, &backend_).ok());
    ASSERT_TRUE(backend_->CreateContext(0, &ctx_).ok());
  }
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<backend::Context> ctx_;
};

TEST_F(HostSegmentsTest, MapsASealedMemfdAndTranslatesInsideItOnly) {
  AppSegment seg(kBytes, true);
  HostSegmentTable t;
  ASSERT_TRUE(t.Add(1, seg.app(), kBytes, seg.Dup(), ctx_.get()).ok());
  EXPECT_EQ(t.count(), 1u);
  EXPECT_EQ(t.total_bytes(), kBytes);
  std::byte* p = nullptr;
  ASSERT_TRUE(t.Translate(seg.app() + 100, 50, &p).ok());
  std::memcpy(seg.base + 100, "pinned", 6);  // the app writes; phosd's mapping sees it
  EXPECT_EQ(std::memcmp(p, "pinned", 6), 0);
  EXPECT_TRUE(t.Translate(seg.app(), kBytes, &p).ok());
  EXPECT_FALSE(t.Translate(seg.app(), kBytes + 1, &p).ok());
  EXPECT_FALSE(t.Translate(seg.app() + kBytes - 1, 2, &p).ok()) << "straddles the end";
  EXPECT_FALSE(t.Translate(seg.app() - 1, 2, &p).ok()) << "straddles the start";
  EXPECT_FALSE(t.Translate(seg.app() + 10, UINT64_MAX - 5, &p).ok()) << "overflow";
  EXPECT_FALSE(t.Translate(0, 1, &p).ok());
}

TEST_F(HostSegmentsTest, RefusesWhatAnUntrustedAppCouldAbuse) {
  HostSegmentTable t;
  AppSegment unsealed(kBytes, false);
  Status s = t.Add(1, unsealed.app(), kBytes, unsealed.Dup(), ctx_.get());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sealed"), std::string::npos) << s.ToString();

  AppSegment seg(kBytes, true);
  EXPECT_FALSE(t.Add(2, seg.app(), kBytes * 2, seg.Dup(), ctx_.get()).ok()) << "size larger than the file";
  EXPECT_FALSE(t.Add(2, seg.app(), kBytes / 2, seg.Dup(), ctx_.get()).ok()) << "size smaller than the file";
  EXPECT_FALSE(t.Add(2, seg.app() + 8, kBytes, seg.Dup(), ctx_.get()).ok()) << "unaligned base";
  EXPECT_FALSE(t.Add(0, seg.app(), kBytes, seg.Dup(), ctx_.get()).ok()) << "id 0";
  EXPECT_FALSE(t.Add(2, UINT64_MAX - 4095, kBytes, seg.Dup(), ctx_.get()).ok()) << "wraps";
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  close(pipe_fds[1]);
  EXPECT_FALSE(t.Add(2, seg.app(), kBytes, pipe_fds[0], ctx_.get()).ok()) << "not a memfd";
  EXPECT_EQ(t.count(), 0u);

  ASSERT_TRUE(t.Add(2, seg.app(), kBytes, seg.Dup(), ctx_.get()).ok());
  AppSegment other(kBytes, true);
  EXPECT_FALSE(t.Add(2, other.app(), kBytes, other.Dup(), ctx_.get()).ok()) << "id in use";
  EXPECT_FALSE(t.Add(3, seg.app() + 4096, kBytes, other.Dup(), ctx_.get()).ok()) << "overlaps";
  EXPECT_TRUE(t.Add(3, other.app(), kBytes, other.Dup(), ctx_.get()).ok());
  EXPECT_EQ(t.count(), 2u);
}

TEST_F(HostSegmentsTest, ReRegistersWithANewContextAfterUnregister) {
  AppSegment seg(kBytes, true);
  HostSegmentTable t;
  ASSERT_TRUE(t.Add(1, seg.app(), kBytes, seg.Dup(), ctx_.get()).ok());
  std::byte* p = nullptr;
  ASSERT_TRUE(t.Translate(seg.app(), 16, &p).ok());
  // Registered with ctx_: registering the same mapping again is refused.
  EXPECT_FALSE(ctx_->RegisterHostMemory(p, kBytes).ok());
  t.Unregister(ctx_.get());
  EXPECT_TRUE(ctx_->RegisterHostMemory(p, kBytes).ok()) << "unregistered from the old context";
  EXPECT_TRUE(ctx_->UnregisterHostMemory(p).ok());
  std::unique_ptr<backend::Context> fresh;
  ASSERT_TRUE(backend_->CreateContext(0, &fresh).ok());
  ASSERT_TRUE(t.EnsureRegistered(fresh.get()).ok());
  EXPECT_FALSE(fresh->RegisterHostMemory(p, kBytes).ok()) << "registered with the new context";
  EXPECT_TRUE(t.Translate(seg.app(), 16, &p).ok()) << "the mapping survived";
  t.Unregister(fresh.get());
}

}  // namespace
}  // namespace phos::session
