// Manifest encoding and the structural checks readers rely on.
#include <cstring>

#include <gtest/gtest.h>

#include "image/image_layout.h"
#include "image/manifest_file.h"

namespace phos::image {
namespace {

v1::Manifest ValidManifest() {
  v1::Manifest m;
  m.set_format_version(kImageFormatVersion);
  m.set_session_id(7);
  m.set_gpu_img_bytes(kGpuImgHeaderBlock + 3 * kAlign);
  v1::BufferExtent* a = m.add_buffers();
  a->set_device_address(0x1000);
  a->set_bytes(5000);  // 2 chunks of 4096, extent 8192
  a->set_extent_offset(kGpuImgHeaderBlock);
  a->set_chunk_bytes(4096);
  a->add_chunk_xxh3(1);
  a->add_chunk_xxh3(2);
  v1::BufferExtent* b = m.add_buffers();
  b->set_device_address(0x9000);
  b->set_bytes(10);
  b->set_extent_offset(kGpuImgHeaderBlock + 2 * kAlign);
  b->set_chunk_bytes(8192);
  b->add_chunk_xxh3(3);
  return m;
}

Status RoundTrip(const v1::Manifest& in, v1::Manifest* out) {
  std::string bytes;
  PHOS_RETURN_IF_ERROR(EncodeManifestFile(in, &bytes));
  return DecodeManifestFile({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()},
                            out);
}

TEST(ManifestFile, RoundTrip) {
  v1::Manifest m = ValidManifest();
  m.set_metric(0.25);
  m.mutable_session()->add_streams(3);
  m.add_first_use_order(1);
  v1::Manifest out;
  ASSERT_TRUE(RoundTrip(m, &out).ok());
  EXPECT_EQ(out.SerializeAsString(), m.SerializeAsString());
  EXPECT_TRUE(out.has_metric());
}

TEST(ManifestFile, HeaderLayoutIsFixed) {
  std::string bytes;
  ASSERT_TRUE(EncodeManifestFile(ValidManifest(), &bytes).ok());
  ASSERT_GT(bytes.size(), kManifestHeaderBytes);
  EXPECT_EQ(bytes.substr(0, 8), "PHOSMAN1");
  EXPECT_EQ(static_cast<std::uint8_t>(bytes[8]), kImageFormatVersion);
  EXPECT_EQ(static_cast<std::uint8_t>(bytes[12]), kManifestHeaderBytes);
  EXPECT_EQ(static_cast<std::uint8_t>(bytes[16]), (bytes.size() - kManifestHeaderBytes) & 0xff);
  const std::uint64_t sum = Xxh3(bytes.data() + kManifestHeaderBytes, bytes.size() - kManifestHeaderBytes);
  std::uint64_t stored = 0;
  for (int i = 0; i < 8; ++i) stored |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(bytes[24 + i])) << (8 * i);
  EXPECT_EQ(stored, sum);
}

TEST(ManifestFile, TrailingBytesRejected) {
  std::string bytes;
  ASSERT_TRUE(EncodeManifestFile(ValidManifest(), &bytes).ok());
  bytes.push_back('x');
  v1::Manifest out;
  Status s = DecodeManifestFile({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, &out);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
}

TEST(ManifestFile, ShortInputRejected) {
  v1::Manifest out;
  const std::uint8_t few[5] = {'P', 'H', 'O', 'S', 'M'};
  EXPECT_EQ(DecodeManifestFile({few, 5}, &out).code(), Status::Code::kCorruption);
  EXPECT_EQ(DecodeManifestFile({few, 0}, &out).code(), Status::Code::kCorruption);
}

struct BadCase {
  const char* name;
  void (*damage)(v1::Manifest*);
  const char* expect;
};

TEST(ManifestFile, StructuralChecks) {
  const BadCase cases[] = {
      {"version", [](v1::Manifest* m) { m->set_format_version(99); }, "format version"},
      {"chunk zero", [](v1::Manifest* m) { m->mutable_buffers(0)->set_chunk_bytes(0); }, "chunk size"},
      {"chunk unaligned", [](v1::Manifest* m) { m->mutable_buffers(0)->set_chunk_bytes(1000); }, "chunk size"},
      {"chunk huge", [](v1::Manifest* m) { m->mutable_buffers(0)->set_chunk_bytes(1ull << 40); }, "chunk size"},
      {"checksums", [](v1::Manifest* m) { m->mutable_buffers(0)->add_chunk_xxh3(9); }, "chunk checksums"},
      {"unaligned extent", [](v1::Manifest* m) { m->mutable_buffers(1)->set_extent_offset(kGpuImgHeaderBlock + 2 * kAlign + 1); }, "aligned"},
      {"in header", [](v1::Manifest* m) { m->mutable_buffers(0)->set_extent_offset(0); }, "outside gpu.img"},
      {"past end", [](v1::Manifest* m) { m->set_gpu_img_bytes(kGpuImgHeaderBlock + 2 * kAlign); }, "outside gpu.img"},
      {"overlap", [](v1::Manifest* m) { m->mutable_buffers(1)->set_extent_offset(kGpuImgHeaderBlock + kAlign); }, "overlap"},
      {"huge size", [](v1::Manifest* m) { m->mutable_buffers(1)->set_bytes(~0ull); }, "impossible size"},
      {"wrap", [](v1::Manifest* m) { m->mutable_buffers(1)->set_extent_offset(~0ull & ~(kAlign - 1)); }, "outside gpu.img"},
      {"tiny gpu.img", [](v1::Manifest* m) { m->set_gpu_img_bytes(10); }, "header block"},
  };
  for (const BadCase& c : cases) {
    v1::Manifest m = ValidManifest();
    c.damage(&m);
    v1::Manifest out;
    Status s = RoundTrip(m, &out);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << c.name;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.name << ": " << s.message();
  }
  v1::Manifest ok;
  EXPECT_TRUE(RoundTrip(ValidManifest(), &ok).ok());
}

TEST(GpuImgHeader, RoundTripAndDamage) {
  GpuImgHeader h;
  h.image_id = 0x1234;
  h.file_bytes = 8192;
  std::uint8_t buf[kGpuImgHeaderBytes];
  EncodeGpuImgHeader(h, buf);
  GpuImgHeader out;
  ASSERT_TRUE(DecodeGpuImgHeader(buf, &out).ok());
  EXPECT_EQ(out.image_id, 0x1234u);
  EXPECT_EQ(out.file_bytes, 8192u);
  for (std::size_t i = 0; i < kGpuImgHeaderBytes; ++i) {
    std::uint8_t copy[kGpuImgHeaderBytes];
    std::memcpy(copy, buf, sizeof copy);
    copy[i] ^= 0x40;
    EXPECT_FALSE(DecodeGpuImgHeader(copy, &out).ok()) << "byte " << i;
  }
}

}  // namespace
}  // namespace phos::image
