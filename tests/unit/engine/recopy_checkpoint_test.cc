// Soft recopy checkpoints (daemon/engine/recopy_checkpoint.h) against a fake
// app (tests/unit/session/fake_app.h) in a real SessionServer on the sim
// backend, with a throttled link so the copier's rounds overlap the app:
//   - the image is exactly the device state at t2 (result.admitted_at_capture
//     calls) while the app keeps rewriting a hot set of buffers; cold
//     buffers come from the rounds, not from the stall;
//   - a buffer freed and one allocated during the operation;
//   - a cudaDeviceReset during the operation (every tracked buffer goes);
//   - a kernel writing through a pointer table (outside its speculated set)
//     into a buffer already copied: its twin's report re-dirties it;
//   - the app exiting mid-operation: a clean Unavailable, no image;
//   - pre-copy (CheckpointOptions::precopy, live migration): the sink gets
//     every good copy while the app writes, the image refers to the latest
//     copy of each unchanged buffer instead of holding its bytes, and filled
//     from the sink's copies it is exactly the state at t2; a failing sink
//     fails the checkpoint and the app runs on.
// The randomized cross-mode check is engine_consistency_test.
// Label `concurrency`: re-run under ThreadSanitizer.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_hook.h"
#include "engine/operations.h"
#include "engine/session_snapshot.h"
#include "engine_test_env.h"
#include "fake_app.h"
#include "engine/precopy_sink.h"
#include "image/image_layout.h"
#include "image/image_reader.h"
#include "session/session_server.h"

namespace phos::engine {
namespace {

using namespace std::chrono_literals;
using session::testing::FakeApp;
using wire::WireStatus;
constexpr WireStatus kOk = WireStatus::kSuccess;

using testing::ReadAppFixture;

/// Keeps every copy handed over (copier thread; read after the checkpoint).
class RecordingSink : public PrecopySink {
 public:
  struct Copy {
    uint64_t address = 0;
    std::vector<uint8_t> bytes;
    std::vector<uint64_t> xxh3;
  };
  Status Staged(const StagedCopy& c) override {
    if (fail_after >= 0 && static_cast<int>(copies.size()) >= fail_after) {
      return Status::Unavailable("the destination went away");
    }
    EXPECT_GT(c.copy_id, last_id) << "copy ids must increase";
    last_id = c.copy_id;
    EXPECT_EQ(c.chunk_bytes, image::kDefaultChunkBytes);
    Copy k;
    k.address = c.address;
    const auto* p = reinterpret_cast<const uint8_t*>(c.data);
    k.bytes.assign(p, p + c.bytes);
    k.xxh3 = *c.chunk_xxh3;
    copies[c.copy_id] = std::move(k);
    return Status::Ok();
  }
  std::map<uint64_t, Copy> copies;
  uint64_t last_id = 0;
  int fail_after = -1;  // >= 0: fail once this many copies were taken
};

/// The receiver's job: fills each referenced run of chunks in `img` from
/// the sink's copy, after checking each chunk's checksum in the manifest
/// against the copy's.
void FillFromCopies(const image::v1::Manifest& m, const std::vector<PrecopiedExtent>& precopied,
                    const RecordingSink& sink, std::fstream* img) {
  const uint64_t chunk = image::kDefaultChunkBytes;
  for (const PrecopiedExtent& e : precopied) {
    const image::v1::BufferExtent* buffer = nullptr;
    for (const auto& b : m.buffers()) {
      if (b.device_address() <= e.address && e.address < b.device_address() + b.bytes()) buffer = &b;
    }
    ASSERT_NE(buffer, nullptr) << "a reference outside every buffer";
    const RecordingSink::Copy& c = sink.copies.at(e.copy_id);
    const uint64_t in_buffer = e.address - buffer->device_address();
    ASSERT_EQ(in_buffer % chunk, 0u) << "a reference that does not start a chunk";
    ASSERT_EQ(e.copy_offset % chunk, 0u);
    ASSERT_LE(e.copy_offset + e.bytes, c.bytes.size());
    for (uint64_t k = 0; k * chunk < e.bytes; ++k) {
      EXPECT_EQ(buffer->chunk_xxh3(static_cast<int>(in_buffer / chunk + k)), c.xxh3.at(e.copy_offset / chunk + k));
    }
    img->seekp(static_cast<std::streamoff>(buffer->extent_offset() + in_buffer));
    img->write(reinterpret_cast<const char*>(c.bytes.data() + e.copy_offset), static_cast<std::streamsize>(e.bytes));
  }
}

class RecopyCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 0.5 GB/s: 1 MiB ~ 2 ms, a round takes long enough to race with the app.
    ASSERT_TRUE(env_.Start("phos-recopy-test", 0.5).ok());
    ASSERT_TRUE(env_.Connect(&app_, &session_).ok());
    dir_ = env_.dir();
  }
  void TearDown() override {
    app_.reset();
    session_.reset();
  }

  /// Allocates `n` buffers of `bytes`, each memset to byte 1.
  void MakeBuffers(int n, uint64_t bytes) {
    for (int i = 0; i < n; ++i) {
      uint64_t p = 0;
      ASSERT_EQ(app_->Malloc(bytes, &p), kOk);
      ASSERT_EQ(app_->Memset(p, 1, 1, bytes), kOk);
      bufs_.push_back(p);
    }
  }

  CheckpointOptions Options() const {
    CheckpointOptions o;
    o.mode = Mode::kRecopy;
    o.dir = dir_ + "/img";
    return o;
  }

  /// Starts a recopy checkpoint on a thread and returns once its copier runs.
  void StartCheckpoint(const CheckpointOptions& o) {
    cp_ = std::thread([this, o] { cp_status_ = Checkpoint(*session_, o, &progress_, &result_); });
    while (progress_.Snapshot().phase != "copy") std::this_thread::sleep_for(100us);
  }
  void JoinCheckpoint() { cp_.join(); }

  /// The image's buffers: device address -> bytes.
  std::map<uint64_t, std::vector<uint8_t>> ReadImage(const std::string& dir) {
    std::map<uint64_t, std::vector<uint8_t>> out;
    std::unique_ptr<image::ImageReader> reader;
    Status s = image::ImageReader::Open(dir, {}, &reader);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return out;
    EXPECT_EQ(reader->manifest().mode(), "recopy");
    for (size_t k = 0; k < reader->buffer_count(); ++k) {
      const auto& e = reader->manifest().buffers(static_cast<int>(k));
      std::vector<uint8_t> bytes(e.bytes());
      EXPECT_TRUE(reader->ReadBuffer(k, bytes.data()).ok());
      out[e.device_address()] = std::move(bytes);
    }
    return out;
  }

  /// The image in `dir` as the receiver would have it: the chunks written
  /// as references filled from `sink`'s copies (FillFromCopies), then read
  /// back with every chunk verified.
  std::map<uint64_t, std::vector<uint8_t>> ReadFilledImage(const std::string& dir, const RecordingSink& sink) {
    image::v1::Manifest m;
    EXPECT_TRUE(image::ReadManifest(dir, &m).ok());
    {
      std::fstream img(dir + "/" + std::string(image::kGpuImgName), std::ios::in | std::ios::out | std::ios::binary);
      EXPECT_TRUE(img.good());
      FillFromCopies(m, result_.precopied, sink, &img);
    }
    return ReadImage(dir);
  }

  /// Runs a checkpoint with `o` while a thread rewrites a hot set — the
  /// first `hot` buffers of `bytes` each — with synchronous memsets (call i
  /// sets buffer i % hot to byte (i % 250) + 2). *writes: memsets done.
  Status CheckpointWhileWriting(int hot, uint64_t bytes, const CheckpointOptions& o, int* writes) {
    std::atomic<bool> stop{false};
    std::atomic<int> done{0};
    std::thread writer([&] {
      for (int i = 0; !stop.load(); ++i) {
        if (app_->Memset(bufs_[i % hot], (i % 250) + 2, 1, bytes) != kOk) return;
        done.fetch_add(1);
      }
    });
    while (done.load() < 3) std::this_thread::sleep_for(1ms);
    Status s = Checkpoint(*session_, o, &progress_, &result_);
    stop.store(true);
    writer.join();
    *writes = done.load();
    return s;
  }
  /// The byte buffer k holds after `calls` of those memsets (1: never written).
  static uint8_t HotSetByte(size_t k, uint64_t calls, int hot) {
    uint8_t want = 1;
    for (uint64_t i = 0; i < calls; ++i) {
      if (i % static_cast<uint64_t>(hot) == k) want = static_cast<uint8_t>((i % 250) + 2);
    }
    return want;
  }

  static void ExpectFilled(const std::vector<uint8_t>& got, uint8_t want, const std::string& what) {
    size_t bad = 0;
    for (uint8_t v : got) bad += v != want;
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " bytes differ from " << int(want);
  }

  testing::EngineTestEnv env_;  // declared first: destroyed after the app and session
  std::string dir_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<session::Session> session_;
  std::vector<uint64_t> bufs_;
  std::thread cp_;
  Progress progress_;
  CheckpointResult result_;
  Status cp_status_;
};

// The app rewrites a hot set (4 of 16 buffers) with synchronous memsets
// (call i sets buffer i % 4 to byte (i % 250) + 2) while the checkpoint
// runs: the image is the state after exactly admitted_at_capture calls, and
// the cold buffers were copied by the rounds (not again at t2).
TEST_F(RecopyCheckpointTest, ImageIsTheStateAtT2WhileTheAppWrites) {
  const uint64_t kBytes = 1 << 20;
  MakeBuffers(16, kBytes);
  const uint64_t setup = session_->admitted();  // every setup call was synchronous
  const int kHot = 4;
  CheckpointOptions o = Options();
  int writes = 0;
  Status s = CheckpointWhileWriting(kHot, kBytes, o, &writes);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(result_.mode, Mode::kRecopy);
  ASSERT_GE(result_.admitted_at_capture, setup);
  const uint64_t calls = result_.admitted_at_capture - setup;
  ASSERT_GT(static_cast<uint64_t>(writes), calls) << "the app wrote nothing after t2";
  std::printf("recopy: %llu rounds, %llu bytes at t2, stall %llu us, %llu calls before t2, %d writes\n",
              static_cast<unsigned long long>(result_.counters.recopy_rounds),
              static_cast<unsigned long long>(result_.counters.recopy_dirty_bytes),
              static_cast<unsigned long long>(result_.stall_us), static_cast<unsigned long long>(calls), writes);
  EXPECT_GT(result_.counters.recopy_rounds, 0u);
  EXPECT_LE(result_.counters.recopy_rounds, static_cast<uint64_t>(o.recopy_rounds));
  EXPECT_GT(result_.stall_us, 0u);
  // The 12 cold buffers were never written: their round-1 copies stand.
  EXPECT_LE(result_.counters.recopy_dirty_bytes, kHot * kBytes);
  EXPECT_EQ(result_.buffers, 16u);
  EXPECT_EQ(result_.bytes, 16 * kBytes);

  auto image = ReadImage(o.dir);
  ASSERT_EQ(image.size(), bufs_.size());
  for (size_t k = 0; k < bufs_.size(); ++k) {
    ASSERT_EQ(image.count(bufs_[k]), 1u) << k;
    ExpectFilled(image[bufs_[k]], HotSetByte(k, calls, kHot), "buffer " + std::to_string(k));
  }
}

// A buffer freed and one allocated while the rounds run: the freed one is
// not in the image, the new one is (copied at t2), with their contents.
TEST_F(RecopyCheckpointTest, BufferFreedAndBufferAllocatedDuringTheOperation) {
  const uint64_t kBytes = 2 << 20;
  MakeBuffers(8, kBytes);
  const uint64_t setup = session_->admitted();
  StartCheckpoint(Options());
  uint64_t fresh = 0;
  ASSERT_EQ(app_->Free(bufs_[3]), kOk);                    // call 1
  ASSERT_EQ(app_->Malloc(3 << 20, &fresh), kOk);           // call 2
  ASSERT_EQ(app_->Memset(fresh, 0x5a, 1, 3 << 20), kOk);   // call 3
  ASSERT_EQ(app_->Memset(bufs_[0], 0x33, 1, kBytes), kOk); // call 4
  JoinCheckpoint();
  ASSERT_TRUE(cp_status_.ok()) << cp_status_.ToString();
  const uint64_t calls = result_.admitted_at_capture - setup;
  ASSERT_GE(calls, 4u) << "t2 came before the app's calls (timing)";
  EXPECT_GE(result_.counters.recopy_dirty_bytes, uint64_t{3} << 20) << "the new buffer is copied at t2";

  // The handles: the final buffer map, and the first-use order (buffer 0
  // was used during the operation; the freed one is not listed).
  image::v1::Manifest m;
  ASSERT_TRUE(image::ReadManifest(Options().dir, &m).ok());
  SessionSnapshot snap;
  ASSERT_TRUE(DecodeSnapshot(m.session(), &snap).ok());
  EXPECT_EQ(snap.buffers.size(), 8u);
  const std::vector<std::uint64_t> first_use(m.first_use_order().begin(), m.first_use_order().end());
  EXPECT_NE(std::find(first_use.begin(), first_use.end(), bufs_[0]), first_use.end());
  EXPECT_EQ(std::find(first_use.begin(), first_use.end(), bufs_[3]), first_use.end());

  auto image = ReadImage(Options().dir);
  EXPECT_EQ(image.count(bufs_[3]), 0u) << "a freed buffer is in the image";
  ASSERT_EQ(image.count(fresh), 1u) << "the buffer allocated during the operation is missing";
  ASSERT_EQ(image.size(), 8u);
  ExpectFilled(image[fresh], 0x5a, "new buffer");
  ExpectFilled(image[bufs_[0]], 0x33, "buffer 0");
  for (size_t k = 1; k < bufs_.size(); ++k) {
    if (k != 3) ExpectFilled(image[bufs_[k]], 1, "buffer " + std::to_string(k));
  }
}

// cudaDeviceReset while the rounds run frees every buffer and replaces the
// context; the copier has nothing left to copy, so t2 follows soon: the
// image holds what the app has at t2 — nothing, or what it allocated after
// the reset.
TEST_F(RecopyCheckpointTest, DeviceResetDuringTheOperation) {
  MakeBuffers(8, 2 << 20);
  const uint64_t setup = session_->admitted();
  StartCheckpoint(Options());
  ASSERT_EQ(app_->Empty(wire::op::kDeviceReset), kOk) << app_->message();  // call 1
  uint64_t fresh = 0;
  ASSERT_EQ(app_->Malloc(1 << 20, &fresh), kOk);          // call 2
  ASSERT_EQ(app_->Memset(fresh, 7, 1, 1 << 20), kOk);     // call 3
  JoinCheckpoint();
  ASSERT_TRUE(cp_status_.ok()) << cp_status_.ToString();
  const uint64_t calls = result_.admitted_at_capture - setup;
  ASSERT_GE(calls, 1u) << "t2 came before the reset (timing)";
  auto image = ReadImage(Options().dir);
  for (uint64_t b : bufs_) EXPECT_EQ(image.count(b), 0u) << "a buffer the reset freed is in the image";
  if (calls == 1) {
    EXPECT_TRUE(image.empty());
  } else {
    ASSERT_EQ(image.size(), 1u);
    ASSERT_EQ(image.count(fresh), 1u);
    if (calls >= 3) ExpectFilled(image[fresh], 7, "buffer allocated after the reset");
  }
  // The session goes on normally.
  std::vector<uint8_t> back(1 << 20);
  ASSERT_EQ(app_->D2H(back.data(), fresh, back.size()), kOk);
  ExpectFilled(back, 7, "device");
}

// scatter(table, 2, src, n) writes dst0/dst1 through the pointers in
// `table`: its speculated set names no written buffer. dst0/dst1 are copied
// early in round 1 (lowest addresses); the kernel runs while the copier is
// on the big buffers; only its twin's report makes them DIRTY again.
TEST_F(RecopyCheckpointTest, TwinMissRedirtiesACopiedBuffer) {
  const int n = 256;
  uint64_t table = 0, src = 0, dst0 = 0, dst1 = 0;
  ASSERT_EQ(app_->Malloc(16, &table), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &src), kOk);
  ASSERT_EQ(app_->Malloc(n * 2, &dst0), kOk);
  ASSERT_EQ(app_->Malloc(n * 2, &dst1), kOk);
  MakeBuffers(8, 2 << 20);
  ASSERT_LT(dst1, bufs_.front()) << "the scatter targets must come first in the copier's order";
  uint64_t ptrs[2] = {dst0, dst1};
  ASSERT_EQ(app_->H2D(table, ptrs, sizeof ptrs), kOk);
  std::vector<int> s(n);
  for (int i = 0; i < n; ++i) s[i] = i;
  ASSERT_EQ(app_->H2D(src, s.data(), n * 4), kOk);
  ASSERT_EQ(app_->Memset(dst0, 0, 1, n * 2), kOk);
  ASSERT_EQ(app_->Memset(dst1, 0, 1, n * 2), kOk);
  ASSERT_EQ(app_->ModuleLoad(1, ReadAppFixture("pointer_table.fatbin")), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 10, "_Z7scatterPKPiiPKii"), kOk) << app_->message();
  const uint64_t setup = session_->admitted();

  StartCheckpoint(Options());
  // dst0/dst1 are copied once the copier is into the first big buffer.
  while (progress_.Snapshot().bytes_done < (1u << 20)) std::this_thread::sleep_for(100us);
  struct {
    uint64_t table;
    int32_t tables;
    int32_t pad;
    uint64_t src;
    int32_t n;
  } args{table, 2, 0, src, n};
  ASSERT_EQ(app_->Launch(10, testing::Grid(1, n), std::as_bytes(std::span(&args, 1))), kOk);
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  JoinCheckpoint();
  ASSERT_TRUE(cp_status_.ok()) << cp_status_.ToString();
  ASSERT_GE(result_.admitted_at_capture - setup, 1u) << "t2 came before the launch (timing)";
  EXPECT_EQ(result_.counters.twin_launches, 1u);
  EXPECT_GT(result_.counters.twin_misses, 0u);
  EXPECT_GE(result_.counters.recopy_misses, 2u) << "dst0 and dst1 were not re-dirtied";

  auto image = ReadImage(Options().dir);
  ASSERT_EQ(image.count(dst0), 1u);
  ASSERT_EQ(image.count(dst1), 1u);
  // scatter: element i goes to table[i % 2][i / 2] = src[i] * 3 + 1.
  std::vector<int> got0(n / 2), got1(n / 2);
  std::memcpy(got0.data(), image[dst0].data(), n * 2);
  std::memcpy(got1.data(), image[dst1].data(), n * 2);
  for (int i = 0; i < n / 2; ++i) {
    ASSERT_EQ(got0[i], (2 * i) * 3 + 1) << i;
    ASSERT_EQ(got1[i], (2 * i + 1) * 3 + 1) << i;
  }
}

// The app exits while the copier runs: Unavailable naming the exit, no
// image and no DIR.tmp left, phosd (this process) fine.
TEST_F(RecopyCheckpointTest, SessionExitingMidOperation) {
  MakeBuffers(16, 2 << 20);  // ~64 ms per round
  StartCheckpoint(Options());
  app_.reset();  // the app disconnects: the session ends
  JoinCheckpoint();
  EXPECT_EQ(cp_status_.code(), Status::Code::kUnavailable) << cp_status_.ToString();
  EXPECT_NE(cp_status_.message().find("exited"), std::string::npos) << cp_status_.message();
  EXPECT_FALSE(std::filesystem::exists(Options().dir));
  EXPECT_FALSE(std::filesystem::exists(Options().dir + ".tmp"));
}

// An idle app: one round copies everything, t2 copies nothing.
TEST_F(RecopyCheckpointTest, IdleSessionNeedsOneRoundAndNoCopyAtT2) {
  MakeBuffers(4, 1 << 20);
  CheckpointOptions o = Options();
  ASSERT_TRUE(Checkpoint(*session_, o, &progress_, &result_).ok());
  EXPECT_EQ(result_.counters.recopy_rounds, 1u);
  EXPECT_EQ(result_.counters.recopy_dirty_bytes, 0u);
  auto image = ReadImage(o.dir);
  ASSERT_EQ(image.size(), 4u);
  for (uint64_t b : bufs_) ExpectFilled(image[b], 1, "buffer");
}

// The hot/cold workload of ImageIsTheStateAtT2WhileTheAppWrites with a
// pre-copy sink: cold buffers reach the image as references to their
// (only) copy, hot ones as bytes or as a reference to their latest copy;
// with the referenced bytes filled in from the sink, the image is the
// state at t2.
TEST_F(RecopyCheckpointTest, PrecopySinkGetsTheCopiesAndTheImageRefersToThem) {
  const uint64_t kBytes = 1 << 20;
  MakeBuffers(16, kBytes);
  const uint64_t setup = session_->admitted();
  const int kHot = 4;
  RecordingSink sink;
  CheckpointOptions o = Options();
  o.precopy = &sink;
  int writes = 0;
  Status s = CheckpointWhileWriting(kHot, kBytes, o, &writes);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const uint64_t calls = result_.admitted_at_capture - setup;

  // Every cold buffer went to the sink and is referenced; nothing is
  // referenced twice, and only the newest copy of an address.
  std::map<uint64_t, uint64_t> newest;  // address -> newest copy id
  for (const auto& [id, c] : sink.copies) newest[c.address] = id;
  std::map<uint64_t, uint64_t> referenced;  // address -> copy id
  uint64_t ref_bytes = 0;
  for (const PrecopiedExtent& e : result_.precopied) {
    ASSERT_EQ(referenced.count(e.address), 0u) << "address referenced twice";
    referenced[e.address] = e.copy_id;
    ASSERT_EQ(sink.copies.count(e.copy_id), 1u) << "a reference to a copy the sink never got";
    EXPECT_EQ(e.copy_id, newest[e.address]) << "a reference to a superseded copy";
    EXPECT_EQ(e.bytes, kBytes);
    ref_bytes += e.bytes;
  }
  EXPECT_EQ(result_.precopied_bytes, ref_bytes);
  for (size_t k = kHot; k < bufs_.size(); ++k) EXPECT_EQ(referenced.count(bufs_[k]), 1u) << "cold buffer " << k;
  EXPECT_EQ(ref_bytes + result_.counters.recopy_dirty_bytes, result_.bytes)
      << "every extent is either referenced or copied at t2";

  // The receiver's job: fill the holes from the copies, after checking each
  // chunk's checksum in the manifest against the copy's.
  auto image = ReadFilledImage(o.dir, sink);  // verifies every chunk
  ASSERT_EQ(image.size(), bufs_.size());
  for (size_t k = 0; k < bufs_.size(); ++k) {
    ExpectFilled(image[bufs_[k]], HotSetByte(k, calls, kHot), "buffer " + std::to_string(k));
  }
}

// Dirtiness per image chunk (issue #19 item 2): the app rewrites 1 MiB
// inside chunk 2 of a 4-chunk buffer with memsets (exact ranges) while a
// pre-copy checkpoint runs. Chunks 0, 1 and 3 are copied and handed over
// exactly once (later rounds re-copy only chunk 2, not the buffer), the
// image refers to them, at most chunk 2 is copied at t2, and the image
// filled from the copies is the state at t2.
TEST_F(RecopyCheckpointTest, RoundsRecopyOnlyTheChunksWrittenSinceTheirCopy) {
  const uint64_t kChunk = image::kDefaultChunkBytes;
  const uint64_t kBytes = 4 * kChunk;
  MakeBuffers(1, kBytes);
  const uint64_t buf = bufs_[0];
  const uint64_t hot = buf + 2 * kChunk + (1 << 20);
  const uint64_t setup = session_->admitted();
  RecordingSink sink;
  CheckpointOptions o = Options();
  o.precopy = &sink;
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      if (app_->Memset(hot, (i % 250) + 2, 1, 1 << 20) != kOk) return;
      done.fetch_add(1);
    }
  });
  while (done.load() < 3) std::this_thread::sleep_for(1ms);
  Status s = Checkpoint(*session_, o, &progress_, &result_);
  stop.store(true);
  writer.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  const uint64_t calls = result_.admitted_at_capture - setup;

  // Every copy is a run of whole chunks; each of chunks 0, 1, 3 is in
  // exactly one.
  std::map<uint64_t, int> copies_of;  // chunk -> copies holding it
  for (const auto& [id, c] : sink.copies) {
    ASSERT_EQ((c.address - buf) % kChunk, 0u) << "copy " << id << " does not start a chunk";
    ASSERT_EQ(c.bytes.size() % kChunk, 0u) << "copy " << id << " is not whole chunks";
    for (uint64_t k = 0; k < c.bytes.size() / kChunk; ++k) ++copies_of[(c.address - buf) / kChunk + k];
  }
  // (Chunk 2 may be in none: written during each of its copies, it is
  // never handed over and t2 copies it.)
  for (uint64_t k : {0, 1, 3}) EXPECT_EQ(copies_of[k], 1) << "chunk " << k << " was copied again unwritten";
  // The image refers to chunks 0, 1, 3 (and chunk 2 when its last copy
  // stayed current); t2 copied at most chunk 2.
  uint64_t referenced = 0;
  for (const PrecopiedExtent& e : result_.precopied) referenced += e.bytes;
  EXPECT_GE(referenced, 3 * kChunk);
  EXPECT_LE(result_.counters.recopy_dirty_bytes, kChunk);
  EXPECT_EQ(referenced + result_.counters.recopy_dirty_bytes, kBytes)
      << "every chunk is either referenced or copied at t2";

  auto image = ReadFilledImage(o.dir, sink);  // verifies every chunk
  ASSERT_EQ(image.size(), 1u);
  const std::vector<uint8_t>& got = image[buf];
  const uint8_t last = static_cast<uint8_t>(((calls - 1) % 250) + 2);  // the last memset admitted before t2
  size_t bad = 0;
  for (uint64_t i = 0; i < kBytes; ++i) {
    const bool in_hot = i >= hot - buf && i < hot - buf + (1 << 20);
    bad += got[i] != (in_hot ? last : 1);
  }
  EXPECT_EQ(bad, 0u) << "after " << calls << " memsets";
}

// The sink fails (the destination died) after 2 copies: no image, and the
// app's calls still run.
TEST_F(RecopyCheckpointTest, FailingPrecopySinkFailsTheCheckpointNotTheApp) {
  MakeBuffers(6, 1 << 20);
  RecordingSink sink;
  sink.fail_after = 2;
  CheckpointOptions o = Options();
  o.precopy = &sink;
  Status s = Checkpoint(*session_, o, &progress_, &result_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("destination went away"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("pre-copy of buffer"), std::string::npos) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(o.dir));
  EXPECT_FALSE(std::filesystem::exists(o.dir + ".tmp"));
  EXPECT_EQ(app_->Memset(bufs_[0], 7, 1, 1 << 20), kOk);
  // A later checkpoint without the sink works.
  o.precopy = nullptr;
  s = Checkpoint(*session_, o, &progress_, &result_);
  ASSERT_TRUE(s.ok()) << s.ToString();
  auto image = ReadImage(o.dir);
  ExpectFilled(image[bufs_[0]], 7, "buffer 0");
}


// A process using two GPUs (soft_operation.h "SEVERAL GPUS"): recopy takes
// it (no stop-the-world fallback) while the app writes buffers on both GPUs
// — each from its own GPU's context (memsets) and from the other GPU's
// (peer copies, whose write events live in the writer's context) — and the
// image is exactly the state at t2.
class TwoGpuRecopyCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.Start("phos-recopy2-test", 0.5, /*gpus=*/2).ok());
    ASSERT_TRUE(env_.Connect(&app_, &session_).ok());
  }
  void TearDown() override {
    app_.reset();
    session_.reset();
  }
  testing::EngineTestEnv env_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<session::Session> session_;
};

TEST_F(TwoGpuRecopyCheckpointTest, RecopyTakesBothGpusWhileTheAppWritesOnEach) {
  constexpr uint64_t kBytes = 1 << 20;
  constexpr int kPerGpu = 4;
  struct Buf {
    uint64_t ptr = 0;
    uint8_t device = 0;
  };
  std::vector<Buf> bufs;
  uint64_t src[2] = {0, 0};
  for (uint8_t g = 0; g < 2; ++g) {
    app_->UseDevice(g);
    for (int i = 0; i < kPerGpu; ++i) {
      Buf b{0, g};
      ASSERT_EQ(app_->Malloc(kBytes, &b.ptr), kOk) << app_->message();
      ASSERT_EQ(app_->Memset(b.ptr, 1, 1, kBytes), kOk) << app_->message();
      bufs.push_back(b);
    }
    ASSERT_EQ(app_->Malloc(kBytes, &src[g]), kOk) << app_->message();
    ASSERT_EQ(app_->Memset(src[g], 0xe0 + g, 1, kBytes), kOk) << app_->message();
  }
  const uint64_t setup = session_->admitted();  // every setup call was synchronous
  // Call i writes buffer i % 8: every third one from the other GPU (a copy
  // of that GPU's source, byte 0xe0 + its ordinal), the others from its own
  // (a memset to byte (i % 250) + 2).
  auto cross = [](uint64_t i) { return i % 3 == 2; };
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  std::thread writer([&] {
    for (uint64_t i = 0; !stop.load(); ++i) {
      const Buf& b = bufs[i % bufs.size()];
      WireStatus w;
      if (cross(i)) {
        const uint8_t other = 1 - b.device;
        app_->UseDevice(other);
        w = app_->D2D(b.ptr, src[other], kBytes);
      } else {
        app_->UseDevice(b.device);
        w = app_->Memset(b.ptr, (i % 250) + 2, 1, kBytes);
      }
      if (w != kOk) return;
      done.fetch_add(1);
    }
  });
  while (done.load() < 3) std::this_thread::sleep_for(1ms);
  CheckpointOptions o;
  o.mode = Mode::kRecopy;
  o.dir = env_.dir() + "/img";
  Progress progress;
  CheckpointResult r;
  Status s = Checkpoint(*session_, o, &progress, &r);
  stop.store(true);
  writer.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.mode, Mode::kRecopy);
  EXPECT_GT(r.counters.recopy_rounds, 0u);
  ASSERT_GE(r.admitted_at_capture, setup);
  const uint64_t calls = r.admitted_at_capture - setup;
  ASSERT_GT(static_cast<uint64_t>(done.load()), calls) << "the app wrote nothing after t2";

  std::unique_ptr<image::ImageReader> reader;
  ASSERT_TRUE(image::ImageReader::Open(o.dir, {}, &reader).ok());
  EXPECT_EQ(reader->manifest().mode(), "recopy");
  std::map<uint64_t, size_t> extent;
  for (int i = 0; i < reader->manifest().buffers_size(); ++i) extent[reader->manifest().buffers(i).device_address()] = i;
  std::vector<uint8_t> got(kBytes);
  for (size_t k = 0; k < bufs.size(); ++k) {
    uint8_t want = 1;
    for (uint64_t i = 0; i < calls; ++i) {
      if (i % bufs.size() != k) continue;
      want = cross(i) ? static_cast<uint8_t>(0xe0 + (1 - bufs[k].device)) : static_cast<uint8_t>((i % 250) + 2);
    }
    ASSERT_EQ(extent.count(bufs[k].ptr), 1u) << k;
    ASSERT_TRUE(reader->ReadBuffer(extent[bufs[k].ptr], got.data()).ok());
    size_t bad = 0;
    for (uint8_t v : got) bad += v != want;
    EXPECT_EQ(bad, 0u) << "buffer " << k << " (GPU " << int(bufs[k].device) << "): bytes differ from " << int(want);
  }
}

}  // namespace
}  // namespace phos::engine
