// Warp-level matrix instructions: wmma.load, wmma.store, wmma.mma (this
// part), then mma.sync, ldmatrix and stmatrix (below, "mma.sync").
//
// The PTX ISA leaves the distribution of a wmma fragment's elements over
// the lanes of a warp unspecified ("opaque"): a program may only load it,
// store it, feed it to wmma.mma and apply the same element-wise operation
// to every element. So the interpreter picks its own layout, the simplest
// one: the fragment's slots, counted lane by lane, register by register and
// element by element within a register (lane * slots_per_lane + slot), hold
// the matrix's elements in row-major order, wrapping around when a fragment
// has more slots than its matrix has elements (f16 A and B fragments of
// m16n16k16 have 512 slots for 256 elements: each element is held twice,
// as a GPU's fragments also repeat elements). Loads and stores are then per
// lane and need no rendezvous; wmma.mma gathers the whole warp's fragments
// (a collective of all non-exited lanes, ResolveCollective) and computes
// D = A * B + C in double precision, rounded once to D's type (integer
// types: exact, wrapping, or clamped with .satfinite).
//
// Supported: m16n16k16, m32n8k16 and m8n32k16 with .f16/.bf16/.s8/.u8
// inputs, m16n16k8 with .tf32 (the low 13 bits of each input ignored, as
// tensor cores do), m8n8k4 with .f64; accumulators .f16/.f32/.s32/.f64.
// Sub-byte (.s4/.u4/.b1) shapes are refused at decode (program.cc).
#include <cmath>
#include <cstring>

#include "interp/exec.h"

namespace phos::interp {

using ptx::Type;

namespace {

struct Frag {
  int rows = 0, cols = 0;
  int per_reg = 1;    // elements per register
  int elem_bits = 32;
  int mem_bytes = 4;  // bytes of one element in memory
};

// Element layout of a fragment of element type `t`.
bool Layout(Type t, int rows, int cols, Frag* f) {
  f->rows = rows;
  f->cols = cols;
  switch (t) {
    case Type::kF16: case Type::kBF16: f->per_reg = 2; f->elem_bits = 16; f->mem_bytes = 2; return true;
    case Type::kS8: case Type::kU8: case Type::kE4M3: case Type::kE5M2:
      f->per_reg = 4; f->elem_bits = 8; f->mem_bytes = 1; return true;
    case Type::kF32: case Type::kS32: case Type::kTF32: f->per_reg = 1; f->elem_bits = 32; f->mem_bytes = 4; return true;
    case Type::kF64: f->per_reg = 1; f->elem_bits = 64; f->mem_bytes = 8; return true;
    default: return false;
  }
}

// Rows and columns of the matrix `which` (kWmmaA/B/C) of shape `d`.
void Dims(const WmmaShape& d, int which, int* rows, int* cols) {
  switch (which) {
    case kWmmaA: *rows = d.m; *cols = d.k; break;
    case kWmmaB: *rows = d.k; *cols = d.n; break;
    default: *rows = d.m; *cols = d.n; break;
  }
}

double ToDouble(Type t, uint64_t bits) {
  switch (t) {
    case Type::kF16: return HalfToFloat(static_cast<uint16_t>(bits));
    case Type::kBF16: return Bf16ToFloat(static_cast<uint16_t>(bits));
    case Type::kTF32: return AsF32(bits & ~uint64_t{0x1FFF});
    case Type::kF32: return AsF32(bits);
    case Type::kF64: return AsF64(bits);
    case Type::kS8: return static_cast<int8_t>(bits);
    case Type::kU8: return static_cast<uint8_t>(bits);
    case Type::kE4M3: return Fp8ToDouble(Fp8::kE4M3, static_cast<uint8_t>(bits));
    case Type::kE5M2: return Fp8ToDouble(Fp8::kE5M2, static_cast<uint8_t>(bits));
    default: return static_cast<int32_t>(bits);
  }
}

uint64_t FromDouble(Type t, double v, bool satfinite) {
  switch (t) {
    case Type::kF16: return DoubleToHalf(v, Round::kNearest);
    case Type::kF32: return F32Bits(static_cast<float>(v));
    case Type::kF64: return F64Bits(v);
    default: {  // .s32: the sum is exact in double for these sizes
      if (satfinite) v = std::fmin(std::fmax(v, -2147483648.0), 2147483647.0);
      return static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int64_t>(v)));
    }
  }
}

// Element `slot` of a lane's fragment registers (operand indices
// first..first+nregs of `op`).
uint64_t SlotBits(Exec& x, const Op& op, int first, const Frag& f, int slot) {
  const uint64_t reg = Src(x, op, first + slot / f.per_reg);
  return Trunc(reg >> (f.elem_bits * (slot % f.per_reg)), f.elem_bits);
}

// Decodes op's fragment description; false with x.error set if the
// fragment operand cannot hold the matrix.
bool FragOf(Exec& x, const Op& op, Type t, int which, int nregs, Frag* f) {
  const WmmaShape d = WmmaShape::Unpack(op.target);
  int rows, cols;
  Dims(d, which, &rows, &cols);
  if (!Layout(t, rows, cols, f)) {
    x.error = "unsupported wmma element type";
    return false;
  }
  if (32 * nregs * f->per_reg < rows * cols) {
    x.error = "wmma fragment of " + std::to_string(nregs) + " registers is too small for a " +
              std::to_string(rows) + "x" + std::to_string(cols) + " matrix";
    return false;
  }
  return true;
}

// Address of element (r, c) of a matrix at `base` stored with leading
// dimension `stride` (elements) in `col`-major or row-major order.
uint64_t ElementAddress(uint64_t base, int r, int c, uint64_t stride, bool col, int bytes) {
  const uint64_t i = col ? static_cast<uint64_t>(c) * stride + r : static_cast<uint64_t>(r) * stride + c;
  return base + i * static_cast<uint64_t>(bytes);
}

}  // namespace

// wmma.load.{a,b,c}.sync.aligned.layout.shape{.space}.type {regs}, [p]{, stride}
Flow ExecWmmaLoad(Exec& x, const Op& op) {
  const WmmaShape d = WmmaShape::Unpack(op.target);
  const int nregs = op.shape[0];
  Frag f;
  if (!FragOf(x, op, op.type, d.matrix, nregs, &f)) return Flow::kError;
  const uint64_t base = Src(x, op, nregs);
  const uint64_t stride = op.nshape > 2 ? (Src(x, op, nregs + 1) & 0xFFFFFFFFu) : (d.col ? f.rows : f.cols);
  const int elems = f.rows * f.cols, slots = nregs * f.per_reg;
  std::vector<uint64_t> regs(static_cast<size_t>(nregs), 0);
  for (int s = 0; s < slots; ++s) {
    const int e = static_cast<int>((static_cast<int64_t>(x.t->lane) * slots + s) % elems);
    const uint64_t addr = ElementAddress(base, e / f.cols, e % f.cols, stride, d.col, f.mem_bytes);
    const uint8_t* p = Resolve(x, op.space, addr, static_cast<size_t>(f.mem_bytes), false);
    if (!p) return Flow::kError;
    uint64_t bits = 0;
    std::memcpy(&bits, p, static_cast<size_t>(f.mem_bytes));
    regs[static_cast<size_t>(s / f.per_reg)] |= Trunc(bits, f.elem_bits) << (f.elem_bits * (s % f.per_reg));
  }
  for (int i = 0; i < nregs; ++i) Set(x, op, i, regs[static_cast<size_t>(i)]);
  return Flow::kNext;
}

// wmma.store.d.sync.aligned.layout.shape{.space}.type [p], {regs}{, stride}:
// each lane stores the first copy of the elements its slots hold.
Flow ExecWmmaStore(Exec& x, const Op& op) {
  const WmmaShape d = WmmaShape::Unpack(op.target);
  const int nregs = op.nshape > 1 ? op.shape[1] : 0;
  Frag f;
  if (!FragOf(x, op, op.type, kWmmaC, nregs, &f)) return Flow::kError;
  const uint64_t base = Src(x, op, 0);
  const uint64_t stride = op.nshape > 2 ? (Src(x, op, 1 + nregs) & 0xFFFFFFFFu) : (d.col ? f.rows : f.cols);
  const int elems = f.rows * f.cols, slots = nregs * f.per_reg;
  for (int s = 0; s < slots; ++s) {
    const int64_t e = static_cast<int64_t>(x.t->lane) * slots + s;
    if (e >= elems) break;
    const int r = static_cast<int>(e / f.cols), c = static_cast<int>(e % f.cols);
    uint8_t* p = Resolve(x, op.space, ElementAddress(base, r, c, stride, d.col, f.mem_bytes),
                         static_cast<size_t>(f.mem_bytes), true);
    if (!p) return Flow::kError;
    const uint64_t bits = SlotBits(x, op, 1, f, s);
    std::memcpy(p, &bits, static_cast<size_t>(f.mem_bytes));
  }
  return Flow::kNext;
}

// wmma.mma.sync.aligned.alayout.blayout.shape.dtype{.atype.btype}.ctype d, a, b, c
// over every lane of the warp (`group`, all non-exited lanes).
Flow WmmaMma(Exec* ctx, const Op* const* ops, uint32_t group, std::string* error) {
  const int lead = __builtin_ctz(group);
  const Op& op0 = *ops[lead];
  if (group != 0xFFFFFFFFu) {
    *error = "wmma.mma.sync with lanes of the warp exited (every lane must execute it)";
    return Flow::kError;
  }
  const WmmaShape d = WmmaShape::Unpack(op0.target);
  const Type dt = op0.type, ct = op0.type2, at = op0.type3;
  const int nd = op0.shape[0], na = op0.shape[1], nb = op0.shape[2], nc = op0.shape[3];
  Frag fa, fb, fc, fd;
  Exec& x0 = ctx[lead];
  if (!FragOf(x0, op0, at, kWmmaA, na, &fa) || !FragOf(x0, op0, at, kWmmaB, nb, &fb) ||
      !FragOf(x0, op0, ct, kWmmaC, nc, &fc) || !FragOf(x0, op0, dt, kWmmaC, nd, &fd)) {
    *error = x0.error;
    return Flow::kError;
  }
  // Element e of a matrix lives in slot e: lane e / slots_per_lane.
  auto gather = [&](const Frag& f, int first, int nregs, Type t) {
    const int slots = nregs * f.per_reg;
    std::vector<double> m(static_cast<size_t>(f.rows * f.cols));
    for (int e = 0; e < f.rows * f.cols; ++e) {
      const int lane = e / slots;
      m[static_cast<size_t>(e)] = ToDouble(t, SlotBits(ctx[lane], *ops[lane], first, f, e % slots));
    }
    return m;
  };
  const std::vector<double> a = gather(fa, nd, na, at), b = gather(fb, nd + na, nb, at),
                            c = gather(fc, nd + na + nb, nc, ct);
  std::vector<double> out(static_cast<size_t>(d.m * d.n));
  for (int i = 0; i < d.m; ++i) {
    for (int j = 0; j < d.n; ++j) {
      double acc = c[static_cast<size_t>(i * d.n + j)];
      for (int k = 0; k < d.k; ++k) acc = std::fma(a[static_cast<size_t>(i * d.k + k)], b[static_cast<size_t>(k * d.n + j)], acc);
      out[static_cast<size_t>(i * d.n + j)] = acc;
    }
  }
  const int slots = nd * fd.per_reg, elems = d.m * d.n;
  for (int l = 0; l < 32; ++l) {
    std::vector<uint64_t> regs(static_cast<size_t>(nd), 0);
    for (int s = 0; s < slots; ++s) {
      const int e = (l * slots + s) % elems;
      const uint64_t bits = Trunc(FromDouble(dt, out[static_cast<size_t>(e)], d.satfinite), fd.elem_bits);
      regs[static_cast<size_t>(s / fd.per_reg)] |= bits << (fd.elem_bits * (s % fd.per_reg));
    }
    for (int r = 0; r < nd; ++r) Set(ctx[l], *ops[l], r, regs[static_cast<size_t>(r)]);
  }
  return Flow::kNext;
}

// ---------------------------------------------------------------- mma.sync
//
// Unlike wmma, mma.sync and ldmatrix have fragment layouts the PTX ISA
// specifies (each lane holds given elements; hand-written PTX and libraries
// such as CUTLASS rely on them): the functions below give, for lane `lane`
// and the i-th element of its fragment (registers in order, elements of a
// register from the low bits), the element's row and column, following the
// ISA's figures for each shape and type ("Matrix fragments for mma.m16n8k16"
// and its neighbours). g = lane / 4 (the group), t = lane % 4.

namespace {

struct RowCol {
  int row, col;
};

// 8-bit elements (.s8/.u8 and the fp8 .e4m3/.e5m2) share the fragment
// layouts of m16n8k16 and m16n8k32.
bool IsInt8(Type t) { return t == Type::kS8 || t == Type::kU8 || t == Type::kE4M3 || t == Type::kE5M2; }

RowCol MmaA(const WmmaShape& s, Type t, int lane, int i) {
  const int g = lane >> 2, q = lane & 3;
  if (s.m == 8) return {g, q};                                             // m8n8k4 .f64
  if (t == Type::kTF32) {
    if (s.k == 4) return {g + 8 * i, q};                                   // m16n8k4
    return {g + 8 * (i & 1), q + 4 * (i >> 1)};                            // m16n8k8
  }
  if (IsInt8(t)) {
    if (s.k == 16) return {g + 8 * (i >> 2), q * 4 + (i & 3)};             // m16n8k16
    return {g + 8 * ((i >> 2) & 1), q * 4 + (i & 3) + 16 * (i >> 3)};      // m16n8k32
  }
  if (s.k == 8) return {g + 8 * (i >> 1), q * 2 + (i & 1)};                // f16/bf16 m16n8k8
  return {g + 8 * ((i >> 1) & 1), q * 2 + (i & 1) + 8 * (i >> 2)};         // f16/bf16 m16n8k16
}

RowCol MmaB(const WmmaShape& s, Type t, int lane, int i) {
  const int g = lane >> 2, q = lane & 3;
  if (s.m == 8) return {q, g};                                             // m8n8k4 .f64
  if (t == Type::kTF32) return {q + 4 * i, g};                             // m16n8k4 (i = 0), k8
  if (IsInt8(t)) {
    if (s.k == 16) return {q * 4 + i, g};
    return {q * 4 + (i & 3) + 16 * (i >> 2), g};
  }
  if (s.k == 8) return {q * 2 + i, g};
  return {q * 2 + (i & 1) + 8 * (i >> 1), g};
}

RowCol MmaC(const WmmaShape& s, int lane, int i) {
  const int g = lane >> 2, q = lane & 3;
  if (s.m == 8) return {g, q * 2 + i};                                     // m8n8k4 .f64
  return {g + 8 * (i >> 1), q * 2 + (i & 1)};
}

// ldmatrix/stmatrix: the 16 bytes of row r of matrix j, at the address lane
// 8j + r gives in its operand `addr_at` (shared, or generic); null with
// *error set if they cannot be reached.
uint8_t* MatrixRow(Exec* ctx, const Op* const* ops, int j, int r, int addr_at, bool write, std::string* error) {
  Exec& x = ctx[j * 8 + r];
  const Op& op = *ops[j * 8 + r];
  const ptx::Space space = op.space == ptx::Space::kNone ? ptx::Space::kNone : ptx::Space::kShared;
  uint8_t* p = Resolve(x, space, Src(x, op, addr_at), 16, write);
  if (p == nullptr) *error = x.error;
  return p;
}

// Elements per lane of each fragment.
int MmaElems(const WmmaShape& s, int which) {
  const int rows = which == kWmmaB ? s.k : s.m, cols = which == kWmmaA ? s.k : s.n;
  return rows * cols / 32;
}

}  // namespace

// mma.sync.aligned.shape.row.col.dtype.atype.btype.ctype d, a, b, c over
// the whole warp.
Flow MmaSync(Exec* ctx, const Op* const* ops, uint32_t group, std::string* error) {
  if (group != 0xFFFFFFFFu) {
    *error = "mma.sync with lanes of the warp exited (every lane must execute it)";
    return Flow::kError;
  }
  const Op& op0 = *ops[0];
  const WmmaShape s = WmmaShape::Unpack(op0.target);
  const Type dt = op0.type, ct = op0.type2, at = op0.type3;
  Frag fa, fb, fc, fd;
  if (!Layout(at, s.m, s.k, &fa) || !Layout(at, s.k, s.n, &fb) || !Layout(ct, s.m, s.n, &fc) ||
      !Layout(dt, s.m, s.n, &fd)) {
    *error = "unsupported mma.sync types";
    return Flow::kError;
  }
  const int nd = op0.shape[0], na = op0.shape[1], nb = op0.shape[2], nc = op0.shape[3];
  const int ea = MmaElems(s, kWmmaA), eb = MmaElems(s, kWmmaB), ec = MmaElems(s, kWmmaC);
  if (na * fa.per_reg != ea || nb * fb.per_reg != eb || nc * fc.per_reg != ec || nd * fd.per_reg != ec) {
    *error = "mma.sync fragment registers do not match the shape";
    return Flow::kError;
  }
  std::vector<double> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
      c(static_cast<size_t>(s.m * s.n));
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < ea; ++i) {
      const RowCol p = MmaA(s, at, l, i);
      a[static_cast<size_t>(p.row * s.k + p.col)] = ToDouble(at, SlotBits(ctx[l], *ops[l], nd, fa, i));
    }
    for (int i = 0; i < eb; ++i) {
      const RowCol p = MmaB(s, at, l, i);
      b[static_cast<size_t>(p.row * s.n + p.col)] = ToDouble(at, SlotBits(ctx[l], *ops[l], nd + na, fb, i));
    }
    for (int i = 0; i < ec; ++i) {
      const RowCol p = MmaC(s, l, i);
      c[static_cast<size_t>(p.row * s.n + p.col)] = ToDouble(ct, SlotBits(ctx[l], *ops[l], nd + na + nb, fc, i));
    }
  }
  for (int l = 0; l < 32; ++l) {
    std::vector<uint64_t> regs(static_cast<size_t>(nd), 0);
    for (int i = 0; i < ec; ++i) {
      const RowCol p = MmaC(s, l, i);
      double acc = c[static_cast<size_t>(p.row * s.n + p.col)];
      for (int k = 0; k < s.k; ++k) {
        acc = std::fma(a[static_cast<size_t>(p.row * s.k + k)], b[static_cast<size_t>(k * s.n + p.col)], acc);
      }
      const uint64_t bits = Trunc(FromDouble(dt, acc, s.satfinite), fd.elem_bits);
      regs[static_cast<size_t>(i / fd.per_reg)] |= bits << (fd.elem_bits * (i % fd.per_reg));
    }
    for (int r = 0; r < nd; ++r) Set(ctx[l], *ops[l], r, regs[static_cast<size_t>(r)]);
  }
  return Flow::kNext;
}

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared{::cta}.b16 {d..}, [p]:
// lanes 8j..8j+7 give the addresses of the 8 rows (16 bytes each) of matrix
// j; lane l receives, in register j, matrix j's row l/4, columns 2(l%4) and
// 2(l%4)+1 — or with .trans the same two positions of the transpose.
Flow Ldmatrix(Exec* ctx, const Op* const* ops, uint32_t group, std::string* error) {
  if (group != 0xFFFFFFFFu) {
    *error = "ldmatrix with lanes of the warp exited (every lane must execute it)";
    return Flow::kError;
  }
  const Op& op0 = *ops[0];
  const int nmat = op0.shape[0];
  const bool trans = (op0.target & kLdmatrixTrans) != 0;
  uint16_t m[4][8][8];
  for (int j = 0; j < nmat; ++j) {
    for (int r = 0; r < 8; ++r) {
      const uint8_t* p = MatrixRow(ctx, ops, j, r, nmat, false, error);
      if (p == nullptr) return Flow::kError;
      std::memcpy(m[j][r], p, 16);
    }
  }
  for (int l = 0; l < 32; ++l) {
    for (int j = 0; j < nmat; ++j) {
      const int r = l >> 2, c = (l & 3) * 2;
      const uint16_t lo = trans ? m[j][c][r] : m[j][r][c];
      const uint16_t hi = trans ? m[j][c + 1][r] : m[j][r][c + 1];
      Set(ctx[l], *ops[l], j, static_cast<uint64_t>(lo) | static_cast<uint64_t>(hi) << 16);
    }
  }
  return Flow::kNext;
}

// stmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared{::cta}.b16 [p], {r..}:
// ldmatrix's inverse — lane l's register j holds matrix j's row l/4,
// columns 2(l%4) and 2(l%4)+1 (or those of the transpose), and lanes
// 8j..8j+7 give the addresses its 8 rows are stored at.
Flow Stmatrix(Exec* ctx, const Op* const* ops, uint32_t group, std::string* error) {
  if (group != 0xFFFFFFFFu) {
    *error = "stmatrix with lanes of the warp exited (every lane must execute it)";
    return Flow::kError;
  }
  const Op& op0 = *ops[0];
  const int nmat = op0.nshape > 1 ? op0.shape[1] : 0;
  const bool trans = (op0.target & kLdmatrixTrans) != 0;
  uint16_t m[4][8][8];
  for (int l = 0; l < 32; ++l) {
    for (int j = 0; j < nmat; ++j) {
      const uint32_t v = static_cast<uint32_t>(Src(ctx[l], *ops[l], 1 + j));
      const int r = l >> 2, c = (l & 3) * 2;
      (trans ? m[j][c][r] : m[j][r][c]) = static_cast<uint16_t>(v);
      (trans ? m[j][c + 1][r] : m[j][r][c + 1]) = static_cast<uint16_t>(v >> 16);
    }
  }
  for (int j = 0; j < nmat; ++j) {
    for (int r = 0; r < 8; ++r) {
      uint8_t* p = MatrixRow(ctx, ops, j, r, 0, true, error);
      if (p == nullptr) return Flow::kError;
      std::memcpy(p, m[j][r], 16);
    }
  }
  return Flow::kNext;
}

}  // namespace phos::interp
