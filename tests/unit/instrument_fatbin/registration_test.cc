// The real registration path without a GPU or libcudart: this test binary
// links an nvcc-compiled object (registration_kernels.cu) and defines the
// runtime's private registration entry points itself, the way libphos.so
// does. The object's static constructor hands us the __fatBinC_Wrapper_t,
// which we read with ParseFatbinFromWrapper and check against the
// .nvFatBinSegment / .nv_fatbin sections of /proc/self/exe.
#include <dlfcn.h>
#include <link.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fatbin/elf_reader.h"
#include "fatbin/fatbin_format.h"
#include "fatbin/fatbin_reader.h"
#include "fatbin/nv_info.h"
#include "test_files.h"

namespace {
// Filled before main() by the nvcc object's constructor: plain arrays with
// constant initialisation, so static-init order does not matter.
constexpr int kMax = 16;
void* g_wrappers[kMax] = {};
int g_wrapper_count = 0;
int g_register_end_count = 0;
const char* g_device_names[kMax] = {};
int g_function_count = 0;
}  // namespace

// Signatures as in CUDA's crt/host_runtime.h (types simplified; only the
// symbol names matter to the linker).
extern "C" {
void** __cudaRegisterFatBinary(void* fat_cubin) {
  if (g_wrapper_count < kMax) g_wrappers[g_wrapper_count++] = fat_cubin;
  return reinterpret_cast<void**>(&g_wrappers[g_wrapper_count - 1]);
}
void __cudaRegisterFatBinaryEnd(void** /*handle*/) { ++g_register_end_count; }
void __cudaUnregisterFatBinary(void** /*handle*/) {}
void __cudaRegisterFunction(void** /*handle*/, const char* /*host_fun*/, char* /*device_fun*/,
                            const char* device_name, int /*thread_limit*/, void* /*tid*/, void* /*bid*/,
                            void* /*block_dim*/, void* /*grid_dim*/, int* /*warp_size*/) {
  if (g_function_count < kMax) g_device_names[g_function_count++] = device_name;
}
char __cudaInitModule(void** /*handle*/) { return 0; }
// Launch-side entry points the stubs reference; never called here.
unsigned __cudaPushCallConfiguration(...) { return 0; }
unsigned __cudaPopCallConfiguration(...) { return 0; }
int __cudaLaunchKernel(...) { return 1; }
int __cudaGetKernel(...) { return 1; }
}

namespace phos::fatbin {
namespace {

uintptr_t MainProgramBase() {
  uintptr_t base = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        *static_cast<uintptr_t*>(data) = info->dlpi_addr;
        return 1;  // the first object is the main program
      },
      &base);
  return base;
}

TEST(Registration, WrapperFromRegisterFatBinary) {
  ASSERT_GE(g_wrapper_count, 1);
  EXPECT_EQ(g_register_end_count, g_wrapper_count);
  for (int i = 0; i < g_wrapper_count; ++i) {
    WrapperInfo w;
    Status s = ReadWrapper(g_wrappers[i], &w);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(static_cast<uint32_t>(w.magic), kWrapperMagic);
    EXPECT_EQ(w.version, 1);
  }
}

TEST(Registration, ParseFatbinFromWrapper) {
  ASSERT_GE(g_wrapper_count, 1);
  Fatbin fb;
  Status s = ParseFatbinFromWrapper(g_wrappers[0], &fb);
  ASSERT_TRUE(s.ok()) << s.ToString();
  SCOPED_TRACE(Describe(fb));
  ASSERT_EQ(fb.containers.size(), 1u);
  const long ptx = FindPtx(fb);
  const long elf = FindCubin(fb, 90);
  ASSERT_GE(ptx, 0);
  ASSERT_GE(elf, 0);
  EXPECT_EQ(fb.entries[ptx].compression, Compression::kZstd);
  const std::string_view text = fb.entries[ptx].ptx_text();

  CubinInfo info;
  ASSERT_TRUE(ReadCubinInfo(fb.entries[elf].contents, &info).ok());
  // Every function registered by the stub has a PTX entry and a cubin table.
  ASSERT_EQ(g_function_count, 5);
  for (int i = 0; i < g_function_count; ++i) {
    const std::string name = g_device_names[i];
    EXPECT_NE(text.find(".entry " + name + "("), std::string_view::npos) << name;
    EXPECT_NE(info.Find(name), nullptr) << name;
  }
  // reg_copy(Pair, int, double): 16-byte struct, int at 16, double at 24.
  const KernelNvInfo* copy = info.Find("_Z8reg_copy4Pairid");
  ASSERT_NE(copy, nullptr);
  ASSERT_EQ(copy->params.size(), 3u);
  EXPECT_EQ(copy->params[0].offset, 0u);
  EXPECT_EQ(copy->params[0].size, 16u);
  EXPECT_EQ(copy->params[1].offset, 16u);
  EXPECT_EQ(copy->params[1].size, 4u);
  EXPECT_EQ(copy->params[2].offset, 24u);
  EXPECT_EQ(copy->params[2].size, 8u);
  EXPECT_EQ(copy->param_size, 32u);
  // extern "C": no mangling, sizes still known (8, 1, 2).
  const KernelNvInfo* ext = info.Find("reg_extern_c");
  ASSERT_NE(ext, nullptr);
  ASSERT_EQ(ext->params.size(), 3u);
  EXPECT_EQ(ext->params[0].size, 8u);
  EXPECT_EQ(ext->params[1].size, 1u);
  EXPECT_EQ(ext->params[1].offset, 8u);
  EXPECT_EQ(ext->params[2].size, 2u);
  EXPECT_EQ(ext->params[2].offset, 10u);
  // Template instances.
  const KernelNvInfo* fill_d = info.Find("_Z8reg_fillIdEvPT_S0_i");
  ASSERT_NE(fill_d, nullptr);
  ASSERT_EQ(fill_d->params.size(), 3u);
  EXPECT_EQ(fill_d->params[1].size, 8u);
  EXPECT_EQ(fill_d->params[2].offset, 16u);
  // reg_big(Big, int*, int*): a 32000-byte struct, then two pointers; every
  // offset and size comes from EIATTR_KPARAM_INFO_V2.
  const KernelNvInfo* big = info.Find("_Z7reg_big3BigPiS0_");
  ASSERT_NE(big, nullptr);
  ASSERT_EQ(big->params.size(), 3u);
  EXPECT_EQ(big->params[0].offset, 0u);
  EXPECT_EQ(big->params[0].size, 32000u);
  EXPECT_EQ(big->params[1].offset, 32000u);
  EXPECT_EQ(big->params[1].size, 8u);
  EXPECT_EQ(big->params[2].offset, 32008u);
  EXPECT_EQ(big->params[2].size, 8u);
  EXPECT_EQ(big->param_size, 32016u);
}

// The wrapper we were handed is one of the 24-byte records of this
// executable's .nvFatBinSegment, and its data pointer is the start of a
// container in .nv_fatbin whose bytes are exactly what we parsed.
TEST(Registration, WrapperLivesInNvFatBinSegment) {
  ASSERT_GE(g_wrapper_count, 1);
  const std::vector<uint8_t> exe = testing::ReadFile("/proc/self/exe");
  ElfReader elf;
  ASSERT_TRUE(elf.Parse(exe).ok());
  const int seg = elf.FindSection(".nvFatBinSegment");
  const int fat = elf.FindSection(".nv_fatbin");
  ASSERT_GE(seg, 0);
  ASSERT_GE(fat, 0);
  const uintptr_t base = MainProgramBase();
  const uintptr_t seg_begin = base + elf.sections()[seg].addr;
  const uintptr_t seg_end = seg_begin + elf.sections()[seg].size;
  const uintptr_t wrapper = reinterpret_cast<uintptr_t>(g_wrappers[0]);
  ASSERT_GE(wrapper, seg_begin);
  ASSERT_LT(wrapper, seg_end);
  EXPECT_EQ((wrapper - seg_begin) % sizeof(FatbinWrapperLayout), 0u);

  WrapperInfo w;
  ASSERT_TRUE(ReadWrapper(g_wrappers[0], &w).ok());
  const uintptr_t fat_begin = base + elf.sections()[fat].addr;
  const uintptr_t data = reinterpret_cast<uintptr_t>(w.data);
  ASSERT_GE(data, fat_begin);
  ASSERT_LT(data, fat_begin + elf.sections()[fat].size);
  size_t size = 0;
  ASSERT_TRUE(ContainerSizeInMemory(w.data, &size).ok());
  const auto section = elf.SectionData(fat);
  ASSERT_LE(data - fat_begin + size, section.size());
  EXPECT_EQ(0, std::memcmp(section.data() + (data - fat_begin), w.data, size));
  // And the file-side parse of the whole section sees the same container.
  Fatbin fb;
  ASSERT_TRUE(ParseFatbin(section, &fb).ok());
  bool found = false;
  for (const FatbinContainer& c : fb.containers) found |= (c.offset == data - fat_begin && c.size == size);
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace phos::fatbin
