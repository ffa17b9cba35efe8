// `phos migrate --job`: job checkpoint with --kill, the image streamed to
// the destination, restored there — or here again on failure (job_migrate.h).
#include "jobs/job_migrate.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "engine/operation_util.h"
#include "jobs/job_cut.h"
#include "peer/peer_client.h"

namespace phos::jobs {
namespace {

using engine::Clock;
using engine::MicrosSince;

/// The destination failed after the ranks were ended here: bring the job
/// back from the staged image and say what happened either way.
Status RestoreHere(session::SessionServer* server, const JobMigrateOptions& options, const Status& why,
                   engine::Progress* progress, std::vector<int>* pids_here) {
  const std::string& staged = options.checkpoint.dir;
  spdlog::warn("job migration to {} failed ({}); restoring the job here from {}", options.destination, why.message(),
               staged);
  progress->SetPhase("restore-here", "the destination failed; restoring the job here from " + staged);
  JobRestoreResult here;
  Status back = RestoreJob(server, staged, options.restore_here, JobCluster{}, progress, &here);
  if (!back.ok()) {
    return why.WithContext("job migration to " + options.destination + " failed, and restoring the job here failed too (" +
                           back.message() + "); its image stays at " + staged + ": `phos restore " + staged +
                           "` brings it back");
  }
  std::string pids;
  for (int pid : here.pids_here) {
    pids += " " + std::to_string(pid);
    pids_here->push_back(pid);
  }
  std::error_code ec;
  std::filesystem::remove_all(staged, ec);
  return why.WithContext("job migration to " + options.destination + " failed; the job runs here again, restored "
                         "from its image at the cut (pids" + pids + ")");
}

}  // namespace

Status MigrateJob(session::SessionServer* server, std::uint64_t seed, const JobMigrateOptions& options,
                  engine::Progress* progress, JobMigrateResult* result) {
  *result = JobMigrateResult{};
  if (!options.checkpoint.end_ranks) return Status::Internal("job migration without a way to end the ranks");
  // 1. Nothing is touched unless the destination answers and takes our token.
  progress->SetPhase("connect", "asking the phosd at " + options.destination + " whether it answers");
  PHOS_RETURN_IF_ERROR(peer::PingPeer(options.destination, options.token)
                           .WithContext("the destination; nothing was done, the job runs on here"));
  // 2. The job image, every rank ended once it is committed.
  JobCheckpointOptions ck = options.checkpoint;
  ck.kill = true;
  ck.cluster = JobCluster{};  // every rank must run here (a job across phosds is refused by name)
  PHOS_RETURN_IF_ERROR(CheckpointJob(server, seed, ck, progress, &result->checkpoint)
                           .WithContext("job migration moves jobs whose ranks all run on this phosd"));
  const auto down = Clock::now();
  // 3. The image to the destination.
  peer::SendImageResult sent;
  peer::SendImageOptions so;
  so.max_bytes_per_sec = options.max_bytes_per_sec;
  so.skip_fsync = true;  // it lives until restored there; the staged copy stays until then
  Status s = peer::SendImage(options.destination, options.token, ck.dir, options.name,
                             progress->TotalsReporter("transfer", "sending the job image to " + options.destination),
                             &sent, so)
                 .WithContext("sending the job image to " + options.destination);
  result->transfer_ms = MicrosSince(down) / 1000;
  result->bytes_sent = sent.bytes;
  result->destination_dir = sent.path;
  // 4. Every rank restored there, with a generation of its own (the
  //    ranks as the checkpoint captured them: the manifest's order).
  if (s.ok()) {
    const std::vector<JobRankResult>& ranks = result->checkpoint.ranks;
    progress->SetPhase("restore", "restoring " + std::to_string(ranks.size()) + " ranks at " + options.destination);
    std::vector<std::string> dirs;
    std::vector<pid_t> pids;
    for (const JobRankResult& r : ranks) {
      dirs.push_back(r.dir);
      pids.push_back(r.pid);
    }
    s = peer::RequestRestoreJobRanks(options.destination, options.token, sent.path, dirs, pids, NewCommGeneration(),
                                     [] { return false; }, &result->destination_pids)
            .WithContext("restoring the job at " + options.destination);
  }
  if (!s.ok()) return RestoreHere(server, options, s, progress, &result->restored_here_pids);
  result->downtime_us = MicrosSince(down);
  std::error_code ec;
  std::filesystem::remove_all(ck.dir, ec);
  spdlog::info("job migration: {} ranks run at {} (image {}), downtime {} us", result->destination_pids.size(),
               options.destination, sent.path, result->downtime_us);
  return Status::Ok();
}

}  // namespace phos::jobs
