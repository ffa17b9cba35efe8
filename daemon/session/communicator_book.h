// Every NCCL communicator rank the sessions of one phosd hold, with what
// each rank has enqueued so far (docs/protocols.md "Job checkpoints"): a
// job checkpoint finds the job of a session here (the sessions that share
// communicators with it, transitively) and chooses its cut from the counts.
//
// Written by the sessions' consumer threads (nccl_handlers.cc: a rank
// joins, leaves, and counts each group it enqueued), read by a job
// operation's thread. One mutex guards everything; `version` grows with
// every change, and WaitForChange blocks (condition variable) until it
// does. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "backend/collective.h"

namespace phos::session {

/// What one group adds to a rank's counts.
struct GroupCounts {
  std::uint64_t collectives = 0;
  std::map<int, std::uint64_t> sent;      // peer rank -> sends
  std::map<int, std::uint64_t> received;  // peer rank -> receives
};

class CommunicatorBook {
 public:
  /// One rank as a session holds it.
  struct Rank {
    std::uint64_t session_id = 0;
    int rank = 0;
    GroupCounts enqueued;  // since it joined
  };
  struct Communicator {
    int nranks = 0;
    std::map<int, Rank> ranks;  // by rank: the ranks held now
  };
  using Communicators = std::map<backend::CommunicatorId, Communicator>;

  void Join(const backend::CommunicatorId& id, int nranks, int rank, std::uint64_t session_id);
  /// The rank's session destroyed, aborted or lost it.
  void Leave(const backend::CommunicatorId& id, int rank, std::uint64_t session_id);
  /// A group the rank enqueued.
  void Count(const backend::CommunicatorId& id, int rank, std::uint64_t session_id, const GroupCounts& group);

  /// The sessions that share a communicator with `session_id`, transitively
  /// (itself included; empty if it holds none).
  std::set<std::uint64_t> JobOf(std::uint64_t session_id) const;
  /// The sessions that hold a rank of any of `ids` (a job across phosds
  /// as this phosd sees it: call JobOf on each for the closure).
  std::set<std::uint64_t> SessionsHolding(const std::vector<backend::CommunicatorId>& ids) const;
  /// The communicators any of `sessions` holds a rank of, as they are now.
  Communicators Snapshot(const std::set<std::uint64_t>& sessions, std::uint64_t* version = nullptr) const;
  /// Blocks until the book changed after `version` or `limit` passed.
  void WaitForChange(std::uint64_t version, std::chrono::milliseconds limit) const;

 private:
  mutable std::mutex mu_;  // guards everything below
  mutable std::condition_variable changed_;
  Communicators comms_;
  std::uint64_t version_ = 0;
};

}  // namespace phos::session
