// Checkpoint and restore of a whole NCCL job on one phosd
// (docs/protocols.md "Job checkpoints"): every rank brought to one cut, then
// each captured by the whole-process checkpoint; restored together, their
// communicators formed again.
//
// Threading: any thread except a session's consumer (as engine
// operations). Root only (CRIU).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster/cluster_member.h"
#include "common/status.h"
#include "engine/operations.h"
#include "engine/progress.h"
#include "process/process_checkpoint.h"
#include "session/session_server.h"

namespace phos::jobs {

/// How a phosd reaches the others (--etcd): jobs across phosds need it.
struct JobCluster {
  cluster::ClusterMember* member = nullptr;  // null: every job lives on one phosd
  std::string peer_token;                    // the peer plane's (JoinCut)
  std::function<bool()> cancelled;           // phosd is stopping: a participant gives up
};

struct JobCheckpointOptions {
  /// Per rank: mode, cow reserve, validation policy, manifest fields (dir
  /// and at_capture are set per rank).
  engine::CheckpointOptions rank;
  std::string dir;  // the job image to create (must not exist)
  /// How long the ranks may take to reach the cut; then the checkpoint
  /// fails, every rank runs on, nothing is written.
  std::chrono::milliseconds cut_timeout{60000};
  process::CriuUserOptions criu;
  std::string criu_binary;
  JobCluster cluster;
  /// The job's `phos run --job` name ("" = none), kept in the manifest.
  std::string job_name;
  /// --kill: once the job image is committed every rank is ended, each by
  /// the phosd it runs on, through `end_ranks` (the server's: SIGKILL, then
  /// wait until each session gave its GPU state back). false: they run on.
  bool kill = false;
  std::function<Status(const std::vector<pid_t>&)> end_ranks;
  /// A job across phosds: called with the peer endpoints of every phosd
  /// holding ranks of the job before anything is held; an error ends the
  /// checkpoint there, nothing touched (a job migration checks that each
  /// has a destination).
  std::function<Status(const std::set<std::string>& participants)> check_participants;
  /// Called by each phosd whose ranks were ended by --kill once its part
  /// of the job image (at the directory given) is committed: the part a job
  /// migration may then ask it to send (PhosPeer.MoveJobPart).
  std::function<void(const std::string& dir)> on_killed_part;
  /// Tests only (phosd --test-pause-cut-before-capture): TakePartInCut,
  /// told to capture, waits until this file exists (or phosd stops).
  std::string test_pause_before_capture;
};

struct JobRankResult {
  int rank = 0;
  pid_t pid = 0;
  std::uint64_t session_id = 0;
  std::string dir;
  process::ProcessCheckpointResult result;
};

struct JobCheckpointResult {
  std::vector<JobRankResult> ranks;
  std::uint64_t cut_us = 0;    // choosing and reaching the cut
  std::uint64_t stall_us = 0;  // the longest any rank could not run (cut hold + its own stall)
  std::uint64_t bytes = 0;
  std::uint32_t killed = 0;  // --kill: ranks ended after the commit
};

/// Checkpoints the job of session `seed` (the sessions sharing NCCL
/// communicators with it, transitively).
Status CheckpointJob(session::SessionServer* server, std::uint64_t seed, const JobCheckpointOptions& options,
                     engine::Progress* progress, JobCheckpointResult* result);

/// This phosd's part in job checkpoint `cut` that another phosd
/// coordinates through etcd (docs/protocols.md "Jobs across phosds";
/// PhosPeer.JoinCut): its ranks of the job brought to the cut, captured
/// into the job image's staging directory, committed or removed as the
/// coordinator decides. `base`: the daemon's defaults (the mode, directory
/// and timeout come from the cut's request).
Status TakePartInCut(session::SessionServer* server, const std::string& cut, const JobCheckpointOptions& base);

struct JobRestoreResult {
  std::vector<process::ProcessRestoreResult> ranks;  // the manifest's order
  std::vector<int> pids_here;  // the ranks this phosd restored (others: their phosds)
  std::string job_name;        // the manifest's
};

/// Restores every rank of the job image `dir` (their pids must be free)
/// and forms their communicators again: ranks taken on another phosd
/// (the manifest's `phosd`) are restored by that phosd (PhosPeer.
/// RestoreJobRanks; `cluster` needed), the others here. On a failure,
/// every rank this restore brought back is ended.
/// `phosd_map` (phos restore --phosd-map): the ranks a phosd took are
/// restored by another instead ("here" = this phosd); each rank's image
/// must be readable there (checked here for the ranks restored here).
/// `dirs_at` (a job migration): the job image's directory on the phosd
/// at an endpoint (this phosd's own endpoint for here), where it is not
/// `dir` — a part sent there lives under that phosd's incoming/.
Status RestoreJob(session::SessionServer* server, const std::string& dir, const process::ProcessRestoreOptions& options,
                  const JobCluster& cluster, engine::Progress* progress, JobRestoreResult* result,
                  const std::map<std::string, std::string>& phosd_map = {},
                  const std::map<std::string, std::string>& dirs_at = {});

/// Restores the ranks `rank_dirs` of job image `dir` here with communicator
/// generation `generation` (RestoreJob's part on each phosd). Gives up,
/// ending what it restored, when `cancelled()` says so or a rank fails.
Status RestoreRanks(session::SessionServer* server, const std::string& dir, const std::vector<std::string>& rank_dirs,
                    const std::vector<pid_t>& pids, std::uint64_t generation, const process::ProcessRestoreOptions& options,
                    const std::function<bool()>& cancelled, std::vector<process::ProcessRestoreResult>* results);

}  // namespace phos::jobs
