// A full disk is a clear error (naming the file and saying the disk is
// full), the failed checkpoint leaves nothing behind, and earlier images
// stay readable.
#include <sys/mount.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "image/file_util.h"
#include "image/image_reader.h"
#include "image/image_writer.h"
#include "image/recovery.h"
#include "image_test_util.h"

namespace phos::image {
namespace {

using testing::MakeBuffers;
using testing::ScratchDir;

// Wraps a real backend; writes past `budget` bytes fail like ENOSPC does.
class FullDiskIo : public IoBackend {
 public:
  FullDiskIo(std::unique_ptr<IoBackend> inner, std::uint64_t budget)
      : inner_(std::move(inner)), budget_(budget) {}
  std::string_view name() const override { return "full-disk"; }
  const std::string& path() const override { return inner_->path(); }
  std::size_t buffer_bytes() const override { return inner_->buffer_bytes(); }
  Status Acquire(IoBuffer** out) override { return inner_->Acquire(out); }
  IoBuffer* TryAcquire() override { return inner_->TryAcquire(); }
  void Release(IoBuffer* buf) override { inner_->Release(buf); }
  Status WriteAsync(IoBuffer* buf, std::uint64_t offset, std::size_t len) override {
    if (written_.fetch_add(len) + len > budget_) {
      inner_->Release(buf);
      return DiskFullError(path() + " at offset " + std::to_string(offset), ENOSPC);
    }
    return inner_->WriteAsync(buf, offset, len);
  }
  Status Drain() override { return inner_->Drain(); }
  Status Sync() override { return inner_->Sync(); }
  Status Truncate(std::uint64_t b) override { return inner_->Truncate(b); }
  Status Read(IoBuffer* buf, std::uint64_t o, std::size_t l, std::size_t* got) override {
    return inner_->Read(buf, o, l, got);
  }

 private:
  std::unique_ptr<IoBackend> inner_;
  const std::uint64_t budget_;
  std::atomic<std::uint64_t> written_{0};
};

void ExpectReadable(const std::string& dir, const std::vector<testing::TestBuffer>& buffers) {
  std::unique_ptr<ImageReader> r;
  Status s = ImageReader::Open(dir, {}, &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(r->VerifyAll().ok());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    std::vector<std::uint8_t> got(buffers[i].data.size());
    ASSERT_TRUE(r->ReadBuffer(i, got.data()).ok());
    EXPECT_EQ(got, buffers[i].data);
  }
}

TEST(DiskFull, InjectedEnospcIsClearAndAbortKeepsEarlierImage) {
  ScratchDir tmp;
  ImageWriterOptions o;
  o.chunk_bytes = 65536;
  auto first = MakeBuffers({200000, 4097}, 1);
  ASSERT_TRUE(testing::WriteImage(tmp / "ckpt-1", first, o).ok());

  o.backend_factory = [](const std::string& path, IoMode mode, const IoOptions& io,
                         std::unique_ptr<IoBackend>* out) {
    std::unique_ptr<IoBackend> inner;
    PHOS_RETURN_IF_ERROR(OpenIoBackend(path, mode, io, &inner));
    *out = std::make_unique<FullDiskIo>(std::move(inner), 300000);
    return Status::Ok();
  };
  std::unique_ptr<ImageWriter> w;
  ASSERT_TRUE(ImageWriter::Open(tmp / "ckpt-2", testing::TestMetadata(), o, &w).ok());
  auto second = MakeBuffers({1 << 20}, 2);
  std::size_t index = 0;
  ASSERT_TRUE(w->AddBuffer(second[0].addr, second[0].data.size(), &index).ok());
  Status s = w->WriteBuffer(index, second[0].data.data());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(IsDiskFull(s)) << s.ToString();
  EXPECT_NE(s.message().find("ckpt-2.tmp/gpu.img"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  w->Abort();
  EXPECT_FALSE(std::filesystem::exists(tmp / "ckpt-2.tmp"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "ckpt-2"));
  ExpectReadable(tmp / "ckpt-1", first);
}

// A real full filesystem: a 1 MiB tmpfs (needs CAP_SYS_ADMIN; skipped
// otherwise). Exercises the kernel's ENOSPC through both backends.
class RealDiskFull : public ::testing::TestWithParam<bool> {};

TEST_P(RealDiskFull, SmallTmpfs) {
  ScratchDir tmp;
  const std::string mnt = tmp / "mnt";
  std::filesystem::create_directory(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (not privileged): " << std::strerror(errno);
  }
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};

  ImageWriterOptions o;
  o.chunk_bytes = 65536;
  o.io.force_pwrite = GetParam();
  auto first = MakeBuffers({300000}, 3);
  ASSERT_TRUE(testing::WriteImage(mnt + "/ckpt-1", first, o).ok());
  auto second = MakeBuffers({2 << 20}, 4);
  Status s = testing::WriteImage(mnt + "/ckpt-2", second, o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(IsDiskFull(s)) << s.ToString();
  EXPECT_NE(s.message().find("gpu.img"), std::string::npos) << s.message();
  // WriteImage's writer was destroyed: its tmp directory is gone.
  EXPECT_FALSE(std::filesystem::exists(mnt + "/ckpt-2.tmp"));
  ExpectReadable(mnt + "/ckpt-1", first);
}

INSTANTIATE_TEST_SUITE_P(Backends, RealDiskFull, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Pwrite") : std::string("Uring");
                         });

}  // namespace
}  // namespace phos::image
