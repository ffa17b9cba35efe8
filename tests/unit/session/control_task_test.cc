// Control tasks (Session::PostControl / RunControl): functions run on a
// session's consumer thread between two calls, woken out of the ring wait
// by RingServer::Interrupt. And the C/R engine's stop-the-world checkpoint
// and in-place restore run as such tasks against a fake app's session.
// Label `concurrency`: re-run under ThreadSanitizer (no gRPC here).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend_factory.h"
#include "engine/checkpoint_task.h"
#include "engine/progress.h"
#include "engine/restore_task.h"
#include "fake_app.h"
#include "session/session_server.h"

namespace phos::session::testing {
namespace {

using namespace std::chrono_literals;
constexpr WireStatus kOk = WireStatus::kSuccess;

class ControlTaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-control-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    backend::BackendOptions bo;
    bo.kind = backend::BackendKind::kSim;
    std::string why;
    ASSERT_TRUE(backend::CreateBackend(bo, &backend_, &why).ok()) << why;
    server_ = std::make_unique<SessionServer>(backend_.get(), SessionServerOptions{}, SessionCallbacks{});
    data_path_ = dir_ + "/phosd.sock.data";
    ASSERT_TRUE(server_->Start(data_path_).ok());
    ASSERT_TRUE(FakeApp::Connect(data_path_, &app_).ok());
    // The session appears once the server thread accepted the connection.
    for (int i = 0; i < 500 && !session_; ++i) {
      session_ = server_->FindByPid(getpid());
      if (!session_) std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(session_) << "no session for this process";
  }
  void TearDown() override {
    app_.reset();
    session_.reset();
    server_->Stop();
    server_.reset();
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string dir_, data_path_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<SessionServer> server_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<Session> session_;
};

// An idle session (consumer asleep in the ring wait, long liveness period)
// runs a control task promptly: the interrupt wakes it.
TEST_F(ControlTaskTest, IdleSessionRunsControlTaskPromptly) {
  std::this_thread::sleep_for(50ms);  // let the consumer fall asleep
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::thread::id ran_on;
    Status s = session_->RunControl([&](SessionState& st) {
      ran_on = std::this_thread::get_id();
      return st.ctx != nullptr ? Status::Ok() : Status::Internal("no context");
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_NE(ran_on, std::this_thread::get_id());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  }
  // The task's error comes back to the caller.
  EXPECT_EQ(session_->RunControl([](SessionState&) { return Status::NotFound("x"); }).code(),
            Status::Code::kNotFound);
}

// Control tasks from several threads interleave with a busy app: each sees
// a consistent buffer map (between two calls, never inside one).
TEST_F(ControlTaskTest, ControlTasksInterleaveWithCalls) {
  std::atomic<bool> stop{false};
  std::thread app([&] {
    std::vector<uint64_t> ptrs;
    for (int i = 0; i < 400 && !stop.load(); ++i) {
      uint64_t p = 0;
      ASSERT_EQ(app_->Malloc(4096 * (1 + i % 7), &p), kOk);
      ptrs.push_back(p);
      if (ptrs.size() > 5) {
        ASSERT_EQ(app_->Free(ptrs.front()), kOk);
        ptrs.erase(ptrs.begin());
      }
    }
  });
  std::atomic<int> ran{0};
  std::vector<std::thread> controllers;
  for (int t = 0; t < 3; ++t) {
    controllers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        Status s = session_->RunControl([&](SessionState& st) {
          uint64_t sum = 0;
          for (const auto& [a, n] : st.buffers) sum += n;
          ran.fetch_add(1);
          return sum == st.buffers.bytes() ? Status::Ok() : Status::Internal("inconsistent buffer map");
        });
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
    });
  }
  for (auto& c : controllers) c.join();
  stop.store(true);
  app.join();
  EXPECT_EQ(ran.load(), 150);
}

// A task posted after the app went away fails with Unavailable (no hang).
TEST_F(ControlTaskTest, EndedSessionRefusesControlTasks) {
  app_.reset();  // the app disconnects
  std::future<Status> f;
  for (int i = 0; i < 500; ++i) {
    if (session_->finished()) break;
    std::this_thread::sleep_for(10ms);
  }
  f = session_->PostControl([](SessionState&) { return Status::Ok(); });
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get().code(), Status::Code::kUnavailable);
  EXPECT_EQ(server_->FindByPid(getpid()), nullptr);
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

// Checkpoint (stop-the-world, to disk) and in-place restore through the
// engine: contents come back, a buffer freed after the checkpoint is
// re-created at its old address, one allocated after it is freed.
TEST_F(ControlTaskTest, EngineCheckpointAndRestoreRoundTrip) {
  const size_t kBig = (5u << 20) + 123;  // two chunks, the last one short
  uint64_t a = 0, b = 0;
  ASSERT_EQ(app_->Malloc(kBig, &a), kOk);
  ASSERT_EQ(app_->Malloc(8192, &b), kOk);
  const auto pa = Pattern(kBig, 1), pb = Pattern(8192, 2);
  ASSERT_EQ(app_->H2D(a, pa.data(), pa.size()), kOk);
  ASSERT_EQ(app_->H2D(b, pb.data(), pb.size()), kOk);

  const std::string img = dir_ + "/img";
  engine::Progress progress;
  engine::CheckpointTask ck(&progress);
  image::v1::Manifest meta;
  meta.set_pid(getpid());
  meta.set_mode("stop");
  ASSERT_TRUE(ck.Prepare(img, meta, {}).ok());
  Status s = session_->RunControl([&](SessionState& st) { return ck.Capture(st); });
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(ck.Commit().ok());
  EXPECT_EQ(ck.result().buffers, 2u);
  EXPECT_EQ(ck.result().bytes, kBig + 8192);
  EXPECT_EQ(progress.Snapshot().phase, "commit");

  // Change everything.
  const auto qa = Pattern(kBig, 9);
  ASSERT_EQ(app_->H2D(a, qa.data(), qa.size()), kOk);
  ASSERT_EQ(app_->Free(b), kOk);
  uint64_t c = 0;
  ASSERT_EQ(app_->Malloc(4096, &c), kOk);

  engine::RestoreTask rs(&progress);
  ASSERT_TRUE(rs.Prepare(img, true).ok());
  s = session_->RunControl([&](SessionState& st) { return rs.Apply(st); });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rs.result().allocated, 1u);
  EXPECT_EQ(rs.result().freed, 1u);  // c (even if it took b's address: its size differs)

  std::vector<uint8_t> got(kBig);
  ASSERT_EQ(app_->D2H(got.data(), a, kBig), kOk);
  EXPECT_TRUE(got == pa);
  std::vector<uint8_t> got_b(8192);
  ASSERT_EQ(app_->D2H(got_b.data(), b, 8192), kOk);
  EXPECT_TRUE(got_b == pb);
  size_t n = 0;
  ASSERT_TRUE(session_->RunControl([&](SessionState& st) {
                 n = st.buffers.size();
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(n, 2u);

  // A flipped byte: refused in Prepare, before any control task.
  {
    FILE* f = std::fopen((img + "/gpu.img").c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 4096 + (4u << 20) + 10, SEEK_SET);  // buffer 0, chunk 1
    int ch = std::fgetc(f);
    std::fseek(f, 4096 + (4u << 20) + 10, SEEK_SET);
    std::fputc(ch ^ 1, f);
    std::fclose(f);
  }
  engine::RestoreTask bad(&progress);
  Status v = bad.Prepare(img, true);
  EXPECT_EQ(v.code(), Status::Code::kCorruption) << v.ToString();
  EXPECT_NE(v.message().find("chunk 1"), std::string::npos) << v.message();
}

// A checkpoint that fails part-way leaves no image and no DIR.tmp.
TEST_F(ControlTaskTest, FailedCaptureAbortsTheImage) {
  uint64_t a = 0;
  ASSERT_EQ(app_->Malloc(4096, &a), kOk);
  const std::string img = dir_ + "/img";
  engine::Progress progress;
  {
    engine::CheckpointTask ck(&progress);
    ASSERT_TRUE(ck.Prepare(img, {}, {}).ok());
    EXPECT_TRUE(std::filesystem::exists(img + ".tmp"));
    // Simulate a failure inside the task: the caller aborts.
    Status s = session_->RunControl([&](SessionState&) { return Status::IoError("injected"); });
    EXPECT_FALSE(s.ok());
    ck.Abort();
  }
  EXPECT_FALSE(std::filesystem::exists(img));
  EXPECT_FALSE(std::filesystem::exists(img + ".tmp"));
}

}  // namespace
}  // namespace phos::session::testing
