#include "session/access_spec.h"

#include <spdlog/spdlog.h>

#include <atomic>

namespace phos::session {
namespace {

namespace op = wire::op;
constexpr OperandSpec kDst{"dst", ArgRole::kWrite};
constexpr OperandSpec kSrc{"src", ArgRole::kRead};

// Copies: dst written, src read (host sides are left out by the handler:
// H2D names dst only, D2H src only, pinned copies their device side).
// Memsets: dst written. cudaFree: the buffer is gone (a write). 2D rows:
// the range spans first row start to last row end (pitch * (height-1) +
// width), a superset of the bytes touched.
constexpr CallSpec kSpecs[] = {
    {op::kMemcpy, "cudaMemcpy", 2, {kDst, kSrc}},
    {op::kMemcpyAsync, "cudaMemcpyAsync", 2, {kDst, kSrc}},
    {op::kMemcpy2D, "cudaMemcpy2D", 2, {kDst, kSrc}},
    {op::kMemcpy2DAsync, "cudaMemcpy2DAsync", 2, {kDst, kSrc}},
    {op::kMemset, "cudaMemset", 1, {kDst}},
    {op::kMemsetAsync, "cudaMemsetAsync", 1, {kDst}},
    {op::kMemset2D, "cudaMemset2D", 1, {kDst}},
    {op::kMemset2DAsync, "cudaMemset2DAsync", 1, {kDst}},
    {op::kFree, "cudaFree", 1, {{"ptr", ArgRole::kWrite}}},
    // cuBLAS / NCCL rows come with their forwarding.
};

}  // namespace

std::span<const CallSpec> CallSpecs() { return kSpecs; }

const CallSpec* FindCallSpec(wire::ApiId api) {
  for (const CallSpec& s : kSpecs)
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
