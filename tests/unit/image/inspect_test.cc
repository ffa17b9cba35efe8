// `phos inspect` end to end: the real binary on real images (no daemon).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "common/hex.h"
#include "image/image_reader.h"
#include "image_test_util.h"

namespace phos::image {
namespace {

using testing::ScratchDir;

struct Result {
  int exit_code = -1;
  std::string out;  // stdout + stderr
};

Result RunInspect(const std::string& args) {
  Result r;
  const std::string cmd = std::string(PHOS_CLI_PATH) + " inspect " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class InspectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    buffers_ = testing::MakeBuffers({4097, 300000, 1});
    dir_ = tmp_ / "ckpt";
    ImageWriterOptions o;
    o.chunk_bytes = 65536;
    v1::Manifest meta = testing::TestMetadata();
    meta.set_keep(v1::KEEP_BEST);
    meta.set_metric(0.875);
    ASSERT_TRUE(testing::WriteImage(dir_, buffers_, o, meta).ok());
    ASSERT_TRUE(ReadManifest(dir_, &manifest_).ok());
  }
  ScratchDir tmp_;
  std::vector<testing::TestBuffer> buffers_;
  std::string dir_;
  v1::Manifest manifest_;
};

TEST_F(InspectTest, IntactImage) {
  Result r = RunInspect(dir_);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("session   42  pid 1234  mode cow"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("keep      best  metric 0.875"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("./train --epochs=3"), std::string::npos) << r.out;
  for (const auto& b : buffers_) EXPECT_NE(r.out.find(Hex(b.addr)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("OK: every checksum matches"), std::string::npos) << r.out;
}

TEST_F(InspectTest, PreadFallback) {
  testing::FlipByte(dir_ + "/gpu.img", manifest_.buffers(0).extent_offset());
  Result r = RunInspect(dir_ + " --pread");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find(Hex(buffers_[0].addr) + "), chunk 0"), std::string::npos) << r.out;
}

TEST_F(InspectTest, Json) {
  Result r = RunInspect(dir_ + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"intact\": true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"verified_bytes\": \"" + std::to_string(4097 + 300000 + 1) + "\""),
            std::string::npos)
      << r.out;
}

TEST_F(InspectTest, CorruptChunkNamesBufferChunkOffset) {
  const v1::BufferExtent& e = manifest_.buffers(1);
  const std::uint64_t off = e.extent_offset() + 3 * e.chunk_bytes();
  testing::FlipByte(dir_ + "/gpu.img", off + 1);
  Result r = RunInspect(dir_);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("checksum mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(Hex(buffers_[1].addr) + "), chunk 3 at file offset " + std::to_string(off)),
            std::string::npos)
      << r.out;
  Result j = RunInspect(dir_ + " --json");
  EXPECT_EQ(j.exit_code, 1);
  EXPECT_NE(j.out.find("\"intact\": false"), std::string::npos) << j.out;
}

TEST_F(InspectTest, TruncatedImage) {
  std::filesystem::resize_file(dir_ + "/gpu.img", manifest_.buffers(1).extent_offset() + 10);
  Result r = RunInspect(dir_);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(Hex(buffers_[1].addr)), std::string::npos) << r.out;
}

TEST_F(InspectTest, NotAnImage) {
  Result r = RunInspect(tmp_.path());
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("not a phos image"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace phos::image
