#include "engine/recopy_checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/hex.h"
#include "image/image_layout.h"
#include "session/access_spec.h"

namespace phos::engine {

namespace {

/// Synchronous D2H of [address, address + bytes) into `host` (resized), in
/// chunks on `stream`. The session is quiesced (t2): no yields, and every
/// chunk has its own place in `host`, so all are queued before one
/// synchronisation (a wait per chunk left the link idle between chunks).
Status CopyNow(backend::Context* ctx, backend::StreamHandle stream, std::uint64_t address, std::uint64_t bytes,
               std::vector<std::byte>* host) {
  const std::uint64_t chunk = image::kDefaultChunkBytes;
  host->resize(bytes);
  Status s;
  for (std::uint64_t off = 0; off < bytes && s.ok(); off += chunk) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, bytes - off));
    s = ctx->MemcpyAsync(reinterpret_cast<std::uint64_t>(host->data() + off), address + off, len,
                         backend::CopyKind::kDeviceToHost, stream);
    if (!s.ok()) s = s.WithContext("at offset " + std::to_string(off));
  }
  // Also after a failed queueing: what was queued must finish before `host`
  // may go away.
  Status w = ctx->SynchronizeStream(stream);
  if (s.ok()) s = w;
  if (!s.ok()) return s.WithContext("copying buffer " + Hex(address) + " to the host");
  return Status::Ok();
}
}  // namespace

RecopyCheckpoint::RecopyCheckpoint(const CheckpointOptions& options, Progress* progress, CheckpointResult* result)
    : SoftOperation(progress, "checkpoint", "copier", /*check_reads=*/false, "its speculated access set is trusted"),
      options_(options),
      result_(result) {}

RecopyCheckpoint::~RecopyCheckpoint() = default;

Status RecopyCheckpoint::Start(session::SessionState& st, EngineHook* hook) {
  Bind(st);
  const SessionSnapshot snap = CaptureSnapshot(st);
  std::uint64_t total = 0;
  std::vector<TrackedBuffer> tracked;
  std::vector<std::uint64_t> order;
  auto track = [&](const DeviceRange& r, bool global) {
    TrackedBuffer b;
    b.address = r.address;
    b.bytes = r.bytes;
    b.global = global;
    b.state = kDirty;
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
  {
    // No quiesce: work the app enqueued before now may still be writing any
    // buffer. One write event per stream, and every buffer waits for all.
    std::vector<backend::StreamHandle> streams = {backend::kDefaultStream};
    for (const auto& [id, h] : st.streams) streams.push_back(h);
    std::lock_guard<std::mutex> lock(table_.mu);
    for (backend::StreamHandle h : streams) {
      if (!RecordWriteLocked(h)) {
        (void)ctx_->SynchronizeStream(h);  // rare: then that stream's writes are done
        continue;
      }
      for (auto& [addr, b] : table_.by_address) b.written_on.push_back(h);
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
      ++b.generation;
      b.state = kDirty;
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
    ++b->generation;
    const bool copying = b->state == kCopying;
    b->state = kDirty;
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
  std::vector<TrackedBuffer*> hit;
  if (writes_anything) {
    for (auto& [addr, b] : table_.by_address) hit.push_back(&b);
  } else {
    for (const auto& r : call.ranges) {
      if (!r.write) continue;
      table_.ForEachOverlapping(r.ptr, r.bytes, [&](TrackedBuffer& b) {
        if (std::find(hit.begin(), hit.end(), &b) == hit.end()) hit.push_back(&b);
      });
    }
  }
  if (hit.empty()) return;
  // The call is enqueued: an event recorded now completes after its write.
  bool recorded = RecordWriteLocked(call.stream);
  if (!recorded) {
    // No event: let the write finish before the buffers become DIRTY, so
    // every copy taken after that sees it (copies taken before are dropped
    // by the generation bump below).
    lock.unlock();
    (void)ctx_->SynchronizeStream(call.stream);
    lock.lock();
    if (abandoned_) return;
  }
  for (TrackedBuffer* b : hit) MarkDirtyLocked(*b, recorded, call.stream);
}

bool RecopyCheckpoint::RecordWriteLocked(backend::StreamHandle stream) {
  backend::EventHandle& ev = stream_events_[stream];
  if (ev == 0) {
    if (Status s = ctx_->CreateEvent(backend::kEventDisableTiming, &ev); !s.ok()) {
      ev = 0;
      spdlog::warn("checkpoint: cannot create a write event: {}", s.ToString());
      return false;
    }
  }
  if (Status s = ctx_->RecordEvent(ev, stream); !s.ok()) {
    spdlog::warn("checkpoint: cannot record a write event: {}", s.ToString());
    return false;
  }
  return true;
}

void RecopyCheckpoint::MarkDirtyLocked(TrackedBuffer& b, bool written_on_stream, backend::StreamHandle stream) {
  ++b.generation;
  b.state = kDirty;
  if (written_on_stream && std::find(b.written_on.begin(), b.written_on.end(), stream) == b.written_on.end()) {
    b.written_on.push_back(stream);
  }
}

std::uint64_t RecopyCheckpoint::DirtyBytesLocked() const {
  std::uint64_t n = 0;
  for (const auto& [addr, b] : table_.by_address) {
    if (!b.freed && b.state != kCopied) n += b.bytes;
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
    for (std::uint64_t addr : order_) {
      TrackedBuffer* b = nullptr;
      std::uint64_t generation = 0;
      {
        std::lock_guard<std::mutex> lock(table_.mu);
        if (abandoned_) break;
        b = &table_.by_address.at(addr);
        if (b->freed || b->state != kDirty) continue;
        b->state = kCopying;
        generation = b->generation;
        abort_copy_.store(false);
        // Waits on the copier's stream for every write admitted so far
        // (their events were recorded after they were enqueued).
        Status ordered;
        UseContext([&] {
          for (backend::StreamHandle s : b->written_on) {
            // Without the wait the copy could miss a write the generation
            // no longer reveals: no image rather than a wrong one.
            ordered = ctx_->StreamWaitEvent(stream_, stream_events_.at(s));
            if (!ordered.ok()) return;
          }
        });
        if (!ordered.ok()) {
          return ordered.WithContext("ordering the copy of buffer " + Hex(b->address) + " after its writes");
        }
        b->written_on.clear();
      }
      b->copy_id = 0;  // `host` is about to be overwritten
      bool dropped = false;
      Status s = CopyOne(*b, &dropped);
      bool copied = false;
      {
        std::lock_guard<std::mutex> lock(table_.mu);
        if (b->state == kCopying) {
          b->state = s.ok() && !dropped && b->generation == generation && !b->freed ? kCopied : kDirty;
          copied = b->state == kCopied;
        }
        if (!s.ok() && !abandoned_) return s;  // a copy failed: no image
      }
      // A write admitted from here on makes the copy stale (DIRTY again);
      // it is still a true copy of the moment it was taken, and the next
      // round supersedes it.
      if (copied && options_.precopy != nullptr) PHOS_RETURN_IF_ERROR(HandOver(*b));
      UseContext([&] {
        if (validator_) (void)validator_->Drain(false, &reports);
      });
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

Status RecopyCheckpoint::CopyOne(TrackedBuffer& b, bool* dropped) {
  const std::uint64_t chunk = image::kDefaultChunkBytes;
  b.host.resize(b.bytes);  // the copier owns `host` while the buffer is COPYING
  for (std::uint64_t off = 0; off < b.bytes; off += chunk) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, b.bytes - off));
    Status s;
    bool aborted = false;
    const bool used = UseContext([&] {
      if (abort_copy_.load()) {
        aborted = true;
        return;
      }
      gate_.YieldIfNeeded(ctx_);
      s = ctx_->MemcpyAsync(reinterpret_cast<std::uint64_t>(b.host.data() + off), b.address + off, len,
                            backend::CopyKind::kDeviceToHost, stream_);
      if (s.ok()) s = ctx_->SynchronizeStream(stream_);
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

Status RecopyCheckpoint::HandOver(TrackedBuffer& b) {
  const std::uint64_t chunk = options_.image.chunk_bytes;
  b.host_xxh3.clear();
  for (std::uint64_t off = 0; off < b.bytes; off += chunk) {
    b.host_xxh3.push_back(image::Xxh3(b.host.data() + off, static_cast<std::size_t>(std::min(chunk, b.bytes - off))));
  }
  StagedCopy c;
  c.copy_id = ++next_copy_id_;
  c.address = b.address;
  c.bytes = b.bytes;
  c.data = b.host.data();
  c.chunk_bytes = chunk;
  c.chunk_xxh3 = &b.host_xxh3;
  PHOS_RETURN_IF_ERROR(options_.precopy->Staged(c).WithContext("pre-copy of buffer " + Hex(b.address)));
  b.copy_id = c.copy_id;
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
      for (auto& [addr, b] : table_.by_address) {
        ++b.generation;
        b.state = kDirty;
      }
      ++counters_.recopy_misses;
      continue;
    }
    for (const auto& m : r.misses) {
      if (!m.write) continue;
      TrackedBuffer* b = table_.Find(m.address);
      if (b == nullptr) continue;  // not tracked: t2 copies it fresh anyway
      // The kernel completed (its report is in), so a copy taken from now
      // on sees its write; one taken before is redone.
      ++b->generation;
      b->state = kDirty;
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
    if (Status s = validator_->Drain(true, &reports); !s.ok()) {
      spdlog::warn("checkpoint: collecting twin reports: {}", s.ToString());
    }
    ApplyReports(reports);
  }
  if (Status s = st.ctx->Synchronize(); !s.ok()) {
    return Status::FailedPrecondition("the session's GPU context has a sticky error (" + s.message() +
                                      "); its device state cannot be checkpointed");
  }
  final_snapshot_ = CaptureSnapshot(st);
  // The copies at t2 go through the copier's stream, or after a reset
  // (context replaced) through one of the new context.
  backend::StreamHandle stream = same_context ? stream_ : 0;
  backend::StreamHandle temp = 0;
  if (stream == 0) {
    PHOS_RETURN_IF_ERROR(st.ctx->CreateStream(backend::kStreamNonBlocking, 0, &temp));
    stream = temp;
  }
  // What each extent of the image takes: the staged copy (COPIED, same
  // buffer as at Start) or a copy now (DIRTY, or allocated/re-allocated
  // since Start). Decided under mu; the copies run without it (the copier
  // has ended, so the `host` vectors are ours).
  struct Plan {
    DeviceRange range;
    TrackedBuffer* tracked = nullptr;  // null: not tracked (or not the same buffer)
    bool staged = false;
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
        p.staged = it->second.state == kCopied;
      }
      plan.push_back(p);
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
  for (const Plan& p : plan) {
    Extent e;
    e.address = p.range.address;
    e.bytes = p.range.bytes;
    if (p.staged && p.tracked->copy_id != 0) {
      // Handed over in a round and unchanged since: the receiver has it.
      e.copy_id = p.tracked->copy_id;
      e.xxh3 = std::move(p.tracked->host_xxh3);
      std::vector<std::byte>().swap(p.tracked->host);
    } else if (p.staged) {
      e.host = std::move(p.tracked->host);
    } else {
      status = CopyNow(st.ctx, stream, p.range.address, p.range.bytes, &e.host);
      if (!status.ok()) break;
      copied_now += p.range.bytes;
      if (p.tracked != nullptr) std::vector<std::byte>().swap(p.tracked->host);  // a stale copy
    }
    total += p.range.bytes;
    extents_.push_back(std::move(e));
  }
  {
    std::lock_guard<std::mutex> lock(table_.mu);
    counters_.recopy_dirty_bytes += copied_now;
  }
  if (temp != 0) (void)st.ctx->DestroyStream(temp);
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
    if (e.copy_id != 0) {
      PHOS_RETURN_IF_ERROR(writer->WriteElsewhere(index, e.xxh3));
      precopied->push_back(PrecopiedExtent{e.address, e.bytes, e.copy_id});
    } else if (e.bytes > 0) {
      PHOS_RETURN_IF_ERROR(writer->WriteBuffer(index, e.host.data()));
    }
    progress_->AddBytes(e.bytes);
    std::vector<std::byte>().swap(e.host);  // the writer staged it
  }
  SetSessionSections(final_snapshot_, writer->mutable_metadata());
  return Status::Ok();
}

// ---------------------------------------------------------------- end (consumer thread)

void RecopyCheckpoint::DetachLeftoversLocked(DeviceLeftovers* out) {
  for (const auto& [stream, ev] : stream_events_) {
    if (ev != 0) out->events.push_back(ev);
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
