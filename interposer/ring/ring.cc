#include "ring/ring.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

namespace phos::ring {
namespace {

inline uint64_t LoadCommit(const std::byte* p) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<std::byte*>(p)))
      .load(std::memory_order_acquire);
}
inline void StoreWord(std::byte* p, uint64_t v, std::memory_order order) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p)).store(v, order);
}

void NotifyAll(RegionHeader* h, CompletionSlot* slots, uint32_t slot_count) {
  Notify(&h->doorbell);
  Notify(&h->space);
  Notify(&h->staging);
  for (uint32_t i = 0; i < slot_count; ++i) Notify(&slots[i].ev);
}

}  // namespace

// ---------------------------------------------------------------- client

RingClient::RingClient(void* base, const RingGeometry& g, RingOptions options)
    : base_(static_cast<std::byte*>(base)),
      geometry_(g),
      options_(std::move(options)),
      header_(reinterpret_cast<RegionHeader*>(base_)),
      ring_(base_ + g.ring_offset),
      mask_(g.ring_bytes - 1),
      slots_(reinterpret_cast<CompletionSlot*>(base_ + g.slots_offset)),
      chunks_(reinterpret_cast<ChunkState*>(base_ + g.chunk_state_offset)),
      staging_(base_ + g.staging_offset) {
  free_slots_.reserve(g.slot_count);
  for (uint32_t i = g.slot_count; i > 0; --i) free_slots_.push_back(i - 1);
}

bool RingClient::closed() const { return header_->closed.load(std::memory_order_acquire) != 0; }

bool RingClient::device_output_pending() const {
  return header_->device_output.load(std::memory_order_acquire) != 0;
}

void RingClient::Close() {
  header_->closed.store(1, std::memory_order_release);
  NotifyAll(header_, slots_, geometry_.slot_count);
  slot_cv_.notify_all();
}

Status RingClient::WriteFrame(FrameHeader h, std::span<const std::byte> a, std::span<const std::byte> b) {
  const uint64_t payload = a.size() + b.size();
  const uint64_t frame = FrameBytesFor(payload);
  if (frame > geometry_.max_frame_bytes) {
    return Status::InvalidArgument("ring: payload of " + std::to_string(payload) +
                                   " bytes exceeds the frame limit (" +
                                   std::to_string(max_payload_bytes()) + "); use PostBulk");
  }
  const uint64_t cap = geometry_.ring_bytes;
  uint64_t t = header_->tail.load(std::memory_order_relaxed);
  uint64_t need;
  for (;;) {
    if (closed()) return Status::Unavailable("ring closed");
    const uint64_t contig = cap - (t & mask_);
    need = frame <= contig ? frame : contig + frame;
    const uint64_t h0 = header_->head.load(std::memory_order_acquire);
    if (static_cast<int64_t>(t - h0) < 0) {  // our tail snapshot is stale
      t = header_->tail.load(std::memory_order_relaxed);
      continue;
    }
    if (t + need - h0 > cap) {
      // Full: wait until the consumer moves head (backpressure, never drop).
      Status s = SpinThenWait(
          &header_->space,
          [&] { return header_->head.load(std::memory_order_acquire) != h0; },
          &header_->closed, options_.alive, options_.wait);
      if (!s.ok()) return s.WithContext("ring full");
      t = header_->tail.load(std::memory_order_relaxed);
      continue;
    }
    if (header_->tail.compare_exchange_weak(t, t + need, std::memory_order_acq_rel,
                                            std::memory_order_relaxed)) {
      break;
    }
  }
  uint64_t pos = t;
  if (need != frame) {
    // Pad the gap up to the end of the ring; the frame starts at offset 0.
    const uint64_t gap = need - frame;
    FrameHeader pad{};
    pad.frame_bytes = static_cast<uint32_t>(gap);
    pad.kind = static_cast<uint8_t>(FrameKind::kPad);
    pad.slot = kNoSlot;
    std::byte* p = ring_ + (t & mask_);
    std::memcpy(p + 8, reinterpret_cast<const std::byte*>(&pad) + 8, kFrameHeaderBytes - 8);
    StoreWord(p, t + 1, std::memory_order_release);
    pos = t + gap;
  }
  std::byte* p = ring_ + (pos & mask_);
  h.frame_bytes = static_cast<uint32_t>(frame);
  h.kind = static_cast<uint8_t>(FrameKind::kCall);
  h.payload_bytes = static_cast<uint32_t>(payload);
  std::memcpy(p + 8, reinterpret_cast<const std::byte*>(&h) + 8, kFrameHeaderBytes - 8);
  if (!a.empty()) std::memcpy(p + kFrameHeaderBytes, a.data(), a.size());
  if (!b.empty()) std::memcpy(p + kFrameHeaderBytes + a.size(), b.data(), b.size());
  StoreWord(p, pos + 1, std::memory_order_release);
  Notify(&header_->doorbell);
  return Status::Ok();
}

Status RingClient::Post(const CallHeader& call, std::span<const std::byte> payload) {
  FrameHeader h{};
  h.api_id = call.api_id;
  h.stream_id = call.stream_id;
  h.device = call.device;
  h.flags = static_cast<uint16_t>(call.flags & ~(kFlagWantsReply | kFlagStaging | kFlagLastPiece));
  h.slot = kNoSlot;
  h.call_seq = next_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  return WriteFrame(h, payload, {});
}

Status RingClient::AcquireSlot(uint32_t* slot) {
  std::unique_lock<std::mutex> lock(slot_mu_);
  // Slots are held only by app threads in Call(); each returns its slot
  // within one wait, so this wait is bounded by the calls in flight.
  while (free_slots_.empty()) {
    if (closed()) return Status::Unavailable("ring closed");
    slot_cv_.wait_for(lock, std::chrono::milliseconds(options_.wait.check_period_ms));
  }
  *slot = free_slots_.back();
  free_slots_.pop_back();
  return Status::Ok();
}

void RingClient::ReleaseSlot(uint32_t slot) {
  {
    std::lock_guard<std::mutex> lock(slot_mu_);
    free_slots_.push_back(slot);
  }
  slot_cv_.notify_one();
}

Status RingClient::Call(const CallHeader& call, std::span<const std::byte> payload, Reply* reply) {
  uint32_t slot;
  PHOS_RETURN_IF_ERROR(AcquireSlot(&slot));
  const uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  FrameHeader h{};
  h.api_id = call.api_id;
  h.stream_id = call.stream_id;
  h.device = call.device;
  h.flags = static_cast<uint16_t>((call.flags & ~(kFlagStaging | kFlagLastPiece)) | kFlagWantsReply);
  h.slot = slot;
  h.call_seq = seq;
  Status s = WriteFrame(h, payload, {});
  if (s.ok()) {
    CompletionSlot& c = slots_[slot];
    s = SpinThenWait(
        &c.ev, [&] { return c.done_seq.load(std::memory_order_acquire) == seq; }, &header_->closed,
        options_.alive, options_.wait);
    if (s.ok()) {
      reply->status = c.status;
      reply->bytes = std::min<uint32_t>(c.result_bytes, kSlotResultBytes);
      std::memcpy(reply->data.data(), c.result, reply->bytes);
    }
  }
  ReleaseSlot(slot);
  return s;
}

Status RingClient::AcquireChunk(uint32_t* chunk) {
  const uint32_t n = geometry_.chunk_count;
  if (n == 0) return Status::NotSupported("ring: region has no staging arena");
  auto try_take = [&]() -> bool {
    const uint32_t start = chunk_hint_.load(std::memory_order_relaxed);
    for (uint32_t k = 0; k < n; ++k) {
      const uint32_t i = (start + k) % n;
      uint32_t expected = kChunkFree;
      if (chunks_[i].state.load(std::memory_order_relaxed) == kChunkFree &&
          chunks_[i].state.compare_exchange_strong(expected, kChunkFilling, std::memory_order_acquire)) {
        chunk_hint_.store((i + 1) % n, std::memory_order_relaxed);
        *chunk = i;
        return true;
      }
    }
    return false;
  };
  for (;;) {
    if (try_take()) return Status::Ok();
    auto any_free = [&] {
      for (uint32_t i = 0; i < n; ++i) {
        if (chunks_[i].state.load(std::memory_order_acquire) == kChunkFree) return true;
      }
      return false;
    };
    PHOS_RETURN_IF_ERROR(
        SpinThenWait(&header_->staging, any_free, &header_->closed, options_.alive, options_.wait)
            .WithContext("staging arena full"));
  }
}

Status RingClient::PostBulk(const CallHeader& call, std::span<const std::byte> meta,
                            std::span<const std::byte> data) {
  if (FrameBytesFor(sizeof(StagingRef) + meta.size()) > geometry_.max_frame_bytes) {
    return Status::InvalidArgument("ring: bulk metadata too large");
  }
  const uint64_t piece_max = geometry_.chunk_bytes;
  uint64_t off = 0;
  do {
    const uint64_t n = std::min<uint64_t>(piece_max, data.size() - off);
    uint32_t chunk;
    PHOS_RETURN_IF_ERROR(AcquireChunk(&chunk));
    if (n) std::memcpy(staging_ + uint64_t{chunk} * geometry_.chunk_bytes, data.data() + off, n);
    chunks_[chunk].state.store(kChunkPosted, std::memory_order_release);
    StagingRef ref{chunk, static_cast<uint32_t>(n), off};
    FrameHeader h{};
    h.api_id = call.api_id;
    h.stream_id = call.stream_id;
    h.device = call.device;
    h.flags = kFlagStaging;
    if (off + n == data.size()) h.flags |= kFlagLastPiece;
    h.slot = kNoSlot;
    h.call_seq = next_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
    Status s = WriteFrame(h, std::as_bytes(std::span<const StagingRef>(&ref, 1)), meta);
    if (!s.ok()) {
      chunks_[chunk].state.store(kChunkFree, std::memory_order_release);
      return s;
    }
    off += n;
  } while (off < data.size());
  return Status::Ok();
}

// ---------------------------------------------------------------- server

RingServer::RingServer(void* base, const RingGeometry& g, RingOptions options)
    : base_(static_cast<std::byte*>(base)),
      geometry_(g),
      options_(std::move(options)),
      limits_(LimitsFor(g)),
      header_(reinterpret_cast<RegionHeader*>(base_)),
      ring_(base_ + g.ring_offset),
      mask_(g.ring_bytes - 1),
      slots_(reinterpret_cast<CompletionSlot*>(base_ + g.slots_offset)),
      chunks_(reinterpret_cast<ChunkState*>(base_ + g.chunk_state_offset)),
      staging_(base_ + g.staging_offset) {
  // The consumer position is phosd's: start from what it last published
  // (0 for a fresh region). Never trust the app's tail.
  head_ = header_->head.load(std::memory_order_acquire) & ~uint64_t(kFrameAlign - 1);
}

bool RingServer::closed() const { return header_->closed.load(std::memory_order_acquire) != 0; }

void RingServer::SetDeviceOutputPending(bool pending) {
  // Only stores when it changes: the word shares a line with `closed`.
  const uint32_t v = pending ? 1 : 0;
  if (header_->device_output.load(std::memory_order_relaxed) != v) header_->device_output.store(v, std::memory_order_release);
}

void RingServer::Close() {
  header_->closed.store(2, std::memory_order_release);
  NotifyAll(header_, slots_, geometry_.slot_count);
}

Status RingServer::Peek(Record* record, bool* ready) {
  *ready = false;
  for (;;) {
    const uint64_t off = head_ & mask_;
    const std::byte* p = ring_ + off;
    const uint64_t commit = LoadCommit(p);
    if (commit == 0) return Status::Ok();
    if (commit != head_ + 1) {
      poisoned_ = Status::Corruption("ring: commit word " + std::to_string(commit) + " at position " +
                                     std::to_string(head_) + " (expected 0 or " +
                                     std::to_string(head_ + 1) + ")");
      return poisoned_;
    }
    Record r;
    Status s = DecodeRecord({p, geometry_.ring_bytes - off}, limits_, &r);
    if (!s.ok()) {
      poisoned_ = s;
      return s;
    }
    if (r.is_pad()) {
      pending_bytes_ = r.header.frame_bytes;
      Release();
      continue;
    }
    pending_bytes_ = r.header.frame_bytes;
    *record = r;
    *ready = true;
    return Status::Ok();
  }
}

Status RingServer::TryNext(Record* record) {
  if (!poisoned_.ok()) return poisoned_;
  if (pending_bytes_ != 0) return Status::FailedPrecondition("ring: Release() the previous record first");
  bool ready;
  PHOS_RETURN_IF_ERROR(Peek(record, &ready));
  if (ready) return Status::Ok();
  if (closed()) return Status::Unavailable("ring closed");
  return Status::NotReady("ring empty");
}

Status RingServer::Next(Record* record) {
  if (!poisoned_.ok()) return poisoned_;
  if (pending_bytes_ != 0) return Status::FailedPrecondition("ring: Release() the previous record first");
  for (;;) {
    bool ready;
    PHOS_RETURN_IF_ERROR(Peek(record, &ready));
    if (ready) return Status::Ok();
    if (closed()) return Status::Unavailable("ring closed");
    if (interrupt_.exchange(false, std::memory_order_acq_rel)) return Status::NotReady("interrupted");
    // Wait for the commit word at head to become non-zero (or the app to
    // go away, or an Interrupt()). The app cannot make this wait unbounded:
    // it ends on the deadline or when the socket reports the app gone.
    const std::byte* p = ring_ + (head_ & mask_);
    PHOS_RETURN_IF_ERROR(SpinThenWait(
        &header_->doorbell,
        [&] { return LoadCommit(p) != 0 || interrupt_.load(std::memory_order_acquire); },
        &header_->closed, options_.alive, options_.wait));
  }
}

void RingServer::Interrupt() {
  interrupt_.store(true, std::memory_order_release);
  // Notify's seq_cst fence/RMW pairs with the sleeper's registration: either
  // the consumer's re-check sees the flag or it is woken.
  Notify(&header_->doorbell);
}

void RingServer::Release() {
  if (pending_bytes_ == 0) return;
  // Zero the first word of every line of the frame so no stale byte can
  // pose as a commit word when the ring comes around again.
  for (uint64_t k = 0; k < pending_bytes_; k += kFrameAlign) {
    StoreWord(ring_ + ((head_ + k) & mask_), 0, std::memory_order_relaxed);
  }
  head_ += pending_bytes_;
  pending_bytes_ = 0;
  header_->head.store(head_, std::memory_order_release);
  Notify(&header_->space);
}

std::vector<std::byte> RingServer::CopyPayload(const Record& record) {
  return std::vector<std::byte>(record.payload.begin(), record.payload.end());
}

Status RingServer::Complete(uint32_t slot, uint64_t call_seq, int32_t status,
                            std::span<const std::byte> result) {
  if (slot >= geometry_.slot_count) return Status::InvalidArgument("ring: completion slot out of range");
  if (result.size() > kSlotResultBytes) {
    return Status::InvalidArgument("ring: inline result of " + std::to_string(result.size()) +
                                   " bytes exceeds " + std::to_string(kSlotResultBytes));
  }
  CompletionSlot& c = slots_[slot];
  c.status = status;
  c.result_bytes = static_cast<uint32_t>(result.size());
  if (!result.empty()) std::memcpy(c.result, result.data(), result.size());
  c.done_seq.store(call_seq, std::memory_order_release);
  Notify(&c.ev);
  return Status::Ok();
}

std::span<const std::byte> RingServer::StagingBytes(const StagingRef& ref) const {
  if (ref.chunk >= geometry_.chunk_count || ref.bytes > geometry_.chunk_bytes) return {};
  return {staging_ + uint64_t{ref.chunk} * geometry_.chunk_bytes, ref.bytes};
}

void RingServer::FreeChunk(uint32_t chunk) {
  if (chunk >= geometry_.chunk_count) return;
  chunks_[chunk].state.store(kChunkFree, std::memory_order_release);
  Notify(&header_->staging);
}

}  // namespace phos::ring
