// Whole-process checkpoint and restore (docs/criu.md "Whole-process
// checkpoint and restore"): the app's GPU state through the C/R engine and
// its CPU state through CRIU, in one image directory:
//
//   DIR/manifest, DIR/gpu.img ...  the engine's GPU image (as --gpu-only)
//   DIR/criu/                      CRIU's images + criu-dump.log
//   (the manifest's ProcessRecord: process_image.h, added before the commit)
//
// Checkpoint: engine::Checkpoint (any mode) with the CRIU dump run inside
// the engine's capture control task (CheckpointOptions::at_capture: t1 for
// stop/cow, t2 for recopy): no call runs between the GPU capture and the
// dump, so both images describe the same instant. The app's channel socket
// is declared external. Everything is staged in DIR.tmp (CRIU's part in
// DIR.criu.tmp until the GPU image committed) and renamed to DIR last. The
// ring needs no saved consumer state: between two calls RingServer has no
// frame pending and its head is published in the region, so the dumped
// region holds it (a new RingServer starts from the published head).
//
// Restore: CRIU restores the process (same pid, detached) with one end of
// a fresh socketpair in place of its channel socket; phosd maps the ring
// memfd CRIU recreated (/proc/PID/map_files), checks its geometry against
// the image, adopts a GATED session around both (SessionServer::Adopt),
// restores the GPU state into it (engine::RestoreFresh, concurrent or not)
// and only then lets the consumer take the restored app's calls.
//
// Threading: any thread except a session's consumer (as engine
// operations). Root only (CRIU).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "criu/criu_command.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "process/process_image.h"
#include "session/session.h"
#include "session/session_server.h"

namespace phos::process {

struct ProcessCheckpointResult {
  engine::CheckpointResult gpu;
  ProcessImage image;
  uint64_t criu_dump_ms = 0;  // the CRIU dump (the app's calls wait this long)
};

/// Consumer thread (a control task): fills what a CRIU dump of the
/// session's process needs (pid, channel socket inode, ring mapping,
/// shell_job, pid namespace, the user's CRIU options) and refuses what
/// cannot be dumped (pinned host segments, a pid namespace it does not
/// lead). Live migration uses it too.
Status DescribeForDump(session::Session& session, session::SessionState& st, ProcessImage* image,
                       const CriuUserOptions& criu = {});

/// At the capture point (consumer thread, inside the engine's capture
/// control task): the calls admitted and the ring position, which the image
/// records so the restored consumer starts where the dump left it.
void RecordCapturePoint(const session::SessionState& st, ProcessImage* image);

/// CRIU's dump of the process `image` describes (its session found by
/// DescribeForDump) into `criu_dir`, with the options the image records.
/// The process keeps running, or stays stopped if it was stopped (a
/// migration's freeze). `criu_binary`: phosd's --criu-binary ("" = `criu`
/// on PATH). *ms: how long the dump took.
Status DumpProcess(const ProcessImage& image, const std::string& criu_dir, const std::string& criu_binary,
                   std::uint64_t* ms);

/// DumpProcess for lazy migration (criu::CriuClient::StartLazyDump): returns
/// once CRIU's images are in `criu_dir` and `*dump` serves the process's
/// private memory over `page_fd`; the process stays as it was (a migration's
/// stopped process stays stopped) until `*dump` ends. CRIU's log goes to
/// `log_dir` (created if missing), not `criu_dir`: CRIU writes it while it
/// serves, when `criu_dir` is already being sent. *ms: until the images
/// were written.
Status StartLazyDumpProcess(const ProcessImage& image, const std::string& criu_dir, const std::string& log_dir,
                            const std::string& criu_binary, int page_fd, std::unique_ptr<criu::CriuCommand>* dump,
                            std::uint64_t* ms);

/// `gpu.dir` must not exist; it appears only complete. On a CRIU failure
/// nothing is committed and CRIU's log is kept as DIR.criu-dump.log.
/// `criu_binary`: phosd's --criu-binary ("" = `criu` on PATH).
Status CheckpointProcess(session::Session& session, const engine::CheckpointOptions& gpu,
                         engine::Progress* progress, ProcessCheckpointResult* result, const CriuUserOptions& criu,
                         const std::string& criu_binary);

struct ProcessRestoreResult {
  pid_t pid = 0;
  uint64_t session_id = 0;
  engine::RestoreResult gpu;
  uint64_t criu_restore_ms = 0;
  /// Lazy pages: from the moment it ran until its last page arrived.
  uint64_t lazy_pages_ms = 0;
};

/// How long a lazy restore waits for the last page before it gives up
/// (and kills the process): bounds a source that stops sending without
/// closing the connection.
inline constexpr std::chrono::minutes kLazyPagesTimeout{30};

struct ProcessRestoreOptions {
  /// Concurrent GPU restore: the process runs as soon as its handles and
  /// buffer mappings are back; buffers load in first-use order meanwhile
  /// (a call needing an absent one waits). Default: stop-the-world.
  bool concurrent = false;
  /// Called (restoring thread) the moment the process may run: its
  /// session's gate just opened. Migration SIGCONTs its stopped process here.
  std::function<void(pid_t)> on_running;
  /// When the GPU image's checksums are checked (engine::Verify; `phos
  /// restore --verify`). The default verifies each chunk as it loads: a bad
  /// one fails the restore and the restored process is killed, the image
  /// untouched.
  engine::Verify verify = engine::Verify::kAuto;
  /// Added to what the image's dump used (`phos restore --tcp-established`...).
  CriuUserOptions criu;
  /// phosd's --criu-binary ("" = `criu` on PATH).
  std::string criu_binary;
  /// A job restore: engine::RestoreOptions::comm_generation.
  std::uint64_t comm_generation = 0;
  /// engine::RestoreOptions::device_map.
  std::map<int, int> device_map;
  /// >= 0: the image was dumped lazily (StartLazyDumpProcess) and its
  /// private memory comes over this connection to the source's page server
  /// (the caller keeps the fd; a `criu lazy-pages` daemon gets a copy).
  /// RestoreProcess then returns once every page arrived, the process
  /// running meanwhile (`on_running` says when it started); if they do not
  /// all arrive it kills the process.
  int lazy_pages_fd = -1;
};

/// Restores the process of image `dir` (its pid must be free). On any
/// failure after CRIU restored the process, the process is killed (it
/// could not run without its GPU state).
Status RestoreProcess(session::SessionServer* server, const std::string& dir, engine::Progress* progress,
                      ProcessRestoreResult* result, const ProcessRestoreOptions& options = {});

}  // namespace phos::process
