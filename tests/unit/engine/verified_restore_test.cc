// RestoreOptions::verify (operations.h, engine::Verify): a restore reads
// the image once and verifies each chunk as it loads it (the default of
// fresh restores), or verifies all of it first (the default in place) —
// and never lets the app compute on bytes that were not restored:
//
//   - a good image restores with each policy (stop-the-world and
//     concurrent);
//   - a corrupt image with Verify::kFirst is refused before the session is
//     touched;
//   - a corrupt image, fresh, by default: the concurrent loader meets the
//     bad chunk and fails the restore with Corruption naming it, and the
//     app's calls touching a buffer that never loaded are refused (before
//     and after the restore returned), while a buffer loaded before the
//     failure reads back right; stop-the-world releases everything it
//     created (the session is empty again and takes the good image);
//   - in place, by default a corrupt image is refused with the session
//     unchanged; with kAsLoaded the bad chunk never reaches device memory.
//
// Sim backend, real SessionServer with the engine hook, fake apps
// (engine_test_env.h). Label `concurrency`: re-run under TSan.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/fresh_restore.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "engine_test_env.h"
#include "image/image_reader.h"

namespace phos::engine::testing {
namespace {

using namespace std::chrono_literals;
using session::testing::FakeApp;
constexpr wire::WireStatus kOk = wire::WireStatus::kSuccess;


class VerifiedRestoreTest : public ::testing::Test {
 protected:
  // Three buffers, allocated in address order: `low_` (64 KiB), `big_`
  // (9 MiB: three 4 MiB image chunks), `high_` (64 KiB).
  void SetUp() override {
    ASSERT_TRUE(env_.Start("phos-verified-restore-test").ok());
    ASSERT_TRUE(env_.Connect(&app_, &session_).ok());
    const std::uint64_t sizes[3] = {64u << 10, 9u << 20, 64u << 10};
    std::uint64_t* ptrs[3] = {&low_, &big_, &high_};
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(app_->Malloc(sizes[i], ptrs[i]), kOk) << app_->message();
      data_.push_back(Pattern(i, sizes[i]));
      ASSERT_EQ(app_->H2D(*ptrs[i], data_[i].data(), sizes[i]), kOk) << app_->message();
    }
    ASSERT_LT(low_, big_);
    ASSERT_LT(big_, high_);
    img_ = env_.dir() + "/img";
    bad_ = env_.dir() + "/bad";
    CheckpointOptions o;
    o.mode = Mode::kStop;
    o.dir = img_;
    Progress progress;
    CheckpointResult r;
    Status s = engine::Checkpoint(*session_, o, &progress, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    // `bad_`: one byte of big_'s second chunk flipped.
    std::filesystem::copy(img_, bad_);
    std::unique_ptr<image::ImageReader> reader;
    ASSERT_TRUE(image::ImageReader::Open(bad_, {}, &reader).ok());
    std::uint64_t off = 0;
    for (int i = 0; i < reader->manifest().buffers_size(); ++i) {
      const auto& e = reader->manifest().buffers(i);
      if (e.device_address() == big_) off = e.extent_offset() + e.chunk_bytes() + 100;
    }
    ASSERT_NE(off, 0u);
    reader.reset();
    std::fstream f(bad_ + "/gpu.img", std::ios::in | std::ios::out | std::ios::binary);
    char x = 0;
    f.seekg(static_cast<std::streamoff>(off));
    f.read(&x, 1);
    x = static_cast<char>(x ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(off));
    f.write(&x, 1);
    ASSERT_TRUE(f.good());
    f.close();
    NewApp();
  }

  void TearDown() override {
    app_.reset();
    session_.reset();
  }

  // The app leaves; a new one connects (an empty session).
  void NewApp() {
    std::shared_ptr<session::Session> old = session_;
    app_.reset();
    session_.reset();
    for (int i = 0; i < 500 && !old->finished(); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(old->finished());
    ASSERT_TRUE(env_.Connect(&app_, &session_).ok());
  }

  RestoreOptions Options(const std::string& dir, bool concurrent, Verify verify) {
    RestoreOptions o;
    o.dir = dir;
    o.concurrent = concurrent;
    o.verify = verify;
    return o;
  }

  void ExpectReads(std::uint64_t ptr, const std::vector<std::byte>& want) {
    std::vector<std::byte> got(want.size());
    ASSERT_EQ(app_->D2H(got.data(), ptr, got.size()), kOk) << app_->message();
    EXPECT_TRUE(got == want) << "buffer 0x" << std::hex << ptr;
  }

  // Blocks until the restore's control task ran (the loader's phase): calls
  // posted from then on are admitted by the restore.
  static void WaitForLoadPhase(Progress& progress) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    std::uint64_t seen = 0;
    for (;;) {
      ProgressSnapshot s = progress.Snapshot();
      if (s.phase == "load" || std::chrono::steady_clock::now() > deadline) return;
      progress.WaitForChange(s.version == seen ? seen : s.version, 5ms);
      seen = s.version;
    }
  }

  EngineTestEnv env_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<session::Session> session_;
  std::uint64_t low_ = 0, big_ = 0, high_ = 0;
  std::vector<std::vector<std::byte>> data_;
  std::string img_, bad_;
};

TEST_F(VerifiedRestoreTest, AGoodImageRestoresWithEachPolicy) {
  for (Verify v : {Verify::kAuto, Verify::kFirst, Verify::kAsLoaded}) {
    for (bool concurrent : {false, true}) {
      SCOPED_TRACE(std::string(VerifyName(v)) + (concurrent ? ", concurrent" : ", stop-the-world"));
      Progress progress;
      RestoreResult r;
      Status s = RestoreFresh(*session_, Options(img_, concurrent, v), &progress, &r);
      ASSERT_TRUE(s.ok()) << s.ToString();
      ExpectReads(low_, data_[0]);
      ExpectReads(big_, data_[1]);
      ExpectReads(high_, data_[2]);
      NewApp();
    }
  }
}

TEST_F(VerifiedRestoreTest, ACorruptImageIsRefusedUpFrontWithVerifyFirst) {
  Progress progress;
  RestoreResult r;
  Status s = RestoreFresh(*session_, Options(bad_, true, Verify::kFirst), &progress, &r);
  ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("untouched"), std::string::npos) << s.ToString();
  // Untouched: the good image restores into the same session.
  Status good = RestoreFresh(*session_, Options(img_, true, Verify::kFirst), &progress, &r);
  ASSERT_TRUE(good.ok()) << good.ToString();
  ExpectReads(big_, data_[1]);
}

TEST_F(VerifiedRestoreTest, ParseVerifyIsVerifyNamesInverseAndAutoDependsOnWhere) {
  for (Verify v : {Verify::kAuto, Verify::kFirst, Verify::kAsLoaded}) {
    Verify got = Verify::kAuto;
    ASSERT_TRUE(ParseVerify(VerifyName(v), &got)) << VerifyName(v);
    EXPECT_EQ(got, v);
  }
  Verify got = Verify::kFirst;
  EXPECT_FALSE(ParseVerify("always", &got));
  EXPECT_TRUE(VerifiesFirst(Verify::kAuto, true));
  EXPECT_FALSE(VerifiesFirst(Verify::kAuto, false));
  EXPECT_TRUE(VerifiesFirst(Verify::kFirst, false));
  EXPECT_FALSE(VerifiesFirst(Verify::kAsLoaded, true));
}

// A fresh stop-the-world restore reads the image once; the bad chunk fails
// it, everything it created is released, and the same session then takes
// the good image.
TEST_F(VerifiedRestoreTest, AFreshStopTheWorldRestoreMeetingACorruptChunkLeavesTheSessionEmpty) {
  Progress progress;
  RestoreResult r;
  Status s = RestoreFresh(*session_, Options(bad_, false, Verify::kAuto), &progress, &r);
  ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("empty again"), std::string::npos) << s.ToString();
  std::vector<std::byte> got(data_[0].size());
  EXPECT_NE(app_->D2H(got.data(), low_, got.size()), kOk) << "low_ still mapped after the failed restore";
  Status good = RestoreFresh(*session_, Options(img_, false, Verify::kAuto), &progress, &r);
  ASSERT_TRUE(good.ok()) << good.ToString();
  ExpectReads(low_, data_[0]);
  ExpectReads(big_, data_[1]);
  ExpectReads(high_, data_[2]);
}

// In place the default checks everything first: the live session keeps
// its state. With kAsLoaded the restore fails part-way (undefined, and
// says so), and the bad chunk's batch never reached device memory.
TEST_F(VerifiedRestoreTest, InPlaceACorruptImageIsRefusedByDefaultAndNeverReachesTheDevice) {
  Progress progress;
  RestoreResult r;
  ASSERT_TRUE(RestoreFresh(*session_, Options(img_, false, Verify::kAuto), &progress, &r).ok());
  // The app overwrites big_ with a pattern of its own.
  std::vector<std::byte> mine = Pattern(7, data_[1].size());
  ASSERT_EQ(app_->H2D(big_, mine.data(), mine.size()), kOk) << app_->message();
  for (bool concurrent : {false, true}) {
    SCOPED_TRACE(concurrent ? "concurrent" : "stop-the-world");
    Status s = engine::Restore(*session_, Options(bad_, concurrent, Verify::kAuto), &progress, &r);
    ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("untouched"), std::string::npos) << s.ToString();
    ExpectReads(big_, mine);
  }
  Status s = engine::Restore(*session_, Options(bad_, false, Verify::kAsLoaded), &progress, &r);
  ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("undefined"), std::string::npos) << s.ToString();
  // low_ (before big_ in the image) was loaded, and big_'s first chunk;
  // the bad second chunk never reached the device, nor anything after it.
  ExpectReads(low_, data_[0]);
  std::vector<std::byte> want = mine;
  constexpr std::size_t kChunk = 4u << 20;  // the image's chunk size
  std::copy(data_[1].begin(), data_[1].begin() + kChunk, want.begin());
  ExpectReads(big_, want);
}

// Fresh, concurrent, by default (as loaded): the loader finds the bad chunk. The app first
// reads low_ (loaded before the bad chunk: right), then big_ and high_
// (never loaded: refused, not garbage), during and after the restore.
TEST_F(VerifiedRestoreTest, ACorruptChunkMetWhileLoadingFailsAndUnloadedBuffersAreRefused) {
  Progress progress;
  RestoreResult r;
  Status s;
  std::thread restore([&] { s = RestoreFresh(*session_, Options(bad_, true, Verify::kAuto), &progress, &r); });
  WaitForLoadPhase(progress);
  ASSERT_EQ(progress.Snapshot().phase, "load");
  std::vector<std::byte> got(data_[0].size());
  EXPECT_EQ(app_->D2H(got.data(), low_, got.size()), kOk) << app_->message();
  EXPECT_TRUE(got == data_[0]) << "low_ was loaded before the bad chunk and must read back right";
  std::vector<std::byte> big(data_[1].size());
  EXPECT_NE(app_->D2H(big.data(), big_, big.size()), kOk) << "a read of the buffer with the bad chunk was admitted";
  EXPECT_NE(app_->message().find("never loaded"), std::string::npos) << app_->message();
  restore.join();
  ASSERT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("undefined"), std::string::npos) << s.ToString();
  // After the restore gave up: still refused.
  EXPECT_NE(app_->D2H(big.data(), big_, big.size()), kOk) << "big_ read after the failed restore";
  std::vector<std::byte> high(data_[2].size());
  EXPECT_NE(app_->D2H(high.data(), high_, high.size()), kOk) << "high_ (never loaded) read after the failed restore";
  EXPECT_NE(app_->message().find("never loaded"), std::string::npos) << app_->message();
  EXPECT_EQ(app_->D2H(got.data(), low_, got.size()), kOk) << app_->message();
  EXPECT_TRUE(got == data_[0]);
}

}  // namespace
}  // namespace phos::engine::testing
