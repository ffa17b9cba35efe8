// Damaged images: every kind of damage is refused with a message that says
// where (buffer address, chunk, file offset) — never silently read back.
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/hex.h"
#include "image/image_layout.h"
#include "image/image_reader.h"
#include "image/recovery.h"
#include "image_test_util.h"

namespace phos::image {
namespace {

using testing::MakeBuffers;
using testing::ScratchDir;

bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

class CorruptionTest : public ::testing::TestWithParam<bool /*force_pwrite*/> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    buffers_ = MakeBuffers({4097, 100000, 1, 8192 * 3});
    dir_ = tmp_ / "img";
    ImageWriterOptions o;
    o.chunk_bytes = 8192;
    o.io.force_pwrite = GetParam();
    Status s = testing::WriteImage(dir_, buffers_, o);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(ReadManifest(dir_, &manifest_).ok());
  }
  ImageReaderOptions Options() const {
    ImageReaderOptions o;
    o.io.force_pwrite = GetParam();
    return o;
  }
  std::string GpuImg() const { return dir_ + "/gpu.img"; }
  std::string ManifestPath() const { return dir_ + "/manifest"; }

  ScratchDir tmp_;
  std::vector<testing::TestBuffer> buffers_;
  std::string dir_;
  v1::Manifest manifest_;
};

TEST_P(CorruptionTest, FlippedByteNamesBufferChunkAndOffset) {
  const v1::BufferExtent& e = manifest_.buffers(1);
  const std::uint64_t chunk_off = e.extent_offset() + 2 * e.chunk_bytes();
  testing::FlipByte(GpuImg(), chunk_off + 17);

  std::unique_ptr<ImageReader> r;
  ASSERT_TRUE(ImageReader::Open(dir_, Options(), &r).ok());
  // Other buffers still read fine.
  std::vector<std::uint8_t> got(buffers_[0].data.size());
  ASSERT_TRUE(r->ReadBuffer(0, got.data()).ok());
  EXPECT_EQ(got, buffers_[0].data);

  got.resize(buffers_[1].data.size());
  Status s = r->ReadBuffer(1, got.data());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, Hex(buffers_[1].addr))) << s.message();
  EXPECT_TRUE(Contains(s, "chunk 2")) << s.message();
  EXPECT_TRUE(Contains(s, "file offset " + std::to_string(chunk_off))) << s.message();

  Status v = r->VerifyAll();
  EXPECT_EQ(v.code(), Status::Code::kCorruption);
  EXPECT_EQ(v.message(), s.message());
}

// StartStaged/FinishStaged (the restore's ChunkLoader): reads run while
// the caller holds earlier chunks; a bad chunk fails its batch with the
// same message, holds no staging buffer afterwards, and neither does a
// batch dropped unfinished — the reader still has all its buffers.
TEST_P(CorruptionTest, StagedReadsInFlightVerifyAndGiveTheirBuffersBack) {
  const v1::BufferExtent& e = manifest_.buffers(1);  // 100000 bytes: 13 chunks of 8 KiB
  testing::FlipByte(GpuImg(), e.extent_offset() + 5 * e.chunk_bytes() + 3);
  ImageReaderOptions o = Options();
  o.io.queue_depth = 4;
  std::unique_ptr<ImageReader> r;
  ASSERT_TRUE(ImageReader::Open(dir_, o, &r).ok());
  ASSERT_EQ(r->queue_depth(), 4u);
  // Chunks 0-1 read and held; chunks 2-3 in flight meanwhile.
  std::vector<ImageReader::StagedChunk> held;
  ASSERT_TRUE(r->ReadStaged(1, 0, 13, 2, true, &held).ok());
  ASSERT_EQ(held.size(), 2u);
  std::unique_ptr<ImageReader::PendingChunks> ahead;
  ASSERT_TRUE(r->StartStaged(1, 2, 13, 4, false, &ahead).ok());
  ASSERT_NE(ahead, nullptr);
  EXPECT_EQ(ahead->first(), 2u);
  EXPECT_EQ(ahead->size(), 2u) << "only two staging buffers were free";
  std::unique_ptr<ImageReader::PendingChunks> none;
  ASSERT_TRUE(r->StartStaged(1, 4, 13, 4, false, &none).ok());
  EXPECT_EQ(none, nullptr) << "every staging buffer is held: nothing may start without waiting";
  std::vector<ImageReader::StagedChunk> got;
  ASSERT_TRUE(r->FinishStaged(std::move(ahead), &got).ok());
  ASSERT_EQ(got.size(), 2u);
  for (const auto& c : held) got.insert(got.begin() + static_cast<long>(c.chunk), c);
  for (const auto& c : got) {
    ASSERT_EQ(c.len, e.chunk_bytes());
    EXPECT_EQ(std::memcmp(c.data, buffers_[1].data.data() + c.chunk * e.chunk_bytes(), c.len), 0) << c.chunk;
    r->Release(c);
  }
  // Chunks 4-7: chunk 5 is bad; the whole batch fails naming it.
  std::unique_ptr<ImageReader::PendingChunks> bad;
  ASSERT_TRUE(r->StartStaged(1, 4, 13, 4, true, &bad).ok());
  ASSERT_NE(bad, nullptr);
  std::vector<ImageReader::StagedChunk> none_out;
  Status s = r->FinishStaged(std::move(bad), &none_out);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_TRUE(Contains(s, "chunk 5")) << s.message();
  EXPECT_TRUE(none_out.empty());
  // A batch dropped while in flight gives its buffers back too.
  std::unique_ptr<ImageReader::PendingChunks> dropped;
  ASSERT_TRUE(r->StartStaged(1, 8, 13, 4, true, &dropped).ok());
  dropped.reset();
  std::vector<ImageReader::StagedChunk> all;
  ASSERT_TRUE(r->ReadStaged(1, 8, 13, 4, false, &all).ok());
  EXPECT_EQ(all.size(), 4u) << "a staging buffer was not given back";
  for (const auto& c : all) r->Release(c);
}

TEST_P(CorruptionTest, FlippedByteInLastShortChunk) {
  const v1::BufferExtent& e = manifest_.buffers(0);  // 4097 bytes: one chunk
  testing::FlipByte(GpuImg(), e.extent_offset() + 4096);
  std::unique_ptr<ImageReader> r;
  ASSERT_TRUE(ImageReader::Open(dir_, Options(), &r).ok());
  Status s = r->VerifyAll();
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, "chunk 0")) << s.message();
}

TEST_P(CorruptionTest, FlipInPaddingIsHarmless) {
  // Bytes past a buffer's end inside its 4 KiB extent are not data.
  const v1::BufferExtent& e = manifest_.buffers(0);
  testing::FlipByte(GpuImg(), e.extent_offset() + 4097 + 5);
  std::unique_ptr<ImageReader> r;
  ASSERT_TRUE(ImageReader::Open(dir_, Options(), &r).ok());
  EXPECT_TRUE(r->VerifyAll().ok());
}

TEST_P(CorruptionTest, TruncatedGpuImg) {
  const v1::BufferExtent& e = manifest_.buffers(3);
  const std::uint64_t cut = e.extent_offset() + e.chunk_bytes() + 100;  // inside chunk 1
  ASSERT_EQ(::truncate(GpuImg().c_str(), static_cast<off_t>(cut)), 0);
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir_, Options(), &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, "truncated")) << s.message();
  EXPECT_TRUE(Contains(s, Hex(buffers_[3].addr))) << s.message();
  EXPECT_TRUE(Contains(s, "chunk 1")) << s.message();
  EXPECT_TRUE(Contains(s, "file offset " + std::to_string(e.extent_offset() + e.chunk_bytes())))
      << s.message();
}

TEST_P(CorruptionTest, EmptyGpuImg) {
  ASSERT_EQ(::truncate(GpuImg().c_str(), 0), 0);
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir_, Options(), &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, "truncated")) << s.message();
  EXPECT_TRUE(Contains(s, Hex(buffers_[0].addr))) << s.message();
}

TEST_P(CorruptionTest, MissingGpuImg) {
  ASSERT_EQ(::unlink(GpuImg().c_str()), 0);
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir_, Options(), &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, "missing")) << s.message();
}

TEST_P(CorruptionTest, CorruptGpuImgHeader) {
  testing::FlipByte(GpuImg(), 20);
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir_, Options(), &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, "header")) << s.message();
}

TEST_P(CorruptionTest, GpuImgOfAnotherImage) {
  const std::string other = tmp_ / "other";
  ImageWriterOptions o;
  o.chunk_bytes = 8192;
  ASSERT_TRUE(testing::WriteImage(other, buffers_, o).ok());
  std::filesystem::copy_file(other + "/gpu.img", GpuImg(),
                             std::filesystem::copy_options::overwrite_existing);
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir_, Options(), &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, "does not belong")) << s.message();
}

TEST_P(CorruptionTest, CorruptManifestPayload) {
  struct stat st {};
  ASSERT_EQ(::stat(ManifestPath().c_str(), &st), 0);
  testing::FlipByte(ManifestPath(), static_cast<std::uint64_t>(st.st_size) - 3);
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir_, Options(), &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, "manifest checksum mismatch")) << s.message();
  EXPECT_FALSE(IsImageDirectory(dir_));
}

TEST_P(CorruptionTest, CorruptManifestMagic) {
  testing::FlipByte(ManifestPath(), 0);
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir_, Options(), &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, "magic")) << s.message();
}

TEST_P(CorruptionTest, TruncatedManifest) {
  struct stat st {};
  ASSERT_EQ(::stat(ManifestPath().c_str(), &st), 0);
  ASSERT_EQ(::truncate(ManifestPath().c_str(), st.st_size / 2), 0);
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir_, Options(), &r);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_TRUE(Contains(s, "truncated")) << s.message();
}

TEST_P(CorruptionTest, MissingManifestIsNotAnImage) {
  ASSERT_EQ(::unlink(ManifestPath().c_str()), 0);
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir_, Options(), &r);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_TRUE(Contains(s, "not a phos image")) << s.message();
  EXPECT_FALSE(IsImageDirectory(dir_));
}

INSTANTIATE_TEST_SUITE_P(Backends, CorruptionTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Pwrite") : std::string("Uring");
                         });

}  // namespace
}  // namespace phos::image
