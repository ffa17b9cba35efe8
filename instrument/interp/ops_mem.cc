// Memory: address resolution per state space (memory.h), mov, ld/ldu/st
// (scalar and .v2/.v4), cvta, isspacep, and the no-op hints
// (prefetch/fence/membar/nanosleep: with one host thread per block and real
// atomics between blocks, host memory ordering already gives their effect
// for the patterns PTX allows).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include <thread>

#include "common/hex.h"
#include "interp/exec.h"
#include "interp/scalar_access.h"

namespace phos::interp {

using ptx::Space;

namespace {

uint8_t* Illegal(Exec& x, const char* space, uint64_t addr, size_t bytes, bool write) {
  x.error = std::string("illegal address: ") + (write ? "store of " : "load of ") + std::to_string(bytes) +
            " bytes at " + Hex(addr) + " (" + space + ")";
  return nullptr;
}

uint8_t* InBuffer(Exec& x, std::vector<uint8_t>& buf, uint64_t off, size_t bytes, const char* space, uint64_t addr,
                  bool write) {
  if (off > buf.size() || bytes > buf.size() - off) return Illegal(x, space, addr, bytes, write);
  return buf.data() + off;
}

uint8_t* Global(Exec& x, uint64_t addr, size_t bytes, bool write) {
  const Program& p = *x.b->prog;
  if (write && p.InModuleStorage(addr, bytes) && p.InConstStorage(addr)) {
    return Illegal(x, "write to .const", addr, bytes, write);
  }
  uint8_t* h = GlobalBytes(*x.b, addr, bytes, write);
  if (!h) return Illegal(x, "global", addr, bytes, write);
  return h;
}

}  // namespace

uint8_t* GlobalBytes(Block& b, uint64_t addr, size_t bytes, bool write) {
  const Program& p = *b.prog;
  if (p.InModuleStorage(addr, bytes)) {
    if (write && p.InConstStorage(addr)) return nullptr;
    return reinterpret_cast<uint8_t*>(addr);
  }
  for (const StableRange& r : b.stable) {
    if (addr >= r.begin && addr < r.end && bytes <= r.end - addr) return r.host + (addr - r.begin);
  }
  StableRange found;
  void* host = b.gmem->TranslateStable(addr, bytes, write, &found);
  if (host != nullptr && found.end > found.begin) {
    b.stable[b.stable_next] = found;
    b.stable_next = (b.stable_next + 1) % Block::kStableRanges;
  }
  return static_cast<uint8_t*>(host);
}

uint8_t* Resolve(Exec& x, Space space, uint64_t addr, size_t bytes, bool write) {
  Thread& t = *x.t;
  if (write && (space == Space::kNone || space == Space::kParam)) {
    const bool in_window = InWindow(addr, kParamWindow);
    if (in_window || space == Space::kParam) {
      const uint64_t off = in_window ? addr - kParamWindow : t.frames.back().param_base + addr;
      if (WritesKernelFormals(t, *x.b->prog, off)) {
        x.error = kKernelFormalsReadOnly;
        return nullptr;
      }
    }
  }
  switch (space) {
    case Space::kNone:
      if (InWindow(addr, kSharedWindow)) return InBuffer(x, x.b->shared, addr - kSharedWindow, bytes, "shared", addr, write);
      if (InWindow(addr, kLocalWindow)) return InBuffer(x, t.local, addr - kLocalWindow, bytes, "local", addr, write);
      if (InWindow(addr, kParamWindow)) return InBuffer(x, t.params, addr - kParamWindow, bytes, "param", addr, write);
      return Global(x, addr, bytes, write);
    case Space::kShared: case Space::kSharedCta: case Space::kSharedCluster:
      return InBuffer(x, x.b->shared, InWindow(addr, kSharedWindow) ? addr - kSharedWindow : addr, bytes, "shared",
                      addr, write);
    case Space::kLocal:
      return InBuffer(x, t.local, addr, bytes, "local", addr, write);
    case Space::kParam:
      if (InWindow(addr, kParamWindow)) return InBuffer(x, t.params, addr - kParamWindow, bytes, "param", addr, write);
      return InBuffer(x, t.params, t.frames.back().param_base + addr, bytes, "param", addr, write);
    case Space::kConst:
      if (!x.b->prog->InModuleStorage(addr, bytes)) return Illegal(x, "const", addr, bytes, write);
      return reinterpret_cast<uint8_t*>(addr);
    case Space::kGlobal:
      return Global(x, addr, bytes, write);
    default:
      x.error = "unsupported state space";
      return nullptr;
  }
}

Flow ExecMov(Exec& x, const Op& op) {
  const int bits = TypeBits(op.type) ? TypeBits(op.type) : 64;
  if (op.nshape == 2 && op.shape[0] > 1) {  // mov.b64 {a, b}, %rd: unpack
    const uint64_t v = Src(x, op, op.shape[0]);
    const int eb = bits / op.shape[0];
    for (int i = 0; i < op.shape[0]; ++i) Set(x, op, i, Trunc(v >> (eb * i), eb));
    return Flow::kNext;
  }
  if (op.nshape == 2 && op.shape[1] > 1) {  // mov.b64 %rd, {a, b}: pack
    const int eb = bits / op.shape[1];
    uint64_t v = 0;
    for (int i = 0; i < op.shape[1]; ++i) v |= Trunc(Src(x, op, 1 + i), eb) << (eb * i);
    Set(x, op, 0, v);
    return Flow::kNext;
  }
  uint64_t v = Src(x, op, 1);
  if (op.type == ptx::Type::kPred) v = PredVal(x, Opd(x, op, 1));
  Set(x, op, 0, v);
  return Flow::kNext;
}

namespace {
bool Ordered(const Op& op) { return op.sem != ptx::Semantics::kNone && op.sem != ptx::Semantics::kWeak; }
}  // namespace

namespace {

// Global memory is shared with the blocks on other host threads; a kernel
// may legally race on it (flags, CAS loops reading the word first). Aligned
// scalar accesses are therefore host atomics: relaxed for weak ld/st (a
// plain mov on x86-64/AArch64), acquire/release for ordered ones.
bool SharedWithOtherHostThreads(const Exec& x, ptx::Space s, uint64_t addr) {
  switch (s) {
    case Space::kGlobal: return true;
    case Space::kNone:
      return !InWindow(addr, kSharedWindow) && !InWindow(addr, kLocalWindow) && !InWindow(addr, kParamWindow);
    default: return false;
  }
}

}  // namespace

Flow ExecLd(Exec& x, const Op& op) {
  const int eb = TypeBytes(op.type);
  const int n = op.shape[0];
  if (eb == 0 || eb > 8 || op.nshape != 2) return Fail(x, "unsupported ld form");
  const uint64_t addr = Src(x, op, n);
  const uint8_t* p = Resolve(x, op.space, addr, static_cast<size_t>(eb) * n, false);
  if (!p) return Flow::kError;
  const bool atomic = SharedWithOtherHostThreads(x, op.space, addr);
  const std::memory_order mo = Ordered(op) ? std::memory_order_acquire : std::memory_order_relaxed;
  const bool sgn = IsSignedInt(op.type);
  // In a cooperative launch an ordered load (volatile, relaxed, acquire) is
  // how a block polls for the others (grid.sync()); there are more blocks
  // than cores, so let the ones it waits for run.
  if (atomic && Ordered(op) && x.b->opts->cooperative) std::this_thread::yield();
  for (int i = 0; i < n; ++i) {
    uint64_t v = LoadScalar(p + static_cast<size_t>(i) * eb, eb, atomic, mo);
    if (sgn) v = static_cast<uint64_t>(SExt(v, eb * 8));
    Set(x, op, i, v);
  }
  return Flow::kNext;
}

Flow ExecSt(Exec& x, const Op& op) {
  const int eb = TypeBytes(op.type);
  const int n = op.nshape == 2 ? op.shape[1] : 0;
  if (eb == 0 || eb > 8 || n == 0) return Fail(x, "unsupported st form");
  const uint64_t addr = Src(x, op, 0);
  uint8_t* p = Resolve(x, op.space, addr, static_cast<size_t>(eb) * n, true);
  if (!p) return Flow::kError;
  const bool atomic = SharedWithOtherHostThreads(x, op.space, addr);
  const std::memory_order mo = Ordered(op) ? std::memory_order_release : std::memory_order_relaxed;
  for (int i = 0; i < n; ++i) {
    const Operand& o = Opd(x, op, 1 + i);
    const uint64_t v = op.type == ptx::Type::kPred ? PredVal(x, o) : Val(x, o);
    StoreScalar(p + static_cast<size_t>(i) * eb, eb, v, atomic, mo);
  }
  return Flow::kNext;
}

Flow ExecCvta(Exec& x, const Op& op) {
  const uint64_t a = Src(x, op, 1);
  uint64_t window = 0, bias = 0;
  switch (op.space) {
    case Space::kShared: case Space::kSharedCta: case Space::kSharedCluster: window = kSharedWindow; break;
    case Space::kLocal: window = kLocalWindow; break;
    case Space::kParam:
      window = kParamWindow;
      bias = x.t->frames.back().param_base;
      break;
    case Space::kGlobal: case Space::kConst: break;
    default: return Fail(x, "unsupported cvta space");
  }
  uint64_t d;
  if (op.to) {
    d = window ? a - window - bias : a;
  } else {
    d = window ? a + window + bias : a;
  }
  if (op.type == ptx::Type::kU32 || op.type == ptx::Type::kB32) d &= 0xFFFFFFFFu;
  Set(x, op, 0, d);
  return Flow::kNext;
}

Flow ExecIsspacep(Exec& x, const Op& op) {
  const uint64_t a = Src(x, op, 1);
  bool r = false;
  switch (op.space) {
    case Space::kShared: case Space::kSharedCta: case Space::kSharedCluster: r = InWindow(a, kSharedWindow); break;
    case Space::kLocal: r = InWindow(a, kLocalWindow); break;
    case Space::kParam: r = InWindow(a, kParamWindow); break;
    case Space::kConst: r = x.b->prog->InConstStorage(a); break;
    case Space::kGlobal:
      r = !InWindow(a, kSharedWindow) && !InWindow(a, kLocalWindow) && !InWindow(a, kParamWindow);
      break;
    default: return Fail(x, "unsupported isspacep space");
  }
  Set(x, op, 0, r ? 1 : 0);
  return Flow::kNext;
}

Flow ExecNop(Exec&, const Op&) { return Flow::kNext; }

// cp.async.ca/.cg.shared.global [dst], [src], cp-size{, src-size | ignore-src}:
// copies at issue. The PTX ISA lets the copy complete any time before the
// cp.async.wait_group/wait_all that covers it; completing it at once is one
// of the allowed orders (a thread reading the destination earlier races
// with the copy on a GPU too), so commit_group and the waits are no-ops.
// Bytes past src-size (or all, with ignore-src true) are zero-filled.
namespace {

// Copies `n` bytes from `s` (in space `ss` at `saddr`) to `d` (space `ds`
// at `daddr`) byte by byte, global memory through relaxed atomics: other
// blocks' host threads share it (a race there is the program's, as on a
// GPU, not undefined behaviour in phosd).
void CopyBytes(Exec& x, uint8_t* d, ptx::Space ds, uint64_t daddr, const uint8_t* s, ptx::Space ss, uint64_t saddr,
               uint64_t n) {
  const bool atomic_src = SharedWithOtherHostThreads(x, ss, saddr), atomic_dst = SharedWithOtherHostThreads(x, ds, daddr);
  for (uint64_t i = 0; i < n; ++i) {
    StoreScalar(d + i, 1, LoadScalar(s + i, 1, atomic_src, std::memory_order_relaxed), atomic_dst,
                std::memory_order_relaxed);
  }
}

}  // namespace

Flow ExecCpAsync(Exec& x, const Op& op) {
  const uint64_t dst = Src(x, op, 0), src = Src(x, op, 1), size = Src(x, op, 2);
  if (size != 4 && size != 8 && size != 16) return Fail(x, "cp.async size must be 4, 8 or 16");
  uint64_t from_src = size;
  if (op.sub & kCpAsyncSrcSize) from_src = std::min<uint64_t>(Src(x, op, 3) & 0xFFFFFFFFu, size);
  if ((op.sub & kCpAsyncIgnoreSrc) && PredVal(x, Opd(x, op, 3))) from_src = 0;
  uint8_t* d = Resolve(x, ptx::Space::kShared, dst, size, true);
  if (!d) return Flow::kError;
  if (from_src > 0) {
    const uint8_t* p = Resolve(x, ptx::Space::kGlobal, src, from_src, false);
    if (!p) return Flow::kError;
    CopyBytes(x, d, ptx::Space::kShared, dst, p, ptx::Space::kGlobal, src, from_src);
  }
  std::memset(d + from_src, 0, size - from_src);
  return Flow::kNext;
}

// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]
// cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size
// Also at issue; the mbarrier form then completes its transaction bytes
// (ops_mbarrier.cc); commit/wait of bulk groups are no-ops.
Flow ExecCpAsyncBulk(Exec& x, const Op& op) {
  const uint64_t dst = Src(x, op, 0), src = Src(x, op, 1), size = Src(x, op, 2) & 0xFFFFFFFFu;
  if (size % 16 != 0 || dst % 16 != 0 || src % 16 != 0) {
    return Fail(x, "cp.async.bulk size and addresses must be multiples of 16");
  }
  const bool to_shared = (op.target & kBulkToShared) != 0;
  const ptx::Space ds = to_shared ? ptx::Space::kShared : ptx::Space::kGlobal;
  const ptx::Space ss = to_shared ? ptx::Space::kGlobal : ptx::Space::kShared;
  if (size > 0) {
    uint8_t* d = Resolve(x, ds, dst, size, true);
    if (d == nullptr) return Flow::kError;
    const uint8_t* s = Resolve(x, ss, src, size, false);
    if (s == nullptr) return Flow::kError;
    CopyBytes(x, d, ds, dst, s, ss, src, size);
  }
  if (to_shared && op.nshape > 3) return MbarrierCompleteTx(x, op, Src(x, op, 3), size);
  return Flow::kNext;
}

}  // namespace phos::interp
