// Live migration of a whole process to another phosd (`phos migrate`,
// docs/migration.md "phos migrate").
//
//   1. engine::Checkpoint in recopy mode (default) or stop: recopy rounds
//      stage the buffers in host memory while the app runs, and stream
//      every copy to the destination as it is taken (PrecopySender ->
//      PhosPeer.Precopy; the destination writes them into what becomes
//      the received image's gpu.img).
//   2. At the capture point (t2; CheckpointOptions::at_capture, on the
//      consumer thread) the app is frozen: SIGSTOP, waited for until every
//      thread is stopped, and the session's gate closed so calls it posted
//      meanwhile stay in the ring. Downtime starts here.
//   3. CRIU dumps the stopped process (leave_running: it stays stopped);
//      the image (GPU + CRIU) is staged under <root>/outgoing/NAME.tmp.
//   4. The image is streamed to the destination (PhosPeer.ReceiveImage):
//      extents unchanged since their pre-copy travel as references (the
//      staged gpu.img has holes there), so after the freeze only what was
//      dirty at t2, the manifest and CRIU's images cross the wire. The
//      destination then restores it and lets it run (PhosPeer.RestoreImage).
//      Downtime ends when the destination sends SIGCONT.
//      With lazy pages, CRIU's dump leaves the private memory out and
//      serves it to the destination's `criu lazy-pages` while the copy
//      there runs; the destination confirms once the last page arrived.
//   5. Only after the destination confirmed is the source process killed.
//      Any failure before that (CRIU, the stream, the destination dying or
//      refusing) reopens the gate and SIGCONTs the source: it keeps running
//      as if nothing happened, and the error says so.
//
// Threading: any thread except the session's consumer.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "process/process_image.h"
#include "session/session.h"

namespace phos::peer {

struct MigrateOptions {
  std::string destination;         // HOST:PORT of the peer phosd (--listen)
  std::string token;               // its --peer-token contents
  std::string name;                // the image's name at the destination (incoming/NAME)
  std::string staging_dir;         // where the image is staged here (must not exist)
  engine::CheckpointOptions gpu;   // mode stop or recopy; dir is set from staging_dir
  std::uint64_t max_bytes_per_sec = 0;
  /// Recopy: stream the rounds' copies during the rounds (default). false:
  /// every byte travels after the freeze (the benchmark's baseline).
  bool precopy = true;
  /// CRIU's lazy migration (docs/migration.md "Lazy pages"): the process's
  /// private memory is not dumped in the downtime; the destination runs it
  /// at once and faults it in from here while this copy stays frozen.
  bool lazy_pages = false;
  process::CriuUserOptions criu;            // --shell-job/--tcp-established/--file-locks
  std::string criu_binary;                  // phosd's --criu-binary ("" = `criu` on PATH)
};

struct MigrateResult {
  pid_t source_pid = 0;
  pid_t destination_pid = 0;
  std::int64_t stopped_unix_ns = 0;   // the source was frozen (last instruction there)
  std::int64_t resumed_unix_ns = 0;   // the destination let it run (first instruction there)
  std::uint64_t downtime_us = 0;      // resumed - stopped
  std::uint64_t dirty_bytes_at_stop = 0;  // recopy: bytes copied at t2
  std::uint64_t bytes_sent = 0;                 // the image's bytes at the destination
  std::uint64_t bytes_streamed_after_stop = 0;  // of them, sent after the freeze
  std::uint64_t precopy_bytes_sent = 0;         // sent while the app ran (superseded copies included)
  std::uint64_t precopy_copies = 0;
  std::uint64_t precopied_bytes = 0;            // image bytes the destination took from the pre-copy
  std::uint64_t criu_dump_ms = 0;
  std::uint64_t transfer_ms = 0;
  std::uint64_t destination_criu_restore_ms = 0;
  std::uint64_t destination_gpu_restore_us = 0;
  std::uint64_t lazy_pages_ms = 0;  // lazy: from the destination's resume until its last page arrived
  engine::CheckpointResult gpu;
};

/// Migrates the process of `session`. On success the source process has
/// been killed; on failure it runs on (unfrozen) and, except in one case,
/// nothing runs at the destination: when the destination became
/// unreachable after it was asked to restore and never answered whether it
/// did, the error says that the copy there may run too (docs/migration.md
/// "Lost restore reply").
Status MigrateProcess(session::Session& session, const MigrateOptions& options, engine::Progress* progress,
                      MigrateResult* result);

}  // namespace phos::peer
