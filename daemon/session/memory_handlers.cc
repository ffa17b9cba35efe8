// Allocation, copies and memsets, pinned host segments: kMalloc, kFree,
// kMemcpy[Async], kMemset[Async], kMemcpy2D[Async], kMemset2D[Async],
// kHostSegmentRegister, kHostCopyStats (rows in interposer/protocol/calls.def;
// docs/interposer.md "Pinned host memory and copies").
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "protocol/pitched.h"
#include "session/access_spec.h"
#include "session/handlers.h"

namespace phos::session {

using wire::ForEachRowPiece;
using wire::Span2D;
using wire::WireStatus;

namespace {

/// A device-to-host copy read through staging is done: count it and tell
/// the app where its `bytes` are — inline in the completion slot, or at
/// the start of the reply chunk it holds.
void ReplyStagedRead(SessionState& st, uint32_t reply_chunk, uint64_t bytes, Outcome* out) {
  st.copy_stats.staged_copies += 1;
  st.copy_stats.staged_bytes += bytes;
  if (reply_chunk == wire::kNoChunk) {
    out->bytes = static_cast<uint32_t>(bytes);
  } else {
    out->Set(wire::ChunkReply{bytes});
  }
}

}  // namespace

void HandleMalloc(SessionState& st, const CallContext& call, const wire::MallocRequest& req, Outcome* out) {
  CallView v = ViewOf(st, call);
  v.synchronous = true;
  backend::DevicePtr ptr = 0;
  Status s = st.executor->Run(v, [&] {
    ReapRetained(st, false);  // memory freed in stream order whose stream has passed the free
    Status a = st.ctx->Allocate(req.bytes, 0, &ptr);
    if (a.code() == Status::Code::kOutOfMemory && !st.pending_frees.empty()) {
      // The device is full, partly of buffers freed in stream order whose
      // streams have not reached the free yet: wait for them, as CUDA's
      // pool would before failing.
      ReapRetained(st, true);
      a = st.ctx->Allocate(req.bytes, 0, &ptr);
    }
    return a;
  });
  if (!s.ok()) return out->Fail(s);
  st.buffers.Add(ptr, req.bytes);
  NoteObjectDevice(&st.buffer_devices, st, ptr);
  out->Set(wire::MallocReply{ptr});
}

void HandleFree(SessionState& st, const CallContext& call, const wire::PointerRequest& req, Outcome* out) {
  if (req.ptr == 0) return;  // cudaFree(nullptr) is a no-op
  auto it = st.buffers.find(req.ptr);
  if (it == st.buffers.end()) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cudaFree: 0x{:x} is not the start of a buffer of this session", req.ptr));
  }
  if (uint64_t rs = 0, rb = 0; FindHoldingRange(st.reserved_ranges, req.ptr, 1, &rs, &rb)) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cudaFree: 0x{:x} was mapped with cuMemMap; release it with cuMemUnmap", req.ptr));
  }
  CallView v = ViewOf(st, call);
  v.synchronous = true;
  if (Status s = FreeBufferSynchronously(st, v, it); !s.ok()) return out->Fail(s);
}

Status FreeBufferSynchronously(SessionState& st, CallView view, BufferMap::const_iterator it) {
  AddOperand(&view, kDstOperand, it->first, it->second);
  const uint64_t ptr = it->first;
  // The buffer's own GPU frees it (the app may free it from a thread on
  // another GPU, as CUDA allows).
  backend::Context* owner = ContextOf(st, DeviceOfBuffer(st, ptr));
  Status s = st.executor->Run(view, [&] {
    // cudaFree (and cuMemUnmap) synchronise the device: work using the
    // buffer finishes first.
    st.Defer(owner->Synchronize());
    ReapRetained(st, false);
    return owner->Free(ptr);
  });
  if (s.ok()) {
    st.buffers.Erase(it);
    st.buffer_devices.erase(ptr);
  }
  return s;
}

Status AllocateBufferAt(SessionState& st, int device, uint64_t at, uint64_t bytes) {
  backend::Context* ctx = ContextOf(st, device);
  backend::DevicePtr got = 0;
  Status s = ctx != nullptr ? ctx->Allocate(bytes, at, &got)
                            : Status::Internal("the session has no context on GPU " + std::to_string(device));
  if (s.ok() && got != at) {
    (void)ctx->Free(got);
    s = Status::Internal(fmt::format("the backend placed it at 0x{:x}", got));
  }
  if (!s.ok()) {
    return s.WithContext(fmt::format("allocating {} bytes at 0x{:x} on GPU {} (the address may be taken)", bytes,
                                     at, device));
  }
  st.buffers.Add(at, bytes);
  if (device != st.device) st.buffer_devices[at] = device;
  return Status::Ok();
}

void HandleFreeAsync(SessionState& st, const CallContext& call, const wire::PointerRequest& req, Outcome* out) {
  if (req.ptr == 0) return;  // cudaFreeAsync(nullptr) is a no-op
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, call.rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  auto it = st.buffers.find(req.ptr);
  if (it == st.buffers.end()) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cudaFreeAsync: 0x{:x} is not the start of a buffer of this session", req.ptr));
  }
  if (uint64_t rs = 0, rb = 0; FindHoldingRange(st.reserved_ranges, req.ptr, 1, &rs, &rb)) {
    return out->Fail(WireStatus::kInvalidValue,
                     fmt::format("cudaFreeAsync: 0x{:x} was mapped with cuMemMap; release it with cuMemUnmap", req.ptr));
  }
  if (const int gpu = DeviceOfBuffer(st, req.ptr); gpu != st.call_device) {
    return out->Fail(WireStatus::kNotSupported,
                     fmt::format("cudaFreeAsync: 0x{:x} lives on GPU {}, the stream on GPU {}: phos frees a buffer "
                                 "in stream order only on a stream of its own GPU",
                                 req.ptr, gpu, st.call_device));
  }
  CallView v = ViewOnStream(st, call, stream, /*sync=*/false);
  AddOperand(&v, kDstOperand, it->first, it->second);
  Status s = st.executor->Run(v, [&] {
    // The memory is released when the stream gets here: work queued on it
    // before the free (and work on other streams ordered before it by
    // events) may still use the buffer.
    SessionState::PendingFree p{0, req.ptr, st.ctx};
    if (!RecordStreamPoint(st, stream, &p.event).ok()) {
      // Cannot mark the point in the stream: wait for the stream instead.
      PHOS_RETURN_IF_ERROR(st.ctx->SynchronizeStream(stream));
      return st.ctx->Free(req.ptr);
    }
    st.pending_frees.push_back(p);
    return Status::Ok();
  });
  if (!s.ok()) return out->Fail(s);
  st.buffers.Erase(it);
  st.buffer_devices.erase(req.ptr);
}

void HandleMemcpy(SessionState& st, const CallContext& call, const wire::MemcpyRequest& req, Outcome* out) {
  const ring::Record& rec = call.rec;
  const bool sync = call.sync();
  const std::span<const std::byte> tail = call.tail;
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  CallView v = ViewOnStream(st, call, stream, sync);
  const auto dir = static_cast<wire::CopyDir>(req.dir);

  if (dir == wire::CopyDir::kHostToDevice) {
    uint64_t dst = req.dst;
    std::span<const std::byte> src;
    if (rec.has_staging) {
      const ring::StagingRef& ref = rec.staging;
      if (ref.offset > req.bytes || ref.bytes > req.bytes - ref.offset) {
        return out->Fail(WireStatus::kInvalidValue, "memcpy piece outside its transfer");
      }
      dst += ref.offset;
      src = st.ring->StagingBytes(ref);
    } else {
      if (tail.size() != req.bytes) {
        return out->Fail(WireStatus::kInvalidValue, "memcpy H2D: inline data of " + std::to_string(tail.size()) +
                                                        " bytes, request says " + std::to_string(req.bytes));
      }
      src = tail;
    }
    if (Status s = CheckDeviceRange(st, dst, src.size()); !s.ok()) return out->Fail(s);
    AddOperand(&v, kDstOperand, dst, src.size());
    Status s = st.executor->Run(v, [&] {
      PHOS_RETURN_IF_ERROR(EnqueueH2D(st, dst, src, stream));
      return sync ? SyncResult(st, st.ctx->SynchronizeStream(stream)) : Status::Ok();
    });
    return out->Fail(s);
  }
  if (dir == wire::CopyDir::kDeviceToHost) {
    if (!rec.wants_reply()) return out->Fail(WireStatus::kInvalidValue, "memcpy D2H must be called, not posted");
    std::byte* host = nullptr;
    if (req.reply_chunk == wire::kNoChunk) {
      if (req.bytes > ring::kSlotResultBytes) {
        return out->Fail(WireStatus::kInvalidValue, "memcpy D2H: more than " +
                                                        std::to_string(ring::kSlotResultBytes) +
                                                        " bytes needs a reply chunk");
      }
      host = out->data.data();
    } else {
      if (req.reply_chunk >= st.geometry.chunk_count || req.bytes > st.geometry.chunk_bytes) {
        return out->Fail(WireStatus::kInvalidValue, "memcpy D2H: bad reply chunk or size");
      }
      PinStagingArena(st);
      host = wire::ChunkBytes(st.region_base, st.geometry, req.reply_chunk);
    }
    if (Status s = CheckDeviceRange(st, req.src, req.bytes); !s.ok()) return out->Fail(s);
    AddOperand(&v, kSrcOperand, req.src, req.bytes);
    Status s = st.executor->Run(v, [&] {
      if (req.bytes) {
        PHOS_RETURN_IF_ERROR(st.ctx->MemcpyAsync(reinterpret_cast<uint64_t>(host), req.src, req.bytes,
                                                 backend::CopyKind::kDeviceToHost, stream));
      }
      return SyncResult(st, st.ctx->SynchronizeStream(stream));
    });
    if (!s.ok()) return out->Fail(s);
    return ReplyStagedRead(st, req.reply_chunk, req.bytes, out);
  }
  if (dir == wire::CopyDir::kPinnedToDevice || dir == wire::CopyDir::kDeviceToPinned) {
    // The zero-copy path: straight from / into phosd's mapping of the
    // app's pinned segment. No retention: the mapping lives as long as the
    // session.
    if (rec.has_staging || !tail.empty()) {
      return out->Fail(WireStatus::kInvalidValue, "memcpy from/to pinned memory carries no data");
    }
    const bool to_device = dir == wire::CopyDir::kPinnedToDevice;
    const uint64_t device = to_device ? req.dst : req.src;
    std::byte* host = nullptr;
    if (Status s = st.host_segments.Translate(to_device ? req.src : req.dst, req.bytes, &host); !s.ok()) {
      return out->Fail(s);
    }
    if (Status s = CheckDeviceRange(st, device, req.bytes); !s.ok()) return out->Fail(s);
    if (Status s = EnsurePinnedSegments(st); !s.ok()) return out->Fail(s);
    AddOperand(&v, to_device ? kDstOperand : kSrcOperand, device, req.bytes);
    Status s = st.executor->Run(v, [&] {
      if (req.bytes) {
        const auto h = reinterpret_cast<uint64_t>(host);
        PHOS_RETURN_IF_ERROR(st.ctx->MemcpyAsync(to_device ? device : h, to_device ? h : device, req.bytes,
                                                 to_device ? backend::CopyKind::kHostToDevice
                                                           : backend::CopyKind::kDeviceToHost,
                                                 stream));
      }
      return sync ? SyncResult(st, st.ctx->SynchronizeStream(stream)) : Status::Ok();
    });
    if (s.ok()) {
      st.copy_stats.pinned_copies += 1;
      st.copy_stats.pinned_bytes += req.bytes;
    }
    return out->Fail(s);
  }
  if (dir == wire::CopyDir::kDeviceToDevice) {
    if (Status s = CheckDeviceRange(st, req.src, req.bytes); !s.ok()) return out->Fail(s);
    if (Status s = CheckDeviceRange(st, req.dst, req.bytes); !s.ok()) return out->Fail(s);
    AddOperand(&v, kSrcOperand, req.src, req.bytes);
    AddOperand(&v, kDstOperand, req.dst, req.bytes);
    Status s = st.executor->Run(v, [&] {
      if (req.bytes) {
        PHOS_RETURN_IF_ERROR(
            st.ctx->MemcpyAsync(req.dst, req.src, req.bytes, backend::CopyKind::kDeviceToDevice, stream));
      }
      return sync ? SyncResult(st, st.ctx->SynchronizeStream(stream)) : Status::Ok();
    });
    return out->Fail(s);
  }
  out->Fail(WireStatus::kInvalidValue, "memcpy: unknown direction " + std::to_string(req.dir));
}

void HandleMemset(SessionState& st, const CallContext& call, const wire::MemsetRequest& req, Outcome* out) {
  const ring::Record& rec = call.rec;
  const bool sync = call.sync();
  if (req.element_size != 1 && req.element_size != 2 && req.element_size != 4) {
    return out->Fail(WireStatus::kInvalidValue, "memset: element size must be 1, 2 or 4");
  }
  if (req.count > (UINT64_MAX / 4)) return out->Fail(WireStatus::kInvalidValue, "memset: count too large");
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  const uint64_t bytes = req.count * req.element_size;
  if (Status s = CheckDeviceRange(st, req.dst, bytes); !s.ok()) return out->Fail(s);
  CallView v = ViewOnStream(st, call, stream, sync);
  AddOperand(&v, kDstOperand, req.dst, bytes);
  Status s = st.executor->Run(v, [&] {
    if (req.count) {
      PHOS_RETURN_IF_ERROR(st.ctx->MemsetAsync(req.dst, req.value, req.element_size, req.count, stream));
    }
    return sync ? SyncResult(st, st.ctx->SynchronizeStream(stream)) : Status::Ok();
  });
  out->Fail(s);
}

// ---------------------------------------------------------------- pinned host memory and 2D copies

namespace {

/// Enqueues `height` row copies (one copy when both sides are contiguous).
Status EnqueueRows(SessionState& st, uint64_t dst, uint64_t dpitch, uint64_t src, uint64_t spitch, uint64_t width,
                   uint64_t height, backend::CopyKind kind, backend::StreamHandle stream) {
  if (dpitch == width && spitch == width) return st.ctx->MemcpyAsync(dst, src, width * height, kind, stream);
  for (uint64_t r = 0; r < height; ++r) {
    PHOS_RETURN_IF_ERROR(st.ctx->MemcpyAsync(dst + r * dpitch, src + r * spitch, width, kind, stream));
  }
  return Status::Ok();
}

}  // namespace

void HandleMemcpy2D(SessionState& st, const CallContext& call, const wire::Memcpy2DRequest& req, Outcome* out) {
  const ring::Record& rec = call.rec;
  const bool sync = call.sync();
  const std::span<const std::byte> tail = call.tail;
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  CallView v = ViewOnStream(st, call, stream, sync);
  const auto dir = static_cast<wire::CopyDir>(req.dir);
  if (req.width == 0 || req.height == 0) {  // nothing to copy; a synchronous copy still syncs
    if (sync) out->Fail(st.executor->Run(v, [&] { return SyncResult(st, st.ctx->SynchronizeStream(stream)); }));
    return;
  }
  if (req.height > UINT64_MAX / req.width) return out->Fail(WireStatus::kInvalidValue, "memcpy2D: region too large");
  const uint64_t packed = req.width * req.height;
  // The pageable sides are packed: their pitch is the width.
  const uint64_t dpitch = dir == wire::CopyDir::kDeviceToHost ? req.width : req.dpitch;
  const uint64_t spitch = dir == wire::CopyDir::kHostToDevice ? req.width : req.spitch;
  uint64_t dspan = 0, sspan = 0;
  if (req.width > dpitch || req.width > spitch) {
    return out->Fail(WireStatus::kInvalidValue, "memcpy2D: width larger than a pitch");
  }
  if (!Span2D(dpitch, req.width, req.height, &dspan) || !Span2D(spitch, req.width, req.height, &sspan)) {
    return out->Fail(WireStatus::kInvalidValue, "memcpy2D: pitch * height overflows");
  }
  auto finish_sync = [&]() { return sync ? SyncResult(st, st.ctx->SynchronizeStream(stream)) : Status::Ok(); };

  switch (dir) {
    case wire::CopyDir::kDeviceToDevice: {
      if (rec.has_staging || !tail.empty()) return out->Fail(WireStatus::kInvalidValue, "memcpy2D D2D carries no data");
      if (Status s = CheckDeviceRange(st, req.src, sspan); !s.ok()) return out->Fail(s);
      if (Status s = CheckDeviceRange(st, req.dst, dspan); !s.ok()) return out->Fail(s);
      AddOperand(&v, kSrcOperand, req.src, sspan);
      AddOperand(&v, kDstOperand, req.dst, dspan);
      return out->Fail(st.executor->Run(v, [&] {
        PHOS_RETURN_IF_ERROR(EnqueueRows(st, req.dst, dpitch, req.src, spitch, req.width, req.height,
                                         backend::CopyKind::kDeviceToDevice, stream));
        return finish_sync();
      }));
    }
    case wire::CopyDir::kPinnedToDevice:
    case wire::CopyDir::kDeviceToPinned: {
      if (rec.has_staging || !tail.empty()) {
        return out->Fail(WireStatus::kInvalidValue, "memcpy2D from/to pinned memory carries no data");
      }
      const bool to_device = dir == wire::CopyDir::kPinnedToDevice;
      std::byte* host = nullptr;
      Status s = to_device ? st.host_segments.Translate(req.src, sspan, &host)
                           : st.host_segments.Translate(req.dst, dspan, &host);
      if (!s.ok()) return out->Fail(s);
      const uint64_t device = to_device ? req.dst : req.src;
      const uint64_t device_span = to_device ? dspan : sspan;
      if (s = CheckDeviceRange(st, device, device_span); !s.ok()) return out->Fail(s);
      if (s = EnsurePinnedSegments(st); !s.ok()) return out->Fail(s);
      AddOperand(&v, to_device ? kDstOperand : kSrcOperand, device, device_span);
      const auto h = reinterpret_cast<uint64_t>(host);
      s = st.executor->Run(v, [&] {
        PHOS_RETURN_IF_ERROR(EnqueueRows(st, to_device ? device : h, dpitch, to_device ? h : device, spitch,
                                         req.width, req.height,
                                         to_device ? backend::CopyKind::kHostToDevice
                                                   : backend::CopyKind::kDeviceToHost,
                                         stream));
        return finish_sync();
      });
      if (s.ok()) {
        st.copy_stats.pinned_copies += 1;
        st.copy_stats.pinned_bytes += packed;
      }
      return out->Fail(s);
    }
    case wire::CopyDir::kHostToDevice: {
      // Packed rows, inline or one staged piece per record.
      uint64_t offset = 0;
      std::span<const std::byte> src;
      if (rec.has_staging) {
        const ring::StagingRef& ref = rec.staging;
        if (ref.offset > packed || ref.bytes > packed - ref.offset) {
          return out->Fail(WireStatus::kInvalidValue, "memcpy2D piece outside its region");
        }
        offset = ref.offset;
        src = st.ring->StagingBytes(ref);
      } else {
        if (tail.size() != packed) {
          return out->Fail(WireStatus::kInvalidValue, "memcpy2D H2D: inline data of " + std::to_string(tail.size()) +
                                                          " bytes, region holds " + std::to_string(packed));
        }
        src = tail;
      }
      if (Status s = CheckDeviceRange(st, req.dst, dspan); !s.ok()) return out->Fail(s);
      std::vector<H2DPiece> pieces;
      ForEachRowPiece(offset, src.size(), req.width, [&](uint64_t row, uint64_t col, uint64_t len, uint64_t at) {
        pieces.push_back(H2DPiece{req.dst + row * dpitch + col, at - offset, len});
      });
      AddOperand(&v, kDstOperand, req.dst, dspan);
      return out->Fail(st.executor->Run(v, [&] {
        PHOS_RETURN_IF_ERROR(EnqueueH2DPieces(st, src, pieces, stream));
        return finish_sync();
      }));
    }
    case wire::CopyDir::kDeviceToHost: {
      if (!rec.wants_reply()) return out->Fail(WireStatus::kInvalidValue, "memcpy2D D2H must be called, not posted");
      if (req.packed_offset > packed || req.packed_bytes > packed - req.packed_offset) {
        return out->Fail(WireStatus::kInvalidValue, "memcpy2D D2H: packed range outside the region");
      }
      std::byte* host = nullptr;
      if (req.reply_chunk == wire::kNoChunk) {
        if (req.packed_bytes > ring::kSlotResultBytes) {
          return out->Fail(WireStatus::kInvalidValue, "memcpy2D D2H: this many bytes need a reply chunk");
        }
        host = out->data.data();
      } else {
        if (req.reply_chunk >= st.geometry.chunk_count || req.packed_bytes > st.geometry.chunk_bytes) {
          return out->Fail(WireStatus::kInvalidValue, "memcpy2D D2H: bad reply chunk or size");
        }
        PinStagingArena(st);
        host = wire::ChunkBytes(st.region_base, st.geometry, req.reply_chunk);
      }
      if (Status s = CheckDeviceRange(st, req.src, sspan); !s.ok()) return out->Fail(s);
      AddOperand(&v, kSrcOperand, req.src, sspan);
      Status s = st.executor->Run(v, [&] {
        Status e = Status::Ok();
        ForEachRowPiece(req.packed_offset, req.packed_bytes, req.width,
                        [&](uint64_t row, uint64_t col, uint64_t len, uint64_t at) {
                          if (!e.ok()) return;
                          e = st.ctx->MemcpyAsync(reinterpret_cast<uint64_t>(host + (at - req.packed_offset)),
                                                  req.src + row * spitch + col, len,
                                                  backend::CopyKind::kDeviceToHost, stream);
                        });
        PHOS_RETURN_IF_ERROR(e);
        return SyncResult(st, st.ctx->SynchronizeStream(stream));
      });
      if (!s.ok()) return out->Fail(s);
      return ReplyStagedRead(st, req.reply_chunk, req.packed_bytes, out);
    }
  }
  out->Fail(WireStatus::kInvalidValue, "memcpy2D: unknown direction " + std::to_string(req.dir));
}

void HandleMemset2D(SessionState& st, const CallContext& call, const wire::Memset2DRequest& req, Outcome* out) {
  const bool sync = call.sync();
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, call.rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  CallView v = ViewOnStream(st, call, stream, sync);
  uint64_t span = 0;
  const uint32_t element = req.element_size;
  if (element != 1 && element != 2 && element != 4) {
    return out->Fail(WireStatus::kInvalidValue, "memset2D: element size must be 1, 2 or 4");
  }
  if (req.dst % element != 0 || req.pitch % element != 0 || req.width % element != 0) {
    return out->Fail(WireStatus::kInvalidValue, "memset2D: address, pitch and width must be multiples of the " +
                                                    std::to_string(element) + "-byte element");
  }
  const bool empty = req.width == 0 || req.height == 0;
  if (!empty) {
    if (req.width > req.pitch) return out->Fail(WireStatus::kInvalidValue, "memset2D: width larger than pitch");
    if (!Span2D(req.pitch, req.width, req.height, &span)) {
      return out->Fail(WireStatus::kInvalidValue, "memset2D: pitch * height overflows");
    }
    if (Status s = CheckDeviceRange(st, req.dst, span); !s.ok()) return out->Fail(s);
    AddOperand(&v, kDstOperand, req.dst, span);
  }
  out->Fail(st.executor->Run(v, [&] {
    const uint32_t value = element == 4 ? req.value : req.value & ((1u << (8 * element)) - 1);
    if (!empty && req.pitch == req.width) {
      PHOS_RETURN_IF_ERROR(st.ctx->MemsetAsync(req.dst, value, element, req.width / element * req.height, stream));
    } else if (!empty) {
      for (uint64_t r = 0; r < req.height; ++r) {
        PHOS_RETURN_IF_ERROR(st.ctx->MemsetAsync(req.dst + r * req.pitch, value, element, req.width / element, stream));
      }
    }
    return sync ? SyncResult(st, st.ctx->SynchronizeStream(stream)) : Status::Ok();
  }));
}

/// kHostSegmentRegister: pairs the call with the channel record the app
/// sent just before it (the record carries the memfd).
void HandleHostSegmentRegister(SessionState& st, const CallContext& call, const wire::HostSegmentRequest& req,
                               Outcome* out) {
  if (!call.rec.wants_reply()) return out->Fail(WireStatus::kInvalidValue, "host segment register must be called");
  if (st.channel == nullptr) return out->Fail(WireStatus::kNotSupported, "this session has no channel for host segments");
  ring::HostSegmentRecord r;
  int fd = -1;
  if (Status s = st.channel->ReceiveHostSegment(&r, &fd); !s.ok()) {
    return out->Fail(WireStatus::kInvalidValue, "host segment register without its channel record: " + s.message());
  }
  if (r.segment_id != req.segment_id || r.bytes != req.bytes || r.app_base != req.app_base) {
    close(fd);
    return out->Fail(WireStatus::kInvalidValue, "host segment register does not match its channel record");
  }
  CallView v = ViewOf(st, call);
  v.synchronous = true;
  bool kernels_reach = false;
  Status s = st.executor->Run(
      v, [&] { return st.host_segments.Add(req.segment_id, req.app_base, req.bytes, fd, HomeContext(st), &kernels_reach); });
  if (!s.ok()) return out->Fail(s);
  out->Set(wire::HostSegmentReply{kernels_reach ? 1u : 0u, 0});
}

void HandleHostCopyStats(SessionState& st, const CallContext& call, const wire::NoPayload& req, Outcome* out) {
  const auto& c = st.copy_stats;
  out->Set(wire::HostCopyStatsReply{c.pinned_copies, c.pinned_bytes, c.staged_copies, c.staged_bytes,
                                    st.host_segments.count(), st.host_segments.total_bytes(),
                                    st.staging_pinned ? StagingArena(st).bytes : 0});
}

}  // namespace phos::session
