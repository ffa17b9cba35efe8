// Structural tests of the twin pass on hand-written PTX, the report decoder
// and the twin cache.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ptx/ptx_emitter.h"
#include "ptx/ptx_parser.h"
#include "twin/twin_abi.h"
#include "twin/twin_cache.h"
#include "twin/twin_pass.h"
#include "twin_test_util.h"

namespace phos::twin {
namespace {

const char* kHeader = ".version 8.0\n.target sm_80\n.address_size 64\n";

struct Twinned {
  ptx::Module in, out;
  TwinInfo info;
  std::string text;  // emitted twin
  std::string flat;  // the same with tabs as spaces, for searching
};

Twinned Twin(const std::string& body, TwinMode mode = TwinMode::kWrites, TwinOptions opts = {}) {
  Twinned t;
  Status s = ptx::ParseModule(std::string(kHeader) + body, &t.in);
  EXPECT_TRUE(s.ok()) << s.ToString();
  opts.mode = mode;
  s = MakeTwin(t.in, opts, &t.out, &t.info);
  EXPECT_TRUE(s.ok()) << s.ToString();
  t.text = ptx::EmitModule(t.out);
  t.flat = t.text;
  for (char& c : t.flat)
    if (c == '\t') c = ' ';
  return t;
}

// ptxas must accept what the pass produced (skipped without a toolkit).
void ExpectAssembles(const std::string& text) {
  const std::string ptxas = PHOS_PTXAS;
  if (ptxas.empty()) return;
  for (const char* arch : {"sm_80", "sm_90"}) {
    std::string diag;
    EXPECT_EQ(test::RunPtxas(ptxas, text, arch, &diag), 0) << arch << ":\n" << diag << "\n" << text;
  }
}

// Index of the first instruction in f matching pred, or -1.
template <typename Pred>
int FindInstr(const ptx::Function& f, Pred pred, int from = 0) {
  for (int i = from; i < static_cast<int>(f.body.size()); ++i)
    if (const auto* in = std::get_if<ptx::Instruction>(&f.body[i]); in && pred(*in)) return i;
  return -1;
}

const ptx::Instruction& InstrAt(const ptx::Function& f, int i) { return std::get<ptx::Instruction>(f.body.at(i)); }

const char* kPointerTable = R"(
.visible .entry table_store(.param .u64 tbl, .param .u32 v)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [tbl];
  ld.param.u32 %r1, [v];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u64 %rd3, [%rd2+8];
  st.u32 [%rd3], %r1;
  ret;
}
)";

TEST(twin_pass, StoreThroughPointerFromTableIsChecked) {
  Twinned t = Twin(kPointerTable);
  ASSERT_EQ(t.info.functions.size(), 1u);
  const auto& fi = t.info.functions[0];
  EXPECT_EQ(fi.name, "table_store");
  EXPECT_EQ(fi.twin_name, "table_store__phos_twin");
  EXPECT_EQ(fi.stores, 1u);
  EXPECT_EQ(fi.loads, 0u);
  EXPECT_EQ(fi.generic, 1u);
  EXPECT_EQ(test::CountInsertedChecks(t.out), 1);

  const ptx::Function* f = t.out.FindFunction("table_store__phos_twin");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(t.out.FindFunction("table_store"), nullptr);
  // The generic store is tested with isspacep.global on its address first.
  int store = FindInstr(*f, [](const ptx::Instruction& in) { return in.FullOpcode() == "st.u32"; });
  int isp = FindInstr(*f, [](const ptx::Instruction& in) { return in.info.op == ptx::Opcode::kIsspacep; });
  ASSERT_GE(isp, 0);
  ASSERT_GT(store, isp);
  EXPECT_EQ(InstrAt(*f, isp).FullOpcode(), "isspacep.global");
  int addr = FindInstr(*f, [](const ptx::Instruction& in) {
    return in.operands.size() == 2 && in.operands[0].name == "%phos_rd0" && in.operands[1].name == "%rd3";
  });
  EXPECT_GE(addr, 0) << t.text;
  EXPECT_LT(addr, isp);
  // Read mode checks the table load too.
  Twinned r = Twin(kPointerTable, TwinMode::kReadsAndWrites);
  EXPECT_EQ(r.info.functions[0].loads, 1u);
  EXPECT_EQ(r.info.functions[0].stores, 1u);
  EXPECT_EQ(test::CountInsertedChecks(r.out), 2);
  ExpectAssembles(t.text);
  ExpectAssembles(r.text);
}

TEST(twin_pass, KernelGetsAbiParamsInOrder) {
  Twinned t = Twin(kPointerTable);
  const ptx::Function* f = t.out.FindFunction("table_store__phos_twin");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->params.size(), 5u);
  EXPECT_EQ(f->params[0].name, "tbl");
  EXPECT_EQ(f->params[1].name, "v");
  EXPECT_EQ(f->params[2].name, "__phos_ranges");
  EXPECT_EQ(f->params[2].type, ptx::Type::kU64);
  EXPECT_EQ(f->params[3].name, "__phos_nranges");
  EXPECT_EQ(f->params[3].type, ptx::Type::kU32);
  EXPECT_EQ(f->params[4].name, "__phos_report");
  EXPECT_EQ(f->params[4].type, ptx::Type::kU64);
}

TEST(twin_pass, KernelIdFromOptions) {
  TwinOptions opts;
  opts.kernel_ids["table_store"] = 77;
  Twinned t = Twin(kPointerTable, TwinMode::kWrites, opts);
  EXPECT_EQ(t.info.functions[0].kernel_id, 77u);
  EXPECT_NE(t.flat.find("mov.u32 %phos_kid, 77;"), std::string::npos) << t.text;
  Twinned d = Twin(kPointerTable);
  EXPECT_EQ(d.info.functions[0].kernel_id, kUnknownKernelId);
}

const char* kGuarded = R"(
.visible .entry guarded(.param .u64 out, .param .u32 n)
{
  .reg .pred %p<3>;
  .reg .b32 %r<3>;
  .reg .f32 %f<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r2, %tid.x;
  setp.lt.u32 %p1, %r2, %r1;
  setp.ge.u32 %p2, %r2, %r1;
  mov.f32 %f1, 0f3F800000;
  @%p1 st.global.f32 [%rd2+4], %f1;
  @!%p2 st.global.v4.f32 [%rd2+16], {%f1, %f1, %f1, %f1};
  ret;
}
)";

TEST(twin_pass, GuardedStoresKeepTheirGuardAndCheckOnlyWhenTaken) {
  Twinned t = Twin(kGuarded);
  const ptx::Function* f = t.out.FindFunction("guarded__phos_twin");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(t.info.functions[0].stores, 2u);
  EXPECT_EQ(t.info.functions[0].generic, 0u);

  int st1 = FindInstr(*f, [](const ptx::Instruction& in) { return in.FullOpcode() == "st.global.f32"; });
  int st2 = FindInstr(*f, [](const ptx::Instruction& in) { return in.FullOpcode() == "st.global.v4.f32"; });
  ASSERT_GE(st1, 0);
  ASSERT_GE(st2, 0);
  // The original instructions keep their guards.
  EXPECT_EQ(InstrAt(*f, st1).guard, "%p1");
  EXPECT_FALSE(InstrAt(*f, st1).guard_neg);
  EXPECT_EQ(InstrAt(*f, st2).guard, "%p2");
  EXPECT_TRUE(InstrAt(*f, st2).guard_neg);

  // Each check starts with a branch around it when the guard is false:
  // `@!%p1 bra` for `@%p1`, `@%p2 bra` for `@!%p2`.
  auto skip_branch = [&](int from, const std::string& guard, bool neg) {
    return FindInstr(
        *f,
        [&](const ptx::Instruction& in) {
          return in.info.op == ptx::Opcode::kBra && in.guard == guard && in.guard_neg == neg;
        },
        from);
  };
  int b1 = skip_branch(0, "%p1", true);
  ASSERT_GE(b1, 0) << t.text;
  EXPECT_LT(b1, st1);
  // The branch goes to the label right before the store.
  const std::string target = InstrAt(*f, b1).operands.at(0).name;
  ASSERT_TRUE(std::holds_alternative<ptx::Label>(f->body.at(st1 - 1)));
  EXPECT_EQ(std::get<ptx::Label>(f->body.at(st1 - 1)).name, target);
  int b2 = skip_branch(st1, "%p2", false);
  ASSERT_GE(b2, 0) << t.text;
  EXPECT_LT(b2, st2);

  // The vector store checks its full 16 bytes: last byte = address + 15.
  EXPECT_NE(t.flat.find("add.s64 %phos_rd0, %rd2, 16;"), std::string::npos) << t.text;
  EXPECT_NE(t.flat.find("add.s64 %phos_rd1, %phos_rd0, 15;"), std::string::npos) << t.text;
  EXPECT_NE(t.flat.find("add.s64 %phos_rd1, %phos_rd0, 3;"), std::string::npos) << t.text;
  ExpectAssembles(t.text);
}

const char* kDeviceCalls = R"(
.func (.param .b32 func_retval0) later(.param .b64 later_param_0);
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.global .align 8 .u64 fn_table[1] = {later};
.global .align 4 .u32 g_counter;
.func store_one(.param .b64 p)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 1;
  st.u32 [%rd1], %r1;
  ret;
}
.visible .entry calls(.param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd1;
  call.uni store_one, (param0);
  }
  {
  .param .b64 param0;
  .param .b32 retval0;
  st.param.b64 [param0+0], %rd1;
  call.uni (retval0), later, (param0);
  ld.param.b32 %r1, [retval0+0];
  }
  mov.u64 %rd2, fn_table;
  cvta.global.u64 %rd3, %rd2;
  ld.u64 %rd4, [%rd3];
  {
  .param .b64 param0;
  .param .b32 retval0;
  st.param.b64 [param0+0], %rd1;
  prototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _);
  call (retval0), %rd4, (param0), prototype_0;
  ld.param.b32 %r2, [retval0+0];
  }
  mov.u64 %rd5, 0;
  {
  .param .b64 param0;
  .param .b64 param1;
  .param .b32 retval0;
  st.param.b64 [param0+0], %rd5;
  st.param.b64 [param1+0], %rd5;
  call.uni (retval0), vprintf, (param0, param1);
  ld.param.b32 %r3, [retval0+0];
  }
  st.global.u32 [g_counter+4], %r3;
  ret;
}
.func (.param .b32 func_retval0) later(.param .b64 later_param_0)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [later_param_0];
  atom.add.u32 %r1, [%rd1], 1;
  st.param.b32 [func_retval0+0], %r1;
  ret;
}
)";

TEST(twin_pass, DeviceFunctionsGetParamsAndCallSitesPassThem) {
  Twinned t = Twin(kDeviceCalls);
  // Every defined .func (and its forward declaration) has the four extra
  // parameters; the .extern one does not.
  int later_decls = 0;
  for (const auto& item : t.out.items) {
    const auto* f = std::get_if<ptx::Function>(&item);
    if (f == nullptr) continue;
    if (f->name == "vprintf") {
      EXPECT_EQ(f->params.size(), 2u);
      continue;
    }
    if (f->is_entry) continue;
    if (f->name == "later") ++later_decls;
    ASSERT_GE(f->params.size(), 5u) << f->name;
    const size_t n = f->params.size();
    EXPECT_EQ(f->params[n - 4].name, "__phos_ranges");
    EXPECT_EQ(f->params[n - 3].name, "__phos_nranges");
    EXPECT_EQ(f->params[n - 2].name, "__phos_report");
    EXPECT_EQ(f->params[n - 1].name, "__phos_kernel_id");
  }
  EXPECT_EQ(later_decls, 2);

  const ptx::Function* k = t.out.FindFunction("calls__phos_twin");
  ASSERT_NE(k, nullptr);
  int calls = 0;
  for (const auto& st : k->body) {
    const auto* in = std::get_if<ptx::Instruction>(&st);
    if (in == nullptr || in->info.op != ptx::Opcode::kCall) continue;
    ++calls;
    size_t tgt = in->operands[0].kind == ptx::Operand::Kind::kList ? 1 : 0;
    const auto& target = in->operands[tgt];
    const auto& args = in->operands.at(tgt + 1);
    ASSERT_EQ(args.kind, ptx::Operand::Kind::kList);
    if (target.name == "vprintf") {
      EXPECT_EQ(args.elems.size(), 2u);  // extern: unchanged
      continue;
    }
    ASSERT_EQ(args.elems.size(), 5u) << ptx::EmitInstruction(*in);
    EXPECT_EQ(args.elems[1].name, "%phos_ranges");
    EXPECT_EQ(args.elems[2].name, "%phos_nranges");
    EXPECT_EQ(args.elems[3].name, "%phos_report");
    EXPECT_EQ(args.elems[4].name, "%phos_kid");
  }
  EXPECT_EQ(calls, 4);
  const auto* ki = t.info.Find("calls");
  ASSERT_NE(ki, nullptr);
  EXPECT_EQ(ki->calls_patched, 3u);
  // The indirect call's prototype has the parameters too.
  EXPECT_NE(t.flat.find(".callprototype (.param .b32 _) _ (.param .b64 _, .param .b64 _, .param .b32 _, "
                        ".param .b64 _, .param .b32 _)"),
            std::string::npos)
      << t.text;
  // The functions read them and use them in their checks.
  const auto* fi = t.info.Find("store_one");
  ASSERT_NE(fi, nullptr);
  EXPECT_EQ(fi->stores, 1u);
  EXPECT_EQ(fi->generic, 1u);
  EXPECT_EQ(t.info.Find("later")->atomics, 1u);
  EXPECT_NE(t.flat.find("ld.param.u32 %phos_kid, [__phos_kernel_id];"), std::string::npos);
  // The generic load of the table (a pointer) is only checked in read mode;
  // the store to g_counter+4 through its symbol is checked.
  EXPECT_EQ(ki->stores, 1u);
  EXPECT_NE(t.flat.find("mov.u64 %phos_rd0, g_counter;"), std::string::npos) << t.text;
  EXPECT_NE(t.flat.find("add.s64 %phos_rd0, %phos_rd0, 4;"), std::string::npos) << t.text;
  EXPECT_EQ(test::CountInsertedChecks(t.out), 3);
  ExpectAssembles(t.text);
  Twinned r = Twin(kDeviceCalls, TwinMode::kReadsAndWrites);
  EXPECT_EQ(r.info.Find("calls")->loads, 1u);
  ExpectAssembles(r.text);
}

const char* kUnchecked = R"(
.global .align 4 .b8 g_arr[64];
.const .align 4 .b8 c_arr[64];
.visible .entry spaces(.param .u64 p)
{
  .local .align 4 .b8 depot[16];
  .shared .align 4 .b8 tile[64];
  .reg .b32 %r<6>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 3;
  st.shared.u32 [tile+4], %r1;
  ld.shared.u32 %r2, [tile];
  st.local.u32 [depot], %r2;
  ld.local.u32 %r3, [depot];
  ld.const.u32 %r4, [c_arr+8];
  atom.shared.add.u32 %r5, [tile], 1;
  mov.u64 %rd2, tile;
  ld.u32 %r5, [tile];
  ret;
}
)";

TEST(twin_pass, SharedLocalParamConstAreNotChecked) {
  for (TwinMode mode : {TwinMode::kWrites, TwinMode::kReadsAndWrites}) {
    Twinned t = Twin(kUnchecked, mode);
    EXPECT_EQ(t.info.total_checks(), 0u) << t.text;
    EXPECT_EQ(test::CountInsertedChecks(t.out), 0);
    ExpectAssembles(t.text);
  }
}

TEST(twin_pass, CheckedInstructionsAreUnchangedAndInOrder) {
  // Removing the inserted code gives back the original body.
  Twinned t = Twin(kGuarded, TwinMode::kReadsAndWrites);
  const ptx::Function* orig = t.in.FindFunction("guarded");
  const ptx::Function* twin = t.out.FindFunction("guarded__phos_twin");
  ASSERT_NE(orig, nullptr);
  ASSERT_NE(twin, nullptr);
  std::vector<std::string> a, b;
  for (const auto& st : orig->body)
    if (const auto* in = std::get_if<ptx::Instruction>(&st)) a.push_back(ptx::EmitInstruction(*in));
  for (const auto& st : twin->body) {
    const auto* in = std::get_if<ptx::Instruction>(&st);
    if (in == nullptr) continue;
    const std::string s = ptx::EmitInstruction(*in);
    if (s.find("%phos_") != std::string::npos || s.find("$__phos_L") != std::string::npos) continue;
    b.push_back(s);
  }
  EXPECT_EQ(a, b);
}

TEST(twin_pass, RejectsWhatItCannotTwin) {
  ptx::Module in, out;
  ASSERT_TRUE(ptx::ParseModule(".version 8.0\n.target sm_80\n.address_size 32\n"
                               ".visible .entry k() { ret; }\n",
                               &in)
                  .ok());
  EXPECT_EQ(MakeTwin(in, {}, &out).code(), Status::Code::kNotSupported);

  // A kernel used as a value (dynamic parallelism).
  ASSERT_TRUE(ptx::ParseModule(std::string(kHeader) +
                                   ".visible .entry child() { ret; }\n"
                                   ".visible .entry parent() { .reg .b64 %rd<2>; mov.u64 %rd1, child; ret; }\n",
                               &in)
                  .ok());
  EXPECT_EQ(MakeTwin(in, {}, &out).code(), Status::Code::kNotSupported);

  // Twinning a twin.
  Twinned t = Twin(kPointerTable);
  EXPECT_EQ(MakeTwin(t.out, {}, &out).code(), Status::Code::kNotSupported);
}

TEST(twin_pass, CopiesCheckTheirGlobalSide) {
  const char* body = R"(
.visible .entry cp(.param .u64 src)
{
  .shared .align 16 .b8 tile[256];
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [src];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, tile;
  cp.async.cg.shared.global [%r1], [%rd2], 16, 16;
  cp.async.commit_group;
  cp.async.wait_group 0;
  ret;
}
)";
  Twinned w = Twin(body, TwinMode::kWrites);
  EXPECT_EQ(w.info.total_checks(), 0u);
  Twinned r = Twin(body, TwinMode::kReadsAndWrites);
  EXPECT_EQ(r.info.functions[0].copies, 1u);
  EXPECT_NE(r.flat.find("add.s64 %phos_rd1, %phos_rd0, 15;"), std::string::npos) << r.text;
  ExpectAssembles(r.text);
}

// Accesses that may reach global memory but that the pass cannot check
// make every kernel that may run them "unchecked", with the reason: in the
// kernel, in a function it calls, or behind an indirect call.
const char* kUncheckable = R"(
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.extern .func ext_write(.param .b64 ext_write_param_0);
.func tensor_store(.param .b64 tm)
{
  .shared .align 128 .b8 tile[256];
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [tm];
  mov.u32 %r1, 0;
  mov.u32 %r2, tile;
  cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%rd1, {%r1}], [%r2];
  ret;
}
.func plain_store(.param .b64 p)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 7;
  st.global.u32 [%rd1], %r1;
  ret;
}
.visible .entry plain(.param .u64 out)
{
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out];
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd1;
  call.uni plain_store, (param0);
  }
  ret;
}
.visible .entry via_call(.param .u64 tm)
{
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [tm];
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd1;
  call.uni tensor_store, (param0);
  }
  ret;
}
.visible .entry indirect(.param .u64 out)
{
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  mov.u64 %rd2, plain_store;
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd1;
  prototype_0 : .callprototype ()_ (.param .b64 _);
  call %rd2, (param0), prototype_0;
  }
  ret;
}
.visible .entry multicast(.param .u64 mc)
{
  .reg .f32 %f<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [mc];
  mov.f32 %f1, 0f3F800000;
  multimem.st.relaxed.sys.global.f32 [%rd1], %f1;
  ret;
}
.visible .entry external(.param .u64 out)
{
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out];
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd1;
  call.uni ext_write, (param0);
  }
  ret;
}
.visible .entry prints(.param .u64 fmt)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [fmt];
  {
  .param .b64 param0;
  .param .b64 param1;
  .param .b32 retval0;
  st.param.b64 [param0+0], %rd1;
  st.param.b64 [param1+0], %rd1;
  call.uni (retval0), vprintf, (param0, param1);
  ld.param.b32 %r1, [retval0+0];
  }
  ret;
}
.visible .entry tensor_load(.param .u64 tm)
{
  .shared .align 128 .b8 tile[256];
  .shared .align 8 .b64 bar;
  .reg .b32 %r<4>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [tm];
  mov.u32 %r1, 0;
  mov.u32 %r2, tile;
  mov.u32 %r3, bar;
  cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r1}], [%r3];
  ret;
}
)";

TEST(twin_pass, AccessesItCannotCheckMakeTheirKernelsUnchecked) {
  Twinned w = Twin(kUncheckable, TwinMode::kWrites);
  EXPECT_EQ(w.info.UncheckedReason("plain"), std::nullopt);
  EXPECT_EQ(w.info.UncheckedReason("prints"), std::nullopt);  // vprintf: a known runtime function
  EXPECT_EQ(w.info.UncheckedReason("tensor_load"), std::nullopt);  // reads only: not a write
  auto via = w.info.UncheckedReason("via_call");
  ASSERT_TRUE(via.has_value());
  EXPECT_NE(via->find("in tensor_store"), std::string::npos) << *via;
  EXPECT_NE(via->find("cp.async.bulk.tensor"), std::string::npos) << *via;
  EXPECT_NE(via->find("CUtensorMap"), std::string::npos) << *via;
  // An indirect call may reach any function of the module.
  auto ind = w.info.UncheckedReason("indirect");
  ASSERT_TRUE(ind.has_value());
  EXPECT_NE(ind->find("in tensor_store"), std::string::npos) << *ind;
  auto mc = w.info.UncheckedReason("multicast");
  ASSERT_TRUE(mc.has_value());
  EXPECT_NE(mc->find("multimem"), std::string::npos) << *mc;
  auto ext = w.info.UncheckedReason("external");
  ASSERT_TRUE(ext.has_value());
  EXPECT_NE(ext->find("ext_write"), std::string::npos) << *ext;
  EXPECT_EQ(w.info.UncheckedReason("tensor_store"), std::nullopt);  // not an entry
  EXPECT_EQ(w.info.UncheckedReason("no_such_kernel"), std::nullopt);
  // The checkable store in plain_store is still checked.
  EXPECT_EQ(w.info.Find("plain_store")->stores, 1u);
  EXPECT_EQ(w.info.Find("tensor_store")->unchecked_count, 1u);

  // Restore validation checks reads too: the tensor load is unchecked there.
  Twinned r = Twin(kUncheckable, TwinMode::kReadsAndWrites);
  auto load = r.info.UncheckedReason("tensor_load");
  ASSERT_TRUE(load.has_value());
  EXPECT_NE(load->find("cp.async.bulk.tensor"), std::string::npos) << *load;
  EXPECT_EQ(r.info.UncheckedReason("plain"), std::nullopt);
}

// A wmma load whose footprint the pass does not know (sub-byte elements) is
// unchecked in read mode, not skipped.
TEST(twin_pass, WmmaOfUnknownFootprintIsUnchecked) {
  Twinned t = Twin(R"(
.visible .entry w(.param .u64 in)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [in];
  wmma.load.a.sync.aligned.row.m8n8k32.global.s4 {%r1}, [%rd1];
  ret;
}
)", TwinMode::kReadsAndWrites);
  auto why = t.info.UncheckedReason("w");
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("wmma"), std::string::npos) << *why;
}

// ------------------------------------------------------------ report ---

std::vector<unsigned char> MakeReport(uint32_t capacity, uint32_t count, size_t records_present) {
  std::vector<unsigned char> buf(sizeof(ReportHeader) + records_present * sizeof(ReportRecord));
  ReportHeader h{capacity, count, 9, kReportFlagReads};
  std::memcpy(buf.data(), &h, sizeof h);
  for (size_t i = 0; i < records_present; ++i) {
    ReportRecord r{9, static_cast<uint32_t>(i & 1), 0x7f0000000000ull + i * 4};
    std::memcpy(buf.data() + sizeof h + i * sizeof r, &r, sizeof r);
  }
  return buf;
}

TEST(twin_report, DecodesRecords) {
  auto buf = MakeReport(4, 3, 4);
  Report r;
  ASSERT_TRUE(DecodeReport(buf.data(), buf.size(), &r).ok());
  EXPECT_EQ(r.header.capacity, 4u);
  EXPECT_EQ(r.header.kernel_id, 9u);
  EXPECT_EQ(r.header.flags, kReportFlagReads);
  ASSERT_EQ(r.records.size(), 3u);
  EXPECT_EQ(r.records[1].is_write, 1u);
  EXPECT_EQ(r.records[2].address, 0x7f0000000008ull);
  EXPECT_FALSE(r.overflowed());
  EXPECT_EQ(r.misses(), 3u);
}

TEST(twin_report, Overflow) {
  auto buf = MakeReport(2, 7, 2);
  Report r;
  ASSERT_TRUE(DecodeReport(buf.data(), buf.size(), &r).ok());
  EXPECT_EQ(r.records.size(), 2u);
  EXPECT_TRUE(r.overflowed());
  EXPECT_EQ(r.dropped, 5u);
  EXPECT_EQ(r.misses(), 7u);
}

TEST(twin_report, RejectsTruncatedBuffers) {
  auto buf = MakeReport(4, 3, 3);
  Report r;
  for (size_t n = 0; n < buf.size(); ++n) {
    // A fresh copy of exactly n bytes, so ASan catches any read past it.
    std::vector<unsigned char> cut(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    Status s = DecodeReport(cut.data(), cut.size(), &r);
    EXPECT_EQ(s.code(), Status::Code::kCorruption) << n << " bytes: " << s.ToString();
  }
  EXPECT_TRUE(DecodeReport(buf.data(), buf.size(), &r).ok());
  // A huge count with a small buffer is not trusted.
  auto big = MakeReport(0xFFFFFFFFu, 0xFFFFFFFFu, 1);
  EXPECT_EQ(DecodeReport(big.data(), big.size(), &r).code(), Status::Code::kCorruption);
  EXPECT_EQ(DecodeReport(nullptr, 100, &r).code(), Status::Code::kInvalidArgument);
}

TEST(twin_report, RejectsBadIsWrite) {
  auto buf = MakeReport(2, 2, 2);
  ReportRecord bad{1, 7, 0};
  std::memcpy(buf.data() + sizeof(ReportHeader) + sizeof(ReportRecord), &bad, sizeof bad);
  Report r;
  EXPECT_EQ(DecodeReport(buf.data(), buf.size(), &r).code(), Status::Code::kCorruption);
}

TEST(twin_report, InitReport) {
  std::vector<unsigned char> buf(ReportBytes(8), 0xAB);
  ASSERT_TRUE(InitReport(buf.data(), buf.size(), 8, 3, 0).ok());
  Report r;
  ASSERT_TRUE(DecodeReport(buf.data(), buf.size(), &r).ok());
  EXPECT_EQ(r.header.capacity, 8u);
  EXPECT_EQ(r.header.count, 0u);
  EXPECT_EQ(r.header.kernel_id, 3u);
  EXPECT_TRUE(r.records.empty());
  EXPECT_EQ(InitReport(buf.data(), buf.size() - 1, 8, 3, 0).code(), Status::Code::kInvalidArgument);
}

// ------------------------------------------------------------- cache ---

TEST(twin_cache, HitsOnSameTextAndMode) {
  TwinCache cache;
  const std::string text = std::string(kHeader) + kPointerTable;
  std::shared_ptr<const TwinEntry> a, b, c;
  TwinOptions w;
  ASSERT_TRUE(cache.GetOrCreate(text, w, &a).ok());
  ASSERT_TRUE(cache.GetOrCreate(text, w, &b).ok());
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_NE(a->ptx.find("table_store__phos_twin"), std::string::npos);
  EXPECT_EQ(a->info.total_checks(), 1u);

  TwinOptions rw;
  rw.mode = TwinMode::kReadsAndWrites;
  ASSERT_TRUE(cache.GetOrCreate(text, rw, &c).ok());
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(c->info.total_checks(), 2u);
  TwinOptions ids;
  ids.kernel_ids["table_store"] = 5;
  ASSERT_TRUE(cache.GetOrCreate(text, ids, &c).ok());
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(cache.size(), 3u);

  // Different text, and errors are not cached.
  ASSERT_TRUE(cache.GetOrCreate(text + "\n", w, &c).ok());
  EXPECT_NE(a.get(), c.get());
  EXPECT_FALSE(cache.GetOrCreate("not ptx", w, &c).ok());
  EXPECT_EQ(cache.size(), 4u);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(twin_cache, ConcurrentLookups) {
  TwinCache cache;
  const std::string t1 = std::string(kHeader) + kPointerTable;
  const std::string t2 = std::string(kHeader) + kGuarded;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 50; ++j) {
        std::shared_ptr<const TwinEntry> e;
        TwinOptions o;
        o.mode = (i + j) % 2 ? TwinMode::kWrites : TwinMode::kReadsAndWrites;
        if (!cache.GetOrCreate(j % 3 ? t1 : t2, o, &e).ok() || e == nullptr || e->ptx.empty()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.hits() + cache.misses(), 400u);
}

}  // namespace
}  // namespace phos::twin
