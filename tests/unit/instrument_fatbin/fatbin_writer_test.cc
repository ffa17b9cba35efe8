// Fatbin writer: what it writes reads back with the same contents, and its
// entry headers are the ones nvcc/fatbinary write for the same images.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "fatbin/fatbin_format.h"
#include "fatbin/fatbin_writer.h"
#include "test_files.h"

namespace phos::fatbin {
namespace {

using testing::AppNames;
using testing::AppPath;
using testing::ReadFile;

std::span<const uint8_t> Bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(FatbinWriter, CubinAndPtxReadBackUnchanged) {
  for (const std::string& app : AppNames()) {
    PHOS_SKIP_WITHOUT(AppPath(app + ".fatbin"));
    Fatbin nvcc;
    ASSERT_TRUE(ParseFatbin(ReadFile(AppPath(app + ".fatbin")), &nvcc).ok()) << app;
    const FatbinEntry& cubin = nvcc.entries[FindCubin(nvcc, 90)];
    const FatbinEntry& ptx = nvcc.entries[FindPtx(nvcc)];
    const FatbinImage images[] = {{EntryKind::kElf, 90, cubin.contents}, {EntryKind::kPtx, 90, ptx.contents}};
    std::vector<uint8_t> written;
    ASSERT_TRUE(WriteFatbin(images, &written).ok()) << app;
    Fatbin back;
    const Status s = ParseFatbin(written, &back);
    ASSERT_TRUE(s.ok()) << app << ": " << s.ToString();
    ASSERT_EQ(back.containers.size(), 1u);
    EXPECT_EQ(back.containers[0].size, written.size());
    ASSERT_EQ(back.entries.size(), 2u);
    EXPECT_EQ(back.entries[0].contents, cubin.contents) << app;
    EXPECT_EQ(back.entries[1].contents, ptx.contents) << app;
    for (int i = 0; i < 2; ++i) {
      const FatbinEntry& ours = back.entries[i];
      const FatbinEntry& theirs = i == 0 ? cubin : ptx;
      EXPECT_EQ(ours.kind, theirs.kind);
      EXPECT_EQ(ours.sm_arch, theirs.sm_arch);
      EXPECT_EQ(ours.version_major, theirs.version_major) << app << " entry " << i;
      EXPECT_EQ(ours.version_minor, theirs.version_minor) << app << " entry " << i;
      EXPECT_FALSE(ours.compressed());
    }
  }
}

// nvcc's SASS-only fatbin stores the cubin uncompressed: our cubin entry,
// header and payload, is that container's byte for byte.
TEST(FatbinWriter, CubinEntryIsNvccsByteForByte) {
  for (const std::string& app : AppNames()) {
    const std::string path = AppPath(app + ".sass.fatbin");
    PHOS_SKIP_WITHOUT(path);
    const std::vector<uint8_t> nvcc = ReadFile(path);
    Fatbin fb;
    ASSERT_TRUE(ParseFatbin(nvcc, &fb).ok());
    ASSERT_EQ(fb.entries.size(), 1u);
    const FatbinImage image{EntryKind::kElf, 90, fb.entries[0].contents};
    std::vector<uint8_t> written;
    ASSERT_TRUE(WriteFatbin({&image, 1}, &written).ok());
    EXPECT_EQ(written, nvcc) << app;
  }
}

// The PTX entry's header as `fatbinary -64 --compress=false` (CUDA 13.0)
// writes it for a 559-byte PTX file it shortened to 384 stored bytes:
// kind 1, 0x0101, header 80, unknown 0x40, ISA 9.0, sm 90, flags 0x11, and
// 0x48 in the first word past the common 64 bytes.
TEST(FatbinWriter, PtxEntryHeaderIsFatbinarys) {
  const std::string ptx = ".version 9.0\n.target sm_90\n.address_size 64\n";
  const FatbinImage image{EntryKind::kPtx, 90, Bytes(ptx)};
  std::vector<uint8_t> w;
  ASSERT_TRUE(WriteFatbin({&image, 1}, &w).ok());
  const size_t stored = (ptx.size() + 1 + 7) & ~size_t{7};
  ASSERT_EQ(w.size(), kContainerHeaderSize + 80 + stored);
  const auto u16 = [&](size_t at) { uint16_t v; std::memcpy(&v, w.data() + at, 2); return v; };
  const auto u32 = [&](size_t at) { uint32_t v; std::memcpy(&v, w.data() + at, 4); return v; };
  const auto u64 = [&](size_t at) { uint64_t v; std::memcpy(&v, w.data() + at, 8); return v; };
  EXPECT_EQ(u32(0), kContainerMagic);
  EXPECT_EQ(u64(8), 80 + stored);
  const size_t e = kContainerHeaderSize;
  EXPECT_EQ(u16(e + 0x00), 1);
  EXPECT_EQ(u16(e + 0x02), 0x0101);
  EXPECT_EQ(u32(e + 0x04), 80u);
  EXPECT_EQ(u64(e + 0x08), stored);
  EXPECT_EQ(u32(e + 0x10), 0u);
  EXPECT_EQ(u32(e + 0x14), 0x40u);
  EXPECT_EQ(u16(e + 0x18), 0);
  EXPECT_EQ(u16(e + 0x1a), 9);
  EXPECT_EQ(u32(e + 0x1c), 90u);
  EXPECT_EQ(u64(e + 0x28), 0x11u);
  EXPECT_EQ(u64(e + 0x38), 0u);
  EXPECT_EQ(u32(e + 0x40), 0x48u);
  EXPECT_EQ(std::memcmp(w.data() + e + 80, ptx.data(), ptx.size()), 0);
  EXPECT_EQ(w[e + 80 + ptx.size()], 0);  // NUL-terminated
}

TEST(FatbinWriter, RefusesWhatItCannotDescribe) {
  std::vector<uint8_t> out;
  EXPECT_EQ(WriteFatbin({}, &out).code(), Status::Code::kInvalidArgument);
  const std::string no_version = ".target sm_90\n";
  const FatbinImage ptx{EntryKind::kPtx, 90, Bytes(no_version)};
  EXPECT_EQ(WriteFatbin({&ptx, 1}, &out).code(), Status::Code::kInvalidArgument);
  const std::string not_elf = "not an elf file";
  const FatbinImage cubin{EntryKind::kElf, 90, Bytes(not_elf)};
  EXPECT_EQ(WriteFatbin({&cubin, 1}, &out).code(), Status::Code::kInvalidArgument);
  const FatbinImage empty{EntryKind::kElf, 90, {}};
  EXPECT_EQ(WriteFatbin({&empty, 1}, &out).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace phos::fatbin
