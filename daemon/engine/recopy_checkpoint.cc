#include "engine/recopy_checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "common/hex.h"
#include "image/image_layout.h"
#include "session/access_spec.h"

namespace phos::engine {

namespace {

/// Synchronous D2H of the chunks of [address, address + host->size())
/// flagged in `chunks` (empty: all) into their places in `host`, on
/// `stream`. The session is quiesced (t2): no yields, and every chunk has
/// its own place in `host`, so all are queued before one synchronisation
/// (a wait per chunk left the link idle between chunks). *copied: bytes.
Status CopyNow(backend::Context* ctx, backend::StreamHandle stream, std::uint64_t address, std::uint64_t chunk,
               const std::vector<bool>& chunks, std::vector<std::byte>* host, std::uint64_t* copied) {
  const std::uint64_t bytes = host->size();
  Status s;
  for (std::uint64_t off = 0, c = 0; off < bytes && s.ok(); off += chunk, ++c) {
    if (!chunks.empty() && !chunks[c]) continue;
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, bytes - off));
    s = ctx->MemcpyAsync(reinterpret_cast<std::uint64_t>(host->data() + off), address + off, len,
                         backend::CopyKind::kDeviceToHost, stream);
    if (!s.ok()) s = s.WithContext("at offset " + std::to_string(off));
    if (s.ok()) *copied += len;
  }
  // Also after a failed queueing: what was queued must finish before `host`
  // may go away.
  Status w = ctx->SynchronizeStream(stream);
  if (s.ok()) s = w;
  if (!s.ok()) return s.WithContext("copying buffer " + Hex(address) + " to the host");
  return Status::Ok();
}

bool AnyDirty(const TrackedBuffer& b) { return std::find(b.dirty.begin(), b.dirty.end(), true) != b.dirty.end(); }
}  // namespace

RecopyCheckpoint::RecopyCheckpoint(const CheckpointOptions& options, Progress* progress, CheckpointResult* result)
    : SoftOperation(progress, "checkpoint", "copier", /*check_reads=*/false, "its speculated access set is trusted"),
      options_(options),
      chunk_(options.image.chunk_bytes != 0 ? options.image.chunk_bytes : image::kDefaultChunkBytes),
      result_(result) {}

RecopyCheckpoint::~RecopyCheckpoint() = default;

Status RecopyCheckpoint::Start(session::SessionState& st, EngineHook* hook) {
  Bind(st);
  const SessionSnapshot snap = CaptureSnapshot(st);
  std::uint64_t total = 0;
  std::vector<TrackedBuffer> tracked;
  std::vector<std::uint64_t> order;
  std::set<int> devices{st.device};
  auto track = [&](const DeviceRange& r, bool global) {
    TrackedBuffer b;
    b.address = r.address;
    b.bytes = r.bytes;
    b.global = global;
    b.device = snap.objects.DeviceOf(r.address);
    devices.insert(b.device);
    b.state = kDirty;
    b.dirty.assign(static_cast<std::size_t>(image::ChunkCount(r.bytes, chunk_)), true);
    b.dirtied_in.assign(b.dirty.size(), 0);
    total += r.bytes;
    order.push_back(r.address);
    tracked.push_back(std::move(b));
  };
  for (const auto& r : snap.buffers) track(r, false);
  for (const auto& r : snap.globals) track(r, true);
  std::sort(order.begin(), order.end());
  Track(std::move(tracked));
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    order_ = std::move(order);
  }
  PHOS_RETURN_IF_ERROR(OpenWorker());
  PHOS_RETURN_IF_ERROR(OpenOtherLanes(st, devices));
  {
    // No quiesce: work the app enqueued before now may still be writing any
    // buffer. One write event per stream (each context's default stream and
    // every stream of the app, in its own context), and every buffer waits
    // for all.
    std::vector<std::pair<backend::Context*, backend::StreamHandle>> streams = {{ctx_, backend::kDefaultStream}};
    for (const auto& [device, ctx] : st.other_contexts) streams.emplace_back(ctx, backend::kDefaultStream);
    for (const auto& [id, h] : st.streams) {
      if (backend::Context* ctx = session::StreamContext(st, id); ctx != nullptr) streams.emplace_back(ctx, h);
    }
    std::lock_guard<std::mutex> lock(table_.mu);
    for (const auto& [ctx, h] : streams) {
      if (!RecordWriteLocked(ctx, h)) {
        (void)ctx->SynchronizeStream(h);  // rare: then that stream's writes are done
        continue;
      }
      for (auto& [addr, b] : table_.by_address) b.written_on.emplace_back(ctx, h);
    }
  }
  InstallOperation(hook);
  progress_->SetPhase("copy",
                      "round 1: copying " + std::to_string(snap.buffers.size()) + " buffers and " +
                          std::to_string(snap.globals.size()) + " globals while the app runs (recopy)",
                      total);
  return Status::Ok();
}

// ---------------------------------------------------------------- admission (consumer thread)

Status RecopyCheckpoint::Admit(const session::CallView& call) {
  std::unique_lock<std::mutex> lock(table_.mu);
  NoteFirstUseLocked(call);
  if (abandoned_) return Status::Ok();
  if (call.api == wire::op::kDeviceReset) {
    // Every buffer and global goes away and the context is replaced: the
    // copier stops; t2 copies whatever the app has by then, fresh.
    for (auto& [addr, b] : table_.by_address) {
      b.freed = true;
      DirtyAllLocked(b);
    }
    reset_ = true;
    abandoned_ = true;
    abort_copy_.store(true);
    table_.cv.notify_all();
    lock.unlock();
    DropDeviceState();  // fences the copier out (waits for its chunk in flight)
    return Status::Ok();
  }
  if (session::ReleasesBuffer(call.api) && !call.ranges.empty()) {
    // The memory goes away when the call runs (cudaFree) or once its
    // stream gets there (cudaFreeAsync): the copier must not read it from
    // now on. Mark it freed (its copy is dropped), and if the copier has
    // it, wait for the chunk in flight.
    TrackedBuffer* b = table_.Find(call.ranges.front().ptr);
    if (b == nullptr || b->address != call.ranges.front().ptr) return Status::Ok();
    b->freed = true;
    const bool copying = b->state == kCopying;
    DirtyAllLocked(*b);
    if (!copying) return Status::Ok();
    abort_copy_.store(true);
    lock.unlock();
    bool waited = false;
    {
      std::unique_lock<std::mutex> use(ctx_use_mu_, std::try_to_lock);
      if (!use.owns_lock()) {
        const auto t0 = Clock::now();
        use.lock();  // the chunk in flight finished; the next one sees abort_copy_
        AddBlocked(t0);
        waited = true;
      }
    }
    if (waited) {
      lock.lock();  // after ctx_use_mu_ is released: mu is never taken under it
      ++counters_.writer_waits;
    }
  }
  return Status::Ok();
}

void RecopyCheckpoint::AdmittedCall(const session::CallView& call, const Status& /*result*/) {
  if (session::ReleasesBuffer(call.api)) return;  // handled in Admit
  const bool unvalidatable = call.kind == session::AccessKind::kUnvalidatable;
  const bool writes_anything =
      !call.access_known() || (unvalidatable && options_.unvalidated == UnvalidatedPolicy::kStop);
  std::unique_lock<std::mutex> lock(table_.mu);
  if (unvalidatable) ++counters_.unvalidated_kernels;
  if (abandoned_) return;
  // The call's result does not matter: a failed call may have run in part.
  // What it wrote: exact ranges (copies, memsets, library calls) dirty the
  // chunks they overlap; a kernel's ranges are its buffers, whole.
  struct Hit {
    TrackedBuffer* buffer;
    std::uint64_t ptr, bytes;  // the written range
  };
  std::vector<Hit> hit;
  if (writes_anything) {
    for (auto& [addr, b] : table_.by_address) hit.push_back(Hit{&b, b.address, b.bytes});
  } else {
    const bool exact = call.kind == session::AccessKind::kExact;
    for (const auto& r : call.ranges) {
      if (!r.write) continue;
      table_.ForEachOverlapping(r.ptr, r.bytes, [&](TrackedBuffer& b) {
        hit.push_back(exact ? Hit{&b, r.ptr, r.bytes} : Hit{&b, b.address, b.bytes});
      });
    }
  }
  if (hit.empty()) return;
  // The call is enqueued: an event recorded now (on its stream, in its
  // context) completes after its write.
  backend::Context* const cctx = ContextOfCall(call);
  bool recorded = RecordWriteLocked(cctx, call.stream);
  if (!recorded) {
    // No event: let the write finish before its chunks become dirty, so
    // every copy taken after that sees it (copies taken before are
    // superseded: their chunks are dirty again).
    lock.unlock();
    (void)cctx->SynchronizeStream(call.stream);
    lock.lock();
    if (abandoned_) return;
  }
  for (const Hit& h : hit) {
    DirtyChunksLocked(*h.buffer, h.ptr, h.bytes);
    if (recorded) WrittenOnLocked(*h.buffer, cctx, call.stream);
  }
}

bool RecopyCheckpoint::RecordWriteLocked(backend::Context* ctx, backend::StreamHandle stream) {
  backend::EventHandle& ev = stream_events_[{ctx, stream}];
  if (ev == 0) {
    if (Status s = ctx->CreateEvent(backend::kEventDisableTiming, &ev); !s.ok()) {
      ev = 0;
      spdlog::warn("checkpoint: cannot create a write event: {}", s.ToString());
      return false;
    }
  }
  if (Status s = ctx->RecordEvent(ev, stream); !s.ok()) {
    spdlog::warn("checkpoint: cannot record a write event: {}", s.ToString());
    return false;
  }
  return true;
}

void RecopyCheckpoint::DirtyChunksLocked(TrackedBuffer& b, std::uint64_t ptr, std::uint64_t bytes) {
  const std::uint64_t from = std::max(ptr, b.address) - b.address;
  const std::uint64_t to = std::min(ptr + (bytes == 0 ? 1 : bytes), b.address + b.bytes) - b.address;  // exclusive
  if (to > from) {
    const std::size_t last = std::min<std::size_t>(static_cast<std::size_t>((to - 1) / chunk_), b.dirty.size() - 1);
    for (std::size_t c = static_cast<std::size_t>(from / chunk_); c <= last; ++c) {
      b.dirty[c] = true;
      b.dirtied_in[c] = round_;
    }
  }
  // A buffer the copier is copying stays COPYING: the copier sets its state
  // from its dirty chunks when the copy ends, and a release admitted
  // meanwhile must see that the copier has it (Admit aborts the copy and
  // waits for the chunk in flight). Turning it DIRTY here let a cudaFree
  // admitted after a write to the same buffer skip that wait, and the copy
  // read freed memory (found under load by engine_consistency_test).
  if (b.state != kCopying) b.state = kDirty;
}

void RecopyCheckpoint::WrittenOnLocked(TrackedBuffer& b, backend::Context* ctx, backend::StreamHandle stream) {
  const std::pair<backend::Context*, backend::StreamHandle> on{ctx, stream};
  if (std::find(b.written_on.begin(), b.written_on.end(), on) == b.written_on.end()) b.written_on.push_back(on);
}

std::uint64_t RecopyCheckpoint::DirtyBytesLocked() const {
  std::uint64_t n = 0;
  for (const auto& [addr, b] : table_.by_address) {
    if (b.freed || b.state == kCopied) continue;
    for (std::size_t c = 0; c < b.dirty.size(); ++c) {
      if (b.dirty[c]) n += std::min<std::uint64_t>(chunk_, b.bytes - c * chunk_);
    }
  }
  return n;
}

// ---------------------------------------------------------------- the copier (caller's thread)

Status RecopyCheckpoint::CopyRounds() {
  std::uint64_t dirty_before = 0;
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    dirty_before = DirtyBytesLocked();
  }
  std::vector<TwinValidator::Collected> reports;
  int rounds = 0;
  while (rounds < options_.recopy_rounds && dirty_before > 0) {
    {
      std::lock_guard<std::mutex> lock(table_.mu);
      round_ = static_cast<std::uint32_t>(rounds + 1);
    }
    for (std::uint64_t addr : order_) {
      TrackedBuffer* b = nullptr;
      std::vector<bool> taken;  // the chunks this copy takes
      Lane lane;
      // Write events of other contexts than the lane's: waited for on the
      // host, after mu is released (soft_operation.h "SEVERAL GPUS").
      std::vector<std::pair<backend::Context*, backend::EventHandle>> host_waits;
      {
        std::lock_guard<std::mutex> lock(table_.mu);
        if (abandoned_) break;
        b = &table_.by_address.at(addr);
        if (b->freed || b->state != kDirty) continue;
        // The dirty chunks, but from round 2 on not those written during
        // this round: they are being written now (left dirty for the next
        // round or t2).
        taken.assign(b->dirty.size(), false);
        bool any = false;
        for (std::size_t c = 0; c < taken.size(); ++c) {
          taken[c] = b->dirty[c] && (round_ == 1 || b->dirtied_in[c] < round_);
          if (taken[c]) b->dirty[c] = false;
          any = any || taken[c];
        }
        if (!any) continue;
        b->state = kCopying;
        abort_copy_.store(false);
        lane = LaneOf(b->device);
        // Waits on the copier's stream for every write admitted so far
        // (their events were recorded after they were enqueued).
        Status ordered;
        UseContext([&] {
          for (const auto& on : b->written_on) {
            // Without the wait the copy could miss a write its chunks no
            // longer reveal: no image rather than a wrong one.
            const backend::EventHandle ev = stream_events_.at(on);
            if (on.first != lane.ctx) {
              host_waits.emplace_back(on.first, ev);
              continue;
            }
            ordered = lane.ctx->StreamWaitEvent(lane.stream, ev);
            if (!ordered.ok()) return;
          }
        });
        if (!ordered.ok()) {
          return ordered.WithContext("ordering the copy of buffer " + Hex(b->address) + " after its writes");
        }
        b->written_on.clear();
      }
      if (!host_waits.empty()) {
        // An event re-recorded since (a later write on that stream) only
        // makes this wait longer; the events live until DropDeviceState,
        // which fences this copier out first.
        Status ordered;
        UseContext([&] {
          for (const auto& [ctx, ev] : host_waits) {
            ordered = ctx->SynchronizeEvent(ev);
            if (!ordered.ok()) return;
          }
        });
        if (!ordered.ok()) {
          return ordered.WithContext("waiting for the writes of buffer " + Hex(b->address) + " on another GPU");
        }
      }
      // `host`'s taken chunks are about to be overwritten: no longer handed over.
      b->handed.resize(taken.size());
      for (std::size_t c = 0; c < taken.size(); ++c) {
        if (taken[c]) b->handed[c] = TrackedBuffer::Handed{};
      }
      bool dropped = false;
      Status s = CopyOne(*b, lane, taken, &dropped);
      std::vector<bool> clean;  // taken, copied, and not written since
      {
        std::lock_guard<std::mutex> lock(table_.mu);
        if (!b->freed) {
          if (s.ok() && !dropped) {
            clean = taken;
            for (std::size_t c = 0; c < clean.size(); ++c) clean[c] = clean[c] && !b->dirty[c];
          } else {
            for (std::size_t c = 0; c < taken.size(); ++c) b->dirty[c] = b->dirty[c] || taken[c];
          }
          b->state = AnyDirty(*b) ? kDirty : kCopied;
        }
        if (!s.ok() && !abandoned_) return s;  // a copy failed: no image
      }
      // A write admitted from here on makes a chunk's copy stale (dirty
      // again); it is still a true copy of the moment it was taken, and the
      // next round supersedes it.
      if (!clean.empty() && options_.precopy != nullptr) PHOS_RETURN_IF_ERROR(HandOver(*b, clean));
      UseContext([&] { (void)DrainValidators(false, &reports); });
      ApplyReports(reports);
      reports.clear();
    }
    std::uint64_t dirty_after = 0;
    {
      std::lock_guard<std::mutex> lock(table_.mu);
      if (abandoned_) {
        if (cancelled_) return Status::Unavailable("the process exited during the checkpoint");
        return Status::Ok();  // a cudaDeviceReset: t2 copies what is there
      }
      ++rounds;
      ++counters_.recopy_rounds;
      dirty_after = DirtyBytesLocked();
    }
    spdlog::debug("checkpoint: recopy round {}: {} dirty bytes left (were {})", rounds, dirty_after, dirty_before);
    // Go on only while a round pays: >= 10 % fewer dirty bytes.
    const bool shrank = dirty_after * 10 <= dirty_before * 9;
    dirty_before = dirty_after;
    if (!shrank) break;
    if (rounds < options_.recopy_rounds && dirty_after > 0) {
      progress_->SetPhase("copy",
                          "round " + std::to_string(rounds + 1) + ": recopying " + std::to_string(dirty_after) +
                              " bytes written since their copy",
                          dirty_after);
    }
  }
  std::lock_guard<std::mutex> lock(table_.mu);
  if (cancelled_) return Status::Unavailable("the process exited during the checkpoint");
  return Status::Ok();
}

Status RecopyCheckpoint::CopyOne(TrackedBuffer& b, const Lane& lane, const std::vector<bool>& chunks, bool* dropped) {
  b.host.resize(b.bytes);  // the copier owns `host` while the buffer is COPYING
  for (std::uint64_t off = 0, c = 0; off < b.bytes; off += chunk_, ++c) {
    if (!chunks[c]) continue;
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_, b.bytes - off));
    Status s;
    bool aborted = false;
    const bool used = UseContext([&] {
      if (abort_copy_.load()) {
        aborted = true;
        return;
      }
      YieldToAppCopies(lane);
      s = lane.ctx->MemcpyAsync(reinterpret_cast<std::uint64_t>(b.host.data() + off), b.address + off, len,
                                backend::CopyKind::kDeviceToHost, lane.stream);
      if (s.ok()) s = lane.ctx->SynchronizeStream(lane.stream);
    });
    if (!used || aborted) {
      *dropped = true;  // session ending, reset, or the buffer is being freed
      return Status::Ok();
    }
    if (!s.ok()) {
      return s.WithContext("copying buffer " + Hex(b.address) + " at offset " + std::to_string(off) +
                           " to the host");
    }
    progress_->AddBytes(len);
  }
  return Status::Ok();
}

Status RecopyCheckpoint::HandOver(TrackedBuffer& b, const std::vector<bool>& chunks) {
  b.host_xxh3.resize(chunks.size());
  b.handed.resize(chunks.size());
  for (std::size_t first = 0; first < chunks.size();) {
    if (!chunks[first]) {
      ++first;
      continue;
    }
    std::size_t end = first;
    while (end < chunks.size() && chunks[end]) ++end;
    // One copy per run of clean chunks: [first, end).
    const std::uint64_t off = first * chunk_;
    const std::uint64_t bytes = std::min<std::uint64_t>(end * chunk_, b.bytes) - off;
    std::vector<std::uint64_t> sums;
    for (std::size_t c = first; c < end; ++c) {
      const std::uint64_t at = c * chunk_;
      b.host_xxh3[c] = image::Xxh3(b.host.data() + at, static_cast<std::size_t>(std::min(chunk_, b.bytes - at)));
      sums.push_back(b.host_xxh3[c]);
    }
    StagedCopy copy;
    copy.copy_id = ++next_copy_id_;
    copy.address = b.address + off;
    copy.bytes = bytes;
    copy.data = b.host.data() + off;
    copy.chunk_bytes = chunk_;
    copy.chunk_xxh3 = &sums;
    PHOS_RETURN_IF_ERROR(options_.precopy->Staged(copy).WithContext("pre-copy of buffer " + Hex(b.address)));
    for (std::size_t c = first; c < end; ++c) b.handed[c] = TrackedBuffer::Handed{copy.copy_id, (c - first) * chunk_};
    first = end;
  }
  return Status::Ok();
}

void RecopyCheckpoint::ApplyReports(std::vector<TwinValidator::Collected>& reports) {
  if (reports.empty()) return;
  std::lock_guard<std::mutex> lock(table_.mu);
  for (const auto& r : reports) {
    counters_.twin_misses += r.misses.size();
    if (r.overflowed()) {
      // Some writes went unrecorded: any buffer may have changed since its copy.
      spdlog::warn("checkpoint: a kernel's twin report overflowed ({} accesses unrecorded); recopying every buffer",
                   r.dropped);
      for (auto& [addr, b] : table_.by_address) DirtyAllLocked(b);
      ++counters_.recopy_misses;
      continue;
    }
    for (const auto& m : r.misses) {
      if (!m.write) continue;
      TrackedBuffer* b = table_.Find(m.address);
      if (b == nullptr) continue;  // not tracked: t2 copies it fresh anyway
      // The kernel completed (its report is in), so a copy taken from now
      // on sees its write; one taken before is redone. The kernel's writes
      // are per buffer: all of it.
      DirtyAllLocked(*b);
      ++counters_.recopy_misses;
      spdlog::debug("checkpoint: kernel (function id {}) wrote {} in buffer {} outside its speculated access set; "
                    "recopying it", m.kernel_id, Hex(m.address), Hex(b->address));
    }
  }
}

// ---------------------------------------------------------------- t2 (consumer thread)

Status RecopyCheckpoint::Finish(session::SessionState& st, EngineHook* hook, const Status& worked) {
  if (!worked.ok()) {
    // A failed copier: no t2, no image; free what the operation holds.
    hook->Remove();
    Cancel(st);
    return worked;
  }
  Status f = Final(st, hook);
  // Live migration freezes the app here: t2, nothing admitted since.
  if (f.ok() && options_.at_capture) f = options_.at_capture(st);
  return f;
}

Status RecopyCheckpoint::Final(session::SessionState& st, EngineHook* hook) {
  progress_->SetPhase("quiesce", "final quiesce (t2): copying what is still dirty");
  Abandon();
  Status status = CaptureFinal(st, result_);
  result_->admitted_at_capture = st.executor->admitted();
  hook->Remove();
  DropDeviceState();
  return status;
}

Status RecopyCheckpoint::CaptureFinal(session::SessionState& st, CheckpointResult* result) {
  const bool same_context = st.ctx == ctx_ && !device_state_dropped_;
  if (validator_ && same_context) {
    std::vector<TwinValidator::Collected> reports;
    if (Status s = DrainValidators(true, &reports); !s.ok()) {
      spdlog::warn("checkpoint: collecting twin reports: {}", s.ToString());
    }
    ApplyReports(reports);
  }
  // Every GPU the process uses, also one it took since Start.
  PHOS_RETURN_IF_ERROR(QuiesceAllDevices(st));
  final_snapshot_ = CaptureSnapshot(st);
  // The copies at t2 go through the copier's stream on each GPU, or (after
  // a reset replaced the context; a GPU taken since Start) through one made
  // now in the session's context there.
  std::map<int, Lane> copy_lanes;
  std::vector<Lane> temps;
  auto lane_on = [&](int device, Lane* out) -> Status {
    auto it = copy_lanes.find(device);
    if (it == copy_lanes.end()) {
      Lane made;
      if (same_context && (device == home_device_ || other_lanes_.count(device) > 0)) {
        made = LaneOf(device);
      } else {
        made.ctx = device == st.device ? st.ctx : session::ContextOf(st, device);
        if (made.ctx == nullptr) return Status::Internal("no context of the session on GPU " + std::to_string(device));
        PHOS_RETURN_IF_ERROR(made.ctx->CreateStream(backend::kStreamNonBlocking, 0, &made.stream));
        temps.push_back(made);
      }
      it = copy_lanes.emplace(device, made).first;
    }
    *out = it->second;
    return Status::Ok();
  };
  // What each extent of the image takes: per chunk, the staged copy (clean
  // chunks of a buffer tracked since Start) or a copy now (dirty chunks;
  // whole buffers allocated or re-allocated since Start). Decided under mu;
  // the copies run without it (the copier has ended, so the `host` vectors
  // are ours).
  struct Plan {
    DeviceRange range;
    TrackedBuffer* tracked = nullptr;  // null: not tracked (or not the same buffer)
    std::vector<bool> copy_now;        // with `tracked`: the chunks still dirty
  };
  std::vector<Plan> plan;
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    auto decide = [&](const DeviceRange& r, bool global) {
      Plan p;
      p.range = r;
      auto it = table_.by_address.find(r.address);
      if (same_context && it != table_.by_address.end() && !it->second.freed && it->second.bytes == r.bytes &&
          it->second.global == global) {
        p.tracked = &it->second;
        p.copy_now = it->second.dirty;
      }
      plan.push_back(std::move(p));
    };
    for (const auto& r : final_snapshot_.buffers) decide(r, false);
    for (const auto& r : final_snapshot_.globals) decide(r, true);
    // The first-use order seen since Start: a restore loads buffers in it.
    std::vector<std::pair<std::uint32_t, std::uint64_t>> used;
    for (const auto& p : plan) {
      if (p.tracked != nullptr && !p.tracked->global && p.tracked->first_use != 0) {
        used.emplace_back(p.tracked->first_use, p.range.address);
      }
    }
    std::sort(used.begin(), used.end());
    for (const auto& [order, addr] : used) final_snapshot_.first_use.push_back(addr);
  }
  std::uint64_t copied_now = 0, total = 0;
  Status status;
  for (Plan& p : plan) {
    Extent e;
    e.address = p.range.address;
    e.bytes = p.range.bytes;
    Lane on;
    status = lane_on(final_snapshot_.objects.DeviceOf(p.range.address), &on);
    if (!status.ok()) break;
    if (p.tracked == nullptr) {
      e.host.resize(p.range.bytes);
      status = CopyNow(on.ctx, on.stream, p.range.address, chunk_, {}, &e.host, &copied_now);
    } else {
      TrackedBuffer& b = *p.tracked;
      e.host = std::move(b.host);
      e.host.resize(p.range.bytes);  // a buffer never copied had no host vector (all its chunks are dirty)
      status = CopyNow(on.ctx, on.stream, p.range.address, chunk_, p.copy_now, &e.host, &copied_now);
      // A clean chunk handed over in a round is still current: the receiver
      // has it. Everything else is in `host` now.
      e.refs.resize(p.copy_now.size());
      bool referenced = false;
      for (std::size_t c = 0; c < e.refs.size() && c < b.handed.size(); ++c) {
        if (!p.copy_now[c]) e.refs[c] = b.handed[c];
        referenced = referenced || e.refs[c].copy_id != 0;
      }
      if (!referenced) {
        e.refs.clear();
      } else {
        e.xxh3 = std::move(b.host_xxh3);
        if (std::all_of(e.refs.begin(), e.refs.end(), [](const auto& r) { return r.copy_id != 0; })) {
          std::vector<std::byte>().swap(e.host);  // every chunk is the receiver's
        }
      }
    }
    if (!status.ok()) break;
    total += p.range.bytes;
    extents_.push_back(std::move(e));
  }
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    counters_.recopy_dirty_bytes += copied_now;
  }
  for (const Lane& t : temps) (void)t.ctx->DestroyStream(t.stream);
  PHOS_RETURN_IF_ERROR(status);
  result->bytes = total;
  result->buffers = static_cast<std::uint32_t>(final_snapshot_.buffers.size());
  result->globals = static_cast<std::uint32_t>(final_snapshot_.globals.size());
  return Status::Ok();
}

// ---------------------------------------------------------------- image (caller's thread, after t2)

Status RecopyCheckpoint::WriteImage(image::ImageWriter* writer, std::vector<PrecopiedExtent>* precopied) {
  std::uint64_t total = 0;
  for (const auto& e : extents_) total += e.bytes;
  progress_->SetPhase("write", "writing " + std::to_string(extents_.size()) + " extents copied up to t2", total);
  for (auto& e : extents_) {
    std::size_t index = 0;
    PHOS_RETURN_IF_ERROR(writer->AddBuffer(e.address, e.bytes, &index));
    if (e.refs.empty()) {
      if (e.bytes > 0) PHOS_RETURN_IF_ERROR(writer->WriteBuffer(index, e.host.data()));
    } else {
      // Chunk by chunk: bytes, or a reference; consecutive chunks of one
      // copy at consecutive offsets make one reference.
      for (std::size_t c = 0; c < e.refs.size();) {
        const std::uint64_t off = c * chunk_;
        const TrackedBuffer::Handed& r = e.refs[c];
        if (r.copy_id == 0) {
          const std::size_t len = static_cast<std::size_t>(std::min(chunk_, e.bytes - off));
          PHOS_RETURN_IF_ERROR(writer->Write(index, off, e.host.data() + off, len));
          ++c;
          continue;
        }
        std::size_t end = c + 1;
        while (end < e.refs.size() && e.refs[end].copy_id == r.copy_id &&
               e.refs[end].copy_offset == r.copy_offset + (end - c) * chunk_) {
          ++end;
        }
        PHOS_RETURN_IF_ERROR(writer->WriteElsewhere(
            index, c, std::vector<std::uint64_t>(e.xxh3.begin() + static_cast<std::ptrdiff_t>(c),
                                                 e.xxh3.begin() + static_cast<std::ptrdiff_t>(end))));
        const std::uint64_t bytes = std::min<std::uint64_t>(end * chunk_, e.bytes) - off;
        precopied->push_back(PrecopiedExtent{e.address + off, bytes, r.copy_id, r.copy_offset});
        c = end;
      }
    }
    progress_->AddBytes(e.bytes);
    std::vector<std::byte>().swap(e.host);  // the writer staged it
  }
  SetSessionSections(final_snapshot_, writer->mutable_metadata());
  return Status::Ok();
}

// ---------------------------------------------------------------- end (consumer thread)

void RecopyCheckpoint::DetachLeftoversLocked(DeviceLeftovers* out) {
  for (const auto& [on, ev] : stream_events_) {
    if (ev != 0) out->events.push_back({on.first, ev});
  }
  stream_events_.clear();
  for (auto& [addr, b] : table_.by_address) b.written_on.clear();
}

// ---------------------------------------------------------------- the driver

Status RunRecopy(session::Session& session, EngineHook* hook, const CheckpointOptions& options, Progress* progress,
                 CheckpointResult* result) {
  image::v1::Manifest meta = options.metadata;
  meta.set_mode("recopy");
  // Opened first: an existing DIR is refused before the app is disturbed.
  std::unique_ptr<image::ImageWriter> writer;
  PHOS_RETURN_IF_ERROR(image::ImageWriter::Open(options.dir, meta, options.image, &writer));
  result->io_backend = std::string(writer->io_backend_name());
  auto op = std::make_shared<RecopyCheckpoint>(options, progress, result);
  SoftRun run;
  Status s = DriveSoftOperation(session, hook, *op, nullptr, "no image was written", &run);
  if (!run.started) {
    writer->Abort();
    return s;
  }
  result->counters = op->counters();
  // The stall: Start, and t2 when the rounds ended well (after a failed
  // copier Finish only undid the operation).
  std::uint64_t stall_us = run.start_us;
  if (run.worked) stall_us += run.finish_us;
  result->stall_us = stall_us + op->blocked_us();
  if (!s.ok()) {
    writer->Abort();
    return s;
  }
  if (Status w = op->WriteImage(writer.get(), &result->precopied); !w.ok()) {
    writer->Abort();
    return w;
  }
  progress->SetPhase("commit", "writing and syncing " + options.dir);
  PHOS_RETURN_IF_ERROR(writer->Commit());
  for (const auto& e : result->precopied) result->precopied_bytes += e.bytes;
  result->mode = Mode::kRecopy;
  return Status::Ok();
}

}  // namespace phos::engine
