// libphos.so's table of PTX attached to JIT-linked cubins: a cubin with
// attached PTX loads as a fatbin of both; anything else loads unchanged.
#include "interposer/client/jit_ptx.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fatbin/fatbin_reader.h"

namespace phos::client {
namespace {

const std::string kPtx = ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry vector_add() { ret; }\n";

std::span<const std::byte> AsBytes(const std::vector<uint8_t>& v) { return std::as_bytes(std::span(v)); }

// A real sm_90 cubin: the one in nvcc's SASS-only fatbin of tests/apps/vector_add.
std::vector<uint8_t> RealCubin() {
  const std::string path = std::string(PHOS_TEST_APPS_DIR) + "/vector_add.sass.fatbin";
  std::ifstream f(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  fatbin::Fatbin fb;
  if (bytes.empty() || !fatbin::ParseFatbin(bytes, &fb).ok() || fb.entries.empty()) return {};
  return fb.entries[0].contents;
}

// The on-disk store in a fresh directory for the test (and never the
// user's ~/.cache).
struct ScopedStore {
  std::string dir;
  ScopedStore() {
    char tmpl[] = "/tmp/phos_jitptx_XXXXXX";
    dir = mkdtemp(tmpl) ? tmpl : "/tmp/phos_jitptx_unusable";
    setenv("PHOS_JIT_PTX_CACHE", (dir + "/store").c_str(), 1);
  }
  ~ScopedStore() {
    unsetenv("PHOS_JIT_PTX_CACHE");
    std::filesystem::remove_all(dir);
  }
  size_t files() const {
    std::error_code ec;
    size_t n = 0;
    for (auto it = std::filesystem::directory_iterator(dir + "/store", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      ++n;
    return n;
  }
};

#define NEED_CUBIN(c) \
  if ((c).empty()) GTEST_SKIP() << "skipped: tests/apps/vector_add.sass.fatbin not built (no nvcc)"

TEST(JitPtx, AttachedCubinLoadsAsAFatbinOfBoth) {
  ScopedStore store;
  std::vector<uint8_t> cubin = RealCubin();
  NEED_CUBIN(cubin);
  ASSERT_EQ(phosJitAttachPtx(cubin.data(), cubin.size(), kPtx.c_str(), kPtx.size() + 1), 0);
  std::vector<std::byte> image;
  ASSERT_TRUE(ImageWithAttachedPtx(AsBytes(cubin), &image));
  fatbin::Fatbin fb;
  ASSERT_TRUE(fatbin::ParseFatbin(std::span(reinterpret_cast<const uint8_t*>(image.data()), image.size()), &fb).ok());
  ASSERT_EQ(fb.entries.size(), 2u);
  EXPECT_TRUE(fb.entries[0].is_elf());
  EXPECT_EQ(fb.entries[0].sm_arch, 90u);
  EXPECT_EQ(fb.entries[0].contents, cubin);
  EXPECT_TRUE(fb.entries[1].is_ptx());
  EXPECT_EQ(fb.entries[1].sm_arch, 90u);
  EXPECT_EQ(fb.entries[1].ptx_text(), kPtx);

  // Attaching again replaces the PTX.
  const std::string other = kPtx + "// v2\n";
  AttachJitPtx(AsBytes(cubin), other);
  ASSERT_TRUE(ImageWithAttachedPtx(AsBytes(cubin), &image));
  ASSERT_TRUE(fatbin::ParseFatbin(std::span(reinterpret_cast<const uint8_t*>(image.data()), image.size()), &fb).ok());
  EXPECT_EQ(fb.entries[1].ptx_text(), other);
}

TEST(JitPtx, OtherImagesLoadUnchanged) {
  ScopedStore store;
  std::vector<uint8_t> cubin = RealCubin();
  NEED_CUBIN(cubin);
  AttachJitPtx(AsBytes(cubin), kPtx);
  std::vector<std::byte> image;
  std::vector<uint8_t> changed = cubin;
  changed.back() ^= 1;
  EXPECT_FALSE(ImageWithAttachedPtx(AsBytes(changed), &image));  // another cubin
  std::vector<uint8_t> longer = cubin;
  longer.push_back(0);
  EXPECT_FALSE(ImageWithAttachedPtx(AsBytes(longer), &image));
  const std::vector<uint8_t> ptx(kPtx.begin(), kPtx.end());
  EXPECT_FALSE(ImageWithAttachedPtx(AsBytes(ptx), &image));  // PTX loads as PTX
  // A "cubin" that is not one (an ELF header and nothing else) gets no fatbin.
  const std::vector<uint8_t> bad = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  AttachJitPtx(AsBytes(bad), kPtx);
  EXPECT_FALSE(ImageWithAttachedPtx(AsBytes(bad), &image));
  EXPECT_FALSE(ImageWithAttachedPtx({}, &image));
}

TEST(JitPtx, BadArgumentsAreRefused) {
  ScopedStore store;
  const char cubin[] = "\x7f" "ELF";
  EXPECT_EQ(phosJitAttachPtx(nullptr, 4, kPtx.c_str(), kPtx.size()), -1);
  EXPECT_EQ(phosJitAttachPtx(cubin, 0, kPtx.c_str(), kPtx.size()), -1);
  EXPECT_EQ(phosJitAttachPtx(cubin, 4, nullptr, 10), -1);
  EXPECT_EQ(phosJitAttachPtx(cubin, 4, "\0\0", 2), -1);  // only NULs
}

// A cubin a framework cached on disk is loaded by a later process, which
// never saw it compiled: the PTX comes from the on-disk store. (Here the
// pair leaves the in-memory table by eviction, as it would by exit.)
TEST(JitPtx, TheOnDiskStoreServesCubinsNoLongerInMemory) {
  ScopedStore store;
  std::vector<uint8_t> cubin = RealCubin();
  NEED_CUBIN(cubin);
  cubin.push_back(0xCD);  // a cubin no other test attaches
  AttachJitPtx(AsBytes(cubin), kPtx);
  EXPECT_EQ(store.files(), 1u);
  const std::string dir = store.dir + "/store";
  setenv("PHOS_JIT_PTX_CACHE", "off", 1);  // the evicting attachments write nothing
  for (uint32_t i = 0; i < 4096; ++i) {
    uint8_t key[8];
    std::memcpy(key, "\x7f" "ELF", 4);
    std::memcpy(key + 4, &i, 4);
    AttachJitPtx(std::as_bytes(std::span(key)), kPtx);
  }
  EXPECT_EQ(store.files(), 1u);
  std::vector<std::byte> image;
  EXPECT_FALSE(ImageWithAttachedPtx(AsBytes(cubin), &image));  // not in memory, store off
  setenv("PHOS_JIT_PTX_CACHE", dir.c_str(), 1);
  ASSERT_TRUE(ImageWithAttachedPtx(AsBytes(cubin), &image));   // from the file
  fatbin::Fatbin fb;
  ASSERT_TRUE(fatbin::ParseFatbin(std::span(reinterpret_cast<const uint8_t*>(image.data()), image.size()), &fb).ok());
  ASSERT_EQ(fb.entries.size(), 2u);
  EXPECT_EQ(fb.entries[1].ptx_text(), kPtx);
}

// The table keeps the newest pairs: after 4096 newer attachments the first
// cubin loads without PTX unless the on-disk store has it (off here).
TEST(JitPtx, OldestPairsAreDropped) {
  setenv("PHOS_JIT_PTX_CACHE", "off", 1);
  std::vector<uint8_t> cubin = RealCubin();
  NEED_CUBIN(cubin);
  std::vector<uint8_t> first = cubin;
  first.push_back(0xAB);  // a cubin no other test attaches
  AttachJitPtx(AsBytes(first), kPtx);
  std::vector<std::byte> image;
  ASSERT_TRUE(ImageWithAttachedPtx(AsBytes(first), &image));
  for (uint32_t i = 0; i < 4096; ++i) {
    uint8_t key[8];
    std::memcpy(key, "\x7f" "ELF", 4);
    std::memcpy(key + 4, &i, 4);
    AttachJitPtx(std::as_bytes(std::span(key)), kPtx);
  }
  EXPECT_FALSE(ImageWithAttachedPtx(AsBytes(first), &image));
  unsetenv("PHOS_JIT_PTX_CACHE");
}

}  // namespace
}  // namespace phos::client
