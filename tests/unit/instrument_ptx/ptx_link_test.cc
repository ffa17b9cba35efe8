// Linking PTX modules (ptx/ptx_link.h): the shapes a JIT link of several
// PTX texts has — a kernel calling a device function of another input
// (numba's `link=`), shared private names, variables, weak definitions,
// the device runtime's declarations left external, .file/.loc numbering.
#include "ptx/ptx_link.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ptx/ptx_parser.h"

namespace phos::ptx {
namespace {

const char* const kKernel = R"(
.version 8.5
.target sm_90
.address_size 64
.file 1 "kernel.py"
.extern .func (.param .b64 func_retval0) cube_plus(.param .b64 x);
.extern .global .align 8 .f64 scale;
.func (.param .b64 func_retval0) helper(.param .b64 x)
{
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [x];
  st.param.b64 [func_retval0], %rd1;
  ret;
}
.visible .entry k(.param .u64 out)
{
  .reg .b64 %rd<6>;
  .reg .f64 %fd<4>;
  .loc 1 3 0
  ld.param.u64 %rd1, [out];
  ld.global.f64 %fd1, [scale];
  {
  .param .b64 param0;
  st.param.f64 [param0+0], %fd1;
  .param .b64 retval0;
  call.uni (retval0), cube_plus, (param0);
  ld.param.f64 %fd2, [retval0+0];
  }
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd1;
  .param .b64 retval0;
  call.uni (retval0), helper, (param0);
  ld.param.b64 %rd2, [retval0+0];
  }
  st.global.f64 [%rd1], %fd2;
  ret;
}
)";

const char* const kLibrary = R"(
.version 9.0
.target sm_90
.address_size 64
.file 1 "dev.cu"
.visible .global .align 8 .f64 scale = 0d4000000000000000;
.func (.param .b64 func_retval0) helper(.param .b64 x)
{
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [x];
  add.u64 %rd2, %rd1, 1;
  st.param.b64 [func_retval0], %rd2;
  ret;
}
.visible .func (.param .b64 func_retval0) cube_plus(.param .b64 x)
{
  .reg .f64 %fd<4>;
  .reg .b64 %rd<3>;
  .loc 1 7 0
  ld.param.f64 %fd1, [x];
  mul.f64 %fd2, %fd1, %fd1;
  fma.rn.f64 %fd3, %fd2, %fd1, 0d3FF0000000000000;
  {
  .param .b64 param0;
  st.param.b64 [param0+0], 0;
  .param .b64 retval0;
  call.uni (retval0), helper, (param0);
  ld.param.b64 %rd1, [retval0+0];
  }
  st.param.f64 [func_retval0], %fd3;
  ret;
}
)";

Module Parsed(const std::string& text) {
  Module m;
  Status s = ParseModule(text, &m);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return m;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// The emitter separates an opcode from its operands with a tab.
std::string Spaced(std::string s) {
  std::replace(s.begin(), s.end(), '\t', ' ');
  return s;
}

TEST(PtxLink, AKernelCallsADeviceFunctionOfAnotherInput) {
  std::string text;
  Status s = LinkPtxTexts({kKernel, kLibrary}, &text);
  ASSERT_TRUE(s.ok()) << s.ToString();
  text = Spaced(text);
  Module m = Parsed(text);
  EXPECT_EQ(m.version, "9.0");  // the highest
  const Function* cube = m.FindFunction("cube_plus");
  ASSERT_NE(cube, nullptr);
  EXPECT_EQ(Count(text, ".extern"), 0u) << text;  // every declaration resolved
  EXPECT_EQ(Count(text, ".visible .global .align 8 .f64 scale"), 1u) << text;
  // Each module keeps its own private `helper`, renamed in its definition
  // and at its call site.
  for (const char* helper : {"helper$phos0", "helper$phos1"}) {
    const Function* f = m.FindFunction(helper);
    ASSERT_NE(f, nullptr) << helper;
    EXPECT_TRUE(f->has_body) << helper;
    EXPECT_NE(text.find(std::string("call.uni (retval0), ") + helper + ", (param0)"), std::string::npos) << text;
  }
  EXPECT_EQ(m.FindFunction("helper"), nullptr) << text;
  EXPECT_NE(text.find("ret;"), std::string::npos);
  // .file 1 of the second input is 2 now, and its .loc follows.
  EXPECT_NE(text.find(".file 2 \"dev.cu\""), std::string::npos) << text;
  EXPECT_NE(text.find(".loc 2 7 0"), std::string::npos) << text;
  EXPECT_NE(text.find(".loc 1 3 0"), std::string::npos) << text;
  // Every function is declared before the first body.
  const size_t first_body = text.find(".entry k");
  EXPECT_LT(text.find("cube_plus("), first_body);
  EXPECT_LT(text.find(".f64 scale"), first_body);
}

TEST(PtxLink, TextsMayEndInANul) {
  std::string text;
  Status s = LinkPtxTexts({std::string(kKernel) + '\0', std::string(kLibrary) + '\0'}, &text);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(PtxLink, TwoStrongDefinitionsAreRefusedByName) {
  std::string text;
  Status s = LinkPtxTexts({kLibrary, kLibrary}, &text);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'scale'"), std::string::npos) << s.message();
}

TEST(PtxLink, AWeakDefinitionGivesWayToAStrongOne) {
  std::string weak = kLibrary;
  weak.replace(weak.find(".visible .func (.param .b64 func_retval0) cube_plus"), 8, ".weak   ");
  weak.replace(weak.find(".visible .global"), 8, ".weak   ");
  std::string text;
  Status s = LinkPtxTexts({weak, kLibrary, kKernel}, &text);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Count(text, "fma.rn.f64"), 1u) << text;  // one body of cube_plus
  EXPECT_EQ(Count(text, ".weak"), 0u) << text;       // the strong one was kept
}

TEST(PtxLink, UndefinedDeclarationsStayExternal) {
  std::string text;
  ASSERT_TRUE(LinkPtxTexts({kKernel}, &text).ok());
  EXPECT_NE(text.find(".extern .func (.param .b64 func_retval0) cube_plus"), std::string::npos) << text;
  EXPECT_NE(text.find(".extern .global .align 8 .f64 scale"), std::string::npos) << text;
}

TEST(PtxLink, TheNewestTargetWinsAndBadInputsAreRefused) {
  std::string older = kLibrary;
  older.replace(older.find("sm_90"), 5, "sm_80");
  std::string text;
  ASSERT_TRUE(LinkPtxTexts({older, kKernel}, &text).ok());
  EXPECT_NE(text.find(".target sm_90"), std::string::npos) << text;
  std::string narrow = kLibrary;
  narrow.replace(narrow.find(".address_size 64"), 16, ".address_size 32");
  EXPECT_EQ(LinkPtxTexts({kKernel, narrow}, &text).code(), Status::Code::kInvalidArgument);
  Status bad = LinkPtxTexts({kKernel, "not ptx"}, &text);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("input 1"), std::string::npos) << bad.message();
  EXPECT_FALSE(LinkPtxTexts({}, &text).ok());
}

}  // namespace
}  // namespace phos::ptx
