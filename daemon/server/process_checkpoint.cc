#include "server/process_checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "criu/criu_client.h"
#include "engine/fresh_restore.h"
#include "ring/channel.h"

namespace phos::server {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t MsSince(Clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

/// Consumer thread: what the dump needs from the session, and the refusals
/// that must come before any image is written.
Status Describe(session::Session& sess, session::SessionState& st, ProcessImage* im) {
  if (st.host_segments.count() != 0) {
    return Status::NotSupported("pid " + std::to_string(sess.pid()) + " holds " +
                                std::to_string(st.host_segments.count()) +
                                " pinned host segment(s) (cudaHostAlloc / cudaHostRegister): a whole-process "
                                "checkpoint cannot re-attach them yet; use --gpu-only");
  }
  im->pid = sess.pid();
  im->session_id = sess.id();
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
  // CRIU refuses a task whose session leader lies outside the dumped tree
  // unless --shell-job is given on both sides (docs/criu.md "shell_job").
  const pid_t sid = getsid(im->pid);
  im->shell_job = sid != im->pid;
  return Status::Ok();
}

}  // namespace

Status CheckpointProcess(session::Session& sess, const engine::CheckpointOptions& gpu, engine::Progress* progress,
                         ProcessCheckpointResult* result) {
  PHOS_RETURN_IF_ERROR(criu::CriuClient::Check().WithContext(
      "whole-process checkpoint needs CRIU (--gpu-only checkpoints the GPU state without it)"));
  ProcessImage im;
  PHOS_RETURN_IF_ERROR(sess.RunControl([&](session::SessionState& st) { return Describe(sess, st, &im); }));
  for (int attempt = 1;; ++attempt) {
    result->attempts = attempt;
    engine::CheckpointResult r;
    PHOS_RETURN_IF_ERROR(engine::Checkpoint(sess, gpu, progress, &r));
    result->gpu = r;
    bool raced = false;
    uint64_t dump_ms = 0;
    Status s = sess.RunControl([&](session::SessionState& st) -> Status {
      // No call runs while this task does. If none ran since the engine
      // fixed the GPU state, the device holds exactly the image's state
      // and the CPU state dumped now is the one that goes with it.
      const uint64_t now = st.executor->admitted();
      if (now != r.admitted_at_capture) {
        raced = true;
        spdlog::info("process checkpoint pid={}: {} call(s) ran between the GPU capture and the dump; retrying",
                     im.pid, now - r.admitted_at_capture);
        return Status::Ok();
      }
      im.admitted = now;
      im.ring_head = reinterpret_cast<const ring::RegionHeader*>(st.region_base)->head.load(std::memory_order_acquire);
      criu::DumpOptions d;
      d.leave_running = true;
      d.shell_job = im.shell_job;
      d.external = {"unix[" + std::to_string(im.channel_inode) + "]"};
      const auto t0 = Clock::now();
      Status ds = criu::CriuClient::Dump(im.pid, gpu.dir + "/" + kCriuSubdir, d);
      dump_ms = MsSince(t0);
      return ds;
    });
    if (!s.ok()) {
      return s.WithContext("CRIU dump of pid " + std::to_string(im.pid) + " failed; the app keeps running; " +
                           gpu.dir + " holds only the GPU image (restorable with --gpu-only)");
    }
    if (!raced) {
      result->criu_dump_ms = dump_ms;
      PHOS_RETURN_IF_ERROR(WriteProcessImage(gpu.dir, im));
      result->image = im;
      return Status::Ok();
    }
    std::error_code ec;
    std::filesystem::remove_all(gpu.dir, ec);
    if (attempt >= kMaxProcessCheckpointAttempts) {
      return Status::Unavailable("pid " + std::to_string(im.pid) + " kept making GPU calls between the GPU capture "
                                 "and the CRIU dump (" + std::to_string(attempt) +
                                 " attempts); checkpoint it with --mode stop or when it is less busy");
    }
  }
}

Status RestoreProcess(session::SessionServer* server, const std::string& dir, engine::Progress* progress,
                      ProcessRestoreResult* result) {
  ProcessImage im;
  PHOS_RETURN_IF_ERROR(ReadProcessImage(dir, &im));
  const std::string criu_dir = dir + "/" + kCriuSubdir;
  if (kill(im.pid, 0) == 0 || errno != ESRCH) {
    return Status::FailedPrecondition("pid " + std::to_string(im.pid) +
                                      " exists: CRIU restores the process with its old pid; stop the running copy first");
  }
  PHOS_RETURN_IF_ERROR(criu::CriuClient::Check().WithContext("whole-process restore needs CRIU"));
  // The killed original's session may still be tearing down (its hang-up
  // is noticed asynchronously): its device memory must be free before the
  // GPU state is recreated at the same addresses. Bounded: a consumer
  // finishes its current call and tears down.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (server->PidHasSession(im.pid)) {
    if (Clock::now() > deadline) {
      return Status::FailedPrecondition("the session of the old pid " + std::to_string(im.pid) +
                                        " is still tearing down after 10 s; try again");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // sv[0]: phosd's new channel end; sv[1]: the app's, in place of its old
  // channel socket. sv[1] must survive libcriu's exec of `criu swrk` (no
  // CLOEXEC); it is closed here as soon as CRIU has duplicated it.
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) return Status::FromErrno("socketpair", errno);
  fcntl(sv[0], F_SETFD, FD_CLOEXEC);
  criu::RestoreOptions ro;
  ro.detach = true;  // re-parented to init (or a subreaper): phosd does not reap it
  ro.shell_job = im.shell_job;
  ro.inherit_fds = {{sv[1], "socket:[" + std::to_string(im.channel_inode) + "]"}};
  pid_t pid = 0;
  const auto t0 = Clock::now();
  Status s = criu::CriuClient::Restore(criu_dir, ro, &pid);
  close(sv[1]);
  result->criu_restore_ms = MsSince(t0);
  if (!s.ok()) {
    close(sv[0]);
    return s.WithContext("CRIU restore of " + dir);
  }
  result->pid = pid;
  auto fail = [&](const Status& why) {
    kill(pid, SIGKILL);  // it cannot run without its ring and GPU state
    return why.WithContext("restored pid " + std::to_string(pid) + " killed");
  };
  if (pid != im.pid) {
    close(sv[0]);
    return fail(Status::Internal("CRIU restored pid " + std::to_string(pid) + ", the image's is " +
                                 std::to_string(im.pid)));
  }
  char path[96];
  std::snprintf(path, sizeof path, "/proc/%d/map_files/%llx-%llx", pid, static_cast<unsigned long long>(im.ring_start),
                static_cast<unsigned long long>(im.ring_end));
  const int memfd = open(path, O_RDWR | O_CLOEXEC);
  if (memfd < 0) {
    Status e = Status::FromErrno(std::string("open ") + path + " (the restored ring)", errno);
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
  engine::RestoreOptions gro;
  gro.dir = dir;
  gro.concurrent = false;  // the gate opens once everything is loaded
  s = engine::RestoreFresh(*sess, gro, progress, &result->gpu);
  if (!s.ok()) {
    Status e = fail(s.WithContext("restoring the GPU state"));
    sess->OpenGate();  // lets the consumer see the hang-up and tear down
    return e;
  }
  sess->OpenGate();
  spdlog::info("process restore: pid {} back from {} as session {} (criu {} ms, gpu {} bytes)", pid, dir,
               sess->id(), result->criu_restore_ms, result->gpu.bytes);
  return Status::Ok();
}

}  // namespace phos::server
