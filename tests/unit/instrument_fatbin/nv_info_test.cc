// .nv.info parameter tables of the test apps' cubins, checked against the
// kernels' C++ signatures and against the PTX .entry parameter lists.
#include "fatbin/nv_info.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <regex>

#include "fatbin/elf_reader.h"
#include "fatbin/fatbin_reader.h"
#include "test_files.h"

namespace phos::fatbin {
namespace {

using testing::AppNames;
using testing::AppPath;
using testing::ReadFile;

struct P {
  uint32_t offset, size;
};
struct Expected {
  const char* app;
  const char* kernel;  // mangled
  std::vector<P> params;
  uint32_t total;
};

// Signatures from tests/apps/*.cu.
const std::vector<Expected>& ExpectedKernels() {
  static const std::vector<Expected> k = {
      // vector_add(const float*, const float*, float*, int)
      {"vector_add", "_Z10vector_addPKfS0_Pfi", {{0, 8}, {8, 8}, {16, 8}, {24, 4}}, 28},
      // saxpy(float, const float*, float*, int)
      {"saxpy_loop", "_Z5saxpyfPKfPfi", {{0, 4}, {8, 8}, {16, 8}, {24, 4}}, 28},
      // reduce_sum(const unsigned*, unsigned long long*, int)
      {"reduce_shared", "_Z10reduce_sumPKjPyi", {{0, 8}, {8, 8}, {16, 4}}, 20},
      // block_max(const unsigned*, unsigned*, int)
      {"reduce_shared", "_Z9block_maxPKjPji", {{0, 8}, {8, 8}, {16, 4}}, 20},
      // combine(Operands /* 4 pointers + 2 ints = 40 bytes */, int)
      {"struct_of_pointers", "_Z7combine8Operandsi", {{0, 40}, {40, 4}}, 44},
      // scatter(int* const*, int, const int*, int)
      {"pointer_table", "_Z7scatterPKPiiPKii", {{0, 8}, {8, 4}, {16, 8}, {24, 4}}, 28},
      // transform(const unsigned*, unsigned*, int, unsigned)
      {"multi_stream", "_Z9transformPKjPjij", {{0, 8}, {8, 8}, {16, 4}, {20, 4}}, 24},
      // chunk_sums(const unsigned*, int, unsigned long long*)
      {"multi_stream", "_Z10chunk_sumsPKjiPy", {{0, 8}, {8, 4}, {16, 8}}, 24},
  };
  return k;
}

bool LoadCubin(const std::string& app, const std::string& suffix, std::vector<uint8_t>* cubin, std::string* ptx) {
  Fatbin fb;
  if (!ParseFatbin(ReadFile(AppPath(app + suffix)), &fb).ok()) return false;
  const long c = FindCubin(fb, 90);
  if (c < 0) return false;
  *cubin = fb.entries[c].contents;
  const long p = FindPtx(fb);
  if (ptx) *ptx = p >= 0 ? std::string(fb.entries[p].ptx_text()) : std::string();
  return true;
}

TEST(NvInfo, KparamInfoMatchesSignatures) {
  for (const char* suffix : {".fatbin", ".compress_all.fatbin", ".sass.fatbin"}) {
    for (const Expected& e : ExpectedKernels()) {
      const std::string path = AppPath(std::string(e.app) + suffix);
      PHOS_SKIP_WITHOUT(path);
      std::vector<uint8_t> cubin;
      ASSERT_TRUE(LoadCubin(e.app, suffix, &cubin, nullptr)) << path;
      CubinInfo info;
      Status s = ReadCubinInfo(cubin, &info);
      ASSERT_TRUE(s.ok()) << path << ": " << s.ToString();
      EXPECT_EQ(info.sm_arch, 90u);
      const KernelNvInfo* k = info.Find(e.kernel);
      ASSERT_NE(k, nullptr) << e.kernel << " not in " << path;
      ASSERT_EQ(k->params.size(), e.params.size()) << e.kernel;
      for (size_t i = 0; i < e.params.size(); ++i) {
        EXPECT_EQ(k->params[i].ordinal, i) << e.kernel;
        EXPECT_EQ(k->params[i].offset, e.params[i].offset) << e.kernel << " param " << i;
        EXPECT_EQ(k->params[i].size, e.params[i].size) << e.kernel << " param " << i;
        EXPECT_TRUE(k->params[i].in_cbank);
      }
      EXPECT_TRUE(k->has_param_size);
      EXPECT_EQ(k->param_size, e.total) << e.kernel;
      EXPECT_TRUE(k->has_param_cbank);
      EXPECT_EQ(k->param_cbank_size, e.total);
      EXPECT_EQ(k->param_cbank_offset, 0x210u);  // sm_90: parameters start at c[0x0][0x210]
      EXPECT_GT(k->regcount, 0u) << e.kernel;
      EXPECT_FALSE(k->exit_offsets.empty()) << e.kernel;
      EXPECT_EQ(k->cuda_api_version, 130u);  // CUDA 13.0
    }
  }
}

// Every kernel in every app: the cubin's parameter table agrees with the
// PTX .entry parameter list (count and sizes), and every cubin kernel has
// a PTX .entry.
TEST(NvInfo, CubinTablesAgreeWithPtx) {
  static const std::regex kParam(R"(\.param\s+(?:\.align\s+(\d+)\s+)?\.(u|s|b|f)(8|16|32|64)\s+\w+(?:\[(\d+)\])?)");
  for (const std::string& app : AppNames()) {
    PHOS_SKIP_WITHOUT(AppPath(app + ".fatbin"));
    std::vector<uint8_t> cubin;
    std::string ptx;
    ASSERT_TRUE(LoadCubin(app, ".fatbin", &cubin, &ptx));
    CubinInfo info;
    ASSERT_TRUE(ReadCubinInfo(cubin, &info).ok());
    ASSERT_FALSE(info.kernels.empty()) << app;
    for (const KernelNvInfo& k : info.kernels) {
      const std::string head = ".entry " + k.name + "(";
      const size_t at = ptx.find(head);
      ASSERT_NE(at, std::string::npos) << app << ": no PTX entry for " << k.name;
      const size_t close = ptx.find(')', at);
      ASSERT_NE(close, std::string::npos);
      const std::string params = ptx.substr(at + head.size(), close - at - head.size());
      std::vector<uint32_t> sizes;
      for (std::sregex_iterator it(params.begin(), params.end(), kParam), end; it != end; ++it) {
        const uint32_t elem = std::stoul((*it)[3]) / 8;
        sizes.push_back((*it)[4].matched ? elem * std::stoul((*it)[4]) : elem);
      }
      ASSERT_EQ(sizes.size(), k.params.size()) << app << " " << k.name << ":\n" << params;
      for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(sizes[i], k.params[i].size) << k.name << " param " << i;
    }
  }
}

// Records of a hand-made section: formats and bounds.
TEST(NvInfo, RecordFraming) {
  const uint8_t section[] = {
      0x03, 0x1b, 0xff, 0x00,                                // HVAL MAXREG_COUNT 255
      0x01, 0x2a, 0x00, 0x00,                                // NVAL
      0x04, 0x17, 0x0c, 0x00,                                // SVAL KPARAM_INFO, 12 bytes:
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        //   index 0, ordinal 0, offset 0
      0x00, 0xf0, 0x21, 0x00,                                //   size 8, cbank 0x1f
      0x03, 0x19, 0x08, 0x00,                                // HVAL CBANK_PARAM_SIZE 8
  };
  std::vector<NvInfoRecord> records;
  ASSERT_TRUE(ParseNvInfoRecords(section, &records).ok());
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].inline_value, 255);
  EXPECT_EQ(records[2].value.size(), 12u);
  KernelNvInfo k;
  ASSERT_TRUE(ParseKernelNvInfo("k", section, &k).ok());
  ASSERT_EQ(k.params.size(), 1u);
  EXPECT_EQ(k.params[0].size, 8u);
  EXPECT_EQ(k.params[0].cbank, 0x1fu);
  EXPECT_EQ(k.max_reg_count, 255u);
  EXPECT_EQ(k.param_size, 8u);

  // Every truncation that cuts a record is an error naming the offset.
  for (size_t n = 1; n < sizeof(section); ++n) {
    if (n == 4 || n == 8 || n == 24) continue;  // record boundaries
    Status s = ParseNvInfoRecords(std::span<const uint8_t>(section, n), &records);
    ASSERT_FALSE(s.ok()) << n;
    EXPECT_NE(s.message().find("at offset 0x"), std::string::npos) << s.message();
  }
  Status s = ParseNvInfoRecords(std::span<const uint8_t>(section, 14), &records);
  EXPECT_EQ(s.message(), "nv.info: at offset 0xc: expected EIATTR_KPARAM_INFO value (attribute 0x17) of 12 bytes, 2 left");
  // Unknown format byte.
  uint8_t bad[] = {0x09, 0x17, 0x00, 0x00};
  s = ParseNvInfoRecords(bad, &records);
  EXPECT_EQ(s.message(), "nv.info: at offset 0x0: expected record format 1..4 (EIFMT_NVAL..EIFMT_SVAL), found 9");
}

TEST(NvInfo, SemanticChecks) {
  // Two parameters with the same ordinal.
  const uint8_t dup[] = {
      0x04, 0x17, 0x0c, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x21, 0x00,
      0x04, 0x17, 0x0c, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0x08, 0x00, 0x00, 0xf0, 0x21, 0x00,
  };
  KernelNvInfo k;
  Status s = ParseKernelNvInfo("dup", dup, &k);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("duplicate"), std::string::npos) << s.message();
  // A parameter past the declared size.
  const uint8_t past[] = {
      0x04, 0x17, 0x0c, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0x08, 0x00, 0x00, 0xf0, 0x21, 0x00,
      0x03, 0x19, 0x08, 0x00,
  };
  s = ParseKernelNvInfo("past", past, &k);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("ends past the parameter size 8"), std::string::npos) << s.message();
  // KPARAM_INFO with the wrong format.
  const uint8_t wrong[] = {0x03, 0x17, 0x0c, 0x00};
  EXPECT_FALSE(ParseKernelNvInfo("wrong", wrong, &k).ok());
}

// Attribute 0x45 (EIATTR_KPARAM_INFO_V2): nvcc's description of parameters
// past KPARAM_INFO's 14-bit size, a plain u32 size after ordinal and offset.
TEST(NvInfo, KparamInfoV2) {
  const uint8_t big[] = {
      0x04, 0x45, 0x0c, 0x00, 0, 0, 0, 0, 0x01, 0x00, 0x00, 0x7d, 0x08, 0x00, 0x00, 0x00,  // ordinal 1 at 32000, 8 bytes
      0x04, 0x45, 0x0c, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d, 0x00, 0x00,  // ordinal 0 at 0, 32000 bytes
      0x03, 0x19, 0x08, 0x7d,                                                              // CBANK_PARAM_SIZE 32008
  };
  KernelNvInfo k;
  Status s = ParseKernelNvInfo("big", big, &k);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(k.params.size(), 2u);
  EXPECT_EQ(k.params[0].offset, 0u);
  EXPECT_EQ(k.params[0].size, 32000u);
  EXPECT_EQ(k.params[1].offset, 32000u);
  EXPECT_EQ(k.params[1].size, 8u);
  EXPECT_EQ(NvInfoAttrName(0x45), "EIATTR_KPARAM_INFO_V2");
  // A size beyond what CUDA allows is corrupt, not a huge allocation later.
  const uint8_t huge[] = {0x04, 0x45, 0x0c, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0x7f};
  s = ParseKernelNvInfo("huge", huge, &k);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("more than CUDA's 32764"), std::string::npos) << s.message();
}

TEST(NvInfo, EveryPrefixAndRandomFlipsOfACubin) {
  const std::string path = AppPath("reduce_shared.fatbin");
  PHOS_SKIP_WITHOUT(path);
  std::vector<uint8_t> cubin;
  ASSERT_TRUE(LoadCubin("reduce_shared", ".fatbin", &cubin, nullptr));
  CubinInfo info;
  ASSERT_TRUE(ReadCubinInfo(cubin, &info).ok());
  // Prefixes: the section headers sit at the end of an nvcc cubin, so every
  // proper prefix loses some and must fail cleanly.
  for (size_t n = 0; n < cubin.size(); ++n) {
    std::vector<uint8_t> prefix(cubin.begin(), cubin.begin() + n);
    Status s = ReadCubinInfo(prefix, &info);
    ASSERT_FALSE(s.ok()) << n;
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("expected"), std::string::npos) << s.message();
  }
  std::mt19937_64 rng(777);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = cubin;
    for (int f = 0; f < 3; ++f) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    Status s = ReadCubinInfo(b, &info);
    if (!s.ok()) {
      EXPECT_FALSE(s.message().empty());
    }
  }
}

}  // namespace
}  // namespace phos::fatbin
