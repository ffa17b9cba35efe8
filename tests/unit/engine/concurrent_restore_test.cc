// Concurrent in-place restore (daemon/engine/concurrent_restore.h) on the
// sim backend, in-process: a FakeApp speaks the wire protocol into a real
// SessionServer whose sessions carry the engine's admission hook.
//
//   - an app reading buffers in random order while the loader runs always
//     sees the image's content (never the scribbles the restore undoes);
//   - a corrupt image is refused before the session is touched;
//   - the app exiting while the loader runs ends the restore cleanly
//     (Unavailable);
//   - the loader follows the image's first-use order;
//   - a kernel that reads/writes a buffer outside its speculated set while
//     that buffer is absent rolls the restore back (pointer_table's scatter).
// Label `concurrency`: re-run under ThreadSanitizer.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend_factory.h"
#include "engine/concurrent_restore.h"
#include "engine/engine_hook.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "engine/session_snapshot.h"
#include "engine_test_env.h"
#include "fake_app.h"
#include "image/image_reader.h"
#include "image/image_writer.h"
#include "session/session_server.h"
#include "test_ptx.h"

namespace phos::engine::testing {
namespace {

using namespace std::chrono_literals;
using session::Session;
using session::SessionServer;
using session::testing::FakeApp;
using wire::WireStatus;
constexpr WireStatus kOk = WireStatus::kSuccess;

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    const ::phos::Status _s = (expr);                        \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString(); \
  } while (0)


class ConcurrentRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos-concurrent-restore-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    backend::BackendOptions bo;
    bo.kind = backend::BackendKind::kSim;
    std::string why;
    ASSERT_TRUE(backend::CreateBackend(bo, &backend_, &why).ok()) << why;
    server_ = std::make_unique<SessionServer>(backend_.get(), session::SessionServerOptions{},
                                              session::SessionCallbacks{});
    // Before the app connects: its session gets the engine's hook.
    server_->SetHookFactory(EngineHook::Make);
    ASSERT_OK(server_->Start(dir_ + "/phosd.sock.data"));
    ASSERT_OK(FakeApp::Connect(dir_ + "/phosd.sock.data", &app_));
    for (int i = 0; i < 500 && !session_; ++i) {
      session_ = server_->FindByPid(getpid());
      if (!session_) std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(session_) << "no session for this process";
    const unsigned seed = std::random_device{}();
    RecordProperty("seed", std::to_string(seed));
    rng_.seed(seed);
  }
  void TearDown() override {
    app_.reset();
    session_.reset();
    server_->Stop();
    server_.reset();
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Allocates buffers of the given sizes and fills them with Pattern(i).
  void MakeBuffers(const std::vector<std::uint64_t>& sizes) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::uint64_t p = 0;
      ASSERT_EQ(app_->Malloc(sizes[i], &p), kOk) << app_->message();
      const auto data = Pattern(static_cast<int>(i), sizes[i]);
      ASSERT_EQ(app_->H2D(p, data.data(), data.size()), kOk) << app_->message();
      ptrs_.push_back(p);
      sizes_.push_back(sizes[i]);
    }
  }
  void Scribble() {
    for (std::size_t i = 0; i < ptrs_.size(); ++i) {
      ASSERT_EQ(app_->Memset(ptrs_[i], 0xEE, 1, sizes_[i]), kOk) << app_->message();
    }
  }
  Status StopCheckpoint(const std::string& dir) {
    CheckpointOptions co;
    co.mode = Mode::kStop;
    co.dir = dir;
    co.metadata.set_pid(getpid());
    Progress progress;
    CheckpointResult r;
    return Checkpoint(*session_, co, &progress, &r);
  }
  // Reads buffer i back; "" when it holds `want`, else the first difference.
  std::string Check(std::size_t i, const std::vector<std::byte>& want) {
    std::vector<std::byte> got(sizes_[i]);
    if (app_->D2H(got.data(), ptrs_[i], got.size()) != kOk) return "D2H failed: " + app_->message();
    if (got == want) return "";
    std::size_t k = 0;
    while (got[k] == want[k]) ++k;
    return "buffer " + std::to_string(i) + " differs at byte " + std::to_string(k) + ": " +
           std::to_string(static_cast<int>(got[k])) + " vs " + std::to_string(static_cast<int>(want[k]));
  }
  // Blocks until the restore's control task has started (Progress phase set
  // inside it): every call posted from then on runs after the stall.
  static void WaitForControlTask(Progress& progress) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    std::uint64_t seen = 0;
    for (;;) {
      ProgressSnapshot s = progress.Snapshot();
      if (s.phase == "quiesce" || s.phase == "map" || s.phase == "globals" || s.phase == "load") return;
      if (std::chrono::steady_clock::now() > deadline) return;
      progress.WaitForChange(s.version == seen ? seen : s.version, 5ms);
      seen = s.version;
    }
  }

  std::string dir_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<SessionServer> server_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<Session> session_;
  std::vector<std::uint64_t> ptrs_, sizes_;
  std::mt19937 rng_;
};

// Rewrites image `from` into `to` with the session metadata's first-use
// order replaced by `first_use`.
Status RewriteWithFirstUse(const std::string& from, const std::string& to, const std::vector<std::uint64_t>& first_use) {
  std::unique_ptr<image::ImageReader> reader;
  PHOS_RETURN_IF_ERROR(image::ImageReader::Open(from, {}, &reader));
  const auto& m = reader->manifest();
  image::v1::Manifest meta;
  meta.set_pid(m.pid());
  meta.set_mode(m.mode());
  std::unique_ptr<image::ImageWriter> writer;
  PHOS_RETURN_IF_ERROR(image::ImageWriter::Open(to, meta, {}, &writer));
  for (int i = 0; i < m.buffers_size(); ++i) {
    std::vector<std::byte> data(m.buffers(i).bytes());
    PHOS_RETURN_IF_ERROR(reader->ReadBuffer(static_cast<std::size_t>(i), data.data()));
    std::size_t index = 0;
    PHOS_RETURN_IF_ERROR(writer->AddBuffer(m.buffers(i).device_address(), data.size(), &index));
    PHOS_RETURN_IF_ERROR(writer->WriteBuffer(index, data.data()));
  }
  *writer->mutable_metadata()->mutable_session() = m.session();
  writer->mutable_metadata()->clear_first_use_order();
  for (std::uint64_t a : first_use) writer->mutable_metadata()->add_first_use_order(a);
  return writer->Commit();
}

// The app reads buffers in random order the moment the session resumes:
// every read sees the image's bytes; some reads had to wait for an absent
// buffer (the loader is slowed down so that it cannot win every race).
TEST_F(ConcurrentRestoreTest, ReadsDuringTheRestoreSeeTheImage) {
  std::vector<std::uint64_t> sizes;
  for (int i = 0; i < 24; ++i) sizes.push_back((16u << 10) * (1 + (i * 7) % 16));
  sizes.push_back(9u << 20);  // three image chunks
  MakeBuffers(sizes);
  ASSERT_OK(StopCheckpoint(dir_ + "/img"));
  std::uint64_t absent_waits = 0;
  for (int run = 0; run < 3; ++run) {
    Scribble();
    Progress progress;
    std::vector<std::size_t> order(ptrs_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng_);
    std::vector<std::string> errors;
    std::thread app([&] {
      WaitForControlTask(progress);
      for (std::size_t i : order) {
        std::string e = Check(i, Pattern(static_cast<int>(i), sizes_[i]));
        if (!e.empty()) errors.push_back(e);
      }
    });
    ConcurrentRestoreHooks hooks;
    hooks.loaded = [](std::uint64_t) { std::this_thread::sleep_for(2ms); };
    RestoreOptions ro;
    ro.dir = dir_ + "/img";
    ro.concurrent = true;
    RestoreResult rr;
    std::vector<std::uint64_t> loaded;
    Status s = RunConcurrentRestoreWithHooks(*session_, EngineHook::Of(session_->hook()), ro, &progress, &rr, hooks,
                                             &loaded);
    app.join();
    ASSERT_OK(s);
    EXPECT_TRUE(errors.empty()) << "run " << run << ": " << errors.front();
    EXPECT_TRUE(rr.concurrent);
    EXPECT_EQ(rr.buffers, ptrs_.size());
    EXPECT_EQ(loaded.size(), ptrs_.size());
    EXPECT_GE(rr.total_us, rr.stall_us);
    EXPECT_EQ(rr.counters.restore_rollbacks, 0u);
    absent_waits += rr.counters.absent_waits;
    // Done: everything present, the operation uninstalled.
    for (std::size_t i = 0; i < ptrs_.size(); ++i) {
      EXPECT_EQ(Check(i, Pattern(static_cast<int>(i), sizes_[i])), "") << "after run " << run;
    }
    EXPECT_FALSE(EngineHook::Of(session_->hook())->installed());
  }
  EXPECT_GT(absent_waits, 0u) << "no read ever waited for an absent buffer";
  // The entry point (engine::Restore) takes the same path.
  Scribble();
  RestoreOptions ro;
  ro.dir = dir_ + "/img";
  ro.concurrent = true;
  RestoreResult rr;
  Progress progress;
  ASSERT_OK(Restore(*session_, ro, &progress, &rr));
  for (std::size_t i = 0; i < ptrs_.size(); ++i) EXPECT_EQ(Check(i, Pattern(static_cast<int>(i), sizes_[i])), "");
}

// A buffer freed since the checkpoint comes back at its address; one
// allocated since is freed; a call freeing a still-absent buffer waits.
TEST_F(ConcurrentRestoreTest, BufferMapChangesAndFreeOfAnAbsentBuffer) {
  MakeBuffers({64u << 10, 128u << 10, 32u << 10, 256u << 10});
  ASSERT_OK(StopCheckpoint(dir_ + "/img"));
  ASSERT_EQ(app_->Free(ptrs_[1]), kOk);
  std::uint64_t extra = 0;
  ASSERT_EQ(app_->Malloc(8u << 20, &extra), kOk);
  for (std::size_t i : {0, 2, 3}) ASSERT_EQ(app_->Memset(ptrs_[i], 0xEE, 1, sizes_[i]), kOk);
  Progress progress;
  std::thread app([&] {
    WaitForControlTask(progress);
    EXPECT_EQ(app_->Free(ptrs_[3]), kOk) << app_->message();
  });
  ConcurrentRestoreHooks hooks;
  hooks.loaded = [](std::uint64_t) { std::this_thread::sleep_for(5ms); };
  RestoreOptions ro;
  ro.dir = dir_ + "/img";
  ro.concurrent = true;
  RestoreResult rr;
  Status s =
      RunConcurrentRestoreWithHooks(*session_, EngineHook::Of(session_->hook()), ro, &progress, &rr, hooks, nullptr);
  app.join();
  ASSERT_OK(s);
  EXPECT_EQ(rr.allocated, 1u);
  EXPECT_EQ(rr.freed, 1u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(Check(i, Pattern(static_cast<int>(i), sizes_[i])), "");
}

// A corrupt image is refused before the session is touched.
TEST_F(ConcurrentRestoreTest, CorruptImageIsRefusedBeforeTouchingTheSession) {
  MakeBuffers({64u << 10, 5u << 20, 128u << 10});
  ASSERT_OK(StopCheckpoint(dir_ + "/img"));
  Scribble();
  {
    const std::string gpu = dir_ + "/img/gpu.img";
    const auto size = std::filesystem::file_size(gpu);
    std::fstream f(gpu, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 4096));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(size - 4096));
    f.write(&c, 1);
  }
  RestoreOptions ro;
  ro.dir = dir_ + "/img";
  ro.concurrent = true;
  RestoreResult rr;
  Progress progress;
  Status s = Restore(*session_, ro, &progress, &rr);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_FALSE(EngineHook::Of(session_->hook())->installed());
  // Untouched: the scribbles are still there.
  for (std::size_t i = 0; i < ptrs_.size(); ++i) {
    EXPECT_EQ(Check(i, std::vector<std::byte>(sizes_[i], std::byte{0xEE})), "");
  }
}

// The app exits while the loader runs: the restore ends with Unavailable,
// the session is torn down, nothing crashes.
TEST_F(ConcurrentRestoreTest, AppExitDuringTheLoaderEndsCleanly) {
  std::vector<std::uint64_t> sizes(30, 64u << 10);
  MakeBuffers(sizes);
  ASSERT_OK(StopCheckpoint(dir_ + "/img"));
  Scribble();
  std::atomic<int> loaded{0};
  ConcurrentRestoreHooks hooks;
  hooks.loaded = [&](std::uint64_t) {
    loaded.fetch_add(1);
    std::this_thread::sleep_for(10ms);
  };
  RestoreOptions ro;
  ro.dir = dir_ + "/img";
  ro.concurrent = true;
  RestoreResult rr;
  Progress progress;
  Status s;
  std::thread restore([&] {
    s = RunConcurrentRestoreWithHooks(*session_, EngineHook::Of(session_->hook()), ro, &progress, &rr, hooks,
                                      nullptr);
  });
  for (int i = 0; i < 2000 && loaded.load() < 3; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_GE(loaded.load(), 3);
  app_.reset();  // the app exits
  restore.join();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_LT(loaded.load(), 30);
  for (int i = 0; i < 500 && !session_->finished(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(session_->finished());
}

// With nobody waiting, the loader follows the image's first-use order, then
// ascending addresses.
TEST_F(ConcurrentRestoreTest, LoaderFollowsFirstUseOrder) {
  std::vector<std::uint64_t> sizes(12, 32u << 10);
  MakeBuffers(sizes);
  ASSERT_OK(StopCheckpoint(dir_ + "/stop"));
  std::vector<std::uint64_t> first_use = {ptrs_[9], ptrs_[2], ptrs_[11], ptrs_[5], ptrs_[0]};
  ASSERT_OK(RewriteWithFirstUse(dir_ + "/stop", dir_ + "/img", first_use));
  Scribble();
  RestoreOptions ro;
  ro.dir = dir_ + "/img";
  ro.concurrent = true;
  RestoreResult rr;
  Progress progress;
  std::vector<std::uint64_t> loaded;
  ASSERT_OK(RunConcurrentRestoreWithHooks(*session_, EngineHook::Of(session_->hook()), ro, &progress, &rr, {},
                                          &loaded));
  std::vector<std::uint64_t> want = first_use;
  std::vector<std::uint64_t> rest;
  for (std::uint64_t p : ptrs_) {
    if (std::find(first_use.begin(), first_use.end(), p) == first_use.end()) rest.push_back(p);
  }
  std::sort(rest.begin(), rest.end());
  want.insert(want.end(), rest.begin(), rest.end());
  EXPECT_EQ(loaded, want);
  for (std::size_t i = 0; i < ptrs_.size(); ++i) EXPECT_EQ(Check(i, Pattern(static_cast<int>(i), sizes_[i])), "");

  // A stop image (no first-use order): ascending addresses.
  Scribble();
  ro.dir = dir_ + "/stop";
  ASSERT_OK(RunConcurrentRestoreWithHooks(*session_, EngineHook::Of(session_->hook()), ro, &progress, &rr, {},
                                          &loaded));
  std::vector<std::uint64_t> sorted = ptrs_;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(loaded, sorted);
}

// pointer_table's scatter writes through a device table: its speculated set
// names only the table and the source. Launched while its targets are still
// absent, its twin reports writes into them -> rollback: everything is
// loaded, the kernel re-runs, and the targets hold the kernel's output (not
// the image's bytes the loader would otherwise have put over it).
TEST_F(ConcurrentRestoreTest, MisSpeculatedKernelOnAbsentBufferRollsBack) {
  const std::string fatbin = std::string(PHOS_TEST_APPS_DIR) + "/pointer_table.fatbin";
  if (!std::filesystem::exists(fatbin)) GTEST_SKIP() << fatbin << " not built (needs nvcc)";
  std::ifstream f(fatbin, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> image(c.size());
  std::memcpy(image.data(), c.data(), c.size());
  ASSERT_EQ(app_->ModuleLoad(1, image), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 1, "_Z7scatterPKPiiPKii"), kOk) << app_->message();

  constexpr int kTables = 4, kPer = 256, kN = kTables * kPer;
  // Fillers first (loaded first by the first-use order below), then the
  // source, the targets and the table.
  std::vector<std::uint64_t> sizes(20, 128u << 10);
  sizes.push_back(kN * sizeof(int));                                   // 20: src
  for (int t = 0; t < kTables; ++t) sizes.push_back(kPer * sizeof(int));  // 21..24: targets
  sizes.push_back(kTables * sizeof(std::uint64_t));                    // 25: table
  MakeBuffers(sizes);
  std::vector<std::uint64_t> table(ptrs_.begin() + 21, ptrs_.begin() + 25);
  ASSERT_EQ(app_->H2D(ptrs_[25], table.data(), table.size() * sizeof(std::uint64_t)), kOk);
  std::vector<std::byte> table_bytes(table.size() * sizeof(std::uint64_t));
  std::memcpy(table_bytes.data(), table.data(), table_bytes.size());
  ASSERT_OK(StopCheckpoint(dir_ + "/stop"));
  std::vector<std::uint64_t> first_use(ptrs_.begin(), ptrs_.begin() + 21);
  first_use.push_back(ptrs_[25]);
  ASSERT_OK(RewriteWithFirstUse(dir_ + "/stop", dir_ + "/img", first_use));
  for (std::size_t i = 0; i < 20; ++i) ASSERT_EQ(app_->Memset(ptrs_[i], 0xEE, 1, sizes_[i]), kOk);
  for (std::size_t i = 21; i < 25; ++i) ASSERT_EQ(app_->Memset(ptrs_[i], 0xEE, 1, sizes_[i]), kOk);

  // What scatter computes from the source, whatever the targets held.
  std::vector<std::vector<std::byte>> want(kTables, std::vector<std::byte>(kPer * sizeof(int)));
  {
    const auto src = Pattern(20, sizes_[20]);
    for (int i = 0; i < kN; ++i) {
      int v = 0;
      std::memcpy(&v, src.data() + i * sizeof(int), sizeof v);
      v = v * 3 + 1;
      std::memcpy(want[i % kTables].data() + (i / kTables) * sizeof(int), &v, sizeof v);
    }
  }
  Progress progress;
  std::thread app([&] {
    WaitForControlTask(progress);
    struct {
      std::uint64_t table;
      std::int32_t tables;
      std::uint32_t pad;
      std::uint64_t src;
      std::int32_t n;
    } p{ptrs_[25], kTables, 0, ptrs_[20], kN};
    wire::LaunchRequest g{};
    g.grid[0] = kN / 128;
    g.grid[1] = g.grid[2] = 1;
    g.block[0] = 128;
    g.block[1] = g.block[2] = 1;
    EXPECT_EQ(app_->Launch(1, g, std::as_bytes(std::span(&p, 1)).first(28)), kOk);
    EXPECT_EQ(app_->DeviceSync(), kOk) << app_->message();
  });
  ConcurrentRestoreHooks hooks;
  hooks.loaded = [](std::uint64_t) { std::this_thread::sleep_for(5ms); };
  RestoreOptions ro;
  ro.dir = dir_ + "/img";
  ro.concurrent = true;
  RestoreResult rr;
  Status s =
      RunConcurrentRestoreWithHooks(*session_, EngineHook::Of(session_->hook()), ro, &progress, &rr, hooks, nullptr);
  app.join();
  ASSERT_OK(s);
  EXPECT_GE(rr.counters.twin_launches, 1u);
  EXPECT_EQ(rr.counters.restore_rollbacks, 1u);
  for (int t = 0; t < kTables; ++t) EXPECT_EQ(Check(21 + t, want[t]), "") << "target " << t;
  for (std::size_t i = 0; i < 20; ++i) EXPECT_EQ(Check(i, Pattern(static_cast<int>(i), sizes_[i])), "");
  EXPECT_EQ(Check(25, table_bytes), "");
}


// In-place restore of a process that uses two GPUs (docs/interposer.md
// "Several GPUs in one process"), stop-the-world and concurrent (whose
// loader loads each buffer on its stream on the buffer's GPU; the app's
// reads right after it returns wait for what they need).
// After the checkpoint the app rewrites buffers on both GPUs, frees one of
// GPU 1's, allocates another there and bumps GPU 1's instance of a module
// variable; the restore puts every byte back, the freed buffer back at its
// address ON GPU 1 and frees the new one (each GPU's memory in use is what
// it was), and the app goes on using both GPUs.
class TwoGpuInPlaceRestoreTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_OK(env_.Start("phos-restore2-test", 0, /*gpus=*/2));
    ASSERT_OK(env_.Connect(&app_, &session_));
  }
  void TearDown() override {
    app_.reset();
    session_.reset();
  }
  uint64_t UsedOn(int device) {
    uint64_t free_bytes = 0, total = 0;
    EXPECT_TRUE(env_.backend()->GetMemoryInfo(device, &free_bytes, &total).ok());
    return total - free_bytes;
  }
  uint8_t ByteOf(uint8_t device, uint64_t p, uint64_t at) {
    app_->UseDevice(device);
    uint8_t b = 0;
    EXPECT_EQ(app_->D2H(&b, p + at, 1), kOk) << app_->message();
    return b;
  }
  EngineTestEnv env_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<Session> session_;
};

TEST_P(TwoGpuInPlaceRestoreTest, EachGpusStateComesBackOnItsGpu) {
  constexpr uint64_t kBytes = 1 << 20;
  uint64_t a0 = 0, a1 = 0, b1 = 0;
  app_->UseDevice(0);
  ASSERT_EQ(app_->Malloc(kBytes, &a0), kOk) << app_->message();
  ASSERT_EQ(app_->Memset(a0, 0x10, 1, kBytes), kOk) << app_->message();
  app_->UseDevice(1);
  ASSERT_EQ(app_->Malloc(kBytes, &a1), kOk) << app_->message();
  ASSERT_EQ(app_->Memset(a1, 0x11, 1, kBytes), kOk) << app_->message();
  ASSERT_EQ(app_->Malloc(kBytes, &b1), kOk) << app_->message();
  ASSERT_EQ(app_->Memset(b1, 0x12, 1, kBytes), kOk) << app_->message();
  const auto ptx = std::as_bytes(std::span<const char>(backend::testing::kSaxpyPtx, sizeof backend::testing::kSaxpyPtx));
  ASSERT_EQ(app_->ModuleLoad(1, ptx), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 11, "bump"), kOk) << app_->message();
  uint64_t counter1 = 0, n = 0;
  ASSERT_EQ(app_->GetGlobal(1, "phos_counter", &counter1, &n), kOk) << app_->message();
  ASSERT_EQ(app_->Launch(11, Grid(1, 1), {}), kOk);  // GPU 1's instance: 7 -> 8
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  const uint64_t used0 = UsedOn(0), used1 = UsedOn(1);

  CheckpointOptions co;
  co.mode = Mode::kStop;
  co.dir = env_.dir() + "/img";
  Progress progress;
  CheckpointResult cr;
  ASSERT_OK(Checkpoint(*session_, co, &progress, &cr));

  // Everything changes after the image.
  ASSERT_EQ(app_->Memset(a1, 0xee, 1, kBytes), kOk) << app_->message();
  ASSERT_EQ(app_->Free(b1), kOk) << app_->message();
  uint64_t n1 = 0;
  ASSERT_EQ(app_->Malloc(4 * kBytes, &n1), kOk) << app_->message();
  ASSERT_EQ(app_->Launch(11, Grid(1, 1), {}), kOk);  // 8 -> 9
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  app_->UseDevice(0);
  ASSERT_EQ(app_->Memset(a0, 0xef, 1, kBytes), kOk) << app_->message();

  RestoreOptions ro;
  ro.dir = co.dir;
  ro.concurrent = GetParam();
  RestoreResult rr;
  ASSERT_OK(Restore(*session_, ro, &progress, &rr));
  EXPECT_EQ(rr.concurrent, GetParam());
  EXPECT_EQ(rr.freed, 1u);      // n1
  EXPECT_EQ(rr.allocated, 1u);  // b1, again
  EXPECT_EQ(UsedOn(0), used0) << "GPU 0's memory in use differs from the image's";
  EXPECT_EQ(UsedOn(1), used1) << "GPU 1's memory in use differs from the image's (b1 back elsewhere?)";
  EXPECT_EQ(ByteOf(0, a0, kBytes - 1), 0x10);
  EXPECT_EQ(ByteOf(1, a1, 0), 0x11);
  EXPECT_EQ(ByteOf(1, b1, kBytes - 1), 0x12);
  uint32_t c = 0;
  app_->UseDevice(1);
  ASSERT_EQ(app_->D2H(&c, counter1, 4), kOk) << app_->message();
  EXPECT_EQ(c, 8u);
  // The app goes on on both GPUs: a kernel on GPU 1, a peer copy, a free
  // of the restored buffer from GPU 0 (its owner frees it).
  ASSERT_EQ(app_->Launch(11, Grid(1, 1), {}), kOk);
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  ASSERT_EQ(app_->D2H(&c, counter1, 4), kOk) << app_->message();
  EXPECT_EQ(c, 9u);
  app_->UseDevice(0);
  ASSERT_EQ(app_->D2D(a0, b1, kBytes), kOk) << app_->message();
  EXPECT_EQ(ByteOf(0, a0, 7), 0x12);
  ASSERT_EQ(app_->Free(b1), kOk) << app_->message();
  EXPECT_LT(UsedOn(1), used1) << "the restored buffer was not on GPU 1";  // (the sim rounds to 2 MiB)
  EXPECT_EQ(UsedOn(0), used0);
}

INSTANTIATE_TEST_SUITE_P(StopAndConcurrent, TwoGpuInPlaceRestoreTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Concurrent" : "Stop"; });

}  // namespace
}  // namespace phos::engine::testing
