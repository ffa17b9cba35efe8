// process::WriteProcessImage / ReadProcessImage: the whole-process facts
// live in the GPU image's manifest (ProcessRecord, proto/image.proto), under
// its format version and checksum, and a reader refuses by name what is not
// a whole-process image, an image only an older phos wrote (process.txt),
// a damaged record or an unknown format version.
#include "process/process_image.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "image.pb.h"
#include "image/file_util.h"
#include "image/image_layout.h"
#include "image/manifest_file.h"

namespace phos::process {
namespace {

namespace fs = std::filesystem;

class ProcessImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phos_process_image_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A GPU-only image's manifest (no buffers) in dir_, format `version`.
  void WriteGpuManifest(std::uint32_t version = image::kImageFormatVersion) {
    image::v1::Manifest m;
    m.set_format_version(version);
    m.set_gpu_img_bytes(image::kGpuImgHeaderBlock);
    m.set_image_id(42);
    std::string bytes;
    ASSERT_TRUE(image::EncodeManifestFile(m, &bytes).ok());
    ASSERT_TRUE(image::WriteFileDurable(dir_ + "/" + std::string(image::kManifestName), bytes, 0).ok());
  }

  static ProcessImage Sample() {
    ProcessImage im;
    im.pid = 4242;
    im.uid = 1000;
    im.session_id = 7;
    im.channel_inode = 99;
    im.geometry.region_bytes = 1 << 20;
    im.geometry.session_id = 7;
    im.geometry.ring_offset = 4096;
    im.geometry.ring_bytes = 65536;
    im.geometry.slot_count = 64;
    im.geometry.chunk_count = 8;
    im.geometry.chunk_bytes = 65536;
    im.geometry.max_frame_bytes = 4096;
    im.ring_start = 0x7f0000000000;
    im.ring_end = im.ring_start + im.geometry.region_bytes;
    im.ring_head = 12;
    im.admitted = 34;
    im.shell_job = true;
    im.pid_namespace = true;
    im.file_locks = true;
    im.cmdline = std::string("./app\0--flag\0", 13);
    im.host_segments = {{1, 0x7e0000000000, 2 << 20}, {2, 0x7e0000400000, 4096}};
    return im;
  }

  std::string dir_;
};

TEST_F(ProcessImageTest, TheRecordIsPartOfTheManifestAndReadsBackAsWritten) {
  WriteGpuManifest();
  const ProcessImage in = Sample();
  ASSERT_TRUE(WriteProcessImage(dir_, in).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/process.txt"));
  EXPECT_FALSE(fs::exists(dir_ + "/manifest.tmp"));
  // Still a valid manifest of the GPU image, now with the record.
  std::string bytes;
  ASSERT_TRUE(image::ReadSmallFile(dir_ + "/manifest", 1 << 20, &bytes).ok());
  image::v1::Manifest m;
  ASSERT_TRUE(image::DecodeManifestFile({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, &m).ok());
  EXPECT_EQ(m.image_id(), 42u);
  EXPECT_TRUE(m.has_process());

  ProcessImage out;
  const Status s = ReadProcessImage(dir_, &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out.pid, in.pid);
  EXPECT_EQ(out.uid, in.uid);
  EXPECT_EQ(out.channel_inode, in.channel_inode);
  EXPECT_EQ(out.ring_start, in.ring_start);
  EXPECT_EQ(out.ring_end, in.ring_end);
  EXPECT_EQ(out.geometry.ring_bytes, in.geometry.ring_bytes);
  EXPECT_EQ(out.geometry.max_frame_bytes, in.geometry.max_frame_bytes);
  EXPECT_EQ(out.admitted, in.admitted);
  EXPECT_TRUE(out.shell_job && out.pid_namespace && out.file_locks && !out.tcp_established);
  EXPECT_EQ(out.cmdline, in.cmdline);
  ASSERT_EQ(out.host_segments.size(), 2u);
  EXPECT_EQ(out.host_segments[1].app_base, in.host_segments[1].app_base);
  EXPECT_EQ(out.host_segments[1].bytes, in.host_segments[1].bytes);
}

TEST_F(ProcessImageTest, AGpuOnlyImageIsNotAWholeProcessImage) {
  WriteGpuManifest();
  ProcessImage out;
  const Status s = ReadProcessImage(dir_, &out);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("is not a whole-process image"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("--gpu-only"), std::string::npos) << s.ToString();
}

TEST_F(ProcessImageTest, AnImageOnlyAnOlderPhosWroteIsRefusedByName) {
  WriteGpuManifest();
  std::ofstream(dir_ + "/process.txt") << "version 1\npid 4242\n";
  ProcessImage out;
  const Status s = ReadProcessImage(dir_, &out);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("older phos"), std::string::npos) << s.ToString();
}

TEST_F(ProcessImageTest, ADamagedRecordOrAnUnknownFormatIsRefused) {
  WriteGpuManifest();
  ProcessImage bad = Sample();
  bad.ring_end = bad.ring_start + 4096;  // not the region's size
  ASSERT_TRUE(WriteProcessImage(dir_, bad).ok());
  ProcessImage out;
  Status s = ReadProcessImage(dir_, &out);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("inconsistent pid or ring mapping"), std::string::npos) << s.ToString();

  // A manifest of a format this phos does not know: refused before any field is read.
  WriteGpuManifest(image::kImageFormatVersion + 1);
  s = ReadProcessImage(dir_, &out);
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("not supported"), std::string::npos) << s.ToString();
  // And the record cannot be added to it either.
  EXPECT_FALSE(WriteProcessImage(dir_, Sample()).ok());
}

}  // namespace
}  // namespace phos::process
