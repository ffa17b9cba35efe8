#include "server/socket_guard.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace phos::server {
namespace {

class SocketGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-guard-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(SocketGuardTest, CreatesMissingDirectoryAndWritesPid) {
  std::string path = dir_ + "/a/b/phosd.sock";
  SocketGuard guard;
  bool stale = true;
  ASSERT_TRUE(guard.Acquire(path, &stale).ok());
  EXPECT_FALSE(stale);
  std::ifstream lock(path + ".lock");
  int pid = 0;
  lock >> pid;
  EXPECT_EQ(pid, getpid());
}

TEST_F(SocketGuardTest, SecondGuardIsRefusedUntilFirstReleases) {
  std::string path = dir_ + "/phosd.sock";
  SocketGuard a, b;
  bool stale = false;
  ASSERT_TRUE(a.Acquire(path, &stale).ok());
  Status s = b.Acquire(path, &stale);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  a.Release();
  EXPECT_TRUE(b.Acquire(path, &stale).ok());
}

TEST_F(SocketGuardTest, RegularFileAtPathIsTreatedAsStale) {
  std::string path = dir_ + "/phosd.sock";
  std::ofstream(path) << "junk";
  SocketGuard guard;
  bool stale = false;
  ASSERT_TRUE(guard.Acquire(path, &stale).ok());
  EXPECT_TRUE(stale);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(SocketGuardTest, OverlongPathIsInvalid) {
  SocketGuard guard;
  bool stale = false;
  Status s = guard.Acquire(dir_ + "/" + std::string(200, 'x'), &stale);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace phos::server
