// Restore into a FRESH session (daemon/engine/fresh_restore.h): app A builds
// state (modules, functions, a function attribute, streams, events,
// buffers, a module global), is checkpointed (stop, cow, recopy) and leaves;
// app B connects as a new session, the image is restored into it, and B
// goes on with A's virtual ids and device pointers. Also: a non-empty
// session and a corrupt image are refused without touching the session; a
// global the backend places elsewhere refuses the restore and leaves the
// session empty. Real SessionServer on the sim backend, fake apps
// (tests/unit/session/fake_app.h). Label `concurrency`: re-run under TSan.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend_factory.h"
#include "engine/engine_hook.h"
#include "engine/fresh_restore.h"
#include "engine/operations.h"
#include "fake_app.h"
#include "image/image_reader.h"
#include "session/session_server.h"
#include "test_ptx.h"

namespace phos::engine {
namespace {

using namespace std::chrono_literals;
using session::testing::FakeApp;
using wire::WireStatus;
constexpr WireStatus kOk = WireStatus::kSuccess;

constexpr uint32_t kModule = 1, kPtxModule = 2;
constexpr uint32_t kVectorAdd = 10, kBump = 11;
constexpr uint32_t kStream = 3, kEvent = 5;
constexpr uint32_t kStreamFlags = 1;  // cudaStreamNonBlocking
constexpr uint32_t kEventFlags = 2;   // cudaEventDisableTiming
constexpr int kN = 20000;
// More dynamic shared memory than a kernel gets by default (48 KiB): a
// launch with it works only when the app's cudaFuncSetAttribute came back.
constexpr int32_t kDynamicShared = 64 << 10;

std::vector<std::byte> ReadFixture(const std::string& name) {
  std::ifstream f(std::string(PHOS_TEST_APPS_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << name;
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

std::span<const std::byte> PtxImage() {
  return std::as_bytes(std::span<const char>(backend::testing::kSaxpyPtx, sizeof backend::testing::kSaxpyPtx));
}

wire::LaunchRequest Grid(uint32_t blocks, uint32_t threads, uint32_t shared = 0) {
  wire::LaunchRequest g{};
  g.grid[0] = blocks;
  g.grid[1] = g.grid[2] = 1;
  g.block[0] = threads;
  g.block[1] = g.block[2] = 1;
  g.shared_bytes = shared;
  return g;
}

template <typename T>
std::span<const std::byte> Bytes(const T& v) {
  return std::as_bytes(std::span<const T>(&v, 1));
}

struct VectorAddParams {
  uint64_t a, b, c;
  int32_t n;
};

class FreshRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-fresh-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    StartServer();
    Connect();
  }
  void TearDown() override {
    StopServer();
    std::filesystem::remove_all(dir_);
  }

  /// A fresh backend and server (a restarted phosd: the sim's address
  /// space starts over at the same base).
  void StartServer() {
    backend::BackendOptions bo;
    bo.kind = backend::BackendKind::kSim;
    std::string why;
    ASSERT_TRUE(backend::CreateBackend(bo, &backend_, &why).ok()) << why;
    server_ = std::make_unique<session::SessionServer>(backend_.get(), session::SessionServerOptions{},
                                                       session::SessionCallbacks{});
    server_->SetHookFactory(EngineHook::Make);
    ASSERT_TRUE(server_->Start(dir_ + "/phosd.sock.data").ok());
  }
  void StopServer() {
    app_.reset();
    session_.reset();
    if (server_) server_->Stop();
    server_.reset();
    backend_.reset();
  }

  /// Connects a new app; session_ = its session (a new one: not `previous`).
  void Connect(uint64_t previous = 0) {
    ASSERT_TRUE(FakeApp::Connect(dir_ + "/phosd.sock.data", &app_).ok());
    session_.reset();
    for (int i = 0; i < 500; ++i) {
      auto s = server_->FindByPid(getpid());
      if (s && s->id() != previous) {
        session_ = s;
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(session_);
  }

  /// The app leaves; waits until its session tore down (freed everything).
  void Disconnect() {
    std::shared_ptr<session::Session> s = session_;
    app_.reset();
    session_.reset();
    for (int i = 0; i < 500 && !s->finished(); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(s->finished());
  }

  /// App A: vector_add (module 1, function 10, max dynamic shared raised),
  /// stream 3 (non-blocking), event 5 (no timing), buffers a, b, c.
  void BuildVectorAddState() {
    ASSERT_EQ(app_->ModuleLoad(kModule, ReadFixture("vector_add.fatbin")), kOk) << app_->message();
    ASSERT_EQ(app_->GetFunction(kModule, kVectorAdd, "_Z10vector_addPKfS0_Pfi"), kOk) << app_->message();
    wire::FuncSetAttributeRequest attr{kVectorAdd, wire::kFuncAttrMaxDynamicSharedSize, kDynamicShared, 0};
    ASSERT_EQ(app_->Send(wire::op::kFuncSetAttribute, attr), kOk) << app_->message();
    ASSERT_EQ(app_->StreamCreate(kStream, kStreamFlags), kOk) << app_->message();
    ASSERT_EQ(app_->EventCreate(kEvent, kEventFlags), kOk) << app_->message();
    a_.resize(kN);
    b_.resize(kN);
    for (int i = 0; i < kN; ++i) {
      a_[i] = static_cast<float>(i) * 0.25f;
      b_[i] = 1000.0f - static_cast<float>(i);
    }
    ASSERT_EQ(app_->Malloc(kN * 4, &da_), kOk);
    ASSERT_EQ(app_->Malloc(kN * 4, &db_), kOk);
    ASSERT_EQ(app_->Malloc(kN * 4, &dc_), kOk);
    ASSERT_EQ(app_->H2D(da_, a_.data(), kN * 4), kOk);
    ASSERT_EQ(app_->H2D(db_, b_.data(), kN * 4), kOk);
    ASSERT_EQ(app_->Memset(dc_, 0x7f, 1, kN * 4), kOk);
  }

  void Checkpoint(Mode mode, const std::string& dir) {
    CheckpointOptions o;
    o.mode = mode;
    o.dir = dir;
    Progress progress;
    CheckpointResult r;
    Status s = engine::Checkpoint(*session_, o, &progress, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(r.mode, mode);
  }

  Status Restore(const std::string& dir, RestoreResult* r = nullptr) {
    RestoreOptions o;
    o.dir = dir;
    Progress progress;
    RestoreResult ignored;
    return RestoreFresh(*session_, o, &progress, r ? r : &ignored);
  }

  /// Every extent of the image equals the device bytes the app reads back.
  void ExpectDeviceEqualsImage(const std::string& dir) {
    std::unique_ptr<image::ImageReader> reader;
    ASSERT_TRUE(image::ImageReader::Open(dir, {}, &reader).ok());
    for (size_t i = 0; i < reader->buffer_count(); ++i) {
      const auto& e = reader->manifest().buffers(static_cast<int>(i));
      std::vector<std::byte> want(e.bytes()), got(e.bytes());
      ASSERT_TRUE(reader->ReadBuffer(i, want.data()).ok());
      ASSERT_EQ(app_->D2H(got.data(), e.device_address(), e.bytes()), kOk) << app_->message();
      ASSERT_TRUE(want == got) << "extent " << i << " at 0x" << std::hex << e.device_address();
    }
  }

  /// B: vector_add on stream 3 with A's pointers and the raised shared
  /// memory, event 5 recorded after it; c must be a + b.
  void LaunchAndCheck() {
    VectorAddParams p{da_, db_, dc_, kN};
    ASSERT_EQ(app_->Launch(kVectorAdd, Grid((kN + 255) / 256, 256, kDynamicShared - 1024), Bytes(p), kStream), kOk);
    ASSERT_EQ(app_->EventRecord(kEvent, kStream), kOk) << app_->message();
    ASSERT_EQ(app_->EventSync(kEvent), kOk) << app_->message();
    std::vector<float> c(kN);
    ASSERT_EQ(app_->D2H(c.data(), dc_, kN * 4), kOk) << app_->message();
    for (int i = 0; i < kN; ++i) ASSERT_EQ(c[i], a_[i] + b_[i]) << i;
  }

  std::string dir_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<session::SessionServer> server_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<session::Session> session_;
  std::vector<float> a_, b_;
  uint64_t da_ = 0, db_ = 0, dc_ = 0;
};

class FreshRestoreModeTest : public FreshRestoreTest, public ::testing::WithParamInterface<Mode> {};

TEST_P(FreshRestoreModeTest, NewSessionContinuesWithTheOldIds) {
  BuildVectorAddState();
  const std::string img = dir_ + "/img";
  Checkpoint(GetParam(), img);
  const uint64_t a_session = session_->id();
  Disconnect();

  Connect(a_session);
  // Before the restore B knows none of A's ids.
  EXPECT_NE(app_->StreamQuery(kStream), kOk);
  RestoreResult r;
  Status s = Restore(img, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.buffers, 3u);
  EXPECT_EQ(r.allocated, 3u);
  EXPECT_EQ(r.bytes, 3u * kN * 4);
  ExpectDeviceEqualsImage(img);
  LaunchAndCheck();
  // The stream kept its flags, the event its "no timing" flag.
  float ms = 0;
  EXPECT_NE(app_->EventElapsed(kEvent, kEvent, &ms), kOk) << "event 5 was recreated with timing";
  // And B's later state can be checkpointed again, as any session.
  Checkpoint(Mode::kStop, dir_ + "/img2");
}

INSTANTIATE_TEST_SUITE_P(Modes, FreshRestoreModeTest, ::testing::Values(Mode::kStop, Mode::kCow, Mode::kRecopy),
                         [](const auto& info) { return std::string(ModeName(info.param)); });

TEST_F(FreshRestoreTest, LaunchNeedsTheRestoredAttribute) {
  // The negative of the attribute check above: without the attribute the
  // sim refuses the launch, so the test can fail.
  ASSERT_EQ(app_->ModuleLoad(kModule, ReadFixture("vector_add.fatbin")), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(kModule, kVectorAdd, "_Z10vector_addPKfS0_Pfi"), kOk) << app_->message();
  uint64_t d = 0;
  ASSERT_EQ(app_->Malloc(1024, &d), kOk);
  VectorAddParams p{d, d, d, 1};
  ASSERT_EQ(app_->Launch(kVectorAdd, Grid(1, 32, kDynamicShared - 1024), Bytes(p)), kOk);
  EXPECT_NE(app_->DeviceSync(), kOk);
}

TEST_F(FreshRestoreTest, GlobalsComeBackAtTheirAddressAfterAPhosdRestart) {
  // The PTX module first (as a runtime loads modules before the app's
  // mallocs): a restarted sim places its global where it was.
  ASSERT_EQ(app_->ModuleLoad(kPtxModule, PtxImage()), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(kPtxModule, kBump, "bump"), kOk) << app_->message();
  uint64_t counter = 0, bytes = 0;
  ASSERT_EQ(app_->GetGlobal(kPtxModule, "phos_counter", &counter, &bytes), kOk) << app_->message();
  ASSERT_EQ(bytes, 4u);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(app_->Launch(kBump, Grid(1, 1), {}), kOk);  // 7 -> 12
  BuildVectorAddState();
  const std::string img = dir_ + "/img";
  Checkpoint(Mode::kStop, img);
  Disconnect();
  StopServer();

  StartServer();
  Connect();
  Status s = Restore(img);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectDeviceEqualsImage(img);
  uint32_t c = 0;
  ASSERT_EQ(app_->D2H(&c, counter, 4), kOk) << app_->message();
  EXPECT_EQ(c, 12u) << "the global's bytes were not restored";
  ASSERT_EQ(app_->Launch(kBump, Grid(1, 1), {}), kOk);
  ASSERT_EQ(app_->D2H(&c, counter, 4), kOk) << app_->message();
  EXPECT_EQ(c, 13u) << "function 11 does not bump the global at its old address";
  LaunchAndCheck();
}

TEST_F(FreshRestoreTest, GlobalPlacedElsewhereRefusesAndEmptiesTheSession) {
  // Same phosd: the sim's next-fit allocator puts the module's global past
  // the old one, so B's copy of the module cannot have it at A's address.
  BuildVectorAddState();
  ASSERT_EQ(app_->ModuleLoad(kPtxModule, PtxImage()), kOk) << app_->message();
  uint64_t counter = 0, bytes = 0;
  ASSERT_EQ(app_->GetGlobal(kPtxModule, "phos_counter", &counter, &bytes), kOk) << app_->message();
  const std::string img = dir_ + "/img";
  Checkpoint(Mode::kStop, img);
  const uint64_t a_session = session_->id();
  Disconnect();

  Connect(a_session);
  Status s = Restore(img);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("phos_counter"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("empty again"), std::string::npos) << s.ToString();
  // Nothing of the image is left: the ids are unknown, the buffers gone.
  EXPECT_NE(app_->StreamQuery(kStream), kOk);
  uint32_t x = 0;
  EXPECT_NE(app_->D2H(&x, da_, 4), kOk);
  // The session is still usable and still empty enough to try again.
  Status again = Restore(img);
  EXPECT_EQ(again.message().find("not empty"), std::string::npos) << again.ToString();
  uint64_t d = 0;
  EXPECT_EQ(app_->Malloc(4096, &d), kOk);
}

TEST_F(FreshRestoreTest, NonEmptySessionIsRefusedUnchanged) {
  BuildVectorAddState();
  const std::string img = dir_ + "/img";
  Checkpoint(Mode::kStop, img);
  const uint64_t a_session = session_->id();
  Disconnect();

  Connect(a_session);
  uint64_t mine = 0;
  ASSERT_EQ(app_->Malloc(4096, &mine), kOk);
  ASSERT_EQ(app_->Memset(mine, 0x42, 1, 4096), kOk);
  Status s = Restore(img);
  ASSERT_EQ(s.code(), Status::Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("not empty"), std::string::npos) << s.ToString();
  std::vector<uint8_t> got(4096);
  ASSERT_EQ(app_->D2H(got.data(), mine, 4096), kOk);
  for (uint8_t v : got) ASSERT_EQ(v, 0x42);
  EXPECT_NE(app_->StreamQuery(kStream), kOk) << "stream 3 was created by a refused restore";
}

TEST_F(FreshRestoreTest, CorruptImageIsRefusedBeforeTouchingTheSession) {
  BuildVectorAddState();
  const std::string img = dir_ + "/img", bad = dir_ + "/bad";
  Checkpoint(Mode::kStop, img);
  std::filesystem::copy(img, bad);
  {
    std::unique_ptr<image::ImageReader> reader;
    ASSERT_TRUE(image::ImageReader::Open(bad, {}, &reader).ok());
    const uint64_t off = reader->manifest().buffers(1).extent_offset() + 100;
    reader.reset();
    std::fstream f(bad + "/gpu.img", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(off));
    char x = 0;
    f.seekg(static_cast<std::streamoff>(off));
    f.read(&x, 1);
    x = static_cast<char>(x ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(off));
    f.write(&x, 1);
  }
  const uint64_t a_session = session_->id();
  Disconnect();

  Connect(a_session);
  Status s = Restore(bad);
  ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("untouched"), std::string::npos) << s.ToString();
  EXPECT_NE(app_->StreamQuery(kStream), kOk);
  // Untouched = still empty: the good image restores into it.
  Status good = Restore(img);
  ASSERT_TRUE(good.ok()) << good.ToString();
  LaunchAndCheck();
}

}  // namespace
}  // namespace phos::engine
