#include "jobs/cut_counts.h"

#include <algorithm>
#include <cstring>

namespace phos::jobs {

namespace {

backend::CommunicatorId IdOfBytes(const std::string& bytes) {
  backend::CommunicatorId id{};
  std::memcpy(id.data(), bytes.data(), std::min(bytes.size(), id.size()));
  return id;
}

}  // namespace

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

static std::uint64_t CountOf(const std::map<int, std::uint64_t>& m, int peer) {
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



void PutCounts(const Book::Communicators& comms, const std::set<std::uint64_t>& job, peer::v1::CutState* st) {
  st->clear_counts();
  for (const auto& [id, c] : comms) {
    for (const auto& [rank, r] : c.ranks) {
      if (job.count(r.session_id) == 0) continue;
      auto* out = st->add_counts();
      out->set_communicator(id.data(), id.size());
      out->set_nranks(c.nranks);
      out->set_rank(rank);
      out->set_collectives(r.enqueued.collectives);
      for (const auto& [peer, n] : r.enqueued.sent) (*out->mutable_sent())[peer] = n;
      for (const auto& [peer, n] : r.enqueued.received) (*out->mutable_received())[peer] = n;
    }
  }
}

Status MergeCounts(const std::map<std::string, peer::v1::CutState>& states, Book::Communicators* into) {
  for (const auto& [endpoint, st] : states) {
    for (const auto& rc : st.counts()) {
      if (rc.communicator().size() != backend::CommunicatorId{}.size() || rc.nranks() < 1 ||
          rc.rank() < 0 || rc.rank() >= rc.nranks()) {
        return Status::Corruption("the phosd at " + endpoint + " published malformed counts");
      }
      Book::Communicator& c = (*into)[IdOfBytes(rc.communicator())];
      if (c.nranks != 0 && c.nranks != rc.nranks()) {
        return Status::Corruption("the phosd at " + endpoint + " says a communicator has " +
                                  std::to_string(rc.nranks()) + " ranks, another " + std::to_string(c.nranks));
      }
      c.nranks = rc.nranks();
      if (c.ranks.count(rc.rank()) != 0) {
        return Status::Corruption("rank " + std::to_string(rc.rank()) + " is published twice (again by " + endpoint +
                                  ")");
      }
      Book::Rank& r = c.ranks[rc.rank()];
      r.session_id = 0;
      r.rank = rc.rank();
      r.enqueued.collectives = rc.collectives();
      for (const auto& [peer, n] : rc.sent()) r.enqueued.sent[peer] = n;
      for (const auto& [peer, n] : rc.received()) r.enqueued.received[peer] = n;
    }
  }
  return Status::Ok();
}

bool AllAtTargets(const Book::Communicators& all, const Targets& t, std::string* why) {
  for (const auto& [id, c] : all) {
    if (static_cast<int>(c.ranks.size()) != c.nranks) {
      *why = std::to_string(c.nranks - static_cast<int>(c.ranks.size())) + " ranks of a communicator are not reported";
      return false;
    }
  }
  Book::Communicators relabeled = all;  // AtTargets looks at one session's ranks: give all one id
  for (auto& [id, c] : relabeled) {
    for (auto& [rank, r] : c.ranks) r.session_id = 1;
  }
  return AtTargets(relabeled, t, 1, why);
}

}  // namespace phos::jobs
