// Name tables and the modifier decoder of the PTX IR.
#include "ptx/ptx_ir.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <utility>

namespace phos::ptx {
namespace {

struct TypeEntry { Type t; std::string_view name; int bits; };
constexpr TypeEntry kTypes[] = {
    {Type::kPred, "pred", 1},     {Type::kB8, "b8", 8},         {Type::kB16, "b16", 16},
    {Type::kB32, "b32", 32},      {Type::kB64, "b64", 64},      {Type::kB128, "b128", 128},
    {Type::kU8, "u8", 8},         {Type::kU16, "u16", 16},      {Type::kU32, "u32", 32},
    {Type::kU64, "u64", 64},      {Type::kS8, "s8", 8},         {Type::kS16, "s16", 16},
    {Type::kS32, "s32", 32},      {Type::kS64, "s64", 64},      {Type::kF16, "f16", 16},
    {Type::kF16x2, "f16x2", 32},  {Type::kBF16, "bf16", 16},    {Type::kBF16x2, "bf16x2", 32},
    {Type::kTF32, "tf32", 32},    {Type::kF32, "f32", 32},      {Type::kF64, "f64", 64},
    {Type::kE4M3, "e4m3", 8},     {Type::kE5M2, "e5m2", 8},     {Type::kE4M3x2, "e4m3x2", 16},
    {Type::kE5M2x2, "e5m2x2", 16}, {Type::kTexRef, "texref", 0}, {Type::kSamplerRef, "samplerref", 0},
    {Type::kSurfRef, "surfref", 0},
};

constexpr std::pair<Space, std::string_view> kSpaces[] = {
    {Space::kReg, "reg"},       {Space::kSreg, "sreg"},     {Space::kConst, "const"},
    {Space::kGlobal, "global"}, {Space::kLocal, "local"},   {Space::kParam, "param"},
    {Space::kShared, "shared"}, {Space::kTex, "tex"},       {Space::kSharedCta, "shared::cta"},
    {Space::kSharedCluster, "shared::cluster"},
};

constexpr std::string_view kOpcodeNames[] = {
    "",        "abs",     "activemask", "add",    "addc",     "and",     "atom",    "bar",
    "barrier", "bfe",     "bfi",        "bfind",  "bra",      "brev",    "brkpt",   "brx",
    "call",    "clz",     "cnot",       "copysign", "cos",    "cp",      "cvt",     "cvta",
    "div",     "dp2a",    "dp4a",       "elect",  "ex2",      "exit",    "fence",   "fma",
    "fns",     "griddepcontrol", "isspacep", "ld",        "ldmatrix", "ldu",    "lg2",      "lop3",    "mad",     "mad24",
    "madc",    "match",   "max",        "mbarrier", "membar", "min",     "mma",     "mov",
    "mul",     "mul24",   "nanosleep",  "neg",    "not",      "or",      "popc",    "prefetch",
    "prmt",    "rcp",     "red",        "redux",  "rem",      "ret",     "rsqrt",   "sad",
    "selp",    "set",     "setp",       "shf",    "shfl",     "shl",     "shr",     "sin",
    "slct",    "sqrt",    "st",         "stmatrix", "sub",    "subc",     "suld",    "sust",    "tanh",
    "tex",     "tld4",    "trap",       "vabsdiff", "vadd",   "vmax",    "vmin",    "vote",
    "vshl",    "vshr",    "vsub",       "wmma",   "xor",
};
static_assert(std::size(kOpcodeNames) == static_cast<size_t>(Opcode::kCount));

template <typename E, size_t N>
E Lookup(const std::pair<E, std::string_view> (&table)[N], std::string_view s, E fallback) {
  for (const auto& [e, n] : table)
    if (n == s) return e;
  return fallback;
}

constexpr std::pair<Rounding, std::string_view> kRoundings[] = {
    {Rounding::kRn, "rn"},   {Rounding::kRz, "rz"},   {Rounding::kRm, "rm"},   {Rounding::kRp, "rp"},
    {Rounding::kRna, "rna"}, {Rounding::kRs, "rs"},   {Rounding::kRni, "rni"}, {Rounding::kRzi, "rzi"},
    {Rounding::kRmi, "rmi"}, {Rounding::kRpi, "rpi"},
};
constexpr std::pair<CmpOp, std::string_view> kCmps[] = {
    {CmpOp::kEq, "eq"},   {CmpOp::kNe, "ne"},   {CmpOp::kLt, "lt"},   {CmpOp::kLe, "le"},
    {CmpOp::kGt, "gt"},   {CmpOp::kGe, "ge"},   {CmpOp::kLo, "lo"},   {CmpOp::kLs, "ls"},
    {CmpOp::kHi, "hi"},   {CmpOp::kHs, "hs"},   {CmpOp::kEqu, "equ"}, {CmpOp::kNeu, "neu"},
    {CmpOp::kLtu, "ltu"}, {CmpOp::kLeu, "leu"}, {CmpOp::kGtu, "gtu"}, {CmpOp::kGeu, "geu"},
    {CmpOp::kNum, "num"}, {CmpOp::kNan, "nan"},
};
constexpr std::pair<BoolOp, std::string_view> kBoolOps[] = {
    {BoolOp::kAnd, "and"}, {BoolOp::kOr, "or"}, {BoolOp::kXor, "xor"}};
constexpr std::pair<AtomOp, std::string_view> kAtomOps[] = {
    {AtomOp::kAnd, "and"}, {AtomOp::kOr, "or"},   {AtomOp::kXor, "xor"}, {AtomOp::kCas, "cas"},
    {AtomOp::kExch, "exch"}, {AtomOp::kAdd, "add"}, {AtomOp::kInc, "inc"}, {AtomOp::kDec, "dec"},
    {AtomOp::kMin, "min"}, {AtomOp::kMax, "max"},
};
constexpr std::pair<Semantics, std::string_view> kSems[] = {
    {Semantics::kWeak, "weak"},       {Semantics::kRelaxed, "relaxed"}, {Semantics::kAcquire, "acquire"},
    {Semantics::kRelease, "release"}, {Semantics::kAcqRel, "acq_rel"},  {Semantics::kSc, "sc"},
    {Semantics::kVolatile, "volatile"}, {Semantics::kMmio, "mmio"},
};
constexpr std::pair<Scope, std::string_view> kScopes[] = {
    {Scope::kCta, "cta"}, {Scope::kCluster, "cluster"}, {Scope::kGpu, "gpu"}, {Scope::kSys, "sys"}};
constexpr std::pair<CacheOp, std::string_view> kCacheOps[] = {
    {CacheOp::kCa, "ca"}, {CacheOp::kCg, "cg"}, {CacheOp::kCs, "cs"}, {CacheOp::kLu, "lu"},
    {CacheOp::kCv, "cv"}, {CacheOp::kWb, "wb"}, {CacheOp::kWt, "wt"},
};
constexpr std::pair<ShflMode, std::string_view> kShfl[] = {
    {ShflMode::kUp, "up"}, {ShflMode::kDown, "down"}, {ShflMode::kBfly, "bfly"}, {ShflMode::kIdx, "idx"}};
constexpr std::pair<VoteMode, std::string_view> kVote[] = {
    {VoteMode::kAll, "all"}, {VoteMode::kAny, "any"}, {VoteMode::kUni, "uni"}, {VoteMode::kBallot, "ballot"}};

uint64_t DoubleBits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

}  // namespace

std::string_view TypeName(Type t) {
  for (const auto& e : kTypes)
    if (e.t == t) return e.name;
  return {};
}
Type TypeFromName(std::string_view name) {
  for (const auto& e : kTypes)
    if (e.name == name) return e.t;
  return Type::kNone;
}
// Indexed by the enum: the interpreter asks for every executed op.
constexpr size_t kTypeCount = static_cast<size_t>(Type::kOther) + 1;
constexpr std::array<int16_t, kTypeCount> kTypeBits = [] {
  std::array<int16_t, kTypeCount> a{};
  for (const auto& e : kTypes) a[static_cast<size_t>(e.t)] = static_cast<int16_t>(e.bits);
  return a;
}();

int TypeBits(Type t) {
  const auto i = static_cast<size_t>(t);
  return i < kTypeCount ? kTypeBits[i] : 0;
}

std::string_view SpaceName(Space s) {
  for (const auto& [e, n] : kSpaces)
    if (e == s) return n;
  return {};
}
Space SpaceFromName(std::string_view name) { return Lookup(kSpaces, name, Space::kNone); }

std::string_view LinkageName(Linkage l) {
  switch (l) {
    case Linkage::kVisible: return "visible";
    case Linkage::kExtern: return "extern";
    case Linkage::kWeak: return "weak";
    case Linkage::kCommon: return "common";
    case Linkage::kNone: break;
  }
  return {};
}

std::string_view OpcodeName(Opcode op) {
  auto i = static_cast<size_t>(op);
  return i < std::size(kOpcodeNames) ? kOpcodeNames[i] : std::string_view();
}
Opcode OpcodeFromName(std::string_view name) {
  for (size_t i = 1; i < std::size(kOpcodeNames); ++i)
    if (kOpcodeNames[i] == name) return static_cast<Opcode>(i);
  return Opcode::kUnknown;
}

// ------------------------------------------------------------- Operand ---

float Operand::f32() const {
  if (kind == Kind::kImmF64) return static_cast<float>(f64());
  uint32_t b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
double Operand::f64() const {
  if (kind == Kind::kImmF32) return f32();
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

Operand Operand::Reg(std::string n, bool negated) {
  Operand o;
  o.kind = Kind::kRegister;
  o.name = std::move(n);
  o.neg = negated;
  return o;
}
Operand Operand::Imm(int64_t v) {
  Operand o;
  o.kind = Kind::kImmInt;
  o.minus = v < 0;
  o.bits = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  return o;
}
Operand Operand::F32(float v) {
  Operand o;
  o.kind = Kind::kImmF32;
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  o.bits = b;
  return o;
}
Operand Operand::F64(double v) {
  Operand o;
  o.kind = Kind::kImmF64;
  o.bits = DoubleBits(v);
  return o;
}
Operand Operand::Sym(std::string n, int64_t off) {
  Operand o;
  o.kind = Kind::kSymbol;
  o.name = std::move(n);
  o.offset = off;
  o.has_offset = off != 0;
  return o;
}
Operand Operand::Label(std::string n) {
  Operand o;
  o.kind = Kind::kLabel;
  o.name = std::move(n);
  return o;
}
Operand Operand::Addr(std::string base, bool is_reg, int64_t off) {
  Operand o;
  o.kind = Kind::kAddress;
  o.name = std::move(base);
  o.base_is_reg = is_reg;
  o.offset = off;
  o.has_offset = off != 0 || o.name.empty();
  return o;
}
Operand Operand::Vector(std::vector<Operand> e) {
  Operand o;
  o.kind = Kind::kVector;
  o.elems = std::move(e);
  return o;
}
Operand Operand::List(std::vector<Operand> e) {
  Operand o;
  o.kind = Kind::kList;
  o.elems = std::move(e);
  return o;
}
Operand Operand::Pair(Operand a, Operand b) {
  Operand o;
  o.kind = Kind::kPair;
  o.elems.push_back(std::move(a));
  o.elems.push_back(std::move(b));
  return o;
}

// --------------------------------------------------------- Instruction ---

void Instruction::Decode() {
  InstrInfo d;
  d.op = OpcodeFromName(opcode);
  const bool is_atomic = d.op == Opcode::kAtom || d.op == Opcode::kRed || d.op == Opcode::kRedux;
  const bool is_compare = d.op == Opcode::kSetp || d.op == Opcode::kSet || d.op == Opcode::kSlct;
  const bool is_mul = d.op == Opcode::kMul || d.op == Opcode::kMad || d.op == Opcode::kMul24 ||
                      d.op == Opcode::kMad24 || d.op == Opcode::kMadc;
  bool seen_cmp = false;
  for (size_t i = 0; i < mods.size(); ++i) {
    const std::string& m = mods[i];
    if (Type t = TypeFromName(m); t != Type::kNone) { d.types.push_back(t); continue; }
    if (Space s = SpaceFromName(m); s != Space::kNone && d.space == Space::kNone && s != Space::kReg &&
                                    s != Space::kSreg) {
      d.space = s;
      continue;
    }
    if (is_atomic && d.atom_op == AtomOp::kNone) {
      if (AtomOp a = Lookup(kAtomOps, m, AtomOp::kNone); a != AtomOp::kNone) { d.atom_op = a; continue; }
    }
    if (is_compare) {
      if (!seen_cmp) {
        if (CmpOp c = Lookup(kCmps, m, CmpOp::kNone); c != CmpOp::kNone) { d.cmp = c; seen_cmp = true; continue; }
      } else if (d.bool_op == BoolOp::kNone) {
        if (BoolOp b = Lookup(kBoolOps, m, BoolOp::kNone); b != BoolOp::kNone) { d.bool_op = b; continue; }
      }
    }
    if (is_mul || d.op == Opcode::kShf) {
      if (m == "lo") { d.mul_mode = MulMode::kLo; continue; }
      if (m == "hi") { d.mul_mode = MulMode::kHi; continue; }
      if (m == "wide") { d.mul_mode = MulMode::kWide; continue; }
    }
    if (d.op == Opcode::kShfl) {
      if (ShflMode s = Lookup(kShfl, m, ShflMode::kNone); s != ShflMode::kNone) { d.shfl = s; continue; }
    }
    if (d.op == Opcode::kVote) {
      if (VoteMode v = Lookup(kVote, m, VoteMode::kNone); v != VoteMode::kNone) { d.vote = v; continue; }
    }
    if (Rounding r = Lookup(kRoundings, m, Rounding::kNone); r != Rounding::kNone) { d.rounding = r; continue; }
    if (Semantics s = Lookup(kSems, m, Semantics::kNone); s != Semantics::kNone) { d.sem = s; continue; }
    if (Scope s = Lookup(kScopes, m, Scope::kNone); s != Scope::kNone) { d.scope = s; continue; }
    if (CacheOp c = Lookup(kCacheOps, m, CacheOp::kNone); c != CacheOp::kNone) { d.cache = c; continue; }
    if (m == "v2") { d.vec = 2; continue; }
    if (m == "v4") { d.vec = 4; continue; }
    if (m == "v8") { d.vec = 8; continue; }
    if (m == "sat") { d.sat = true; continue; }
    if (m == "ftz") { d.ftz = true; continue; }
    if (m == "approx") { d.approx = true; continue; }
    if (m == "full") { d.full = true; continue; }
    if (m == "uni") { d.uni = true; continue; }
    if (m == "cc") { d.cc = true; continue; }
    if (m == "nc") { d.nc = true; continue; }
    if (m == "sync") { d.sync = true; continue; }
    if (m == "aligned") { d.aligned = true; continue; }
    if (m == "to" && d.op == Opcode::kCvta) { d.to = true; continue; }
    if (i < 256) d.unknown_mods.push_back(static_cast<uint8_t>(i));
  }
  info = std::move(d);
}

std::string Instruction::FullOpcode() const {
  std::string s = opcode;
  for (const auto& m : mods) {
    s += '.';
    s += m;
  }
  return s;
}

bool Instruction::HasMod(std::string_view m) const {
  for (const auto& x : mods)
    if (x == m) return true;
  return false;
}

bool Instruction::MatrixShape(int* m, int* n, int* k) const {
  for (const auto& x : mods) {
    if (x.size() > 1 && x[0] == 'm' && std::sscanf(x.c_str(), "m%dn%dk%d", m, n, k) == 3) return true;
  }
  return false;
}

Instruction MakeInstruction(std::string_view dotted, std::vector<Operand> operands) {
  Instruction in;
  size_t dot = dotted.find('.');
  in.opcode = std::string(dotted.substr(0, dot));
  while (dot != std::string_view::npos) {
    size_t next = dotted.find('.', dot + 1);
    in.mods.emplace_back(dotted.substr(dot + 1, next == std::string_view::npos ? next : next - dot - 1));
    dot = next;
  }
  in.operands = std::move(operands);
  in.Decode();
  return in;
}

// ------------------------------------------------------ Function/Module ---

VarDecl& Function::AppendParam(std::string pname, Type type, std::optional<uint32_t> align) {
  VarDecl p;
  p.space = Space::kParam;
  p.type = type;
  p.align = align;
  p.name = std::move(pname);
  has_param_list = true;
  params.push_back(std::move(p));
  return params.back();
}

Function* Module::FindFunction(std::string_view name) {
  // Prefer a definition over a prototype.
  Function* proto = nullptr;
  for (auto& item : items)
    if (auto* f = std::get_if<Function>(&item); f && f->name == name) {
      if (f->has_body) return f;
      if (!proto) proto = f;
    }
  return proto;
}
const Function* Module::FindFunction(std::string_view name) const {
  return const_cast<Module*>(this)->FindFunction(name);
}
const VarDecl* Module::FindGlobal(std::string_view name) const {
  for (const auto& item : items)
    if (auto* v = std::get_if<VarDecl>(&item); v && v->name == name) return v;
  return nullptr;
}
std::vector<Function*> Module::Kernels() {
  std::vector<Function*> out;
  for (auto& item : items)
    if (auto* f = std::get_if<Function>(&item); f && f->is_entry && f->has_body) out.push_back(f);
  return out;
}

}  // namespace phos::ptx
