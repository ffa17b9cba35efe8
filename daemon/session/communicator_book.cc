#include "session/communicator_book.h"

namespace phos::session {

void CommunicatorBook::Join(const backend::CommunicatorId& id, int nranks, int rank, std::uint64_t session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Communicator& c = comms_[id];
  c.nranks = nranks;
  c.ranks[rank] = Rank{session_id, rank, {}};
  ++version_;
  changed_.notify_all();
}

void CommunicatorBook::Leave(const backend::CommunicatorId& id, int rank, std::uint64_t session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = comms_.find(id);
  if (it == comms_.end()) return;
  auto r = it->second.ranks.find(rank);
  if (r != it->second.ranks.end() && r->second.session_id == session_id) it->second.ranks.erase(r);
  if (it->second.ranks.empty()) comms_.erase(it);
  ++version_;
  changed_.notify_all();
}

void CommunicatorBook::Count(const backend::CommunicatorId& id, int rank, std::uint64_t session_id,
                             const GroupCounts& group) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = comms_.find(id);
  if (it == comms_.end()) return;
  auto r = it->second.ranks.find(rank);
  if (r == it->second.ranks.end() || r->second.session_id != session_id) return;
  GroupCounts& e = r->second.enqueued;
  e.collectives += group.collectives;
  for (const auto& [peer, n] : group.sent) e.sent[peer] += n;
  for (const auto& [peer, n] : group.received) e.received[peer] += n;
  ++version_;
  changed_.notify_all();
}

std::set<std::uint64_t> CommunicatorBook::JobOf(std::uint64_t session_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::uint64_t> job;
  std::vector<std::uint64_t> todo = {session_id};
  while (!todo.empty()) {
    const std::uint64_t s = todo.back();
    todo.pop_back();
    for (const auto& [id, c] : comms_) {
      bool holds = false;
      for (const auto& [rank, r] : c.ranks) holds = holds || r.session_id == s;
      if (!holds) continue;
      for (const auto& [rank, r] : c.ranks) {
        if (job.insert(r.session_id).second) todo.push_back(r.session_id);
      }
    }
  }
  return job;
}

std::set<std::uint64_t> CommunicatorBook::SessionsHolding(const std::vector<backend::CommunicatorId>& ids) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::uint64_t> out;
  for (const backend::CommunicatorId& id : ids) {
    auto it = comms_.find(id);
    if (it == comms_.end()) continue;
    for (const auto& [rank, r] : it->second.ranks) out.insert(r.session_id);
  }
  return out;
}

CommunicatorBook::Communicators CommunicatorBook::Snapshot(const std::set<std::uint64_t>& sessions,
                                                           std::uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  Communicators out;
  for (const auto& [id, c] : comms_) {
    for (const auto& [rank, r] : c.ranks) {
      if (sessions.count(r.session_id) != 0) {
        out[id] = c;
        break;
      }
    }
  }
  if (version != nullptr) *version = version_;
  return out;
}

void CommunicatorBook::WaitForChange(std::uint64_t version, std::chrono::milliseconds limit) const {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, limit, [&] { return version_ != version; });
}

}  // namespace phos::session
