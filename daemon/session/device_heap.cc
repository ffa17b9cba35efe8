// The device heap of kernels' malloc/free, and the device limits phosd
// applies (kDeviceSetLimit: the heap's size, the printf FIFO's; docs/
// interposer.md "The device heap", "Device printf").
//
// On the sim, the heap is a buffer of the session that phosd makes at the
// first launch of a kernel whose module calls malloc, sized by the app's
// cudaDeviceSetLimit(cudaLimitMallocHeapSize) (8 MiB by default), and hands
// to the backend; the interpreter keeps the allocator's state inside it
// (instrument/interp/ops_heap.cc). So a checkpoint, a restore and a
// migration carry the heap — blocks, allocator and all — as any buffer. A
// GPU's driver keeps its own heap (Context::WantsDeviceHeap false).
#include <spdlog/fmt/fmt.h>

#include "session/handlers.h"

namespace phos::session {

using wire::WireStatus;

void HandleDeviceSetLimit(SessionState& st, const CallContext& call, const wire::DeviceLimitRequest& req,
                          Outcome* out) {
  (void)call;
  if (req.limit == wire::kLimitPrintfFifoSize) {
    if (req.value == 0) return out->Fail(WireStatus::kInvalidValue, "a printf FIFO of 0 bytes");
    return out->Fail(st.ctx->SetDeviceOutputLimit(req.value));
  }
  if (Status h = HomeDeviceOnly(st, "cudaLimitMallocHeapSize"); !h.ok()) return out->Fail(h);
  if (req.limit != wire::kLimitMallocHeapSize) {
    return out->Fail(WireStatus::kInvalidValue, "phosd applies no limit " + std::to_string(req.limit));
  }
  if (st.device_heap != 0) {
    // CUDA: the limit cannot change once a kernel that uses malloc ran.
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("the device heap exists already ({} bytes at 0x{:x}): cudaLimitMallocHeapSize must "
                                 "be set before the first launch of a kernel that calls malloc",
                                 st.device_heap_bytes, st.device_heap));
  }
  if (req.value == 0) return out->Fail(WireStatus::kInvalidValue, "a device heap of 0 bytes");
  st.device_heap_bytes = req.value;
}

Status EnsureDeviceHeap(SessionState& st, const CallView* admit) {
  if (st.device_heap != 0 || !st.ctx->WantsDeviceHeap()) return Status::Ok();
  PHOS_RETURN_IF_ERROR(HomeDeviceOnly(st, "a kernel that calls malloc (the device heap)"));
  backend::DevicePtr ptr = 0;
  const uint64_t bytes = st.device_heap_bytes;
  Status s = RunMaybeAdmitted(st, admit, [&] {
    // A heap is zero when made: the interpreter formats a zeroed heap.
    PHOS_RETURN_IF_ERROR(st.ctx->Allocate(bytes, 0, &ptr));
    Status z = st.ctx->MemsetAsync(ptr, 0, 1, bytes, backend::kDefaultStream);
    // Zeroed before any stream's kernel can use it (non-blocking streams do
    // not wait for the default stream).
    if (z.ok()) z = st.ctx->SynchronizeStream(backend::kDefaultStream);
    if (z.ok()) z = st.ctx->SetDeviceHeap(ptr, bytes);
    if (!z.ok()) (void)st.ctx->Free(ptr);
    return z;
  });
  if (!s.ok()) return s.WithContext(fmt::format("making the {}-byte device heap", bytes));
  st.buffers.Add(ptr, bytes);
  st.device_heap = ptr;
  return Status::Ok();
}

Status AdoptDeviceHeap(SessionState& st, uint64_t address) {
  auto it = st.buffers.find(address);
  if (it == st.buffers.end()) {
    return Status::Corruption(fmt::format("the device heap at 0x{:x} is not a buffer of the image", address));
  }
  PHOS_RETURN_IF_ERROR(st.ctx->SetDeviceHeap(address, it->second));
  st.device_heap = address;
  st.device_heap_bytes = it->second;
  return Status::Ok();
}

void AddDeviceHeapAccess(const SessionState& st, CallView* view) {
  if (st.device_heap != 0) view->AddOrMerge(st.device_heap, st.device_heap_bytes, true);
}

}  // namespace phos::session
