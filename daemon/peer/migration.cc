#include "peer/migration.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <thread>

#include "criu/criu_client.h"
#include "criu/criu_command.h"
#include "peer.pb.h"
#include "ring/ring_layout.h"
#include "image/image_layout.h"
#include "image/image_reader.h"
#include "common/clock_util.h"
#include "common/hex.h"
#include "peer/peer_client.h"
#include "peer/precopy_sender.h"
#include "process/process_checkpoint.h"
#include "process/process_image.h"

namespace phos::peer {

using process::DescribeForDump;
using process::kCriuSubdir;
using process::ProcessImage;
using process::WriteProcessImage;
namespace {

/// True when every thread of `pid` is stopped ('T' or 't' in
/// /proc/PID/task/TID/stat); false while one still runs.
bool AllThreadsStopped(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  bool all = true;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(dir + "/" + e->d_name + "/stat");
    std::string stat;
    std::getline(f, stat);
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size()) continue;  // thread gone
    const char state = stat[paren + 2];
    if (state != 'T' && state != 't') all = false;
  }
  closedir(d);
  return all;
}

/// SIGSTOP, then waits (bounded: 2 s, sleeping 1 ms between looks) until
/// the kernel stopped every thread — CRIU must see the state we froze.
Status Freeze(pid_t pid) {
  if (kill(pid, SIGSTOP) != 0) return Status::FromErrno("SIGSTOP pid " + std::to_string(pid), errno);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (!AllThreadsStopped(pid)) {
    if (Clock::now() > deadline) {
      kill(pid, SIGCONT);
      return Status::Unavailable("pid " + std::to_string(pid) + " did not stop within 2 s of SIGSTOP");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Status::Ok();
}

/// The image's pre-copied runs of chunks as ranges of gpu.img (SendImage
/// sends them as references): the manifest in `dir` gives each buffer's
/// extent, which holds the buffer's bytes in order.
Status PrecopiedRanges(const std::string& dir, const std::vector<engine::PrecopiedExtent>& precopied,
                       std::map<std::string, std::vector<PrecopiedRange>>* out) {
  if (precopied.empty()) return Status::Ok();
  image::v1::Manifest m;
  PHOS_RETURN_IF_ERROR(image::ReadManifest(dir, &m));
  std::map<std::uint64_t, const image::v1::BufferExtent*> by_address;
  for (const auto& b : m.buffers()) by_address[b.device_address()] = &b;
  std::vector<PrecopiedRange>& ranges = (*out)[std::string(image::kGpuImgName)];
  for (const auto& e : precopied) {
    auto it = by_address.upper_bound(e.address);
    const image::v1::BufferExtent* b = it == by_address.begin() ? nullptr : std::prev(it)->second;
    if (b == nullptr || e.address - b->device_address() > b->bytes() ||
        e.bytes > b->bytes() - (e.address - b->device_address())) {
      return Status::Internal("pre-copied extent " + Hex(e.address) + " (" + std::to_string(e.bytes) +
                              " bytes) is not inside a buffer of " + dir + "'s manifest");
    }
    ranges.push_back(PrecopiedRange{b->extent_offset() + (e.address - b->device_address()), e.bytes, e.copy_id,
                                    e.copy_offset});
  }
  return Status::Ok();
}

// ---- a lost RestoreImage reply (docs/migration.md "Lost restore reply")

/// True when RestoreOnPeer's error is the destination's own refusal (its
/// gRPC status, PeerStatus-mapped): it answered, so it runs no copy. Other
/// errors (Unavailable, IoError: a lost connection, a deadline, a cancelled
/// call, a status PeerStatus does not map) may hide a copy that runs.
bool DestinationRefused(const Status& s) {
  switch (s.code()) {
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
    case Status::Code::kFailedPrecondition:
    case Status::Code::kAlreadyExists:
    case Status::Code::kCorruption:
    case Status::Code::kOutOfMemory: return true;
    default: return false;
  }
}

enum class RemoteRestore { kRunning, kNotRunning, kCannotTell };

constexpr auto kStatusPollInterval = std::chrono::milliseconds(200);
constexpr int kStatusCallTimeoutMs = 1000;                    // each RestoreStatus, connecting included
constexpr auto kStatusSilenceLimit = std::chrono::seconds(15);  // no answer for this long: cannot tell
constexpr auto kStatusRestoringLimit = std::chrono::minutes(5); // still RESTORING after this: cannot tell

/// Polls the destination's RestoreStatus for `name` until it says how the
/// restore ended. kRunning fills `reply` with what RestoreImage would have
/// answered; `detail` says why for the other two. Bounded: gives up after
/// kStatusSilenceLimit without an answer or kStatusRestoringLimit in all.
RemoteRestore AskRestoreOutcome(const std::string& dest, const std::string& token, const std::string& name,
                                peer::v1::RestoreImageReply* reply, std::string* detail) {
  const auto start = Clock::now();
  auto last_answer = start;
  for (;;) {
    peer::v1::RestoreStatusReply st;
    const Status q = RestoreStatusOnPeer(dest, token, name, &st, kStatusCallTimeoutMs);
    const auto now = Clock::now();
    if (q.ok()) {
      last_answer = now;
      switch (st.state()) {
        case peer::v1::RESTORE_STATE_RUNNING: *reply = st.restored(); return RemoteRestore::kRunning;
        case peer::v1::RESTORE_STATE_FAILED: *detail = "the restore there failed: " + st.error(); return RemoteRestore::kNotRunning;
        case peer::v1::RESTORE_STATE_RESTORING: break;
        default:  // UNKNOWN: it never started, and now never will (the answer fenced the name)
          *detail = dest + " never started restoring '" + name + "'";
          return RemoteRestore::kNotRunning;
      }
      if (now - start >= kStatusRestoringLimit) {
        *detail = dest + " was still restoring '" + name + "' after " +
                  std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - start).count()) + " s";
        return RemoteRestore::kCannotTell;
      }
    } else if (q.code() == Status::Code::kNotSupported) {
      *detail = q.message();
      return RemoteRestore::kCannotTell;
    } else if (now - last_answer >= kStatusSilenceLimit) {
      *detail = "no answer from " + dest + " to RestoreStatus for " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - last_answer).count()) +
                " s (last: " + q.message() + ")";
      return RemoteRestore::kCannotTell;
    }
    std::this_thread::sleep_for(kStatusPollInterval);
  }
}

}  // namespace

Status MigrateProcess(session::Session& sess, const MigrateOptions& o, engine::Progress* progress,
                      MigrateResult* result) {
  if (o.gpu.mode == engine::Mode::kCow) {
    return Status::InvalidArgument(
        "migration uses --mode recopy (default) or stop: copy-on-write keeps the app running after t1, "
        "which a migration cannot use");
  }
  PHOS_RETURN_IF_ERROR(criu::CriuClient::Check(o.criu_binary).WithContext("migration needs CRIU"));
  // Before anything is frozen: a wrong token or a peer that is not there
  // must cost the app nothing.
  PHOS_RETURN_IF_ERROR(PingPeer(o.destination, o.token)
                           .WithContext("migration not started; pid " + std::to_string(sess.pid()) +
                                        " keeps running here"));
  // Pre-copy: the recopy rounds stream every copy to the destination while
  // the app runs (engine/precopy_sink.h). Opened before anything is
  // frozen, so a destination that refuses costs the app nothing.
  std::unique_ptr<PrecopySender> precopy;
  if (o.gpu.mode == engine::Mode::kRecopy && o.precopy) {
    PHOS_RETURN_IF_ERROR(PrecopySender::Open(o.destination, o.token, o.name, o.max_bytes_per_sec, &precopy)
                             .WithContext("migration not started; pid " + std::to_string(sess.pid()) +
                                          " keeps running here"));
  }
  // Lazy pages (docs/migration.md "Lazy pages"): the page connection is
  // opened before anything is frozen, so it costs no downtime, and a
  // destination that cannot take lazy pages costs the app nothing.
  int page_fd = -1;
  struct ClosePageFd {
    int* fd;
    ~ClosePageFd() {
      if (*fd >= 0) close(*fd);
    }
  } close_page_fd{&page_fd};
  if (o.lazy_pages) {
    PHOS_RETURN_IF_ERROR(criu::CheckLazyDumpPrerequisites().WithContext(
        "migration not started; pid " + std::to_string(sess.pid()) + " keeps running here"));
    PHOS_RETURN_IF_ERROR(OpenLazyPagesChannel(o.destination, o.token, o.name, &page_fd)
                             .WithContext("migration not started; pid " + std::to_string(sess.pid()) +
                                          " keeps running here"));
  }
  ProcessImage im;
  PHOS_RETURN_IF_ERROR(
      sess.RunControl([&](session::SessionState& st) { return DescribeForDump(sess, st, &im, o.criu); }));
  result->source_pid = im.pid;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(o.staging_dir).parent_path(), ec);
  std::filesystem::remove_all(o.staging_dir, ec);

  // Set on the consumer thread by at_capture, read here after
  // engine::Checkpoint returned (RunControl's future orders the two).
  bool frozen = false;
  engine::CheckpointOptions gpu = o.gpu;
  gpu.dir = o.staging_dir;
  gpu.precopy = precopy.get();
  gpu.image.durable = false;  // staged only until it is sent
  gpu.at_capture = [&](session::SessionState& st) -> Status {
    if (frozen) return Status::Ok();  // already frozen (a second capture after a fallback)
    PHOS_RETURN_IF_ERROR(Freeze(im.pid));
    result->stopped_unix_ns = RealtimeNs();
    sess.CloseGate();  // calls posted before the freeze wait in the ring
    frozen = true;
    process::RecordCapturePoint(st, &im);
    return Status::Ok();
  };
  // The lazy dump serves the process's memory until the destination has
  // it all; the process stays frozen (by CRIU, and by our SIGSTOP) so long.
  std::unique_ptr<criu::CriuCommand> lazy_dump;
  // Its log, which CRIU writes while it serves, beside the staging
  // directory rather than in it: the staging directory is being sent.
  // (`*.tmp`: a crash leaves nothing phosd's start-up recovery keeps.)
  const std::string lazy_log_dir = o.staging_dir + "-lazy-dump.tmp";
  auto abandon = [&](const Status& why, const std::string& what) {
    if (lazy_dump) lazy_dump->Kill();  // CRIU lets go of the (still SIGSTOPped) process
    if (o.lazy_pages) std::filesystem::remove_all(lazy_log_dir, ec);
    if (frozen) {
      sess.OpenGate();
      kill(im.pid, SIGCONT);
    }
    std::filesystem::remove_all(o.staging_dir, ec);
    return why.WithContext(what + "; migration abandoned: pid " + std::to_string(im.pid) +
                           (frozen ? " was resumed and keeps running here" : " keeps running here"));
  };

  Status s = engine::Checkpoint(sess, gpu, progress, &result->gpu);
  if (!s.ok()) return abandon(s, "GPU checkpoint");
  result->dirty_bytes_at_stop = result->gpu.counters.recopy_dirty_bytes;
  if (!frozen) return abandon(Status::Internal("the capture point never froze the app"), "freeze");
  SendImageOptions so;
  so.max_bytes_per_sec = o.max_bytes_per_sec;
  so.skip_fsync = true;  // restored at once; a crash there fails the migration anyway
  if (precopy) {
    PrecopyStats stats;
    s = precopy->Finish(&stats);
    if (!s.ok()) return abandon(s, "ending the pre-copy stream to " + o.destination);
    result->precopy_bytes_sent = stats.bytes;
    result->precopy_copies = stats.copies;
    s = PrecopiedRanges(o.staging_dir, result->gpu.precopied, &so.precopied);
    if (!s.ok()) return abandon(s, "mapping the pre-copied buffers into the image");
    result->precopied_bytes = result->gpu.precopied_bytes;
  }

  if (progress != nullptr) progress->SetPhase("criu-dump", "CRIU dumps the frozen pid " + std::to_string(im.pid));
  // It stays stopped (SIGSTOP) through the dump until we decide.
  if (o.lazy_pages) {
    // Everything but the private memory; CRIU then serves that over
    // page_fd (its own copy) to the destination's `criu lazy-pages`.
    s = process::StartLazyDumpProcess(im, o.staging_dir + "/" + kCriuSubdir, lazy_log_dir, o.criu_binary, page_fd,
                                      &lazy_dump, &result->criu_dump_ms);
    close(page_fd);
    page_fd = -1;
  } else {
    s = process::DumpProcess(im, o.staging_dir + "/" + kCriuSubdir, o.criu_binary, &result->criu_dump_ms);
  }
  if (s.ok()) s = WriteProcessImage(o.staging_dir, im, /*durable=*/false);  // sent on at once, like the GPU image
  if (!s.ok()) return abandon(s, "CRIU dump of pid " + std::to_string(im.pid));

  auto t0 = Clock::now();
  SendImageResult sent;
  SendProgress on_sent;
  if (progress != nullptr) on_sent = progress->TotalsReporter("transfer", "sending the image to " + o.destination);
  s = SendImage(o.destination, o.token, o.staging_dir, o.name, on_sent, &sent, so);
  result->transfer_ms = MsSince(t0);
  result->bytes_sent = sent.bytes;
  result->bytes_streamed_after_stop = sent.streamed_bytes;
  if (!s.ok()) return abandon(s, "sending the image to " + o.destination);

  if (progress != nullptr) progress->SetPhase("remote-restore", o.destination + " restores the process");
  peer::v1::RestoreImageReply reply;
  bool request_sent = false;
  peer::v1::RestoreImageRequest request;
  request.set_name(o.name);
  request.set_resume(true);
  request.set_lazy_pages(o.lazy_pages);
  if (o.lazy_pages && progress != nullptr) {
    progress->SetPhase("remote-restore", o.destination + " restores the process and pulls its memory from here");
  }
  s = RestoreOnPeer(o.destination, o.token, request, &reply, &request_sent);
  if (!s.ok() && request_sent && !DestinationRefused(s)) {
    // The destination may have restored and resumed the copy and only its
    // reply was lost: ask it before resuming here (docs/migration.md "Lost
    // restore reply").
    spdlog::warn("migrate: RestoreImage on {} ended without its answer ({}); asking it what became of '{}'",
                 o.destination, s.message(), o.name);
    std::string detail;
    switch (AskRestoreOutcome(o.destination, o.token, o.name, &reply, &detail)) {
      case RemoteRestore::kRunning:
        spdlog::warn("migrate: the reply of RestoreImage on {} was lost ({}); RestoreStatus says pid {} runs there: "
                     "recovered, the migration goes on",
                     o.destination, s.message(), reply.pid());
        s = Status::Ok();
        break;
      case RemoteRestore::kNotRunning:
        return abandon(s, "restore on " + o.destination + " (" + detail + ")");
      case RemoteRestore::kCannotTell: {
        // Resuming here keeps the app alive whatever happened there; the
        // price is a possible second copy, which the error names.
        const std::string why = "restore on " + o.destination +
                                ": its reply was lost and whether the copy runs there cannot be told (" + detail +
                                "); THE COPY AT " + o.destination + " MAY ALSO BE RUNNING: check `phos ps` on " +
                                o.destination + "'s host and end one of the two";
        spdlog::error("migrate: pid {}: {}", im.pid, why);
        return abandon(s, why);
      }
    }
  }
  if (!s.ok()) return abandon(s, "restore on " + o.destination);

  // The destination runs it (lazy: and has every page): only now does the
  // source copy end.
  if (lazy_dump) {
    // The destination's daemon closed the page connection after the last
    // page: the dump ends at once. Its status says nothing more (CRIU exits
    // 0 either way); the destination's answer is what counted.
    if (Status d = lazy_dump->Wait(std::chrono::seconds(30)); !d.ok()) {
      spdlog::warn("migrate: pid {}: the lazy dump did not end cleanly after {} had every page ({}); ended it",
                   im.pid, o.destination, d.ToString());
    }
    lazy_dump.reset();  // kills and reaps it if it still runs
    std::filesystem::remove_all(lazy_log_dir, ec);
    result->lazy_pages_ms = reply.lazy_pages_ms();
  }
  kill(im.pid, SIGKILL);
  sess.OpenGate();  // the consumer notices the hang-up and releases the GPU state
  std::filesystem::remove_all(o.staging_dir, ec);
  result->destination_pid = reply.pid();
  result->resumed_unix_ns = reply.resumed_unix_ns();
  result->destination_criu_restore_ms = reply.criu_restore_ms();
  result->destination_gpu_restore_us = reply.gpu_restore_us();
  const std::int64_t down = result->resumed_unix_ns - result->stopped_unix_ns;
  result->downtime_us = down > 0 ? static_cast<std::uint64_t>(down / 1000) : 0;
  if (o.lazy_pages) {
    spdlog::info("migrate: pid {} -> {} pid {}: its memory arrived lazily, {} ms after it ran there", im.pid,
                 o.destination, reply.pid(), result->lazy_pages_ms);
  }
  spdlog::info("migrate: pid {} -> {} pid {}: downtime {} us (pre-copy {} bytes in {} copies while it ran; dirty "
               "at t2 {} bytes; after the freeze {} of the image's {} bytes streamed in {} ms over {}, {} pre-copied; "
               "criu dump {} ms, remote criu restore {} ms, remote gpu restore {} us)",
               im.pid, o.destination, reply.pid(), result->downtime_us, result->precopy_bytes_sent,
               result->precopy_copies, result->dirty_bytes_at_stop, sent.streamed_bytes, sent.bytes,
               result->transfer_ms, sent.transport, result->precopied_bytes, result->criu_dump_ms,
               reply.criu_restore_ms(), reply.gpu_restore_us());
  return Status::Ok();
}

}  // namespace phos::peer
