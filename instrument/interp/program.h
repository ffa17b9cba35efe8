// Program: a ptx::Module decoded once into an executable form ("decode once,
// execute many"). Per function: a vector of Ops whose register operands are
// dense indices into the frame's register array, immediates pre-converted to
// raw bits, labels resolved to op indices, call targets to function indices
// and every symbol to an address in its state space (memory.h).
//
// A Program is immutable after Build except for the bytes of module
// variables (.global / .const), which kernels and the host (through
// SymbolAddress) may write. It may be shared by concurrent launches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "ptx/ptx_ir.h"

namespace phos::interp {

struct Exec;
struct Op;
// What an executed op tells the thread loop.
enum class Flow : uint8_t {
  kNext,     // continue with pc + 1
  kJump,     // the op set the pc itself (branch, call, return)
  kBlock,    // the thread waits (bar.sync, warp collective); pc stays
  kExit,     // the thread finished
  kError,    // Exec::error says what went wrong
  kPerThread,  // (warp handlers only) declined: run the op lane by lane through Op::fn
};
using ExecFn = Flow (*)(Exec&, const Op&);
struct WarpExec;
// Runs an op for the lanes `active` of a warp standing at it together
// (warp_ops.cc): kNext; kBlock when the active lanes now wait (their
// Thread::state says at what; their pc stays); or kPerThread to have
// Op::fn run it lane by lane (an address it cannot vouch for, say: the
// per-thread handler then makes the error message). Never fails itself.
using WarpFn = Flow (*)(WarpExec&, const Op&, uint32_t active);

// An operand after decoding. value = base + imm where base depends on kind.
struct Operand {
  enum Kind : uint8_t {
    kNone,
    kReg,        // frame register `reg` (+ imm for [reg+off] addresses)
    kImm,        // imm (raw bits; addresses of module/shared symbols too)
    kSreg,       // special register number `reg` (SregId)
    kLocalSym,   // frame local depot base + imm
    kSink,       // `_`: writes are dropped
  };
  Kind kind = kNone;
  bool neg = false;    // !%p
  uint32_t reg = 0;
  uint64_t imm = 0;
};

// Special registers (%tid.x ...).
enum SregId : uint32_t {
  kTidX, kTidY, kTidZ, kNtidX, kNtidY, kNtidZ, kCtaidX, kCtaidY, kCtaidZ,
  kNctaidX, kNctaidY, kNctaidZ, kLaneid, kWarpid, kNwarpid, kSmid, kNsmid,
  kGridid, kClock, kClockHi, kClock64, kGlobaltimer, kGlobaltimerLo, kGlobaltimerHi,
  kLanemaskEq, kLanemaskLt, kLanemaskLe, kLanemaskGt, kLanemaskGe,
  kDynamicSmemSize, kTotalSmemSize, kWarpSz,
  // %envreg0..%envreg31 are kEnvreg0 + n. The driver fills %envreg1 (high
  // half) and %envreg2 (low half) with the grid workspace of a cooperative
  // launch, which cooperative_groups' grid.sync() counts arrivals in.
  kEnvreg0,
};

struct Op {
  ExecFn fn = nullptr;
  WarpFn warp_fn = nullptr;  // the op for a whole warp at once; null: lane by lane through fn
  ptx::Opcode opcode = ptx::Opcode::kUnknown;
  ptx::Type type = ptx::Type::kNone;   // first type modifier
  ptx::Type type2 = ptx::Type::kNone;  // second (cvt/set/slct source type)
  ptx::Type type3 = ptx::Type::kNone;  // wmma.mma: the A/B element type
  ptx::Space space = ptx::Space::kNone;
  ptx::Rounding rounding = ptx::Rounding::kNone;
  ptx::CmpOp cmp = ptx::CmpOp::kNone;
  ptx::BoolOp bool_op = ptx::BoolOp::kNone;
  ptx::AtomOp atom_op = ptx::AtomOp::kNone;
  ptx::MulMode mul_mode = ptx::MulMode::kNone;
  ptx::ShflMode shfl = ptx::ShflMode::kNone;
  ptx::VoteMode vote = ptx::VoteMode::kNone;
  ptx::Semantics sem = ptx::Semantics::kNone;
  uint8_t vec = 1;
  bool sat = false, ftz = false, approx = false, cc = false, to = false, uni = false;
  uint8_t sub = 0;          // opcode-specific sub-mode (decoded from mods)
  bool guard_neg = false;
  int32_t guard = -1;       // guard predicate register, -1 = none
  uint32_t first = 0;       // operands: Function::operands[first .. first+count)
  uint8_t count = 0;
  uint8_t shape[6] = {};    // elements of each source operand ({a,b}: 2, a|p: 2)
  uint8_t nshape = 0;
  uint32_t target = 0;      // bra: op index; call: function index; wmma: WmmaShape
};

struct ParamSlot {
  uint32_t offset = 0;  // in the frame's param buffer
  uint32_t size = 0;
};

struct Function {
  std::string name;
  bool is_entry = false;
  bool has_body = false;                // false: an .extern declaration
  std::vector<Op> ops;
  std::vector<Operand> operands;
  std::vector<std::string> op_text;     // "st.global.u32" per op (errors)
  std::vector<uint32_t> op_stmt;        // statement index per op
  std::vector<int64_t> op_line;         // last .loc line before the op, -1
  std::vector<std::string> unsupported; // per op: "" or why it cannot run
  uint32_t num_regs = 0;
  uint32_t param_size = 0;              // formals + call-site .param vars
  // Returns + formals: the frame's first bytes. A kernel's are read-only
  // (the PTX ISA: kernel parameters are per-kernel and read-only), so
  // every thread's copy stays the launch's parameter bytes.
  uint32_t formal_bytes = 0;
  bool has_callsite_params = false;  // .param variables for its calls follow the formals
  // Registers a thread may read before writing them (entry_registers.cc):
  // what a block zeroes when its threads enter this kernel. All of them
  // when zero_all_at_entry (the analysis did not run).
  std::vector<uint32_t> zero_at_entry;
  bool zero_all_at_entry = true;
  std::vector<ParamSlot> returns, params;
  uint32_t local_size = 0;              // .local depot bytes
  std::vector<uint32_t> callees;        // functions called directly
  // brx.idx: each `.branchtargets` list a brx.idx names, as op indices
  // (Op::target of the brx is the list's index here).
  std::vector<std::vector<uint32_t>> branch_targets;
  bool calls_indirect = false;          // has a call through a function pointer
};

// Where a Program keeps its module variables (.global/.const). By default
// in host memory it owns; the sim backend passes an allocator that places
// them in device memory, so cudaMemcpyToSymbol-style copies and the C/R
// engine see them as ordinary device buffers.
struct StorageAllocator {
  // Returns `bytes` of writable memory (256-byte aligned) or an error.
  std::function<Status(size_t bytes, uint8_t** out)> allocate;
  // Releases what `allocate` returned (called from ~Program).
  std::function<void(uint8_t* ptr)> release;
};

class Program {
 public:
  ~Program();
  // As Build(module, out), with module variables placed by `storage`.
  static Status Build(const ptx::Module& module, const StorageAllocator& storage,
                      std::unique_ptr<Program>* out);
  // Decodes `module`. Fails only for PTX that cannot be laid out (bad
  // declarations); instructions phos cannot run are recorded per op and
  // reported by LaunchKernel.
  static Status Build(const ptx::Module& module, std::unique_ptr<Program>* out);

  int FindFunction(std::string_view name) const;  // -1 if absent
  // The address a function pointer to function `index` holds (mov of a
  // function's name, a module initializer naming one), in the code window
  // of memory.h: no data access can reach it. It depends only on the
  // module's function names (a hash of them and the index), so a pointer
  // saved in device memory before a checkpoint still names the same
  // function in the same module loaded again after a restore.
  uint64_t FunctionAddress(int index) const;
  // The function a pointer names, or -1 if it names none of this program.
  int FunctionAt(uint64_t addr) const;
  const Function& function(int i) const { return functions_[i]; }
  size_t num_functions() const { return functions_.size(); }

  // Host address and size of a module .global/.const variable (for
  // cudaMemcpyToSymbol and friends); false if there is none by that name.
  bool SymbolAddress(std::string_view name, uint64_t* addr, size_t* size) const;
  // Where the module's variables start (their one block; 0 when the module
  // has none). A module built from the same PTX lays them out the same way,
  // so this base fixes every variable's address.
  uint64_t storage_base() const { return storage_size_ > 0 ? storage_base_ : 0; }
  uint64_t storage_bytes() const { return storage_size_; }
  // Whether [addr, addr+bytes) lies in module variable storage.
  bool InModuleStorage(uint64_t addr, size_t bytes) const {
    return addr >= storage_base_ && addr - storage_base_ <= storage_size_ &&
           bytes <= storage_size_ - (addr - storage_base_);
  }
  bool InConstStorage(uint64_t addr) const {
    return addr >= const_begin_ && addr < const_end_;
  }
  // Static shared memory of the whole program: every .shared variable of
  // the module laid out once (what a block of any kernel is given).
  uint32_t static_shared_bytes() const { return shared_size_; }
  // Static shared memory `kernel` itself uses, as CUDA reports it: the
  // .shared variables declared in it and in the functions it calls, and the
  // module-level ones they name (each aligned). The program-wide size when
  // `kernel` is not an entry of this program.
  uint32_t static_shared_bytes(const std::string& kernel) const {
    auto it = kernel_shared_.find(kernel);
    return it != kernel_shared_.end() ? it->second : shared_size_;
  }

  // First op reachable from `kernel` that cannot be run, as an error Status
  // naming it; OK if all can.
  Status CheckRunnable(int kernel) const;
  // "fn:stmt N (line L) `text`"
  std::string Where(int fn, uint32_t op) const;

 private:
  struct Var { uint64_t addr; size_t size; };
  std::vector<Function> functions_;
  std::unordered_map<std::string, int> function_index_;
  std::unordered_map<std::string, Var> vars_;       // module .global/.const
  std::unique_ptr<uint8_t[]> storage_;              // their bytes (default allocator)
  uint8_t* external_storage_ = nullptr;             // or from a StorageAllocator
  std::function<void(uint8_t*)> release_storage_;
  uint64_t storage_base_ = 0, storage_size_ = 0;
  uint64_t const_begin_ = 0, const_end_ = 0;        // .const part of storage
  uint32_t shared_size_ = 0;
  uint64_t code_tag_ = 0;                // 24-bit hash of the function names
  std::set<int> address_taken_;          // functions a pointer may name
  std::unordered_map<std::string, uint32_t> kernel_shared_;  // entry -> its own static shared bytes

  friend class ProgramBuilder;
};

}  // namespace phos::interp
