// The twin-kernel pass: PTX module -> PTX module in which every kernel checks
// its global accesses against speculated ranges (docs/protocols.md "Access sets (implemented)" "Validation";
// calling convention and report format in twin/twin_abi.h; user-level
// description in docs/instrument.md "Twin kernels").
//
// What MakeTwin does:
//  * every kernel (.entry with a body) K is renamed TwinKernelName(K) and gets
//    the parameters __phos_ranges (.u64), __phos_nranges (.u32) and
//    __phos_report (.u64) appended;
//  * every .func defined in the module (reachable or not: functions called
//    through pointers must agree with their call prototypes, so all of them
//    change) and every prototype of such a function gets .b64 __phos_ranges,
//    .b32 __phos_nranges, .b64 __phos_report, .b32 __phos_kernel_id appended;
//    every direct call to one of them, and every indirect call (its
//    .callprototype too), passes the caller's four values along. Calls to
//    functions without a body here (.extern, e.g. vprintf) are unchanged;
//  * before every checked access (below) it inserts a check: effective
//    address (base + offset; symbols through `mov.u64 r, sym`), for generic
//    accesses `isspacep.global` first (non-global ones are not checked), then
//    a loop over the ranges looking for one that contains the whole access
//    [addr, addr + bytes); on a miss one atom.global.add.u32 on the report
//    count reserves a slot and, if it is below capacity, the record is
//    stored. A guarded access is checked only when its guard holds. The
//    original instruction follows unchanged, so the twin computes the same
//    results as the kernel.
//
// Checked accesses: st, atom, red (kWrites and kReadsAndWrites), ld and ldu
// (kReadsAndWrites only) in the .global space or generic (no space), the
// global side of cp.async / cp.async.bulk copies between shared and global
// (destination = write, source = read), and wmma.store / wmma.load over the
// tile's footprint. Not checked, because they never reach global memory
// through an address: .shared, .local, .param, .const accesses, ldmatrix /
// stmatrix, prefetch; texture/surface instructions (tex, tld4, suld, sust,
// sured: phosd puts every texture and surface buffer of the session in the
// access set of a module that uses them). Not checked although they may
// reach global memory — "unchecked", recorded per function with the reason
// (FunctionTwinInfo::unchecked), so a kernel that may run one is
// unvalidatable (TwinInfo::UncheckedReason): tensor-map copies
// (cp.async.bulk.tensor, cp.reduce.async.bulk.tensor), multimem accesses,
// tensormap.replace in global memory, wmma forms whose footprint the pass
// does not know, and calls to .extern functions other than the runtime's
// known ones (ptx/device_runtime.h).
//
// The inserted code uses only ld/st/add/sub/mul.wide/setp/bra/atom/isspacep/
// cvta/cvt/mov, registers named %phos_* and labels named $__phos_L*.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "ptx/ptx_ir.h"
#include "twin/twin_abi.h"

namespace phos::twin {

enum class TwinMode : uint8_t {
  kWrites,          // stores, atomics, reductions (checkpoint: what may get dirty)
  kReadsAndWrites,  // also loads (restore: what must be present)
};

struct TwinOptions {
  TwinMode mode = TwinMode::kWrites;
  // Kernel id written into report records, by original (mangled) kernel
  // name; kernels not listed get default_kernel_id.
  std::map<std::string, uint32_t, std::less<>> kernel_ids;
  uint32_t default_kernel_id = kUnknownKernelId;
};

// What the pass did to one function (kernel or .func).
struct FunctionTwinInfo {
  std::string name;       // original name
  std::string twin_name;  // name in the twin module (== name for .func)
  bool is_entry = false;
  uint32_t kernel_id = kUnknownKernelId;  // entries only
  // Checks inserted, by kind of access.
  uint32_t stores = 0, atomics = 0, reductions = 0, loads = 0, copies = 0;
  uint32_t generic = 0;        // of those, generic accesses (isspacep first)
  uint32_t calls_patched = 0;  // call sites that now pass the phos values

  // Accesses that may reach global memory unchecked (see the file comment):
  // the first kMaxUncheckedKept reasons ("`cp.async.bulk.tensor...`: why"),
  // and how many there were.
  static constexpr size_t kMaxUncheckedKept = 4;
  std::vector<std::string> unchecked;
  uint32_t unchecked_count = 0;
  void AddUnchecked(std::string why);
  // Functions of the module this one calls directly, and whether it makes
  // indirect calls (then it may reach any function of the module).
  std::set<std::string, std::less<>> callees;
  bool indirect_calls = false;

  uint32_t checks() const { return stores + atomics + reductions + loads + copies; }
};

struct TwinInfo {
  std::vector<FunctionTwinInfo> functions;  // module order, bodies only
  uint32_t total_checks() const {
    uint32_t n = 0;
    for (const auto& f : functions) n += f.checks();
    return n;
  }
  const FunctionTwinInfo* Find(std::string_view name) const {
    for (const auto& f : functions)
      if (f.name == name) return &f;
    return nullptr;
  }
  // Why `kernel` (an entry's original name) cannot be validated by its
  // twin — an unchecked access in it or in a function it may call — or
  // nullopt when every access it may make to global memory is checked (or
  // it is not an entry of the module).
  std::optional<std::string> UncheckedReason(std::string_view kernel) const;
};

// Builds the twin of `in` into *out (which may not alias `in`). Errors:
// NotSupported for modules phos cannot twin (.address_size 32, kernels used
// as values (dynamic parallelism), names already starting with the phos
// prefixes), Internal for bugs. *info (optional) describes what was done.
Status MakeTwin(const ptx::Module& in, const TwinOptions& opts, ptx::Module* out,
                TwinInfo* info = nullptr);

}  // namespace phos::twin
