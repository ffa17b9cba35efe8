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
#include <random>
#include <set>
#include <utility>

#include "common/version.h"
#include "engine/operation_util.h"
#include "image/commit_dir.h"
#include "image/image_layout.h"
#include "image/job_manifest.h"
#include "session/communicator_book.h"

namespace phos::jobs {
namespace {

using engine::Clock;
using engine::MicrosSince;
using Book = session::CommunicatorBook;

/// What every rank must have enqueued at the cut: per communicator, the
/// most collectives any rank enqueued, and per (sender, receiver) the most
/// messages either side enqueued.
struct Targets {
  std::map<backend::CommunicatorId, std::uint64_t> collectives;
  std::map<backend::CommunicatorId, std::map<std::pair<int, int>, std::uint64_t>> messages;
};

Targets TargetsOf(const Book::Communicators& comms) {
  Targets t;
  for (const auto& [id, c] : comms) {
    std::uint64_t& k = t.collectives[id];
    auto& m = t.messages[id];
    for (const auto& [rank, r] : c.ranks) {
      k = std::max(k, r.enqueued.collectives);
      for (const auto& [peer, n] : r.enqueued.sent) m[{rank, peer}] = std::max(m[{rank, peer}], n);
      for (const auto& [peer, n] : r.enqueued.received) m[{peer, rank}] = std::max(m[{peer, rank}], n);
    }
  }
  return t;
}

std::uint64_t CountOf(const std::map<int, std::uint64_t>& m, int peer) {
  auto it = m.find(peer);
  return it == m.end() ? 0 : it->second;
}

/// Whether every rank session `id` holds has enqueued exactly the targets;
/// else `*behind` says how far one is.
bool AtTargets(const Book::Communicators& comms, const Targets& t, std::uint64_t id, std::string* behind) {
  for (const auto& [cid, c] : comms) {
    for (const auto& [rank, r] : c.ranks) {
      if (r.session_id != id) continue;
      const std::uint64_t k = t.collectives.at(cid);
      if (r.enqueued.collectives != k) {
        *behind = "rank " + std::to_string(rank) + " enqueued " + std::to_string(r.enqueued.collectives) + " of " +
                  std::to_string(k) + " collectives";
        return false;
      }
      for (const auto& [pair, n] : t.messages.at(cid)) {
        const std::uint64_t mine = pair.first == rank    ? CountOf(r.enqueued.sent, pair.second)
                                   : pair.second == rank ? CountOf(r.enqueued.received, pair.first)
                                                         : n;
        if (mine != n) {
          *behind = "rank " + std::to_string(rank) + " enqueued " + std::to_string(mine) + " of " +
                    std::to_string(n) + " messages between ranks " + std::to_string(pair.first) + " and " +
                    std::to_string(pair.second);
          return false;
        }
      }
    }
  }
  return true;
}

/// One session of the job while it is checkpointed. `gated`, `parked` and
/// `closing`: the job operation's thread while it brings the job to the cut;
/// from the captures on, Release (the rank's capture and the job thread)
/// takes `mu`.
struct Member {
  std::shared_ptr<session::Session> session;
  std::uint64_t id = 0;
  int rank = 0;                  // its rank in the job's largest communicator (the image's name)
  bool gated = false;            // a CloseGate was posted and not undone
  bool parked = false;           // ... and it ran: the consumer holds between two calls
  std::future<Status> closing;   // that control task
  Clock::time_point gated_at{};
  std::atomic<std::uint64_t> held_us{0};
  std::mutex mu;                 // Release from the capture and from the job thread
};

void Hold(Member& m) {
  session::Session* s = m.session.get();
  m.closing = s->PostControl([s](session::SessionState&) {
    s->CloseGate();
    return Status::Ok();
  });
  m.gated = true;
  m.parked = false;
  m.gated_at = Clock::now();
}

/// Whether the member's consumer is now held; fails when its session ended.
Status Poll(Member& m) {
  if (!m.gated || m.parked || m.closing.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return Status::Ok();
  }
  Status p = m.closing.get();
  if (!p.ok()) {
    m.gated = false;
    return p.WithContext("holding session " + std::to_string(m.id) + " at the cut (its process ended?)");
  }
  m.parked = true;
  return Status::Ok();
}

/// Lets the member run again. A CloseGate still queued runs first (else it
/// would close the gate after this opened it).
void Release(Member& m) {
  std::lock_guard<std::mutex> lock(m.mu);
  if (!m.gated) return;
  if (!m.parked && m.closing.valid()) m.closing.wait();
  m.session->OpenGate();
  m.gated = false;
  m.parked = false;
  std::uint64_t expected = 0;
  m.held_us.compare_exchange_strong(expected, MicrosSince(m.gated_at));
}

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

int LargestRank(const Book::Communicators& comms, std::uint64_t id) {
  int best_size = -1, rank = -1;
  for (const auto& [cid, c] : comms) {
    for (const auto& [r, info] : c.ranks) {
      if (info.session_id == id && c.nranks > best_size) {
        best_size = c.nranks;
        rank = r;
      }
    }
  }
  return rank;
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
  for (const auto& [cid, c] : comms) {
    if (static_cast<int>(c.ranks.size()) != c.nranks) {
      return Status::FailedPrecondition(
          "a communicator of the job has " + std::to_string(c.nranks) + " ranks, " + std::to_string(c.ranks.size()) +
          " of them in sessions of this phosd: the job runs across phosds (--etcd), and checkpoints of such "
          "jobs are not implemented yet (docs/protocols.md \"Jobs across phosds\"); nothing was written");
    }
  }
  std::error_code ec;
  if (std::filesystem::exists(options.dir, ec)) {
    return Status::AlreadyExists(options.dir + " exists; choose another --out or remove it");
  }
  std::vector<std::unique_ptr<Member>> members;
  std::set<int> names;
  for (std::uint64_t id : job) {
    auto m = std::make_unique<Member>();
    m->session = server->FindById(id);
    if (!m->session) return Status::Unavailable("session " + std::to_string(id) + " of the job ended");
    m->id = id;
    m->rank = LargestRank(comms, id);
    if (!names.insert(m->rank).second) {
      return Status::FailedPrecondition("two sessions of the job are rank " + std::to_string(m->rank) +
                                        " of its largest communicator");
    }
    members.push_back(std::move(m));
  }
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a->rank < b->rank; });

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
  std::vector<std::future<Status>> captures;
  result->ranks.resize(members.size());
  std::vector<std::unique_ptr<engine::Progress>> rank_progress;
  for (std::size_t i = 0; i < members.size(); ++i) {
    Member* m = members[i].get();
    JobRankResult* r = &result->ranks[i];
    r->rank = m->rank;
    r->pid = m->session->pid();
    r->session_id = m->id;
    r->dir = "rank-" + std::to_string(m->rank);
    rank_progress.push_back(std::make_unique<engine::Progress>());
    engine::Progress* rp = rank_progress.back().get();
    engine::CheckpointOptions o = options.rank;
    o.dir = staged + "/" + r->dir;
    o.job_rank = true;
    o.metadata.set_session_id(m->id);
    o.metadata.set_pid(r->pid);
    o.at_capture = [m](session::SessionState&) {
      Release(*m);  // captured at the cut: this rank runs on
      return Status::Ok();
    };
    captures.push_back(std::async(std::launch::async, [m, r, rp, o, &options] {
      return process::CheckpointProcess(*m->session, o, rp, &r->result, options.criu, options.criu_binary);
    }));
  }
  Status failed;
  for (std::size_t i = 0; i < captures.size(); ++i) {
    Status s = captures[i].get();
    if (!s.ok() && failed.ok()) failed = s.WithContext("rank " + std::to_string(members[i]->rank));
  }
  for (auto& m : members) Release(*m);  // whatever did not capture
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
  jm.set_cut_us(result->cut_us);
  for (const JobRankResult& r : result->ranks) {
    auto* out = jm.add_ranks();
    out->set_dir(r.dir);
    out->set_pid(r.pid);
    const std::string& argv = r.result.image.cmdline;  // NUL-separated
    for (std::size_t at = 0; at < argv.size();) {
      const std::size_t end = std::min(argv.find('\0', at), argv.size());
      out->add_cmdline(argv.substr(at, end - at));
      at = end + 1;
    }
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
  return Status::Ok();
}

Status RestoreJob(session::SessionServer* server, const std::string& dir, const process::ProcessRestoreOptions& options,
                  engine::Progress* progress, JobRestoreResult* result) {
  *result = JobRestoreResult{};
  image::v1::JobManifest jm;
  PHOS_RETURN_IF_ERROR(image::ReadJobManifest(dir, &jm));
  // One new generation for every communicator of this restore: its ranks
  // meet each other, never the original job or another copy of it.
  std::random_device rd;
  std::uint64_t generation = 0;
  while (generation == 0) generation = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  progress->SetPhase("restore", "restoring " + std::to_string(jm.ranks_size()) + " ranks of " + dir);
  result->ranks.resize(static_cast<std::size_t>(jm.ranks_size()));
  std::vector<std::unique_ptr<engine::Progress>> rank_progress;
  std::vector<std::future<Status>> restores;
  for (int i = 0; i < jm.ranks_size(); ++i) {
    rank_progress.push_back(std::make_unique<engine::Progress>());
    engine::Progress* rp = rank_progress.back().get();
    process::ProcessRestoreResult* r = &result->ranks[static_cast<std::size_t>(i)];
    process::ProcessRestoreOptions o = options;
    o.comm_generation = generation;
    const std::string rank_dir = dir + "/" + jm.ranks(i).dir();
    restores.push_back(std::async(std::launch::async, [server, rank_dir, rp, r, o] {
      return process::RestoreProcess(server, rank_dir, rp, r, o);
    }));
  }
  Status failed;
  std::vector<bool> done(restores.size(), false);
  // A rank that fails leaves the others waiting for it to form their
  // communicators: end every rank this restore brought back (its session
  // stops, its wait gives up) before waiting for the rest.
  for (std::size_t left = restores.size(); left > 0;) {
    for (std::size_t i = 0; i < restores.size(); ++i) {
      if (done[i] || restores[i].wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) continue;
      done[i] = true;
      --left;
      Status s = restores[i].get();
      if (!s.ok() && failed.ok()) {
        failed = s.WithContext(jm.ranks(static_cast<int>(i)).dir());
        for (const auto& r : jm.ranks()) {
          const pid_t pid = static_cast<pid_t>(r.pid());
          if (pid > 0 && server->PidHasSession(pid)) kill(pid, SIGKILL);
        }
      }
    }
  }
  if (!failed.ok()) {
    for (const auto& r : result->ranks) {
      if (r.pid > 0 && server->PidHasSession(r.pid)) kill(r.pid, SIGKILL);
    }
    return failed.WithContext("job restore of " + dir + " failed; every rank it had restored was ended");
  }
  spdlog::info("job restore: {} ranks of {} run again", result->ranks.size(), dir);
  return Status::Ok();
}

}  // namespace phos::jobs
