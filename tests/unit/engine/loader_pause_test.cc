// The concurrent restore's loader pauses a big buffer between two chunks
// when a call waits for another, absent buffer (concurrent_restore.h,
// LoadAll): the waiting call gets its buffer after at most one more chunk,
// not after the whole big buffer, and the paused buffer resumes where it
// stopped and ends up complete.
//
// A throttled sim link (0.2 GB/s: a 4 MiB chunk takes ~20 ms) makes the
// big buffer's load take ~80 ms. The app reads the small buffer once the
// loader has copied the big buffer's first chunk (the big one comes first:
// lower address, no first-use order in a stop image), so without the pause
// the small buffer would be loaded after the big one.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/fresh_restore.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "engine_test_env.h"

namespace phos::engine::testing {
namespace {

using namespace std::chrono_literals;
using session::testing::FakeApp;
constexpr wire::WireStatus kOk = wire::WireStatus::kSuccess;


TEST(LoaderPauseTest, AWaitedSmallBufferOvertakesABigOneBeingLoaded) {
  EngineTestEnv env;
  ASSERT_TRUE(env.Start("phos-loader-pause-test", /*link_gbps=*/0.2).ok());
  std::unique_ptr<FakeApp> app;
  std::shared_ptr<session::Session> sess;
  ASSERT_TRUE(env.Connect(&app, &sess).ok());
  const std::uint64_t big_bytes = 16u << 20, small_bytes = 4096;
  std::uint64_t big = 0, small = 0;
  ASSERT_EQ(app->Malloc(big_bytes, &big), kOk) << app->message();
  ASSERT_EQ(app->Malloc(small_bytes, &small), kOk) << app->message();
  ASSERT_LT(big, small);
  const auto big_data = Pattern(1, big_bytes), small_data = Pattern(2, small_bytes);
  ASSERT_EQ(app->H2D(big, big_data.data(), big_bytes), kOk) << app->message();
  ASSERT_EQ(app->H2D(small, small_data.data(), small_bytes), kOk) << app->message();
  const std::string img = env.dir() + "/img";
  {
    CheckpointOptions o;
    o.mode = Mode::kStop;
    o.dir = img;
    Progress progress;
    CheckpointResult r;
    Status s = engine::Checkpoint(*sess, o, &progress, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::shared_ptr<session::Session> old = sess;
  app.reset();
  sess.reset();
  for (int i = 0; i < 500 && !old->finished(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(old->finished());
  ASSERT_TRUE(env.Connect(&app, &sess).ok());

  RestoreOptions o;
  o.dir = img;
  o.concurrent = true;
  Progress progress;
  RestoreResult r;
  std::vector<std::uint64_t> order;
  Status s;
  std::thread restore([&] { s = RestoreFreshWithHooks(*sess, o, &progress, &r, {}, &order); });
  // The loader has copied the big buffer's first chunk (3 of 4 to go).
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (std::uint64_t seen = 0;;) {
    ProgressSnapshot p = progress.Snapshot();
    if ((p.phase == "load" && p.bytes_done > 0) || std::chrono::steady_clock::now() > deadline) break;
    progress.WaitForChange(p.version == seen ? seen : p.version, 1ms);
    seen = p.version;
  }
  ProgressSnapshot p = progress.Snapshot();
  ASSERT_EQ(p.phase, "load");
  ASSERT_LT(p.bytes_done, big_bytes) << "the loader finished the big buffer before the app could ask";
  std::vector<std::byte> got(small_bytes);
  ASSERT_EQ(app->D2H(got.data(), small, small_bytes), kOk) << app->message();
  EXPECT_TRUE(got == small_data);
  restore.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], small) << "the waited-for small buffer was loaded after the big one";
  EXPECT_EQ(order[1], big);
  std::vector<std::byte> whole(big_bytes);
  ASSERT_EQ(app->D2H(whole.data(), big, big_bytes), kOk) << app->message();
  EXPECT_TRUE(whole == big_data) << "the paused buffer did not resume where it stopped";
  app.reset();
}

}  // namespace
}  // namespace phos::engine::testing
