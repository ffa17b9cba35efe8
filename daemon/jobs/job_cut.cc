#include "jobs/job_cut.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "process/process_checkpoint.h"

namespace phos::jobs {


void Hold(Member& m) {
  session::Session* s = m.session.get();
  m.closing = s->PostControl([s](session::SessionState&) {
    s->CloseGate();
    return Status::Ok();
  });
  m.gated = true;
  m.parked = false;
  m.gated_at = engine::Clock::now();
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
  m.held_us.compare_exchange_strong(expected, engine::MicrosSince(m.gated_at));
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


Status MembersOf(session::SessionServer* server, const std::set<std::uint64_t>& sessions,
                 const Book::Communicators& comms, std::vector<std::unique_ptr<Member>>* out) {
  std::set<int> names;
  for (std::uint64_t id : sessions) {
    auto m = std::make_unique<Member>();
    m->session = server->FindById(id);
    if (!m->session) return Status::Unavailable("session " + std::to_string(id) + " of the job ended");
    m->id = id;
    m->rank = LargestRank(comms, id);
    if (!names.insert(m->rank).second) {
      return Status::FailedPrecondition("two sessions of the job are rank " + std::to_string(m->rank) +
                                        " of its largest communicator");
    }
    out->push_back(std::move(m));
  }
  std::sort(out->begin(), out->end(), [](const auto& a, const auto& b) { return a->rank < b->rank; });
  return Status::Ok();
}

Status CaptureMembers(std::vector<std::unique_ptr<Member>>& members, const std::string& staged,
                      const JobCheckpointOptions& options, std::vector<JobRankResult>* ranks) {
  std::vector<std::future<Status>> captures;
  ranks->resize(members.size());
  std::vector<std::unique_ptr<engine::Progress>> rank_progress;
  for (std::size_t i = 0; i < members.size(); ++i) {
    Member* m = members[i].get();
    JobRankResult* r = &(*ranks)[i];
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
  return failed;
}

void DescribeRank(const JobRankResult& r, image::v1::JobManifest::RankImage* out) {
  out->set_dir(r.dir);
  out->set_pid(r.pid);
  const std::string& argv = r.result.image.cmdline;  // NUL-separated
  for (std::size_t at = 0; at < argv.size();) {
    const std::size_t end = std::min(argv.find('\0', at), argv.size());
    out->add_cmdline(argv.substr(at, end - at));
    at = end + 1;
  }
}

Status EndRanks(const std::function<Status(const std::vector<pid_t>&)>& end_ranks,
                const std::vector<JobRankResult>& ranks, std::uint32_t* ended) {
  *ended = 0;
  if (!end_ranks) return Status::Internal("--kill without a way to end the ranks");
  std::vector<pid_t> pids;
  for (const JobRankResult& r : ranks) pids.push_back(r.pid);
  PHOS_RETURN_IF_ERROR(end_ranks(pids));
  *ended = static_cast<std::uint32_t>(pids.size());
  return Status::Ok();
}

std::uint64_t NewCommGeneration() {
  std::random_device rd;
  std::uint64_t generation = 0;
  while (generation == 0) generation = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return generation;
}

}  // namespace phos::jobs
