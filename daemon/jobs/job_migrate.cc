// `phos migrate --job`: job checkpoint with --kill, the image streamed to
// the destination, restored there — or here again on failure (job_migrate.h).
#include "jobs/job_migrate.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <set>

#include "engine/operation_util.h"
#include "image/job_manifest.h"
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

Status SendJobImage(const std::string& destination, const std::string& token, const std::string& dir,
                    const std::string& name, std::uint64_t max_bytes_per_sec, const peer::SendProgress& progress,
                    peer::SendImageResult* sent) {
  peer::SendImageOptions so;
  so.max_bytes_per_sec = max_bytes_per_sec;
  so.skip_fsync = true;  // it lives until restored there; the staged copy stays until then
  return peer::SendImage(destination, token, dir, name, progress, sent, so);
}

namespace {

/// Whether a communicator of the job of session `seed` has ranks this
/// phosd does not hold.
bool SpansPhosds(session::SessionServer* server, std::uint64_t seed) {
  Book& book = server->communicators();
  for (const auto& [id, c] : book.Snapshot(book.JobOf(seed))) {
    if (static_cast<int>(c.ranks.size()) != c.nranks) return true;
  }
  return false;
}

/// Where the ranks of the phosd at `source` go ("" if nowhere is named).
std::string DestinationOf(const JobMigrateOptions& options, const std::string& self, const std::string& source) {
  if (source == self || source.empty()) return options.destination;
  auto it = options.phosd_map.find(source);
  return it == options.phosd_map.end() ? "" : it->second;
}

/// Before anything is held: every phosd holding ranks has a destination,
/// each destination takes one phosd's ranks, the map names no other phosd,
/// and every destination answers.
Status CheckDestinations(const JobMigrateOptions& options, const std::string& self,
                         const std::set<std::string>& participants) {
  for (const auto& [from, to] : options.phosd_map) {
    if (participants.count(from) == 0) {
      return Status::InvalidArgument("--phosd-map " + from + "=" + to + ": no rank of the job runs at " + from +
                                     "; nothing was done, the job runs on");
    }
  }
  std::map<std::string, std::string> taken;  // destination -> source
  for (const std::string& p : participants) {
    const std::string to = DestinationOf(options, self, p);
    if (to.empty()) {
      return Status::InvalidArgument("ranks of the job run on the phosd at " + p +
                                     ", which has no destination: add --phosd-map " + p +
                                     "=HOST:PORT (or " + p + "=" + p + " to leave them there); nothing was done, "
                                     "the job runs on");
    }
    if (auto [it, fresh] = taken.emplace(to, p); !fresh) {
      return Status::InvalidArgument("the ranks of " + it->second + " and of " + p + " would both go to " + to +
                                     ": each destination takes one phosd's ranks; nothing was done, the job runs on");
    }
  }
  for (const auto& [to, from] : taken) {
    if (to == from) continue;
    PHOS_RETURN_IF_ERROR(peer::PingPeer(to, options.token)
                             .WithContext("the destination of the ranks of " + from +
                                          "; nothing was done, the job runs on"));
  }
  return Status::Ok();
}

/// Steps 3 and 4 for a job across phosds (job_migrate.h); the job image
/// is committed and every rank ended. On failure the job is restored
/// where it was taken.
Status MoveAcross(session::SessionServer* server, const JobMigrateOptions& options, const std::string& dir,
                  engine::Progress* progress, JobMigrateResult* result) {
  const JobCluster& cluster = options.checkpoint.cluster;
  const std::string self = cluster.member->endpoint();
  image::v1::JobManifest jm;
  Status s = image::ReadJobManifest(dir, &jm);
  std::set<std::string> sources;
  for (const auto& r : jm.ranks()) sources.insert(r.phosd().empty() ? self : r.phosd());
  // 3. Each moved part to its destination, all at once.
  std::map<std::string, std::string> moved;    // source -> destination ("here" = this phosd)
  std::map<std::string, std::string> dirs_at;  // destination -> the part's directory there
  struct Transfer {
    std::string source, destination;
    std::future<Status> done;
    std::string path;
    std::uint64_t bytes = 0;
  };
  std::vector<std::unique_ptr<Transfer>> transfers;
  const auto t_transfer = Clock::now();
  int index = 0;
  for (const std::string& from : sources) {
    if (!s.ok()) break;
    const std::string to = DestinationOf(options, self, from);
    if (to == from) continue;  // kept where it runs
    auto t = std::make_unique<Transfer>();
    t->source = from;
    t->destination = to;
    const std::string name = options.name + "-part" + std::to_string(index++);
    Transfer* tp = t.get();
    if (from == self) {
      tp->done = std::async(std::launch::async, [&options, &dir, tp, name] {
        peer::SendImageResult sent;
        Status st = SendJobImage(tp->destination, options.token, dir, name, options.max_bytes_per_sec, nullptr, &sent);
        tp->path = sent.path;
        tp->bytes = sent.bytes;
        return st;
      });
    } else {
      tp->done = std::async(std::launch::async, [&options, &dir, tp, name] {
        peer::v1::MoveJobPartRequest req;
        req.set_action(peer::v1::MoveJobPartRequest::SEND);
        req.set_dir(dir);
        req.set_destination(tp->destination);
        req.set_name(name);
        req.set_max_bytes_per_sec(options.max_bytes_per_sec);
        peer::v1::MoveJobPartReply reply;
        Status st = peer::RequestMoveJobPart(tp->source, options.token, req, &reply);
        tp->path = reply.path();
        tp->bytes = reply.bytes();
        return st;
      });
    }
    transfers.push_back(std::move(t));
  }
  progress->SetPhase("transfer", "sending " + std::to_string(transfers.size()) + " parts of the job image to their "
                                 "destinations");
  for (auto& t : transfers) {
    Status st = t->done.get().WithContext("sending the ranks of " + t->source + " to " + t->destination);
    if (!st.ok() && s.ok()) s = st;
    moved[t->source] = t->destination == self ? "here" : t->destination;
    dirs_at[t->destination] = t->path;
    result->bytes_sent += t->bytes;
    if (t->source == self) result->destination_dir = t->path;
  }
  result->transfer_ms = MicrosSince(t_transfer) / 1000;
  // 4. Every rank restored at its destination, with a generation of its own.
  JobRestoreResult restored;
  if (s.ok()) {
    s = RestoreJob(server, dir, options.restore_here, cluster, progress, &restored, moved, dirs_at)
            .WithContext("restoring the job at its destinations");
  }
  if (!s.ok()) {
    spdlog::warn("job migration failed ({}); restoring the job where it was taken, from {}", s.message(), dir);
    progress->SetPhase("restore-here", "the migration failed; restoring every rank where it was taken");
    JobRestoreResult back;
    Status b = RestoreJob(server, dir, options.restore_here, cluster, progress, &back);
    if (!b.ok()) {
      return s.WithContext("job migration failed, and restoring the job where it was taken failed too (" +
                           b.message() + "); its parts stay at " + dir + " on each phosd: `phos restore " + dir +
                           "` on this one brings it back");
    }
    result->restored_here_pids = back.pids_here;
    return s.WithContext("job migration failed; the job runs where it was taken again, restored from its image "
                         "at the cut");
  }
  for (const auto& r : restored.ranks) result->destination_pids.push_back(r.pid);
  result->restored_here_pids = restored.pids_here;
  // The staged parts go: here, and on every other source.
  for (const std::string& from : sources) {
    if (from == self) continue;
    peer::v1::MoveJobPartRequest req;
    req.set_action(peer::v1::MoveJobPartRequest::DISCARD);
    req.set_dir(dir);
    peer::v1::MoveJobPartReply reply;
    if (Status d = peer::RequestMoveJobPart(from, options.token, req, &reply); !d.ok()) {
      spdlog::warn("job migration: the staged part at {} stays ({}): remove {} there", from, d.ToString(), dir);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return Status::Ok();
}

}  // namespace

Status MigrateJob(session::SessionServer* server, std::uint64_t seed, const JobMigrateOptions& options,
                  engine::Progress* progress, JobMigrateResult* result) {
  *result = JobMigrateResult{};
  if (!options.checkpoint.end_ranks) return Status::Internal("job migration without a way to end the ranks");
  JobCheckpointOptions ck = options.checkpoint;
  ck.kill = true;
  if (SpansPhosds(server, seed)) {
    // A job across phosds: the destinations are checked as the cut
    // starts, before any rank is held.
    if (ck.cluster.member == nullptr) {
      return Status::FailedPrecondition("ranks of the job run on other phosds, and this phosd coordinates with none "
                                        "(no --etcd); nothing was done, the job runs on");
    }
    const std::string self = ck.cluster.member->endpoint();
    progress->SetPhase("connect", "checking every phosd of the job has a destination that answers");
    ck.check_participants = [&options, self](const std::set<std::string>& participants) {
      return CheckDestinations(options, self, participants);
    };
    PHOS_RETURN_IF_ERROR(CheckpointJob(server, seed, ck, progress, &result->checkpoint));
    const auto down = Clock::now();
    std::error_code ec;
    PHOS_RETURN_IF_ERROR(MoveAcross(server, options, std::filesystem::absolute(ck.dir, ec).string(), progress, result));
    result->downtime_us = MicrosSince(down);
    spdlog::info("job migration: {} ranks run at their destinations, downtime {} us", result->destination_pids.size(),
                 result->downtime_us);
    return Status::Ok();
  }
  if (!options.phosd_map.empty()) {
    return Status::InvalidArgument("--phosd-map names where the ranks of other phosds go, and every rank of this job "
                                   "runs on this phosd; nothing was done, the job runs on");
  }
  // 1. Nothing is touched unless the destination answers and takes our token.
  progress->SetPhase("connect", "asking the phosd at " + options.destination + " whether it answers");
  PHOS_RETURN_IF_ERROR(peer::PingPeer(options.destination, options.token)
                           .WithContext("the destination; nothing was done, the job runs on here"));
  // 2. The job image, every rank ended once it is committed.
  ck.cluster = JobCluster{};  // every rank runs here
  PHOS_RETURN_IF_ERROR(CheckpointJob(server, seed, ck, progress, &result->checkpoint));
  const auto down = Clock::now();
  // 3. The image to the destination.
  peer::SendImageResult sent;
  Status s = SendJobImage(options.destination, options.token, ck.dir, options.name, options.max_bytes_per_sec,
                          progress->TotalsReporter("transfer", "sending the job image to " + options.destination), &sent)
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
