// Fatbin reader on real nvcc 13 output: executables' .nv_fatbin sections and
// `nvcc -fatbin` files in four variants (default, -compress-all, LZ4
// --compress-mode speed, SASS only), plus truncated and corrupted inputs.
#include "fatbin/fatbin_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <regex>

#include "fatbin/fatbin_format.h"
#include "fatbin/nv_info.h"
#include "test_files.h"

namespace phos::fatbin {
namespace {

using testing::AppNames;
using testing::AppPath;
using testing::ReadFile;
using testing::ReadHostSection;

std::string_view LeadingTrimmed(std::string_view s) {
  while (!s.empty() && (s.front() == '\n' || s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  return s;
}

// Checks the shape every variant shares: one sm_90 cubin with kernels and,
// unless sass_only, one compute_90 PTX entry holding PTX text.
void CheckEntries(const Fatbin& fb, bool sass_only, Compression ptx_codec, Compression elf_codec,
                  const std::string& label) {
  SCOPED_TRACE(label + "\n" + Describe(fb));
  const long ptx = FindPtx(fb);
  const long elf = FindCubin(fb, 90);
  ASSERT_GE(elf, 0);
  const FatbinEntry& cubin = fb.entries[elf];
  EXPECT_EQ(cubin.compression, elf_codec);
  EXPECT_EQ(cubin.version_major, 1);
  ASSERT_GE(cubin.contents.size(), 64u);
  EXPECT_EQ(0, std::memcmp(cubin.contents.data(), "\x7f" "ELF", 4));
  if (cubin.compressed()) {
    EXPECT_EQ(cubin.contents.size(), cubin.uncompressed_size);
  }
  if (sass_only) {
    EXPECT_EQ(ptx, -1);
    return;
  }
  ASSERT_GE(ptx, 0);
  const FatbinEntry& p = fb.entries[ptx];
  EXPECT_EQ(p.sm_arch, 90u);
  EXPECT_EQ(p.compression, ptx_codec);
  EXPECT_EQ(p.version_major, 9);  // PTX ISA 9.0 (CUDA 13.0)
  EXPECT_EQ(p.version_minor, 0);
  if (p.compression == Compression::kZstd) {
    ASSERT_GE(p.stored.size(), 4u);
    EXPECT_EQ(0, std::memcmp(p.stored.data(), "\x28\xb5\x2f\xfd", 4));
  }
  const std::string_view text = p.ptx_text();
  // nvcc strips the "//" header comments from embedded PTX: after blank
  // lines the text starts at the .version directive.
  EXPECT_TRUE(LeadingTrimmed(text).starts_with(".version 9.0")) << text.substr(0, 80);
  EXPECT_NE(text.find(".target sm_90"), std::string_view::npos);
  EXPECT_NE(text.find(".entry"), std::string_view::npos);
  EXPECT_EQ(text.find('\0'), std::string_view::npos);
}

TEST(FatbinReader, FatbinFilesAllVariants) {
  for (const std::string& app : AppNames()) {
    struct Variant {
      std::string suffix;
      bool sass_only;
      Compression ptx, elf;
    };
    const Variant variants[] = {
        {".fatbin", false, Compression::kZstd, Compression::kNone},
        {".compress_all.fatbin", false, Compression::kZstd, Compression::kZstd},
        {".lz4.fatbin", false, Compression::kLz4, Compression::kLz4},
        {".sass.fatbin", true, Compression::kNone, Compression::kNone},
    };
    for (const Variant& v : variants) {
      const std::string path = AppPath(app + v.suffix);
      PHOS_SKIP_WITHOUT(path);
      const std::vector<uint8_t> bytes = ReadFile(path);
      Fatbin fb;
      Status s = ParseFatbin(bytes, &fb);
      ASSERT_TRUE(s.ok()) << path << ": " << s.ToString();
      ASSERT_EQ(fb.containers.size(), 1u) << path;
      EXPECT_EQ(fb.containers[0].size, bytes.size()) << path;
      CheckEntries(fb, v.sass_only, v.ptx, v.elf, path);
    }
  }
}

// Every variant carries the same cubin and PTX once decompressed.
TEST(FatbinReader, VariantsDecompressToSameContents) {
  for (const std::string& app : AppNames()) {
    PHOS_SKIP_WITHOUT(AppPath(app + ".fatbin"));
    Fatbin base;
    ASSERT_TRUE(ParseFatbin(ReadFile(AppPath(app + ".fatbin")), &base).ok());
    const auto& cubin = base.entries[FindCubin(base, 90)].contents;
    const auto& ptx = base.entries[FindPtx(base)].contents;
    for (const char* suffix : {".compress_all.fatbin", ".lz4.fatbin", ".sass.fatbin"}) {
      const auto bytes = ReadFile(AppPath(app + suffix));
      Fatbin fb;
      ASSERT_TRUE(ParseFatbin(bytes, &fb).ok()) << app << suffix;
      EXPECT_EQ(fb.entries[FindCubin(fb, 90)].contents, cubin) << app << suffix;
      if (FindPtx(fb) >= 0) {
        EXPECT_EQ(fb.entries[FindPtx(fb)].contents, ptx) << app << suffix;
      }
    }
  }
}

// The executable's .nv_fatbin section: several containers (nvcc 13 links one
// more for the runtime's own module), the app's container matches the
// standalone -fatbin file.
TEST(FatbinReader, ExecutableSection) {
  for (const std::string& app : AppNames()) {
    const std::string path = AppPath(app);
    PHOS_SKIP_WITHOUT(path);
    std::vector<uint8_t> section;
    ASSERT_TRUE(ReadHostSection(ReadFile(path), ".nv_fatbin", &section)) << path;
    Fatbin fb;
    Status s = ParseFatbin(section, &fb);
    ASSERT_TRUE(s.ok()) << path << ": " << s.ToString();
    EXPECT_GE(fb.containers.size(), 1u);
    for (const FatbinContainer& c : fb.containers) {
      ASSERT_LE(c.offset + c.size, section.size());
      EXPECT_EQ(0, std::memcmp(section.data() + c.offset, "\x50\xed\x55\xba", 4));
    }
    CheckEntries(fb, false, Compression::kZstd, Compression::kNone, path);
    // Some container holds the same PTX as the -fatbin file.
    Fatbin file;
    ASSERT_TRUE(ParseFatbin(ReadFile(AppPath(app + ".fatbin")), &file).ok());
    EXPECT_EQ(fb.entries[FindPtx(fb)].contents, file.entries[FindPtx(file)].contents);
  }
}

// The .nvFatBinSegment section holds one __fatBinC_Wrapper_t per container:
// magic 0x466243b1, and a data pointer (an address in the file's address
// space, R_X86_64_RELATIVE-relocated at load) into .nv_fatbin.
TEST(FatbinReader, WrappersInExecutablePointAtContainers) {
  const std::string path = AppPath("vector_add");
  PHOS_SKIP_WITHOUT(path);
  const std::vector<uint8_t> exe = ReadFile(path);
  std::vector<uint8_t> seg, fat;
  uint64_t seg_addr = 0, fat_addr = 0;
  ASSERT_TRUE(ReadHostSection(exe, ".nvFatBinSegment", &seg, &seg_addr));
  ASSERT_TRUE(ReadHostSection(exe, ".nv_fatbin", &fat, &fat_addr));
  Fatbin fb;
  ASSERT_TRUE(ParseFatbin(fat, &fb).ok());
  ASSERT_EQ(seg.size() % sizeof(FatbinWrapperLayout), 0u);
  size_t wrappers = 0;
  for (size_t off = 0; off + sizeof(FatbinWrapperLayout) <= seg.size(); off += sizeof(FatbinWrapperLayout)) {
    WrapperInfo w;
    ASSERT_TRUE(ReadWrapper(seg.data() + off, &w).ok());
    EXPECT_TRUE(w.version == 1 || w.version == 2) << w.version;
    const uint64_t data = reinterpret_cast<uint64_t>(w.data);
    ASSERT_GE(data, fat_addr);
    ASSERT_LT(data, fat_addr + fat.size());
    bool found = false;
    for (const FatbinContainer& c : fb.containers) found |= (fat_addr + c.offset == data);
    EXPECT_TRUE(found) << "wrapper data 0x" << std::hex << data << " is not a container start";
    ++wrappers;
  }
  EXPECT_EQ(wrappers, fb.containers.size());
}

TEST(FatbinReader, WrapperRejectsBadMagic) {
  FatbinWrapperLayout w{0x12345678, 1, nullptr, nullptr};
  WrapperInfo info;
  Status s = ReadWrapper(&w, &info);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("0x466243b1"), std::string::npos) << s.message();
  EXPECT_FALSE(ReadWrapper(nullptr, &info).ok());
}

// ---- malformed input ---------------------------------------------------------

void ExpectCorruption(const Status& s, const std::string& what) {
  ASSERT_FALSE(s.ok()) << what;
  EXPECT_EQ(s.code(), Status::Code::kCorruption) << what << ": " << s.ToString();
  static const std::regex kOffset("offset 0x[0-9a-f]+");
  EXPECT_TRUE(std::regex_search(s.message(), kOffset)) << what << ": " << s.message();
}

TEST(FatbinReader, EveryPrefixOfARealFatbinIsAnError) {
  for (const char* suffix : {".fatbin", ".compress_all.fatbin", ".lz4.fatbin", ".sass.fatbin"}) {
    const std::string path = AppPath(std::string("vector_add") + suffix);
    PHOS_SKIP_WITHOUT(path);
    const std::vector<uint8_t> bytes = ReadFile(path);
    for (size_t n = 0; n < bytes.size(); ++n) {
      // A fresh copy of exactly n bytes, so ASan catches any over-read.
      std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
      Fatbin fb;
      Status s = ParseFatbin(prefix, &fb);
      ASSERT_FALSE(s.ok()) << path << " prefix " << n;
      EXPECT_EQ(s.code(), Status::Code::kCorruption);
      EXPECT_NE(s.message().find("expected"), std::string::npos) << s.message();
      if (n > 0) {
        EXPECT_NE(s.message().find("offset 0x"), std::string::npos) << s.message();
      }
    }
  }
}

// A container whose declared size is consistent but ends inside an entry
// header: the message names the entry's offset and the bytes left.
TEST(FatbinReader, TruncatedEntryHeaderMessage) {
  const std::string path = AppPath("vector_add.fatbin");
  PHOS_SKIP_WITHOUT(path);
  std::vector<uint8_t> bytes = ReadFile(path);
  Fatbin fb;
  ASSERT_TRUE(ParseFatbin(bytes, &fb).ok());
  ASSERT_GE(fb.entries.size(), 2u);
  const size_t second = fb.entries[1].header_offset;
  bytes.resize(second + 12);
  const uint64_t payload = bytes.size() - 16;
  std::memcpy(bytes.data() + 8, &payload, 8);
  Status s = ParseFatbin(bytes, &fb);
  char expect[96];
  std::snprintf(expect, sizeof(expect), "fatbin: at offset 0x%zx: expected entry header of 64 bytes, 12 left", second);
  EXPECT_EQ(s.message(), expect);
}

TEST(FatbinReader, SpecificCorruptions) {
  const std::string path = AppPath("vector_add.compress_all.fatbin");
  PHOS_SKIP_WITHOUT(path);
  const std::vector<uint8_t> good = ReadFile(path);
  Fatbin good_fb;
  ASSERT_TRUE(ParseFatbin(good, &good_fb).ok());
  ASSERT_EQ(good_fb.entries[0].compression, Compression::kZstd);
  const size_t e0 = good_fb.entries[0].header_offset;
  Fatbin fb;
  auto patch = [&](size_t off, const void* v, size_t n) {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data() + off, v, n);
    return b;
  };
  const uint32_t bad_magic = 0xdeadbeef;
  ExpectCorruption(ParseFatbin(patch(0, &bad_magic, 4), &fb), "container magic");
  const uint16_t bad_version = 7;
  ExpectCorruption(ParseFatbin(patch(4, &bad_version, 2), &fb), "container version");
  const uint32_t small_header = 8;
  ExpectCorruption(ParseFatbin(patch(e0 + 4, &small_header, 4), &fb), "entry header size");
  const uint64_t huge = ~0ull;
  ExpectCorruption(ParseFatbin(patch(e0 + 8, &huge, 8), &fb), "entry payload size");
  ExpectCorruption(ParseFatbin(patch(8, &huge, 8), &fb), "container payload size");
  const uint32_t big_compressed = 0x7fffffff;
  ExpectCorruption(ParseFatbin(patch(e0 + 0x10, &big_compressed, 4), &fb), "compressed size");
  const uint64_t wrong_size = good_fb.entries[0].uncompressed_size + 1;
  ExpectCorruption(ParseFatbin(patch(e0 + 0x38, &wrong_size, 8), &fb), "uncompressed size");
  const uint64_t both = kFlagCompressedZstd | kFlagCompressedLz4 | 0x11;
  ExpectCorruption(ParseFatbin(patch(e0 + 0x28, &both, 8), &fb), "two codecs");
  const uint64_t giant = 1ull << 40;
  ExpectCorruption(ParseFatbin(patch(e0 + 0x38, &giant, 8), &fb), "giant uncompressed size");
  // Garbage instead of the zstd frame.
  std::vector<uint8_t> garbage = good;
  std::memset(garbage.data() + good_fb.entries[0].payload_offset, 0x5a, 16);
  ExpectCorruption(ParseFatbin(garbage, &fb), "zstd frame");
  // Without decompression the entries still parse, lazily.
  ParseOptions lazy;
  lazy.decompress = false;
  ASSERT_TRUE(ParseFatbin(garbage, &fb, lazy).ok());
  ASSERT_FALSE(fb.entries.empty());
  EXPECT_TRUE(fb.entries[0].contents.empty());
  // Empty input.
  ExpectCorruption(ParseFatbin(std::span<const uint8_t>(), &fb), "empty");
}

// An entry of a kind phos does not read (CUDA 13's libcusparse and libcufft
// carry kind 8, LTO IR, whose payloads the PTX/ELF codecs do not decode) is
// kept as stored and does not make the fatbin unreadable.
TEST(FatbinReader, EntriesOfOtherKindsAreKeptNotDecoded) {
  const std::string path = AppPath("vector_add.compress_all.fatbin");
  PHOS_SKIP_WITHOUT(path);
  std::vector<uint8_t> b = ReadFile(path);
  Fatbin good;
  ASSERT_TRUE(ParseFatbin(b, &good).ok());
  ASSERT_GE(good.entries.size(), 2u);
  const FatbinEntry& first = good.entries[0];
  const uint16_t lto = 8;
  std::memcpy(b.data() + first.header_offset, &lto, sizeof lto);
  std::memset(b.data() + first.payload_offset, 0x5a, 16);  // not zstd, not LZ4
  Fatbin fb;
  const Status s = ParseFatbin(b, &fb);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(fb.entries.size(), good.entries.size());
  EXPECT_EQ(fb.entries[0].kind, 8);
  EXPECT_TRUE(fb.entries[0].contents.empty());
  EXPECT_EQ(fb.entries[0].stored.size(), first.stored.size());
  for (size_t i = 1; i < fb.entries.size(); ++i) {
    EXPECT_EQ(fb.entries[i].contents, good.entries[i].contents) << "entry " << i;
  }
}

TEST(FatbinReader, RandomByteFlipsNeverCrash) {
  std::mt19937_64 rng(12345);
  size_t errors = 0, total = 0;
  for (const char* suffix : {".fatbin", ".compress_all.fatbin", ".lz4.fatbin", ".sass.fatbin"}) {
    for (const std::string& app : {std::string("vector_add"), std::string("reduce_shared")}) {
      const std::string path = AppPath(app + suffix);
      PHOS_SKIP_WITHOUT(path);
      const std::vector<uint8_t> good = ReadFile(path);
      for (int iter = 0; iter < 300; ++iter) {
        std::vector<uint8_t> b = good;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) {
          // Bias towards the headers, where flips change the structure.
          const size_t pos = (rng() % 2) ? rng() % std::min<size_t>(b.size(), 0x100) : rng() % b.size();
          b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
        }
        Fatbin fb;
        ParseOptions opts;
        opts.max_uncompressed_size = 64u << 20;
        Status s = ParseFatbin(b, &fb, opts);
        ++total;
        if (!s.ok()) {
          ++errors;
          EXPECT_FALSE(s.message().empty());
          continue;
        }
        // Whatever parsed must be usable: cubins either parse or give a Status.
        for (const FatbinEntry& e : fb.entries) {
          if (!e.is_elf()) continue;
          CubinInfo info;
          (void)ReadCubinInfo(e.contents, &info);
        }
      }
    }
  }
  EXPECT_GT(errors, 0u);
  EXPECT_GT(total, 0u);
}

}  // namespace
}  // namespace phos::fatbin
