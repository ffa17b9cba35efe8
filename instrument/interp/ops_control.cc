// Control flow: bra, call (with .param argument/return passing on a
// per-thread frame stack, so recursion works), ret, exit, trap.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/hex.h"
#include "interp/device_output.h"
#include "interp/exec.h"

namespace phos::interp {

namespace {
constexpr size_t kMaxFrames = 4096;
constexpr size_t kMaxLocalBytes = size_t{1} << 20;  // per thread
uint32_t Align(size_t v, size_t a) { return static_cast<uint32_t>((v + a - 1) / a * a); }
}  // namespace

void PushFrame(Thread& t, const Program& p, uint32_t func) {
  const Function& f = p.function(static_cast<int>(func));
  Frame fr;
  fr.func = func;
  fr.pc = 0;
  fr.reg_base = t.reg_top;
  t.reg_top += f.num_regs;
  t.warp_state->Reserve(t.reg_top);  // may move the rows: callers Refresh their Exec
  for (uint32_t row = fr.reg_base; row < t.reg_top; ++row) t.reg(row) = 0;
  fr.param_base = Align(t.params.size(), 16);
  t.params.resize(fr.param_base + f.param_size, 0);
  fr.local_base = Align(t.local.size(), 16);
  t.local.resize(fr.local_base + f.local_size, 0);
  t.frames.push_back(fr);
}

Flow ExecBra(Exec& x, const Op& op) {
  x.frame().pc = op.target;
  return Flow::kJump;
}

// brx.idx index, list: the PTX ISA leaves an index past the list undefined;
// the launch fails, naming it, rather than jump anywhere.
Flow ExecBrx(Exec& x, const Op& op) {
  const std::vector<uint32_t>& list = x.fn->branch_targets[op.target];
  const uint64_t index = Src(x, op, 0) & 0xFFFFFFFFu;
  if (index >= list.size()) {
    return Fail(x, "brx.idx index " + std::to_string(index) + " is past its .branchtargets list of " +
                       std::to_string(list.size()) + " labels");
  }
  x.frame().pc = list[index];
  return Flow::kJump;
}

namespace {
// Bytes [off, off + n) of frame `f`'s .param space, or null when they lie
// outside it: a call's return or argument operand that is not a call-site
// .param variable of the caller (PTX ptxas would reject; a module is
// untrusted input, and the offset indexes phosd's memory).
uint8_t* FrameParams(Thread& t, const Program& p, const Frame& f, uint64_t off, size_t n) {
  const uint64_t size = p.function(static_cast<int>(f.func)).param_size;
  if (off > size || n > size - off) return nullptr;
  return t.params.data() + f.param_base + off;
}

constexpr const char* kBadParamOperand = "call argument or return outside the caller's .param space";

// Copies call argument `a` — a call-site .param variable (its offset in the
// caller's frame) or a register (at most 8 bytes) — into `dst`, `size`
// bytes; false if a .param argument lies outside the caller's frame.
bool CopyCallArg(Thread& t, const Program& p, const Frame& caller, const Operand& a, size_t size, uint8_t* dst) {
  if (a.kind == Operand::kImm) {
    const uint8_t* src = FrameParams(t, p, caller, a.imm, size);
    if (src == nullptr) return false;
    std::memcpy(dst, src, size);
  } else if (a.kind == Operand::kReg) {
    const uint64_t v = t.reg(caller.reg_base + a.reg);
    std::memcpy(dst, &v, size < 8 ? size : 8);
  }
  return true;
}
}  // namespace

namespace {

// Calls function `target` with the returns and arguments of call op `op`.
Flow CallFunction(Exec& x, const Op& op, uint32_t target) {
  Thread& t = *x.t;
  const Program& p = *x.b->prog;
  const Function& callee = p.function(static_cast<int>(target));
  if (t.frames.size() >= kMaxFrames) return Fail(x, "call stack overflow (more than 4096 frames)");
  if (t.local.size() + callee.local_size > kMaxLocalBytes) return Fail(x, "local memory stack overflow (1 MiB)");
  if (op.shape[1] > callee.params.size() || op.shape[0] > callee.returns.size()) {
    return Fail(x, "call passes more arguments/returns than " + callee.name + " declares");
  }
  if (!callee.has_body) return Fail(x, "call of " + callee.name + ", which has no body in this module");
  const Frame caller = t.frames.back();
  const Function& caller_fn = *x.fn;
  PushFrame(t, p, target);
  const Frame& nf = t.frames.back();
  for (uint32_t i = 0; i < op.shape[1]; ++i) {
    const Operand& a = caller_fn.operands[op.first + op.shape[0] + i];
    const ParamSlot& slot = callee.params[i];
    if (!CopyCallArg(t, p, caller, a, slot.size, t.params.data() + nf.param_base + slot.offset)) {
      return Fail(x, kBadParamOperand);
    }
  }
  x.Refresh();
  return Flow::kJump;
}

}  // namespace

Flow ExecCall(Exec& x, const Op& op) { return CallFunction(x, op, op.target); }

// call (rets), %ptr, (args), prototype: the pointer is an address
// Program::FunctionAddress gave out; anything else is an illegal call, as
// a jump to a non-code address faults on a GPU.
Flow ExecCallIndirect(Exec& x, const Op& op) {
  const uint64_t addr = Src(x, op, op.shape[0] + op.shape[1]);
  const int target = x.b->prog->FunctionAt(addr);
  if (target < 0) {
    return Fail(x, "indirect call through " + Hex(addr) + ", which is not a function of this module");
  }
  if (x.b->prog->function(target).is_entry) return Fail(x, "indirect call of a kernel entry");
  return CallFunction(x, op, static_cast<uint32_t>(target));
}

uint64_t CallArg(Exec& x, const Op& op, uint32_t i) {
  const Function& callee = x.b->prog->function(static_cast<int>(op.target));
  if (i >= callee.params.size()) return 0;
  uint64_t v = 0;
  if (!CopyCallArg(*x.t, *x.b->prog, x.t->frames.back(), x.fn->operands[op.first + op.shape[0] + i],
                   std::min<size_t>(callee.params[i].size, 8), reinterpret_cast<uint8_t*>(&v))) {
    return 0;  // as for an argument the declaration lacks
  }
  return v;
}

std::string DeviceString(Exec& x, uint64_t addr, size_t max) {
  std::string s;
  for (size_t i = 0; i < max; ++i) {
    const uint8_t* c = Resolve(x, ptx::Space::kNone, addr + i, 1, false);
    if (c == nullptr) {
      x.error.clear();  // an unreadable string is not the kernel's failure
      return s.empty() ? "?" : s;
    }
    if (*c == 0) break;
    s.push_back(static_cast<char>(*c));
  }
  return s;
}

Flow SetCallReturn(Exec& x, const Op& op, uint64_t value, size_t bytes) {
  if (op.shape[0] == 0) return Flow::kNext;
  Thread& t = *x.t;
  const Operand& r = x.fn->operands[op.first];
  if (r.kind == Operand::kImm) {
    const size_t n = std::min<size_t>(bytes, 8);
    uint8_t* dst = FrameParams(t, *x.b->prog, t.frames.back(), r.imm, n);
    if (dst == nullptr) return Fail(x, kBadParamOperand);
    if (WritesKernelFormals(t, *x.b->prog, t.frames.back().param_base + r.imm)) return Fail(x, kKernelFormalsReadOnly);
    std::memcpy(dst, &value, n);
  } else if (r.kind == Operand::kReg) {
    x.r[r.reg] = value;
  }
  return Flow::kNext;
}

// __assertfail(message, file, line, function, charSize): what a failed
// assert() calls. The kernel fails with cudaErrorAssert (710, sticky, as on
// a GPU); the message says what the device would print.
// cudaGraphSetConditional(handle, value): under phos a conditional handle
// is the device address of a 4-byte slot (libphos.so's graphs.cc), where
// the value goes; the graph's conditional node reads it back when the
// launch gets there.
Flow ExecGraphSetConditional(Exec& x, const Op& op) {
  const uint64_t handle = op.shape[1] > 0 ? CallArg(x, op, 0) : 0;
  const uint32_t value = op.shape[1] > 1 ? static_cast<uint32_t>(CallArg(x, op, 1)) : 0;
  if (handle == 0 || (handle & 3) != 0) {
    return Fail(x, "cudaGraphSetConditional of handle " + Hex(handle) +
                       ", which is not a conditional handle (cudaGraphConditionalHandleCreate)");
  }
  uint8_t* slot = Resolve(x, ptx::Space::kGlobal, handle, sizeof value, true);
  if (slot == nullptr) return Flow::kError;  // Resolve said why (an illegal address)
  __atomic_store_n(reinterpret_cast<uint32_t*>(slot), value, __ATOMIC_RELAXED);
  return Flow::kNext;
}

Flow ExecAssertFail(Exec& x, const Op& op) {
  const std::string message = op.shape[1] > 0 ? DeviceString(x, CallArg(x, op, 0)) : "?";
  const std::string file = op.shape[1] > 1 ? DeviceString(x, CallArg(x, op, 1)) : "?";
  const uint64_t line = op.shape[1] > 2 ? (CallArg(x, op, 2) & 0xffffffffu) : 0;
  const std::string function = op.shape[1] > 3 ? DeviceString(x, CallArg(x, op, 3)) : "?";
  x.api_error = 710;  // cudaErrorAssert / CUDA_ERROR_ASSERT
  // What the device prints through its printf FIFO (the app sees it at
  // the synchronization that reports the error), in CUDA's format.
  if (x.b->opts->device_output != nullptr) {
    const Block& b = *x.b;
    const Thread& t = *x.t;
    char where[160];
    std::snprintf(where, sizeof where, ": block: [%u,%u,%u], thread: [%u,%u,%u]", b.ctaid[0], b.ctaid[1], b.ctaid[2],
                  t.tid[0], t.tid[1], t.tid[2]);
    x.b->opts->device_output->Append(file + ":" + std::to_string(line) + ": " + function + where + " Assertion `" +
                                     message + "` failed.\n");
  }
  return Fail(x, "device-side assert triggered: " + file + ":" + std::to_string(line) + ": " + function +
                     ": Assertion `" + message + "` failed.");
}

Flow ExecRet(Exec& x, const Op&) {
  Thread& t = *x.t;
  if (t.frames.size() == 1) return Flow::kExit;
  const Program& p = *x.b->prog;
  const Frame callee = t.frames.back();
  const Function& cf = p.function(static_cast<int>(callee.func));
  t.frames.pop_back();
  Frame& caller = t.frames.back();
  const Function& caller_fn = p.function(static_cast<int>(caller.func));
  const Op& call = caller_fn.ops[caller.pc];
  for (uint32_t i = 0; i < call.shape[0]; ++i) {
    const Operand& r = caller_fn.operands[call.first + i];
    const ParamSlot& slot = cf.returns[i];
    const uint8_t* src = t.params.data() + callee.param_base + slot.offset;
    if (r.kind == Operand::kImm) {
      uint8_t* dst = FrameParams(t, p, caller, r.imm, slot.size);
      if (dst == nullptr) return Fail(x, kBadParamOperand);
      if (WritesKernelFormals(t, p, caller.param_base + r.imm)) return Fail(x, kKernelFormalsReadOnly);
      std::memmove(dst, src, slot.size);
    } else if (r.kind == Operand::kReg) {
      uint64_t v = 0;
      std::memcpy(&v, src, slot.size < 8 ? slot.size : 8);
      t.reg(caller.reg_base + r.reg) = v;
    }
  }
  t.reg_top = callee.reg_base;
  t.params.resize(callee.param_base);
  t.local.resize(callee.local_base);
  ++caller.pc;
  x.Refresh();
  return Flow::kJump;
}

Flow ExecExit(Exec&, const Op&) { return Flow::kExit; }
Flow ExecTrap(Exec& x, const Op&) { return Fail(x, "trap executed (kernel aborted)"); }
Flow ExecUnsupported(Exec& x, const Op&) { return Fail(x, "unsupported instruction"); }

}  // namespace phos::interp
