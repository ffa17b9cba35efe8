// PTX IR — the data model the parser produces, passes transform, the
// interpreter pre-decodes and the emitter prints (docs/ptx-ir.md).
//
// Design rules:
//  * Everything that affects what ptxas generates is kept: module header,
//    top-level declarations in order, function signatures, performance
//    directives, every body statement in order, `.loc`/`.file` debug info.
//    Comments and whitespace are not kept.
//  * An instruction's text form is authoritative: `opcode` + `mods` (the
//    dot-separated modifiers exactly as written) + operands. `info` is a
//    decoded view of opcode/mods (enums for what phos knows); it is
//    recomputed by Decode() and never printed, so unknown instructions and
//    modifiers survive a round trip untouched.
//  * A function body is a flat vector of statements. Inline scopes `{ ... }`
//    are BlockBegin/BlockEnd statements, so a pass inserts before statement i
//    with body.insert() and an interpreter indexes statements directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace phos::ptx {

// ---------------------------------------------------------------- enums ---

// PTX fundamental types (plus opaque/unknown). kNone = not given.
enum class Type : uint8_t {
  kNone, kPred,
  kB8, kB16, kB32, kB64, kB128,
  kU8, kU16, kU32, kU64,
  kS8, kS16, kS32, kS64,
  kF16, kF16x2, kBF16, kBF16x2, kTF32, kF32, kF64,
  kE4M3, kE5M2, kE4M3x2, kE5M2x2,
  kTexRef, kSamplerRef, kSurfRef,
  kOther,  // a type name phos does not know; its text is kept alongside
};
std::string_view TypeName(Type t);           // "u32" (no dot); "" for kNone/kOther
Type TypeFromName(std::string_view name);    // name without dot; kNone if unknown
int TypeBits(Type t);                        // 0 if not a sized scalar

enum class Space : uint8_t {
  kNone, kReg, kSreg, kConst, kGlobal, kLocal, kParam, kShared, kTex,
  kSharedCta,      // .shared::cta
  kSharedCluster,  // .shared::cluster
};
std::string_view SpaceName(Space s);         // "global" (no dot)
Space SpaceFromName(std::string_view name);  // kNone if not a state space

enum class Linkage : uint8_t { kNone, kVisible, kExtern, kWeak, kCommon };
std::string_view LinkageName(Linkage l);     // "visible" (no dot), "" for kNone

// Opcodes phos knows by name; anything else is kUnknown with `opcode` text.
enum class Opcode : uint16_t {
  kUnknown,
  kAbs, kActivemask, kAdd, kAddc, kAnd, kAtom, kBar, kBarrier, kBfe, kBfi,
  kBfind, kBra, kBrev, kBrkpt, kBrx, kCall, kClz, kCnot, kCopysign, kCos, kCp,
  kCvt, kCvta, kDiv, kDp2a, kDp4a, kElect, kEx2, kExit, kFence, kFma, kFns,
  kGriddepcontrol, kIsspacep, kLd, kLdmatrix, kLdu, kLg2, kLop3, kMad, kMad24, kMadc, kMatch, kMax,
  kMbarrier, kMembar, kMin, kMma, kMov, kMul, kMul24, kNanosleep, kNeg, kNot,
  kOr, kPopc, kPrefetch, kPrmt, kRcp, kRed, kRedux, kRem, kRet, kRsqrt, kSad,
  kSelp, kSet, kSetp, kShf, kShfl, kShl, kShr, kSin, kSlct, kSqrt, kSt, kStmatrix, kSub,
  kSubc, kSuld, kSust, kTanh, kTex, kTld4, kTrap, kVabsdiff, kVadd, kVmax, kVmin, kVote,
  kVshl, kVshr, kVsub, kWmma, kXor,
  kCount,
};
std::string_view OpcodeName(Opcode op);
Opcode OpcodeFromName(std::string_view name);

enum class Rounding : uint8_t { kNone, kRn, kRz, kRm, kRp, kRna, kRs, kRni, kRzi, kRmi, kRpi };
enum class CmpOp : uint8_t {
  kNone, kEq, kNe, kLt, kLe, kGt, kGe, kLo, kLs, kHi, kHs,
  kEqu, kNeu, kLtu, kLeu, kGtu, kGeu, kNum, kNan,
};
enum class BoolOp : uint8_t { kNone, kAnd, kOr, kXor };
enum class AtomOp : uint8_t { kNone, kAnd, kOr, kXor, kCas, kExch, kAdd, kInc, kDec, kMin, kMax };
enum class MulMode : uint8_t { kNone, kLo, kHi, kWide };
enum class Semantics : uint8_t { kNone, kWeak, kRelaxed, kAcquire, kRelease, kAcqRel, kSc, kVolatile, kMmio };
enum class Scope : uint8_t { kNone, kCta, kCluster, kGpu, kSys };
enum class CacheOp : uint8_t { kNone, kCa, kCg, kCs, kLu, kCv, kWb, kWt };
enum class ShflMode : uint8_t { kNone, kUp, kDown, kBfly, kIdx };
enum class VoteMode : uint8_t { kNone, kAll, kAny, kUni, kBallot };

// ------------------------------------------------------------- operands ---

struct Operand {
  enum class Kind : uint8_t {
    kRegister,  // %r1, %tid.x, %SP; `neg` for !%p1; also the sink `_`
    kImmInt,    // 42, -1, 0xFF, 0b101, 017, 5U
    kImmF32,    // 0f3F800000 (bits in `bits`)
    kImmF64,    // 0d3FF0000000000000, or a decimal literal such as 1.5
    kSymbol,    // variable/function name (optionally +offset, generic(...))
    kLabel,     // branch target of bra / brx.idx
    kAddress,   // [base], [base+off], [off], [tex, {coords}] (extra in elems)
    kVector,    // {a, b, c, d}
    kList,      // (a, b) — call return/argument lists
    kPair,      // a|b — e.g. shfl.sync result + predicate
  };
  Kind kind = Kind::kImmInt;

  // kRegister / kSymbol / kLabel: the name. kAddress: the base register or
  // symbol ("" when the address is a bare immediate).
  std::string name;
  bool neg = false;           // kRegister: written !%p
  bool generic_wrap = false;  // kSymbol: written generic(name) (initialisers)

  // kImmInt: magnitude and how it was written; value() is the signed value.
  uint64_t bits = 0;          // kImmInt magnitude; kImmF32/F64 raw IEEE bits
  bool minus = false;         // kImmInt: written with a leading '-'
  uint8_t radix = 10;         // kImmInt: 2, 8, 10 or 16
  bool unsigned_suffix = false;  // kImmInt: trailing U

  // kAddress: base register? offset (and whether "+off" was written).
  // kSymbol: offset from `name+off`.
  bool base_is_reg = false;
  bool has_offset = false;
  int64_t offset = 0;

  std::vector<Operand> elems;  // kVector / kList / kPair (2) / kAddress extras

  int64_t value() const { return minus ? -static_cast<int64_t>(bits) : static_cast<int64_t>(bits); }
  float f32() const;
  double f64() const;
  bool is_reg() const { return kind == Kind::kRegister; }

  static Operand Reg(std::string name, bool negated = false);
  static Operand Imm(int64_t v);
  static Operand F32(float v);
  static Operand F64(double v);
  static Operand Sym(std::string name, int64_t offset = 0);
  static Operand Label(std::string name);
  static Operand Addr(std::string base, bool base_is_reg, int64_t offset = 0);
  static Operand Vector(std::vector<Operand> elems);
  static Operand List(std::vector<Operand> elems);
  static Operand Pair(Operand a, Operand b);
};

// --------------------------------------------------------- instructions ---

// Decoded view of opcode + mods. Computed by Instruction::Decode().
struct InstrInfo {
  Opcode op = Opcode::kUnknown;
  std::vector<Type> types;   // every type modifier, in order (cvt: dst, src)
  Space space = Space::kNone;
  Rounding rounding = Rounding::kNone;
  CmpOp cmp = CmpOp::kNone;  // setp / set / slct comparison
  BoolOp bool_op = BoolOp::kNone;  // setp / set combining op
  AtomOp atom_op = AtomOp::kNone;  // atom / red / redux
  MulMode mul_mode = MulMode::kNone;
  Semantics sem = Semantics::kNone;
  Scope scope = Scope::kNone;
  CacheOp cache = CacheOp::kNone;
  ShflMode shfl = ShflMode::kNone;
  VoteMode vote = VoteMode::kNone;
  uint8_t vec = 1;           // .v2 / .v4 / .v8
  bool sat = false, ftz = false, approx = false, full = false, uni = false;
  bool cc = false;           // .cc (carry out)
  bool nc = false;           // ld.global.nc
  bool sync = false, aligned = false;
  bool to = false;           // cvta.to.<space>
  std::vector<uint8_t> unknown_mods;  // indices into mods not decoded above

  Type type() const { return types.empty() ? Type::kNone : types.front(); }
};

struct Instruction {
  // Guard predicate: `@%p1` (guard = "%p1") or `@!%p1` (guard_neg).
  std::string guard;
  bool guard_neg = false;
  std::string opcode;              // "ld", "shfl", "mma", ...
  std::vector<std::string> mods;   // "global", "nc", "v4", "f32" (no dots)
  std::vector<Operand> operands;
  InstrInfo info;                  // derived from opcode+mods

  // Recomputes `info` from opcode and mods. Call after editing them.
  void Decode();
  // "ld.global.nc.v4.f32"
  std::string FullOpcode() const;
  bool HasMod(std::string_view m) const;
  // The shape modifier of a matrix instruction (wmma, mma: "m16n8k16") into
  // *m, *n, *k; false if it has none.
  bool MatrixShape(int* m, int* n, int* k) const;
};

// Builds a decoded instruction from a dotted opcode ("st.global.u32").
Instruction MakeInstruction(std::string_view dotted_opcode, std::vector<Operand> operands);

// -------------------------------------------------------- declarations ---

// A variable / register / parameter declaration. One declarator each
// (`.reg .b32 %a, %b;` is split into two VarDecls by the parser).
struct VarDecl {
  Linkage linkage = Linkage::kNone;
  Space space = Space::kNone;
  std::optional<uint32_t> align;
  uint8_t vec = 1;                 // .v2 / .v4 vector variables
  Type type = Type::kNone;
  std::string type_name;           // set when type == kOther
  // .param pointer attributes: `.ptr.global.align 16` / `.ptr .align 8`.
  bool ptr = false;
  Space ptr_space = Space::kNone;
  std::optional<uint32_t> ptr_align;
  std::string name;
  std::optional<uint32_t> range;   // %r<12>: declares %r0 .. %r11
  std::vector<int64_t> dims;       // arr[16][4]; -1 for []
  std::optional<Operand> init;     // = 5 / = {1, 2} / = {sym, generic(sym)}
};

// `.maxntid 128, 1, 1`, `.minnctapersm 4`, `.noreturn`, ...
struct PerfDirective {
  std::string name;                // without dot
  std::vector<int64_t> args;
};

// Statements inside a function body.
struct Label { std::string name; };
struct BlockBegin {};
struct BlockEnd {};
struct Pragma { std::vector<std::string> strings; };  // .pragma "nounroll";
struct Loc {
  int64_t file = 0, line = 0, column = 0;
  std::string extra;  // `, function_name ..., inlined_at ...` as normalised text
};
// A directive phos keeps as text (e.g. `prototype_0 : .callprototype ...;`
// or an unknown directive): re-emitted verbatim followed by `;`.
struct RawStatement { std::string text; };

using Statement = std::variant<Instruction, Label, VarDecl, BlockBegin, BlockEnd,
                               Pragma, Loc, RawStatement>;

struct Function {
  Linkage linkage = Linkage::kNone;
  bool is_entry = false;           // .entry (kernel) vs .func
  std::string name;
  std::vector<VarDecl> returns;    // .func (.param ...) name
  std::vector<VarDecl> params;
  bool has_param_list = false;     // `name()` vs `name` without parentheses
  std::vector<PerfDirective> directives;
  bool has_body = false;           // false: a prototype ending in ';'
  std::vector<Statement> body;

  // Appends a kernel parameter `.param .<type> name` (used by the twin pass).
  VarDecl& AppendParam(std::string name, Type type, std::optional<uint32_t> align = {});
};

struct FileDirective {
  int64_t index = 0;
  std::string path;
  std::vector<int64_t> extra;      // optional timestamp, size
};
// Top-level directive kept as text (e.g. `.section .debug_str { ... }`).
struct RawDirective { std::string text; };

using TopItem = std::variant<VarDecl, Function, FileDirective, RawDirective, Pragma>;

struct Module {
  std::string version;             // "9.0"
  std::vector<std::string> target; // {"sm_90"} or {"sm_90a", "debug"}
  uint32_t address_size = 64;      // 32 or 64 (64 if not given)
  bool has_address_size = false;
  std::vector<TopItem> items;      // in source order

  Function* FindFunction(std::string_view name);
  const Function* FindFunction(std::string_view name) const;
  const VarDecl* FindGlobal(std::string_view name) const;
  std::vector<Function*> Kernels();
};

}  // namespace phos::ptx
