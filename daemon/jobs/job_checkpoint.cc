#include "jobs/job_checkpoint.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

#include "common/version.h"
#include "engine/operation_util.h"
#include "image/commit_dir.h"
#include "image/image_layout.h"
#include "image/job_manifest.h"
#include "jobs/job_checkpoint_across.h"
#include "jobs/job_cut.h"
#include "peer/peer_client.h"
#include "session/communicator_book.h"

namespace phos::jobs {
namespace {

using engine::Clock;
using engine::MicrosSince;

/// Brings every member to one cut: see docs/protocols.md "Job checkpoints".
/// On success every member is held between two calls with exactly the
/// targets enqueued; on failure none is held.
Status ReachCut(Book& book, const std::set<std::uint64_t>& job, std::vector<std::unique_ptr<Member>>& members,
                std::chrono::milliseconds timeout, engine::Progress* progress, Targets* reached) {
  const auto deadline = Clock::now() + timeout;
  auto fail = [&](Status s) {
    for (auto& m : members) Release(*m);
    return s;
  };
  std::string behind;
  for (;;) {
    std::uint64_t version = 0;
    const Book::Communicators comms = book.Snapshot(job, &version);
    const Targets t = TargetsOf(comms);
    bool all = true;
    for (auto& m : members) {
      if (Status p = Poll(*m); !p.ok()) return fail(p);
      std::string why;
      const bool at = AtTargets(comms, t, m->id, &why);
      if (at && !m->gated) Hold(*m);
      // The targets grew past a held rank (another rank's group went
      // beyond them): it runs on to them.
      if (!at && m->parked) Release(*m);
      if (!at) behind = why;
      all = all && at && m->parked;
    }
    if (all) {
      std::uint64_t now_version = 0;
      (void)book.Snapshot(job, &now_version);
      if (now_version == version) {
        *reached = t;
        return Status::Ok();
      }
      continue;  // a rank changed meanwhile: look again
    }
    if (Clock::now() >= deadline) {
      return fail(Status::Unavailable("the job's ranks did not reach one cut within " +
                                      std::to_string(timeout.count()) + " ms (" +
                                      (behind.empty() ? std::string("a rank did not stop between two calls") : behind) +
                                      "); nothing was written, every rank keeps running"));
    }
    progress->SetPhase("cut", "bringing " + std::to_string(members.size()) + " ranks to one cut" +
                                  (behind.empty() ? std::string() : " (" + behind + ")"));
    book.WaitForChange(version, std::chrono::milliseconds(20));
  }
}

}  // namespace

Status CheckpointJob(session::SessionServer* server, std::uint64_t seed, const JobCheckpointOptions& options,
                     engine::Progress* progress, JobCheckpointResult* result) {
  *result = JobCheckpointResult{};
  const auto t0 = Clock::now();
  Book& book = server->communicators();
  const std::set<std::uint64_t> job = book.JobOf(seed);
  if (job.empty()) {
    return Status::FailedPrecondition("session " + std::to_string(seed) +
                                      " holds no NCCL communicator: it is no job (checkpoint it without --job)");
  }
  const Book::Communicators comms = book.Snapshot(job);
  std::error_code ec;
  if (std::filesystem::exists(options.dir, ec)) {
    return Status::AlreadyExists(options.dir + " exists; choose another --out or remove it");
  }
  for (const auto& [cid, c] : comms) {
    if (static_cast<int>(c.ranks.size()) == c.nranks) continue;
    if (options.cluster.member == nullptr) {
      return Status::FailedPrecondition(
          "a communicator of the job has " + std::to_string(c.nranks) + " ranks, " + std::to_string(c.ranks.size()) +
          " of them in sessions of this phosd, and this phosd coordinates with no other (no --etcd): a job across "
          "phosds is checkpointed through etcd (docs/protocols.md \"Jobs across phosds\"); nothing was written");
    }
    return CheckpointJobAcrossPhosds(server, comms, options, progress, result);
  }
  std::vector<std::unique_ptr<Member>> members;
  PHOS_RETURN_IF_ERROR(MembersOf(server, job, comms, &members));

  progress->SetPhase("cut", "bringing " + std::to_string(members.size()) + " ranks to one cut");
  Targets cut;
  PHOS_RETURN_IF_ERROR(ReachCut(book, job, members, options.cut_timeout, progress, &cut));
  result->cut_us = MicrosSince(t0);
  spdlog::info("job checkpoint: {} ranks at one cut after {} us", members.size(), result->cut_us);

  // Every rank is held between two calls at the cut: capture each, in
  // parallel; a rank runs on as soon as its own capture is done.
  const std::string staged = options.dir + ".tmp";
  std::filesystem::remove_all(staged, ec);
  std::filesystem::create_directories(staged, ec);
  if (ec) {
    for (auto& m : members) Release(*m);
    return Status::IoError("cannot create " + staged + ": " + ec.message());
  }
  progress->SetPhase("capture", "checkpointing " + std::to_string(members.size()) + " ranks at the cut");
  Status failed = CaptureMembers(members, staged, options, &result->ranks);
  if (!failed.ok()) {
    std::filesystem::remove_all(staged, ec);
    return failed.WithContext("job checkpoint failed; nothing was committed, every rank keeps running");
  }

  progress->SetPhase("commit", "writing the job manifest");
  image::v1::JobManifest jm;
  jm.set_format_version(image::kImageFormatVersion);
  jm.set_phos_version(VersionString());
  jm.set_created_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count());
  jm.set_mode(engine::ModeName(options.rank.mode));
  jm.set_job_name(options.job_name);
  jm.set_cut_us(result->cut_us);
  for (const JobRankResult& r : result->ranks) {
    DescribeRank(r, jm.add_ranks());
    result->bytes += r.result.gpu.bytes;
  }
  for (const auto& [cid, k] : cut.collectives) {
    auto* c = jm.add_cut();
    c->set_unique_id(cid.data(), cid.size());
    c->set_nranks(comms.at(cid).nranks);
    c->set_collectives(k);
  }
  Status w = image::WriteJobManifest(staged, jm);
  if (w.ok()) w = image::CommitDirectory(staged, options.dir, image::CommitSync::kDirectory);
  if (!w.ok()) {
    std::filesystem::remove_all(staged, ec);
    return w.WithContext("committing the job image " + options.dir + " (nothing was committed)");
  }
  // A rank was held from the moment it stopped at the cut until its
  // capture was done (stop, cow: the capture's control task; recopy: its
  // final quiesce), which covers its own stall.
  for (const auto& m : members) result->stall_us = std::max(result->stall_us, m->held_us.load());
  spdlog::info("job checkpoint: {} committed ({} ranks, {} bytes, cut after {} us, longest stall {} us)",
               options.dir, members.size(), result->bytes, result->cut_us, result->stall_us);
  if (options.kill) {
    progress->SetPhase("kill", "job image committed; ending its " + std::to_string(members.size()) + " ranks");
    if (Status k = EndRanks(options.end_ranks, result->ranks, &result->killed); !k.ok()) {
      return k.WithContext("the job image " + options.dir + " is committed, but its ranks were not all ended");
    }
  }
  return Status::Ok();
}

Status RestoreRanks(session::SessionServer* server, const std::string& dir, const std::vector<std::string>& rank_dirs,
                    const std::vector<pid_t>& pids, std::uint64_t generation, const process::ProcessRestoreOptions& options,
                    const std::function<bool()>& cancelled, std::vector<process::ProcessRestoreResult>* results) {
  results->assign(rank_dirs.size(), process::ProcessRestoreResult{});
  std::vector<std::unique_ptr<engine::Progress>> rank_progress;
  std::vector<std::future<Status>> restores;
  for (std::size_t i = 0; i < rank_dirs.size(); ++i) {
    rank_progress.push_back(std::make_unique<engine::Progress>());
    engine::Progress* rp = rank_progress.back().get();
    process::ProcessRestoreResult* r = &(*results)[i];
    process::ProcessRestoreOptions o = options;
    o.comm_generation = generation;
    const std::string rank_dir = dir + "/" + rank_dirs[i];
    restores.push_back(std::async(std::launch::async, [server, rank_dir, rp, r, o] {
      return process::RestoreProcess(server, rank_dir, rp, r, o);
    }));
  }
  Status failed;
  std::vector<bool> done(restores.size(), false);
  // A rank that fails (or a caller that gives up) leaves the others waiting
  // for it to form their communicators: end every rank this restore
  // brought back (its session stops, its wait gives up).
  // A restore still waiting in its rejoin has not reported its pid yet:
  // the image's pids (a restore gives each its pid back).
  auto end_all = [&] {
    for (pid_t pid : pids) {
      if (pid > 0 && server->PidHasSession(pid)) kill(pid, SIGKILL);
    }
    for (const auto& r : *results) {
      if (r.pid > 0 && server->PidHasSession(r.pid)) kill(r.pid, SIGKILL);
    }
  };
  for (std::size_t left = restores.size(); left > 0;) {
    if (failed.ok() && cancelled && cancelled()) {
      failed = Status::Unavailable("the job restore was given up (a rank on another phosd failed)");
    }
    if (!failed.ok()) end_all();
    for (std::size_t i = 0; i < restores.size(); ++i) {
      if (done[i] || restores[i].wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) continue;
      done[i] = true;
      --left;
      Status s = restores[i].get();
      if (!s.ok() && failed.ok()) failed = s.WithContext(rank_dirs[i]);
    }
  }
  if (!failed.ok()) {
    end_all();
    return failed;
  }
  return Status::Ok();
}

Status RestoreJob(session::SessionServer* server, const std::string& dir, const process::ProcessRestoreOptions& options,
                  const JobCluster& cluster, engine::Progress* progress, JobRestoreResult* result,
                  const std::map<std::string, std::string>& phosd_map,
                  const std::map<std::string, std::string>& dirs_at) {
  *result = JobRestoreResult{};
  image::v1::JobManifest jm;
  PHOS_RETURN_IF_ERROR(image::ReadJobManifest(dir, &jm));
  const std::string self = cluster.member != nullptr ? cluster.member->endpoint() : "";
  // Which phosd restores each rank: the one that took it, unless
  // --phosd-map moves it.
  for (const auto& [from, to] : phosd_map) {
    const bool named = std::any_of(jm.ranks().begin(), jm.ranks().end(),
                                   [&](const auto& r) { return r.phosd() == from; });
    if (!named) {
      return Status::InvalidArgument("--phosd-map " + from + "=" + to + ": " + dir +
                                     " has no rank taken on the phosd at " + from);
    }
  }
  std::map<std::string, std::vector<int>> by_phosd;  // "" = here
  for (int i = 0; i < jm.ranks_size(); ++i) {
    std::string p = jm.ranks(i).phosd();
    if (auto m = phosd_map.find(p); m != phosd_map.end()) p = m->second == "here" ? self : m->second;
    by_phosd[p == self ? "" : p].push_back(i);
  }
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(dir, ec).string();
  // Where the job image is on the phosd at `endpoint` ("" = here).
  auto dir_at = [&](const std::string& endpoint) {
    auto it = dirs_at.find(endpoint.empty() ? self : endpoint);
    return it != dirs_at.end() ? it->second : abs;
  };
  // The images of the ranks restored here must be here (a rank taken on
  // another machine stays there unless copied).
  if (auto here = by_phosd.find(""); here != by_phosd.end()) {
    for (int i : here->second) {
      const std::string rank_dir = dir_at("") + "/" + jm.ranks(i).dir();
      std::error_code exists_ec;
      if (!std::filesystem::is_directory(rank_dir, exists_ec)) {
        return Status::NotFound("the image of " + jm.ranks(i).dir() + " (taken on " +
                                (jm.ranks(i).phosd().empty() ? std::string("this job image's coordinator")
                                                             : "the phosd at " + jm.ranks(i).phosd()) +
                                ") is not at " + rank_dir + " on this machine: copy it here, or restore it "
                                "where it was taken (without --phosd-map for it)");
      }
    }
  }
  if (by_phosd.size() > 1 && cluster.member == nullptr) {
    return Status::FailedPrecondition("ranks of " + dir + " were taken on other phosds (first: " +
                                      std::next(by_phosd.begin())->first +
                                      "); this phosd coordinates with none (no --etcd)");
  }
  // One new generation for every communicator of this restore.
  const std::uint64_t generation = NewCommGeneration();
  progress->SetPhase("restore", "restoring " + std::to_string(jm.ranks_size()) + " ranks of " + dir + " on " +
                                    std::to_string(by_phosd.size()) + " phosd(s)");
  std::atomic<bool> give_up{false};
  struct Part {
    std::vector<int> indexes;
    std::vector<std::string> dirs;
    std::vector<pid_t> old_pids;
    std::vector<process::ProcessRestoreResult> results;
    std::vector<int> pids;  // remote parts
    std::future<Status> done;
  };
  std::map<std::string, Part> parts;
  for (const auto& [phosd, indexes] : by_phosd) {
    Part& part = parts[phosd];
    part.indexes = indexes;
    for (int i : indexes) {
      part.dirs.push_back(jm.ranks(i).dir());
      part.old_pids.push_back(static_cast<pid_t>(jm.ranks(i).pid()));
    }
  }
  for (auto& [phosd, part] : parts) {
    Part* p = &part;
    const std::string endpoint = phosd;
    if (endpoint.empty()) {
      p->done = std::async(std::launch::async, [&, p] {
        return RestoreRanks(server, dir_at(""), p->dirs, p->old_pids, generation, options,
                            [&] { return give_up.load(); }, &p->results);
      });
    } else {
      p->done = std::async(std::launch::async, [&, p, endpoint] {
        return peer::RequestRestoreJobRanks(endpoint, cluster.peer_token, dir_at(endpoint), p->dirs, p->old_pids,
                                            generation, [&] { return give_up.load(); }, &p->pids, jm.job_name())
            .WithContext("the phosd at " + endpoint);
      });
    }
  }
  Status failed;
  for (std::size_t left = parts.size(); left > 0;) {
    for (auto& [phosd, part] : parts) {
      if (!part.done.valid() || part.done.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
        continue;
      }
      --left;
      Status s = part.done.get();
      if (!s.ok() && failed.ok()) {
        failed = s;
        give_up.store(true);  // every other part ends what it restored
      }
    }
  }
  if (!failed.ok()) return failed.WithContext("job restore of " + dir + " failed; every rank it had restored was ended");
  result->ranks.resize(static_cast<std::size_t>(jm.ranks_size()));
  for (auto& [phosd, part] : parts) {
    for (std::size_t k = 0; k < part.indexes.size(); ++k) {
      auto& out = result->ranks[static_cast<std::size_t>(part.indexes[k])];
      if (phosd.empty()) {
        out = part.results[k];
        result->pids_here.push_back(out.pid);
      } else if (k < part.pids.size()) {
        out.pid = part.pids[k];
      }
    }
  }
  result->job_name = jm.job_name();
  spdlog::info("job restore: {} ranks of {} run again on {} phosd(s)", result->ranks.size(), dir, parts.size());
  return Status::Ok();
}

}  // namespace phos::jobs
