// Access sets computed in phosd (daemon/session/kernel_access.h,
// access_spec.h): kernel plans from the tests/apps fatbins (nvcc output),
// launch-time lookups against a buffer map, the spec table of copies.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "session/access_spec.h"
#include "session/kernel_access.h"

namespace phos::session {
namespace {

std::vector<std::byte> ReadFixture(const std::string& name) {
  const std::string path = std::string(PHOS_TEST_APPS_DIR) + "/" + name;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << path << " (built by tests/apps)";
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size());
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<std::byte> AsImage(const std::string& text) {
  std::vector<std::byte> out(text.size() + 1);
  std::memcpy(out.data(), text.c_str(), text.size() + 1);
  return out;
}

// The one plan whose mangled name contains `part` (kernel names are
// mangled: "_Z10vector_addPKfS0_Pfi").
std::shared_ptr<KernelAccessPlan> Plan(const ModuleKernels& mk, const std::string& part) {
  std::shared_ptr<KernelAccessPlan> found;
  for (const auto& [name, plan] : mk.kernels) {
    if (name.find(part) != std::string::npos) {
      EXPECT_EQ(found, nullptr) << "two kernels match " << part;
      found = plan;
    }
  }
  EXPECT_NE(found, nullptr) << "no kernel matches " << part;
  return found;
}

ModuleKernels Load(const std::string& fixture) {
  ModuleKernels mk;
  Status s = BuildModuleKernels(ReadFixture(fixture), nullptr, &mk);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return mk;
}

// A parameter block assembled word by word at given offsets.
class Block {
 public:
  template <typename T>
  Block& At(uint32_t offset, T v) {
    if (bytes_.size() < offset + sizeof v) bytes_.resize(offset + sizeof v);
    std::memcpy(bytes_.data() + offset, &v, sizeof v);
    return *this;
  }
  std::span<const uint8_t> span() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// A fake session address space: 1000 buffers of 4 KiB with gaps, so most
// addresses are not in a buffer.
struct Space {
  std::map<uint64_t, uint64_t> buffers, globals;
  uint64_t Buf(int i) const { return 0x7f0000000000ull + static_cast<uint64_t>(i) * 0x2000; }
  Space() {
    for (int i = 0; i < 1000; ++i) buffers[Buf(i)] = 0x1000;
  }
};

struct Expect {
  uint64_t ptr;
  bool write;
};

void ExpectRanges(const CallView& v, std::vector<Expect> want, const std::map<uint64_t, uint64_t>& sizes) {
  ASSERT_EQ(v.ranges.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(v.ranges[i].ptr, want[i].ptr) << i;
    EXPECT_EQ(v.ranges[i].bytes, sizes.at(want[i].ptr)) << "whole buffer " << i;
    EXPECT_EQ(v.ranges[i].write, want[i].write) << i;
  }
}

TEST(KernelAccessTest, ConstPointersAreReadOthersReadWrite) {
  ModuleKernels mk = Load("vector_add.fatbin");
  EXPECT_TRUE(mk.has_ptx);
  auto plan = Plan(mk, "vector_add");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->kind, AccessKind::kSpeculated);
  EXPECT_TRUE(plan->typed);
  EXPECT_EQ(plan->probes.size(), 3u);  // a, b, c; n is a scalar
  Space sp;
  // vector_add(const float* a, const float* b, float* c, int n): 0, 8, 16, 24.
  // Interior pointers name the whole buffer.
  Block p;
  p.At(0, sp.Buf(3) + 16).At(8, sp.Buf(7)).At(16, sp.Buf(9) + 0xffc).At(24, int32_t{1024});
  CallView v;
  ComputeLaunchAccess(*plan, p.span(), sp.buffers, sp.globals, &v);
  EXPECT_EQ(v.kind, AccessKind::kSpeculated);
  ExpectRanges(v, {{sp.Buf(3), false}, {sp.Buf(7), false}, {sp.Buf(9), true}}, sp.buffers);

  // The same buffer through a const and a non-const pointer: once, written.
  // A pointer into a gap between buffers, or one past the end, names nothing.
  Block q;
  q.At(0, sp.Buf(5)).At(8, sp.Buf(5) + 0x1000).At(16, sp.Buf(5) + 64).At(24, int32_t{1});
  ComputeLaunchAccess(*plan, q.span(), sp.buffers, sp.globals, &v);
  ExpectRanges(v, {{sp.Buf(5), true}}, sp.buffers);
  EXPECT_EQ(plan->launches, 2u);
}

TEST(KernelAccessTest, ScalarsAreIgnoredEvenWhenTheyLookLikePointers) {
  auto plan = Plan(Load("saxpy_loop.fatbin"), "saxpy");
  ASSERT_NE(plan, nullptr);
  // saxpy(float a, const float* x, float* y, int n): a@0, x@8, y@16, n@24.
  Space sp;
  Block p;
  p.At(0, 1.5f).At(8, sp.Buf(1)).At(16, sp.Buf(2)).At(24, int32_t{64});
  CallView v;
  ComputeLaunchAccess(*plan, p.span(), sp.buffers, sp.globals, &v);
  ExpectRanges(v, {{sp.Buf(1), false}, {sp.Buf(2), true}}, sp.buffers);
}

TEST(KernelAccessTest, StructOfPointersIsFoundByWordScan) {
  auto plan = Plan(Load("struct_of_pointers.fatbin"), "combine");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->kind, AccessKind::kSpeculated);
  // combine(Operands op, int bins); Operands = {const int* x, y; int* out,
  // histogram; int n, scale} = 40 bytes at 0 -> 5 scanned words; bins @40.
  ASSERT_EQ(plan->probes.size(), 5u);
  for (const auto& pr : plan->probes) EXPECT_TRUE(pr.aggregate_word);
  Space sp;
  Block p;
  p.At(0, sp.Buf(10)).At(8, sp.Buf(11)).At(16, sp.Buf(12)).At(24, sp.Buf(13));
  p.At(32, int32_t{10000}).At(36, int32_t{7}).At(40, int32_t{16});
  CallView v;
  ComputeLaunchAccess(*plan, p.span(), sp.buffers, sp.globals, &v);
  // Words of a struct have no types: every hit is read+write.
  ExpectRanges(v, {{sp.Buf(10), true}, {sp.Buf(11), true}, {sp.Buf(12), true}, {sp.Buf(13), true}},
               sp.buffers);
  // The per-kernel word cache: the four pointer words hit, the n/scale word not.
  EXPECT_EQ(plan->word_hits, (std::vector<uint64_t>{1, 1, 1, 1, 0}));
}

TEST(KernelAccessTest, PointerTableIsSpeculatedWithTheTableOnly) {
  auto plan = Plan(Load("pointer_table.fatbin"), "scatter");
  ASSERT_NE(plan, nullptr);
  // scatter(int* const* dst_table, int tables, const int* src, int n): the
  // destinations live in device memory (the table): speculation cannot see
  // them, validation is what catches such writes.
  Space sp;
  const uint64_t table = sp.Buf(20), src = sp.Buf(21), dst0 = sp.Buf(22), dst1 = sp.Buf(23);
  Block p;
  p.At(0, table).At(8, int32_t{2}).At(16, src).At(24, int32_t{100});
  CallView v;
  ComputeLaunchAccess(*plan, p.span(), sp.buffers, sp.globals, &v);
  EXPECT_EQ(v.kind, AccessKind::kSpeculated);
  ASSERT_EQ(v.ranges.size(), 2u);
  EXPECT_EQ(v.ranges[0].ptr, table);
  EXPECT_EQ(v.ranges[1].ptr, src);
  EXPECT_FALSE(v.ranges[1].write);  // const int*
  for (const auto& r : v.ranges) EXPECT_TRUE(r.ptr != dst0 && r.ptr != dst1);
}

TEST(KernelAccessTest, SassOnlyModulesAreUnvalidatable) {
  ModuleKernels mk = Load("vector_add.sass.fatbin");
  EXPECT_FALSE(mk.has_ptx);
  auto plan = Plan(mk, "vector_add");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->kind, AccessKind::kUnvalidatable);
  Space sp;
  Block p;
  p.At(0, sp.Buf(1)).At(8, sp.Buf(2)).At(16, sp.Buf(3)).At(24, int32_t{1});
  CallView v;
  ComputeLaunchAccess(*plan, p.span(), sp.buffers, sp.globals, &v);
  EXPECT_EQ(v.kind, AccessKind::kUnvalidatable);
  ExpectRanges(v, {{sp.Buf(1), false}, {sp.Buf(2), false}, {sp.Buf(3), true}}, sp.buffers);
}

constexpr char kExternCPtx[] = R"PTX(
.version 8.0
.target sm_90
.address_size 64

.visible .global .align 8 .u64 table_global[4];

.visible .entry ext_kernel(
    .param .u64 ext_p,
    .param .u32 ext_n,
    .param .align 8 .b8 ext_s[16],
    .param .u64 ext_q)
{
    ret;
}
)PTX";

TEST(KernelAccessTest, ExternCKernelsTreatEveryEightByteParamAsACandidate) {
  ModuleKernels mk;
  ASSERT_TRUE(BuildModuleKernels(AsImage(kExternCPtx), nullptr, &mk).ok());
  auto plan = Plan(mk, "ext_kernel");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->kind, AccessKind::kSpeculated);
  EXPECT_FALSE(plan->typed);
  // p@0 (candidate), n@8 (ignored), s@16 (16 bytes: 2 scanned words), q@32.
  ASSERT_EQ(plan->probes.size(), 4u);
  EXPECT_EQ(plan->probes[0].offset, 0u);
  EXPECT_EQ(plan->probes[1].offset, 16u);
  EXPECT_EQ(plan->probes[2].offset, 24u);
  EXPECT_EQ(plan->probes[3].offset, 32u);
  Space sp;
  const uint64_t global = 0x600000000000ull;
  sp.globals[global] = 32;
  Block p;
  p.At(0, sp.Buf(1)).At(8, static_cast<uint32_t>(sp.Buf(2))).At(16, uint64_t{42}).At(24, sp.Buf(3) + 8);
  p.At(32, global + 8);
  CallView v;
  ComputeLaunchAccess(*plan, p.span(), sp.buffers, sp.globals, &v);
  ExpectRanges(v, {{sp.Buf(1), true}, {sp.Buf(3), true}, {global, true}},
               [&] {
                 auto all = sp.buffers;
                 all.insert(sp.globals.begin(), sp.globals.end());
                 return all;
               }());
}

TEST(KernelAccessTest, ShortParameterBlocksAndUnknownKernels) {
  auto plan = Plan(Load("vector_add.fatbin"), "vector_add");
  ASSERT_NE(plan, nullptr);
  Space sp;
  Block p;
  p.At(0, sp.Buf(1));  // only 8 bytes: the other probes are past the end
  CallView v;
  ComputeLaunchAccess(*plan, p.span(), sp.buffers, sp.globals, &v);
  ExpectRanges(v, {{sp.Buf(1), false}}, sp.buffers);
  auto unknown = UnknownKernelPlan("not_in_module");
  ComputeLaunchAccess(*unknown, p.span(), sp.buffers, sp.globals, &v);
  EXPECT_EQ(v.kind, AccessKind::kUnknown);
  EXPECT_FALSE(v.access_known());
  EXPECT_TRUE(v.ranges.empty());
}

TEST(KernelAccessTest, UnreadableImagesYieldNoPlans) {
  ModuleKernels mk;
  EXPECT_FALSE(BuildModuleKernels(AsImage("garbage that is no image"), nullptr, &mk).ok());
  EXPECT_TRUE(mk.kernels.empty());
}

TEST(AccessSpecTest, CopiesAndMemsetsAreExactWithTableRoles) {
  namespace op = wire::op;
  for (wire::ApiId api : {op::kMemcpy, op::kMemcpyAsync, op::kMemcpy2D, op::kMemcpy2DAsync}) {
    const CallSpec* spec = FindCallSpec(api);
    ASSERT_NE(spec, nullptr);
    CallView v;
    v.api = api;
    AddOperand(&v, kSrcOperand, 0x1000, 64);
    AddOperand(&v, kDstOperand, 0x2000, 64);
    EXPECT_EQ(v.kind, AccessKind::kExact) << spec->call;
    ASSERT_EQ(v.ranges.size(), 2u);
    EXPECT_FALSE(v.ranges[0].write) << spec->call;
    EXPECT_TRUE(v.ranges[1].write) << spec->call;
  }
  for (wire::ApiId api : {op::kMemset, op::kMemsetAsync, op::kMemset2D, op::kMemset2DAsync, op::kFree}) {
    CallView v;
    v.api = api;
    AddOperand(&v, kDstOperand, 0x2000, 8);
    ASSERT_EQ(v.ranges.size(), 1u);
    EXPECT_TRUE(v.ranges[0].write);
    EXPECT_EQ(v.kind, AccessKind::kExact);
  }
  // A call the table does not describe never gets a (too small) exact set.
  CallView v;
  v.api = op::kLaunchKernel;
  AddOperand(&v, kDstOperand, 0x2000, 8);
  EXPECT_EQ(v.kind, AccessKind::kUnknown);
}

TEST(AccessStatsTest, CountsByKind) {
  AccessStats stats;
  CallView exact;
  exact.Add(1, 1, true);
  CallView no_memory;  // a stream call: exact, touches nothing, not counted
  CallView spec;
  spec.kind = AccessKind::kSpeculated;
  CallView unval;
  unval.kind = AccessKind::kUnvalidatable;
  for (int i = 0; i < 3; ++i) stats.Count(exact);
  stats.Count(no_memory);
  stats.Count(spec);
  stats.Count(spec);
  stats.Count(unval);
  EXPECT_EQ(stats.exact.load(), 3u);
  EXPECT_EQ(stats.speculated.load(), 2u);
  EXPECT_EQ(stats.unvalidatable.load(), 1u);
  EXPECT_EQ(stats.unknown.load(), 0u);
}

}  // namespace
}  // namespace phos::session

namespace phos::session {
namespace {

// Module-scope variables are found at module scope only (a `.global` load
// inside a function body is not a declaration).
TEST(PtxModuleVariablesTest, FindsModuleScopeDeclarationsOnly) {
  EXPECT_TRUE(PtxDeclaresModuleVariables(".version 8.0\n.target sm_90\n.visible .global .align 4 .u32 counter;\n"));
  EXPECT_TRUE(PtxDeclaresModuleVariables(".const .align 8 .b8 table[64];\n"));
  EXPECT_TRUE(PtxDeclaresModuleVariables(".extern .global .align 4 .u32 x;\n"));
  EXPECT_FALSE(PtxDeclaresModuleVariables(
      ".version 8.0\n.target sm_90\n.visible .entry k(\n.param .u64 p\n)\n{\n  .reg .b64 %rd<3>;\n"
      "  ld.global.u32 %r1, [%rd1];\n  .global .u32 not_at_module_scope;\n}\n"));
  EXPECT_FALSE(PtxDeclaresModuleVariables(""));
}

// The names a checkpoint records as module globals (RecordModuleVariables):
// definitions in .global and .const at module scope, with or without
// linkage, dimensions or an initializer (which may open braces); not
// .extern declarations, texture references or anything inside a function.
TEST(PtxModuleVariablesTest, NamesTheVariablesTheModuleDefines) {
  const std::string ptx =
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".visible .global .align 4 .u32 counter;\n"
      ".global .align 4 .u32 _ZZ4stepE6hidden = 100;\n"
      ".const .align 8 .b8 table[64] = {1, 2, 3};\n"
      ".visible .const .align 4 .f32 scale[4][2];\n"
      ".global .align 1 .b8 $str[4] = {104, 105, 10, 0};\n"
      ".extern .global .align 4 .u32 elsewhere;\n"
      ".global .texref tex;\n"
      ".extern .shared .align 16 .b8 dyn[];\n"
      ".visible .entry k(\n.param .u64 p\n)\n{\n  .global .u32 in_body;\n  ret;\n}\n"
      ".weak .global .align 8 .u64 after_the_kernel;\n";
  EXPECT_EQ(PtxModuleVariableNames(ptx),
            (std::vector<std::string>{"counter", "_ZZ4stepE6hidden", "table", "scale", "$str", "after_the_kernel"}));
  EXPECT_TRUE(PtxModuleVariableNames("").empty());
}

// The device heap is needed by modules declaring a heap function, and the
// module-load analysis finds a kernel calling an external function the
// device runtime does not provide — but not one calling only vprintf and
// malloc, nor a module whose only .extern is dynamic shared memory.
TEST(PtxExternFunctionsTest, HeapAndUncheckedExternsAreFoundByName) {
  const std::string head = ".version 8.0\n.target sm_90\n.address_size 64\n";
  const std::string runtime_only = head +
      ".extern .func (.param .b32 func_retval0) vprintf\n(\n.param .b64 a,\n.param .b64 b\n)\n;\n"
      ".extern .func  (.param .b64 func_retval0) __cuda_syscall_aligned_malloc\n(\n.param .b64 n,\n"
      ".param .b64 a\n)\n;\n"
      ".extern .shared .align 16 .b8 dyn[];\n"
      ".visible .entry k(.param .u64 p)\n{\n  .reg .b64 %rd<3>;\n  ld.param.u64 %rd1, [p];\n"
      "  { .param .b64 n; .param .b64 a; .param .b64 r;\n    st.param.b64 [n], 16; st.param.b64 [a], 64;\n"
      "    call.uni (r), __cuda_syscall_aligned_malloc, (n, a);\n    ld.param.b64 %rd2, [r]; }\n"
      "  st.global.u64 [%rd1], %rd2;\n  ret;\n}\n";
  EXPECT_TRUE(PtxUsesDeviceHeap(runtime_only));
  EXPECT_TRUE(UncheckedKernels(runtime_only).empty());
  const std::string foreign = head + ".extern .func ext_write\n(\n.param .b64 p\n)\n;\n"
      ".visible .entry k(.param .u64 p)\n{\n  .reg .b64 %rd<2>;\n  ld.param.u64 %rd1, [p];\n"
      "  { .param .b64 q;\n    st.param.b64 [q], %rd1;\n    call.uni ext_write, (q); }\n  ret;\n}\n";
  EXPECT_FALSE(PtxUsesDeviceHeap(foreign));
  const auto unchecked = UncheckedKernels(foreign);
  ASSERT_EQ(unchecked.size(), 1u);
  EXPECT_NE(unchecked.at("k").find("ext_write"), std::string::npos) << unchecked.at("k");
}

// A module calling cudaGraphSetConditional writes a conditional handle's
// slot, which no access set names: its kernels are of unknown access, and
// the module is flagged (phosd launches them only on a backend that
// implements phos's handles).
TEST(PtxExternFunctionsTest, KernelsSettingGraphConditionalsAreOfUnknownAccess) {
  const std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".extern .func cudaGraphSetConditional\n(\n.param .b64 h,\n.param .b32 v\n)\n;\n"
      ".visible .entry setc(.param .u64 h, .param .u64 flag)\n{\n  .reg .b32 %r<2>;\n  .reg .b64 %rd<3>;\n"
      "  ld.param.u64 %rd1, [h];\n  ld.param.u64 %rd2, [flag];\n  ld.global.u32 %r1, [%rd2];\n"
      "  { .param .b64 a; .param .b32 b;\n    st.param.b64 [a], %rd1; st.param.b32 [b], %r1;\n"
      "    call.uni cudaGraphSetConditional, (a, b); }\n  ret;\n}\n";
  EXPECT_TRUE(PtxSetsGraphConditionals(ptx));
  EXPECT_FALSE(PtxUsesDeviceHeap(ptx));
  ModuleKernels mk;
  ASSERT_TRUE(BuildModuleKernels(AsImage(ptx), nullptr, &mk).ok());
  EXPECT_TRUE(mk.sets_graph_conditionals);
  ASSERT_EQ(mk.kernels.count("setc"), 1u);
  EXPECT_TRUE(mk.kernels.at("setc")->sets_graph_conditionals);
  EXPECT_EQ(mk.kernels.at("setc")->kind, AccessKind::kUnknown);
  EXPECT_NE(mk.kernels.at("setc")->unvalidatable_reason.find("cudaGraphSetConditional"), std::string::npos);
  EXPECT_FALSE(PtxSetsGraphConditionals(".extern .func vprintf\n(\n.param .b64 a\n)\n;\n"));
}

// Only the kernels that reach cudaGraphSetConditional are setters: directly,
// through a .func, or through a call by pointer (a target the scan cannot
// name). The module's other kernels keep their plans and run on any backend
// (the whole module's kernels were refused once, which stopped
// checkpoint_app's plain steps on a GPU).
TEST(PtxExternFunctionsTest, OnlyKernelsReachingSetConditionalAreSetters) {
  const std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".extern .func cudaGraphSetConditional\n(\n.param .b64 h,\n.param .b32 v\n)\n;\n"
      ".func helper(.param .b64 h)\n{\n  .reg .b64 %rd<2>;\n  .reg .b32 %r<2>;\n"
      "  ld.param.u64 %rd1, [h];\n  mov.u32 %r1, 1;\n"
      "  { .param .b64 a; .param .b32 b;\n    st.param.b64 [a], %rd1; st.param.b32 [b], %r1;\n"
      "    call.uni cudaGraphSetConditional, (a, b); }\n  ret;\n}\n"
      ".func idle(.param .b64 h)\n{\n  ret;\n}\n"
      ".visible .entry via_helper(.param .u64 h)\n{\n  .reg .b64 %rd<2>;\n  ld.param.u64 %rd1, [h];\n"
      "  { .param .b64 a;\n    st.param.b64 [a], %rd1;\n    call.uni helper, (a); }\n  ret;\n}\n"
      ".visible .entry plain(.param .u64 p)\n{\n  .reg .b64 %rd<2>;\n  .reg .b32 %r<2>;\n"
      "  ld.param.u64 %rd1, [p];\n  cvta.to.global.u64 %rd1, %rd1;\n  mov.u32 %r1, 7;\n"
      "  st.global.u32 [%rd1], %r1;\n"
      "  { .param .b64 a;\n    st.param.b64 [a], %rd1;\n    call.uni idle, (a); }\n  ret;\n}\n";
  const auto setters = KernelsSettingGraphConditionals(ptx);
  ASSERT_TRUE(setters.has_value());
  EXPECT_EQ(*setters, (std::set<std::string>{"via_helper"}));
  ModuleKernels mk;
  ASSERT_TRUE(BuildModuleKernels(AsImage(ptx), nullptr, &mk).ok());
  EXPECT_TRUE(mk.sets_graph_conditionals);
  ASSERT_EQ(mk.kernels.count("via_helper"), 1u);
  ASSERT_EQ(mk.kernels.count("plain"), 1u);
  EXPECT_TRUE(mk.kernels.at("via_helper")->sets_graph_conditionals);
  EXPECT_EQ(mk.kernels.at("via_helper")->kind, AccessKind::kUnknown);
  EXPECT_FALSE(mk.kernels.at("plain")->sets_graph_conditionals);
  EXPECT_EQ(mk.kernels.at("plain")->kind, AccessKind::kSpeculated);
  // A module that does not declare it has no setters, parsed or not.
  EXPECT_EQ(KernelsSettingGraphConditionals("garbage"), std::set<std::string>{});
  // A call through a pointer in a module that declares it counts.
  const std::string by_pointer = ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".extern .func cudaGraphSetConditional\n(\n.param .b64 h,\n.param .b32 v\n)\n;\n"
      ".visible .entry k(.param .u64 f)\n{\n  .reg .b64 %rd<2>;\n  ld.param.u64 %rd1, [f];\n"
      "  proto : .callprototype ()_ ();\n  call %rd1, proto;\n  ret;\n}\n";
  EXPECT_EQ(KernelsSettingGraphConditionals(by_pointer), std::set<std::string>{"k"});
  // Unparseable PTX that declares it: every kernel may set.
  EXPECT_EQ(KernelsSettingGraphConditionals(".extern .func cudaGraphSetConditional\n(\n.param .b64 h\n)\n;\n"
                                            ".visible .entry k( {{{"),
            std::nullopt);
}

// A launch of a kernel whose module may use variables by symbol writes the
// variables it is given (its own module's); others do not. A variable the
// parameters already name is merged (read+write), not repeated.
TEST(PtxModuleVariablesTest, LaunchAddsItsModulesVariables) {
  KernelAccessPlan plan;
  plan.kind = AccessKind::kSpeculated;
  plan.probes.push_back({0, 0, false, false});
  plan.probes.push_back({8, 0, true, false});
  std::map<uint64_t, uint64_t> buffers{{0x1000, 256}};
  std::map<uint64_t, uint64_t> globals{{0x9000, 4}, {0x9100, 16}, {0xa000, 8}};
  std::vector<uint8_t> params(16);
  const uint64_t p = 0x1010, g = 0x9104;  // a buffer (written), a variable (read)
  std::memcpy(params.data(), &g, 8);
  std::memcpy(params.data() + 8, &p, 8);
  CallView without, with;
  ComputeLaunchAccess(plan, params, buffers, globals, &without);
  const std::vector<std::pair<uint64_t, uint64_t>> own{{0x9000, 4}, {0x9100, 16}};
  ComputeLaunchAccess(plan, params, buffers, globals, &with, own);
  ASSERT_EQ(without.ranges.size(), 2u);
  EXPECT_FALSE(without.ranges[0].write);  // the variable, through its pointer: read
  ASSERT_EQ(with.ranges.size(), 3u);      // not 0xa000: another module's
  EXPECT_EQ(with.ranges[0].ptr, 0x9100u);
  EXPECT_TRUE(with.ranges[0].write);      // merged: its module may write it by symbol
  EXPECT_EQ(with.ranges[1].ptr, 0x1000u);
  EXPECT_EQ(with.ranges[2].ptr, 0x9000u);
  EXPECT_EQ(with.ranges[2].bytes, 4u);
  EXPECT_TRUE(with.ranges[2].write);
}

}  // namespace
}  // namespace phos::session
