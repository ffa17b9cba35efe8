// libphos.so's image layout readers (interposer/client/image_layouts.h) on
// real nvcc output of driver_kernels.cu: the PTX text, an nvcc -fatbin image
// and an sm_90 cubin must give the same parameter slots, and an image passed
// as a bare pointer must be sized exactly (cuModuleLoadData has no size).
#include "interposer/client/image_layouts.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace phos::client {
namespace {

std::vector<std::byte> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

std::string Path(const char* name) { return std::string(PHOS_INTEGRATION_DIR) + "/" + name; }

void ExpectSlots(const ImageLayouts& l, const char* kernel, const std::vector<std::pair<uint32_t, uint32_t>>& want,
                 uint32_t want_bytes) {
  SCOPED_TRACE(kernel);
  std::vector<ParamSlot> p;
  uint32_t bytes = 0;
  ASSERT_TRUE(FindParamLayout(l, kernel, &p, &bytes));
  ASSERT_EQ(p.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(p[i].offset, want[i].first) << "parameter " << i;
    EXPECT_EQ(p[i].size, want[i].second) << "parameter " << i;
  }
  EXPECT_EQ(bytes, want_bytes);
}

// driver_kernels.cu: saxpy(int, float, const float*, float*) and
// mixed(char, long long*, int, Mixed {double, int, char, long long}, short, double*).
void ExpectDriverKernels(const ImageLayouts& l) {
  ExpectSlots(l, "saxpy", {{0, 4}, {4, 4}, {8, 8}, {16, 8}}, 24);
  ExpectSlots(l, "mixed", {{0, 1}, {8, 8}, {16, 4}, {24, 24}, {48, 2}, {56, 8}}, 64);
  ExpectSlots(l, "bump", {{0, 4}}, 4);
  std::vector<ParamSlot> p;
  uint32_t bytes = 0;
  EXPECT_FALSE(FindParamLayout(l, "no_such_kernel", &p, &bytes));
}

TEST(ImageLayouts, PtxTextIsSizedByItsNulAndListsEveryEntry) {
  std::vector<std::byte> ptx = ReadFile(Path("driver_kernels.ptx"));
  ASSERT_FALSE(ptx.empty());
  ptx.push_back(std::byte{0});
  std::span<const std::byte> image = ImageInMemory(ptx.data());
  EXPECT_EQ(image.data(), ptx.data());
  EXPECT_EQ(image.size(), ptx.size());
  ImageLayouts l;
  ASSERT_TRUE(ReadImageLayouts(image, &l));
  EXPECT_TRUE(l.cubin.kernels.empty());
  ExpectDriverKernels(l);
}

TEST(ImageLayouts, FatbinTakesLayoutsFromItsCubinAndIsSizedByItsHeader) {
  std::vector<std::byte> fatbin = ReadFile(Path("driver_kernels.fatbin"));
  ASSERT_GT(fatbin.size(), 16u);
  const size_t file_size = fatbin.size();
  fatbin.resize(file_size + 4096, std::byte{0x5a});  // what follows the image in memory is not part of it
  std::span<const std::byte> image = ImageInMemory(fatbin.data());
  EXPECT_EQ(image.data(), fatbin.data());
  EXPECT_EQ(image.size(), file_size);
  ImageLayouts l;
  ASSERT_TRUE(ReadImageLayouts(image, &l));
  EXPECT_FALSE(l.cubin.kernels.empty());  // the sm_90 cubin's .nv.info
  EXPECT_FALSE(l.ptx.empty());
  ExpectDriverKernels(l);
  l.ptx.clear();  // the cubin alone must give the same slots
  ExpectDriverKernels(l);

  // A fatbin wrapper (what cuModuleLoadFatBinary may get) leads to its container.
  struct Wrapper {
    int32_t magic;
    int32_t version;
    const void* data;
    const void* unused;
  } wrapper{0x466243B1, 1, fatbin.data(), nullptr};
  std::span<const std::byte> via_wrapper = ImageInMemory(&wrapper);
  EXPECT_EQ(via_wrapper.data(), fatbin.data());
  EXPECT_EQ(via_wrapper.size(), file_size);
}

TEST(ImageLayouts, CubinIsSizedByItsElfHeadersAndSections) {
  std::vector<std::byte> cubin = ReadFile(Path("driver_kernels.cubin"));
  ASSERT_GT(cubin.size(), 64u);
  const size_t file_size = cubin.size();
  cubin.resize(file_size + 4096, std::byte{0x5a});
  std::span<const std::byte> image = ImageInMemory(cubin.data());
  EXPECT_EQ(image.size(), file_size);
  ImageLayouts l;
  ASSERT_TRUE(ReadImageLayouts(image, &l));
  EXPECT_TRUE(l.ptx.empty());
  ExpectDriverKernels(l);
}

TEST(ImageLayouts, BytesThatAreNoImageAreRefused) {
  const char text[] = "this is not a module image";
  std::span<const std::byte> image = ImageInMemory(text);
  EXPECT_EQ(image.size(), sizeof text);
  ImageLayouts l;
  EXPECT_FALSE(ReadImageLayouts(image, &l));
  EXPECT_TRUE(ImageInMemory(nullptr).empty());
  // A corrupt fatbin header: the declared size is absurd.
  std::vector<uint8_t> bad(64, 0xff);
  const uint32_t magic = 0xBA55ED50u;
  std::memcpy(bad.data(), &magic, 4);
  EXPECT_TRUE(ImageInMemory(bad.data()).empty());
}

}  // namespace
}  // namespace phos::client
