#include "session/access_spec.h"

#include "protocol/blas_spec.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <iterator>
#include <vector>

namespace phos::session {
namespace {

using wire::AccessRule;

constexpr OperandSpec kDst{"dst", ArgRole::kWrite};
constexpr OperandSpec kSrc{"src", ArgRole::kRead};

// Copies: dst written, src read (host sides are left out by the handler:
// H2D names dst only, D2H src only, pinned copies their device side).
// Fills (memsets): dst written. Release (cudaFree): the buffer is gone (a
// write). 2D calls: the range spans first row start to last row end
// (pitch * (height-1) + width), a superset of the bytes touched.
constexpr OperandSpec kCopyOperands[] = {kDst, kSrc};
constexpr OperandSpec kFillOperands[] = {kDst};
constexpr OperandSpec kReleaseOperands[] = {{"ptr", ArgRole::kWrite}};
static_assert(kDstOperand == 0 && kSrcOperand == 1);
// cuBLAS routines (protocol/blas_spec.h): operands by slot; a routine
// names the slots its pointers fill, with extents from its dimensions. A
// matrix or strided vector is written only in part of its extent (ld >
// rows, inc > 1), so outputs are read+write, not "every byte written".
constexpr OperandSpec kBlasOperands[] = {
    {"A", ArgRole::kRead},          {"B", ArgRole::kRead},     {"C", ArgRole::kReadWrite},
    {"x", ArgRole::kReadWrite},     {"alpha", ArgRole::kRead}, {"beta", ArgRole::kRead},
    {"result", ArgRole::kWrite},    {"C (Lt input)", ArgRole::kRead}, {"bias", ArgRole::kRead},
    {"bias gradient", ArgRole::kReadWrite}, {"aux (Lt input)", ArgRole::kRead},
    {"aux (Lt output)", ArgRole::kReadWrite},
};
static_assert(std::size(kBlasOperands) == wire::kBlasSlotCount);
// NCCL ops (protocol/nccl_wire.h's CheckNcclOp gives the extents): the
// send buffer read, the receive buffer written whole.
constexpr OperandSpec kCollectiveOperands[] = {{"send", ArgRole::kRead}, {"recv", ArgRole::kWrite}};
static_assert(wire::kBlasSlotCount <= kMaxSpecOperands);

std::vector<CallSpec> BuildSpecs() {
  std::vector<CallSpec> specs;
  for (const wire::CallRow& row : wire::kCalls) {
    std::span<const OperandSpec> ops = RuleOperands(row.access);
    if (ops.empty()) continue;
    CallSpec spec;
    spec.api = row.id;
    spec.call = row.api;
    spec.operand_count = static_cast<uint32_t>(ops.size());
    for (size_t i = 0; i < ops.size() && i < kMaxSpecOperands; ++i) spec.operands[i] = ops[i];
    specs.push_back(spec);
  }
  return specs;
}

const std::vector<CallSpec>& Specs() {
  static const std::vector<CallSpec> specs = BuildSpecs();
  return specs;
}

}  // namespace

std::span<const OperandSpec> RuleOperands(AccessRule rule) {
  switch (rule) {
    case AccessRule::kCopy: return kCopyOperands;
    case AccessRule::kFill: return kFillOperands;
    case AccessRule::kRelease: return kReleaseOperands;
    case AccessRule::kBlas: return kBlasOperands;
    case AccessRule::kCollective: return kCollectiveOperands;
    case AccessRule::kNoDeviceMemory:
    case AccessRule::kKernel:
    case AccessRule::kWhole: return {};
  }
  return {};
}

std::span<const CallSpec> CallSpecs() { return Specs(); }

const CallSpec* FindCallSpec(wire::ApiId api) {
  for (const CallSpec& s : Specs())
    if (s.api == api) return &s;
  return nullptr;
}

void AddOperand(CallView* view, uint32_t index, uint64_t ptr, uint64_t bytes) {
  const CallSpec* spec = FindCallSpec(view->api);
  if (spec == nullptr || index >= spec->operand_count) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      spdlog::error("access spec table: no operand {} for api id {}; the call's access set is unknown", index,
                    static_cast<uint32_t>(view->api));
    }
    view->kind = AccessKind::kUnknown;
    return;
  }
  view->Add(ptr, bytes, spec->operands[index].role != ArgRole::kRead);
}

}  // namespace phos::session
