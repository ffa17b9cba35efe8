// Soft copy-on-write checkpoints (daemon/engine/cow_checkpoint.h) against a
// fake app (tests/unit/session/fake_app.h) in a real SessionServer on the
// sim backend, with a throttled link so the copier is still busy while the
// app writes:
//   - the image is exactly the device state at t1 (result.admitted_at_capture
//     calls), while the app rewrites buffers during the copy;
//   - a tiny reserve makes writers wait for the copier and still loses nothing;
//   - a kernel writing through a pointer table (outside its speculated set)
//     is caught by its twin: the image is discarded and retaken stop-the-world;
//   - a correctly speculated kernel runs as its twin and changes nothing.
// Label `concurrency`: re-run under ThreadSanitizer.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_hook.h"
#include "engine/operations.h"
#include "engine/shadow_pool.h"
#include "engine_test_env.h"
#include "fake_app.h"
#include "image/image_layout.h"
#include "image/image_reader.h"
#include "io_gate.h"
#include "session/session_server.h"
#include "test_ptx.h"

namespace phos::engine {
namespace {

using namespace std::chrono_literals;
using session::testing::FakeApp;
using wire::WireStatus;
constexpr WireStatus kOk = WireStatus::kSuccess;

using testing::Gate;
using testing::GatedIoFactory;
using testing::Grid;
using testing::ReadAppFixture;

class CowCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 0.5 GB/s: 1 MiB ~ 2 ms, the copier is slow enough to race with the app.
    ASSERT_TRUE(env_.Start("phos-cow-test", 0.5).ok());
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
    bytes_ = bytes;
  }

  /// Runs a CoW checkpoint while the app does synchronous memsets
  /// (call i sets buffer i % n to byte (i % 250) + 2), then checks that the
  /// image is exactly the state after result.admitted_at_capture calls.
  void CheckImageIsT1(const CheckpointOptions& base, CheckpointResult* r) {
    const uint64_t setup = session_->admitted();  // every setup call was synchronous
    std::atomic<bool> stop{false};
    std::atomic<int> writes{0};
    std::thread writer([&] {
      for (int i = 0; !stop.load(); ++i) {
        if (app_->Memset(bufs_[i % bufs_.size()], (i % 250) + 2, 1, bytes_) != kOk) return;
        writes.fetch_add(1);
      }
    });
    // Let a few writes happen before t1.
    while (writes.load() < 3) std::this_thread::sleep_for(1ms);
    CheckpointOptions o = base;
    o.mode = Mode::kCow;
    o.dir = dir_ + "/img";
    Progress progress;
    Status s = Checkpoint(*session_, o, &progress, r);
    stop.store(true);
    writer.join();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(r->mode, Mode::kCow);
    ASSERT_EQ(r->buffers, bufs_.size());
    ASSERT_GE(r->admitted_at_capture, setup);
    const uint64_t calls = r->admitted_at_capture - setup;  // loop calls before t1
    ASSERT_GT(static_cast<uint64_t>(writes.load()), calls) << "the app wrote nothing during the checkpoint";

    std::unique_ptr<image::ImageReader> reader;
    ASSERT_TRUE(image::ImageReader::Open(o.dir, {}, &reader).ok());
    ASSERT_EQ(reader->buffer_count(), bufs_.size());
    std::vector<uint8_t> got(bytes_);
    for (size_t k = 0; k < bufs_.size(); ++k) {
      const auto& e = reader->manifest().buffers(static_cast<int>(k));
      ASSERT_EQ(e.device_address(), bufs_[k]);
      ASSERT_TRUE(reader->ReadBuffer(k, got.data()).ok());
      uint8_t want = 1;
      for (uint64_t i = 0; i < calls; ++i) {
        if (i % bufs_.size() == k) want = static_cast<uint8_t>((i % 250) + 2);
      }
      for (uint64_t b = 0; b < bytes_; b += 4093) ASSERT_EQ(got[b], want) << "buffer " << k << " byte " << b;
      ASSERT_EQ(got[bytes_ - 1], want) << "buffer " << k;
    }
  }

  /// CheckImageIsT1 over 16 buffers of 1 MiB with shadows from a reserve
  /// of `reserve_bytes` filled beforehand (as phosd's): every shadow came
  /// from it and all of it is back afterwards.
  void CheckWithReserve(std::uint64_t reserve_bytes, CheckpointResult* r) {
    MakeBuffers(16, 1 << 20);
    ShadowPoolOptions po;
    po.bytes_per_device = reserve_bytes;
    ShadowPool pool(env_.backend(), po);
    ASSERT_TRUE(pool.WaitUntilReady(60s));
    CheckpointOptions o;
    o.shadow_pool = &pool;
    CheckImageIsT1(o, r);
    EXPECT_EQ(r->counters.shadows_from_reserve, r->counters.shadows) << "a shadow was allocated, not taken";
    EXPECT_EQ(pool.stats()[0].in_use, 0u) << "shadows were not given back to the reserve";
  }

  testing::EngineTestEnv env_;  // declared first: destroyed after the app and session
  std::string dir_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<session::Session> session_;
  std::vector<uint64_t> bufs_;
  uint64_t bytes_ = 0;
};

TEST_F(CowCheckpointTest, ImageIsTheStateAtT1WhileTheAppWrites) {
  MakeBuffers(16, 1 << 20);
  CheckpointResult r;
  CheckImageIsT1({}, &r);
  EXPECT_GT(r.counters.shadows, 0u) << "no write hit an unsaved buffer: the test raced nothing";
  // The buffers written during the checkpoint are in the manifest's
  // first-use order (what a concurrent restore loads first; `phos inspect`
  // shows it), each once, each one of the app's.
  std::unique_ptr<image::ImageReader> reader;
  ASSERT_TRUE(image::ImageReader::Open(dir_ + "/img", {}, &reader).ok());
  const auto& order = reader->manifest().first_use_order();
  EXPECT_GT(order.size(), 0) << "a write hit an unsaved buffer, so it was used during the checkpoint";
  std::set<uint64_t> seen;
  for (uint64_t a : order) {
    EXPECT_NE(std::find(bufs_.begin(), bufs_.end(), a), bufs_.end()) << a;
    EXPECT_TRUE(seen.insert(a).second) << "listed twice: " << a;
  }
}

TEST_F(CowCheckpointTest, ExhaustedReserveMakesWritersWaitAndLosesNothing) {
  MakeBuffers(16, 1 << 20);
  CheckpointOptions o;
  o.cow_reserve_bytes = 1 << 20;  // one shadow at a time
  CheckpointResult r;
  CheckImageIsT1(o, &r);
  EXPECT_GT(r.counters.reserve_waits + r.counters.writer_waits, 0u);
}

// phosd's reserve (shadow_pool.h), filled before the checkpoint: every
// shadow is a range of it (no allocation during the checkpoint), and all of
// it is back when the checkpoint is done.
TEST_F(CowCheckpointTest, ShadowsComeFromTheReserveFilledBeforehand) {
  CheckpointResult r;
  CheckWithReserve(32 << 20, &r);
  EXPECT_GT(r.counters.shadows, 0u) << "no write hit an unsaved buffer: the test raced nothing";
}

// A reserve smaller than the shadows wanted: writers wait for the copier
// (as with --cow-reserve used up), and the image is still exactly t1.
TEST_F(CowCheckpointTest, AReserveTooSmallMakesWritersWaitAndLosesNothing) {
  CheckpointResult r;
  CheckWithReserve(2 << 20, &r);  // two shadows at a time
}

// No reserve on the device (--cow-reserve 0, or its fill failed): the
// checkpoint allocates its shadows as before the reserve existed.
TEST_F(CowCheckpointTest, WithoutAReadyReserveShadowsAreAllocated) {
  MakeBuffers(16, 1 << 20);
  ShadowPool none(env_.backend(), ShadowPoolOptions{});
  CheckpointOptions o;
  o.shadow_pool = &none;
  CheckpointResult r;
  CheckImageIsT1(o, &r);
  EXPECT_GT(r.counters.shadows, 0u);
  EXPECT_EQ(r.counters.shadows_from_reserve, 0u);
}

// Buffers of several chunks: a write to a buffer the copier is in the
// middle of saving waits for at most the chunk being read, shadows the
// buffer, and the copier reads the remaining chunks from the shadow.
TEST_F(CowCheckpointTest, WritesToABufferBeingSavedShadowTheRest) {
  MakeBuffers(4, 16 << 20);
  CheckpointResult r;
  CheckImageIsT1({}, &r);
  EXPECT_GT(r.counters.shadows, 0u);
}

// The app writes the last buffer while the copier is inside it: the write
// waits for at most the chunk being read, the buffer is shadowed mid-save,
// and the image still holds the t1 content of every byte. The copier is
// held at the write of the last buffer's second chunk (an I/O gate; the
// first version polled the progress and lost the race on a loaded machine).
TEST_F(CowCheckpointTest, WriteInTheMiddleOfSavingABuffer) {
  MakeBuffers(3, 16 << 20);
  CheckpointOptions o;
  o.mode = Mode::kCow;
  o.dir = dir_ + "/img";
  auto gate = std::make_shared<Gate>();
  // Buffer 2's extent starts at or after 32 MiB of image data: the first
  // write at 36 MiB or more is inside it, with at least one chunk saved.
  o.image.backend_factory = GatedIoFactory(gate, 2u * (16u << 20) + image::kDefaultChunkBytes);
  Progress progress;
  CheckpointResult r;
  Status st;
  std::thread cp([&] { st = Checkpoint(*session_, o, &progress, &r); });
  const bool reached = gate->WaitReached(60s);
  if (reached) {
    // The copier is between two chunks of buffer 2 (not reading B itself):
    // the write shadows the rest at once.
    EXPECT_EQ(app_->Memset(bufs_[2], 0x77, 1, bytes_), kOk);
  }
  gate->Open();
  cp.join();
  ASSERT_TRUE(reached) << "the checkpoint never wrote past 36 MiB: " << st.ToString();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(r.counters.shadows_while_saving, 1u) << "the write did not land while the buffer was being saved";
  std::unique_ptr<image::ImageReader> reader;
  ASSERT_TRUE(image::ImageReader::Open(o.dir, {}, &reader).ok());
  std::vector<uint8_t> got(bytes_);
  ASSERT_TRUE(reader->ReadBuffer(2, got.data()).ok());
  for (uint64_t b = 0; b < bytes_; b += 4093) ASSERT_EQ(got[b], 1) << "byte " << b;
  std::vector<uint8_t> now(4096);
  ASSERT_EQ(app_->D2H(now.data(), bufs_[2] + bytes_ - 4096, 4096), kOk);
  EXPECT_EQ(now[0], 0x77);
}

// A write into part of a large buffer shadows only the image chunks (4 MiB
// pieces) it overlaps, not the whole buffer: an 8 MiB memset into a 64 MiB
// buffer costs one 8 MiB shadow. The copier is held at its first chunk
// write (piece 0 read, nothing else), so every other piece is unsaved.
TEST_F(CowCheckpointTest, APartialWriteShadowsOnlyThePiecesItOverlaps) {
  MakeBuffers(1, 64 << 20);
  CheckpointOptions o;
  o.mode = Mode::kCow;
  o.dir = dir_ + "/img";
  auto gate = std::make_shared<Gate>();
  o.image.backend_factory = GatedIoFactory(gate, 0);
  Progress progress;
  CheckpointResult r;
  Status st;
  std::thread cp([&] { st = Checkpoint(*session_, o, &progress, &r); });
  const bool reached = gate->WaitReached(60s);
  const uint64_t chunk = image::kDefaultChunkBytes;
  if (reached) {
    EXPECT_EQ(app_->Memset(bufs_[0] + 5 * chunk, 0x66, 1, 2 * chunk), kOk);
  }
  gate->Open();
  cp.join();
  ASSERT_TRUE(reached) << "the checkpoint never wrote a chunk: " << st.ToString();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(r.counters.shadows, 2u) << "pieces shadowed for a write of two";
  EXPECT_EQ(r.counters.shadow_bytes, 2 * chunk);
  std::unique_ptr<image::ImageReader> reader;
  ASSERT_TRUE(image::ImageReader::Open(o.dir, {}, &reader).ok());
  std::vector<uint8_t> got(bytes_);
  ASSERT_TRUE(reader->ReadBuffer(0, got.data()).ok());
  for (uint64_t b = 0; b < bytes_; b += 4093) ASSERT_EQ(got[b], 1) << "byte " << b;
  // The first-use order names the buffer (not a piece of it), once.
  ASSERT_EQ(reader->manifest().first_use_order().size(), 1);
  EXPECT_EQ(reader->manifest().first_use_order(0), bufs_[0]);
  std::vector<uint8_t> now(4096);
  ASSERT_EQ(app_->D2H(now.data(), bufs_[0] + 5 * chunk, 4096), kOk);
  EXPECT_EQ(now[0], 0x66);
}

// Memory the app maps itself (cuMemAddressReserve + cuMemMap, as PyTorch's
// expandable segments): two mappings back to back in one reserved range,
// and a kernel whose output pointer lies in the first and whose writes run
// into the second. The launch's access set must hold both mappings (phosd:
// AddMappedRangeAccess): the copier, held before it saves them, must find
// both shadowed, the twin must see no miss, and the image must hold both
// as they were at t1. (Left out, the second mapping is neither shadowed nor
// allowed: the twin misses and the checkpoint falls back to stop-the-world.)
TEST_F(CowCheckpointTest, KernelWritingAcrossAppMappingsIsInItsAccessSet) {
  const uint32_t n = 1024;
  uint64_t da = 0, db = 0;
  ASSERT_EQ(app_->Malloc(n * 4, &da), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &db), kOk);
  std::vector<float> a(n, 1.5f), b(n, 2.0f);
  ASSERT_EQ(app_->H2D(da, a.data(), n * 4), kOk);
  ASSERT_EQ(app_->H2D(db, b.data(), n * 4), kOk);
  MakeBuffers(8, 1 << 20);  // the copier is busy with these first
  const uint64_t g = wire::kVmmGranularity;
  uint64_t base = 0;
  ASSERT_EQ(app_->AddressReserve(4 * g, 0, &base), kOk) << app_->message();
  ASSERT_EQ(app_->Map(base, g), kOk) << app_->message();
  ASSERT_EQ(app_->Map(base + g, g), kOk) << app_->message();
  ASSERT_GT(base, bufs_.back());
  ASSERT_EQ(app_->Memset(base, 0, 1, 2 * g), kOk) << app_->message();  // one memset, two mappings
  ASSERT_EQ(app_->ModuleLoad(1, ReadAppFixture("vector_add.fatbin")), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 10, "_Z10vector_addPKfS0_Pfi"), kOk) << app_->message();

  CheckpointOptions o;
  o.mode = Mode::kCow;
  o.dir = dir_ + "/img";
  auto gate = std::make_shared<Gate>();
  // Extents in address order: a, b, the 8 buffers, then the two mappings.
  o.image.backend_factory = GatedIoFactory(gate, 2u * n * 4 + 8u * (1u << 20));
  Progress progress;
  CheckpointResult r;
  Status st;
  std::thread cp([&] { st = Checkpoint(*session_, o, &progress, &r); });
  const bool reached = gate->WaitReached(60s);
  const uint64_t c = base + g - n * 2;  // half of c in each mapping
  if (reached) {
    struct {
      uint64_t a, b, c;
      int32_t n;
    } va{da, db, c, static_cast<int32_t>(n)};
    EXPECT_EQ(app_->Launch(10, Grid(4, 256), std::as_bytes(std::span(&va, 1))), kOk);
    EXPECT_EQ(app_->DeviceSync(), kOk) << app_->message();
  }
  gate->Open();
  cp.join();
  ASSERT_TRUE(reached) << "the checkpoint never reached the mappings: " << st.ToString();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(r.mode, Mode::kCow);
  EXPECT_EQ(r.counters.cow_fallbacks, 0u);
  EXPECT_EQ(r.counters.twin_misses, 0u);
  EXPECT_EQ(r.counters.twin_launches, 1u);
  // The image: both mappings as at t1 (zeros).
  std::unique_ptr<image::ImageReader> reader;
  ASSERT_TRUE(image::ImageReader::Open(o.dir, {}, &reader).ok());
  int seen = 0;
  for (size_t k = 0; k < reader->buffer_count(); ++k) {
    const uint64_t at = reader->manifest().buffers(static_cast<int>(k)).device_address();
    if (at != base && at != base + g) continue;
    ++seen;
    std::vector<uint8_t> got(g);
    ASSERT_TRUE(reader->ReadBuffer(k, got.data()).ok());
    EXPECT_EQ(std::count(got.begin(), got.end(), 0), static_cast<long>(g)) << "mapping at 0x" << std::hex << at;
  }
  EXPECT_EQ(seen, 2);
  // The kernel ran (as its twin) across the boundary.
  std::vector<float> got(n);
  ASSERT_EQ(app_->D2H(got.data(), c, n * 4), kOk) << app_->message();  // one copy, two mappings
  for (uint32_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(got[i], 3.5f) << i;
}

TEST_F(CowCheckpointTest, MisSpeculatedKernelFallsBackToStopTheWorld) {
  // Big buffers first (the copier is busy with them), the scatter targets last.
  MakeBuffers(8, 1 << 20);
  const int n = 256;
  uint64_t table = 0, src = 0, dst0 = 0, dst1 = 0;
  ASSERT_EQ(app_->Malloc(16, &table), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &src), kOk);
  ASSERT_EQ(app_->Malloc(n * 2, &dst0), kOk);
  ASSERT_EQ(app_->Malloc(n * 2, &dst1), kOk);
  ASSERT_GT(dst0, bufs_.back());
  uint64_t ptrs[2] = {dst0, dst1};
  ASSERT_EQ(app_->H2D(table, ptrs, sizeof ptrs), kOk);
  std::vector<int> s(n);
  for (int i = 0; i < n; ++i) s[i] = i;
  ASSERT_EQ(app_->H2D(src, s.data(), n * 4), kOk);
  ASSERT_EQ(app_->Memset(dst0, 0, 1, n * 2), kOk);
  ASSERT_EQ(app_->Memset(dst1, 0, 1, n * 2), kOk);
  ASSERT_EQ(app_->ModuleLoad(1, ReadAppFixture("pointer_table.fatbin")), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 10, "_Z7scatterPKPiiPKii"), kOk) << app_->message();

  CheckpointOptions o;
  o.mode = Mode::kCow;
  o.dir = dir_ + "/img";
  Progress progress;
  CheckpointResult r;
  Status st;
  std::thread cp([&] { st = Checkpoint(*session_, o, &progress, &r); });
  while (progress.Snapshot().phase != "copy") std::this_thread::sleep_for(100us);
  struct {
    uint64_t table;
    int32_t tables;
    int32_t pad;
    uint64_t src;
    int32_t n;
  } args{table, 2, 0, src, n};
  ASSERT_EQ(app_->Launch(10, Grid(1, n), std::as_bytes(std::span(&args, 1))), kOk);
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  cp.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(r.counters.twin_launches, 1u);
  EXPECT_GT(r.counters.twin_misses, 0u);
  EXPECT_EQ(r.counters.cow_fallbacks, 1u);
  EXPECT_EQ(r.mode, Mode::kStop);
  // The stop-the-world retry saw the kernel's result (it ran before).
  std::unique_ptr<image::ImageReader> reader;
  ASSERT_TRUE(image::ImageReader::Open(o.dir, {}, &reader).ok());
  bool found = false;
  for (size_t k = 0; k < reader->buffer_count(); ++k) {
    if (reader->manifest().buffers(static_cast<int>(k)).device_address() != dst0) continue;
    std::vector<int> got(n / 2);
    ASSERT_TRUE(reader->ReadBuffer(k, got.data()).ok());
    for (int i = 0; i < n / 2; ++i) ASSERT_EQ(got[i], (2 * i) * 3 + 1) << i;
    found = true;
  }
  EXPECT_TRUE(found);
}

TEST_F(CowCheckpointTest, CorrectlySpeculatedKernelRunsAsItsTwin) {
  MakeBuffers(8, 1 << 20);
  const uint32_t n = 256;
  uint64_t da = 0, db = 0, dc = 0;
  ASSERT_EQ(app_->Malloc(n * 4, &da), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &db), kOk);
  ASSERT_EQ(app_->Malloc(n * 4, &dc), kOk);
  std::vector<float> a(n, 1.5f), b(n, 2.0f);
  ASSERT_EQ(app_->H2D(da, a.data(), n * 4), kOk);
  ASSERT_EQ(app_->H2D(db, b.data(), n * 4), kOk);
  ASSERT_EQ(app_->ModuleLoad(1, ReadAppFixture("vector_add.fatbin")), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 10, "_Z10vector_addPKfS0_Pfi"), kOk) << app_->message();
  CheckpointOptions o;
  o.mode = Mode::kCow;
  o.dir = dir_ + "/img";
  Progress progress;
  CheckpointResult r;
  Status st;
  std::thread cp([&] { st = Checkpoint(*session_, o, &progress, &r); });
  while (progress.Snapshot().phase != "copy") std::this_thread::sleep_for(100us);
  struct {
    uint64_t a, b, c;
    int32_t n;
  } va{da, db, dc, static_cast<int32_t>(n)};
  ASSERT_EQ(app_->Launch(10, Grid(1, n), std::as_bytes(std::span(&va, 1))), kOk);
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  cp.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(r.mode, Mode::kCow);
  EXPECT_EQ(r.counters.cow_fallbacks, 0u);
  EXPECT_EQ(r.counters.twin_misses, 0u);
  // The kernel ran (as its twin) and computed the right thing.
  std::vector<float> c(n);
  ASSERT_EQ(app_->D2H(c.data(), dc, n * 4), kOk);
  for (uint32_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(c[i], 3.5f) << i;
  EXPECT_EQ(r.counters.twin_launches, 1u) << "checkpoint finished before the launch? (timing)";
}


// A process using two GPUs (soft_operation.h "SEVERAL GPUS"): copy-on-write
// takes it (no stop-the-world fallback). The copier is held at its first
// chunk write while the app writes on both GPUs — each GPU's buffers from
// its own context, each from the other GPU's context (peer copies), a
// kernel on GPU 1 (run as a twin in GPU 1's context) and a module
// variable's instance on each GPU — and the image holds every byte as it
// was at t1, the app every write.
class TwoGpuCowCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_.Start("phos-cow2-test", 0.5, /*gpus=*/2).ok());
    ASSERT_TRUE(env_.Connect(&app_, &session_).ok());
  }
  void TearDown() override {
    app_.reset();
    session_.reset();
  }
  uint64_t Buffer(uint8_t device, uint8_t byte) {
    app_->UseDevice(device);
    uint64_t p = 0;
    EXPECT_EQ(app_->Malloc(kBytes, &p), kOk) << app_->message();
    EXPECT_EQ(app_->Memset(p, byte, 1, kBytes), kOk) << app_->message();
    return p;
  }
  uint8_t ByteOf(uint8_t device, uint64_t p) {
    app_->UseDevice(device);
    uint8_t b = 0;
    EXPECT_EQ(app_->D2H(&b, p + kBytes - 1, 1), kOk) << app_->message();
    return b;
  }
  uint32_t WordOf(uint8_t device, uint64_t p) {
    app_->UseDevice(device);
    uint32_t w = 0;
    EXPECT_EQ(app_->D2H(&w, p, 4), kOk) << app_->message();
    return w;
  }

  static constexpr uint64_t kBytes = 1 << 20;
  testing::EngineTestEnv env_;
  std::unique_ptr<FakeApp> app_;
  std::shared_ptr<session::Session> session_;
};

TEST_F(TwoGpuCowCheckpointTest, CopyOnWriteTakesBothGpusWhileTheAppWritesOnEach) {
  const uint64_t a0 = Buffer(0, 1), b0 = Buffer(0, 1), src0 = Buffer(0, 0xe0);
  const uint64_t a1 = Buffer(1, 1), b1 = Buffer(1, 1), src1 = Buffer(1, 0xe1);
  const auto ptx = std::as_bytes(std::span<const char>(backend::testing::kSaxpyPtx, sizeof backend::testing::kSaxpyPtx));
  app_->UseDevice(1);
  ASSERT_EQ(app_->ModuleLoad(1, ptx), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(1, 11, "bump"), kOk) << app_->message();
  // A module without variables (a twin of a module with one would use its
  // own copy of it): its kernel runs as a twin.
  ASSERT_EQ(app_->ModuleLoad(2, ReadAppFixture("vector_add.fatbin")), kOk) << app_->message();
  ASSERT_EQ(app_->GetFunction(2, 12, "_Z10vector_addPKfS0_Pfi"), kOk) << app_->message();
  uint64_t counter1 = 0, counter0 = 0, n = 0;
  ASSERT_EQ(app_->GetGlobal(1, "phos_counter", &counter1, &n), kOk) << app_->message();
  ASSERT_EQ(app_->Launch(11, Grid(1, 1), {}), kOk);  // GPU 1's instance: 7 -> 8
  ASSERT_EQ(app_->DeviceSync(), kOk) << app_->message();
  app_->UseDevice(0);
  ASSERT_EQ(app_->GetGlobal(1, "phos_counter", &counter0, &n), kOk) << app_->message();
  ASSERT_NE(counter0, counter1);

  ShadowPoolOptions po;
  po.bytes_per_device = 16 << 20;
  ShadowPool pool(env_.backend(), po);
  ASSERT_TRUE(pool.WaitUntilReady(60s));
  CheckpointOptions o;
  o.mode = Mode::kCow;
  o.dir = env_.dir() + "/img";
  o.shadow_pool = &pool;
  auto gate = std::make_shared<Gate>();
  o.image.backend_factory = GatedIoFactory(gate, 0);  // the copier stops at its first chunk
  Progress progress;
  CheckpointResult r;
  Status st;
  std::thread cp([&] { st = Checkpoint(*session_, o, &progress, &r); });
  const bool reached = gate->WaitReached(60s);
  if (reached) {
    app_->UseDevice(1);
    EXPECT_EQ(app_->Memset(a1, 0x21, 1, kBytes), kOk) << app_->message();  // GPU 1, its own context
    const uint8_t word[16] = {0x21};
    EXPECT_EQ(app_->H2D(a1 + 4096, word, sizeof word), kOk) << app_->message();  // a host copy on GPU 1
    EXPECT_EQ(app_->D2D(b0, src1, kBytes), kOk) << app_->message();        // GPU 0's buffer from GPU 1
    struct {
      uint64_t a, b, c;
      int32_t n;
    } va{src1, src1, a1, 16};
    EXPECT_EQ(app_->Launch(12, Grid(1, 16), std::as_bytes(std::span(&va, 1))), kOk);  // a twin on GPU 1
    EXPECT_EQ(app_->Launch(11, Grid(1, 1), {}), kOk);                                 // 8 -> 9 on GPU 1
    EXPECT_EQ(app_->DeviceSync(), kOk) << app_->message();
    app_->UseDevice(0);
    EXPECT_EQ(app_->Memset(a0, 0x20, 1, kBytes), kOk) << app_->message();  // the home GPU
    EXPECT_EQ(app_->D2D(b1, src0, kBytes), kOk) << app_->message();        // GPU 1's buffer from GPU 0
    EXPECT_EQ(app_->Launch(11, Grid(1, 1), {}), kOk);                      // 7 -> 8 on GPU 0
    EXPECT_EQ(app_->DeviceSync(), kOk) << app_->message();
  }
  gate->Open();
  cp.join();
  ASSERT_TRUE(reached) << "the checkpoint never wrote its first chunk: " << st.ToString();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(r.mode, Mode::kCow);
  EXPECT_EQ(r.counters.cow_fallbacks, 0u);
  EXPECT_EQ(r.counters.twin_misses, 0u);
  EXPECT_GE(r.counters.twin_launches, 1u) << "the kernel on GPU 1 did not run as its twin";
  EXPECT_GE(r.counters.shadows, 4u);
  EXPECT_EQ(r.counters.shadows_from_reserve, r.counters.shadows);
  // GPU 1's copier lane yielded once to the app's host copy there (GPU 0
  // saw none: its gate never yields).
  EXPECT_EQ(r.counters.copier_yields, 1u);
  for (const auto& d : pool.stats()) EXPECT_EQ(d.in_use, 0u) << "a shadow was not given back";

  // The image: every buffer and both variable instances as at t1.
  std::unique_ptr<image::ImageReader> reader;
  ASSERT_TRUE(image::ImageReader::Open(o.dir, {}, &reader).ok());
  std::map<uint64_t, size_t> extent;
  for (int i = 0; i < reader->manifest().buffers_size(); ++i) extent[reader->manifest().buffers(i).device_address()] = i;
  auto image_bytes = [&](uint64_t p, uint64_t bytes) {
    std::vector<uint8_t> got(bytes);
    auto it = extent.find(p);
    EXPECT_NE(it, extent.end()) << "no extent at " << p;
    if (it != extent.end()) EXPECT_TRUE(reader->ReadBuffer(it->second, got.data()).ok());
    return got;
  };
  for (uint64_t p : {a0, b0, a1, b1}) {
    const std::vector<uint8_t> got = image_bytes(p, kBytes);
    for (uint64_t b = 0; b < kBytes; b += 4093) ASSERT_EQ(got[b], 1) << "buffer " << p << " byte " << b;
    ASSERT_EQ(got[kBytes - 1], 1) << "buffer " << p;
  }
  EXPECT_EQ(image_bytes(src0, kBytes)[0], 0xe0);
  EXPECT_EQ(image_bytes(src1, kBytes)[0], 0xe1);
  uint32_t c = 0;
  std::memcpy(&c, image_bytes(counter1, 4).data(), 4);
  EXPECT_EQ(c, 8u) << "GPU 1's instance of the module variable";
  std::memcpy(&c, image_bytes(counter0, 4).data(), 4);
  EXPECT_EQ(c, 7u) << "GPU 0's instance of the module variable";

  // The app: every write it made during the checkpoint.
  EXPECT_EQ(ByteOf(1, a1), 0x21);
  EXPECT_EQ(ByteOf(0, b0), 0xe1);
  EXPECT_EQ(ByteOf(0, a0), 0x20);
  EXPECT_EQ(ByteOf(1, b1), 0xe0);
  EXPECT_EQ(WordOf(1, counter1), 9u);
  EXPECT_EQ(WordOf(0, counter0), 8u);
}

}  // namespace
}  // namespace phos::engine
