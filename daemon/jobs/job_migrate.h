// `phos migrate --job`: moves a whole NCCL job to other phosds
// (docs/protocols.md "Job migration"), as plain phases built from the job
// checkpoint and restore. A job whose ranks all run on this phosd:
//
//   1. The destination is asked whether it answers (PhosPeer.Ping): an
//      unreachable one or a wrong token fails here, nothing touched.
//   2. Job checkpoint (every rank at one cut, each captured whole) into a
//      staging directory here, with --kill: once the job image is
//      committed every rank is ended (its pid must be free where it is
//      restored, and two copies of a job must never run). Downtime starts.
//   3. The job image is streamed to the destination (PhosPeer.ReceiveImage).
//   4. The destination restores every rank with a new communicator
//      generation (PhosPeer.RestoreJobRanks) and answers once they run.
//      Downtime ends. The staging directory here is removed.
//   Any failure in 3 or 4 restores the job here from the staged image,
//   and the error says so; if even that fails, the image stays staged and
//   the error names it (`phos restore DIR` brings the job back).
//
// A job whose ranks run on several phosds (--etcd; this phosd coordinates):
// each phosd holding ranks has a destination (this one `destination`, the
// others `phosd_map`; a phosd mapped to itself keeps its ranks), checked
// before anything is held. The job checkpoint across phosds leaves each
// part staged where it was taken; each part is sent to its destination
// (this phosd's by itself, the others' on request: PhosPeer.MoveJobPart),
// and the job is restored across the destinations (RestoreJob with the
// map and where each part arrived). A failure restores every part where it
// was taken; success removes the staged parts.
//
// Threading: any thread except a session's consumer.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/progress.h"
#include "jobs/job_checkpoint.h"
#include "peer/peer_client.h"
#include "process/process_checkpoint.h"
#include "session/session_server.h"

namespace phos::jobs {

struct JobMigrateOptions {
  std::string destination;  // HOST:PORT of the peer phosd (--listen)
  std::string token;        // its --peer-token contents
  std::string name;         // the image's name at the destination (incoming/NAME)
  /// The job checkpoint: mode, per-rank options and `dir`, the staging
  /// directory here (must not exist). `kill` and `end_ranks`: set by
  /// MigrateJob / the server (end_ranks must be given).
  JobCheckpointOptions checkpoint;
  /// How the job is restored here when the destination fails.
  process::ProcessRestoreOptions restore_here;
  std::uint64_t max_bytes_per_sec = 0;
  /// A job across phosds: where the ranks of each other phosd go (peer
  /// endpoint -> peer endpoint; the same endpoint keeps them there). Also
  /// needs `checkpoint.cluster`.
  std::map<std::string, std::string> phosd_map;
};

struct JobMigrateResult {
  JobCheckpointResult checkpoint;
  std::vector<int> destination_pids;  // rank order
  std::uint64_t downtime_us = 0;      // the ranks ended here -> all running there
  std::uint64_t transfer_ms = 0;
  std::uint64_t bytes_sent = 0;
  std::string destination_dir;        // the image at the destination
  /// Ranks restored on this phosd, with the job's name: after a failure
  /// the job's ranks that were here (set even though MigrateJob fails), or
  /// (a job across phosds) the ranks another phosd's map sent here. The
  /// caller reaps them.
  std::vector<int> restored_here_pids;
};

/// Sends a staged job image (or one phosd's part of it) to the phosd at
/// `destination` as `incoming/<name>` there: the transfer every job
/// migration makes (the destination skips its fsyncs: the staged copy
/// stays until the ranks run there).
Status SendJobImage(const std::string& destination, const std::string& token, const std::string& dir,
                    const std::string& name, std::uint64_t max_bytes_per_sec, const peer::SendProgress& progress,
                    peer::SendImageResult* sent);

/// Migrates the job of session `seed`.
Status MigrateJob(session::SessionServer* server, std::uint64_t seed, const JobMigrateOptions& options,
                  engine::Progress* progress, JobMigrateResult* result);

}  // namespace phos::jobs
