// The spec table: argument roles of the runtime's (and later the
// libraries') calls that touch device memory (docs/protocols.md "Access sets (implemented)", "a spec table of
// argument roles"). Each row of the table of forwarded calls
// (interposer/protocol/calls.def) names an access rule (wire::AccessRule);
// this file gives each rule its operands and roles, and CallSpecs() is one
// CallSpec per row whose rule has operands — built from calls.def, so no
// second list of ops exists. The handlers (memory_handlers.cc) compute each
// operand's exact byte range from the decoded arguments — which needs the
// copy direction, pitches, staging — and take the operand's role from here
// (AddOperand).
//
// cuBLAS calls have the Blas rule: slots A, B read, C, x read+write, the
// device-mode scalars read, a reduction's result written
// (protocol/blas_spec.h fills them with exact extents). NCCL calls get a
// rule here when they are forwarded.
//
// Symbol copies (cudaMemcpyToSymbol / FromSymbol) reach phosd as kMemcpy*
// on the global's address (libphos.so resolves the symbol with
// kModuleGetGlobal), so the memcpy rows cover them.
//
// Immutable after static initialisation: any thread may read it.
#pragma once

#include <cstdint>
#include <span>

#include "protocol/calls.h"
#include "protocol/wire.h"
#include "session/executor.h"

namespace phos::session {

enum class ArgRole : uint8_t {
  kRead = 1,
  kWrite = 2,      // every byte of the range is overwritten (or freed)
  kReadWrite = 3,
};

struct OperandSpec {
  const char* name = nullptr;   // the argument ("dst", "src", "C")
  ArgRole role = ArgRole::kRead;
};

inline constexpr uint32_t kMaxSpecOperands = 12;

struct CallSpec {
  wire::ApiId api{};
  const char* call = nullptr;   // "cudaMemcpyAsync"
  uint32_t operand_count = 0;
  OperandSpec operands[kMaxSpecOperands] = {};
};

/// Operand indices of the copy and memset rows.
inline constexpr uint32_t kDstOperand = 0;
inline constexpr uint32_t kSrcOperand = 1;

/// The operands of an access rule (none for kNoDeviceMemory, kKernel —
/// computed from the kernel's plan — and kWhole).
std::span<const OperandSpec> RuleOperands(wire::AccessRule rule);

/// One row per call of calls.def whose access rule has operands.
std::span<const CallSpec> CallSpecs();
/// The row of `api`; nullptr when the table has none.
const CallSpec* FindCallSpec(wire::ApiId api);

/// Whether `api`'s row has the Release rule: the call frees the buffer its
/// operand names (cudaFree at once; cudaFreeAsync when its stream gets
/// there). A C/R protocol must stop reading that buffer when the call is
/// admitted.
inline bool ReleasesBuffer(wire::ApiId api) {
  const wire::CallRow* row = wire::FindCallRow(api);
  return row != nullptr && row->access == wire::AccessRule::kRelease;
}

/// Adds operand `index` of `view->api` (its device-memory side only: the
/// caller leaves out host operands) with the table's role. A call with no
/// row, or an index past its operands, makes the view kUnknown (a table
/// bug must not shrink an access set) and is logged once.
void AddOperand(CallView* view, uint32_t index, uint64_t ptr, uint64_t bytes);

}  // namespace phos::session
