// The driver's virtual-memory API as phosd sees it: kMemAddressReserve,
// kMemAddressFree, kMemMap, kMemUnmap (rows in interposer/protocol/
// calls.def; docs/interposer.md "The driver's virtual-memory API").
//
// A reserved range is address space the backend keeps for this session
// (Context::ReserveAddressRange); a mapping is an ordinary buffer of the
// session placed at the app's address inside it. Why a buffer: every
// checkpoint, restore, migration and template then carries the mapping's
// bytes, and every C/R protocol tracks writes to it, with no new image
// section for its contents. Physical allocation handles (cuMemCreate) stay
// in libphos.so: phosd only ever sees where memory is mapped.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "session/access_spec.h"
#include "session/handlers.h"

namespace phos::session {

using wire::WireStatus;

namespace {

bool GranularityMultiple(uint64_t v) { return v % wire::kVmmGranularity == 0; }

}  // namespace

void AddMappedRangeAccess(const SessionState& st, CallView* view) {
  // One range for the whole reserved range (not one per mapping: PyTorch's
  // expandable segments hold thousands of mappings in one range, and each
  // launch would pay for all of them). The engine takes every buffer a
  // range overlaps; the unmapped holes hold no buffer, and a reserved range
  // is only ever this session's.
  const size_t n = view->ranges.size();  // entries may be appended below
  for (size_t i = 0; i < n; ++i) {
    const AccessRange r = view->ranges[i];
    const auto res = HoldingRange(st.reserved_ranges, r.ptr, 1);
    if (!res) continue;
    // The entry of the range's start (the first mapping's, when the kernel
    // was given that) grows to the whole range; else one is added.
    bool merged = false;
    for (AccessRange& e : view->ranges) {
      if (e.ptr != res->first) continue;
      e.bytes = std::max(e.bytes, res->second);
      e.write = e.write || r.write;
      merged = true;
      break;
    }
    if (!merged) view->Add(res->first, res->second, r.write);
  }
}

Status ReserveAddressRangeAt(SessionState& st, uint64_t at, uint64_t bytes) {
  PHOS_RETURN_IF_ERROR(CheckRoom(st.reserved_ranges.size(), "reserved address ranges"));
  backend::DevicePtr got = 0;
  PHOS_RETURN_IF_ERROR(st.ctx->ReserveAddressRange(bytes, 0, at, &got));
  if (got != at) {
    (void)st.ctx->ReleaseAddressRange(got);
    return Status::Internal(fmt::format("the backend reserved 0x{:x} instead of 0x{:x}", got, at));
  }
  st.reserved_ranges[at] = bytes;
  return Status::Ok();
}

void HandleMemAddressReserve(SessionState& st, const CallContext& call, const wire::AddressReserveRequest& req,
                             Outcome* out) {
  if (Status h = HomeDeviceOnly(st, "cuMemAddressReserve"); !h.ok()) return out->Fail(h);
  if (req.bytes == 0 || !GranularityMultiple(req.bytes)) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cuMemAddressReserve: size {} is not a non-zero multiple of the allocation "
                                 "granularity ({} bytes, cuMemGetAllocationGranularity)",
                                 req.bytes, wire::kVmmGranularity));
  }
  if (req.alignment != 0 && (req.alignment & (req.alignment - 1)) != 0) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cuMemAddressReserve: alignment {} is not a power of two", req.alignment));
  }
  if (Status s = CheckRoom(st.reserved_ranges.size(), "reserved address ranges"); !s.ok()) return out->Fail(s);
  CallView v = ViewOf(st, call);
  backend::DevicePtr ptr = 0;
  Status s = st.executor->Run(v, [&] {
    // The requested address is a hint (as in CUDA): taken or misaligned,
    // the range goes wherever there is room.
    if (req.addr != 0) {
      Status at = st.ctx->ReserveAddressRange(req.bytes, req.alignment, req.addr, &ptr);
      if (at.ok() || (at.code() != Status::Code::kAlreadyExists && at.code() != Status::Code::kInvalidArgument)) {
        return at;
      }
    }
    return st.ctx->ReserveAddressRange(req.bytes, req.alignment, 0, &ptr);
  });
  if (!s.ok()) return out->Fail(s);
  st.reserved_ranges[ptr] = req.bytes;
  out->Set(wire::MallocReply{ptr});
}

void HandleMemAddressFree(SessionState& st, const CallContext& call, const wire::AddressRangeRequest& req,
                          Outcome* out) {
  if (Status h = HomeDeviceOnly(st, "cuMemAddressFree"); !h.ok()) return out->Fail(h);
  auto it = st.reserved_ranges.find(req.ptr);
  if (it == st.reserved_ranges.end() || it->second != req.bytes) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cuMemAddressFree: [0x{:x}, +{}) is not a range this session reserved with "
                                 "cuMemAddressReserve",
                                 req.ptr, req.bytes));
  }
  auto inside = st.buffers.lower_bound(req.ptr);
  if (inside != st.buffers.end() && inside->first < req.ptr + req.bytes) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cuMemAddressFree: the range at 0x{:x} still has memory mapped at 0x{:x}; "
                                 "cuMemUnmap it first",
                                 req.ptr, inside->first));
  }
  CallView v = ViewOf(st, call);
  Status s = st.executor->Run(v, [&] { return st.ctx->ReleaseAddressRange(req.ptr); });
  if (!s.ok()) return out->Fail(s);
  st.reserved_ranges.erase(it);
}

void HandleMemMap(SessionState& st, const CallContext& call, const wire::AddressRangeRequest& req, Outcome* out) {
  if (Status h = HomeDeviceOnly(st, "cuMemMap"); !h.ok()) return out->Fail(h);
  if (req.bytes == 0 || !GranularityMultiple(req.bytes) || !GranularityMultiple(req.ptr)) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cuMemMap: [0x{:x}, +{}) is not aligned to the allocation granularity ({} bytes)",
                                 req.ptr, req.bytes, wire::kVmmGranularity));
  }
  if (!HoldingRange(st.reserved_ranges, req.ptr, req.bytes)) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cuMemMap: [0x{:x}, +{}) is not inside a range this session reserved with "
                                 "cuMemAddressReserve",
                                 req.ptr, req.bytes));
  }
  auto next = st.buffers.lower_bound(req.ptr);
  if (next != st.buffers.end() && next->first < req.ptr + req.bytes) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cuMemMap: 0x{:x} is already mapped (cuMemUnmap it first)", next->first));
  }
  if (next != st.buffers.begin() && std::prev(next)->first + std::prev(next)->second > req.ptr) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cuMemMap: 0x{:x} is already mapped (cuMemUnmap it first)", std::prev(next)->first));
  }
  CallView v = ViewOf(st, call);
  Status s = st.executor->Run(v, [&] {
    ReapRetained(st, false);
    backend::DevicePtr got = 0;
    Status a = st.ctx->Allocate(req.bytes, req.ptr, &got);
    if (a.code() == Status::Code::kOutOfMemory && !st.pending_frees.empty()) {
      ReapRetained(st, true);  // as cudaMalloc: wait for memory freed in stream order
      a = st.ctx->Allocate(req.bytes, req.ptr, &got);
    }
    if (a.ok() && got != req.ptr) {
      (void)st.ctx->Free(got);
      return Status::Internal(fmt::format("the backend mapped 0x{:x} instead of 0x{:x}", got, req.ptr));
    }
    return a;
  });
  if (!s.ok()) return out->Fail(s);
  st.buffers.Add(req.ptr, req.bytes);
}

void HandleMemUnmap(SessionState& st, const CallContext& call, const wire::AddressRangeRequest& req, Outcome* out) {
  if (Status h = HomeDeviceOnly(st, "cuMemUnmap"); !h.ok()) return out->Fail(h);
  auto it = st.buffers.find(req.ptr);
  if (it == st.buffers.end() || it->second != req.bytes ||
      !HoldingRange(st.reserved_ranges, req.ptr, req.bytes)) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cuMemUnmap: [0x{:x}, +{}) is not a mapping of this session (cuMemMap)", req.ptr,
                                 req.bytes));
  }
  if (Status s = FreeBufferSynchronously(st, ViewOf(st, call), it); !s.ok()) return out->Fail(s);
}

}  // namespace phos::session
