// The context pool inside phosd: sessions (and their cudaDeviceReset) take
// their contexts from it, and `phos status --json` shows its counters.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "fake_app.h"
#include "server/daemon.h"
#include "session/session_server.h"

namespace phos::server {
namespace {

using namespace std::chrono_literals;
using session::testing::FakeApp;
using wire::WireStatus;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ContextPoolDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-pool-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    options_.socket_path = dir_ + "/phosd.sock";
    options_.backend.kind = backend::BackendKind::kSim;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// `phos status --json` against the daemon: its stdout.
  std::string StatusJson() {
    const std::string out = dir_ + "/status.json";
    std::string cmd = std::string(PHOS_CLI_PATH) + " status --json --socket " + options_.socket_path + " >" +
                      out + " 2>&1";
    int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << Slurp(out);
    return Slurp(out);
  }
  static std::string Counter(const std::string& name, std::uint64_t value) {
    // proto3 JSON prints uint64 values as strings.
    return "\"" + name + "\": \"" + std::to_string(value) + "\"";
  }

  std::string dir_;
  DaemonOptions options_;
};

TEST_F(ContextPoolDaemonTest, SessionsTakePooledContextsAndStatusShowsTheCounters) {
  options_.pool_size = 2;
  Daemon daemon;
  ASSERT_TRUE(daemon.Start(options_).ok());
  ASSERT_NE(daemon.context_pool(), nullptr);
  ASSERT_TRUE(daemon.context_pool()->WaitUntilFull(10s));

  std::string before = StatusJson();
  EXPECT_NE(before.find(Counter("context_pool.size", 2)), std::string::npos) << before;
  EXPECT_NE(before.find(Counter("context_pool.ready", 2)), std::string::npos) << before;
  EXPECT_NE(before.find(Counter("context_pool.hits", 0)), std::string::npos) << before;

  std::unique_ptr<FakeApp> app;
  Status s = FakeApp::Connect(session::SessionServer::DataSocketPath(options_.socket_path), &app);
  ASSERT_TRUE(s.ok()) << s.ToString();
  uint64_t ptr = 0;
  ASSERT_EQ(app->Malloc(1 << 20, &ptr), WireStatus::kSuccess) << app->message();  // the session runs

  std::string after = StatusJson();
  EXPECT_NE(after.find(Counter("context_pool.hits", 1)), std::string::npos) << after;
  EXPECT_NE(after.find(Counter("context_pool.misses", 0)), std::string::npos) << after;

  // cudaDeviceReset swaps in a fresh context: from the pool too.
  ASSERT_TRUE(daemon.context_pool()->WaitUntilFull(10s));
  ASSERT_EQ(app->Empty(wire::op::kDeviceReset), WireStatus::kSuccess) << app->message();
  EXPECT_EQ(daemon.context_pool()->stats().hits, 2u);
  EXPECT_EQ(daemon.context_pool()->stats().misses, 0u);
  // The fresh context works.
  ASSERT_EQ(app->Malloc(1 << 20, &ptr), WireStatus::kSuccess) << app->message();
  app.reset();
  daemon.Shutdown();
}

TEST_F(ContextPoolDaemonTest, PoolZeroCreatesContextsOnDemand) {
  options_.pool_size = 0;
  Daemon daemon;
  ASSERT_TRUE(daemon.Start(options_).ok());
  std::unique_ptr<FakeApp> app;
  Status s = FakeApp::Connect(session::SessionServer::DataSocketPath(options_.socket_path), &app);
  ASSERT_TRUE(s.ok()) << s.ToString();
  uint64_t ptr = 0;
  ASSERT_EQ(app->Malloc(4096, &ptr), WireStatus::kSuccess) << app->message();
  std::string json = StatusJson();
  EXPECT_NE(json.find(Counter("context_pool.size", 0)), std::string::npos) << json;
  EXPECT_NE(json.find(Counter("context_pool.ready", 0)), std::string::npos) << json;
  EXPECT_NE(json.find(Counter("context_pool.misses", 1)), std::string::npos) << json;
  EXPECT_NE(json.find(Counter("context_pool.hits", 0)), std::string::npos) << json;
}

}  // namespace
}  // namespace phos::server
