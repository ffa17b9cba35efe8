// The nvJitLink shim's record of a link: which inputs are PTX, and where
// the PTX of the linked cubin comes from.
#include "link_record.h"

#include <gtest/gtest.h>

#include <string>

namespace phos::jit {
namespace {

const std::string kPtx = ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";

LinkRecord WithOptions(std::initializer_list<const char*> options) {
  LinkRecord r;
  std::vector<const char*> v(options);
  r.SetOptions(static_cast<uint32_t>(v.size()), v.data());
  return r;
}

TEST(LinkRecord, LooksLikePtxOnlyForPtxText) {
  EXPECT_TRUE(LooksLikePtx(kPtx));
  EXPECT_TRUE(LooksLikePtx(kPtx + std::string(3, '\0')));
  EXPECT_FALSE(LooksLikePtx(std::string("\x7f" "ELF") + kPtx));            // a cubin that quotes PTX
  EXPECT_FALSE(LooksLikePtx(std::string("\x50\xed\x55\xba", 4) + kPtx));   // a fatbin container
  EXPECT_FALSE(LooksLikePtx("!<arch>\n" + kPtx));                           // a static library
  EXPECT_FALSE(LooksLikePtx(".version 9.0\n"));                             // no .target
  EXPECT_FALSE(LooksLikePtx(std::string(".version 9.0\n\0.target sm_90\n", 28)));  // .target past a NUL
  EXPECT_FALSE(LooksLikePtx(""));
  EXPECT_FALSE(LooksLikePtx("\x7f"));
}

TEST(LinkRecord, OnePtxInputIsTheSource) {
  LinkRecord r = WithOptions({"-arch=sm_90"});
  r.Add(InputType::kPtx, kPtx + '\0', "k", nullptr);
  EXPECT_EQ(r.Source(), PtxSource::kSinglePtx);
  EXPECT_EQ(r.single_ptx(), kPtx);  // without the NUL
}

TEST(LinkRecord, AnInputOfTypeAnyIsPtxByContent) {
  LinkRecord r = WithOptions({"-arch=sm_90"});
  r.Add(InputType::kAny, kPtx, nullptr, nullptr);
  EXPECT_EQ(r.Source(), PtxSource::kSinglePtx);
  LinkRecord elf = WithOptions({"-arch=sm_90"});
  elf.Add(InputType::kAny, std::string("\x7f" "ELF\x02\x01"), nullptr, nullptr);
  EXPECT_EQ(elf.Source(), PtxSource::kNone);
  EXPECT_NE(elf.Why().find("type ANY that is not PTX"), std::string::npos) << elf.Why();
}

TEST(LinkRecord, AllLtoIrWithLtoIsLinkedAgain) {
  LinkRecord r = WithOptions({"-arch=sm_90", "-lto"});
  r.Add(InputType::kLtoIr, std::string("\x01\x02\x00\x03", 4), "a", nullptr);
  r.Add(InputType::kLtoIr, "", nullptr, "/tmp/b.ltoir");
  EXPECT_EQ(r.Source(), PtxSource::kLtoRelink);
  ASSERT_EQ(r.inputs().size(), 2u);
  EXPECT_EQ(r.inputs()[0].bytes, std::string("\x01\x02\x00\x03", 4));  // binary, NULs kept
  EXPECT_EQ(r.inputs()[0].name, "a");
  EXPECT_EQ(r.inputs()[1].file, "/tmp/b.ltoir");
  EXPECT_EQ(r.options(), (std::vector<std::string>{"-arch=sm_90", "-lto"}));
}

TEST(LinkRecord, NoSourceSaysWhatWasLinked) {
  LinkRecord none = WithOptions({"-arch=sm_90"});
  EXPECT_EQ(none.Source(), PtxSource::kNone);
  EXPECT_EQ(none.Why(), "no inputs");

  LinkRecord with_lib = WithOptions({"-arch=sm_90"});
  with_lib.Add(InputType::kPtx, kPtx, nullptr, nullptr);
  with_lib.Add(InputType::kLibrary, "!<arch>\n", nullptr, "/usr/local/cuda/lib64/libcufft_static.a");
  EXPECT_EQ(with_lib.Source(), PtxSource::kNone);
  EXPECT_NE(with_lib.Why().find("a library"), std::string::npos) << with_lib.Why();
  EXPECT_TRUE(with_lib.inputs()[1].bytes.empty());  // only PTX and LTO-IR bytes are kept

  LinkRecord no_lto = WithOptions({"-arch=sm_90"});
  no_lto.Add(InputType::kLtoIr, "x", nullptr, nullptr);
  EXPECT_EQ(no_lto.Source(), PtxSource::kNone);
  EXPECT_EQ(no_lto.Why(), "LTO-IR without -lto");

  LinkRecord mixed = WithOptions({"-arch=sm_90", "-lto"});
  mixed.Add(InputType::kLtoIr, "x", nullptr, nullptr);
  mixed.Add(InputType::kCubin, "\x7f" "ELF", nullptr, nullptr);
  EXPECT_EQ(mixed.Source(), PtxSource::kNone);
  EXPECT_NE(mixed.Why().find("a cubin"), std::string::npos) << mixed.Why();

  LinkRecord ptx_and_lto_no_lto = WithOptions({"-arch=sm_90"});
  ptx_and_lto_no_lto.Add(InputType::kLtoIr, "x", nullptr, nullptr);
  ptx_and_lto_no_lto.Add(InputType::kPtx, kPtx, nullptr, nullptr);
  EXPECT_EQ(ptx_and_lto_no_lto.Source(), PtxSource::kNone);
  EXPECT_EQ(ptx_and_lto_no_lto.Why(), "LTO-IR without -lto");
}

// Several PTX texts, or PTX with LTO-IR under -lto (numba's `link=[x.ptx]`),
// are linked as PTX by phos; the device runtime library stays out.
TEST(LinkRecord, SeveralPtxInputsOrPtxWithLtoIrAreLinkedByPhos) {
  LinkRecord two = WithOptions({"-arch=sm_90"});
  two.Add(InputType::kPtx, kPtx, nullptr, nullptr);
  two.Add(InputType::kPtx, kPtx, nullptr, nullptr);
  two.Add(InputType::kLibrary, "!<arch>\n", "libcudadevrt.a", nullptr);
  EXPECT_EQ(two.Source(), PtxSource::kPtxLink);
  EXPECT_EQ(two.Why(), "2 PTX and 0 LTO-IR input(s)");
  LinkRecord mixed = WithOptions({"-arch=sm_90", "-lto"});
  mixed.Add(InputType::kLtoIr, "x", nullptr, nullptr);
  mixed.Add(InputType::kPtx, kPtx, nullptr, nullptr);
  EXPECT_EQ(mixed.Source(), PtxSource::kPtxLink);
  EXPECT_EQ(mixed.single_ptx(), "");  // no single text: phos links them
}

// numba links a cooperative kernel's PTX with CUDA's device runtime
// (cuda.core passes libcudadevrt.a's bytes and its file name): the PTX is
// the source, its cudaCG* calls left for the sim's interpreter to define.
TEST(LinkRecord, PtxWithTheDeviceRuntimeLibraryIsThatPtx) {
  for (const char* name : {"libcudadevrt.a", "/usr/local/cuda/lib64/libcudadevrt.a"}) {
    LinkRecord r = WithOptions({"-arch=sm_90"});
    r.Add(InputType::kPtx, kPtx, "<cudapy-ptx>", nullptr);
    r.Add(InputType::kLibrary, "!<arch>\n", name, nullptr);
    EXPECT_EQ(r.Source(), PtxSource::kSinglePtx) << name;
    EXPECT_EQ(r.single_ptx(), kPtx) << name;
    EXPECT_TRUE(r.inputs()[1].is_device_runtime);
  }
  LinkRecord by_path = WithOptions({"-arch=sm_90"});
  by_path.Add(InputType::kLibrary, "!<arch>\n", nullptr, "/opt/cuda/lib64/libcudadevrt.a");  // AddFile
  by_path.Add(InputType::kPtx, kPtx, nullptr, nullptr);
  EXPECT_EQ(by_path.Source(), PtxSource::kSinglePtx);
  EXPECT_EQ(by_path.single_ptx(), kPtx);
  // The library alone, or a library named alike: no source.
  LinkRecord alone = WithOptions({"-arch=sm_90"});
  alone.Add(InputType::kLibrary, "!<arch>\n", "libcudadevrt.a", nullptr);
  EXPECT_EQ(alone.Source(), PtxSource::kNone);
  LinkRecord other = WithOptions({"-arch=sm_90"});
  other.Add(InputType::kPtx, kPtx, nullptr, nullptr);
  other.Add(InputType::kLibrary, "!<arch>\n", "libcudadevrt.a.old", nullptr);
  EXPECT_EQ(other.Source(), PtxSource::kNone);
  EXPECT_NE(other.Why().find("a library"), std::string::npos) << other.Why();
}

// numba-cuda 0.2x compiles a kernel that links a library to LTO-IR: LTO-IR
// plus libcudadevrt.a is linked again with -ptx, the library left out.
TEST(LinkRecord, LtoIrWithTheDeviceRuntimeLibraryIsLinkedAgain) {
  LinkRecord r = WithOptions({"-arch=sm_90", "-lto"});
  r.Add(InputType::kLtoIr, "x", "<cudapy-ltoir>", nullptr);
  r.Add(InputType::kLibrary, "!<arch>\n", "libcudadevrt.a", nullptr);
  EXPECT_EQ(r.Source(), PtxSource::kLtoRelink);
  LinkRecord alone = WithOptions({"-arch=sm_90", "-lto"});
  alone.Add(InputType::kLibrary, "!<arch>\n", "libcudadevrt.a", nullptr);
  EXPECT_EQ(alone.Source(), PtxSource::kNone);
  EXPECT_EQ(alone.Why(), "only CUDA's device runtime library");
}

TEST(LinkRecord, NullOptionsAreSkipped) {
  LinkRecord r;
  const char* options[] = {"-arch=sm_90", nullptr, "-lto"};
  r.SetOptions(3, options);
  EXPECT_EQ(r.options(), (std::vector<std::string>{"-arch=sm_90", "-lto"}));
  r.SetOptions(5, nullptr);
  EXPECT_TRUE(r.options().empty());
}

}  // namespace
}  // namespace phos::jit
