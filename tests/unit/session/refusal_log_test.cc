// A call phosd refuses (cudaErrorNotSupported) is named in phosd's log once
// per session, with the reason, whether the app called it or posted it
// (a posted refusal reaches the app only as a deferred error code, without
// the reason: on a GPU run neither side once said why a launch failed,
// docs/gpu-report.md third session).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

#include "backend/backend_factory.h"
#include "fake_app.h"
#include "session/session_server.h"

namespace phos::session {
namespace {

using testing::FakeApp;
using wire::WireStatus;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(RefusalLogTest, ARefusedCallIsLoggedOncePerSessionWithItsReason) {
  // The sink goes in before any session thread exists (this test is not
  // run under ThreadSanitizer; spdlog's sink list is not locked).
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  auto previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>("refusal-test", sink);
  logger->set_level(spdlog::level::info);
  spdlog::set_default_logger(logger);

  char tmpl[] = "/tmp/phos-refusal-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::unique_ptr<backend::Backend> be;
  ASSERT_TRUE(backend::CreateSimBackend(backend::SimOptions{}, &be).ok());
  {
    SessionServer server(be.get(), SessionServerOptions{}, SessionCallbacks{});
    ASSERT_TRUE(server.Start(dir + "/phosd.sock.data").ok());
    std::unique_ptr<FakeApp> app;
    ASSERT_TRUE(FakeApp::Connect(dir + "/phosd.sock.data", &app).ok());
    const auto refused = static_cast<uint32_t>(wire::ApiId::k_cuArrayCreate_v2);
    ring::Reply r;
    EXPECT_EQ(app->Raw(refused, 0, {}, true, &r), WireStatus::kNotSupported);
    EXPECT_EQ(app->Raw(refused, 0, {}, false), WireStatus::kSuccess);  // posted: deferred
    EXPECT_EQ(app->GetLastError(), WireStatus::kNotSupported);
    EXPECT_EQ(app->Raw(refused, 0, {}, true, &r), WireStatus::kNotSupported);
    uint64_t p = 0;
    EXPECT_EQ(app->Malloc(1024, &p), WireStatus::kSuccess);  // after the replies: the lines are written
    const std::string text = log.str();
    EXPECT_EQ(Count(text, "refused (not supported)"), 1u) << text;
    EXPECT_EQ(Count(text, "does not implement api id " + std::to_string(refused)), 1u) << text;
    app.reset();
  }
  spdlog::set_default_logger(previous);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phos::session
