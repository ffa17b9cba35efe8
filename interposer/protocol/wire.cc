#include "protocol/wire.h"

#include <atomic>

#include "common/kernel_faults.h"

namespace phos::wire {

bool IsKernelFault(WireStatus s) { return IsKernelFaultNumber(static_cast<int>(s)); }

WireStatus ToWire(const Status& s) {
  using C = Status::Code;
  if (!s.ok() && s.api_error() != 0) {
    const auto w = static_cast<WireStatus>(s.api_error());
    if (w == WireStatus::kNoBinaryForGpu || w == WireStatus::kCooperativeLaunchTooLarge || IsKernelFault(w)) return w;
  }
  switch (s.code()) {
    case C::kOk: return WireStatus::kSuccess;
    case C::kInvalidArgument:
    case C::kFailedPrecondition:
      // The sim reports a bad device range (InvalidArgument) and a kernel's
      // faulting access (FailedPrecondition, from the PTX interpreter) with
      // "illegal address" in the message.
      return s.message().find("illegal address") != std::string::npos ? WireStatus::kIllegalAddress
                                                                      : WireStatus::kInvalidValue;
    case C::kAlreadyExists: return WireStatus::kInvalidValue;
    case C::kNotFound: return WireStatus::kInvalidResourceHandle;
    case C::kOutOfMemory: return WireStatus::kMemoryAllocation;
    case C::kNotSupported: return WireStatus::kNotSupported;
    case C::kNotReady: return WireStatus::kNotReady;
    case C::kUnavailable: return WireStatus::kDaemonUnavailable;
    case C::kCorruption: return WireStatus::kInvalidImage;
    case C::kIoError:
    case C::kInternal: return WireStatus::kUnknown;
  }
  return WireStatus::kUnknown;
}

std::string_view WireStatusName(WireStatus s) {
  switch (s) {
    case WireStatus::kSuccess: return "cudaSuccess";
    case WireStatus::kInvalidValue: return "cudaErrorInvalidValue";
    case WireStatus::kMemoryAllocation: return "cudaErrorMemoryAllocation";
    case WireStatus::kNotInitialized: return "cudaErrorInitializationError";
    case WireStatus::kDaemonUnavailable: return "cudaErrorDevicesUnavailable";
    case WireStatus::kInvalidDevice: return "cudaErrorInvalidDevice";
    case WireStatus::kInvalidImage: return "cudaErrorInvalidKernelImage";
    case WireStatus::kNoBinaryForGpu: return "cudaErrorNoKernelImageForDevice";
    case WireStatus::kInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case WireStatus::kNotFound: return "cudaErrorSymbolNotFound";
    case WireStatus::kNotReady: return "cudaErrorNotReady";
    case WireStatus::kIllegalAddress: return "cudaErrorIllegalAddress";
    case WireStatus::kAssert: return "cudaErrorAssert";
    case WireStatus::kHardwareStackError: return "cudaErrorHardwareStackError";
    case WireStatus::kIllegalInstruction: return "cudaErrorIllegalInstruction";
    case WireStatus::kMisalignedAddress: return "cudaErrorMisalignedAddress";
    case WireStatus::kInvalidAddressSpace: return "cudaErrorInvalidAddressSpace";
    case WireStatus::kInvalidPc: return "cudaErrorInvalidPc";
    case WireStatus::kLaunchFailure: return "cudaErrorLaunchFailure";
    case WireStatus::kCooperativeLaunchTooLarge: return "cudaErrorCooperativeLaunchTooLarge";
    case WireStatus::kNotSupported: return "cudaErrorNotSupported";
    case WireStatus::kUnknown: return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}

namespace {
ring::ChunkState* Chunks(void* base, const ring::RingGeometry& g) {
  return reinterpret_cast<ring::ChunkState*>(static_cast<std::byte*>(base) + g.chunk_state_offset);
}
ring::RegionHeader* Header(void* base) { return static_cast<ring::RegionHeader*>(base); }
}  // namespace

std::byte* ChunkBytes(void* base, const ring::RingGeometry& g, uint32_t chunk) {
  return static_cast<std::byte*>(base) + g.staging_offset + uint64_t{chunk} * g.chunk_bytes;
}

Status AcquireReplyChunk(void* base, const ring::RingGeometry& g, const ring::WaitPolicy& wait,
                         const ring::AliveFn& alive, uint32_t* chunk) {
  const uint32_t n = g.chunk_count;
  if (n == 0) return Status::NotSupported("wire: region has no staging arena");
  ring::ChunkState* chunks = Chunks(base, g);
  ring::RegionHeader* h = Header(base);
  auto try_take = [&]() -> bool {
    // Take from the top so replies and PostBulk (which starts at its hint)
    // rarely contend for the same chunk.
    for (uint32_t k = n; k-- > 0;) {
      uint32_t expected = ring::kChunkFree;
      if (chunks[k].state.load(std::memory_order_relaxed) == ring::kChunkFree &&
          chunks[k].state.compare_exchange_strong(expected, ring::kChunkFilling,
                                                  std::memory_order_acquire)) {
        *chunk = k;
        return true;
      }
    }
    return false;
  };
  for (;;) {
    if (try_take()) return Status::Ok();
    auto any_free = [&] {
      for (uint32_t i = 0; i < n; ++i) {
        if (chunks[i].state.load(std::memory_order_acquire) == ring::kChunkFree) return true;
      }
      return false;
    };
    PHOS_RETURN_IF_ERROR(ring::SpinThenWait(&h->staging, any_free, &h->closed, alive, wait));
  }
}

void ReleaseReplyChunk(void* base, const ring::RingGeometry& g, uint32_t chunk) {
  if (chunk >= g.chunk_count) return;
  Chunks(base, g)[chunk].state.store(ring::kChunkFree, std::memory_order_release);
  ring::Notify(&Header(base)->staging);
}

}  // namespace phos::wire
