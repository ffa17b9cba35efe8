#include "process/process_checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/proc_stat.h"
#include "criu/criu_client.h"
#include "engine/fresh_restore.h"
#include "image/commit_dir.h"
#include "image/file_util.h"
#include "ring/channel.h"
#include "process/lazy_copy_guard.h"
#include "common/clock_util.h"

namespace phos::process {

Status DescribeForDump(session::Session& sess, session::SessionState& st, ProcessImage* im,
                       const CriuUserOptions& criu) {
  im->pid = sess.pid();
  // Pinned host segments are MAP_SHARED memfd mappings in the app: CRIU
  // saves their pages with the process; the restore re-attaches them
  // (AttachHostSegments). Each must still be mapped where the app had it.
  im->host_segments.clear();
  for (const session::HostSegmentTable::SegmentInfo& h : st.host_segments.List()) {
    const std::string path = MapFilesPath(im->pid, h.app_base, h.app_base + h.bytes);
    if (access(path.c_str(), F_OK) != 0) {
      return Status::FailedPrecondition("pid " + std::to_string(im->pid) + "'s pinned host segment " +
                                        std::to_string(h.id) + " is no longer mapped as one piece at its address (" +
                                        path + ": " + std::strerror(errno) +
                                        "); a whole-process image could not re-attach it (use --gpu-only)");
    }
    im->host_segments.push_back(ProcessImage::HostSegment{h.id, h.app_base, h.bytes});
  }
  im->session_id = sess.id();
  im->cmdline = sess.cmdline();  // the restored session's hello (phos ps COMMAND)
  im->geometry = sess.region().geometry();
  PHOS_RETURN_IF_ERROR(UnixPeerInode(sess.fd(), &im->channel_inode).WithContext("finding the app's channel socket"));
  if (!ProcessHoldsSocket(im->pid, im->channel_inode)) {
    return Status::FailedPrecondition("pid " + std::to_string(im->pid) + " does not hold its channel socket (inode " +
                                      std::to_string(im->channel_inode) + "): it is not the session's process");
  }
  struct stat rs;
  if (fstat(sess.region().fd(), &rs) != 0) return Status::FromErrno("fstat ring memfd", errno);
  PHOS_RETURN_IF_ERROR(
      FindMemfdMapping(im->pid, rs.st_ino, sess.region().size(), &im->ring_start, &im->ring_end));
  struct stat ps;
  if (stat(("/proc/" + std::to_string(im->pid)).c_str(), &ps) != 0) return Status::FromErrno("stat /proc/PID", errno);
  im->uid = ps.st_uid;
  PHOS_RETURN_IF_ERROR(PidNamespaceRole(im->pid, &im->pid_namespace));
  // CRIU refuses a task whose session leader lies outside the dumped tree
  // unless --shell-job is given on both sides (docs/criu.md "shell_job").
  const pid_t sid = getsid(im->pid);
  im->shell_job = sid != im->pid || criu.shell_job;
  im->tcp_established = criu.tcp_established;
  im->file_locks = criu.file_locks;
  return Status::Ok();
}

void RecordCapturePoint(const session::SessionState& st, ProcessImage* im) {
  im->admitted = st.executor->admitted();
  im->ring_head = st.ring->published_head();
}

namespace {

/// The CRIU dump options of the process `im` describes.
criu::DumpOptions DumpOptionsFor(const ProcessImage& im, const std::string& criu_binary) {
  criu::DumpOptions d;
  d.criu_binary = criu_binary;
  d.leave_running = true;
  d.shell_job = im.shell_job;
  d.tcp_established = im.tcp_established;
  d.file_locks = im.file_locks;
  // The app's end of its channel socket: phosd's end is not dumped; the
  // restore hands in a new one (RestoreProcess).
  d.external = {"unix[" + std::to_string(im.channel_inode) + "]"};
  return d;
}

}  // namespace

Status DumpProcess(const ProcessImage& im, const std::string& criu_dir, const std::string& criu_binary,
                   std::uint64_t* ms) {
  const auto t0 = Clock::now();
  Status s = criu::CriuClient::Dump(im.pid, criu_dir, DumpOptionsFor(im, criu_binary));
  *ms = MsSince(t0);
  return s;
}

Status StartLazyDumpProcess(const ProcessImage& im, const std::string& criu_dir, const std::string& log_dir,
                            const std::string& criu_binary, int page_fd, std::unique_ptr<criu::CriuCommand>* dump,
                            std::uint64_t* ms) {
  criu::DumpOptions d = DumpOptionsFor(im, criu_binary);
  d.work_dir = log_dir;
  const auto t0 = Clock::now();
  Status s = criu::CriuClient::StartLazyDump(im.pid, criu_dir, d, page_fd, dump);
  *ms = MsSince(t0);
  return s;
}

namespace {

/// Re-attaches the restored app's pinned host segments to its adopted
/// (still gated) session: each is the restored MAP_SHARED memfd mapping at
/// the app address it had, reopened through /proc/PID/map_files (as the
/// ring is) and registered under its old id, before any call the app
/// queued can use it. CRIU restores memfd seals; a segment that came back
/// without F_SEAL_SHRINK is sealed here (HostSegmentTable::Add requires it:
/// a shrink would fault phosd's mapping).
Status AttachHostSegments(session::Session& sess, pid_t pid, const ProcessImage& im) {
  for (const ProcessImage::HostSegment& h : im.host_segments) {
    const std::string path = MapFilesPath(pid, h.app_base, h.app_base + h.bytes);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno("open " + path + " (restored pinned host segment)", errno);
    const int seals = fcntl(fd, F_GET_SEALS);
    if (seals >= 0 && !(seals & F_SEAL_SHRINK) && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
      const int err = errno;
      close(fd);
      return Status::FromErrno("sealing " + path + " (restored pinned host segment)", err);
    }
    Status s = sess.RunControl([&](session::SessionState& st) {
      return st.host_segments.Add(h.id, h.app_base, h.bytes, fd, st.ctx);  // takes fd
    });
    PHOS_RETURN_IF_ERROR(s.WithContext("re-attaching pinned host segment " + std::to_string(h.id)));
  }
  return Status::Ok();
}

}  // namespace

Status CheckpointProcess(session::Session& sess, const engine::CheckpointOptions& gpu, engine::Progress* progress,
                         ProcessCheckpointResult* result, const CriuUserOptions& criu,
                         const std::string& criu_binary) {
  PHOS_RETURN_IF_ERROR(criu::CriuClient::Check(criu_binary).WithContext(
      "whole-process checkpoint needs CRIU (--gpu-only checkpoints the GPU state without it)"));
  ProcessImage im;
  PHOS_RETURN_IF_ERROR(
      sess.RunControl([&](session::SessionState& st) { return DescribeForDump(sess, st, &im, criu); }));
  // The whole image is built in DIR.tmp and renamed to DIR last, so a crash
  // (phosd killed, disk full, CRIU failing) never leaves a DIR that looks
  // whole; phosd's start-up recovery removes *.tmp under its checkpoint
  // root (image/recovery.h).
  const std::string final_dir = gpu.dir;
  const std::string work_dir = final_dir + ".tmp";
  std::error_code ec;
  if (std::filesystem::exists(final_dir, ec)) {
    return Status::AlreadyExists(final_dir + " exists; choose another --out or remove it");
  }
  std::filesystem::remove_all(work_dir, ec);  // a leftover of a crashed attempt
  engine::CheckpointOptions gpu_here = gpu;
  gpu_here.dir = work_dir;
  // CRIU writes next to the GPU image while the engine's writer still
  // stages it (work_dir.tmp, renamed to work_dir at its commit); the CRIU
  // directory moves into work_dir after that.
  const std::string criu_tmp = final_dir + ".criu.tmp";
  std::filesystem::remove_all(criu_tmp, ec);
  // CRIU dumps INSIDE the control task that fixes the GPU image's state
  // (engine at_capture: t1 for stop/cow, t2 for recopy), so no call can run
  // between the two captures: the GPU image and the CPU image describe the
  // same instant by construction. The app's calls wait for the dump (~0.1 s,
  // criu_dump_ms).
  uint64_t dump_ms = 0;
  const auto caller_at_capture = gpu.at_capture;  // a job's: runs after the dump
  gpu_here.at_capture = [&](session::SessionState& st) -> Status {
    RecordCapturePoint(st, &im);
    // No progress phase of its own: for cow the copy phase follows at once
    // and must keep its byte counts (criu_dump_ms is in the result).
    std::filesystem::remove_all(criu_tmp, ec);  // a cow fallback captures again
    Status ds = DumpProcess(im, criu_tmp, criu_binary, &dump_ms);
    if (!ds.ok()) {
      // CRIU's log is the useful part of its failure: keep it by the target
      // (a rename: it needs no space on a full disk); an empty one is not kept.
      const std::string log = criu_tmp + "/criu-dump.log";
      const std::string kept = final_dir + ".criu-dump.log";
      std::error_code lec;
      const bool keep = std::filesystem::file_size(log, lec) > 0 && !lec && rename(log.c_str(), kept.c_str()) == 0;
      return ds.WithContext("CRIU dump of pid " + std::to_string(im.pid) +
                            (keep ? " (CRIU's log kept as " + kept + ")" : std::string()));
    }
    return caller_at_capture ? caller_at_capture(st) : ds;
  };
  engine::CheckpointResult r;
  Status s = engine::Checkpoint(sess, gpu_here, progress, &r);
  result->gpu = r;
  if (!s.ok()) {
    std::filesystem::remove_all(work_dir, ec);
    std::filesystem::remove_all(criu_tmp, ec);
    // A dead app (a zombie too: dead, not reaped yet) is named as such:
    // killed during the CRIU dump, its error is CRIU's, not the session's.
    return s.WithContext(ProcessRunning(im.pid) ? "no image was committed; the app keeps running"
                                                : "pid " + std::to_string(im.pid) +
                                                      " exited during the checkpoint; no image was committed");
  }
  result->criu_dump_ms = dump_ms;
  // stop-the-world's stall counts its capture only; the dump ran in the
  // same control task, so the app waited for it too (cow/recopy already
  // time the whole control task).
  if (r.mode == engine::Mode::kStop) result->gpu.stall_us += dump_ms * 1000;
  Status w;
  if (rename(criu_tmp.c_str(), (work_dir + "/" + kCriuSubdir).c_str()) != 0) {
    w = image::ErrnoError("rename " + criu_tmp + " to", work_dir + "/" + kCriuSubdir, errno);
  }
  if (w.ok()) w = WriteProcessImage(work_dir, im);
  // CRIU does not fsync its images: syncfs of that filesystem.
  if (w.ok()) w = image::CommitDirectory(work_dir, final_dir, image::CommitSync::kFilesystem);
  if (!w.ok()) {
    std::filesystem::remove_all(work_dir, ec);
    std::filesystem::remove_all(criu_tmp, ec);
    return w.WithContext("committing " + final_dir + " (nothing was committed" +
                         (ProcessRunning(im.pid) ? "; the app keeps running)" : "; the app has exited)"));
  }
  result->gpu.dir = final_dir;
  result->image = im;
  return Status::Ok();
}

Status RestoreProcess(session::SessionServer* server, const std::string& dir, engine::Progress* progress,
                      ProcessRestoreResult* result, const ProcessRestoreOptions& options) {
  ProcessImage im;
  PHOS_RETURN_IF_ERROR(ReadProcessImage(dir, &im));
  const std::string criu_dir = dir + "/" + kCriuSubdir;
  auto pid_exists = [&] { return kill(im.pid, 0) == 0 || errno != ESRCH; };
  if (!im.pid_namespace && pid_exists()) {
    // `kill -9 P; phos restore` races with P's reaping (a zombie keeps its
    // pid; phosd reaps restored processes asynchronously): give it 2 s.
    const auto reaped_by = Clock::now() + std::chrono::seconds(2);
    while (pid_exists() && Clock::now() < reaped_by) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (pid_exists() && !im.pid_namespace) {
    return Status::FailedPrecondition("pid " + std::to_string(im.pid) +
                                      " exists: CRIU restores this image with its old pid (it was not taken in its "
                                      "own pid namespace: `phos run --no-pid-ns`); stop the running copy first");
  }
  PHOS_RETURN_IF_ERROR(criu::CriuClient::Check(options.criu_binary).WithContext("whole-process restore needs CRIU"));
  // The killed original's session may still be tearing down (its hang-up
  // is noticed asynchronously): its device memory must be free before the
  // GPU state is recreated at the same addresses. A dead app's queued work
  // is abandoned (session.cc), so this takes milliseconds; the bound only
  // guards against a teardown that hangs. (A LIVE original in its own pid
  // namespace keeps its session: the restore then fails on the device
  // addresses it holds, with a message saying so.) A zombie counts as
  // dead: it holds its pid, not its GPU state.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!ProcessRunning(im.pid) && server->PidHasSession(im.pid)) {
    if (Clock::now() > deadline) {
      return Status::FailedPrecondition("pid " + std::to_string(im.pid) +
                                        " has ended but its phos session is still releasing its GPU state after "
                                        "10 s; try again (phosd's log says what the session is doing)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  // sv[0]: phosd's new channel end; sv[1]: the app's, in place of its old
  // channel socket. sv[1] must survive libcriu's exec of `criu swrk` (no
  // CLOEXEC); it is closed here as soon as CRIU has duplicated it.
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) return Status::FromErrno("socketpair", errno);
  fcntl(sv[0], F_SETFD, FD_CLOEXEC);
  criu::RestoreOptions ro;
  ro.criu_binary = options.criu_binary;
  ro.detach = true;  // re-parented to init (or a subreaper): phosd does not reap it
  // What the dump used, plus what this restore asks for.
  ro.shell_job = im.shell_job || options.criu.shell_job;
  ro.tcp_established = im.tcp_established || options.criu.tcp_established;
  ro.file_locks = im.file_locks || options.criu.file_locks;
  ro.inherit_fds = {{sv[1], "socket:[" + std::to_string(im.channel_inode) + "]"}};
  pid_t pid = 0;
  if (progress != nullptr) progress->SetPhase("criu-restore", "CRIU restores the process of " + dir);
  const auto t0 = Clock::now();
  // Lazy: the process's private memory comes from the source over
  // options.lazy_pages_fd, through a `criu lazy-pages` daemon that must
  // listen before CRIU restores (docs/criu.md "Lazy pages").
  std::unique_ptr<criu::CriuCommand> lazy_pages;
  Status s;
  if (options.lazy_pages_fd >= 0) {
    ro.lazy_pages = true;
    s = criu::CriuClient::StartLazyPages(criu_dir, options.lazy_pages_fd, options.criu_binary, &lazy_pages);
    // Its last page may come while the GPU state still loads: note when.
    if (s.ok()) lazy_pages->StartExitClock();
  }
  if (s.ok()) s = criu::CriuClient::Restore(criu_dir, ro, &pid);
  close(sv[1]);
  result->criu_restore_ms = MsSince(t0);
  if (!s.ok()) {
    close(sv[0]);
    return s.WithContext("CRIU restore of " + dir);
  }
  result->pid = pid;
  auto fail = [&](const Status& why) {
    kill(pid, SIGKILL);  // it cannot run without its ring and GPU state (or its memory)
    return why.WithContext("restored pid " + std::to_string(pid) + " killed");
  };
  // Lazy: if phosd dies before the memory is all here, the copy dies too
  // (lazy_copy_guard.h). Released once the last page arrived.
  LazyCopyGuard guard;
  if (lazy_pages) {
    if (Status g = guard.Start(pid); !g.ok()) {
      close(sv[0]);
      return fail(g.WithContext("a lazily restored process needs its guard"));
    }
  }
  if (!im.pid_namespace && pid != im.pid) {
    close(sv[0]);
    return fail(Status::Internal("CRIU restored pid " + std::to_string(pid) + ", the image's is " +
                                 std::to_string(im.pid)));
  }
  const std::string path = MapFilesPath(pid, im.ring_start, im.ring_end);
  const int memfd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (memfd < 0) {
    Status e = Status::FromErrno("open " + path + " (the restored ring)", errno);
    close(sv[0]);
    return fail(e);
  }
  std::unique_ptr<ring::SharedRegion> region;
  s = ring::SharedRegion::Map(memfd, &region);  // takes memfd
  if (!s.ok()) {
    close(sv[0]);
    return fail(s.WithContext("mapping the restored ring"));
  }
  // The region is app-writable memory: trust only the geometry phosd saved.
  const ring::RingGeometry& a = region->geometry();
  const ring::RingGeometry& b = im.geometry;
  if (a.region_bytes != b.region_bytes || a.ring_offset != b.ring_offset || a.ring_bytes != b.ring_bytes ||
      a.slots_offset != b.slots_offset || a.slot_count != b.slot_count ||
      a.chunk_state_offset != b.chunk_state_offset || a.staging_offset != b.staging_offset ||
      a.chunk_count != b.chunk_count || a.chunk_bytes != b.chunk_bytes || a.max_frame_bytes != b.max_frame_bytes) {
    close(sv[0]);
    return fail(Status::Corruption("the restored ring's geometry differs from the one saved in " + dir));
  }
  ring::Hello hello;
  hello.pid = pid;
  hello.session_id = im.session_id;
  hello.cmdline = im.cmdline;
  std::shared_ptr<session::Session> sess;
  s = server->Adopt(ring::ChannelConnection::Adopt(sv[0], pid, im.uid, std::move(hello)), std::move(region), &sess);
  if (!s.ok()) return fail(s);
  result->session_id = sess->id();
  if (Status a = AttachHostSegments(*sess, pid, im); !a.ok()) {
    Status e = fail(a);
    sess->OpenGate();  // lets the consumer see the hang-up and tear down
    return e;
  }
  engine::RestoreOptions gro;
  gro.comm_generation = options.comm_generation;
  gro.device_map = options.device_map;
  gro.dir = dir;
  gro.concurrent = options.concurrent;
  gro.verify = options.verify;
  bool running = false;  // the gate opened (this thread only)
  Clock::time_point running_at;
  auto let_run = [&] {
    if (running) return;
    running = true;
    running_at = Clock::now();
    sess->OpenGate();
    if (options.on_running) options.on_running(pid);
  };
  gro.on_resumed = let_run;  // concurrent: as soon as the control task is done
  s = engine::RestoreFresh(*sess, gro, progress, &result->gpu);
  // (Restored without a pid namespace, the process has the image's pid:
  // then the original cannot be what holds the addresses.)
  if (!s.ok() && im.pid != pid && ProcessRunning(im.pid) && server->PidHasSession(im.pid)) {
    s = s.WithContext("pid " + std::to_string(im.pid) + ", the process this image was taken from, still runs on "
                      "this phosd and holds the image's device addresses (one device address space per phosd): "
                      "restore it with another phosd, or end pid " + std::to_string(im.pid) + " first");
  }
  if (!s.ok()) {
    Status e = fail(s.WithContext("restoring the GPU state"));
    sess->OpenGate();  // lets the consumer see the hang-up and tear down
    return e;
  }
  let_run();  // stop-the-world: only now
  if (lazy_pages) {
    // It runs; its memory still arrives. Done when the daemon delivered
    // the last page. If it cannot, the process must not run on: once the
    // daemon is gone, a page it never got would read as zeros.
    if (progress != nullptr) progress->SetPhase("lazy-pages", "pid " + std::to_string(pid) + " runs; its memory arrives");
    s = lazy_pages->Wait(kLazyPagesTimeout);
    const Clock::time_point last_page = lazy_pages->ExitSeenAt().value_or(Clock::now());
    result->lazy_pages_ms = last_page > running_at ? static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(last_page - running_at).count()) : 0;
    std::error_code ec;
    std::filesystem::remove(criu_dir + "/lazy-pages.socket", ec);  // CRIU leaves its listening socket behind
    if (!s.ok()) return fail(s.WithContext("its memory did not all arrive"));  // lazy_pages' end kills the daemon
    guard.Release();
  }
  spdlog::info("process restore: pid {} back from {} as session {} (criu {} ms, gpu {} bytes{})", pid, dir,
               sess->id(), result->criu_restore_ms, result->gpu.bytes,
               lazy_pages ? ", memory arrived lazily in " + std::to_string(result->lazy_pages_ms) + " ms" : "");
  return Status::Ok();
}

}  // namespace phos::process
