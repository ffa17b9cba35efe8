// Write -> commit -> read back, with both IoBackends, odd buffer sizes and
// several writer threads writing chunks in shuffled order.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "image/host_tier.h"
#include "image/image_layout.h"
#include "image/image_reader.h"
#include "image/image_writer.h"
#include "image/recovery.h"
#include "image_test_util.h"

namespace phos::image {
namespace {

using testing::MakeBuffers;
using testing::ScratchDir;
using testing::TestBuffer;

const std::vector<std::size_t> kOddSizes = {1, 4095, 4096, 4097, 9u << 20, 0};

class RoundTripTest : public ::testing::TestWithParam<bool /*force_pwrite*/> {
 protected:
  ImageWriterOptions WriterOptions(std::uint64_t chunk) const {
    ImageWriterOptions o;
    o.chunk_bytes = chunk;
    o.io.queue_depth = 4;
    o.io.force_pwrite = GetParam();
    return o;
  }
  ImageReaderOptions ReaderOptions() const {
    ImageReaderOptions o;
    o.io.force_pwrite = GetParam();
    return o;
  }

  void ExpectImage(const std::string& dir, const std::vector<TestBuffer>& buffers) {
    std::unique_ptr<ImageReader> r;
    ASSERT_TRUE(ImageReader::Open(dir, ReaderOptions(), &r).ok());
    if (GetParam()) {
      EXPECT_EQ(r->io_backend_name(), "pwrite");
    }
    ASSERT_EQ(r->buffer_count(), buffers.size());
    const v1::Manifest& m = r->manifest();
    EXPECT_EQ(m.format_version(), kImageFormatVersion);
    EXPECT_EQ(m.session_id(), 42u);
    EXPECT_EQ(m.pid(), 1234);
    ASSERT_EQ(m.cmdline_size(), 2);
    EXPECT_EQ(m.cmdline(1), "--epochs=3");
    EXPECT_GT(m.created_unix_ns(), 0);
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const v1::BufferExtent& e = m.buffers(static_cast<int>(i));
      EXPECT_EQ(e.device_address(), buffers[i].addr);
      EXPECT_EQ(e.bytes(), buffers[i].data.size());
      EXPECT_EQ(e.extent_offset() % kAlign, 0u);
      std::vector<std::uint8_t> got(buffers[i].data.size() + 1, 0xcd);
      Status s = r->ReadBuffer(i, got.data());
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(std::equal(buffers[i].data.begin(), buffers[i].data.end(), got.begin()))
          << "buffer " << i;
      EXPECT_EQ(got.back(), 0xcd) << "ReadBuffer wrote past the buffer " << i;
    }
    EXPECT_TRUE(r->VerifyAll().ok());
    struct stat st {};
    ASSERT_EQ(::stat((dir + "/gpu.img").c_str(), &st), 0);
    EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), m.gpu_img_bytes());
  }
};

TEST_P(RoundTripTest, OddSizesOneThread) {
  ScratchDir tmp;
  ASSERT_TRUE(tmp.ok());
  auto buffers = MakeBuffers(kOddSizes);
  const std::string dir = tmp / "ckpt1";
  Status s = testing::WriteImage(dir, buffers, WriterOptions(1 << 20));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir + ".tmp"));
  EXPECT_TRUE(IsImageDirectory(dir));
  ExpectImage(dir, buffers);
}

TEST_P(RoundTripTest, DefaultChunkSize) {
  ScratchDir tmp;
  auto buffers = MakeBuffers({9u << 20, 4097}, 7);
  const std::string dir = tmp / "ckpt";
  ASSERT_TRUE(testing::WriteImage(dir, buffers, WriterOptions(kDefaultChunkBytes)).ok());
  ExpectImage(dir, buffers);
}

// Four threads write the chunks of all buffers in a shuffled order.
TEST_P(RoundTripTest, SeveralWriterThreadsAnyOrder) {
  ScratchDir tmp;
  auto buffers = MakeBuffers({1, 4095, 4096, 4097, 9u << 20, 3u << 20, 12345}, 3);
  const std::uint64_t chunk = 64 << 10;
  const std::string dir = tmp / "ckpt";
  std::unique_ptr<ImageWriter> w;
  ASSERT_TRUE(ImageWriter::Open(dir, testing::TestMetadata(), WriterOptions(chunk), &w).ok());
  struct Job {
    std::size_t buffer;
    std::uint64_t offset;
  };
  std::vector<Job> jobs;
  for (const TestBuffer& b : buffers) {
    std::size_t index = 0;
    ASSERT_TRUE(w->AddBuffer(b.addr, b.data.size(), &index).ok());
    for (std::uint64_t off = 0; off < b.data.size(); off += chunk) jobs.push_back({index, off});
  }
  std::shuffle(jobs.begin(), jobs.end(), std::mt19937(99));
  std::atomic<std::size_t> next{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (std::size_t j; (j = next.fetch_add(1)) < jobs.size();) {
        const TestBuffer& b = buffers[jobs[j].buffer];
        const std::uint64_t off = jobs[j].offset;
        const std::size_t len = std::min<std::uint64_t>(chunk, b.data.size() - off);
        if (!w->Write(jobs[j].buffer, off, b.data.data() + off, len).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  Status s = w->Commit();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectImage(dir, buffers);
}

// Buffers added from several threads while others write.
TEST_P(RoundTripTest, ConcurrentAddAndWrite) {
  ScratchDir tmp;
  const std::string dir = tmp / "ckpt";
  std::unique_ptr<ImageWriter> w;
  ASSERT_TRUE(ImageWriter::Open(dir, testing::TestMetadata(), WriterOptions(8192), &w).ok());
  std::vector<std::vector<TestBuffer>> per_thread(3);
  std::vector<std::vector<std::size_t>> indices(3);
  for (int t = 0; t < 3; ++t) {
    per_thread[t] = MakeBuffers({100, 8192, 50000}, 10 * t + 1);
    for (auto& b : per_thread[t]) b.addr += static_cast<std::uint64_t>(t) << 32;
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (const TestBuffer& b : per_thread[t]) {
        std::size_t index = 0;
        if (!w->AddBuffer(b.addr, b.data.size(), &index).ok()) ++failures;
        if (!w->WriteBuffer(index, b.data.data()).ok()) ++failures;
        indices[t].push_back(index);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  ASSERT_TRUE(w->Commit().ok());
  std::unique_ptr<ImageReader> r;
  ASSERT_TRUE(ImageReader::Open(dir, ReaderOptions(), &r).ok());
  for (int t = 0; t < 3; ++t) {
    for (std::size_t k = 0; k < per_thread[t].size(); ++k) {
      const TestBuffer& b = per_thread[t][k];
      EXPECT_EQ(r->manifest().buffers(static_cast<int>(indices[t][k])).device_address(), b.addr);
      std::vector<std::uint8_t> got(b.data.size());
      ASSERT_TRUE(r->ReadBuffer(indices[t][k], got.data()).ok());
      EXPECT_EQ(got, b.data);
    }
  }
}

TEST_P(RoundTripTest, ConcurrentReaders) {
  ScratchDir tmp;
  auto buffers = MakeBuffers({300000, 4096, 77777, 1 << 20}, 5);
  const std::string dir = tmp / "ckpt";
  ASSERT_TRUE(testing::WriteImage(dir, buffers, WriterOptions(16384)).ok());
  std::unique_ptr<ImageReader> r;
  ASSERT_TRUE(ImageReader::Open(dir, ReaderOptions(), &r).ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    threads.emplace_back([&, i] {
      std::vector<std::uint8_t> got(buffers[i].data.size());
      if (!r->ReadBuffer(i, got.data()).ok() || got != buffers[i].data) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(RoundTripTest, WriteContractViolationsAreRejected) {
  ScratchDir tmp;
  const std::string dir = tmp / "ckpt";
  std::unique_ptr<ImageWriter> w;
  ASSERT_TRUE(ImageWriter::Open(dir, testing::TestMetadata(), WriterOptions(8192), &w).ok());
  std::size_t i = 0;
  ASSERT_TRUE(w->AddBuffer(0x1000, 10000, &i).ok());
  std::vector<std::uint8_t> data(10000, 1);
  EXPECT_EQ(w->Write(i, 100, data.data(), 8192).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(w->Write(i, 0, data.data(), 100).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(w->Write(i + 1, 0, data.data(), 8192).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(w->Write(i, 0, data.data(), 8192).ok());
  EXPECT_EQ(w->Write(i, 0, data.data(), 8192).code(), Status::Code::kInvalidArgument);
  // Chunk 1 is missing: no commit, and nothing becomes visible.
  Status s = w->Commit();
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("chunk 1"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(dir));
  w->Abort();
  EXPECT_FALSE(std::filesystem::exists(dir + ".tmp"));
  // The name is free again.
  EXPECT_TRUE(testing::WriteImage(dir, MakeBuffers({5}), WriterOptions(8192)).ok());
  // ... and now taken.
  EXPECT_EQ(testing::WriteImage(dir, MakeBuffers({5}), WriterOptions(8192)).code(),
            Status::Code::kAlreadyExists);
}

TEST_P(RoundTripTest, DestroyedWriterLeavesNothing) {
  ScratchDir tmp;
  const std::string dir = tmp / "ckpt";
  {
    std::unique_ptr<ImageWriter> w;
    ASSERT_TRUE(ImageWriter::Open(dir, testing::TestMetadata(), WriterOptions(8192), &w).ok());
    std::size_t i = 0;
    ASSERT_TRUE(w->AddBuffer(0x1000, 8192, &i).ok());
    std::vector<std::uint8_t> data(8192, 1);
    ASSERT_TRUE(w->Write(i, 0, data.data(), data.size()).ok());
    EXPECT_TRUE(std::filesystem::exists(dir + ".tmp"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_FALSE(std::filesystem::exists(dir + ".tmp"));
}

// /dev/shm is tmpfs: O_DIRECT may be refused there (then pwrite is used);
// either way the image must round-trip.
TEST_P(RoundTripTest, TmpfsDirectory) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  ScratchDir tmp("/dev/shm");
  ASSERT_TRUE(tmp.ok());
  auto buffers = MakeBuffers({4097, 100000}, 11);
  const std::string dir = tmp / "ckpt";
  Status s = testing::WriteImage(dir, buffers, WriterOptions(8192));
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectImage(dir, buffers);
}

TEST_P(RoundTripTest, WrittenToBothTiers) {
  ScratchDir tmp;
  HostTier tier(64 << 20);
  auto buffers = MakeBuffers({4097, 1 << 20}, 21);
  ImageWriterOptions o = WriterOptions(65536);
  o.host_tier = &tier;
  const std::string dir = tmp / "both";
  ASSERT_TRUE(testing::WriteImage(dir, buffers, o).ok());
  ExpectImage(dir, buffers);
  auto host = tier.Get("both");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->manifest.image_id(), [&] {
    v1::Manifest m;
    EXPECT_TRUE(ReadManifest(dir, &m).ok());
    return m.image_id();
  }());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    std::vector<std::uint8_t> got(buffers[i].data.size());
    ASSERT_TRUE(host->ReadBuffer(i, got.data()).ok());
    EXPECT_EQ(got, buffers[i].data);
  }
}

// One small pool (3 buffers, pinned once through PinHooks) shared by two
// images written at once by two threads each, and a reader.
TEST_P(RoundTripTest, SharedPinnedPoolAcrossImages) {
  ScratchDir tmp;
  std::atomic<int> pinned{0}, unpinned{0};
  PinHooks hooks;
  hooks.pin = [&](void*, std::size_t bytes) {
    ++pinned;
    return bytes == 16384 ? Status::Ok() : Status::Internal("wrong size");
  };
  hooks.unpin = [&](void*, std::size_t) { ++unpinned; };
  std::unique_ptr<BufferPool> owned;
  ASSERT_TRUE(BufferPool::Create(3, 16384, hooks, &owned).ok());
  std::shared_ptr<BufferPool> pool = std::move(owned);
  EXPECT_EQ(pinned.load(), 3);

  ImageWriterOptions o = WriterOptions(16384);
  o.io.pool = pool;
  const auto a = MakeBuffers({200000, 4097}, 31);
  const auto b = MakeBuffers({150000, 1}, 32);
  std::unique_ptr<ImageWriter> wa, wb;
  ASSERT_TRUE(ImageWriter::Open(tmp / "a", testing::TestMetadata(), o, &wa).ok());
  ASSERT_TRUE(ImageWriter::Open(tmp / "b", testing::TestMetadata(), o, &wb).ok());
  std::atomic<int> failures{0};
  auto write_all = [&](ImageWriter* w, const std::vector<TestBuffer>& bufs, int part) {
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      const TestBuffer& tb = bufs[i];
      for (std::uint64_t off = 16384 * part; off < tb.data.size(); off += 2 * 16384) {
        const std::size_t len = std::min<std::uint64_t>(16384, tb.data.size() - off);
        if (!w->Write(i, off, tb.data.data() + off, len).ok()) ++failures;
      }
    }
  };
  for (const auto& [w, bufs] : {std::pair{wa.get(), &a}, std::pair{wb.get(), &b}}) {
    for (const TestBuffer& tb : *bufs) {
      std::size_t index = 0;
      ASSERT_TRUE(w->AddBuffer(tb.addr, tb.data.size(), &index).ok());
    }
  }
  std::vector<std::thread> threads;
  for (int part = 0; part < 2; ++part) {
    threads.emplace_back(write_all, wa.get(), std::cref(a), part);
    threads.emplace_back(write_all, wb.get(), std::cref(b), part);
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  ASSERT_TRUE(wa->Commit().ok());
  ASSERT_TRUE(wb->Commit().ok());
  EXPECT_EQ(pool->free_count(), 3u);  // every buffer came back

  ImageReaderOptions ro = ReaderOptions();
  ro.io.pool = pool;
  std::unique_ptr<ImageReader> r;
  ASSERT_TRUE(ImageReader::Open(tmp / "a", ro, &r).ok());
  std::vector<std::uint8_t> got(a[0].data.size());
  ASSERT_TRUE(r->ReadBuffer(0, got.data()).ok());
  EXPECT_EQ(got, a[0].data);
  ExpectImage(tmp / "b", b);
  r.reset();
  wa.reset();
  wb.reset();
  o.io.pool.reset();
  ro.io.pool.reset();
  EXPECT_EQ(unpinned.load(), 0);
  pool.reset();
  EXPECT_EQ(unpinned.load(), 3);
}

TEST(SharedPool, TooSmallBuffersRejected) {
  ScratchDir tmp;
  std::unique_ptr<BufferPool> owned;
  ASSERT_TRUE(BufferPool::Create(2, 4096, {}, &owned).ok());
  ImageWriterOptions o;
  o.chunk_bytes = 8192;
  o.io.pool = std::move(owned);
  std::unique_ptr<ImageWriter> w;
  Status s = ImageWriter::Open(tmp / "x", testing::TestMetadata(), o, &w);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(tmp / "x.tmp"));
}

INSTANTIATE_TEST_SUITE_P(Backends, RoundTripTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Pwrite") : std::string("Uring");
                         });

// Host tier from several threads: puts, gets and reads race with eviction.
TEST(HostTierThreads, PutGetEvictRace) {
  HostTier tier(6 << 20);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 50; ++k) {
        auto img = std::make_shared<HostImage>();
        v1::BufferExtent* e = img->manifest.add_buffers();
        img->buffers.push_back(testing::RandomBytes(1 << 20, t * 100 + k));
        e->set_bytes(1 << 20);
        e->set_chunk_bytes(1 << 20);
        e->add_chunk_xxh3(Xxh3(img->buffers[0].data(), img->buffers[0].size()));
        const std::string name = "t" + std::to_string(t) + "-" + std::to_string(k % 5);
        if (!tier.Put(name, img).ok()) ++failures;
        if (auto got = tier.Get("t" + std::to_string((t + 1) % 4) + "-0")) {
          std::vector<std::uint8_t> out(1 << 20);
          if (!got->ReadBuffer(0, out.data()).ok()) ++failures;
        }
        if (tier.used_bytes() > tier.budget_bytes()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(tier.used_bytes(), tier.budget_bytes());
}

}  // namespace
}  // namespace phos::image
