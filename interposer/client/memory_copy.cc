// Copies and memsets (docs/interposer.md "Pinned host memory and copies"):
// DoMemcpy / DoMemset behind cudaMemcpy*, cudaMemset* (runtime_api.cc),
// and the pitched calls: cudaMallocPitch, cudaMemcpy2D[Async],
// cudaMemset2D[Async].
//
// Paths, by where the host side lives:
//   pinned arena (IsPinnedRange): one small record naming the app address
//     (CopyDir::kPinnedToDevice / kDeviceToPinned); phosd copies from /
//     into its own mapping of the segment. Posted for the async variants
//     (D2H too: the data is there once the stream or an event after it has
//     completed, as in CUDA), Called for the synchronous ones (phosd
//     synchronises the stream before answering).
//   pageable (anything else, incl. cudaHostRegister'ed memory and ranges
//     that straddle a segment's end): H2D is inline or staged and returns
//     once staged; D2H is Called chunk by chunk and returns when done.
// 2D copies are one record for device-device and pinned copies; pageable
// rows are packed into (H2D) / unpacked from (D2H) the staged stream, so a
// copy costs one record per staging chunk, never one per row.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "interposer/client/client_internal.h"
#include "interposer/client/connection.h"
#include "interposer/client/graphs.h"
#include "interposer/client/handles.h"
#include "protocol/pitched.h"

namespace phos::client {
namespace {

namespace op = wire::op;
using wire::CopyDir;
using wire::ForEachRowPiece;
using wire::Span2D;

cudaError_t Sticky() {
  cudaError_t s = StickyError();
  return s == cudaSuccess ? cudaSuccess : SetError(s);
}

// While `stream` is being captured (graphs.h): an asynchronous call
// becomes a node that replays `op` on the launch stream (a copy reads its
// source when the node runs, as a graph's memcpy node does); a synchronous
// one invalidates the capture. True when handled; *result is the call's.
bool Captured(uint32_t stream, bool sync, cudaGraphNodeType type, const char* what, StreamOp op,
              cudaError_t* result) {
  if (!AnyCapture()) return false;
  const bool handled = sync ? RefuseInCapture(stream, what, result) : CaptureOp(stream, type, std::move(op), result);
  if (handled && *result != cudaSuccess) SetError(*result);
  return handled;
}

cudaError_t H2D(void* dst, const void* src, size_t n, uint32_t stream, bool sync) {
  Connection& c = Connection::Get();
  if (WireStatus w = c.Ensure(); w != WireStatus::kSuccess) return Finish(w);
  wire::MemcpyRequest req{reinterpret_cast<uint64_t>(dst), 0, n, static_cast<uint32_t>(CopyDir::kHostToDevice),
                          wire::kNoChunk};
  if (sizeof(req) + n <= c.max_payload_bytes()) {
    std::vector<std::byte> payload(sizeof(req) + n);
    std::memcpy(payload.data(), &req, sizeof(req));
    if (n) std::memcpy(payload.data() + sizeof(req), src, n);
    return Finish(sync ? c.Call(op::kMemcpy, stream, payload) : c.Post(op::kMemcpyAsync, stream, payload));
  }
  WireStatus w = c.PostBulk(op::kMemcpyAsync, stream, Bytes(req),
                            std::span<const std::byte>(static_cast<const std::byte*>(src), n));
  if (w == WireStatus::kSuccess && sync) w = c.Call(op::kStreamSynchronize, stream, {});
  return Finish(w);
}

cudaError_t D2H(void* dst, const void* src, size_t n, uint32_t stream) {
  Connection& c = Connection::Get();
  if (WireStatus w = c.Ensure(); w != WireStatus::kSuccess) return Finish(w);
  auto* out = static_cast<std::byte*>(dst);
  const auto s = reinterpret_cast<uint64_t>(src);
  if (n <= ring::kSlotResultBytes) {
    wire::MemcpyRequest req{0, s, n, static_cast<uint32_t>(CopyDir::kDeviceToHost), wire::kNoChunk};
    ring::Reply r;
    WireStatus w = c.Call(op::kMemcpy, stream, Bytes(req), &r);
    if (w == WireStatus::kSuccess && r.bytes == n && n) std::memcpy(out, r.data.data(), n);
    return Finish(w);
  }
  for (uint64_t off = 0; off < n;) {
    const uint64_t k = std::min<uint64_t>(c.chunk_bytes(), n - off);
    uint32_t chunk = 0;
    if (WireStatus w = c.AcquireChunk(&chunk); w != WireStatus::kSuccess) return Finish(w);
    wire::MemcpyRequest req{0, s + off, k, static_cast<uint32_t>(CopyDir::kDeviceToHost), chunk};
    WireStatus w = c.Call(op::kMemcpy, stream, Bytes(req));
    if (w == WireStatus::kSuccess) std::memcpy(out + off, c.ChunkBytes(chunk), k);
    c.ReleaseChunk(chunk);
    if (w != WireStatus::kSuccess) return Finish(w);
    off += k;
  }
  return cudaSuccess;
}

/// The zero-copy path: one record, the host side named by its app address.
cudaError_t PinnedCopy(void* dst, const void* src, size_t n, CopyDir dir, uint32_t stream, bool sync) {
  wire::MemcpyRequest req{reinterpret_cast<uint64_t>(dst), reinterpret_cast<uint64_t>(src), n,
                          static_cast<uint32_t>(dir), wire::kNoChunk};
  Connection& c = Connection::Get();
  return Finish(sync ? c.Call(op::kMemcpy, stream, Bytes(req)) : c.Post(op::kMemcpyAsync, stream, Bytes(req)));
}

cudaError_t SyncBeforeHostCopy(uint32_t stream) {
  Connection& c = Connection::Get();
  if (!c.connected()) return cudaSuccess;  // nothing can be in flight
  WireStatus w = c.Call(op::kStreamSynchronize, stream, {});
  return w == WireStatus::kSuccess ? cudaSuccess : Finish(w);
}

/// cudaMemcpyDefault resolved by where the pointers live.
cudaMemcpyKind ResolveKind(cudaMemcpyKind kind, const void* dst, const void* src) {
  if (kind != cudaMemcpyDefault) return kind;
  const bool d = IsDevicePtr(dst), s = IsDevicePtr(src);
  return d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
           : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

// ---------------------------------------------------------------- 2D

cudaError_t Memcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                     cudaMemcpyKind kind, uint32_t stream, bool sync) {
  if (cudaError_t e = Sticky(); e != cudaSuccess) return e;
  if (cudaError_t r; Captured(stream, sync, cudaGraphNodeTypeMemcpy, "a synchronous 2D copy",
                              [=](uint32_t s) { return Memcpy2D(dst, dpitch, src, spitch, width, height, kind, s, false); },
                              &r)) {
    return r;
  }
  if (width == 0 || height == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return SetError(cudaErrorInvalidValue);
  if (width > dpitch || width > spitch) return SetError(cudaErrorInvalidPitchValue);
  size_t dspan = 0, sspan = 0;
  if (!Span2D(dpitch, width, height, &dspan) || !Span2D(spitch, width, height, &sspan)) {
    return SetError(cudaErrorInvalidValue);
  }
  if (width > SIZE_MAX / height) return SetError(cudaErrorInvalidValue);
  const size_t packed = width * height;
  kind = ResolveKind(kind, dst, src);
  wire::Memcpy2DRequest req{reinterpret_cast<uint64_t>(dst), reinterpret_cast<uint64_t>(src), dpitch, spitch,
                            width, height, 0, 0, 0, wire::kNoChunk};
  Connection& c = Connection::Get();
  auto one_record = [&](CopyDir dir) {
    req.dir = static_cast<uint32_t>(dir);
    return Finish(sync ? c.Call(op::kMemcpy2D, stream, Bytes(req)) : c.Post(op::kMemcpy2DAsync, stream, Bytes(req)));
  };
  switch (kind) {
    case cudaMemcpyHostToHost: {
      if (sync) {
        if (cudaError_t e = SyncBeforeHostCopy(stream); e != cudaSuccess) return e;
      }
      for (size_t r = 0; r < height; ++r) {
        std::memmove(static_cast<std::byte*>(dst) + r * dpitch, static_cast<const std::byte*>(src) + r * spitch, width);
      }
      return cudaSuccess;
    }
    case cudaMemcpyDeviceToDevice:
      return one_record(CopyDir::kDeviceToDevice);
    case cudaMemcpyHostToDevice: {
      if (IsPinnedRange(src, sspan)) return one_record(CopyDir::kPinnedToDevice);
      if (WireStatus w = c.Ensure(); w != WireStatus::kSuccess) return Finish(w);
      // Pack the rows (no copy when they are contiguous already).
      std::vector<std::byte> buf;
      const std::byte* rows = static_cast<const std::byte*>(src);
      if (spitch != width) {
        buf.resize(packed);
        for (size_t r = 0; r < height; ++r) std::memcpy(buf.data() + r * width, rows + r * spitch, width);
        rows = buf.data();
      }
      req.dir = static_cast<uint32_t>(CopyDir::kHostToDevice);
      req.spitch = width;
      if (sizeof(req) + packed <= c.max_payload_bytes()) {
        std::vector<std::byte> payload(sizeof(req) + packed);
        std::memcpy(payload.data(), &req, sizeof(req));
        std::memcpy(payload.data() + sizeof(req), rows, packed);
        return Finish(sync ? c.Call(op::kMemcpy2D, stream, payload) : c.Post(op::kMemcpy2DAsync, stream, payload));
      }
      WireStatus w = c.PostBulk(op::kMemcpy2DAsync, stream, Bytes(req), std::span<const std::byte>(rows, packed));
      if (w == WireStatus::kSuccess && sync) w = c.Call(op::kStreamSynchronize, stream, {});
      return Finish(w);
    }
    case cudaMemcpyDeviceToHost: {
      if (IsPinnedRange(dst, dspan)) return one_record(CopyDir::kDeviceToPinned);
      if (WireStatus w = c.Ensure(); w != WireStatus::kSuccess) return Finish(w);
      // Pageable destination: synchronous, one call per reply chunk.
      req.dir = static_cast<uint32_t>(CopyDir::kDeviceToHost);
      auto* out = static_cast<std::byte*>(dst);
      for (uint64_t off = 0; off < packed;) {
        const bool inline_reply = packed - off <= ring::kSlotResultBytes;
        const uint64_t k = inline_reply ? packed - off : std::min<uint64_t>(c.chunk_bytes(), packed - off);
        uint32_t chunk = wire::kNoChunk;
        if (!inline_reply) {
          if (WireStatus w = c.AcquireChunk(&chunk); w != WireStatus::kSuccess) return Finish(w);
        }
        req.packed_offset = off;
        req.packed_bytes = k;
        req.reply_chunk = chunk;
        ring::Reply r;
        WireStatus w = c.Call(op::kMemcpy2D, stream, Bytes(req), &r);
        if (w == WireStatus::kSuccess) {
          const std::byte* from = inline_reply ? r.data.data() : c.ChunkBytes(chunk);
          if (inline_reply && r.bytes != k) w = WireStatus::kUnknown;
          if (w == WireStatus::kSuccess) {
            ForEachRowPiece(off, k, width, [&](uint64_t row, uint64_t col, uint64_t len, uint64_t at) {
              std::memcpy(out + row * dpitch + col, from + (at - off), len);
            });
          }
        }
        if (!inline_reply) c.ReleaseChunk(chunk);
        if (w != WireStatus::kSuccess) return Finish(w);
        off += k;
      }
      return cudaSuccess;
    }
    default:
      return SetError(cudaErrorInvalidMemcpyDirection);
  }
}

}  // namespace

cudaError_t SubmitMemset2D(void* dst, size_t pitch, unsigned value, unsigned element_size, size_t width_bytes,
                           size_t height, uint32_t stream, bool sync) {
  if (cudaError_t e = Sticky(); e != cudaSuccess) return e;
  if (cudaError_t r; Captured(stream, sync, cudaGraphNodeTypeMemset, "a synchronous 2D memset",
                              [=](uint32_t s) {
                                return SubmitMemset2D(dst, pitch, value, element_size, width_bytes, height, s, false);
                              },
                              &r)) {
    return r;
  }
  if (width_bytes == 0 || height == 0) return cudaSuccess;
  size_t span = 0;
  if (dst == nullptr || width_bytes > pitch || !Span2D(pitch, width_bytes, height, &span)) {
    return SetError(cudaErrorInvalidValue);
  }
  wire::Memset2DRequest req{reinterpret_cast<uint64_t>(dst), pitch, width_bytes, height, value, element_size};
  Connection& c = Connection::Get();
  return Finish(sync ? c.Call(op::kMemset2D, stream, Bytes(req)) : c.Post(op::kMemset2DAsync, stream, Bytes(req)));
}

cudaError_t DoMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, uint32_t stream, bool sync) {
  if (cudaError_t e = Sticky(); e != cudaSuccess) return e;
  if (cudaError_t r; Captured(stream, sync, cudaGraphNodeTypeMemcpy, "a synchronous copy",
                              [=](uint32_t s) { return DoMemcpy(dst, src, n, kind, s, false); }, &r)) {
    return r;
  }
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return SetError(cudaErrorInvalidValue);
  switch (ResolveKind(kind, dst, src)) {
    case cudaMemcpyHostToHost:
      if (sync) {
        if (cudaError_t e = SyncBeforeHostCopy(stream); e != cudaSuccess) return e;
      }
      std::memmove(dst, src, n);
      return cudaSuccess;
    case cudaMemcpyHostToDevice:
      if (IsPinnedRange(src, n)) return PinnedCopy(dst, src, n, CopyDir::kPinnedToDevice, stream, sync);
      return H2D(dst, src, n, stream, sync);
    case cudaMemcpyDeviceToHost:
      if (IsPinnedRange(dst, n)) return PinnedCopy(dst, src, n, CopyDir::kDeviceToPinned, stream, sync);
      return D2H(dst, src, n, stream);
    case cudaMemcpyDeviceToDevice: {
      wire::MemcpyRequest req{reinterpret_cast<uint64_t>(dst), reinterpret_cast<uint64_t>(src), n,
                              static_cast<uint32_t>(CopyDir::kDeviceToDevice), wire::kNoChunk};
      Connection& c = Connection::Get();
      return Finish(sync ? c.Call(op::kMemcpy, stream, Bytes(req)) : c.Post(op::kMemcpyAsync, stream, Bytes(req)));
    }
    default:
      return SetError(cudaErrorInvalidMemcpyDirection);
  }
}

cudaError_t DoMemset(void* dst, int value, size_t count, uint32_t stream, bool sync) {
  if (cudaError_t e = Sticky(); e != cudaSuccess) return e;
  if (cudaError_t r; Captured(stream, sync, cudaGraphNodeTypeMemset, "a synchronous memset",
                              [=](uint32_t s) { return DoMemset(dst, value, count, s, false); }, &r)) {
    return r;
  }
  if (count == 0) return cudaSuccess;
  wire::MemsetRequest req{reinterpret_cast<uint64_t>(dst), count, static_cast<uint32_t>(value) & 0xffu, 1};
  Connection& c = Connection::Get();
  return Finish(sync ? c.Call(op::kMemset, stream, Bytes(req)) : c.Post(op::kMemsetAsync, stream, Bytes(req)));
}

namespace {
// cudaMemset2D's contract: every byte set to the low byte of `value`.
cudaError_t ByteMemset2D(void* dst, size_t pitch, int value, size_t width, size_t height, uint32_t stream, bool sync) {
  return SubmitMemset2D(dst, pitch, static_cast<unsigned>(value) & 0xffu, 1, width, height, stream, sync);
}
}  // namespace

}  // namespace phos::client

using namespace phos::client;  // NOLINT

/// Rows start on 512-byte boundaries (cudaDeviceProp::texturePitchAlignment
/// is 32; 512 matches what the CUDA driver hands out on current GPUs).
PHOS_EXPORT cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  if (devPtr == nullptr || pitch == nullptr) return SetError(cudaErrorInvalidValue);
  constexpr size_t kPitchAlign = 512;
  if (width > SIZE_MAX - kPitchAlign) return SetError(cudaErrorInvalidValue);
  const size_t p = (width + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
  if (height != 0 && p > SIZE_MAX / height) return SetError(cudaErrorMemoryAllocation);
  cudaError_t e = cudaMalloc(devPtr, p * height);
  if (e == cudaSuccess) *pitch = p;
  return e;
}

PHOS_EXPORT cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind kind) {
  return Memcpy2D(dst, dpitch, src, spitch, width, height, kind, 0, true);
}
PHOS_EXPORT cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                          size_t height, cudaMemcpyKind kind) {
  return Memcpy2D(dst, dpitch, src, spitch, width, height, kind, StreamIdOf(nullptr, DefaultStream::kPerThread),
                  true);
}
PHOS_EXPORT cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                          size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  return Memcpy2D(dst, dpitch, src, spitch, width, height, kind, StreamIdOf(stream), false);
}
PHOS_EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch,
                                               size_t width, size_t height, cudaMemcpyKind kind,
                                               cudaStream_t stream) {
  return Memcpy2D(dst, dpitch, src, spitch, width, height, kind, StreamIdOf(stream, DefaultStream::kPerThread),
                  false);
}
PHOS_EXPORT cudaError_t cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return ByteMemset2D(devPtr, pitch, value, width, height, 0, true);
}
PHOS_EXPORT cudaError_t cudaMemset2D_ptds(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return ByteMemset2D(devPtr, pitch, value, width, height, StreamIdOf(nullptr, DefaultStream::kPerThread), true);
}
PHOS_EXPORT cudaError_t cudaMemset2DAsync(void* devPtr, size_t pitch, int value, size_t width, size_t height,
                                          cudaStream_t stream) {
  return ByteMemset2D(devPtr, pitch, value, width, height, StreamIdOf(stream), false);
}
PHOS_EXPORT cudaError_t cudaMemset2DAsync_ptsz(void* devPtr, size_t pitch, int value, size_t width, size_t height,
                                               cudaStream_t stream) {
  return ByteMemset2D(devPtr, pitch, value, width, height, StreamIdOf(stream, DefaultStream::kPerThread), false);
}
