// The twin-kernel pass (twin_pass.h).
#include "twin/twin_pass.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ptx/device_runtime.h"
#include "ptx/ptx_parser.h"

namespace phos::twin {
namespace {

using ptx::Function;
using ptx::Instruction;
using ptx::Module;
using ptx::Operand;
using ptx::Space;
using ptx::Statement;
using ptx::Type;
using ptx::VarDecl;

// Registers every instrumented function declares (function scope).
constexpr std::string_view kRegPrefix = "%phos_";
constexpr std::string_view kLabelPrefix = "$__phos_L";
constexpr std::string_view kParamPrefix = "__phos_";
constexpr const char* kRanges = "%phos_ranges";    // .b64 global address of the ranges
constexpr const char* kNRanges = "%phos_nranges";  // .b32
constexpr const char* kReport = "%phos_report";    // .b64 global address of the report
constexpr const char* kKid = "%phos_kid";          // .b32 kernel id for records
// Scratch registers of one check (checks never overlap, so one set per
// function): rd0 address, rd1 last byte, rd2 range cursor, rd3 range begin,
// rd4 range end, rd5 record address; r0 ranges left, r1 slot, r2 capacity /
// is_write; p0 condition.
constexpr uint32_t kNumRd = 6, kNumR = 3, kNumP = 1;

enum class Kind { kStore, kAtomic, kReduction, kLoad, kCopy };

struct Site {
  Kind kind = Kind::kStore;
  size_t addr_op = 0;     // index of the address operand
  bool is_write = true;
  bool generic = false;   // test isspacep.global first
  uint32_t bytes = 1;     // access width when size_reg is empty
  std::string size_reg;   // copies with a register size (u32)
  // wmma.load/store: a matrix of `outer` lines of `inner` elements of
  // `elem` bytes, `stride` elements apart (a register, or stride_imm); the
  // access spans [addr, addr + ((outer - 1) * stride + inner) * elem).
  struct Matrix {
    uint32_t outer = 0, inner = 0, elem = 0;
    std::string stride_reg;
    uint64_t stride_imm = 0;
  };
  std::optional<Matrix> matrix;
};

// The footprint of a wmma.load/store (nullopt: not a form the pass knows;
// the interpreter refuses the same forms).
std::optional<Site::Matrix> WmmaFootprint(const Instruction& in, size_t stride_op) {
  int m = 0, n = 0, k = 0;
  if (!in.MatrixShape(&m, &n, &k) || m <= 0 || n <= 0 || k <= 0) return std::nullopt;
  int rows = m, cols = n;  // c/d
  if (in.HasMod("a")) cols = k;
  if (in.HasMod("b")) rows = k;
  const int bits = ptx::TypeBits(in.info.type());
  if (bits < 8) return std::nullopt;
  Site::Matrix mx;
  mx.elem = static_cast<uint32_t>(bits / 8);
  const bool col = in.HasMod("col");
  mx.outer = static_cast<uint32_t>(col ? cols : rows);
  mx.inner = static_cast<uint32_t>(col ? rows : cols);
  if (stride_op < in.operands.size()) {
    const Operand& st = in.operands[stride_op];
    if (st.kind == Operand::Kind::kImmInt && !st.minus) mx.stride_imm = st.bits;
    else if (st.kind == Operand::Kind::kRegister && !st.neg) mx.stride_reg = st.name;
    else return std::nullopt;
  } else {
    mx.stride_imm = mx.inner;  // the default leading dimension
  }
  return mx;
}

// Per-module facts the pass needs.
struct ModuleFacts {
  std::set<std::string, std::less<>> defined_funcs;   // .func with a body
  std::map<std::string, Space, std::less<>> globals;  // module-scope variables
};

uint32_t AccessBytes(const ptx::InstrInfo& info) {
  int bits = ptx::TypeBits(info.type());
  uint32_t elem = bits >= 8 ? static_cast<uint32_t>(bits / 8) : 1;
  return elem * (info.vec == 0 ? 1 : info.vec);
}

bool IsGlobalSpace(Space s) { return s == Space::kGlobal; }

// Space of a symbol used as an address base, if the module or function
// declares it.
std::optional<Space> SymbolSpace(std::string_view name, const ModuleFacts& mf,
                                 const std::map<std::string, Space, std::less<>>& locals) {
  if (auto it = locals.find(name); it != locals.end()) return it->second;
  if (auto it = mf.globals.find(name); it != mf.globals.end()) return it->second;
  return std::nullopt;
}

// Decides whether the address operand `op` of an access in space `space`
// (kNone = generic) is checked, and how. Returns false when not checked.
bool ClassifyAddress(const Operand& op, Space space, const ModuleFacts& mf,
                     const std::map<std::string, Space, std::less<>>& locals, bool* generic) {
  if (op.kind != Operand::Kind::kAddress || !op.elems.empty()) return false;
  if (space == Space::kGlobal) {
    *generic = false;
    return true;
  }
  if (space != Space::kNone) return false;
  // Generic access.
  if (!op.name.empty() && !op.base_is_reg) {
    // [sym] in a generic access: checked only if sym is a .global variable,
    // and then its address is known to be global.
    auto s = SymbolSpace(op.name, mf, locals);
    if (!s || !IsGlobalSpace(*s)) return false;
    *generic = false;
    return true;
  }
  *generic = true;  // register or absolute address: test at run time
  return true;
}

// Why an access to global memory goes unchecked (Classify's *unchecked):
// the instruction text and the reason, for the kernel's "unvalidatable"
// verdict.
std::string UncheckedWhy(const Instruction& in, std::string_view why) {
  return "`" + in.FullOpcode() + "`: " + std::string(why);
}

// The checks `in` needs. An access to global memory that the pass cannot
// check (a form below it does not compute the footprint of) sets *unchecked
// to why; accesses outside global memory are neither checked nor unchecked.
std::vector<Site> Classify(const Instruction& in, TwinMode mode, const ModuleFacts& mf,
                           const std::map<std::string, Space, std::less<>>& locals, std::string* unchecked) {
  std::vector<Site> sites;
  const auto& info = in.info;
  const bool reads = mode == TwinMode::kReadsAndWrites;
  auto first_addr = [&]() -> std::optional<size_t> {
    for (size_t i = 0; i < in.operands.size(); ++i)
      if (in.operands[i].kind == Operand::Kind::kAddress) return i;
    return std::nullopt;
  };
  auto add_simple = [&](Kind kind, bool is_write) {
    auto idx = first_addr();
    if (!idx) return;
    Site s;
    s.kind = kind;
    s.addr_op = *idx;
    s.is_write = is_write;
    s.bytes = AccessBytes(info);
    const Operand& a = in.operands[*idx];
    if (ClassifyAddress(a, info.space, mf, locals, &s.generic)) {
      sites.push_back(s);
    } else if ((info.space == Space::kGlobal || info.space == Space::kNone) &&
               (a.kind != Operand::Kind::kAddress || !a.elems.empty())) {
      // Defensive: a global or generic address in a form the check cannot
      // compute (the parser yields none today).
      *unchecked = UncheckedWhy(in, "an address form the twin cannot compute");
    }
  };
  switch (info.op) {
    case ptx::Opcode::kSt: add_simple(Kind::kStore, true); break;
    case ptx::Opcode::kAtom: add_simple(Kind::kAtomic, true); break;
    case ptx::Opcode::kRed: add_simple(Kind::kReduction, true); break;
    case ptx::Opcode::kLd:
    case ptx::Opcode::kLdu:
      if (reads) add_simple(Kind::kLoad, false);
      break;
    case ptx::Opcode::kCp: {
      // cp[.reduce].async[.bulk].<dst space>.<src space>... [dst], [src], size
      bool is_async = false, prefetch = false, tensor = false;
      std::vector<Space> spaces;
      for (const auto& m : in.mods) {
        if (m == "async") is_async = true;
        if (m == "prefetch") prefetch = true;
        if (m == "tensor") tensor = true;
        Space s = ptx::SpaceFromName(m);
        if (s != Space::kNone) spaces.push_back(s);
      }
      if (!is_async || prefetch || spaces.size() != 2) break;
      if (tensor) {
        // [tensorMap, {coords}]: the global address and the box come from
        // a CUtensorMap in memory the twin cannot interpret.
        if (spaces[0] == Space::kGlobal || (reads && spaces[1] == Space::kGlobal)) {
          *unchecked = UncheckedWhy(in, "a tensor-map copy (its global footprint is in a CUtensorMap)");
        }
        break;
      }
      if (in.operands.size() < 3) break;
      const Operand& size = in.operands[2];
      for (size_t side = 0; side < 2; ++side) {
        if (spaces[side] != Space::kGlobal) continue;
        const bool is_write = side == 0;
        if (!is_write && !reads) continue;
        Site s;
        s.kind = Kind::kCopy;
        s.addr_op = side;
        s.is_write = is_write;
        if (size.kind == Operand::Kind::kImmInt && !size.minus && size.bits > 0 && size.bits <= 0xFFFFFFFFu) {
          s.bytes = static_cast<uint32_t>(size.bits);
        } else if (size.kind == Operand::Kind::kRegister && !size.neg) {
          s.size_reg = size.name;
        } else {
          s.bytes = 1;
        }
        if (ClassifyAddress(in.operands[side], Space::kGlobal, mf, locals, &s.generic)) sites.push_back(s);
      }
      break;
    }
    case ptx::Opcode::kWmma: {
      // wmma.load {frag}, [p]{, stride} reads; wmma.store [p], {frag}{, stride} writes.
      const bool load = in.HasMod("load"), store = in.HasMod("store");
      if (!load && !store) break;
      if (load && !reads) break;
      if (info.space != Space::kGlobal && info.space != Space::kNone) break;
      const size_t addr = load ? 1 : 0;
      Site s;
      s.kind = load ? Kind::kLoad : Kind::kStore;
      s.addr_op = addr;
      s.is_write = store;
      if (in.operands.size() > addr) s.matrix = WmmaFootprint(in, 2);
      if (!s.matrix) {
        *unchecked = UncheckedWhy(in, "a wmma shape or layout whose footprint the twin does not know");
        break;
      }
      if (ClassifyAddress(in.operands[addr], info.space, mf, locals, &s.generic)) sites.push_back(s);
      break;
    }
    case ptx::Opcode::kUnknown:
      // Instructions the IR has no opcode for that reach global memory.
      if (in.opcode == "multimem") {
        // multimem.st / .red write, .ld_reduce reads, through a multicast
        // address that names no buffer of the session.
        if (!in.HasMod("ld_reduce") || reads) {
          *unchecked = UncheckedWhy(in, "a multimem access (a multicast address, not a buffer of the session)");
        }
      } else if (in.opcode == "tensormap" && in.HasMod("replace") && !in.HasMod("shared") &&
                 !in.HasMod("shared::cta")) {
        *unchecked = UncheckedWhy(in, "tensormap.replace in global memory (not checked)");
      }
      break;
    default: break;
  }
  return sites;
}

// Collects every symbol name an operand refers to.
void CollectSymbols(const Operand& o, std::vector<std::string_view>* out) {
  if (o.kind == Operand::Kind::kSymbol) out->push_back(o.name);
  if (o.kind == Operand::Kind::kAddress && !o.base_is_reg && !o.name.empty()) out->push_back(o.name);
  for (const auto& e : o.elems) CollectSymbols(e, out);
}

// Inserts four parameter declarations into the parameter list of a
// `.callprototype` text: `p : .callprototype (.param .b32 _) _ (.param .b32 _)`.
bool PatchPrototype(std::string* text) {
  static const std::string kExtra = ".param .b64 _, .param .b32 _, .param .b64 _, .param .b32 _";
  size_t pos = text->find(".callprototype");
  if (pos == std::string::npos) return false;
  pos += std::string_view(".callprototype").size();
  auto skip_ws = [&] {
    while (pos < text->size() && (*text)[pos] == ' ') ++pos;
  };
  auto skip_parens = [&]() -> bool {  // at '(' -> past the matching ')'
    int depth = 0;
    for (; pos < text->size(); ++pos) {
      if ((*text)[pos] == '(') ++depth;
      if ((*text)[pos] == ')' && --depth == 0) {
        ++pos;
        return true;
      }
    }
    return false;
  };
  skip_ws();
  if (pos < text->size() && (*text)[pos] == '(' && !skip_parens()) return false;
  skip_ws();
  if (pos >= text->size() || (*text)[pos] != '_') return false;
  ++pos;
  skip_ws();
  if (pos < text->size() && (*text)[pos] == '(') {
    size_t open = pos;
    if (!skip_parens()) return false;
    size_t close = pos - 1;
    bool empty = text->find_first_not_of(' ', open + 1) == close;
    text->insert(close, empty ? kExtra : ", " + kExtra);
  } else {
    text->insert(pos, " (" + kExtra + ")");
  }
  return true;
}

class FunctionTwinner {
 public:
  FunctionTwinner(const ModuleFacts& mf, const TwinOptions& opts, Function* f, FunctionTwinInfo* info)
      : mf_(mf), opts_(opts), f_(f), info_(info) {}

  Status Run() {
    for (const auto& st : f_->body)
      if (auto* v = std::get_if<VarDecl>(&st)) locals_[v->name] = v->space;
    for (const auto& p : f_->params) locals_[p.name] = Space::kParam;

    std::vector<Statement> out;
    out.reserve(f_->body.size() * 2 + 16);
    size_t i = 0;
    // Keep leading declarations / debug directives first, then the prologue
    // (before any label, so loops never re-run it).
    while (i < f_->body.size() &&
           (std::holds_alternative<VarDecl>(f_->body[i]) || std::holds_alternative<ptx::Loc>(f_->body[i]) ||
            std::holds_alternative<ptx::Pragma>(f_->body[i]))) {
      out.push_back(std::move(f_->body[i++]));
    }
    PHOS_RETURN_IF_ERROR(EmitPrologue(&out));
    for (; i < f_->body.size(); ++i) {
      Statement& st = f_->body[i];
      if (auto* raw = std::get_if<ptx::RawStatement>(&st)) {
        if (raw->text.find(".callprototype") != std::string::npos && !PatchPrototype(&raw->text)) {
          return Status::NotSupported("twin: cannot extend call prototype `" + raw->text + "` in " + f_->name);
        }
      } else if (auto* in = std::get_if<Instruction>(&st)) {
        if (in->info.op == ptx::Opcode::kCall) {
          PHOS_RETURN_IF_ERROR(PatchCall(in));
        } else {
          std::string unchecked;
          for (const Site& s : Classify(*in, opts_.mode, mf_, locals_, &unchecked)) {
            PHOS_RETURN_IF_ERROR(EmitCheck(*in, s, &out));
          }
          if (!unchecked.empty()) info_->AddUnchecked(std::move(unchecked));
        }
      }
      out.push_back(std::move(st));
    }
    f_->body = std::move(out);
    return Status::Ok();
  }

 private:
  Status Add(std::vector<Statement>* out, const std::string& text) {
    Instruction in;
    Status s = ptx::ParseInstruction(text, &in);
    if (!s.ok()) return Status::Internal("twin: generated bad PTX `" + text + "`: " + s.message());
    out->emplace_back(std::move(in));
    return Status::Ok();
  }
  static void Reg(std::vector<Statement>* out, const std::string& name, Type t, std::optional<uint32_t> range = {}) {
    VarDecl v;
    v.space = Space::kReg;
    v.type = t;
    v.name = name;
    v.range = range;
    out->emplace_back(std::move(v));
  }
  std::string NewLabel() { return std::string(kLabelPrefix) + std::to_string(next_label_++); }

  Status EmitPrologue(std::vector<Statement>* out) {
    Reg(out, kRanges, Type::kB64);
    Reg(out, kNRanges, Type::kB32);
    Reg(out, kReport, Type::kB64);
    Reg(out, kKid, Type::kB32);
    Reg(out, "%phos_rd", Type::kB64, kNumRd);
    Reg(out, "%phos_r", Type::kB32, kNumR);
    Reg(out, "%phos_p", Type::kPred, kNumP);
    const std::string ranges(kRangesParam), nranges(kNRangesParam), report(kReportParam), kid(kKernelIdParam);
    PHOS_RETURN_IF_ERROR(Add(out, "ld.param.u64 " + std::string(kRanges) + ", [" + ranges + "];"));
    PHOS_RETURN_IF_ERROR(Add(out, "ld.param.u32 " + std::string(kNRanges) + ", [" + nranges + "];"));
    PHOS_RETURN_IF_ERROR(Add(out, "ld.param.u64 " + std::string(kReport) + ", [" + report + "];"));
    if (f_->is_entry) {
      // Kernel: the host passes device (generic) pointers; make them global.
      PHOS_RETURN_IF_ERROR(Add(out, "cvta.to.global.u64 " + std::string(kRanges) + ", " + kRanges + ";"));
      PHOS_RETURN_IF_ERROR(Add(out, "cvta.to.global.u64 " + std::string(kReport) + ", " + kReport + ";"));
      PHOS_RETURN_IF_ERROR(Add(out, "mov.u32 " + std::string(kKid) + ", " + std::to_string(info_->kernel_id) + ";"));
    } else {
      // .func: the caller passes the already converted values and its id.
      PHOS_RETURN_IF_ERROR(Add(out, "ld.param.u32 " + std::string(kKid) + ", [" + kid + "];"));
    }
    return Status::Ok();
  }

  Status PatchCall(Instruction* in) {
    auto& ops = in->operands;
    size_t t = 0;
    if (!ops.empty() && ops[0].kind == Operand::Kind::kList) t = 1;  // return list
    if (t >= ops.size()) return Status::NotSupported("twin: call without a target in " + f_->name);
    const Operand& target = ops[t];
    bool patch = false;
    if (target.kind == Operand::Kind::kRegister) {
      patch = true;  // indirect: every target is a defined .func (prototype patched too)
      info_->indirect_calls = true;
    } else if (target.kind == Operand::Kind::kSymbol) {
      patch = mf_.defined_funcs.count(target.name) != 0;
      if (patch) {
        info_->callees.insert(target.name);
      } else if (!ptx::IsKnownDeviceRuntimeFunction(target.name)) {
        info_->AddUnchecked("`call " + target.name + "`: a function whose code is not in the module");
      }
    }
    if (!patch) return Status::Ok();
    std::vector<Operand> extra = {Operand::Reg(kRanges), Operand::Reg(kNRanges), Operand::Reg(kReport),
                                  Operand::Reg(kKid)};
    if (t + 1 < ops.size() && ops[t + 1].kind == Operand::Kind::kList) {
      for (auto& e : extra) ops[t + 1].elems.push_back(std::move(e));
    } else {
      ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(t + 1), Operand::List(std::move(extra)));
    }
    ++info_->calls_patched;
    return Status::Ok();
  }

  Status EmitCheck(const Instruction& in, const Site& s, std::vector<Statement>* out) {
    const Operand& a = in.operands[s.addr_op];
    const std::string done = NewLabel(), loop = NewLabel(), miss = NewLabel();
    if (!in.guard.empty()) {
      // Run the check only when the original guard holds.
      PHOS_RETURN_IF_ERROR(Add(out, std::string(in.guard_neg ? "@" : "@!") + in.guard + " bra " + done + ";"));
    }
    // %phos_rd0 = effective address.
    const std::string off = std::to_string(a.offset);
    if (a.name.empty()) {
      PHOS_RETURN_IF_ERROR(Add(out, "mov.u64 %phos_rd0, " + off + ";"));
    } else if (a.base_is_reg) {
      if (a.offset != 0) PHOS_RETURN_IF_ERROR(Add(out, "add.s64 %phos_rd0, " + a.name + ", " + off + ";"));
      else PHOS_RETURN_IF_ERROR(Add(out, "mov.b64 %phos_rd0, " + a.name + ";"));
    } else {
      PHOS_RETURN_IF_ERROR(Add(out, "mov.u64 %phos_rd0, " + a.name + ";"));
      if (a.offset != 0) PHOS_RETURN_IF_ERROR(Add(out, "add.s64 %phos_rd0, %phos_rd0, " + off + ";"));
    }
    if (s.generic) {
      PHOS_RETURN_IF_ERROR(Add(out, "isspacep.global %phos_p0, %phos_rd0;"));
      PHOS_RETURN_IF_ERROR(Add(out, "@!%phos_p0 bra " + done + ";"));
    }
    // %phos_rd1 = last byte of the access.
    if (s.matrix) {
      const Site::Matrix& mx = *s.matrix;
      if (mx.stride_reg.empty()) {
        PHOS_RETURN_IF_ERROR(Add(out, "mov.u64 %phos_rd1, " + std::to_string(mx.stride_imm) + ";"));
      } else {
        PHOS_RETURN_IF_ERROR(Add(out, "cvt.u64.u32 %phos_rd1, " + mx.stride_reg + ";"));
      }
      PHOS_RETURN_IF_ERROR(Add(out, "mul.lo.u64 %phos_rd1, %phos_rd1, " + std::to_string(mx.outer - 1) + ";"));
      PHOS_RETURN_IF_ERROR(Add(out, "add.s64 %phos_rd1, %phos_rd1, " + std::to_string(mx.inner) + ";"));
      PHOS_RETURN_IF_ERROR(Add(out, "mul.lo.u64 %phos_rd1, %phos_rd1, " + std::to_string(mx.elem) + ";"));
      PHOS_RETURN_IF_ERROR(Add(out, "add.s64 %phos_rd1, %phos_rd0, %phos_rd1;"));
      PHOS_RETURN_IF_ERROR(Add(out, "sub.s64 %phos_rd1, %phos_rd1, 1;"));
    } else if (!s.size_reg.empty()) {
      PHOS_RETURN_IF_ERROR(Add(out, "cvt.u64.u32 %phos_rd1, " + s.size_reg + ";"));
      PHOS_RETURN_IF_ERROR(Add(out, "add.s64 %phos_rd1, %phos_rd0, %phos_rd1;"));
      PHOS_RETURN_IF_ERROR(Add(out, "sub.s64 %phos_rd1, %phos_rd1, 1;"));
    } else {
      PHOS_RETURN_IF_ERROR(Add(out, "add.s64 %phos_rd1, %phos_rd0, " + std::to_string(s.bytes - 1) + ";"));
    }
    // Look for a range with begin <= first && last < end.
    PHOS_RETURN_IF_ERROR(Add(out, std::string("mov.b64 %phos_rd2, ") + kRanges + ";"));
    PHOS_RETURN_IF_ERROR(Add(out, std::string("mov.b32 %phos_r0, ") + kNRanges + ";"));
    out->emplace_back(ptx::Label{loop});
    PHOS_RETURN_IF_ERROR(Add(out, "setp.eq.u32 %phos_p0, %phos_r0, 0;"));
    PHOS_RETURN_IF_ERROR(Add(out, "@%phos_p0 bra " + miss + ";"));
    PHOS_RETURN_IF_ERROR(Add(out, "ld.global.u64 %phos_rd3, [%phos_rd2];"));
    PHOS_RETURN_IF_ERROR(Add(out, "ld.global.u64 %phos_rd4, [%phos_rd2+8];"));
    PHOS_RETURN_IF_ERROR(Add(out, "add.s64 %phos_rd2, %phos_rd2, " + std::to_string(kRangeSize) + ";"));
    PHOS_RETURN_IF_ERROR(Add(out, "sub.s32 %phos_r0, %phos_r0, 1;"));
    PHOS_RETURN_IF_ERROR(Add(out, "setp.lt.u64 %phos_p0, %phos_rd0, %phos_rd3;"));
    PHOS_RETURN_IF_ERROR(Add(out, "@%phos_p0 bra " + loop + ";"));
    PHOS_RETURN_IF_ERROR(Add(out, "setp.ge.u64 %phos_p0, %phos_rd1, %phos_rd4;"));
    PHOS_RETURN_IF_ERROR(Add(out, "@%phos_p0 bra " + loop + ";"));
    PHOS_RETURN_IF_ERROR(Add(out, "bra " + done + ";"));
    // Miss: reserve a slot; store the record if there is room.
    out->emplace_back(ptx::Label{miss});
    PHOS_RETURN_IF_ERROR(Add(out, std::string("atom.global.add.u32 %phos_r1, [") + kReport + "+" +
                                      std::to_string(kHeaderCountOffset) + "], 1;"));
    PHOS_RETURN_IF_ERROR(Add(out, std::string("ld.global.u32 %phos_r2, [") + kReport + "+" +
                                      std::to_string(kHeaderCapacityOffset) + "];"));
    PHOS_RETURN_IF_ERROR(Add(out, "setp.ge.u32 %phos_p0, %phos_r1, %phos_r2;"));
    PHOS_RETURN_IF_ERROR(Add(out, "@%phos_p0 bra " + done + ";"));
    PHOS_RETURN_IF_ERROR(Add(out, "mul.wide.u32 %phos_rd5, %phos_r1, " + std::to_string(kRecordSize) + ";"));
    PHOS_RETURN_IF_ERROR(Add(out, std::string("add.s64 %phos_rd5, ") + kReport + ", %phos_rd5;"));
    PHOS_RETURN_IF_ERROR(Add(out, std::string("st.global.u32 [%phos_rd5+") +
                                      std::to_string(kRecordsOffset + kRecordKernelIdOffset) + "], " + kKid + ";"));
    PHOS_RETURN_IF_ERROR(Add(out, std::string("mov.u32 %phos_r2, ") + (s.is_write ? "1" : "0") + ";"));
    PHOS_RETURN_IF_ERROR(Add(out, "st.global.u32 [%phos_rd5+" +
                                      std::to_string(kRecordsOffset + kRecordIsWriteOffset) + "], %phos_r2;"));
    PHOS_RETURN_IF_ERROR(Add(out, "st.global.u64 [%phos_rd5+" +
                                      std::to_string(kRecordsOffset + kRecordAddressOffset) + "], %phos_rd0;"));
    out->emplace_back(ptx::Label{done});

    switch (s.kind) {
      case Kind::kStore: ++info_->stores; break;
      case Kind::kAtomic: ++info_->atomics; break;
      case Kind::kReduction: ++info_->reductions; break;
      case Kind::kLoad: ++info_->loads; break;
      case Kind::kCopy: ++info_->copies; break;
    }
    if (s.generic) ++info_->generic;
    return Status::Ok();
  }

  const ModuleFacts& mf_;
  const TwinOptions& opts_;
  Function* f_;
  FunctionTwinInfo* info_;
  std::map<std::string, Space, std::less<>> locals_;
  uint32_t next_label_ = 0;
};

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

void FunctionTwinInfo::AddUnchecked(std::string why) {
  if (unchecked.size() < kMaxUncheckedKept) unchecked.push_back(std::move(why));
  ++unchecked_count;
}

std::optional<std::string> TwinInfo::UncheckedReason(std::string_view kernel) const {
  const FunctionTwinInfo* k = Find(kernel);
  if (k == nullptr || !k->is_entry) return std::nullopt;
  // The kernel and every function it may reach: direct calls, and for an
  // indirect call every function of the module (its target is a value).
  std::vector<const FunctionTwinInfo*> todo{k};
  std::set<std::string_view> seen{k->name};
  bool all = false;
  while (!todo.empty()) {
    const FunctionTwinInfo* f = todo.back();
    todo.pop_back();
    if (!f->unchecked.empty()) {
      std::string why = f->unchecked.front();
      if (f != k) why = "in " + f->name + ": " + why;
      if (f->unchecked_count > 1) why += " (and " + std::to_string(f->unchecked_count - 1) + " more)";
      return why;
    }
    all = all || f->indirect_calls;
    for (const std::string& c : f->callees) {
      if (const FunctionTwinInfo* ci = Find(c); ci != nullptr && seen.insert(ci->name).second) todo.push_back(ci);
    }
    if (todo.empty() && all) {
      for (const FunctionTwinInfo& fi : functions) {
        if (!fi.is_entry && seen.insert(fi.name).second) todo.push_back(&fi);
      }
      all = false;
    }
  }
  return std::nullopt;
}

namespace {

// Rejects modules whose names would collide with the pass's own.
Status CheckNames(const Module& m) {
  std::set<std::string_view> names;
  for (const auto& item : m.items) {
    if (const auto* f = std::get_if<Function>(&item)) names.insert(f->name);
  }
  for (const auto& item : m.items) {
    const auto* f = std::get_if<Function>(&item);
    if (f == nullptr) continue;
    if (f->is_entry && names.count(TwinKernelName(f->name)) != 0) {
      return Status::NotSupported("twin: module already has a function named " + TwinKernelName(f->name));
    }
    for (const auto& p : f->params) {
      if (StartsWith(p.name, kParamPrefix)) return Status::NotSupported("twin: " + f->name + " already has parameter " + p.name + " (a twin already?)");
    }
    for (const auto& st : f->body) {
      if (const auto* v = std::get_if<VarDecl>(&st); v && StartsWith(v->name, kRegPrefix)) {
        return Status::NotSupported("twin: " + f->name + " already declares " + v->name + " (a twin already?)");
      }
      if (const auto* l = std::get_if<ptx::Label>(&st); l && StartsWith(l->name, kLabelPrefix)) {
        return Status::NotSupported("twin: " + f->name + " already has label " + l->name);
      }
    }
  }
  return Status::Ok();
}

// Kernels used as values (dynamic parallelism launches, tables): their twins
// would be launched without the phos parameters.
Status CheckKernelsNotValues(const Module& m) {
  std::set<std::string_view> kernels;
  for (const auto& item : m.items)
    if (const auto* f = std::get_if<Function>(&item); f && f->is_entry) kernels.insert(f->name);
  std::vector<std::string_view> syms;
  for (const auto& item : m.items) {
    if (const auto* v = std::get_if<VarDecl>(&item); v && v->init) CollectSymbols(*v->init, &syms);
    if (const auto* f = std::get_if<Function>(&item)) {
      for (const auto& st : f->body) {
        if (const auto* in = std::get_if<Instruction>(&st))
          for (const auto& o : in->operands) CollectSymbols(o, &syms);
      }
    }
  }
  for (auto s : syms) {
    if (kernels.count(s) != 0) {
      return Status::NotSupported("twin: kernel " + std::string(s) +
                                  " is used as a value (dynamic parallelism?); cannot twin this module");
    }
  }
  return Status::Ok();
}

}  // namespace

Status MakeTwin(const Module& in, const TwinOptions& opts, Module* out, TwinInfo* info) {
  if (out == &in) return Status::InvalidArgument("twin: output module aliases the input");
  if (in.address_size != 64) return Status::NotSupported("twin: only .address_size 64 modules can be twinned");
  PHOS_RETURN_IF_ERROR(CheckNames(in));
  PHOS_RETURN_IF_ERROR(CheckKernelsNotValues(in));

  ModuleFacts mf;
  for (const auto& item : in.items) {
    if (const auto* f = std::get_if<Function>(&item); f && !f->is_entry && f->has_body &&
                                                      f->linkage != ptx::Linkage::kExtern) {
      mf.defined_funcs.insert(f->name);
    }
    if (const auto* v = std::get_if<VarDecl>(&item)) mf.globals[v->name] = v->space;
  }

  *out = in;
  TwinInfo local_info;
  TwinInfo& ti = info ? *info : local_info;
  ti.functions.clear();
  for (auto& item : out->items) {
    auto* f = std::get_if<Function>(&item);
    if (f == nullptr) continue;
    if (f->is_entry) {
      if (!f->has_body) continue;  // a kernel prototype: nothing launches it here
      FunctionTwinInfo fi;
      fi.name = f->name;
      fi.is_entry = true;
      auto it = opts.kernel_ids.find(f->name);
      fi.kernel_id = it != opts.kernel_ids.end() ? it->second : opts.default_kernel_id;
      f->name = TwinKernelName(fi.name);
      fi.twin_name = f->name;
      f->AppendParam(std::string(kRangesParam), Type::kU64);
      f->AppendParam(std::string(kNRangesParam), Type::kU32);
      f->AppendParam(std::string(kReportParam), Type::kU64);
      ti.functions.push_back(std::move(fi));
      PHOS_RETURN_IF_ERROR(FunctionTwinner(mf, opts, f, &ti.functions.back()).Run());
      continue;
    }
    if (mf.defined_funcs.count(f->name) == 0) continue;  // .extern or defined elsewhere
    // A definition or a prototype of a function defined here: same signature.
    f->AppendParam(std::string(kRangesParam), Type::kB64);
    f->AppendParam(std::string(kNRangesParam), Type::kB32);
    f->AppendParam(std::string(kReportParam), Type::kB64);
    f->AppendParam(std::string(kKernelIdParam), Type::kB32);
    if (!f->has_body) continue;
    FunctionTwinInfo fi;
    fi.name = f->name;
    fi.twin_name = f->name;
    ti.functions.push_back(std::move(fi));
    PHOS_RETURN_IF_ERROR(FunctionTwinner(mf, opts, f, &ti.functions.back()).Run());
  }
  return Status::Ok();
}

}  // namespace phos::twin
