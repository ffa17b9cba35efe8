// The sim's NCCL: communicators whose ranks are contexts of one sim backend
// (sessions of one phosd), exchanging through the simulated device memory,
// which is host memory of phosd (docs/backends.md "Collectives").
//
// A communicator forms when all its ranks joined (JoinCommunicator blocks
// until then). Each collective has a sequence number per rank (the order the
// rank enqueued it, which NCCL requires to be the same on every rank); the
// last rank to reach collective #k on its stream computes it for all ranks,
// while the others wait, holding their buffers pinned. Sends are deposits
// in a FIFO per (sender, receiver) pair that the receiver copies out of.
// Reductions run in rank order 0..n-1, so every run gives the same bytes.
//
// Ranks on other phosds (phosd --etcd; docs/backends.md "Collectives across
// phosds"): a join first meets every rank through the CollectiveFabric,
// which says where each is. A local rank then ships its part of each
// collective (its op and send bytes) to every other phosd of the
// communicator, and its Sends to the receiver's phosd; every phosd computes
// each collective itself, for its own ranks, from all ranks' parts in rank
// order — the same bytes everywhere. A remote part waits in the slot (or the
// mail) like a local rank's op.
//
// Locks: SimCommRegistry::mu_ guards the communicators still forming and
// the formed ones with ranks elsewhere;
// each SimCommunicator's mu guards all of its state (joins, slots, mail,
// the abort reason, every rank's async error). Waits are condition-variable
// waits that also wake every 100 ms to look at the waiter's cancel flag
// (its context abandoned: its app died), never spins.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/collective.h"
#include "common/status.h"

namespace phos::backend::sim {

class SimAddressSpace;
struct SimCommunicator;

/// One rank's membership (what a session holds).
class SimCommRank final : public CommRank {
 public:
  SimCommRank(std::shared_ptr<SimCommunicator> comm, int rank) : comm_(std::move(comm)), rank_(rank) {}
  ~SimCommRank() override;
  int rank() const override { return rank_; }
  int nranks() const override;
  void Abort(const std::string& why) override;
  Status AsyncError() const override;
  bool Idle() const override { return pending_.load(std::memory_order_acquire) == 0; }

  /// Reserves the sequence numbers of a group's collectives (in enqueue
  /// order) and counts the group as pending; RunGroup runs it on a stream.
  std::uint64_t ReserveCollectives(std::uint64_t count);
  /// A reserved group that was never enqueued is not pending.
  void Unreserve() { pending_.fetch_sub(1, std::memory_order_acq_rel); }
  /// Runs a group (on the stream's worker). `first_seq` from
  /// ReserveCollectives; `cancelled`: this rank's context was abandoned.
  /// `owner`: the context's id (its buffers only). A group that could not
  /// complete sets the rank's async error (ncclRemoteError and the like)
  /// and, unless this rank's own owner ended it (Abort on this rank:
  /// ncclCommAbort, its process ended), returns the error for its stream:
  /// cudaErrorLaunchFailure, as an NCCL kernel that never finished. Real
  /// NCCL would leave that kernel waiting until the app aborts; a stream
  /// that completed instead would hand the app a buffer nobody reduced —
  /// a wrong answer (docs/backends.md "Collectives": an aborted collective).
  Status RunGroup(SimAddressSpace* memory, std::uint64_t owner, const std::vector<CollectiveOp>& ops,
                  std::uint64_t first_seq, const std::shared_ptr<const std::atomic<bool>>& cancelled);

 private:
  std::shared_ptr<SimCommunicator> comm_;
  const int rank_;
  std::uint64_t next_seq_ = 0;      // guarded by comm_->mu
  std::atomic<int> pending_{0};     // groups enqueued and not yet run
  std::atomic<bool> ended_here_{false};  // Abort was called on this rank (its owner ended it)
};

/// Every communicator of one sim backend that is still forming, and those
/// formed with ranks on other phosds (for the messages of their peers).
class SimCommRegistry {
 public:
  /// `fabric`: how to reach other phosds (not owned), or null.
  explicit SimCommRegistry(CollectiveFabric* fabric = nullptr) : fabric_(fabric) {}
  Status Join(const CommunicatorId& id, int nranks, int rank, int device, const std::function<bool()>& cancelled,
              std::shared_ptr<CommRank>* out);
  /// A peer phosd's part of a communicator (Backend::DeliverCollective).
  Status Deliver(const FabricMessage& message);
  /// Ends every communicator with a rank at `endpoint` (Backend::PeerLost).
  void PeerLost(const std::string& endpoint, const std::string& why);

  /// Communicators at most forming at once (peers' early messages make
  /// entries too).
  static constexpr std::size_t kMaxForming = 4096;
  /// Collectives of one communicator a peer's parts may be waiting in.
  static constexpr std::size_t kMaxPendingCollectives = 4096;

 private:
  CollectiveFabric* const fabric_;
  std::mutex mu_;  // guards forming_ and spanning_
  std::map<CommunicatorId, std::shared_ptr<SimCommunicator>> forming_;
  std::map<CommunicatorId, std::weak_ptr<SimCommunicator>> spanning_;  // formed, ranks elsewhere too
};

}  // namespace phos::backend::sim
