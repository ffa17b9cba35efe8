// Internal to phos_interp: per-thread and per-block execution state and the
// operand/memory helpers the ops_*.cc handlers share. Not a public header.
//
// Ownership: a Block and its Threads belong to exactly one worker thread of
// a launch for the block's whole lifetime; nothing here is shared between
// host threads except global memory (through GlobalMemory, with atomics for
// atom/red) and Program module-variable storage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "interp/launch.h"
#include "interp/memory.h"
#include "interp/numeric.h"
#include "interp/program.h"

namespace phos::interp {

constexpr uint32_t kNumBarriers = 16;  // CTA barriers 0..15 (bar.sync a)

struct Frame {
  uint32_t func = 0;
  uint32_t pc = 0;
  uint32_t reg_base = 0;    // into Thread::regs
  uint32_t param_base = 0;  // into Thread::params
  uint32_t local_base = 0;  // into Thread::local
};

constexpr uint32_t kWarpSize = 32;

// A thread's call frames, as much of std::vector's interface as the
// interpreter uses. The first two live inside the Thread: most threads
// never call deeper, and entering a block then writes no memory of its own
// per thread (a vector's heap block per thread cost a cache miss each).
class FrameStack {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Frame& back() { return At(size_ - 1); }
  const Frame& back() const { return At(size_ - 1); }
  Frame& front() { return At(0); }
  const Frame& front() const { return At(0); }
  void clear() {
    size_ = 0;
    more_.clear();
  }
  void push_back(const Frame& f) {
    if (size_ < kInline) {
      inline_[size_] = f;
    } else {
      more_.push_back(f);
    }
    ++size_;
  }
  void pop_back() {
    --size_;
    if (size_ >= kInline) more_.pop_back();
  }

 private:
  static constexpr size_t kInline = 2;
  Frame& At(size_t i) { return i < kInline ? inline_[i] : more_[i - kInline]; }
  const Frame& At(size_t i) const { return i < kInline ? inline_[i] : more_[i - kInline]; }
  Frame inline_[kInline];
  std::vector<Frame> more_;
  size_t size_ = 0;
};


// The per-lane state of one warp, lane-interleaved ("structure of
// arrays") so that a pass over a warp's lanes touches a few cache lines,
// not 32 Threads:
//   regs   register row r of lane l is regs[r * kWarpSize + l]. A row is a
//          frame's register (the frame's reg_base + its index); every lane
//          has every row, so an op executed for the lanes of a warp at once
//          (warp_ops.cc) reads and writes contiguous memory. Each lane uses
//          rows [0, its reg_top).
//   state  each lane's Thread::State (Thread::state()).
//   icount each lane's executed ops (Thread::icount(); also %clock).
//   tid    each lane's %tid, for whole-warp reads of it.
// Owned by the Block's worker thread, like the Threads.
struct WarpState {
  std::vector<uint64_t> regs;
  uint8_t state[kWarpSize] = {};
  uint64_t icount[kWarpSize] = {};
  uint32_t tid[3][kWarpSize] = {};  // each lane's %tid.x/y/z (0 past the block's end)
  uint32_t rows() const { return static_cast<uint32_t>(regs.size() / kWarpSize); }
  // Grows to at least `rows` rows (new ones zero). May move `regs`.
  void Reserve(uint32_t rows) {
    if (regs.size() < size_t{rows} * kWarpSize) regs.resize(size_t{rows} * kWarpSize, 0);
  }
};

// One lane's view of its frame's registers: r[i] is register i of the frame.
struct RegView {
  uint64_t* p = nullptr;  // row 0 of the frame, this lane's column
  uint64_t& operator[](uint32_t i) const { return p[size_t{i} * kWarpSize]; }
};

struct Thread {
  // kYield: waits at an mbarrier (ops_mbarrier.cc) until one changes.
  enum State : uint8_t { kRunnable, kBarrier, kCollective, kYield, kExited };
  WarpState* warp_state = nullptr;  // its warp's (Block::warps): registers, state, icount
  uint32_t reg_top = 0;             // rows in use by its frames
  std::vector<uint8_t> params;
  std::vector<uint8_t> local;
  FrameStack frames;
  uint32_t tid[3] = {};
  uint32_t linear = 0, lane = 0, warp = 0;
  bool carry = false;        // CC.CF of add.cc / sub.cc
  bool wait_timed_out = false;  // resumed from kYield with nothing changed
  uint64_t wait_epoch = 0;      // Block::mbar_epoch when it yielded
  uint8_t bar_id = 0;           // kBarrier: the barrier it waits at
  State state() const { return static_cast<State>(warp_state->state[lane]); }
  void set_state(State s) { warp_state->state[lane] = s; }
  uint64_t& icount() const { return warp_state->icount[lane]; }  // ops executed (also %clock)
  uint64_t& reg(uint32_t row) const { return warp_state->regs[size_t{row} * kWarpSize + lane]; }
};

struct Block {
  const Program* prog = nullptr;
  GlobalMemory* gmem = nullptr;
  const LaunchOptions* opts = nullptr;
  std::vector<uint8_t> shared;   // static + dynamic shared memory
  uint32_t dyn_smem = 0;
  uint32_t ctaid[3] = {}, ntid[3] = {}, nctaid[3] = {};
  uint32_t nthreads = 0, nwarps = 0, smid = 0;
  uint64_t mbar_epoch = 0;  // bumped by every change of an mbarrier of the block
  // bar.arrive arrivals at each barrier in its current generation.
  uint32_t bar_arrived[kNumBarriers] = {};
  std::vector<Thread> threads;
  std::vector<WarpState> warps;  // one per warp
  // The launch's parameter bytes: every thread's kernel formals (read-only).
  const uint8_t* launch_params = nullptr;
  // Device memory this worker has been told stays reachable for the launch
  // (GlobalMemory::TranslateStable), looked in first by GlobalBytes; the
  // Block lives for one launch, so they do too. Replaced round robin.
  static constexpr size_t kStableRanges = 8;
  StableRange stable[kStableRanges];
  size_t stable_next = 0;
};

// Whether a write at offset `off` of thread `t`'s parameter buffer would
// touch its kernel's formal parameters (they are its first bytes, so where
// the write starts decides), which the PTX ISA makes read-only (ops_mem.cc,
// ops_control.cc refuse such writes: the warp handlers read the formals
// from Block::launch_params).
inline bool WritesKernelFormals(const Thread& t, const Program& p, uint64_t off) {
  return !t.frames.empty() && off < p.function(static_cast<int>(t.frames.front().func)).formal_bytes;
}
constexpr const char* kKernelFormalsReadOnly = "store to a kernel parameter (read-only in the PTX ISA)";

// Context of the thread being stepped. `r` and `fn` follow the top frame.
struct Exec {
  Block* b = nullptr;
  Thread* t = nullptr;
  RegView r;
  const Function* fn = nullptr;
  std::string error;
  // The CUDA error a failure stands for when it is not a plain launch
  // failure (710, cudaErrorAssert, for a device-side assert); 0 otherwise.
  int api_error = 0;
  void Refresh() {
    const Frame& f = t->frames.back();
    r.p = t->warp_state->regs.data() + size_t{f.reg_base} * kWarpSize + t->lane;
    fn = &b->prog->function(static_cast<int>(f.func));
  }
  Frame& frame() { return t->frames.back(); }
};

// The Exec of thread `t` of block `b` at its current frame, and the op
// that thread stands at (the scheduler and the collectives look at threads
// other than the one being stepped).
inline Exec ExecOf(Block& b, Thread& t) {
  Exec x;
  x.b = &b;
  x.t = &t;
  x.Refresh();
  return x;
}
inline const Op& CurrentOp(const Block& b, const Thread& t) {
  const Frame& f = t.frames.back();
  return b.prog->function(static_cast<int>(f.func)).ops[f.pc];
}

uint64_t ReadSreg(Exec& x, uint32_t id);  // ops_sreg.cc

// Op::sub bits of floating-point arithmetic (testp uses sub for its mode).
constexpr uint8_t kFloatRelu = 1;  // .relu: negative results become +0
constexpr uint8_t kFloatNaN = 2;   // min/max.NaN: a NaN operand gives NaN
// Op::sub bits of cp.async: what its fourth operand is.
constexpr uint8_t kCpAsyncSrcSize = 1;    // bytes to read; the rest zero-filled
constexpr uint8_t kCpAsyncIgnoreSrc = 2;  // a predicate: true reads nothing
// wmma: which matrix (Op::sub of wmma.load), the shape and layout (packed
// into Op::target, which only branches and calls use otherwise).
constexpr int kWmmaA = 0, kWmmaB = 1, kWmmaC = 2;
constexpr uint8_t kWmmaLoad = 1, kWmmaStore = 2, kWmmaMma = 3;  // Op::sub
struct WmmaShape {
  int m = 0, n = 0, k = 0;
  int matrix = kWmmaA;     // load: a, b or c (store: the d matrix, as c)
  bool col = false;        // load/store: column-major memory layout
  bool satfinite = false;  // mma: clamp integer results
  uint32_t Pack() const {
    return static_cast<uint32_t>(m) | static_cast<uint32_t>(n) << 8 | static_cast<uint32_t>(k) << 16 |
           static_cast<uint32_t>(matrix) << 24 | static_cast<uint32_t>(col) << 26 |
           static_cast<uint32_t>(satfinite) << 27;
  }
  static WmmaShape Unpack(uint32_t v) {
    WmmaShape s;
    s.m = static_cast<int>(v & 0xFF);
    s.n = static_cast<int>((v >> 8) & 0xFF);
    s.k = static_cast<int>((v >> 16) & 0xFF);
    s.matrix = static_cast<int>((v >> 24) & 3);
    s.col = (v >> 26) & 1;
    s.satfinite = (v >> 27) & 1;
    return s;
  }
};
// CTA barriers (ops_barrier.cc): Op::sub of bar/barrier (1 is
// bar.warp.sync, a warp collective), flags in Op::target.
constexpr uint8_t kBarSync = 0, kBarWarpSync = 1, kBarArrive = 2, kBarRed = 3;
constexpr uint32_t kBarHasCount = 1;  // a thread-count operand b
constexpr uint32_t kBarRedPopc = 2, kBarRedAnd = 4, kBarRedOr = 8;
// mbarrier (ops_mbarrier.cc): the operation in Op::sub, flags in
// Op::target.
constexpr uint8_t kMbarInit = 1, kMbarInval = 2, kMbarArrive = 3, kMbarArriveDrop = 4, kMbarExpectTx = 5,
                  kMbarCompleteTx = 6, kMbarTestWait = 7, kMbarTryWait = 8, kMbarPendingCount = 9;
constexpr uint32_t kMbarFlagExpectTx = 1;  // arrive.expect_tx: the count operand is a transaction count
constexpr uint32_t kMbarFlagParity = 2;    // test_wait/try_wait.parity
constexpr uint32_t kMbarFlagNoInc = 4;     // cp.async.mbarrier.arrive.noinc
constexpr uint32_t kBulkToShared = 8;  // cp.async.bulk from global into shared (else shared -> global)
// Op::sub bits of cvt.
constexpr uint8_t kCvtRelu = 1;       // .relu
constexpr uint8_t kCvtSatFinite = 2;  // .satfinite: +-inf becomes +-max finite

// Textures and surfaces (ops_texture.cc): the geometry in Op::sub of
// tex/tld4/suld/sust; tld4's component and the surface out-of-range mode
// in Op::target; txq/suq's query in Op::sub, kQuerySurface in Op::target.
constexpr uint8_t kGeom1d = 1, kGeom2d = 2, kGeom3d = 3, kGeomA1d = 4, kGeomA2d = 5, kGeomCube = 6,
                  kGeomACube = 7;
constexpr uint32_t kSurfaceTrap = 0, kSurfaceClamp = 1, kSurfaceZero = 2;
constexpr uint32_t kTexLevel = 1, kTexGrad = 2;  // Op::target of tex: a .level / .grad operand follows
constexpr uint8_t kQueryWidth = 1, kQueryHeight = 2, kQueryDepth = 3, kQueryArraySize = 4, kQueryMipLevels = 5,
                  kQueryNormalized = 6, kQueryFilter = 7, kQueryAddr0 = 8, kQueryAddr1 = 9, kQueryAddr2 = 10;
constexpr uint32_t kQuerySurface = 1;

inline const Operand& Opd(const Exec& x, const Op& op, int i) { return x.fn->operands[op.first + i]; }
inline uint64_t Val(Exec& x, const Operand& o) {
  switch (o.kind) {
    case Operand::kReg: return x.r[o.reg] + o.imm;
    case Operand::kImm: return o.imm;
    case Operand::kLocalSym: return x.t->frames.back().local_base + o.imm;
    case Operand::kSreg: return ReadSreg(x, o.reg);
    default: return 0;
  }
}
inline uint64_t Src(Exec& x, const Op& op, int i) { return Val(x, Opd(x, op, i)); }
inline bool PredVal(Exec& x, const Operand& o) { return ((Val(x, o) & 1) != 0) != o.neg; }
inline void Set(Exec& x, const Op& op, int i, uint64_t v) {
  const Operand& o = Opd(x, op, i);
  if (o.kind == Operand::kReg) x.r[o.reg] = v;
}
inline Flow Fail(Exec& x, std::string msg) {
  x.error = std::move(msg);
  return Flow::kError;
}
inline Round RoundOf(ptx::Rounding r) {
  switch (r) {
    case ptx::Rounding::kRz: case ptx::Rounding::kRzi: return Round::kZero;
    case ptx::Rounding::kRm: case ptx::Rounding::kRmi: return Round::kDown;
    case ptx::Rounding::kRp: case ptx::Rounding::kRpi: return Round::kUp;
    default: return Round::kNearest;
  }
}

// The lanes of one warp that stand at one op together, for a WarpFn:
// their frame's register rows (register i of lane l: rows[i * kWarpSize +
// l]) and Threads (lanes[l]; the others' may be null).
struct WarpExec {
  Block* b = nullptr;
  Thread* const* lanes = nullptr;
  const Function* fn = nullptr;
  uint64_t* rows = nullptr;
  const WarpState* ws = nullptr;  // the warp's
  size_t depth = 0;  // of the lanes' frame stacks (1: in the kernel itself)
  uint32_t live = 0;  // the warp's lanes that have not exited (the group's and others)
  const Operand& Opd(const Op& op, int i) const { return fn->operands[op.first + i]; }
};
// Fills f->zero_at_entry (entry_registers.cc). After the ops are decoded.
void FindRegistersReadUnset(Function* f);

// The warp handler of a decoded op, or null when it has none (warp_ops.cc).
WarpFn BindWarp(const Op& op, const std::vector<Operand>& operands);

// ops_cvt.cc: cvt of one scalar `a` as `op` says (not the packed forms);
// false for a pair of types it does not convert.
bool ConvertScalar(const Op& op, uint64_t a, uint64_t* out);
// ops_cvt.cc: setp/set's comparison of a and b as type t.
bool Compare(ptx::CmpOp c, ptx::Type t, uint64_t a, uint64_t b, bool ftz);

// Host pointer for global (or module variable) bytes [addr, addr + bytes),
// or nullptr when they are not all such memory, or a write to .const
// (ops_mem.cc).
uint8_t* GlobalBytes(Block& b, uint64_t addr, size_t bytes, bool write);

// Host pointer for `bytes` at `addr` in `space` (kNone = generic), or
// nullptr with x.error set (illegal address). ops_mem.cc.
uint8_t* Resolve(Exec& x, ptx::Space space, uint64_t addr, size_t bytes, bool write);

// Handlers (bound per op by program.cc).
Flow ExecIntArith(Exec&, const Op&);    // ops_int.cc
// ops_video.cc: vadd/vsub/vabsdiff/vmin/vmax/vshl/vshr. op.sub holds the
// secondary operation (kVideoOp2*) and, for shifts, kVideoWrap.
inline constexpr uint8_t kVideoOp2Add = 1, kVideoOp2Min = 2, kVideoOp2Max = 3, kVideoOp2Mask = 3;
inline constexpr uint8_t kVideoWrap = 4;
Flow ExecVideo(Exec&, const Op&);
Flow ExecFloatArith(Exec&, const Op&);  // ops_float.cc
Flow ExecCvt(Exec&, const Op&);         // ops_cvt.cc
Flow ExecSetp(Exec&, const Op&);        // ops_cvt.cc (comparisons)
Flow ExecSet(Exec&, const Op&);
Flow ExecSelp(Exec&, const Op&);
Flow ExecSlct(Exec&, const Op&);
Flow ExecMov(Exec&, const Op&);         // ops_mem.cc
Flow ExecLd(Exec&, const Op&);
Flow ExecSt(Exec&, const Op&);
Flow ExecCvta(Exec&, const Op&);
Flow ExecIsspacep(Exec&, const Op&);
Flow ExecNop(Exec&, const Op&);
Flow ExecCpAsync(Exec&, const Op&);
Flow ExecMbarrier(Exec&, const Op&);             // ops_mbarrier.cc
Flow ExecCpAsyncMbarrierArrive(Exec&, const Op&);
Flow ExecCpAsyncBulk(Exec&, const Op&);         // ops_mem.cc
// ops_mbarrier.cc: `bytes` of the mbarrier at `addr` arrived (complete_tx).
Flow MbarrierCompleteTx(Exec& x, const Op& op, uint64_t addr, uint64_t bytes);
Flow ExecTex(Exec&, const Op&);           // ops_texture.cc
Flow ExecTld4(Exec&, const Op&);
Flow ExecTextureQuery(Exec&, const Op&);  // txq and suq
Flow ExecSuld(Exec&, const Op&);
Flow ExecSust(Exec&, const Op&);
Flow ExecWmmaLoad(Exec&, const Op&);    // ops_matrix.cc
Flow ExecWmmaStore(Exec&, const Op&);
// ops_matrix.cc: wmma.mma for the lanes of `group` (the whole warp), each
// with its Exec and op (ResolveCollective calls it).
Flow WmmaMma(Exec* ctx, const Op* const* ops, uint32_t group, std::string* error);
// ops_matrix.cc: mma.sync and ldmatrix, whole-warp collectives with the
// ISA's fragment layouts.
Flow MmaSync(Exec* ctx, const Op* const* ops, uint32_t group, std::string* error);
Flow Ldmatrix(Exec* ctx, const Op* const* ops, uint32_t group, std::string* error);
Flow Stmatrix(Exec* ctx, const Op* const* ops, uint32_t group, std::string* error);
constexpr uint32_t kLdmatrixTrans = 1;  // Op::target of ldmatrix
Flow ExecAtom(Exec&, const Op&);        // ops_atomic.cc
Flow ExecBra(Exec&, const Op&);         // ops_control.cc
Flow ExecBrx(Exec&, const Op&);         // ops_control.cc: brx.idx
Flow ExecCall(Exec&, const Op&);
Flow ExecCallIndirect(Exec&, const Op&);
Flow ExecAssertFail(Exec&, const Op&);  // a call of __assertfail (ops_control.cc)
Flow ExecVprintf(Exec&, const Op&);     // a call of vprintf (ops_printf.cc)
Flow ExecDeviceMalloc(Exec&, const Op&);  // a call of malloc (ops_heap.cc)
Flow ExecDeviceFree(Exec&, const Op&);    // a call of free (ops_heap.cc)
Flow ExecDeviceAlignedMalloc(Exec&, const Op&);  // an aligned malloc (ops_heap.cc)
Flow ExecGraphSetConditional(Exec&, const Op&);  // cudaGraphSetConditional (ops_control.cc)
// Calls of the external functions the interpreter implements itself
// (ops_control.cc): argument `i` of call `op` as wide as the callee
// declares it (at most 8 bytes; 0 for one it lacks); a NUL-terminated
// string at a generic address (at most `max` bytes, "?" if unreadable);
// the call's return value (its first return operand, `bytes` wide).
uint64_t CallArg(Exec& x, const Op& op, uint32_t i);
std::string DeviceString(Exec& x, uint64_t addr, size_t max = 256);
// (kError when the return operand lies outside the caller's .param space.)
Flow SetCallReturn(Exec& x, const Op& op, uint64_t value, size_t bytes);
Flow ExecRet(Exec&, const Op&);
Flow ExecExit(Exec&, const Op&);
Flow ExecTrap(Exec&, const Op&);
Flow ExecUnsupported(Exec&, const Op&);
Flow ExecCollective(Exec&, const Op&);  // ops_warp.cc: shfl/vote/.../bar.warp.sync/wmma.mma wait

// ops_warp.cc: completes a warp collective for the lanes in `group` (all
// waiting at the same op). lanes[i] is lane i of the warp (nullptr past the
// block's end). Returns kBlock if it must keep waiting (a lane named in the
// member mask has not arrived), kNext when done (pcs advanced), kError.
Flow ResolveCollective(Block& b, Thread* const* lanes, uint32_t group, uint32_t exited, std::string* error);
// ops_warp.cc: shfl.sync's source lane for `lane` (its b and c operands,
// the lanes `group` taking part): *source, and the predicate p (whether
// the source lane is in range; when not, *source is the lane itself).
bool ShuffleSource(ptx::ShflMode mode, int lane, uint64_t b, uint64_t c, uint32_t group, int* source);
Flow ExecBarrier(Exec&, const Op&);    // ops_barrier.cc: bar.sync / bar.red wait
Flow ExecBarArrive(Exec&, const Op&);  // bar.arrive
// ops_barrier.cc: releases every barrier of the block whose arrivals are
// complete (computing bar.red results); whether one was. False with
// *error set on a malformed barrier.
bool ReleaseBarriers(Block& b, bool* released, std::string* error);
// A thread stuck at a barrier, for the deadlock message.
std::string BarrierWaitText(const Block& b, const Thread& t);
// ops_warp.cc: the waiting lanes (bit mask) that meet lane `first` at its
// collective: the same kind of instruction with the same member mask
// (activemask: the same site).
uint32_t CollectiveGroup(Block& b, Thread* const* lanes, uint32_t waiting, int first);  // bar.sync / barrier.sync (block-wide)

// Pushes/pops call frames (ops_control.cc); used for kernel entry too.
void PushFrame(Thread& t, const Program& p, uint32_t func);

}  // namespace phos::interp
