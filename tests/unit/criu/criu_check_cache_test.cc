// CriuClient::Check()'s cache (criu_client.h, docs/criu.md "Check"): a
// passed check is remembered per binary and that file's identity, a failed
// one never, and a failed CRIU call drops the remembered pass.
//
// The binary is a shell wrapper that appends one line to a log every time
// libcriu starts it (Check's probe starts it twice: version, feature
// check), then fails while a marker file exists or execs the real criu.
// The log says whether a Check probed. The passing cases need root and
// CRIU >= 4.0 and skip ("skipped: ...") without them.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "criu/criu_client.h"

namespace phos::criu {
namespace {

namespace fs = std::filesystem;

// The real criu (PATH), or "" when there is none.
std::string FindCriu() {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path != nullptr ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string p = (dir.empty() ? "." : dir) + "/criu";
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

class CriuCheckCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-criu-check-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    wrapper_ = dir_ + "/criu-wrapper";
    log_ = dir_ + "/starts";
    marker_ = dir_ + "/fail";
    CriuClient::ForgetChecks();
  }
  void TearDown() override {
    CriuClient::ForgetChecks();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes the wrapper (a new file: new inode) around `real` ("" = one
  // that always fails). `comment` changes its content (size).
  void WriteWrapper(const std::string& real, const std::string& comment = "") {
    const std::string tmp = wrapper_ + ".new";
    {
      std::ofstream f(tmp);
      f << "#!/bin/sh\n# criu_check_cache_test " << comment << "\n"
        << "echo start >> '" << log_ << "'\n"
        << "if [ -e '" << marker_ << "' ]; then exit 1; fi\n";
      if (real.empty()) {
        f << "exit 1\n";
      } else {
        f << "exec '" << real << "' \"$@\"\n";
      }
    }
    fs::permissions(tmp, fs::perms::owner_all);
    fs::rename(tmp, wrapper_);
  }

  // How many times the wrapper was started so far.
  int Starts() const {
    std::ifstream f(log_);
    int n = 0;
    for (std::string line; std::getline(f, line);) ++n;
    return n;
  }

  void Fail(bool on) {
    if (on) {
      std::ofstream(marker_) << "1\n";
    } else {
      fs::remove(marker_);
    }
  }

  // A directory that passes Restore's own checks (inventory.img exists),
  // so the call reaches libcriu and starts the binary.
  std::string FakeImages() {
    const std::string d = dir_ + "/images";
    fs::create_directories(d);
    std::ofstream(d + "/inventory.img") << "x";
    return d;
  }

  // Skips unless the real criu passes a (fresh) check here.
  void RequireCriu(std::string* real) {
    if (::geteuid() != 0) GTEST_SKIP() << "skipped: CRIU needs root";
    *real = FindCriu();
    if (real->empty()) GTEST_SKIP() << "skipped: no criu on PATH";
    Status s = CriuClient::Check(*real);
    if (!s.ok()) GTEST_SKIP() << "skipped: CRIU not usable here: " << s.ToString();
  }

  std::string dir_, wrapper_, log_, marker_;
};

// Passed once: later Checks of the same file start nothing.
TEST_F(CriuCheckCacheTest, APassedCheckIsRememberedAndProbesOnce) {
  std::string real;
  RequireCriu(&real);
  WriteWrapper(real);
  ASSERT_TRUE(CriuClient::Check(wrapper_).ok());
  const int probe = Starts();
  EXPECT_GE(probe, 1) << "the first Check did not start the binary";
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(CriuClient::Check(wrapper_).ok());
  EXPECT_EQ(Starts(), probe) << "a remembered pass probed again";
  // ForgetChecks: probes again.
  CriuClient::ForgetChecks();
  ASSERT_TRUE(CriuClient::Check(wrapper_).ok());
  EXPECT_EQ(Starts(), 2 * probe);
}

// A replaced or edited binary is checked again, and a broken replacement is
// refused at once.
TEST_F(CriuCheckCacheTest, AReplacedBinaryIsCheckedAgain) {
  std::string real;
  RequireCriu(&real);
  WriteWrapper(real);
  ASSERT_TRUE(CriuClient::Check(wrapper_).ok());
  const int probe = Starts();

  WriteWrapper(real, "v2");  // new inode and size
  ASSERT_TRUE(CriuClient::Check(wrapper_).ok());
  EXPECT_EQ(Starts(), 2 * probe) << "a replaced binary was not checked again";

  // Edited in place (same inode): mtime/ctime/size change.
  {
    std::ofstream f(wrapper_, std::ios::app);
    f << "# edited\n";
  }
  ASSERT_TRUE(CriuClient::Check(wrapper_).ok());
  EXPECT_EQ(Starts(), 3 * probe) << "an edited binary was not checked again";

  WriteWrapper("", "broken");
  Status broken = CriuClient::Check(wrapper_);
  EXPECT_EQ(broken.code(), Status::Code::kUnavailable) << broken.ToString();
  EXPECT_NE(broken.message().find(wrapper_), std::string::npos) << broken.ToString();
}

// The cache cannot see the wrapper start failing (its file is unchanged):
// Check still passes, the next CRIU call fails on its own and drops the
// pass, so the Check after it probes and refuses; a failure is never
// remembered, and once CRIU works again the pass is remembered again.
TEST_F(CriuCheckCacheTest, AFailedCallDropsThePassAndFailuresAreNotRemembered) {
  std::string real;
  RequireCriu(&real);
  WriteWrapper(real);
  ASSERT_TRUE(CriuClient::Check(wrapper_).ok());
  const int probe = Starts();

  Fail(true);
  EXPECT_TRUE(CriuClient::Check(wrapper_).ok()) << "the pass should still be remembered";
  EXPECT_EQ(Starts(), probe);
  RestoreOptions ro;
  ro.criu_binary = wrapper_;
  pid_t pid = 0;
  Status restore = CriuClient::Restore(FakeImages(), ro, &pid);
  EXPECT_FALSE(restore.ok());
  const int after_restore = Starts();
  EXPECT_EQ(after_restore, probe + 1) << "Restore did not start the binary";

  Status refused = CriuClient::Check(wrapper_);
  EXPECT_EQ(refused.code(), Status::Code::kUnavailable) << refused.ToString();
  EXPECT_NE(refused.message().find(wrapper_), std::string::npos) << refused.ToString();
  EXPECT_GT(Starts(), after_restore) << "the Check after a failed call did not probe";
  const int after_refusal = Starts();
  EXPECT_FALSE(CriuClient::Check(wrapper_).ok());
  EXPECT_GT(Starts(), after_refusal) << "a failed check was remembered";

  Fail(false);
  const int before_pass = Starts();
  ASSERT_TRUE(CriuClient::Check(wrapper_).ok());
  EXPECT_EQ(Starts(), before_pass + probe);
  ASSERT_TRUE(CriuClient::Check(wrapper_).ok());
  EXPECT_EQ(Starts(), before_pass + probe) << "the new pass was not remembered";
}

// Runs without CRIU (as root): a binary that always fails is probed on
// every Check and refused each time.
TEST_F(CriuCheckCacheTest, ABinaryThatFailsIsProbedEveryTime) {
  if (::geteuid() != 0) GTEST_SKIP() << "skipped: Check refuses non-root before probing";
  WriteWrapper("");
  for (int i = 1; i <= 3; ++i) {
    Status s = CriuClient::Check(wrapper_);
    EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
    EXPECT_EQ(Starts(), i) << "check " << i;
  }
}

// A name that resolves to nothing is refused (nothing to remember).
TEST_F(CriuCheckCacheTest, AMissingBinaryIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "skipped: Check refuses non-root before probing";
  const std::string missing = dir_ + "/no-such-criu";
  for (int i = 0; i < 2; ++i) {
    Status s = CriuClient::Check(missing);
    EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find(missing), std::string::npos) << s.ToString();
  }
}

}  // namespace
}  // namespace phos::criu
