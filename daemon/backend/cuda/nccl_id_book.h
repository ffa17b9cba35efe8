// Which NCCL unique id each communicator forming in this phosd was given
// (cuda_collectives.h "Ids").
//
// The app names a communicator by libphos.so's id; NCCL needs its own,
// made by ncclGetUniqueId in the process that hosts the bootstrap root.
// The first rank of an app id to arrive makes one; every other rank of
// that id takes the same; once all ranks took it the entry goes, so the
// next join with that app id (a restore of the job) gets a fresh NCCL id.
//
// Locks: mu_ guards forming_. Thread-safe.
#pragma once

#include <nccl.h>

#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "backend/collective.h"
#include "common/status.h"

namespace phos::backend::cuda {

class NcclIdBook {
 public:
  /// How a fresh NCCL id is made (ncclGetUniqueId; a stand-in in tests).
  using MakeId = std::function<Status(ncclUniqueId*)>;
  explicit NcclIdBook(MakeId make) : make_(std::move(make)) {}

  /// The NCCL id for rank `rank` of the `nranks`-rank communicator `id`.
  /// InvalidArgument when the ranks disagree on the size or a rank comes
  /// twice; OutOfMemory past kMaxForming ids forming at once.
  Status Take(const CommunicatorId& id, int nranks, int rank, ncclUniqueId* out);
  /// A rank whose join failed gives its place back (it, or a rank started
  /// again, may take it once more); the entry goes with its last rank.
  void GiveBack(const CommunicatorId& id, int rank);
  /// Ids forming now (for tests and logs).
  std::size_t forming() const;

  static constexpr std::size_t kMaxForming = 4096;

 private:
  struct Forming {
    ncclUniqueId nccl_id{};
    int nranks = 0;
    std::set<int> joined;  // ranks that took nccl_id
  };
  const MakeId make_;
  mutable std::mutex mu_;  // guards forming_
  std::map<CommunicatorId, Forming> forming_;
};

}  // namespace phos::backend::cuda
