#include "session/call_handlers.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "protocol/pitched.h"
#include "session/access_spec.h"

namespace phos::session {

using wire::ApiId;
using wire::WireStatus;
namespace op = wire::op;
using wire::ForEachRowPiece;
using wire::Span2D;

void Outcome::SetBytes(const void* p, size_t n) {
  n = std::min(n, data.size());
  if (n) std::memcpy(data.data(), p, n);
  bytes = static_cast<uint32_t>(n);
}

void Outcome::Fail(const Status& s) {
  if (s.ok()) return;
  Fail(wire::ToWire(s), s.message());
}

void Outcome::Fail(WireStatus w, std::string m) {
  status = w;
  // The reply holds kSlotResultBytes: keep the head (what failed) and the
  // tail (the root cause, last in a "context: cause" chain).
  if (m.size() > ring::kSlotResultBytes) {
    constexpr size_t kHead = 40;
    m = m.substr(0, kHead) + "..." + m.substr(m.size() - (ring::kSlotResultBytes - kHead - 3));
  }
  message = std::move(m);
  bytes = 0;
}

std::span<const std::byte> Outcome::reply() const {
  if (ok()) return {data.data(), bytes};
  return std::as_bytes(std::span<const char>(message.data(), std::min(message.size(), data.size())));
}

namespace {

constexpr uint64_t kMaxRetainedBytes = 64ull << 20;
constexpr uint64_t kMaxPendingImageBytes = 1ull << 30;
// Bounds what one (untrusted) app can make phosd hold besides device memory.
constexpr size_t kMaxHandlesPerKind = 1u << 16;

Status CheckRoom(size_t live, const char* what) {
  if (live < kMaxHandlesPerKind) return Status::Ok();
  return Status::OutOfMemory(std::string("too many ") + what + " in this session (limit " +
                             std::to_string(kMaxHandlesPerKind) + ")");
}

/// Reads a fixed struct from the start of the payload; `tail` gets the rest.
template <typename T>
Status Decode(std::span<const std::byte> payload, T* out, std::span<const std::byte>* tail = nullptr) {
  if (payload.size() < sizeof(T) || (tail == nullptr && payload.size() != sizeof(T))) {
    return Status::InvalidArgument("wire: payload of " + std::to_string(payload.size()) +
                                   " bytes, expected " + std::to_string(sizeof(T)) +
                                   (tail ? " or more" : ""));
  }
  std::memcpy(out, payload.data(), sizeof(T));
  if (tail) *tail = payload.subspan(sizeof(T));
  return Status::Ok();
}

Status FindStream(SessionState& st, uint32_t id, backend::StreamHandle* out) {
  if (id == 0) {
    *out = backend::kDefaultStream;
    return Status::Ok();
  }
  auto it = st.streams.find(id);
  if (it == st.streams.end()) return Status::NotFound("unknown stream id " + std::to_string(id));
  *out = it->second;
  return Status::Ok();
}

Status FindEvent(SessionState& st, uint32_t id, backend::EventHandle* out) {
  auto it = st.events.find(id);
  if (it == st.events.end()) return Status::NotFound("unknown event id " + std::to_string(id));
  *out = it->second;
  return Status::Ok();
}

/// Isolation: a device range a copy or memset names must lie inside one
/// buffer (or module global) of THIS session. (All contexts live in phosd's
/// one address space, so the backend alone would accept another session's
/// pointer.)
Status CheckDeviceRange(const SessionState& st, uint64_t ptr, uint64_t bytes) {
  auto inside = [&](const std::map<uint64_t, uint64_t>& m) {
    auto it = m.upper_bound(ptr);
    if (it == m.begin()) return false;
    --it;
    return ptr >= it->first && bytes <= it->second && ptr - it->first <= it->second - bytes;
  };
  if (inside(st.buffers) || inside(st.globals)) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("invalid device pointer: [0x{:x}, +{}) is not in a buffer of this session", ptr, bytes));
}

/// A synchronising call's status: its own failure first, else the deferred
/// error of earlier posted work. Either way the deferred error is consumed.
Status SyncResult(SessionState& st, Status own) {
  Status d = std::move(st.deferred);
  st.deferred = Status::Ok();
  if (!own.ok()) return own;
  return d;
}

/// One device-side piece of a retained H2D source: `bytes` bytes from
/// src[offset] to `dst`.
struct H2DPiece {
  uint64_t dst = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

/// Enqueues H2D copies of pieces of `src`, which phosd keeps (one copy of
/// it, one event) until they have run.
Status EnqueueH2DPieces(SessionState& st, std::span<const std::byte> src, const std::vector<H2DPiece>& pieces,
                        backend::StreamHandle stream) {
  if (src.empty()) return Status::Ok();
  if (st.retained_bytes + src.size() > kMaxRetainedBytes) ReapRetained(st, /*wait_all=*/false);
  if (st.retained_bytes + src.size() > kMaxRetainedBytes) ReapRetained(st, /*wait_all=*/true);
  SessionState::RetainedHost r;
  for (auto it = st.spare_host_buffers.begin(); it != st.spare_host_buffers.end(); ++it) {
    if (it->capacity() >= src.size()) {
      st.spare_host_bytes -= it->capacity();
      r.bytes = std::move(*it);
      st.spare_host_buffers.erase(it);
      break;
    }
  }
  r.bytes.assign(src.begin(), src.end());
  for (const H2DPiece& piece : pieces) {
    PHOS_RETURN_IF_ERROR(st.ctx->MemcpyAsync(piece.dst, reinterpret_cast<uint64_t>(r.bytes.data() + piece.offset),
                                             piece.bytes, backend::CopyKind::kHostToDevice, stream));
  }
  st.copy_stats.staged_copies += 1;
  st.copy_stats.staged_bytes += src.size();
  Status s = st.ctx->CreateEvent(backend::kEventDisableTiming, &r.event);
  if (s.ok()) s = st.ctx->RecordEvent(r.event, stream);
  if (!s.ok()) {
    // Cannot track the copy: wait for it instead.
    Status w = st.ctx->SynchronizeStream(stream);
    if (r.event) (void)st.ctx->DestroyEvent(r.event);
    return w;
  }
  st.retained_bytes += r.bytes.size();
  st.retained.push_back(std::move(r));
  return Status::Ok();
}

/// Enqueues an H2D copy from bytes phosd keeps until the copy has run.
Status EnqueueH2D(SessionState& st, uint64_t dst, std::span<const std::byte> src,
                  backend::StreamHandle stream) {
  return EnqueueH2DPieces(st, src, {H2DPiece{dst, 0, src.size()}}, stream);
}

/// What the executor shows the admission hook about a call on the frame's
/// stream (`stream` is its backend handle); the handler adds the operands.
CallView ViewOnStream(const SessionState& st, const ring::Record& rec, backend::StreamHandle stream, bool sync) {
  CallView v;
  v.api = static_cast<ApiId>(rec.header.api_id);
  v.session_id = st.session_id;
  v.stream_id = rec.header.stream_id;
  v.stream = stream;
  v.synchronous = sync || rec.wants_reply();
  return v;
}

// ---------------------------------------------------------------- device

void HandleDevice(SessionState& st, const ring::Record& rec, std::span<const std::byte> p, Outcome* out) {
  const auto api = static_cast<ApiId>(rec.header.api_id);
  // A session sees exactly one device, ordinal 0 = the GPU it is bound to
  // (st.device), like CUDA_VISIBLE_DEVICES=<that GPU>: its allocations,
  // streams and modules all live in one backend context, so offering the
  // other GPUs of a multi-GPU daemon would promise what cudaSetDevice(1)
  // cannot keep (docs/interposer.md "Devices").
  if (api == op::kGetDeviceCount) {
    out->Set(wire::DeviceCountReply{1, 0});
    return;
  }
  if (api == op::kMemGetInfo) {
    wire::MemGetInfoReply r{};
    Status s = st.ctx->GetMemoryInfo(&r.free_bytes, &r.total_bytes);
    if (!s.ok()) return out->Fail(s);
    out->Set(r);
    return;
  }
  auto get_props = [&](int device, backend::DeviceProperties* props) -> bool {
    if (device != 0) {
      out->Fail(WireStatus::kInvalidDevice,
                "no device " + std::to_string(device) + " (a phos session sees one device, ordinal 0)");
      return false;
    }
    Status s = st.backend->GetDeviceProperties(st.device, props);
    if (!s.ok()) out->Fail(s);
    return s.ok();
  };
  if (api == op::kGetDeviceProperties) {
    wire::DevicePropsRequest req{};
    if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
    if (req.reply_chunk >= st.geometry.chunk_count || st.geometry.chunk_bytes < sizeof(wire::WireDeviceProps)) {
      return out->Fail(WireStatus::kInvalidValue, "bad reply chunk " + std::to_string(req.reply_chunk));
    }
    backend::DeviceProperties d;
    if (!get_props(req.device, &d)) return;
    wire::WireDeviceProps w{};
    std::snprintf(w.name, sizeof w.name, "%s", d.name.c_str());
    std::snprintf(w.uuid, sizeof w.uuid, "%s", d.uuid.c_str());
    w.total_memory = d.total_memory;
    w.shared_memory_per_block = d.shared_memory_per_block;
    w.shared_memory_per_block_optin = d.shared_memory_per_block_optin;
    w.shared_memory_per_multiprocessor = d.shared_memory_per_multiprocessor;
    w.total_constant_memory = d.total_constant_memory;
    w.ordinal = d.ordinal;
    w.compute_capability_major = d.compute_capability_major;
    w.compute_capability_minor = d.compute_capability_minor;
    w.multiprocessor_count = d.multiprocessor_count;
    w.max_threads_per_block = d.max_threads_per_block;
    w.max_threads_per_multiprocessor = d.max_threads_per_multiprocessor;
    for (int i = 0; i < 3; ++i) {
      w.max_block_dim[i] = d.max_block_dim[i];
      w.max_grid_dim[i] = d.max_grid_dim[i];
    }
    w.warp_size = d.warp_size;
    w.registers_per_block = d.registers_per_block;
    w.clock_rate_khz = d.clock_rate_khz;
    w.memory_clock_rate_khz = d.memory_clock_rate_khz;
    w.memory_bus_width_bits = d.memory_bus_width_bits;
    w.l2_cache_bytes = d.l2_cache_bytes;
    w.async_engine_count = d.async_engine_count;
    w.pci_bus_id = d.pci_bus_id;
    w.pci_device_id = d.pci_device_id;
    w.pci_domain_id = d.pci_domain_id;
    w.concurrent_kernels = d.concurrent_kernels;
    w.unified_addressing = d.unified_addressing;
    std::memcpy(wire::ChunkBytes(st.region_base, st.geometry, req.reply_chunk), &w, sizeof w);
    out->Set(wire::ChunkReply{sizeof w});
    return;
  }
  // kDeviceGetAttribute
  wire::DeviceAttributeRequest req{};
  if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
  backend::DeviceProperties d;
  if (!get_props(req.device, &d)) return;
  int64_t v = 0;
  switch (req.attribute) {
    case 1: v = d.max_threads_per_block; break;
    case 2: case 3: case 4: v = d.max_block_dim[req.attribute - 2]; break;
    case 5: case 6: case 7: v = d.max_grid_dim[req.attribute - 5]; break;
    case 8: v = static_cast<int64_t>(d.shared_memory_per_block); break;
    case 9: v = static_cast<int64_t>(d.total_constant_memory); break;
    case 10: v = d.warp_size; break;
    case 12: v = d.registers_per_block; break;
    case 13: v = d.clock_rate_khz; break;
    case 16: v = d.multiprocessor_count; break;
    case 31: v = d.concurrent_kernels; break;
    case 33: v = d.pci_bus_id; break;
    case 34: v = d.pci_device_id; break;
    case 36: v = d.memory_clock_rate_khz; break;
    case 37: v = d.memory_bus_width_bits; break;
    case 38: v = d.l2_cache_bytes; break;
    case 39: v = d.max_threads_per_multiprocessor; break;
    case 40: v = d.async_engine_count; break;
    case 41: v = d.unified_addressing; break;
    case 50: v = d.pci_domain_id; break;
    case 75: v = d.compute_capability_major; break;
    case 76: v = d.compute_capability_minor; break;
    case 81: v = static_cast<int64_t>(d.shared_memory_per_multiprocessor); break;
    case 97: v = static_cast<int64_t>(d.shared_memory_per_block_optin); break;
    default:
      return out->Fail(WireStatus::kInvalidValue,
                       "device attribute " + std::to_string(req.attribute) + " is not supported by phos");
  }
  out->Set(wire::ValueReply{v});
}

// ---------------------------------------------------------------- memory

void HandleMalloc(SessionState& st, std::span<const std::byte> p, Outcome* out) {
  wire::MallocRequest req{};
  if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
  CallView v;
  v.api = op::kMalloc;
  v.session_id = st.session_id;
  v.synchronous = true;
  backend::DevicePtr ptr = 0;
  Status s = st.executor->Run(v, [&] { return st.ctx->Allocate(req.bytes, 0, &ptr); });
  if (!s.ok()) return out->Fail(s);
  st.buffers[ptr] = req.bytes;
  st.buffer_bytes += req.bytes;
  st.buffers_changed = true;
  out->Set(wire::MallocReply{ptr});
}

void HandleFree(SessionState& st, std::span<const std::byte> p, Outcome* out) {
  wire::PointerRequest req{};
  if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
  if (req.ptr == 0) return;  // cudaFree(nullptr) is a no-op
  auto it = st.buffers.find(req.ptr);
  if (it == st.buffers.end()) {
    return out->Fail(WireStatus::kInvalidValue, "cudaFree: 0x" + std::to_string(req.ptr) +
                                                    " is not the start of a buffer of this session");
  }
  CallView v;
  v.api = op::kFree;
  v.session_id = st.session_id;
  v.synchronous = true;
  AddOperand(&v, kDstOperand, it->first, it->second);
  Status s = st.executor->Run(v, [&] {
    // cudaFree synchronises the device: work using the buffer finishes first.
    st.Defer(st.ctx->Synchronize());
    ReapRetained(st, false);
    return st.ctx->Free(req.ptr);
  });
  if (!s.ok()) return out->Fail(s);
  st.buffer_bytes -= it->second;
  st.buffers.erase(it);
  st.buffers_changed = true;
}

void HandleMemcpy(SessionState& st, const ring::Record& rec, std::span<const std::byte> p, Outcome* out) {
  const auto api = static_cast<ApiId>(rec.header.api_id);
  const bool sync = api == op::kMemcpy;
  std::span<const std::byte> tail;
  wire::MemcpyRequest req{};
  if (Status s = Decode(p, &req, &tail); !s.ok()) return out->Fail(s);
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  CallView v = ViewOnStream(st, rec, stream, sync);
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
    st.copy_stats.staged_copies += 1;
    st.copy_stats.staged_bytes += req.bytes;
    if (req.reply_chunk == wire::kNoChunk) {
      out->bytes = static_cast<uint32_t>(req.bytes);
    } else {
      out->Set(wire::ChunkReply{req.bytes});
    }
    return;
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
    if (Status s = st.host_segments.EnsureRegistered(st.ctx); !s.ok()) return out->Fail(s);
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

void HandleMemset(SessionState& st, const ring::Record& rec, std::span<const std::byte> p, Outcome* out) {
  const auto api = static_cast<ApiId>(rec.header.api_id);
  const bool sync = api == op::kMemset;
  wire::MemsetRequest req{};
  if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
  if (req.element_size != 1 && req.element_size != 2 && req.element_size != 4) {
    return out->Fail(WireStatus::kInvalidValue, "memset: element size must be 1, 2 or 4");
  }
  if (req.count > (UINT64_MAX / 4)) return out->Fail(WireStatus::kInvalidValue, "memset: count too large");
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  const uint64_t bytes = req.count * req.element_size;
  if (Status s = CheckDeviceRange(st, req.dst, bytes); !s.ok()) return out->Fail(s);
  CallView v = ViewOnStream(st, rec, stream, sync);
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

/// Enqueues `height` row copies (one copy when both sides are contiguous).
Status EnqueueRows(SessionState& st, uint64_t dst, uint64_t dpitch, uint64_t src, uint64_t spitch, uint64_t width,
                   uint64_t height, backend::CopyKind kind, backend::StreamHandle stream) {
  if (dpitch == width && spitch == width) return st.ctx->MemcpyAsync(dst, src, width * height, kind, stream);
  for (uint64_t r = 0; r < height; ++r) {
    PHOS_RETURN_IF_ERROR(st.ctx->MemcpyAsync(dst + r * dpitch, src + r * spitch, width, kind, stream));
  }
  return Status::Ok();
}

void HandleMemcpy2D(SessionState& st, const ring::Record& rec, std::span<const std::byte> p, Outcome* out) {
  const auto api = static_cast<ApiId>(rec.header.api_id);
  const bool sync = api == op::kMemcpy2D;
  std::span<const std::byte> tail;
  wire::Memcpy2DRequest req{};
  if (Status s = Decode(p, &req, &tail); !s.ok()) return out->Fail(s);
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  CallView v = ViewOnStream(st, rec, stream, sync);
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
      if (s = st.host_segments.EnsureRegistered(st.ctx); !s.ok()) return out->Fail(s);
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
      st.copy_stats.staged_copies += 1;
      st.copy_stats.staged_bytes += req.packed_bytes;
      if (req.reply_chunk == wire::kNoChunk) {
        out->bytes = static_cast<uint32_t>(req.packed_bytes);
      } else {
        out->Set(wire::ChunkReply{req.packed_bytes});
      }
      return;
    }
  }
  out->Fail(WireStatus::kInvalidValue, "memcpy2D: unknown direction " + std::to_string(req.dir));
}

void HandleMemset2D(SessionState& st, const ring::Record& rec, std::span<const std::byte> p, Outcome* out) {
  const auto api = static_cast<ApiId>(rec.header.api_id);
  const bool sync = api == op::kMemset2D;
  wire::Memset2DRequest req{};
  if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  CallView v = ViewOnStream(st, rec, stream, sync);
  uint64_t span = 0;
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
    if (!empty && req.pitch == req.width) {
      PHOS_RETURN_IF_ERROR(st.ctx->MemsetAsync(req.dst, req.value & 0xffu, 1, req.width * req.height, stream));
    } else if (!empty) {
      for (uint64_t r = 0; r < req.height; ++r) {
        PHOS_RETURN_IF_ERROR(st.ctx->MemsetAsync(req.dst + r * req.pitch, req.value & 0xffu, 1, req.width, stream));
      }
    }
    return sync ? SyncResult(st, st.ctx->SynchronizeStream(stream)) : Status::Ok();
  }));
}

/// kHostSegmentRegister: pairs the call with the channel record the app
/// sent just before it (the record carries the memfd).
void HandleHostSegment(SessionState& st, const ring::Record& rec, std::span<const std::byte> p, Outcome* out) {
  wire::HostSegmentRequest req{};
  if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
  if (!rec.wants_reply()) return out->Fail(WireStatus::kInvalidValue, "host segment register must be called");
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
  CallView v;
  v.api = op::kHostSegmentRegister;
  v.session_id = st.session_id;
  v.synchronous = true;
  out->Fail(st.executor->Run(v, [&] { return st.host_segments.Add(req.segment_id, req.app_base, req.bytes, fd, st.ctx); }));
}

void HandleHostCopyStats(SessionState& st, std::span<const std::byte> p, Outcome* out) {
  if (!p.empty()) return out->Fail(WireStatus::kInvalidValue, "wire: this call takes no payload");
  const auto& c = st.copy_stats;
  out->Set(wire::HostCopyStatsReply{c.pinned_copies, c.pinned_bytes, c.staged_copies, c.staged_bytes,
                                    st.host_segments.count(), st.host_segments.total_bytes()});
}

// ---------------------------------------------------------------- streams, events, context

void HandleStreamEvent(SessionState& st, const ring::Record& rec, std::span<const std::byte> p, Outcome* out) {
  const auto api = static_cast<ApiId>(rec.header.api_id);
  CallView v;
  v.api = api;
  v.session_id = st.session_id;
  v.stream_id = rec.header.stream_id;
  v.synchronous = rec.wants_reply();

  if (api == op::kStreamCreate) {
    wire::StreamCreateRequest req{};
    if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
    if (req.stream_id == 0 || st.streams.count(req.stream_id)) {
      return out->Fail(WireStatus::kInvalidValue, "stream id " + std::to_string(req.stream_id) + " is in use");
    }
    if (Status s = CheckRoom(st.streams.size(), "streams"); !s.ok()) return out->Fail(s);
    return out->Fail(CreateStreamWithId(st, req.stream_id, req.flags, req.priority, &v));
  }
  if (api == op::kEventCreate) {
    wire::EventCreateRequest req{};
    if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
    if (req.event_id == 0 || st.events.count(req.event_id)) {
      return out->Fail(WireStatus::kInvalidValue, "event id " + std::to_string(req.event_id) + " is in use");
    }
    if (Status s = CheckRoom(st.events.size(), "events"); !s.ok()) return out->Fail(s);
    return out->Fail(CreateEventWithId(st, req.event_id, req.flags, &v));
  }
  if (api == op::kEventElapsedTime) {
    wire::ElapsedTimeRequest req{};
    if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
    backend::EventHandle a = 0, b = 0;
    if (Status s = FindEvent(st, req.start_event, &a); !s.ok()) return out->Fail(s);
    if (Status s = FindEvent(st, req.end_event, &b); !s.ok()) return out->Fail(s);
    float ms = 0;
    Status s = st.executor->Run(v, [&] { return st.ctx->ElapsedTime(a, b, &ms); });
    if (!s.ok()) return out->Fail(s);
    out->Set(wire::ElapsedTimeReply{ms, 0});
    return;
  }
  if (api == op::kDeviceSynchronize || api == op::kGetLastError || api == op::kPeekAtLastError) {
    if (!p.empty()) return out->Fail(WireStatus::kInvalidValue, "wire: this call takes no payload");
    if (api == op::kPeekAtLastError) return out->Fail(st.deferred);
    if (api == op::kGetLastError) return out->Fail(SyncResult(st, Status::Ok()));
    Status s = st.executor->Run(v, [&] { return SyncResult(st, st.ctx->Synchronize()); });
    ReapRetained(st, false);
    return out->Fail(s);
  }

  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  v.stream = stream;
  if (api == op::kStreamSynchronize || api == op::kStreamQuery) {
    if (!p.empty()) return out->Fail(WireStatus::kInvalidValue, "wire: this call takes no payload");
    Status s = st.executor->Run(v, [&] {
      return api == op::kStreamSynchronize ? SyncResult(st, st.ctx->SynchronizeStream(stream))
                                           : st.ctx->QueryStream(stream);
    });
    ReapRetained(st, false);
    return out->Fail(s);
  }

  wire::HandleRequest req{};
  if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
  if (api == op::kStreamDestroy) {
    auto it = st.streams.find(req.id);
    if (it == st.streams.end()) return out->Fail(Status::NotFound("unknown stream id " + std::to_string(req.id)));
    v.stream_id = req.id;
    v.stream = it->second;
    Status s = st.executor->Run(v, [&] { return st.ctx->DestroyStream(it->second); });
    if (!s.ok()) return out->Fail(s);
    st.streams.erase(it);
    st.stream_flags.erase(req.id);
    return;
  }
  backend::EventHandle ev = 0;
  if (Status s = FindEvent(st, req.id, &ev); !s.ok()) return out->Fail(s);
  Status s;
  if (api == op::kStreamWaitEvent) {
    s = st.executor->Run(v, [&] { return st.ctx->StreamWaitEvent(stream, ev); });
  } else if (api == op::kEventRecord) {
    s = st.executor->Run(v, [&] { return st.ctx->RecordEvent(ev, stream); });
  } else if (api == op::kEventQuery) {
    s = st.executor->Run(v, [&] { return st.ctx->QueryEvent(ev); });
  } else if (api == op::kEventSynchronize) {
    s = st.executor->Run(v, [&] { return SyncResult(st, st.ctx->SynchronizeEvent(ev)); });
  } else {  // kEventDestroy
    s = st.executor->Run(v, [&] { return st.ctx->DestroyEvent(ev); });
    if (s.ok()) {
      st.events.erase(req.id);
      st.event_flags.erase(req.id);
    }
  }
  out->Fail(s);
}

// ---------------------------------------------------------------- modules and kernels

void LoadImage(SessionState& st, uint32_t module_id, std::span<const std::byte> image, CallView& v, Outcome* out) {
  out->Fail(LoadModuleWithId(st, module_id, image, &v));
}

void HandleModule(SessionState& st, const ring::Record& rec, std::span<const std::byte> p, Outcome* out) {
  const auto api = static_cast<ApiId>(rec.header.api_id);
  CallView v;
  v.api = api;
  v.session_id = st.session_id;
  v.synchronous = rec.wants_reply();
  std::span<const std::byte> tail;

  if (api == op::kModuleLoad) {
    wire::ModuleLoadRequest req{};
    if (Status s = Decode(p, &req, &tail); !s.ok()) return out->Fail(s);
    const auto phase = static_cast<wire::ModuleLoadPhase>(req.phase);
    if (req.module_id == 0 || st.modules.count(req.module_id)) {
      return out->Fail(WireStatus::kInvalidValue, "module id " + std::to_string(req.module_id) + " is in use");
    }
    if (Status s = CheckRoom(st.modules.size() + st.pending_images.size(), "modules"); !s.ok()) {
      return out->Fail(s);
    }
    if (req.total_bytes > wire::kMaxModuleImageBytes) {
      return out->Fail(WireStatus::kInvalidValue, "module image larger than phos accepts");
    }
    if (phase == wire::ModuleLoadPhase::kInline) {
      if (tail.size() != req.total_bytes) return out->Fail(WireStatus::kInvalidValue, "module image size mismatch");
      return LoadImage(st, req.module_id, tail, v, out);
    }
    if (phase == wire::ModuleLoadPhase::kPiece) {
      if (!rec.has_staging) return out->Fail(WireStatus::kInvalidValue, "module piece without staging");
      const ring::StagingRef& ref = rec.staging;
      if (ref.offset > req.total_bytes || ref.bytes > req.total_bytes - ref.offset) {
        return out->Fail(WireStatus::kInvalidValue, "module piece outside its image");
      }
      auto it = st.pending_images.find(req.module_id);
      if (it == st.pending_images.end()) {
        if (st.pending_image_bytes + req.total_bytes > kMaxPendingImageBytes) {
          return out->Fail(WireStatus::kMemoryAllocation, "too many module images in flight");
        }
        it = st.pending_images.emplace(req.module_id, SessionState::PendingImage{}).first;
        it->second.bytes.resize(req.total_bytes);
        st.pending_image_bytes += req.total_bytes;
      }
      if (it->second.bytes.size() != req.total_bytes) {
        return out->Fail(WireStatus::kInvalidValue, "module pieces disagree on the image size");
      }
      std::span<const std::byte> src = st.ring->StagingBytes(ref);
      if (!src.empty()) std::memcpy(it->second.bytes.data() + ref.offset, src.data(), src.size());
      it->second.received += src.size();
      return;
    }
    if (phase == wire::ModuleLoadPhase::kCommit) {
      auto it = st.pending_images.find(req.module_id);
      if (it == st.pending_images.end()) {
        return out->Fail(WireStatus::kInvalidValue, "module commit without pieces");
      }
      SessionState::PendingImage image = std::move(it->second);
      st.pending_images.erase(it);
      st.pending_image_bytes -= image.bytes.size();
      if (image.received != image.bytes.size()) {
        return out->Fail(WireStatus::kInvalidValue, "module image incomplete (" + std::to_string(image.received) +
                                                        " of " + std::to_string(image.bytes.size()) + " bytes)");
      }
      return LoadImage(st, req.module_id, image.bytes, v, out);
    }
    return out->Fail(WireStatus::kInvalidValue, "module load: unknown phase");
  }
  if (api == op::kModuleUnload) {
    wire::HandleRequest req{};
    if (Status s = Decode(p, &req); !s.ok()) return out->Fail(s);
    auto it = st.modules.find(req.id);
    if (it == st.modules.end()) return out->Fail(Status::NotFound("unknown module id " + std::to_string(req.id)));
    Status s = st.executor->Run(v, [&] {
      st.Defer(st.ctx->Synchronize());  // kernels of the module finish first
      return st.ctx->UnloadModule(it->second);
    });
    if (!s.ok()) return out->Fail(s);
    st.modules.erase(it);
    st.module_images.erase(req.id);
    st.module_load_order.erase(req.id);
    st.module_kernels.erase(req.id);
    std::erase_if(st.functions, [&](const auto& f) { return f.second.module_id == req.id; });
    // Its globals went with it: their ranges are no longer the session's.
    for (auto g = st.global_symbols.begin(); g != st.global_symbols.end();) {
      if (g->second.module_id != req.id) {
        ++g;
        continue;
      }
      st.globals.erase(g->first);
      g = st.global_symbols.erase(g);
    }
    return;
  }
  if (api == op::kModuleGetFunction || api == op::kModuleGetGlobal) {
    uint32_t module_id = 0, name_bytes = 0, function_id = 0;
    if (api == op::kModuleGetFunction) {
      wire::GetFunctionRequest req{};
      if (Status s = Decode(p, &req, &tail); !s.ok()) return out->Fail(s);
      module_id = req.module_id;
      name_bytes = req.name_bytes;
      function_id = req.function_id;
      if (function_id == 0 || st.functions.count(function_id)) {
        return out->Fail(WireStatus::kInvalidValue, "function id " + std::to_string(function_id) + " is in use");
      }
      if (Status s = CheckRoom(st.functions.size(), "functions"); !s.ok()) return out->Fail(s);
    } else {
      wire::GetGlobalRequest req{};
      if (Status s = Decode(p, &req, &tail); !s.ok()) return out->Fail(s);
      module_id = req.module_id;
      name_bytes = req.name_bytes;
    }
    if (name_bytes != tail.size() || name_bytes == 0 || name_bytes > wire::kMaxNameBytes) {
      return out->Fail(WireStatus::kInvalidValue, "bad symbol name length");
    }
    auto it = st.modules.find(module_id);
    if (it == st.modules.end()) return out->Fail(Status::NotFound("unknown module id " + std::to_string(module_id)));
    std::string name(reinterpret_cast<const char*>(tail.data()), tail.size());
    if (api == op::kModuleGetFunction) {
      Status s = GetFunctionWithId(st, module_id, function_id, name, &v);
      if (!s.ok()) return out->Fail(WireStatus::kNotFound, s.message());
      return;
    }
    uint64_t ptr = 0, bytes = 0;
    Status s = GetGlobalOf(st, module_id, name, &ptr, &bytes, &v);
    if (!s.ok()) return out->Fail(WireStatus::kNotFound, s.message());
    out->Set(wire::GetGlobalReply{ptr, bytes});
    return;
  }
  // kLaunchKernel
  wire::LaunchRequest req{};
  if (Status s = Decode(p, &req, &tail); !s.ok()) return out->Fail(s);
  if (req.param_bytes != tail.size() || req.param_bytes > wire::kMaxParamBytes) {
    return out->Fail(WireStatus::kInvalidValue, "launch: bad parameter block size");
  }
  auto fit = st.functions.find(req.function_id);
  if (fit == st.functions.end()) {
    return out->Fail(Status::NotFound("unknown function id " + std::to_string(req.function_id)));
  }
  backend::StreamHandle stream = 0;
  if (Status s = FindStream(st, rec.header.stream_id, &stream); !s.ok()) return out->Fail(s);
  v.stream_id = rec.header.stream_id;
  v.stream = stream;
  std::vector<uint8_t> params(req.param_bytes);
  if (!params.empty()) std::memcpy(params.data(), tail.data(), params.size());
  if (fit->second.access) {
    auto mk = st.module_kernels.find(fit->second.module_id);
    const bool variables = mk == st.module_kernels.end() || mk->second.may_have_variables;
    ComputeLaunchAccess(*fit->second.access, params, st.buffers, st.globals, &v, variables);
  } else {
    v.kind = AccessKind::kUnknown;  // a function recreated without its plan (defensive)
  }
  LaunchArgs launch;
  launch.function_id = req.function_id;
  launch.module_id = fit->second.module_id;
  launch.kernel = fit->second.access ? &fit->second.access->name : nullptr;
  launch.function = fit->second.handle;
  launch.grid = backend::Dim3{req.grid[0], req.grid[1], req.grid[2]};
  launch.block = backend::Dim3{req.block[0], req.block[1], req.block[2]};
  launch.shared_bytes = req.shared_bytes;
  launch.params = &params;
  v.launch = &launch;
  Status s = st.executor->Run(v, [&] {
    return st.ctx->LaunchKernel(launch.function, launch.grid, launch.block, launch.shared_bytes, stream, params);
  });
  out->Fail(s);
}

}  // namespace

void Dispatch(SessionState& st, const ring::Record& rec, std::span<const std::byte> payload, Outcome* out) {
  const auto api = static_cast<ApiId>(rec.header.api_id);
  if (rec.has_staging && api != op::kMemcpyAsync && api != op::kMemcpy && api != op::kModuleLoad &&
      api != op::kMemcpy2DAsync) {
    return out->Fail(WireStatus::kNotSupported, "staged pieces are not accepted for api id " +
                                                    std::to_string(rec.header.api_id));
  }
  // phos-private ops (ids above the generated ApiId range)
  if (api == op::kHostCopyStats) return HandleHostCopyStats(st, payload, out);
  switch (api) {
    case op::kGetDeviceCount:
    case op::kGetDeviceProperties:
    case op::kDeviceGetAttribute:
    case op::kMemGetInfo: return HandleDevice(st, rec, payload, out);
    case op::kMalloc: return HandleMalloc(st, payload, out);
    case op::kFree: return HandleFree(st, payload, out);
    case op::kMemcpy:
    case op::kMemcpyAsync: return HandleMemcpy(st, rec, payload, out);
    case op::kMemset:
    case op::kMemsetAsync: return HandleMemset(st, rec, payload, out);
    // pinned host memory and 2D copies
    case op::kMemcpy2D:
    case op::kMemcpy2DAsync: return HandleMemcpy2D(st, rec, payload, out);
    case op::kMemset2D:
    case op::kMemset2DAsync: return HandleMemset2D(st, rec, payload, out);
    case op::kHostSegmentRegister: return HandleHostSegment(st, rec, payload, out);
    case op::kStreamCreate:
    case op::kStreamDestroy:
    case op::kStreamSynchronize:
    case op::kStreamQuery:
    case op::kStreamWaitEvent:
    case op::kEventCreate:
    case op::kEventRecord:
    case op::kEventQuery:
    case op::kEventSynchronize:
    case op::kEventElapsedTime:
    case op::kEventDestroy:
    case op::kDeviceSynchronize:
    case op::kGetLastError:
    case op::kPeekAtLastError: return HandleStreamEvent(st, rec, payload, out);
    case op::kModuleLoad:
    case op::kModuleUnload:
    case op::kModuleGetFunction:
    case op::kModuleGetGlobal:
    case op::kLaunchKernel: return HandleModule(st, rec, payload, out);
    case op::kFuncGetAttributes:
    case op::kFuncSetAttribute: return HandleFunctionAttributes(st, rec, payload, out);
    case op::kDeviceReset: return HandleDeviceReset(st, rec, payload, out);
    default:
      return out->Fail(WireStatus::kNotSupported,
                       "phosd does not implement api id " + std::to_string(rec.header.api_id) + " yet");
  }
}

Status LoadModuleWithId(SessionState& st, uint32_t module_id, std::span<const std::byte> image,
                        const CallView* admit) {
  if (module_id == 0 || st.modules.count(module_id)) {
    return Status::InvalidArgument("module id " + std::to_string(module_id) + " is in use");
  }
  backend::ModuleHandle h = 0;
  PHOS_RETURN_IF_ERROR(
      RunMaybeAdmitted(st, admit, [&] { return st.ctx->LoadModule(image.data(), image.size(), &h); }));
  st.modules[module_id] = h;
  st.module_images[module_id] = std::make_shared<const std::vector<std::byte>>(image.begin(), image.end());
  st.module_load_order[module_id] = st.next_module_load++;
  // Kernel access plans (kernel_access.h); an image phos cannot read still
  // loads, its launches have no access set (kUnknown).
  ModuleKernels& mk = st.module_kernels[module_id];
  if (Status a = BuildModuleKernels(image, &mk); !a.ok()) {
    spdlog::warn("session {}: module {}: no kernel access sets: {}", st.session_id, module_id, a.ToString());
  }
  return Status::Ok();
}

Status GetFunctionWithId(SessionState& st, uint32_t module_id, uint32_t function_id, const std::string& name,
                         const CallView* admit) {
  if (function_id == 0 || st.functions.count(function_id)) {
    return Status::InvalidArgument("function id " + std::to_string(function_id) + " is in use");
  }
  auto it = st.modules.find(module_id);
  if (it == st.modules.end()) return Status::NotFound("unknown module id " + std::to_string(module_id));
  backend::FunctionHandle f = 0;
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] { return st.ctx->GetFunction(it->second, name, &f); }));
  std::shared_ptr<KernelAccessPlan> plan;
  if (auto mk = st.module_kernels.find(module_id); mk != st.module_kernels.end()) {
    if (auto k = mk->second.kernels.find(name); k != mk->second.kernels.end()) plan = k->second;
  }
  st.functions[function_id] = {module_id, f, plan ? std::move(plan) : UnknownKernelPlan(name), {}};
  return Status::Ok();
}

Status GetGlobalOf(SessionState& st, uint32_t module_id, const std::string& name, uint64_t* ptr, uint64_t* bytes,
                   const CallView* admit) {
  auto it = st.modules.find(module_id);
  if (it == st.modules.end()) return Status::NotFound("unknown module id " + std::to_string(module_id));
  backend::DevicePtr p = 0;
  size_t n = 0;
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] { return st.ctx->GetGlobal(it->second, name, &p, &n); }));
  st.globals[p] = n;
  st.global_symbols[p] = SessionState::GlobalSymbol{module_id, name};
  *ptr = p;
  *bytes = n;
  return Status::Ok();
}

Status CreateStreamWithId(SessionState& st, uint32_t stream_id, uint32_t flags, int32_t priority,
                          const CallView* admit) {
  if (stream_id == 0 || st.streams.count(stream_id)) {
    return Status::InvalidArgument("stream id " + std::to_string(stream_id) + " is in use");
  }
  backend::StreamHandle h = 0;
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] { return st.ctx->CreateStream(flags, priority, &h); }));
  st.streams[stream_id] = h;
  st.stream_flags[stream_id] = SessionState::StreamFlags{flags, priority};
  return Status::Ok();
}

Status CreateEventWithId(SessionState& st, uint32_t event_id, uint32_t flags, const CallView* admit) {
  if (event_id == 0 || st.events.count(event_id)) {
    return Status::InvalidArgument("event id " + std::to_string(event_id) + " is in use");
  }
  backend::EventHandle h = 0;
  PHOS_RETURN_IF_ERROR(RunMaybeAdmitted(st, admit, [&] { return st.ctx->CreateEvent(flags, &h); }));
  st.events[event_id] = h;
  st.event_flags[event_id] = flags;
  return Status::Ok();
}

void ReapRetained(SessionState& st, bool wait_all) {
  if (st.retained.empty()) return;
  if (wait_all) st.Defer(st.ctx->Synchronize());
  for (auto it = st.retained.begin(); it != st.retained.end();) {
    if (wait_all || st.ctx->QueryEvent(it->event).ok()) {
      (void)st.ctx->DestroyEvent(it->event);
      st.retained_bytes -= it->bytes.size();
      if (st.spare_host_bytes + it->bytes.capacity() <= kMaxRetainedBytes) {
        st.spare_host_bytes += it->bytes.capacity();
        st.spare_host_buffers.push_back(std::move(it->bytes));
      }
      it = st.retained.erase(it);
    } else {
      ++it;
    }
  }
}

void ReleaseAll(SessionState& st) {
  if (st.ctx == nullptr) return;
  Status s = st.ctx->Synchronize();
  if (!s.ok()) spdlog::info("session {}: pending work ended with: {}", st.session_id, s.ToString());
  ReapRetained(st, true);
  // Nothing runs any more: the segments' registrations can go (the
  // mappings stay for a context made after a device reset).
  st.host_segments.Unregister(st.ctx);
  for (auto& [id, h] : st.events) (void)st.ctx->DestroyEvent(h);
  for (auto& [id, h] : st.streams) (void)st.ctx->DestroyStream(h);
  for (auto& [id, h] : st.modules) (void)st.ctx->UnloadModule(h);
  for (auto& [ptr, bytes] : st.buffers) {
    Status f = st.ctx->Free(ptr);
    if (!f.ok()) spdlog::warn("session {}: freeing 0x{:x}: {}", st.session_id, ptr, f.ToString());
  }
  st.events.clear();
  st.streams.clear();
  st.event_flags.clear();
  st.stream_flags.clear();
  st.global_symbols.clear();
  st.modules.clear();
  st.module_kernels.clear();
  st.module_images.clear();
  st.module_load_order.clear();
  st.functions.clear();
  st.pending_images.clear();
  st.pending_image_bytes = 0;
  st.buffers.clear();
  st.globals.clear();
  st.buffer_bytes = 0;
  st.buffers_changed = true;
}

}  // namespace phos::session
